"""Fused epilogues and prepacked weights (issue 16) on the real-model corpus: each model
compiled three ways in one process — `lower-to-kernels` as in the default pipeline
(epilogues folded, weights prepacked), with `fuse-epilogues=false`, and with
`prepack-weights=false` — and, per way, the planned pool bytes at the seeded inputs'
shapes, how many epilogues were folded and operands prepacked, and the median latency on
the numpy backend (and on OpenCL with `--opencl`). The ways' timed runs are interleaved
(one run of each in turn), so a load that comes and goes on the machine weighs on all
alike. The table gives the median CPU time of the process (all its threads: OpenBLAS's
one, PoCL's workers), which another program's load on the machine moves far less than
wall time; the JSON has both.

    python benchmarks/bench_epilogues.py [--runs 7] [--opencl] [--models a,b]

BLAS threads are pinned to one before numpy loads, as in bench_models.py.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import fetch_models  # noqa: E402

WAYS = {"fused": "", "no-epilogues": "{fuse-epilogues=false}",
        "no-prepack": "{prepack-weights=false}"}


def pipeline(way: str) -> str:
    """The default pipeline with lower-to-kernels' options for `way`."""
    from palimpsest.passes.pass_manager import PIPELINES

    passes = PIPELINES["default"].split(",")
    return ",".join(p + WAYS[way] if p == "lower-to-kernels" else p for p in passes)


def plan(path, shapes, way: str) -> dict:
    """Pool bytes, epilogues folded and operands prepacked for `way` at `shapes`."""
    from palimpsest.backends.binding import find_function
    from palimpsest.dialects.graph.from_onnx import import_onnx
    from palimpsest.ir import attributes as A
    from palimpsest.ir.types import FunctionType, TensorType
    from palimpsest.passes.pass_manager import PassManager, parse_pipeline
    from palimpsest.passes.plan_memory import plan_memory

    module = import_onnx(str(path))
    func = find_function(module, None)
    for arg, shape in zip(func.entry_block.args, shapes):
        arg.type = TensorType(tuple(shape), arg.type.element_type)
    func.properties["function_type"] = A.TypeAttr(FunctionType(
        tuple(a.type for a in func.entry_block.args), func.type.results))
    passes = [p for p in parse_pipeline(pipeline(way)) if p.name != "plan-memory"]
    PassManager(passes).run(module)
    kernels = [op for op in module.walk() if op.name in ("kernel.conv2d", "kernel.matmul")]
    report = plan_memory(module)
    return {"pool_bytes": sum(p.size for fn in report.functions for p in fn.pools),
            "epilogues": sum(1 for op in kernels if op.config().get("epilogue")),
            "epilogue_steps": sum(len(op.config().get("epilogue") or ()) for op in kernels),
            "elementwise": sum(1 for op in module.walk() if op.name == "kernel.elementwise"),
            "prepacked": sum(1 for op in module.walk() if op.name == "buffer.constant"
                             and (op.results[0].name_hint or "").endswith("_packed"))}


def run_model(name: str, entry: dict, runs: int, opencl: bool) -> dict:
    from palimpsest.backends.numpy.session import Session, has_control_flow
    from palimpsest.dialects.graph.from_onnx import import_onnx

    row = {"model": name}
    path = fetch_models.model_path(name, entry)
    feeds = fetch_models.inputs_for(entry)
    if has_control_flow(import_onnx(str(path))):
        row["status"] = "control flow (planned per segment): not compared"
        return row
    for way in WAYS:
        row[way] = plan(path, [a.shape for a in feeds.values()], way)
    for backend in ["numpy"] + (["opencl"] if opencl else []):
        sessions = {way: Session(str(path), backend=backend, pipeline=pipeline(way))
                    for way in WAYS}
        results = {way: s.run(feeds) for way, s in sessions.items()}   # (and warm-up)
        for way in WAYS:
            for out, value in results[way].items():
                want = results["fused"][out]
                scale = float(np.max(np.abs(want))) if np.size(want) else 0.0
                diff = float(np.max(np.abs(np.asarray(value, np.float64) - want),
                                    initial=0.0))
                row[way][f"{backend}_diff"] = max(row[way].get(f"{backend}_diff", 0.0),
                                                  diff / scale if scale else diff)
        times = {way: [] for way in WAYS}
        cpu = {way: [] for way in WAYS}
        for _ in range(runs):
            for way, session in sessions.items():
                start, start_cpu = time.perf_counter(), time.process_time()
                session.run(feeds)
                times[way].append(time.perf_counter() - start)
                cpu[way].append(time.process_time() - start_cpu)
        for way in WAYS:
            row[way][f"{backend}_ms"] = 1e3 * statistics.median(times[way])
            row[way][f"{backend}_cpu_ms"] = 1e3 * statistics.median(cpu[way])
    return row


def table(rows: list, opencl: bool) -> str:
    head = ["model", "epilogues (steps)", "elementwise left", "pools KiB fused / unfused",
            "numpy CPU ms fused / unfused", "prepacked", "numpy CPU ms unpacked"]
    if opencl:
        head += ["OpenCL CPU ms fused / unfused", "OpenCL CPU ms unpacked"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "status" in r:
            lines.append(f"| {r['model']} | {r['status']} |" + " |" * (len(head) - 2))
            continue
        f, u, p = r["fused"], r["no-epilogues"], r["no-prepack"]
        cells = [r["model"], f"{f['epilogues']} ({f['epilogue_steps']})",
                 f"{f['elementwise']} (was {u['elementwise']})",
                 f"{f['pool_bytes'] / 1024:.0f} / {u['pool_bytes'] / 1024:.0f}",
                 f"{f['numpy_cpu_ms']:.1f} / {u['numpy_cpu_ms']:.1f}", str(f["prepacked"]),
                 f"{p['numpy_cpu_ms']:.1f}"]
        if opencl:
            cells += [f"{f['opencl_cpu_ms']:.1f} / {u['opencl_cpu_ms']:.1f}",
                      f"{p['opencl_cpu_ms']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per way (median)")
    parser.add_argument("--opencl", action="store_true", help="also run the OpenCL backend")
    parser.add_argument("--models", help="comma-separated model names (default: all)")
    parser.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    args = parser.parse_args(argv)
    entries = fetch_models.corpus()
    names = args.models.split(",") if args.models else list(entries)
    rows = []
    for name in names:
        print(f"... {name}", file=sys.stderr, flush=True)
        try:
            rows.append(run_model(name, entries[name], args.runs, args.opencl))
        except Exception as error:  # noqa: BLE001 - reported in the table
            rows.append({"model": name, "status": f"{type(error).__name__}: "
                                                  f"{str(error).splitlines()[0][:80]}"})
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
    print(table(rows, args.opencl))
    return 0


if __name__ == "__main__":
    sys.exit(main())
