"""The branch-and-bound search behind the exact planner (see :mod:`.exact`).

:class:`Search` answers one question: do the buffers fit in ``capacity`` bytes? It
works on *canonical* solutions, as MiniMalloc does: push every buffer down until it
rests on another (or on 0) and list the buffers by offset; then each buffer sits at
its *seat*, the highest top among the buffers already placed in its lifetime, and a
search only has to choose the order. Two strategies share the state and pruning:

* ``canonical`` (MiniMalloc's): place next any buffer whose seat is not below the
  last offset used (ties broken by a static rank), never one whose seat is at or above
  the top some other unplaced buffer could reach (that would leave a hole it could
  drop into: a dominated solution).
* ``holes``: take the lowest floor over time; of the sections at that floor, the one
  with the fewest choices; branch on the buffer that covers that byte (candidates sit
  exactly there), or on leaving it empty when the section has slack. Buffers with the
  same lifetime stacked on each other, or identical ones, are taken in rank order only.
  The candidates are tried in *skyline* order (best fit, as in strip packing): first
  those that fill the width of the valley around the hole exactly, then those that
  touch a wall of it and come level with that wall, then the rest (by rank).

Both prune with *section inference*: time is cut into sections (the set of live
buffers is constant in each), and in each section the bytes still unplaced must fit
above its floor; the floor is raised to the lowest seat of the unplaced buffers live
there (MiniMalloc's unallocated floor), and in the canonical strategy to the current
offset too. The hole strategy also checks *energy*: in a section, the unplaced buffers
seated at or above any level v must fit between v and the capacity. Where no unplaced
buffer crosses a section boundary the two sides are solved as independent subproblems
(dynamic decomposition). All changes go on a trail
and are undone on backtracking.
"""

from __future__ import annotations

import time
from operator import add

from .problem import Problem, align_up

__all__ = ["Search", "Stop", "NodeLimit", "RANKINGS"]

#: Static rankings (keys compared largest first): T = the largest section total over
#: the buffer's lifetime, W = lifetime width, A = area (size x width), Z = size.
RANKINGS = ("TAW", "ZWT", "TWA", "WAT")


class Stop(Exception):
    """Raised inside the search when the deadline passes."""


class NodeLimit(Exception):
    """Raised inside the search when the node limit of one restart is used up."""


class Search:
    """One decision problem: do the active buffers fit in ``capacity`` bytes?"""

    #: Order the candidates of a hole by how well they fit it (see _skyline_order).
    skyline = True
    #: Energy check in the propagation: the unplaced buffers live in a section whose
    #: seats are at or above a level v must fit between v and the capacity.
    energy = True

    def __init__(self, problem: Problem, capacity: int, deadline: float):
        self.problem = problem
        self.capacity = capacity
        self.deadline = deadline
        self.nodes_total = 0
        # A node costs time linear in the buffers: look at the clock more often when
        # there are many (a clock read is cheap next to a node).
        self.check_mask = 63 if len(problem.active) <= 300 else 3
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
        spans: dict[tuple[int, int], list[int]] = {}
        for k in range(m):
            spans.setdefault((self.lo[k], self.hi[k]), []).append(k)
        self.same_span: list[list[int]] | None = None
        if any(len(g) > 1 for g in spans.values()):
            self.same_span = [
                [j for j in spans[self.lo[k], self.hi[k]] if j != k] for k in range(m)
            ]
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
        # deepest partial plan over all restarts (completed greedily on a timeout)
        self.best_depth = 0
        self.best_partial: list[int] | None = None
        self.depth_step = 1 + m // 200

    def random_rank(self, rng, by_size: bool) -> list[int]:
        """A ranking by area (or size) with multiplicative noise, for restarts."""
        size, width = self.size, self._width
        base = size if by_size else [size[k] * width[k] for k in range(self.m)]
        noisy = sorted(range(self.m), key=lambda k: -base[k] * rng.lognormvariate(0.0, 0.3))
        rank = [0] * self.m
        for r, k in enumerate(noisy):
            rank[k] = r
        return rank

    # ----------------------------------------------------------------- one run
    def _reset(self, rank: list[int], node_limit: int, holes: bool) -> None:
        self.rank = rank
        self.holes = holes
        self.node_limit = node_limit
        self.nodes = 0
        self.off = [-1] * self.m
        self.minoff = [0] * self.m
        self.floor = [0] * self.S
        self.seat = [0] * self.m
        self.total = list(self.base_totals)
        for bufs in self.sec_bufs:
            bufs.sort(key=rank.__getitem__)
        self.cuts = list(self.base_cuts)
        self.trail: list[tuple[list[int], int, int]] = []
        self.placed = [0]

    def _fix(self, fixed: dict[int, int]) -> None:
        off, size, lo, hi = self.off, self.size, self.lo, self.hi
        floor, total, cuts = self.floor, self.total, self.cuts
        for k, o in fixed.items():
            off[k] = o
            top = o + size[k]
            for t in range(lo[k], hi[k]):
                total[t] -= size[k]
                if floor[t] < top:
                    floor[t] = top
            for t in range(lo[k], hi[k] - 1):
                cuts[t] -= 1
        for k in range(self.m):
            if off[k] < 0:
                level = max(floor[lo[k]:hi[k]])
                a = self.align[k]
                self.seat[k] = self.minoff[k] = level if a == 1 else align_up(level, a)

    def _place(self, k: int, offset: int) -> int:
        """Put buffer k at `offset` (undoable); returns the trail mark to undo to."""
        mark = len(self.trail)
        self.trail.append((self.off, k, -1))
        self.off[k] = offset
        self._count_placed()
        return mark

    def _leave_boundaries(self, a: int, b: int) -> list[int]:
        """A buffer placed over sections [a, b) no longer crosses their boundaries
        (undoable); returns the sections where nothing unplaced crosses any more: cut
        points, where the rest splits into parts solved apart."""
        trail, cuts = self.trail, self.cuts
        cutpoints = []
        for s in range(a, b - 1):
            trail.append((cuts, s, cuts[s]))
            c = cuts[s] = cuts[s] - 1
            if c == 0:
                cutpoints.append(s + 1)
        return cutpoints

    def _count_placed(self) -> None:
        """Count one more placed buffer; keep a copy of the deepest partial plan."""
        placed = self.placed
        self.trail.append((placed, 0, placed[0]))
        n = placed[0] = placed[0] + 1
        if n >= self.best_depth + self.depth_step:
            self.best_depth = n
            self.best_partial = list(self.off)

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
            if self.holes:
                if not self._search_holes(sub, a, b):
                    return False
            elif not self._search(sub, a, b, -1, -1):
                return False
        return True

    def _lift(self, t: int, level: int, raised: list[int]) -> None:
        """Raise section t's floor to ``level`` and the seats of buffers live there
        (those are appended to ``raised``)."""
        floor, seat, off, align, trail = self.floor, self.seat, self.off, self.align, self.trail
        trail.append((floor, t, floor[t]))
        floor[t] = level
        for k in self.sec_bufs[t]:
            if seat[k] < level and off[k] < 0:
                trail.append((seat, k, seat[k]))
                a = align[k]
                seat[k] = level if a == 1 else align_up(level, a)
                raised.append(k)

    def _propagate(self, raised: list[int]) -> bool:
        """Unallocated floor, with seats: nothing unplaced in a section can start below
        the lowest seat of the unplaced buffers live there. Lift such floors (which
        may raise more seats) until nothing changes; False if a section overflows, or
        if the buffers of a section seated at or above some level v do not fit
        between v and the capacity (energy)."""
        lo, hi, off, seat = self.lo, self.hi, self.off, self.seat
        floor, total, sec_bufs, C = self.floor, self.total, self.sec_bufs, self.capacity
        lift = self._lift
        while raised:
            # the sections where some raised seat is above the floor (each once)
            todo = set()
            for j in raised:
                sj = seat[j]
                for t in range(lo[j], hi[j]):
                    if floor[t] < sj:
                        todo.add(t)
            raised = []
            if self.energy:
                # Energy: the buffers whose seats are at or above v occupy disjoint
                # bytes of [v, C) in section t, so their sizes sum to at most C - v
                # (a stronger form of floor + total <= C, for every v at once).
                size = self.size
                for t in todo:
                    pend = [(seat[k], size[k]) for k in sec_bufs[t] if off[k] < 0]
                    if len(pend) > 1:
                        pend.sort(reverse=True)
                        acc = 0
                        for sk, z in pend:
                            acc += z
                            if sk + acc > C:
                                return False
            for t in todo:
                f = floor[t]
                low = -1
                for k in sec_bufs[t]:
                    if off[k] < 0:
                        sk = seat[k]
                        if sk <= f:
                            break  # the floor stays
                        if low < 0 or sk < low:
                            low = sk
                else:
                    if low > f:
                        if low + total[t] > C:
                            return False
                        lift(t, low, raised)
        return True

    def _symmetry_ok(self, k: int, level: int) -> bool:
        """Buffers with the same lifetime stacked directly on each other can swap
        places, and identical ones are interchangeable: allow only the stack in rank
        order, and identical buffers in rank order."""
        off, size, rank = self.off, self.size, self.rank
        rk = rank[k]
        for j in self.same_span[k]:
            if off[j] < 0:
                if size[j] == size[k] and rank[j] < rk:
                    return False
            elif off[j] + size[j] == level and rank[j] > rk:
                return False
        return True

    def _skyline_order(self, cands: list[int], s: int, L: int, slo: int, shi: int) -> list[int]:
        """Skyline value ordering (best fit, as in strip packing): the hole at level
        ``L`` is the valley of sections around ``s`` whose floor is ``L``. Try first
        the candidates that fill the valley's width exactly, then those that touch one
        of its walls with a top level with that wall (the skyline stays flat), then
        the others; ties by the static rank (candidates come in rank order)."""
        floor, total, lo, hi, size = self.floor, self.total, self.lo, self.hi, self.size
        va = s
        while va > slo and floor[va - 1] == L and total[va - 1]:
            va -= 1
        vb = s + 1
        while vb < shi and floor[vb] == L and total[vb]:
            vb += 1
        left = floor[va - 1] if va > slo and total[va - 1] else -1
        right = floor[vb] if vb < shi and total[vb] else -1
        scored = []
        for r, k in enumerate(cands):
            top = L + size[k]
            a, b = lo[k] == va, hi[k] == vb
            score = 0
            if a and b:
                score = 6
            else:
                if a:
                    score += 2 if top == left or left < 0 else 1
                if b:
                    score += 2 if top == right or right < 0 else 1
            scored.append((-score, r, k))
        scored.sort()
        return [k for _, _, k in scored]

    def _search_holes(self, bufs: list[int], slo: int, shi: int) -> bool:
        """Fill the lowest hole: a section at the lowest floor, and the buffer that
        covers that byte there (or none: the byte is wasted). Of the sections at the
        lowest floor, branch on the one with the fewest choices."""
        self.nodes += 1
        if self.nodes > self.node_limit:
            raise NodeLimit
        if not self.nodes & self.check_mask and time.perf_counter() > self.deadline:
            raise Stop
        floor, total, off, seat = self.floor, self.total, self.off, self.seat
        size, lo, hi = self.size, self.lo, self.hi
        sec_bufs, C = self.sec_bufs, self.capacity
        same_span = self.same_span
        levels = [floor[s] for s in range(slo, shi) if total[s]]
        if not levels:
            return True
        L = min(levels)
        hole = -1
        hole_cands: list[int] = []
        best_count = -1
        best_key = (0, 0)
        for s in range(slo, shi):
            if floor[s] != L or not total[s]:
                continue
            # sec_bufs[s] is sorted by rank, so the candidates are too
            cands = [k for k in sec_bufs[s] if seat[k] == L and off[k] < 0]
            if same_span is not None and cands:
                cands = [k for k in cands if not same_span[k] or self._symmetry_ok(k, L)]
            slack = C - L - total[s]
            count = len(cands) + (slack > 0)
            if count == 0:
                return False
            # fewest choices first, then the tightest section
            key = (count, slack)
            if best_count < 0 or key < best_key:
                best_count, best_key, hole, hole_cands = count, key, s, cands
                if count == 1 and slack == 0:
                    break
        s = hole
        if self.skyline and len(hole_cands) > 1:
            hole_cands = self._skyline_order(hole_cands, s, L, slo, shi)
        trail, lift = self.trail, self._lift
        for k in hole_cands:
            z = size[k]
            top = L + z
            if top > C:
                continue
            mark = self._place(k, L)
            a, b = lo[k], hi[k]
            ok = True
            raised: list[int] = []
            for t in range(a, b):
                rest = total[t] - z
                trail.append((total, t, total[t]))
                total[t] = rest
                if top + rest > C:
                    ok = False
                    break
                lift(t, top, raised)
            if ok:
                ok = self._propagate(raised)
            if ok:
                cutpoints = self._leave_boundaries(a, b)
                if cutpoints:
                    found = self._solve_parts(self._partitions(bufs, slo, shi, cutpoints))
                else:
                    found = self._search_holes(bufs, slo, shi)
                if found:
                    return True
            self._undo(mark)
        # Waste: nothing starts at byte L in section s. The next buffer there either
        # sits at its seat above L, or is a candidate resting on a buffer not yet
        # placed, so at least the lowest (seat + size) of any unplaced buffer.
        if L + 1 + total[s] > C:
            return False
        raise_to = min([seat[k] for k in sec_bufs[s] if off[k] < 0 and seat[k] > L], default=C + 1)
        if hole_cands:
            min_height = min([seat[k] + size[k] for k in bufs if off[k] < 0])
            raise_to = min(raise_to, min_height)
        if raise_to + total[s] > C:
            return False
        mark = len(trail)
        raised = []
        lift(s, raise_to, raised)
        if self._propagate(raised) and self._search_holes(bufs, slo, shi):
            return True
        self._undo(mark)
        return False

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
            raise NodeLimit
        if not self.nodes & self.check_mask and time.perf_counter() > self.deadline:
            raise Stop
        off, minoff, size, rank = self.off, self.minoff, self.size, self.rank
        cand = [(minoff[k], rank[k], k) for k in bufs if off[k] < 0]
        if not cand:
            return True
        min_height = min(o + size[k] for o, _, k in cand)
        cand.sort()
        C = self.capacity
        floor, total = self.floor, self.total
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
            if top > C or o + max(total[lo[k]:hi[k]]) > C:
                continue
            mark = self._place(k, o)
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
                cutpoints = self._leave_boundaries(a, b)
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

    def run(
        self,
        rank: list[int],
        node_limit: int,
        holes: bool,
        fixed: dict[int, int] | None = None,
        skyline: bool = True,
    ) -> list[int] | None:
        """One restart: offsets (local) if the buffers fit, None if proven not to.

        ``fixed`` (local index -> offset) pre-places buffers that must form the bottom
        of the plan: everything else goes above their tops (hole strategy only).
        ``skyline`` orders the candidates of a hole by fit (else by rank alone).
        """
        self.skyline = skyline
        self._reset(rank, node_limit, holes)
        if fixed:
            self._fix(fixed)
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
