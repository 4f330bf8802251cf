#!/usr/bin/env python3
"""Graph-level benchmark: importing real models, and the reference executor against
onnxruntime.

What it measures (issue targets in brackets):

(a) Import + infer-shapes of a 1,000-node model (examples/onnx_models.py `deep_mlp`:
    residual MLP blocks with LayerNormalization, erf-GELU and the exporter's
    Shape→Gather→Unsqueeze→Concat→Reshape idiom), from the .onnx file: `import_onnx`
    (onnx.load, ONNX's shape inference, building the IR), `verify`, the `infer-shapes`
    pass. Dynamic-batch and static variants; also the import without ONNX's shape
    inference, where infer-shapes does all the work [total <= 2 s].
(b) Latency of the graph-level reference executor (numpy) against onnxruntime
    (CPUExecutionProvider, intra_op_num_threads = inter_op_num_threads = 1) on the
    full-size ResNet-18-style and MobileNetV2-style CNNs at 1x3x224x224 and the
    MiniLM-L6-style encoder at batch 1, sequence 128 (plus the OCR model at two
    widths): median of --runs runs after one warm-up each; the ratio of the medians.
    Numpy's BLAS is limited to one thread too (OPENBLAS/OMP/MKL_NUM_THREADS=1, unless
    --numpy-threads says otherwise) so both sides use one core. Every output is first
    checked against onnxruntime (rtol 1e-4, atol 1e-5) and its max relative error
    reported. No target.
(c) Print and parse of the imported IR with the weights in a side file (what
    `palimpsest-import -o model.pal` writes): print time, time to write the side file,
    parse + verify time, text and side-file sizes; print(parse(text)) == text is checked.

Usage:
    python benchmarks/bench_graph.py [--quick] [--runs N] [--repeat N] [--markdown PATH]
                                     [--only a|b|c] [--numpy-threads N]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_common import limit_threads, models_module, report_header

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TARGET_IMPORT_S = 2.0
RTOL, ATOL = 1e-4, 1e-5


if __name__ == "__main__":
    limit_threads(sys.argv[1:])  # the executor's matmuls and convs: before numpy loads

import numpy as np  # noqa: E402

M = models_module()


# -- small utilities ------------------------------------------------------------------------------

def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - start, result


def fmt_s(seconds: float) -> str:
    if seconds >= 10:
        return f"{seconds:.1f} s"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 0.01:
        return f"{seconds * 1e3:.0f} ms"
    return f"{seconds * 1e3:.2f} ms"


def fmt_bytes(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n} B"


def max_relative_error(got, want) -> float:
    """max |got - want| / max |want| (a scale-aware figure that near-zero elements do
    not blow up); the pass/fail check is assert_allclose(rtol, atol) elementwise."""
    scale = float(np.max(np.abs(want))) or 1.0
    return float(np.max(np.abs(got.astype(np.float64) - want))) / scale


def tolerance_used(got, want) -> float:
    """max over elements of |got - want| / (atol + rtol |want|): the share of
    assert_allclose's budget used (<= 1 passes)."""
    return float(np.max(np.abs(got.astype(np.float64) - want) / (ATOL + RTOL * np.abs(want))))


def machine_info() -> dict:
    import importlib.metadata

    def version(dist):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "?"

    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "cpu": cpu, "cpus": usable, "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": ", ".join(f"{d} {version(d)}" for d in
                              ("numpy", "scipy", "onnx", "onnxruntime", "palimpsest")),
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg")
        else "?",
    }


def ort_session(model):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def import_pipeline(source, shape_inference=True):
    """import_onnx → verify → infer-shapes, each timed; returns (times, module)."""
    from palimpsest.dialects.graph.from_onnx import import_onnx
    from palimpsest.ir.verifier import verify
    from palimpsest.passes.pass_manager import PassManager, parse_pipeline

    pipeline = PassManager(parse_pipeline("infer-shapes"))
    t_import, module = timed(import_onnx, source, shape_inference=shape_inference)
    t_verify, _ = timed(verify, module)
    t_infer, _ = timed(pipeline.run, module)
    verify(module)
    return {"import": t_import, "verify": t_verify, "infer-shapes": t_infer,
            "total": t_import + t_verify + t_infer}, module


def count_graph_ops(module) -> int:
    return sum(1 for op in module.walk() if op.name.startswith("graph."))


# -- (a) import + infer-shapes --------------------------------------------------------------------

def bench_import(workdir: Path, repeat: int, say) -> list[dict]:
    import onnx

    rows = []
    for label, dynamic, shape_inference in (
            ("dynamic batch", True, True),
            ("static", False, True),
            ("dynamic batch, no ONNX shape inference", True, False),
            ("static, no ONNX shape inference", False, False)):
        model = M.deep_mlp(nodes=1000, dynamic=dynamic)
        path = workdir / f"deep_mlp_{'dyn' if dynamic else 'static'}.onnx"
        if not path.exists():
            onnx.save(model, path)
        say(f"(a) deep_mlp {label}: {len(model.graph.node)} nodes")
        samples = []
        for _ in range(repeat):
            times, module = import_pipeline(str(path), shape_inference)
            samples.append(times)
        shapes_left = sum(1 for op in module.walk() if op.name == "graph.shape")
        rows.append({
            "label": label, "nodes": len(model.graph.node), "ops": count_graph_ops(module),
            "shapes_left": shapes_left, "bytes": path.stat().st_size,
            **{k: statistics.median(s[k] for s in samples) for k in samples[0]},
            "best": min(s["total"] for s in samples),
        })
    return rows


# -- (b) latency against onnxruntime --------------------------------------------------------------

def latency_cases(quick: bool) -> list:
    rng = np.random.default_rng(0)

    def image(shape):
        return {"input": rng.standard_normal(shape).astype(np.float32)}

    cases = [
        ("ResNet-18-style, 1x3x224x224", M.resnet, image((1, 3, 224, 224))),
        ("MobileNetV2-style, 1x3x224x224", M.mobilenet_v2, image((1, 3, 224, 224))),
        ("MiniLM-L6-style, batch 1, sequence 128", M.minilm, M.minilm_inputs(1, 128, seed=0)),
    ]
    if not quick:
        for width in (128, 512):
            cases.append((f"OCR conv stack, 1x1x32x{width} (dynamic width)", M.ocr_crnn,
                          {"image": rng.standard_normal((1, 1, 32, width)).astype(np.float32)}))
    return cases


def bench_latency(runs: int, ort_runs: int, quick: bool, say) -> tuple[list, dict]:
    from palimpsest.backends.binding import find_function
    from palimpsest.backends.reference.executor import run

    rows, modules = [], {}
    for label, build, feeds in latency_cases(quick):
        say(f"(b) {label}: building")
        model = build()
        times, module = import_pipeline(model)
        modules[build.__name__] = (model, module)
        func = find_function(module, None)
        session = ort_session(model)
        expected = session.run(None, feeds)
        say(f"(b) {label}: warm-up and check")
        t_first, got = timed(run, func, feeds)
        errors, budget = [], []
        for array, want in zip(got.values(), expected):
            np.testing.assert_allclose(array, want, rtol=RTOL, atol=ATOL, err_msg=label)
            errors.append(max_relative_error(array, want))
            budget.append(tolerance_used(array, want))
        ref_times, ort_times = [], []
        for index in range(max(runs, ort_runs)):  # interleaved
            if index < runs:
                ref_times.append(timed(run, func, feeds)[0])
            if index < ort_runs:
                ort_times.append(timed(session.run, None, feeds)[0])
        ref, ortm = statistics.median(ref_times), statistics.median(ort_times)
        say(f"(b) {label}: reference {fmt_s(ref)}, onnxruntime {fmt_s(ortm)}")
        rows.append({"label": label, "nodes": len(model.graph.node),
                     "params": sum(int(np.prod(t.dims)) for t in model.graph.initializer),
                     "first": t_first, "ref": ref, "ref_best": min(ref_times),
                     "ort": ortm, "ort_best": min(ort_times), "ratio": ref / ortm,
                     "runs": runs, "ort_runs": ort_runs, "error": max(errors),
                     "budget": max(budget)})
    return rows, modules


# -- (c) print / parse with the side file ---------------------------------------------------------

def bench_text(workdir: Path, modules: dict, repeat: int, say) -> list[dict]:
    from palimpsest.ir.parser import parse
    from palimpsest.ir.printer import print_ir
    from palimpsest.ir.resources import externalize_resources
    from palimpsest.ir.verifier import verify

    rows = []
    for name, (model, module) in modules.items():
        say(f"(c) {name}: print / parse")
        pal = workdir / f"{name}.pal"
        weights = workdir / f"{name}.pal.weights.bin"
        t_write, nbytes = timed(externalize_resources, module, str(weights))
        print_times, parse_times, verify_times = [], [], []
        text = None
        for _ in range(repeat):
            t, text = timed(print_ir, module, resource_base=str(workdir))
            print_times.append(t)
        pal.write_text(text)
        for _ in range(repeat):
            t, parsed = timed(parse, text, str(pal))
            parse_times.append(t)
            verify_times.append(timed(verify, parsed)[0])
        again = print_ir(parsed, resource_base=str(workdir))
        if again != text:
            raise SystemExit(f"{name}: print(parse(text)) differs from the text")
        rows.append({"name": name, "ops": count_graph_ops(module), "lines": text.count("\n"),
                     "text": len(text.encode()), "weights": nbytes,
                     "print": statistics.median(print_times),
                     "write": t_write, "parse": statistics.median(parse_times),
                     "verify": statistics.median(verify_times)})
    return rows


# -- report ---------------------------------------------------------------------------------------

def build_report(info, args, a_rows, b_rows, c_rows) -> str:
    out = report_header(info, args.quick, f"- numpy BLAS threads: {info['blas_threads']}; "
                        "onnxruntime: CPUExecutionProvider, intra_op_num_threads = "
                        "inter_op_num_threads = 1", load_label="Load average")
    if a_rows:
        out += ["#### (a) Import + infer-shapes of a 1,000-node model "
                f"(`deep_mlp(nodes=1000)`, median of {args.repeat})", "",
                "| variant | ONNX nodes | graph ops after | graph.shape left | import_onnx | "
                "verify | infer-shapes | **total** | best |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in a_rows:
            out.append(f"| {r['label']} | {r['nodes']:,} | {r['ops']:,} | {r['shapes_left']} | "
                       f"{fmt_s(r['import'])} | {fmt_s(r['verify'])} | "
                       f"{fmt_s(r['infer-shapes'])} | **{fmt_s(r['total'])}** | "
                       f"{fmt_s(r['best'])} |")
        worst = max(r["total"] for r in a_rows)
        verdict = "PASS" if worst <= TARGET_IMPORT_S else "FAIL"
        out += ["", f"`import_onnx` includes onnx.load and (first two rows) ONNX's shape "
                f"inference. Target total <= {TARGET_IMPORT_S:g} s: slowest median "
                f"{fmt_s(worst)} -> **{verdict}**", ""]
    if b_rows:
        out += ["#### (b) Reference executor vs onnxruntime, one thread each", "",
                "| model | ONNX nodes | parameters | reference (median) | reference best | "
                "first run | onnxruntime (median) | onnxruntime best | **ratio** | "
                "max rel. error | tolerance used |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in b_rows:
            out.append(f"| {r['label']} | {r['nodes']} | {r['params'] / 1e6:.1f} M | "
                       f"{fmt_s(r['ref'])} | {fmt_s(r['ref_best'])} | {fmt_s(r['first'])} | "
                       f"{fmt_s(r['ort'])} | {fmt_s(r['ort_best'])} | "
                       f"**{r['ratio']:.0f}x** | {r['error']:.1e} | {r['budget']:.0%} |")
        r0 = b_rows[0]
        out += ["", f"Medians of {r0['runs']} reference runs and {r0['ort_runs']} "
                "onnxruntime runs (interleaved) after one warm-up; ratio = reference / "
                "onnxruntime. Max rel. error = max |ref - ort| / max |ort| over the "
                f"outputs; every output also passes assert_allclose(rtol={RTOL:g}, "
                f"atol={ATOL:g}), and tolerance used = max |ref - ort| / (atol + rtol |ort|) "
                "elementwise (100% would be the limit). No target.", ""]
    if c_rows:
        out += ["#### (c) Print / parse of the imported IR, weights in a side file "
                f"(median of {args.repeat})", "",
                "| model | graph ops | text | side file | print | write side file | parse | "
                "verify | parse ops/s |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in c_rows:
            out.append(f"| {r['name']} | {r['ops']:,} | {fmt_bytes(r['text'])} "
                       f"({r['lines']:,} lines) | {fmt_bytes(r['weights'])} | "
                       f"{fmt_s(r['print'])} | {fmt_s(r['write'])} | {fmt_s(r['parse'])} | "
                       f"{fmt_s(r['verify'])} | {r['ops'] / r['parse']:,.0f} |")
        out += ["", "The side file is read only when a constant is used, so parse time "
                "does not depend on the weights' size; print(parse(text)) == text is "
                "checked for each model.", ""]
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="fewer runs, no OCR rows (about a minute)")
    parser.add_argument("--runs", type=int, help="reference-executor runs per model "
                        "(default 5, quick 2)")
    parser.add_argument("--ort-runs", type=int, help="onnxruntime runs (default 20, quick 5)")
    parser.add_argument("--repeat", type=int, help="repetitions for (a) and (c) "
                        "(default 5, quick 2)")
    parser.add_argument("--only", action="append", choices=["a", "b", "c"],
                        help="run only these parts (c needs b's models)")
    parser.add_argument("--numpy-threads", type=int, default=1,
                        help="BLAS threads for numpy (default 1; 0 leaves the default)")
    parser.add_argument("--markdown", metavar="PATH", help="also write the report here")
    parser.add_argument("--workdir", help="keep the generated files here (default: a temp dir)")
    args = parser.parse_args(argv)
    args.runs = args.runs or (2 if args.quick else 5)
    args.ort_runs = args.ort_runs or (5 if args.quick else 20)
    args.repeat = args.repeat or (2 if args.quick else 5)
    parts = set(args.only or "abc")

    from palimpsest.dialects import load_all

    load_all()
    info = machine_info()

    def say(message):
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="bench_graph_") as tmp:
        workdir = Path(args.workdir or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        a_rows = bench_import(workdir, args.repeat, say) if "a" in parts else []
        b_rows, modules = [], {}
        if parts & {"b", "c"}:
            b_rows, modules = bench_latency(args.runs, args.ort_runs, args.quick, say)
            if "b" not in parts:
                b_rows = []
        if "c" in parts:
            deep = M.deep_mlp(nodes=1000)
            modules["deep_mlp"] = (deep, import_pipeline(deep)[1])
            c_rows = bench_text(workdir, {k: v for k, v in modules.items()
                                          if k != "ocr_crnn"}, args.repeat, say)
        else:
            c_rows = []
    info["load_end"] = machine_info()["load"]
    report = build_report(info, args, a_rows, b_rows, c_rows)
    print(report)
    if args.markdown:
        Path(args.markdown).write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
