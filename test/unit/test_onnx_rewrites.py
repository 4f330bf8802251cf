"""The ONNX-level rewrites before import (dialects/graph/onnx_rewrites.py): onnxruntime's
FusedConv and FusedMatMul, and SplitToSequence read by SequenceAt, each against
onnxruntime running the original node, through a Session with poisoning on."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from example_models import onnxruntime_run  # noqa: E402
from palimpsest.backends.numpy.session import Session  # noqa: E402
from palimpsest.dialects.graph.from_onnx import OnnxImportError, import_onnx  # noqa: E402

RNG = np.random.default_rng(7)


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = h.make_graph(nodes, "g", inputs, outputs,
                         [numpy_helper.from_array(a, n) for n, a in initializers])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset),
                                              h.make_opsetid("com.microsoft", 1)])


def _matches(model, feeds, rtol=1e-5, atol=1e-6):
    want = onnxruntime_run(model, feeds)
    got = Session(import_onnx(model), poison=True).run(feeds)
    for name, expected in want.items():
        np.testing.assert_allclose(got[name], expected, rtol=rtol, atol=atol, err_msg=name)


def _ops(model) -> list:
    return [op.name for op in import_onnx(model).walk() if op.name.startswith("graph.")]


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("activation, params", [
    (None, []), ("Relu", []), ("Tanh", []), ("Sigmoid", []), ("LeakyRelu", [0.2]),
    ("HardSigmoid", [0.3, 0.4]), ("Clip", [-0.5, 0.7])])
@pytest.mark.parametrize("summed", [False, True], ids=["", "with_Z"])
def test_fused_conv_is_conv_then_its_activation(activation, params, summed):
    w, b = _f32(4, 3, 3, 3), _f32(4)
    inputs = ["x", "w", "b"] + (["z"] if summed else [])
    attrs = {"pads": [1, 1, 1, 1], "kernel_shape": [3, 3]}
    if activation:
        attrs["activation"] = activation
    if params:
        attrs["activation_params"] = params
    node = h.make_node("FusedConv", inputs, ["y"], domain="com.microsoft", name="fc", **attrs)
    value_inputs = [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 6, 6])]
    if summed:
        value_inputs.append(h.make_tensor_value_info("z", T.FLOAT, [1, 4, 6, 6]))
    model = _model([node], value_inputs, [h.make_tensor_value_info("y", T.FLOAT, None)],
                   [("w", w), ("b", b)])
    feeds = {"x": _f32(1, 3, 6, 6)}
    if summed:
        feeds["z"] = _f32(1, 4, 6, 6)
    _matches(model, feeds)
    ops = _ops(model)
    assert "graph.conv" in ops and ("graph.add" in ops) == summed


@pytest.mark.parametrize("trans_a, trans_b, alpha", [
    (0, 0, 1.0), (1, 0, 0.5), (0, 1, 2.0 ** -10), (1, 1, 3.0)])
def test_fused_matmul_is_transposes_matmul_and_scale(trans_a, trans_b, alpha):
    a_shape = (2, 5, 4) if trans_a else (2, 4, 5)
    b_shape = (6, 5) if trans_b else (5, 6)
    node = h.make_node("FusedMatMul", ["a", "b"], ["y"], domain="com.microsoft",
                       transA=trans_a, transB=trans_b, alpha=alpha)
    model = _model([node], [h.make_tensor_value_info("a", T.FLOAT, list(a_shape))],
                   [h.make_tensor_value_info("y", T.FLOAT, None)], [("b", _f32(*b_shape))])
    _matches(model, {"a": _f32(*a_shape)})
    assert "graph.matmul" in _ops(model)


def test_fused_matmul_moving_batch_axes_is_refused_in_one_line():
    node = h.make_node("FusedMatMul", ["a", "b"], ["y"], domain="com.microsoft",
                       transBatchA=1, name="fm")
    model = _model([node], [h.make_tensor_value_info("a", T.FLOAT, [2, 4, 5])],
                   [h.make_tensor_value_info("y", T.FLOAT, None)], [("b", _f32(5, 6))])
    with pytest.raises(OnnxImportError) as error:
        import_onnx(model)
    assert "fm" in str(error.value) and "com.microsoft" in str(error.value)
    assert "\n" not in str(error.value)


def _sequence_model(split, positions, keepdims=1, axis=1):
    inputs = ["x"] + (["split"] if split is not None else [])
    nodes = [h.make_node("SplitToSequence", inputs, ["seq"], axis=axis, keepdims=keepdims)]
    initializers = [("split", np.array(split, np.int64))] if split is not None else []
    outputs = []
    for index, position in enumerate(positions):
        initializers.append((f"p{index}", np.array(position, np.int64)))
        nodes.append(h.make_node("SequenceAt", ["seq", f"p{index}"], [f"y{index}"]))
        outputs.append(h.make_tensor_value_info(f"y{index}", T.FLOAT, None))
    return _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [2, 7, 3])], outputs,
                  initializers)


@pytest.mark.parametrize("split, positions, keepdims", [
    ([2, 4, 1], [0, 2, 1, -1, -3], 1),        # sizes given, negative positions
    (None, [0, 3, 6, -1], 1),                   # one element per chunk, kept
    (None, [0, 5, -1], 0),                      # ... and squeezed
])
def test_split_to_sequence_read_at_constant_positions_is_slices(split, positions, keepdims):
    model = _sequence_model(split, positions, keepdims)
    _matches(model, {"x": _f32(2, 7, 3)}, rtol=0, atol=0)
    ops = _ops(model)
    assert "graph.slice" in ops and not any("sequence" in op for op in ops)
    assert ("graph.squeeze" in ops) == (split is None and not keepdims)


def test_a_sequence_read_otherwise_is_refused_in_one_line():
    nodes = [h.make_node("SplitToSequence", ["x"], ["seq"], axis=0),
             h.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0, name="cat")]
    model = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                   [h.make_tensor_value_info("y", T.FLOAT, None)])
    with pytest.raises(OnnxImportError) as error:
        import_onnx(model)
    text = str(error.value)
    assert "SplitToSequence" in text and "not supported" in text and "\n" not in text


def test_rewrites_reach_subgraphs_and_leave_the_model_unchanged():
    inner = h.make_graph(
        [h.make_node("FusedConv", ["x", "w"], ["y"], domain="com.microsoft",
                     activation="Relu", kernel_shape=[1, 1])],
        "then", [], [h.make_tensor_value_info("y", T.FLOAT, None)])
    other = h.make_graph([h.make_node("Identity", ["x"], ["z"])], "else", [],
                         [h.make_tensor_value_info("z", T.FLOAT, None)])
    node = h.make_node("If", ["c"], ["out"], then_branch=inner, else_branch=other)
    model = _model([node], [h.make_tensor_value_info("c", T.BOOL, []),
                            h.make_tensor_value_info("x", T.FLOAT, [1, 2, 3, 3])],
                   [h.make_tensor_value_info("out", T.FLOAT, None)],
                   [("w", _f32(2, 2, 1, 1))])
    before = model.SerializeToString()
    for flag in (True, False):
        _matches(model, {"c": np.array(flag), "x": _f32(1, 2, 3, 3)})
    assert model.SerializeToString() == before
