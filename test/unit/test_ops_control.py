"""If, Loop and Scan with ONNX subgraphs as regions, against onnxruntime through a
Session, poisoned (each block cut at the region ops into planned segments,
backends/numpy/segments.py): branches that are whole subnetworks reading outer
values (as Silero VAD's top-level If), a Loop with a scan output, a Scan over a sequence;
and the text format round trip of the regions."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from palimpsest.backends.numpy.session import Session  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402
from palimpsest.ir.parser import parse  # noqa: E402
from palimpsest.ir.printer import print_ir  # noqa: E402

RNG = np.random.default_rng(4)


def _check(model, feeds):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    names = [o.name for o in model.graph.output]
    want = ort.InferenceSession(model.SerializeToString(), options).run(names, feeds)
    module = import_onnx(model)
    text = print_ir(module)
    assert print_ir(parse(text, "<test>")) == text
    session = Session(module, poison=True)
    got = session.run(feeds)
    for name, expected in zip(names, want):
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-6, err_msg=name)
    return session


def _segments_run(session):
    """The segments that ran: (segment, its session) with at least one plan compiled."""
    segments = session.last_plan.executor.plan.segments()
    return [(s, s.session) for s in segments if s.session is not None]


def _if_model(guarded=False):
    """sr == 16000 selects a conv branch, else a matmul branch; both read x and weights
    of the outer graph (initializers used only inside the branches). `guarded`: `sr` is
    an int64 scalar, as Silero VAD's, a guard to a session (its value part of the plan's
    signature: the branch it takes is inlined); else the rate is the max of a 9-element
    float input, more elements than a guard has: data, and the If runs as segments."""
    w16 = RNG.standard_normal((4, 1, 3)).astype(np.float32)
    w8 = RNG.standard_normal((8, 4)).astype(np.float32)
    then = h.make_graph(
        [h.make_node("Unsqueeze", ["x", "axis1"], ["x3"]),
         h.make_node("Conv", ["x3", "w16"], ["c"], pads=[1, 1]),
         h.make_node("ReduceMean", ["c"], ["m"], axes=[1], keepdims=0),
         h.make_node("Tanh", ["m"], ["out"])],
        "then", [], [h.make_tensor_value_info("out", T.FLOAT, None)])
    other = h.make_graph(
        [h.make_node("MatMul", ["x", "w8"], ["mm"]),
         h.make_node("Sigmoid", ["mm"], ["out2"])],
        "else", [], [h.make_tensor_value_info("out2", T.FLOAT, None)])
    rate = [] if guarded else [h.make_node("ReduceMax", ["sr"], ["rate"], keepdims=0)]
    nodes = rate + [h.make_node("Equal", ["sr" if guarded else "rate", "k16"], ["is16"]),
                    h.make_node("If", ["is16"], ["y"], then_branch=then, else_branch=other)]
    graph = h.make_graph(
        nodes, "vad", [h.make_tensor_value_info("x", T.FLOAT, [2, 8]),
                       h.make_tensor_value_info("sr", T.INT64, []) if guarded else
                       h.make_tensor_value_info("sr", T.FLOAT, [9])],
        [h.make_tensor_value_info("y", T.FLOAT, None)],
        initializer=[numpy_helper.from_array(w16, "w16"), numpy_helper.from_array(w8, "w8"),
                     numpy_helper.from_array(np.array(
                         16000, np.int64 if guarded else np.float32), "k16"),
                     numpy_helper.from_array(np.array([1], np.int64), "axis1")])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def rate_feed(rate, guarded=False):
    """`sr` for `_if_model(guarded)` at `rate`."""
    return np.array(rate, np.int64) if guarded else np.full(9, rate, np.float32)


@pytest.mark.parametrize("rate", [16000, 8000])
def test_if_branches_are_subnetworks_reading_outer_values(rate):
    model = _if_model()
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    session = _check(model, {"x": x, "sr": rate_feed(rate)})
    # the branch taken ran as a planned function: its ops are kernel ops writing into a
    # planned pool, its weights constants of that function
    ran = _segments_run(session)
    kernels = {op.name for _, s in ran for op in s.last_plan.func.walk()}
    assert {"kernel.elementwise", "kernel.matmul"} & kernels   # tanh; matmul, sigmoid
    assert any(s.last_plan.pool_sizes for _, s in ran)
    assert all(not s.input_names or "w" not in "".join(s.input_names) for _, s in ran)


def test_loop_with_a_carried_value_and_a_scan_output():
    body = h.make_graph(
        [h.make_node("Identity", ["cond_in"], ["cond_out"]),
         h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
         h.make_node("Mul", ["acc", "fi"], ["scaled"]),
         h.make_node("Add", ["scaled", "x"], ["acc_out"]),
         h.make_node("Identity", ["acc_out"], ["trace"])],
        "body", [h.make_tensor_value_info("i", T.INT64, []),
                 h.make_tensor_value_info("cond_in", T.BOOL, []),
                 h.make_tensor_value_info("acc", T.FLOAT, [3])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []),
         h.make_tensor_value_info("acc_out", T.FLOAT, [3]),
         h.make_tensor_value_info("trace", T.FLOAT, [3])])
    graph = h.make_graph(
        [h.make_node("Loop", ["n", "", "start"], ["final", "traces"], body=body)], "loop",
        [h.make_tensor_value_info("n", T.INT64, []), h.make_tensor_value_info("x", T.FLOAT, [3]),
         h.make_tensor_value_info("start", T.FLOAT, [3])],
        [h.make_tensor_value_info("final", T.FLOAT, None),
         h.make_tensor_value_info("traces", T.FLOAT, None)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 16)])
    x = RNG.standard_normal(3).astype(np.float32)
    session = _check(model, {"n": np.array(4, np.int64), "x": x,
                             "start": np.ones(3, np.float32)})
    # the body is compiled once and its plan reused on every iteration
    (body, body_session), = [(s, b) for s, b in _segments_run(session) if b.stats.runs == 4]
    assert body_session.stats.compiles == 1 and body_session.stats.plan_cache_hits == 3


def test_scan_running_sum_in_both_directions():
    body = h.make_graph(
        [h.make_node("Add", ["sum_in", "next"], ["sum_out"]),
         h.make_node("Identity", ["sum_out"], ["scan_out"])],
        "body", [h.make_tensor_value_info("sum_in", T.FLOAT, [2]),
                 h.make_tensor_value_info("next", T.FLOAT, [2])],
        [h.make_tensor_value_info("sum_out", T.FLOAT, [2]),
         h.make_tensor_value_info("scan_out", T.FLOAT, [2])])
    node = h.make_node("Scan", ["init", "xs"], ["total", "partial"], body=body,
                       num_scan_inputs=1, scan_input_directions=[1], scan_output_axes=[1])
    graph = h.make_graph(
        [node], "scan", [h.make_tensor_value_info("init", T.FLOAT, [2]),
                         h.make_tensor_value_info("xs", T.FLOAT, [5, 2])],
        [h.make_tensor_value_info("total", T.FLOAT, None),
         h.make_tensor_value_info("partial", T.FLOAT, None)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 16)])
    _check(model, {"init": np.zeros(2, np.float32),
                   "xs": RNG.standard_normal((5, 2)).astype(np.float32)})


def test_if_decided_by_an_integer_input_is_inlined_per_value():
    """An int64 `sr` deciding the If is a guard: each value gets a plan of its own with
    the branch taken inlined (no segments: one function, planned as one); a value seen
    before hits its plan."""
    model = _if_model(guarded=True)
    session = None
    for rate in (16000, 8000, 16000):
        x = RNG.standard_normal((2, 8)).astype(np.float32)
        feeds = {"x": x, "sr": np.array(rate, np.int64)}
        if session is None:
            session = _check(model, feeds)
        else:
            want = ort.InferenceSession(model.SerializeToString()).run(["y"], feeds)[0]
            np.testing.assert_allclose(session.run(feeds)["y"], want, rtol=1e-5, atol=1e-6)
        ops = {op.name for op in session.last_plan.func.walk()}
        assert "graph.if" not in ops and not any(n.startswith("graph.") for n in ops)
        assert ("kernel.conv2d" in ops) == (rate == 16000)
    assert session.stats.compiles == 2 and session.last_stats.cache_hit
    # the same arrays handed again (the lean run of the last plan) with the guard's value
    # changed in place: the plan of the new value, not the last one
    feeds = {"x": RNG.standard_normal((2, 8)).astype(np.float32),
             "sr": np.array(16000, np.int64)}
    runner = ort.InferenceSession(model.SerializeToString())
    for rate in (16000, 16000, 8000, 8000, 16000):
        feeds["sr"][...] = rate
        np.testing.assert_allclose(session.run(feeds)["y"], runner.run(["y"], feeds)[0],
                                   rtol=1e-5, atol=1e-6, err_msg=str(rate))
        ops = {op.name for op in session.last_plan.func.walk()}
        assert ("kernel.conv2d" in ops) == (rate == 16000)
    assert session.stats.compiles == 2
    # prepare() leaves the compile to the first run, which knows the guard's value
    prepared = Session(import_onnx(model))
    prepared.set_input_shape("x", (2, 8))
    prepared.prepare()
    assert prepared.stats.compiles == 0
    prepared.run({"x": x, "sr": np.array(8000, np.int64)})
    assert prepared.stats.compiles == 1


def test_a_guard_whose_value_keeps_changing_stops_being_one():
    """A value that changes every run would compile every run: past MAX_GUARD_VALUES
    distinct values the session plans the If as segments again, and still matches."""
    from palimpsest.backends.numpy.session import MAX_GUARD_VALUES, has_control_flow

    model = _if_model(guarded=True)
    session = Session(import_onnx(model), poison=True)
    runner = ort.InferenceSession(model.SerializeToString())
    for rate in range(16000 - MAX_GUARD_VALUES, 16003):
        feeds = {"x": RNG.standard_normal((2, 8)).astype(np.float32),
                 "sr": np.array(rate, np.int64)}
        np.testing.assert_allclose(session.run(feeds)["y"], runner.run(["y"], feeds)[0],
                                   rtol=1e-5, atol=1e-6, err_msg=str(rate))
    assert has_control_flow(session.last_plan.module)
    # (and the segments' If, on a condition computed from the input, is speculated on:
    # a straight-line plan per branch taken, backends/numpy/speculation.py)
    speculated = len(session.last_plan.speculation.plans)
    assert 1 <= speculated <= 2
    assert session.stats.compiles == MAX_GUARD_VALUES + 1 + speculated
