"""Greedy planners: one pass over the buffers in a fixed order.

* greedy-by-size, as TensorFlow Lite Micro's GreedyMemoryPlanner: largest buffers
  first, each into the best-fitting (smallest) gap among the already placed buffers
  whose lifetimes overlap it.
* greedy-by-conflicts, as TVM USMP's greedy_by_conflicts: the buffers that conflict
  with the most others first (then the largest), each at the lowest offset it fits.
"""

from __future__ import annotations

from .problem import Problem, place_in_order

__all__ = ["size_order", "conflict_order", "greedy_by_size", "greedy_by_conflicts"]


def size_order(problem: Problem) -> list[int]:
    """Active buffers by size (largest first), then longer lifetime, then earlier start."""
    size, start, end = problem.size, problem.start, problem.end
    return sorted(problem.active, key=lambda i: (-size[i], start[i] - end[i], start[i], i))


def conflict_order(problem: Problem) -> list[int]:
    """Active buffers by number of conflicts, then size (both descending)."""
    conflicts, size, start = problem.conflicts, problem.size, problem.start
    return sorted(problem.active, key=lambda i: (-len(conflicts[i]), -size[i], start[i], i))


def greedy_by_size(problem: Problem) -> list[int]:
    """Offsets (one per buffer) from TFLite-style greedy-by-size with best fit."""
    return place_in_order(problem, size_order(problem), fit="best")


def greedy_by_conflicts(problem: Problem) -> list[int]:
    """Offsets (one per buffer) from TVM-style greedy-by-conflicts with first fit."""
    return place_in_order(problem, conflict_order(problem), fit="first")
