"""Quantized models against onnxruntime: QDQ-format conv and matmul (per-tensor and
per-channel, int8 and uint8), QLinear ops, the integer ops; and the planner's byte
counts of 1-byte tensors."""

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

RNG = np.random.default_rng(21)


def _model(nodes, inputs, outputs, inits, opset=21):
    graph = h.make_graph(nodes, "q", inputs, outputs,
                         initializer=[numpy_helper.from_array(np.asarray(a), n)
                                      for n, a in inits.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _check(model, feeds, atol=1e-5):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    # onnxruntime's QDQ fusions (1.2x) insert a QuantizeLinear whose types contradict
    # each other on the int8 model; its unoptimized graph is the reference
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    names = [o.name for o in model.graph.output]
    want = ort.InferenceSession(model.SerializeToString(), options).run(names, feeds)
    session = Session(import_onnx(model), poison=True)
    got = session.run(feeds)
    for name, expected in zip(names, want):
        assert got[name].dtype == expected.dtype
        np.testing.assert_allclose(got[name].astype(np.float64), expected.astype(np.float64),
                                   atol=atol, rtol=1e-5, err_msg=name)
    return session


@pytest.mark.parametrize("qtype", [np.int8, np.uint8])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qdq_conv_relu_matmul_matches_onnxruntime(qtype, per_channel):
    """x -> Q -> DQ -> Conv(DQ(w)) -> Relu -> Q -> DQ -> MatMul(DQ(w2)), as quantization
    tools write static QDQ models."""
    zero = 0 if qtype == np.int8 else 128
    w = RNG.integers(-100, 100, (8, 3, 3, 3)).astype(np.int8)
    w_scale = (RNG.uniform(0.001, 0.01, 8) if per_channel else np.array(0.004)).astype(
        np.float32)
    w_zero = np.zeros(w_scale.shape, np.int8)
    w2 = RNG.integers(-100, 100, (8 * 6 * 6, 10)).astype(np.int8)
    inits = {"s": np.array(0.02, np.float32), "z": np.array(zero, qtype), "w": w,
             "ws": w_scale, "wz": w_zero, "w2": w2, "w2s": np.array(0.003, np.float32),
             "w2z": np.array(0, np.int8), "shape": np.array([1, -1], np.int64)}
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             h.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             h.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
             h.make_node("Conv", ["xd", "wd"], ["c"]),
             h.make_node("Relu", ["c"], ["r"]),
             h.make_node("QuantizeLinear", ["r", "s", "z"], ["rq"]),
             h.make_node("DequantizeLinear", ["rq", "s", "z"], ["rd"]),
             h.make_node("Reshape", ["rd", "shape"], ["flat"]),
             h.make_node("DequantizeLinear", ["w2", "w2s", "w2z"], ["w2d"]),
             h.make_node("MatMul", ["flat", "w2d"], ["y"])]
    model = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8])],
                   [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    x = RNG.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)
    _check(model, {"x": x}, atol=1e-4)


def test_qlinear_conv_and_matmul_match_onnxruntime():
    inits = {"xs": np.array(0.05, np.float32), "xz": np.array(120, np.uint8),
             "w": RNG.integers(0, 255, (4, 2, 3, 3)).astype(np.uint8),
             "ws": np.array(0.01, np.float32), "wz": np.array(127, np.uint8),
             "ys": np.array(0.2, np.float32), "yz": np.array(100, np.uint8),
             "b": RNG.integers(-500, 500, 4).astype(np.int32),
             "m": RNG.integers(0, 255, (6, 5)).astype(np.uint8),
             "ms": np.array(0.02, np.float32), "mz": np.array(128, np.uint8),
             "os": np.array(0.5, np.float32), "oz": np.array(7, np.uint8)}
    nodes = [h.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                         ["c"], pads=[1, 1, 1, 1]),
             h.make_node("QLinearMatMul", ["c", "ys", "yz", "m", "ms", "mz", "os", "oz"],
                         ["y"])]
    model = _model(nodes, [h.make_tensor_value_info("x", T.UINT8, [1, 2, 4, 6])],
                   [h.make_tensor_value_info("y", T.UINT8, None)], inits)
    x = RNG.integers(0, 255, (1, 2, 4, 6)).astype(np.uint8)
    _check(model, {"x": x}, atol=1)   # one quantization step: rounding of x.5 ties


def test_integer_ops_and_dynamic_quantization_match_onnxruntime():
    inits = {"b": RNG.integers(0, 255, (5, 3)).astype(np.uint8),
             "bz": np.array(3, np.uint8)}
    nodes = [h.make_node("DynamicQuantizeLinear", ["x"], ["q", "qs", "qz"]),
             h.make_node("MatMulInteger", ["q", "b", "qz", "bz"], ["y"])]
    model = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [4, 5])],
                   [h.make_tensor_value_info("y", T.INT32, None),
                    h.make_tensor_value_info("qs", T.FLOAT, None)], inits)
    _check(model, {"x": RNG.uniform(-2, 3, (4, 5)).astype(np.float32)})


def test_int8_tensors_are_planned_as_one_byte_each():
    inits = {"s": np.array(0.1, np.float32), "z": np.array(0, np.int8)}
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             h.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    model = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [64, 1024])],
                   [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    session = _check(model, {"x": RNG.uniform(-5, 5, (64, 1024)).astype(np.float32)})
    pools = session.last_plan.pool_sizes
    # the int8 intermediate (64 KiB) is the only activation; the output is in the io pool
    assert pools["activations"] == 64 * 1024


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_dynamic_quantize_lstm_from_onnxruntime_quantizer(tmp_path, direction):
    """onnxruntime's quantize_dynamic turns an LSTM into com.microsoft's
    DynamicQuantizeLSTM (int8 W and R transposed, per-direction scales): it imports and
    matches onnxruntime, X and each step's hidden state quantized as onnxruntime does."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    dirs, hidden, size, steps, batch = (2 if direction == "bidirectional" else 1), 16, 8, 5, 2
    inits = {"W": RNG.normal(0, 0.3, (dirs, 4 * hidden, size)).astype(np.float32),
             "R": RNG.normal(0, 0.3, (dirs, 4 * hidden, hidden)).astype(np.float32),
             "B": RNG.normal(0, 0.1, (dirs, 8 * hidden)).astype(np.float32)}
    node = h.make_node("LSTM", ["x", "W", "R", "B"], ["y", "y_h", "y_c"],
                       hidden_size=hidden, direction=direction)
    model = _model([node], [h.make_tensor_value_info("x", T.FLOAT, [steps, batch, size])],
                   [h.make_tensor_value_info(n, T.FLOAT, None) for n in ("y", "y_h", "y_c")],
                   inits, opset=14)
    source, quantized = tmp_path / "lstm.onnx", tmp_path / "lstm.int8.onnx"
    onnx.save(model, source)
    quantization.quantize_dynamic(str(source), str(quantized),
                                  weight_type=quantization.QuantType.QInt8)
    model = onnx.load(quantized)
    assert [n.op_type for n in model.graph.node] == ["DynamicQuantizeLSTM"]
    _check(model, {"x": RNG.normal(0, 1, (steps, batch, size)).astype(np.float32)}, atol=1e-5)
