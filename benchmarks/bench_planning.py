#!/usr/bin/env python3
"""Memory-planning benchmark: plan-memory on the real models, with and without each
saving, against the lower bound and onnxruntime's memory.

Per model (examples/onnx_models.py at full size: ResNet-18-style and MobileNetV2-style
CNNs at 1x3x224x224, the MiniLM-L6-style encoder at batch 1, sequence 128, made static
with `dynamic=False`), the default pipeline
`infer-shapes,canonicalize,bufferize,lower-to-kernels,insert-deallocs,plan-memory`
and:

- the lower bound (the most bytes live at one moment, for the IR's op order) of the
  @activations pool, the arena plan-memory gives it, their ratio [issue target: arena
  <= 1.01 x lower bound], the @io pool (outputs, live for the whole run), the input bytes
  the caller holds, and the total (pools + inputs);
- **no reuse at all**: the sum of every planned buffer's size (what one allocation per
  tensor, never freed, would take);
- **in-place reuse**: the same with `bufferize{in-place=false}` (every op result gets
  its own buffer); the saving is the difference of the @activations arenas;
- **workspace sharing**: workspaces (kind = "workspace") planned with the activations
  versus each kept to itself for the whole run (the kernels' im2col matrices, padded
  inputs, softmax and norm statistics, made explicit by `lower-to-kernels`);
- **inputs as activations** (Glow #5011): `bufferize{inputs-as-activations}` and
  `plan-memory{inputs-as-activations}`: the input is copied once into the arena, inputs
  and outputs get their real lifetimes, no @io pool; the saving is the difference of the
  totals;
- **onnxruntime**: the process's resident-set growth while creating an
  InferenceSession (CPUExecutionProvider, one thread, default arena) and running it once,
  measured in a fresh subprocess with the peak-RSS counter reset (`/proc/self/clear_refs`)
  just before. It includes the weights onnxruntime copies in, its allocator's chunks and
  code pages touched; it is **not** an activation figure, and is printed beside the
  weights' size for that reason. Linux only.

Usage:
    python benchmarks/bench_planning.py [--quick] [--markdown PATH] [--only NAME]
        --quick: the small model variants (seconds; for a smoke test)
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from bench_common import models_module

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TARGET_RATIO = 1.01


def models(quick: bool) -> dict:
    M = models_module("palimpsest_onnx_models_bench")
    if quick:
        small = M.small()
        return {
            "ResNet-18-style (small)": small["resnet"],
            "MobileNetV2-style (small)": small["mobilenet_v2"],
            "MiniLM-style (small, seq 16)": lambda: M.minilm(
                hidden=32, heads=4, layers=2, ffn=64, vocab=100, max_positions=64,
                dynamic=False, seq=16),
        }
    return {
        "ResNet-18-style 1x3x224x224": M.resnet,
        "MobileNetV2-style 1x3x224x224": M.mobilenet_v2,
        "MiniLM-L6-style 1x128": lambda: M.minilm(dynamic=False),
    }


def plan(model, bufferize_options: str = "", **plan_options):
    from palimpsest.dialects.graph.from_onnx import import_onnx
    from palimpsest.ir.verifier import verify
    from palimpsest.passes.pass_manager import PassManager, parse_pipeline
    from palimpsest.passes.plan_memory import plan_memory

    module = import_onnx(model)
    bufferize = "bufferize" + (f"{{{bufferize_options}}}" if bufferize_options else "")
    # the default pipeline up to plan-memory: kernels make their scratch explicit
    PassManager(parse_pipeline(
        f"infer-shapes,canonicalize,{bufferize},lower-to-kernels,insert-deallocs")).run(module)
    counts = _counts(module)
    start = time.perf_counter()
    report = plan_memory(module, **plan_options)
    seconds = time.perf_counter() - start
    verify(module)
    return report.function("main"), counts, seconds, report


def _counts(module) -> dict:
    allocs = [op for op in module.walk() if op.name == "buffer.alloc"]
    constants = [op for op in module.walk() if op.name == "buffer.constant"]
    return {
        "buffers": len(allocs),
        "workspaces": sum(op.properties["kind"].value == "workspace" for op in allocs),
        "sum": sum(op.results[0].type.nbytes() or 0 for op in allocs),
        "weights": sum(op.results[0].type.nbytes() or 0 for op in constants),
    }


def workspace_unshared(fn) -> int:
    """The arena if every workspace kept its bytes for the whole run: the activations
    plan plus the workspaces laid end to end above it."""
    return sum(b.size for b in fn.buffers if b.kind == "workspace")


ORT_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import onnx
    import onnxruntime as ort

    def status(key):
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
        raise SystemExit("no " + key)

    path = sys.argv[1]
    model = onnx.load(path, load_external_data=False)
    rng = np.random.default_rng(0)
    feeds = {}
    for value in model.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        if value.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            feeds[value.name] = rng.integers(0, 2, shape).astype(np.int64)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    data = model.SerializeToString()
    del model
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    base = status("VmRSS:")
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    created = status("VmRSS:")
    session.run(None, feeds)
    peak = status("VmHWM:")
    print(created - base, peak - base)
""")


def ort_memory(model) -> tuple[int, int] | None:
    """(RSS growth after session creation, peak RSS growth over creation + one run)."""
    if not sys.platform.startswith("linux") or importlib.util.find_spec("onnxruntime") is None:
        return None
    import onnx

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.onnx")
        onnx.save(model, path)
        result = subprocess.run([sys.executable, "-c", ORT_CHILD, path],
                                capture_output=True, text=True)
    if result.returncode != 0:
        print(result.stderr, file=sys.stderr)
        return None
    created, peak = map(int, result.stdout.split())
    return created, peak


def ort_fixed_overhead():
    """The same measurement on a one-node model (Identity of a 4-float input): what
    onnxruntime's RSS grows by whatever the model."""
    if importlib.util.find_spec("onnx") is None:
        return None
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "identity",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what the example models use; onnxruntime may lag onnx's newest
    return ort_memory(model)


def mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def measure(name, build) -> dict:
    model = build()
    base, counts, seconds, _ = plan(model)
    no_in_place, counts_no_in_place, _, _ = plan(model, "in-place=false")
    as_act, _, _, _ = plan(model, "inputs-as-activations=true", inputs_as_activations=True)
    row = {
        "name": name,
        "buffers": counts["buffers"],
        "buffers_no_in_place": counts_no_in_place["buffers"],
        "workspaces": counts["workspaces"],
        "weights": counts["weights"],
        "sum": counts["sum"],
        "sum_no_in_place": counts_no_in_place["sum"],
        "lower_bound": base.pool("activations").lower_bound,
        "arena": base.pool("activations").size,
        "ratio": base.pool("activations").ratio,
        "algorithm": base.pool("activations").algorithm,
        "io": base.pool("io").size if base.pool("io") else 0,
        "external": base.external,
        "total": base.total,
        "seconds": seconds,
        "arena_no_in_place": no_in_place.pool("activations").size,
        "lb_no_in_place": no_in_place.pool("activations").lower_bound,
        "workspace_unshared": base.pool("activations").size + workspace_unshared(base),
        "as_act_arena": as_act.pool("activations").size,
        "as_act_lb": as_act.pool("activations").lower_bound,
        "as_act_total": as_act.total,
        "ort": ort_memory(model),
    }
    return row


def report(rows, quick: bool, overhead=None) -> str:
    import numpy
    import onnx

    try:
        import onnxruntime
        ort_version = onnxruntime.__version__
    except ImportError:
        ort_version = "not installed"
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    lines = [
        f"### Run of {now}" + (" (--quick: small variants)" if quick else ""),
        "",
        f"- Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"{platform.platform()}; load average {load}",
        f"- Python {platform.python_version()}; numpy {numpy.__version__}, onnx "
        f"{onnx.__version__}, onnxruntime {ort_version}",
        "- Pipeline: `infer-shapes,canonicalize,bufferize,lower-to-kernels,insert-deallocs,"
        "plan-memory` (algorithm auto, "
        "time budget 1 s, default pools, alignment 64)",
        "",
        "#### The plan against the lower bound (target: arena <= 1.01 x lower bound)",
        "",
        "| model | buffers | lower bound | arena (@activations) | ratio | target | @io (outputs) "
        "| caller-held inputs | total | no reuse at all (sum of sizes) | plan time |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        verdict = "PASS" if r["ratio"] <= TARGET_RATIO else "FAIL"
        lines.append(
            f"| {r['name']} | {r['buffers']} | {r['lower_bound']:,} ({mib(r['lower_bound'])}) "
            f"| {r['arena']:,} | {r['ratio']:.4f} | **{verdict}** | {r['io']:,} "
            f"| {r['external']:,} | {r['total']:,} ({mib(r['total'])}) "
            f"| {r['sum']:,} ({mib(r['sum'])}) | {r['seconds'] * 1000:.0f} ms |")
    lines += [
        "",
        "#### What each saving is worth (run with and without)",
        "",
        "| model | in-place off: arena | in-place saves | workspaces | workspace sharing "
        "saves | inputs as activations: arena / total | inputs as activations saves "
        "(total) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        in_place = r["arena_no_in_place"] - r["arena"]
        ws = r["workspace_unshared"] - r["arena"]
        iaa = r["total"] - r["as_act_total"]
        lines.append(
            f"| {r['name']} | {r['arena_no_in_place']:,} ({r['buffers_no_in_place']} buffers, "
            f"lower bound {r['lb_no_in_place']:,}) | {in_place:,} "
            f"({100 * in_place / max(r['arena_no_in_place'], 1):.1f}%) | {r['workspaces']} "
            f"| {ws:,} | {r['as_act_arena']:,} / {r['as_act_total']:,} "
            f"| {iaa:,} ({100 * iaa / max(r['total'], 1):.1f}%) |")
    lines += [
        "",
        "#### onnxruntime's memory on the same model (process RSS growth, not activations)",
        "",
        "ORT figures are the growth of the process's resident set in a fresh subprocess "
        "(peak counter reset just before): they include the weights onnxruntime copies "
        "in, its allocator's chunks and the code and thread pools it touches. "
        + (f"On a one-node Identity model the same growth is {mib(overhead[1])} (peak); the "
           "last column subtracts it and the weights, a rough estimate of what the run "
           "itself needs." if overhead else "The fixed overhead could not be measured."),
        "",
        "| model | weights (constants, not planned) | palimpsest total (pools + inputs) "
        "| ORT RSS growth: session creation | ORT peak RSS growth: creation + one run "
        "| ORT peak growth minus weights minus fixed overhead |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r["ort"] is None:
            lines.append(f"| {r['name']} | {mib(r['weights'])} | {mib(r['total'])} "
                         "| n/a | n/a | n/a |")
            continue
        created, peak = r["ort"]
        rest = peak - r["weights"] - (overhead[1] if overhead else 0)
        lines.append(f"| {r['name']} | {mib(r['weights'])} | {mib(r['total'])} "
                     f"| {mib(created)} | {mib(peak)} | {mib(rest)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small model variants")
    parser.add_argument("--markdown", help="also append the report to this file")
    parser.add_argument("--only", action="append", help="only models whose name contains this")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT.parent))
    from palimpsest.dialects import load_all

    load_all()
    rows = []
    for name, build in models(args.quick).items():
        if args.only and not any(o.lower() in name.lower() for o in args.only):
            continue
        print(f"planning {name} ...", file=sys.stderr, flush=True)
        rows.append(measure(name, build))
    text = report(rows, args.quick, ort_fixed_overhead())
    print(text)
    if args.markdown:
        with open(args.markdown, "a", encoding="utf-8") as handle:
            handle.write("\n" + text)
    return 0 if all(r["ratio"] <= TARGET_RATIO for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
