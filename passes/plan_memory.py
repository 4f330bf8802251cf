"""`plan-memory`: a static, pool-mapped memory plan, written into the IR.

    liveness → pool mapping → a planner per pool → check → rewrite

Every `buffer.alloc` with a static shape — or with `?` dims that all carry a bound
(`buffer<?x64xf32, #bounds<128, ?>>`, placed at its bound's size, its worst case) —
becomes a typed view at a byte offset of its pool's arena:

    %arena = memory.arena @activations : buffer<12544xi8>          // at function entry
    %t = buffer.view %arena {kind = "activation", offset = 4096}
           : (buffer<12544xi8>) -> buffer<1x8x8x8xf32>

its `buffer.dealloc`s are erased, and every `memory.pool` gets `size` (the bytes its plan
uses; the largest over the functions). The view keeps the alloc's class as a `kind`
attribute, so the planned IR can be analysed again (and exported) without the allocs.

Pools. The module's `memory.pool` ops, with the `memory.pool_map` (per class, candidate
pools in order of preference; a class it does not list may use every pool, in
declaration order). A buffer goes to the first candidate pool where it still fits
(TVM USMP): all buffers are first planned in their first candidate; if a pool's plan
exceeds its capacity, buffers are assigned largest first to the first pool with room at
their lifetime, and each pool is then planned again. With no `memory.pool` in the
module, the pass creates an unbounded `@activations` pool for activations and
workspaces, and an unbounded `@io` pool for inputs and outputs (both aligned to
`default-alignment`).

Inputs and outputs. By default (Glow's placeholders) an input or output alloc is live
for the whole run, and with no declared pools it sits in `@io`, away from the
activations: a runtime may keep it bound between runs. With `inputs-as-activations`,
they are planned with their real lifetimes — an input from entry to its last use, an
output from its definition to exit — and, with no declared pools, in `@activations`,
so a large input's memory is reused once it is consumed (Glow #5011). The function's
buffer arguments are the caller's memory and are never planned.

Not planned: constants (`buffer.constant`, and allocs of kind "constant"), and buffers
with an unbounded dynamic dimension (left as allocs; the dynamic fallback handles them).
A bounded view keeps its `?` dims: the runtime views its slot at the shape the op that
writes it produces, which must fit the bounds.

A planned function's buffers sit at fixed offsets, so a `func.call` to a function with
planned buffers is refused (a diagnostic at the call): inline it first.

An impossible plan — a buffer fits no candidate pool — is a diagnostic at the buffer's
alloc naming the pools, their capacities and the bytes the plan would need. Every plan
is checked by the independent `check_plan` before the IR is rewritten; a failing check
is an internal error.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field

from palimpsest.dialects.buffer import BufferType, CopyOp, DeallocOp, ViewOp
from palimpsest.dialects.memory import ArenaOp, PoolMapOp, PoolOp
from palimpsest.ir import attributes as A
from palimpsest.ir.core import Operation
from palimpsest.ir.diagnostics import DiagnosticError, format_diagnostic
from palimpsest.ir.types import MAX_DIM, IntegerType
from palimpsest.passes.liveness import Liveness, compute_liveness, functions_of, value_names
from palimpsest.passes.pass_manager import MemorySearchPass, register_pass
from palimpsest.passes.planners import (
    ALGORITHMS, Interval, PlanError, check_plan, lower_bound, plan_intervals,
)

__all__ = [
    "PlanReport", "FunctionPlan", "PoolPlan", "PlacedBuffer", "PlanCheckError",
    "plan_memory", "DEFAULT_POOL", "IO_POOL", "PlanMemory",
]

DEFAULT_POOL = "activations"
IO_POOL = "io"
PLANNED_KINDS = ("input", "output", "activation", "workspace")


class PlanCheckError(RuntimeError):
    """The independent checker rejected a plan: a bug in the planner, never the input."""


# ---------------------------------------------------------------------------- report

@dataclass
class PlacedBuffer:
    """One planned buffer: where it lives and when."""

    name: str           # its SSA name in the function (`%3`, `%conv1`)
    kind: str
    pool: str
    offset: int
    size: int
    start: int          # first op position it is live at
    end: int            # last op position it is live at (inclusive)
    location: str = ""  # the alloc's location, when it has one


@dataclass
class PoolPlan:
    """One pool's plan in one function."""

    pool: str
    size: int           # bytes used: the highest byte any buffer reaches
    lower_bound: int    # the most bytes live at one moment in this pool
    capacity: int | None
    alignment: int
    algorithm: str
    buffers: int
    optimal: bool = False

    @property
    def ratio(self) -> float:
        return self.size / self.lower_bound if self.lower_bound else 1.0


@dataclass
class FunctionPlan:
    function: str
    ops: int
    pools: list = field(default_factory=list)       # PoolPlan
    buffers: list = field(default_factory=list)     # PlacedBuffer, in program order
    dynamic: list = field(default_factory=list)     # names of buffers left dynamic
    bounded: list = field(default_factory=list)     # names of buffers planned at their bounds
    lower_bound: int = 0  # all planned buffers together, as if in one pool
    external: int = 0     # bytes of static inputs the caller holds (arguments not planned)

    @property
    def used(self) -> int:
        """Bytes of all the pools this function uses."""
        return sum(p.size for p in self.pools)

    @property
    def total(self) -> int:
        """Pools plus caller-held inputs: the memory one run of the function needs."""
        return self.used + self.external

    def pool(self, name: str) -> PoolPlan | None:
        return next((p for p in self.pools if p.pool == name), None)


@dataclass
class PlanReport:
    """What `plan-memory` did: per function, each pool's bytes, bound and ratio."""

    functions: list = field(default_factory=list)   # FunctionPlan
    pools: dict = field(default_factory=dict)       # name -> {size, capacity, alignment}

    def function(self, name: str) -> FunctionPlan | None:
        return next((f for f in self.functions if f.function == name), None)

    def lines(self) -> list[str]:
        out = []
        for fn in self.functions:
            for pool in fn.pools:
                capacity = "unbounded" if pool.capacity is None else f"capacity {pool.capacity}"
                out.append(f"plan-memory @{fn.function}: pool @{pool.pool}: {pool.size} bytes "
                           f"used, lower bound {pool.lower_bound}, ratio {pool.ratio:.4f} "
                           f"({_count(pool.buffers, 'buffer')}, {capacity}, {pool.algorithm})")
            if fn.bounded:
                out.append(f"plan-memory @{fn.function}: {_count(len(fn.bounded), 'buffer')} "
                           f"planned at their bounds: {_first_names(fn.bounded)}")
            if fn.dynamic:
                out.append(f"plan-memory @{fn.function}: {_count(len(fn.dynamic), 'dynamic buffer')} "
                           f"left to the runtime: {_first_names(fn.dynamic)}")
        return out

    def to_dict(self) -> dict:
        return {
            "pools": [{"name": name, **info} for name, info in self.pools.items()],
            "functions": [{
                "name": fn.function,
                "ops": fn.ops,
                "lower_bound": fn.lower_bound,
                "pools": [{"pool": p.pool, "size": p.size, "lower_bound": p.lower_bound,
                           "ratio": round(p.ratio, 6), "algorithm": p.algorithm,
                           "buffers": p.buffers, "optimal": p.optimal} for p in fn.pools],
                "buffers": [{"name": b.name, "pool": b.pool, "offset": b.offset,
                             "size": b.size, "interval": [b.start, b.end], "class": b.kind}
                            for b in fn.buffers],
                "dynamic": list(fn.dynamic),
                "bounded": list(fn.bounded),
            } for fn in self.functions],
        }


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


REMARK_NAMES = 5  # buffer names a remark lists before it says how many more


def _first_names(names: list) -> str:
    """The first few names, then how many more and where to see them all: a model's
    remark once listed 160 names on one line."""
    if len(names) <= REMARK_NAMES:
        return ", ".join(names)
    return (f"{', '.join(names[:REMARK_NAMES])} and {len(names) - REMARK_NAMES} more "
            f"(-p test-print-liveness lists every buffer)")


# ---------------------------------------------------------------------------- pools

@dataclass
class _Pool:
    name: str
    capacity: int | None
    alignment: int
    op: PoolOp | None = None  # None: created by this pass
    size: int = 0


def _module_pools(module: Operation, inputs_as_activations: bool, default_alignment: int):
    """(pools by name in declaration order, candidates by class, whether created)."""
    body = module.regions[0].blocks[0] if module.regions and module.regions[0].blocks else None
    ops = list(body.ops) if body is not None else []
    declared = [op for op in ops if isinstance(op, PoolOp)]
    if not declared:
        pools = {DEFAULT_POOL: _Pool(DEFAULT_POOL, None, default_alignment)}
        io = DEFAULT_POOL if inputs_as_activations else IO_POOL
        if io not in pools:
            pools[io] = _Pool(io, None, default_alignment)
        candidates = {"activation": [DEFAULT_POOL], "workspace": [DEFAULT_POOL],
                      "input": [io], "output": [io]}
        return pools, candidates, True
    pools = {op.pool_name: _Pool(op.pool_name, op.capacity_bytes, op.alignment_bytes, op)
             for op in declared}
    maps = [op for op in ops if isinstance(op, PoolMapOp)]
    listed = {}
    for pool_map in maps:
        listed.update(pool_map.candidates())
    candidates = {kind: listed.get(kind, list(pools)) for kind in PLANNED_KINDS}
    return pools, candidates, False


# ---------------------------------------------------------------------------- planning

@dataclass(eq=False)
class _Item:
    record: object          # BufferLiveness
    ident: str
    start: int
    end: int                # inclusive
    size: int
    alignment: int
    candidates: list
    anchor: Operation       # where a diagnostic about it points

    def interval(self) -> Interval:
        return Interval(self.ident, self.start, self.end + 1, self.size, self.alignment)


def _align_up(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


def _first_fit(item: _Item, placed: list, alignment: int) -> int:
    """The lowest aligned offset where `item` fits among `placed` [(item, offset)]."""
    align = max(alignment, item.alignment)
    busy = sorted((off, off + other.size) for other, off in placed
                  if other.size and other.start <= item.end and item.start <= other.end)
    offset = 0
    for lo, hi in busy:
        if offset + item.size <= lo:
            break
        offset = max(offset, _align_up(hi, align))
    return offset


def _plan_pool(items, pool: _Pool, algorithm: str, time_budget: float, seed: int = 0):
    """(offsets by ident, peak, algorithm name, optimal) or raise PlanError."""
    intervals = [it.interval() for it in items]
    plan = plan_intervals(intervals, algorithm=algorithm, capacity=pool.capacity,
                          alignment=pool.alignment, time_budget=time_budget, seed=seed)
    return plan.offsets, plan.peak, plan.algorithm, plan.optimal


def _peak(items, offsets) -> int:
    return max((offsets[it.ident] + it.size for it in items), default=0)


def _place_function(liveness: Liveness, pools: dict, candidates: dict, names: dict,
                    algorithm: str, time_budget: float, inputs_as_activations: bool):
    """Assign each static buffer of one function a pool and an offset.

    Returns (items, {ident: (pool, offset)}, {pool: (algorithm, optimal)})."""
    items = []
    for index, record in enumerate(liveness.buffers):
        if record.dynamic or record.kind not in PLANNED_KINDS:
            continue
        if not (record.is_alloc or (record.external and inputs_as_activations)):
            continue
        start, end = record.start, record.end
        if record.kind in ("input", "output") and not inputs_as_activations:
            start, end = 0, liveness.exit
        pool_names = candidates.get(record.kind) or []
        anchor = record.op if record.op is not None else liveness.function
        if not pool_names:
            raise anchor.error(f"no memory.pool may hold a buffer of class "
                               f"'{record.kind}' (the memory.pool_map lists none)")
        items.append(_Item(record, f"{names.get(record.value, '%?')}#{index}", start, end,
                           record.size, record.alignment or 1, pool_names, anchor))
    if not items:
        return items, {}, {}

    # 1. Everyone in their first candidate, planned with the chosen algorithm.
    by_pool: dict = {}
    for it in items:
        by_pool.setdefault(it.candidates[0], []).append(it)
    result, how = {}, {}
    try:
        for name, members in by_pool.items():
            offsets, _, used, optimal = _plan_pool(members, pools[name], algorithm,
                                                   time_budget)
            for it in members:
                result[it.ident] = (name, offsets[it.ident])
            how[name] = (used, optimal)
        return items, result, how
    except PlanError:
        pass

    # 2. First fit, largest first: each buffer to the first candidate with room.
    placed: dict = {name: [] for name in pools}
    assignment: dict = {}
    for it in sorted(items, key=lambda i: (-i.size, i.start, i.ident)):
        tried = []
        for name in it.candidates:
            pool = pools[name]
            offset = _first_fit(it, placed[name], pool.alignment)
            if pool.capacity is None or offset + it.size <= pool.capacity:
                placed[name].append((it, offset))
                assignment[it.ident] = (name, offset)
                break
            tried.append((pool, offset + it.size))
        else:
            _no_room(it, tried)
    # 3. Plan each pool again with the algorithm; keep the better of the two.
    result, how = {}, {}
    for name, members in placed.items():
        if not members:
            continue
        group = [it for it, _ in members]
        greedy = {it.ident: off for it, off in members}
        best, used, optimal = greedy, "first-fit", False
        try:
            offsets, peak, label, proven = _plan_pool(group, pools[name], algorithm,
                                                      time_budget)
            if peak <= _peak(group, greedy):
                best, used, optimal = offsets, label, proven
        except PlanError:
            pass
        for it in group:
            result[it.ident] = (name, best[it.ident])
        how[name] = (used, optimal)
    return items, result, how


def _no_room(item: _Item, tried) -> None:
    record = item.record
    parts = []
    for pool, needed in tried:
        parts.append(f"@{pool.name} (capacity {pool.capacity} bytes) would need "
                     f"{needed} bytes")
    raise item.anchor.error(
        f"cannot place {item.size} bytes ({record.kind}, live [{item.start}, {item.end}]) "
        f"in any candidate pool: " + "; ".join(parts))


# ---------------------------------------------------------------------------- the pass

def plan_memory(module: Operation, algorithm: str = "auto", time_budget: float = 1.0,
                inputs_as_activations: bool = False, default_alignment: int = 64,
                seed: int = 0, details: bool = True) -> PlanReport:
    """Plan every static buffer of every function of `module` and rewrite the IR.

    Returns the :class:`PlanReport`; with `details=False` it holds the pools' sizes only
    (no buffers, names or lower bounds: the pass computes them only to print them).
    Raises DiagnosticError for an impossible plan and PlanCheckError if the independent
    checker rejects a plan (a bug)."""
    if algorithm not in ALGORITHMS:
        raise DiagnosticError(f"plan-memory: unknown algorithm '{algorithm}' "
                              f"(one of {', '.join(ALGORITHMS)})", module.loc)
    if default_alignment < 1 or default_alignment & (default_alignment - 1):
        raise DiagnosticError(f"plan-memory: default-alignment must be a power of two, got "
                              f"{default_alignment}", module.loc)
    pools, candidates, created = _module_pools(module, inputs_as_activations, default_alignment)
    report = PlanReport()
    work = []
    for func in functions_of(module):
        existing = [op for op in func.walk(include_self=False) if isinstance(op, ArenaOp)]
        liveness = compute_liveness(func)
        names = value_names(func) if details else {}
        static = [r for r in liveness.buffers if r.is_alloc and not r.dynamic
                  and r.kind in PLANNED_KINDS]
        if existing:
            if static:
                raise existing[0].error("is in a function that is already planned; "
                                        "plan-memory plans a function's allocs once, all "
                                        "together")
            for arena in existing:  # planned before: keep its pools' sizes
                pool = pools.get(arena.properties["pool"].root)
                if pool is not None and arena.result.type.shape[0] is not None:
                    pool.size = max(pool.size, arena.result.type.shape[0])
            continue
        items, placement, how = _place_function(liveness, pools, candidates, names,
                                                algorithm, time_budget, inputs_as_activations)
        _check(items, placement, pools)
        _check_addressable(items, placement)
        fn_plan = _function_plan(liveness, names, items, placement, how, pools, details)
        report.functions.append(fn_plan)
        for pool_plan in fn_plan.pools:
            pools[pool_plan.pool].size = max(pools[pool_plan.pool].size, pool_plan.size)
        work.append((func, items, placement))
    _check_calls(module, work)
    if created:
        _create_pools(module, [p for p in pools.values()
                               if any(pl.pool == p.name for f in report.functions
                                      for pl in f.pools)])
    for func, items, placement in work:
        _rewrite(func, items, placement, pools)
    for pool in pools.values():
        if pool.op is not None:
            pool.op.properties["size"] = A.IntegerAttr(pool.size)
    report.pools = {p.name: {"size": p.size, "capacity": p.capacity, "alignment": p.alignment}
                    for p in pools.values() if p.op is not None}
    return report


def _check_addressable(items, placement) -> None:
    """Offsets and pool sizes are int64 attributes: a plan beyond that is refused."""
    for it in items:
        pool, offset = placement[it.ident]
        if offset + it.size > MAX_DIM:
            raise it.anchor.error(f"needs {it.size} bytes at offset {offset} of pool @{pool}: "
                                  f"beyond 2^63-1, the most a pool can address")


def _check(items, placement, pools) -> None:
    by_pool: dict = {}
    for it in items:
        by_pool.setdefault(placement[it.ident][0], []).append(it)
    problems = []
    for name, members in by_pool.items():
        pool = pools[name]
        offsets = {it.ident: placement[it.ident][1] for it in members}
        for problem in check_plan([it.interval() for it in members], offsets,
                                  capacity=pool.capacity, alignment=pool.alignment):
            problems.append(f"pool @{name}: {problem}")
    if problems:
        raise PlanCheckError("plan-memory produced an invalid plan:\n  " + "\n  ".join(problems))


def _function_plan(liveness, names, items, placement, how, pools,
                   details: bool = True) -> FunctionPlan:
    fn = FunctionPlan(liveness.name, len(liveness.ops))
    by_pool: dict = {}
    for it in items:
        pool, offset = placement[it.ident]
        by_pool.setdefault(pool, []).append(it)
        if not details:
            continue
        loc = it.anchor.loc
        fn.buffers.append(PlacedBuffer(names.get(it.record.value, "%?"), it.record.kind, pool,
                                       offset, it.size, it.start, it.end,
                                       loc.describe() if loc is not None else ""))
    for name in pools:  # declaration order
        members = by_pool.get(name)
        if not members:
            continue
        used = max(placement[it.ident][1] + it.size for it in members)
        label, optimal = how.get(name, ("?", False))
        bound = lower_bound([it.interval() for it in members]) if details else 0
        fn.pools.append(PoolPlan(name, used, bound, pools[name].capacity,
                                 pools[name].alignment, label, len(members), optimal))
    if not details:
        return fn
    fn.lower_bound = lower_bound([it.interval() for it in items])
    fn.dynamic = [names.get(r.value, "%?") for r in liveness.buffers
                  if (r.is_alloc or r.external) and r.dynamic]
    planned = {id(it.record) for it in items}
    fn.bounded = [names.get(it.record.value, "%?") for it in items if it.record.bounded]
    fn.external = sum(r.size for r in liveness.buffers
                      if r.external and not r.dynamic and id(r) not in planned)
    return fn


def _check_calls(module: Operation, work) -> None:
    """A planned function keeps its buffers, results included, at fixed offsets: a call
    to it would share them between calls (a result held across a second call is
    overwritten) and with a caller using the same pools. Refuse calls to planned
    functions."""
    planned = {func.properties["sym_name"].value for func, items, _ in work if items}
    if not planned:
        return
    for op in module.walk(include_self=False):
        if op.name == "func.call" and op.properties["callee"].root in planned:
            callee = op.properties["callee"].root
            raise op.error(f"calls @{callee}, whose buffers plan-memory places at fixed "
                           f"offsets of its pools (calls would share them); plan-memory "
                           f"plans functions that no func.call calls: inline @{callee} "
                           f"first")


def _create_pools(module: Operation, pools: list) -> None:
    body = module.regions[0].blocks[0]
    anchor = body.first
    for pool in pools:
        op = PoolOp(properties={"sym_name": A.StringAttr(pool.name),
                                "alignment": A.IntegerAttr(pool.alignment)})
        if anchor is None:
            body.append(op)
        else:
            body.insert_before(anchor, op)
        pool.op = op


def _rewrite(func, items, placement, pools) -> None:
    if not items:
        return
    entry = func.regions[0].blocks[0]
    used = [name for name in pools if any(placement[it.ident][0] == name for it in items)]
    arenas = {}
    anchor = entry.first
    for name in used:  # in pool declaration order, before the first op
        hint = "arena" if len(used) == 1 else "arena_" + re.sub(r"[^A-Za-z0-9_]", "_", name)
        arena = ArenaOp(result_types=[BufferType((pools[name].size,), IntegerType(8))],
                        properties={"pool": A.SymbolRefAttr(name)},
                        location=func.location, result_names=[hint])
        arena.source_loc = func.source_loc
        if anchor is None:
            entry.append(arena)
        else:
            entry.insert_before(anchor, arena)
        arenas[name] = arena.result
    after_arenas = anchor
    for it in items:
        record = it.record
        pool, offset = placement[it.ident]
        for value in [record.value, *record.aliases]:
            for user in [op for op, _ in value.uses if isinstance(op, DeallocOp)]:
                user.erase()
        source = record.op
        view = ViewOp([arenas[pool]], [record.value.type],
                      properties={"offset": A.IntegerAttr(offset)},
                      attributes={"kind": A.StringAttr(record.kind)},
                      location=source.location if source is not None else func.location,
                      result_names=[record.value.name_hint])
        view.source_loc = source.source_loc if source is not None else func.source_loc
        if source is not None:  # an alloc: the view takes its place
            source.parent.insert_before(source, view)
            record.value.replace_all_uses_with(view.result)
            source.erase()
            continue
        # An input argument planned as an activation: one copy into the arena at entry,
        # and everything reads the copy.
        if after_arenas is None:
            entry.append(view)
        else:
            entry.insert_before(after_arenas, view)
        copy = CopyOp([record.value, view.result], [], location=func.location)
        copy.source_loc = func.source_loc
        if after_arenas is None:
            entry.append(copy)
        else:
            entry.insert_before(after_arenas, copy)
        for user, index in list(record.value.uses):
            if user is not copy:
                user.set_operand(index, view.result)


@register_pass
class PlanMemory(MemorySearchPass):
    name = "plan-memory"
    summary = ("plan every static buffer at an offset of a memory pool (liveness, pool "
               "map, planner, check) and rewrite allocs into views of pool arenas")

    default_alignment: int = 64
    report: bool = False

    def apply(self, module: Operation) -> None:
        result = plan_memory(module, self.algorithm, self.time_budget,
                             self.inputs_as_activations, self.default_alignment,
                             details=self.report)
        if self.report:
            by_name = {f.properties["sym_name"].value: f for f in functions_of(module)}
            for fn in result.functions:
                func = by_name.get(fn.function)
                loc = func.loc if func is not None else None
                for line in result.lines():
                    if line.startswith(f"plan-memory @{fn.function}:"):
                        print(format_diagnostic("remark", line, loc, None), file=sys.stderr)
                if func is not None:  # the order's bounds, when schedule-for-memory ran
                    from palimpsest.passes.schedule_for_memory import report_lines
                    for line in report_lines(func):
                        print(format_diagnostic("remark", line, loc, None), file=sys.stderr)
            sys.stderr.flush()
