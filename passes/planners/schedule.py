"""Memory-aware operator scheduling: an order of a DAG's nodes with the least peak of
live bytes. Plain data in, an order out; nothing here knows the IR (the
`schedule-for-memory` pass builds a :class:`ScheduleProblem` from a block).

The model. Node `v` (numbered in file order, which must be a topological order):

- `preds[v]`: the nodes that must run before it (data dependencies and side-effect
  ordering, whatever the caller decided);
- `allocs[v]`: the storages it creates (bytes from the moment it runs);
- `uses[v]`: the storages it reads (a storage is freed after the last node using it;
  one nobody uses is freed right after the node that creates it; a `pinned` one is never
  freed; one in `initial` is live from the start);
- `inplace[v]`: `(bytes, candidates)` pairs: a result of `bytes` that reuses the
  storage of a candidate that dies at `v`, so while `v` runs it costs nothing (the
  caller gives it in `allocs` too: after `v` it is live as any storage);
- `workspace[v]`: bytes live only while `v` runs.

While `v` runs the live bytes are: everything live before it, plus its new storages
(less the in-place ones whose candidate dies at `v`), plus its workspace — an operand
dying at `v` still counts, as liveness counts a buffer at its last use. The peak of an
order is the most over its nodes; it is the lower bound the interval planner packs.

Algorithms, each returning a :class:`Schedule`:

- `file_order`;
- XLA's three heuristics: `list_schedule` (greedy: the ready node freeing the most
  bytes net), `dfs_schedule` (post-order DFS visiting first the operands with the most
  other users, then the biggest subgraphs) and `post_order` (post-order DFS in operand
  order);
- `exact_schedule`: divide-and-conquer at cut points (a node every other node is an
  ancestor or a descendant of: every order puts it at the same place, so the parts
  between them are solved apart, and a chain costs nothing); in a part of more than
  300 nodes, windows of the best order around its peaks re-ordered exactly first (fast,
  large gains on long parts); then descending thresholds: is there an order whose peak stays below the best one? —
  a depth-first search over scheduled sets (the live bytes after a set do not depend on
  its order) that keeps the sets from which no completion stays below (dead for every
  lower threshold too) and runs at once any ready node that frees at least what it
  allocates and stays below; "no" proves the best minimal. A lower bound per node (the
  bytes live while it runs in any order) proves it earlier when reached; a time budget
  bounds the whole;
- `schedule(problem, "auto")`: the best of all of them, `proven` when the exact
  search finished (or the bound was reached). Ties keep the earlier candidate, file
  order first, so an order is changed only for a strictly lower peak.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

__all__ = [
    "ScheduleProblem", "Schedule", "SCHEDULERS", "schedule", "peak_of", "is_valid_order",
    "file_order", "list_schedule", "dfs_schedule", "post_order", "exact_schedule",
    "lower_bound", "cut_points", "only_order",
]


@dataclass
class ScheduleProblem:
    """A DAG of `n` nodes, in a valid (file) order, and what each costs in memory."""

    preds: list                                  # [set of node ids]
    allocs: list                                 # [list of storage ids]
    uses: list                                   # [set of storage ids]
    sizes: dict                                  # storage id -> bytes
    inplace: list = None                         # [list of (bytes, tuple of storages)]
    workspace: list = None                       # [bytes]
    pinned: frozenset = frozenset()              # storages never freed
    initial: tuple = ()                          # storages live from the start
    names: list = None                           # [str], for messages

    def __post_init__(self):
        n = len(self.preds)
        self.preds = [set(p) for p in self.preds]
        self.uses = [set(u) for u in self.uses]
        self.allocs = [list(a) for a in self.allocs]
        if self.inplace is None:
            self.inplace = [[] for _ in range(n)]
        if self.workspace is None:
            self.workspace = [0] * n
        self.pinned = frozenset(self.pinned)
        if not (len(self.allocs) == len(self.uses) == len(self.inplace)
                == len(self.workspace) == n):
            raise ValueError("preds, allocs, uses, inplace and workspace differ in length")
        for v, ps in enumerate(self.preds):
            for u in ps:
                if not 0 <= u < v:
                    raise ValueError(f"node {v} depends on node {u}: the given order must "
                                     f"be topological")
        self.succs = [[] for _ in range(n)]
        for v, ps in enumerate(self.preds):
            for u in sorted(ps):
                self.succs[u].append(v)
        self.users: dict = {}
        for v, us in enumerate(self.uses):
            for s in us:
                self.users.setdefault(s, []).append(v)

    @property
    def n(self) -> int:
        return len(self.preds)


@dataclass
class Schedule:
    order: list          # node ids
    peak: int            # the most live bytes while a node runs
    algorithm: str
    proven: bool = False  # minimal over all valid orders
    seconds: float = 0.0
    candidates: dict = field(default_factory=dict)  # algorithm -> peak (auto)


# ---------------------------------------------------------------------------- simulation

class _State:
    """Live bytes of a partial schedule, updated node by node (and undone, for the
    search)."""

    __slots__ = ("p", "remaining", "live")

    def __init__(self, p: ScheduleProblem):
        self.p = p
        self.remaining = {s: len(us) for s, us in p.users.items()}
        self.live = sum(p.sizes.get(s, 0) for s in p.initial)

    def _dies(self, s, v) -> bool:
        return s not in self.p.pinned and self.remaining.get(s, 0) == 1 and \
            s in self.p.uses[v]

    def during(self, v) -> int:
        p = self.p
        sizes = p.sizes
        cost = self.live + p.workspace[v]
        for s in p.allocs[v]:
            cost += sizes.get(s, 0)
        for nbytes, candidates in p.inplace[v]:
            if any(self._dies(c, v) for c in candidates):
                cost -= nbytes
        return cost

    def delta(self, v) -> int:
        """Live bytes after `v` minus before it."""
        p = self.p
        sizes = p.sizes
        change = 0
        for s in p.allocs[v]:
            if s not in p.pinned and not p.users.get(s):
                continue
            change += sizes.get(s, 0)
        for s in p.uses[v]:
            if self._dies(s, v):
                change -= sizes.get(s, 0)
        return change

    def apply(self, v) -> None:
        self.live += self.delta(v)
        for s in self.p.uses[v]:
            self.remaining[s] -= 1

    def undo(self, v) -> None:
        for s in self.p.uses[v]:
            self.remaining[s] += 1
        self.live -= self.delta(v)


def peak_of(problem: ScheduleProblem, order) -> int:
    """The peak of live bytes of `order` (assumed valid)."""
    state = _State(problem)
    peak = state.live
    for v in order:
        peak = max(peak, state.during(v))
        state.apply(v)
    return peak


def only_order(problem: ScheduleProblem) -> bool:
    """Whether file order is the only valid order (each node needs the one before it)."""
    return all(v - 1 in ps for v, ps in enumerate(problem.preds) if v)


def is_valid_order(problem: ScheduleProblem, order) -> bool:
    """Every node exactly once, each after its predecessors."""
    if sorted(order) != list(range(problem.n)):
        return False
    position = {v: i for i, v in enumerate(order)}
    return all(position[u] < position[v] for v in range(problem.n) for u in problem.preds[v])


# ---------------------------------------------------------------------------- heuristics

def _result(problem, order, algorithm, started) -> Schedule:
    return Schedule(list(order), peak_of(problem, order), algorithm,
                    seconds=time.perf_counter() - started)


def file_order(problem: ScheduleProblem) -> Schedule:
    return _result(problem, range(problem.n), "file-order", time.perf_counter())


def list_schedule(problem: ScheduleProblem) -> Schedule:
    """XLA's list scheduler: among the ready nodes, the one that frees the most bytes
    net (freed − allocated), then the earliest in file order."""
    import heapq

    started = time.perf_counter()
    p = problem
    state = _State(p)
    waiting = [len(ps) for ps in p.preds]
    ready = [v for v in range(p.n) if not waiting[v]]
    order = []
    # priorities change as storages lose users: recompute for the ready set each step,
    # with a heap keyed by the value it had when pushed (lazy re-evaluation)
    heap = [(state.delta(v), v) for v in ready]
    heapq.heapify(heap)
    done = [False] * p.n
    while heap:
        key, v = heapq.heappop(heap)
        if done[v]:
            continue
        current = state.delta(v)
        if current != key:
            heapq.heappush(heap, (current, v))
            continue
        done[v] = True
        order.append(v)
        touched = set()
        for s in p.uses[v]:
            touched.update(p.users.get(s, ()))
        state.apply(v)
        for w in p.succs[v]:
            waiting[w] -= 1
            if not waiting[w]:
                heapq.heappush(heap, (state.delta(w), w))
        for w in touched:  # their delta may have dropped: push a fresh key
            if not done[w] and not waiting[w]:
                heapq.heappush(heap, (state.delta(w), w))
    return _result(p, order, "list", started)


def _sinks(problem):
    return [v for v in range(problem.n) if not problem.succs[v]]


def _post_order(problem, roots, key=None) -> list:
    """Iterative post-order DFS from `roots`, visiting predecessors sorted by `key`
    (their order of first use when None)."""
    p = problem
    seen = [False] * p.n
    order = []
    for root in roots:
        if seen[root]:
            continue
        seen[root] = True
        stack = [(root, iter(_ordered_preds(p, root, key)))]
        while stack:
            v, it = stack[-1]
            for u in it:
                if not seen[u]:
                    seen[u] = True
                    stack.append((u, iter(_ordered_preds(p, u, key))))
                    break
            else:
                stack.pop()
                order.append(v)
    return order


def _ordered_preds(p, v, key):
    preds = sorted(p.preds[v])
    return preds if key is None else sorted(preds, key=key)


def post_order(problem: ScheduleProblem) -> Schedule:
    """XLA's post-order scheduler: a DFS post-order from the sinks (in file order),
    predecessors in file order."""
    started = time.perf_counter()
    return _result(problem, _post_order(problem, _sinks(problem)), "post-order", started)


def dfs_schedule(problem: ScheduleProblem) -> Schedule:
    """XLA's DFS scheduler: a post-order DFS that visits first the predecessors with
    the most extra users, then those with the largest cumulative bytes (their own
    allocations plus their predecessors', counted along every path, as XLA does)."""
    started = time.perf_counter()
    p = problem
    total = [0] * p.n
    extra = [0] * p.n
    for v in range(p.n):  # file order is topological
        own = sum(p.sizes.get(s, 0) for s in p.allocs[v])
        total[v] = own + sum(total[u] for u in p.preds[v])
        extra[v] = sum(max(len(p.users.get(s, ())) - 1, 0) for s in p.allocs[v])
    order = _post_order(p, _sinks(p), key=lambda u: (-extra[u], -total[u], u))
    return _result(p, order, "dfs", started)


# ---------------------------------------------------------------------------- bounds

def _closures(problem):
    """(ancestors, descendants) of every node as bit sets (ints)."""
    p = problem
    anc = [0] * p.n
    for v in range(p.n):
        bits = 0
        for u in p.preds[v]:
            bits |= anc[u] | (1 << u)
        anc[v] = bits
    desc = [0] * p.n
    for v in range(p.n - 1, -1, -1):
        bits = 0
        for w in p.succs[v]:
            bits |= desc[w] | (1 << w)
        desc[v] = bits
    return anc, desc


def cut_points(problem: ScheduleProblem, closures=None) -> list:
    """Nodes comparable to every other node, in file order: every valid order has the
    same nodes before each of them."""
    anc, desc = closures or _closures(problem)
    n = problem.n
    return [v for v in range(n) if anc[v].bit_count() + desc[v].bit_count() == n - 1]


def _node_bounds(problem, closures=None) -> list:
    """Per node, bytes live while it runs in every valid order: its workspace, its new
    storages (less those that may be in place), and every storage created by it or an
    ancestor and used by it or a descendant (or pinned)."""
    p = problem
    anc, desc = closures or _closures(p)
    everyone = (1 << p.n) - 1
    bounds = [p.workspace[v] - sum(nbytes for nbytes, _ in p.inplace[v]) for v in range(p.n)]
    made_by = {}
    for v in range(p.n):
        for s in p.allocs[v]:
            made_by[s] = v
    for s, size in p.sizes.items():
        if not size:
            continue
        made = made_by.get(s)
        if made is None and s not in p.initial:
            continue
        after_made = everyone if made is None else desc[made] | (1 << made)
        if s in p.pinned:
            needed = everyone
        else:
            needed = 0 if made is None else 1 << made
            for u in p.users.get(s, ()):
                needed |= anc[u] | (1 << u)
        mask = after_made & needed
        while mask:
            low = mask & -mask
            bounds[low.bit_length() - 1] += size
            mask ^= low
    return [max(b, 0) for b in bounds]


def lower_bound(problem: ScheduleProblem) -> int:
    """No valid order has a lower peak than this."""
    return max(_node_bounds(problem), default=0)


# ---------------------------------------------------------------------------- exact

class _Timeout(Exception):
    pass


class _Limit(Exception):
    pass


def exact_schedule(problem: ScheduleProblem, time_budget: float = 1.0,
                   upper: Schedule | None = None) -> Schedule:
    """The least-peak order, proven when the search ends within `time_budget` seconds
    (else the best found, `proven=False`). `upper`: a schedule to beat (a heuristic's)."""
    started = time.perf_counter()
    deadline = started + time_budget
    p = problem
    if p.n == 0:
        return Schedule([], peak_of(p, []), "exact", True, 0.0)
    closures = _closures(p)
    bounds = _node_bounds(p, closures)
    floor = max(bounds)
    if upper is None:
        upper = min((list_schedule(p), dfs_schedule(p), file_order(p)), key=lambda s: s.peak)
    cuts = set(cut_points(p, closures))
    # segments: runs of non-cut nodes between cut points, cut points alone
    segments, current = [], []
    for v in range(p.n):  # file order: cut points split it the same way every order does
        if v in cuts:
            if current:
                segments.append(current)
                current = []
            segments.append([v])
        else:
            current.append(v)
    if current:
        segments.append(current)
    position = {v: i for i, v in enumerate(upper.order)}
    state = _State(p)
    order, peak, proven = [], state.live, True
    for segment in segments:
        # the upper bound's order restricted to this segment is a valid segment order
        seed = sorted(segment, key=position.__getitem__)
        if len(segment) == 1:
            best_order = seed
        else:
            best_order, complete = _search_segment(p, state, segment, seed, bounds,
                                                   max(floor, peak), deadline)
            proven = proven and complete
        for v in best_order:
            peak = max(peak, state.during(v))
            state.apply(v)
            order.append(v)
    result = Schedule(order, peak_of(p, order), "exact", proven,
                      time.perf_counter() - started)
    if result.peak > upper.peak:  # (cannot happen: each segment starts from upper's)
        return Schedule(upper.order, upper.peak, "exact", False, result.seconds)
    if result.peak <= floor:
        result.proven = True
    return result


def _search_segment(p, state, segment, seed, bounds, floor, deadline):
    """The least-peak order of `segment` (every node before it scheduled in `state`).
    A part of more than `_WHOLE` nodes first has windows of the seed order re-ordered
    around its peaks (:func:`_improve_windows`, up to half the time), then by descending
    thresholds: find an order whose peak is below the best one so far, until none exists
    (proven) or the best reaches `floor` (no lower whole peak is possible). Returns
    (best order, whether it is proven minimal for the whole problem's purpose)."""
    level = max(floor, max(bounds[v] for v in segment), 0)
    best_order = list(seed)
    if len(segment) > _WHOLE:
        now = time.perf_counter()
        best_order = _improve_windows(p, state, best_order, level,
                                      now + (deadline - now) / 2)
    search = _Threshold(p, state, segment)
    best = search.peak_of(best_order)
    while best > level:
        try:
            found = search.below(best, deadline)
        except _Timeout:
            return best_order, False
        if found is None:
            return best_order, True
        peak = search.peak_of(found)
        if peak >= best:  # (cannot happen: every node of it ran below `best`)
            return best_order, False
        best_order, best = found, peak
    return best_order, True


_WHOLE = 300        # a longer part is improved window by window first
_WINDOWS = (40, 80, 160)  # window widths around a peak, tried in turn
_WINDOW_LIMIT = 30000     # sets one window's search may visit


def _improve_windows(p, state, order, level, deadline):
    """Lower the peak of `order` (a segment's, run from `state`) by re-ordering windows
    around its peaks: the nodes of a window of a valid order can run in any valid order
    of their own between the same prefix and suffix, which then see the same live
    bytes, so a window whose own peak drops below the order's peak removes the peaks in
    it and changes nothing else. When no window lowers a peak, the order is returned."""
    order = list(order)
    while time.perf_counter() < deadline:
        profile = []
        probe = _Snapshot(state)
        for v in order:
            profile.append(probe.state.during(v))
            probe.state.apply(v)
        probe.restore()
        peak = max(profile)
        if peak <= level:
            return order
        improved = False
        for k in [i for i, d in enumerate(profile) if d == peak]:
            if profile[k] < peak:
                continue  # (already lowered by an earlier window)
            for width in _WINDOWS:
                start = max(0, k - width // 2)
                window = order[start:start + width]
                snapshot = _Snapshot(state)
                for v in order[:start]:
                    snapshot.state.apply(v)
                try:
                    search = _Threshold(p, snapshot.state, window)
                    found = search.below(peak, deadline, _WINDOW_LIMIT)
                except (_Timeout, _Limit):
                    found = None
                finally:
                    snapshot.restore()
                if time.perf_counter() > deadline:
                    return order
                if found is not None:
                    order[start:start + len(window)] = found
                    for i in range(start, start + len(window)):
                        profile[i] = min(profile[i], peak - 1)  # (recomputed next round)
                    improved = True
                    break
        if not improved:
            return order
    return order


class _Snapshot:
    """`state` with a way back: what is applied to `.state` is undone by `restore`."""

    def __init__(self, state):
        self.state = state
        self.live = state.live
        self.remaining = dict(state.remaining)

    def restore(self):
        self.state.live = self.live
        self.state.remaining = self.remaining


class _Threshold:
    """Is there an order of `segment` whose peak stays below a threshold? A depth-first
    search over scheduled sets (the live bytes after a set do not depend on its order):

    - a set from which no completion stays below a threshold stays dead for every lower
      one, so the dead sets are kept from one threshold to the next;
    - a ready node that runs below the threshold and frees at least what it allocates is
      scheduled at once, without branching (moved to the front of any order that stays
      below, it raises no other node's live bytes: a node frees at least as much the
      later it runs);
    - so is a ready node followed by a successor that waits only for it, when both run
      below the threshold, the successor frees at least what it allocates and the two
      together too (moved to the front, the pair, or the successor alone where the node
      already ran, raise nothing);
    - the other ready nodes are tried freeing the most first, then the least live bytes
      while they run."""

    def __init__(self, p, state, segment):
        self.segment = segment
        self.position = index = {v: i for i, v in enumerate(segment)}
        members = set(segment)
        self.succs = [[index[w] for w in p.succs[v] if w in members] for v in segment]
        self.preds_count = [sum(1 for u in p.preds[v] if u in members) for v in segment]
        ids: dict = {}

        def sid(s):
            found = ids.get(s)
            if found is None:
                found = ids[s] = len(ids)
            return found

        sizes = p.sizes
        self.alloc, self.persist, self.work, self.uses, self.inplace = [], [], [], [], []
        for v in segment:
            self.alloc.append(sum(sizes.get(s, 0) for s in p.allocs[v]))
            self.persist.append(sum(sizes.get(s, 0) for s in p.allocs[v]
                                    if s in p.pinned or p.users.get(s)))
            self.work.append(p.workspace[v])
            self.uses.append([sid(s) for s in p.uses[v] if s not in p.pinned])
            self.inplace.append([(nbytes, [sid(c) for c in candidates
                                           if c in p.uses[v] and c not in p.pinned])
                                 for nbytes, candidates in p.inplace[v]])
        self.size = [0] * len(ids)
        self.initial_remaining = [0] * len(ids)
        for s, k in ids.items():
            self.size[k] = sizes.get(s, 0)
            self.initial_remaining[k] = state.remaining.get(s, 0)
        self.initial_live = state.live
        self.dead: set = set()

    def peak_of(self, order) -> int:
        remaining = list(self.initial_remaining)
        live, peak = self.initial_live, 0
        for v in order:
            i = self.position[v]
            peak = max(peak, self._during(i, live, remaining))
            live += self._delta(i, remaining)
            for s in self.uses[i]:
                remaining[s] -= 1
        return peak

    def _during(self, i, live, remaining):
        cost = live + self.work[i] + self.alloc[i]
        for nbytes, candidates in self.inplace[i]:
            for c in candidates:
                if remaining[c] == 1:
                    cost -= nbytes
                    break
        return cost

    def _delta(self, i, remaining):
        change = self.persist[i]
        size = self.size
        for s in self.uses[i]:
            if remaining[s] == 1:
                change -= size[s]
        return change

    def below(self, threshold, deadline, limit=None):
        """An order (of the segment's nodes) whose peak is below `threshold`, or None
        when there is none; raises _Timeout past `deadline`, _Limit past `limit` sets
        (the dead sets found stay valid)."""
        m = len(self.segment)
        full = (1 << m) - 1
        dead = self.dead
        remaining = list(self.initial_remaining)
        waiting = list(self.preds_count)
        succs, uses, size = self.succs, self.uses, self.size
        path = []
        counter = [0]
        live = [self.initial_live]

        base = [w + a for w, a in zip(self.work, self.alloc)]
        persist = self.persist
        inplace = [entries or None for entries in self.inplace]
        used_by = [frozenset(used) for used in uses]

        def pair_of(options, now, threshold):
            """An option `i` with a successor `j` waiting only for it such that, `i`
            then `j`, both stay below the threshold, `j` frees at least what it
            allocates and the two together too: moved to the front of any order that
            stays below, they raise no other node's live bytes (neither the pair nor
            `j` alone, wherever `i` was), so they run now."""
            for option in options:
                change, _, i = option
                for j in succs[i]:
                    if waiting[j] != 1:
                        continue
                    consumed = used_by[i]  # (what `i` consumes loses a user first)
                    during = now + change + base[j]
                    entries = inplace[j]
                    if entries is not None:
                        for nbytes, candidates in entries:
                            for c in candidates:
                                if remaining[c] - (c in consumed) == 1:
                                    during -= nbytes
                                    break
                    if during >= threshold:
                        continue
                    second = persist[j]
                    for s in uses[j]:
                        if remaining[s] - (s in consumed) == 1:
                            second -= size[s]
                    if second <= 0 and change + second <= 0:
                        return option
            return None

        def visit(mask, ready):
            if mask == full:
                return True
            if mask in dead:
                return False
            counter[0] += 1
            if counter[0] & 255 == 0:
                if time.perf_counter() > deadline:
                    raise _Timeout
                if limit is not None and counter[0] > limit:
                    raise _Limit
            now = live[0]
            options = []
            for i in ready:
                during = now + base[i]
                entries = inplace[i]
                if entries is not None:
                    for nbytes, candidates in entries:
                        for c in candidates:
                            if remaining[c] == 1:
                                during -= nbytes
                                break
                if during >= threshold:
                    continue
                change = persist[i]
                for s in uses[i]:
                    if remaining[s] == 1:
                        change -= size[s]
                if change <= 0:
                    options = [(change, during, i)]
                    break
                options.append((change, during, i))
            else:
                if len(options) > 1:
                    options.sort()
                    pair = pair_of(options, now, threshold)
                    if pair is not None:
                        options = [pair]
            for change, _, i in options:
                child = mask | (1 << i)
                if child in dead:
                    continue
                live[0] = now + change
                for s in uses[i]:
                    remaining[s] -= 1
                path.append(i)
                next_ready = [j for j in ready if j != i]
                for j in succs[i]:
                    waiting[j] -= 1
                    if not waiting[j]:
                        next_ready.append(j)
                found = visit(child, next_ready)
                for j in succs[i]:
                    waiting[j] += 1
                if found:
                    return True
                path.pop()
                for s in uses[i]:
                    remaining[s] += 1
                live[0] = now
            dead.add(mask)
            return False

        import sys

        recursion = sys.getrecursionlimit()
        sys.setrecursionlimit(max(recursion, 4 * m + 1000))
        try:
            if visit(0, [i for i in range(m) if not waiting[i]]):
                return [self.segment[i] for i in path]
            return None
        finally:
            sys.setrecursionlimit(recursion)


# ---------------------------------------------------------------------------- driver

SCHEDULERS = {
    "file-order": file_order,
    "list": list_schedule,
    "dfs": dfs_schedule,
    "post-order": post_order,
}
ALGORITHMS = ("auto", "exact", "list", "dfs", "post-order", "file-order")


def schedule(problem: ScheduleProblem, algorithm: str = "auto",
             time_budget: float = 1.0) -> Schedule:
    """An order for `problem` by `algorithm` (one of :data:`ALGORITHMS`), never with a
    higher peak than file order: a heuristic that does worse gives file order back.
    `auto` runs the three heuristics and the exact search and keeps the best."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown scheduling algorithm {algorithm!r}; choose one of "
                         f"{', '.join(ALGORITHMS)}")
    started = time.perf_counter()
    base = file_order(problem)
    found = {"file-order": base}
    if only_order(problem):  # a chain: nothing to choose, and it is minimal
        return Schedule(base.order, base.peak, "file-order", True,
                        time.perf_counter() - started, {"file-order": base.peak})
    if algorithm in ("auto", "exact"):
        for name in ("list", "dfs", "post-order"):
            found[name] = SCHEDULERS[name](problem)
        upper = min(found.values(), key=lambda s: s.peak)  # first best: file order on ties
        remaining = max(time_budget - (time.perf_counter() - started), 0.0)
        found["exact"] = exact_schedule(problem, remaining, upper)
        candidates = [found["file-order"], found["list"], found["dfs"],
                      found["post-order"], found["exact"]]
    elif algorithm != "file-order":
        found[algorithm] = SCHEDULERS[algorithm](problem)
        candidates = [base, found[algorithm]]
    else:
        candidates = [base]
    best = min(candidates, key=lambda s: s.peak)  # min keeps the first on ties
    proven = found["exact"].proven if "exact" in found else False
    if not proven and problem.n:
        proven = best.peak <= lower_bound(problem)
    return Schedule(best.order, best.peak, best.algorithm if algorithm == "auto"
                    else algorithm, proven, time.perf_counter() - started,
                    {name: s.peak for name, s in found.items()})
