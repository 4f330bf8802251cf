"""Spatial and image graph ops: GridSample, AffineGrid, RoiAlign, Col2Im, DeformConv,
MaxUnpool, CenterCropPad, SpaceToDepth, DepthToSpace and Upsample."""

from __future__ import annotations

from palimpsest.dialects.graph import bound_rules as B
from palimpsest.dialects.graph import shapes as S
from palimpsest.dialects.graph.ops_base import (
    AnyTensor, FloatTensor, GraphOp, IndexTensor, ShapeError, flag_prop, float_prop,
    int_prop, ints_prop, non_negative, positive, str_prop, tensor,
)
from palimpsest.ir.opdef import operand, optional_operand, register_op, result_def


def _rank(args, name, low, high=None):
    shape = args.shape(name)
    if shape is not None and not low <= len(shape) <= (high or low):
        raise ShapeError(f"'{name}' must have rank {low}" + (f" to {high}" if high else "")
                         + f", got {S.fmt(shape)}")
    return shape


@register_op
class GridSampleOp(GraphOp):
    """X: N x C x D1..Dr, grid: N x O1..Or x r -> N x C x O1..Or."""

    name = "graph.grid_sample"
    x = operand(AnyTensor)
    grid = operand(FloatTensor)
    y = result_def(AnyTensor)
    align_corners = flag_prop(0)
    mode = str_prop("linear", choices=("linear", "bilinear", "nearest", "cubic", "bicubic"))
    padding_mode = str_prop("zeros", choices=("zeros", "border", "reflection"))

    @classmethod
    def rule(cls, args):
        x, grid = args.shape("x"), args.shape("grid")
        if x is None or grid is None:
            return [tensor(None, args.element("x"))]
        if len(grid) != len(x) or grid[-1] not in (None, len(x) - 2):
            raise ShapeError(f"grid {S.fmt(grid)} does not fit X {S.fmt(x)}")
        return [tensor((x[0], x[1]) + tuple(grid[1:-1]), args.element("x"))]


@register_op
class AffineGridOp(GraphOp):
    """theta: N x 2 x 3 (2-D) or N x 3 x 4 (3-D), size: [N, C, H, W(, D)]."""

    name = "graph.affine_grid"
    theta = operand(FloatTensor)
    size = operand(IndexTensor)
    grid = result_def(AnyTensor)
    align_corners = flag_prop(0)

    @classmethod
    def rule(cls, args):
        theta, size_shape = _rank(args, "theta", 3), _rank(args, "size", 1)
        if theta is not None and theta[1:] not in ((2, 3), (3, 4)) and None not in theta[1:]:
            raise ShapeError(f"theta must be N x 2 x 3 or N x 3 x 4, got {S.fmt(theta)}")
        size = args.value("size")
        if size is not None:
            spatial = tuple(int(v) for v in size[2:])
            return [tensor((int(size[0]),) + spatial + (len(spatial),), args.element("theta"))]
        # the grid's extent is data: its rank still follows from theta or from size's length
        rank = theta[1] if theta is not None and theta[1] is not None else (
            size_shape[0] - 2 if size_shape is not None and size_shape[0] is not None else None)
        if rank is None:
            return [tensor(None, args.element("theta"))]
        return [tensor((theta[0] if theta else None,) + (None,) * rank + (rank,),
                       args.element("theta"))]


@register_op
class RoiAlignOp(GraphOp):
    name = "graph.roi_align"
    x = operand(FloatTensor)
    rois = operand(FloatTensor)
    batch_indices = operand(IndexTensor)
    y = result_def(AnyTensor)
    coordinate_transformation_mode = str_prop("half_pixel",
                                              choices=("half_pixel", "output_half_pixel"))
    mode = str_prop("avg", choices=("avg", "max"))
    output_height = int_prop(1, check=positive)
    output_width = int_prop(1, check=positive)
    sampling_ratio = int_prop(0, check=non_negative)
    spatial_scale = float_prop(1.0)

    @classmethod
    def rule(cls, args):
        x, rois = _rank(args, "x", 4), _rank(args, "rois", 2)
        batch = _rank(args, "batch_indices", 1)
        if rois is not None and rois[1] not in (None, 4):
            raise ShapeError(f"rois must be num_rois x 4, got {S.fmt(rois)}")
        if rois is not None and batch is not None:
            S.merge_shapes(rois[:1], batch, "batch_indices and the number of rois")
        return [tensor((rois[0] if rois else None, x[1] if x else None,
                        args["output_height"], args["output_width"]), args.element("x"))]


def _block_counts(image, block, dilations, pads, strides):
    """How many blocks fit along each dim of the padded image."""
    rank = len(image)
    dilations, strides = dilations or [1] * rank, strides or [1] * rank
    pads = pads or [0] * (2 * rank)
    return [(image[i] + pads[i] + pads[i + rank] - dilations[i] * (block[i] - 1) - 1)
            // strides[i] + 1 for i in range(rank)]


@register_op
class Col2ImOp(GraphOp):
    name = "graph.col2im"
    input = operand(AnyTensor)
    image_shape = operand(IndexTensor)
    block_shape = operand(IndexTensor)
    output = result_def(AnyTensor)
    dilations = ints_prop(check=positive)
    pads = ints_prop(check=non_negative)
    strides = ints_prop(check=positive)

    @classmethod
    def rule(cls, args):
        x = _rank(args, "input", 3)
        image_rank = _rank(args, "image_shape", 1)
        image, block = args.value("image_shape"), args.value("block_shape")
        if image is not None:
            spatial = tuple(int(v) for v in image)
        elif image_rank is not None and image_rank[0] is not None:
            spatial = (None,) * image_rank[0]     # the image's extent is data
        else:
            return [tensor(None, args.element("input"))]
        channels = None
        if x is not None and x[1] is not None and block is not None:
            blocks = S.product([int(b) for b in block])
            if x[1] % blocks:
                raise ShapeError(f"input's {x[1]} columns do not split into blocks of "
                                 f"{blocks}")
            channels = x[1] // blocks
        if x is not None and x[2] is not None and image is not None and block is not None:
            blocks_per_image = S.product(_block_counts(
                spatial, [int(b) for b in block], args["dilations"], args["pads"],
                args["strides"]))
            if x[2] != blocks_per_image:
                raise ShapeError(f"input has {x[2]} blocks, the image_shape and attributes "
                                 f"give {blocks_per_image}")
        return [tensor((x[0] if x else None, channels) + spatial, args.element("input"))]


@register_op
class DeformConvOp(GraphOp):
    name = "graph.deform_conv"
    x = operand(FloatTensor)
    w = operand(FloatTensor)
    offset = operand(FloatTensor)
    b = optional_operand(FloatTensor)
    mask = optional_operand(FloatTensor)
    y = result_def(AnyTensor)
    dilations = ints_prop(check=positive)
    group = int_prop(1, check=positive)
    kernel_shape = ints_prop(check=positive)
    offset_group = int_prop(1, check=positive)
    pads = ints_prop(check=non_negative)
    strides = ints_prop(check=positive)

    @classmethod
    def rule(cls, args):
        element = args.same_element("x", "w", "offset")
        x = args.shape("x")
        shape = S.conv(x, args.shape("w"), args["kernel_shape"], args["strides"],
                       args["pads"], args["dilations"], args["group"], "NOTSET")
        groups = args["offset_group"]
        if x is not None and x[1] is not None and x[1] % groups:
            raise ShapeError(f"input channels ({x[1]}) are not divisible by offset_group "
                             f"({groups})")
        if shape is None:
            return [tensor(None, element)]
        w = args.shape("w")
        taps = S.product(args["kernel_shape"] or (w[2:] if w is not None else [None]))
        dims = len(shape) - 2
        # offset: N x (offset_group * taps * dims) x output dims; mask: one value per tap
        for name, per_tap in (("offset", dims), ("mask", 1)):
            expected = (shape[0], None if taps is None else groups * taps * per_tap) + \
                tuple(shape[2:])
            merged = S.merge_shapes(args.shape(name), expected,
                                    f"'{name}' and N x {groups * per_tap} * kernel taps x "
                                    f"output dims")
            shape = tuple(shape[:2]) + tuple(merged[2:])
        return [tensor(shape, element)]


@register_op
class MaxUnpoolOp(GraphOp):
    name = "graph.max_unpool"
    x = operand(FloatTensor)
    indices = operand(IndexTensor)
    output_shape = optional_operand(IndexTensor)
    y = result_def(AnyTensor)
    kernel_shape = ints_prop(optional=False, check=positive)
    pads = ints_prop(check=non_negative)
    strides = ints_prop(check=positive)

    @classmethod
    def rule(cls, args):
        x = args.shape("x")
        indices = args.shape("indices")
        if x is not None and indices is not None:
            S.merge_shapes(tuple(x), tuple(indices), "X and I")
        if args.has("output_shape"):
            known = args.value("output_shape")
            if known is not None:
                return [tensor(tuple(int(v) for v in known), args.element("x"))]
            return [tensor(None if x is None else (None,) * len(x), args.element("x"))]
        if x is None:
            return [tensor(None, args.element("x"))]
        kernel = args["kernel_shape"]
        if kernel is None or len(kernel) != len(x) - 2:
            raise ShapeError(f"kernel_shape must give the {len(x) - 2} spatial dims of X "
                             f"{S.fmt(x)}, got {kernel}")
        strides = args["strides"] or [1] * len(kernel)
        pads = args["pads"] or [0] * (2 * len(kernel))
        spatial = tuple(None if d is None else (d - 1) * s + k - pads[i] - pads[i + len(kernel)]
                        for i, (d, s, k) in enumerate(zip(x[2:], strides, kernel)))
        return [tensor(tuple(x[:2]) + spatial, args.element("x"))]


@register_op
class CenterCropPadOp(GraphOp):
    name = "graph.center_crop_pad"
    input_data = operand(AnyTensor)
    shape = operand(IndexTensor)
    output_data = result_def(AnyTensor)
    axes = ints_prop()

    @classmethod
    def rule(cls, args):
        x, target = args.shape("input_data"), args.value("shape")
        if x is None:
            return [tensor(None, args.element("input_data"))]
        axes = S.normalize_axes(args["axes"] or list(range(len(x))), len(x))
        if target is not None and len(target) != len(axes):
            raise ShapeError(f"shape has {len(target)} entries for {len(axes)} axes")
        out = list(x)
        for i, axis in enumerate(axes):
            out[axis] = int(target[i]) if target is not None else None
        return [tensor(tuple(out), args.element("input_data"))]


class _BlockOp(GraphOp):
    """Moves blocksize x blocksize spatial blocks into channels (`to_depth`) or back:
    channels scale by b*b one way, each spatial dim by b the other."""

    input = operand(AnyTensor)
    output = result_def(AnyTensor)
    blocksize = int_prop(check=positive)
    mode = str_prop("DCR", choices=("DCR", "CRD"))
    to_depth: bool

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        x, b = _rank(args, "input", 4), args["blocksize"]
        if x is None:
            return [tensor(None, args.element("input"))]
        n, c, h, w = x
        if cls.to_depth and any(d is not None and d % b for d in (h, w)):
            raise ShapeError(f"spatial dims {S.fmt(x[2:])} must divide by blocksize {b}")
        if not cls.to_depth and c is not None and c % (b * b):
            raise ShapeError(f"{c} channels must divide by blocksize^2 = {b * b}")

        def times(d, k):
            return None if d is None else d * k

        def over(d, k):
            return None if d is None else d // k

        if cls.to_depth:
            shape = (n, times(c, b * b), over(h, b), over(w, b))
        else:
            shape = (n, over(c, b * b), times(h, b), times(w, b))
        return [tensor(shape, args.element("input"))]


@register_op
class SpaceToDepthOp(_BlockOp):
    name = "graph.space_to_depth"
    to_depth = True


@register_op
class DepthToSpaceOp(_BlockOp):
    name = "graph.depth_to_space"
    to_depth = False


@register_op
class UpsampleOp(GraphOp):
    """Upsample-9 (Upsample-7's `scales` attribute becomes this operand on import): Resize
    with asymmetric coordinates and nearest rounding down. The importer writes graph.resize
    (onnx_opsets.py); this op is for IR that names Upsample."""

    name = "graph.upsample"
    x = operand(AnyTensor)
    scales = operand(FloatTensor)
    y = result_def(AnyTensor)
    mode = str_prop("nearest", choices=("nearest", "linear", "bilinear"))

    @classmethod
    def rule(cls, args):
        x, scales = args.shape("x"), _rank(args, "scales", 1)
        if x is not None and scales is not None and scales[0] not in (None, len(x)):
            raise ShapeError(f"has {scales[0]} scales for an input of rank {len(x)}")
        if x is None:
            return [tensor(None, args.element("x"))]
        values = args.value("scales")
        if values is None:
            return [tensor((None,) * len(x), args.element("x"))]
        return [tensor(tuple(None if d is None else int(d * float(s))
                             for d, s in zip(x, values)), args.element("x"))]
