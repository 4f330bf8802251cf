"""Attributes: immutable compile-time values, printed as MLIR prints them.

Large constants do not live in the text: `dense_resource<key>` names a blob that is
either inline hex in the file's `{-# dialect_resources ... #-}` trailer (MLIR's form) or
a byte range of a side file listed under `external_resources`. Blobs load lazily.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

from palimpsest.ir.types import (
    FloatType, IndexType, IntegerType, ShapedType, Type, f32, f64, i1, i64, ir_data,
)


class Attribute:
    __slots__ = ()

    def __repr__(self) -> str:
        return f"Attr({self})"


def quote_string(text: str) -> str:
    out = ['"']
    for ch in text:
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append("\\%02X" % ord(ch))
        elif 0xDC80 <= ord(ch) <= 0xDCFF:  # a byte that is not UTF-8 (see parser._unescape)
            out.append("\\%02X" % (ord(ch) - 0xDC00))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def format_float(value: float, type_: Type = f64) -> str:
    if math.isfinite(value):
        text = repr(float(value))
        code = {"f32": ("<f", 9), "f16": ("<e", 5)}.get(getattr(type_, "name", None))
        if code is not None:  # the shortest text that reads back to the same f32/f16
            for digits in range(1, code[1] + 1):
                short = "%.*g" % (digits, value)
                try:
                    same = struct.unpack(code[0], struct.pack(code[0], float(short)))[0] == value
                except (OverflowError, struct.error):
                    continue
                if same:
                    text = repr(float(short))
                    break
        if "e" in text and "." not in text:
            text = text.replace("e", ".0e")
        return text
    # MLIR spells non-finite floats as their bit pattern.
    if isinstance(type_, FloatType) and type_.name == "f32":
        return "0x%08X" % struct.unpack("<I", struct.pack("<f", value))[0]
    if isinstance(type_, FloatType) and type_.name == "f16":
        return "0x%04X" % struct.unpack("<H", struct.pack("<e", value))[0]
    if isinstance(type_, FloatType) and type_.name == "bf16":  # the top half of an f32
        return "0x%04X" % (struct.unpack("<I", struct.pack("<f", value))[0] >> 16)
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", value))[0]


def float_from_bits(bits: int, type_: Type) -> float:
    if isinstance(type_, FloatType) and type_.name == "f32":
        return struct.unpack("<f", struct.pack("<I", bits))[0]
    if isinstance(type_, FloatType) and type_.name == "f16":
        return struct.unpack("<e", struct.pack("<H", bits))[0]
    if isinstance(type_, FloatType) and type_.name == "bf16":
        return struct.unpack("<f", struct.pack("<I", bits << 16))[0]
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def integer_range(type_: Type) -> tuple[int, int] | None:
    """MLIR's range of an integer type: a signless iN holds -2^(N-1) .. 2^N-1 (either
    reading of N bits); None for types without a fixed width (index)."""
    if not isinstance(type_, IntegerType):
        return None
    width, signedness = type_.width, type_.signedness
    low = 0 if signedness == "unsigned" or not width else -(1 << (width - 1))
    high = (1 << (width - 1)) - 1 if signedness == "signed" else (1 << width) - 1
    return low, high


@ir_data
class IntegerAttr(Attribute):
    value: int
    type: Type = i64

    def __post_init__(self):
        bounds = integer_range(self.type)
        if bounds is not None and not bounds[0] <= self.value <= bounds[1]:
            raise ValueError(f"integer constant {self.value} out of range for type '{self.type}'")

    def __str__(self) -> str:
        if self.type == i64:
            return str(self.value)
        return f"{self.value} : {self.type}"


@ir_data
class BoolAttr(Attribute):
    value: bool

    @property
    def type(self) -> Type:
        return i1

    def __str__(self) -> str:
        return "true" if self.value else "false"


_PACK_CODES = {"f32": "<f", "f16": "<e"}


def round_to_type(value: float, type_: Type) -> float:
    """`value` rounded to the precision of `type_` (f16/f32); ValueError when it is
    finite but out of the type's range."""
    code = _PACK_CODES.get(getattr(type_, "name", None))
    if code is None:
        return float(value)
    try:
        return struct.unpack(code, struct.pack(code, value))[0]
    except (OverflowError, struct.error):
        raise ValueError(f"{value} is out of range for {type_}") from None


@ir_data
class FloatAttr(Attribute):
    value: float
    type: Type = f64

    def __post_init__(self):
        object.__setattr__(self, "value", round_to_type(self.value, self.type))

    def __eq__(self, other):
        # bitwise comparison so NaN attributes compare equal to themselves
        return (isinstance(other, FloatAttr) and self.type == other.type
                and struct.pack("<d", self.value) == struct.pack("<d", other.value))

    def __hash__(self):
        return hash((struct.pack("<d", self.value), self.type))

    def __str__(self) -> str:
        text = format_float(self.value, self.type)
        if self.type == f64 and math.isfinite(self.value):
            return text
        return f"{text} : {self.type}"


@ir_data
class StringAttr(Attribute):
    value: str

    def __str__(self) -> str:
        return quote_string(self.value)


@ir_data
class UnitAttr(Attribute):
    def __str__(self) -> str:
        return "unit"


@ir_data
class ArrayAttr(Attribute):
    value: tuple

    def __str__(self) -> str:
        return "[" + ", ".join(map(str, self.value)) + "]"

    def __iter__(self):
        return iter(self.value)

    def __len__(self):
        return len(self.value)


def is_bare_identifier(key: str) -> bool:
    if not key or not (key[0].isalpha() or key[0] == "_"):
        return False
    return all(c.isalnum() or c in "_$." for c in key) and key.isascii()


def format_attr_entries(entries) -> str:
    parts = []
    for key, value in entries:
        name = key if is_bare_identifier(key) else quote_string(key)
        parts.append(name if isinstance(value, UnitAttr) else f"{name} = {value}")
    return "{" + ", ".join(parts) + "}"


@ir_data
class DictionaryAttr(Attribute):
    entries: tuple  # sorted ((key, Attribute), ...)

    @staticmethod
    def of(mapping: dict) -> "DictionaryAttr":
        return DictionaryAttr(tuple(sorted(mapping.items())))

    def as_dict(self) -> dict:
        return dict(self.entries)

    def __str__(self) -> str:
        return format_attr_entries(self.entries)


@ir_data
class SymbolRefAttr(Attribute):
    root: str
    nested: tuple = ()

    def __str__(self) -> str:
        return "::".join(_format_symbol(s) for s in (self.root, *self.nested))


def _format_symbol(name: str) -> str:
    return "@" + (name if is_bare_identifier(name) else quote_string(name))


@ir_data
class TypeAttr(Attribute):
    value: Type

    def __str__(self) -> str:
        return str(self.value)


@ir_data
class OpaqueAttr(Attribute):
    """`#dialect.name<...>` from a dialect that is not registered: kept verbatim."""

    text: str  # without the leading '#'

    def __str__(self) -> str:
        return "#" + self.text


@ir_data
class BoundsAttr(Attribute):
    """`#bounds<8, ?, 1280>`: an upper bound per dim of a shaped type, the type's
    encoding (StableHLO's `#stablehlo.bounds`). An int bounds a `?` dim; `?` (None) is a
    static dim or a `?` dim without a bound. `ShapedType.bounds` reads it."""

    bounds: tuple  # one int or None per dim

    def __str__(self) -> str:
        return "#bounds<" + ", ".join("?" if b is None else str(b) for b in self.bounds) + ">"


def _rounded(values, element_type):
    """Float elements rounded to the element type's precision (f16/f32), as FloatAttr;
    i1 elements as booleans (`array<i1: 1, 0>` is `array<i1: true, false>`, as printed)."""
    if str(element_type) == "i1":
        return tuple(bool(v) if isinstance(v, int) else v for v in values)
    if getattr(element_type, "name", None) not in _PACK_CODES:
        return tuple(values)
    return tuple(round_to_type(v, element_type) if isinstance(v, float) else v for v in values)


def _bitwise(values):
    """`values` with floats replaced by their bits, for equality that NaN does not break."""
    if values is None:
        return None
    return tuple(struct.pack("<d", v) if isinstance(v, float) else v for v in values)


@ir_data
class DenseArrayAttr(Attribute):
    """`array<i64: 1, 2, 3>`: a flat list of scalars, MLIR's DenseArrayAttr."""

    element_type: Type
    values: tuple

    def __post_init__(self):
        object.__setattr__(self, "values", _rounded(self.values, self.element_type))

    def __eq__(self, other):
        return (isinstance(other, DenseArrayAttr) and self.element_type == other.element_type
                and _bitwise(self.values) == _bitwise(other.values))

    def __hash__(self):
        return hash((self.element_type, _bitwise(self.values)))

    def __str__(self) -> str:
        if not self.values:
            return f"array<{self.element_type}>"
        if isinstance(self.element_type, FloatType):
            items = ", ".join(format_float(v, self.element_type) for v in self.values)
        elif self.element_type == i1:
            items = ", ".join("true" if v else "false" for v in self.values)
        else:
            items = ", ".join(str(v) for v in self.values)
        return f"array<{self.element_type}: {items}>"


# ---------------------------------------------------------------------------
# Dense elements

_NUMPY_DTYPES = {
    "f16": "float16", "f32": "float32", "f64": "float64",
    "i1": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "si8": "int8", "si16": "int16", "si32": "int32", "si64": "int64",
    "ui8": "uint8", "ui16": "uint16", "ui32": "uint32", "ui64": "uint64",
    "index": "int64",
}
# The small types are ml_dtypes' (onnx depends on it); each holds one element per byte,
# so i4, ui4, i2, ui2 and f4E2M1FN tensors take a byte an element in buffers and plans.
_ML_DTYPES = {
    "bf16": "bfloat16", "f8E4M3FN": "float8_e4m3fn", "f8E4M3FNUZ": "float8_e4m3fnuz",
    "f8E5M2": "float8_e5m2", "f8E5M2FNUZ": "float8_e5m2fnuz", "f8E8M0FNU": "float8_e8m0fnu",
    "f4E2M1FN": "float4_e2m1fn", "i4": "int4", "si4": "int4", "ui4": "uint4", "i2": "int2",
    "si2": "int2", "ui2": "uint2",
}


def numpy_dtype_name(element_type: Type) -> str:
    """The name `np.dtype` knows the element type by (ml_dtypes' types are registered
    with numpy when ml_dtypes is imported, which this does for them)."""
    key = str(element_type)
    name = _NUMPY_DTYPES.get(key)
    if name is None:
        name = _ML_DTYPES.get(key)
        if name is None:
            raise ValueError(f"no numpy dtype for element type {element_type}")
        import ml_dtypes  # noqa: F401 - registers the names with numpy
    return name


def _format_element(value, element_type: Type) -> str:
    if isinstance(element_type, FloatType):
        return format_float(value, element_type)
    if element_type == i1:
        return "true" if value else "false"
    return str(value)


def _nest(values, shape, element_type) -> str:
    if not shape:
        return _format_element(values[0], element_type)
    if len(shape) == 1:
        return "[" + ", ".join(_format_element(v, element_type) for v in values) + "]"
    step = len(values) // shape[0] if shape[0] else 0
    return "[" + ", ".join(
        _nest(values[i * step:(i + 1) * step], shape[1:], element_type) for i in range(shape[0])
    ) + "]"


@ir_data
class DenseElementsAttr(Attribute):
    """`dense<...> : tensor<...>`. Holds either a flat tuple of Python scalars
    (`values`, one value for a splat) or raw little-endian bytes (`raw`, printed as hex)."""

    type: ShapedType
    values: tuple | None = None
    raw: bytes | None = None

    def __post_init__(self):
        if self.values is not None:
            object.__setattr__(self, "values", _rounded(self.values, self.type.element_type))

    def __eq__(self, other):
        # bitwise on floats, as FloatAttr: NaN elements compare equal to themselves
        return (isinstance(other, DenseElementsAttr) and self.type == other.type
                and self.raw == other.raw and _bitwise(self.values) == _bitwise(other.values))

    def __hash__(self):
        return hash((self.type, self.raw, _bitwise(self.values)))

    @property
    def is_splat(self) -> bool:
        n = self.type.num_elements()
        return self.values is not None and len(self.values) == 1 and n != 1

    def __str__(self) -> str:
        if self.raw is not None:
            body = '"0x' + self.raw.hex().upper() + '"'
        elif self.is_splat:
            body = _format_element(self.values[0], self.type.element_type)
        elif not self.values:
            body = ""  # MLIR's spelling of a tensor with no elements
        else:
            body = _nest(self.values, self.type.shape, self.type.element_type)
        return f"dense<{body}> : {self.type}"

    def to_numpy(self):
        import numpy as np

        dtype = np.dtype(numpy_dtype_name(self.type.element_type))
        shape = self.type.shape
        if self.raw is not None:
            array = np.frombuffer(self.raw, dtype=dtype)
            if array.size == 1:
                return np.full(shape, array[0], dtype=dtype)
            return array.reshape(shape).copy()
        if self.is_splat:
            return np.full(shape, self.values[0], dtype=dtype)
        return np.array(self.values, dtype=dtype).reshape(shape)

    @staticmethod
    def from_numpy(array, type_: ShapedType) -> "DenseElementsAttr":
        import numpy as np

        dtype = np.dtype(numpy_dtype_name(type_.element_type))
        return DenseElementsAttr(type_, raw=np.ascontiguousarray(array, dtype=dtype).tobytes())


# ---------------------------------------------------------------------------
# Resources: blobs referenced by key, stored inline (hex) or in a side file.

@dataclass(eq=False)
class ResourceBlob:
    """Bytes of one resource. Either `data` is set (inline), or `path`/`offset`/`size`
    name a byte range of a side file read on first use."""

    key: str
    data: bytes | None = None
    path: str | None = None
    offset: int = 0
    size: int = 0
    alignment: int = 4
    _loaded: bytes | None = field(default=None, repr=False)

    @property
    def is_external(self) -> bool:
        return self.data is None and self.path is not None

    @property
    def nbytes(self) -> int:
        return len(self.data) if self.data is not None else self.size

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        if self._loaded is None:
            if self.path is None:
                raise ValueError(f"resource '{self.key}' has no data")
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                self._loaded = handle.read(self.size)
            if len(self._loaded) != self.size:
                raise ValueError(
                    f"resource '{self.key}': {self.path} holds {len(self._loaded)} bytes at "
                    f"offset {self.offset}, expected {self.size}")
        return self._loaded

    def identity(self):
        return (self.key, self.path, self.offset, self.size) if self.is_external else (
            self.key, self.data)


@ir_data
class DenseResourceAttr(Attribute):
    type: ShapedType
    blob: ResourceBlob

    def __eq__(self, other):
        return (isinstance(other, DenseResourceAttr) and self.type == other.type
                and self.blob.identity() == other.blob.identity())

    def __hash__(self):
        return hash((self.type, self.blob.key))

    def __str__(self) -> str:
        return f"dense_resource<{self.blob.key}> : {self.type}"

    def to_numpy(self):
        import numpy as np

        dtype = np.dtype(numpy_dtype_name(self.type.element_type))
        return np.frombuffer(self.blob.read(), dtype=dtype).reshape(self.type.shape)


def int_attr(value: int, type_: Type = i64) -> IntegerAttr:
    return IntegerAttr(int(value), type_)


def float_attr(value: float, type_: Type = f32) -> FloatAttr:
    return FloatAttr(float(value), type_)


def index_attr(value: int) -> IntegerAttr:
    return IntegerAttr(int(value), IndexType())


def array_attr(values) -> ArrayAttr:
    return ArrayAttr(tuple(values))


def to_python(attr: Attribute):
    """A plain Python value for simple attributes (ints, floats, strings, arrays)."""
    kind = type(attr)  # exact types first: kernels' configs convert thousands per module
    if kind is IntegerAttr or kind is StringAttr or kind is FloatAttr or kind is BoolAttr:
        return attr.value
    if kind is ArrayAttr:
        return [to_python(a) for a in attr.value]
    if isinstance(attr, (IntegerAttr, FloatAttr, StringAttr, BoolAttr)):
        return attr.value
    if isinstance(attr, ArrayAttr):
        return [to_python(a) for a in attr.value]
    if isinstance(attr, DenseArrayAttr):
        return list(attr.values)
    if isinstance(attr, UnitAttr):
        return True
    if isinstance(attr, TypeAttr):
        return attr.value
    if isinstance(attr, DictionaryAttr):
        return {k: to_python(v) for k, v in attr.entries}
    return attr


__all__ = [name for name in dir() if not name.startswith("_")] + ["f32", "i1"]
