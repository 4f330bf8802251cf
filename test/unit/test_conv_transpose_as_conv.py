"""canonicalize_conv: a ConvTranspose of stride 1 becomes a Conv of the flipped kernel
(per group, channels swapped) with pads d (k - 1) - p; against onnxruntime on both
backends. Strides, output padding, output_shape, pads past the kernel's reach and 3-D kernels stay
ConvTranspose."""

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


def _model(x_shape, w_shape, bias=True, **attrs):
    rng = np.random.default_rng(9)
    inits = [numpy_helper.from_array(rng.uniform(-1, 1, w_shape).astype(np.float32), "W")]
    ins = ["x", "W"]
    if bias:
        inits.append(numpy_helper.from_array(
            rng.uniform(-1, 1, w_shape[1] * attrs.get("group", 1)).astype(np.float32), "B"))
        ins.append("B")
    node = h.make_node("ConvTranspose", ins, ["y"], **attrs)
    graph = h.make_graph([node], "deconv", [h.make_tensor_value_info("x", T.FLOAT, x_shape)],
                         [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": rng.standard_normal(x_shape).astype(np.float32)}


def _kinds(model, pipeline="infer-shapes,canonicalize", prefix="graph.conv"):
    module = import_onnx(model)
    PassManager(parse_pipeline(pipeline)).run(module)
    return sorted(op.name for op in module.walk() if op.name.startswith(prefix))


def _check(model, feeds, backend="numpy"):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    want = ort.InferenceSession(model.SerializeToString(), options).run(None, feeds)[0]
    got = Session(import_onnx(model), poison=True, backend=backend).run(feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


CONVERTED = {
    "pointwise": ((1, 24, 1, 33), (24, 16, 1, 1), {}),
    "depthwise_dilated": ((1, 16, 11, 33), (16, 1, 3, 3),
                          {"group": 16, "dilations": [5, 1], "pads": [10, 1, 10, 1]}),
    "grouped_asymmetric_pads": ((2, 6, 7, 5), (6, 2, 3, 2),
                                {"group": 3, "pads": [0, 1, 2, 0]}),
    "full": ((1, 3, 4, 4), (3, 2, 3, 3), {}),
    "one_d_no_bias": ((1, 4, 9), (4, 3, 5), {"pads": [1, 3], "bias": False}),
}


@pytest.mark.parametrize("case", list(CONVERTED))
def test_stride_one_becomes_conv(case):
    x_shape, w_shape, attrs = CONVERTED[case]
    attrs = dict(attrs)
    model, feeds = _model(x_shape, w_shape, bias=attrs.pop("bias", True), **attrs)
    assert _kinds(model) == ["graph.conv"]
    assert _kinds(model, "infer-shapes,default", "kernel.") == ["kernel.conv2d"]
    _check(model, feeds)


@requires_opencl
@pytest.mark.parametrize("case", ["pointwise", "depthwise_dilated", "grouped_asymmetric_pads"])
def test_stride_one_as_conv_on_opencl(case):
    x_shape, w_shape, attrs = CONVERTED[case]
    _check(*_model(x_shape, w_shape, **attrs), backend="opencl")


@pytest.mark.parametrize("attrs", [{"strides": [2, 2]},
                                   {"strides": [2, 2], "output_padding": [1, 1]},
                                   {"output_shape": [6, 6]},
                                   {"pads": [3, 0, 0, 0]},      # past d (k - 1) = 2: a crop
                                   {"three_d": True}],          # (no 3-D conv kernel)
                         ids=["stride2", "output_padding", "output_shape", "pads_past_reach",
                              "three_d"])
def test_other_conv_transposes_stay(attrs):
    model, feeds = _model((1, 2, 3, 4, 3), (2, 2, 2, 3, 2)) if attrs.get("three_d") else \
        _model((1, 3, 4, 4), (3, 2, 3, 3), **attrs)
    assert _kinds(model) == ["graph.conv_transpose"]
    _check(model, feeds)
