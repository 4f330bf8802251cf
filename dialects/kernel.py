"""The kernel dialect: one op per compute kernel the backends implement, with every byte
of its intra-op scratch memory an explicit **workspace** buffer operand.

    %cols = buffer.alloc {kind = "workspace"} : buffer<27x1024xf32>
    kernel.conv2d %x, %w, %b, %y, %cols {dilations = array<i64: 1, 1>, group = 1,
        operandSegmentSizes = array<i32: 3, 1, 1>, pads = array<i64: 0, 0, 0, 0>,
        strides = array<i64: 1, 1>} : buffer<1x3x34x34xf32>, ...
    buffer.dealloc %cols : buffer<27x1024xf32>

Every kernel op has three operand groups, `ins` (read), `outs` (written) and `workspaces`
(written and read back, only during the op), and declares those memory effects; the
planner sees a workspace as a buffer that lives only inside its op (passes/liveness.py),
so it can share bytes with activations that are dead while the op runs.

A workspace's size is a function of the op's operand shapes and properties:
`workspace_types(in_types, config)` (per op class) gives the buffer types, in operand
order; `workspace_roles` names them. The roles depend only on the properties and the
static operand types (a `?` dim makes the rule conservative), so the IR, the verifier and
a backend agree on which workspace is which; at run time `workspace_shape(role, shapes,
config)` sizes a workspace whose type has `?` dims. The rules:

| op | workspaces |
|---|---|
| `kernel.conv2d` | `padded` C x (H+pt+pb) x (W+pl+pr) when a pad is non-zero; `im2col` (C*kh*kw) x (Ho*Wo) unless the kernel is 1x1 with stride 1 and no pads (then the input is the matrix); depthwise (one input channel per group, several groups): no im2col but `product` M x Ho x Wo (kernels larger than 1x1). Per image: a batch reuses them |
| `kernel.matmul` | none (transposes are strided views; bias/alpha/beta are applied in the out buffer) |
| `kernel.pool2d` | `padded` C x Eh x Ew (E = (O-1)*stride + dilated kernel) when windows reach into padding (pads, or a ceil_mode overhang); `divisor` Ho x Wo (avg) when windows count different numbers of cells |
| `kernel.softmax` | `stats`: the input's shape with the axis dim 1 (row max, then row sums) |
| `kernel.layer_norm` | `mean`, `var`: the input's leading dims, 1 for each normalized dim |
| `kernel.reduce` | `acc` (the out's shape) when the accumulation type differs from the element type: f16 sum/mean in f32, integer mean in f64 |
| `kernel.elementwise` | `scratch` (the out's shape and type) when a step needs one (leaky_relu, hard_swish, softsign, elu, selu) |
| `kernel.resize` | `stage<i>`: the result after each resized axis but the last; `taps` (linear/cubic): one tap, flat, sized for the largest stage |
| `kernel.transpose`, `kernel.concat`, `kernel.gather`, `kernel.pad` | none |
| `kernel.generic` | none: any other graph op, by name (`op`), run with its reference kernel |

`kernel.elementwise` is one kernel for a fused chain of elementwise graph ops:
`steps = ["graph.add", "graph.relu"]` lists them, `wiring = [[0, 1], [2]]` says what
each step reads: values 0..n-1 are the op's ins, value n+i is the result of step i.
Step i > 0 reads the result of step i-1 exactly once (a linear chain; the backend
computes every step into the out buffer, so the intermediates take no memory);
`step_props` (optional) holds each step's graph properties.
"""

from __future__ import annotations

from typing import ClassVar

from palimpsest.dialects.buffer import AnyBuffer, BufferType, ComputeOp
from palimpsest.dialects.graph import shapes as S
from palimpsest.ir import attributes as A
from palimpsest.ir.core import Operation
from palimpsest.ir.opdef import (
    READ, WRITE, MemoryEffect, PropDef, register_op, variadic_operand,
)
from palimpsest.ir.types import FloatType, IntegerType, f32, f64, i32, i64

# ---------------------------------------------------------------------------
# Property declarations


def _int(default=None, values=None) -> PropDef:
    def check(attr):
        if attr.type != i64:
            return f"must be an i64 integer, got {attr}"
        if values is not None and attr.value not in values:
            return f"must be one of {', '.join(map(str, values))}, got {attr.value}"
        return None
    return PropDef(A.IntegerAttr, default=A.IntegerAttr(default) if default is not None else None,
                   check=check, description="an i64 integer")


def _ints(default=None, length=None, minimum=None) -> PropDef:
    def check(attr):
        if attr.element_type != i64:
            return f"must be an array of i64, got {attr}"
        if length is not None and len(attr.values) != length:
            return f"must have {length} values, got {attr}"
        if minimum is not None and any(v < minimum for v in attr.values):
            return f"must have values >= {minimum}, got {attr}"
        return None
    return PropDef(A.DenseArrayAttr,
                   default=A.DenseArrayAttr(i64, tuple(default)) if default is not None else None,
                   check=check, description="an array of i64")


def _floats(optional=True) -> PropDef:
    def check(attr):
        if attr.element_type != f64:
            return f"must be an array of f64, got {attr}"
        return None
    return PropDef(A.DenseArrayAttr, optional=optional, check=check,
                   description="an array of f64")


def _float(default) -> PropDef:
    def check(attr):
        if attr.type != f32:
            return f"must be an f32 float, got {attr}"
        return None
    return PropDef(A.FloatAttr, default=A.FloatAttr(float(default), f32), check=check,
                   description="an f32 float")


def _str(default=None, choices=None) -> PropDef:
    def check(attr):
        if choices is not None and attr.value not in choices:
            return f"must be one of {', '.join(repr(c) for c in choices)}, got {attr.value!r}"
        return None
    return PropDef(A.StringAttr, default=A.StringAttr(default) if default is not None else None,
                   check=check, description="a string")


def int_array(values) -> A.DenseArrayAttr:
    return A.DenseArrayAttr(i64, tuple(int(v) for v in values))


def f64_array(values) -> A.DenseArrayAttr:
    return A.DenseArrayAttr(f64, tuple(float(v) for v in values))


# ---------------------------------------------------------------------------
# Element types


def is_float(t) -> bool:
    """f32 or f64: the float types the kernels compute in directly."""
    return isinstance(t, FloatType) and t.name in ("f32", "f64")


def is_numeric(t) -> bool:
    """f32, f64, or an integer type other than i1."""
    return is_float(t) or (isinstance(t, IntegerType) and t.width > 1)


def _shape(type_):
    return tuple(type_.shape) if type_ is not None else None


def _compatible(expected, actual) -> bool:
    return len(expected) == len(actual) and all(
        e is None or a is None or e == a for e, a in zip(expected, actual))


# ---------------------------------------------------------------------------
# The ops


class KernelOp(Operation):
    """A kernel: reads `ins`, writes `outs`, uses `workspaces` as scratch during the op.

    Subclasses declare `arity` (min, max ins; max None: any), their properties, and
    the rules: `check` (operand types and properties), `result_shapes`,
    `workspace_roles` and `workspace_shape` (and `workspace_element` when a workspace's
    element type is not the first in's)."""

    ins = variadic_operand(AnyBuffer)
    outs = variadic_operand(AnyBuffer)
    workspaces = variadic_operand(AnyBuffer)
    effects = (MemoryEffect(READ, "ins"), MemoryEffect(WRITE, "outs"),
               MemoryEffect(READ, "workspaces"), MemoryEffect(WRITE, "workspaces"))
    arity: ClassVar[tuple] = (1, 1)

    # -- properties as Python values -------------------------------------------------------
    @classmethod
    def config_of(cls, properties: dict) -> dict:
        """Every declared property (defaults filled in) as a plain Python value."""
        config = {}
        for name, definition in cls.prop_defs.items():
            if name == "operandSegmentSizes":
                continue
            attr = properties.get(name, definition.default)
            config[name] = None if attr is None else A.to_python(attr)
        return config

    def config(self) -> dict:
        return self.config_of(self.properties)

    # -- rules (subclasses) -------------------------------------------------------------------
    @classmethod
    def check(cls, in_types: list, config: dict) -> str | None:
        """A message when the operand types or properties do not fit the kernel."""
        return None

    @classmethod
    def result_shapes(cls, in_shapes: list, config: dict) -> list:
        return [in_shapes[0]]

    @classmethod
    def result_elements(cls, in_types: list, config: dict) -> list:
        return [in_types[0].element_type]

    @classmethod
    def workspace_roles(cls, in_types: list, config: dict) -> list:
        return []

    @classmethod
    def workspace_shape(cls, role: str, in_shapes: list, config: dict) -> tuple:
        raise KeyError(role)

    @classmethod
    def workspace_element(cls, role: str, in_types: list, config: dict):
        return in_types[0].element_type

    @classmethod
    def workspace_types(cls, in_types: list, config: dict) -> list:
        """The workspace buffer types, in operand order (`?` where a dim is dynamic)."""
        shapes = [_shape(t) for t in in_types]
        return [BufferType(tuple(cls.workspace_shape(role, shapes, config)),
                           cls.workspace_element(role, in_types, config))
                for role in cls.workspace_roles(in_types, config)]

    # -- verification ----------------------------------------------------------------------------
    def verify_(self):
        ins, outs, workspaces = self.ins, self.outs, self.workspaces
        low, high = self.arity
        if len(ins) < low or (high is not None and len(ins) > high):
            expected = f"{low}" if low == high else (
                f"at least {low}" if high is None else f"{low} to {high}")
            raise self.error(f"takes {expected} ins, got {len(ins)}")
        if len(outs) != 1:
            raise self.error(f"writes one out, got {len(outs)}")
        in_types = [v.type for v in ins]
        config = self.config()
        try:
            problem = self.check(in_types, config)
            if problem:
                raise self.error(problem)
            shapes = self.result_shapes([_shape(t) for t in in_types], config)
            elements = self.result_elements(in_types, config)
            expected_ws = self.workspace_types(in_types, config)
        except S.ShapeError as error:
            raise self.error(str(error)) from None
        for index, (value, shape, element) in enumerate(zip(outs, shapes, elements)):
            actual = value.type
            if actual.element_type != element or (
                    shape is not None and not _compatible(shape, actual.shape)):
                raise self.error(f"out #{index} is '{actual}' but the kernel produces "
                                 f"{S.fmt(shape) if shape is not None else '*'} of {element}")
        if len(workspaces) != len(expected_ws):
            roles = self.workspace_roles(in_types, config)
            raise self.error(f"needs {len(expected_ws)} workspaces "
                             f"({', '.join(roles) or 'none'}), got {len(workspaces)}")
        for role, value, expected in zip(self.workspace_roles(in_types, config), workspaces,
                                         expected_ws):
            actual = value.type
            if actual.element_type != expected.element_type or not _compatible(
                    expected.shape, actual.shape):
                raise self.error(f"workspace '{role}' is '{actual}' but must be '{expected}'")


def segment_sizes_attr(ins: int, outs: int, workspaces: int) -> A.DenseArrayAttr:
    return A.DenseArrayAttr(i32, (ins, outs, workspaces))


# -- convolution -------------------------------------------------------------------------------

@register_op
class Conv2dOp(KernelOp):
    """2-D grouped convolution (cross-correlation) as im2col + matmul (depthwise: a
    multiply-accumulate per kernel offset). ins: X (N x C x H x W), W (M x C/group x kh
    x kw), optional B (M); out N x M x Ho x Wo. `pads` = top, left, bottom, right."""

    name = "kernel.conv2d"
    arity = (2, 3)
    group = _int(1)
    strides = _ints((1, 1), 2, 1)
    dilations = _ints((1, 1), 2, 1)
    pads = _ints((0, 0, 0, 0), 4, 0)

    @classmethod
    def check(cls, in_types, config):
        x, w = in_types[0], in_types[1]
        if len(x.shape) != 4 or len(w.shape) != 4:
            return f"takes a 4-D input and 4-D weights, got '{x}' and '{w}'"
        if not is_float(x.element_type) or any(t.element_type != x.element_type
                                                for t in in_types):
            return "computes f32 or f64, with every in of the same element type"
        if len(in_types) == 3 and len(in_types[2].shape) != 1:
            return f"takes a 1-D bias, got '{in_types[2]}'"
        if config["group"] < 1:
            return f"group must be positive, got {config['group']}"
        return None

    @classmethod
    def result_shapes(cls, in_shapes, config):
        return [S.conv(in_shapes[0], in_shapes[1], None, config["strides"], config["pads"],
                       config["dilations"], config["group"])]

    @classmethod
    def is_depthwise(cls, w_shape, config) -> bool:
        """One input channel per group (and more than one group): computed directly,
        one multiply-accumulate over the image per kernel offset, no im2col."""
        return w_shape[1] == 1 and config["group"] > 1

    @classmethod
    def workspace_roles(cls, in_types, config):
        w_shape = tuple(in_types[1].shape)
        roles = ["padded"] if any(config["pads"]) else []
        if cls.is_depthwise(w_shape, config):
            if w_shape[2:] != (1, 1):
                roles.append("product")
        elif not (w_shape[2:] == (1, 1) and tuple(config["strides"]) == (1, 1)
                  and not any(config["pads"])):
            roles.append("im2col")
        return roles

    @classmethod
    def workspace_shape(cls, role, in_shapes, config):
        x, w = in_shapes[0], in_shapes[1]
        top, left, bottom, right = config["pads"]
        if role == "padded":
            return (x[1], _plus(x[2], top + bottom), _plus(x[3], left + right))
        out = cls.result_shapes(in_shapes, config)[0]
        if role == "product":
            return (w[0], out[2], out[3])
        return (_times(x[1], w[2], w[3]), _times(out[2], out[3]))


def _plus(dim, extra):
    return None if dim is None else dim + extra


def _times(*dims):
    result = 1
    for d in dims:
        if d is None:
            return None
        result *= d
    return result


# -- matrix products ----------------------------------------------------------------------------

@register_op
class MatmulOp(KernelOp):
    """Y = alpha * op(A) @ op(B) + beta * C: numpy.matmul semantics (batch dims
    broadcast, 1-D operands promoted); op = swap of the last two dims when transA /
    transB; C optional, broadcast to Y."""

    name = "kernel.matmul"
    arity = (2, 3)
    transA = _int(0, (0, 1))
    transB = _int(0, (0, 1))
    alpha = _float(1.0)
    beta = _float(1.0)

    @classmethod
    def check(cls, in_types, config):
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
    def result_shapes(cls, in_shapes, config):
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


# -- fused elementwise chains ----------------------------------------------------------------------

# graph op -> (operand form, element kinds, needs scratch). Forms: "unary" (x),
# "binary" (a, b: broadcast), "variadic" (broadcast), "clip" (x, optional scalar min and
# max), "batch_norm" (x, scale, b, mean, var: per channel, axis 1). Kinds: "float"
# (f32/f64) or "numeric" (also integers). The chain value may only be the data operand
# (x) of unary, clip and batch_norm steps.
STEPS = {
    "graph.relu": ("unary", "numeric", False),
    "graph.neg": ("unary", "numeric", False),
    "graph.abs": ("unary", "numeric", False),
    "graph.exp": ("unary", "float", False),
    "graph.log": ("unary", "float", False),
    "graph.sqrt": ("unary", "float", False),
    "graph.tanh": ("unary", "float", False),
    "graph.sigmoid": ("unary", "float", False),
    "graph.erf": ("unary", "float", False),
    "graph.hard_sigmoid": ("unary", "float", False),
    "graph.sign": ("unary", "numeric", False),
    "graph.floor": ("unary", "float", False),
    "graph.ceil": ("unary", "float", False),
    "graph.round": ("unary", "float", False),
    "graph.sin": ("unary", "float", False),
    "graph.cos": ("unary", "float", False),
    "graph.reciprocal": ("unary", "float", False),
    "graph.softplus": ("unary", "float", False),
    "graph.softsign": ("unary", "float", True),
    "graph.elu": ("unary", "float", True),
    "graph.selu": ("unary", "float", True),
    "graph.hard_swish": ("unary", "float", True),
    "graph.leaky_relu": ("unary", "float", True),
    "graph.add": ("binary", "numeric", False),
    "graph.sub": ("binary", "numeric", False),
    "graph.mul": ("binary", "numeric", False),
    "graph.div": ("binary", "float", False),
    "graph.pow": ("binary", "float", False),
    "graph.max": ("variadic", "numeric", False),
    "graph.min": ("variadic", "numeric", False),
    "graph.clip": ("clip", "numeric", False),
    "graph.batch_norm": ("batch_norm", "float", False),
}
STEP_ARITY = {"unary": (1, 1), "binary": (2, 2), "variadic": (1, None), "clip": (1, 3),
              "batch_norm": (5, 5)}


def step_shape(name: str, shapes: list):
    """The result shape of one step from its operand shapes."""
    form = STEPS[name][0]
    if form in ("binary", "variadic"):
        return S.broadcast(*shapes)
    return shapes[0]


@register_op
class ElementwiseOp(KernelOp):
    """A chain of elementwise graph ops computed into one out buffer (see the module
    doc for `steps`, `wiring` and `step_props`)."""

    name = "kernel.elementwise"
    arity = (1, None)
    steps = PropDef(A.ArrayAttr, description="an array of graph op names")
    wiring = PropDef(A.ArrayAttr, description="an array of arrays of value numbers")
    step_props = PropDef(A.ArrayAttr, optional=True,
                         description="an array of dictionaries (one per step)")

    @classmethod
    def check(cls, in_types, config):
        steps, wiring = config["steps"], config["wiring"]
        props = config["step_props"]
        n = len(in_types)
        if not steps or not all(isinstance(s, str) for s in steps):
            return "steps must be a non-empty array of graph op names"
        if not isinstance(wiring, list) or len(wiring) != len(steps) or not all(
                isinstance(w, list) and all(isinstance(v, int) for v in w) for w in wiring):
            return f"wiring must hold one array of value numbers per step ({len(steps)})"
        if props is not None and (len(props) != len(steps)
                                  or not all(isinstance(p, dict) for p in props)):
            return f"step_props must hold one dictionary per step ({len(steps)})"
        element = in_types[0].element_type
        for index, (name, refs) in enumerate(zip(steps, wiring)):
            if name not in STEPS:
                return f"step {index}: '{name}' is not a fusable elementwise op"
            form, kind, _ = STEPS[name]
            low, high = STEP_ARITY[form]
            if len(refs) < low or (high is not None and len(refs) > high):
                return f"step {index} ('{name}') reads {len(refs)} values"
            previous = n + index - 1
            for position, ref in enumerate(refs):
                if not 0 <= ref < n and not (index and ref == previous):
                    return (f"step {index} reads value {ref}: steps read the ins (0..{n - 1}) "
                            f"and the result of the step before")
                if ref == previous and index and position and form not in ("binary",
                                                                              "variadic"):
                    return f"step {index} ('{name}') reads the chain value as operand {position}"
            if index and refs.count(previous) != 1:
                return f"step {index} must read the result of step {index - 1} exactly once"
            if (kind == "float" and not is_float(element)) or not is_numeric(element):
                return f"step {index} ('{name}') does not compute {element}"
        if any(t.element_type != element for t in in_types):
            return "every in must have the element type of the out"
        return None

    @classmethod
    def result_shapes(cls, in_shapes, config):
        values = list(in_shapes)
        for name, refs in zip(config["steps"], config["wiring"]):
            args = [values[r] for r in refs]
            if any(a is None for a in args):
                values.append(None)
            else:
                values.append(step_shape(name, args))
        return [values[-1]]

    @classmethod
    def workspace_roles(cls, in_types, config):
        return ["scratch"] if any(STEPS.get(s, (0, 0, False))[2] for s in config["steps"]) \
            else []

    @classmethod
    def workspace_shape(cls, role, in_shapes, config):
        return cls.result_shapes(in_shapes, config)[0]


# -- data movement -------------------------------------------------------------------------------

@register_op
class TransposeOp(KernelOp):
    name = "kernel.transpose"
    perm = _ints(None, None, 0)

    @classmethod
    def result_shapes(cls, in_shapes, config):
        return [S.transpose(in_shapes[0], config["perm"])]


@register_op
class ConcatOp(KernelOp):
    """Joins the ins along `axis` (non-negative)."""

    name = "kernel.concat"
    arity = (1, None)
    axis = _int(None)

    @classmethod
    def check(cls, in_types, config):
        if any(t.element_type != in_types[0].element_type for t in in_types):
            return "joins ins of one element type"
        return None

    @classmethod
    def result_shapes(cls, in_shapes, config):
        return [S.concat(in_shapes, config["axis"])]


@register_op
class GatherOp(KernelOp):
    """data[..., indices, ...] along `axis` (non-negative); ins: data, indices."""

    name = "kernel.gather"
    arity = (2, 2)
    axis = _int(0)

    @classmethod
    def check(cls, in_types, config):
        index = in_types[1].element_type
        if not (isinstance(index, IntegerType) and index.width in (32, 64)):
            return f"takes i32 or i64 indices, got {index}"
        return None

    @classmethod
    def result_shapes(cls, in_shapes, config):
        return [S.gather(in_shapes[0], in_shapes[1], config["axis"])]


@register_op
class PadOp(KernelOp):
    """Pads (or, with negative values, crops) every axis: `pads` = begins then ends.
    Mode constant (ins: data, optional one-element value), edge, reflect or wrap."""

    name = "kernel.pad"
    arity = (1, 2)
    mode = _str("constant", ("constant", "edge", "reflect", "wrap"))
    pads = _ints(None)

    @classmethod
    def check(cls, in_types, config):
        x = in_types[0]
        if len(config["pads"]) != 2 * len(x.shape):
            return f"pads needs {2 * len(x.shape)} values for '{x}', got {len(config['pads'])}"
        if len(in_types) == 2:
            if in_types[1].element_type != x.element_type:
                return "the pad value must have the data's element type"
            if config["mode"] != "constant":
                return f"mode '{config['mode']}' takes no pad value"
        return None

    @classmethod
    def result_shapes(cls, in_shapes, config):
        return [S.pad(in_shapes[0], config["pads"])]


RESIZE_COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                           "align_corners", "asymmetric", "tf_crop_and_resize")


@register_op
class ResizeOp(KernelOp):
    """Separable resize, one axis at a time in `axes` order (ONNX Resize semantics):
    axis `axes[i]` becomes `sizes[i]` long with scale `scales[i]`; `roi` (begin, end per
    axis) for tf_crop_and_resize."""

    name = "kernel.resize"
    axes = _ints(None, None, 0)
    sizes = _ints(None, None, 0)
    scales = _floats(optional=False)
    roi = _floats()
    mode = _str("nearest", ("nearest", "linear", "cubic"))
    coordinate_transformation_mode = _str("half_pixel", RESIZE_COORDINATE_MODES)
    nearest_mode = _str("round_prefer_floor", ("round_prefer_floor", "round_prefer_ceil",
                                               "floor", "ceil"))
    cubic_coeff_a = _float(-0.75)
    exclude_outside = _int(0, (0, 1))
    extrapolation_value = _float(0.0)
    antialias = _int(0, (0, 1))

    @classmethod
    def check(cls, in_types, config):
        x = in_types[0]
        axes, sizes, scales = config["axes"], config["sizes"], config["scales"]
        if not (len(axes) == len(sizes) == len(scales)) or not axes:
            return "axes, sizes and scales need one value per resized axis"
        if len(set(axes)) != len(axes) or max(axes) >= len(x.shape):
            return f"axes {list(axes)} are not distinct dims of '{x}'"
        if config["mode"] != "nearest" and not is_float(x.element_type):
            return f"mode '{config['mode']}' computes f32 or f64"
        if config["coordinate_transformation_mode"] == "tf_crop_and_resize" and (
                config["roi"] is None or len(config["roi"]) != 2 * len(axes)):
            return "tf_crop_and_resize needs a roi of a begin and an end per axis"
        return None

    @classmethod
    def stage_shapes(cls, in_shape, config) -> list:
        """The shape after each resized axis (the last is the result's)."""
        shapes, shape = [], list(in_shape)
        for axis, size in zip(config["axes"], config["sizes"]):
            shape[axis] = size
            shapes.append(tuple(shape))
        return shapes

    @classmethod
    def result_shapes(cls, in_shapes, config):
        return [cls.stage_shapes(in_shapes[0], config)[-1]]

    @classmethod
    def workspace_roles(cls, in_types, config):
        roles = [f"stage{i}" for i in range(len(config["axes"]) - 1)]
        if config["mode"] != "nearest":
            roles.append("taps")
        return roles

    @classmethod
    def workspace_shape(cls, role, in_shapes, config):
        stages = cls.stage_shapes(in_shapes[0], config)
        if role == "taps":
            sizes = [_times(*s) for s in stages]
            return (None if None in sizes else max(sizes),)
        return stages[int(role[len("stage"):])]


# -- any other graph op -------------------------------------------------------------------------

@register_op
class GenericOp(ComputeOp):
    """Graph op `op` run by the backend's implementation of the graph op (its reference
    kernel): the kernel level's fallback, with no workspace. Same operands and
    properties as `buffer.compute`."""

    name = "kernel.generic"


KERNEL_OPS = {cls.name: cls for cls in (
    Conv2dOp, MatmulOp, Pool2dOp, SoftmaxOp, LayerNormOp, ReduceOp, ElementwiseOp,
    TransposeOp, ConcatOp, GatherOp, PadOp, ResizeOp)}

__all__ = [
    "KERNEL_OPS", "STEPS", "ConcatOp", "Conv2dOp", "ElementwiseOp", "GatherOp", "GenericOp",
    "KernelOp", "LayerNormOp", "MatmulOp", "PadOp", "Pool2dOp", "ReduceOp", "ResizeOp",
    "SoftmaxOp", "TransposeOp", "f64_array", "int_array", "is_float", "is_numeric",
    "segment_sizes_attr", "step_shape",
]
