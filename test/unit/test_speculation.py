"""An If on a condition the model computes, speculated on (backends/numpy/speculation.py):
the branch the last run took runs as one straight-line plan, the condition checked after
it; a changed condition runs the other branch's plan; a branch that fails on the wrong
data, or cannot be planned alone, goes to the segments. Every run against onnxruntime,
poisoning on."""

from __future__ import annotations

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from opencl_support import requires_opencl  # noqa: E402
from palimpsest.backends.numpy.session import Session  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402


def _model(then_nodes, then_outputs, else_nodes, else_outputs, extra_inits=()):
    """y = If(max(f) < 4) {then} {else}, then z = y + 1: f has 9 elements (more than a
    guard: the condition is computed, not known when planning)."""
    then = h.make_graph(then_nodes, "then", [],
                        [h.make_tensor_value_info(n, T.FLOAT, None) for n in then_outputs])
    other = h.make_graph(else_nodes, "else", [],
                         [h.make_tensor_value_info(n, T.FLOAT, None) for n in else_outputs])
    graph = h.make_graph(
        [h.make_node("ReduceMax", ["f"], ["fmax"], keepdims=0),
         h.make_node("Less", ["fmax", "four"], ["flag"]),
         h.make_node("Tanh", ["x"], ["t"]),
         h.make_node("If", ["flag"], ["y"], then_branch=then, else_branch=other),
         h.make_node("Add", ["y", "one"], ["z"])],
        "g", [h.make_tensor_value_info("x", T.FLOAT, [3, 4]),
              h.make_tensor_value_info("f", T.FLOAT, [9])],
        [h.make_tensor_value_info("z", T.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.array(4, np.float32), "four"),
                     numpy_helper.from_array(np.array(1, np.float32), "one"),
                     *extra_inits])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _feeds(rng, level):
    return {"x": rng.standard_normal((3, 4)).astype(np.float32),
            "f": np.full(9, level, np.float32)}


def _check(model, session, feeds, **run):
    want = ort.InferenceSession(model.SerializeToString()).run(["z"], feeds)[0]
    got = session.run(feeds, **run)["z"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _mlp_model():
    rng = np.random.default_rng(0)
    w1, w2 = (rng.standard_normal((4, 4)).astype(np.float32) for _ in range(2))
    return _model([h.make_node("MatMul", ["t", "w1"], ["m1"]),
                   h.make_node("Relu", ["m1"], ["r1"])], ["r1"],
                  [h.make_node("MatMul", ["t", "w2"], ["m2"]),
                   h.make_node("Sigmoid", ["m2"], ["y2"])], ["y2"],
                  [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])


@pytest.mark.parametrize("backend", ["numpy", pytest.param("opencl", marks=requires_opencl)])
def test_the_branch_taken_last_runs_straight_line(backend):
    """The first run takes the segments and sees the branch; later runs run that
    branch's straight-line plan (one function, no control flow); a changed condition
    runs the other branch's plan in the same run and the next runs speculate on it.
    The OpenCL backend's sessions alike (its plans run through the named path)."""
    model = _mlp_model()
    session = Session(import_onnx(model), backend=backend, poison=True)
    rng = np.random.default_rng(1)
    for level in (1, 1, 1, 7, 7, 1, 7, 1, 1):
        _check(model, session, _feeds(rng, level))
        speculation = session.last_plan.speculation
        assert speculation is not None and speculation.predicted == (0 if level < 4 else 1)
    assert set(speculation.plans) == {0, 1}
    for plan in speculation.plans.values():
        assert not any(op.regions for op in plan.func.entry_block.ops)


def test_results_into_given_arrays_and_profiled_runs():
    """The named path (outputs= arrays, a profiler) speculates too."""
    model = _mlp_model()
    rng = np.random.default_rng(2)
    session = Session(import_onnx(model), poison=True)
    out = np.empty((3, 4), np.float32)
    for level in (1, 1, 7, 1):
        feeds = _feeds(rng, level)
        want = ort.InferenceSession(model.SerializeToString()).run(["z"], feeds)[0]
        got = session.run(feeds, outputs={"z": out})["z"]
        assert got is out
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
    profiled = Session(import_onnx(model), profile=True)
    for level in (7, 7, 1):
        _check(model, profiled, _feeds(rng, level))
    assert profiled.last_plan.speculation.predicted == 0


def test_a_branch_failing_on_the_wrong_data_goes_to_the_segments():
    """The then branch gathers at an index the data gives (in range only when the
    condition holds): speculating on it with the condition false fails, and that run
    goes to the segments, which take the else branch: no error, the right result."""
    data = np.arange(4, dtype=np.float32) * 10
    model = _model([h.make_node("Cast", ["fmax"], ["index"], to=T.INT64),
                    h.make_node("Gather", ["table", "index"], ["picked"]),
                    h.make_node("Mul", ["t", "picked"], ["y1"])], ["y1"],
                   [h.make_node("Neg", ["t"], ["y2"])], ["y2"],
                   [numpy_helper.from_array(data, "table")])
    session = Session(import_onnx(model), poison=True)
    rng = np.random.default_rng(3)
    for level in (2, 2, 7, 2, 2, 9, 9, 3):
        _check(model, session, _feeds(rng, level))


def test_a_branch_with_region_ops_is_not_speculated_on():
    """A branch holding an If of its own cannot be one straight-line plan: the runs
    that take it stay on the segments."""
    inner_then = h.make_graph([h.make_node("Neg", ["t"], ["a"])], "it", [],
                              [h.make_tensor_value_info("a", T.FLOAT, None)])
    inner_else = h.make_graph([h.make_node("Abs", ["t"], ["b"])], "ie", [],
                              [h.make_tensor_value_info("b", T.FLOAT, None)])
    model = _model([h.make_node("ReduceMin", ["f"], ["fmin"], keepdims=0),
                    h.make_node("Less", ["fmin", "one"], ["inner"]),
                    h.make_node("If", ["inner"], ["y1"], then_branch=inner_then,
                                else_branch=inner_else)], ["y1"],
                   [h.make_node("Relu", ["t"], ["y2"])], ["y2"])
    session = Session(import_onnx(model), poison=True)
    rng = np.random.default_rng(4)
    for level in (0.5, 0.5, 2, 7, 7, 0.5):
        _check(model, session, _feeds(rng, level))
    speculation = session.last_plan.speculation
    assert speculation.plans.get(0) is None and speculation.plans.get(1) is not None


def test_last_stats_report_the_plan_that_ran():
    """A speculated run's report is the straight-line plan's: its planned bytes, no
    run-time allocation."""
    model = _mlp_model()
    session = Session(import_onnx(model))
    rng = np.random.default_rng(5)
    for _ in range(4):
        session.run(_feeds(rng, 1))
    report = session.last_stats
    flat = session.last_plan.speculation.plans[0]
    assert report.static_bytes == sum(flat.pool_sizes.values()) > 0
    assert report.allocations == 0
