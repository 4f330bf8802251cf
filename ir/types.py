"""Types: immutable, hashable values that print as MLIR spells them.

Parametric types (`tensor<...>`, `memref<...>`, `buffer<...>`) share one textual shape,
`keyword<dims x element, params...>`; a dialect adds one by subclassing `ParametricType`
and registering it with `register_type` (the parser looks keywords up there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar

DYNAMIC = None  # a `?` dimension


def ir_data(cls):
    """Class decorator of every type and attribute: a frozen, slotted dataclass, equal and
    hashed by its fields, printed by its own __str__ (never the dataclass repr)."""
    return dataclass(frozen=True, slots=True, repr=False)(cls)


class Type:
    __slots__ = ()

    def __repr__(self) -> str:
        return f"Type({self})"


@ir_data
class IntegerType(Type):
    width: int
    signedness: str = "signless"  # "signless" | "signed" | "unsigned"

    def __str__(self) -> str:
        prefix = {"signless": "", "signed": "s", "unsigned": "u"}[self.signedness]
        return f"{prefix}i{self.width}"


FLOAT_WIDTHS = {
    "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "f80": 80, "f128": 128, "tf32": 19,
    "f8E5M2": 8, "f8E4M3FN": 8, "f8E4M3": 8, "f8E5M2FNUZ": 8, "f8E4M3FNUZ": 8,
    "f8E8M0FNU": 8, "f4E2M1FN": 4,
}


@ir_data
class FloatType(Type):
    name: str  # "f32", "bf16", ...

    @property
    def width(self) -> int:
        return FLOAT_WIDTHS[self.name]

    def __str__(self) -> str:
        return self.name


@ir_data
class IndexType(Type):
    def __str__(self) -> str:
        return "index"


@ir_data
class NoneType(Type):
    def __str__(self) -> str:
        return "none"


@ir_data
class FunctionType(Type):
    inputs: tuple[Type, ...]
    results: tuple[Type, ...]

    def __str__(self) -> str:
        ins = ", ".join(map(str, self.inputs))
        if len(self.results) == 1 and not isinstance(self.results[0], FunctionType):
            return f"({ins}) -> {self.results[0]}"
        return f"({ins}) -> ({', '.join(map(str, self.results))})"


@ir_data
class OpaqueType(Type):
    """`!dialect.name<body>` of a dialect that is not registered: kept verbatim."""

    text: str  # without the leading '!'

    def __str__(self) -> str:
        return "!" + self.text


# ---------------------------------------------------------------------------
# Parametric types: keyword<dims x element, extra params>

_TYPE_KEYWORDS: dict[str, type] = {}


def register_type(cls):
    """Class decorator: declare `cls` as `ir_data` and make `cls.keyword<...>` parse as
    it."""
    cls = ir_data(cls)
    _TYPE_KEYWORDS[cls.keyword] = cls
    return cls


_TYPE_LOADERS: dict[str, object] = {}


def register_type_loader(keyword: str, loader) -> None:
    """`keyword<...>` is defined by a dialect that `loader()` imports on first use."""
    if keyword not in _TYPE_KEYWORDS:
        _TYPE_LOADERS[keyword] = loader


def lookup_type_keyword(keyword: str):
    found = _TYPE_KEYWORDS.get(keyword)
    if found is None and keyword in _TYPE_LOADERS:
        _TYPE_LOADERS.pop(keyword)()
        found = _TYPE_KEYWORDS.get(keyword)
    return found


class TypeParamError(ValueError):
    """Raised by `from_params` when a parametric type's parameters are malformed."""


def format_dims(shape) -> str:
    return "".join(("?" if d is None else str(d)) + "x" for d in shape)


# MLIR's dims are int64: a larger dim (or bound) cannot be represented, sized or planned
MAX_DIM = 2**63 - 1


def check_dims(shape) -> str | None:
    """Why a shape (ints and None) is not one MLIR can represent; None when it is."""
    for index, dim in enumerate(shape or ()):
        if dim is not None and dim > MAX_DIM:
            return f"invalid dimension: dim {index} is {dim}, beyond 2^63-1"
    return None


def check_bounds(shape, bounds) -> str | None:
    """Why `bounds` (one int or None per dim) cannot bound a type of `shape`; None when
    they can: one entry per dim, a bound only on a `?` dim, and at least 1."""
    if shape is None:
        return "an unranked type cannot have bounds"
    if len(bounds) != len(shape):
        return (f"#bounds<...> has {len(bounds)} entr{'y' if len(bounds) == 1 else 'ies'} "
                f"for {len(shape)} dim{'' if len(shape) == 1 else 's'}")
    for index, (dim, bound) in enumerate(zip(shape, bounds)):
        if bound is None:
            continue
        if dim is not None:
            return f"dim {index} is static ({dim}): only a '?' dim takes a bound"
        if bound < 1:
            return f"the bound of dim {index} must be at least 1, got {bound}"
        if bound > MAX_DIM:
            return f"the bound of dim {index} must be at most 2^63-1, got {bound}"
    return None


_BOUNDS_ATTR = None


def _bounds_attr():
    """attributes.BoundsAttr (imported late: attributes imports this module)."""
    global _BOUNDS_ATTR
    if _BOUNDS_ATTR is None:
        from palimpsest.ir.attributes import BoundsAttr
        _BOUNDS_ATTR = BoundsAttr
    return _BOUNDS_ATTR


class ParametricType(Type):
    """Base for `keyword<...>` types. Subclasses set `keyword` and implement
    `from_params(dims, params)` where dims is a tuple (or None when unranked, or ()
    when absent) and params is a list of attributes (types arrive as TypeAttr)."""

    __slots__ = ()
    keyword: ClassVar[str]

    @classmethod
    def from_params(cls, dims, params):  # pragma: no cover - abstract
        raise NotImplementedError


@ir_data
class ShapedType(ParametricType):
    """Types with a shape and an element type. `shape` is None when unranked. Its
    subclasses add their trailing parameters (`extras`) as fields after these two."""

    shape: tuple | None
    element_type: Type

    @property
    def rank(self) -> int:
        if self.shape is None:
            raise ValueError(f"{self} is unranked")
        return len(self.shape)

    @property
    def has_static_shape(self) -> bool:
        return self.shape is not None and None not in self.shape

    def num_elements(self) -> int | None:
        if not self.has_static_shape:
            return None
        n = 1
        for d in self.shape:
            n *= d
        return n

    # -- bounded `?` dims: an upper bound per dim in the type's encoding, `#bounds<...>` --
    @property
    def bounds(self) -> tuple | None:
        """One int (the bound of a `?` dim) or None per dim; None when nothing is bounded."""
        encoding = getattr(self, "encoding", None)
        if encoding is None:  # the common case, kept cheap: infer-shapes asks per operand
            return None
        return encoding.bounds if isinstance(encoding, _bounds_attr()) else None

    @property
    def upper_shape(self) -> tuple | None:
        """The shape with every bounded `?` dim at its bound (still None where a `?` dim
        has no bound): the largest shape a value of this type can have."""
        if self.shape is None:
            return None
        bounds = self.bounds
        if bounds is None:
            return tuple(self.shape)
        return tuple(b if d is None else d for d, b in zip(self.shape, bounds))

    @property
    def is_bounded(self) -> bool:
        """Dynamic, but with every `?` dim bounded: its size at the bound is known."""
        upper = self.upper_shape
        return (not self.has_static_shape and upper is not None
                and all(d is not None for d in upper))

    def upper_num_elements(self) -> int | None:
        """Elements at the bound (the static count when static); None when unbounded."""
        upper = self.upper_shape
        if upper is None or any(d is None for d in upper):
            return None
        n = 1
        for d in upper:
            n *= d
        return n

    def with_bounds(self, bounds):
        """This type with `bounds` (one int or None per dim; None or all None: no bounds).
        ValueError when they do not fit the shape (see `check_bounds`)."""
        from dataclasses import replace

        if bounds is not None and all(b is None for b in bounds):
            bounds = None
        if bounds is None:
            return replace(self, encoding=None) if self.bounds is not None else self
        problem = check_bounds(self.shape, bounds)
        if problem:
            raise ValueError(f"{problem} ('{self}')")
        return replace(self, encoding=_bounds_attr()(tuple(bounds)))

    # the optional parameters after `dims x element`, as the names of their fields
    extras: ClassVar[tuple] = ()

    def __str__(self) -> str:
        return self._body(tuple(getattr(self, name) for name in self.extras))

    @classmethod
    def from_params(cls, dims, params):
        element, extra = cls._split_params(cls.keyword, dims, params, len(cls.extras))
        return cls(dims, element, *extra)

    def _body(self, extra: tuple = ()) -> str:
        dims = "*x" if self.shape is None else format_dims(self.shape)
        parts = [dims + str(self.element_type)]
        parts.extend(str(p) for p in extra if p is not None)
        return f"{self.keyword}<{', '.join(parts)}>"

    @staticmethod
    def _split_params(keyword, dims, params, max_extra):
        from palimpsest.ir.attributes import TypeAttr

        if not params or not isinstance(params[0], TypeAttr):
            raise TypeParamError(f"expected an element type in '{keyword}<...>'")
        extra = params[1:]
        if len(extra) > max_extra:
            raise TypeParamError(f"too many parameters in '{keyword}<...>'")
        return params[0].value, extra


@register_type
class TensorType(ShapedType):
    keyword: ClassVar[str] = "tensor"
    encoding: object = None
    extras: ClassVar[tuple] = ("encoding",)

    @classmethod
    def from_params(cls, dims, params):
        made = ShapedType.from_params.__func__(cls, dims, params)
        if isinstance(made.encoding, _bounds_attr()):
            problem = check_bounds(dims, made.encoding.bounds)
            if problem:
                raise TypeParamError(problem)
        return made


@register_type
class MemRefType(ShapedType):
    keyword: ClassVar[str] = "memref"
    layout: object = None
    memory_space: object = None
    extras: ClassVar[tuple] = ("layout", "memory_space")


@register_type
class VectorType(ShapedType):
    keyword: ClassVar[str] = "vector"

    @classmethod
    def from_params(cls, dims, params):
        if dims is None or not dims or any(d is None for d in dims):
            raise TypeParamError("vector types need a static, non-empty shape")
        return ShapedType.from_params.__func__(cls, dims, params)


class _TypeListType(ParametricType):
    """A type whose parameters are types only, no dims: `keyword<t, ...>`, exactly
    `arity` of them (None: any number)."""

    __slots__ = ()
    arity: ClassVar[int | None] = None

    def type_params(self) -> tuple:
        raise NotImplementedError

    def __str__(self) -> str:
        return f"{self.keyword}<{', '.join(map(str, self.type_params()))}>"

    @classmethod
    def from_params(cls, dims, params):
        from palimpsest.ir.attributes import TypeAttr

        if dims:
            raise TypeParamError(f"{cls.keyword}<...> takes no dimensions")
        if not all(isinstance(p, TypeAttr) for p in params) or (
                cls.arity is not None and len(params) != cls.arity):
            wanted = "a list of types" if cls.arity is None else f"exactly {cls.arity} type"
            raise TypeParamError(f"{cls.keyword}<...> takes {wanted}")
        return cls(*cls.from_types(tuple(p.value for p in params)))

    @classmethod
    def from_types(cls, types: tuple) -> tuple:
        """The dataclass fields from the type parameters."""
        return (types,)


@register_type
class ComplexType(_TypeListType):
    keyword: ClassVar[str] = "complex"
    arity: ClassVar[int | None] = 1
    element_type: Type

    def type_params(self) -> tuple:
        return (self.element_type,)

    @classmethod
    def from_types(cls, types: tuple) -> tuple:
        return types


@register_type
class TupleType(_TypeListType):
    keyword: ClassVar[str] = "tuple"
    types: tuple

    def type_params(self) -> tuple:
        return self.types


# ---------------------------------------------------------------------------
# Convenience constructors and predicates

i1 = IntegerType(1)
i8 = IntegerType(8)
i16 = IntegerType(16)
i32 = IntegerType(32)
i64 = IntegerType(64)
f16 = FloatType("f16")
bf16 = FloatType("bf16")
f32 = FloatType("f32")
f64 = FloatType("f64")
index = IndexType()
none = NoneType()

_SCALARS: dict[str, Type] = {"index": index, "none": none}


def scalar_type(text: str) -> Type:
    """The builtin scalar type spelled `text` (i32, si8, ui16, f32, bf16, index, none)."""
    found = _SCALARS.get(text)
    if found is not None:
        return found
    if text in FLOAT_WIDTHS:
        found = FloatType(text)
    elif text[0] == "i" and text[1:].isdigit():
        found = IntegerType(int(text[1:]))
    elif text[:2] == "si":
        found = IntegerType(int(text[2:]), "signed")
    elif text[:2] == "ui":
        found = IntegerType(int(text[2:]), "unsigned")
    else:
        raise ValueError(f"unknown type '{text}'")
    _SCALARS[text] = found
    return found


def tensor(*shape, element_type: Type = f32) -> TensorType:
    return TensorType(tuple(shape), element_type)


def is_float(t: Type) -> bool:
    return isinstance(t, FloatType)


def is_integer(t: Type) -> bool:
    return isinstance(t, IntegerType)


def element_type_of(t: Type) -> Type:
    return t.element_type if isinstance(t, ShapedType) else t


TypePredicate = Callable[[Type], bool]
