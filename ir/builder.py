"""Building IR from Python: an insertion point and a `create` that inserts there.

    builder = Builder.at_end(func.entry_block)
    total = builder.create(AddOp, [a, b], [a.type]).result
"""

from __future__ import annotations

from palimpsest.ir.core import Block, Operation
from palimpsest.ir.diagnostics import Location


class Builder:
    def __init__(self, block: Block | None = None, before: Operation | None = None,
                 location: Location | None = None):
        self.block = block
        self.before = before
        self.location = location

    @classmethod
    def at_end(cls, block: Block) -> "Builder":
        return cls(block)

    @classmethod
    def before_op(cls, op: Operation) -> "Builder":
        return cls(op.parent, op, op.location)

    @classmethod
    def after_op(cls, op: Operation) -> "Builder":
        return cls(op.parent, op.next, op.location)

    def insert(self, op: Operation) -> Operation:
        if self.block is None:
            raise ValueError("builder has no insertion point")
        if op.location is None:
            op.location = self.location
        if self.before is None:
            self.block.append(op)
        else:
            self.block.insert_before(self.before, op)
        return op

    def create(self, op_class, operands=(), result_types=(), properties=None,
               attributes=None, regions=(), successors=(), result_names=None) -> Operation:
        """Construct an op of a registered class and insert it."""
        op = op_class(operands, result_types, properties, attributes, regions, successors,
                      self.location, result_names)
        return self.insert(op)
