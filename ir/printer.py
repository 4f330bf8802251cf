"""IR → text, in the generic form or the uniform pretty form; both parse back.

Values are named once per isolated-from-above scope, in pre-order: a name the text
gave (`%x`) is kept when it is not a number, every other value gets the next number.
"""

from __future__ import annotations

import os
import re

from palimpsest.ir import attributes as A
from palimpsest.ir.core import Block, Operation, Region
from palimpsest.ir.diagnostics import DiagnosticError
from palimpsest.ir.opdef import FunctionLike, IsolatedFromAbove
from palimpsest.ir.resources import unique_name
from palimpsest.ir.types import FunctionType

_FUNC_PROPS = ("sym_name", "function_type", "sym_visibility", "arg_attrs", "res_attrs")


# A name the text can spell: ASCII letters, digits and `_$.-`, not starting with a digit.
# (A regex: value_names runs this on every value, e.g. in each plan-memory.)
_VALID_HINT = re.compile(r"[A-Za-z_$.\-][A-Za-z0-9_$.\-]*")


def _is_valid_hint(hint: str) -> bool:
    return bool(hint) and _VALID_HINT.fullmatch(hint) is not None


class Printer:
    def __init__(self, generic: bool = False, print_locations: bool = False,
                 resource_base: str | None = None):
        self.generic = generic
        self.print_locations = print_locations
        self.resource_base = resource_base
        self.out: list[str] = []
        self.names: dict = {}
        self.block_names: dict = {}
        self.blobs: dict[str, A.ResourceBlob] = {}
        self._type_str: dict = {}
        self._scopes: list = [set()]   # names taken by the enclosing scopes, innermost last

    # -- naming ----------------------------------------------------------------
    def _name_scope(self, op: Operation, reserved: set = frozenset()) -> set:
        """Name every value and block under `op` up to nested isolated ops, avoiding
        `reserved` (the names of the enclosing scopes: the parser keeps them visible, so
        an op with results beside a function must not share a name with one inside it).
        Returns the names taken."""
        state = {"next": 0, "arg": 0, "block": 0, "used": set(reserved)}
        for region in op.regions:
            self._name_region(region, state)
        return state["used"]

    def _name_region(self, region: Region, state) -> None:
        for index, block in enumerate(region.blocks):
            # as MLIR: numbered per region, the entry block is ^bb0 even when not printed
            self.block_names[block] = f"bb{index}"
            for arg in block.args:  # as MLIR: %argN in entry blocks, numbers elsewhere
                self._assign(arg, state, is_arg=index == 0)
            for op in block.ops:
                results = op.results
                if len(results) > 1 and not any(_is_valid_hint(r.name_hint or "")
                                                for r in results):
                    self._assign(results[0], state)  # MLIR's result group `%N:k`, `%N#i`
                    base = self.names[results[0]]
                    for i, result in enumerate(results):
                        self.names[result] = f"{base}#{i}"
                else:
                    for result in results:
                        self._assign(result, state)
                if op.regions and not (op.is_registered and op.has_trait(IsolatedFromAbove)):
                    for nested in op.regions:
                        self._name_region(nested, state)

    def _assign(self, value, state, is_arg=False) -> None:
        hint = value.name_hint
        used = state["used"]
        if hint and _is_valid_hint(hint):
            name = unique_name(hint, used)
        elif is_arg:
            name = f"arg{state['arg']}"
            state["arg"] += 1
            while name in used:
                name = f"arg{state['arg']}"
                state["arg"] += 1
        else:
            name = str(state["next"])
            state["next"] += 1
            while name in used:
                name = str(state["next"])
                state["next"] += 1
        used.add(name)
        self.names[value] = "%" + name

    def value_name(self, value) -> str:
        name = self.names.get(value)
        if name is None:
            return "%<<UNKNOWN SSA VALUE>>"
        return name

    # -- pieces ----------------------------------------------------------------
    def type_str(self, type_) -> str:
        text = self._type_str.get(type_)
        if text is None:
            text = self._type_str[type_] = str(type_)
        return text

    def attr_str(self, attr) -> str:
        self._collect_blobs(attr)
        return str(attr)

    def _collect_blobs(self, attr) -> None:
        if isinstance(attr, A.DenseResourceAttr):
            known = self.blobs.setdefault(attr.blob.key, attr.blob)
            if known is not attr.blob and known.identity() != attr.blob.identity():
                raise DiagnosticError(f"two different resources are named '{attr.blob.key}'; "
                                      f"resource keys must be unique in a module")
        elif isinstance(attr, A.ArrayAttr):
            for item in attr.value:
                self._collect_blobs(item)
        elif isinstance(attr, A.DictionaryAttr):
            for _, item in attr.entries:
                self._collect_blobs(item)

    def dict_str(self, mapping: dict) -> str:
        for value in mapping.values():
            self._collect_blobs(value)
        return A.format_attr_entries(sorted(mapping.items()))

    def _operands(self, op) -> str:
        names = self.names
        return ", ".join(names.get(v) or self.value_name(v) for v in op.operands)

    def _loc_suffix(self, op) -> str:
        loc = op.location
        if loc is None and self.print_locations:
            loc = op.source_loc
        return f" {loc}" if loc is not None else ""

    # -- ops -------------------------------------------------------------------
    def print_op(self, op: Operation, indent: str) -> None:
        out = self.out
        out.append(indent)
        if op.results:
            first = self.names.get(op.results[0], "")
            if len(op.results) > 1 and first.endswith("#0"):
                out.append(f"{first[:-2]}:{len(op.results)}")
            else:
                out.append(", ".join(self.names.get(r) or self.value_name(r) for r in op.results))
            out.append(" = ")
        if self.generic or not op.is_registered or not _pretty_printable(op):
            self._generic_body(op, indent)
        elif op.name == "builtin.module":
            self._module_body(op, indent)
        elif op.has_trait(FunctionLike):
            self._function_body(op, indent)
        else:
            self._pretty_body(op, indent)
        out.append(self._loc_suffix(op))
        out.append("\n")

    def _generic_body(self, op, indent) -> None:
        out = self.out
        out.append(f'"{op.name}"({self._operands(op)})')
        if op.successors:
            out.append("[" + ", ".join("^" + self.block_names[b] for b in op.successors) + "]")
        if op.properties:
            out.append(" <" + self.dict_str(op.properties) + ">")
        if op.regions:
            self._regions(op, indent)
        if op.attributes:
            out.append(" " + self.dict_str(op.attributes))
        ins = ", ".join(self.type_str(v.type) for v in op.operands)
        results = [r.type for r in op.results]
        if len(results) == 1 and not isinstance(results[0], FunctionType):
            outs = self.type_str(results[0])
        else:
            outs = "(" + ", ".join(self.type_str(t) for t in results) + ")"
        out.append(f" : ({ins}) -> {outs}")

    def _regions(self, op, indent) -> None:
        """` (region, region...)`: every region of `op`, entry block labelled."""
        out = self.out
        out.append(" (")
        for index, region in enumerate(op.regions):
            if index:
                out.append(", ")
            self.print_region(region, indent, entry_label=True)
        out.append(")")

    def _pretty_body(self, op, indent) -> None:
        out = self.out
        out.append(op.name)
        props = dict(op.properties)
        symbol_prop = getattr(type(op), "symbol_prop", None)
        symbol = props.pop(symbol_prop, None) if symbol_prop else None
        if symbol is not None:
            name = symbol.value if isinstance(symbol, A.StringAttr) else None
            out.append(" " + (str(A.SymbolRefAttr(name)) if name is not None else str(symbol)))
            if op.operands or type(op).operand_defs:  # a call-like op: @callee(args)
                out.append(f"({self._operands(op)})")
        elif op.operands:
            out.append(" " + self._operands(op))
        if op.successors:
            out.append(" [" + ", ".join("^" + self.block_names[b] for b in op.successors) + "]")
        merged = {**props, **op.attributes}
        if merged:
            out.append(" " + self.dict_str(merged))
        if op.regions:
            self._regions(op, indent)
        signature = self._signature(op)
        if signature:
            out.append(" : " + signature)

    def _signature(self, op) -> str:
        operand_types = [v.type for v in op.operands]
        result_types = [r.type for r in op.results]
        if not operand_types and not result_types:
            return ""
        every = operand_types + result_types
        if not any(isinstance(t, FunctionType) for t in every):
            if not result_types:
                return ", ".join(self.type_str(t) for t in operand_types)
            if not operand_types:
                return ", ".join(self.type_str(t) for t in result_types)
            if all(t == every[0] for t in every):
                return self.type_str(every[0])
        ins = ", ".join(self.type_str(t) for t in operand_types)
        outs = ", ".join(self.type_str(t) for t in result_types)
        if len(result_types) == 1 and not isinstance(result_types[0], FunctionType):
            return f"({ins}) -> {outs}"
        return f"({ins}) -> ({outs})"

    def _module_body(self, op, indent) -> None:
        out = self.out
        out.append("module")
        props = dict(op.properties)
        name = props.pop("sym_name", None)
        if isinstance(name, A.StringAttr):
            out.append(" " + str(A.SymbolRefAttr(name.value)))
        elif name is not None:
            props["sym_name"] = name
        merged = {**props, **op.attributes}
        if merged:
            out.append(" attributes " + self.dict_str(merged))
        out.append(" ")
        blocks = op.regions[0].blocks
        if len(blocks) == 1 and blocks[0].first is None and not blocks[0].args:
            out.append("{\n" + indent + "}")  # MLIR's `module {}`: the one block is implicit
            return
        self.print_region(op.regions[0], indent, entry_label=False)

    def _function_body(self, op, indent) -> None:
        out = self.out
        props = op.properties
        fn_type = props["function_type"].value
        out.append(op.name)
        visibility = props.get("sym_visibility")
        if isinstance(visibility, A.StringAttr):
            out.append(" " + visibility.value)
        out.append(" " + str(A.SymbolRefAttr(props["sym_name"].value)))
        arg_attrs = _attr_list(props.get("arg_attrs"), len(fn_type.inputs))
        res_attrs = _attr_list(props.get("res_attrs"), len(fn_type.results))
        region = op.regions[0] if op.regions else None
        body = region is not None and region.blocks
        args = []
        for index, type_ in enumerate(fn_type.inputs):
            text = self.type_str(type_)
            if body:
                text = f"{self.value_name(region.blocks[0].args[index])}: {text}"
            if arg_attrs[index]:
                text += " " + self.dict_str(arg_attrs[index])
            args.append(text)
        out.append("(" + ", ".join(args) + ")")
        if fn_type.results:
            results = []
            for index, type_ in enumerate(fn_type.results):
                text = self.type_str(type_)
                if res_attrs[index]:
                    text += " " + self.dict_str(res_attrs[index])
                results.append(text)
            single = (len(results) == 1 and not res_attrs[0]
                      and not isinstance(fn_type.results[0], FunctionType))
            out.append(" -> " + (results[0] if single else "(" + ", ".join(results) + ")"))
        extra = {k: v for k, v in props.items() if k not in _FUNC_PROPS}
        extra.update(op.attributes)
        if extra:
            out.append(" attributes " + self.dict_str(extra))
        if body:
            out.append(" ")
            self.print_region(region, indent, entry_label=False)

    # -- regions ---------------------------------------------------------------
    def print_region(self, region: Region, indent: str, entry_label: bool) -> None:
        out = self.out
        out.append("{\n")
        inner = indent + "  "
        for index, block in enumerate(region.blocks):
            if index > 0 or (entry_label and block.args) or block.first is None:
                self._block_label(block, indent)
            op = block.first
            while op is not None:
                self._print_nested(op, inner)
                op = op.next
        out.append(indent + "}")

    def _print_nested(self, op, indent) -> None:
        if op.is_registered and op.has_trait(IsolatedFromAbove):
            self._scopes.append(self._name_scope(op, self._scopes[-1]))
            try:
                self.print_op(op, indent)
            finally:
                self._scopes.pop()
            return
        self.print_op(op, indent)

    def _block_label(self, block: Block, indent: str) -> None:
        label = "^" + self.block_names[block]
        if block.args:
            label += "(" + ", ".join(
                f"{self.value_name(a)}: {self.type_str(a.type)}" for a in block.args) + ")"
        self.out.append(f"{indent}{label}:\n")

    # -- resources -------------------------------------------------------------
    def _resources(self) -> str:
        inline = {k: b for k, b in self.blobs.items() if not b.is_external}
        external: dict[str, dict] = {}
        for key, blob in self.blobs.items():
            if blob.is_external:
                external.setdefault(self._relative(blob.path), {})[key] = blob
        if not inline and not external:
            return ""
        sections = []
        if inline:
            entries = ",\n".join(
                f'      {k}: "0x{b.alignment.to_bytes(4, "little").hex().upper()}'
                f'{b.read().hex().upper()}"' for k, b in sorted(inline.items()))
            sections.append("  dialect_resources: {\n    builtin: {\n" + entries + "\n    }\n  }")
        if external:
            files = []
            for path, blobs in sorted(external.items()):
                entries = ",\n".join(f"      {k}: [{b.offset}, {b.size}]"
                                     for k, b in sorted(blobs.items()))
                files.append(f"    {A.quote_string(path)}: {{\n{entries}\n    }}")
            sections.append("  external_resources: {\n" + ",\n".join(files) + "\n  }")
        return "\n{-#\n" + ",\n".join(sections) + "\n#-}\n"

    def _relative(self, path: str) -> str:
        base = self.resource_base if self.resource_base is not None else os.getcwd()
        try:
            return os.path.relpath(path, base)
        except ValueError:
            return path


def _pretty_printable(op) -> bool:
    """The pretty form merges properties into the attribute dict; a property the op
    does not declare would come back as an attribute, so such ops print generically.
    So do function-like ops whose signature is malformed (unverified IR)."""
    declared = type(op).prop_defs
    if getattr(type(op), "open_properties", False):
        if any("." in key for key in op.properties) or any(
                "." not in key for key in op.attributes):
            return False  # would swap between properties and attributes
    elif not all(key in declared for key in op.properties):
        return False
    if op.has_trait(FunctionLike):
        fn_type = op.properties.get("function_type")
        name = op.properties.get("sym_name")
        if not (isinstance(fn_type, A.TypeAttr) and isinstance(fn_type.value, FunctionType)
                and isinstance(name, A.StringAttr) and len(op.regions) == 1):
            return False
        blocks = op.regions[0].blocks
        if blocks and len(blocks[0].args) != len(fn_type.value.inputs):
            return False
    return True


def _attr_list(attr, count):
    if isinstance(attr, A.ArrayAttr) and len(attr.value) == count:
        return [d.as_dict() if isinstance(d, A.DictionaryAttr) else {} for d in attr.value]
    return [{}] * count


def print_ir(op: Operation, *, generic: bool = False, print_locations: bool = False,
             resource_base: str | None = None) -> str:
    """Text of `op` (usually a module), followed by its resources trailer if any."""
    printer = Printer(generic, print_locations, resource_base)
    printer._scopes = [printer._name_scope(op)]
    printer.print_op(op, "")
    return "".join(printer.out) + printer._resources()
