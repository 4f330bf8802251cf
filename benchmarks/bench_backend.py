#!/usr/bin/env python3
"""Numpy backend at the kernel level (planned arena) against onnxruntime.

What it measures (issue target in brackets):

- Latency of `palimpsest`'s numpy backend running kernel-level IR inside planned arenas
  (pipeline `infer-shapes,canonicalize,bufferize,lower-to-kernels,insert-deallocs,
  plan-memory`) against onnxruntime (CPUExecutionProvider, intra_op_num_threads =
  inter_op_num_threads = 1), on the ResNet-18-style and MobileNetV2-style CNNs at
  1x3x224x224 and the MiniLM-L6-style encoder at batch 1, sequence 128 (static): median of
  --runs runs after --warmup warm-up runs, and the ratio of the medians
  [numpy backend <= 1.5x onnxruntime]. Process CPU time is recorded too (the VM is shared).
- Every output of the numpy backend checked against onnxruntime's: max |np - ort| /
  max |ort| (and assert_allclose rtol 1e-4, atol 1e-5).
- Peak process memory above the import baseline, for both engines: each engine/model pair
  runs in its own subprocess; the baseline is `resource.getrusage(RUSAGE_SELF).ru_maxrss`
  after that engine's imports, the peak is ru_maxrss after building the model (the ONNX
  proto with its weights), preparing it (import + lowering + planning / session creation)
  and all the runs. (tracemalloc cannot see onnxruntime's allocations.)
- With --profile: time per kernel op kind (`kernel.conv2d[dw]` etc.; the executor's
  `_execute` timed per op) and the executor's own per-op overhead (a run where every
  kernel implementation is a no-op: what is left is binding, dispatch and views).

BLAS threads: OPENBLAS_NUM_THREADS / OMP_NUM_THREADS / MKL_NUM_THREADS = 1 are set in the
environment of every worker before numpy is imported.

Usage:
    python benchmarks/bench_backend.py [--quick] [--runs N] [--warmup N] [--profile]
                                       [--only resnet,mobilenet_v2,minilm] [--markdown PATH]
                                       [--openblas-coretype NAME]

OpenBLAS's kernel set (Haswell = AVX2, SkylakeX = AVX-512) decides the GEMM-bound share of
the numpy backend's time, and onnxruntime's MLAS picks its own from the CPU: the report
names the set numpy used. --openblas-coretype sets it for the numpy worker only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_common import THREAD_VARS, emit_report, models_module

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PIPELINE = "infer-shapes,canonicalize,bufferize,lower-to-kernels,insert-deallocs,plan-memory"
TARGET_RATIO = 1.5
RTOL, ATOL = 1e-4, 1e-5
MODELS = ("resnet", "mobilenet_v2", "minilm")
LABELS = {"resnet": "ResNet-18-style", "mobilenet_v2": "MobileNetV2-style",
          "minilm": "MiniLM-L6-style"}


# -- worker (one engine, one model, one process) ---------------------------------------------------

def build_case(name: str, quick: bool):
    """(onnx model, feeds, shape label)."""
    import numpy as np

    M = models_module()
    rng = np.random.default_rng(0)
    if name == "minilm":
        if quick:
            return (M.minilm(seq=32, hidden=64, heads=4, layers=2, ffn=256, vocab=1000,
                             max_positions=64, dynamic=False),
                    M.minilm_inputs(1, 32, vocab=1000, seed=0), "1x32 (small)")
        return M.minilm(seq=128, dynamic=False), M.minilm_inputs(1, 128, seed=0), "1x128"
    image = 64 if quick else 224
    if name == "resnet":
        model = M.resnet(image=image, width=32) if quick else M.resnet()
    else:
        model = M.mobilenet_v2(image=image, width_mult=0.5) if quick else M.mobilenet_v2()
    feeds = {"input": rng.standard_normal((1, 3, image, image)).astype(np.float32)}
    return model, feeds, f"1x3x{image}x{image}" + (" (small)" if quick else "")


def _maxrss_bytes() -> int:
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024


def _time_runs(fn, warmup: int, runs: int) -> dict:
    import statistics

    for _ in range(warmup):
        fn()
    wall, cpu = [], []
    for _ in range(runs):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return {"median": statistics.median(wall), "best": min(wall),
            "cpu": statistics.median(cpu), "runs": runs}


def _op_key(op, KO) -> str:
    name = op.name
    if name == "kernel.conv2d":
        from palimpsest.dialects import kernel as K

        shape = tuple(op.ins[1].type.shape)
        if K.Conv2dOp.is_depthwise(shape, KO.config_of(op)):
            return name + "[depthwise]"
        return name + ("[1x1]" if shape[2:] == (1, 1) else f"[{shape[2]}x{shape[3]}]")
    if name == "kernel.elementwise":
        return name + "[" + ",".join(s.split(".")[-1] for s in KO.config_of(op)["steps"]) + "]"
    return name


def profile_numpy(executor, func, feeds, repeat: int = 3) -> dict:
    """Per op kind: seconds per run, op count; and the executor's overhead (no-op kernels)."""
    import palimpsest.backends.numpy.executor as E
    import palimpsest.backends.numpy.kernel_ops as KO

    times, counts = {}, {}
    original = E.Executor._execute

    def timed_execute(self, op, values, depth):
        start = time.perf_counter()
        original(self, op, values, depth)
        elapsed = time.perf_counter() - start
        key = _op_key(op, KO)
        times[key] = times.get(key, 0.0) + elapsed
        counts[key] = counts.get(key, 0) + 1

    E.Executor._execute = timed_execute
    try:
        for _ in range(repeat):
            executor.run(func, feeds)
    finally:
        E.Executor._execute = original
    per_op = {k: {"s": times[k] / repeat, "n": counts[k] // repeat} for k in times}
    # dispatch overhead: every kernel implementation (and buffer.compute) a no-op
    saved = dict(KO.KERNEL_IMPLS)
    saved_compute = E.Executor._compute
    try:
        for key in KO.KERNEL_IMPLS:
            KO.KERNEL_IMPLS[key] = lambda op, inputs, outputs, workspaces: None
        E.Executor._compute = lambda self, op, values: None
        with _quiet_numpy():
            timing = _time_runs(lambda: executor.run(func, feeds), 2, 10)
    finally:
        KO.KERNEL_IMPLS.update(saved)
        E.Executor._compute = saved_compute
    ops = sum(1 for op in func.entry_block.ops)
    kernel_ops = sum(1 for op in func.entry_block.ops if op.name.startswith("kernel."))
    return {"per_op": per_op, "overhead": timing["median"], "ops": ops,
            "kernel_ops": kernel_ops}


class _quiet_numpy:
    def __enter__(self):
        import numpy as np

        self.old = np.seterr(all="ignore")

    def __exit__(self, *exc):
        import numpy as np

        np.seterr(**self.old)


def worker(engine: str, name: str, quick: bool, runs: int, warmup: int, profile: bool,
           out_dir: Path) -> dict:
    import numpy as np

    if engine == "ort":
        import onnxruntime as ort
    else:
        import onnx  # noqa: F401  (the numpy side imports the ONNX model too)

        from palimpsest.backends.binding import find_function
        from palimpsest.backends.numpy.blas import blas_summary
        from palimpsest.backends.numpy.executor import Executor
        from palimpsest.dialects import load_all
        from palimpsest.dialects.graph.from_onnx import import_onnx
        from palimpsest.passes.pass_manager import PassManager, parse_pipeline

        load_all()
        import palimpsest.backends.numpy.kernel_ops  # noqa: F401
        try:
            import scipy.special  # noqa: F401  (erf)
        except ImportError:
            pass
    baseline = _maxrss_bytes()
    model, feeds, shape = build_case(name, quick)
    start = time.perf_counter()
    if engine == "ort":
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        del model

        def call():
            return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    else:
        module = import_onnx(model)
        del model
        PassManager(parse_pipeline(PIPELINE)).run(module)
        func = find_function(module, None)
        executor = Executor()

        def call():
            return executor.run(func, feeds)
    prepare = time.perf_counter() - start
    first_start = time.perf_counter()
    outputs = call()
    first = time.perf_counter() - first_start
    np.savez(out_dir / f"{engine}-{name}.npz", **outputs)
    timing = _time_runs(call, warmup, runs)
    result = {"engine": engine, "model": name, "shape": shape, "prepare": prepare,
              "blas": blas_summary() if engine == "numpy" else "",
              "first": first, **timing, "baseline_rss": baseline,
              "peak_rss_growth": _maxrss_bytes() - baseline}
    if engine == "numpy":
        stats = executor.stats
        result["arena_bytes"] = sum(a.data.nbytes for a in executor.pools.values())
        result["temporary_bytes"] = getattr(stats, "temporary_bytes", 0)
        if profile:
            result["profile"] = profile_numpy(executor, func, feeds)
    return result


# -- driver -----------------------------------------------------------------------------------------

def machine_info() -> dict:
    """The machine and library versions (one helper for every benchmark: bench_graph's)."""
    sys.path.insert(0, str(HERE))
    from bench_graph import machine_info as shared_machine_info

    return shared_machine_info()


def fmt_s(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


def fmt_mib(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MiB"


def run_worker(engine, name, args, out_dir: Path) -> dict:
    env = dict(os.environ)
    for var in THREAD_VARS:
        env[var] = "1"
    if args.openblas_coretype and engine == "numpy":
        env["OPENBLAS_CORETYPE"] = args.openblas_coretype
    command = [sys.executable, __file__, "--worker", engine, name, "--runs", str(args.runs),
               "--warmup", str(args.warmup), "--out-dir", str(out_dir)]
    if args.quick:
        command.append("--quick")
    if args.profile and engine == "numpy":
        command.append("--profile")
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{engine} worker for {name} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(out_dir: Path, name: str) -> float:
    import numpy as np

    got = np.load(out_dir / f"numpy-{name}.npz")
    want = np.load(out_dir / f"ort-{name}.npz")
    worst = 0.0
    for key in want.files:
        g, w = got[key], want[key]
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=f"{name}: {key}")
        scale = float(np.max(np.abs(w))) or 1.0
        worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - w))) / scale)
    return worst


def build_report(info, args, rows) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [f"### Run of {now}{' (--quick)' if args.quick else ''}", "",
           f"- Machine: {info['cpu']}, {info['cpus']} usable CPUs; Python {info['python']}; "
           f"{info['versions']}",
           "- One thread each: BLAS env vars = 1 for numpy; onnxruntime intra/inter-op = 1",
           f"- numpy's {rows[0]['numpy']['blas']}" if rows else "",
           f"- Load average at start / end: {info['load']} / {info.get('load_end', '?')}",
           f"- Pipeline: `{PIPELINE}`; numpy backend (`backends/numpy/`)", "",
           "| model | input | numpy backend (median) | best | CPU | onnxruntime (median) | best "
           "| CPU | **ratio** (medians) | CPU ratio | max rel. error | target "
           f"<= {TARGET_RATIO}x |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        n, o = r["numpy"], r["ort"]
        ratio = n["median"] / o["median"]
        verdict = "met" if ratio <= TARGET_RATIO else "not met"
        out.append(f"| {LABELS[r['model']]} | {n['shape']} | {fmt_s(n['median'])} | "
                   f"{fmt_s(n['best'])} | {fmt_s(n['cpu'])} | {fmt_s(o['median'])} | "
                   f"{fmt_s(o['best'])} | {fmt_s(o['cpu'])} | **{ratio:.2f}x** | "
                   f"{n['cpu'] / o['cpu']:.2f}x | {r['error']:.1e} | {verdict} |")
    out += ["", f"Medians of {args.runs} runs after {args.warmup} warm-up runs (plus the "
            "checked first run), each engine in its own process. Max rel. error = "
            "max |numpy - ort| / max |ort| over the outputs; each output also passes "
            f"assert_allclose(rtol={RTOL:g}, atol={ATOL:g}).", "",
            "Peak process memory above the import baseline (ru_maxrss high-water mark, one "
            "subprocess per engine/model; includes building the ONNX model and its weights, "
            "preparing it and all the runs):", "",
            "| model | numpy backend: import baseline | **peak growth** | planned arenas | "
            "onnxruntime: import baseline | **peak growth** | prepare (numpy / ort) |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        n, o = r["numpy"], r["ort"]
        out.append(f"| {LABELS[r['model']]} | {fmt_mib(n['baseline_rss'])} | "
                   f"**{fmt_mib(n['peak_rss_growth'])}** | {fmt_mib(n['arena_bytes'])} | "
                   f"{fmt_mib(o['baseline_rss'])} | **{fmt_mib(o['peak_rss_growth'])}** | "
                   f"{n['prepare']:.2f} s / {o['prepare']:.2f} s |")
    profiled = [r for r in rows if "profile" in r["numpy"]]
    for r in profiled:
        p = r["numpy"]["profile"]
        total = sum(v["s"] for v in p["per_op"].values())
        out += ["", f"Profile, {LABELS[r['model']]} ({p['kernel_ops']} kernel ops of "
                f"{p['ops']} ops; executor time per op kind, mean of 3 runs):", "",
                "| op kind | count | time | share |", "|---|---:|---:|---:|"]
        for key, v in sorted(p["per_op"].items(), key=lambda kv: -kv[1]["s"])[:12]:
            out.append(f"| `{key}` | {v['n']} | {v['s'] * 1e3:.2f} ms | "
                       f"{v['s'] / total:.0%} |")
        out += ["", f"Executor overhead (every kernel a no-op): {fmt_s(p['overhead'])} per "
                f"run = {p['overhead'] / p['ops'] * 1e6:.1f} us per op "
                f"({p['overhead'] / r['numpy']['median']:.1%} of the run)."]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small model variants")
    parser.add_argument("--runs", type=int, help="timed runs (default 20, quick 5)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--profile", action="store_true",
                        help="per-op-kind profile and executor overhead of the numpy backend")
    parser.add_argument("--only", help="comma-separated subset of " + ",".join(MODELS))
    parser.add_argument("--markdown", metavar="PATH", help="also write the report here")
    parser.add_argument("--openblas-coretype", metavar="NAME",
                        help="OPENBLAS_CORETYPE for the numpy backend's worker (default: "
                             "the environment's); the report names the kernels used")
    parser.add_argument("--worker", nargs=2, metavar=("ENGINE", "MODEL"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--out-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.runs = args.runs or (5 if args.quick else 20)
    if args.worker:
        engine, name = args.worker
        result = worker(engine, name, args.quick, args.runs, args.warmup, args.profile,
                        Path(args.out_dir))
        print(json.dumps(result))
        return 0
    models = args.only.split(",") if args.only else list(MODELS)
    info = machine_info()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_backend_") as tmp:
        out_dir = Path(tmp)
        for name in models:
            row = {"model": name}
            for engine in ("ort", "numpy"):
                print(f"[{time.strftime('%H:%M:%S')}] {name}: {engine}", file=sys.stderr,
                      flush=True)
                row[engine] = run_worker(engine, name, args, out_dir)
            row["error"] = compare(out_dir, name)
            n, o = row["numpy"], row["ort"]
            print(f"[{time.strftime('%H:%M:%S')}] {name}: numpy {fmt_s(n['median'])}, "
                  f"ort {fmt_s(o['median'])}, ratio {n['median'] / o['median']:.2f}",
                  file=sys.stderr, flush=True)
            rows.append(row)
    info["load_end"] = machine_info()["load"]
    emit_report(build_report(info, args, rows), args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
