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


# -- OpenCL: the device's times, from profiling events ------------------------------------------

def _host_op_model():
    """Kernels around an integer Mod, which only the host computes on OpenCL."""
    from onnx import TensorProto as T
    from onnx import helper as h

    from onnx import numpy_helper

    w = np.random.default_rng(3).standard_normal((64, 64)).astype(np.float32)
    nodes = [h.make_node("Tanh", ["x"], ["t"]),
             h.make_node("MatMul", ["t", "w"], ["m"]),
             h.make_node("Mod", ["a", "b"], ["k"]),
             h.make_node("Cast", ["k"], ["kf"], to=T.FLOAT),
             h.make_node("Add", ["m", "kf"], ["s"]),
             h.make_node("Softmax", ["s"], ["y"], axis=-1)]
    graph = h.make_graph(
        nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [4, 64]),
                     h.make_tensor_value_info("a", T.INT64, [4, 64]),
                     h.make_tensor_value_info("b", T.INT64, [4, 64])],
        [h.make_tensor_value_info("y", T.FLOAT, None)],
        initializer=[numpy_helper.from_array(w, "w")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _host_op_feeds(seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((4, 64)).astype(np.float32),
            "a": rng.integers(-50, 50, (4, 64)).astype(np.int64),
            "b": rng.integers(1, 9, (4, 64)).astype(np.int64)}


@requires_opencl
def test_opencl_op_times_are_the_device_events_with_no_finish_between_ops(monkeypatch):
    """Each op's seconds are its launches' and copies' event times (end - start) read after
    the run; a host fallback's are its wall time; nothing waits between ops."""
    import pyopencl as cl

    from palimpsest.backends.opencl.executor import OpenCLExecutor
    from palimpsest.dialects.graph.from_onnx import import_onnx

    taken, syncs = [], []
    take_events = OpenCLExecutor.take_events

    def keep(executor):
        times = take_events(executor)
        taken.append(times)
        return times
    monkeypatch.setattr(OpenCLExecutor, "take_events", keep)
    monkeypatch.setattr(OpenCLExecutor, "sync", lambda executor: syncs.append(1))
    session = Session(import_onnx(_host_op_model()), backend="opencl", profile=True)
    for run in range(RUNS):
        session.run(_host_op_feeds(run))
    profiler = session.profiler
    executor = session.last_plan.executor
    assert executor.queue.properties & cl.command_queue_properties.PROFILING_ENABLE
    assert not syncs
    assert len(taken) == profiler.calls == RUNS * len(timed_ops(session.last_plan.func))
    assert session.last_stats.run_stats.host_ops == {"graph.mod": 1}
    on_host = [t for t in taken if not t.events]
    on_device = [t for t in taken if t.events]
    assert len(on_host) == RUNS and all(t.host_seconds > 0 for t in on_host)
    assert on_device and all(t.host_seconds == 0 for t in on_device)
    device_seconds = 0.0
    for times in on_device:
        for event in times.events:
            assert event.profile.end > event.profile.start > 0
            device_seconds += (event.profile.end - event.profile.start) * 1e-9
    rows = profiler.by_op()
    assert all(r.seconds > 0 for r in rows)
    assert sum(r.seconds for r in rows) == pytest.approx(
        device_seconds + sum(t.host_seconds for t in on_host), rel=1e-9)
    assert sum(r.seconds for r in rows) <= profiler.run_seconds
    events = [e for e in profiler.chrome_trace()["traceEvents"] if e["ph"] == "X"]
    ends = [e["ts"] + e["dur"] for e in events]
    assert all(e["dur"] > 0 for e in events)
    assert all(b["ts"] >= a - 1e-3 for a, b in zip(ends, events[1:]))  # one after the other


@requires_opencl
def test_opencl_profiles_on_a_profiling_queue_only_while_profiled():
    """The plain queue without PROFILING_ENABLE; a profiler set on a session whose runs
    were captured runs uncaptured on the profiling queue, and taken away, captured again
    on the plain one: the same results each way."""
    import pyopencl as cl

    from palimpsest.backends.opencl.capture import _Replay
    from palimpsest.backends.profile import Profiler
    from palimpsest.dialects.graph.from_onnx import import_onnx

    profiling = cl.command_queue_properties.PROFILING_ENABLE
    session = Session(import_onnx(_host_op_model()), backend="opencl")
    feeds = _host_op_feeds()
    want = [session.run(feeds)["y"] for _ in range(3)][-1]
    executor = session.last_plan.executor
    plan = executor.plans[session.last_plan.func]
    assert any(isinstance(handler, _Replay) for handler, _, _ in plan.captured)
    assert executor.queue is executor.device.queue
    assert not executor.queue.properties & profiling
    session.profiler = Profiler()
    np.testing.assert_array_equal(session.run(feeds)["y"], want)
    assert executor.queue is executor.device.profiling_queue
    assert executor.queue.properties & profiling
    assert session.profiler.calls == len(timed_ops(session.last_plan.func))
    session.profiler = None
    for _ in range(2):
        np.testing.assert_array_equal(session.run(feeds)["y"], want)
    assert executor.queue is executor.device.queue
    assert any(isinstance(handler, _Replay) for handler, _, _ in plan.captured)


# -- the garbage collector, off inside profiled runs --------------------------------------------

@pytest.mark.parametrize("enabled", [True, False])
def test_gc_is_off_during_a_profiled_run_and_as_it_was_after(tiny_cnn, enabled):
    import gc

    from palimpsest.backends.profile import Profiler
    from palimpsest.dialects.graph.from_onnx import import_onnx

    seen = []

    class Watching(Profiler):
        fail = False

        def measure(self, executor, op, values, depth):
            seen.append(gc.isenabled())
            if self.fail:
                raise RuntimeError("an op failed")
            super().measure(executor, op, values, depth)

    profiler = Watching()
    session = Session(import_onnx(tiny_cnn), profile=profiler)
    x = np.zeros((1, 3, 8, 8), np.float32)
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        for _ in range(2):
            session.run({"x": x})
            assert gc.isenabled() is enabled
        profiler.fail = True
        with pytest.raises(RuntimeError, match="an op failed"):
            session.run({"x": x})
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
    assert seen and not any(seen)
