"""The builtin dialect: `builtin.module`, the top-level container of symbols."""

from __future__ import annotations

from palimpsest.ir.attributes import StringAttr
from palimpsest.ir.core import Block, Operation, Region
from palimpsest.ir.opdef import (
    GraphRegion, IsolatedFromAbove, NoTerminator, SymbolTable, prop, region_def, register_op,
)


@register_op
class ModuleOp(Operation):
    name = "builtin.module"
    sym_name = prop(StringAttr, optional=True)
    body = region_def(single_block=True)
    traits = (IsolatedFromAbove(), NoTerminator(), GraphRegion(), SymbolTable())

    @classmethod
    def build(cls, ops=(), name: str | None = None) -> "ModuleOp":
        block = Block()
        for op in ops:
            block.append(op)
        props = {"sym_name": StringAttr(name)} if name else {}
        return cls(properties=props, regions=[Region([block])])

    @property
    def block(self) -> Block:
        return self.regions[0].block

    def verify_(self):
        if len(self.regions[0].blocks) != 1:
            raise self.error("expects one block in its body")
        if self.regions[0].blocks[0].args:
            raise self.error("body block must have no arguments")
