"""Parser actions for types, attributes, locations and the file-metadata trailer:
the methods Lark calls when it reduces those grammar rules (see ir/parser.py). They
build immutable values and report problems at the token's file:line:col."""

from __future__ import annotations

from lark import Token

from palimpsest.ir import attributes as A
from palimpsest.ir import types as T
from palimpsest.ir.diagnostics import (
    CallSiteLoc, FileLineColLoc, FusedLoc, NameLoc, UnknownLoc,
)


def _unescape(body: str) -> str:
    if "\\" not in body:
        return body
    # As in MLIR, a string is bytes: `\C3\A9` is the UTF-8 encoding of 'é'. Bytes that are
    # not UTF-8 are kept as surrogate escapes (quote_string prints them as \XX again).
    out, i = bytearray(), 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out += ch.encode("utf-8", "surrogateescape")
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in '"\\':
            out += nxt.encode()
            i += 2
        elif nxt == "n":
            out += b"\n"
            i += 2
        elif nxt == "t":
            out += b"\t"
            i += 2
        else:
            out.append(int(body[i + 1:i + 3], 16))
            i += 3
    return out.decode("utf-8", "surrogateescape")


def _string(token) -> str:
    return _unescape(token[1:-1])


def _symbol_name(token) -> str:
    text = token[1:]
    return _string(text) if text.startswith('"') else text


class _SubToken(str):
    """A piece of a composite token, with its own position for diagnostics."""

    __slots__ = ("line", "column", "type")


_USE_RE = None


def _split_uses(token) -> list:
    """`%a, %b#1)` (one USES_CLOSE or USE_LIST token) → one positioned piece per value."""
    import re

    global _USE_RE
    if _USE_RE is None:
        _USE_RE = re.compile(r"%[A-Za-z0-9_$.\-]+(?:#[0-9]+)?|\n")
    pieces, line, line_start = [], token.line, -token.column + 1
    for match in _USE_RE.finditer(token):
        if match.group() == "\n":
            line += 1
            line_start = match.end()
            continue
        piece = _SubToken(match.group())
        piece.line, piece.column, piece.type = line, match.start() - line_start + 1, "VALUE_USE"
        pieces.append(piece)
    return pieces


class _HexInt(int):
    """A hex integer literal inside dense<...>/array<...>: a bit pattern for floats."""

    def __new__(cls, value, token):
        self = super().__new__(cls, value)
        self.token = token
        return self


def _parse_int(text: str) -> int:
    return int(text, 16) if "0x" in text[:3] else int(text)



class AttributeActions:
    """Mixed into the parser's transformer; uses its `fail`, `loc`, `check_dialect`,
    `type_cache` and `blobs`."""

    # -- types -------------------------------------------------------------
    def scalar_type(self, children):
        try:
            return T.scalar_type(str(children[0]))
        except ValueError as error:
            self.fail(str(error), children[0])

    def TENSOR_FAST(self, token):
        cached = self.type_cache.get(str(token))
        if cached is None:
            body = token[7:-1]
            # the element type follows the last 'x' of the dims ('index' has an 'x' too)
            cut = body.rfind("x", 0, len(body) - 5) if body.endswith("index") else body.rfind("x")
            dims = body[:cut].split("x") if cut >= 0 else []
            element = body[cut + 1:]
            shape = tuple(None if d == "?" else int(d) for d in dims)
            problem = T.check_dims(shape)
            if problem:
                self.fail(problem, token)
            cached = T.TensorType(shape, T.scalar_type(element))
            self.type_cache[str(token)] = cached
        return cached

    def DIALECT_TYPE(self, token):
        self.check_dialect(token[1:], token, "type")
        return T.OpaqueType(str(token)[1:])

    def param_type(self, children):
        keyword, dims, *params = children
        cls = T.lookup_type_keyword(str(keyword))
        if cls is None:
            self.fail(f"unknown type '{keyword}'", keyword)
        shape = ()
        if dims is not None:
            text = str(dims)
            shape = None if text == "*x" else tuple(
                None if d == "?" else int(d) for d in text[:-1].split("x"))
        problem = T.check_dims(shape)
        if problem:
            self.fail(problem, keyword)
        try:
            return cls.from_params(shape, [p for p in params if p is not None])
        except T.TypeParamError as error:
            self.fail(str(error), keyword)

    def function_type(self, children):
        first = children[0]
        if isinstance(first, Token) and first.type == "FN_TYPE":
            cached = self.type_cache.get(first)
            if cached is None:
                cached = self.type_cache[str(first)] = self._simple_function_type(str(first))
            return cached
        inputs = children[0] or []
        if len(children) == 2:
            result = children[1]
            results = [result] if isinstance(result, T.Type) else (result or [])
        else:
            results = []
        return T.FunctionType(tuple(inputs), tuple(results))

    def _simple_function_type(self, text):
        ins, _, outs = text.partition("->")
        outs = outs.strip()
        if outs.startswith("("):
            outs = outs[1:-1]
        return T.FunctionType(self._simple_types(ins.strip()[1:-1]), self._simple_types(outs))

    def _simple_types(self, text):
        result = []
        for item in text.split(","):
            item = item.strip()
            if item:
                result.append(self.TENSOR_FAST(item) if item[0] == "t" else T.scalar_type(item))
        return tuple(result)

    def type_list(self, children):
        return list(children)

    # -- attributes ----------------------------------------------------------
    def attr_entry(self, children):
        if len(children) == 1:  # ENTRY: `key = scalar` in one token
            return self._entry(children[0])
        key, value = children
        if isinstance(key, Token) and key.type == "ATTR_KEY":
            key = key[:-1].rstrip()
        return (key, A.UnitAttr() if value is None else value)

    def _entry(self, token):
        key, _, rest = token.partition("=")
        text = rest.strip()
        piece = _SubToken(text)
        piece.line = token.line
        piece.column = token.column + len(token) - len(rest.lstrip())
        if text[0] == '"':
            piece.type = "STRING"
            return key.rstrip(), self.string_attr([piece, None])
        if text in ("true", "false"):
            return key.rstrip(), A.BoolAttr(text == "true")
        number, _, type_text = text.partition(":")
        is_float = "." in number
        if type_text:
            piece.type = "TYPED_FLOAT" if is_float else "TYPED_INT"
            value = self.float_attr([piece]) if is_float else self.int_attr([piece])
        else:
            piece.type = "FLOAT" if is_float else "INT"
            value = self.float_attr([piece, None]) if is_float else self.int_attr([piece, None])
        return key.rstrip(), value

    def dict_key(self, children):
        token = children[0]
        return _string(token) if token.type == "STRING" else str(token)

    def int_attr(self, children):
        if len(children) == 1:
            text, _, type_text = children[0].partition(":")
            value, type_ = _parse_int(text.strip()), T.scalar_type(type_text.strip())
            self._check_int(value, type_, children[0])
            return A.IntegerAttr(value, type_)
        token, type_ = children
        value = _parse_int(str(token))
        if type_ is None:
            self._check_int(value, T.i64, token)
            return A.IntegerAttr(value)
        if isinstance(type_, T.FloatType):
            return A.FloatAttr(self._float_bits(value, type_, token), type_)
        if not isinstance(type_, (T.IntegerType, T.IndexType)):
            self.fail(f"an integer literal cannot have type '{type_}'", token)
        self._check_int(value, type_, token)
        return A.IntegerAttr(value, type_)

    def _check_int(self, value, type_, token) -> None:
        bounds = A.integer_range(type_)
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            self.fail(f"integer constant {value} out of range for type '{type_}'", token)

    def float_attr(self, children):
        if len(children) == 1:
            token = children[0]
            text, _, type_text = token.partition(":")
            return self._float(token, float(text), T.scalar_type(type_text.strip()))
        token, type_ = children
        if type_ is not None and not isinstance(type_, T.FloatType):
            self.fail(f"a float literal cannot have type '{type_}'", token)
        return self._float(token, float(token), type_ or T.f64)

    def _float(self, token, value, type_):
        try:
            return A.FloatAttr(value, type_)
        except ValueError as error:
            self.fail(str(error), token)

    def string_attr(self, children):
        token, type_ = children
        if type_ is not None:
            self.fail("typed string attributes are not supported", token)
        return A.StringAttr(_string(token))

    def bool_attr(self, children):
        return A.BoolAttr(children[0] == "true")

    def unit_attr(self, children):
        return A.UnitAttr()

    def array_attr(self, children):
        return A.ArrayAttr(tuple(c for c in children if c is not None))

    def dict_attr(self, children):
        return A.DictionaryAttr.of(children[0])

    def symbol_attr(self, children):
        names = [_symbol_name(t) for t in children]
        return A.SymbolRefAttr(names[0], tuple(names[1:]))

    def type_attr(self, children):
        return A.TypeAttr(children[0])

    def DIALECT_ATTR(self, token):
        if token.startswith("#bounds<"):
            return self._bounds(token)
        self.check_dialect(token[1:], token, "attribute")
        return A.OpaqueAttr(str(token)[1:])

    def _bounds(self, token):
        """`#bounds<8, ?, 1280>` (types.ShapedType.bounds): an int or `?` per dim."""
        body = token[len("#bounds<"):-1].strip()
        bounds = []
        for entry in (body.split(",") if body else []):
            entry = entry.strip()
            if entry == "?":
                bounds.append(None)
                continue
            try:
                bounds.append(int(entry))
            except ValueError:
                self.fail(f"expected an integer or '?' in {token}, got '{entry}'", token)
        return A.BoundsAttr(tuple(bounds))

    def _float_bits(self, bits, type_, token) -> float:
        """The float whose bit pattern is the hex literal `bits` (MLIR's spelling of
        non-finite floats), checked against the width of `type_`."""
        width = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}.get(type_.name)
        if width is None:
            self.fail(f"hexadecimal float literals are not supported for '{type_}'", token)
        if not 0 <= bits < 1 << width:
            self.fail(f"hexadecimal float constant out of range for type '{type_}'", token)
        return A.float_from_bits(bits, type_)

    def dense_literal(self, children):
        token = children[0]
        if token.type == "INT":
            if "0x" in token[:3]:  # for float elements, a bit pattern
                return _HexInt(_parse_int(str(token)), token)
            return _parse_int(str(token))
        if token.type == "FLOAT":
            return float(token)
        return token == "true"

    def dense_list(self, children):
        return [c for c in children if c is not None] if children != [None] else []

    def dense_attr(self, children):
        token, value, type_ = children
        if not isinstance(type_, T.ShapedType) or not type_.has_static_shape:
            self.fail(f"dense elements need a statically shaped type, got '{type_}'", token)
        if isinstance(value, Token):  # "0x..." hex bytes
            text = _string(value)
            if not text.startswith("0x"):
                self.fail("expected a hex string \"0x...\" in dense<...>", value)
            try:
                raw = bytes.fromhex(text[2:])
            except ValueError:
                self.fail("malformed hex string in dense<...>", value)
            element = type_.element_type
            width = getattr(element, "width", 64 if isinstance(element, T.IndexType) else None)
            if width is not None:
                size, n = (width + 7) // 8, type_.num_elements()
                if len(raw) not in (size * n, size):  # every element, or a splat
                    self.fail(f"hex string of {len(raw)} bytes does not hold {n} elements "
                              f"of '{element}' ({size * n} bytes)", value)
            return A.DenseElementsAttr(type_, raw=raw)
        flat = []
        n = type_.num_elements()
        if value is None:  # dense<> : an empty tensor
            if n != 0:
                self.fail(f"dense<> has no elements but '{type_}' has {n}", token)
            return A.DenseElementsAttr(type_, ())
        shape = self._flatten(value, flat, token)
        element = type_.element_type
        if isinstance(element, T.FloatType):
            flat = [self._float_bits(v, element, v.token) if isinstance(v, _HexInt) else float(v)
                    for v in flat]
        elif isinstance(element, (T.IntegerType, T.IndexType)):
            if any(isinstance(v, float) for v in flat):
                self.fail(f"expected integer elements for '{type_}'", token)
            flat = [int(v) for v in flat]
            for v in flat:
                self._check_int(v, element, token)
        if len(flat) == 1 and not shape:
            return self._checked(token, A.DenseElementsAttr, type_, (flat[0],))
        if tuple(shape) != tuple(type_.shape) and not (n == 0 and not flat):
            self.fail(f"dense literal of shape {list(shape)} does not match type '{type_}'", token)
        return self._checked(token, A.DenseElementsAttr, type_, tuple(flat))

    def _checked(self, token, cls, type_, values):
        try:
            return cls(type_, values)
        except ValueError as error:  # a float out of its element type's range
            self.fail(str(error), token)

    def _flatten(self, value, flat, token):
        if not isinstance(value, list):
            flat.append(value)
            return []
        shapes = [self._flatten(v, flat, token) for v in value]
        if any(s != shapes[0] for s in shapes):
            self.fail("dense literal is not rectangular", token)
        return [len(value)] + (shapes[0] if shapes else [])

    def dense_resource_attr(self, children):
        token, key, type_ = children
        blob = self.blobs.get(str(key))
        if blob is None:
            blob = self.blobs[str(key)] = A.ResourceBlob(str(key))
            blob.first_use = self.loc(key)
        return A.DenseResourceAttr(type_, blob)

    def dense_array_attr(self, children):
        token, type_, *values = children
        values = [v for v in values if v is not None]
        if isinstance(type_, T.FloatType):
            values = [self._float_bits(v, type_, v.token) if isinstance(v, _HexInt) else float(v)
                      for v in values]
        elif isinstance(type_, (T.IntegerType, T.IndexType)):
            for v in values:
                if isinstance(v, float):
                    self.fail(f"expected an integer in 'array<{type_}: ...>', got {v}", token)
                self._check_int(int(v), type_, token)
        return self._checked(token, A.DenseArrayAttr, type_, tuple(values))

    # -- locations -------------------------------------------------------------
    def location(self, children):
        return children[0]

    def loc_file(self, children):
        return FileLineColLoc(_string(children[0]), int(children[1]), int(children[2]))

    def loc_unknown(self, children):
        return UnknownLoc()

    def loc_name(self, children):
        token = children[0]
        if token.type == "OP_OPEN":
            return NameLoc(_unescape(token[1:token.rindex('"')]), children[1])
        return NameLoc(_string(token), children[1])

    def loc_fused(self, children):
        return FusedLoc(tuple(c for c in children[1:]), children[0])

    def loc_callsite(self, children):
        return CallSiteLoc(children[0], children[1])

    # -- file metadata -----------------------------------------------------------
    def file_metadata(self, children):
        return dict(c for c in children if c is not None)

    def meta_entry(self, children):
        key, value = children
        return (_string(key) if key.type == "STRING" else str(key), value)

    def meta_dict(self, children):
        return dict(c for c in children if c is not None)

    def meta_range(self, children):
        return (int(children[0]), int(children[1]))

