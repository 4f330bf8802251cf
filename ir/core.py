"""The in-memory IR: values with use lists, operations, blocks, regions.

Operations in a block form a doubly linked list so inserting and erasing are O(1)
(a pass that erases thousands of ops from a 20k-op block stays linear).
"""

from __future__ import annotations

from typing import Iterable, Iterator

from palimpsest.ir.attributes import Attribute
from palimpsest.ir.diagnostics import DiagnosticError, Location
from palimpsest.ir.types import Type


class Value:
    """An SSA value. `uses` maps (operation, operand index) to None, in insertion order."""

    __slots__ = ("type", "uses", "name_hint")

    def __init__(self, type_: Type, name_hint: str | None = None):
        self.type = type_
        self.uses: dict = {}
        self.name_hint = name_hint

    @property
    def owner(self):
        raise NotImplementedError

    def has_uses(self) -> bool:
        return bool(self.uses)

    def users(self) -> list:
        uses = self.uses
        if len(uses) < 2:  # most values: one use, or none
            return [key[0] for key in uses]
        return list(dict.fromkeys([op for op, _ in uses]))  # each once, in use order

    def replace_all_uses_with(self, other: "Value") -> None:
        if other is self:
            return
        for op, index in list(self.uses):
            op.set_operand(index, other)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} %{self.name_hint or '?'} : {self.type}>"


class OpResult(Value):
    __slots__ = ("op", "index")

    def __init__(self, type_: Type, op: "Operation", index: int, name_hint=None):
        self.type = type_  # Value's fields, set here: passes make thousands of results
        self.uses = {}
        self.name_hint = name_hint
        self.op = op
        self.index = index

    @property
    def owner(self):
        return self.op


class BlockArgument(Value):
    __slots__ = ("block", "index")

    def __init__(self, type_: Type, block: "Block", index: int, name_hint=None):
        super().__init__(type_, name_hint)
        self.block = block
        self.index = index

    @property
    def owner(self):
        return self.block


_HAS_TRAIT: dict = {}  # (op class, trait) -> bool


def _only(items: list, owner: str, noun: str):
    """The one item of `items`; ValueError naming `owner` when there are more or none."""
    if len(items) != 1:
        raise ValueError(f"{owner} has {len(items)} {noun}, not one")
    return items[0]


class Operation:
    """Base class of every operation. Registered ops subclass it and set `name`;
    unregistered ones are `UnregisteredOp` instances carrying their own name."""

    __slots__ = ("operands", "results", "properties", "attributes", "regions",
                 "successors", "parent", "prev", "next", "location", "source_loc",
                 "__weakref__", "__dict__")

    name: str = "<abstract>"
    is_registered = True

    def __init__(self, operands: Iterable[Value] = (), result_types: Iterable[Type] = (),
                 properties: dict | None = None, attributes: dict | None = None,
                 regions: Iterable["Region"] = (), successors: Iterable["Block"] = (),
                 location: Location | None = None, result_names: Iterable | None = None):
        self.operands: list[Value] = list(operands)
        self.parent: Block | None = None
        self.prev: Operation | None = None
        self.next: Operation | None = None
        self.location = location
        self.source_loc: Location | None = None
        for index, value in enumerate(self.operands):
            value.uses[(self, index)] = None
        if result_names is not None:
            names = list(result_names)
            self.results: list[OpResult] = [
                OpResult(t, self, i, names[i] if names else None)
                for i, t in enumerate(result_types)]
        else:
            self.results = [OpResult(t, self, i) for i, t in enumerate(result_types)]
        self.properties: dict[str, Attribute] = dict(properties) if properties else {}
        self.attributes: dict[str, Attribute] = dict(attributes) if attributes else {}
        self.regions: list[Region] = []
        for region in regions:
            self.add_region(region)
        self.successors: list[Block] = list(successors) if successors else []

    # -- structure ---------------------------------------------------------
    @property
    def result(self) -> OpResult:
        return _only(self.results, f"'{self.name}'", "results")

    @property
    def parent_op(self) -> "Operation | None":
        block = self.parent
        if block is None or block.parent is None:
            return None
        return block.parent.parent

    @property
    def parent_region(self) -> "Region | None":
        return self.parent.parent if self.parent is not None else None

    def add_region(self, region: "Region") -> "Region":
        if region.parent is not None:
            raise ValueError("region already belongs to an operation")
        region.parent = self
        self.regions.append(region)
        return region

    def set_operand(self, index: int, value: Value) -> None:
        old = self.operands[index]
        old.uses.pop((self, index), None)
        self.operands[index] = value
        value.uses[(self, index)] = None

    def set_operands(self, values: Iterable[Value]) -> None:
        self.drop_operand_uses()
        self.operands = list(values)
        for index, value in enumerate(self.operands):
            value.uses[(self, index)] = None

    def drop_operand_uses(self) -> None:
        for index, value in enumerate(self.operands):
            value.uses.pop((self, index), None)

    def walk(self, include_self: bool = True) -> Iterator["Operation"]:
        """Pre-order walk of this op and everything nested in it."""
        if include_self:
            yield self
        for region in self.regions:
            for block in region.blocks:
                op = block.first
                while op is not None:
                    nxt = op.next
                    if op.regions:
                        yield from op.walk()
                    else:  # most ops are leaves: no nested generator for them
                        yield op
                    op = nxt

    def is_ancestor_of(self, other: "Operation") -> bool:
        while other is not None:
            if other is self:
                return True
            other = other.parent_op
        return False

    # -- editing -----------------------------------------------------------
    def detach(self) -> "Operation":
        if self.parent is not None:
            self.parent._unlink(self)
        return self

    def erase(self, check_uses: bool = True) -> None:
        """Detach and drop this op's operand uses and those of all nested ops."""
        if check_uses:
            for result in self.results:
                for user, _ in result.uses:
                    if not self.is_ancestor_of(user):
                        raise ValueError(f"cannot erase '{self.name}': its result is still used")
        if self.parent is not None:
            self.parent._unlink(self)
        if not self.regions:  # most ops: inlined, passes erase a thousand per model
            for index, value in enumerate(self.operands):
                value.uses.pop((self, index), None)
            return
        for op in self.walk():
            op.drop_operand_uses()

    def clone(self, mapping: dict | None = None) -> "Operation":
        """A deep copy of this op, its regions, blocks and nested ops (MLIR's
        `Operation::clone`). Operands and successors are remapped through `mapping` (old
        value or block -> new; what it lacks is used as is), which the copy fills with
        its results, block arguments and blocks. Properties, attributes and types are
        shared, not copied: they are immutable, so a cloned model shares its weights."""
        return _clone(self, {} if mapping is None else mapping)

    def replace_with_values(self, values) -> None:
        """Replace every use of this op's results by `values`, then erase the op."""
        for result, value in zip(self.results, values, strict=True):
            result.replace_all_uses_with(value)
        self.erase()

    # -- diagnostics -------------------------------------------------------
    @property
    def loc(self) -> Location | None:
        return self.source_loc or self.location

    def error(self, message: str) -> DiagnosticError:
        return DiagnosticError(f"'{self.name}' op {message}", self.loc)

    # -- traits & effects (filled in by ir.opdef for registered ops) --------
    traits: tuple = ()

    @classmethod
    def has_trait(cls, trait) -> bool:
        key = (cls, trait)  # traits are declared once per class: answer once per pair
        found = _HAS_TRAIT.get(key)
        if found is None:
            found = _HAS_TRAIT[key] = any(
                isinstance(t, trait) if isinstance(trait, type) else t == trait
                for t in cls.traits)
        return found

    def memory_effects(self):
        """None when unknown (unregistered ops); otherwise a list of (kind, value-or-None)."""
        return None

    def verify_(self) -> None:
        """Op-specific verification; raise `self.error(...)`."""

    def __repr__(self) -> str:
        return f"<{self.name} at {self.loc.describe() if self.loc else '?'}>"


def _clone(op: Operation, mapping: dict) -> Operation:
    # Fills the slots directly, not through __init__ and Block.append: a session clones
    # its whole model on every re-plan, and this is the bulk of that cost.
    cls = type(op)
    new = cls.__new__(cls)
    if not op.is_registered:
        new.__dict__["name"] = op.name
    get = mapping.get
    if op.operands:
        operands = [get(v, v) for v in op.operands]
        for index, value in enumerate(operands):
            value.uses[(new, index)] = None
    else:  # constants: often half a model's ops
        operands = []
    new.operands = operands
    new.parent = new.prev = new.next = None
    new.location = op.location
    new.source_loc = op.source_loc
    new.properties = dict(op.properties)
    new.attributes = dict(op.attributes) if op.attributes else {}
    results = []
    for index, old in enumerate(op.results):
        result = OpResult(old.type, new, index, old.name_hint)
        mapping[old] = result
        results.append(result)
    new.results = results
    new.regions = []
    new.successors = [get(b, b) for b in op.successors] if op.successors else []
    if not op.regions:
        return new
    for region in op.regions:
        copy = new.add_region(Region())
        for block in region.blocks:  # all blocks first: branches may jump forward
            twin = copy.add_block(Block([a.type for a in block.args],
                                        [a.name_hint for a in block.args]))
            mapping[block] = twin
            for old, arg in zip(block.args, twin.args):
                mapping[old] = arg
        for block, twin in zip(region.blocks, copy.blocks):
            inner = block.first
            while inner is not None:
                twin.append(_clone(inner, mapping))
                inner = inner.next
    new.successors = [get(b, b) for b in op.successors] if op.successors else []
    return new


class UnregisteredOp(Operation):
    """An op of a dialect Palimpsest does not know (`--allow-unregistered-dialect`)."""

    __slots__ = ()
    is_registered = False

    def __init__(self, name: str, *args, **kwargs):
        self.__dict__["name"] = name
        super().__init__(*args, **kwargs)


class Block:
    __slots__ = ("args", "first", "last", "parent", "_count")

    def __init__(self, arg_types: Iterable[Type] = (), arg_names: Iterable | None = None):
        names = list(arg_names) if arg_names is not None else None
        self.args: list[BlockArgument] = [
            BlockArgument(t, self, i, names[i] if names else None) for i, t in enumerate(arg_types)
        ]
        self.first: Operation | None = None
        self.last: Operation | None = None
        self.parent: Region | None = None
        self._count = 0

    def add_arg(self, type_: Type, name_hint: str | None = None) -> BlockArgument:
        arg = BlockArgument(type_, self, len(self.args), name_hint)
        self.args.append(arg)
        return arg

    @property
    def ops(self) -> Iterator[Operation]:
        op = self.first
        while op is not None:
            nxt = op.next
            yield op
            op = nxt

    def __len__(self) -> int:
        return self._count

    @property
    def is_empty(self) -> bool:
        return self.first is None

    @property
    def terminator(self) -> Operation | None:
        return self.last

    @property
    def parent_op(self) -> Operation | None:
        return self.parent.parent if self.parent is not None else None

    def append(self, op: Operation) -> Operation:
        return self._link(op, self.last, None)

    def insert_before(self, anchor: Operation, op: Operation) -> Operation:
        if anchor.parent is not self:
            raise ValueError("anchor is not in this block")
        return self._link(op, anchor.prev, anchor)

    def _link(self, op: Operation, prev: Operation | None, next_: Operation | None) -> Operation:
        """Put `op`, in no block yet, between neighbours `prev` and `next_` (None: an end)."""
        if op.parent is not None:
            raise ValueError(f"'{op.name}' already belongs to a block")
        op.parent = self
        op.prev = prev
        op.next = next_
        if prev is None:
            self.first = op
        else:
            prev.next = op
        if next_ is None:
            self.last = op
        else:
            next_.prev = op
        self._count += 1
        return op

    def insert_after(self, anchor: Operation, op: Operation) -> Operation:
        if anchor.next is None:
            return self.append(op)
        return self.insert_before(anchor.next, op)

    def _unlink(self, op: Operation) -> None:
        if op.prev is None:
            self.first = op.next
        else:
            op.prev.next = op.next
        if op.next is None:
            self.last = op.prev
        else:
            op.next.prev = op.prev
        op.parent = op.prev = op.next = None
        self._count -= 1

    def __repr__(self) -> str:
        return f"<Block with {self._count} ops>"


class Region:
    __slots__ = ("blocks", "parent")

    def __init__(self, blocks: Iterable[Block] = ()):
        self.blocks: list[Block] = []
        self.parent: Operation | None = None
        for block in blocks:
            self.add_block(block)

    def add_block(self, block: Block) -> Block:
        if block.parent is not None:
            raise ValueError("block already belongs to a region")
        block.parent = self
        self.blocks.append(block)
        return block

    @property
    def block(self) -> Block:
        return _only(self.blocks, "region", "blocks")

    @property
    def ops(self) -> Iterator[Operation]:
        for block in self.blocks:
            yield from block.ops

    def walk(self) -> Iterator[Operation]:
        for block in self.blocks:
            for op in block.ops:
                if op.regions:
                    yield from op.walk()
                else:
                    yield op
