"""The elementwise ops of ops_math.py against onnxruntime: as fused kernel.elementwise
steps in the planned pipeline (numpy and OpenCL), with broadcasting slopes, dynamic dims
and every integer width of the bitwise ops."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from palimpsest.backends.numpy.session import Session  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402
from palimpsest.passes.pass_manager import PassManager, parse_pipeline  # noqa: E402

from opencl_support import compare_backends, requires_opencl  # noqa: E402

RNG = np.random.default_rng(3)


def _model(nodes, inputs, outputs, inits=(), opset=22):
    graph = h.make_graph(nodes, "g", inputs, outputs,
                         initializer=[numpy_helper.from_array(a, n) for n, a in inits])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _ort(model, feeds):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options)
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def _conv_prelu(slope_shape, x_shape=(1, 3, 8, 8)):
    """conv -> PRelu (slope of `slope_shape`) -> Mish, as exporters write face detectors."""
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    slope = RNG.uniform(0.1, 0.3, slope_shape).astype(np.float32)
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("PRelu", ["c", "slope"], ["p"]),
             h.make_node("Mish", ["p"], ["y"])]
    dims = ["n" if d is None else d for d in x_shape]
    return _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, dims)],
                  [h.make_tensor_value_info("y", T.FLOAT, None)],
                  [("w", w), ("slope", slope)])


@pytest.mark.parametrize("slope_shape", [(4, 1, 1), (1,), (1, 4, 8, 8)])
def test_conv_prelu_mish_fuse_and_match_onnxruntime(slope_shape):
    model = _conv_prelu(slope_shape)
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    module = import_onnx(model)
    got = Session(module, poison=True).run({"x": x})
    np.testing.assert_allclose(got["y"], _ort(model, {"x": x})["y"], rtol=1e-5, atol=1e-6)
    lowered = import_onnx(model)
    PassManager(parse_pipeline("infer-shapes,bufferize,lower-to-kernels")).run(lowered)
    kernels = [op for op in lowered.walk() if op.name.startswith("kernel.")]
    # PRelu and Mish fold into the convolution as its epilogue (no buffer between them)
    convs = [op for op in kernels if op.name == "kernel.conv2d"]
    assert len(convs) == 1 and [a.value for a in convs[0].properties["epilogue"].value] == [
        "graph.prelu", "graph.mish"]
    assert not any(op.name == "kernel.elementwise" for op in kernels)
    assert not any(op.name == "kernel.generic" for op in kernels)


def test_prelu_with_a_dynamic_batch():
    model = _conv_prelu((4, 1, 1), x_shape=(None, 3, 8, 8))
    session = Session(import_onnx(model), poison=True)
    for batch in (1, 3):
        x = RNG.standard_normal((batch, 3, 8, 8)).astype(np.float32)
        np.testing.assert_allclose(session.run({"x": x})["y"], _ort(model, {"x": x})["y"],
                                   rtol=1e-5, atol=1e-6)


UNARY = [("Acos", {}, (-0.9, 0.9)), ("Acosh", {}, (1.1, 4)), ("Asin", {}, (-0.9, 0.9)),
         ("Asinh", {}, (-3, 3)), ("Atan", {}, (-3, 3)), ("Atanh", {}, (-0.9, 0.9)),
         ("Cosh", {}, (-3, 3)), ("Sinh", {}, (-3, 3)), ("Tan", {}, (-1.2, 1.2)),
         ("Celu", {"alpha": 0.7}, (-3, 3)), ("Mish", {}, (-30, 30)),
         ("ThresholdedRelu", {"alpha": 0.5}, (-3, 3)),
         ("Shrink", {"bias": 0.25, "lambd": 0.75}, (-3, 3))]


@pytest.mark.parametrize("op,attrs,span", UNARY, ids=[u[0] for u in UNARY])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_in_a_fused_chain_matches_onnxruntime(op, attrs, span, dtype):
    """Each op as the third step of a fused chain, in f32 and f64 (onnxruntime has no
    f64 kernels for most of them: its f32 result is the reference for both)."""
    def model(code):
        nodes = [h.make_node("Neg", ["x"], ["a"]), h.make_node("Neg", ["a"], ["b"]),
                 h.make_node(op, ["b"], ["y"], **attrs)]
        return _model(nodes, [h.make_tensor_value_info("x", code, [2, 5, 7])],
                      [h.make_tensor_value_info("y", code, None)])

    x = RNG.uniform(*span, (2, 5, 7)).astype(np.float32)
    want = _ort(model(T.FLOAT), {"x": x})["y"]
    code = T.FLOAT if dtype == np.float32 else T.DOUBLE
    got = Session(import_onnx(model(code)), poison=True).run({"x": x.astype(dtype)})["y"]
    assert got.dtype == dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_swish_matches_its_definition():
    """Swish (opset 24) is newer than onnxruntime's kernels: x * sigmoid(alpha * x)."""
    model = _model([h.make_node("Swish", ["x"], ["y"], alpha=1.5)],
                   [h.make_tensor_value_info("x", T.FLOAT, [16])],
                   [h.make_tensor_value_info("y", T.FLOAT, None)], opset=24)
    x = np.linspace(-6, 6, 16, dtype=np.float32)
    got = Session(import_onnx(model), poison=True).run({"x": x})["y"]
    np.testing.assert_allclose(got, x / (1 + np.exp(-1.5 * x)), rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32,
                                   np.uint32, np.int64, np.uint64])
def test_bitwise_ops_every_integer_width(dtype):
    code = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes = [h.make_node("BitwiseAnd", ["a", "b"], ["t"]),
             h.make_node("BitwiseXor", ["t", "a"], ["u"]),
             h.make_node("BitwiseNot", ["u"], ["y"])]
    model = _model(nodes, [h.make_tensor_value_info("a", code, [3, 4]),
                           h.make_tensor_value_info("b", code, [4])],
                   [h.make_tensor_value_info("y", code, None)])
    info = np.iinfo(dtype)
    a = RNG.integers(info.min, info.max, (3, 4), dtype=dtype, endpoint=True)
    b = RNG.integers(info.min, info.max, (4,), dtype=dtype, endpoint=True)
    got = Session(import_onnx(model), poison=True).run({"a": a, "b": b})["y"]
    np.testing.assert_array_equal(got, _ort(model, {"a": a, "b": b})["y"])


def test_bad_bit_shift_direction_is_a_diagnostic():
    from palimpsest.ir.diagnostics import DiagnosticError

    model = _model([h.make_node("BitShift", ["a", "a"], ["y"], direction="UP")],
                   [h.make_tensor_value_info("a", T.UINT8, [3])],
                   [h.make_tensor_value_info("y", T.UINT8, None)])
    with pytest.raises(DiagnosticError, match="direction.*'LEFT', 'RIGHT'"):
        Session(import_onnx(model))


@requires_opencl
def test_fused_new_steps_on_opencl():
    model = _conv_prelu((4, 1, 1))
    nodes = list(model.graph.node) + [
        h.make_node("Celu", ["y"], ["z"], alpha=0.5),
        h.make_node("ThresholdedRelu", ["z"], ["t"], alpha=0.1),
        h.make_node("Shrink", ["t"], ["s"], lambd=0.2, bias=0.1),
        h.make_node("Atan", ["s"], ["out"])]
    model = _model(nodes, list(model.graph.input),
                   [h.make_tensor_value_info("out", T.FLOAT, None)],
                   [(i.name, numpy_helper.to_array(i)) for i in model.graph.initializer])
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    _, actual, _ = compare_backends(import_onnx(model), {"x": x})
    np.testing.assert_allclose(actual["out"], _ort(model, {"x": x})["out"], rtol=1e-4,
                               atol=1e-5)
