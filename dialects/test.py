"""The test dialect: unconstrained ops for parser, printer and pass tests. Their
blocks need no terminator; regions are SSA regions (dominance applies) except in
`test.graph_region`.

- `test.op`: anything goes (operands, results, regions, successors); effects unknown.
- `test.pure`: any operands/results, no side effects (DCE and CSE may touch it).
- `test.effect`: writes memory; never removed.
- `test.terminator`: a terminator with any operands and successors.
- `test.region`: isolated op with regions; `test.graph_region` holds a graph (no
  terminator needed).
"""

from __future__ import annotations

from palimpsest.ir.attributes import StringAttr
from palimpsest.ir.core import Operation
from palimpsest.ir.opdef import (
    GraphRegion, IsolatedFromAbove, IsTerminator, MemoryEffect, NoTerminator, Pure, register_op,
    SymbolOp, SymbolTable, prop, variadic_operand, variadic_region, variadic_result,
)


class _AnyShape(Operation):
    traits = (NoTerminator(),)
    args = variadic_operand()
    outs = variadic_result()
    bodies = variadic_region()


@register_op
class AnyOp(_AnyShape):
    name = "test.op"

    def memory_effects(self):
        return None  # unknown: passes must assume the worst


@register_op
class PureOp(_AnyShape):
    name = "test.pure"
    traits = (Pure(), NoTerminator())


@register_op
class SymbolOp_(_AnyShape):
    """`test.symbol @name`: defines a symbol (for symbol-table tests)."""

    name = "test.symbol"
    symbol_prop = "sym_name"
    sym_name = prop(StringAttr)
    traits = (SymbolOp(), NoTerminator())


@register_op
class SymbolTableOp(_AnyShape):
    """`test.symbol_table ({...})`: a nested symbol table."""

    name = "test.symbol_table"
    traits = (SymbolTable(), NoTerminator(), GraphRegion())


@register_op
class EffectOp(_AnyShape):
    name = "test.effect"
    effects = (MemoryEffect("write"),)


@register_op
class TerminatorOp(_AnyShape):
    name = "test.terminator"
    traits = (IsTerminator(), NoTerminator())


@register_op
class IsolatedRegionOp(_AnyShape):
    name = "test.isolated"
    traits = (IsolatedFromAbove(), NoTerminator())


@register_op
class GraphRegionOp(_AnyShape):
    name = "test.graph_region"
    traits = (NoTerminator(), GraphRegion())
