#!/usr/bin/env python3
"""The OpenCL backend (PoCL's CPU device) against the numpy backend and onnxruntime.

What it measures (issue #7; target in brackets):

- Latency per model, median of --runs runs after --warmup, each engine in its own
  process: the OpenCL backend through a Session (planned pools on the device; PoCL's
  worker threads: all cores, and 1 with POCL_MAX_PTHREAD_COUNT=1), the numpy backend
  (OpenBLAS at 1 and 2 threads) and onnxruntime (intra-op threads 1 and 2), on the
  ResNet-18-style and MobileNetV2-style CNNs at 1x3x224x224 and the MiniLM-L6-style
  encoder at 1x128 [OpenCL no slower than the numpy backend on the CNNs].
- Kernel build time, cold and warm: the first run's program builds and its wall time
  with an empty PoCL kernel cache (a fresh POCL_CACHE_DIR), then in a new process with
  that cache filled (warm), and the in-process warm state (later runs build nothing).
- Every output checked against onnxruntime's (max |diff| / max |ort|).

Usage:
    python benchmarks/bench_opencl.py [--quick] [--runs N] [--warmup N]
                                      [--only resnet,mobilenet_v2,minilm] [--markdown PATH]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_backend import LABELS, MODELS, _time_runs, build_case, fmt_s, machine_info  # noqa: E402
from bench_common import THREAD_VARS, emit_report  # noqa: E402

ENGINES = ("opencl", "opencl-1t", "numpy-1t", "numpy-2t", "ort-1t", "ort-2t")


def worker(engine: str, name: str, quick: bool, runs: int, warmup: int) -> dict:
    import time

    import numpy as np

    model, feeds, shape = build_case(name, quick)
    result = {"engine": engine, "model": name, "shape": shape}
    if engine.startswith("ort"):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = int(engine[-2])
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        run = lambda: session.run(None, feeds)  # noqa: E731
        outputs = run()
    else:
        from palimpsest.backends.numpy.session import Session
        from palimpsest.dialects.graph.from_onnx import import_onnx

        backend = "opencl" if engine.startswith("opencl") else "numpy"
        session = Session(import_onnx(model), backend=backend)
        start = time.perf_counter()
        session.run(feeds)
        result["first_run"] = time.perf_counter() - start
        result["compile"] = session.last_stats.compile_seconds
        run = lambda: session.run(feeds)  # noqa: E731
        outputs = list(run().values())
        if backend == "opencl":
            executor = session.last_plan.executor
            build = executor.device.build_stats
            result.update(builds=build.builds, build_seconds=build.build_seconds,
                          host_ops=session.last_stats.run_stats.host_ops,
                          launches=session.last_stats.run_stats.device_launches,
                          device=executor.device.name)
    result.update(_time_runs(run, warmup, runs))
    result["outputs"] = [np.asarray(o).tolist() for o in outputs]
    return result


def run_worker(engine: str, name: str, args, cache_dir: str) -> dict:
    env = dict(os.environ, POCL_CACHE_DIR=cache_dir)
    threads = "1" if engine.endswith("1t") else "2"
    for var in THREAD_VARS:
        env[var] = threads
    if engine == "opencl-1t":
        env["POCL_MAX_PTHREAD_COUNT"] = "1"
    command = [sys.executable, __file__, "--worker", engine, name, "--runs", str(args.runs),
               "--warmup", str(args.warmup)] + (["--quick"] if args.quick else [])
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{engine} {name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def max_error(got, want) -> float:
    import numpy as np

    worst = 0.0
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        worst = max(worst, float(np.abs(g - w).max() / max(np.abs(w).max(), 1e-30)))
    return worst


def build_report(info, args, rows, builds) -> str:
    lines = [f"# OpenCL backend (`bench_opencl.py`), {datetime.date.today()}", "",
             f"Machine: {info['cpu']}, {info['cpus']} CPUs, load {info['load']}; "
             f"{info['versions']}; device: {builds[0]['device'] if builds else '?'}.",
             f"Runs: median of {args.runs} after {args.warmup} warm-up"
             f"{' (--quick: small models)' if args.quick else ''}.", "",
             "| model | " + " | ".join(ENGINES) + " | OpenCL / numpy-2t | OpenCL / ort-2t | "
             "max rel. error vs ort |",
             "|---|" + "---|" * (len(ENGINES) + 3)]
    for name, by_engine in rows.items():
        cells = [fmt_s(by_engine[e]["median"]) for e in ENGINES]
        cl = by_engine["opencl"]["median"]
        lines.append(f"| {LABELS[name]} {by_engine['opencl']['shape']} | " + " | ".join(cells)
                     + f" | {cl / by_engine['numpy-2t']['median']:.2f}x"
                     f" | {cl / by_engine['ort-2t']['median']:.2f}x"
                     f" | {by_engine['opencl']['error']:.1e} |")
    lines += ["", "Kernel builds (first run of a fresh session; PoCL's on-disk cache empty, "
              "then filled):", "",
              "| model | programs | build, cold | first run, cold | build, warm cache | "
              "first run, warm cache | later runs |", "|---|---|---|---|---|---|---|"]
    for b in builds:
        lines.append(f"| {LABELS[b['model']]} | {b['cold']['builds']} | "
                     f"{fmt_s(b['cold']['build_seconds'])} | {fmt_s(b['cold']['first_run'])} | "
                     f"{fmt_s(b['warm']['build_seconds'])} | {fmt_s(b['warm']['first_run'])} | "
                     f"{fmt_s(b['warm']['median'])} (0 builds) |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=2, metavar=("ENGINE", "MODEL"), help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="small models")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--only", default=",".join(MODELS))
    parser.add_argument("--markdown", help="write the report here too")
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.worker[1], args.quick, args.runs,
                                args.warmup)))
        return 0
    info = machine_info()
    rows, builds = {}, []
    for name in args.only.split(","):
        with tempfile.TemporaryDirectory() as cache:
            cold = run_worker("opencl", name, args, cache)   # an empty PoCL cache
            warm = run_worker("opencl", name, args, cache)   # the same cache, filled
        builds.append({"model": name, "cold": cold, "warm": warm, "device": cold["device"]})
        by_engine = {"opencl": warm}
        with tempfile.TemporaryDirectory() as cache:
            for engine in ENGINES[1:]:
                by_engine[engine] = run_worker(engine, name, args, cache)
        reference = by_engine["ort-1t"]["outputs"]
        for engine, row in by_engine.items():
            row["error"] = max_error(row["outputs"], reference)
        if warm.get("host_ops"):
            print(f"note: {name} ran on the host: {warm['host_ops']}", file=sys.stderr)
        rows[name] = by_engine
        print(f"{name}: " + ", ".join(f"{e} {fmt_s(r['median'])}" for e, r in by_engine.items()),
              file=sys.stderr)
    emit_report(build_report(info, args, rows, builds), args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
