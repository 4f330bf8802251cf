"""Fused epilogues (dialects/kernel_elementwise.py, `Epilogue`): `lower-to-kernels` folds
the bias add, activation and residual add that follow a conv, matmul or gemm into that
kernel when the product has no other reader. Each case: the fold happened (no
`kernel.elementwise` left, the steps on the kernel), the numpy backend with poisoning
matches the graph-level reference, and the OpenCL backend matches numpy; the arena is
smaller than without the fold."""

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
from opencl_support import compare_backends, requires_opencl  # noqa: E402

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
               residual: bool = True):
    """Conv (with B) -> activation -> (+ X, the residual, when shapes allow)."""
    rng = np.random.default_rng(7)
    c, m = 8, 8
    x = rng.standard_normal((1, c, 12, 12)).astype(np.float32)
    pad = kernel // 2
    constants = {"w": rng.standard_normal((m, c // group, kernel, kernel)).astype(np.float32)
                 * 0.3, "b": rng.standard_normal(m).astype(np.float32)}
    nodes = [("Conv", ["x", "w", "b"], "c",
              {"pads": [pad] * 4, "group": group, "strides": [stride, stride]}),
             _activation(activation, "c", "a", m, constants)]
    if residual and stride == 1:
        nodes.append(("Add", ["a", "x"], "y", {}))
    else:
        nodes[-1] = nodes[-1][:2] + ("y",) + nodes[-1][3:]
    return _model(nodes, {"x": x}, constants), {"x": x}


def matmul_model(activation: str, gemm: bool = False):
    """MatMul -> + bias -> activation (or Gemm with C -> activation)."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((6, 16)).astype(np.float32)
    constants = {"k": rng.standard_normal((16, 8)).astype(np.float32) * 0.3,
                 "bias": rng.standard_normal(8).astype(np.float32)}
    if gemm:
        nodes = [("Gemm", ["x", "k", "bias"], "p", {"alpha": 0.5})]
    else:
        nodes = [("MatMul", ["x", "k"], "m", {}), ("Add", ["m", "bias"], "p", {})]
    nodes.append(_activation(activation, "p", "y", 8, constants, per_row=True))
    return _model(nodes, {"x": x}, constants), {"x": x}


def _reference(model, feeds):
    graph = import_onnx(model)
    PassManager(parse_pipeline("infer-shapes")).run(graph)
    return run_graph(find_function(graph, None), feeds)


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
    expected = _reference(model, feeds)
    session = Session(import_onnx(model), poison=True)
    got = session.run(feeds)
    np.testing.assert_allclose(got["y"], expected["y"], rtol=1e-4, atol=1e-5)
    return session


CONV_CASES = [(a, 1, 3, 1) for a in ACTIVATIONS] + [
    ("relu", 8, 3, 1),          # depthwise
    ("hard_swish", 8, 3, 2),    # depthwise, strided
    ("relu6", 2, 3, 1),         # grouped, not depthwise
    ("leaky_relu", 1, 1, 1),    # 1x1: the image is the matrix
    ("sigmoid", 1, 3, 2),       # strided
]


@pytest.mark.parametrize("activation,group,kernel,stride", CONV_CASES)
def test_conv_epilogue_numpy(activation, group, kernel, stride):
    model, feeds = conv_model(activation, group, kernel, stride)
    steps = [STEP_OF[activation]] + (["graph.add"] if stride == 1 else [])
    _check_fold(model, "kernel.conv2d", steps)
    _check_numpy(model, feeds)


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("gemm", [False, True])
def test_matmul_epilogue_numpy(activation, gemm):
    model, feeds = matmul_model(activation, gemm)
    steps = ([] if gemm else ["graph.add"]) + [STEP_OF[activation]]
    _check_fold(model, "kernel.matmul", steps)
    _check_numpy(model, feeds)


@requires_opencl
@pytest.mark.parametrize("activation,group,kernel,stride", CONV_CASES)
def test_conv_epilogue_opencl(activation, group, kernel, stride):
    model, feeds = conv_model(activation, group, kernel, stride)
    expected = _reference(model, feeds)
    numpy_out, _, stats = compare_backends(import_onnx(model), feeds, poison=True)
    np.testing.assert_allclose(numpy_out["y"], expected["y"], rtol=1e-4, atol=1e-5)


@requires_opencl
@pytest.mark.parametrize("activation", ["relu", "prelu", "gelu", "hard_swish", "relu6"])
@pytest.mark.parametrize("gemm", [False, True])
def test_matmul_epilogue_opencl(activation, gemm):
    model, feeds = matmul_model(activation, gemm)
    expected = _reference(model, feeds)
    numpy_out, _, _ = compare_backends(import_onnx(model), feeds, poison=True)
    np.testing.assert_allclose(numpy_out["y"], expected["y"], rtol=1e-4, atol=1e-5)


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
