"""Normalizations, losses, pooling and spatial ops (the softmax family before opset 13 in
ops_nn.py, ops_loss.py, ops_spatial.py, Upsample) through import and a planned Session,
against onnxruntime: the opset versions, dtypes, dynamic dims and attribute combinations
ONNX's node suite leaves out. Where onnxruntime has no kernel or departs from ONNX's
semantics the check is against ONNX's reference evaluator or the spec's formula, and each
such place says why. Invalid attributes and shapes must be one-line diagnostics."""

from __future__ import annotations

import re

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import helper as h  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from palimpsest.backends.numpy.session import Session  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402
from palimpsest.dialects.graph.reference import KERNELS  # noqa: E402
from palimpsest.passes.pass_manager import PassManager, parse_pipeline  # noqa: E402

RNG = np.random.default_rng(11)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _i64(*values):
    return np.array(values, np.int64)


def _model(op, inputs, attrs=None, *, opset, outputs=1, constants=(), dynamic=()):
    """A one-node model; `inputs` are (name, array) pairs ("" for an absent input), those
    named in `constants` become initializers, and the dims at the positions in `dynamic`
    are symbolic in every graph input."""
    node = h.make_node(op, [n for n, _ in inputs], [f"y{i}" for i in range(outputs)],
                       **(attrs or {}))
    graph_inputs, initializers = [], []
    for name, array in inputs:
        if not name:
            continue
        if name in constants:
            initializers.append(numpy_helper.from_array(array, name))
            continue
        dims = [f"{name}{i}" if i in dynamic else d for i, d in enumerate(array.shape)]
        graph_inputs.append(h.make_tensor_value_info(
            name, h.np_dtype_to_tensor_dtype(array.dtype), dims))
    graph = h.make_graph([node], "g", graph_inputs,
                         [h.make_value_info(f"y{i}", onnx.TypeProto()) for i in range(outputs)],
                         initializer=initializers)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8
    feeds = {n: a for n, a in inputs if n and n not in constants}
    return model, feeds


def _ort(model, feeds):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options)
    return session.run(None, feeds)


def _onnx_reference(model, feeds):
    return ReferenceEvaluator(model).run(None, feeds)


def _palimpsest(model, feeds):
    got = Session(import_onnx(model), poison=True).run(feeds)
    return [got[o.name] for o in model.graph.output]


def _assert_close(got, expected, rtol, atol):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, g.shape, e.dtype, e.shape)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, equal_nan=True)


def check(op, inputs, attrs=None, *, opset, against=_ort, rtol=1e-4, atol=1e-5, **kw):
    model, feeds = _model(op, inputs, attrs, opset=opset, **kw)
    _assert_close(_palimpsest(model, feeds), against(model, feeds), rtol, atol)


# -- Softmax, LogSoftmax, Hardmax: per axis (13+) and coerced to 2-D (before 13) ----------


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset, axis", [(opset, axis) for opset in (1, 11, 13)
                                         for axis in (None, 0, 2, 3, -1)
                                         if opset > 1 or axis != -1])   # negative from 11
def test_softmax_family_by_opset(op, opset, axis):
    check(op, [("x", _f32(2, 3, 4, 5))], {} if axis is None else {"axis": axis}, opset=opset)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [11, 13])
def test_softmax_family_with_dynamic_dims(op, opset):
    model, _ = _model(op, [("x", _f32(2, 3, 4))], {"axis": 1}, opset=opset, dynamic=(0, 2))
    session = Session(import_onnx(model), poison=True)
    for shape in [(1, 3, 2), (4, 3, 5)]:
        x = _f32(*shape)
        np.testing.assert_allclose(session.run({"x": x})["y0"], _ort(model, {"x": x})[0],
                                   rtol=1e-5, atol=1e-6)


def test_hardmax_picks_the_first_maximum():
    ties = np.array([[1, 3, 3, 0], [2, 2, 1, 2]], np.float32)
    check("Hardmax", [("x", ties)], opset=11)
    check("Hardmax", [("x", ties)], {"axis": 0}, opset=13)


@pytest.mark.parametrize("opset, axis, kernel", [(11, 1, "kernel.generic"),
                                                 (11, 3, "kernel.softmax"),
                                                 (13, 1, "kernel.softmax")])
def test_coerced_softmax_lowers_to_a_generic_kernel(opset, axis, kernel):
    """kernel.softmax normalizes along one axis: a 2-D coercion over several dims is not
    one axis and stays a kernel.generic running the reference."""
    model, _ = _model("Softmax", [("x", _f32(2, 3, 4, 5))], {"axis": axis}, opset=opset)
    module = import_onnx(model)
    PassManager(parse_pipeline("infer-shapes,bufferize,lower-to-kernels")).run(module)
    names = [op.name for op in module.walk() if op.name.startswith("kernel.")]
    assert names == [kernel]


# -- LpNormalization, LRN, GroupNormalization, MeanVarianceNormalization -------------------


@pytest.mark.parametrize("p, axis", [(1, 0), (1, -1), (2, 1), (2, -1)])
def test_lp_normalization(p, axis):
    check("LpNormalization", [("x", _f32(2, 6, 4, 5))], {"p": p, "axis": axis}, opset=22)


def test_lp_normalization_of_zeros_doubles_and_dynamic_dims():
    check("LpNormalization", [("x", np.zeros((2, 3), np.float32))], opset=1)
    check("LpNormalization", [("x", _f32(2, 6, 4).astype(np.float64))], {"axis": 1},
          opset=22, dynamic=(0, 2))


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn_against_onnxruntime(size):
    attrs = {"size": size, "alpha": 0.01, "beta": 0.6, "bias": 2.0}
    check("LRN", [("x", _f32(2, 6, 4, 5))], attrs, opset=13, dynamic=(0, 2, 3))


def _lrn_formula(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    """The spec's sum over channels [c - floor((size-1)/2), c + ceil((size-1)/2)]."""
    out = np.empty_like(x)
    channels = x.shape[1]
    for c in range(channels):
        low, high = max(0, c - (size - 1) // 2), min(channels - 1, c + size // 2)
        square_sum = (x[:, low:high + 1] ** 2).sum(axis=1)
        out[:, c] = x[:, c] / (bias + alpha / size * square_sum) ** beta
    return [out]


@pytest.mark.parametrize("shape, size", [((2, 6, 4, 5), 2), ((2, 6, 4, 5), 4),
                                         ((2, 5, 7), 3), ((1, 4, 2, 3, 2), 3)])
def test_lrn_even_sizes_and_other_ranks_follow_the_spec(shape, size):
    """onnxruntime takes odd sizes of 4-D inputs only, and ONNX's reference evaluator
    (which loops over the batch where it means channels) is wrong for these."""
    x = _f32(*shape)
    check("LRN", [("x", x)], {"size": size}, opset=13,
          against=lambda model, feeds: _lrn_formula(feeds["x"], size))


@pytest.mark.parametrize("opset, groups", [(18, 1), (18, 3), (18, 6), (21, 2), (21, 6)])
def test_group_normalization_scale_per_group_18_per_channel_21(opset, groups):
    count = groups if opset == 18 else 6
    check("GroupNormalization", [("x", _f32(2, 6, 4, 5)), ("s", _f32(count)),
                                 ("b", _f32(count))], {"num_groups": groups, "epsilon": 1e-3},
          opset=opset, dynamic=(0, 2, 3) if opset == 21 else ())


@pytest.mark.parametrize("axes", [None, [0, 2, 3], [1], [2, 3], [-1]])
def test_mean_variance_normalization(axes):
    attrs = {} if axes is None else {"axes": axes}
    check("MeanVarianceNormalization", [("x", _f32(2, 3, 4, 5))], attrs, opset=13,
          dynamic=(0, 2))


# -- NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss -------------------------------------


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("shape", [(3, 5), (2, 5, 3, 2)])
@pytest.mark.parametrize("weighted, ignore_index", [(False, None), (True, None), (False, -1),
                                                    (True, 2)])
def test_losses(op, reduction, shape, weighted, ignore_index):
    target = RNG.integers(0, 5, (shape[0],) + shape[2:]).astype(np.int64)
    if ignore_index is not None:
        target.flat[::3] = ignore_index
    inputs = [("x", _f32(*shape)), ("t", target)]
    if weighted:
        inputs.append(("w", np.abs(_f32(5))))
    attrs = {"reduction": reduction}
    if ignore_index is not None:
        attrs["ignore_index"] = ignore_index
    outputs = 2 if op == "SoftmaxCrossEntropyLoss" else 1   # with log_prob
    check(op, inputs, attrs, opset=13, outputs=outputs)


def test_losses_with_doubles_int32_labels_and_dynamic_dims():
    x, labels = _f32(3, 5, 4), RNG.integers(0, 5, (3, 4))
    check("SoftmaxCrossEntropyLoss", [("x", x.astype(np.float64)), ("t", labels)],
          opset=12, outputs=2)
    check("SoftmaxCrossEntropyLoss", [("x", x), ("t", labels.astype(np.int32))], opset=13,
          outputs=2)
    check("SoftmaxCrossEntropyLoss", [("x", x), ("t", labels)], {"reduction": "none"},
          opset=13, outputs=2, dynamic=(0, 2))
    check("NegativeLogLikelihoodLoss", [("x", x), ("t", labels)], opset=22, dynamic=(0, 1, 2))


# -- LpPool ---------------------------------------------------------------------------------

POOLS = [{"kernel_shape": [3, 3]},
         {"kernel_shape": [3, 2], "strides": [2, 2]},
         {"kernel_shape": [3, 3], "pads": [1, 0, 2, 1]},
         {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
         {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"},
         {"kernel_shape": [2, 3], "strides": [2, 3], "auto_pad": "VALID"}]
POOLS_18 = [{"kernel_shape": [3, 3], "dilations": [2, 1]},   # attributes since opset 18
            {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}]


@pytest.mark.parametrize("opset, p, attrs", [
    (opset, p, attrs) for opset, p in ((1, None), (2, 1), (11, 3), (18, 2), (22, 1))
    for attrs in POOLS + (POOLS_18 if opset >= 18 else [])])
def test_lp_pool(opset, p, attrs):
    attrs = dict(attrs, **({} if p is None else {"p": p}))
    # LpPool-1 is not in onnxruntime; its p defaults to 2 as in LpPool-18
    against = _onnx_reference if opset == 1 else _ort
    check("LpPool", [("x", _f32(2, 3, 9, 8))], attrs, opset=opset, against=against)


def test_lp_pool_ceil_mode_last_window_in_padding():
    check("LpPool", [("x", _f32(1, 1, 9, 8))], {"kernel_shape": [2, 2], "strides": [2, 2],
                                                "ceil_mode": 1, "pads": [1, 1, 1, 1]},
          opset=18)


def test_lp_pool_1d_3d_and_dynamic_dims():
    check("LpPool", [("x", _f32(2, 3, 10))], {"kernel_shape": [3], "strides": [2]}, opset=18)
    check("LpPool", [("x", _f32(1, 2, 5, 6, 4))], {"kernel_shape": [2, 3, 2]}, opset=18)
    check("LpPool", [("x", _f32(2, 3, 9, 8))], {"kernel_shape": [3, 3], "strides": [2, 2],
                                                "auto_pad": "SAME_UPPER"},
          opset=18, dynamic=(0, 2, 3))


# -- GridSample, AffineGrid, RoiAlign ------------------------------------------------------


@pytest.mark.parametrize("opset, mode", [(16, "bilinear"), (16, "nearest"), (16, "bicubic"),
                                         (20, "linear"), (20, "nearest"), (22, "cubic")])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_2d(opset, mode, padding, align):
    grid = RNG.uniform(-1.3, 1.3, (2, 4, 7, 2)).astype(np.float32)
    check("GridSample", [("x", _f32(2, 3, 5, 6)), ("g", grid)],
          {"mode": mode, "padding_mode": padding, "align_corners": align}, opset=opset)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_3d(mode, padding):
    grid = RNG.uniform(-1.3, 1.3, (1, 3, 2, 4, 3)).astype(np.float32)
    check("GridSample", [("x", _f32(1, 2, 4, 5, 3)), ("g", grid)],
          {"mode": mode, "padding_mode": padding, "align_corners": 1}, opset=20)


def test_grid_sample_dynamic_dims_doubles_and_integers():
    grid = RNG.uniform(-1.1, 1.1, (2, 4, 7, 2)).astype(np.float32)
    check("GridSample", [("x", _f32(2, 3, 5, 6)), ("g", grid)], opset=20, dynamic=(0, 2, 3))
    check("GridSample", [("x", _f32(2, 3, 5, 6).astype(np.float64)),
                         ("g", grid.astype(np.float64))], opset=20)
    # onnxruntime samples floats only; opset 20 allows any X
    check("GridSample", [("x", RNG.integers(0, 9, (2, 3, 5, 6)).astype(np.int32)),
                         ("g", grid)], {"mode": "nearest"}, opset=20, against=_onnx_reference)


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("theta, size", [((2, 2, 3), (2, 3, 5, 6)), ((2, 3, 4), (2, 3, 4, 5, 6))])
def test_affine_grid(align, theta, size):
    inputs = [("t", _f32(*theta)), ("s", _i64(*size))]
    check("AffineGrid", inputs, {"align_corners": align}, opset=20, constants=("s",))
    check("AffineGrid", inputs, {"align_corners": align}, opset=20, dynamic=(0,))


def test_affine_grid_of_one_position_with_aligned_corners_is_the_centre():
    """linspace(-1, 1, 1): PyTorch (whose affine_grid exporters emit this op) takes 0;
    onnxruntime takes 1 and ONNX's reference -1. The centre is the one that means
    'aligned corners' for a single pixel."""
    theta = _f32(1, 2, 3)
    model, feeds = _model("AffineGrid", [("t", theta), ("s", _i64(1, 1, 1, 3))],
                          {"align_corners": 1}, opset=20, constants=("s",))
    grid = _palimpsest(model, feeds)[0]
    points = np.array([[-1, 0, 1], [0, 0, 1], [1, 0, 1]], np.float32)
    np.testing.assert_allclose(grid[0, 0], points @ theta[0].T, rtol=1e-6)


ROIS = np.array([[0, 0, 9, 9], [1.2, 2.5, 7.7, 8.1], [-1, -2, 3, 4], [5, 5, 11.5, 9.9]],
                np.float32)


@pytest.mark.parametrize("opset, transform", [(10, None), (16, "half_pixel"),
                                              (16, "output_half_pixel"), (22, None)])
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ratio, scale", [(0, 1.0), (2, 0.5)])
def test_roi_align(opset, transform, mode, ratio, scale):
    attrs = {"mode": mode, "sampling_ratio": ratio, "spatial_scale": scale,
             "output_height": 3, "output_width": 4}
    if transform:
        attrs["coordinate_transformation_mode"] = transform
    # opset 10 had only output_half_pixel; onnxruntime has no RoiAlign-22
    check("RoiAlign", [("x", _f32(2, 3, 10, 12)), ("r", ROIS), ("b", _i64(0, 1, 0, 1))],
          attrs, opset=opset, against=_onnx_reference if opset == 22 else _ort,
          dynamic=(0, 2, 3))


# -- Col2Im, DeformConv, MaxUnpool ---------------------------------------------------------


@pytest.mark.parametrize("attrs, image, block, blocks", [
    ({}, (5, 5), (2, 2), 16),
    ({"strides": [2, 1]}, (5, 6), (3, 2), 10),
    ({"pads": [1, 0, 1, 2], "dilations": [2, 1]}, (6, 5), (2, 3), 30)])
def test_col2im(attrs, image, block, blocks):
    inputs = [("x", _f32(2, 3 * block[0] * block[1], blocks)), ("i", _i64(*image)),
              ("b", _i64(*block))]
    check("Col2Im", inputs, attrs, opset=18, constants=("i", "b"))
    check("Col2Im", inputs, attrs, opset=18, dynamic=(0, 1, 2))   # shapes known at run time


def test_col2im_1d_and_3d():
    check("Col2Im", [("x", _f32(1, 6, 8)), ("i", _i64(10)), ("b", _i64(3))], opset=18,
          constants=("i", "b"))
    check("Col2Im", [("x", _f32(1, 24, 18)), ("i", _i64(4, 4, 4)), ("b", _i64(2, 2, 3))],
          opset=18, constants=("i", "b"))


def _offsets(batch, groups, taps, *out):
    return (RNG.standard_normal((batch, 2 * groups * taps) + out) * 1.5).astype(np.float32)


@pytest.mark.parametrize("w, attrs, out, extra", [
    ((6, 4, 3, 3), {}, (5, 4), ()),
    ((6, 2, 3, 3), {"group": 2, "offset_group": 2}, (5, 4), ("bias", "mask")),
    ((6, 4, 3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 1], "dilations": [1, 2]}, (4, 2),
     ("mask",)),
    ((6, 4, 1, 2), {"kernel_shape": [1, 2]}, (7, 5), ())])
def test_deform_conv(w, attrs, out, extra):
    groups = attrs.get("offset_group", 1)
    taps = w[2] * w[3]
    inputs = [("x", _f32(2, 4, 7, 6)), ("w", _f32(*w)), ("o", _offsets(2, groups, taps, *out)),
              ("b", _f32(6)) if "bias" in extra else ("", None)]
    if "mask" in extra:
        inputs.append(("m", RNG.uniform(0, 1, (2, groups * taps) + out).astype(np.float32)))
    check("DeformConv", inputs, attrs, opset=19, dynamic=(0,))


@pytest.mark.parametrize("x, w, attrs", [
    ((1, 4, 5, 6, 4), (6, 2, 2, 3, 2), {"group": 2, "pads": [1, 0, 1, 0, 1, 1],
                                        "strides": [1, 2, 1]}),
    ((2, 3, 9), (4, 3, 3), {"dilations": [2], "pads": [1, 2]})])
def test_deform_conv_1d_3d_without_offsets_is_conv(x, w, attrs):
    """onnxruntime's DeformConv is 2-D only: with zero offsets the op is Conv."""
    x, w = _f32(*x), _f32(*w)
    expected = _ort(*_model("Conv", [("x", x), ("w", w)], attrs, opset=19))
    offsets = np.zeros((x.shape[0], int(np.prod(w.shape[2:])) * (x.ndim - 2))
                       + expected[0].shape[2:], np.float32)
    got = _palimpsest(*_model("DeformConv", [("x", x), ("w", w), ("o", offsets)], attrs,
                              opset=19))
    _assert_close(got, expected, 1e-4, 1e-5)


def test_deform_conv_1d_is_2d_of_one_row():
    x, w, offsets = _f32(2, 3, 9), _f32(4, 3, 3), _f32(2, 3, 7)
    got = _palimpsest(*_model("DeformConv", [("x", x), ("w", w), ("o", offsets)], opset=19))
    rows = np.stack([np.zeros_like(offsets), offsets], axis=2).reshape(2, 6, 1, 7)
    expected = _ort(*_model("DeformConv", [("x", x[:, :, None]), ("w", w[:, :, None]),
                                           ("o", rows)], opset=19))
    _assert_close(got, [expected[0][:, :, 0]], 1e-4, 1e-5)


def _max_pool(x, attrs):
    return _ort(*_model("MaxPool", [("x", x)], attrs, opset=12, outputs=2))


@pytest.mark.parametrize("opset", [9, 11, 22])
@pytest.mark.parametrize("attrs", [{"kernel_shape": [2, 2], "strides": [2, 2]},
                                   {"kernel_shape": [3, 3], "strides": [2, 2],
                                    "pads": [1, 1, 1, 1]},
                                   {"kernel_shape": [2, 3]}])
def test_max_unpool(opset, attrs):
    # input shapes the attributes give back (MaxUnpool infers 5x7 and 6x6)
    shape = (2, 3, 5, 7) if "pads" in attrs else (2, 3, 6, 6)
    pooled, indices = _max_pool(_f32(*shape), attrs)
    check("MaxUnpool", [("x", pooled), ("i", indices)], attrs, opset=opset, dynamic=(0, 2, 3))


@pytest.mark.parametrize("constant", [True, False])
def test_max_unpool_output_shape_pads_the_inferred_shape(constant):
    """ONNX (its reference and node case) scatters into the shape the attributes infer and
    pads that to output_shape; onnxruntime reads the indices in output_shape's layout."""
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    pooled, indices = _max_pool(_f32(2, 3, 6, 4), attrs)
    check("MaxUnpool", [("x", pooled), ("i", indices), ("s", _i64(2, 3, 7, 5))], attrs,
          opset=11, against=_onnx_reference, constants=("s",) if constant else ())


def test_max_unpool_index_outside_the_inferred_shape_is_a_diagnostic():
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    pooled, indices = _max_pool(_f32(1, 1, 6, 7), attrs)   # indices of a 6x7, unpooled 6x6
    model, feeds = _model("MaxUnpool", [("x", pooled), ("i", indices)], attrs, opset=11)
    with pytest.raises(Exception, match=r"MaxUnpool.*outside the unpooled shape"):
        _palimpsest(model, feeds)


# -- CenterCropPad, SpaceToDepth, DepthToSpace, Upsample -----------------------------------


@pytest.mark.parametrize("shape, axes", [((3, 8, 3), None), ((7, 4, 1), None),
                                         ((4, 9), [0, 1]), ((2,), [-2]), ((4, 7), [2, -3])])
def test_center_crop_pad(shape, axes):
    attrs = {} if axes is None else {"axes": axes}
    inputs = [("x", _f32(5, 6, 3)), ("s", _i64(*shape))]
    check("CenterCropPad", inputs, attrs, opset=18, constants=("s",), dynamic=(0, 1))
    check("CenterCropPad", inputs, attrs, opset=18)


@pytest.mark.parametrize("opset", [1, 13])
def test_space_to_depth(opset):
    check("SpaceToDepth", [("x", _f32(2, 3, 6, 4))], {"blocksize": 2}, opset=opset,
          dynamic=(0, 2, 3))


@pytest.mark.parametrize("opset, mode", [(1, None), (11, "DCR"), (13, "CRD"), (13, None)])
def test_depth_to_space(opset, mode):
    attrs = {"blocksize": 2, **({"mode": mode} if mode else {})}
    check("DepthToSpace", [("x", _f32(2, 8, 3, 2))], attrs, opset=opset,
          dynamic=(0, 1, 2, 3))
    check("DepthToSpace", [("x", RNG.integers(-5, 5, (1, 9, 2, 2)).astype(np.int8))],
          {"blocksize": 3, "mode": "CRD"}, opset=13)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_7_and_9(mode):
    x, scales = _f32(1, 2, 3, 4), [1.0, 1.0, 2.0, 1.5]
    check("Upsample", [("x", x)], {"mode": mode, "scales": scales}, opset=7)
    inputs = [("x", x), ("s", np.array(scales, np.float32))]
    check("Upsample", inputs, {"mode": mode}, opset=9, constants=("s",), dynamic=(0, 2, 3))
    check("Upsample", inputs, {"mode": mode}, opset=9)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_graph_upsample_in_ir(mode):
    """The importer writes graph.resize for Upsample; graph.upsample is for IR that names
    it, with scales known (static result) or not (allocated at run time). Its kernel also
    takes Upsample-7's `scales` attribute."""
    from palimpsest.ir.parser import parse

    x, scales = _f32(1, 2, 3, 4), np.array([1, 1, 2, 3], np.float32)
    expected = _ort(*_model("Upsample", [("x", x), ("s", scales)], {"mode": mode}, opset=9))
    module = parse(f"""
    func.func @main(%x: tensor<?x2x3x4xf32>, %s: tensor<4xf32>) -> (tensor<?x2x6x12xf32>, tensor<?x?x?x?xf32>) {{
      %k = graph.constant {{value = dense<[1.0, 1.0, 2.0, 3.0]> : tensor<4xf32>}} : tensor<4xf32>
      %a = graph.upsample %x, %k {{mode = "{mode}"}} : (tensor<?x2x3x4xf32>, tensor<4xf32>) -> tensor<?x2x6x12xf32>
      %b = graph.upsample %x, %s {{mode = "{mode}"}} : (tensor<?x2x3x4xf32>, tensor<4xf32>) -> tensor<?x?x?x?xf32>
      func.return %a, %b : tensor<?x2x6x12xf32>, tensor<?x?x?x?xf32>
    }}""")
    got = Session(module, poison=True).run({"x": x, "s": scales})
    _assert_close(list(got.values()), expected * 2, 1e-5, 1e-6)
    attribute_form = KERNELS["graph.upsample"]([x], {"mode": mode, "scales": list(scales)})
    _assert_close(attribute_form, expected, 1e-5, 1e-6)


# -- diagnostics ----------------------------------------------------------------------------

X4 = _f32(2, 6, 4, 5)
ROI = [("x", X4), ("r", np.array([[0, 0, 3, 3]], np.float32))]
INVALID = [
    ("LpNormalization", [("x", X4)], {"p": 3}, 22, r"LpNormalization.*'p' must be one of 1, 2"),
    ("LpNormalization", [("x", X4)], {"axis": 9}, 22, r"LpNormalization.*axis 9 is out of range"),
    ("LRN", [("x", X4)], {"size": 0}, 13, r"LRN.*'size' must be positive"),
    ("MeanVarianceNormalization", [("x", X4)], {"axes": [9]}, 13, r"axes value 9"),
    ("SoftmaxCrossEntropyLoss", [("x", _f32(3, 5)), ("t", _i64(1, 2, 3))],
     {"reduction": "max"}, 13, r"'reduction' must be one of"),
    ("NegativeLogLikelihoodLoss", [("x", _f32(3, 5)), ("t", _i64(1, 2, 7))], {}, 13,
     r"target is out of range for 5 classes"),
    ("LpPool", [("x", X4)], {"kernel_shape": [2, 2], "auto_pad": "FOO"}, 18,
     r"LpPool.*auto_pad.* must be one of"),
    ("GridSample", [("x", X4), ("g", _f32(2, 3, 3, 2))], {"mode": "area"}, 20,
     r"GridSample.*'mode' must be one of"),
    ("GridSample", [("x", X4), ("g", _f32(2, 3, 3, 2))], {"padding_mode": "wrap"}, 20,
     r"'padding_mode' must be one of"),
    ("AffineGrid", [("t", _f32(2, 2, 4)), ("s", _i64(2, 3, 5, 6))], {}, 20,
     r"theta must be N x 2 x 3 or N x 3 x 4"),
    ("RoiAlign", ROI + [("b", _i64(0))], {"mode": "min"}, 16, r"'mode' must be one of"),
    ("RoiAlign", ROI + [("b", _i64(0))], {"coordinate_transformation_mode": "asym"}, 16,
     r"'coordinate_transformation_mode' must be one of"),
    ("RoiAlign", ROI + [("b", _i64(5))], {}, 16, r"batch_indices \[5\] are out of range"),
    ("Col2Im", [("x", _f32(1, 7, 16)), ("i", _i64(5, 5)), ("b", _i64(2, 2))], {}, 18,
     r"7 columns do not split into blocks of 4"),
    ("Col2Im", [("x", _f32(1, 8, 15)), ("i", _i64(5, 5)), ("b", _i64(2, 2))], {}, 18,
     r"input has 15 blocks, the image_shape and attributes give 16"),
    ("DeformConv", [("x", X4), ("w", _f32(4, 6, 3, 3)), ("o", _f32(2, 17, 2, 3))], {}, 19,
     r"DeformConv.*'offset'.*differ in dimension 1"),
    ("CenterCropPad", [("x", _f32(4, 5)), ("s", _i64(3))], {}, 18,
     r"shape has 1 entries for 2 axes"),
    ("SpaceToDepth", [("x", _f32(1, 2, 5, 4))], {"blocksize": 2}, 13,
     r"must divide by blocksize 2"),
    ("DepthToSpace", [("x", _f32(1, 8, 2, 2))], {"blocksize": 2, "mode": "XYZ"}, 13,
     r"'mode' must be one of 'DCR', 'CRD'"),
    ("DepthToSpace", [("x", _f32(1, 6, 2, 2))], {"blocksize": 2}, 13,
     r"6 channels must divide by blocksize\^2 = 4"),
    ("Hardmax", [("x", _i64(1, 2))], {}, 13, r"hardmax.*must be a tensor of floats"),
    # the importer's own words when the op's rule refuses before ONNX's types are checked
    ("MaxUnpool", [("x", _f32(1, 1, 2, 2)), ("i", _i64(0, 1, 2, 3).reshape(1, 1, 2, 2))], {},
     11, r"MaxUnpool"),
    ("GroupNormalization", [("x", X4), ("s", _f32(6)), ("b", _f32(6))], {"num_groups": 4}, 21,
     r"GroupNormalization"),
]


@pytest.mark.parametrize("op, inputs, attrs, opset, message", INVALID,
                         ids=[f"{case[0]}-{i}" for i, case in enumerate(INVALID)])
def test_invalid_attributes_and_shapes_are_one_line_diagnostics(op, inputs, attrs, opset,
                                                                message):
    # integer operands (sizes, shapes, labels, indices) are initializers, as exporters write
    constants = [name for name, array in inputs if name != "x" and array.dtype == np.int64]
    model, feeds = _model(op, inputs, attrs, opset=opset, constants=constants)
    with pytest.raises(Exception) as error:
        _palimpsest(model, feeds)
    text = str(error.value)
    assert "\n" not in text and "Traceback" not in text
    assert re.search(message, text), text
    assert type(error.value).__name__ in ("DiagnosticError", "OnnxImportError"), text


def test_every_op_of_the_family_has_a_reference_kernel():
    from palimpsest.dialects.graph.naming import ONNX_TO_GRAPH

    family = {"Hardmax", "LpNormalization", "LRN", "GroupNormalization",
              "MeanVarianceNormalization", "SoftmaxCrossEntropyLoss",
              "NegativeLogLikelihoodLoss", "LpPool", "GridSample", "AffineGrid", "RoiAlign",
              "Col2Im", "DeformConv", "MaxUnpool", "CenterCropPad", "SpaceToDepth",
              "DepthToSpace", "Upsample", "Softmax", "LogSoftmax"}
    assert family <= set(ONNX_TO_GRAPH)
    assert all(ONNX_TO_GRAPH[op] in KERNELS for op in family)
    assert {case[0] for case in INVALID} <= family
