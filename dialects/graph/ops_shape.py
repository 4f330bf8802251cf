"""Shape and data-movement graph ops: reshape, flatten, transpose, concat, split, slice,
gather, gather_elements, pad, resize, squeeze, unsqueeze, expand, tile, identity."""

from __future__ import annotations

from palimpsest.dialects.graph import bound_rules as B
from palimpsest.dialects.graph import shapes as S
from palimpsest.dialects.graph.ops_base import (
    MAX_KNOWN_ELEMENTS, AnyTensor, FloatTensor, GraphOp, IndexTensor, IndexVector,
    ShapeError, ShapeVector, declare_op, flag_prop, float_prop, int_prop, ints_prop,
    non_negative, same_type_as, str_prop, tensor,
)
from palimpsest.ir.opdef import (
    operand, optional_operand, register_op, result_def, variadic_operand, variadic_result,
)


def _static(t) -> bool:
    return t is not None and t.has_static_shape


class _RowMajorOp(GraphOp):
    """An op whose result holds its one input's elements in the same row-major order
    (identity, reshape, flatten, squeeze, unsqueeze): its known values are the input's."""

    @classmethod
    def fold_values(cls, args, result_types):
        values = args.value(cls.moves_values[0])
        if values is None or not _static(result_types[0]):
            return None
        return [list(values)]


def _check_vector(args, name):
    shape = args.shape(name)
    if shape is not None and len(shape) != 1:
        raise ShapeError(f"'{name}' must be 1-D, got shape {S.fmt(shape)}")


# ---------------------------------------------------------------------------


@register_op
class IdentityOp(_RowMajorOp):
    name = "graph.identity"
    moves_values = ("input",)
    input = operand(AnyTensor)
    output = result_def(AnyTensor)

    rule, bound_rule = same_type_as("input")


@register_op
class ReshapeOp(_RowMajorOp):
    """`shape` holds the target dims: 0 copies the input dim (unless allowzero), -1
    is inferred."""

    name = "graph.reshape"
    moves_values = ("data",)
    data = operand(AnyTensor)
    shape = operand(ShapeVector)
    reshaped = result_def(AnyTensor)
    allowzero = flag_prop(0)

    bound_rule = classmethod(B.reshape_bounds)

    @classmethod
    def rule(cls, args):
        shape = S.reshape(args.shape("data"), args.ints("shape"), args.length("shape"),
                          args["allowzero"], args.dim_symbols("data"),
                          args.symbolic("shape"))
        return [tensor(shape, args.element("data"))]


@register_op
class FlattenOp(_RowMajorOp):
    name = "graph.flatten"
    moves_values = ("input",)
    input = operand(AnyTensor)
    output = result_def(AnyTensor)
    axis = int_prop(1)

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        x = args.shape("input")
        shape = S.flatten(x, args["axis"]) if x is not None else (None, None)
        return [tensor(shape, args.element("input"))]


@register_op
class TransposeOp(GraphOp):
    """`perm` defaults to reversing the dims."""

    name = "graph.transpose"
    moves_values = ("data",)
    data = operand(AnyTensor)
    transposed = result_def(AnyTensor)
    perm = ints_prop(check=non_negative)

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        perm = args["perm"]
        x = args.shape("data")
        if x is None and perm is not None:
            S.check_perm(perm, len(perm))
            return [tensor((None,) * len(perm), args.element("data"))]
        return [tensor(S.transpose(x, perm), args.element("data"))]

    @classmethod
    def fold_values(cls, args, result_types):
        values, data = args.value("data"), args.type("data")
        if values is None or not _static(data):
            return None
        return [S.transpose_values(values, data.shape, args["perm"])]


@register_op
class ConcatOp(GraphOp):
    name = "graph.concat"
    moves_values = ("inputs",)
    inputs = variadic_operand(AnyTensor)
    concat_result = result_def(AnyTensor)
    axis = int_prop()

    def verify_(self):
        if not self.operands:
            raise self.error("needs at least one operand")
        super().verify_()

    bound_rule = classmethod(B.concat_bounds)

    @classmethod
    def rule(cls, args):
        if not args.has("inputs"):
            raise ShapeError("needs at least one operand")
        element = args.same_element("inputs")
        return [tensor(S.concat(args.shapes("inputs"), args["axis"]), element)]

    @classmethod
    def fold_values(cls, args, result_types):
        parts = []
        for t, values in zip(args.types("inputs"), args.values("inputs")):
            if values is None or not _static(t):
                return None
            parts.append((values, t.shape))
        return [S.concat_values(parts, args["axis"])]


@register_op
class SplitOp(GraphOp):
    """Splits along `axis` into the op's results: by the `split` operand's sizes, or
    equally (opset 18's num_outputs: the last part may be smaller)."""

    name = "graph.split"
    input = operand(AnyTensor)
    split = optional_operand(ShapeVector)
    outputs = variadic_result(AnyTensor)
    axis = int_prop(0)
    num_outputs = int_prop(optional=True)

    bound_rule = classmethod(B.split_bounds)

    @classmethod
    def rule(cls, args):
        sizes = args.ints("split")
        if args.has("split") and sizes is None:
            count = args.length("split")
            if count is not None and count != args.num_results:
                raise ShapeError(f"'split' has {count} sizes for {args.num_results} results")
            sizes = [None] * count if count is not None else None
        shapes = S.split(args.shape("input"), args["axis"], sizes, args["num_outputs"],
                         args.num_results)
        if shapes is None:
            return None
        return [tensor(s, args.element("input")) for s in shapes]


@register_op
class SliceOp(GraphOp):
    """starts/ends/axes/steps are 1-D operands; axes and steps are optional
    (operandSegmentSizes)."""

    name = "graph.slice"
    moves_values = ("data",)
    data = operand(AnyTensor)
    starts = operand(IndexVector)
    ends = operand(IndexVector)
    axes = optional_operand(IndexVector)
    steps = optional_operand(IndexVector)
    output = result_def(AnyTensor)

    @classmethod
    def _params(cls, args):
        count = args.axes_length("starts")
        steps = args.ints("steps") if args.has("steps") else (
            [1] * count if count is not None else None)
        axes = args.ints("axes")
        if args.has("axes") and axes is None:
            axes = [None] * count if count is not None else None
            if axes is None:
                return None
        return args.ints("starts"), args.ints("ends"), axes, steps, count

    bound_rule = classmethod(B.slice_bounds)

    @classmethod
    def rule(cls, args):
        x = args.shape("data")
        params = cls._params(args)
        if params is None:
            shape = None if x is None else (None,) * len(x)
        else:
            starts, ends, axes, steps, count = params
            if args.length("ends") is not None and count is not None \
                    and args.length("ends") != count:
                raise ShapeError(f"slice starts has {count} values but ends has "
                                 f"{args.length('ends')}")
            shape = S.slice_shape(x, starts, ends, axes, steps, count)
        return [tensor(shape, args.element("data"))]

    @classmethod
    def fold_values(cls, args, result_types):
        values, data = args.value("data"), args.type("data")
        params = cls._params(args)
        if values is None or not _static(data) or params is None:
            return None
        starts, ends, axes, steps, _ = params
        known = [starts, ends, steps] + ([axes] if args.has("axes") else [])
        if any(v is None or None in v for v in known):
            return None
        return [S.slice_values(values, data.shape, starts, ends,
                               axes if args.has("axes") else None, steps)]


class _GatherLikeOp(GraphOp):
    """Gather and GatherElements: entries of `data` picked by `indices` along `axis`."""

    data = operand(AnyTensor)
    indices = operand(IndexTensor)
    output = result_def(AnyTensor)
    axis = int_prop(0)

    bound_rule = classmethod(B.at_upper)


@register_op
class GatherOp(_GatherLikeOp):
    """Picks entries of `data` along `axis`: result = data[:axis] + indices + data[axis+1:]."""

    name = "graph.gather"
    moves_values = ("data",)

    @classmethod
    def rule(cls, args):
        shape = S.gather(args.shape("data"), args.shape("indices"), args["axis"],
                         args.value("indices"))
        return [tensor(shape, args.element("data"))]

    @classmethod
    def fold_values(cls, args, result_types):
        data, indices = args.type("data"), args.type("indices")
        values, index_values = args.value("data"), args.value("indices")
        if values is None or index_values is None or not _static(data) \
                or not _static(indices):
            return None
        if S.num_elements(result_types[0].shape) > MAX_KNOWN_ELEMENTS:
            return None
        return [S.gather_values(values, data.shape, index_values, indices.shape, args["axis"])]


@register_op
class GatherElementsOp(_GatherLikeOp):
    name = "graph.gather_elements"

    @classmethod
    def rule(cls, args):
        data, indices = args.shape("data"), args.shape("indices")
        if data is not None:
            S.normalize_axis(args["axis"], len(data))
            if indices is not None and len(indices) != len(data):
                raise ShapeError(f"indices {S.fmt(indices)} must have the rank of data "
                                 f"{S.fmt(data)}")
        return [tensor(indices, args.element("data"))]


@register_op
class PadOp(GraphOp):
    """`pads` = begins then ends of each padded axis (all axes, or the `axes` operand)."""

    name = "graph.pad"
    data = operand(AnyTensor)
    pads = operand(ShapeVector)
    constant_value = optional_operand(AnyTensor)
    axes = optional_operand(IndexVector)
    output = result_def(AnyTensor)
    mode = str_prop("constant", choices=("constant", "reflect", "edge", "wrap"))

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        x = args.shape("data")
        if args.has("constant_value"):
            args.same_element("data", "constant_value")
            shape = args.shape("constant_value")
            if shape is not None and S.num_elements(shape) not in (None, 1):
                raise ShapeError(f"'constant_value' must be a scalar, got shape "
                                 f"{S.fmt(shape)}")
        axes = args.ints("axes")
        if args.has("axes") and axes is None:
            count = args.axes_length("axes")
            if count is None:
                return [tensor(None if x is None else (None,) * len(x), args.element("data"))]
            axes = [None] * count
        shape = S.pad(x, args.ints("pads"), axes, args.length("pads"))
        return [tensor(shape, args.element("data"))]


@register_op
class ResizeOp(GraphOp):
    """Output size from `sizes`, or floor(input * scale) from `scales`; roi, scales
    and sizes are optional (operandSegmentSizes); an empty scales/sizes is absent."""

    name = "graph.resize"
    x = operand(AnyTensor)
    roi = optional_operand(FloatTensor)
    scales = optional_operand(FloatTensor)
    sizes = optional_operand(ShapeVector)
    y = result_def(AnyTensor)
    antialias = flag_prop(0)
    axes = ints_prop()
    coordinate_transformation_mode = str_prop("half_pixel", choices=(
        "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
        "asymmetric", "tf_crop_and_resize"))
    cubic_coeff_a = float_prop(-0.75)
    exclude_outside = flag_prop(0)
    extrapolation_value = float_prop(0.0)
    keep_aspect_ratio_policy = str_prop("stretch", choices=(
        "stretch", "not_larger", "not_smaller"))
    mode = str_prop("nearest", choices=("nearest", "linear", "cubic"))
    nearest_mode = str_prop("round_prefer_floor", choices=(
        "round_prefer_floor", "round_prefer_ceil", "floor", "ceil"))

    @classmethod
    def _given(cls, args, name):
        """('absent' | 'unknown' | values) for scales / sizes."""
        if not args.has(name) or args.length(name) == 0:
            return "absent"
        values = args.value(name)
        return values if values is not None else "unknown"

    @classmethod
    def rule(cls, args):
        x = args.shape("x")
        for name in ("scales", "sizes"):
            _check_vector(args, name)
        scales, sizes = cls._given(args, "scales"), cls._given(args, "sizes")
        if scales == "absent" and sizes == "absent":
            raise ShapeError("resize needs either scales or sizes")
        if scales != "absent" and sizes != "absent":
            raise ShapeError("resize takes either scales or sizes, not both")
        axes = args["axes"]
        count = len(axes) if axes is not None else (len(x) if x is not None else None)
        name = "scales" if scales != "absent" else "sizes"
        length = args.length(name)
        if count is not None and length is not None and length != count:
            raise ShapeError(f"resize {name} has {length} values but there are {count} axes")
        if "unknown" in (scales, sizes):
            if x is None:
                return [tensor(None, args.element("x"))]
            axes_n = S.normalize_axes(axes, len(x)) if axes is not None else range(len(x))
            shape = tuple(None if i in axes_n else d for i, d in enumerate(x))
            return [tensor(shape, args.element("x"))]
        shape = S.resize(x, scales if scales != "absent" else None,
                         sizes if sizes != "absent" else None, axes,
                         args["keep_aspect_ratio_policy"])
        return [tensor(shape, args.element("x"))]


class _AxesOp(_RowMajorOp):
    """Squeeze/unsqueeze: `shape_rule(x, axes)` gives the result shape from the `axes`
    operand's values, or from its length alone (each axis unknown) when they are not
    known."""

    moves_values = ("data",)
    data = operand(AnyTensor)

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        x, axes = args.shape("data"), args.ints("axes")
        if args.has("axes") and axes is None:
            count = args.axes_length("axes")
            if count is None or x is None:
                return [tensor(None, args.element("data"))]
            axes = [None] * count
        return [tensor(cls.shape_rule(x, axes), args.element("data"))]


SqueezeOp = declare_op(
    _AxesOp, "graph.squeeze", "SqueezeOp",
    "Removes the `axes` dims (each must be 1), or every dim of size 1.",
    axes=optional_operand(IndexVector), squeezed=result_def(AnyTensor),
    shape_rule=staticmethod(S.squeeze))
UnsqueezeOp = declare_op(
    _AxesOp, "graph.unsqueeze", "UnsqueezeOp",
    "Inserts dims of size 1 at `axes` (positions in the result).",
    axes=operand(IndexVector), expanded=result_def(AnyTensor),
    shape_rule=staticmethod(S.unsqueeze))


class _ByVectorOp(GraphOp):
    """Expand and Tile: the input's shape, changed by the values (or only the length) of
    the 1-D operand named `by`, through `shape_rule(shape, values, length)`."""

    input = operand(AnyTensor)
    output = result_def(AnyTensor)

    @classmethod
    def rule(cls, args):
        shape = cls.shape_rule(args.shape("input"), args.ints(cls.by), args.length(cls.by))
        return [tensor(shape, args.element("input"))]


@register_op
class ExpandOp(_ByVectorOp):
    """Broadcasts the input with the `shape` operand's dims (both ways, as numpy)."""

    name = "graph.expand"
    moves_values = ("input",)
    shape = operand(ShapeVector)
    by = "shape"
    shape_rule = staticmethod(S.expand)

    bound_rule = classmethod(B.expand_bounds)

    @classmethod
    def fold_values(cls, args, result_types):
        values, x = args.value("input"), args.type("input")
        target = args.ints("shape")
        if values is None or not _static(x) or target is None or None in target:
            return None
        if S.num_elements(result_types[0].shape) > MAX_KNOWN_ELEMENTS:
            return None
        return [S.expand_values(values, x.shape, target)[0]]


@register_op
class TileOp(_ByVectorOp):
    name = "graph.tile"
    repeats = operand(ShapeVector)
    by = "repeats"
    shape_rule = staticmethod(S.tile)

    bound_rule = classmethod(B.at_upper)
