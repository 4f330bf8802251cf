"""Constants and the integer shape arithmetic sources of ONNX exports: constant,
constant_of_shape, shape, size, range."""

from __future__ import annotations

from palimpsest.dialects.graph import bound_rules as B
from palimpsest.dialects.graph import shapes as S
from palimpsest.dialects.graph.ops_base import (
    MAX_KNOWN_ELEMENTS, AnyTensor, GraphOp, NumericTensor, ScalarTensor, ShapeError,
    ShapeVector, dense_values, int_prop, tensor, tensor_prop,
)
from palimpsest.ir import attributes as A
from palimpsest.ir.opdef import operand, register_op, result_def
from palimpsest.ir.types import IntegerType, TensorType, f32, i64


@register_op
class ConstantOp(GraphOp):
    """A tensor known at compile time: `value` is a dense<...> literal or, for big
    weights, a dense_resource<...> blob; the result type is the value's type."""

    name = "graph.constant"
    output = result_def(AnyTensor)
    value = tensor_prop()

    @classmethod
    def rule(cls, args):
        value = args.properties.get("value")
        if value is None or not isinstance(getattr(value, "type", None), TensorType):
            return None
        return [value.type]

    @classmethod
    def fold_values(cls, args, result_types):
        return [dense_values(args.properties.get("value"))]

    def verify_(self):
        if self.results[0].type != self.properties["value"].type:
            raise self.error(f"result type '{self.results[0].type}' must be the type of its "
                             f"value, '{self.properties['value'].type}'")
        super().verify_()

    @classmethod
    def of(cls, values, type_: TensorType, location=None) -> "ConstantOp":
        """A constant holding `values` (a flat list, row-major) of type `type_`."""
        if len(values) > 1 and all(v == values[0] for v in values):
            values = values[:1]
        attr = A.DenseElementsAttr(type_, tuple(values))
        return cls([], [type_], {"value": attr}, location=location)


@register_op
class ConstantOfShapeOp(GraphOp):
    """A tensor of the dims in `input`, filled with `value` (one element; default
    0.0 : f32)."""

    name = "graph.constant_of_shape"
    input = operand(ShapeVector)
    output = result_def(AnyTensor)
    value = tensor_prop(optional=True)

    @classmethod
    def _element(cls, args):
        value = args.properties.get("value")
        if value is None:
            return f32
        if value.type.shape is None or S.num_elements(value.type.shape) != 1:
            raise ShapeError(f"'value' must hold exactly one element, got {value.type}")
        return value.type.element_type

    bound_rule = classmethod(B.constant_of_shape_bounds)

    @classmethod
    def rule(cls, args):
        element = cls._element(args)
        dims = args.ints("input")
        if dims is not None:
            if any(d is not None and d < 0 for d in dims):
                raise ShapeError(f"dims {S._vals(dims)} must not be negative")
            return [tensor(tuple(dims), element)]
        count = S.check_rank(args.length("input"), "constant_of_shape's shape operand")
        return [tensor(None if count is None else (None,) * count, element)]

    @classmethod
    def fold_values(cls, args, result_types):
        out = result_types[0]
        if not out.has_static_shape or out.num_elements() > MAX_KNOWN_ELEMENTS:
            return None
        if not isinstance(out.element_type, IntegerType):
            return None
        value = args.properties.get("value")
        fill = dense_values(value) if value is not None else [0]
        return None if not fill else [fill * out.num_elements()]


@register_op
class ShapeOp(GraphOp):
    """The dims [start, end) of the input's shape, as a 1-D i64 tensor."""

    name = "graph.shape"
    data = operand(AnyTensor)
    shape = result_def(AnyTensor)
    start = int_prop(0)
    end = int_prop(optional=True)

    @classmethod
    def rule(cls, args):
        return [tensor(S.shape_of(args.shape("data"), args["start"], args["end"]), i64)]

    @classmethod
    def fold_values(cls, args, result_types):
        x = args.shape("data")
        if x is None:
            return None
        return [S.shape_values(x, args["start"], args["end"])]

    @classmethod
    def fold_symbols(cls, args, result_types):
        x, tokens = args.shape("data"), args.dim_symbols("data")
        if x is None or tokens is None:
            return None
        dims = [d if d is not None else t for d, t in zip(x, tokens)]
        return [S.shape_values(dims, args["start"], args["end"])]


@register_op
class SizeOp(GraphOp):
    """The number of elements of the input, as a scalar i64 tensor."""

    name = "graph.size"
    data = operand(AnyTensor)
    size = result_def(AnyTensor)

    @classmethod
    def rule(cls, args):
        return [tensor((), i64)]

    @classmethod
    def fold_values(cls, args, result_types):
        total = S.num_elements(args.shape("data"))
        return None if total is None else [[total]]


@register_op
class RangeOp(GraphOp):
    """[start, start + delta, ...) up to limit, 1-D; the operands are scalars."""

    name = "graph.range"
    start = operand(ScalarTensor)
    limit = operand(ScalarTensor)
    delta = operand(ScalarTensor)
    output = result_def(AnyTensor)

    @classmethod
    def _known(cls, args):
        values = [args.value(n) for n in ("start", "limit", "delta")]
        if any(v is None or len(v) != 1 or v[0] is None for v in values):
            return None
        return [v[0] for v in values]

    @classmethod
    def rule(cls, args):
        element = args.same_element("start", "limit", "delta")
        for name in ("start", "limit", "delta"):
            if not NumericTensor.check(args.type(name)):
                raise ShapeError(f"'{name}' must be a number, got {args.type(name)}")
        known = cls._known(args)
        length = S.range_length(*known) if known is not None else None
        return [tensor((length,), element)]

    @classmethod
    def fold_values(cls, args, result_types):
        known = cls._known(args)
        out = result_types[0]
        if known is None or not isinstance(out.element_type, IntegerType):
            return None
        if S.range_length(*known) > MAX_KNOWN_ELEMENTS:
            return None
        return [S.range_values(*known)]
