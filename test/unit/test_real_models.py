"""Real models end to end, matched against onnxruntime.

Each model (built by examples/onnx_models.py, small variants) goes: ONNX file → import →
verify → infer-shapes → print → parse back (inline blobs, and through the side file that
`palimpsest-import` writes) → reference executor → compared with onnxruntime at one
thread (rtol 1e-4, atol 1e-5). Dynamic models run at two sizes. The tools run as
subprocesses on the bundled example and on an imported .pal, and their error cases give
one line, exit 1 and no traceback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from palimpsest.backends.binding import find_function  # noqa: E402
from palimpsest.backends.reference.executor import run  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402
from palimpsest.ir.compare import first_difference  # noqa: E402
from palimpsest.ir.parser import parse  # noqa: E402
from palimpsest.ir.printer import print_ir  # noqa: E402
from palimpsest.ir.resources import externalize_resources  # noqa: E402
from palimpsest.ir.types import FloatType, TensorType  # noqa: E402
from palimpsest.ir.verifier import verify  # noqa: E402
from palimpsest.passes.pass_manager import PassManager, parse_pipeline  # noqa: E402
from palimpsest.tools import onnx_import  # noqa: E402

import example_models  # noqa: E402  (test/unit, on sys.path: conftest.py)
from ir_checks import reparsed  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
RTOL, ATOL = 1e-4, 1e-5

M = example_models.load()


# -- helpers ------------------------------------------------------------------------------------

ort_run = example_models.onnxruntime_run


def assert_matches(actual: dict, expected: dict, what: str) -> None:
    assert list(actual) == list(expected), f"{what}: outputs {list(actual)} vs {list(expected)}"
    for name, want in expected.items():
        got = np.asarray(actual[name])
        assert got.dtype == want.dtype, f"{what}: {name} is {got.dtype}, onnxruntime {want.dtype}"
        assert got.shape == want.shape, f"{what}: {name} has shape {got.shape}, onnxruntime {want.shape}"
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"{what}: {name}")


def image(shape, seed=0):
    return {"input": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


def infer_shapes(module) -> None:
    PassManager(parse_pipeline("infer-shapes")).run(module)
    verify(module)


def graph_ops(module):
    return [op for op in module.walk() if op.name.startswith("graph.")]


def import_and_round_trip(model, tmp_path: Path):
    """Import (API and palimpsest-import), infer shapes, check both text round trips;
    returns the module parsed back from the .pal file with its side file of weights."""
    onnx_path = tmp_path / "model.onnx"
    onnx.save(model, onnx_path)

    module = import_onnx(str(onnx_path))
    verify(module)
    infer_shapes(module)

    # Without ONNX's own shape inference, infer-shapes alone reaches the same IR.
    bare = import_onnx(model, shape_inference=False)
    verify(bare)
    infer_shapes(bare)
    assert first_difference(module, bare) is None, first_difference(module, bare)

    # Round trip with the weights inline in the text.
    text = print_ir(module)
    reparsed(module, "inline.pal")

    # palimpsest-import writes the same text, with the weights in model.pal.weights.bin.
    pal = tmp_path / "model.pal"
    assert onnx_import.main([str(onnx_path), "-o", str(pal)]) == 0
    api_dir = tmp_path / "api"
    api_dir.mkdir()
    externalize_resources(module, str(api_dir / "model.pal.weights.bin"))
    pal_text = pal.read_text()
    assert print_ir(module, resource_base=str(api_dir)) == pal_text
    assert (api_dir / "model.pal.weights.bin").read_bytes() == \
        (tmp_path / "model.pal.weights.bin").read_bytes()
    assert "model.pal.weights.bin" in pal_text
    assert "dialect_resources" not in pal_text, "weights left inline in the text"

    parsed = parse(pal_text, str(pal))
    verify(parsed)
    assert print_ir(parsed, resource_base=str(tmp_path)) == pal_text
    return parsed


def assert_static(module) -> None:
    dynamic = [f"{op.name}: {r.type}" for op in graph_ops(module) for r in op.results
               if isinstance(r.type, TensorType) and not r.type.has_static_shape]
    assert not dynamic, f"infer-shapes left dynamic types: {dynamic[:5]}"


def check_model(model, feeds_list, tmp_path, *, static: bool):
    parsed = import_and_round_trip(model, tmp_path)
    if static:
        assert_static(parsed)
        assert not any(op.name == "graph.shape" for op in graph_ops(parsed)), \
            "infer-shapes left a graph.shape of a static tensor"
    func = find_function(parsed, None)
    for index, feeds in enumerate(feeds_list):
        shapes = {k: v.shape for k, v in feeds.items()}
        assert_matches(run(func, feeds), ort_run(model, feeds), f"run {index} {shapes}")
    return parsed


# -- the models ---------------------------------------------------------------------------------

def test_resnet(tmp_path):
    model = M.resnet(image=32, width=8, blocks=(1, 1, 1, 1), classes=10)
    ops = {n.op_type for n in model.graph.node}
    assert {"Conv", "BatchNormalization", "Relu", "MaxPool", "Add", "GlobalAveragePool",
            "Flatten", "Gemm"} <= ops
    parsed = check_model(model, [image((1, 3, 32, 32))], tmp_path, static=True)
    assert find_function(parsed, None).type.results[0] == TensorType((1, 10), FloatType("f32"))


def test_resnet_dynamic_batch(tmp_path):
    model = M.resnet(image=24, width=4, blocks=(1, 1), classes=5, batch=None)
    check_model(model, [image((1, 3, 24, 24), 1), image((3, 3, 24, 24), 2)], tmp_path,
                static=False)


def test_mobilenet_v2(tmp_path):
    model = M.mobilenet_v2(image=32, width_mult=0.25, last_channel=64, classes=10)
    groups = [a.i for n in model.graph.node if n.op_type == "Conv" for a in n.attribute
              if a.name == "group"]
    assert max(groups) > 1, "no depthwise conv"
    clips = [n for n in model.graph.node if n.op_type == "Clip"]
    assert clips and all(len(n.input) == 3 for n in clips), "ReLU6 as Clip(x, min, max)"
    check_model(model, [image((1, 3, 32, 32))], tmp_path, static=True)


def small_minilm(**kwargs):
    sizes = dict(hidden=32, heads=4, layers=2, ffn=64, vocab=100, max_positions=64)
    return M.minilm(**{**sizes, **kwargs})


def test_minilm_dynamic_two_sizes(tmp_path):
    model = small_minilm()
    ops = {n.op_type for n in model.graph.node}
    assert {"Gather", "LayerNormalization", "Shape", "Unsqueeze", "Concat", "Reshape",
            "Transpose", "Softmax", "Erf", "Div", "MatMul"} <= ops
    feeds = [M.minilm_inputs(1, 16, vocab=100, seed=1),
             M.minilm_inputs(2, 9, vocab=100, seed=2, padded=3)]
    parsed = check_model(model, feeds, tmp_path, static=False)
    func = find_function(parsed, None)
    assert [str(t) for t in func.type.inputs] == ["tensor<?x?xi64>"] * 2
    assert str(func.type.results[0]) == "tensor<?x?x32xf32>"
    # the head split keeps its static part
    reshapes = [str(op.results[0].type) for op in graph_ops(parsed) if op.name == "graph.reshape"]
    assert "tensor<?x?x4x8xf32>" in reshapes


def test_minilm_static_folds_shape_arithmetic(tmp_path):
    model = small_minilm(dynamic=False, seq=8, batch=2)
    module = import_onnx(model)
    shapes_before = sum(op.name == "graph.shape" for op in graph_ops(module))
    assert shapes_before > 0
    check_model(model, [M.minilm_inputs(2, 8, vocab=100, seed=3, padded=2)], tmp_path,
                static=True)


def test_ocr_dynamic_width(tmp_path):
    model = M.ocr_crnn(channels=(8, 16, 16, 16), classes=12)
    feeds = [{"image": np.random.default_rng(s).standard_normal((1, 1, 32, w)).astype(np.float32)}
             for s, w in ((4, 40), (5, 64))]
    parsed = check_model(model, feeds, tmp_path, static=False)
    assert str(find_function(parsed, None).type.results[0]) == "tensor<?x1x12xf32>"


def test_deep_mlp_dynamic_batch(tmp_path):
    model = M.deep_mlp(nodes=60, hidden=16, tokens=4)
    feeds = [{"x": np.random.default_rng(s).standard_normal((b, 4, 16)).astype(np.float32)}
             for s, b in ((6, 1), (7, 3))]
    check_model(model, feeds, tmp_path, static=False)


def test_tiny_cnn_is_the_bundled_example(tmp_path):
    bundled = (EXAMPLES / "tiny_cnn.onnx").read_bytes()
    assert bundled == M.tiny_cnn().SerializeToString(), \
        "regenerate with: python examples/onnx_models.py examples --only tiny_cnn"
    assert len(bundled) < 8_000
    model = onnx.load(EXAMPLES / "tiny_cnn.onnx")
    check_model(model, [{"x": np.random.default_rng(8).standard_normal((1, 3, 8, 8))
                         .astype(np.float32)}], tmp_path, static=True)


# -- the tools, as subprocesses -------------------------------------------------------------------

def tool(name: str) -> list[str]:
    found = shutil.which(name)
    if found:
        return [found]
    module = {"palimpsest-run": "run", "palimpsest-import": "onnx_import"}[name]
    return [sys.executable, "-m", f"palimpsest.tools.{module}"]


def call(name: str, *args, cwd=None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("PALIMPSEST_DEBUG", None)
    return subprocess.run(tool(name) + [str(a) for a in args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


def test_run_bundled_example(tmp_path):
    x = np.random.default_rng(9).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    result = call("palimpsest-run", EXAMPLES / "tiny_cnn.onnx", "--input",
                  f"x={tmp_path / 'x.npy'}", "--output-dir", out)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "logits: float32 [1, 4]"
    expected = ort_run(onnx.load(EXAMPLES / "tiny_cnn.onnx"), {"x": x})
    assert_matches({"logits": np.load(out / "logits.npy")}, expected, "palimpsest-run")


def test_import_then_run_pal(tmp_path):
    """palimpsest-import a dynamic two-input model, then palimpsest-run the .pal from
    another directory (side file found relative to the .pal)."""
    model = small_minilm()
    onnx.save(model, tmp_path / "minilm.onnx")
    models = tmp_path / "models"
    models.mkdir()
    result = call("palimpsest-import", tmp_path / "minilm.onnx", "-o", models / "minilm.pal")
    assert result.returncode == 0, result.stderr
    assert (models / "minilm.pal.weights.bin").stat().st_size > 0
    feeds = M.minilm_inputs(2, 11, vocab=100, seed=10, padded=4)
    for name, array in feeds.items():
        np.save(tmp_path / f"{name}.npy", array)
    work = tmp_path / "elsewhere"
    work.mkdir()
    result = call("palimpsest-run", "../models/minilm.pal",
                  "--input", "input_ids=../input_ids.npy",
                  "--input", "attention_mask=../attention_mask.npy",
                  "--output-dir", "out", cwd=work)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "last_hidden_state: float32 [2, 11, 32]"
    got = {"last_hidden_state": np.load(work / "out" / "last_hidden_state.npy")}
    assert_matches(got, ort_run(model, feeds), "palimpsest-run .pal")


def test_run_random_inputs_with_shape(tmp_path):
    onnx.save(M.ocr_crnn(channels=(4, 8, 8, 8), classes=6), tmp_path / "ocr.onnx")
    result = call("palimpsest-run", tmp_path / "ocr.onnx", "--random-inputs", "--seed", "3",
                  "--shape", "image=1x1x32x48", "--output-dir", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "probabilities: float32 [12, 1, 6]"
    probabilities = np.load(tmp_path / "out" / "probabilities.npy")
    np.testing.assert_allclose(probabilities.sum(axis=-1), 1.0, rtol=1e-5)


@pytest.fixture(scope="module")
def error_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("errors")
    rng = np.random.default_rng(0)
    np.save(d / "good.npy", rng.standard_normal((1, 3, 8, 8)).astype(np.float32))
    np.save(d / "f64.npy", rng.standard_normal((1, 3, 8, 8)))
    np.save(d / "shape.npy", rng.standard_normal((1, 3, 9, 8)).astype(np.float32))
    np.save(d / "rank.npy", rng.standard_normal((3, 8, 8)).astype(np.float32))
    (d / "notnpy.npy").write_text("not a numpy file\n")
    np.save(d / "ids.npy", M.minilm_inputs(1, 5, vocab=100)["input_ids"])
    np.save(d / "ids32.npy", M.minilm_inputs(1, 5, vocab=100)["input_ids"].astype(np.int32))
    np.save(d / "mask.npy", M.minilm_inputs(1, 5, vocab=100)["attention_mask"])
    onnx.save(small_minilm(layers=1), d / "minilm.onnx")
    assert onnx_import.main([str(d / "minilm.onnx"), "-o", str(d / "minilm.pal")]) == 0
    # an op the graph dialect does not have, between supported ones
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["r"], name="/relu/Relu"),
             helper.make_node("RandomNormalLike", ["r"], ["h"], name="/head/RandomNormalLike"),
             helper.make_node("Relu", ["h"], ["y"], name="/out/Relu")]
    graph = helper.make_graph(nodes, "unsupported",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              d / "unsupported.onnx")
    (d / "garbage.onnx").write_bytes(b"\x08\x01garbage")
    # a .pal whose side file of weights is gone or cut short
    (d / "moved").mkdir()
    shutil.copy(d / "minilm.pal", d / "moved" / "minilm.pal")
    (d / "cut").mkdir()
    shutil.copy(d / "minilm.pal", d / "cut" / "minilm.pal")
    (d / "cut" / "minilm.pal.weights.bin").write_bytes(
        (d / "minilm.pal.weights.bin").read_bytes()[:1000])
    return d


TINY = str(EXAMPLES / "tiny_cnn.onnx")
ERROR_CASES = {
    "wrong shape": (["palimpsest-run", TINY, "--input", "x={d}/shape.npy"],
                    ["input 'x'", "1x3x8x8", "(1, 3, 9, 8)"]),
    "wrong rank": (["palimpsest-run", TINY, "--input", "x={d}/rank.npy"],
                   ["input 'x'", "(3, 8, 8)"]),
    "wrong dtype": (["palimpsest-run", TINY, "--input", "x={d}/f64.npy"],
                    ["input 'x'", "float32", "float64"]),
    "int32 token ids": (["palimpsest-run", "{d}/minilm.pal", "--input", "input_ids={d}/ids32.npy",
                         "--input", "attention_mask={d}/mask.npy"],
                        ["input 'input_ids'", "int64", "int32"]),
    "missing input": (["palimpsest-run", TINY], ["missing input 'x'"]),
    "missing input of two": (["palimpsest-run", "{d}/minilm.pal", "--input",
                              "input_ids={d}/ids.npy"], ["missing input 'attention_mask'"]),
    "unknown input": (["palimpsest-run", TINY, "--input", "x={d}/good.npy", "--input",
                       "y={d}/good.npy"], ["unknown input 'y'", "x"]),
    "input file missing": (["palimpsest-run", TINY, "--input", "x={d}/nothere.npy"],
                           ["nothere.npy"]),
    "input file not npy": (["palimpsest-run", TINY, "--input", "x={d}/notnpy.npy"],
                           ["notnpy.npy"]),
    "dynamic input without --shape": (["palimpsest-run", "{d}/minilm.pal", "--random-inputs"],
                                      ["input_ids", "--shape"]),
    "model file missing (run)": (["palimpsest-run", "{d}/nothere.onnx"], ["nothere.onnx"]),
    "model file missing (import)": (["palimpsest-import", "{d}/nothere.onnx"], ["nothere.onnx"]),
    "not an onnx file": (["palimpsest-import", "{d}/garbage.onnx", "-o", "{d}/garbage.pal"],
                         ["garbage.onnx"]),
    "unsupported op (import)": (["palimpsest-import", "{d}/unsupported.onnx", "-o",
                                 "{d}/unsupported.pal"], ["RandomNormalLike", "/head/RandomNormalLike"]),
    "unsupported op (run)": (["palimpsest-run", "{d}/unsupported.onnx", "--random-inputs"],
                             ["RandomNormalLike", "/head/RandomNormalLike"]),
    "side file missing": (["palimpsest-run", "{d}/moved/minilm.pal", "--random-inputs",
                           "--shape", "input_ids=1x4", "--shape", "attention_mask=1x4"],
                          ["minilm.pal.weights.bin"]),
    "side file cut short": (["palimpsest-run", "{d}/cut/minilm.pal", "--random-inputs",
                             "--shape", "input_ids=1x4", "--shape", "attention_mask=1x4"],
                            ["minilm.pal.weights.bin"]),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_tool_errors(case, error_files):
    command, needles = ERROR_CASES[case]
    args = [a.format(d=error_files) for a in command]
    result = call(*args)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    lines = result.stderr.strip().splitlines()
    # one line; a diagnostic located in a .pal file adds its source line and a caret
    assert len(lines) == 1 or (len(lines) == 3 and lines[2].strip() == "^"), result.stderr
    assert "error" in lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert not (error_files / "unsupported.pal").exists()


def test_external_data_and_constant_nodes_import(tmp_path):
    """Weights in an `.onnx.data` file (ONNX external data) and in Constant nodes load,
    through palimpsest-import into the side file, and the model still matches onnxruntime."""
    import onnx
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(3)
    weight = rng.standard_normal((16, 32)).astype(np.float32)
    bias = rng.standard_normal(16).astype(np.float32)
    nodes = [
        helper.make_node("Constant", [], ["scale"], value=numpy_helper.from_array(
            np.float32(0.5).reshape(()), "scale")),
        helper.make_node("Constant", [], ["shift"], value_floats=[0.25] * 16),
        helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1),
        helper.make_node("Mul", ["g", "scale"], ["m"]),
        helper.make_node("Add", ["m", "shift"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "external", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 32])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 16])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = tmp_path / "ext.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="ext.onnx.data", size_threshold=0)
    assert (tmp_path / "ext.onnx.data").stat().st_size >= weight.nbytes
    out = tmp_path / "out" / "ext.pal"
    out.parent.mkdir()
    assert onnx_import.main([str(path), "-o", str(out)]) == 0
    text = out.read_text()
    assert "dense_resource<w>" in text and "ext.pal.weights.bin" in text
    module = parse(text, str(out))
    verify(module)
    x = rng.standard_normal((2, 32)).astype(np.float32)
    expected = ort_run(onnx.load(str(path)), {"x": x})
    assert_matches(run(find_function(module, None), {"x": x}), expected, "external data")
