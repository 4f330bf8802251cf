"""Kernel ops for the neural-network compute kernels: `kernel.conv2d`, `kernel.matmul`,
`kernel.pool2d`, `kernel.softmax`, `kernel.layer_norm` and `kernel.reduce`, with their
workspace rules (see dialects/kernel.py)."""

from __future__ import annotations

from palimpsest.dialects.graph import shapes as S
from palimpsest.dialects.kernel_elementwise import Epilogue
from palimpsest.dialects.kernel_base import (
    KernelOp, _float, _int, _ints, _plus, _shape, _str, _times, conv_operands_problem,
    is_float, is_numeric,
)
from palimpsest.ir.opdef import register_op
from palimpsest.ir.types import FloatType, IntegerType, f32, f64

# -- convolution -------------------------------------------------------------------------------

@register_op
class Conv2dOp(Epilogue, KernelOp):
    """2-D grouped convolution (cross-correlation) as im2col + matmul (depthwise: a
    multiply-accumulate per kernel offset). ins: X (N x C x H x W), W (M x C/group x kh
    x kw), optional B (M), then the epilogue's ins (kernel_elementwise.py, `Epilogue`);
    out N x M x Ho x Wo. `pads` = top, left, bottom, right."""

    name = "kernel.conv2d"
    core_arity = (2, 3)
    group = _int(1)
    strides = _ints((1, 1), 2, 1)
    dilations = _ints((1, 1), 2, 1)
    pads = _ints((0, 0, 0, 0), 4, 0)

    @classmethod
    def core_check(cls, in_types, config):
        return conv_operands_problem(in_types, config, "4")

    @classmethod
    def core_result_shapes(cls, in_shapes, config):
        return [S.conv(in_shapes[0], in_shapes[1], None, config["strides"], config["pads"],
                       config["dilations"], config["group"])]

    # A depthwise conv's im2col holds a band of channels at a time (see workspace_shape):
    # about this many elements, one channel at least (f32: 2 MiB; a 256 KiB band, kept in
    # L2, ran MobileNetV2 32% slower: its per-band numpy calls cost more than the misses)
    DEPTHWISE_BAND = 1 << 19
    # Any other conv's im2col matrix (C*kh*kw x Ho*Wo) holds at most this many elements
    # (f32: 4 MiB) unless one output row's columns need more: the kernels fill and
    # multiply it a band of output rows at a time (a 256x256 decoder conv's whole
    # matrix was 75 MB of the arena)
    IM2COL_BAND = 1 << 20

    @classmethod
    def is_depthwise(cls, w_shape, config) -> bool:
        """One input channel per group (and more than one group): each channel's own
        kernel-offset rows times its own weights, a band of channels at a time."""
        return w_shape[1] == 1 and config["group"] > 1

    @classmethod
    def core_workspace_roles(cls, in_types, config):
        w_shape = tuple(in_types[1].shape)
        roles = ["padded"] if any(config["pads"]) else []
        if cls.is_depthwise(w_shape, config):
            if w_shape[2:] != (1, 1):
                roles.append("im2col")
        elif not (w_shape[2:] == (1, 1) and tuple(config["strides"]) == (1, 1)
                  and not any(config["pads"])):
            roles.append("im2col")
        return roles

    @classmethod
    def core_workspace_shape(cls, role, in_shapes, config):
        x, w = in_shapes[0], in_shapes[1]
        top, left, bottom, right = config["pads"]
        if role == "padded":
            return (x[1], _plus(x[2], top + bottom), _plus(x[3], left + right))
        out = cls.core_result_shapes(in_shapes, config)[0]
        if cls.is_depthwise(w, config):
            # per channel: its kh*kw rows and its M/C results, each at most Ho rows of
            # the padded width; a band of channels, never less than one (monotone in the
            # shapes, so a bound's size holds every smaller run-time shape)
            if out is None or None in w:
                return (None,)
            per = _times(w[2] * w[3] + w[0] // config["group"], out[2],
                         _plus(x[3], left + right))
            total = _times(per, x[1])
            if total is None:
                return (None,)
            return (max(per, min(total, cls.DEPTHWISE_BAND)),)
        rows, columns = _times(x[1], w[2], w[3]), _times(out[2], out[3])
        if rows is None or columns is None:
            return (rows, columns)
        # the whole matrix while it is small, else about IM2COL_BAND elements, one output
        # row's columns at least: the kernels take as many whole output rows a band as
        # fit (monotone in the shapes, so a bound's size holds every smaller shape)
        return (rows, min(columns, max(out[3], cls.IM2COL_BAND // max(1, rows))))


# -- matrix products ----------------------------------------------------------------------------

@register_op
class MatmulOp(Epilogue, KernelOp):
    """Y = alpha * op(A) @ op(B) + beta * C: numpy.matmul semantics (batch dims
    broadcast, 1-D operands promoted); op = swap of the last two dims when transA /
    transB; C optional, broadcast to Y."""

    name = "kernel.matmul"
    core_arity = (2, 3)
    transA = _int(0, (0, 1))
    transB = _int(0, (0, 1))
    alpha = _float(1.0)
    beta = _float(1.0)

    @classmethod
    def core_check(cls, in_types, config):
        a, b = in_types[0], in_types[1]
        if not is_numeric(a.element_type) or any(t.element_type != a.element_type
                                                  for t in in_types):
            return "multiplies numbers (not i1), with every in of the same element type"
        for name, t in (("transA", a), ("transB", b)):
            if config[name] and len(t.shape) < 2:
                return f"{name} needs an operand of rank 2 or more, got '{t}'"
        if not is_float(a.element_type) and (config["alpha"] != 1.0 or config["beta"] != 1.0):
            return "alpha and beta other than 1 need f32 or f64"
        return None

    @staticmethod
    def _swapped(shape, flag):
        if not flag or shape is None:
            return shape
        return tuple(shape[:-2]) + (shape[-1], shape[-2])

    @classmethod
    def core_result_shapes(cls, in_shapes, config):
        shape = S.matmul(cls._swapped(in_shapes[0], config["transA"]),
                         cls._swapped(in_shapes[1], config["transB"]))
        if len(in_shapes) == 3 and shape is not None and in_shapes[2] is not None:
            if not S.unidirectional_broadcastable(in_shapes[2], shape):
                raise S.ShapeError(f"C {S.fmt(in_shapes[2])} does not broadcast to the "
                                   f"product {S.fmt(shape)}")
        return [shape]


# -- pooling --------------------------------------------------------------------------------------

@register_op
class Pool2dOp(KernelOp):
    """2-D max or average pooling over N x C x H x W, with strides, dilations, pads
    (top, left, bottom, right), ceil_mode and (avg) count_include_pad."""

    name = "kernel.pool2d"
    mode = _str(None, ("max", "avg"))
    kernel_shape = _ints(None, 2, 1)
    strides = _ints((1, 1), 2, 1)
    dilations = _ints((1, 1), 2, 1)
    pads = _ints((0, 0, 0, 0), 4, 0)
    ceil_mode = _int(0, (0, 1))
    count_include_pad = _int(0, (0, 1))

    @classmethod
    def check(cls, in_types, config):
        x = in_types[0]
        if len(x.shape) != 4:
            return f"pools a 4-D input, got '{x}'"
        if config["mode"] == "avg" and not is_float(x.element_type):
            return "averages f32 or f64"
        if config["mode"] == "max" and not is_numeric(x.element_type):
            return "takes the max of numbers (not i1)"
        return None

    @classmethod
    def result_shapes(cls, in_shapes, config):
        return [S.pool(in_shapes[0], config["kernel_shape"], config["strides"], config["pads"],
                       config["dilations"], "NOTSET", config["ceil_mode"])]

    @classmethod
    def geometry(cls, in_shape, config):
        """Per spatial axis: (size, kernel, stride, dilation, pad begin, pad end, out,
        extent); size/out/extent None when dynamic."""
        out = cls.result_shapes([in_shape], config)[0]
        axes = []
        for a in range(2):
            k, s, d = config["kernel_shape"][a], config["strides"][a], config["dilations"][a]
            begin, end = config["pads"][a], config["pads"][a + 2]
            o = out[2 + a]
            extent = None if o is None else (o - 1) * s + (k - 1) * d + 1
            axes.append((in_shape[2 + a], k, s, d, begin, end, o, extent))
        return axes

    @classmethod
    def needs_padding(cls, in_shape, config) -> bool:
        """Whether some window reads a cell outside the input (a pad or a ceil_mode
        overhang); with a dynamic size, whether one may."""
        for size, _, _, _, begin, end, _, extent in cls.geometry(in_shape, config):
            if size is None or extent is None:
                if begin or end or config["ceil_mode"]:
                    return True
            elif begin or extent > size:
                return True
        return False

    @classmethod
    def uniform_count(cls, in_shape, config) -> bool:
        """Whether every average window counts all its kernel cells; with a dynamic
        size, whether it surely does."""
        include = config["count_include_pad"]
        for size, _, _, _, begin, end, _, extent in cls.geometry(in_shape, config):
            if size is None or extent is None:
                if begin or end or config["ceil_mode"]:
                    return False
            elif include and extent > size + begin + end:
                return False
            elif not include and (begin or extent > size):
                return False
        return True

    @classmethod
    def workspace_roles(cls, in_types, config):
        shape = _shape(in_types[0])
        roles = ["padded"] if cls.needs_padding(shape, config) else []
        if config["mode"] == "avg" and not cls.uniform_count(shape, config):
            roles.append("divisor")
        return roles

    @classmethod
    def workspace_shape(cls, role, in_shapes, config):
        geometry = cls.geometry(in_shapes[0], config)
        if role == "padded":
            return (in_shapes[0][1],) + tuple(g[7] for g in geometry)
        return tuple(g[6] for g in geometry)


# -- normalization -----------------------------------------------------------------------------

def _reduced_shape(shape, axes):
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


@register_op
class SoftmaxOp(KernelOp):
    """Softmax along `axis` (non-negative): exp(x - max) / sum."""

    name = "kernel.softmax"
    axis = _int(None)

    @classmethod
    def check(cls, in_types, config):
        x = in_types[0]
        if not is_float(x.element_type):
            return "computes f32 or f64"
        if not 0 <= config["axis"] < len(x.shape):
            return f"axis {config['axis']} is out of range for '{x}'"
        return None

    @classmethod
    def workspace_roles(cls, in_types, config):
        return ["stats"]

    @classmethod
    def workspace_shape(cls, role, in_shapes, config):
        return _reduced_shape(in_shapes[0], (config["axis"],))


@register_op
class LayerNormOp(KernelOp):
    """Normalizes over dims [axis, rank): (x - mean) / sqrt(var + epsilon) * scale + b.
    ins: X, Scale, optional B (both broadcast to the normalized dims)."""

    name = "kernel.layer_norm"
    arity = (2, 3)
    axis = _int(None)
    epsilon = _float(1e-5)

    @classmethod
    def check(cls, in_types, config):
        x = in_types[0]
        if not is_float(x.element_type) or any(t.element_type != x.element_type
                                                for t in in_types):
            return "computes f32 or f64, with every in of the same element type"
        if not 0 <= config["axis"] < len(x.shape):
            return f"axis {config['axis']} is out of range for '{x}'"
        normalized = tuple(x.shape[config["axis"]:])
        for t in in_types[1:]:
            if not S.unidirectional_broadcastable(tuple(t.shape), normalized):
                return f"'{t}' does not broadcast to the normalized dims {S.fmt(normalized)}"
        return None

    @classmethod
    def workspace_roles(cls, in_types, config):
        return ["mean", "var"]

    @classmethod
    def workspace_shape(cls, role, in_shapes, config):
        x = in_shapes[0]
        return _reduced_shape(x, tuple(range(config["axis"], len(x))))


# -- reductions ----------------------------------------------------------------------------------

@register_op
class ReduceOp(KernelOp):
    """mean / sum / max over `axes` (non-negative, sorted, at least one)."""

    name = "kernel.reduce"
    mode = _str(None, ("mean", "sum", "max"))
    axes = _ints(None, None, 0)
    keepdims = _int(1, (0, 1))

    @classmethod
    def check(cls, in_types, config):
        x = in_types[0]
        axes = config["axes"]
        if not is_numeric(x.element_type) and not (isinstance(x.element_type, FloatType)
                                                   and x.element_type.name == "f16"):
            return "reduces numbers (f16, f32, f64 or integers other than i1)"
        if not axes or list(axes) != sorted(set(axes)) or axes[-1] >= len(x.shape):
            return f"axes must be sorted distinct dims of '{x}', got {list(axes)}"
        return None

    @classmethod
    def result_shapes(cls, in_shapes, config):
        return [S.reduce(in_shapes[0], config["axes"], config["keepdims"])]

    @classmethod
    def accumulator(cls, in_type, config):
        """The element type the reduction accumulates in, when not the input's."""
        element = in_type.element_type
        if config["mode"] == "max":
            return None
        if isinstance(element, FloatType) and element.name == "f16":
            return f32
        if isinstance(element, IntegerType) and config["mode"] == "mean":
            return f64
        return None

    @classmethod
    def workspace_roles(cls, in_types, config):
        return ["acc"] if cls.accumulator(in_types[0], config) is not None else []

    @classmethod
    def workspace_shape(cls, role, in_shapes, config):
        return cls.result_shapes(in_shapes, config)[0]

    @classmethod
    def workspace_element(cls, role, in_types, config):
        return cls.accumulator(in_types[0], config)
