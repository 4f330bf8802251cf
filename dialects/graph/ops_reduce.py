"""Reductions: reduce_{mean,sum,max,min,prod,l1,l2,sum_square,log_sum_exp} with an
optional `axes` operand (ONNX opset 18 form), and arg_max / arg_min."""

from __future__ import annotations

import math

from palimpsest.dialects.graph import bound_rules as B
from palimpsest.dialects.graph import shapes as S
from palimpsest.dialects.graph.ops_base import (
    AnyTensor, GraphOp, IntTensor, NumericTensor, ShapeError, declare_op, flag_prop,
    int_prop, tensor, tensor_where,
)
from palimpsest.ir.opdef import operand, optional_operand, result_def
from palimpsest.ir.types import FloatType, IntegerType, i64

NumericOrBoolTensor = tensor_where("a tensor of numbers or i1",
                                   lambda t: isinstance(t, (FloatType, IntegerType)))


class ReduceOp(GraphOp):
    """Reduces over `axes` (all dims when absent or empty, unless
    noop_with_empty_axes); keepdims keeps reduced dims as 1."""

    data = operand(NumericTensor)
    axes = optional_operand(IntTensor)
    reduced = result_def(AnyTensor)
    keepdims = flag_prop(1)
    noop_with_empty_axes = flag_prop(0)
    # whether reducing over no axes (noop_with_empty_axes) returns the input unchanged; the
    # composite reductions still apply their elementwise step (ReduceL1 -> |x|,
    # ReduceSumSquare -> x * x, ...): those are not folded to the input
    noop_is_identity = True

    @staticmethod
    def combine(values):
        return None

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        x = args.shape("data")
        axes_shape = args.shape("axes")
        if axes_shape is not None and len(axes_shape) != 1:
            raise ShapeError(f"'axes' must be 1-D, got shape {S.fmt(axes_shape)}")
        axes = args.ints("axes")
        count = None
        if args.has("axes") and axes is None:
            count = args.length("axes")
            if count is None:  # unknown axes: only the rank is known when keepdims
                if x is None or not args["keepdims"]:
                    return [tensor(None, args.element("data"))]
                return [tensor(tuple(1 if d == 1 else None for d in x), args.element("data"))]
            if count == 0:
                axes, count = [], None
        shape = S.reduce(x, axes, args["keepdims"], args["noop_with_empty_axes"], count)
        return [tensor(shape, args.element("data"))]

    @classmethod
    def fold_values(cls, args, result_types):
        """Integer reductions of a known 1-D tensor over its only axis (the
        `ReduceProd(Slice(Shape(x)))` of flatten-like exports)."""
        values = args.value("data")
        data = args.type("data")
        out = result_types[0]
        if (values is None or data.shape is None or len(data.shape) != 1
                or not isinstance(data.element_type, IntegerType)
                or out is None or not out.has_static_shape):
            return None
        axes = args.ints("axes")
        if args.has("axes") and axes is None:
            return None
        if axes == [] and args["noop_with_empty_axes"]:
            return [list(values)] if cls.noop_is_identity else None
        if axes not in (None, [], [0], [-1]) or any(v is None for v in values):
            return None
        result = cls.combine(values)
        return None if result is None else [[result]]


def _max(values):
    return max(values) if values else None


def _min(values):
    return min(values) if values else None


ReduceMeanOp = declare_op(ReduceOp, "graph.reduce_mean", "ReduceMeanOp")
ReduceSumOp = declare_op(ReduceOp, "graph.reduce_sum", "ReduceSumOp", combine=staticmethod(sum))
ReduceMaxOp = declare_op(ReduceOp, "graph.reduce_max", "ReduceMaxOp",
                         data=operand(NumericOrBoolTensor), combine=staticmethod(_max))
ReduceMinOp = declare_op(ReduceOp, "graph.reduce_min", "ReduceMinOp",
                         data=operand(NumericOrBoolTensor), combine=staticmethod(_min))
ReduceProdOp = declare_op(ReduceOp, "graph.reduce_prod", "ReduceProdOp",
                          combine=staticmethod(math.prod))
ReduceL1Op = declare_op(ReduceOp, "graph.reduce_l1", "ReduceL1Op", noop_is_identity=False)
ReduceL2Op = declare_op(ReduceOp, "graph.reduce_l2", "ReduceL2Op", noop_is_identity=False)
ReduceSumSquareOp = declare_op(ReduceOp, "graph.reduce_sum_square", "ReduceSumSquareOp",
                               noop_is_identity=False)
ReduceLogSumExpOp = declare_op(ReduceOp, "graph.reduce_log_sum_exp", "ReduceLogSumExpOp",
                               noop_is_identity=False)
ReduceLogSumOp = declare_op(ReduceOp, "graph.reduce_log_sum", "ReduceLogSumOp",
                            noop_is_identity=False)


class ArgReduceOp(GraphOp):
    """Index (i64) of the max / min along `axis`."""

    data = operand(NumericTensor)
    reduced = result_def(AnyTensor)
    axis = int_prop(0)
    keepdims = flag_prop(1)
    select_last_index = flag_prop(0)

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        return [tensor(S.arg_reduce(args.shape("data"), args["axis"], args["keepdims"]), i64)]


ArgMaxOp = declare_op(ArgReduceOp, "graph.arg_max", "ArgMaxOp")
ArgMinOp = declare_op(ArgReduceOp, "graph.arg_min", "ArgMinOp")
