"""The kernel dialect's shared base: `KernelOp` (operand groups, memory effects, the
workspace rule interface and the verifier), the property declarations and element-type
predicates the kernel ops use. The ops themselves are in kernel_nn.py,
kernel_elementwise.py and kernel_data.py; dialects/kernel.py (the dialect's module,
with the workspace rules) imports them all."""

from __future__ import annotations

from functools import lru_cache
from typing import ClassVar

from palimpsest.dialects.buffer import AnyBuffer, BufferType
from palimpsest.dialects.graph import shapes as S
from palimpsest.ir import attributes as A
from palimpsest.ir.core import Operation
from palimpsest.ir.opdef import (
    READ, WRITE, MemoryEffect, PropDef, operand_groups, variadic_operand,
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


def conv_operands_problem(in_types, config, ranks: str) -> str | None:
    """What is wrong with a convolution's ins (input, weights, optional 1-D bias), all
    of one float element type, input and weights of one rank (`ranks`: "4" for 4-D,
    ">=3" for any of at least 3), or its group; None when nothing is."""
    x, w = in_types[0], in_types[1]
    rank = len(x.shape)
    if len(w.shape) != rank or (rank != 4 if ranks == "4" else rank < 3):
        what = "a 4-D input and 4-D weights" if ranks == "4" else \
            "an input and weights of one rank >= 3"
        return f"takes {what}, got '{x}' and '{w}'"
    if not is_float(x.element_type) or any(t.element_type != x.element_type
                                            for t in in_types):
        return "computes f32 or f64, with every in of the same element type"
    if len(in_types) == 3 and len(in_types[2].shape) != 1:
        return f"takes a 1-D bias, got '{in_types[2]}'"
    if config["group"] < 1:
        return f"group must be positive, got {config['group']}"
    return None


def is_numeric(t) -> bool:
    """f32, f64, or an integer type other than i1."""
    return is_float(t) or (isinstance(t, IntegerType) and t.width > 1)


def _shape(type_):
    return tuple(type_.shape) if type_ is not None else None


def _compatible(expected, actual) -> bool:
    if expected == actual:  # the common case, answered in C
        return True
    return len(expected) == len(actual) and all(
        e is None or a is None or e == a for e, a in zip(expected, actual))


# ---------------------------------------------------------------------------
# The ops


class KernelOp(Operation):
    """A kernel: reads `ins`, writes `outs`, uses `workspaces` as scratch during the op.

    Subclasses declare `arity` (min, max ins; max None: any), `outs_arity` (min, max
    outs: a kernel of several results writes the first ones its compute has), their
    properties, and the rules: `check` (operand types and properties), `result_shapes`,
    `workspace_roles` and `workspace_shape` (and `workspace_element` when a workspace's
    element type is not the first in's)."""

    ins = variadic_operand(AnyBuffer)
    outs = variadic_operand(AnyBuffer)
    workspaces = variadic_operand(AnyBuffer)
    effects = (MemoryEffect(READ, "ins"), MemoryEffect(WRITE, "outs"),
               MemoryEffect(READ, "workspaces"), MemoryEffect(WRITE, "workspaces"))
    arity: ClassVar[tuple] = (1, 1)
    outs_arity: ClassVar[tuple] = (1, 1)

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
    def workspace_upper(cls, role: str, in_uppers: list, config: dict) -> tuple:
        """The largest shape of a workspace, from the ins' upper shapes (bounded `?` dims
        at their bounds, None where unbounded). The workspace shape at those shapes,
        unless the rule broadcasts a `?` against a static dim (then override this)."""
        return cls.workspace_shape(role, in_uppers, config)

    @classmethod
    def workspace_element(cls, role: str, in_types: list, config: dict):
        return in_types[0].element_type

    @classmethod
    def workspace_types(cls, in_types: list, config: dict) -> list:
        """The workspace buffer types, in operand order (`?` where a dim is dynamic;
        bounded where the ins' bounds give one: a workspace never shrinks when an in
        grows, so its shape at the ins' upper shapes bounds it)."""
        roles = cls.workspace_roles(in_types, config)
        if not roles:  # most kernels
            return []
        shapes = [_shape(t) for t in in_types]
        uppers = None
        if any(t.bounds is not None for t in in_types):
            uppers = [t.upper_shape for t in in_types]
        types = []
        for role in roles:
            type_ = BufferType(tuple(cls.workspace_shape(role, shapes, config)),
                               cls.workspace_element(role, in_types, config))
            if uppers is not None and not type_.has_static_shape:
                type_ = _bounded(type_, cls, role, uppers, config)
            types.append(type_)
        return types

    # -- verification ----------------------------------------------------------------------------
    def verify_(self):
        groups = operand_groups(self)  # the three accessors at the cost of one
        ins, outs, workspaces = groups["ins"], groups["outs"], groups["workspaces"]
        low, high = self.arity
        if len(ins) < low or (high is not None and len(ins) > high):
            expected = f"{low}" if low == high else (
                f"at least {low}" if high is None else f"{low} to {high}")
            raise self.error(f"takes {expected} ins, got {len(ins)}")
        low, high = self.outs_arity
        if not low <= len(outs) <= high:
            expected = "one out" if high == 1 else f"{low} to {high} outs"
            raise self.error(f"writes {expected}, got {len(outs)}")
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


def _bounded(type_: BufferType, cls, role: str, uppers: list, config: dict) -> BufferType:
    try:
        upper = cls.workspace_upper(role, uppers, config)
    except (S.ShapeError, TypeError, ValueError):
        return type_
    if upper is None or len(upper) != len(type_.shape):
        return type_
    return type_.with_bounds([None if d is not None or u is None else max(u, 1)
                              for d, u in zip(type_.shape, upper)])


@lru_cache(maxsize=256)  # immutable, and a few shapes cover every kernel of a model
def segment_sizes_attr(ins: int, outs: int, workspaces: int) -> A.DenseArrayAttr:
    return A.DenseArrayAttr(i32, (ins, outs, workspaces))


def _plus(dim, extra):
    return None if dim is None else dim + extra


def _times(*dims):
    result = 1
    for d in dims:
        if d is None:
            return None
        result *= d
    return result
