"""Normalizations, losses and pooling of later opsets: LpNormalization, LRN,
GroupNormalization, MeanVarianceNormalization, LpPool, NegativeLogLikelihoodLoss and
SoftmaxCrossEntropyLoss."""

from __future__ import annotations

from palimpsest.dialects.graph import bound_rules as B
from palimpsest.dialects.graph import shapes as S
from palimpsest.dialects.graph.ops_base import (
    AnyTensor, FloatTensor, GraphOp, IndexTensor, ShapeError, float_prop, int_prop, ints_prop,
    positive, same_type_as, str_prop, tensor,
)
from palimpsest.dialects.graph.ops_nn import AUTO_PAD, _NormOp, _PoolOp
from palimpsest.ir.opdef import operand, optional_operand, register_op, result_def, \
    variadic_result


class _SameShapeFloatOp(GraphOp):
    x = operand(FloatTensor)
    y = result_def(AnyTensor)

    rule, bound_rule = same_type_as("x")


@register_op
class LpNormOp(_SameShapeFloatOp):
    name = "graph.lp_norm"
    axis = int_prop(-1)
    p = int_prop(2, values=(1, 2))

    @classmethod
    def rule(cls, args):
        x = args.shape("x")
        if x is not None:
            S.normalize_axis(args["axis"], len(x))
        return super().rule(args)


@register_op
class LRNOp(_SameShapeFloatOp):
    name = "graph.lrn"
    alpha = float_prop(0.0001)
    beta = float_prop(0.75)
    bias = float_prop(1.0)
    size = int_prop(check=positive)


@register_op
class MeanVarianceNormOp(_SameShapeFloatOp):
    name = "graph.mean_variance_norm"
    axes = ints_prop()

    @classmethod
    def rule(cls, args):
        x = args.shape("x")
        if x is not None:
            S.normalize_axes(args["axes"] or [0, 2, 3], len(x))
        return super().rule(args)


@register_op
class GroupNormOp(_NormOp):
    """scale and bias: one per channel (opset 21), or one per group (opset 18: told
    apart by their length)."""

    name = "graph.group_norm"
    bias = operand(FloatTensor)
    num_groups = int_prop(check=positive)
    stash_type = int_prop(1)

    @classmethod
    def rule(cls, args):
        channels = cls.channels(args, 3, "input must be N x C x D1...")
        groups = args["num_groups"]
        if channels is not None and channels % groups:
            raise ShapeError(f"{channels} channels do not split into {groups} groups")
        for name in ("scale", "bias"):
            shape = args.shape(name)
            if shape is not None and (len(shape) != 1 or shape[0] not in (None, groups,
                                                                       channels)):
                raise ShapeError(f"'{name}' must have num_groups or C elements, got "
                                 f"{S.fmt(shape)}")
        return [tensor(args.shape("x"), args.element("x"))]


@register_op
class LpPoolOp(_PoolOp):
    name = "graph.lp_pool"
    y = result_def(AnyTensor)
    p = int_prop(2)
    auto_pad = AUTO_PAD

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        return [tensor(cls.pooled(args), args.element("x"))]


REDUCTIONS = ("none", "mean", "sum")


class _LossOp(GraphOp):
    scores = operand(FloatTensor)
    target = operand(IndexTensor)
    weight = optional_operand(FloatTensor)
    loss = result_def(AnyTensor)
    ignore_index = int_prop(optional=True)
    reduction = str_prop("mean", choices=REDUCTIONS)

    @classmethod
    def loss_type(cls, args):
        x, target = args.shape("scores"), args.shape("target")
        if x is not None and len(x) < 2:
            raise ShapeError(f"input must be N x C x D1..., got {S.fmt(x)}")
        if x is not None and target is not None:
            expected = (x[0],) + tuple(x[2:])
            S.merge_shapes(tuple(target), expected, "target and input's N x D1... dims")
        if args["reduction"] == "none":
            shape = target if target is not None else (
                (x[0],) + tuple(x[2:]) if x is not None else None)
            return tensor(shape, args.element("scores"))
        return tensor((), args.element("scores"))


@register_op
class NegativeLogLikelihoodLossOp(_LossOp):
    name = "graph.negative_log_likelihood_loss"

    @classmethod
    def rule(cls, args):
        return [cls.loss_type(args)]


@register_op
class SoftmaxCrossEntropyLossOp(_LossOp):
    """Results: loss and, optionally, log_prob (the input's shape)."""

    name = "graph.softmax_cross_entropy_loss"
    log_prob = variadic_result(AnyTensor)

    @classmethod
    def rule(cls, args):
        count = args.num_results if args.num_results is not None else 1
        if count not in (1, 2):
            raise ShapeError(f"has {count} results, expected loss and optionally log_prob")
        result = [cls.loss_type(args)]
        if count == 2:
            result.append(tensor(args.shape("scores"), args.element("scores")))
        return result
