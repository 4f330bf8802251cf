"""Graph ops that index, scatter, sort and count: Trilu, Scatter/ScatterElements/ScatterND,
GatherND, CumSum/CumProd, TopK, OneHot, EyeLike, ReverseSequence, Einsum, Det, and the
ops whose result sizes only the data decides (NonZero, Unique, Compress,
NonMaxSuppression, TopK with a run-time k): those dims are `?`, and the result is
allocated at run time by the op that writes it."""

from __future__ import annotations

from palimpsest.dialects.graph import bound_rules as B
from palimpsest.dialects.graph import shapes as S
from palimpsest.dialects.graph.ops_base import (
    ONNX_DTYPES, AnyTensor, FloatTensor, GraphOp, IndexTensor, NumericTensor, ShapeError,
    flag_prop, floats_prop, int_prop, ints_prop, same_type_as, str_prop, tensor,
)
from palimpsest.ir.opdef import (
    operand, optional_operand, register_op, result_def, variadic_operand, variadic_result,
)
from palimpsest.ir.types import f32, i64


def _known_scalar(args, name):
    values = args.value(name)
    return values[0] if values is not None and len(values) == 1 else None


@register_op
class TriluOp(GraphOp):
    name = "graph.trilu"
    input = operand(AnyTensor)
    k = optional_operand(IndexTensor)
    output = result_def(AnyTensor)
    upper = flag_prop(1)

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        shape = args.shape("input")
        if shape is not None and len(shape) < 2:
            raise ShapeError(f"input must have rank >= 2, got {S.fmt(shape)}")
        return [tensor(shape, args.element("input"))]


REDUCTIONS = ("none", "add", "mul", "max", "min")


class _ScatterOp(GraphOp):
    data = operand(AnyTensor)
    indices = operand(IndexTensor)
    updates = operand(AnyTensor)
    output = result_def(AnyTensor)

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        element = args.same_element("data", "updates")
        return [tensor(args.shape("data"), element)]


@register_op
class ScatterOp(_ScatterOp):
    """Deprecated (opset 9/10) ScatterElements without reduction."""

    name = "graph.scatter"
    axis = int_prop(0)


@register_op
class ScatterElementsOp(_ScatterOp):
    name = "graph.scatter_elements"
    axis = int_prop(0)
    reduction = str_prop("none", choices=REDUCTIONS)


@register_op
class ScatterNDOp(_ScatterOp):
    name = "graph.scatter_nd"
    reduction = str_prop("none", choices=REDUCTIONS)


@register_op
class GatherNDOp(GraphOp):
    name = "graph.gather_nd"
    data = operand(AnyTensor)
    indices = operand(IndexTensor)
    output = result_def(AnyTensor)
    batch_dims = int_prop(0)

    @classmethod
    def rule(cls, args):
        data, indices = args.shape("data"), args.shape("indices")
        batch = args["batch_dims"]
        if data is None or indices is None or indices[-1] is None:
            return [tensor(None, args.element("data"))]
        if len(indices) < 1 or batch >= min(len(data), len(indices)):
            raise ShapeError(f"batch_dims {batch} needs rank > {batch} for data {S.fmt(data)} "
                             f"and indices {S.fmt(indices)}")
        if batch + indices[-1] > len(data):
            raise ShapeError(f"indices' last dim {indices[-1]} plus batch_dims {batch} exceeds "
                             f"data's rank {len(data)}")
        return [tensor(tuple(indices[:-1]) + tuple(data[batch + indices[-1]:]),
                       args.element("data"))]


class _CumulativeOp(GraphOp):
    x = operand(NumericTensor)
    axis = operand(IndexTensor)
    y = result_def(AnyTensor)
    exclusive = flag_prop(0)
    reverse = flag_prop(0)

    rule, bound_rule = same_type_as("x")


@register_op
class CumSumOp(_CumulativeOp):
    name = "graph.cum_sum"


@register_op
class CumProdOp(_CumulativeOp):
    name = "graph.cum_prod"


@register_op
class TopKOp(GraphOp):
    """k is a 1-D tensor of one element (TopK-1's attribute is rewritten into it)."""

    name = "graph.top_k"
    x = operand(NumericTensor)
    k = operand(IndexTensor)
    values = result_def(AnyTensor)
    indices = result_def(AnyTensor)
    axis = int_prop(-1)
    largest = flag_prop(1)
    sorted = flag_prop(1)

    @classmethod
    def rule(cls, args):
        x = args.shape("x")
        if x is None:
            return [tensor(None, args.element("x")), tensor(None, i64)]
        axis = S.normalize_axis(args["axis"], len(x))
        k = _known_scalar(args, "k")
        if k is not None and x[axis] is not None and not 0 <= k <= x[axis]:
            raise ShapeError(f"k = {k} is out of range for axis {axis} of size {x[axis]}")
        shape = tuple(k if i == axis else d for i, d in enumerate(x))
        return [tensor(shape, args.element("x")), tensor(shape, i64)]


@register_op
class UniqueOp(GraphOp):
    """Results Y, then optionally indices, inverse_indices, counts (i64)."""

    name = "graph.unique"
    x = operand(AnyTensor)
    y = result_def(AnyTensor)
    extras = variadic_result(AnyTensor)
    axis = int_prop(optional=True)
    sorted = flag_prop(1)

    @classmethod
    def rule(cls, args):
        x = args.shape("x")
        axis = args["axis"]
        if x is None:
            y = None
        elif axis is None:
            y = (None,)
        else:
            axis = S.normalize_axis(axis, len(x))
            y = tuple(None if i == axis else d for i, d in enumerate(x))
        count = (args.num_results or 1) - 1
        if count > 3:
            raise ShapeError(f"has at most 4 results, got {count + 1}")
        inverse = None
        if x is not None:
            inverse = (S.num_elements(x),) if axis is None else (x[axis],)
        extras = [tensor((None,), i64), tensor(inverse, i64), tensor((None,), i64)][:count]
        return [tensor(y, args.element("x"))] + extras


@register_op
class NonZeroOp(GraphOp):
    name = "graph.non_zero"
    x = operand(AnyTensor)
    y = result_def(AnyTensor)

    @classmethod
    def rule(cls, args):
        x = args.shape("x")
        return [tensor((len(x) if x is not None else None, None), i64)]


@register_op
class CompressOp(GraphOp):
    name = "graph.compress"
    input = operand(AnyTensor)
    condition = operand(AnyTensor)
    output = result_def(AnyTensor)
    axis = int_prop(optional=True)

    @classmethod
    def rule(cls, args):
        x, axis = args.shape("input"), args["axis"]
        if axis is None:
            return [tensor((None,), args.element("input"))]
        if x is None:
            return [tensor(None, args.element("input"))]
        axis = S.normalize_axis(axis, len(x))
        return [tensor(tuple(None if i == axis else d for i, d in enumerate(x)),
                       args.element("input"))]


@register_op
class OneHotOp(GraphOp):
    name = "graph.one_hot"
    indices = operand(NumericTensor)
    depth = operand(NumericTensor)
    values = operand(AnyTensor)
    output = result_def(AnyTensor)
    axis = int_prop(-1)

    @classmethod
    def rule(cls, args):
        indices = args.shape("indices")
        if indices is None:
            return [tensor(None, args.element("values"))]
        axis = S.normalize_axis(args["axis"], len(indices) + 1)
        depth = _known_scalar(args, "depth")
        depth = int(depth) if depth is not None else None
        shape = tuple(indices[:axis]) + (depth,) + tuple(indices[axis:])
        return [tensor(shape, args.element("values"))]


@register_op
class EyeLikeOp(GraphOp):
    name = "graph.eye_like"
    input = operand(AnyTensor)
    output = result_def(AnyTensor)
    dtype = int_prop(optional=True)
    k = int_prop(0)

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        shape = args.shape("input")
        if shape is not None and len(shape) != 2:
            raise ShapeError(f"input must be 2-D, got {S.fmt(shape)}")
        element = args.element("input")
        if args["dtype"] is not None:
            element = ONNX_DTYPES.get(args["dtype"])
            if element is None:
                raise ShapeError(f"dtype {args['dtype']} is not a supported element type")
        return [tensor(shape, element)]


@register_op
class ReverseSequenceOp(GraphOp):
    name = "graph.reverse_sequence"
    input = operand(AnyTensor)
    sequence_lens = operand(IndexTensor)
    y = result_def(AnyTensor)
    batch_axis = int_prop(1, values=(0, 1))
    time_axis = int_prop(0, values=(0, 1))

    rule, bound_rule = same_type_as("input")


def einsum_shape(equation: str, shapes: list):
    """The output shape of an einsum `equation` on operand `shapes` (None when a rank is
    unknown); ShapeError when the equation does not fit them."""
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ShapeError(f"equation '{equation}' names {len(terms)} operands, got "
                         f"{len(shapes)}")
    if any(s is None for s in shapes):
        return None
    sizes: dict = {}
    ellipsis = None
    for term, shape in zip(terms, shapes):
        letters = term.replace("...", "")
        extra = len(shape) - len(letters)
        if "..." in term:
            if extra < 0:
                raise ShapeError(f"term '{term}' has more letters than its operand's rank")
            before = term.index("...")
            dims = list(shape[before:before + extra])
            ellipsis = dims if ellipsis is None else list(S.broadcast(ellipsis, dims))
            shape = tuple(shape[:before]) + tuple(shape[before + extra:])
        elif extra:
            raise ShapeError(f"term '{term}' does not match an operand of rank {len(shape)}")
        for letter, dim in zip(letters, shape):
            known = sizes.get(letter)
            if known is None or known == 1:
                sizes[letter] = dim
            elif dim is not None and dim != 1 and dim != known:
                raise ShapeError(f"label '{letter}' is {known} and {dim}")
    if not arrow:
        counts = {c: lhs.count(c) for c in set(lhs) if c.isalpha()}
        rhs = ("..." if ellipsis else "") + "".join(sorted(c for c, n in counts.items()
                                                          if n == 1))
    before, dots, after = rhs.partition("...")
    out = [sizes[c] for c in before] + (list(ellipsis or []) if dots else []) + [
        sizes[c] for c in after]
    return tuple(out)


@register_op
class EinsumOp(GraphOp):
    name = "graph.einsum"
    inputs = variadic_operand(NumericTensor)
    output = result_def(AnyTensor)
    equation = str_prop()

    @classmethod
    def rule(cls, args):
        element = args.same_element("inputs")
        try:
            shape = einsum_shape(args["equation"], args.shapes("inputs"))
        except KeyError as error:
            raise ShapeError(f"output label {error} does not appear in an input") from None
        return [tensor(shape, element)]


@register_op
class DetOp(GraphOp):
    name = "graph.det"
    x = operand(FloatTensor)
    y = result_def(AnyTensor)

    @classmethod
    def rule(cls, args):
        x = args.shape("x")
        if x is not None:
            if len(x) < 2:
                raise ShapeError(f"input must have rank >= 2, got {S.fmt(x)}")
            x = tuple(x[:-2])
        return [tensor(x, args.element("x"))]


@register_op
class NonMaxSuppressionOp(GraphOp):
    """selected_indices: [?, 3] of (batch, class, box)."""

    name = "graph.non_max_suppression"
    boxes = operand(FloatTensor)
    scores = operand(FloatTensor)
    limits = variadic_operand(AnyTensor)   # max_output_boxes_per_class, iou and score thresholds
    selected_indices = result_def(AnyTensor)
    center_point_box = int_prop(0, values=(0, 1))

    @classmethod
    def rule(cls, args):
        if len(args.types("limits")) > 3:
            raise ShapeError("takes at most 5 operands")
        return [tensor((None, 3), i64)]


@register_op
class TfIdfVectorizerOp(GraphOp):
    name = "graph.tfidf_vectorizer"
    x = operand(IndexTensor)
    y = result_def(AnyTensor)
    max_gram_length = int_prop()
    max_skip_count = int_prop()
    min_gram_length = int_prop()
    mode = str_prop(choices=("TF", "IDF", "TFIDF"))
    ngram_counts = ints_prop(optional=False)
    ngram_indexes = ints_prop(optional=False)
    pool_int64s = ints_prop()
    pool_strings = str_prop(optional=True)
    weights = floats_prop()

    @classmethod
    def rule(cls, args):
        if args.properties.get("pool_strings") is not None:
            raise ShapeError("string pools are not supported (tensors of strings are not)")
        x = args.shape("x")
        width = max(args["ngram_indexes"] or [-1]) + 1
        if x is None:
            return [tensor(None, f32)]
        if len(x) == 1:
            return [tensor((width,), f32)]
        return [tensor((x[0], width), f32)]

