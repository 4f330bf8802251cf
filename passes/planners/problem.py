"""The planners' shared working form of a list of intervals.

:class:`Problem` numbers the intervals, folds the pool alignment into each one, and
builds on demand what the algorithms need: the conflict graph (which buffers are live
at the same time) and the time sections (maximal time ranges over which the set of
live buffers does not change). :func:`place_in_order` is the placement step every
order-based planner shares: put each buffer, in the given order, into a gap among the
already placed buffers it conflicts with.

Buffers of size 0 or with an empty lifetime take part in nothing and sit at offset 0.
"""

from __future__ import annotations

import heapq
from typing import Sequence

from .intervals import Interval, IntervalError, lower_bound, normalize_intervals

__all__ = ["Problem", "place_in_order", "align_up"]


def align_up(value: int, alignment: int) -> int:
    """The smallest multiple of ``alignment`` that is >= ``value``."""
    rem = value % alignment
    return value if rem == 0 else value + alignment - rem


class Problem:
    """Intervals as parallel integer lists, indexed 0..n-1 in input order."""

    def __init__(self, intervals: Sequence[Interval], alignment: int = 1):
        if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment < 1:
            raise IntervalError(f"alignment must be a positive integer, got {alignment!r}")
        self.intervals = normalize_intervals(intervals)
        ivs = self.intervals
        self.n = len(ivs)
        self.ids = [iv.id for iv in ivs]
        self.start = [iv.start for iv in ivs]
        self.end = [iv.end for iv in ivs]
        self.size = [iv.size for iv in ivs]
        self.align = [max(alignment, iv.alignment) for iv in ivs]
        # Buffers that need a place: some bytes, some lifetime.
        self.active = [i for i, iv in enumerate(ivs) if iv.size > 0 and iv.end > iv.start]
        self.lower_bound = lower_bound(ivs)
        self._conflicts: list[list[int]] | None = None
        self._sections = None

    # ------------------------------------------------------------------ conflicts
    @property
    def conflicts(self) -> list[list[int]]:
        """``conflicts[i]``: the active buffers live at some moment when ``i`` is.

        Built by one sweep over start times: O(n log n + number of conflicting pairs).
        """
        if self._conflicts is None:
            adj: list[list[int]] = [[] for _ in range(self.n)]
            start, end = self.start, self.end
            live: dict[int, None] = {}
            ends: list[tuple[int, int]] = []
            for i in sorted(self.active, key=start.__getitem__):
                s = start[i]
                while ends and ends[0][0] <= s:
                    del live[heapq.heappop(ends)[1]]
                if live:
                    others = list(live)
                    adj[i].extend(others)
                    for j in others:
                        adj[j].append(i)
                live[i] = None
                heapq.heappush(ends, (end[i], i))
            self._conflicts = adj
        return self._conflicts

    # ------------------------------------------------------------------- sections
    @property
    def sections(self):
        """``(points, lo, hi)``: section ``k`` is time ``[points[k], points[k+1])``;
        active buffer ``i`` spans sections ``lo[i] .. hi[i]-1``."""
        if self._sections is None:
            pts = sorted({t for i in self.active for t in (self.start[i], self.end[i])})
            index = {t: k for k, t in enumerate(pts)}
            lo = [0] * self.n
            hi = [0] * self.n
            for i in self.active:
                lo[i] = index[self.start[i]]
                hi[i] = index[self.end[i]]
            self._sections = (pts, lo, hi)
        return self._sections

    # ---------------------------------------------------------------------- plans
    def peak_of(self, offsets: Sequence[int]) -> int:
        size = self.size
        return max((offsets[i] + size[i] for i in self.active), default=0)

    def offsets_dict(self, offsets: Sequence[int]) -> dict[str, int]:
        return dict(zip(self.ids, offsets))


def place_in_order(
    problem: Problem,
    order: Sequence[int],
    fit: str = "best",
    offsets: list[int] | None = None,
    begin: int = 0,
) -> list[int]:
    """Place the buffers of ``order`` one by one; return offsets (a list of length n).

    Each buffer goes into a gap between already placed buffers that conflict with it
    (sorted by offset). ``fit="best"`` picks the smallest gap it fits in (TFLite
    Micro's greedy planner), ``fit="first"`` the lowest (TVM USMP's greedy); when no
    gap fits, the buffer goes above the highest conflicting one. The cost is the
    number of conflicting pairs times a log, not the number of buffers squared.

    With ``offsets`` and ``begin``, ``order[:begin]`` is taken as already placed in
    ``offsets`` and only ``order[begin:]`` is placed again (hill climbing re-places a
    suffix); that list is updated in place and returned.
    """
    n = problem.n
    if offsets is None:
        offsets = [0] * n
        placed = [False] * n
        begin = 0
    else:
        placed = [False] * n
        for i in order[:begin]:
            placed[i] = True
    size, align, conflicts = problem.size, problem.align, problem.conflicts
    best = fit == "best"
    for k in range(begin, len(order)):
        i = order[k]
        z = size[i]
        a = align[i]
        neighbours = [(offsets[j], offsets[j] + size[j]) for j in conflicts[i] if placed[j]]
        if not neighbours:
            offsets[i] = 0
            placed[i] = True
            continue
        neighbours.sort()
        chosen = -1
        best_gap = -1
        low = 0  # lowest byte above every neighbour seen so far
        for o, top in neighbours:
            cand = low if a == 1 else align_up(low, a)
            if cand + z <= o:
                if not best:
                    chosen = cand
                    break
                gap = o - low
                if best_gap < 0 or gap < best_gap:
                    best_gap, chosen = gap, cand
            if top > low:
                low = top
        if chosen < 0:
            chosen = low if a == 1 else align_up(low, a)
        offsets[i] = chosen
        placed[i] = True
    return offsets
