"""``plan_intervals``: run one planner, or ``auto`` (keep the best of several).

``auto`` runs the greedy planners first (cheap, and often already at the lower bound);
if none reaches the bound it spends the rest of the time budget on the exact search
(for problems small enough for it) and then on hill climbing, and keeps the best plan.
"""

from __future__ import annotations

import math
import time
from typing import Iterable

from .exact import exact
from .greedy import greedy_by_conflicts, greedy_by_size
from .hill_climb import hill_climb
from .intervals import Interval, IntervalError, Plan, PlanError, peak_live
from .problem import Problem

__all__ = ["ALGORITHMS", "plan_intervals", "EXACT_MAX_BUFFERS"]

ALGORITHMS = ("greedy-by-size", "greedy-by-conflicts", "hill-climb", "exact", "auto")

#: Above this many buffers ``auto`` skips the exact search (each of its steps costs
#: time linear in the buffers of a subproblem) and uses hill climbing alone.
EXACT_MAX_BUFFERS = 1500


def _check_number(value, what: str, minimum: float, allow_none: bool = False):
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise IntervalError(f"{what} must be a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise IntervalError(f"{what} must be finite, got {value!r}")
    if value < minimum:
        raise IntervalError(f"{what} must be at least {minimum}, got {value!r}")


def plan_intervals(
    intervals: Iterable[Interval],
    algorithm: str = "auto",
    capacity: int | None = None,
    alignment: int = 1,
    time_budget: float = 1.0,
    seed: int = 0,
) -> Plan:
    """Give every interval a byte offset; return the :class:`Plan`.

    ``algorithm`` is one of :data:`ALGORITHMS`. Offsets are multiples of
    ``max(alignment, interval.alignment)``. ``capacity`` (bytes, None = unbounded)
    is checked against the best plan found: :class:`PlanError` if it does not fit.
    ``time_budget`` (seconds, counted from the call) bounds hill climbing and the
    exact search; the greedy planners always run to the end, and so does the set-up
    of a search, so with tens of thousands of buffers the call can take longer.
    ``seed`` fixes the random choices (hill climbing, search restarts).
    """
    t0 = time.perf_counter()
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    _check_number(time_budget, "time_budget", 0)
    if capacity is not None:
        if isinstance(capacity, bool) or not isinstance(capacity, int):
            raise IntervalError(f"capacity must be an integer, got {capacity!r}")
        _check_number(capacity, "capacity", 0)
    problem = Problem(list(intervals), alignment)
    lb = problem.lower_bound
    if capacity is not None and lb > capacity:
        live, when = peak_live(problem.intervals)
        raise PlanError(
            f"plan needs {lb} bytes, capacity is {capacity} "
            f"({live} bytes are live at time {when}; no plan can use less)"
        )
    deadline = t0 + time_budget
    stats: dict = {}
    winner = algorithm

    if algorithm == "greedy-by-size":
        offsets = greedy_by_size(problem)
    elif algorithm == "greedy-by-conflicts":
        offsets = greedy_by_conflicts(problem)
    elif algorithm == "hill-climb":
        offsets = hill_climb(problem, deadline, seed=seed, stats=stats)
    elif algorithm == "exact":
        start = greedy_by_size(problem)
        offsets, proven = exact(
            problem, deadline, start, stats=stats, target=capacity, seed=seed
        )
        stats["proven"] = proven
    else:
        offsets, winner = _auto(problem, deadline, stats, seed, capacity)

    peak = problem.peak_of(offsets)
    # Proven optimal: at the lower bound, or the exact search showed nothing smaller fits.
    optimal = peak == lb or bool(stats.get("proven"))
    elapsed = time.perf_counter() - t0
    if capacity is not None and peak > capacity:
        raise PlanError(
            f"plan needs {peak} bytes, capacity is {capacity} "
            f"(best found by {winner} in {elapsed:.2f} s; lower bound {lb} bytes)"
        )
    return Plan(
        offsets=problem.offsets_dict(offsets),
        peak=peak,
        lower_bound=lb,
        algorithm=winner,
        seconds=elapsed,
        optimal=optimal,
        stats=stats,
    )


def _auto(
    problem: Problem, deadline: float, stats: dict, seed: int, capacity: int | None
) -> tuple[list[int], str]:
    lb = problem.lower_bound
    candidates = [
        ("greedy-by-size", greedy_by_size),
        ("greedy-by-conflicts", greedy_by_conflicts),
    ]
    best = None
    best_peak = 0
    name = "greedy-by-size"
    for label, planner in candidates:
        offsets = planner(problem)
        peak = problem.peak_of(offsets)
        if best is None or peak < best_peak:
            best, best_peak, name = offsets, peak, label
        if best_peak == lb:
            return best, "auto:" + name
    assert best is not None
    if len(problem.active) <= EXACT_MAX_BUFFERS:
        now = time.perf_counter()
        exact_deadline = now + max(deadline - now, 0) * 0.75
        offsets, proven = exact(
            problem, exact_deadline, best, stats=stats, target=capacity, seed=seed
        )
        peak = problem.peak_of(offsets)
        if peak < best_peak:
            best, best_peak, name = offsets, peak, "exact"
        if proven:
            stats["proven"] = True
            return best, "auto:" + name
    # Hill climbing from the best plan so far: listed by offset, and placed again in
    # that order, the buffers land where they were (or lower).
    start = sorted(problem.active, key=lambda i: (best[i], i))
    offsets = hill_climb(
        problem, deadline, start_order=start, start_offsets=best, seed=seed, stats=stats
    )
    peak = problem.peak_of(offsets)
    if peak < best_peak:
        best, best_peak, name = offsets, peak, "hill-climb"
    return best, "auto:" + name
