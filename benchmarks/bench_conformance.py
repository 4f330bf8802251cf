"""ONNX's node suite, every case, through Palimpsest and onnxruntime side by side.

Every single-node case of the installed onnx's node test suite (all ops, all opsets;
`test/unit/onnx_node_cases.py` generates and caches them) runs

- through Palimpsest as a user's model would: `import_onnx` → a `Session` (the default
  pipeline: kernels, every static buffer planned) on the numpy backend, poisoning on;
- through onnxruntime (1 intra-op thread, all optimizations), on the same inputs;

and each result is compared with ONNX's expected outputs (floats: rtol 1e-3, atol 1e-5,
widened to one unit in the last place for 16- and 8-bit floats; integers and bools exact;
shapes and dtypes must match). Outcomes:

- pass: every output matches;
- refused: a clean, one-line error (a diagnostic naming the op, or a binding error) at
  import, compile or run time;
- wrong: it ran, and an output differs;
- crash: any other exception (an internal error).

    python benchmarks/bench_conformance.py                  # totals + per-op table
    python benchmarks/bench_conformance.py --ops Softmax,LSTM --details
    python benchmarks/bench_conformance.py --json out.json  # every case's outcome
    python benchmarks/bench_conformance.py --no-ort         # Palimpsest only
    python benchmarks/bench_conformance.py --operators docs/operators.md   # the op table

Threads are pinned to one before numpy loads (OPENBLAS_NUM_THREADS / OMP_NUM_THREADS).
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections import Counter, defaultdict  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "test" / "unit"))

import numpy as np  # noqa: E402

import onnx_node_cases as cases  # noqa: E402
from example_models import onnxruntime_run as run_onnxruntime  # noqa: E402  (test/unit)

RTOL, ATOL = 1e-3, 1e-5
CASE_SECONDS = 120  # a case running longer than this is a hang, counted as a crash
OUTCOMES = ("pass", "refused", "wrong", "crash")


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout(f"ran longer than {CASE_SECONDS} s")


def _load(name):
    """(model proto, feeds by input name, expected by output name) of a cached case."""
    import onnx
    from onnx import numpy_helper

    root = cases.ensure_cache()
    model = onnx.load(str(root / name / "model.onnx"))
    data = root / name / "test_data_set_0"
    feeds, expected = {}, {}
    for kind, values, into in (("input", model.graph.input, feeds),
                               ("output", model.graph.output, expected)):
        for j, vi in enumerate(values):
            tensor = onnx.TensorProto()
            tensor.ParseFromString((data / f"{kind}_{j}.pb").read_bytes())
            into[vi.name] = numpy_helper.to_array(tensor)
    return model, feeds, expected


def compare(got: dict, expected: dict) -> str | None:
    """None when every expected output matches; else what differs, in one line."""
    for name, want in expected.items():
        if name not in got:
            return f"output '{name}' missing"
        have = np.asarray(got[name])
        want = np.asarray(want)
        if have.dtype != want.dtype:
            return f"output '{name}': dtype {have.dtype}, expected {want.dtype}"
        if have.shape != want.shape:
            return f"output '{name}': shape {have.shape}, expected {want.shape}"
        if want.dtype.kind in "fc" or str(want.dtype).startswith(("float", "bfloat")):
            a = have.astype(np.float64)
            b = want.astype(np.float64)
            rtol, atol = RTOL, ATOL
            if want.dtype.itemsize <= 2:   # f16, bf16, float8: one unit in the last place
                import ml_dtypes

                eps = float(ml_dtypes.finfo(want.dtype).eps)
                rtol, atol = max(rtol, eps), max(atol, eps)
            if not np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
                diff = np.nanmax(np.abs(a - b)) if a.size else 0.0
                return f"output '{name}': max |diff| {diff:.3g}"
        elif not np.array_equal(have, want):
            return f"output '{name}': values differ"
    return None


def run_palimpsest(model, feeds: dict) -> dict:
    from palimpsest.backends.numpy.session import Session
    from palimpsest.dialects.graph.from_onnx import import_onnx

    module = import_onnx(model)
    session = Session(module, poison=True)
    return session.run(feeds)


def _is_refusal(error: Exception) -> bool:
    from palimpsest.backends.binding import BindingError
    from palimpsest.ir.diagnostics import DiagnosticError

    return isinstance(error, (DiagnosticError, BindingError))


def classify(runner, model, feeds, expected, clean) -> tuple[str, str]:
    """(outcome, detail): the detail of a failure is the whole message (a refusal's must be
    one line)."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_SECONDS)
    try:
        got = runner(model, feeds)
    except _Timeout as error:
        return "crash", str(error)
    except Exception as error:  # noqa: BLE001 - every failure is classified
        text = f"{type(error).__name__}: {error}"
        return ("refused" if clean(error) else "crash"), text
    finally:
        signal.alarm(0)
    problem = compare(got, expected)
    return ("wrong", problem) if problem else ("pass", "")


def run_all(op_filter=None, with_ort=True, progress=False) -> dict:
    """{case name: {"op": type, "opset": n, "palimpsest": (outcome, detail),
    "onnxruntime": (outcome, detail)}} over every cached tensor-valued case."""
    index = cases.load_index()
    results = {}
    names = sorted(index, key=lambda n: (index[n]["op_type"], n))
    for count, name in enumerate(names):
        entry = index[name]
        if op_filter and entry["op_type"] not in op_filter:
            continue
        if entry.get("non_tensor") or entry.get("error"):
            continue  # sequence/optional/map values: not tensors, for either side
        model, feeds, expected = _load(name)
        row = {"op": entry["op_type"], "domain": entry.get("domain", ""),
               "opset": entry.get("opset")}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with np.errstate(all="ignore"):
                row["palimpsest"] = classify(run_palimpsest, model, feeds, expected,
                                             _is_refusal)
                if with_ort:
                    row["onnxruntime"] = classify(run_onnxruntime, model, feeds, expected,
                                                  lambda e: True)
        results[name] = row
        if progress and count % 100 == 0:
            print(f"... {count}/{len(names)}", file=sys.stderr, flush=True)
    return results


def summarize(results: dict, with_ort: bool) -> str:
    sides = ["palimpsest"] + (["onnxruntime"] if with_ort else [])
    lines = []
    per_op: dict = defaultdict(lambda: {s: Counter() for s in sides})
    for row in results.values():
        for side in sides:
            per_op[row["op"]][side][row[side][0]] += 1
    header = f"| side | cases | {' | '.join(OUTCOMES)} | op types fully passed (of {len(per_op)}) |"
    lines += [header, "|" + "---|" * (len(OUTCOMES) + 3)]
    for side in sides:
        total = Counter()
        full = 0
        for counts in per_op.values():
            total.update(counts[side])
            full += counts[side]["pass"] == sum(counts[side].values())
        lines.append(f"| {side} | {sum(total.values())} | "
                     + " | ".join(str(total[o]) for o in OUTCOMES) + f" | {full} |")
    if with_ort:
        both = sum(1 for r in results.values()
                   if r["palimpsest"][0] == "pass" and r["onnxruntime"][0] == "pass")
        only_ort = sum(1 for r in results.values()
                       if r["palimpsest"][0] != "pass" and r["onnxruntime"][0] == "pass")
        only_pal = sum(1 for r in results.values()
                       if r["palimpsest"][0] == "pass" and r["onnxruntime"][0] != "pass")
        lines.append("")
        lines.append(f"both pass: {both}; onnxruntime only: {only_ort}; "
                     f"Palimpsest only: {only_pal}")
    lines.append("")
    cols = " | ".join(f"{s} {'/'.join(o[0] for o in OUTCOMES)}" for s in sides)
    lines.append(f"| op | {cols} |")
    lines.append("|---|" + "---|" * len(sides))
    for op in sorted(per_op):
        cells = " | ".join("/".join(str(per_op[op][s][o]) for o in OUTCOMES) for s in sides)
        lines.append(f"| {op} | {cells} |")
    return "\n".join(lines)


# graph ops that canonicalize rewrites into others where it can
CANONICALIZED = {"graph.einsum": "kernel.matmul where two operands contract "
                                 "(canonicalize_einsum.py), else kernel.generic"}


def runs_as(graph_op: str) -> str:
    """How the default pipeline runs a graph op: its kernel op(s), a fused elementwise
    step, or kernel.generic (the reference kernel on the host, writing its planned
    buffers)."""
    from palimpsest.dialects.kernel_elementwise import STEPS
    from palimpsest.passes.kernel_rules import RULES

    from palimpsest.backends.reference.executor import REGION_OPS

    if graph_op in REGION_OPS:
        return "graph level: the model runs on the reference executor, unplanned"
    if graph_op in STEPS:
        return "kernel.elementwise (fused step)"
    if graph_op in CANONICALIZED:
        return CANONICALIZED[graph_op]
    rule = RULES.get(graph_op)
    if rule is None:
        return "kernel.generic (host)"
    return ", ".join(sorted(_kernel_ops_named_by(rule))) + ", else kernel.generic"


def _kernel_ops_named_by(rule) -> set:
    """The kernel ops a lowering rule's code refers to (`K.Conv2dOp`, `LstmOp`, ...)."""
    import types

    found = set()
    modules = [v for v in rule.__globals__.values() if isinstance(v, types.ModuleType)]
    for name in rule.__code__.co_names:
        candidates = [rule.__globals__.get(name)] + [getattr(m, name, None) for m in modules]
        for obj in candidates:
            op_name = getattr(obj, "name", None)
            if isinstance(obj, type) and isinstance(op_name, str) and op_name.startswith("kernel."):
                found.add(op_name)
    return found or {"a dedicated kernel op"}


def operators_table(results: dict, with_ort: bool) -> str:
    """Markdown: every ONNX op type of the graph dialect, with how it runs and its
    node-suite results beside onnxruntime's."""
    from palimpsest.dialects.graph.naming import ONNX_TO_GRAPH
    from palimpsest.ir.opdef import lookup_op

    counts: dict = defaultdict(lambda: defaultdict(Counter))
    for row in results.values():
        for side in ("palimpsest", "onnxruntime"):
            if side in row:
                counts[row["op"]][side][row[side][0]] += 1
    lines = ["# Supported ONNX operators", "",
             "Generated by `python benchmarks/bench_conformance.py --operators "
             "docs/operators.md` from one run over ONNX's node suite (every case, every "
             "opset). *Runs as*: the kernel op the default pipeline lowers to; "
             "`kernel.generic (host)` is the op's numpy reference kernel writing its planned "
             "buffers. Cases: passed / all tensor-valued cases of that op"
             + (", onnxruntime's beside it." if with_ort else "."), "",
             "| ONNX op | graph op | runs as | node cases passed |"
             + (" onnxruntime |" if with_ort else ""),
             "|---|---|---|---|" + ("---|" if with_ort else "")]
    for onnx_op, graph_op in sorted(ONNX_TO_GRAPH.items()):
        if onnx_op != "Constant" and lookup_op(graph_op) is None:
            continue
        mine = counts[onnx_op]["palimpsest"]
        cell = f"{mine['pass']}/{sum(mine.values())}" if mine else "-"
        line = f"| {onnx_op} | `{graph_op}` | {runs_as(graph_op)} | {cell} |"
        if with_ort:
            theirs = counts[onnx_op]["onnxruntime"]
            line += f" {theirs['pass']}/{sum(theirs.values())} |" if theirs else " - |"
        lines.append(line)
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", help="comma-separated ONNX op types to run (default: all)")
    parser.add_argument("--no-ort", action="store_true", help="skip onnxruntime")
    parser.add_argument("--details", action="store_true",
                        help="print every case that does not pass, with its reason")
    parser.add_argument("--json", metavar="FILE", help="write every case's outcome as JSON")
    parser.add_argument("--operators", metavar="FILE",
                        help="write the supported-operator table (markdown) to FILE")
    args = parser.parse_args(argv)
    op_filter = set(args.ops.split(",")) if args.ops else None
    start = time.perf_counter()
    results = run_all(op_filter, not args.no_ort, progress=True)
    print(summarize(results, not args.no_ort))
    if args.details:
        print()
        for name, row in sorted(results.items()):
            outcome, detail = row["palimpsest"]
            if outcome != "pass":
                ort = row.get("onnxruntime", ("-", ""))[0]
                print(f"{outcome:8} (ort {ort:7}) {name}: {detail.splitlines()[0][:300]}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, sort_keys=True))
    if args.operators:
        Path(args.operators).parent.mkdir(parents=True, exist_ok=True)
        Path(args.operators).write_text(operators_table(results, not args.no_ort))
    print(f"\n{len(results)} cases in {time.perf_counter() - start:.0f} s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
