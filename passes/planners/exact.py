"""Exact / near-optimal planning by branch and bound, in the spirit of MiniMalloc.

MiniMalloc (M. D. Moffitt, "MiniMalloc: A Lightweight Memory Allocator for
Hardware-Accelerated Machine Learning", ASPLOS 2023) decides whether the buffers fit a
given capacity by searching only *canonical* solutions. This module follows its ideas
(the code is our own):

* Canonical solutions. Push every buffer down until it rests on a buffer below it (or
  on 0); that never raises the peak. Then list the buffers by offset: each one sits at
  its *minimum offset*, the highest top among the already listed buffers it conflicts
  with. So the search picks, at each step, which unplaced buffer comes next; its offset
  is forced, and offsets must not decrease along the way (ties: by a static rank).
* Dominance. If some unplaced buffer would fit entirely below the offset chosen for the
  next one, the choice leaves a hole that buffer could drop into: skip it.
* Section inference. Time is cut into sections (the set of live buffers is constant in
  each). In a section, everything still unplaced must stack above both the section's
  floor and the current offset, so ``max(floor, offset) + unplaced bytes`` must fit.
* Decomposition. Where no unplaced buffer crosses a section boundary, the two sides
  are independent subproblems, solved one after the other.
* Restarts. Several static rankings (by section pressure, lifetime, area) are tried in
  turn with a node limit that doubles each round, so one bad ranking cannot stall.

:func:`exact` minimises the peak: it first asks for a plan at the lower bound, then
bisects between the best proven-infeasible capacity and the best plan found, within a
time budget, and returns the best plan so far (``proven`` only when no smaller peak is
possible).
"""

from __future__ import annotations

import random
import sys
import time
from operator import add
from typing import Sequence

from .problem import Problem, align_up

__all__ = ["exact", "decide"]

#: Static rankings tried in turn (keys, larger first): T = largest section total
#: over the buffer's lifetime, W = lifetime width, A = area (size x width), Z = size.
RANKINGS = ("TWA", "WAT", "TAW", "ZWT")
#: From the second round of restarts on, up to this many noisy rankings are added.
RANDOM_RESTARTS = int(__import__("os").environ.get("RR", "2"))


class _Stop(Exception):
    """Raised inside the search when the deadline passes."""


class _NodeLimit(Exception):
    """Raised inside the search when the node limit of one restart is used up."""


class _Search:
    """One decision problem: do the active buffers fit in ``capacity`` bytes?"""

    def __init__(self, problem: Problem, capacity: int, deadline: float):
        self.problem = problem
        self.capacity = capacity
        self.deadline = deadline
        self.nodes_total = 0
        act = problem.active
        m = len(act)
        self.m = m
        self.glob = act  # local index -> problem index
        local = {g: k for k, g in enumerate(act)}
        points, glo, ghi = problem.sections
        self.S = max(len(points) - 1, 0)
        self.size = [problem.size[g] for g in act]
        self.align = [problem.align[g] for g in act]
        self.lo = [glo[g] for g in act]
        self.hi = [ghi[g] for g in act]
        conflicts = problem.conflicts
        self.adj = [[local[h] for h in conflicts[g]] for g in act]
        S = self.S
        totals = [0] * (S + 1)
        cuts = [0] * (S + 1)
        for k in range(m):
            totals[self.lo[k]] += self.size[k]
            totals[self.hi[k]] -= self.size[k]
            # buffer k crosses the boundaries between sections lo..hi-1
            cuts[self.lo[k]] += 1
            cuts[self.hi[k] - 1] -= 1
        run = 0
        for s in range(S + 1):
            run += totals[s]
            totals[s] = run
        run = 0
        for s in range(S + 1):
            run += cuts[s]
            cuts[s] = run
        self.base_totals = totals[:S]
        # base_cuts[s]: buffers live in both section s and s+1.
        self.base_cuts = cuts[:S]
        self.sec_bufs: list[list[int]] = [[] for _ in range(S)]
        for k in range(m):
            for s in range(self.lo[k], self.hi[k]):
                self.sec_bufs[s].append(k)
        width = [problem.end[g] - problem.start[g] for g in act]
        section_max = [max(self.base_totals[self.lo[k]:self.hi[k]]) for k in range(m)]
        keys = {
            "T": section_max,
            "W": width,
            "A": [self.size[k] * width[k] for k in range(m)],
            "Z": self.size,
        }
        self.ranks = []
        for ranking in RANKINGS:
            cols = [keys[c] for c in ranking]
            order = sorted(range(m), key=lambda k: tuple(-c[k] for c in cols) + (k,))
            rank = [0] * m
            for r, k in enumerate(order):
                rank[k] = r
            self.ranks.append(rank)
        self._width = width

    def random_rank(self, rng) -> list[int]:
        """A ranking by lifetime width with multiplicative noise, for restarts."""
        width, size = self._width, self.size
        noisy = [(-width[k] * rng.lognormvariate(0.0, 0.5), -size[k], k) for k in range(self.m)]
        noisy.sort()
        rank = [0] * self.m
        for r, (_, _, k) in enumerate(noisy):
            rank[k] = r
        return rank

    # ----------------------------------------------------------------- one run
    def _reset(self, rank: list[int], node_limit: int) -> None:
        self.rank = rank
        self.node_limit = node_limit
        self.nodes = 0
        self.off = [-1] * self.m
        self.minoff = [0] * self.m
        self.floor = [0] * self.S
        self.total = list(self.base_totals)
        self.cuts = list(self.base_cuts)
        self.trail: list[tuple[list[int], int, int]] = []

    def _undo(self, mark: int) -> None:
        trail = self.trail
        while len(trail) > mark:
            arr, i, old = trail.pop()
            arr[i] = old

    def _partitions(self, bufs: list[int], slo: int, shi: int, cutpoints: list[int]):
        """Split the unplaced buffers of ``bufs`` at the given section boundaries."""
        off, lo, hi = self.off, self.lo, self.hi
        bounds = [slo] + sorted(cutpoints) + [shi]
        parts = []
        for a, b in zip(bounds, bounds[1:]):
            sub = [k for k in bufs if off[k] < 0 and lo[k] < b and hi[k] > a]
            if sub:
                parts.append((sub, a, b))
        return parts

    def _solve_parts(self, parts) -> bool:
        for sub, a, b in parts:
            if not self._search(sub, a, b, -1, -1):
                return False
        return True

    def _raise_floors(self, raised: list[int]) -> bool:
        """Unallocated floor: in each section, nothing unplaced can go below the lowest
        minimum offset of the unplaced buffers live there. Raise floors to that; False
        if a section then overflows."""
        lo, hi, off, minoff = self.lo, self.hi, self.off, self.minoff
        floor, total, trail, sec_bufs = self.floor, self.total, self.trail, self.sec_bufs
        C = self.capacity
        seen = set()
        for j in raised:
            mj = minoff[j]
            for s in range(lo[j], hi[j]):
                # Only a section whose floor is below j's new minimum can rise.
                if floor[s] >= mj or s in seen:
                    continue
                seen.add(s)
                low = min([minoff[x] for x in sec_bufs[s] if off[x] < 0])
                if low > floor[s]:
                    if low + total[s] > C:
                        return False
                    trail.append((floor, s, floor[s]))
                    floor[s] = low
        return True

    def _search(self, bufs: list[int], slo: int, shi: int, last_off: int, last_rank: int) -> bool:
        self.nodes += 1
        if self.nodes > self.node_limit:
            raise _NodeLimit
        if not self.nodes & 127 and time.perf_counter() > self.deadline:
            raise _Stop
        off, minoff, size, rank = self.off, self.minoff, self.size, self.rank
        cand = [(minoff[k], rank[k], k) for k in bufs if off[k] < 0]
        if not cand:
            return True
        min_height = min(o + size[k] for o, _, k in cand)
        cand.sort()
        C = self.capacity
        floor, total, cuts = self.floor, self.total, self.cuts
        align, adj, lo, hi, trail = self.align, self.adj, self.lo, self.hi, self.trail
        # Placing a buffer only lowers section totals: below this offset the monotone
        # floor check (offset + unplaced bytes of every section) cannot fail.
        safe_below = C - max(total[slo:shi]) if shi > slo else C
        for o, r, k in cand:
            if o >= min_height:
                break  # dominated: some buffer fits entirely below this offset
            if o < last_off or (o == last_off and r < last_rank):
                continue  # not canonical
            z = size[k]
            top = o + z
            if top > C:
                continue
            mark = len(trail)
            # place k at o
            trail.append((off, k, -1))
            off[k] = o
            a, b = lo[k], hi[k]
            ok = True
            for s in range(a, b):
                trail.append((floor, s, floor[s]))
                floor[s] = top
                t = total[s] - z
                trail.append((total, s, total[s]))
                total[s] = t
                if top + t > C:
                    ok = False
            cutpoints = []
            if ok:
                for s in range(a, b - 1):
                    trail.append((cuts, s, cuts[s]))
                    c = cuts[s] - 1
                    cuts[s] = c
                    if c == 0:
                        cutpoints.append(s + 1)
                raised = []
                for j in adj[k]:
                    if off[j] < 0 and minoff[j] < top:
                        trail.append((minoff, j, minoff[j]))
                        aj = align[j]
                        minoff[j] = top if aj == 1 else align_up(top, aj)
                        raised.append(j)
                # monotone floor: all unplaced bytes of a section stack above o
                if o > safe_below and o + max(total[slo:shi]) > C:
                    ok = False
                elif raised:
                    ok = self._raise_floors(raised)
            if ok:
                if cutpoints:
                    found = self._solve_parts(self._partitions(bufs, slo, shi, cutpoints))
                else:
                    found = self._search(bufs, slo, shi, o, r)
                if found:
                    return True
            self._undo(mark)
        return False

    def run(self, rank: list[int], node_limit: int) -> list[int] | None:
        """One restart: offsets (local) if the buffers fit, None if proven not to."""
        self._reset(rank, node_limit)
        try:
            if self.m and max(map(add, self.floor, self.total)) > self.capacity:
                return None
            parts = self._partitions(list(range(self.m)), 0, self.S, [])
            if not parts:
                return list(self.off)
            # Independent parts from the start: cut wherever nothing crosses.
            cutpoints = [s + 1 for s in range(self.S - 1) if self.cuts[s] == 0]
            if cutpoints:
                parts = self._partitions(list(range(self.m)), 0, self.S, cutpoints)
            return list(self.off) if self._solve_parts(parts) else None
        finally:
            self.nodes_total += self.nodes


def decide(
    problem: Problem, capacity: int, deadline: float, stats: dict | None = None, seed: int = 0
):
    """Do the buffers fit in ``capacity`` bytes?

    Returns ``(offsets, status)``: a full offsets list and ``"feasible"``, or None and
    ``"infeasible"`` (proven), or None and ``"timeout"``.
    """
    offsets = [0] * problem.n
    if not problem.active:
        return offsets, "feasible"
    if problem.lower_bound > capacity:
        return None, "infeasible"
    search = _Search(problem, capacity, deadline)
    limit = max(64, search.m)
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, 4 * search.m + 1000))
    rng = random.Random(seed)
    rounds = 0
    try:
        while True:
            ranks = list(search.ranks)
            ranks += [search.random_rank(rng) for _ in range(min(rounds, RANDOM_RESTARTS))]
            rounds += 1
            for rank in ranks:
                try:
                    local = search.run(rank, limit)
                except _NodeLimit:
                    continue
                except _Stop:
                    return None, "timeout"
                finally:
                    if stats is not None:
                        stats["nodes"] = stats.get("nodes", 0) + search.nodes
                if local is None:
                    return None, "infeasible"
                for k, g in enumerate(search.glob):
                    offsets[g] = local[k]
                return offsets, "feasible"
            if time.perf_counter() > deadline:
                return None, "timeout"
            limit *= 2
    finally:
        sys.setrecursionlimit(old_limit)


def exact(
    problem: Problem,
    deadline: float,
    incumbent: Sequence[int],
    stats: dict | None = None,
) -> tuple[list[int], bool]:
    """Minimise the peak within the deadline, starting from a known plan.

    Returns ``(offsets, proven)``: the best plan found (never worse than
    ``incumbent``) and whether it is proven optimal.
    """
    best = list(incumbent)
    hi = problem.peak_of(best)
    proven_lo = problem.lower_bound  # no plan below this
    soft_lo = proven_lo  # below this we gave up (time), but have no proof
    first = True
    while soft_lo < hi:
        now = time.perf_counter()
        remaining = deadline - now
        if remaining <= 0:
            break
        if first:
            capacity = soft_lo
            slice_end = now + remaining * 0.5
        else:
            capacity = (soft_lo + hi - 1) // 2
            slice_end = deadline if capacity == soft_lo else now + remaining * 0.5
        first = False
        offsets, status = decide(problem, capacity, slice_end, stats)
        if status == "feasible":
            best = offsets
            hi = problem.peak_of(best)
        elif status == "infeasible":
            # A proof: nothing at or below this capacity fits.
            proven_lo = max(proven_lo, capacity + 1)
            soft_lo = max(soft_lo, proven_lo)
        else:
            soft_lo = capacity + 1
    if stats is not None:
        stats["proven_lower"] = proven_lo
    return best, hi <= proven_lo
