"""Fused epilogues (dialects/kernel_elementwise.py, `Epilogue`): `lower-to-kernels` folds
the bias add, activation and residual add that follow a conv, matmul or gemm into that
kernel when the product has no other reader. Each case: the fold happened (no
`kernel.elementwise` left, the steps on the kernel); the numpy backend and the OpenCL
backend, with poisoning, match the graph-level reference and onnxruntime; on OpenCL
nothing runs on the host and the epilogue is computed inside the kernel's own launches
(no launch of its own, the product never stored); the arena is smaller than without the
fold. Prepacked weights (passes/prepack_weights.py): a transposed constant B is stored
transposed once, and both backends read it."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from palimpsest.backends.binding import find_function  # noqa: E402
from palimpsest.backends.numpy.session import Session  # noqa: E402
from palimpsest.backends.reference.executor import run as run_graph  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402
from palimpsest.passes.pass_manager import PassManager, parse_pipeline  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from opencl_support import UNAVAILABLE, compare_backends, requires_opencl  # noqa: E402,E501

PIPELINE = "infer-shapes,canonicalize,bufferize,lower-to-kernels{fuse-epilogues=%s}," \
           "insert-deallocs,plan-memory"

# (ONNX op, attributes, extra constant inputs as name -> array of the channel count)
ACTIVATIONS = {
    "relu": ("Relu", {}, {}),
    "relu6": ("Clip", {}, {"lo": lambda c: np.float32(0), "hi": lambda c: np.float32(6)}),
    "sigmoid": ("Sigmoid", {}, {}),
    "hard_sigmoid": ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, {}),
    "hard_swish": ("HardSwish", {}, {}),
    "prelu": ("PRelu", {}, {"slope": lambda c: np.linspace(-0.5, 0.5, c, dtype=np.float32)
                            .reshape(c, 1, 1)}),
    "leaky_relu": ("LeakyRelu", {"alpha": 0.1}, {}),
    "gelu": ("Gelu", {}, {}),
    "gelu_tanh": ("Gelu", {"approximate": "tanh"}, {}),
}
STEP_OF = {"relu": "graph.relu", "relu6": "graph.clip", "sigmoid": "graph.sigmoid",
           "hard_sigmoid": "graph.hard_sigmoid", "hard_swish": "graph.hard_swish",
           "prelu": "graph.prelu", "leaky_relu": "graph.leaky_relu", "gelu": "graph.gelu",
           "gelu_tanh": "graph.gelu"}


def _model(nodes, inputs: dict, constants: dict, output="y"):
    graph = helper.make_graph(
        [helper.make_node(op, ins, [out], **attrs) for op, ins, out, attrs in nodes], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape))
         for n, a in inputs.items()],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def _activation(name: str, x: str, out: str, channels: int, constants: dict,
                per_row: bool = False):
    op, attrs, extra = ACTIVATIONS[name]
    ins = [x]
    for key, make in extra.items():
        value = make(channels)
        if per_row and value.ndim == 3:   # a matmul's slope: one per column
            value = value.reshape(channels)
        constants[key] = value
        ins.append(key)
    return (op, ins, out, attrs)


def conv_model(activation: str, group: int = 1, kernel: int = 3, stride: int = 1,
               residual: bool = True, bias: bool = True, size: int = 12):
    """Conv (with B unless `bias` is false) -> activation -> (+ X, the residual, when
    shapes allow), on a `size` x `size` image."""
    rng = np.random.default_rng(7)
    c, m = 8, 8
    x = rng.standard_normal((1, c, size, size)).astype(np.float32)
    pad = kernel // 2
    constants = {"w": rng.standard_normal((m, c // group, kernel, kernel)).astype(np.float32)
                 * 0.3}
    if bias:
        constants["b"] = rng.standard_normal(m).astype(np.float32)
    nodes = [("Conv", ["x", "w"] + (["b"] if bias else []), "c",
              {"pads": [pad] * 4, "group": group, "strides": [stride, stride]}),
             _activation(activation, "c", "a", m, constants)]
    if residual and stride == 1:
        nodes.append(("Add", ["a", "x"], "y", {}))
    else:
        nodes[-1] = nodes[-1][:2] + ("y",) + nodes[-1][3:]
    return _model(nodes, {"x": x}, constants), {"x": x}


def matmul_model(activation: str, gemm: bool = False, residual: bool = True,
                 columns: int = 8):
    """MatMul -> + bias -> activation (or Gemm with C -> activation), then + R (a second
    input, the residual) unless `residual` is false; `columns` out columns."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((6, 16)).astype(np.float32)
    r = rng.standard_normal((6, columns)).astype(np.float32)
    constants = {"k": rng.standard_normal((16, columns)).astype(np.float32) * 0.3,
                 "bias": rng.standard_normal(columns).astype(np.float32)}
    if gemm:
        nodes = [("Gemm", ["x", "k", "bias"], "p", {"alpha": 0.5})]
    else:
        nodes = [("MatMul", ["x", "k"], "m", {}), ("Add", ["m", "bias"], "p", {})]
    nodes.append(_activation(activation, "p", "a" if residual else "y", columns, constants,
                             per_row=True))
    if residual:
        nodes.append(("Add", ["a", "r"], "y", {}))
    feeds = {"x": x, "r": r} if residual else {"x": x}
    return _model(nodes, feeds, constants), feeds


def _reference(model, feeds):
    graph = import_onnx(model)
    PassManager(parse_pipeline("infer-shapes")).run(graph)
    return run_graph(find_function(graph, None), feeds)


def _onnxruntime(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def _check_against_both(got, model, feeds):
    """`got` (a backend's results) against the reference executor and onnxruntime."""
    for expected in (_reference(model, feeds), _onnxruntime(model, feeds)):
        for name, want in expected.items():
            np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5, err_msg=name)


def _lowered(model, fold: bool = True, pipeline: str = PIPELINE, stop: str | None = None):
    module = import_onnx(model)
    text = pipeline % ("true" if fold else "false")
    if stop is not None:
        text = text[:text.index(stop) + len(stop)]
    PassManager(parse_pipeline(text)).run(module)
    return module


def _kernels(module, name):
    return [op for op in module.walk() if op.name == name]


def _check_fold(model, kernel: str, steps: list) -> None:
    module = _lowered(model)
    assert not _kernels(module, "kernel.elementwise")
    (op,) = _kernels(module, kernel)
    assert op.config()["epilogue"] == steps


def _check_numpy(model, feeds):
    session = Session(import_onnx(model), poison=True)
    _check_against_both(session.run(feeds), model, feeds)
    return session


def _check_opencl(model, feeds, kernel: str):
    """The OpenCL backend, poisoned, against the reference and onnxruntime (and numpy,
    nothing on the host: compare_backends); the epilogue inside the kernel's launches:
    no launch of its own, every launch that stores the product applies it."""
    session = Session(import_onnx(model), backend="opencl", poison=True)
    got = session.run(feeds)
    _check_against_both(got, model, feeds)
    assert not session.last_stats.run_stats.host_ops
    launches = [(op.name, launch) for (op, *_), ops in
                session.last_plan.executor.launches.items() if isinstance(ops, list)
                for launch in ops]
    assert {name for name, _ in launches} == {kernel}, "only the fused kernel launches"
    stores = [launch for _, launch in launches if launch.kernel not in ("im2col", "pad_image")]
    assert stores and all("= epilogue" in launch.source for launch in stores)  # (called)
    compare_backends(import_onnx(model), feeds, poison=True)


CONV_CASES = [(a, 1, 3, 1, True) for a in ACTIVATIONS] + [
    ("relu", 8, 3, 1, True),          # depthwise
    ("hard_swish", 8, 3, 2, True),    # depthwise, strided
    ("prelu", 8, 3, 1, False),        # depthwise, no B: the activation first
    ("relu6", 2, 3, 1, True),         # grouped, not depthwise
    ("gelu", 4, 3, 2, False),         # grouped, strided, no B
    ("leaky_relu", 1, 1, 1, True),    # 1x1: the image is the matrix
    ("hard_sigmoid", 1, 1, 1, False),  # 1x1, no B
    ("sigmoid", 1, 3, 2, True),       # strided
]
CONV_IDS = [f"{a}-g{g}-k{k}-s{s}{'' if b else '-nobias'}" for a, g, k, s, b in CONV_CASES]


def _conv_steps(activation, stride):
    return [STEP_OF[activation]] + (["graph.add"] if stride == 1 else [])


def _matmul_steps(activation, gemm):
    return ([] if gemm else ["graph.add"]) + [STEP_OF[activation], "graph.add"]


@pytest.mark.parametrize("activation,group,kernel,stride,bias", CONV_CASES, ids=CONV_IDS)
def test_conv_epilogue_numpy(activation, group, kernel, stride, bias):
    model, feeds = conv_model(activation, group, kernel, stride, bias=bias)
    _check_fold(model, "kernel.conv2d", _conv_steps(activation, stride))
    _check_numpy(model, feeds)


@pytest.mark.parametrize("activation", ["sigmoid", "hard_swish"])
def test_large_conv_epilogue_on_onednn(monkeypatch, activation):
    """An epilogue of 16K float32 elements or more (8 x 48 x 48) runs its sigmoid or
    hard-swish as one oneDNN call (kernel_ops_steps.py), poisoned, against the
    reference and onnxruntime."""
    from palimpsest.backends import onednn_primitives

    if not onednn_primitives.available():
        pytest.skip("oneDNN (onednn-cpu-gomp) not installed")
    made = []
    original = onednn_primitives.eltwise
    monkeypatch.setattr(onednn_primitives, "eltwise",
                        lambda *args: made.append(args) or original(*args))
    model, feeds = conv_model(activation, size=48)
    _check_fold(model, "kernel.conv2d", _conv_steps(activation, 1))
    _check_numpy(model, feeds)
    assert [args[:2] for args in made] == [
        ({"sigmoid": "logistic", "hard_swish": "hardswish"}[activation], 8 * 48 * 48)]


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("gemm", [False, True])
def test_matmul_epilogue_numpy(activation, gemm):
    model, feeds = matmul_model(activation, gemm)
    _check_fold(model, "kernel.matmul", _matmul_steps(activation, gemm))
    _check_numpy(model, feeds)


@requires_opencl
@pytest.mark.parametrize("activation,group,kernel,stride,bias", CONV_CASES, ids=CONV_IDS)
def test_conv_epilogue_opencl(activation, group, kernel, stride, bias):
    model, feeds = conv_model(activation, group, kernel, stride, bias=bias)
    _check_fold(model, "kernel.conv2d", _conv_steps(activation, stride))
    _check_opencl(model, feeds, "kernel.conv2d")


@requires_opencl
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("gemm", [False, True])
def test_matmul_epilogue_opencl(activation, gemm):
    model, feeds = matmul_model(activation, gemm)
    _check_fold(model, "kernel.matmul", _matmul_steps(activation, gemm))
    _check_opencl(model, feeds, "kernel.matmul")


@requires_opencl
def test_conv_epilogue_reads_per_channel_ins_once_a_vector():
    """A conv's vector of pixels lies in one (image, channel) plane, so a per-channel in
    of its epilogue (Paddle's affine mul and add around its activations) is one scalar
    load a vector, not sixteen; against the reference and onnxruntime, poisoned."""
    from palimpsest.backends.opencl.kernels import conv
    from palimpsest.backends.opencl.kernels.base import Arg, KernelCall

    rng = np.random.default_rng(14)
    x = rng.standard_normal((1, 8, 12, 12)).astype(np.float32)
    constants = {"w": rng.standard_normal((8, 8, 1, 1)).astype(np.float32) * 0.3,
                 "s": rng.standard_normal((1, 8, 1, 1)).astype(np.float32),
                 "t": rng.standard_normal((8, 1, 1)).astype(np.float32)}
    nodes = [("Conv", ["x", "w"], "c", {}), ("Mul", ["c", "s"], "m", {}),
             ("Add", ["m", "t"], "a", {}), ("HardSwish", ["a"], "y", {})]
    model = _model(nodes, {"x": x}, constants)
    _check_fold(model, "kernel.conv2d", ["graph.mul", "graph.add", "graph.hard_swish"])
    _check_opencl(model, {"x": x}, "kernel.conv2d")
    f32 = np.dtype(np.float32)
    config = {"group": 1, "strides": [1, 1], "dilations": [1, 1], "pads": [0, 0, 0, 0],
              "epilogue": ["graph.mul", "graph.add"], "epilogue_wiring": [[4, 2], [5, 3]],
              "epilogue_ins": 2, "epilogue_props": None}
    (launch,) = conv.conv2d(KernelCall(
        "kernel.conv2d", config, [Arg((1, 32, 40, 40), f32), Arg((64, 32, 1, 1), f32),
                                  Arg((1, 64, 1, 1), f32), Arg((64, 1, 1), f32)],
        [Arg((1, 64, 40, 40), f32)]))
    function = launch.source[:launch.source.index("__kernel")]
    assert function.count("/ 1600) % 64)]") == 2   # (one index a load, not one a lane)


@requires_opencl
@pytest.mark.parametrize("activation", ["relu", "prelu"])
def test_matmul_epilogue_reads_row_ins_as_vectors(activation):
    """A matmul's out rows are the rows of its last dim, so a vector of a block's columns
    lies in one: an epilogue in of that dim (the bias, the residual, PRelu's slope per
    column) is one vload, not gathered lane by lane; 37 columns (two vectors, then one
    shifted back to end at the last column)."""
    from palimpsest.backends.opencl.kernels import linalg
    from palimpsest.backends.opencl.kernels.base import Arg, KernelCall

    model, feeds = matmul_model(activation, columns=37)
    _check_fold(model, "kernel.matmul", _matmul_steps(activation, False))
    _check_opencl(model, feeds, "kernel.matmul")
    f32 = np.dtype(np.float32)
    config = {"transA": 0, "transB": 0, "alpha": 1.0, "beta": 1.0, "epilogue": ["graph.add"],
              "epilogue_wiring": [[3, 2]], "epilogue_ins": 1, "epilogue_props": None}
    (launch,) = linalg.matmul(KernelCall("kernel.matmul", config,
                                         [Arg((6, 16), f32), Arg((16, 37), f32),
                                          Arg((37,), f32)], [Arg((6, 37), f32)]))
    assert "vload16(0, e2 +" in launch.source and "% 37)]" not in launch.source


def gemm_form_model(form: str):
    """The product in each of the OpenCL GEMM's forms, with a bias (or C), GELU and a
    residual: "dots" (B an input, transposed: dot products along k), "columns" (A and B
    inputs, transposed: vectors along m, the block stored transposed), "batched" (3-D
    MatMul, a transformer's projection: batch offsets in the out's index)."""
    rng = np.random.default_rng(10)
    bias = rng.standard_normal(24).astype(np.float32)
    if form == "dots":
        feeds = {"a": rng.standard_normal((6, 32)).astype(np.float32),
                 "b": rng.standard_normal((24, 32)).astype(np.float32) * 0.2}
        nodes = [("Gemm", ["a", "b", "bias"], "p", {"transB": 1})]
    elif form == "columns":
        feeds = {"a": rng.standard_normal((32, 40)).astype(np.float32),
                 "b": rng.standard_normal((24, 32)).astype(np.float32) * 0.2}
        nodes = [("Gemm", ["a", "b", "bias"], "p", {"transA": 1, "transB": 1, "beta": 0.5})]
    else:
        feeds = {"a": rng.standard_normal((2, 5, 16)).astype(np.float32)}
        nodes = [("MatMul", ["a", "k"], "m", {}), ("Add", ["m", "bias"], "p", {})]
    rows = feeds["a"].shape[1] if form == "columns" else feeds["a"].shape[-2]
    feeds["r"] = rng.standard_normal(feeds["a"].shape[:-2] + (rows, 24)).astype(np.float32)
    nodes += [("Gelu", ["p"], "g", {}), ("Add", ["g", "r"], "y", {})]
    constants = {"bias": bias}
    if form == "batched":
        constants["k"] = rng.standard_normal((16, 24)).astype(np.float32) * 0.3
    return _model(nodes, feeds, constants), feeds


@pytest.mark.parametrize("form", ["dots", "columns", "batched"])
def test_gemm_forms_numpy(form):
    model, feeds = gemm_form_model(form)
    _check_fold(model, "kernel.matmul", (["graph.add"] if form == "batched" else [])
                + ["graph.gelu", "graph.add"])
    _check_numpy(model, feeds)


@requires_opencl
@pytest.mark.parametrize("form", ["dots", "columns", "batched"])
def test_gemm_forms_opencl(form):
    model, feeds = gemm_form_model(form)
    _check_opencl(model, feeds, "kernel.matmul")


def pattern_model(pattern: str, group: int = 1):
    """Conv, then an activation written as several ops reading the conv's result twice
    (as exporters write them), then + X. SiLU: Sigmoid then Mul(c, s) (`silu`) or
    Mul(s, c) (`silu_swapped`); hard-swish: Add 3, Clip 0..6, Mul by c, Div 6 (`hswish`)
    or Mul 1/6 (`hswish_mul`); `hswish_off` adds 2, not 3: no activation. GELU: Div
    by sqrt 2 (`gelu`, as PyTorch and Paddle export it) or Mul by 1/sqrt 2
    (`gelu_mul`), Erf, Add 1, Mul by c, Mul 0.5 (`gelu_half_first`: Mul 0.5, then
    by c)."""
    rng = np.random.default_rng(14)
    x = rng.standard_normal((1, 8, 10, 10)).astype(np.float32) * 3
    constants = {"w": rng.standard_normal((8, 8 // group, 3, 3)).astype(np.float32) * 0.3,
                 "b": rng.standard_normal(8).astype(np.float32),
                 "three": np.float32(2 if pattern == "hswish_off" else 3),
                 "zero": np.float32(0), "six": np.float32(6), "sixth": np.float32(1 / 6),
                 "root2": np.float32(np.sqrt(2)), "inv_root2": np.float32(1 / np.sqrt(2)),
                 "one": np.float32(1), "half": np.float32(0.5)}
    nodes = [("Conv", ["x", "w", "b"], "c", {"pads": [1] * 4, "group": group})]
    if pattern.startswith("gelu"):
        nodes += [("Mul", ["c", "inv_root2"], "d", {}) if pattern == "gelu_mul"
                  else ("Div", ["c", "root2"], "d", {}),
                  ("Erf", ["d"], "e", {}), ("Add", ["e", "one"], "f", {})]
        nodes += ([("Mul", ["f", "half"], "h", {}), ("Mul", ["c", "h"], "m", {})]
                  if pattern == "gelu_half_first"
                  else [("Mul", ["c", "f"], "h", {}), ("Mul", ["h", "half"], "m", {})])
    elif pattern.startswith("silu"):
        nodes += [("Sigmoid", ["c"], "s", {}),
                  ("Mul", ["s", "c"] if pattern == "silu_swapped" else ["c", "s"], "m", {})]
    else:
        nodes += [("Add", ["c", "three"], "t", {}), ("Clip", ["t", "zero", "six"], "r", {}),
                  ("Mul", ["r", "c"], "p", {}),
                  ("Mul", ["p", "sixth"], "m", {}) if pattern == "hswish_mul"
                  else ("Div", ["p", "six"], "m", {})]
    nodes.append(("Add", ["m", "x"], "y", {}))
    return _model(nodes, {"x": x}, constants), {"x": x}


@pytest.mark.parametrize("pattern,group", [
    ("silu", 1), ("silu_swapped", 1), ("silu", 8), ("hswish", 1), ("hswish_mul", 1),
    ("hswish", 8), ("gelu", 1), ("gelu_mul", 1), ("gelu_half_first", 1), ("gelu", 8)])
def test_activation_patterns_fold(pattern, group):
    """SiLU, hard-swish and GELU written out read the conv's product twice, which stopped
    any fold: lowered as one swish / hard_swish / gelu step (ACTIVATION_PATTERNS), they
    fold (with the residual add) into the conv, and the buffers between them are gone. Both
    backends, poisoned, against the reference and onnxruntime."""
    model, feeds = pattern_model(pattern, group)
    step = {"silu": "graph.swish", "hswi": "graph.hard_swish", "gelu": "graph.gelu"}[
        pattern[:4]]
    _check_fold(model, "kernel.conv2d", [step, "graph.add"])
    _check_numpy(model, feeds)
    if UNAVAILABLE is None:
        _check_opencl(model, feeds, "kernel.conv2d")


def test_activation_pattern_needs_its_constants():
    """x * relu6(x + 2) / 6 is no hard-swish: left as it is, and right."""
    model, feeds = pattern_model("hswish_off")
    module = _lowered(model)
    assert not any(op.config().get("epilogue") == ["graph.hard_swish", "graph.add"]
                   for op in _kernels(module, "kernel.conv2d"))
    assert _kernels(module, "kernel.elementwise")
    _check_numpy(model, feeds)


@pytest.mark.parametrize("scratch", [1, 7, 96, 97, 1000, 8 * 9 * 10 - 1])
def test_numpy_epilogue_in_blocks(scratch):
    """A scratch smaller than the out (the `epilogue` workspace holds at most
    EPILOGUE_CHUNK elements): the chain runs a block at a time, per-channel and
    full-shape ins read at the block, the same numbers as the whole out at once."""
    from palimpsest.backends.numpy.kernel_ops_elementwise import run_epilogue

    rng = np.random.default_rng(12)
    product = rng.standard_normal((2, 8, 9, 10)).astype(np.float32)
    slope = rng.standard_normal((8, 1, 1)).astype(np.float32)
    residual = rng.standard_normal((2, 8, 9, 10)).astype(np.float32)
    bias = rng.standard_normal((8, 1, 1)).astype(np.float32)
    inputs = [None, None, bias, slope, residual]      # (the kernel's own ins unused here)
    config = {"epilogue": ["graph.add", "graph.prelu", "graph.hard_swish", "graph.add",
                           "graph.gelu"],
              "epilogue_wiring": [[5, 2], [6, 3], [7], [8, 4], [9]],
              "epilogue_props": [{}, {}, {}, {}, {"approximate": "tanh"}]}
    whole = product.copy()
    run_epilogue(config, inputs, whole, np.empty(whole.size, np.float32))
    blocks = product.copy()
    run_epilogue(config, inputs, blocks, np.full(scratch, np.nan, np.float32))
    np.testing.assert_array_equal(blocks, whole)
    x = product + bias
    x = np.where(x < 0, slope * x, x)
    x = x * np.clip(x / 6 + 0.5, 0, 1) + residual
    x = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(whole, x, rtol=1e-5, atol=1e-6)
    # a batch_norm step (per-channel ins along axis 1), then leaky_relu (needs scratch)
    stats = [rng.standard_normal(8).astype(np.float32) for _ in range(3)] + [
        rng.random(8).astype(np.float32) + 0.5]
    config = {"epilogue": ["graph.batch_norm", "graph.leaky_relu"],
              "epilogue_wiring": [[6, 2, 3, 4, 5], [7]],
              "epilogue_props": [{"epsilon": 1e-3}, {"alpha": 0.1}]}
    inputs = [None, None] + stats
    whole, blocks = product.copy(), product.copy()
    run_epilogue(config, inputs, whole, np.empty(whole.size, np.float32))
    run_epilogue(config, inputs, blocks, np.full(scratch, np.nan, np.float32))
    np.testing.assert_array_equal(blocks, whole)
    scale, bias, mean, var = (a.reshape(8, 1, 1) for a in stats)
    x = (product - mean) / np.sqrt(var + 1e-3) * scale + bias
    np.testing.assert_allclose(whole, np.where(x < 0, 0.1 * x, x), rtol=1e-5, atol=1e-6)
    # a clip (scalar bounds), then leaky_relu (needs scratch)
    config = {"epilogue": ["graph.clip", "graph.leaky_relu"],
              "epilogue_wiring": [[4, 2, 3], [5]],
              "epilogue_props": [{}, {"alpha": 0.1}]}
    inputs = [None, None, np.array(-0.5, np.float32), np.array(6, np.float32)]
    whole, blocks = product.copy(), product.copy()
    run_epilogue(config, inputs, whole, np.empty(whole.size, np.float32))
    run_epilogue(config, inputs, blocks, np.full(scratch, np.nan, np.float32))
    np.testing.assert_array_equal(blocks, whole)
    x = np.clip(product, -0.5, 6)
    np.testing.assert_allclose(whole, np.where(x < 0, 0.1 * x, x), rtol=1e-6)


@pytest.mark.parametrize("kernel", [1, 3])
def test_large_conv_epilogue_scratch(kernel):
    """A conv whose out (1x8x96x96) is larger than EPILOGUE_CHUNK, with a step that
    needs scratch: a 1x1 conv has no workspace of its own, so the epilogue gets one of
    EPILOGUE_CHUNK elements and runs in blocks; a 3x3 conv's im2col is dead once the
    product is made and serves as the scratch (no workspace added). Both backends match
    the reference and onnxruntime."""
    from palimpsest.dialects.kernel_elementwise import EPILOGUE_CHUNK

    rng = np.random.default_rng(13)
    x = rng.standard_normal((1, 8, 96, 96)).astype(np.float32)
    constants = {"w": rng.standard_normal((8, 8, kernel, kernel)).astype(np.float32) * 0.3,
                 "b": rng.standard_normal(8).astype(np.float32)}
    nodes = [("Conv", ["x", "w", "b"], "c", {"pads": [kernel // 2] * 4}),
             ("HardSwish", ["c"], "a", {}), ("Add", ["a", "x"], "y", {})]
    model, feeds = _model(nodes, {"x": x}, constants), {"x": x}
    module = _lowered(model, stop="=true}")
    (conv,) = _kernels(module, "kernel.conv2d")
    roles = [w.name_hint.rsplit("_", 1)[-1] for w in conv.workspaces]
    if kernel == 1:
        assert roles == ["epilogue"]
        assert tuple(conv.workspaces[0].type.shape) == (EPILOGUE_CHUNK,) < (x.size,)
    else:
        assert roles == ["padded", "im2col"]
    _check_numpy(model, feeds)
    if UNAVAILABLE is None:
        _check_opencl(model, feeds, "kernel.conv2d")


def test_fold_takes_the_intermediates_out_of_the_plan():
    """Conv -> relu -> + X, bufferized without in-place reuse: with the fold the conv's
    product and the relu's result are no buffers at all, so fewer allocs and a smaller
    arena, same numbers. (With in-place reuse the chain already writes the product's
    buffer; then the fold saves the elementwise kernel's pass, not memory.)"""
    model, feeds = conv_model("relu")
    pipeline = PIPELINE.replace("bufferize", "bufferize{in-place=false}")

    def allocs(fold):
        module = _lowered(model, fold, pipeline, stop="=true}" if fold else "=false}")
        return sum(1 for op in module.walk() if op.name == "buffer.alloc"
                   and op.properties["kind"].value == "activation")

    def arena(fold):
        return sum(op.properties["size"].value for op in _lowered(model, fold, pipeline).walk()
                   if op.name == "memory.pool" and "size" in op.properties)

    assert allocs(True) == 0 and allocs(False) == 2
    assert arena(False) - arena(True) >= 8 * 12 * 12 * 4
    expected = _reference(model, feeds)
    for fold in ("true", "false"):
        got = Session(import_onnx(model), poison=True, pipeline=pipeline % fold).run(feeds)
        np.testing.assert_allclose(got["y"], expected["y"], rtol=1e-4, atol=1e-5)


def test_no_fold_when_the_product_has_another_reader():
    """Conv -> relu, and the conv's result is also a graph output: no fold."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("c", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    module = _lowered(model)
    (conv,) = _kernels(module, "kernel.conv2d")
    assert conv.config()["epilogue"] is None
    assert len(_kernels(module, "kernel.elementwise")) == 1
    got = Session(import_onnx(model), poison=True).run({"x": x})
    expected = _reference(model, {"x": x})
    for name in ("y", "c"):
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-4, atol=1e-5)


def test_epilogue_verifier_errors(parse_text):
    """The epilogue properties are checked where the op is declared."""
    from palimpsest.ir.diagnostics import DiagnosticError
    from palimpsest.ir.verifier import verify

    head = ('func.func @f(%a: buffer<2x4xf32>, %b: buffer<4x4xf32>, %c: buffer<4xf32>, '
            '%y: buffer<2x4xf32>) {\n  kernel.matmul %a, %b, %c, %y {')
    tail = (', operandSegmentSizes = array<i32: 3, 1, 0>} : buffer<2x4xf32>, buffer<4x4xf32>,'
            ' buffer<4xf32>, buffer<2x4xf32>\n  func.return\n}\n')
    good = 'epilogue = ["graph.add"], epilogue_ins = 1, epilogue_wiring = [[3, 2]]'
    verify(parse_text(head + good + tail))
    for props, message in [
            ('epilogue = ["graph.add"], epilogue_ins = 1, epilogue_wiring = [[2, 2]]',
             "must read value 3 exactly once"),
            ('epilogue = ["graph.relu"], epilogue_ins = 1, epilogue_wiring = [[4]]',
             "steps read the ins"),
            ('epilogue = ["graph.transpose"], epilogue_ins = 1, epilogue_wiring = [[3]]',
             "not a fusable elementwise op"),
            ('epilogue_ins = 1', "need an epilogue")]:
        with pytest.raises(DiagnosticError, match=message):
            verify(parse_text(head + props + tail))


# -- prepacked weights --------------------------------------------------------------------------

def fc_model(rows: int = 40):
    """A fully-connected layer as PyTorch exports it: Gemm(X, W, B, transB=1), W (out x
    in) a constant, then relu."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((rows, 40)).astype(np.float32)
    constants = {"w": rng.standard_normal((24, 40)).astype(np.float32) * 0.2,
                 "bias": rng.standard_normal(24).astype(np.float32)}
    nodes = [("Gemm", ["x", "w", "bias"], "p", {"transB": 1}), ("Relu", ["p"], "y", {})]
    return _model(nodes, {"x": x}, constants), {"x": x}, constants["w"]


@pytest.mark.parametrize("prepack,rows", [(True, 40), (False, 40), (True, 5)])
def test_prepacked_weights_are_the_constant(prepack, rows):
    """With prepack-weights (the default), the matmul reads a constant holding Wᵀ
    (in x out, row-major) with transB = 0: the layout the GEMM wants, made once at
    compile time; without it, or for a product of fewer than MIN_ROWS rows, W and
    transB = 1. All give the reference's numbers."""
    from palimpsest.passes.prepack_weights import MIN_ROWS

    model, feeds, w = fc_model(rows)
    packs = prepack and rows >= MIN_ROWS
    pipeline = PIPELINE.replace("{fuse-epilogues=%s}", "{prepack-weights=%s}")
    module = _lowered(model, prepack, pipeline, stop="lower-to-kernels{prepack-weights=%s}"
                      % ("true" if prepack else "false"))
    (matmul,) = _kernels(module, "kernel.matmul")
    b = matmul.ins[1]
    assert b.op.name == "buffer.constant"
    packed = b.op.properties["value"].to_numpy()
    assert matmul.config()["transB"] == (0 if packs else 1)
    np.testing.assert_array_equal(packed, w.T if packs else w)
    assert packed.flags.c_contiguous
    assert len(_kernels(module, "buffer.constant")) == 2   # (W or Wᵀ, and B): W went
    session = Session(import_onnx(model), poison=True,
                      pipeline=pipeline.replace("%s", "true" if prepack else "false"))
    for _ in range(2):   # a second run reads the same packed constant
        _check_against_both(session.run(feeds), model, feeds)


@requires_opencl
def test_prepacked_weights_opencl():
    """The OpenCL backend reads the packed constant (uploaded once, as every constant):
    its GEMM loads Wᵀ's rows as vectors; the same numbers as numpy, nothing on the host."""
    model, feeds, _ = fc_model()
    _check_opencl(model, feeds, "kernel.matmul")
    session = Session(import_onnx(model), backend="opencl", poison=True)
    session.run(feeds)
    (matmul,) = [op for (op, *_), launches in session.last_plan.executor.launches.items()
                 if op.name == "kernel.matmul"]
    assert matmul.config()["transB"] == 0 and matmul.ins[1].op.name == "buffer.constant"


# -- every step of the table, as an epilogue -----------------------------------------------------

def _every_step_model():
    """One MatMul by the identity per float step of the STEPS table (binary steps with a
    second, per-column operand), each followed by that step alone: every product has one
    reader, so each chain folds. Inputs within every step's domain (0.1..0.9)."""
    from palimpsest.dialects.graph.naming import GRAPH_TO_ONNX
    from palimpsest.dialects.kernel_elementwise import STEPS

    rng = np.random.default_rng(15)
    x = rng.uniform(0.1, 0.9, (4, 16)).astype(np.float32)
    constants = {"k": np.eye(16, dtype=np.float32),
                 "q": rng.uniform(0.5, 1.5, 16).astype(np.float32)}
    nodes, outputs = [], []
    for name, (form, kind, _) in STEPS.items():
        if form not in ("unary", "binary", "variadic") or name.startswith("graph.bitwise"):
            continue
        op = GRAPH_TO_ONNX[name]
        short = name[6:]
        nodes.append(("MatMul", ["x", "k"], f"p_{short}", {}))
        ins = [f"p_{short}"] + (["q"] if form != "unary" else [])
        nodes.append((op, ins, f"y_{short}", {}))
        outputs.append(f"y_{short}")
    graph = helper.make_graph(
        [helper.make_node(op, ins, [out], **attrs) for op, ins, out, attrs in nodes], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(a, n) for n, a in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    return model, {"x": x}, len(outputs)


def test_every_step_folds_and_runs_numpy():
    model, feeds, count = _every_step_model()
    module = _lowered(model)
    folded = [op for op in _kernels(module, "kernel.matmul") if op.config()["epilogue"]]
    assert len(folded) == count and not _kernels(module, "kernel.elementwise")
    got = Session(import_onnx(model), poison=True).run(feeds)
    expected = _reference(model, feeds)
    for name, want in expected.items():
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5, err_msg=name)


@requires_opencl
def test_every_step_in_the_opencl_store():
    """Each step's OpenCL expression computes on the GEMM's vectors (a step whose
    expression takes no vectors fails the build), matching numpy, nothing on the host."""
    model, feeds, _ = _every_step_model()
    compare_backends(import_onnx(model), feeds, poison=True)
