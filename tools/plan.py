"""palimpsest-plan: plan the offsets of buffers given as intervals in a CSV file.

    palimpsest-plan intervals.csv [--capacity N] [--alignment N]
                    [--algorithm auto|greedy-by-size|...] [--time-budget SECONDS]
                    [-o out.csv] [--check]

The input is MiniMalloc's CSV format (``id,lower,upper,size[,alignment]``, lifetimes
half-open ``[lower, upper)``; ``-`` reads standard input). The output is the same
with an ``offset`` column, written to ``-o`` (standard output when ``-o`` is ``-`` or
absent). A summary goes to standard error, or to standard output when the plan goes to
a file. A malformed file is refused with one line, ``palimpsest-plan: error: FILE:LINE:
message``, and exit status 1 (an internal error: one line and exit status 3).

    palimpsest-plan model.pal [--export json|c-header|svg|png] [-o FILE]
                    [--algorithm ...] [--time-budget S] [--inputs-as-activations]
                    [--alignment N] [--shape NAME=DIMS] [--value NAME=V[,V...]]

With a .pal file (or --export), the model is brought to planned IR — graph-level IR
runs the default pipeline (kernels with their workspaces, then plan-memory), buffer-level IR
`plan-memory`, planned IR is read as it is — and its plan is exported (default json):
JSON (pools, and per buffer its pool, offset, size, lifetime and class), a C header of
offsets for firmware, or a time × address picture (SVG; PNG needs matplotlib).
`--alignment` is then the alignment of the pools the pass creates when the IR declares
none (default 64); `--capacity` does not apply (declare `memory.pool @p {capacity = N}`).

A plan is of one function, without control flow: the `graph.if`s of @main (or the only
function) whose conditions the shapes (`--shape`) and the values of small inputs decide
are inlined first, as a Session does at run time (passes/inline_branches.py). An input an
If's condition is computed from (Silero VAD's `sr`) is given with `--value NAME=V` — a
scalar, or comma-separated elements in order, typed by the input's element type
(`--value sr=16000`); it becomes a constant. Without it the plan stops with one line naming
the input and the --value to give; a name that is no input, or a value of the wrong
count or type, is one line too (exit status 1).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence, TextIO

from palimpsest.tools.cli import (
    UserError, add_shape_arguments, add_value_argument, console_entry, run_main,
)
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
        default=None,
        help="align every offset to N bytes (default 1; for a .pal model 64)",
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
    parser.add_argument(
        "--export",
        choices=("json", "c-header", "svg", "png"),
        default=None,
        help="plan a .pal model and export its plan in this format (default json)",
    )
    parser.add_argument(
        "--compare-schedule",
        action="store_true",
        help="for a .pal model with --export svg: draw the plan in file order and in the "
        "order schedule-for-memory finds, side by side, each with its bound line",
    )
    parser.add_argument(
        "--inputs-as-activations",
        action="store_true",
        help="for a .pal model: plan inputs and outputs as activations (real lifetimes)",
    )
    add_shape_arguments(parser, shape_help=(
        "for a .pal model: give input NAME of @main (or the only function) this shape, "
        "its '?' dims made static, before planning (repeatable)"))
    add_value_argument(parser, help_=(
        "for a .pal model: give input NAME of @main (or the only function) this value, a "
        "scalar or comma-separated elements typed by its element type (e.g. sr=16000): it "
        "becomes a constant, and the graph.ifs it decides are inlined before planning; an "
        "input an If's condition depends on needs one (repeatable)"))
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
    if args.export is not None or args.input.endswith(".pal"):
        return _export_main(args)
    if args.shape or args.bound or args.value:
        print(f"{PROG}: error: --shape, --bound and --value apply to a .pal model, not to "
              f"CSV intervals", file=sys.stderr)
        return 1
    if args.alignment is None:
        args.alignment = 1

    return run_main(PROG, lambda: _csv_main(args))


def _csv_main(args) -> int:
    """Plan the intervals of a CSV file (run under run_main: a bug is exit 3, one line)."""
    try:
        if args.input == "-":  # bytes: the reader decodes them, naming a bad byte's line
            intervals = read_csv(getattr(sys.stdin, "buffer", sys.stdin))
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
        raise UserError(str(e)) from None

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
        raise UserError(f"cannot write {args.output!r}: {e.strerror or e}") from None

    checked = None if problems is None else not problems
    _summary(sys.stderr if to_stdout else sys.stdout, len(intervals), plan, checked)
    if problems:
        for problem in problems:
            print(f"{PROG}: error: check: {problem}", file=sys.stderr)
        return 1
    return 0


def _export_main(args) -> int:
    """Plan a .pal model and export its plan (the work is in passes.plan_export)."""
    from palimpsest.ir.diagnostics import SourceManager
    from palimpsest.tools.cli import (
        inline_values, parse_bounds, parse_shapes, parse_values, read_text,
        specialize_module, write_text,
    )

    sources = SourceManager()

    def body() -> int:
        from palimpsest.dialects import load_all
        from palimpsest.ir.parser import parse
        from palimpsest.ir.verifier import verify
        from palimpsest.passes.plan_export import ExportError, export, plan_for_export, to_png

        if args.capacity is not None:
            raise UserError("--capacity applies to CSV input; for a .pal model declare "
                            "'memory.pool @name {capacity = N}' in the IR")
        fmt = args.export or "json"
        if fmt == "png" and args.output == "-":
            raise UserError("--export png writes a file: give it with -o FILE.png")
        shapes, bounds = parse_shapes(args.shape), parse_bounds(args.bound)
        values = parse_values(args.value)
        load_all()
        text, filename = read_text(args.input)
        sources.add(filename, text)
        module = parse(text, filename)
        verify(module)  # as written: a branch not taken may not fit the shapes given
        specialize_module(module, None, shapes, bounds)
        # one function to plan: the Ifs the shapes and values decide go inline first
        inline_values(module, None, values, required=True)
        verify(module)
        if args.compare_schedule:
            if fmt != "svg":
                raise UserError("--compare-schedule draws an SVG: use it with --export svg")
            from palimpsest.passes.plan_svg import compare_orders_svg, plan_both_orders
            before, report = plan_both_orders(module, args.algorithm, args.time_budget,
                                              args.inputs_as_activations, args.alignment or 64)
            write_text(args.output, compare_orders_svg(before, report, f"memory plan of "
                                                       f"{filename}: file order and scheduled"))
        else:
            report = plan_for_export(module, args.algorithm, args.time_budget,
                                     args.inputs_as_activations, args.alignment or 64)
        try:
            if args.compare_schedule:
                pass
            elif fmt == "png":
                to_png(report, args.output, f"memory plan of {filename}")
            else:
                write_text(args.output, export(report, fmt, filename))
        except ExportError as e:
            raise UserError(str(e)) from None
        summary = sys.stderr if args.output == "-" else sys.stdout
        for fn in report.functions:
            for pool in fn.pools:
                print(f"@{fn.function} @{pool.pool}: {pool.size} bytes, lower bound "
                      f"{pool.lower_bound}, ratio {pool.ratio:.4f}", file=summary)
        return 0

    return run_main(PROG, body, sources)


entry = console_entry(main)

if __name__ == "__main__":
    sys.exit(main())
