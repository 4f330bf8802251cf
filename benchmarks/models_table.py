"""The per-model table of benchmarks/README.md ("Latency on real models") from the JSON
rows of `bench_models.py --json` runs, with the geometric means its text quotes.

    python benchmarks/models_table.py NUMPY.json OPENCL.json [TWO_THREADS.json]
                                      [--before BEFORE.json]

NUMPY.json: a run with `--profile N` (its numpy and onnxruntime times, pools and top
kernels); OPENCL.json: a run with `--opencl` (each engine timed in the same run, so its
OpenCL ratio compares like with like); TWO_THREADS.json: `--threads 2 --opencl`;
BEFORE.json: an earlier run's rows (a NUMPY.json whose "opencl_ms" may come from its
OPENCL.json: `--merge-opencl` writes such a file) for the "before" columns.
benchmarks/data/models-*.json keep the recorded runs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys


def _load(path: str | None) -> dict:
    if path is None:
        return {}
    with open(path, encoding="utf-8") as f:
        return {row["model"]: row for row in json.load(f)}


def _ms(value) -> str:
    return "-" if value is None else (f"{value:.2f}" if value < 1 else f"{value:.1f}")


def _geomean(values: list) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def table(numpy_run: dict, opencl_run: dict, threads_run: dict, before: dict) -> tuple:
    """(the markdown table, a summary line)."""
    rows = ["| model | numpy ms | ort ms | ratio | before (numpy ms, ratio) | OpenCL ms "
            "(numpy, ort ms), its run | OpenCL before | 2 threads: numpy / OpenCL / ort ms "
            "| pools KiB | top 3 kernels (numpy, share of run) |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    ratios = {"numpy": [], "opencl": [], "faster": [], "numpy 2t": [], "opencl 2t": [],
              "faster 2t": []}
    for name, row in numpy_run.items():
        numpy_ms, ort_ms = row.get("numpy_ms"), row.get("ort_ms")
        if not numpy_ms or not ort_ms:
            rows.append(f"| {name} | - | - | - | - | - | - | - | - | {row.get('status', '-')} |")
            continue
        ratios["numpy"].append(numpy_ms / ort_ms)
        other = opencl_run.get(name, {})
        cl, cl_numpy, cl_ort = other.get("opencl_ms"), other.get("numpy_ms"), other.get("ort_ms")
        cell = "-"
        if cl and cl_numpy and cl_ort:
            ratios["opencl"].append(cl / cl_ort)
            ratios["faster"].append(min(cl, cl_numpy) / cl_ort)
            shown = f"**{_ms(cl)}**" if cl < cl_numpy else _ms(cl)
            cell = f"{shown} ({_ms(cl_numpy)}, {_ms(cl_ort)})"
        two = threads_run.get(name, {})
        two_cell = " / ".join(_ms(two.get(k)) for k in ("numpy_ms", "opencl_ms", "ort_ms")) \
            if two else "-"
        if two.get("numpy_ms") and two.get("ort_ms"):
            ratios["numpy 2t"].append(two["numpy_ms"] / two["ort_ms"])
            if two.get("opencl_ms"):
                ratios["opencl 2t"].append(two["opencl_ms"] / two["ort_ms"])
                ratios["faster 2t"].append(min(two["numpy_ms"], two["opencl_ms"])
                                           / two["ort_ms"])
        old = before.get(name, {})
        old_cell = (f"{_ms(old['numpy_ms'])}, {old['numpy_ms'] / old['ort_ms']:.2f}×"
                    if old.get("numpy_ms") and old.get("ort_ms") else "-")
        pools = row.get("pool_bytes")
        rows.append(f"| {name} | {_ms(numpy_ms)} | {_ms(ort_ms)} | "
                    f"**{numpy_ms / ort_ms:.2f}×** | {old_cell} | {cell} | "
                    f"{_ms(old.get('opencl_ms'))} | {two_cell} | "
                    f"{pools // 1024 if isinstance(pools, int) else pools or '-'} | "
                    f"{row.get('top', '-')} |")
    numpy_ratios, faster = ratios["numpy"], ratios["faster"]
    parts = [f"numpy {_geomean(numpy_ratios):.2f}× over {len(numpy_ratios)} "
             f"({sum(r > 2.5 for r in numpy_ratios)} above 2.5×, "
             f"{sum(r > 2 for r in numpy_ratios)} above 2×)"]
    if faster:
        parts.append(f"OpenCL {_geomean(ratios['opencl']):.2f}×, faster {_geomean(faster):.2f}× "
                     f"({sum(r > 2 for r in faster)} above 2×)")
    if ratios["numpy 2t"]:
        parts.append("2 threads: " + ", ".join(
            f"{key.split()[0]} {_geomean(ratios[key]):.2f}×"
            for key in ("numpy 2t", "opencl 2t", "faster 2t") if ratios[key]))
    return "\n".join(rows), "; ".join(parts)


def merge_opencl(numpy_path: str, opencl_path: str) -> list:
    """NUMPY.json's rows with OPENCL.json's OpenCL times (for a later --before)."""
    opencl = _load(opencl_path)
    merged = []
    for row in _load(numpy_path).values():
        row = dict(row)
        if opencl.get(row["model"], {}).get("opencl_ms"):
            row["opencl_ms"] = opencl[row["model"]]["opencl_ms"]
        merged.append(row)
    return merged


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("numpy_run")
    parser.add_argument("opencl_run")
    parser.add_argument("threads_run", nargs="?")
    parser.add_argument("--before", help="an earlier run's rows (the 'before' columns)")
    parser.add_argument("--merge-opencl", metavar="FILE",
                        help="write NUMPY.json's rows with OPENCL.json's OpenCL times")
    args = parser.parse_args(argv)
    if args.merge_opencl:
        with open(args.merge_opencl, "w", encoding="utf-8") as f:
            json.dump(merge_opencl(args.numpy_run, args.opencl_run), f, indent=1)
        return 0
    text, summary = table(_load(args.numpy_run), _load(args.opencl_run),
                          _load(args.threads_run), _load(args.before))
    print(text)
    print(f"\n{summary}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
