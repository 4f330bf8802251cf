#!/usr/bin/env python3
"""Session benchmark: shape-specialized plans, re-planning, zero-copy I/O (issue 6).

What it measures (issue targets in brackets):

(1) A run on a cached specialized plan against a fully static compile at the same shapes,
    for the MiniLM-L6-style encoder (dynamic batch and sequence; batch 1, sequences 32,
    64, 128) and the OCR conv stack (dynamic width; widths 128, 256, 512):
    - session: `Session(dynamic model)`, one warm-up run at the shape (the cache miss),
      then median `Session.run` over --runs runs that all hit the cache;
    - static: the model exported with static shapes, `import_onnx`, the `default`
      pipeline, then the numpy backend's `run(func, inputs)` (median over --runs runs,
      one warm-up); also the same static module run through a kept `Executor` (what a
      session plan does: no per-run op-info rebuild, outputs not copied), to separate the
      plan from the calling convention;
    - dynamic: `Session(dynamic model, specialize=False)`, the dynamic plan.
    Runs are interleaved (session, static, static-kept, dynamic) so load drifts hit all
    alike. Ratio = session median / static median [<= 1.03x].
(2) Re-planning for a new shape on 500-op models (`deep_mlp(nodes=400)`, 510 graph ops,
    and `nodes=500`, 630; batch dynamic): one session, a new batch size every run (each a
    cache miss), the compile time the session reports (clone + make the arguments static
    + `default` pipeline) over 40 batch sizes, median [<= 20 ms]; the same with every
    plan verified (`verify="plans"`), a session's first compile (verified once), and a
    per-step breakdown (median per pass, run as the session runs them, and the one
    verifier run the first compile adds).
(3) Zero-copy I/O on a 10 MB static float32 input and output (a single Relu over
    2,621,440 floats, built with onnx.helper): `last_stats.io_copy_bytes` per run with
    caller-supplied C-contiguous aligned input and output arrays [0], and with a
    non-contiguous input (a strided view) [exactly one copy, 10 MB]; the output array is
    checked to be the one written.

Numpy's BLAS is pinned to one thread (OPENBLAS/OMP/MKL_NUM_THREADS=1) unless
--numpy-threads says otherwise. The load average is recorded at the start and the end;
all figures are medians.

Usage:
    python benchmarks/bench_session.py [--quick] [--runs N] [--markdown PATH]
                                       [--only 1|2|3] [--numpy-threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from bench_common import limit_threads, report_header

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TARGET_RATIO = 1.03
TARGET_REPLAN_S = 0.020
IO_FLOATS = 10 * (1 << 20) // 4        # 10 MiB of float32


if __name__ == "__main__":
    limit_threads(sys.argv[1:])

import numpy as np  # noqa: E402

sys.path.insert(0, str(HERE))
from bench_graph import M, count_graph_ops, fmt_bytes, fmt_s, machine_info, timed  # noqa: E402


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def static_module(model):
    """import_onnx → default pipeline; returns (module, func)."""
    from palimpsest.backends.binding import find_function
    from palimpsest.dialects.graph.from_onnx import import_onnx
    from palimpsest.passes.pass_manager import PassManager, parse_pipeline

    module = import_onnx(model)
    PassManager(parse_pipeline("default")).run(module)
    return module, find_function(module, None)


# -- (1) cached specialized plan vs static compile ------------------------------------------------
def plan_cases(quick: bool) -> list:
    rng = np.random.default_rng(0)
    cases = []
    if quick:
        kwargs = dict(hidden=64, heads=4, layers=2)
        seqs, widths = (16, 32), (64, 128)
        ocr_kwargs = dict(channels=(8, 16, 32, 32))
    else:
        kwargs, seqs, widths, ocr_kwargs = {}, (32, 64, 128), (128, 256, 512), {}
    dyn = M.minilm(**kwargs)
    for seq in seqs:
        cases.append((f"MiniLM-style, batch 1, sequence {seq}", "minilm", dyn,
                      lambda s=seq: M.minilm(seq=s, batch=1, dynamic=False, **kwargs),
                      M.minilm_inputs(1, seq, seed=0)))
    dyn_ocr = M.ocr_crnn(**ocr_kwargs)
    for width in widths:
        cases.append((f"OCR-style, 1x1x32x{width}", "ocr", dyn_ocr,
                      lambda w=width: M.ocr_crnn(width=w, **ocr_kwargs),
                      {"image": rng.standard_normal((1, 1, 32, width)).astype(np.float32)}))
    return cases


def bench_plans(runs: int, quick: bool, say) -> list[dict]:
    from palimpsest.backends.numpy.arena import RunStats
    from palimpsest.backends.numpy.executor import Executor
    from palimpsest.backends.numpy.executor import run as static_run
    from palimpsest.backends.numpy.session import Session
    from palimpsest.dialects.graph.from_onnx import import_onnx

    sessions, dynamic_sessions = {}, {}
    rows = []
    for label, key, dyn_model, make_static, feeds in plan_cases(quick):
        if key not in sessions:
            module = import_onnx(dyn_model)
            sessions[key] = Session(module)
            dynamic_sessions[key] = Session(module, specialize=False)
        session, dynamic = sessions[key], dynamic_sessions[key]
        say(f"(1) {label}: compiling")
        t_static_compile, (smodule, sfunc) = timed(static_module, make_static())
        kept = Executor(False)

        def kept_run():
            kept.stats = RunStats()
            kept.pools, kept.arenas = {}, {}
            return kept.run(sfunc, feeds, None, copy_outputs=False)

        # warm-ups (the session's first run at this shape is the cache miss)
        got = session.run(feeds)
        miss_compile = session.last_stats.compile_seconds
        assert session.last_stats.cache_hit is False, "expected a cache miss"
        want = static_run(sfunc, feeds)
        kept_run()
        dyn_got = dynamic.run(feeds)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(dyn_got[name], want[name], rtol=1e-5, atol=1e-6)
        t_sess, t_static, t_kept, t_dyn = [], [], [], []
        hits = True
        for _ in range(runs):
            t_sess.append(timed(session.run, feeds)[0])
            hits = hits and session.last_stats.cache_hit is True
            t_static.append(timed(static_run, sfunc, feeds)[0])
            t_kept.append(timed(kept_run)[0])
            t_dyn.append(timed(dynamic.run, feeds)[0])
        report = session.last_stats
        row = {"label": label, "ops": count_graph_ops(session._module),
               "session": statistics.median(t_sess), "static": statistics.median(t_static),
               "kept": statistics.median(t_kept), "dynamic": statistics.median(t_dyn),
               "session_best": min(t_sess), "static_best": min(t_static),
               "miss_compile": miss_compile, "static_compile": t_static_compile,
               "hits": hits, "static_bytes": report.static_bytes,
               "dynamic_bytes": report.dynamic_bytes,
               "dyn_dynamic_bytes": dynamic.last_stats.dynamic_bytes,
               "dyn_allocs": dynamic.last_stats.allocations}
        row["ratio"] = row["session"] / row["static"]
        row["ratio_kept"] = row["session"] / row["kept"]
        row["ratio_best"] = row["session_best"] / row["static_best"]
        say(f"(1) {label}: session {fmt_ms(row['session'])}, static {fmt_ms(row['static'])} "
            f"(kept {fmt_ms(row['kept'])}), dynamic {fmt_ms(row['dynamic'])}, "
            f"ratio {row['ratio']:.3f}")
        rows.append(row)
    return rows


# -- (2) re-planning ------------------------------------------------------------------------------
def bench_replan(quick: bool, say) -> list[dict]:
    return [replan_one(nodes, quick, say) for nodes in (400, 500)]


def _specialized_clone(module, batch: int):
    """What Session._compile does before the pipeline: clone, arguments made static."""
    from palimpsest.backends.binding import find_function
    from palimpsest.backends.numpy.session import clone_op
    from palimpsest.ir.attributes import TypeAttr
    from palimpsest.ir.types import FunctionType, TensorType

    clone = clone_op(module)
    func = find_function(clone, None)
    arg = func.entry_block.args[0]
    arg.type = TensorType((batch, 16, 64), func.type.inputs[0].element_type)
    func.properties["function_type"] = TypeAttr(FunctionType((arg.type,), func.type.results))
    return clone


def replan_one(nodes: int, quick: bool, say) -> dict:
    import gc

    from palimpsest.backends.numpy.session import Session, deallocs_for_planning
    from palimpsest.dialects.graph.from_onnx import import_onnx
    from palimpsest.ir.verifier import verify
    from palimpsest.passes.pass_manager import PassManager, parse_pipeline

    model = M.deep_mlp(nodes=nodes)
    module = import_onnx(model)
    ops = count_graph_ops(module)
    total_ops = sum(1 for _ in module.walk())
    shapes = 10 if quick else 40
    say(f"(2) deep_mlp(nodes={nodes}): {len(model.graph.node)} ONNX nodes, {ops} graph ops")
    rng = np.random.default_rng(0)

    def feed(batch):
        return {"x": rng.standard_normal((batch, 16, 64)).astype(np.float32)}

    Session(module).run(feed(99))  # a throwaway warm-up compile (imports, first-use caches)
    # the re-plan: one session, a new batch size every run (each a cache miss)
    replans, verified, first_runs = [], [], []
    session = Session(module, cache_size=shapes + 2)
    session.run(feed(1))               # its first plan (verified once: verify="first")
    first_compile = session.last_stats.compile_seconds
    checked = Session(module, cache_size=shapes + 2, verify="plans")
    checked.run(feed(1))
    for batch in range(2, 2 + shapes):  # interleaved, so load drifts hit both alike
        x = feed(batch)
        start = time.perf_counter()
        session.run(x)
        first_runs.append(time.perf_counter() - start)
        assert session.last_stats.cache_hit is False
        replans.append(session.last_stats.compile_seconds)
        checked.run(x)
        verified.append(checked.last_stats.compile_seconds)
    # the first compile of fresh sessions (each verifies its plan once)
    firsts = []
    for batch in range(2, 2 + min(shapes, 10)):
        fresh = Session(module)
        fresh.run(feed(batch))
        firsts.append(fresh.last_stats.compile_seconds)
    # per-step breakdown, the session's way (GC off, no verifier between passes)
    steps: dict = {}
    for batch in range(2, 2 + shapes):
        gc.disable()
        try:
            start = time.perf_counter()
            clone = _specialized_clone(module, batch)
            steps.setdefault("clone + static arguments", []).append(
                time.perf_counter() - start)
            manager = PassManager(deallocs_for_planning(parse_pipeline("default")),
                                  verify_each=False)
            manager.run(clone)
            for name, seconds in manager.timings:
                steps.setdefault(name, []).append(seconds)
            start = time.perf_counter()
            verify(clone)
            steps.setdefault("(verifier, once at the end)", []).append(
                time.perf_counter() - start)
        finally:
            gc.enable()
    breakdown = [(name, statistics.median(v)) for name, v in steps.items()]
    result = {"nodes": len(model.graph.node), "ops": ops, "total_ops": total_ops,
              "shapes": shapes, "replan": statistics.median(replans),
              "replan_min": min(replans), "replan_max": max(replans),
              "replan_p90": sorted(replans)[int(0.9 * (len(replans) - 1))],
              "verified": statistics.median(verified), "first_compile": first_compile,
              "fresh_first": statistics.median(firsts),
              "first_run": statistics.median(first_runs), "breakdown": breakdown,
              "pipeline": "default"}
    say(f"(2) nodes={nodes}: re-plan median {fmt_ms(result['replan'])} "
        f"(min {fmt_ms(result['replan_min'])}, max {fmt_ms(result['replan_max'])}); "
        f"verified every plan {fmt_ms(result['verified'])}")
    return result


# -- (3) zero-copy I/O ----------------------------------------------------------------------------
def io_model(op: str = "Relu"):
    import onnx
    from onnx import TensorProto, helper

    shape = [IO_FLOATS // 1024, 1024]
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"])], "io10mb",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model, tuple(shape)


def bench_io(runs: int, say) -> list[dict]:
    from palimpsest.backends.numpy.session import Session
    from palimpsest.dialects.graph.from_onnx import import_onnx

    model, shape = io_model()
    session = Session(import_onnx(model))
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    y = np.empty(shape, np.float32)
    wide = rng.standard_normal((shape[0], shape[1] * 2)).astype(np.float32)
    strided = wide[:, ::2]           # non-contiguous view, same shape
    rows = []
    for label, inputs in (("contiguous aligned input, output array given", x),
                          ("non-contiguous input (strided view), output array given",
                           strided)):
        session.run({"x": inputs}, outputs={"y": y})   # warm-up / compile
        copies, times, same = [], [], True
        for _ in range(runs):
            y.fill(-1.0)
            t, out = timed(session.run, {"x": inputs}, outputs={"y": y})
            times.append(t)
            copies.append(session.last_stats.io_copy_bytes)
            same = same and (out["y"] is y or np.shares_memory(out["y"], y))
        np.testing.assert_array_equal(y, np.maximum(inputs, 0))
        report = session.last_stats
        row = {"label": label, "input_bytes": inputs.nbytes, "output_bytes": y.nbytes,
               "contiguous": bool(inputs.flags.c_contiguous),
               "aligned": bool(inputs.flags.aligned),
               "copied": statistics.median(copies), "copied_max": max(copies),
               "static_bytes": report.static_bytes, "dynamic_bytes": report.dynamic_bytes,
               "allocations": report.allocations, "output_is_caller_array": same,
               "time": statistics.median(times), "plan": report.plan}
        say(f"(3) {label}: {row['copied']:,} bytes copied per run")
        rows.append(row)
    # also: no output array given (results are views of the run's arena)
    session.run({"x": x})
    copies = []
    for _ in range(runs):
        session.run({"x": x})
        copies.append(session.last_stats.io_copy_bytes)
    report = session.last_stats
    rows.append({"label": "contiguous aligned input, no output array (result returned)",
                 "input_bytes": x.nbytes, "output_bytes": x.nbytes, "contiguous": True,
                 "aligned": True, "copied": statistics.median(copies),
                 "copied_max": max(copies), "static_bytes": report.static_bytes,
                 "dynamic_bytes": report.dynamic_bytes, "allocations": report.allocations,
                 "output_is_caller_array": None, "time": report.run_seconds,
                 "plan": report.plan})
    return rows


# -- report ---------------------------------------------------------------------------------------
def build_report(info, args, rows1, r2s, rows3) -> str:
    out = report_header(info, args.quick, f"- numpy BLAS threads: {info['blas_threads']}")
    if rows1:
        out += ["#### (1) Cached specialized plan vs a fully static compile "
                f"(median of {args.runs} runs, interleaved)", "",
                "| case | graph ops | session, cached plan | static compile, `run` | "
                "static, kept executor | dynamic plan | **ratio** (session / static) | "
                "session / kept | best / best | cache-miss compile | static compile |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows1:
            out.append(f"| {r['label']} | {r['ops']} | {fmt_ms(r['session'])} | "
                       f"{fmt_ms(r['static'])} | {fmt_ms(r['kept'])} | "
                       f"{fmt_ms(r['dynamic'])} | **{r['ratio']:.3f}x** | "
                       f"{r['ratio_kept']:.3f}x | {r['ratio_best']:.3f}x | "
                       f"{fmt_s(r['miss_compile'])} | {fmt_s(r['static_compile'])} |")
        worst = max(r["ratio"] for r in rows1)
        worst_kept = max(r["ratio_kept"] for r in rows1)
        all_hits = all(r["hits"] for r in rows1)
        out += ["",
                "Session: `Session(dynamic model)`, one warm-up run at the shape (the cache "
                "miss, whose compile time is shown), then every timed run a cache hit"
                f" ({'checked: all hits' if all_hits else 'NOT all hits'}). Static: the "
                "model exported with static shapes, `import_onnx` + `default` pipeline, "
                "run with the numpy backend's `run(func, inputs)` (a fresh `Executor` per "
                "call, outputs copied out); 'kept executor' runs the same static module "
                "through one `Executor` kept across runs, as a session plan does. Dynamic "
                "plan: `Session(..., specialize=False)`. Outputs of all three agree "
                "(rtol 1e-5).",
                "",
                f"Target cached / static <= {TARGET_RATIO:g}x: worst median ratio "
                f"{worst:.3f}x -> **{'PASS' if worst <= TARGET_RATIO else 'FAIL'}** "
                f"(against the kept-executor static run: worst {worst_kept:.3f}x -> "
                f"{'pass' if worst_kept <= TARGET_RATIO else 'fail'}).", ""]
        out += ["Memory of the last cached run / dynamic run:", "",
                "| case | specialized: static bytes | specialized: dynamic bytes | "
                "dynamic plan: dynamic bytes (allocations) |", "|---|---:|---:|---:|"]
        for r in rows1:
            out.append(f"| {r['label']} | {fmt_bytes(r['static_bytes'])} | "
                       f"{fmt_bytes(r['dynamic_bytes'])} | {fmt_bytes(r['dyn_dynamic_bytes'])}"
                       f" ({r['dyn_allocs']}) |")
        out.append("")
    for r2 in r2s or []:
        passes = [(n, t) for n, t in r2["breakdown"] if not n.startswith("(verifier")]
        checks = [(n, t) for n, t in r2["breakdown"] if n.startswith("(verifier")]
        total = sum(t for _, t in passes)
        verdict = "PASS" if r2["replan"] <= TARGET_REPLAN_S else "FAIL"
        out += [f"#### (2) Re-planning for a new shape, `deep_mlp(nodes={r2['nodes']})` "
                f"(batch dynamic)", "",
                f"- Model: {r2['nodes']} ONNX nodes -> {r2['ops']} graph-dialect ops after "
                f"import ({r2['total_ops']} ops in the module, func/return/constants "
                "included).",
                f"- **Re-plan** (`last_stats.compile_seconds` of a run at a new batch size on "
                f"a session that has compiled before: clone + static arguments + "
                f"`{r2['pipeline']}` pipeline; {r2['shapes']} batch sizes, each a cache "
                f"miss): median **{fmt_ms(r2['replan'])}** (min {fmt_ms(r2['replan_min'])}, "
                f"90th percentile {fmt_ms(r2['replan_p90'])}, max "
                f"{fmt_ms(r2['replan_max'])}).",
                f"- The same with `Session(verify=\"plans\")` (every plan verified once, "
                f"after its pipeline): median {fmt_ms(r2['verified'])}.",
                f"- A session's first compile (verified once, `verify=\"first\"`): "
                f"{fmt_ms(r2['first_compile'])}; fresh sessions, median "
                f"{fmt_ms(r2['fresh_first'])}.",
                f"- Re-plan + the run itself, median: {fmt_ms(r2['first_run'])}.",
                "",
                "Breakdown (median per step over the same shapes, run as the session runs "
                "them: GC off, no verifier between passes):", "",
                "| step | time |", "|---|---:|"]
        for name, seconds in passes:
            out.append(f"| {name} | {fmt_ms(seconds)} |")
        out.append(f"| **sum** | **{fmt_ms(total)}** |")
        for name, seconds in checks:
            out.append(f"| {name} (not in a re-plan) | {fmt_ms(seconds)} |")
        out += ["", f"Target re-plan <= {TARGET_REPLAN_S * 1e3:g} ms for a 500-op model "
                f"({r2['ops']} graph ops here): median {fmt_ms(r2['replan'])} -> "
                f"**{verdict}**", ""]
    if rows3:
        out += ["#### (3) Zero-copy I/O, 10 MiB static float32 input and output "
                f"(one Relu, [{IO_FLOATS // 1024}, 1024]; median of {args.runs} runs)", "",
                "| case | input | bytes copied per run (median / max) | output written in "
                "caller's array | run-time allocations | static bytes | run time |",
                "|---|---:|---:|:-:|---:|---:|---:|"]
        for r in rows3:
            written = {True: "yes", False: "no", None: "n/a"}[r["output_is_caller_array"]]
            out.append(f"| {r['label']} | {fmt_bytes(r['input_bytes'])} | "
                       f"{r['copied']:,} / {r['copied_max']:,} | {written} | "
                       f"{r['allocations']} | {fmt_bytes(r['static_bytes'])} | "
                       f"{fmt_ms(r['time'])} |")
        zero = rows3[0]["copied_max"] == 0
        one = rows3[1]["copied"] == rows3[1]["input_bytes"] == rows3[1]["copied_max"]
        out += ["", f"Target 0 bytes copied with contiguous aligned I/O: "
                f"**{'PASS' if zero else 'FAIL'}**; non-contiguous input copied exactly once "
                f"({rows3[1]['input_bytes']:,} bytes): **{'PASS' if one else 'FAIL'}**.", ""]
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="small MiniLM/OCR variants, fewer shapes and runs")
    parser.add_argument("--runs", type=int, help="timed runs per case (default 15, quick 5)")
    parser.add_argument("--markdown", help="append the report to this markdown file")
    parser.add_argument("--only", choices=("1", "2", "3"))
    parser.add_argument("--numpy-threads", default="1",
                        help="BLAS threads for numpy (0: leave as is)")
    args = parser.parse_args(argv)
    args.runs = args.runs or (5 if args.quick else 15)

    def say(message):
        print(message, file=sys.stderr, flush=True)

    info = machine_info()
    rows1 = bench_plans(args.runs, args.quick, say) if args.only in (None, "1") else []
    r2s = bench_replan(args.quick, say) if args.only in (None, "2") else []
    rows3 = bench_io(args.runs, say) if args.only in (None, "3") else []
    info["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    report = build_report(info, args, rows1, r2s, rows3)
    print(report)
    if args.markdown:
        path = Path(args.markdown)
        header = ""
        if not path.exists():
            header = ("# Session benchmark results\n\n"
                      "Written by `benchmarks/bench_session.py` (issue 6, Performance). "
                      "Each run appends a section.\n\n")
        with open(path, "a", encoding="utf-8") as file:
            file.write(header + report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
