"""The memory dialect: pools, the pool map, and arenas.

    memory.pool @sram {alignment = 64, capacity = 262144}
    memory.pool @dram {alignment = 64}                       // unbounded
    memory.pool_map {activation = [@sram, @dram], workspace = [@sram, @dram]}
    func.func @main(...) {
      %arena = memory.arena @sram : buffer<196608xi8>
      %t = buffer.view %arena {offset = 4096} : (buffer<196608xi8>) -> buffer<1x64x8x8xf32>

A pool is a named region of memory with an optional capacity and an alignment; after
planning its `size` is the bytes the plan uses. The pool map lists, per buffer class,
the candidate pools in order of preference (TVM USMP's candidate pools). `memory.arena`
is a pool's memory seen as a byte buffer inside a function.
"""

from __future__ import annotations

from palimpsest.dialects.buffer import BUFFER_KINDS, BufferType
from palimpsest.ir import attributes as A
from palimpsest.ir.core import Operation
from palimpsest.ir.opdef import (
    HasParent, SymbolOp, prop, register_op, result_def, type_is,
)
from palimpsest.ir.types import IntegerType


def _positive(attr):
    return None if attr.value > 0 else f"must be positive, got {attr.value}"


def _non_negative(attr):
    return None if attr.value >= 0 else f"must not be negative, got {attr.value}"


@register_op
class PoolOp(Operation):
    name = "memory.pool"
    symbol_prop = "sym_name"
    sym_name = prop(A.StringAttr)
    capacity = prop(A.IntegerAttr, optional=True, check=_non_negative)
    alignment = prop(A.IntegerAttr, default=A.IntegerAttr(64), check=_positive)
    size = prop(A.IntegerAttr, optional=True, check=_non_negative)
    traits = (SymbolOp(), HasParent("builtin.module"))

    @property
    def pool_name(self) -> str:
        return self.properties["sym_name"].value

    @property
    def capacity_bytes(self) -> int | None:
        attr = self.properties.get("capacity")
        return attr.value if attr is not None else None

    @property
    def alignment_bytes(self) -> int:
        return self.properties.get("alignment", A.IntegerAttr(64)).value

    def verify_(self):
        alignment = self.alignment_bytes
        if alignment & (alignment - 1):
            raise self.error(f"alignment must be a power of two, got {alignment}")
        size, capacity = self.properties.get("size"), self.capacity_bytes
        if size is not None and capacity is not None and size.value > capacity:
            raise self.error(f"size {size.value} exceeds its capacity {capacity}")


@register_op
class PoolMapOp(Operation):
    """Per buffer class, the pools to try in order. Classes not listed use every pool
    in declaration order."""

    name = "memory.pool_map"
    traits = (HasParent("builtin.module"),)

    def candidates(self) -> dict[str, list[str]]:
        return {kind: [ref.root for ref in value.value]
                for kind, value in self.attributes.items()}

    def verify_(self):
        from palimpsest.ir.verifier import lookup_symbol

        for kind, value in self.attributes.items():
            if kind not in BUFFER_KINDS:
                raise self.error(f"'{kind}' is not a buffer class ({', '.join(BUFFER_KINDS)})")
            if not isinstance(value, A.ArrayAttr) or not all(
                    isinstance(v, A.SymbolRefAttr) for v in value.value):
                raise self.error(f"'{kind}' must be a list of pools, e.g. [@sram, @dram]")
            for ref in value.value:
                target = lookup_symbol(self, ref)
                if target is None or target.name != "memory.pool":
                    raise self.error(f"'{kind}' names {ref}, which is not a memory.pool")


@register_op
class ArenaOp(Operation):
    """The memory of pool `pool` as a byte buffer (its size is the pool's size)."""

    name = "memory.arena"
    symbol_prop = "pool"
    pool = prop(A.SymbolRefAttr)
    result = result_def(type_is(BufferType))

    def verify_(self):
        from palimpsest.ir.verifier import lookup_symbol

        type_ = self.result.type
        if not (isinstance(type_.element_type, IntegerType) and type_.element_type.width == 8
                and len(type_.shape) == 1):
            raise self.error(f"an arena is a 1-D byte buffer (buffer<Nxi8>), got '{type_}'")
        target = lookup_symbol(self, self.properties["pool"])
        if target is None or target.name != "memory.pool":
            raise self.error(f"{self.properties['pool']} is not a memory.pool")
        size = target.properties.get("size")
        if size is not None and type_.shape[0] is not None and type_.shape[0] != size.value:
            raise self.error(f"is {type_.shape[0]} bytes but pool {self.properties['pool']} "
                             f"has size {size.value}")
