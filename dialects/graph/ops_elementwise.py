"""Elementwise graph ops: unary activations and math, binary arithmetic and comparisons
with numpy broadcasting, variadic max/min/sum/mean, where, clip and cast."""

from __future__ import annotations

import operator

from palimpsest.dialects.graph import bound_rules as B
from palimpsest.dialects.graph import shapes as S
from palimpsest.dialects.graph.ops_base import (
    MAX_KNOWN_ELEMENTS, ONNX_DTYPES, AnyTensor, BoolTensor, FloatTensor, GraphOp,
    NumericTensor, ShapeError, declare_op, flag_prop, float_prop, int_prop, str_prop,
    tensor,
)
from palimpsest.ir.opdef import (
    InPlace, operand, optional_operand, register_op, result_def, variadic_operand,
)
from palimpsest.ir.types import FloatType, IntegerType, i1

# ---------------------------------------------------------------------------
# Folding helpers (integer shape arithmetic only; floats are never computed here)


def _known(args, names):
    """[(values, shape)] for the named operands when all are known and static."""
    parts = []
    for name in names:
        for t, values in zip(args.types(name), args.values(name)):
            if values is None or not t.has_static_shape:
                return None
            parts.append((values, tuple(t.shape)))
    return parts


def _is_int_type(t) -> bool:
    return isinstance(t, IntegerType)


def fold_elementwise(args, names, result_types, fn):
    """Known values of an elementwise op whose operands are known integer tensors."""
    out = result_types[0]
    if out is None or not out.has_static_shape or out.num_elements() > MAX_KNOWN_ELEMENTS:
        return None
    if not _is_int_type(out.element_type):
        return None
    if not all(_is_int_type(t.element_type) for name in names for t in args.types(name)):
        return None
    parts = _known(args, names)
    if parts is None:
        return None
    values, _ = S.broadcast_values(fn, parts)
    return [values]


# ---------------------------------------------------------------------------
# Unary


class ElementwiseOp(GraphOp):
    """An op applied element by element: its result has the operands' element type, or
    the one `result_element` maps it to."""

    @classmethod
    def result_element(cls, element):
        return element


class BoolResult:
    """Mixed into an elementwise op whose results are i1 (comparisons, predicates)."""

    @classmethod
    def result_element(cls, element):
        return i1


class UnaryOp(ElementwiseOp):
    """y = f(x), same type (unless `result_element` says otherwise)."""

    traits = GraphOp.traits + (InPlace((0,)),)
    x = operand(NumericTensor)
    y = result_def(AnyTensor)

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        return [tensor(args.shape("x"), cls.result_element(args.element("x")))]


class FloatUnaryOp(UnaryOp):
    x = operand(FloatTensor)


class IntFoldingUnaryOp(UnaryOp):
    """A unary op that folds on known integer values with `apply`."""

    @staticmethod
    def apply(v):  # pragma: no cover - overridden
        return None

    @classmethod
    def fold_values(cls, args, result_types):
        return fold_elementwise(args, ["x"], result_types, cls.apply)


ReluOp = declare_op(UnaryOp, "graph.relu", "ReluOp")
NegOp = declare_op(IntFoldingUnaryOp, "graph.neg", "NegOp", apply=staticmethod(operator.neg))
AbsOp = declare_op(IntFoldingUnaryOp, "graph.abs", "AbsOp", apply=staticmethod(abs))
SignOp = declare_op(UnaryOp, "graph.sign", "SignOp")
SigmoidOp = declare_op(FloatUnaryOp, "graph.sigmoid", "SigmoidOp")
TanhOp = declare_op(FloatUnaryOp, "graph.tanh", "TanhOp")
ErfOp = declare_op(FloatUnaryOp, "graph.erf", "ErfOp")
ExpOp = declare_op(FloatUnaryOp, "graph.exp", "ExpOp")
LogOp = declare_op(FloatUnaryOp, "graph.log", "LogOp")
SqrtOp = declare_op(FloatUnaryOp, "graph.sqrt", "SqrtOp")
ReciprocalOp = declare_op(FloatUnaryOp, "graph.reciprocal", "ReciprocalOp")
FloorOp = declare_op(FloatUnaryOp, "graph.floor", "FloorOp")
CeilOp = declare_op(FloatUnaryOp, "graph.ceil", "CeilOp")
RoundOp = declare_op(FloatUnaryOp, "graph.round", "RoundOp")
SinOp = declare_op(FloatUnaryOp, "graph.sin", "SinOp")
CosOp = declare_op(FloatUnaryOp, "graph.cos", "CosOp")
SoftplusOp = declare_op(FloatUnaryOp, "graph.softplus", "SoftplusOp")
SoftsignOp = declare_op(FloatUnaryOp, "graph.softsign", "SoftsignOp")
HardSwishOp = declare_op(FloatUnaryOp, "graph.hard_swish", "HardSwishOp")
LeakyReluOp = declare_op(FloatUnaryOp, "graph.leaky_relu", "LeakyReluOp",
                         alpha=float_prop(0.01))
EluOp = declare_op(FloatUnaryOp, "graph.elu", "EluOp", alpha=float_prop(1.0))
SeluOp = declare_op(FloatUnaryOp, "graph.selu", "SeluOp",
                    alpha=float_prop(1.67326319217681884765625),
                    gamma=float_prop(1.05070102214813232421875))
HardSigmoidOp = declare_op(FloatUnaryOp, "graph.hard_sigmoid", "HardSigmoidOp",
                           alpha=float_prop(0.2), beta=float_prop(0.5))
GeluOp = declare_op(FloatUnaryOp, "graph.gelu", "GeluOp",
                    approximate=str_prop("none", choices=("none", "tanh")))


class _BoolUnaryOp(BoolResult, IntFoldingUnaryOp):
    x = operand(BoolTensor)
    y = result_def(BoolTensor)


NotOp = declare_op(_BoolUnaryOp, "graph.not", "NotOp", apply=staticmethod(operator.not_))


# ---------------------------------------------------------------------------
# Binary, with numpy broadcasting


class BinaryOp(ElementwiseOp):
    """c = a ∘ b with broadcasting; a and b share their element type."""

    traits = GraphOp.traits + (InPlace(),)
    a = operand(NumericTensor)
    b = operand(NumericTensor)
    c = result_def(AnyTensor)

    @staticmethod
    def apply(x, y):
        return None  # no folding unless a subclass says how

    bound_rule = classmethod(B.broadcast_bounds)

    @classmethod
    def rule(cls, args):
        element = args.same_element("a", "b")
        shape = S.broadcast(args.shape("a"), args.shape("b"))
        return [tensor(shape, cls.result_element(element))]

    @classmethod
    def fold_values(cls, args, result_types):
        return fold_elementwise(args, ["a", "b"], result_types, cls.apply)


AddOp = declare_op(BinaryOp, "graph.add", "AddOp", apply=staticmethod(operator.add))
SubOp = declare_op(BinaryOp, "graph.sub", "SubOp", apply=staticmethod(operator.sub))
MulOp = declare_op(BinaryOp, "graph.mul", "MulOp", apply=staticmethod(operator.mul))
DivOp = declare_op(BinaryOp, "graph.div", "DivOp", apply=staticmethod(S.int_div))
ModOp = declare_op(BinaryOp, "graph.mod", "ModOp", fmod=flag_prop(0))


@register_op
class PowOp(BinaryOp):
    """Pow's exponent may have another element type than its base."""

    name = "graph.pow"

    @classmethod
    def rule(cls, args):
        shape = S.broadcast(args.shape("a"), args.shape("b"))
        return [tensor(shape, args.element("a"))]

    @classmethod
    def fold_values(cls, args, result_types):
        return None


class CompareOp(BoolResult, BinaryOp):
    """Comparisons give i1."""


EqualOp = declare_op(CompareOp, "graph.equal", "EqualOp", apply=staticmethod(operator.eq),
                     a=operand(AnyTensor), b=operand(AnyTensor))
LessOp = declare_op(CompareOp, "graph.less", "LessOp", apply=staticmethod(operator.lt))
LessOrEqualOp = declare_op(CompareOp, "graph.less_or_equal", "LessOrEqualOp",
                           apply=staticmethod(operator.le))
GreaterOp = declare_op(CompareOp, "graph.greater", "GreaterOp", apply=staticmethod(operator.gt))
GreaterOrEqualOp = declare_op(CompareOp, "graph.greater_or_equal", "GreaterOrEqualOp",
                              apply=staticmethod(operator.ge))


class LogicalOp(BinaryOp):
    a = operand(BoolTensor)
    b = operand(BoolTensor)


AndOp = declare_op(LogicalOp, "graph.and", "AndOp",
                   apply=staticmethod(lambda x, y: bool(x and y)))
OrOp = declare_op(LogicalOp, "graph.or", "OrOp", apply=staticmethod(lambda x, y: bool(x or y)))
XorOp = declare_op(LogicalOp, "graph.xor", "XorOp",
                   apply=staticmethod(lambda x, y: bool(x) != bool(y)))

# ---------------------------------------------------------------------------
# Variadic: max, min, sum, mean


class VariadicOp(GraphOp):
    traits = GraphOp.traits + (InPlace(),)
    inputs = variadic_operand(NumericTensor)
    y = result_def(AnyTensor)

    @staticmethod
    def apply(*xs):
        return None

    def verify_(self):
        if not self.operands:
            raise self.error("needs at least one operand")
        super().verify_()

    bound_rule = classmethod(B.broadcast_bounds)

    @classmethod
    def rule(cls, args):
        if not args.has("inputs"):
            raise ShapeError("needs at least one operand")
        element = args.same_element("inputs")
        return [tensor(S.broadcast(*args.shapes("inputs")), element)]

    @classmethod
    def fold_values(cls, args, result_types):
        return fold_elementwise(args, ["inputs"], result_types, cls.apply)


MaxOp = declare_op(VariadicOp, "graph.max", "MaxOp", apply=staticmethod(lambda *xs: max(xs)))
MinOp = declare_op(VariadicOp, "graph.min", "MinOp", apply=staticmethod(lambda *xs: min(xs)))
SumOp = declare_op(VariadicOp, "graph.sum", "SumOp", apply=staticmethod(lambda *xs: sum(xs)))
MeanOp = declare_op(VariadicOp, "graph.mean", "MeanOp", inputs=variadic_operand(FloatTensor))


# ---------------------------------------------------------------------------
# Where, clip, cast


@register_op
class WhereOp(GraphOp):
    name = "graph.where"
    traits = GraphOp.traits + (InPlace((1, 2)),)
    condition = operand(BoolTensor)
    x = operand(AnyTensor)
    y = operand(AnyTensor)
    output = result_def(AnyTensor)

    bound_rule = classmethod(B.broadcast_bounds)

    @classmethod
    def rule(cls, args):
        element = args.same_element("x", "y")
        shape = S.broadcast(args.shape("condition"), args.shape("x"), args.shape("y"))
        return [tensor(shape, element)]

    @classmethod
    def fold_values(cls, args, result_types):
        return fold_elementwise(args, ["condition", "x", "y"], result_types,
                                lambda c, x, y: x if c else y)


@register_op
class ClipOp(GraphOp):
    """min and max are optional scalars (operandSegmentSizes says which are given)."""

    name = "graph.clip"
    traits = GraphOp.traits + (InPlace((0,)),)
    input = operand(NumericTensor)
    min = optional_operand(NumericTensor)
    max = optional_operand(NumericTensor)
    output = result_def(AnyTensor)

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        element = args.same_element("input", "min", "max")
        for bound in ("min", "max"):
            shape = args.shape(bound)
            if shape is not None and S.num_elements(shape) not in (None, 1):
                raise ShapeError(f"'{bound}' must be a scalar, got shape {S.fmt(shape)}")
        return [tensor(args.shape("input"), element)]


def _wrap_int(value: int, element) -> int | None:
    if element == i1:
        return bool(value)
    width = element.width
    if element.signedness == "unsigned":
        return value % (1 << width)
    value %= 1 << width
    return value - (1 << width) if value >= 1 << (width - 1) else value


@register_op
class CastOp(GraphOp):
    """`to` is the ONNX TensorProto data type code (1 = f32, 7 = i64, 9 = i1, ...)."""

    name = "graph.cast"
    traits = GraphOp.traits + (InPlace((0,)),)  # reused only when `to` keeps the type
    input = operand(AnyTensor)
    output = result_def(AnyTensor)
    to = int_prop(values=tuple(sorted(ONNX_DTYPES)))
    saturate = flag_prop(1)
    round_mode = str_prop("up", choices=("up", "down", "nearest"))

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        return [tensor(args.shape("input"), ONNX_DTYPES[args["to"]])]

    @classmethod
    def fold_values(cls, args, result_types):
        out = result_types[0]
        source = args.element("input")
        values = args.value("input")
        if values is not None and f"{source}{out.element_type}" in ("f16f32", "f16f64", "f32f64"):
            return [list(values)]   # (a float widened: exact)
        if values is None or not isinstance(source, IntegerType):
            return None
        target = out.element_type
        if isinstance(target, IntegerType):
            return [[None if v is None else _wrap_int(int(v), target) for v in values]]
        if isinstance(target, FloatType) and target.name in ("f32", "f64"):
            limit = 1 << (24 if target.name == "f32" else 53)
            if any(v is not None and abs(v) > limit for v in values):
                return None
            return [[None if v is None else float(v) for v in values]]
        return None

