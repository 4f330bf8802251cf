"""Text → IR. Lark builds the LALR tables once (cached on disk); our loop drives them
with the FastLexer (ir/lexer.py) and calls the transformer's actions as rules reduce,
so IR is built during parsing, with no tree.

Errors are `DiagnosticError`s at `file:line:col`.
"""

from __future__ import annotations

import gc
import os
from itertools import chain
from pathlib import Path

from lark import Lark, Token
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from palimpsest.ir import attributes as A
from palimpsest.ir import types as T
from palimpsest.ir.core import Block, Operation, Region, UnregisteredOp
from palimpsest.ir.diagnostics import DiagnosticError, FileLineColLoc
from palimpsest.ir.opdef import lookup_op
from palimpsest.ir.parse_attributes import AttributeActions, _string
from palimpsest.ir.parse_ops import OpActions

_GRAMMAR = Path(__file__).with_name("grammar.lark")


class _Builder(OpActions, AttributeActions):
    """The transformer: Lark calls one method per reduced rule with its children
    (ir/parse_ops.py for ops, blocks and regions; ir/parse_attributes.py for types,
    attributes and locations)."""

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

        def end():  # $END, at the last token's position, drives the final reductions
            yield (Token.new_borrow_pos("$END", "", token) if token is not None
                   else Token("$END", "", 0, 1, 1))

        end_state = self.end_state
        for token in chain(self.lexer.tokens(text, 0, len(text), states, state_stack), end()):
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
                state = states[state_stack[-1]][origin][1]
                if state == end_state:  # only $END reduces to it
                    return value_stack[-1]
                state_stack.append(state)


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
