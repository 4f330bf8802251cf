"""`insert-deallocs`: free every activation and workspace buffer right after its last use.

For each `buffer.alloc` whose kind is `activation` or `workspace`, the buffer's life ends
at the last op of its block that uses it or any alias of it: an op that declares an ALIAS
effect (`buffer.reshape`, `buffer.view`) extends the life of what it views, transitively,
and an op whose effects are unknown (unregistered) is taken to alias its buffer results.
A use inside a nested region counts as a use by the op holding the region, so a buffer
used in a loop body is live for the whole loop. `buffer.dealloc` goes right after that op
(right after the alloc when nothing uses the buffer).

`dynamic-only` frees only buffers whose size is known at run time alone (an unbounded `?`
dim): plan-memory places every other buffer in a pool and erases its dealloc, so a
pipeline that plans (a session's shape-specialized compile) need not insert those.

No dealloc is inserted for `output`, `input` or `constant` allocs, for a buffer that
escapes (an alias reaches a terminator such as `func.return`, or is used outside the
alloc's block other than through nested regions), or for one that already has a
`buffer.dealloc` (so the pass is idempotent).

`alias_closure` and `last_user` are shared with the numpy backend (it poisons pooled
views at the end of their liveness with them).
"""

from __future__ import annotations

from dataclasses import dataclass

from palimpsest.dialects.buffer import BufferType, DeallocOp
from palimpsest.ir.core import Block, Operation, Value
from palimpsest.ir.opdef import ALIAS, IsTerminator, may_alias
from palimpsest.passes.pass_manager import ModulePass, register_pass

FREED_KINDS = ("activation", "workspace")


def alias_closure(value: Value) -> list[Value]:
    """`value` and every buffer that aliases it, transitively, in discovery order."""
    found = {value: None}
    work = [value]
    while work:
        current = work.pop()
        for user in current.users():
            for aliased in _aliased_results(user):
                if aliased not in found:
                    found[aliased] = None
                    work.append(aliased)
    return list(found)


def _aliased_results(op: Operation) -> list[Value]:
    if not may_alias(op):
        return []
    effects = op.memory_effects()
    if effects is None:  # unknown op: any buffer it returns may alias its operands
        return [r for r in op.results if isinstance(r.type, BufferType)]
    return [target for kind, target in effects if kind == ALIAS and target is not None]


def ancestor_in(op: Operation, block: Block) -> Operation | None:
    """`op` or the op holding it whose parent is `block`; None if it lies elsewhere."""
    while op is not None and op.parent is not block:
        op = op.parent_op
    return op


class BlockOrder:
    """Positions of a block's ops, computed once."""

    def __init__(self, block: Block):
        self.block = block
        self.index = {op: i for i, op in enumerate(block.ops)}

    def last_user(self, values) -> tuple[Operation | None, bool]:
        """(the last op of the block that uses any of `values`, whether all uses lie in
        this block, nested regions included)."""
        last, last_index, local = None, -1, True
        for value in values:
            for user, _ in value.uses:
                anchor = ancestor_in(user, self.block)
                if anchor is None:
                    local = False
                    continue
                index = self.index[anchor]
                if index > last_index:
                    last, last_index = anchor, index
        return last, local


def last_user(value: Value, block: Block) -> Operation | None:
    """The last op of `block` using `value` or an alias of it (see BlockOrder)."""
    return BlockOrder(block).last_user(alias_closure(value))[0]


@dataclass
class InsertDeallocsResult:
    inserted: int = 0
    escaping: int = 0   # activation/workspace buffers left alone because they escape


def insert_deallocs(root: Operation, dynamic_only: bool = False) -> InsertDeallocsResult:
    result = InsertDeallocsResult()
    by_block: dict = {}
    for op in root.walk():
        if op.name == "buffer.alloc" and op.parent is not None:
            # static or fully bounded: plan-memory places it (liveness's `dynamic` rule)
            if dynamic_only and op.results[0].type.upper_nbytes() is not None:
                continue
            by_block.setdefault(op.parent, []).append(op)
    for block, allocs in by_block.items():
        order = BlockOrder(block)
        plan: dict = {}
        for alloc in allocs:
            if alloc.kind.value not in FREED_KINDS:
                continue
            values = alias_closure(alloc.results[0])
            users = {user for v in values for user, _ in v.uses}
            if any(u.name == "buffer.dealloc" for u in users):
                continue
            last, local = order.last_user(values)
            if not local or (last is not None and (
                    last.has_trait(IsTerminator) or _escapes(values, last))):
                result.escaping += 1
                continue
            plan.setdefault(last if last is not None else alloc, []).append(alloc)
        for anchor, dying in plan.items():
            for alloc in reversed(dying):
                dealloc = DeallocOp([alloc.results[0]], [], location=anchor.location)
                block.insert_after(anchor, dealloc)
                result.inserted += 1
    return result


def _escapes(values, last: Operation) -> bool:
    """A buffer returned by a terminator nested in `last`'s regions leaves its block."""
    for value in values:
        for user, _ in value.uses:
            if user.has_trait(IsTerminator) and user.parent_op is not None \
                    and user.parent_op.name == "func.func":
                return True
    return False


@register_pass
class InsertDeallocs(ModulePass):
    name = "insert-deallocs"
    summary = ("insert buffer.dealloc after the last use (aliases and nested regions "
               "included) of every activation and workspace alloc")
    dynamic_only: bool = False

    def apply(self, module: Operation) -> None:
        insert_deallocs(module, dynamic_only=self.dynamic_only)


__all__ = ["FREED_KINDS", "BlockOrder", "InsertDeallocs", "InsertDeallocsResult",
           "alias_closure", "ancestor_in", "insert_deallocs", "last_user"]
