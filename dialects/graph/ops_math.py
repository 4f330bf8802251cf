"""More elementwise graph ops: inverse and hyperbolic trigonometry, the activations of
later opsets (Celu, Mish, Swish, Shrink, ThresholdedRelu, PRelu), IsInf/IsNaN, the
bitwise integer ops and CastLike. Most are `kernel.elementwise` steps (kernel_elementwise.py)
except where noted."""

from __future__ import annotations

import operator

from palimpsest.dialects.graph import bound_rules as B
from palimpsest.dialects.graph import shapes as S
from palimpsest.dialects.graph.ops_base import (
    ONNX_DTYPES, AnyTensor, BoolTensor, FloatTensor, GraphOp, NumericTensor, ShapeError,
    declare_op, flag_prop, float_prop, int_prop, str_prop, tensor, tensor_where,
)
from palimpsest.dialects.graph.ops_elementwise import (
    BinaryOp, BoolResult, FloatUnaryOp, UnaryOp,
)
from palimpsest.ir.opdef import InPlace, operand, register_op, result_def
from palimpsest.ir.types import IntegerType

IntegerTensor = tensor_where("a tensor of integers",
                             lambda t: isinstance(t, IntegerType) and t.width > 1)

AcosOp = declare_op(FloatUnaryOp, "graph.acos", "AcosOp")
AcoshOp = declare_op(FloatUnaryOp, "graph.acosh", "AcoshOp")
AsinOp = declare_op(FloatUnaryOp, "graph.asin", "AsinOp")
AsinhOp = declare_op(FloatUnaryOp, "graph.asinh", "AsinhOp")
AtanOp = declare_op(FloatUnaryOp, "graph.atan", "AtanOp")
AtanhOp = declare_op(FloatUnaryOp, "graph.atanh", "AtanhOp")
CoshOp = declare_op(FloatUnaryOp, "graph.cosh", "CoshOp")
SinhOp = declare_op(FloatUnaryOp, "graph.sinh", "SinhOp")
TanOp = declare_op(FloatUnaryOp, "graph.tan", "TanOp")
MishOp = declare_op(FloatUnaryOp, "graph.mish", "MishOp")
CeluOp = declare_op(FloatUnaryOp, "graph.celu", "CeluOp", alpha=float_prop(1.0))
SwishOp = declare_op(FloatUnaryOp, "graph.swish", "SwishOp", alpha=float_prop(1.0))
ThresholdedReluOp = declare_op(FloatUnaryOp, "graph.thresholded_relu", "ThresholdedReluOp",
                               alpha=float_prop(1.0))
ShrinkOp = declare_op(
    UnaryOp, "graph.shrink", "ShrinkOp",
    "y = x - bias if x > lambd, x + bias if x < -lambd, else 0 (any numeric type).",
    bias=float_prop(0.0), lambd=float_prop(0.5))


@register_op
class PReluOp(GraphOp):
    """y = x if x >= 0 else slope * x; slope broadcasts to x (unidirectionally)."""

    name = "graph.prelu"
    traits = GraphOp.traits + (InPlace((0,)),)
    x = operand(NumericTensor)
    slope = operand(NumericTensor)
    y = result_def(AnyTensor)

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        element = args.same_element("x", "slope")
        x, slope = args.shape("x"), args.shape("slope")
        S.broadcast(x, slope)  # shapes that do not broadcast at all: its error
        if not S.unidirectional_broadcastable(slope, x):
            raise ShapeError(f"slope of shape {S.fmt(slope)} does not broadcast to X's "
                             f"shape {S.fmt(x)}")
        return [tensor(x, element)]


class _ClassifyOp(BoolResult, UnaryOp):
    traits = GraphOp.traits
    x = operand(FloatTensor)
    y = result_def(BoolTensor)


IsNaNOp = declare_op(_ClassifyOp, "graph.is_nan", "IsNaNOp")
IsInfOp = declare_op(_ClassifyOp, "graph.is_inf", "IsInfOp",
                     detect_negative=flag_prop(1),
                     detect_positive=flag_prop(1))


class _BitwiseOp(BinaryOp):
    a = operand(IntegerTensor)
    b = operand(IntegerTensor)


BitwiseAndOp = declare_op(_BitwiseOp, "graph.bitwise_and", "BitwiseAndOp",
                          apply=staticmethod(operator.and_))
BitwiseOrOp = declare_op(_BitwiseOp, "graph.bitwise_or", "BitwiseOrOp",
                         apply=staticmethod(operator.or_))
BitwiseXorOp = declare_op(_BitwiseOp, "graph.bitwise_xor", "BitwiseXorOp",
                          apply=staticmethod(operator.xor))
BitwiseNotOp = declare_op(UnaryOp, "graph.bitwise_not", "BitwiseNotOp",
                          x=operand(IntegerTensor))


BitShiftOp = declare_op(
    _BitwiseOp, "graph.bit_shift", "BitShiftOp",
    "Logical left, arithmetic right shifts of integers (signed ones since opset 28).",
    direction=str_prop(choices=("LEFT", "RIGHT")))


@register_op
class CastLikeOp(GraphOp):
    """Cast `input` to the element type of `target_type` (whose values are not read)."""

    name = "graph.cast_like"
    input = operand(AnyTensor)
    target_type = operand(AnyTensor)
    output = result_def(AnyTensor)
    saturate = flag_prop(1)
    round_mode = str_prop("up", choices=("up", "down", "nearest"))

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        return [tensor(args.shape("input"), args.element("target_type"))]


@register_op
class BitCastOp(GraphOp):
    """The same bits read as element type `to` (an ONNX type code of the same width)."""

    name = "graph.bit_cast"
    input = operand(AnyTensor)
    output = result_def(AnyTensor)
    to = int_prop(values=tuple(sorted(ONNX_DTYPES)))

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        target = ONNX_DTYPES[args["to"]]
        source = args.element("input")
        # widths as stored: i1 takes a byte, as ONNX's bool does
        if source is not None and max(source.width, 8) != max(target.width, 8):
            raise ShapeError(f"cannot reinterpret {source} ({source.width} bits) as {target} "
                             f"({target.width} bits)")
        return [tensor(args.shape("input"), target)]
