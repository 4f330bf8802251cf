"""Hill climbing over placement orders, after TVM USMP's hill_climb.

A plan is represented by an order: :func:`place_in_order` turns the order into offsets
(best fit, so the starting order, greedy-by-size's, gives greedy-by-size's plan). Each
step perturbs the order around a buffer that defines the current peak:

* swap one of its conflicting buffers placed before it with a buffer conflicting with
  that one (TVM's first- and second-level neighbours), or
* move the peak buffer itself earlier in the order.

Only the changed suffix of the order is placed again. A step is kept when the peak does
not grow (sideways moves let the search cross plateaus), and rarely even when it does;
the best plan seen is returned. The random generator is seeded, so a run is
reproducible up to where the time budget stops it.
"""

from __future__ import annotations

import random
import time
from typing import Sequence

from .greedy import size_order
from .problem import Problem, place_in_order

__all__ = ["hill_climb"]


def hill_climb(
    problem: Problem,
    deadline: float,
    start_order: Sequence[int] | None = None,
    start_offsets: Sequence[int] | None = None,
    seed: int = 0,
    max_steps: int | None = None,
    stats: dict | None = None,
) -> list[int]:
    """Improve a greedy order until the deadline (or the lower bound); return offsets.

    ``start_order`` defaults to greedy-by-size's. ``start_offsets``, a plan already
    known for that order, is returned as is when the deadline has passed already (so
    that a caller out of time does not pay for one more placement).
    """
    if start_offsets is not None and time.perf_counter() > deadline:
        return list(start_offsets)
    order = list(start_order) if start_order is not None else size_order(problem)
    n = problem.n
    offsets = place_in_order(problem, order, fit="best")
    if start_offsets is not None and problem.peak_of(start_offsets) < problem.peak_of(offsets):
        offsets = list(start_offsets)
    if len(order) < 2:
        return offsets
    size, conflicts = problem.size, problem.conflicts
    target = problem.lower_bound
    pos = [0] * n
    for k, i in enumerate(order):
        pos[i] = k
    peak = problem.peak_of(offsets)
    best, best_peak = list(offsets), peak
    rng = random.Random(seed)
    steps = accepted = 0
    while best_peak > target:
        if max_steps is not None and steps >= max_steps:
            break
        if time.perf_counter() > deadline:
            break
        steps += 1
        peakers = [i for i in order if offsets[i] + size[i] == peak]
        node = rng.choice(peakers)
        p = pos[node]
        earlier = [j for j in conflicts[node] if pos[j] < p]
        if earlier and rng.random() < 0.75:
            s1 = rng.choice(earlier)
            q = pos[s1]
            second = [j for j in conflicts[s1] if pos[j] < q]
            if second and rng.random() < 0.75:
                s2 = rng.choice(second)
            else:
                s2 = rng.choice(earlier + [node])
            if s1 == s2:
                continue
            i1, i2 = pos[s1], pos[s2]
            changed = min(i1, i2)

            def apply(i1=i1, i2=i2):
                a, b = order[i1], order[i2]
                order[i1], order[i2] = b, a
                pos[a], pos[b] = i2, i1

            revert = apply
        else:
            if p == 0:
                continue
            q = rng.randrange(0, p)
            changed = q

            def apply(p=p, q=q):
                item = order.pop(p)
                order.insert(q, item)
                for k in range(q, p + 1):
                    pos[order[k]] = k

            def revert(p=p, q=q):
                item = order.pop(q)
                order.insert(p, item)
                for k in range(q, p + 1):
                    pos[order[k]] = k

        saved = offsets[:]
        apply()
        place_in_order(problem, order, fit="best", offsets=offsets, begin=changed)
        new_peak = problem.peak_of(offsets)
        if new_peak <= peak or rng.random() < 0.01:
            accepted += 1
            peak = new_peak
            if peak < best_peak:
                best, best_peak = list(offsets), peak
        else:
            revert()
            offsets = saved
    if stats is not None:
        stats["steps"] = stats.get("steps", 0) + steps
        stats["accepted"] = stats.get("accepted", 0) + accepted
    return best
