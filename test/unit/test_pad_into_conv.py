"""canonicalize_conv: a zero Pad of a conv's image alone becomes the conv's own padding
(EfficientNet's "same" padding as PyTorch exports it: a Pad before each conv, pads
computed from static shapes), against onnxruntime on both backends with poisoning.
What is kept as a Pad: test/lit/passes/canonicalize-pad-conv.pal."""

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

from opencl_support import requires_opencl  # noqa: E402


def _model(x_shape, w_shape, pad, group=1, opset=17, computed=False, **attrs):
    """x -> Pad(pad) -> Conv(W, B, attrs) -> swish; with `computed`, the pads come from
    x's shape through Shape, Gather, Sub and Concat (as PyTorch exports them)."""
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.uniform(-1, 1, w_shape).astype(np.float32), "W"),
             numpy_helper.from_array(rng.uniform(-1, 1, w_shape[0]).astype(np.float32), "B")]
    nodes = []
    if computed:   # the last pad: (x's last dim + 1) - x's last dim
        inits += [numpy_helper.from_array(np.array(pad[:-1], np.int64), "head"),
                  numpy_helper.from_array(np.array(-1, np.int64), "last"),
                  numpy_helper.from_array(np.array([pad[-1] + 1], np.int64), "extra"),
                  numpy_helper.from_array(np.array([1], np.int64), "one")]
        nodes += [h.make_node("Shape", ["x"], ["shape"]),
                  h.make_node("Gather", ["shape", "last"], ["width"], axis=0),
                  h.make_node("Unsqueeze", ["width", "zero_axis"], ["width1"]),
                  h.make_node("Add", ["width1", "extra"], ["wider"]),
                  h.make_node("Sub", ["wider", "width1"], ["diff"]),
                  h.make_node("Sub", ["diff", "one"], ["tail"]),
                  h.make_node("Concat", ["head", "tail"], ["pads"], axis=0)]
        inits.append(numpy_helper.from_array(np.array([0], np.int64), "zero_axis"))
    else:
        inits.append(numpy_helper.from_array(np.array(pad, np.int64), "pads"))
    inits.append(numpy_helper.from_array(np.array(0.0, np.float32), "zero"))
    nodes += [h.make_node("Pad", ["x", "pads", "zero"], ["padded"], mode="constant"),
              h.make_node("Conv", ["padded", "W", "B"], ["c"], group=group, **attrs),
              h.make_node("Sigmoid", ["c"], ["s"]), h.make_node("Mul", ["c", "s"], ["y"])]
    graph = h.make_graph(nodes, "pad_conv", [h.make_tensor_value_info("x", T.FLOAT, x_shape)],
                         [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8
    return model, {"x": rng.standard_normal(x_shape).astype(np.float32)}


CASES = {
    # TF's "same" at stride 2: nothing before, one after (EfficientNet's depthwise)
    "depthwise_same_stride_2": ((1, 16, 17, 17), (16, 1, 3, 3),
                                [0, 0, 0, 0, 0, 0, 1, 1], {"group": 16, "strides": [2, 2]}),
    "dense_with_own_pads": ((2, 3, 9, 7), (5, 3, 3, 3), [0, 0, 2, 0, 0, 0, 1, 3],
                            {"pads": [1, 0, 0, 1]}),
    "one_d": ((1, 4, 20), (6, 4, 5), [0, 0, 2, 0, 0, 2], {"dilations": [2]}),
}


def _pads_left(model) -> int:
    module = import_onnx(model)
    PassManager(parse_pipeline("infer-shapes,canonicalize")).run(module)
    return sum(op.name == "graph.pad" for op in module.walk())


def _check(model, feeds, backend):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    want = ort.InferenceSession(model.SerializeToString(), options).run(None, feeds)[0]
    got = Session(import_onnx(model), poison=True, backend=backend).run(feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", list(CASES))
def test_pad_becomes_the_convs_padding(case):
    x_shape, w_shape, pads, attrs = CASES[case]
    model, feeds = _model(x_shape, w_shape, pads, **attrs)
    assert _pads_left(model) == 0
    _check(model, feeds, "numpy")


def test_pads_computed_from_the_shape_fold_too():
    model, feeds = _model((1, 16, 17, 17), (16, 1, 3, 3), [0, 0, 0, 0, 0, 0, 1, 1],
                          group=16, strides=[2, 2], computed=True)
    assert _pads_left(model) == 0
    _check(model, feeds, "numpy")


@requires_opencl
@pytest.mark.parametrize("case", list(CASES))
def test_pad_into_conv_on_opencl(case):
    x_shape, w_shape, pads, attrs = CASES[case]
    _check(*_model(x_shape, w_shape, pads, **attrs), "opencl")
