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
  an answer; after a timeout, bisecting between the capacity that timed out and the
  best plan, an easier question) until the time budget is spent, and returns the best
  plan (``proven`` only when no smaller peak is possible). Capacities are rounded down
  to the *granule* (the gcd of the sizes, when the alignments divide it): canonical
  plans have peaks that are multiples of it. After each timeout it also spends a share
  of the remaining time on :func:`improve`, a large neighbourhood search that keeps
  the bottom of the best plan (flat, or deepened around its top) and searches again
  above it for a smaller peak.
"""

from __future__ import annotations

import math
import random
import sys
import time
from typing import Sequence

from .problem import Problem, align_up, place_in_order
from .search import NodeLimit, Search, Stop

__all__ = ["exact", "decide", "improve", "granule", "STRATEGIES"]

STRATEGIES = ("holes", "canonical")
#: From the second round of restarts on, this many pairs of noisy rankings are added.
RANDOM_RESTARTS = 2
#: Of the rankings of a round, this many are also run with candidates in rank order
#: alone (not skyline order).
PLAIN_RUNS = 2
#: The node limit of the first round of restarts, per buffer.
FIRST_LIMIT = 1.0
#: After a search times out, this share of the remaining time goes to :func:`improve`.
LNS_SHARE = 0.5
#: Node limit of one search of :func:`improve`, per buffer.
LNS_NODES = 4
#: The bottom kept by :func:`improve` reaches a random share of the bound in this range.
LNS_LEVELS = (0.2, 0.95)
#: Share of :func:`improve`'s neighbourhoods deepened around the top (else flat).
LNS_DEEPEN = 0.5
#: The first decision (at the lower bound) gets this share of the time, each later
#: one but the last this share of the remaining time.
FIRST_SLICE_SHARE = 0.4
SLICE_SHARE = 0.25


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


def granule(problem: Problem) -> int:
    """The largest g such that every canonical plan has offsets (and so a peak) that
    are multiples of g: the gcd of the sizes, when every alignment divides it."""
    g = 0
    for i in problem.active:
        g = math.gcd(g, problem.size[i])
    if g <= 1 or any(g % problem.align[i] for i in problem.active):
        return 1
    return g


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
    limit = max(64, int(FIRST_LIMIT * search.m))
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
                # candidates by skyline fit; and, for the first rankings, by rank
                # alone too (each wins on instances where the other is lost)
                for r, rank in enumerate(ranks):
                    runs.append((rank, True, limit, True))
                    if r < PLAIN_RUNS:
                        runs.append((rank, True, limit, False))
            if "canonical" in strategies:
                # A canonical node costs several hole nodes on large problems: give it
                # a smaller share there when the hole search runs too.
                small = limit if "holes" not in strategies or search.m <= 200 else limit // 4
                runs += [(search.ranks[2], False, small, False)]
                if "holes" not in strategies:
                    runs += [
                        (rank, False, limit, False) for rank in ranks if rank is not search.ranks[2]
                    ]
            for rank, holes, node_limit, sky in runs:
                try:
                    local = search.run(rank, node_limit, holes, skyline=sky)
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
    g = granule(problem)

    def down(c: int) -> int:
        return c - c % g

    proven_lo = problem.lower_bound  # no plan below this (a multiple of g)
    capacity = proven_lo  # ask for the lower bound first
    tries = 0
    while proven_lo < hi:
        now = time.perf_counter()
        remaining = deadline - now
        if remaining <= 0.001:
            break
        last = capacity + g >= hi
        share = FIRST_SLICE_SHARE if tries == 0 else SLICE_SHARE
        slice_end = deadline if last else now + remaining * share
        offsets, status = decide(problem, capacity, slice_end, stats, seed=seed + tries)
        tries += 1
        if status == "feasible":
            best = offsets
            hi = problem.peak_of(best)
            capacity = max(proven_lo, down((proven_lo + hi - 1) // 2))
        elif status == "infeasible":
            # A proof: nothing at or below this capacity fits (nor below the next
            # multiple of the granule: canonical plans have such peaks).
            proven_lo = align_up(capacity + 1, g)
            capacity = max(proven_lo, down((proven_lo + hi - 1) // 2))
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
            # Out of time at this capacity: bisect between it and the best plan (an
            # easier question); with nothing left between them, start again from the
            # bound (with other restarts and a longer slice).
            mid = down((capacity + hi) // 2)
            if target is not None and capacity < target < hi:
                capacity = target
            elif capacity < mid < hi:
                capacity = mid
            elif capacity < down(hi - 1):
                capacity = down(hi - 1)
            else:
                capacity = proven_lo
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
    old_limit = sys.getrecursionlimit()
    try:
        while hi > lb and time.perf_counter() < deadline:
            if search is None:
                search = Search(problem, hi - 1, deadline)
                # the hole search recurses per buffer placed, as in decide()
                sys.setrecursionlimit(max(old_limit, 4 * search.m + 1000))
            search.capacity = hi - 1
            level = rng.uniform(LNS_LEVELS[0], LNS_LEVELS[1]) * lb
            if rng.random() < LNS_DEEPEN:
                fixed = _deepened(search, best, size, level, rng.uniform(level, lb), rng)
            else:
                fixed = {k: best[g] for k, g in enumerate(search.glob)
                         if best[g] + size[g] <= level}
            rank = search.random_rank(rng, by_size=rng.random() < 0.5)
            try:
                local = search.run(rank, LNS_NODES * search.m, True, fixed)
            except (NodeLimit, Stop):
                local = None
                if stats is not None:
                    stats["lns_limit"] = stats.get("lns_limit", 0) + 1
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
    finally:
        sys.setrecursionlimit(old_limit)
    return best


def _deepened(search: Search, best, size, low: float, high: float, rng) -> dict[int, int]:
    """The kept bottom for :func:`improve`, deepened around the top of the plan: keep
    the buffers below ``high``, except near (in time) a buffer that reaches above
    ``high``, where only those below ``low`` stay."""
    glob, lo, hi, S = search.glob, search.lo, search.hi, search.S
    ext = rng.randint(0, max(1, S // 8))
    mark = [0] * (S + 1)
    for k, g in enumerate(glob):
        if best[g] + size[g] > high:
            mark[max(0, lo[k] - ext)] += 1
            mark[min(S, hi[k] + ext)] -= 1
    near = [False] * S
    run = 0
    for t in range(S):
        run += mark[t]
        near[t] = run > 0
    fixed = {}
    for k, g in enumerate(glob):
        top = best[g] + size[g]
        if top <= low or (top <= high and not any(near[lo[k] : hi[k]])):
            fixed[k] = best[g]
    return fixed
