"""Models at old opsets import in the form of each op's latest opset
(dialects/graph/onnx_opsets.py) and match onnxruntime, through a Session at the default
planned level with poisoning on."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from palimpsest.backends.numpy.session import Session  # noqa: E402
from palimpsest.dialects.graph.from_onnx import OnnxImportError, import_onnx  # noqa: E402

RNG = np.random.default_rng(7)
X = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)


def _model(node, opset, inits=(), x_shape=(2, 3, 4, 5), outputs=("y",)):
    graph = h.make_graph(
        [node], "g", [h.make_tensor_value_info("x", T.FLOAT, list(x_shape))],
        [h.make_tensor_value_info(o, T.INT64 if o == "i" else T.FLOAT, None)
         for o in outputs],
        initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 7
    return model


def _check(model, x=X):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    names = [o.name for o in model.graph.output]
    want = ort.InferenceSession(model.SerializeToString(), options).run(names, {"x": x})
    got = Session(import_onnx(model), poison=True).run({"x": x})
    for name, expected in zip(names, want):
        assert got[name].dtype == expected.dtype, name
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-6, err_msg=name)


SCALES = np.array([1, 1, 2, 3], np.float32)

CASES = {
    "pad-2-value": (h.make_node("Pad", ["x"], ["y"], pads=[0, 0, 1, 1, 0, 0, 1, 2], value=2.5),
                    2, ()),
    "pad-10-reflect": (h.make_node("Pad", ["x"], ["y"], pads=[0, 0, 1, 1, 0, 0, 1, 1],
                                   mode="reflect"), 10, ()),
    "upsample-7-nearest": (h.make_node("Upsample", ["x"], ["y"], scales=[1.0, 1.0, 2.0, 2.0]),
                           7, ()),
    "upsample-9-linear": (h.make_node("Upsample", ["x", "s"], ["y"], mode="linear"), 9,
                          [("s", SCALES)]),
    "resize-10-nearest": (h.make_node("Resize", ["x", "s"], ["y"], mode="nearest"), 10,
                          [("s", SCALES)]),
    "resize-10-linear": (h.make_node("Resize", ["x", "s"], ["y"], mode="linear"), 10,
                         [("s", np.array([1, 1, 1.5, 2.5], np.float32))]),
    "batchnorm-7-spatial": (h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"],
                                        spatial=1), 7,
                            [(n, np.linspace(0.5, 1.5, 3, dtype=np.float32)) for n in "sbmv"]),
    "clip-6-attributes": (h.make_node("Clip", ["x"], ["y"], min=-0.2, max=0.6), 6, ()),
    "split-11-attribute": (h.make_node("Split", ["x"], ["y", "z"], axis=2, split=[1, 3]), 11,
                           ()),
    "reducesum-11-axes": (h.make_node("ReduceSum", ["x"], ["y"], axes=[1], keepdims=0), 11, ()),
    "slice-9-attributes": (h.make_node("Slice", ["x"], ["y"], starts=[1], ends=[3], axes=[2]),
                           9, ()),
    "softmax-11-axis-2": (h.make_node("Softmax", ["x"], ["y"], axis=2), 11, ()),
    "softmax-11-default-axis": (h.make_node("Softmax", ["x"], ["y"]), 11, ()),
    "logsoftmax-12-axis-1": (h.make_node("LogSoftmax", ["x"], ["y"], axis=1), 12, ()),
    "hardmax-11-axis-2": (h.make_node("Hardmax", ["x"], ["y"], axis=2), 11, ()),
    "topk-1-attribute": (h.make_node("TopK", ["x"], ["y", "i"], k=2), 9, ()),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_old_opset_matches_onnxruntime(name):
    node, opset, inits = CASES[name]
    outputs = [o for o in node.output if o]
    _check(_model(node, opset, inits, outputs=outputs))


def test_omitted_output_before_a_used_one():
    """Split's first output omitted, the second used: the op keeps an unused result.
    (onnxruntime 1.2x crashes on this model, so the expected value is numpy's.)"""
    node = h.make_node("Split", ["x"], ["", "z"], axis=2, split=[1, 3])
    got = Session(import_onnx(_model(node, 11, outputs=["z"])), poison=True).run({"x": X})
    np.testing.assert_array_equal(got["z"], X[:, :, 1:])


def test_legacy_broadcast_with_axis_is_refused_naming_the_opset():
    node = h.make_node("Add", ["x", "b"], ["y"], broadcast=1, axis=1)
    model = _model(node, 6, [("b", np.ones(3, np.float32))])
    with pytest.raises(OnnxImportError, match=r"\(Add, opset 6\).*axis"):
        import_onnx(model)


def test_unsupported_op_names_op_opset_and_node():
    node = h.make_node("NoSuchOp", ["x"], ["y"], name="mystery")
    with pytest.raises(OnnxImportError, match=r"node 'mystery' \(NoSuchOp, opset 13\): "
                                              r"this operator is not supported"):
        import_onnx(_model(node, 13))


def test_other_domain_is_refused_naming_it():
    node = h.make_node("QOrderedMatMul", ["x"], ["y"], domain="com.microsoft", name="fc")
    graph = h.make_graph([node], "g", [h.make_tensor_value_info("x", T.FLOAT, [1])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13),
                                               h.make_opsetid("com.microsoft", 1)])
    with pytest.raises(OnnxImportError) as error:
        import_onnx(model)
    message = str(error.value)
    assert "node 'fc' (com.microsoft.QOrderedMatMul, opset 1)" in message
    assert "of domain 'com.microsoft' only DynamicQuantizeLSTM, MatMulIntegerToFloat, FusedConv " \
        "(activation" in message
    assert "\n" not in message


def test_rule_wins_where_onnx_shape_inference_counts_a_window_in_the_padding():
    """ONNX's inference says 6 rows for a ceil_mode window starting in the end padding;
    the kernels (and onnxruntime) drop that window: 5."""
    node = h.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2],
                       pads=[1, 1, 1, 1], ceil_mode=1)
    model = _model(node, 17, x_shape=(1, 1, 9, 9))
    x = RNG.standard_normal((1, 1, 9, 9)).astype(np.float32)
    got = Session(import_onnx(model), poison=True).run({"x": x})["y"]
    assert got.shape == (1, 1, 5, 5)


def test_a_shape_rule_refusal_says_why():
    node = h.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)
    model = _model(node, 21, [("s", np.ones(3, np.float32)), ("b", np.ones(3, np.float32))])
    with pytest.raises(OnnxImportError, match="3 channels do not split into 2 groups"):
        import_onnx(model)
