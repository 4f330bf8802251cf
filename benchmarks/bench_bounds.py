#!/usr/bin/env python3
"""Bounded dims benchmark: one plan at the bounds against plans specialized per shape (issue 6).

For the OCR conv stack (width dynamic, bounded by --ocr-bound, default 1280) and the
MiniLM-L6-style encoder (batch bounded by 1, sequence by --minilm-bound, default 128):

- bounded: `Session(model, specialize=False, bounds=...)`: compiled once; every buffer
  whose `?` dims follow from the bounded ones sits in the pools at its bound. Reported:
  its static bytes (the same at every shape), its run-time allocations (0 expected) and
  the median run time at each shape;
- specialized: `Session(model)` (the default): one plan per shape, static at that shape.
  Reported: its static bytes and median run time at the same shapes;
- dynamic: `Session(model, specialize=False)` with no bounds: compiled once, its `?`
  buffers allocated at run time. Reported: its static and dynamic bytes and run time (it
  runs the same ops as the bounded plan: what differs is where the memory comes from).

Runs alternate between the three (load drifts hit all alike); outputs are compared.
Numpy's BLAS is pinned to one thread (as bench_session.py).

Usage:
    python benchmarks/bench_bounds.py [--quick] [--runs N] [--markdown PATH]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_name] = "1"

import numpy as np  # noqa: E402

sys.path.insert(0, str(HERE))
from bench_graph import M, fmt_bytes, machine_info, timed  # noqa: E402


def cases(args) -> list:
    rng = np.random.default_rng(0)
    ocr_kwargs = dict(channels=(8, 16, 32, 32)) if args.quick else {}
    minilm_kwargs = dict(hidden=64, heads=4, layers=2) if args.quick else {}
    ocr_bound, minilm_bound = args.ocr_bound, args.minilm_bound
    widths = sorted({ocr_bound // 8, ocr_bound // 2, ocr_bound})
    seqs = sorted({minilm_bound // 4, minilm_bound // 2, minilm_bound})
    return [
        (f"OCR-style, width <= {ocr_bound}", M.ocr_crnn(**ocr_kwargs),
         {"image": {3: ocr_bound}},
         [(f"width {w}", {"image": rng.standard_normal((1, 1, 32, w)).astype(np.float32)})
          for w in widths]),
        (f"MiniLM-style, sequence <= {minilm_bound}", M.minilm(**minilm_kwargs),
         {"input_ids": {0: 1, 1: minilm_bound}, "attention_mask": {0: 1, 1: minilm_bound}},
         [(f"sequence {s}", M.minilm_inputs(1, s, seed=0)) for s in seqs]),
    ]


def bench(args, say) -> list[dict]:
    from palimpsest.backends.numpy.session import Session
    from palimpsest.dialects.graph.from_onnx import import_onnx

    rows = []
    for label, model, bounds, shapes in cases(args):
        module = import_onnx(model)
        bounded = Session(module, specialize=False, bounds=bounds)
        specialized = Session(module)
        dynamic = Session(module, specialize=False)
        say(f"{label}: compiling the bounded plan")
        bounded.prepare()
        compile_bounded = bounded.stats.compile_seconds
        for shape, feeds in shapes:
            got, want = bounded.run(feeds), specialized.run(feeds)  # warm-up, compile
            dyn = dynamic.run(feeds)
            for name in want:
                np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(dyn[name], want[name], rtol=1e-5, atol=1e-6)
            t_bounded, t_specialized, t_dynamic = [], [], []
            for _ in range(args.runs):
                t_bounded.append(timed(bounded.run, feeds)[0])
                t_specialized.append(timed(specialized.run, feeds)[0])
                t_dynamic.append(timed(dynamic.run, feeds)[0])
            b, s, d = bounded.last_stats, specialized.last_stats, dynamic.last_stats
            row = {"case": label, "shape": shape,
                   "bounded_static": b.static_bytes, "bounded_dynamic": b.dynamic_bytes,
                   "bounded_allocs": b.allocations, "bounded_plan": b.plan,
                   "specialized_static": s.static_bytes,
                   "bounded_time": statistics.median(t_bounded),
                   "specialized_time": statistics.median(t_specialized),
                   "dynamic_static": d.static_bytes, "dynamic_dynamic": d.dynamic_bytes,
                   "dynamic_allocs": d.allocations,
                   "dynamic_time": statistics.median(t_dynamic),
                   "compile_bounded": compile_bounded,
                   "compiles_bounded": bounded.stats.compiles,
                   "compiles_specialized": specialized.stats.compiles}
            say(f"{label}, {shape}: bounded {fmt_bytes(row['bounded_static'])} "
                f"{row['bounded_time'] * 1e3:.2f} ms; specialized "
                f"{fmt_bytes(row['specialized_static'])} {row['specialized_time'] * 1e3:.2f} ms")
            rows.append(row)
    return rows


def report(info, args, rows) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [f"### Bounded dims: run of {now}{' (--quick)' if args.quick else ''}", "",
           f"- Machine: {info['cpu']}, {info['cpus']} usable CPUs, {info['platform']}",
           f"- Python {info['python']}; {info['versions']}; numpy BLAS threads 1",
           f"- Load average (1/5/15 min) at start / end: {info['load']} / "
           f"{info.get('load_end', '?')}", "",
           f"Median of {args.runs} runs each, alternating. Bounded: `Session(model, "
           "specialize=False, bounds=...)`, compiled once; specialized: `Session(model)`, "
           "one plan per shape.", "",
           "| model | shape | bounded: static bytes | bounded: run-time allocations | "
           "specialized: static bytes | bounded / specialized bytes | dynamic, no bounds: "
           "static + run-time bytes (allocations) | bounded run | specialized run | "
           "dynamic run | bounded / specialized time |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['case']} | {r['shape']} | {fmt_bytes(r['bounded_static'])} | "
                   f"{r['bounded_allocs']} ({fmt_bytes(r['bounded_dynamic'])}) | "
                   f"{fmt_bytes(r['specialized_static'])} | "
                   f"{r['bounded_static'] / r['specialized_static']:.2f}x | "
                   f"{fmt_bytes(r['dynamic_static'])} + {fmt_bytes(r['dynamic_dynamic'])} "
                   f"({r['dynamic_allocs']}) | "
                   f"{r['bounded_time'] * 1e3:.2f} ms | {r['specialized_time'] * 1e3:.2f} ms | "
                   f"{r['dynamic_time'] * 1e3:.2f} ms | "
                   f"{r['bounded_time'] / r['specialized_time']:.3f}x |")
    out.append("")
    for case in dict.fromkeys(r["case"] for r in rows):
        first = next(r for r in rows if r["case"] == case)
        last = [r for r in rows if r["case"] == case][-1]
        out.append(f"- {case}: the bounded plan compiled once in "
                   f"{first['compile_bounded'] * 1e3:.0f} ms ({last['compiles_bounded']} "
                   f"compile for every shape; the specialized session compiled "
                   f"{last['compiles_specialized']}).")
    out.append("")
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small model variants")
    parser.add_argument("--runs", type=int, help="timed runs per shape (default 15, quick 5)")
    parser.add_argument("--ocr-bound", type=int, default=1280)
    parser.add_argument("--minilm-bound", type=int, default=128)
    parser.add_argument("--markdown", help="append the report to this markdown file")
    args = parser.parse_args(argv)
    args.runs = args.runs or (5 if args.quick else 15)

    def say(message):
        print(message, file=sys.stderr, flush=True)

    info = machine_info()
    rows = bench(args, say)
    info["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    text = report(info, args, rows)
    print(text)
    if args.markdown:
        with open(args.markdown, "a", encoding="utf-8") as file:
            file.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
