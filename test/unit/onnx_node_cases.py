"""ONNX's backend node test cases, regenerated from the installed onnx package and cached.

`onnx.backend.test.case.node.collect_testcases()` runs every `export_*` generator of the
installed onnx (about 7 s, mostly its pure-python pooling reference). We run it once, in a
subprocess (the generators reseed numpy's global RNG and warn a lot), and store every
single-node case in ONNX's usual on-disk layout (`<case>/model.onnx`,
`<case>/test_data_set_0/{input,output}_<i>.pb`) plus an `index.json`, under

    $PALIMPSEST_ONNX_NODE_CASES or <tempdir>/palimpsest-onnx-node-cases/onnx-<version>-v<N>

so later runs only read files. `case_names()` / `load_case()` iterate the cache;
`run_case()` evaluates one case with the graph-dialect reference kernels and
`conformance_summary()` returns {onnx op type: (passed, skipped, failed)} over every case of
every op in `ONNX_TO_GRAPH` (the skip/tolerance policy, `POLICY`, lives in test_graph_reference.py).

Command line: `python test/unit/onnx_node_cases.py [--summary | --generate DIR]`.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CACHE_FORMAT = 1
_INDEX = "index.json"

# ONNX element types the reference evaluates (numpy-native); see _common.ONNX_DTYPES.
SUPPORTED_ELEM_TYPES = frozenset({1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, *range(16, 27)})

FLOAT_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
# ops with regions: below the graph level they run as the graph level does (README)
CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})


def cache_dir() -> Path:
    env = os.environ.get("PALIMPSEST_ONNX_NODE_CASES")
    if env:
        return Path(env)
    import onnx

    return (
        Path(tempfile.gettempdir())
        / "palimpsest-onnx-node-cases"
        / f"onnx-{onnx.__version__}-v{CACHE_FORMAT}"
    )


def ensure_cache() -> Path:
    """The cache directory, generating it first if needed (about 8-10 s, once)."""
    dest = cache_dir()
    if (dest / _INDEX).is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--generate", str(dest)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 or not (dest / _INDEX).is_file():
        raise RuntimeError(
            f"generating ONNX node test cases into {dest} failed:\n{proc.stderr[-4000:]}"
        )
    return dest


def _generate(dest: Path) -> None:
    """Run ONNX's node test generators and write every single-node case under `dest`."""
    import warnings

    warnings.simplefilter("ignore")
    import numpy as np
    import onnx
    from onnx import numpy_helper
    from onnx.backend.test.case.node import collect_testcases

    np.seterr(all="ignore")
    tmp = dest.parent / f".{dest.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    index: dict[str, dict[str, Any]] = {}
    for case in collect_testcases():
        graph = case.model.graph
        if len(graph.node) != 1 or not case.data_sets:
            continue
        node = graph.node[0]
        domain = node.domain or ""
        opset = next(
            (o.version for o in case.model.opset_import if (o.domain or "") in (domain, "ai.onnx")),
            None,
        )
        entry: dict[str, Any] = {"op_type": node.op_type, "domain": domain, "opset": opset}
        values = list(graph.input) + list(graph.output)
        if not all(v.type.HasField("tensor_type") for v in values):
            entry["non_tensor"] = True
            index[case.name] = entry
            continue
        inputs, outputs = case.data_sets[0]
        case_dir = tmp / case.name
        data_dir = case_dir / "test_data_set_0"
        try:
            data_dir.mkdir(parents=True)
            for kind, arrays, vis in (("input", inputs, graph.input), ("output", outputs, graph.output)):
                for j, (arr, vi) in enumerate(zip(arrays, vis)):
                    t = arr if isinstance(arr, onnx.TensorProto) else numpy_helper.from_array(np.asarray(arr), vi.name)
                    (data_dir / f"{kind}_{j}.pb").write_bytes(t.SerializeToString())
            (case_dir / "model.onnx").write_bytes(case.model.SerializeToString())
        except Exception as e:  # a value numpy_helper cannot serialize
            shutil.rmtree(case_dir, ignore_errors=True)
            entry["error"] = f"{type(e).__name__}: {e}"
        index[case.name] = entry
    (tmp / _INDEX).write_text(json.dumps(index, indent=1, sort_keys=True))
    try:
        os.replace(tmp, dest)
    except OSError:  # another process generated it concurrently
        shutil.rmtree(tmp, ignore_errors=True)
        if not (dest / _INDEX).is_file():
            raise


@functools.lru_cache(maxsize=None)
def _read_index(root: Path) -> dict[str, dict[str, Any]]:
    return json.loads((root / _INDEX).read_text())


def load_index() -> dict[str, dict[str, Any]]:
    return _read_index(ensure_cache())


def case_names(op_types=None) -> list[str]:
    """Names of the cached single-node cases (of the given ONNX op types, default domain),
    sorted by op type then name."""
    index = load_index()
    keep = [
        (e["op_type"], n)
        for n, e in index.items()
        if e["domain"] in ("", "ai.onnx") and (op_types is None or e["op_type"] in op_types)
    ]
    return [n for _, n in sorted(keep)]


@dataclass
class NodeCase:
    name: str
    op_type: str
    opset: int | None
    node: Any = None  # onnx.NodeProto
    inputs: list = field(default_factory=list)  # aligned with node.input; None for ''
    expected: list = field(default_factory=list)  # aligned with node.output; None for ''
    input_types: list = field(default_factory=list)  # ONNX elem types (None if absent)
    output_types: list = field(default_factory=list)
    feeds: dict = field(default_factory=dict)  # every graph input of the model, by name
    non_tensor: bool = False
    error: str | None = None

    @property
    def attrs(self) -> dict[str, Any]:
        return onnx_attrs(self.node)


def onnx_attrs(node) -> dict[str, Any]:
    """A NodeProto's attributes as the Python values KERNELS take."""
    from onnx import AttributeProto, helper, numpy_helper

    out: dict[str, Any] = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if a.type == AttributeProto.TENSOR:
            v = numpy_helper.to_array(v)
        elif a.type == AttributeProto.TENSORS:
            v = [numpy_helper.to_array(t) for t in v]
        elif a.type == AttributeProto.STRING:
            v = v.decode("utf-8")
        elif a.type == AttributeProto.STRINGS:
            v = [s.decode("utf-8") for s in v]
        elif a.type in (AttributeProto.INTS, AttributeProto.FLOATS):
            v = list(v)
        out[a.name] = v
    return out


def load_case(name: str) -> NodeCase:
    import onnx
    from onnx import numpy_helper

    root = ensure_cache()
    entry = load_index()[name]
    case = NodeCase(name, entry["op_type"], entry.get("opset"))
    if entry.get("non_tensor") or entry.get("error"):
        case.non_tensor = bool(entry.get("non_tensor"))
        case.error = entry.get("error")
        return case
    model = onnx.load(str(root / name / "model.onnx"))
    graph = model.graph
    case.node = graph.node[0]
    data = root / name / "test_data_set_0"
    values: dict[str, Any] = {}
    types: dict[str, int] = {}
    for kind, vis in (("input", graph.input), ("output", graph.output)):
        for j, vi in enumerate(vis):
            types[vi.name] = vi.type.tensor_type.elem_type
            t = onnx.TensorProto()
            t.ParseFromString((data / f"{kind}_{j}.pb").read_bytes())
            values[vi.name] = numpy_helper.to_array(t) if t.data_type in SUPPORTED_ELEM_TYPES else None
    case.inputs = [values.get(n) if n else None for n in case.node.input]
    case.feeds = {vi.name: values.get(vi.name) for vi in graph.input}
    case.expected = [values.get(n) if n else None for n in case.node.output]
    case.input_types = [types.get(n) if n else None for n in case.node.input]
    case.output_types = [types.get(n) if n else None for n in case.node.output]
    return case


@dataclass(frozen=True)
class Policy:
    """What the conformance run skips or tolerates, and why (defined in the test file)."""

    skip_cases: dict  # case name -> reason
    skip_elem_types: dict  # ONNX elem type -> reason
    non_tensor_reason: str
    tolerances: dict = field(default_factory=dict)  # case name -> (rtol, atol, reason)


def skip_reason(case: NodeCase, policy: Policy) -> str | None:
    if case.name in policy.skip_cases:
        return policy.skip_cases[case.name]
    if case.non_tensor:
        return policy.non_tensor_reason
    for t in case.input_types + case.output_types:
        if t is not None and t in policy.skip_elem_types:
            return policy.skip_elem_types[t]
    return None


def run_case(case: NodeCase) -> list:
    """Evaluate the case's node with the graph-dialect reference kernel."""
    from palimpsest.dialects.graph.naming import ONNX_TO_GRAPH
    from palimpsest.dialects.graph.reference import KERNELS

    if case.op_type in CONTROL_FLOW:   # regions run in the executor, not in a kernel
        return run_case_through_ir(case, "graph")
    fn = KERNELS[ONNX_TO_GRAPH[case.op_type]]
    return fn(list(case.inputs), case.attrs, len(case.node.output))


def run_case_through_ir(case: NodeCase, level: str = "graph") -> list:
    """The case's model through the whole graph level: import_onnx → verify →
    infer-shapes → print and parse back → reference executor. With level="buffer":
    then bufferize, insert-deallocs → print and parse back → numpy backend (poisoning on)."""
    import onnx

    from palimpsest.backends.binding import find_function
    from palimpsest.backends.reference.executor import run
    from palimpsest.dialects.graph.from_onnx import import_onnx
    from palimpsest.ir.parser import parse
    from palimpsest.ir.printer import print_ir
    from palimpsest.ir.verifier import verify
    from palimpsest.passes.pass_manager import PassManager, parse_pipeline

    model = onnx.load(str(ensure_cache() / case.name / "model.onnx"))
    module = import_onnx(model)
    verify(module)
    PassManager(parse_pipeline("infer-shapes")).run(module)
    module = parse(print_ir(module), f"{case.name}.pal")
    verify(module)
    if level == "opencl":  # the default pipeline (planned kernels) on the OpenCL device
        from palimpsest.backends.opencl.executor import run as run_opencl

        PassManager(parse_pipeline("default")).run(module)
        outputs = run_opencl(find_function(module, None), case.feeds)
    elif level == "buffer":
        from palimpsest.backends.numpy import run as run_numpy

        PassManager(parse_pipeline("bufferize,insert-deallocs")).run(module)
        module = parse(print_ir(module), f"{case.name}.buffer.pal")
        verify(module)
        outputs = run_numpy(find_function(module, None), case.feeds, poison=True)
    else:
        outputs = run(find_function(module, None), case.feeds)
    return [outputs.get(name) if name else None for name in case.node.output]


def check_case(case: NodeCase, policy: Policy | None = None, through_ir: bool | str = False) -> None:
    """Run the case and compare with ONNX's expected outputs; AssertionError on mismatch.
    `through_ir`: False runs the kernel alone, True (or "graph") the graph level, "buffer"
    the buffer level on the numpy backend, "opencl" the planned kernels on the OpenCL
    device (run_case_through_ir).
    The comparison is assert_results_match's."""
    if case.error:
        raise AssertionError(f"{case.name}: could not load: {case.error}")
    if through_ir:
        level = through_ir if through_ir in ("buffer", "opencl") else "graph"
        results = run_case_through_ir(case, "graph" if case.op_type in CONTROL_FLOW else level)
    else:
        results = run_case(case)
    assert_results_match(case, results, policy)


def assert_results_match(case: NodeCase, results: list, policy: Policy | None = None) -> None:
    """Compare `results` (one per node output, in order) with ONNX's expected outputs.
    Floats: rtol 1e-4 / atol 1e-5; float16, bfloat16 and the float8 types: one unit in
    the last place; unless the policy says otherwise for this case. Integers and bools:
    exact. Dtypes and shapes must match."""
    import ml_dtypes
    import numpy as np

    from palimpsest.dialects.graph.reference._common import SMALL_FLOATS

    assert len(results) >= sum(1 for n in case.node.output if n), (
        f"{case.name}: {len(results)} results for outputs {list(case.node.output)}"
    )
    override = policy.tolerances.get(case.name) if policy else None
    for i, exp in enumerate(case.expected):
        if exp is None:
            continue
        got = np.asarray(results[i])
        where = f"{case.name}: output {i} ({case.node.output[i]})"
        assert got.dtype == exp.dtype, f"{where}: dtype {got.dtype}, expected {exp.dtype}"
        assert got.shape == exp.shape, f"{where}: shape {got.shape}, expected {exp.shape}"
        if exp.dtype.kind == "f" or exp.dtype in SMALL_FLOATS:
            if override:
                tol = {"rtol": override[0], "atol": override[1]}
            elif exp.dtype in SMALL_FLOATS or exp.dtype == np.float16:
                eps = float(ml_dtypes.finfo(exp.dtype).eps)   # one unit in the last place
                tol = {"rtol": eps, "atol": eps}
            else:
                tol = FLOAT_TOLERANCE
            np.testing.assert_allclose(got.astype(np.float64), exp.astype(np.float64),
                                       equal_nan=True, err_msg=where, **tol)
        else:
            np.testing.assert_array_equal(got, exp, err_msg=where)


def load_policy() -> Policy:
    """The policy defined by test_graph_reference.py (SKIP_CASES, SKIP_ELEM_TYPES,
    NON_TENSOR_REASON, TOLERANCES)."""
    path = Path(__file__).resolve().with_name("test_graph_reference.py")
    spec = importlib.util.spec_from_file_location("_palimpsest_test_graph_reference_policy", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.POLICY


def outcome(name: str, policy: Policy | None = None, through_ir: bool = False) -> tuple[str, str]:
    """('passed' | 'skipped' | 'failed', detail) of one case under the policy."""
    policy = policy or load_policy()
    case = load_case(name)
    reason = skip_reason(case, policy)
    if reason is not None:
        return "skipped", reason
    try:
        check_case(case, policy, through_ir)
    except Exception as e:  # noqa: BLE001 - any exception is a failure of the case
        return "failed", f"{type(e).__name__}: {e}"
    return "passed", ""


def conformance_summary(policy: Policy | None = None, details: dict | None = None,
                        through_ir: bool = False) -> dict[str, tuple[int, int, int]]:
    """{ONNX op type: (passed, skipped, failed)} over ONNX's node test cases of every op in
    ONNX_TO_GRAPH. Pass a dict as `details` to receive {case name: (status, detail)}."""
    from palimpsest.dialects.graph.naming import ONNX_TO_GRAPH

    policy = policy or load_policy()
    index = load_index()
    counts = {op: [0, 0, 0] for op in ONNX_TO_GRAPH}
    slot = {"passed": 0, "skipped": 1, "failed": 2}
    for name in case_names(set(ONNX_TO_GRAPH)):
        status, detail = outcome(name, policy, through_ir)
        counts[index[name]["op_type"]][slot[status]] += 1
        if details is not None:
            details[name] = (status, detail)
    return {op: tuple(c) for op, c in counts.items()}


def format_summary(summary: dict[str, tuple[int, int, int]]) -> str:
    lines = [f"{'op':<20} {'passed':>6} {'skipped':>7} {'failed':>6}"]
    tot = [0, 0, 0]
    for op, (p, s, f) in summary.items():
        lines.append(f"{op:<20} {p:>6} {s:>7} {f:>6}")
        tot = [tot[0] + p, tot[1] + s, tot[2] + f]
    lines.append(f"{'total':<20} {tot[0]:>6} {tot[1]:>7} {tot[2]:>6}")
    return "\n".join(lines)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--generate"] and len(args) == 2:
        _generate(Path(args[1]))
    elif args in ([], ["--summary"]):
        details: dict = {}
        print(format_summary(conformance_summary(details=details)))
        for n, (st, d) in details.items():
            if st != "passed":
                print(f"{st:8} {n}: {d}")
    else:
        sys.exit("usage: onnx_node_cases.py [--summary | --generate DIR]")
