"""The verifier: op declarations and verifiers, dominance, isolation, terminators,
symbol uniqueness. The first problem found is raised as a DiagnosticError at the op."""

from __future__ import annotations

from palimpsest.ir.attributes import SymbolRefAttr
from palimpsest.ir.core import Block, Operation, Region
from palimpsest.ir.diagnostics import DiagnosticError
from palimpsest.ir.opdef import (
    GraphRegion, IsolatedFromAbove, IsTerminator, NoTerminator, SymbolTable, symbol_name,
    verify_declaration,
)

# Symbol maps of the tables seen by the verify() in progress (lookups become O(1)).
_SYMBOL_CACHE: dict[int, dict] | None = None


def verify(op: Operation) -> None:
    """Verify `op` and everything nested in it."""
    global _SYMBOL_CACHE
    outer = _SYMBOL_CACHE
    _SYMBOL_CACHE = {}
    try:
        _verify_symbols(op)
        _verify_op(op, [])
    finally:
        _SYMBOL_CACHE = outer


def _verify_symbols(root: Operation) -> None:
    for op in root.walk():
        if not (op.is_registered and op.has_trait(SymbolTable)):
            continue
        table = {}
        for region in op.regions:
            for block in region.blocks:
                for child in block.ops:
                    name = symbol_name(child)
                    if name is None:
                        continue
                    if name in table:
                        raise DiagnosticError(
                            f"redefinition of symbol '{name}'", child.loc,
                            notes=[("see existing symbol definition here", table[name].loc)])
                    table[name] = child
        _SYMBOL_CACHE[id(op)] = table


def _verify_op(op: Operation, visible: list) -> None:
    for index, value in enumerate(op.operands):
        if not _is_visible(value, visible):
            raise _dominance_error(op, index, value)
    if op.is_registered:
        verify_declaration(op)
    if not op.regions:
        return
    isolated = op.is_registered and op.has_trait(IsolatedFromAbove)
    outer = [] if isolated else visible
    needs_terminator = op.is_registered and not op.has_trait(NoTerminator)
    graph = op.is_registered and op.has_trait(GraphRegion)
    for region in op.regions:
        _verify_region(op, region, outer, needs_terminator, graph)


def _verify_region(op, region: Region, outer: list, needs_terminator: bool, graph: bool) -> None:
    blocks = region.blocks
    if graph or len(blocks) <= 1:
        dominators = {b: () for b in blocks}
    else:
        dominators = _dominators(blocks)
    if graph:
        everything = set()
        for block in blocks:
            everything.update(block.args)
            for child in block.ops:
                everything.update(child.results)
    for block in blocks:
        if needs_terminator and block.last is not None:
            last = block.last
            if last.is_registered and not last.has_trait(IsTerminator):
                raise DiagnosticError(
                    "block with no terminator, has " + repr(last.name),
                    last.loc, notes=[(f"in a region of '{op.name}'", op.loc)])
        if graph:
            chain = outer + [everything]
        else:
            before = set()
            for dominator in dominators[block]:
                before.update(dominator.args)
                for child in dominator.ops:
                    before.update(child.results)
            chain = outer + [before] if before else list(outer)
        defined = set(block.args)
        chain = chain + [defined]
        for child in block.ops:
            if child.is_registered and child.has_trait(IsTerminator) and child is not block.last:
                raise child.error("must be the last operation in its block")
            _verify_op(child, chain)
            defined.update(child.results)


def _is_visible(value, chain: list) -> bool:
    for scope in reversed(chain):
        if value in scope:
            return True
    return False


def _dominance_error(op: Operation, index: int, value) -> DiagnosticError:
    if _defined_outside_isolated(op, value):
        return op.error(f"operand #{index} uses a value defined outside an isolated-from-above "
                        f"region")
    owner = getattr(value, "op", None)
    notes = [("operand defined here", owner.loc)] if owner is not None and owner.loc else []
    return DiagnosticError(f"'{op.name}' op operand #{index} does not dominate this use",
                           op.loc, notes)


def _defined_outside_isolated(op: Operation, value) -> bool:
    parent = op.parent_op
    while parent is not None:
        if parent.is_registered and parent.has_trait(IsolatedFromAbove):
            owner = value.op if hasattr(value, "op") else value.block.parent_op
            return owner is not None and not parent.is_ancestor_of(owner)
        parent = parent.parent_op
    return False


def _dominators(blocks: list[Block]) -> dict:
    """Strict dominators of each block of a CFG region (entry = blocks[0])."""
    preds: dict = {b: [] for b in blocks}
    for block in blocks:
        last = block.last
        if last is not None:
            for succ in last.successors:
                if succ in preds:
                    preds[succ].append(block)
    everything = set(blocks)
    dom = {b: set(everything) for b in blocks}
    entry = blocks[0]
    dom[entry] = {entry}
    changed = True
    while changed:
        changed = False
        for block in blocks[1:]:
            incoming = [dom[p] for p in preds[block]]
            new = set.intersection(*incoming) if incoming else set()
            new = new | {block}
            if new != dom[block]:
                dom[block] = new
                changed = True
    return {b: tuple(d for d in blocks if d in dom[b] and d is not b) for b in blocks}


def lookup_symbol(start: Operation, ref: SymbolRefAttr) -> Operation | None:
    """Resolve `ref` from the nearest enclosing symbol table of `start`."""
    table_op = start.parent_op
    while table_op is not None and not (table_op.is_registered and table_op.has_trait(SymbolTable)):
        table_op = table_op.parent_op
    if table_op is None:
        return None
    found = _symbol_map(table_op).get(ref.root)
    for nested in ref.nested:
        if found is None:
            return None
        found = _symbol_map(found).get(nested)
    return found


def _symbol_map(table_op: Operation) -> dict:
    if _SYMBOL_CACHE is not None and id(table_op) in _SYMBOL_CACHE:
        return _SYMBOL_CACHE[id(table_op)]
    table = {}
    for region in table_op.regions:
        for block in region.blocks:
            for child in block.ops:
                name = symbol_name(child)
                if name is not None:
                    table.setdefault(name, child)
    return table
