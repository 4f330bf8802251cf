#!/usr/bin/env python3
"""Benchmark of the interval memory planners (passes/planners).

    python benchmarks/bench_planners.py            # everything (a few minutes)
    python benchmarks/bench_planners.py --quick    # smaller synthetic set, no 10 s runs
    python benchmarks/bench_planners.py --markdown benchmarks/results-planners.md
    python benchmarks/bench_planners.py --synthetic 500 --budgets 1,10 --first-seed 10

Three parts:

1. Glow traces: the 79 models of benchmarks/data/glow-traces. For each algorithm, how
   many plans reach the peak-live lower bound, the worst ratio peak / bound, and time.
   Glow's own allocator (from glow-traces-summary.csv) for comparison.
2. Tight synthetic instances: a 1024-byte x 100-step rectangle cut into pieces (seeded),
   so a perfect packing is known to exist. Share solved exactly (peak == bound) by
   ``auto`` within a 1 s and a 10 s budget, and the worst ratio.
3. Scale: 10,000 and 60,000 program-like intervals; time of the greedy planners, of
   ``auto`` (1 s budget) and of the independent checker.

Every plan is verified with check_plan; a wrong plan stops the benchmark.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import sys
import time
from pathlib import Path

try:
    from palimpsest.passes.planners import (
        ALGORITHMS,
        check_plan,
        lower_bound,
        plan_intervals,
        read_csv,
    )
    from palimpsest.passes.planners.synthetic import perfect_packing, random_program
except ImportError:  # a hint, not a traceback
    sys.exit("bench_planners: cannot import palimpsest; run `pip install -e .` first")

DATA = Path(__file__).resolve().parent / "data"
CAPACITY = 1024  # of the synthetic instances


def verified(ivs, plan):
    problems = check_plan(ivs, plan.offsets)
    if problems:
        raise SystemExit(f"bench_planners: INVALID PLAN from {plan.algorithm}: {problems[0]}")
    return plan


def short_list(names: list[str], limit: int = 3) -> str:
    if not names:
        return "-"
    more = f" +{len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


# ---------------------------------------------------------------------------- glow


def bench_glow(time_budget: float) -> list[list[str]]:
    with open(DATA / "glow-traces-summary.csv", newline="") as f:
        summary = {row["model"]: row for row in csv.DictReader(f)}
    models = sorted(summary)
    bound = {m: int(summary[m]["peak_live_lb_aligned"]) for m in models}
    glow_mem = {m: int(summary[m]["glow_allocateAll_mem"]) for m in models}
    traces = {m: read_csv(DATA / "glow-traces" / f"{m}.csv") for m in models}
    n = len(models)
    glow_missed = [m for m in models if glow_mem[m] != bound[m]]
    glow_worst = max(glow_mem[m] / bound[m] for m in models)
    rows = [
        [
            "Glow allocateAll (reported)",
            f"{n - len(glow_missed)}/{n}",
            f"{glow_worst:.4f}",
            "-",
            "-",
            short_list(glow_missed),
        ]
    ]
    for algorithm in ALGORITHMS:
        worst, total, slowest = 1.0, 0.0, 0.0
        missed = []
        for m in models:
            ivs = traces[m]
            if lower_bound(ivs) != bound[m]:
                raise SystemExit(f"bench_planners: lower bound of {m} differs from the summary")
            plan = verified(ivs, plan_intervals(ivs, algorithm, time_budget=time_budget))
            if plan.peak != bound[m]:
                missed.append(m)
            worst = max(worst, plan.peak / bound[m])
            total += plan.seconds
            slowest = max(slowest, plan.seconds)
        rows.append(
            [
                algorithm,
                f"{n - len(missed)}/{n}",
                f"{worst:.4f}",
                f"{total:.2f}",
                f"{1000 * slowest:.0f}",
                short_list(missed),
            ]
        )
    return rows


# ---------------------------------------------------------------------------- synthetic


def bench_synthetic(sizes, seeds, budgets, first_seed: int = 0) -> list[list[str]]:
    rows = []
    for pieces in sizes:
        instances = [
            perfect_packing(pieces, capacity=CAPACITY, horizon=100, seed=s, granule=8)[0]
            for s in range(first_seed, first_seed + seeds)
        ]
        greedy = [verified(ivs, plan_intervals(ivs, "greedy-by-size")) for ivs in instances]
        row = [
            str(pieces),
            str(seeds),
            f"{sum(p.peak == CAPACITY for p in greedy)}/{seeds}",
            f"{max(p.ratio for p in greedy):.4f}",
        ]
        for budget in budgets:
            plans = [
                verified(ivs, plan_intervals(ivs, "auto", time_budget=budget)) for ivs in instances
            ]
            solved = sum(p.peak == CAPACITY for p in plans)
            mean = sum(p.seconds for p in plans) / seeds
            row += [f"{solved}/{seeds}", f"{max(p.ratio for p in plans):.4f}", f"{mean:.2f}"]
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------- scale


def bench_scale(counts, time_budget: float) -> list[list[str]]:
    rows = []
    for count in counts:
        ivs = random_program(count, seed=1)
        for algorithm in ("greedy-by-size", "greedy-by-conflicts", "auto"):
            plan = plan_intervals(ivs, algorithm, time_budget=time_budget)
            t0 = time.perf_counter()
            verified(ivs, plan)
            check_s = time.perf_counter() - t0
            rows.append(
                [
                    f"{count:,}",
                    algorithm,
                    f"{plan.seconds:.2f}",
                    f"{plan.ratio:.4f}",
                    plan.algorithm,
                    f"{check_s:.2f}",
                ]
            )
    return rows


# ---------------------------------------------------------------------------- output


def table(headers, rows) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]

    def line(cells):
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def markdown(headers, rows) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def machine() -> str:
    load = ""
    if hasattr(os, "getloadavg"):
        load = f", load average {os.getloadavg()[0]:.1f}"
    return (
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPUs{load}"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="smaller synthetic set, no 10 s budget, 10k only"
    )
    parser.add_argument("--markdown", metavar="PATH", help="also write the tables to PATH")
    parser.add_argument(
        "--time-budget", type=float, default=1.0, help="budget per glow plan (default 1.0 s)"
    )
    parser.add_argument("--seeds", type=int, default=None, help="synthetic instances per size")
    parser.add_argument("--first-seed", type=int, default=0, help="first synthetic seed")
    parser.add_argument(
        "--synthetic",
        metavar="SIZES",
        help="run only the synthetic part, at these sizes (comma-separated, e.g. 500)",
    )
    parser.add_argument(
        "--budgets", metavar="SECONDS", help="synthetic budgets (comma-separated, e.g. 1,10)"
    )
    args = parser.parse_args(argv)

    sizes = (20, 50, 100) if args.quick else (20, 50, 100, 200, 500)
    seeds = args.seeds or (5 if args.quick else 10)
    budgets = (1.0,) if args.quick else (1.0, 10.0)
    if args.budgets:
        budgets = tuple(float(b) for b in args.budgets.split(","))
    if args.synthetic:
        sizes = tuple(int(n) for n in args.synthetic.split(","))
        title = f"Tight synthetic instances, seeds {args.first_seed}-{args.first_seed + seeds - 1}"
        headers = ["pieces", "instances", "greedy-by-size exact", "greedy-by-size worst"]
        for b in budgets:
            headers += [f"auto {b:g} s exact", f"auto {b:g} s worst", f"auto {b:g} s mean s"]
        print(f"# {machine()}\n", flush=True)
        rows = bench_synthetic(sizes, seeds, budgets, args.first_seed)
        print(title, table(headers, rows), f"# {machine()}", sep="\n", flush=True)
        return 0
    counts = (10_000,) if args.quick else (10_000, 60_000)
    started = time.perf_counter()
    print(f"# {machine()}\n", flush=True)
    sections = []

    title = f"Glow traces: 79 models, time budget {args.time_budget:g} s per plan"
    headers = ["algorithm", "reach bound", "worst ratio", "total s", "slowest ms", "missed"]
    rows = bench_glow(args.time_budget)
    print(title, table(headers, rows), "", sep="\n", flush=True)
    sections.append((title, headers, rows))

    title = f"Tight synthetic instances: {CAPACITY} bytes x 100 steps cut into pieces"
    headers = ["pieces", "instances", "greedy-by-size exact", "greedy-by-size worst"]
    for b in budgets:
        headers += [f"auto {b:g} s exact", f"auto {b:g} s worst", f"auto {b:g} s mean s"]
    rows = bench_synthetic(sizes, seeds, budgets)
    print(title, table(headers, rows), "", sep="\n", flush=True)
    sections.append((title, headers, rows))

    title = "Scale: program-like random intervals (auto budget 1 s)"
    headers = ["intervals", "algorithm", "seconds", "ratio", "winner", "check s"]
    rows = bench_scale(counts, 1.0)
    print(title, table(headers, rows), sep="\n", flush=True)
    sections.append((title, headers, rows))
    print(f"\n# total {time.perf_counter() - started:.0f} s")

    if args.markdown:
        command = "python benchmarks/bench_planners.py" + (" --quick" if args.quick else "")
        parts = [f"Measured with `{command}`; {machine()}.\n"]
        for title, headers, rows in sections:
            parts.append(f"### {title}\n\n{markdown(headers, rows)}\n")
        Path(args.markdown).write_text("\n".join(parts))
        print(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
