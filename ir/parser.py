"""Text → IR. One Lark LALR parser (contextual lexer) built once and cached; the
transformer runs inside the parser, so IR is built during parsing, with no tree.

Errors are `DiagnosticError`s at `file:line:col`.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

from lark import Lark, Token
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from palimpsest.ir import attributes as A
from palimpsest.ir import types as T
from palimpsest.ir.core import Block, Operation, Region, UnregisteredOp, Value
from palimpsest.ir.diagnostics import (
    CallSiteLoc, DiagnosticError, FileLineColLoc, FusedLoc, NameLoc, UnknownLoc,
)
from palimpsest.ir.opdef import (
    FunctionLike, is_dialect_registered, lookup_op,
)

_GRAMMAR = Path(__file__).with_name("grammar.lark")
_UNSET = object()


class _Placeholder(Value):
    """A forward reference to a value defined later in the text."""

    __slots__ = ("loc",)

    def __init__(self, type_, name, loc):
        super().__init__(type_, name)
        self.loc = loc


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


class _Builder:
    """The transformer: Lark calls one method per reduced rule with its children."""

    def __init__(self):
        self.reset("<input>", 0, False, None)

    def reset(self, filename, line_offset, allow_unregistered, base_dir):
        self.filename = filename
        self.line_offset = line_offset
        self.allow_unregistered = allow_unregistered
        self.base_dir = base_dir
        self.scopes: list[dict] = [{}]
        self.forward: list[dict] = [{}]
        self.block_scopes: list[dict] = [{}]
        self.defined_blocks: list[dict] = [{}]  # Block -> location of its label
        self.pending_entry_args = None
        self.blobs: dict[str, A.ResourceBlob] = {}
        self.type_cache: dict[str, T.Type] = {}
        self.metadata = None

    # -- helpers -----------------------------------------------------------
    def loc(self, token) -> FileLineColLoc:
        return FileLineColLoc(self.filename, token.line + self.line_offset, token.column)

    def fail(self, message, token):
        raise DiagnosticError(message, self.loc(token) if token is not None else None)

    def define(self, name: str, value: Value, token) -> None:
        scope = self.scopes[-1]
        for outer in self.scopes:
            if name in outer:
                self.fail(f"redefinition of SSA value '%{name}'", token)
        scope[name] = value
        if name[0].isdigit() is False and "#" not in name:
            value.name_hint = name
        for forward in reversed(self.forward):
            placeholder = forward.pop(name, None)
            if placeholder is not None:
                if placeholder.type != value.type:
                    raise DiagnosticError(
                        f"use of value '%{name}' expects different type than prior uses: "
                        f"'{placeholder.type}' vs '{value.type}'", placeholder.loc)
                placeholder.replace_all_uses_with(value)
                break

    def use(self, token, type_=_UNSET) -> Value:
        text = str(token)[1:]
        name, _, number = text.partition("#")
        key = f"{name}#{number}" if number else name
        for scope in reversed(self.scopes):
            value = scope.get(key)
            if value is None and number == "0":
                value = scope.get(name)
            if value is not None:
                if type_ is not _UNSET and value.type != type_:
                    self.fail(f"use of value '%{text}' expects different type than prior uses: "
                              f"'{type_}' vs '{value.type}'", token)
                return value
        for forward in self.forward:
            if key in forward:
                value = forward[key]
                if type_ is not _UNSET and value.type != type_:
                    self.fail(f"use of value '%{text}' expects different type than prior uses: "
                              f"'{type_}' vs '{value.type}'", token)
                return value
        if type_ is _UNSET:
            self.fail(f"use of undeclared SSA value '%{text}' (its type cannot be inferred "
                      f"here; give the op a type signature)", token)
        placeholder = _Placeholder(type_, key, self.loc(token))
        self.forward[-1][key] = placeholder
        return placeholder

    def block_ref(self, token) -> Block:
        name = str(token)[1:]
        blocks = self.block_scopes[-1]
        entry = blocks.get(name)
        if entry is None:
            entry = blocks[name] = (Block(), self.loc(token))
        return entry[0]

    def check_dialect(self, name, token, what):
        dialect = name.split(".", 1)[0].split("<", 1)[0]
        if not self.allow_unregistered and not is_dialect_registered(dialect):
            self.fail(f"{what} of unregistered dialect '{dialect}': '{name}' "
                      f"(use --allow-unregistered-dialect to accept it)", token)

    # -- regions -------------------------------------------------------------
    def region_open(self, children):
        self.scopes.append({})
        self.forward.append({})
        self.block_scopes.append({})
        self.defined_blocks.append({})
        entry = Block()
        if self.pending_entry_args is not None:
            for token, type_, _ in self.pending_entry_args:
                arg = entry.add_arg(type_)
                self.define(str(token)[1:], arg, token)
            self.pending_entry_args = None
        return entry

    def region(self, children):
        entry = children[0]
        region = Region()
        labeled = []
        for item in children[1:]:
            if isinstance(item, Block):
                labeled.append(item)
            else:
                entry.append(item)
        blocks = self.block_scopes.pop()
        defined = self.defined_blocks.pop()
        if entry.first is not None or entry.args:
            if labeled and entry.args and entry.first is None:
                raise DiagnosticError("invalid block name in region with named arguments",
                                      defined[labeled[0]])
            region.add_block(entry)
        for block in labeled:
            region.add_block(block)
        for name, (block, loc) in blocks.items():
            if block not in defined:
                raise DiagnosticError(f"reference to an undefined block '^{name}'", loc)
        self.scopes.pop()
        pending = self.forward.pop()
        self.forward[-1].update(pending)  # may be defined later in an enclosing region
        return region

    def block_label(self, children):
        token = children[0]
        name = str(token)[1:]
        block = self.block_ref(token)
        if block in self.defined_blocks[-1]:
            self.fail(f"redefinition of block '^{name}'", token)
        self.defined_blocks[-1][block] = self.loc(token)
        for arg in children[1:]:
            if arg is None:
                continue
            arg_token, type_, loc = arg
            value = block.add_arg(type_)
            self.define(str(arg_token)[1:], value, arg_token)
        return block

    def block_arg(self, children):
        return (children[0], children[1], children[2])

    def block(self, children):
        block = children[0]
        for op in children[1:]:
            block.append(op)
        return block

    def regions(self, children):
        return children

    # -- ops ---------------------------------------------------------------
    def value_uses(self, children):
        if len(children) == 1 and children[0].type == "USE_LIST":
            return _split_uses(children[0])
        return children

    def operands_tail(self, children):
        first = children[0]
        if first is None:
            return []
        if isinstance(first, Token) and first.type == "USES_CLOSE":
            return _split_uses(first)
        return first

    def successors(self, children):
        return [self.block_ref(t) for t in children]

    def properties(self, children):
        return dict(e for e in children if e is not None)

    def attr_dict(self, children):
        return dict(e for e in children if e is not None)

    def pretty_symbol(self, children):
        return children

    def pretty_operands(self, children):
        return children[0]

    def signature(self, children):
        return children[0]

    def sig_types(self, children):
        return list(children)

    def generic_op(self, children):
        name_token, uses, succ, props, regions, attrs, fn_type = children
        name = _unescape(name_token[1:name_token.rindex('"')])
        inputs, results = fn_type.inputs, fn_type.results
        uses = uses or []
        if len(uses) != len(inputs):
            self.fail(f"'{name}' has {len(uses)} operands but its type lists {len(inputs)}",
                      name_token)
        operands = [self.use(token, t) for token, t in zip(uses, inputs)]
        return (name_token, name, operands, list(results), props or {}, attrs or {},
                regions or [], succ or [], False)

    def pretty_op(self, children):
        name_token, sym, uses, succ, attrs, regions, sig = children
        name = str(name_token)
        cls = lookup_op(name)
        if cls is None:
            self.fail(f"custom op '{name}' is unknown (unregistered ops must use the generic "
                      f"form \"{name}\"(...))", name_token)
        props, other = {}, {}
        open_properties = getattr(cls, "open_properties", False)
        for key, value in (attrs or {}).items():
            inherent = key in cls.prop_defs or (open_properties and "." not in key)
            (props if inherent else other)[key] = value
        if sym is not None:  # `@a` or a nested reference `@a::@b`
            symbol_prop = getattr(cls, "symbol_prop", None)
            if symbol_prop is None:
                self.fail(f"'{name}' takes no leading symbol", sym[0])
            names = [_symbol_name(t) for t in sym]
            if cls.prop_defs[symbol_prop].attr_class is A.StringAttr:
                if len(names) > 1:
                    self.fail(f"'{name}' defines a symbol: expected a name, not a nested "
                              f"reference", sym[0])
                props[symbol_prop] = A.StringAttr(names[0])
            else:
                props[symbol_prop] = A.SymbolRefAttr(names[0], tuple(names[1:]))
        return (name_token, name, uses or [], sig, props, other, regions or [], succ or [], True)

    def func_op(self, children):
        name_token, visibility, sym, (args, results), attrs, region = children
        name = str(name_token)
        cls = lookup_op(name)
        if cls is None or not cls.has_trait(FunctionLike):
            self.fail(f"'{name}' is not a registered function-like op", name_token)
        self.pending_entry_args = None
        arg_types, arg_attrs = [], []
        for item in args or []:
            if isinstance(item, tuple):
                arg_types.append(item[1])
                arg_attrs.append(item[2])
            else:
                arg_types.append(item)
                arg_attrs.append(None)
        result_types, result_attrs = [], []
        if isinstance(results, T.Type):
            result_types.append(results)
            result_attrs.append(None)
        elif results is not None:
            for item in results:
                if item is not None:
                    result_types.append(item[0])
                    result_attrs.append(item[1])
        props, other = {}, {}
        for key, value in (attrs or {}).items():
            (props if key in cls.prop_defs else other)[key] = value
        props["sym_name"] = A.StringAttr(_symbol_name(sym))
        props["function_type"] = A.TypeAttr(T.FunctionType(tuple(arg_types), tuple(result_types)))
        if visibility is not None:
            props["sym_visibility"] = A.StringAttr(str(visibility))
        if any(a is not None for a in arg_attrs):
            props["arg_attrs"] = A.ArrayAttr(tuple(A.DictionaryAttr.of(a or {}) for a in arg_attrs))
        if any(a is not None for a in result_attrs):
            props["res_attrs"] = A.ArrayAttr(tuple(A.DictionaryAttr.of(a or {}) for a in result_attrs))
        return (name_token, name, [], [], props, other, [region or Region()], [], False)

    def func_sig(self, children):
        if len(children) == 1:  # FN_TYPE: a declaration, or a definition without arguments
            fn_type = self.function_type(children)
            return list(fn_type.inputs), [(t, None) for t in fn_type.results]
        return children[0], children[1]

    def func_args(self, children):
        if children[0][0] is None:
            return children  # a declaration: types, maybe with attributes
        self.pending_entry_args = [(c[0], c[1], c[3]) for c in children]
        return children

    def decl_arg(self, children):
        return (None, children[0], children[1], None)

    def func_arg(self, children):
        token, type_, attrs, loc = children
        return (token, type_, attrs, loc)

    def func_results(self, children):
        if len(children) == 1 and isinstance(children[0], T.Type):
            return children[0]
        return children

    def func_result(self, children):
        return (children[0], children[1])

    def module_op(self, children):
        token, sym, attrs, region = children
        cls = lookup_op("builtin.module")
        props, other = {}, {}
        for key, value in (attrs or {}).items():
            (props if cls is not None and key in cls.prop_defs else other)[key] = value
        if sym is not None:
            props["sym_name"] = A.StringAttr(_symbol_name(sym))
        if not region.blocks:  # `module {}`: a module always has its one block
            region.add_block(Block())
        return (token, "builtin.module", [], [], props, other, [region], [], False)

    def op(self, children):
        results_token, body, location = children
        name_token, name, operands, result_spec, props, attrs, regions, succ, pretty = body
        result_names = []
        if results_token is not None:
            for group in str(results_token)[:-1].split(","):
                group = group.strip()
                base, _, count = group.partition(":")
                base = base.strip()[1:]
                count = int(count) if count else 1
                if count == 1:
                    result_names.append(base)
                else:
                    result_names.extend(f"{base}#{i}" for i in range(count))
        first = results_token if results_token is not None else name_token
        if pretty:
            operand_types, result_types = self._resolve_signature(
                name, name_token, operands, len(result_names), result_spec)
            operands = [self.use(tok, t) for tok, t in zip(operands, operand_types)]
        else:
            result_types = result_spec
            if len(result_names) != len(result_types):
                self.fail(f"'{name}' defines {len(result_names)} results but its type lists "
                          f"{len(result_types)}", first)
        cls = lookup_op(name)
        if cls is None:
            self.check_dialect(name, name_token, "operation")
            dialect = name.split(".", 1)[0]
            if not self.allow_unregistered and is_dialect_registered(dialect):
                self.fail(f"unknown operation '{name}': dialect '{dialect}' has no such op "
                          f"(use --allow-unregistered-dialect to accept it)", name_token)
            op = UnregisteredOp(name, operands, result_types, props, attrs, regions, succ)
        else:
            for key in [k for k in attrs if k in cls.prop_defs and k not in props]:
                props[key] = attrs.pop(key)
            op = cls.__new__(cls)
            Operation.__init__(op, operands, result_types, props, attrs, regions, succ)
        op.location = location
        op.source_loc = self.loc(first)
        for name_, result in zip(result_names, op.results):
            self.define(name_, result, results_token)
        return op

    def _resolve_signature(self, name, token, operands, n_results, sig):
        n_operands = len(operands)
        if sig is None:
            if n_results:
                self.fail(f"'{name}' has results, so it needs a type signature ': ...'", token)
            return [_UNSET] * n_operands, []
        if isinstance(sig, T.FunctionType):
            if len(sig.inputs) != n_operands or len(sig.results) != n_results:
                self.fail(f"'{name}' has {n_operands} operands and {n_results} results, but its "
                          f"signature is '{sig}'", token)
            return list(sig.inputs), list(sig.results)
        if n_results == 0:
            if len(sig) != n_operands:
                self.fail(f"'{name}' has {n_operands} operands but {len(sig)} types", token)
            return sig, []
        if n_operands == 0:
            if len(sig) != n_results:
                self.fail(f"'{name}' has {n_results} results but {len(sig)} types", token)
            return [], sig
        if len(sig) != 1:
            self.fail(f"'{name}' needs a functional signature '(operand types) -> result "
                      f"types' or one type shared by all operands and results", token)
        return sig * n_operands, sig * n_results

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
            cached = T.TensorType(tuple(None if d == "?" else int(d) for d in dims),
                                  T.scalar_type(element))
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
        self.check_dialect(token[1:], token, "attribute")
        return A.OpaqueAttr(str(token)[1:])

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
            return A.DenseElementsAttr(type_, (flat[0],))
        if tuple(shape) != tuple(type_.shape) and not (n == 0 and not flat):
            self.fail(f"dense literal of shape {list(shape)} does not match type '{type_}'", token)
        return A.DenseElementsAttr(type_, tuple(flat))

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
        return A.DenseArrayAttr(type_, tuple(values))

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

    def start(self, children):
        metadata = children[-1]
        ops = [c for c in children[:-1] if c is not None]
        return ops, metadata


_PARSER = None
_BUILDER = None
_DRIVER = None


def _parser():
    global _PARSER, _BUILDER, _DRIVER
    if _PARSER is None:
        _BUILDER = _Builder()
        from palimpsest.ir.lexer import FastLexer

        _PARSER = Lark(_GRAMMAR.read_text(), parser="lalr", lexer=FastLexer,
                       maybe_placeholders=True, transformer=_BUILDER, cache=_cache_path())
        _DRIVER = _Driver(_PARSER)
    return _PARSER


class _Driver:
    """The LALR(1) loop over Lark's parse table and rule callbacks, with our lexer
    feeding it directly. Lark's own loop looks every reduction's rule up by hashing the
    Rule object and goes through a ParserState per token; indexing rules by identity
    and fusing the loop with the lexer takes about a third off the parse time of a
    20k-op file (benchmarks/README.md). Grammar analysis, tables, callbacks (the
    transformer with Lark's child filters) and error types stay Lark's."""

    def __init__(self, lark: Lark):
        from lark.parsers.lalr_analysis import Reduce, Shift

        frontend = lark.parser
        lalr = frontend.parser
        table = lalr._parse_table
        self.lexer = frontend.lexer
        self.states = table.states
        self.start_state = table.start_states["start"]
        self.end_state = table.end_states["start"]
        self.shift = Shift
        callbacks = lalr.parser.callbacks
        self.reductions = {}
        for actions in table.states.values():
            for action, argument in actions.values():
                if action is Reduce:
                    self.reductions[id(argument)] = (len(argument.expansion),
                                                     argument.origin.name, callbacks[argument])
        self.terminal_callbacks = {k: v for k, v in callbacks.items() if isinstance(k, str)}

    def parse(self, text: str):
        states = self.states
        shift = self.shift
        reductions = self.reductions
        terminal_callbacks = self.terminal_callbacks
        state_stack = [self.start_state]
        value_stack: list = []
        token = None
        for token in self.lexer.tokens(text, 0, len(text), states, state_stack):
            kind = token.type
            while True:
                actions = states[state_stack[-1]]
                try:
                    action, argument = actions[kind]
                except KeyError:
                    raise UnexpectedToken(token, {s for s in actions if s.isupper()}) from None
                if action is shift:
                    state_stack.append(argument)
                    callback = terminal_callbacks.get(kind)
                    value_stack.append(token if callback is None else callback(token))
                    break
                size, origin, callback = reductions[id(argument)]
                if size:
                    children = value_stack[-size:]
                    del state_stack[-size:]
                    del value_stack[-size:]
                else:
                    children = []
                value_stack.append(callback(children))
                state_stack.append(states[state_stack[-1]][origin][1])
        end = Token.new_borrow_pos("$END", "", token) if token is not None else Token("$END", "", 0, 1, 1)
        while True:
            actions = states[state_stack[-1]]
            try:
                action, argument = actions["$END"]
            except KeyError:
                raise UnexpectedToken(end, {s for s in actions if s.isupper()}) from None
            size, origin, callback = reductions[id(argument)]
            if size:
                children = value_stack[-size:]
                del state_stack[-size:]
                del value_stack[-size:]
            else:
                children = []
            value_stack.append(callback(children))
            new_state = states[state_stack[-1]][origin][1]
            state_stack.append(new_state)
            if new_state == self.end_state:
                return value_stack[-1]


def _cache_path():
    directory = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    try:
        os.makedirs(os.path.join(directory, "palimpsest"), exist_ok=True)
    except OSError:
        return True
    import lark

    return os.path.join(directory, "palimpsest", f"grammar-{lark.__version__}-"
                        f"{os.stat(_GRAMMAR).st_mtime_ns}.lark.cache")


_TOKEN_NAMES = {
    "VALUE_USE": "an SSA value", "RESULTS": "SSA result names", "CARET_ID": "a block label",
    "SYMBOL": "a symbol (@name)", "STRING": "a string", "FLOAT": "a float", "INT": "an integer",
    "BARE_ID": "an identifier", "FUNC_OP": "a function op", "TYPE_KW": "a type",
    "INT_TYPE": "a type", "FLOAT_TYPE": "a type", "INDEX": "a type", "NONE": "a type",
    "TENSOR_FAST": "a type", "DIALECT_TYPE": "a type", "DIMS": "dimensions",
    "DIALECT_ATTR": "an attribute", "$END": "end of input",
    # composite tokens: name what they start with, never the terminal's name
    "USE_LIST": "an SSA value", "USES_CLOSE": "an SSA value", "OP_OPEN": "an op name",
    "FN_TYPE": "a type", "TYPED_INT": "an integer", "TYPED_FLOAT": "a float",
    "ATTR_KEY": "an attribute name", "_non_function_type": "a type",
}


def _describe_expected(parser, expected) -> str:
    names = set()
    for terminal in expected:
        if terminal in _TOKEN_NAMES:
            names.add(_TOKEN_NAMES[terminal])
            continue
        try:
            pattern = parser.get_terminal(terminal).pattern
        except KeyError:
            names.add(terminal)
            continue
        names.add(f"'{pattern.value}'" if pattern.type == "str" else terminal.lower())
    ordered = sorted(names)
    if len(ordered) > 8:
        ordered = ordered[:8] + ["..."]
    return ", ".join(ordered)


def _describe_token(token) -> str:
    if token.type == "$END":
        return "end of input"
    return f"'{token}'"


_REFERENCE = None


def _reference_parser():
    """Lark's own LALR loop with its contextual lexer, over the same grammar and
    transformer: what the fast path must agree with (test/unit/test_lexer.py)."""
    global _REFERENCE
    if _REFERENCE is None:
        builder = _Builder()
        _REFERENCE = (Lark(_GRAMMAR.read_text(), parser="lalr", lexer="contextual",
                           maybe_placeholders=True, transformer=builder), builder)
    return _REFERENCE


def parse(text: str, filename: str = "<input>", *, allow_unregistered: bool = False,
          line_offset: int = 0, base_dir: str | None = None,
          reference: bool = False) -> Operation:
    """Parse IR text into a `builtin.module` (an implicit one wraps top-level ops that
    are not a single module). Raises DiagnosticError with a file:line:col location.
    `reference=True` parses with Lark's own loop and contextual lexer (for testing)."""
    parser = _parser()
    builder = _BUILDER
    drive = _DRIVER.parse
    if reference:
        parser, builder = _reference_parser()
        drive = parser.parse
    if base_dir is None and filename not in ("<input>", "<stdin>", "-"):
        base_dir = os.path.dirname(os.path.abspath(filename))
    builder.reset(filename, line_offset, allow_unregistered, base_dir)
    collecting = gc.isenabled()
    gc.disable()  # parsing allocates many long-lived objects; cyclic GC passes only slow it
    try:
        ops, metadata = drive(text)
    except VisitError as error:  # Lark wraps errors raised inside transformer callbacks
        inner = error.orig_exc
        if isinstance(inner, DiagnosticError):
            raise inner from None
        raise
    except UnexpectedInput as error:
        raise _syntax_error(parser, error, filename, line_offset) from None
    finally:
        if collecting:
            gc.enable()
    if builder.forward[0]:
        name, placeholder = next(iter(builder.forward[0].items()))
        raise DiagnosticError(f"use of undeclared SSA value '%{name}'", placeholder.loc)
    if builder.block_scopes[0]:
        name, (_, loc) = next(iter(builder.block_scopes[0].items()))
        raise DiagnosticError(f"reference to block '^{name}' outside any region", loc)
    _attach_resources(builder, metadata)
    module = _wrap_in_module(ops)
    builder.reset("<input>", 0, False, None)  # hold no reference to the parsed IR
    return module


def _syntax_error(parser, error, filename, line_offset) -> DiagnosticError:
    line = (error.line if error.line and error.line > 0 else 1) + line_offset
    column = error.column if error.column and error.column > 0 else 1
    loc = FileLineColLoc(filename, line, column)
    if isinstance(error, UnexpectedToken):
        if error.token.type == "$END":
            message = f"unexpected end of input, expected {_describe_expected(parser, error.expected)}"
        else:
            message = (f"unexpected {_describe_token(error.token)}, expected "
                       f"{_describe_expected(parser, error.expected)}")
    elif isinstance(error, UnexpectedCharacters):
        message = f"unexpected character '{error.char}'"
        if error.allowed:
            message += f", expected {_describe_expected(parser, error.allowed)}"
    elif isinstance(error, UnexpectedEOF):
        message = f"unexpected end of input, expected {_describe_expected(parser, error.expected)}"
    else:
        message = "syntax error"
    return DiagnosticError(message, loc)


def _attach_resources(builder: _Builder, metadata) -> None:
    metadata = metadata or {}
    for section in metadata:
        if section not in ("dialect_resources", "external_resources"):
            raise DiagnosticError(f"unknown file metadata section '{section}'",
                                  FileLineColLoc(builder.filename, 1, 1))
    inline = metadata.get("dialect_resources", {})
    if not isinstance(inline, dict):
        inline = {}
    for dialect_blobs in inline.values():
        if not isinstance(dialect_blobs, dict):
            continue
        for key, value in dialect_blobs.items():
            blob = builder.blobs.setdefault(key, A.ResourceBlob(key))
            text = _string(value) if isinstance(value, Token) else ""
            if not text.startswith("0x") or len(text) < 10:
                raise DiagnosticError(f"resource '{key}' must be a hex string \"0x...\"",
                                      builder.loc(value) if isinstance(value, Token) else None)
            try:
                raw = bytes.fromhex(text[2:])
            except ValueError:
                raw = b""
            if len(raw) < 4:
                raise DiagnosticError(f"resource '{key}' must be hex digits: 4 bytes of "
                                      f"alignment, then the data", builder.loc(value))
            blob.alignment = int.from_bytes(raw[:4], "little")
            blob.data = raw[4:]
    external = metadata.get("external_resources", {})
    for path, entries in (external.items() if isinstance(external, dict) else ()):
        if not isinstance(entries, dict):
            continue
        full = path if os.path.isabs(path) or builder.base_dir is None else os.path.join(
            builder.base_dir, path)
        for key, value in entries.items():
            if not isinstance(value, tuple):
                raise DiagnosticError(f"external resource '{key}' must be [offset, size]",
                                      FileLineColLoc(builder.filename, 1, 1))
            blob = builder.blobs.setdefault(key, A.ResourceBlob(key))
            blob.path, (blob.offset, blob.size) = full, value
    for key, blob in builder.blobs.items():
        if blob.data is None and blob.path is None:
            raise DiagnosticError(f"resource '{key}' is used but not defined in the file's "
                                  f"{{-# dialect_resources #-}} or external_resources",
                                  getattr(blob, "first_use", None))


def _wrap_in_module(ops) -> Operation:
    if len(ops) == 1 and ops[0].name == "builtin.module":
        return ops[0]
    cls = lookup_op("builtin.module")
    region = Region([Block()])
    for op in ops:
        region.block.append(op)
    if cls is None:
        return UnregisteredOp("builtin.module", (), (), None, None, [region])
    module = cls.__new__(cls)
    Operation.__init__(module, (), (), None, None, [region])
    return module


def parse_type(text: str) -> T.Type:
    """Parse a single type, e.g. `tensor<1x?xf32>` (used by tools and tests)."""
    module = parse(f'"test.type_holder"() {{t = {text}}} : () -> ()', "<type>",
                   allow_unregistered=True)
    op = module.regions[0].block.first
    return op.attributes["t"].value
