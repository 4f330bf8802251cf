"""palimpsest-plan: plan the offsets of buffers given as intervals in a CSV file.

    palimpsest-plan intervals.csv [--capacity N] [--alignment N]
                    [--algorithm auto|greedy-by-size|...] [--time-budget SECONDS]
                    [-o out.csv] [--check]

The input is MiniMalloc's CSV format (``id,lower,upper,size[,alignment]``, lifetimes
half-open ``[lower, upper)``; ``-`` reads standard input). The output is the same
with an ``offset`` column, written to ``-o`` (standard output when ``-o`` is ``-`` or
absent). A summary goes to standard error, or to standard output when the plan goes to
a file. Errors are one line and exit status 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence, TextIO

from palimpsest.passes.planners import (
    ALGORITHMS,
    PlanError,
    check_plan,
    plan_intervals,
    read_csv,
    write_csv,
)

PROG = "palimpsest-plan"


def _non_negative_int(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0: {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Plan byte offsets for buffers with known lifetimes "
        "(MiniMalloc CSV: id,lower,upper,size[,alignment]).",
    )
    parser.add_argument("input", help="intervals CSV file, or - for standard input")
    parser.add_argument(
        "--capacity",
        type=_non_negative_int,
        default=None,
        help="pool size in bytes (default: unbounded)",
    )
    parser.add_argument(
        "--alignment",
        type=_positive_int,
        default=1,
        help="align every offset to N bytes (default 1)",
    )
    parser.add_argument(
        "--algorithm", choices=ALGORITHMS, default="auto", help="planner to use (default auto)"
    )
    parser.add_argument(
        "--time-budget",
        type=_seconds,
        default=1.0,
        metavar="SECONDS",
        help="time for hill climbing / exact search (default 1.0)",
    )
    parser.add_argument(
        "-o", "--output", default="-", help="output CSV file (default -: standard output)"
    )
    parser.add_argument(
        "--check", action="store_true", help="verify the plan with the independent checker"
    )
    parser.add_argument("--seed", type=_non_negative_int, default=0, help=argparse.SUPPRESS)
    return parser


def _summary(out: TextIO, count: int, plan, checked: bool | None) -> None:
    status = "optimal" if plan.optimal else "not proven optimal"
    print(f"buffers:     {count}", file=out)
    print(f"peak:        {plan.peak} bytes", file=out)
    print(f"lower bound: {plan.lower_bound} bytes", file=out)
    print(f"ratio:       {plan.ratio:.4f}", file=out)
    print(f"algorithm:   {plan.algorithm} ({status})", file=out)
    print(f"time:        {plan.seconds:.3f} s", file=out)
    if checked is not None:
        print("check:       ok" if checked else "check:       FAILED", file=out)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def error(message: str) -> int:
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return 1

    try:
        if args.input == "-":
            intervals = read_csv(sys.stdin)
        else:
            intervals = read_csv(args.input)
        plan = plan_intervals(
            intervals,
            algorithm=args.algorithm,
            capacity=args.capacity,
            alignment=args.alignment,
            time_budget=args.time_budget,
            seed=args.seed,
        )
    except PlanError as e:  # bad CSV (IntervalError) or a pool too small
        return error(str(e))

    problems = None
    if args.check:
        problems = check_plan(
            intervals, plan.offsets, capacity=args.capacity, alignment=args.alignment
        )

    to_stdout = args.output == "-"
    try:
        if to_stdout:
            write_csv(sys.stdout, intervals, plan.offsets)
            sys.stdout.flush()
        else:
            write_csv(args.output, intervals, plan.offsets)
    except OSError as e:
        return error(f"cannot write {args.output!r}: {e.strerror or e}")

    checked = None if problems is None else not problems
    _summary(sys.stderr if to_stdout else sys.stdout, len(intervals), plan, checked)
    if problems:
        for problem in problems:
            print(f"{PROG}: error: check: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
