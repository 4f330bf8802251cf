"""The profiler (backends/profile.py), a hook of the executor loop: its table counts every
call made, its Chrome trace has one event per executed kernel with the buffers where the
plan put them, on the numpy and the OpenCL backend; palimpsest-run --profile and
--profile-json."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from opencl_support import requires_opencl
from palimpsest.backends.loop import TIMED
from palimpsest.backends.numpy.session import Session
from palimpsest.passes.plan_export import report_from_ir

BACKENDS = ["numpy", pytest.param("opencl", marks=requires_opencl)]
RUNS = 3


def timed_ops(func) -> list:
    return [op for op in func.entry_block.ops
            if op.name in TIMED or op.name.startswith("kernel.")]


@pytest.fixture(scope="module")
def tiny_cnn(onnx_models):
    return onnx_models.tiny_cnn()


def _profiled(model, backend):
    from palimpsest.dialects.graph.from_onnx import import_onnx

    session = Session(import_onnx(model), backend=backend, profile=True)
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    for _ in range(RUNS):
        session.run({"x": x})
    return session


@pytest.mark.parametrize("backend", BACKENDS)
def test_table_rows_add_up_to_the_calls_made(tiny_cnn, backend):
    session = _profiled(tiny_cnn, backend)
    profiler = session.profiler
    ops = timed_ops(session.last_plan.func)
    assert ops and profiler.runs == RUNS
    assert profiler.calls == RUNS * len(ops)
    by_kind, by_op = profiler.by_kind(), profiler.by_op()
    assert sum(r.calls for r in by_kind) == profiler.calls
    assert sum(r.calls for r in by_op) == profiler.calls
    assert all(r.calls == RUNS for r in by_op)   # each op, once a run
    assert {r.kind for r in by_kind} == {op.name for op in ops}
    for kind in by_kind:
        assert kind.calls == RUNS * sum(op.name == kind.name for op in ops)
        assert kind.seconds == pytest.approx(sum(r.seconds for r in by_op
                                                 if r.kind == kind.name))
    assert [r.seconds for r in by_op] == sorted((r.seconds for r in by_op), reverse=True)
    assert sum(r.seconds for r in by_op) <= profiler.run_seconds
    # FLOPs where the op has a count: tiny_cnn's first conv, 8 outputs channels of 8x8
    # from 3x3x3 windows, and the 8 -> 4 gemm
    conv = [r for r in by_kind if r.kind == "kernel.conv2d"][0]
    matmul = [r for r in by_kind if r.kind == "kernel.matmul"][0]
    assert matmul.flops == RUNS * 2 * 4 * 8
    assert conv.flops == RUNS * 2 * (8 * 8 * 8 * 3 * 9 + 8 * 4 * 4 * 8 * 9)
    assert conv.gflops is not None and conv.gbytes is None
    reduce = [r for r in by_kind if r.kind == "kernel.reduce"][0]
    assert reduce.flops == 0 and reduce.bytes == RUNS * (8 * 4 * 4 + 8) * 4
    table = profiler.table()
    lines = table.splitlines()
    assert lines[0].startswith(f"profile: {RUNS} runs, {profiler.calls} op calls")
    kind_rows = [line for line in lines if line.split()[:1] in ([r.kind] for r in by_kind)]
    assert sum(int(line.split()[1]) for line in kind_rows) == profiler.calls
    assert "GFLOP/s" in table and "GB/s" in table


@pytest.mark.parametrize("backend", BACKENDS)
def test_chrome_trace_has_one_event_per_kernel_with_the_plans_offsets(tiny_cnn, backend,
                                                                     tmp_path):
    session = _profiled(tiny_cnn, backend)
    path = tmp_path / "trace.json"
    session.profiler.write_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    ops = timed_ops(session.last_plan.func)
    assert len(events) == RUNS * len(ops) == session.profiler.calls
    assert [e["cat"] for e in events] == [op.name for op in ops] * RUNS
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in events)
    starts = [e["ts"] for e in events]
    assert starts == sorted(starts)
    planned = {(b.pool, b.offset, b.size)
               for fn in report_from_ir(session.last_plan.module).functions for b in fn.buffers}
    placed = 0
    for event in events:
        for buffer in event["args"]["buffers"]:
            if buffer["pool"] is not None:
                assert (buffer["pool"], buffer["offset"], buffer["bytes"]) in planned, buffer
                placed += 1
            else:
                assert buffer["source"] in ("argument", "constant", "run-time allocation")
    assert placed >= len(events)  # every kernel writes into the pools here


@pytest.mark.parametrize("backend", BACKENDS)
def test_palimpsest_run_profile(tiny_cnn, backend, tmp_path):
    import onnx

    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn, model)
    trace = tmp_path / "trace.json"
    done = subprocess.run([sys.executable, "-m", "palimpsest.tools.run", str(model),
                           "--random-inputs", "--backend", backend, "--repeat", "2",
                           "--profile", "--profile-json", str(trace)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "profile: 2 runs" in done.stdout
    assert "kernel.conv2d" in done.stdout and "share" in done.stdout
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    calls = int(done.stdout.split("profile: 2 runs, ")[1].split()[0])
    assert len(events) == calls > 0
    assert f"wrote a Chrome trace of {calls} kernel calls" in done.stderr


def test_palimpsest_run_profile_needs_a_lowered_level(tmp_path, tiny_cnn):
    import onnx

    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn, model)
    done = subprocess.run([sys.executable, "-m", "palimpsest.tools.run", str(model),
                           "--random-inputs", "--level", "graph", "--profile"],
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert "--profile and --profile-json need a lowered level" in done.stderr


def test_profile_of_a_lowered_level_without_a_session(tiny_cnn):
    """The loop's hook serves every executor: here the numpy backend's run()."""
    from palimpsest.backends.binding import find_function
    from palimpsest.backends.numpy.executor import run
    from palimpsest.backends.profile import Profiler
    from palimpsest.dialects.graph.from_onnx import import_onnx
    from palimpsest.passes.pass_manager import PassManager, parse_pipeline

    module = import_onnx(tiny_cnn)
    PassManager(parse_pipeline("to-kernels")).run(module)
    func = find_function(module, None)
    profiler = Profiler()
    x = np.zeros((1, 3, 8, 8), np.float32)
    run(func, {"x": x}, profiler=profiler)
    assert profiler.runs == 1 and profiler.calls == len(timed_ops(func))
    # run-time allocations (no plan): no pool, said so
    sources = {b.get("source") for e in profiler.chrome_trace()["traceEvents"][1:]
               for b in e["args"]["buffers"]}
    assert "run-time allocation" in sources


def test_a_model_with_control_flow_profiles_its_segments_as_one_run():
    """Segments (backends/numpy/segments.py) run through sessions of their own: they add to
    the model's profiler, in one run per model run, and take the model's thread count."""
    from onnx import TensorProto as T
    from onnx import helper as h

    from palimpsest.dialects.graph.from_onnx import import_onnx

    body = h.make_graph(
        [h.make_node("Identity", ["cond_in"], ["cond_out"]),
         h.make_node("Add", ["acc", "x"], ["acc_out"])],
        "body", [h.make_tensor_value_info("i", T.INT64, []),
                 h.make_tensor_value_info("cond_in", T.BOOL, []),
                 h.make_tensor_value_info("acc", T.FLOAT, [3])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []),
         h.make_tensor_value_info("acc_out", T.FLOAT, [3])])
    graph = h.make_graph(
        [h.make_node("Relu", ["start"], ["r"]),
         h.make_node("Loop", ["n", "", "r"], ["final"], body=body)], "loop",
        [h.make_tensor_value_info("n", T.INT64, []), h.make_tensor_value_info("x", T.FLOAT, [3]),
         h.make_tensor_value_info("start", T.FLOAT, [3])],
        [h.make_tensor_value_info("final", T.FLOAT, None)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 16)])
    session = Session(import_onnx(model), profile=True, threads=1)
    feeds = {"n": np.array(4, np.int64), "x": np.ones(3, np.float32),
             "start": np.ones(3, np.float32)}
    for _ in range(2):
        np.testing.assert_array_equal(session.run(feeds)["final"], np.full(3, 5, np.float32))
    profiler = session.profiler
    assert profiler.runs == 2
    segments = [s.session for s in session.last_plan.executor.plan.segments()
                if s.session is not None]
    assert segments and all(s.profiler is profiler for s in segments)
    assert all(s.threads.requested == 1 for s in segments)
    assert sum(r.calls for r in profiler.by_kind()) == profiler.calls
    adds = [r for r in profiler.by_op() if r.kind == "kernel.elementwise"]
    assert sorted(r.calls for r in adds) == [2, 8]   # relu once a run, the add 4 times
