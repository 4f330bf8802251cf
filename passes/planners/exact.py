"""Exact / near-optimal planning by branch and bound, in the spirit of MiniMalloc.

MiniMalloc (M. D. Moffitt, "MiniMalloc: A Lightweight Memory Allocator for
Hardware-Accelerated Machine Learning", ASPLOS 2023) decides whether buffers fit a
given capacity by a search over canonical solutions with section inference, dominance
pruning and dynamic decomposition. :mod:`.search` holds our own search of that kind
(plus a hole-filling strategy that does well on tightly packed problems); this module
drives it:

* :func:`decide` answers "do the buffers fit in C bytes?" with restarts: several
  static rankings (and, from the second round, noisy ones), each with a node limit
  that doubles every round, so that one unlucky ordering cannot stall the search. When
  time runs out, the deepest partial plan any run reached is completed greedily.
* :func:`exact` minimises the peak: it asks for a plan at the lower bound, then moves
  between the best proven-infeasible capacity and the best plan found (bisecting after
  an answer, loosening by a doubling step after a timeout) until the time budget is
  spent, and returns the best plan (``proven`` only when no smaller peak is possible).
  After each timeout it also spends a share of the remaining time on :func:`improve`,
  a large neighbourhood search that keeps the bottom of the best plan and searches
  again above it for a smaller peak.
"""

from __future__ import annotations

import random
import sys
import time
from typing import Sequence

from .problem import Problem, place_in_order
from .search import NodeLimit, Search, Stop

__all__ = ["exact", "decide", "improve", "STRATEGIES"]

STRATEGIES = ("holes", "canonical")
#: From the second round of restarts on, this many pairs of noisy rankings are added.
RANDOM_RESTARTS = 2
#: After a search times out, this share of the remaining time goes to :func:`improve`.
LNS_SHARE = 0.25


def _complete(problem: Problem, search: Search) -> list[int] | None:
    """The deepest partial plan the search reached, with the rest placed greedily
    (largest first, best fit) on top: an anytime answer when time runs out."""
    partial = search.best_partial
    if partial is None:
        return None
    offsets = [0] * problem.n
    placed, rest = [], []
    for k, g in enumerate(search.glob):
        if partial[k] >= 0:
            offsets[g] = partial[k]
            placed.append(g)
        else:
            rest.append(g)
    size = problem.size
    rest.sort(key=lambda g: (-size[g], g))
    return place_in_order(problem, placed + rest, "best", offsets=offsets, begin=len(placed))


def decide(
    problem: Problem,
    capacity: int,
    deadline: float,
    stats: dict | None = None,
    seed: int = 0,
    strategies: Sequence[str] = STRATEGIES,
):
    """Do the buffers fit in ``capacity`` bytes?

    Returns ``(offsets, status)``: a full offsets list and ``"feasible"``; or None and
    ``"infeasible"`` (proven); or ``"timeout"`` with the deepest partial plan found,
    completed greedily (it may exceed the capacity), or None. ``strategies`` picks the
    search strategies (both by default; each alone is complete too).
    """
    for name in strategies:
        if name not in STRATEGIES:
            raise ValueError(f"unknown strategy {name!r}")
    offsets = [0] * problem.n
    if not problem.active:
        return offsets, "feasible"
    if problem.lower_bound > capacity:
        return None, "infeasible"
    search = Search(problem, capacity, deadline)
    limit = max(64, search.m)
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, 4 * search.m + 1000))
    rng = random.Random(seed)
    rounds = 0
    try:
        while True:
            ranks = list(search.ranks)
            extra = min(rounds, RANDOM_RESTARTS) * 2
            ranks += [search.random_rank(rng, by_size=i % 2 == 1) for i in range(extra)]
            rounds += 1
            # Hole filling with every ranking; MiniMalloc's canonical order with the
            # section-pressure ranking (it wins on loosely packed real traces).
            runs = []
            if "holes" in strategies:
                runs += [(rank, True) for rank in ranks]
            if "canonical" in strategies:
                runs += [(search.ranks[2], False)]
                if "holes" not in strategies:
                    runs += [(rank, False) for rank in ranks if rank is not search.ranks[2]]
            for rank, holes in runs:
                try:
                    local = search.run(rank, limit, holes)
                except NodeLimit:
                    continue
                except Stop:
                    return _complete(problem, search), "timeout"
                finally:
                    if stats is not None:
                        stats["nodes"] = stats.get("nodes", 0) + search.nodes
                if local is None:
                    return None, "infeasible"
                for k, g in enumerate(search.glob):
                    offsets[g] = local[k]
                return offsets, "feasible"
            if time.perf_counter() > deadline:
                return _complete(problem, search), "timeout"
            limit *= 2
    finally:
        sys.setrecursionlimit(old_limit)


def exact(
    problem: Problem,
    deadline: float,
    incumbent: Sequence[int],
    stats: dict | None = None,
    target: int | None = None,
    seed: int = 0,
) -> tuple[list[int], bool]:
    """Minimise the peak within the deadline, starting from a known plan.

    Returns ``(offsets, proven)``: the best plan found (never worse than
    ``incumbent``) and whether it is proven optimal. ``target`` (a pool capacity) is
    asked for right after the lower bound when that times out and the best plan does
    not fit it yet.
    """
    best = list(incumbent)
    hi = problem.peak_of(best)
    rng = random.Random(seed)
    proven_lo = problem.lower_bound  # no plan below this
    first_step = max(1, proven_lo // 100)
    step = first_step
    capacity = proven_lo  # ask for the lower bound first
    while proven_lo < hi:
        now = time.perf_counter()
        remaining = deadline - now
        if remaining <= 0.001:
            break
        last = capacity >= hi - 1
        slice_end = deadline if last else now + remaining * 0.4
        offsets, status = decide(problem, capacity, slice_end, stats)
        if status == "feasible":
            best = offsets
            hi = problem.peak_of(best)
            capacity = (proven_lo + hi - 1) // 2
        elif status == "infeasible":
            # A proof: nothing at or below this capacity fits.
            proven_lo = capacity + 1
            capacity = (proven_lo + hi - 1) // 2
        else:
            if offsets is not None and problem.peak_of(offsets) < hi:
                best = offsets
                hi = problem.peak_of(best)
            if LNS_SHARE > 0:
                now = time.perf_counter()
                best = improve(problem, best, now + (deadline - now) * LNS_SHARE, rng, stats)
                hi = problem.peak_of(best)
                if hi <= proven_lo:
                    break
            # Out of time at this capacity: loosen it by a step that doubles (1% of
            # the bound first); past the best plan, start again from the bound.
            if target is not None and capacity < target < hi:
                capacity = target
            elif capacity + step < hi:
                capacity += step
                step *= 2
            elif capacity < hi - 1:
                capacity = hi - 1
            else:
                capacity, step = proven_lo, first_step
    if stats is not None:
        stats["proven_lower"] = proven_lo
    return best, hi <= proven_lo


def improve(
    problem: Problem,
    best: list[int],
    deadline: float,
    rng: random.Random,
    stats: dict | None = None,
) -> list[int]:
    """Large neighbourhood search: keep the buffers of the best plan that lie entirely
    below a random level, and search again for all the others above them, asking for
    a smaller peak. Each attempt is short (a node limit); returns the best plan."""
    hi = problem.peak_of(best)
    lb = problem.lower_bound
    size = problem.size
    search = None
    while hi > lb and time.perf_counter() < deadline:
        if search is None:
            search = Search(problem, hi - 1, deadline)
        search.capacity = hi - 1
        level = rng.uniform(0.2, 0.95) * lb
        fixed = {k: best[g] for k, g in enumerate(search.glob) if best[g] + size[g] <= level}
        rank = search.random_rank(rng, by_size=rng.random() < 0.5)
        try:
            local = search.run(rank, 4 * search.m, True, fixed)
        except (NodeLimit, Stop):
            local = None
        if stats is not None:
            stats["lns_tries"] = stats.get("lns_tries", 0) + 1
        if local is None:
            continue
        best = list(best)
        for k, g in enumerate(search.glob):
            best[g] = local[k]
        hi = problem.peak_of(best)
        if stats is not None:
            stats["lns_wins"] = stats.get("lns_wins", 0) + 1
    return best
