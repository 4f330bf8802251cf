"""Quantization graph ops: QuantizeLinear and DequantizeLinear (per tensor, per axis,
blocked; integer, float8 and 4-bit types), DynamicQuantizeLinear, QLinearMatMul,
QLinearConv, ConvInteger and MatMulInteger, and onnxruntime's com.microsoft
MatMulIntegerToFloat (canonicalize_quant.py makes it from MatMulInteger, Cast and the
scale multiplies). Quantized tensors are 1-byte (or smaller) element types, so the planner
counts their bytes as such."""

from __future__ import annotations

from palimpsest.dialects.graph import bound_rules as B
from palimpsest.dialects.graph import shapes as S
from palimpsest.dialects.graph.ops_base import (
    ONNX_DTYPES, AnyTensor, FloatTensor, GraphOp, NumericTensor, ShapeError, flag_prop,
    int_prop, non_negative, tensor,
)
from palimpsest.dialects.graph.ops_nn import ConvAttrs
from palimpsest.ir.opdef import operand, optional_operand, register_op, result_def
from palimpsest.ir.types import IntegerType, f32, i32

ui8 = IntegerType(8, "unsigned")


def _dtype(code, what):
    element = ONNX_DTYPES.get(code)
    if element is None:
        raise ShapeError(f"{what} {code} is not a supported element type")
    return element


class _LinearQuantOp(GraphOp):
    """QuantizeLinear and DequantizeLinear, per tensor, per axis or blocked: y has x's
    shape, in the element type `result_element` gives. Each declares its scale and zero
    point (ONNX names them after y and after x)."""

    x = operand(AnyTensor)
    y = result_def(AnyTensor)
    axis = int_prop(1)
    block_size = int_prop(0, check=non_negative)
    output_dtype = int_prop(0)

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        return [tensor(args.shape("x"), cls.result_element(args))]


@register_op
class QuantizeLinearOp(_LinearQuantOp):
    """y = saturate(round(x / y_scale) + y_zero_point), in the zero point's type (or
    output_dtype, default uint8)."""

    name = "graph.quantize_linear"
    y_scale = operand(AnyTensor)
    y_zero_point = optional_operand(AnyTensor)
    precision = int_prop(0)
    saturate = flag_prop(1)

    @classmethod
    def result_element(cls, args):
        if args.has("y_zero_point"):
            element = args.element("y_zero_point")
            if args["output_dtype"] and _dtype(args["output_dtype"], "output_dtype") != element:
                raise ShapeError("output_dtype and the zero point's type differ")
            return element
        return _dtype(args["output_dtype"], "output_dtype") if args["output_dtype"] else ui8


@register_op
class DequantizeLinearOp(_LinearQuantOp):
    """y = (x - x_zero_point) * x_scale, in the scale's type (or output_dtype)."""

    name = "graph.dequantize_linear"
    x_scale = operand(AnyTensor)
    x_zero_point = optional_operand(AnyTensor)

    @classmethod
    def result_element(cls, args):
        if args["output_dtype"]:
            return _dtype(args["output_dtype"], "output_dtype")
        return args.element("x_scale")


@register_op
class DynamicQuantizeLinearOp(GraphOp):
    """Results y (uint8), y_scale and y_zero_point (scalars) from x's range."""

    name = "graph.dynamic_quantize_linear"
    x = operand(FloatTensor)
    y = result_def(AnyTensor)
    y_scale = result_def(AnyTensor)
    y_zero_point = result_def(AnyTensor)

    @classmethod
    def rule(cls, args):
        return [tensor(args.shape("x"), ui8), tensor((), f32), tensor((), ui8)]


@register_op
class QLinearMatMulOp(GraphOp):
    name = "graph.qlinear_matmul"
    a = operand(NumericTensor)
    a_scale = operand(AnyTensor)
    a_zero_point = operand(AnyTensor)
    b = operand(NumericTensor)
    b_scale = operand(AnyTensor)
    b_zero_point = operand(AnyTensor)
    y_scale = operand(AnyTensor)
    y_zero_point = operand(AnyTensor)
    y = result_def(AnyTensor)

    @classmethod
    def rule(cls, args):
        return [tensor(S.matmul(args.shape("a"), args.shape("b")),
                       args.element("y_zero_point"))]


@register_op
class MatMulIntegerOp(GraphOp):
    name = "graph.matmul_integer"
    a = operand(NumericTensor)
    b = operand(NumericTensor)
    a_zero_point = optional_operand(NumericTensor)
    b_zero_point = optional_operand(NumericTensor)
    y = result_def(AnyTensor)

    @classmethod
    def rule(cls, args):
        return [tensor(S.matmul(args.shape("a"), args.shape("b")), i32)]


def _into(shape, result, what) -> None:
    """A scale or bias broadcasts into the product `result` without growing it."""
    if shape is not None and result is not None \
            and not S.unidirectional_broadcastable(shape, result):
        raise ShapeError(f"'{what}' must broadcast into the {S.fmt(result)} product, "
                         f"got {S.fmt(shape)}")


@register_op
class MatMulIntegerToFloatOp(GraphOp):
    """onnxruntime's com.microsoft MatMulIntegerToFloat: MatMulInteger's int32 product
    cast to the scales' float type, times a_scale · b_scale (that product first, in that
    type), plus the bias: y = float(A·B) · (a_scale · b_scale) + bias, each step rounded
    as the unfused Cast, Mul and Add round it. The scales and the bias broadcast into the
    product (onnxruntime's: per tensor, or per output column)."""

    name = "graph.matmul_integer_to_float"
    a = operand(NumericTensor)
    b = operand(NumericTensor)
    a_scale = operand(FloatTensor)
    b_scale = operand(FloatTensor)
    a_zero_point = optional_operand(NumericTensor)
    b_zero_point = optional_operand(NumericTensor)
    bias = optional_operand(FloatTensor)
    y = result_def(FloatTensor)

    @classmethod
    def rule(cls, args):
        element = args.same_element("a_scale", "b_scale", "bias")
        shape = S.matmul(args.shape("a"), args.shape("b"))
        for what in ("a_scale", "b_scale", "bias"):
            _into(args.shape(what), shape, what)
        return [tensor(shape, element)]


@register_op
class ConvIntegerOp(ConvAttrs):
    name = "graph.conv_integer"
    x = operand(NumericTensor)
    w = operand(NumericTensor)
    x_zero_point = optional_operand(NumericTensor)
    w_zero_point = optional_operand(NumericTensor)
    y = result_def(AnyTensor)

    @classmethod
    def rule(cls, args):
        return [tensor(cls.conv_shape(args), i32)]


@register_op
class QLinearConvOp(ConvAttrs):
    name = "graph.qlinear_conv"
    x = operand(NumericTensor)
    x_scale = operand(AnyTensor)
    x_zero_point = operand(AnyTensor)
    w = operand(NumericTensor)
    w_scale = operand(AnyTensor)
    w_zero_point = operand(AnyTensor)
    y_scale = operand(AnyTensor)
    y_zero_point = operand(AnyTensor)
    bias = optional_operand(AnyTensor)
    y = result_def(AnyTensor)

    @classmethod
    def rule(cls, args):
        return [tensor(cls.conv_shape(args), args.element("y_zero_point"))]


