"""Interval memory planners: offsets for buffers with known lifetimes.

This package knows nothing about the IR: the plan-memory pass turns liveness into
:class:`Interval` objects and calls :func:`plan_intervals`; every plan can be verified
with the independent :func:`check_plan`.

    >>> from palimpsest.passes.planners import Interval, plan_intervals, check_plan
    >>> ivs = [Interval("a", 0, 2, 64), Interval("b", 1, 3, 32), Interval("c", 2, 4, 64)]
    >>> plan = plan_intervals(ivs)
    >>> plan.peak, plan.lower_bound, check_plan(ivs, plan.offsets)
    (96, 96, [])
"""

from .auto import ALGORITHMS, plan_intervals
from .checker import check_plan
from .intervals import (
    Interval,
    IntervalError,
    Plan,
    PlanError,
    lower_bound,
    peak_live,
    read_csv,
    read_csv_offsets,
    write_csv,
)

__all__ = [
    "ALGORITHMS",
    "Interval",
    "IntervalError",
    "Plan",
    "PlanError",
    "check_plan",
    "lower_bound",
    "peak_live",
    "plan_intervals",
    "read_csv",
    "read_csv_offsets",
    "write_csv",
]
