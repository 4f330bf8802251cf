"""Liveness of buffers at the buffer and kernel levels: a plain analysis.

`compute_liveness(func)` numbers the ops of a function in a pre-order walk (the first
op of the body is 0) and gives every buffer an inclusive interval `[start, end]` of
those positions. The buffers ("roots") are

- `buffer.alloc` results (keyed by the value), with the alloc's `kind` as their class;
- views of a pool's arena (`buffer.view` of a `memory.arena`, what `plan-memory`
  leaves), with the class the planner recorded in their `kind` attribute;
- the function's buffer arguments: the inputs, memory the caller owns (`external`),
  class input.

The rules:

- Uses count through aliases: a `buffer.reshape` or `buffer.view` of a buffer, or any
  op declaring an ALIAS effect, transitively (an op with unknown effects, or a call, is
  assumed to alias every buffer operand into every buffer result). Forgetting this lets
  a planner reuse memory still in use (TVM #20134).
- A use inside a nested region counts for the whole op holding that region, up to the
  block where the buffer is defined: a buffer defined before a loop and used in it is
  live for the whole loop.
- An activation is live from its first access (the first op that uses it or an alias,
  other than by merely aliasing or freeing it; the alloc itself when nothing uses it)
  to its last use; a `buffer.dealloc` after the last use extends it to the dealloc, one
  before the last use does not shorten it (the analysis is about uses).
- A workspace lives only inside the op(s) that use it: first use to last use, its
  deallocs ignored.
- An input lives from the function's entry to its last use; an output from its first
  access to the function's exit; a constant the whole run.
- Sizes are bytes of static shapes; a buffer whose `?` dims all carry bounds
  (`#bounds<...>`) has the bytes of its bounds (`bounded`: its worst case, planned
  statically); one with an unbounded `?` dim is `dynamic` (size None) and left out of
  static planning.

`test-print-liveness` prints one comment line per buffer to stderr, e.g.

    // liveness @main: %3 [4, 9] 12544 bytes activation aliases: %5
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from palimpsest.dialects.buffer import AllocOp, BufferType, DeallocOp, ViewOp
from palimpsest.ir.core import Operation, Value
from palimpsest.ir.opdef import ALIAS, FREE, WRITE, FunctionLike, may_alias
from palimpsest.passes.pass_manager import ModulePass, register_pass

__all__ = [
    "BufferLiveness", "Liveness", "compute_liveness", "functions_of", "alias_results",
    "format_liveness",
]


@dataclass(eq=False)
class BufferLiveness:
    """One buffer's lifetime: positions `[start, end]`, both inclusive."""

    value: Value
    kind: str                   # input, output, activation, workspace, constant
    start: int
    end: int
    size: int | None            # bytes; None when a dimension is dynamic
    alignment: int | None = None  # the alloc's own alignment, if it asks for one
    op: Operation | None = None   # the defining op (alloc or view); None for arguments
    aliases: list = field(default_factory=list)  # values aliasing it, in program order
    external: bool = False      # a function argument: the caller's memory
    written: bool = False       # some op writes it (or an alias of it)
    first_access: int | None = None  # None when nothing accesses it
    last_access: int | None = None
    bounded: bool = False       # `?` dims, all bounded: `size` is the bytes at the bounds

    @property
    def dynamic(self) -> bool:
        return self.size is None

    @property
    def is_alloc(self) -> bool:
        return isinstance(self.op, AllocOp)

    def overlaps(self, other: "BufferLiveness") -> bool:
        return self.start <= other.end and other.start <= self.end


@dataclass(eq=False)
class Liveness:
    """The liveness of every buffer of one function."""

    function: Operation
    ops: list                   # ops in pre-order; position = index
    buffers: list               # BufferLiveness, in definition order (arguments first)
    _by_value: dict = field(default_factory=dict, repr=False)
    _positions: dict = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        attr = self.function.properties.get("sym_name")
        return attr.value if attr is not None else "?"

    @property
    def exit(self) -> int:
        """The last position of the function (its terminator)."""
        return max(len(self.ops) - 1, 0)

    def __getitem__(self, value: Value) -> BufferLiveness:
        return self._by_value[value]

    def get(self, value: Value) -> BufferLiveness | None:
        return self._by_value.get(value)

    def position(self, op: Operation) -> int:
        return self._positions[op]

    def live_at(self, position: int) -> list:
        return [b for b in self.buffers if b.start <= position <= b.end]


def functions_of(module: Operation) -> list:
    """The function-like ops with a body, in module order."""
    return [op for op in module.walk(include_self=False)
            if op.is_registered and op.has_trait(FunctionLike) and op.regions
            and op.regions[0].blocks]


# ---------------------------------------------------------------------------- aliases

_ASK = object()  # "effects not given": ask the op

def alias_results(op: Operation, value: Value, effects=_ASK) -> list:
    """The results of `op` that alias `value`, one of its operands (`effects`: the op's
    memory effects, when the caller has them)."""
    buffers = [r for r in op.results if isinstance(r.type, BufferType)]
    if not buffers:
        return []
    if effects is _ASK:
        effects = op.memory_effects() if op.is_registered else None
    if effects is None or op.name == "func.call":
        return buffers  # unknown: assume the worst
    declared = [e for e in type(op).effects if e.kind == ALIAS]
    if declared:
        found = []
        for effect in declared:
            sources = getattr(op, effect.source) if effect.source else list(op.operands)
            sources = sources if isinstance(sources, list) else [sources]
            if any(s is value for s in sources):
                targets = getattr(op, effect.on)
                targets = targets if isinstance(targets, list) else [targets]
                found.extend(t for t in targets if t is not None)
        return found
    # An op that computes its effects itself: an ALIAS it reports names a result but
    # not its source, so that result may alias any buffer operand.
    return [v for kind, v in effects if kind == ALIAS and v is not None]


def _is_arena_view(op: Operation) -> bool:
    if not isinstance(op, ViewOp):
        return False
    owner = op.operands[0].owner if op.operands else None
    return isinstance(owner, Operation) and owner.name == "memory.arena"


# ---------------------------------------------------------------------------- analysis

def compute_liveness(func: Operation) -> Liveness:
    """Liveness of every buffer in `func` (a function-like op with a body)."""
    ops = list(func.walk(include_self=False))
    positions = {op: index for index, op in enumerate(ops)}
    span_end: dict = {}
    for op in ops:
        if op.regions:
            last = positions[op]
            for nested in op.walk(include_self=False):
                last = positions[nested]  # pre-order: the last one visited is the last
            span_end[op] = last
    exit_pos = max(len(ops) - 1, 0)
    entry = func.regions[0].blocks[0]

    def span(user: Operation, home) -> tuple[int, int]:
        """The positions a use at `user` covers for a buffer defined in block `home`."""
        anchor = user
        while anchor.parent is not home and anchor.parent_op is not None \
                and anchor.parent_op is not func:
            anchor = anchor.parent_op
        if anchor.parent is not home:
            anchor = user  # defined in an unrelated scope (graph region): its own op
        start = positions.get(anchor)
        if start is None:
            return (0, exit_pos)
        return (start, span_end.get(anchor, start))

    roots: list = []  # (value, kind, op, home block, external)
    for arg in entry.args:
        if isinstance(arg.type, BufferType):
            roots.append((arg, None, None, entry, True))
    for op in ops:
        if isinstance(op, AllocOp):
            roots.append((op.result, op.properties["kind"].value if "kind" in op.properties
                          else "activation", op, op.parent, False))
        elif _is_arena_view(op):
            kind = op.attributes.get("kind")
            roots.append((op.result, kind.value if kind is not None else "activation", op,
                          op.parent, False))

    effects: dict = {}  # op -> its memory effects: asked once, not once per use

    def effects_of(user: Operation):
        found = effects.get(user, _ASK)
        if found is _ASK:
            found = effects[user] = user.memory_effects() if user.is_registered else None
        return found

    kinds: dict = {}  # op -> {value: the kinds of its effects on it}; None: unknown

    def kinds_of(user: Operation):
        found = kinds.get(user, _ASK)
        if found is _ASK:
            listed = effects_of(user)
            found = None if listed is None else {}
            for kind_, target in listed or ():
                found.setdefault(target, []).append(kind_)
            kinds[user] = found
        return found

    buffers, by_value = [], {}
    for value, kind, op, home, external in roots:
        closure = [value]
        uses = []  # (closure member, its users): asked once
        members = {value}
        alias_ops = set()
        index = 0
        while index < len(closure):
            current = closure[index]
            index += 1
            users = current.users()
            uses.append((current, users))
            for user in users:
                if not may_alias(user):  # most users: no effects to build
                    continue
                for result in alias_results(user, current, effects_of(user)):
                    if result not in members:
                        members.add(result)
                        closure.append(result)
                        alias_ops.add(user)
        first = last = None
        dealloc_end = None
        written = False
        for current, users in uses:
            for user in users:
                lo, hi = span(user, home)
                if isinstance(user, DeallocOp) or _only_frees(kinds_of(user), current):
                    dealloc_end = hi if dealloc_end is None else max(dealloc_end, hi)
                    continue
                if user in alias_ops and _only_aliases(user, kinds_of(user), current):
                    continue
                first = lo if first is None else min(first, lo)
                last = hi if last is None else max(last, hi)
                if not written and _writes(kinds_of(user), current):
                    written = True
        own = positions.get(op) if op is not None else 0
        if external:
            kind = "input"
        if kind == "input":
            start, end = 0, last if last is not None else 0
        elif kind == "output":
            start = first if first is not None else (own if own is not None else 0)
            end = exit_pos
        elif kind == "constant":
            start, end = 0, exit_pos
        else:
            start = first if first is not None else own
            end = last if last is not None else own
        if kind not in ("workspace", "constant") and dealloc_end is not None and dealloc_end > end:
            end = dealloc_end
        size = value.type.nbytes()
        bounded = size is None and value.type.upper_nbytes() is not None
        if bounded:
            size = value.type.upper_nbytes()
        alignment = None
        if isinstance(op, AllocOp) and "alignment" in op.properties:
            alignment = op.properties["alignment"].value
        record = BufferLiveness(value, kind, start, max(end, start), size, alignment, op,
                                closure[1:], external, written, first, last, bounded)
        buffers.append(record)
        by_value[value] = record
    return Liveness(func, ops, buffers, by_value, positions)


# The helpers below take an op's effects as {value: [effect kinds]} (None: unknown).

def _only_frees(kinds, value: Value) -> bool:
    on_value = kinds.get(value) if kinds else None
    return bool(on_value) and all(kind == FREE for kind in on_value)


def _only_aliases(op: Operation, kinds, value: Value) -> bool:
    """True when `op` touches `value` only to make an alias of it."""
    if kinds is None or op.name == "func.call":
        return False
    return all(kind == ALIAS for kind in kinds.get(value, ()))


def _writes(kinds, value: Value) -> bool:
    if kinds is None:
        return True
    return WRITE in kinds.get(value, ())


# ---------------------------------------------------------------------------- printing

def value_names(func: Operation) -> dict:
    """The names the printer gives the values of `func` (`%x`, `%3`)."""
    from palimpsest.ir.printer import Printer

    printer = Printer()
    printer._name_scope(func)
    return printer.names


def format_liveness(liveness: Liveness, names: dict | None = None) -> list[str]:
    """The stable dump `test-print-liveness` prints: one line per buffer."""
    names = names if names is not None else value_names(liveness.function)
    prefix = f"// liveness @{liveness.name}:"
    lines = [f"{prefix} {len(liveness.ops)} ops"]
    for record in liveness.buffers:
        size = "dynamic" if record.dynamic else f"{record.size} bytes"
        if record.bounded:
            size += " (at its bounds)"
        text = (f"{prefix} {names.get(record.value, '%?')} [{record.start}, {record.end}] "
                f"{size} {record.kind}")
        if record.external:
            text += " external"
        if record.aliases:
            text += " aliases: " + ", ".join(names.get(a, "%?") for a in record.aliases)
        lines.append(text)
    from palimpsest.passes.planners.intervals import Interval, peak_live

    static = [r for r in liveness.buffers if not r.dynamic and not r.external
              and r.kind != "constant"]
    # the records' lifetimes are closed, [start, end]; the planners' half-open
    peak, when = peak_live(Interval("", r.start, r.end + 1, r.size) for r in static)
    lines.append(f"{prefix} peak {peak} bytes" + (f" at {when}" if when is not None else ""))
    return lines


@register_pass
class TestPrintLiveness(ModulePass):
    name = "test-print-liveness"
    summary = "print the liveness of every buffer (test only)"

    def apply(self, module: Operation) -> None:
        for func in functions_of(module):
            for line in format_liveness(compute_liveness(func)):
                print(line, file=sys.stderr)
        sys.stderr.flush()
