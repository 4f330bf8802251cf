"""`dce`: erase ops whose results are unused and that have no effects."""

from __future__ import annotations


from palimpsest.ir.core import Operation, Region
from palimpsest.ir.opdef import has_no_effects, is_pure
from palimpsest.passes.pass_manager import ModulePass, register_pass


def is_trivially_dead(op: Operation) -> bool:
    for result in op.results:
        if result.uses:
            return False
    if not op.results and not op.regions and not is_pure(op):
        # an op with no results is kept for what it does or declares (a symbol such as
        # memory.pool, the pool map), unless it is declared pure
        return False
    if op.regions:
        return is_pure(op) and all(is_trivially_dead_region(r) for r in op.regions)
    return has_no_effects(op)


def is_trivially_dead_region(region: Region) -> bool:
    for op in region.walk():
        if op.regions:
            if not is_pure(op):
                return False
        elif not has_no_effects(op) and not (op.is_registered and _is_terminator(op)):
            return False
    return True


def _is_terminator(op: Operation) -> bool:
    from palimpsest.ir.opdef import IsTerminator, Pure

    return op.has_trait(IsTerminator) and op.has_trait(Pure)


def eliminate_dead_code(root: Operation) -> int:
    """Erase dead ops under `root`, innermost and last first. Returns how many."""
    erased = 0
    for region in root.regions:
        for block in reversed(region.blocks):
            op = block.last
            while op is not None:
                previous = op.prev
                erased += eliminate_dead_code(op)
                if is_trivially_dead(op):
                    op.erase()
                    erased += 1
                op = previous
    return erased


@register_pass
class DeadCodeElimination(ModulePass):
    name = "dce"
    summary = "erase operations whose results are unused and that have no side effects"

    def apply(self, module: Operation) -> None:
        eliminate_dead_code(module)
