"""`cse`: replace an effect-free op by an identical one that dominates it.

Scoped like MLIR's CSE: a block sees the ops before it in its own block and in the
blocks of the ops that enclose it (which dominate it); isolated regions start afresh."""

from __future__ import annotations


from palimpsest.ir.core import Operation
from palimpsest.ir.opdef import IsolatedFromAbove, is_pure
from palimpsest.passes.pass_manager import ModulePass, register_pass


def _key(op: Operation):
    return (op.name, tuple(id(v) for v in op.operands), tuple(r.type for r in op.results),
            tuple(sorted(op.properties.items())), tuple(sorted(op.attributes.items())),
            tuple(id(b) for b in op.successors))


def eliminate_common_subexpressions(root: Operation, known: dict | None = None) -> int:
    """Returns the number of ops replaced."""
    replaced = 0
    for region in root.regions:
        for block in region.blocks:
            # ops of the enclosing blocks dominate every block of a nested region
            scope = dict(known) if known else {}
            op = block.first
            while op is not None:
                following = op.next
                if op.regions:
                    isolated = op.is_registered and op.has_trait(IsolatedFromAbove)
                    replaced += eliminate_common_subexpressions(op, None if isolated else scope)
                elif is_pure(op) and op.results:
                    key = _key(op)
                    existing = scope.get(key)
                    if existing is None:
                        scope[key] = op
                    else:
                        op.replace_with_values(existing.results)
                        replaced += 1
                op = following
    return replaced


@register_pass
class CommonSubexpressionElimination(ModulePass):
    name = "cse"
    summary = "replace duplicated side-effect-free operations by the first occurrence"

    def apply(self, module: Operation) -> None:
        eliminate_common_subexpressions(module)
