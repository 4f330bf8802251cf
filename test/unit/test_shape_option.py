"""`--shape NAME=DIMS` and `--bound` on palimpsest-plan, palimpsest-opt and
palimpsest-import (issue 14, item 3): one parser (tools/cli.py) and one substitution
(backends.binding.specialize_inputs, which Session uses too). A model whose input is
1x3x?x? plans nothing without a shape and real pools with one: on a small ONNX model made
here (no network) and on the PaddleOCR detector of the real-model corpus
(benchmarks/models.toml; skipped only when it cannot be fetched). The CLI output is
checked in test/lit/tools/shape-option.pal."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from example_models import corpus_model
from palimpsest.backends.binding import (
    BindingError, find_function, shaped_input_type, specialize_inputs,
)
from palimpsest.ir.types import TensorType
from palimpsest.tools import onnx_import, opt, plan
from palimpsest.tools.cli import UserError, parse_bounds, parse_shapes

GRAPH = """
func.func @main(%x: tensor<?x3x?x?xf32>) -> tensor<?x4x?x?xf32> {
  %w = graph.constant {value = dense<0.5> : tensor<4x3x3x3xf32>} : tensor<4x3x3x3xf32>
  %c = graph.conv %x, %w {pads = array<i64: 1, 1, 1, 1>} : (tensor<?x3x?x?xf32>, tensor<4x3x3x3xf32>) -> tensor<?x4x?x?xf32>
  %r = graph.relu %c : tensor<?x4x?x?xf32>
  func.return %r : tensor<?x4x?x?xf32>
}
"""


# -- the parser and the substitution -------------------------------------------------------

def test_parse_shapes_and_bounds():
    assert parse_shapes(["x=1x3X640x640", "y=0x2"]) == {"x": (1, 3, 640, 640), "y": (0, 2)}
    assert parse_bounds(["x=0:8,2:1280", "x=3:4"]) == {"x": {0: 8, 2: 1280, 3: 4}}
    for item, message in [("x", "must look like NAME=DIMS"), ("=1x2", "must look like"),
                          ("x=1x2.5", "input 'x': expected integer dims like 1x3x224x224, "
                                      "got '2.5'"),
                          ("x=1x-2", "input 'x': expected dims >= 0, got -2")]:
        with pytest.raises(UserError, match=re.escape(message)):
            parse_shapes([item])


def test_shaped_input_type_names_input_expected_and_actual():
    type_ = TensorType((None, 3, None, None), _f32())
    assert shaped_input_type("x", type_, (1, 3, 8, 8)) == TensorType((1, 3, 8, 8), _f32())
    cases = [((1, 3, 8), "input 'x': shape [1, 3, 8] does not fit tensor<?x3x?x?xf32>: "
                         "expected 4 dims, got 3"),
             ((1, 4, 8, 8), "input 'x': shape [1, 4, 8, 8] does not fit "
                            "tensor<?x3x?x?xf32>: dim 1 is 3, got 4"),
             ((1, 3, -1, 8), "input 'x': shape [1, 3, -1, 8] has a negative dim")]
    for shape, message in cases:
        with pytest.raises(BindingError, match=re.escape(message)):
            shaped_input_type("x", type_, shape)
    bounded = type_.with_bounds((None, None, 16, None))
    with pytest.raises(BindingError, match=re.escape("input 'x': dim 2 is 32, beyond its "
                                                     "bound 16")):
        shaped_input_type("x", bounded, (1, 3, 32, 8))


def _f32():
    from palimpsest.ir.types import FloatType

    return FloatType("f32")


def test_specialize_inputs_retypes_the_function(parse_text):
    module = parse_text(GRAPH)
    func = find_function(module, None)
    specialize_inputs(func, shapes={"x": (2, 3, 8, 8)})
    assert func.type.inputs[0] == TensorType((2, 3, 8, 8), _f32())
    assert func.entry_block.args[0].type == func.type.inputs[0]
    with pytest.raises(BindingError, match=re.escape("unknown input 'y' (the function "
                                                     "takes: x)")):
        specialize_inputs(func, shapes={"y": (1,)})


# -- the tools: exit 1 and one line for every bad --shape -----------------------------------

BAD_SHAPES = [
    ("y=1x3x16x16", "--shape y=1x3x16x16: unknown input 'y' (the function takes: x)"),
    ("x=1x3x16", "--shape x=1x3x16: input 'x': shape [1, 3, 16] does not fit "
                 "tensor<?x3x?x?xf32>: expected 4 dims, got 3"),
    ("x=1x3xtwox16", "--shape x=1x3xtwox16: input 'x': expected integer dims like "
                     "1x3x224x224, got 'two'"),
    ("x=1x4x16x16", "--shape x=1x4x16x16: input 'x': shape [1, 4, 16, 16] does not fit "
                    "tensor<?x3x?x?xf32>: dim 1 is 3, got 4"),
]


@pytest.mark.parametrize("tool", ["palimpsest-plan", "palimpsest-opt"])
@pytest.mark.parametrize("shape,message", BAD_SHAPES)
def test_bad_shape_is_one_line_and_exit_1(tmp_path, capsys, tool, shape, message):
    path = tmp_path / "m.pal"
    path.write_text(GRAPH)
    main = plan.main if tool == "palimpsest-plan" else opt.main
    assert main([str(path), "--shape", shape]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"{tool}: error: {message}\n"
    assert captured.out == ""


def test_shape_on_csv_intervals_is_refused(tmp_path, capsys):
    path = tmp_path / "i.csv"
    path.write_text("id,lower,upper,size\n0,0,2,16\n")
    assert plan.main([str(path), "--shape", "x=1"]) == 1
    assert "--shape, --bound and --value apply to a .pal model" in capsys.readouterr().err


# -- a model with dynamic input dims: no network --------------------------------------------

def _dynamic_onnx(path: Path) -> None:
    """Conv → Relu → MaxPool on x: N x 3 x H x W (named dims), as exporters write it."""
    onnx = pytest.importorskip("onnx")
    np = pytest.importorskip("numpy")
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="/conv/Conv"),
         helper.make_node("Relu", ["c"], ["r"], name="/relu/Relu"),
         helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2],
                          name="/pool/MaxPool")],
        "dynamic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, "h", "w"])],
        [numpy_helper.from_array(weight, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              str(path))


def _plan(argv, capsys) -> str:
    assert plan.main(argv) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_dynamic_onnx_model_plans_with_shape(tmp_path, capsys):
    model = tmp_path / "dyn.onnx"
    _dynamic_onnx(model)
    pal = tmp_path / "dyn.pal"
    assert onnx_import.main([str(model), "-o", str(pal)]) == 0
    assert "tensor<?x3x?x?xf32>" in pal.read_text()

    # without a shape: nothing to plan
    _plan([str(pal), "--export", "json", "-o", str(tmp_path / "none.json")], capsys)
    empty = json.loads((tmp_path / "none.json").read_text())
    assert empty["pools"] == [] and "%x" in empty["functions"][0]["dynamic"]

    # palimpsest-plan --shape: real pools, every buffer static
    _plan([str(pal), "--shape", "x=1x3x32x32", "--export", "json", "-o",
           str(tmp_path / "p.json")], capsys)
    data = json.loads((tmp_path / "p.json").read_text())
    pools = {p["name"]: p["size"] for p in data["pools"]}
    fn = data["functions"][0]
    assert fn["dynamic"] == []
    assert pools["io"] == 8 * 16 * 16 * 4            # y: 1x8x16x16xf32
    sizes = {b["name"]: b["size"] for b in fn["buffers"]}
    assert sizes["%c"] == 8 * 32 * 32 * 4             # conv's output
    assert pools["activations"] >= max(sizes.values())
    header = tmp_path / "plan.h"
    printed = _plan([str(pal), "--shape", "x=1x3x32x32", "--export", "c-header", "-o",
                     str(header)], capsys)
    text = header.read_text()
    assert f"#define PAL_POOL_IO_SIZE {pools['io']}u" in text
    assert f"#define PAL_POOL_ACTIVATIONS_SIZE {pools['activations']}u" in text
    assert "@main @activations:" in printed

    # palimpsest-import --shape: the imported IR is static throughout
    static = tmp_path / "static.pal"
    assert onnx_import.main([str(model), "--shape", "x=1x3x32x32", "-o", str(static)]) == 0
    text = static.read_text()
    assert "func.func @main(%x: tensor<1x3x32x32xf32>" in text and "?" not in text.split(
        "{-#")[0]
    assert onnx_import.main([str(model), "--shape", "x=1x3x32", "-o", str(static)]) == 1
    assert capsys.readouterr().err == (
        "palimpsest-import: error: --shape x=1x3x32: input 'x': shape [1, 3, 32] does not "
        "fit tensor<?x3x?x?xf32>: expected 4 dims, got 3\n")

    # palimpsest-opt --shape, then the default pipeline: every buffer planned
    out = tmp_path / "planned.pal"
    assert opt.main([str(pal), "--shape", "x=2x3x16x16", "-p", "default", "-o",
                     str(out)]) == 0
    text = out.read_text()
    assert "buffer.alloc" not in text and "memory.pool @activations" in text


# -- a real model of the corpus -------------------------------------------------------------

def test_paddleocr_detector_exports_a_c_header_with_shape(tmp_path, capsys):
    """The PaddleOCR v4 detector's input is ?x3x?x?: an empty plan without --shape, a C
    header with real pools with it."""
    pytest.importorskip("onnx")
    path, _ = corpus_model("ppocr_v4_det")
    pal = tmp_path / "det.pal"
    assert onnx_import.main([str(path), "-o", str(pal)]) == 0
    assert "func.func @main(%x: tensor<?x3x?x?xf32>" in pal.read_text()
    _plan([str(pal), "--export", "json", "-o", str(tmp_path / "none.json")], capsys)
    assert json.loads((tmp_path / "none.json").read_text())["pools"] == []

    header = tmp_path / "det.h"
    printed = _plan([str(pal), "--shape", "x=1x3x320x320", "--export", "c-header", "-o",
                     str(header)], capsys)
    text = header.read_text()
    sizes = dict(re.findall(r"#define PAL_POOL_(\w+)_SIZE (\d+)u", text))
    assert int(sizes["ACTIVATIONS"]) > 0
    assert int(sizes["IO"]) == 1 * 1 * 320 * 320 * 4     # the probability map, f32
    planned = int(re.search(r"function @main: (\d+) planned buffers", text).group(1))
    assert planned > 100
    assert "@main @activations:" in printed
