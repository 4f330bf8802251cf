"""`schedule-for-memory`: reorder the ops of each function into another valid order that
keeps fewer bytes live at once, so the bound the planner packs is lower.

A thin pass over `passes/planners/schedule.py` (which knows no IR): it turns a
function's body into a :class:`ScheduleProblem`, asks for an order and moves the ops.

What is respected. Every op comes after the ops defining its operands, and after those
defining the values its regions use; ops with side effects (not pure, effects unknown,
or that write or free memory) keep their relative order; the terminator stays last.
At the buffer and kernel levels, accesses to one buffer (through its aliases) keep
their order where one of them writes: reads between two writes may move, nothing moves
across a write.

What is counted: what `plan-memory` will count.

- Graph level (before `bufferize`): each result's bytes (bounded `?` dims at their
  bounds; unbounded ones are left to the runtime and cost nothing here), from the op
  that makes it to its last use. Constants cost nothing (never planned); inputs are the
  caller's memory and outputs sit in `@io` for the whole run, so neither depends on the
  order (with `inputs-as-activations` both are counted: inputs from entry, outputs from
  their op to the exit). Reshape-like ops that `bufferize` makes aliases (reshape,
  flatten, squeeze, unsqueeze, identity, inference dropout) share their operand's
  storage and extend its life. An `InPlace` op's result costs nothing while the op runs
  when an operand it may reuse dies there, as `bufferize` decides. Workspaces do not
  exist yet at this level (they appear with `lower-to-kernels`): run the pass again at
  the kernel level to count them.
- Buffer and kernel levels: liveness's rules. An alloc's bytes are live from the first
  op that accesses it (or an alias) to the last; a workspace only inside the op using it;
  constants, inputs and outputs as above. Allocs, constants, reshapes and views move to
  just before their first user; deallocs just after the last one.

The order is never worse than the one the function had: when no order counts fewer
bytes, the function is left as it was (an order is changed only for a strictly lower
peak). Options: `algorithm` (`auto`, `exact`, `list`, `dfs`, `post-order`,
`file-order`), `time-budget` (seconds per function for the exact search),
`inputs-as-activations`, `enabled=false` (do nothing; the `default` pipeline's switch).
`plan-memory{report=true}` prints what the pass found per function: file order's peak,
the scheduled peak and whether it is proven minimal.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass

from palimpsest.ir.core import BlockArgument, Operation
from palimpsest.ir.opdef import ALIAS, FREE, WRITE, InPlace, IsTerminator, has_no_effects
from palimpsest.ir.types import TensorType
from palimpsest.passes.pass_manager import MemorySearchPass, register_pass
from palimpsest.passes.planners.schedule import ALGORITHMS, ScheduleProblem, schedule

__all__ = ["ScheduleResult", "schedule_for_memory", "schedule_function", "build_problem",
           "schedules_of", "report_lines", "ScheduleForMemory"]


@dataclass
class ScheduleResult:
    """What the pass did to one function."""

    function: str
    level: str               # "graph" or "buffer"
    ops: int                 # ops it could move (the terminator excluded)
    file_peak: int           # peak live bytes of the order it had
    peak: int                # of the order it left
    algorithm: str           # the algorithm whose order it kept ("file-order": none better)
    proven: bool             # `peak` is minimal over all valid orders
    seconds: float
    candidates: dict         # algorithm -> peak
    reordered: bool = False

    def line(self, first: bool = True) -> str:
        """The report line; `first`: this run saw the function's file order (a later
        run sees the order an earlier one left, lowered to buffers and kernels)."""
        proof = "proven minimal" if self.proven else "not proven minimal"
        before = "file order's bound" if first else "bound of the order it got"
        return (f"schedule-for-memory @{self.function} ({self.level} level): {before} "
                f"{self.file_peak} bytes, scheduled bound {self.peak} bytes ({proof}, "
                f"{self.algorithm}, {self.ops} ops)")


# the results per function op, one per run (plan-memory's report reads them; weak: a
# dropped module takes its entries with it)
_RESULTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def schedules_of(func: Operation) -> list:
    """The :class:`ScheduleResult` of each run of the pass on `func`, in order."""
    return list(_RESULTS.get(func, ()))


def report_lines(func: Operation) -> list[str]:
    """The report lines `plan-memory{report=true}` adds for `func`."""
    return [r.line(i == 0) for i, r in enumerate(_RESULTS.get(func, ()))]


# ---------------------------------------------------------------------------- the model

_GRAPH_ALIASES = ("graph.reshape", "graph.flatten", "graph.squeeze", "graph.unsqueeze")


def _tensor_bytes(type_, _known: dict = {}) -> int:  # noqa: B006 (a cache by type)
    if not isinstance(type_, TensorType) or type_.shape is None:
        return 0
    try:
        return _known[type_]
    except (KeyError, TypeError):
        pass
    from palimpsest.dialects.buffer import buffer_of

    size = buffer_of(type_).upper_nbytes() or 0
    try:
        if len(_known) < 4096:
            _known[type_] = size
    except TypeError:  # (an unhashable type: not cached)
        pass
    return size


def _buffer_bytes(type_) -> int:
    upper = getattr(type_, "upper_nbytes", None)
    return (upper() or 0) if upper is not None else 0


def _outer_uses(op: Operation, block) -> list:
    """Values of `block` (or its arguments) used by `op` or inside its regions."""
    found = list(op.operands)
    if op.regions:
        for inner in op.walk(include_self=False):
            found.extend(inner.operands)
    return [v for v in found if _home(v) is block]


def _home(value):
    owner = value.owner
    if isinstance(owner, Operation):
        return owner.parent
    return owner  # a block argument: its block


def _effectful(op: Operation) -> bool:
    if not op.is_registered:
        return True
    if has_no_effects(op):
        return False
    effects = op.memory_effects()
    return effects is None or any(kind in (WRITE, FREE) and target is None
                                  for kind, target in effects)


def build_problem(func: Operation, inputs_as_activations: bool = False):
    """(problem, nodes, terminator, level) for the entry block of `func`, or None when the
    pass leaves it alone (several blocks, an empty body)."""
    region = func.regions[0] if func.regions else None
    if region is None or len(region.blocks) != 1:
        return None
    block = region.blocks[0]
    ops = list(block.ops)
    terminator = ops[-1] if ops and ops[-1].has_trait(IsTerminator) else None
    nodes = ops[:-1] if terminator is not None else ops
    buffer_level = any(op.name.startswith(("buffer.", "kernel.", "memory.")) for op in nodes)
    if buffer_level:
        return _buffer_problem(func, block, nodes, terminator, inputs_as_activations)
    nodes = [op for op in nodes if op.name not in _FLOATING]
    if not nodes:
        return None
    return _graph_problem(func, block, nodes, terminator, inputs_as_activations)


def _graph_problem(func, block, nodes, terminator, inputs_as_activations):
    from palimpsest.passes.bufferize import _Function, _inference_dropout, _reshape_determined

    index = {op: i for i, op in enumerate(nodes)}
    storage = {}     # value -> storage id (the value owning the memory)
    kind = {}        # storage id -> "arg" | "constant" | "alloc"
    sizes = {}
    initial = []
    for arg in block.args:
        storage[arg] = arg
        kind[arg] = "arg"
        sizes[arg] = _tensor_bytes(arg.type) if inputs_as_activations else 0
        if sizes[arg]:
            initial.append(arg)
    preds, allocs, uses, inplace = [], [], [], []
    last_effect = None
    for op in block.ops:
        if op.name == "graph.constant":  # floating: never planned, placed by its users
            for value in op.results:
                storage[value] = value
                kind[value] = "constant"
                sizes[value] = 0
    for i, op in enumerate(nodes):
        used = _outer_uses(op, block)
        deps = {index[v.owner] for v in used
                if isinstance(v.owner, Operation) and v.owner in index}
        if _effectful(op):
            if last_effect is not None:
                deps.add(last_effect)
            last_effect = i
        preds.append(deps)
        uses.append({storage[v] for v in used if v in storage})
        made, reuse = [], []
        source = op.operands[0] if op.operands else None
        result = op.results[0] if len(op.results) == 1 else None
        aliasing = (result is not None and source is not None and source in storage
                    and isinstance(result.type, TensorType) and result.type.shape is not None
                    and ((op.name in _GRAPH_ALIASES and _reshape_determined(result.type.shape))
                         or op.name == "graph.identity"
                         or (op.name == "graph.dropout" and _inference_dropout(op))))
        if aliasing:
            storage[result] = storage[source]
        else:
            constant = op.name == "graph.constant"
            for value in op.results:
                storage[value] = value
                kind[value] = "constant" if constant else "alloc"
                sizes[value] = 0 if constant else _tensor_bytes(value.type)
                made.append(value)
            if result is not None and op.is_registered and op.has_trait(InPlace) \
                    and isinstance(result.type, TensorType) and result.type.shape is not None:
                trait = next(t for t in type(op).traits if isinstance(t, InPlace))
                candidates = []
                for k in trait.candidates(op):
                    value = op.operands[k]
                    owner = storage.get(value)
                    if owner is None or value.type != result.type:
                        continue
                    if not (kind[owner] == "alloc" or (kind[owner] == "arg"
                                                      and inputs_as_activations)):
                        continue
                    if any(other is not value and storage.get(other) is owner
                           for other in op.operands):
                        continue
                    if not _Function._broadcast_safe(op, k, result.type):
                        continue
                    candidates.append(owner)
                if candidates and sizes[result]:
                    reuse.append((sizes[result], tuple(candidates)))
        allocs.append(made)
        inplace.append(reuse)
    pinned = set()
    if terminator is not None:
        for value in terminator.operands:
            owner = storage.get(value)
            if owner is None:
                continue
            if inputs_as_activations:
                pinned.add(owner)
            elif kind.get(owner) == "alloc":
                sizes[owner] = 0  # an output: @io, the whole run, whatever the order
    problem = ScheduleProblem(preds, allocs, uses, sizes, inplace, None, pinned, initial,
                              [op.name for op in nodes])
    return problem, nodes, terminator, "graph"


# Ops that only name memory (or a constant): they move with their users, not on their own.
_FLOATING = ("buffer.alloc", "buffer.constant", "buffer.reshape", "buffer.view",
             "buffer.dim", "buffer.dealloc", "memory.arena", "graph.constant")


def _buffer_problem(func, block, nodes, terminator, inputs_as_activations):
    from palimpsest.dialects.buffer import AllocOp, BufferType
    from palimpsest.passes.liveness import compute_liveness

    anchors = [op for op in nodes if op.name not in _FLOATING]
    if any(op.name == "memory.arena" for op in nodes):
        return None  # already planned: offsets are fixed
    if not anchors:
        return None
    index = {op: i for i, op in enumerate(anchors)}
    liveness = compute_liveness(func)
    # every buffer value -> its root record (allocs, arguments), through aliases
    root = {}
    for record in liveness.buffers:
        root[record.value] = record
        for alias in record.aliases:
            root[alias] = record

    def anchor_of(op):
        while op is not None and op.parent is not block:
            op = op.parent_op
        return op

    preds = [set() for _ in anchors]
    uses = [set() for _ in anchors]
    accesses = {}   # record -> [(anchor index, writes)] in file order
    last_effect = None
    for i, op in enumerate(anchors):
        for value in _outer_uses(op, block):
            owner = value.owner
            if isinstance(owner, Operation):
                # through floating ops (a reshape of an alloc, a dim): their own inputs
                stack = [owner]
                while stack:
                    o = stack.pop()
                    if o in index:
                        preds[i].add(index[o])
                    elif o.parent is block:
                        stack.extend(v.owner for v in o.operands
                                     if isinstance(v.owner, Operation))
            record = root.get(value)
            if record is not None:
                uses[i].add(record)
        effects = op.memory_effects() if op.is_registered else None
        touched = {}
        for value in _outer_uses(op, block):
            record = root.get(value)
            if record is None:
                continue
            writes = effects is None or op.name == "func.call" or any(
                kind in (WRITE, FREE) and target is value for kind, target in effects)
            touched[record] = touched.get(record, False) or writes
        for record, writes in touched.items():
            accesses.setdefault(record, []).append((i, writes))
        if effects is None or op.name == "func.call" or any(
                target is None and kind in (WRITE, FREE) for kind, target in effects):
            if last_effect is not None:
                preds[i].add(last_effect)
            last_effect = i
    sizes, allocs, pinned, initial = {}, [[] for _ in anchors], set(), []
    for record, seq in accesses.items():
        # order: a write is ordered with every access before and after it
        last_write, reads_since = None, []
        for i, writes in seq:
            if writes:
                if last_write is not None:
                    preds[i].add(last_write)
                for r in reads_since:
                    preds[i].add(r)
                last_write, reads_since = i, []
            else:
                if last_write is not None:
                    preds[i].add(last_write)
                reads_since.append(i)
        first = seq[0][0]
        for i, _ in seq[1:]:
            if i != first:
                preds[i].add(first)  # the first access stays first: it makes the bytes
        kind = record.kind
        size = 0 if record.dynamic else (record.size or 0)
        if record.external or kind in ("constant",):
            size = size if (record.external and inputs_as_activations) else 0
            if size:
                initial.append(record)
        elif kind in ("input", "output"):
            if not inputs_as_activations:
                size = 0
            elif kind == "output":
                pinned.add(record)
        if not (record.external and size):
            allocs[first].append(record)
        sizes[record] = size
    for i in range(len(anchors)):
        preds[i].discard(i)
    problem = ScheduleProblem(preds, allocs, uses, sizes, None, None, pinned, initial,
                              [op.name for op in anchors])
    level = "kernel" if any(op.name.startswith("kernel.") for op in anchors) else "buffer"
    return problem, anchors, terminator, level


# ---------------------------------------------------------------------------- reordering

def _reorder(block, nodes, order, terminator, level) -> None:
    everything = _with_floating(block, [nodes[i] for i in order], terminator)
    for op in list(block.ops):
        op.detach()
    for op in everything:
        block.append(op)
    if terminator is not None:
        block.append(terminator)


def _with_floating(block, anchors, terminator):
    """The anchors in their new order, each floating op (alloc, constant, reshape, view,
    dim, graph constant) just before its first user and each dealloc just after its
    buffer's last one."""
    floating = [op for op in block.ops if op.name in _FLOATING]
    placed = set()
    result = []
    deallocs = [op for op in floating if op.name == "buffer.dealloc"]
    pending = [op for op in floating if op.name != "buffer.dealloc"]

    def place(op):
        if op in placed or op.parent is not block:
            return
        placed.add(op)
        for value in op.operands:
            owner = value.owner
            if isinstance(owner, Operation) and owner.name in _FLOATING and owner.parent is block:
                place(owner)
        result.append(op)

    def home(user):
        while user is not None and user.parent is not block:
            user = user.parent_op
        return user

    for anchor in anchors:
        for op in _floating_inputs(anchor, block):
            place(op)
        result.append(anchor)
        placed.add(anchor)
    if terminator is not None:
        for op in _floating_inputs(terminator, block):
            place(op)
    for op in pending:  # unused allocs and the like: where they were, at the end
        if op not in placed:
            place(op)
    # deallocs: after the last op (in the new order) using their buffer or an alias
    position = {op: i for i, op in enumerate(result)}
    after: dict = {}
    for dealloc in deallocs:
        last = -1
        for value in _alias_family(dealloc.operands[0], block):
            for user, _ in value.uses:
                user = home(user)
                if user is not dealloc and user in position and user not in (terminator,):
                    last = max(last, position[user])
        after.setdefault(last, []).append(dealloc)
    final = list(after.get(-1, []))
    for i, op in enumerate(result):
        final.append(op)
        final.extend(after.get(i, []))
    return final


def _floating_inputs(op, block):
    found = []
    values = list(op.operands)
    if op.regions:
        for inner in op.walk(include_self=False):
            values.extend(inner.operands)
    for value in values:
        owner = value.owner
        if isinstance(owner, Operation) and owner.parent is block and owner.name in _FLOATING \
                and owner.name != "buffer.dealloc":
            found.append(owner)
    return found


def _alias_family(value, block):
    """`value`, what it aliases (up to its root) and every alias of that root."""
    root = value
    while isinstance(root.owner, Operation) and root.owner.name in ("buffer.reshape",
                                                                    "buffer.view") \
            and root.owner.operands:
        root = root.owner.operands[0]
    family, stack = [root], [root]
    while stack:
        current = stack.pop()
        for user, _ in current.uses:
            if user.name in ("buffer.reshape", "buffer.view"):
                for result in user.results:
                    if result not in family:
                        family.append(result)
                        stack.append(result)
    return family


# ---------------------------------------------------------------------------- the pass

def schedule_function(func: Operation, algorithm: str = "auto", time_budget: float = 1.0,
                      inputs_as_activations: bool = False) -> ScheduleResult | None:
    """Reorder the body of `func` (see the module doc); None when it is left alone."""
    started = time.perf_counter()
    built = build_problem(func, inputs_as_activations)
    if built is None:
        return None
    problem, nodes, terminator, level = built
    found = schedule(problem, algorithm, time_budget)
    name_attr = func.properties.get("sym_name")
    result = ScheduleResult(name_attr.value if name_attr is not None else "?", level,
                            problem.n, found.candidates["file-order"], found.peak,
                            found.algorithm, found.proven, 0.0, found.candidates)
    if found.peak < result.file_peak:
        _reorder(func.regions[0].blocks[0], nodes, found.order, terminator, level)
        result.reordered = True
    else:
        result.algorithm = "file-order"
    result.seconds = time.perf_counter() - started
    _RESULTS.setdefault(func, []).append(result)
    return result


def schedule_for_memory(module: Operation, algorithm: str = "auto", time_budget: float = 1.0,
                        inputs_as_activations: bool = False) -> list:
    """Schedule every function of `module`; the :class:`ScheduleResult`s."""
    from palimpsest.ir.diagnostics import DiagnosticError
    from palimpsest.passes.liveness import functions_of

    if algorithm not in ALGORITHMS:
        raise DiagnosticError(f"schedule-for-memory: unknown algorithm '{algorithm}' "
                              f"(one of {', '.join(ALGORITHMS)})", module.loc)
    results = []
    for func in functions_of(module):
        found = schedule_function(func, algorithm, time_budget, inputs_as_activations)
        if found is not None:
            results.append(found)
    return results


@register_pass
class ScheduleForMemory(MemorySearchPass):
    name = "schedule-for-memory"
    summary = ("reorder each function's ops (a valid order: data, effects) so fewer bytes "
               "are live at once; never worse than the order it had")

    enabled: bool = True

    def apply(self, module: Operation) -> None:
        if self.enabled:
            schedule_for_memory(module, self.algorithm, self.time_budget,
                                self.inputs_as_activations)


# ---------------------------------------------------------------------------- order reuse

class OrderKeeper:
    """Carries the order the first run of the pass found to later compiles of the same
    model (a session's re-plans at other shapes), so they skip the search.

    Made before the first compile from the graph-level function and its fresh clone (same
    ops, same order); `after_pass` goes to the PassManager: after the first
    `schedule-for-memory` it reorders the *original* function the way the clone was
    ordered. Ops the passes before it replaced (canonicalize's folds) go just before the
    first user of what they made. Later clones of the original then start in that order
    and need no graph-level scheduling."""

    def __init__(self, original_func: Operation, clone_func: Operation):
        self.original = original_func
        self.pairs = list(zip(clone_func.regions[0].blocks[0].ops,
                              original_func.regions[0].blocks[0].ops))
        self.clone = clone_func
        self.done = False

    def after_pass(self, pass_, module) -> None:
        if self.done or pass_.name != "schedule-for-memory":
            return
        self.done = True
        results = _RESULTS.get(self.clone)
        if not results or not results[-1].reordered:
            return
        position = {op: i for i, op in enumerate(self.clone.regions[0].blocks[0].ops)}
        priority = {}
        for clone_op, original in self.pairs:
            if clone_op.parent is not None and clone_op in position:
                priority[original] = position[clone_op]
        _reorder_by_priority(self.original.regions[0].blocks[0], priority)


def _reorder_by_priority(block, priority: dict) -> None:
    """Order `block`'s ops by `priority` (an op without one takes its first user's), as
    far as data and effects allow (a topological sort; file order breaks ties)."""
    import heapq

    ops = list(block.ops)
    terminator = ops[-1] if ops and ops[-1].has_trait(IsTerminator) else None
    body = ops[:-1] if terminator is not None else ops
    index = {op: i for i, op in enumerate(body)}
    home = {}
    for op in body:
        for result in op.results:
            for user, _ in result.uses:
                while user is not None and user.parent is not block:
                    user = user.parent_op
                home.setdefault(op, []).append(user)
    rank = {}
    for op in reversed(body):
        if op in priority:
            rank[op] = priority[op]
        else:
            users = [rank[u] for u in home.get(op, ()) if u in rank]
            rank[op] = min(users) - 0.5 if users else len(body) + index[op]
    preds = {op: set() for op in body}
    last_effect = None
    for op in body:
        for value in _outer_uses(op, block):
            owner = value.owner
            if isinstance(owner, Operation) and owner in index:
                preds[op].add(owner)
        if _effectful(op):
            if last_effect is not None:
                preds[op].add(last_effect)
            last_effect = op
    waiting = {op: len(preds[op]) for op in body}
    succs = {op: [] for op in body}
    for op, ps in preds.items():
        for p in ps:
            succs[p].append(op)
    heap = [(rank[op], index[op], op) for op in body if not waiting[op]]
    heapq.heapify(heap)
    order = []
    while heap:
        _, _, op = heapq.heappop(heap)
        order.append(op)
        for s in succs[op]:
            waiting[s] -= 1
            if not waiting[s]:
                heapq.heappush(heap, (rank[s], index[s], s))
    if len(order) != len(body):  # (a cycle cannot happen in SSA; keep the block as is)
        return
    for op in ops:
        op.detach()
    for op in order:
        block.append(op)
    if terminator is not None:
        block.append(terminator)


# plan-memory's search budget on a re-plan (seconds): the greedy planners always run,
# and reach the bound on every corpus model; a reordered order's tighter bound can leave
# them short, and the whole default 1 s search would then be the re-plan's cost
REPLAN_BUDGET = 0.01


def _replan_budget(pass_):
    """`pass_`, with plan-memory's search capped at REPLAN_BUDGET."""
    from dataclasses import replace

    if pass_.name == "plan-memory" and pass_.time_budget > REPLAN_BUDGET:
        return replace(pass_, time_budget=REPLAN_BUDGET)
    return pass_


def reuse_order(owner, original_module: Operation, clone_module: Operation, function,
                pipeline: list):
    """For a compile of `clone_module` (a fresh clone of `original_module`) by `owner`
    (a session): (the pipeline to run, the PassManager's `after_pass`). The first
    compile schedules and carries its graph-level order back to the original; later
    ones start from that order, run no scheduling and cap plan-memory's search at
    REPLAN_BUDGET (a re-plan stays cheap; its arena may then sit above the bound)."""
    if not any(p.name == "schedule-for-memory" for p in pipeline):
        return pipeline, None
    if getattr(owner, "_schedule_reused", False):
        return [_replan_budget(p) for p in pipeline if p.name != "schedule-for-memory"], None
    from palimpsest.backends.binding import find_function

    owner._schedule_reused = True
    keeper = OrderKeeper(find_function(original_module, function),
                         find_function(clone_module, function))
    return pipeline, keeper.after_pass
