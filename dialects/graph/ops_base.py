"""Shared machinery of the graph dialect's op declarations: operand constraints,
property kinds (CONVENTIONS.md), the `GraphOp` base with its verifier, and the uniform
shape-inference hook `infer_result_types`.

Every graph op declares a `rule(args) -> list[TensorType | None]` classmethod: given
the operand types, attribute values and known operand values (an `Args`), it returns
the result types (None: cannot tell) or raises ShapeError. The verifier runs the rule
and checks the declared result types against it; `infer-shapes` runs it to refine them.
"""

from __future__ import annotations

import struct
import sys
from types import SimpleNamespace

from palimpsest.dialects.graph import bound_rules as B
from palimpsest.dialects.graph.shapes import ShapeError, check_rank, fmt, merge_shapes
from palimpsest.ir import attributes as A
from palimpsest.ir.core import Operation
from palimpsest.ir.opdef import (
    OPTIONAL, SINGLE, VARIADIC, Constraint, OperandDef, PropDef, Pure, register_op,
    segment_sizes,
)
from palimpsest.ir.types import FloatType, IndexType, IntegerType, TensorType, Type, i1, i64

# ---------------------------------------------------------------------------
# Operand and result constraints


def tensor_where(description: str, element=None, rank=None) -> Constraint:
    """A constraint: a tensor whose element type passes `element` and whose rank (when
    known) is `rank`."""
    def check(t):
        if not isinstance(t, TensorType):
            return False
        if element is not None and not element(t.element_type):
            return False
        return rank is None or t.shape is None or len(t.shape) == rank
    return Constraint(description, check)


def _is_int(t) -> bool:
    return isinstance(t, IntegerType) and t.width > 1


AnyTensor = tensor_where("a tensor")
FloatTensor = tensor_where("a tensor of floats", lambda t: isinstance(t, FloatType))
IntTensor = tensor_where("a tensor of integers", _is_int)
BoolTensor = tensor_where("a tensor of i1", lambda t: t == i1)
NumericTensor = tensor_where("a tensor of numbers",
                              lambda t: isinstance(t, FloatType) or _is_int(t))
IndexTensor = tensor_where("a tensor of i32 or i64",
                            lambda t: isinstance(t, IntegerType) and t.width in (32, 64)
                            and t.signedness != "unsigned")
IndexVector = tensor_where("a 1-D tensor of i32 or i64",
                            lambda t: isinstance(t, IntegerType) and t.width in (32, 64)
                            and t.signedness != "unsigned", rank=1)
ShapeVector = tensor_where("a 1-D tensor of i64", lambda t: t == i64, rank=1)
ScalarTensor = tensor_where("a scalar tensor (rank 0)", rank=0)

# ---------------------------------------------------------------------------
# Property kinds (CONVENTIONS.md): int → i64 IntegerAttr, float → f32 FloatAttr,
# string → StringAttr, ints → array<i64: ...>, floats → array<f32: ...>.


def _check_int(attr):
    if attr.type != i64:
        return f"must be an i64 integer (e.g. `1`), got {attr}"
    return None


def _check_float(attr):
    if attr.type != FloatType("f32"):
        return f"must be an f32 float (e.g. `1.0 : f32`), got {attr}"
    return None


def _check_ints(attr):
    if attr.element_type != i64:
        return f"must be an array of i64 (e.g. `array<i64: 1, 2>`), got {attr}"
    return None


def _check_floats(attr):
    if attr.element_type != FloatType("f32"):
        return f"must be an array of f32 (e.g. `array<f32: 1.0>`), got {attr}"
    return None


def _and(first, extra):
    if extra is None:
        return first

    def check(attr):
        return first(attr) or extra(attr)
    return check


def int_prop(default: int | None = None, *, optional: bool = False, check=None,
             values=None) -> PropDef:
    extra = check
    if values is not None:
        def extra(attr, _values=values, _check=check):
            if attr.value not in _values:
                return f"must be one of {', '.join(map(str, _values))}, got {attr.value}"
            return _check(attr) if _check else None
    return PropDef(A.IntegerAttr, optional=optional or default is not None,
                   default=A.IntegerAttr(default) if default is not None else None,
                   check=_and(_check_int, extra), description="an i64 integer")


def flag_prop(default: int) -> PropDef:
    """An ONNX flag: an i64 integer, 0 or 1."""
    return int_prop(default, values=(0, 1))


def float_prop(default: float | None = None, *, optional: bool = False) -> PropDef:
    return PropDef(A.FloatAttr, optional=optional or default is not None,
                   default=A.FloatAttr(float(default), FloatType("f32"))
                   if default is not None else None,
                   check=_check_float, description="an f32 float")


def str_prop(default: str | None = None, *, optional: bool = False, choices=None) -> PropDef:
    check = None
    if choices is not None:
        def check(attr, _choices=choices):
            if attr.value not in _choices:
                return (f"must be one of {', '.join(repr(c) for c in _choices)}, "
                        f"got {attr.value!r}")
            return None
    return PropDef(A.StringAttr, optional=optional or default is not None,
                   default=A.StringAttr(default) if default is not None else None,
                   check=check, description="a string")


def ints_prop(*, optional: bool = True, check=None) -> PropDef:
    return PropDef(A.DenseArrayAttr, optional=optional, check=_and(_check_ints, check),
                   description="an array of i64")


def floats_prop(*, optional: bool = True) -> PropDef:
    return PropDef(A.DenseArrayAttr, optional=optional, check=_check_floats,
                   description="an array of f32")


def _check_tensor(attr):
    if not isinstance(attr, (A.DenseElementsAttr, A.DenseResourceAttr)):
        return f"must be a dense<...> or dense_resource<...> tensor, got {attr}"
    if not isinstance(attr.type, TensorType):
        return f"must have a tensor type, got {attr.type}"
    return None


def tensor_prop(*, optional: bool = False) -> PropDef:
    return PropDef(A.Attribute, optional=optional, check=_check_tensor,
                   description="a dense<...> or dense_resource<...> tensor")


def positive(attr):
    values = attr.values if isinstance(attr, A.DenseArrayAttr) else [attr.value]
    if any(v < 1 for v in values):
        return f"must be positive, got {attr}"
    return None


def non_negative(attr):
    values = attr.values if isinstance(attr, A.DenseArrayAttr) else [attr.value]
    if any(v < 0 for v in values):
        return f"must not be negative, got {attr}"
    return None


def _check_segments(attr):
    if attr.element_type != IntegerType(32):
        return f"must be an array of i32, got {attr}"
    return None


def segments_prop() -> PropDef:
    """MLIR's operandSegmentSizes, for ops with several optional operands."""
    return PropDef(A.DenseArrayAttr, optional=True, check=_check_segments,
                   description="an array<i32: ...>")


# ---------------------------------------------------------------------------
# ONNX element types (Cast's `to`)

ONNX_DTYPES: dict[int, Type] = {
    1: FloatType("f32"), 2: IntegerType(8, "unsigned"), 3: IntegerType(8),
    4: IntegerType(16, "unsigned"), 5: IntegerType(16), 6: IntegerType(32), 7: i64, 9: i1,
    10: FloatType("f16"), 11: FloatType("f64"), 12: IntegerType(32, "unsigned"),
    13: IntegerType(64, "unsigned"), 16: FloatType("bf16"), 17: FloatType("f8E4M3FN"),
    18: FloatType("f8E4M3FNUZ"), 19: FloatType("f8E5M2"), 20: FloatType("f8E5M2FNUZ"),
    21: IntegerType(4, "unsigned"), 22: IntegerType(4), 23: FloatType("f4E2M1FN"),
    24: FloatType("f8E8M0FNU"), 25: IntegerType(2, "unsigned"), 26: IntegerType(2),
}
ONNX_DTYPE_CODES: dict[Type, int] = {t: code for code, t in ONNX_DTYPES.items()}

# ---------------------------------------------------------------------------
# Known values of constant operands

MAX_KNOWN_ELEMENTS = 1024  # larger constants are never read as Python lists

_STRUCT_CODES = {
    "i1": "?", "i8": "b", "si8": "b", "ui8": "B", "i16": "h", "si16": "h", "ui16": "H",
    "i32": "i", "si32": "i", "ui32": "I", "i64": "q", "si64": "q", "ui64": "Q",
    "index": "q", "f16": "e", "f32": "f", "f64": "d",
}


def dense_values(attr, limit: int = MAX_KNOWN_ELEMENTS) -> list | None:
    """The elements of a dense constant as a flat Python list (None if too large or
    not decodable without numpy)."""
    type_ = getattr(attr, "type", None)
    if not isinstance(type_, TensorType) or not type_.has_static_shape:
        return None
    count = type_.num_elements()
    if count > limit:
        return None
    element = type_.element_type
    if isinstance(attr, A.DenseElementsAttr) and attr.values is not None:
        values = list(attr.values)
        if len(values) == 1 and count != 1:
            values = values * count
    else:
        code = _STRUCT_CODES.get(str(element))
        if code is None:
            return None
        if isinstance(attr, A.DenseElementsAttr):
            raw = attr.raw
        elif isinstance(attr, A.DenseResourceAttr):
            try:
                raw = attr.blob.read()
            except (OSError, ValueError):
                return None
        else:
            return None
        size = struct.calcsize(code)
        if len(raw) == size and count != 1:
            values = list(struct.unpack("<" + code, raw)) * count
        elif len(raw) == size * count:
            values = list(struct.unpack(f"<{count}{code}", raw))
        else:
            return None
    if element == i1:
        return [bool(v) for v in values]
    if isinstance(element, (IntegerType, IndexType)):
        return [int(v) for v in values]
    return [float(v) for v in values]


def constant_values(value) -> list | None:
    """Known elements of an SSA value defined by `graph.constant`."""
    owner = getattr(value, "op", None)
    if owner is None or owner.name != "graph.constant":
        return None
    return dense_values(owner.properties.get("value"))


class _ConstantOperands:
    """Lazy list of constant operand values: only the rules that read a value pay."""

    def __init__(self, operands):
        self.operands = operands
        self.cache: dict = {}

    def __getitem__(self, index):
        if index not in self.cache:
            self.cache[index] = constant_values(self.operands[index])
        return self.cache[index]

    def __len__(self):
        return len(self.operands)


# ---------------------------------------------------------------------------
# Arguments of a shape rule


_SLOTS: dict = {}  # (op class, operand count) -> its slots, when the count decides them


def _slots(cls, operand_types, properties) -> dict:
    """{operand name: (kind, first position, count)}; shared (read-only) per class and
    operand count unless segment sizes are spelled out, as infer-shapes builds an Args
    per op of every module."""
    key = None
    if "operandSegmentSizes" not in properties:  # else the property decides them
        key = (cls, len(operand_types))
        found = _SLOTS.get(key)
        if found is not None:
            return found
    sizes = segment_sizes(SimpleNamespace(properties=properties), operand_types,
                          cls.operand_defs, "operandSegmentSizes")
    if isinstance(sizes, str):
        raise ShapeError(f"operands: {sizes}")
    slots: dict = {}
    position = 0
    for definition, size in zip(cls.operand_defs, sizes):
        slots[definition.field_name] = (definition.kind, position, size)
        position += size
    if key is not None:
        _SLOTS[key] = slots
    return slots


class Args:
    """One op's operands, by declared name: types, shapes, known values; and its
    attribute values with ONNX defaults applied."""

    __slots__ = ("cls", "properties", "num_results", "_upper_values", "_dim_symbols",
                 "_symbolic", "_slots", "_types", "_values")  # one per op infer-shapes visits

    def __init__(self, cls, operand_types, properties, values=None, num_results=None,
                 dim_symbols=None, symbolic=None, upper_values=None):
        self.cls = cls
        self.properties = properties
        self.num_results = num_results
        # Optional, from infer-shapes, for bound rules (bound_rules.py): per operand,
        # known values where an element known to equal a bounded dim is that bound.
        self._upper_values = upper_values
        # Optional, from infer-shapes (lists aligned with the operands): `dim_symbols`
        # holds, per operand, a token per dim (None for static dims) that stands for
        # "dim i of this SSA value"; `symbolic` holds known values where unknown
        # elements may be such tokens. A rule can then see that an unknown element of
        # a shape vector is exactly an unknown dim of another operand.
        self._dim_symbols = dim_symbols
        self._symbolic = symbolic
        self._slots = _slots(cls, operand_types, properties)
        self._types = list(operand_types)
        self._values = values if values is not None else [None] * len(operand_types)

    # -- operands ----------------------------------------------------------------
    def _positions(self, name):
        kind, start, size = self._slots[name]
        return kind, range(start, start + size)

    def has(self, name: str) -> bool:
        return len(self._positions(name)[1]) > 0

    # (type, types, shape, element and value read the slot directly: rules ask them of
    # every op infer-shapes visits)
    def type(self, name: str) -> TensorType | None:
        _, start, size = self._slots[name]
        return self._types[start] if size else None

    def types(self, name: str) -> list:
        _, start, size = self._slots[name]
        return self._types[start:start + size]

    def shape(self, name: str):
        """The operand's shape; None when absent or of unknown rank."""
        _, start, size = self._slots[name]
        if not size:
            return None
        t = self._types[start]
        if not isinstance(t, TensorType) or t.shape is None:
            return None
        return tuple(t.shape)

    def shapes(self, name: str) -> list:
        return [_shape_of(t) for t in self.types(name)]

    def element(self, name: str):
        _, start, size = self._slots[name]
        return self._types[start].element_type if size else None

    def value(self, name: str) -> list | None:
        _, start, size = self._slots[name]
        return self._values[start] if size else None

    def values(self, name: str) -> list:
        return [self._values[i] for i in self._positions(name)[1]]

    def positions(self, name: str) -> range:
        """Operand indices of the named (single, optional or variadic) operand."""
        return self._positions(name)[1]

    def symbolic(self, name: str) -> list | None:
        """Known values of the operand where unknown elements may be dim tokens."""
        positions = self._positions(name)[1]
        if self._symbolic is None or not len(positions):
            return None
        return self._symbolic[positions[0]]

    def dim_symbols(self, name: str) -> list | None:
        """Tokens of the operand's dynamic dims (see __init__), or None."""
        positions = self._positions(name)[1]
        if self._dim_symbols is None or not len(positions):
            return None
        return self._dim_symbols[positions[0]]

    # -- bounds (bound_rules.py) -------------------------------------------------------
    @property
    def count(self) -> int:
        return len(self._types)

    def upper_of(self, index: int):
        """Operand `index`'s upper shape (`ShapedType.upper_shape`)."""
        t = self._types[index]
        return t.upper_shape if isinstance(t, TensorType) else None

    def upper(self, name: str):
        positions = self._positions(name)[1]
        return self.upper_of(positions[0]) if len(positions) else None

    def uppers(self, name: str) -> list:
        return [self.upper_of(i) for i in self._positions(name)[1]]

    def upper_value(self, name: str) -> list | None:
        """Known values of the operand, where an unknown element known to equal a
        bounded dim is that bound (None elements: neither)."""
        positions = self._positions(name)[1]
        if not len(positions):
            return None
        if self._upper_values is None:
            return self._values[positions[0]]
        return self._upper_values[positions[0]]

    def at_upper(self) -> "Args":
        """These arguments with every operand at its upper shape."""
        types = [TensorType(t.upper_shape, t.element_type) if isinstance(t, TensorType)
                 and t.bounds is not None else t for t in self._types]
        return Args(self.cls, types, self.properties, self._values, self.num_results)

    def length(self, name: str) -> int | None:
        """Number of elements of a 1-D operand: from its known value or its type."""
        known = self.value(name)
        if known is not None:
            return len(known)
        shape = self.shape(name)
        return shape[0] if shape is not None and len(shape) == 1 else None

    def axes_length(self, name: str) -> int | None:
        """`length` of an operand holding one value per axis (axes, starts, ends, steps):
        a ShapeError past shapes.MAX_RANK, which no tensor reaches, before a rule builds
        a list that long."""
        return check_rank(self.length(name), f"'{name}'")

    def ints(self, name: str) -> list | None:
        """Known values of a 1-D (or scalar) integer operand; None if unknown/absent."""
        known = self.value(name)
        return list(known) if known is not None else None

    # -- attributes --------------------------------------------------------------
    def __getitem__(self, name: str):
        attr = self.properties.get(name)
        if attr is None:
            attr = self.cls.prop_defs[name].default
        if attr is None:
            return None
        if isinstance(attr, A.DenseArrayAttr):
            return list(attr.values)
        if isinstance(attr, (A.IntegerAttr, A.FloatAttr, A.StringAttr, A.BoolAttr)):
            return attr.value
        return attr

    # -- checks ------------------------------------------------------------------
    def same_element(self, *names) -> Type:
        """The shared element type of the named operands (variadic ones included)."""
        found = []
        for name in names:
            for t in self.types(name):
                found.append((name, t.element_type))
        for name, element in found[1:]:
            if element != found[0][1]:
                raise ShapeError(f"operands '{found[0][0]}' and '{name}' must have the same "
                                 f"element type, got {found[0][1]} and {element}")
        return found[0][1]


def _shape_of(t):
    if t is None or not isinstance(t, TensorType) or t.shape is None:
        return None
    return tuple(t.shape)


def tensor(shape, element: Type) -> TensorType:
    return TensorType(tuple(shape) if shape is not None else None, element)


def same_type_as(operand_name: str):
    """A shape rule and its bound rule, for `rule, bound_rule = same_type_as("x")`: one
    result of operand `x`'s shape and element type, bounded as `x` is."""
    def rule(cls, args):
        return [tensor(args.shape(operand_name), args.element(operand_name))]
    return classmethod(rule), classmethod(B.at_upper)


def refine_type(declared: Type, inferred: Type | None) -> Type:
    """The more precise of a declared and an inferred type; ShapeError when they
    contradict each other."""
    if inferred is None or not isinstance(declared, TensorType):
        return declared
    if not isinstance(inferred, TensorType):
        return declared
    if declared.element_type != inferred.element_type:
        raise ShapeError(f"element type {declared.element_type} contradicts the inferred "
                         f"{inferred.element_type}")
    try:
        shape = merge_shapes(declared.shape, inferred.shape)
    except ShapeError:
        raise ShapeError(f"shape {fmt(declared.shape)} contradicts the inferred "
                         f"{fmt(inferred.shape)}") from None
    if shape == declared.shape:
        return declared
    return TensorType(shape, declared.element_type, declared.encoding)


# ---------------------------------------------------------------------------
# The base of every graph op

_PROPERTY_HINTS = {
    "axes": "pass 'axes' as an operand (ONNX opset 13/18 form)",
    "split": "pass 'split' as an operand (ONNX opset 13 form)",
    "pads": "pass 'pads' as an operand (ONNX opset 11 form)",
    "min": "pass 'min' as an operand (ONNX opset 11 form)",
    "max": "pass 'max' as an operand (ONNX opset 11 form)",
}


class GraphOp(Operation):
    """Value semantics, no side effects; a shape rule and a verifier built on it. An op
    with several optional or variadic operands carries MLIR's operandSegmentSizes
    (`segments_prop`) without declaring it."""

    traits = (Pure(),)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        names = {name for klass in cls.__mro__ for name, value in vars(klass).items()
                 if isinstance(value, OperandDef)}
        groups = sum(getattr(cls, name).kind != SINGLE for name in names)
        if groups > 1 and getattr(cls, "operandSegmentSizes", None) is None:
            segments = segments_prop()
            segments.__set_name__(cls, "operandSegmentSizes")
            cls.operandSegmentSizes = segments

    @classmethod
    def rule(cls, args: Args) -> list:  # pragma: no cover - every op overrides it
        raise NotImplementedError

    @classmethod
    def fold_values(cls, args: Args, result_types: list) -> list | None:
        """Known values of the results (flat lists, elements may be None), for the
        integer shape arithmetic infer-shapes folds; None when nothing is known."""
        return None

    # Operands whose elements the results only rearrange (no arithmetic): their known
    # values may carry dim tokens through fold_symbols.
    moves_values: tuple = ()

    @classmethod
    def fold_symbols(cls, args: Args, result_types: list) -> list | None:
        """Like fold_values, but the values of the `moves_values` operands may hold
        opaque dim tokens (see Args) where elements are unknown; None when the op
        does not pass tokens on."""
        return cls.fold_values(args, result_types) if cls.moves_values else None

    @classmethod
    def bound_rule(cls, args: Args) -> list | None:
        """The largest shape of each result (an upper shape per result: ints, None where
        unbounded) from the operands' upper shapes; None when the op derives no bounds.
        Ops opt in with a rule from bound_rules.py, which says what makes one sound."""
        return None

    @classmethod
    def infer_result_types(cls, operand_types, properties, constant_operands=None,
                           num_results=None) -> list | None:
        """Result types from operand types, properties (attributes) and known values of
        constant operands (a list aligned with the operands; None where unknown).
        None when the operands can never be valid."""
        try:
            args = Args(cls, operand_types, properties, constant_operands, num_results)
            return cls.rule(args)
        except ShapeError:
            return None

    @classmethod
    def build(cls, operands, properties=None, result_types=None, attributes=None,
              location=None, num_results=None) -> "GraphOp":
        """An op whose result types are inferred unless given (ShapeError if invalid)."""
        operands = list(operands)
        properties = dict(properties or {})
        if result_types is None:
            values = _ConstantOperands(operands)
            args = Args(cls, [v.type for v in operands], properties, values, num_results)
            result_types = cls.rule(args)
            if any(t is None for t in result_types):
                raise ShapeError(f"cannot infer the result types of '{cls.name}'")
        return cls(operands, result_types, properties, attributes, location=location)

    def make_args(self, values=None) -> Args:
        return Args(type(self), [v.type for v in self.operands], self.properties,
                    values if values is not None else _ConstantOperands(self.operands),
                    len(self.results))

    def verify_(self) -> None:
        cls = type(self)
        for key in self.properties:
            if key not in cls.prop_defs:
                hint = _PROPERTY_HINTS.get(key)
                known = ", ".join(sorted(cls.prop_defs)) or "none"
                raise self.error(f"has no property '{key}' "
                                 f"({hint if hint else 'its properties: ' + known})")
        for key in self.attributes:
            if "." not in key:
                known = ", ".join(sorted(k for k in cls.prop_defs
                                         if k != "operandSegmentSizes")) or "none"
                raise self.error(f"unknown attribute '{key}' (its properties: {known}; "
                                 f"other attributes need a dialect prefix, e.g. 'onnx.{key}')")
        try:
            inferred = cls.rule(self.make_args())
        except ShapeError as error:
            raise self.error(str(error)) from None
        if inferred is None:
            return
        if len(inferred) != len(self.results):
            raise self.error(f"has {len(self.results)} results, expected {len(inferred)}")
        for index, (result, expected) in enumerate(zip(self.results, inferred)):
            if expected is None:
                continue
            try:
                refine_type(result.type, expected)
            except ShapeError:
                raise self.error(f"result #{index} type '{result.type}' does not match the "
                                 f"inferred type '{expected}'") from None


def declare_op(base: type, op_name: str, class_name: str, doc: str | None = None,
               **fields) -> type:
    """Declares and registers an op of a family in one line: a subclass of `base` (which
    holds the operands, results, rule and folding) with its name, and the fields that set
    it apart (properties, operand constraints, `apply` / `combine` as staticmethods).
    The class lives in the calling module, as if written there with `class`."""
    namespace = {"name": op_name, "__module__": sys._getframe(1).f_globals["__name__"],
                 "__qualname__": class_name, **fields}
    if doc is not None:
        namespace["__doc__"] = doc
    return register_op(type(class_name, (base,), namespace))


__all__ = [
    "A", "AnyTensor", "Args", "BoolTensor", "FloatTensor", "GraphOp", "IndexTensor",
    "IndexVector", "IntTensor", "NumericTensor", "ONNX_DTYPES", "ONNX_DTYPE_CODES",
    "OPTIONAL", "SINGLE", "ScalarTensor", "ShapeError", "ShapeVector", "VARIADIC",
    "constant_values", "declare_op", "dense_values", "flag_prop", "float_prop",
    "floats_prop", "int_prop", "ints_prop", "non_negative", "positive", "refine_type",
    "same_type_as", "segments_prop", "str_prop", "tensor", "tensor_prop", "tensor_where",
]
