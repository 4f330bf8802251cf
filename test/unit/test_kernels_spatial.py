"""kernel.conv_transpose (dialects/kernel_spatial.py) on the numpy and OpenCL backends:

1. the lowering: graph.conv_transpose becomes kernel.conv_transpose with its `cols`
   workspace (auto_pad, output_shape and output_padding folded into the pads), and what
   the kernel does not compute stays kernel.generic;
2. every ConvTranspose case of ONNX's node suite through the kernel level, weights as
   graph inputs and as constants, on numpy (poisoned) and on the OpenCL device (nothing
   on the host), against ONNX's expected outputs;
3. real-size shapes (OCR-detector upsampling, strided 3x3 with output_padding, grouped,
   depthwise, dilated, 1-D and 3-D, auto_pad, output_shape) against onnxruntime, with
   poisoning on.
"""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import onnx_node_cases as nc  # noqa: E402
from example_models import onnxruntime_run  # noqa: E402
from opencl_support import requires_opencl  # noqa: E402
from palimpsest.backends.binding import find_function  # noqa: E402
from palimpsest.backends.numpy import run_with_stats  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402
from palimpsest.passes.pass_manager import PassManager, parse_pipeline  # noqa: E402

POLICY = nc.load_policy()
CASES = nc.case_names({"ConvTranspose"})


def _lowered(model):
    module = import_onnx(model)
    PassManager(parse_pipeline("infer-shapes,default")).run(module)
    return module


def _kernels(module) -> list:
    return sorted(op.name for op in module.walk() if op.name.startswith("kernel."))


def _constant(model, feeds, keep: str):
    """Every graph input but `keep` as an initializer."""
    feeds = dict(feeds)
    for value in list(model.graph.input):
        if value.name != keep:
            model.graph.initializer.append(numpy_helper.from_array(feeds.pop(value.name),
                                                                   value.name))
            model.graph.input.remove(value)
    return model, feeds


def conv_transpose_model(x_shape, w_shape, bias: bool, attrs: dict, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) / np.sqrt(w_shape[0])).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")]
    ins = ["x", "w"]
    if bias:
        m = w_shape[1] * attrs.get("group", 1)
        inits.append(numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "b"))
        ins.append("b")
    graph = helper.make_graph(
        [helper.make_node("ConvTranspose", ins, ["y"], **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": x}


# -- 1. the lowering -----------------------------------------------------------------------------

def test_conv_transpose_lowers_to_its_kernel():
    model, _ = conv_transpose_model((1, 8, 10, 12), (8, 4, 3, 3), True,
                                    {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                     "output_padding": [1, 1]})
    module = _lowered(model)
    assert _kernels(module) == ["kernel.conv_transpose"]
    (op,) = [op for op in module.walk() if op.name == "kernel.conv_transpose"]
    config = op.config()
    # output_padding is a negative end pad: 2 * 9 + 3 - 1 - (1 - 1) = 20 rows
    assert list(config["pads"]) == [1, 1, 0, 0]
    assert [tuple(v.type.shape) for v in op.workspaces] == [(4 * 9, 10 * 12)]
    assert tuple(op.outs[0].type.shape) == (1, 4, 20, 24)


def test_conv_transpose_of_f16_runs_in_f32():
    """f16 runs as onnxruntime runs it: X cast to f32, the f32 kernel (W converted at
    compile time), the result cast back (test_f16_lowering.py has the numbers)."""
    model, _ = conv_transpose_model((1, 4, 5, 5), (4, 2, 2, 2), False, {"strides": [2, 2]})
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    w = model.graph.initializer[0]
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(
        numpy_helper.to_array(w).astype(np.float16), "w"))
    module = _lowered(model)
    assert _kernels(module) == ["kernel.conv_transpose", "kernel.generic", "kernel.generic"]
    assert [op.properties["to"].value for op in module.walk()
            if op.name == "kernel.generic"] == [1, 10]   # (graph.cast: to f32, to f16)


# -- 2. ONNX's node cases ------------------------------------------------------------------------

def _case(name, constants: bool):
    case = nc.load_case(name)
    reason = nc.skip_reason(case, POLICY)
    if reason is not None:
        pytest.skip(reason)
    model = onnx.load(str(nc.ensure_cache() / name / "model.onnx"))
    feeds = case.feeds
    if constants:
        model, feeds = _constant(model, feeds, case.node.input[0])
    module = _lowered(model)
    # (with constant weights, stride 1 becomes a conv: canonicalize_conv.py)
    kinds = {"kernel.conv_transpose", "kernel.conv2d"} if constants else {"kernel.conv_transpose"}
    assert len(set(_kernels(module)) & kinds) == 1 and "kernel.generic" not in _kernels(module)
    return case, module, feeds


@pytest.mark.parametrize("constants", [False, True], ids=["inputs", "constants"])
@pytest.mark.parametrize("name", CASES)
def test_node_case_on_numpy(name, constants):
    case, module, feeds = _case(name, constants)
    outputs, _ = run_with_stats(find_function(module, None), feeds, poison=True)
    nc.assert_results_match(case, [outputs[n] for n in case.node.output], POLICY)


@requires_opencl
@pytest.mark.parametrize("constants", [False, True], ids=["inputs", "constants"])
@pytest.mark.parametrize("name", CASES)
def test_node_case_on_opencl(name, constants):
    from palimpsest.backends.numpy.arena import RunStats
    from palimpsest.backends.opencl.executor import run

    case, module, feeds = _case(name, constants)
    stats = RunStats()
    outputs = run(find_function(module, None), feeds, poison=True, stats=stats)
    assert not stats.host_ops, f"ran on the host: {stats.host_ops}"
    nc.assert_results_match(case, [outputs[n] for n in case.node.output], POLICY)


# -- 3. real-size shapes against onnxruntime ----------------------------------------------------

REAL = {
    # PP-OCR detector heads: 2x2 stride-2 upsampling, every out cell hit once
    "ocr_head_up": ((1, 24, 160, 160), (24, 24, 2, 2), True, {"strides": [2, 2]}),
    "ocr_head_last": ((1, 24, 320, 320), (24, 1, 2, 2), True, {"strides": [2, 2]}),
    # kernel == stride (OpenCL's `_tiled`): a shifted last vector, channels not a multiple
    # of the block, batch 2, narrow rows, one column
    "tiled_odd": ((2, 5, 7, 21), (5, 11, 2, 2), False, {"strides": [2, 2]}),
    "tiled_3x2": ((1, 6, 5, 9), (6, 3, 3, 2), True, {"strides": [3, 2]}),
    "tiled_narrow": ((1, 4, 6, 3), (4, 9, 2, 4), True, {"strides": [2, 4]}),
    "tiled_one_column": ((1, 3, 4, 1), (3, 2, 2, 2), True, {"strides": [2, 2]}),
    # U-Net / decoder style: 3x3 stride 2, pads 1, output_padding 1 (overlapping taps)
    "decoder_3x3": ((1, 32, 40, 48), (32, 16, 3, 3), True,
                    {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
    "kernel4_stride2": ((2, 16, 24, 24), (16, 8, 4, 4), False,
                        {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "grouped": ((1, 32, 20, 20), (32, 4, 3, 3), True, {"group": 4, "strides": [2, 2]}),
    "depthwise": ((1, 16, 30, 30), (16, 1, 4, 4), True,
                  {"group": 16, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "dilated": ((1, 8, 17, 19), (8, 6, 3, 3), True,
                {"dilations": [2, 3], "strides": [1, 2], "pads": [2, 0, 1, 3]}),
    "stride_past_kernel": ((1, 6, 11, 13), (6, 5, 2, 3), True, {"strides": [3, 4]}),
    "same_upper": ((1, 8, 15, 17), (8, 4, 3, 3), True,
                   {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    "same_lower": ((1, 8, 15, 17), (8, 4, 3, 3), False,
                   {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    "valid_output_padding": ((1, 8, 9, 9), (8, 4, 3, 3), True,
                             {"strides": [3, 3], "auto_pad": "VALID",
                              "output_padding": [1, 2]}),
    "output_shape": ((1, 8, 12, 12), (8, 4, 3, 3), True,
                     {"strides": [2, 2], "output_shape": [25, 26]}),
    "audio_1d": ((2, 32, 200), (32, 16, 8), True, {"strides": [4], "pads": [2, 2]}),
    "volume_3d": ((1, 8, 6, 10, 12), (8, 4, 2, 2, 2), True, {"strides": [2, 2, 2]}),
    "volume_3d_overlap": ((1, 4, 5, 6, 7), (4, 3, 3, 3, 3), False,
                          {"strides": [2, 1, 2], "pads": [1, 0, 1, 1, 1, 0]}),
}


def _onnxruntime(model, feeds):
    """The model's first output, from onnxruntime."""
    pytest.importorskip("onnxruntime")
    return next(iter(onnxruntime_run(model, feeds).values()))


def _close(got, want):
    scale = max(float(np.max(np.abs(want))), 1.0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale)


@pytest.mark.parametrize("name", list(REAL))
def test_real_size_on_numpy_against_onnxruntime(name):
    from palimpsest.backends.numpy.session import Session

    model, feeds = conv_transpose_model(*REAL[name])
    want = _onnxruntime(model, feeds)
    assert _kernels(_lowered(model)) == ["kernel.conv_transpose"]
    session = Session(import_onnx(model), poison=True)
    _close(session.run(feeds)["y"], want)
    _close(session.run(feeds)["y"], want)   # the planned buffers again, poisoned between


@requires_opencl
@pytest.mark.parametrize("name", list(REAL))
def test_real_size_on_opencl_against_onnxruntime(name):
    from palimpsest.backends.numpy.session import Session

    model, feeds = conv_transpose_model(*REAL[name])
    want = _onnxruntime(model, feeds)
    session = Session(import_onnx(model), backend="opencl", poison=True)
    _close(session.run(feeds)["y"], want)
    assert not session.last_stats.run_stats.host_ops

