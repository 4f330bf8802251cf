"""Neural-network graph ops: matmul, gemm, convolution, pooling, normalization,
softmax and dropout."""

from __future__ import annotations

from palimpsest.dialects.graph import bound_rules as B
from palimpsest.dialects.graph import shapes as S
from palimpsest.dialects.graph.ops_base import (
    AnyTensor, BoolTensor, FloatTensor, GraphOp, NumericTensor, ShapeError, flag_prop,
    float_prop, int_prop, ints_prop, non_negative, positive, str_prop, tensor,
)
from palimpsest.ir.opdef import (
    operand, optional_operand, register_op, result_def, variadic_result,
)
from palimpsest.ir.types import f32, i1, i64

AUTO_PAD = str_prop("NOTSET", choices=S.AUTO_PADS)


def _vector(args, name: str, length, what: str) -> None:
    """Check that operand `name` is a 1-D tensor of `length` elements (when known)."""
    shape = args.shape(name)
    if shape is None:
        return
    if len(shape) != 1:
        raise ShapeError(f"{what} '{name}' must be 1-D, got shape {S.fmt(shape)}")
    if length is not None and shape[0] is not None and shape[0] != length:
        raise ShapeError(f"{what} '{name}' must have {length} elements, got {shape[0]}")


# ---------------------------------------------------------------------------
# Matrix products


@register_op
class MatMulOp(GraphOp):
    """numpy.matmul semantics (batch dims broadcast, 1-D operands promoted)."""

    name = "graph.matmul"
    a = operand(NumericTensor)
    b = operand(NumericTensor)
    y = result_def(AnyTensor)

    bound_rule = classmethod(B.matmul_bounds)

    @classmethod
    def rule(cls, args):
        element = args.same_element("a", "b")
        return [tensor(S.matmul(args.shape("a"), args.shape("b")), element)]


@register_op
class GemmOp(GraphOp):
    """Y = alpha * op(A) @ op(B) + beta * C, op = transpose when transA/transB."""

    name = "graph.gemm"
    a = operand(NumericTensor)
    b = operand(NumericTensor)
    c = optional_operand(NumericTensor)
    y = result_def(AnyTensor)
    alpha = float_prop(1.0)
    beta = float_prop(1.0)
    transA = flag_prop(0)
    transB = flag_prop(0)

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        element = args.same_element("a", "b", "c")
        shape = S.gemm(args.shape("a"), args.shape("b"), args.shape("c"),
                       args["transA"], args["transB"])
        return [tensor(shape, element)]


# ---------------------------------------------------------------------------
# Convolution


class ConvAttrs(GraphOp):
    """The attributes of every convolution (Conv, ConvTranspose, ConvInteger, QLinearConv),
    and Conv's output shape from them and operands `x` and `w`."""

    auto_pad = AUTO_PAD
    dilations = ints_prop(check=positive)
    group = int_prop(1, check=positive)
    kernel_shape = ints_prop(check=positive)
    pads = ints_prop(check=non_negative)
    strides = ints_prop(check=positive)

    @classmethod
    def conv_shape(cls, args):
        return S.conv(args.shape("x"), args.shape("w"), args["kernel_shape"], args["strides"],
                      args["pads"], args["dilations"], args["group"], args["auto_pad"])


class _ConvLike(ConvAttrs):
    x = operand(FloatTensor)
    w = operand(FloatTensor)
    b = optional_operand(FloatTensor)
    y = result_def(AnyTensor)


@register_op
class ConvOp(_ConvLike):
    """X: N x C x D1..Dn, W: M x C/group x k1..kn, B: M; Y: N x M x O1..On."""

    name = "graph.conv"

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        element = args.same_element("x", "w", "b")
        shape = cls.conv_shape(args)
        if shape is not None:
            _vector(args, "b", shape[1], "bias")
        return [tensor(shape, element)]


@register_op
class ConvTransposeOp(_ConvLike):
    """X: N x C x D.., W: C x M/group x k..; Y: N x M x O.."""

    name = "graph.conv_transpose"
    output_padding = ints_prop(check=non_negative)
    output_shape = ints_prop(check=positive)

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        element = args.same_element("x", "w", "b")
        shape = S.conv_transpose(
            args.shape("x"), args.shape("w"), args["kernel_shape"], args["strides"],
            args["pads"], args["dilations"], args["group"], args["auto_pad"],
            args["output_padding"], args["output_shape"])
        if shape is not None:
            _vector(args, "b", shape[1], "bias")
        return [tensor(shape, element)]


# ---------------------------------------------------------------------------
# Pooling


class _PoolOp(GraphOp):
    x = operand(FloatTensor)
    auto_pad = AUTO_PAD
    ceil_mode = flag_prop(0)
    dilations = ints_prop(check=positive)
    kernel_shape = ints_prop(optional=False, check=positive)
    pads = ints_prop(check=non_negative)
    strides = ints_prop(check=positive)

    @classmethod
    def pooled(cls, args):
        return S.pool(args.shape("x"), args["kernel_shape"], args["strides"], args["pads"],
                      args["dilations"], args["auto_pad"], args["ceil_mode"])


@register_op
class MaxPoolOp(_PoolOp):
    """Y, and optionally Indices (i64, flat indices into X). X may also be i8/ui8."""

    name = "graph.max_pool"
    x = operand(NumericTensor)
    y = result_def(AnyTensor)
    indices = variadic_result(AnyTensor)
    storage_order = int_prop(0, values=(0, 1))

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        shape = cls.pooled(args)
        count = args.num_results if args.num_results is not None else 1
        if count not in (1, 2):
            raise ShapeError(f"has {count} results, expected Y and optionally Indices")
        result = [tensor(shape, args.element("x"))]
        if count == 2:
            result.append(tensor(shape, i64))
        return result


@register_op
class AveragePoolOp(_PoolOp):
    name = "graph.average_pool"
    y = result_def(AnyTensor)
    count_include_pad = flag_prop(0)

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        return [tensor(cls.pooled(args), args.element("x"))]


class _GlobalPoolOp(GraphOp):
    x = operand(FloatTensor)
    y = result_def(AnyTensor)

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        return [tensor(S.global_pool(args.shape("x")), args.element("x"))]


@register_op
class GlobalAveragePoolOp(_GlobalPoolOp):
    name = "graph.global_average_pool"


@register_op
class GlobalMaxPoolOp(_GlobalPoolOp):
    name = "graph.global_max_pool"


# ---------------------------------------------------------------------------
# Normalization


class _NormOp(GraphOp):
    """A normalization: x scaled by `scale`, y of x's shape (BatchNormalization,
    InstanceNormalization, GroupNormalization, LayerNormalization, RMSNormalization)."""

    x = operand(FloatTensor)
    scale = operand(FloatTensor)
    y = result_def(AnyTensor)
    epsilon = float_prop(1e-5)

    bound_rule = classmethod(B.at_upper)

    @staticmethod
    def channels(args, rank: int, what: str):
        """C, dim 1 of x (None when unknown), once x is known to have `rank` dims or more
        (else a ShapeError: `what`, then x's shape)."""
        x = args.shape("x")
        if x is None:
            return None
        if len(x) < rank:
            raise ShapeError(f"{what}, got {S.fmt(x)}")
        return x[1]


@register_op
class BatchNormOp(_NormOp):
    """Inference form: Y only. In training mode two more results, running_mean and
    running_var (the `stats` group)."""

    name = "graph.batch_norm"
    b = operand(FloatTensor)
    input_mean = operand(FloatTensor)
    input_var = operand(FloatTensor)
    stats = variadic_result(AnyTensor)
    momentum = float_prop(0.9)
    training_mode = flag_prop(0)

    @classmethod
    def rule(cls, args):
        channels = cls.channels(args, 2, "batch_norm input must have rank 2 or more "
                                         "(N x C x ...)")
        for name in ("scale", "b", "input_mean", "input_var"):
            _vector(args, name, channels, "batch_norm operand")
        args.same_element("scale", "b")
        args.same_element("input_mean", "input_var")
        count = args.num_results if args.num_results is not None else 1
        if count not in (1, 3):
            raise ShapeError(f"has {count} results, expected Y, or Y, running_mean and "
                             f"running_var")
        if count == 3 and not args["training_mode"]:
            raise ShapeError("running_mean and running_var results need training_mode = 1")
        result = [tensor(args.shape("x"), args.element("x"))]
        if count == 3:
            mean_type = args.type("input_mean")
            result += [tensor((channels,), mean_type.element_type)] * 2
        return result


@register_op
class InstanceNormOp(_NormOp):
    name = "graph.instance_norm"
    b = operand(FloatTensor)

    @classmethod
    def rule(cls, args):
        element = args.same_element("x", "scale", "b")
        channels = cls.channels(args, 3, "instance_norm input must have rank 3 or more")
        for name in ("scale", "b"):
            _vector(args, name, channels, "instance_norm operand")
        return [tensor(args.shape("x"), element)]


class TrailingNormOp(_NormOp):
    """A normalization over dims [axis, rank) of x (LayerNormalization,
    RMSNormalization); stash_type is the type statistics are computed in."""

    axis = int_prop(-1)
    stash_type = int_prop(1)


@register_op
class LayerNormOp(TrailingNormOp):
    """Normalizes over dims [axis, rank). Optional results Mean and InvStdDev (the
    `stats` group) have the input's leading dims and 1s after."""

    name = "graph.layer_norm"
    b = optional_operand(FloatTensor)
    stats = variadic_result(AnyTensor)

    @classmethod
    def rule(cls, args):
        element = args.same_element("x", "scale", "b")
        x = args.shape("x")
        stats_shape = S.layer_norm_stats(x, args["axis"])
        if x is not None:
            axis = S.normalize_axis(args["axis"], len(x))
            normalized = x[axis:]
            for name in ("scale", "b"):
                shape = args.shape(name)
                if not S.unidirectional_broadcastable(shape, normalized):
                    raise ShapeError(f"layer_norm '{name}' of shape {S.fmt(shape)} does not "
                                     f"broadcast to the normalized dims {S.fmt(normalized)}")
        count = args.num_results if args.num_results is not None else 1
        if count not in (1, 2, 3):
            raise ShapeError(f"has {count} results, expected Y and optionally Mean and "
                             f"InvStdDev")
        stats_element = f32 if args["stash_type"] == 1 else element
        return [tensor(x, element)] + [tensor(stats_shape, stats_element)] * (count - 1)


class _SoftmaxLike(GraphOp):
    """Along `axis`; with `coerce_2d = 1` (the semantics before opset 13, which the
    importer sets for old models), along the flattened dims [axis, rank)."""

    input = operand(FloatTensor)
    output = result_def(AnyTensor)
    axis = int_prop(-1)
    coerce_2d = flag_prop(0)

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        x = args.shape("input")
        if x is not None and x:
            S.normalize_axis(args["axis"], len(x))
        return [tensor(x, args.element("input"))]


@register_op
class SoftmaxOp(_SoftmaxLike):
    name = "graph.softmax"


@register_op
class LogSoftmaxOp(_SoftmaxLike):
    name = "graph.log_softmax"


@register_op
class HardmaxOp(_SoftmaxLike):
    name = "graph.hardmax"


@register_op
class DropoutOp(GraphOp):
    """Identity at inference. Optional ratio and training_mode operands; optional
    mask result (i1)."""

    name = "graph.dropout"
    data = operand(AnyTensor)
    ratio = optional_operand(FloatTensor)
    training_mode = optional_operand(BoolTensor)
    output = result_def(AnyTensor)
    mask = variadic_result(BoolTensor)
    seed = int_prop(optional=True)

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        for name in ("ratio", "training_mode"):
            shape = args.shape(name)
            if shape is not None and shape != ():
                raise ShapeError(f"'{name}' must be a scalar, got shape {S.fmt(shape)}")
        count = args.num_results if args.num_results is not None else 1
        if count not in (1, 2):
            raise ShapeError(f"has {count} results, expected output and optionally mask")
        x = args.shape("data")
        return [tensor(x, args.element("data"))] + [tensor(x, i1)] * (count - 1)

