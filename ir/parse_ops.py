"""Parser actions for operations, blocks and regions: SSA name scopes (forward
references, redefinitions, type agreement between uses), block labels, and building
each op from its generic, pretty, function or module shape (see ir/parser.py)."""

from __future__ import annotations

from lark import Token

from palimpsest.ir import attributes as A
from palimpsest.ir import types as T
from palimpsest.ir.core import Block, Operation, Region, UnregisteredOp, Value
from palimpsest.ir.diagnostics import DiagnosticError, FileLineColLoc
from palimpsest.ir.opdef import FunctionLike, is_dialect_registered, lookup_op
from palimpsest.ir.parse_attributes import _split_uses, _symbol_name, _unescape

_UNSET = object()
# `%r:N` names N results; a count beyond this is a typo, not an op (the shared-type
# pretty form would otherwise build N results before anything could object).
MAX_RESULT_GROUP = 1 << 16


class _Placeholder(Value):
    """A forward reference to a value defined later in the text."""

    __slots__ = ("loc",)

    def __init__(self, type_, name, loc):
        super().__init__(type_, name)
        self.loc = loc



class OpActions:
    """Mixed into the parser's transformer; its state is set by `reset`."""

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
                if not 1 <= count <= MAX_RESULT_GROUP:
                    self.fail(f"result group '{group}' must name 1 to {MAX_RESULT_GROUP} "
                              f"results", results_token)
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

