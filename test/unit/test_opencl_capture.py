"""The OpenCL backend's captured programs (backends/opencl/executor.py `capture`): from
the second lean run on the same pools, a run of kernel ops on static-shape buffers is
one `_Replay` of pre-bound launches, each with a cl.Kernel of its own whose fixed
arguments are set once; the buffers made during a run (the inputs, reshapes of them) are
set again at each replay. Captured runs match uncaptured ones exactly, run after run."""

from __future__ import annotations

import pytest

from opencl_support import requires_opencl

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from palimpsest.backends.numpy.session import Session  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402

pytestmark = requires_opencl


def _model():
    """Kernels on an input, on a reshape of it, on constants and pool views, and an
    integer Mod only the host computes in the middle of the chain."""
    w = np.random.default_rng(3).standard_normal((6, 6)).astype(np.float32)
    nodes = [h.make_node("Tanh", ["x"], ["t"]),
             h.make_node("MatMul", ["t", "w"], ["m"]),
             h.make_node("Mod", ["a", "b"], ["k"]),
             h.make_node("Cast", ["k"], ["kf"], to=T.FLOAT),
             h.make_node("Add", ["m", "kf"], ["s"]),
             h.make_node("Reshape", ["s", "flat"], ["r"]),
             h.make_node("Relu", ["r"], ["y"]),
             h.make_node("Reshape", ["x", "flat"], ["xr"]),
             h.make_node("Mul", ["xr", "xr"], ["z"]),
             h.make_node("Softmax", ["z"], ["sz"], axis=-1)]
    graph = h.make_graph(
        nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [4, 6]),
                     h.make_tensor_value_info("a", T.INT64, [4, 6]),
                     h.make_tensor_value_info("b", T.INT64, [4, 6])],
        [h.make_tensor_value_info("y", T.FLOAT, None),
         h.make_tensor_value_info("sz", T.FLOAT, None)],
        initializer=[numpy_helper.from_array(w, "w"),
                     numpy_helper.from_array(np.array([24], np.int64), "flat")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _feeds(rng):
    return {"x": rng.standard_normal((4, 6)).astype(np.float32),
            "a": rng.integers(-50, 50, (4, 6)).astype(np.int64),
            "b": rng.integers(1, 9, (4, 6)).astype(np.int64)}


def _uncaptured(session, feed):
    """A first run, after which the session's executor neither keeps views nor captures."""
    results = session.run(feed)
    executor = session.last_plan.executor
    executor.CACHE_VIEWS = False
    executor.capture = lambda *args: None
    return results


def _replays(session):
    from palimpsest.backends.opencl.capture import _Replay

    plan = session.last_plan.executor.plans[session.last_plan.func]
    return plan, [h for h, _, _ in plan.captured or () if isinstance(h, _Replay)]


def test_captured_runs_match_uncaptured_ones_exactly():
    model = _model()
    sess = ort.InferenceSession(model.SerializeToString())
    captured = Session(import_onnx(model), backend="opencl")
    plain = Session(import_onnx(model), backend="opencl")
    rng = np.random.default_rng(7)
    _uncaptured(plain, _feeds(rng))
    for run in range(6):
        feed = _feeds(rng)
        got, want = captured.run(feed), plain.run(feed)
        for name, expected in zip(("y", "sz"), sess.run(["y", "sz"], feed)):
            np.testing.assert_array_equal(got[name], want[name])
            np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-6)
        stats, plain_stats = (captured.last_stats.run_stats, plain.last_stats.run_stats)
        assert stats.device_launches == plain_stats.device_launches
        assert stats.host_ops == plain_stats.host_ops == {"graph.mod": 1}
    plan, replays = _replays(captured)
    ops = [op.name for replay in replays for op in replay.ops]
    # the Mod stays on the host (a kernel.generic); the kernels reading the input and
    # its reshape are captured, their input arguments set at each replay
    assert "kernel.matmul" in ops and "kernel.softmax" in ops
    assert any(replay.patches for replay in replays)
    assert any(op.name == "kernel.generic" and handler is not None
               for handler, op, _ in plan.captured)
    _, plain_replays = _replays(plain)
    assert not plain_replays


def test_a_new_pool_buffer_drops_the_capture():
    """A pool made again (as when it grows) gives new views: the capture made on the old
    ones is dropped, and made again on the new ones; a result held across runs is the
    caller's copy and stays as it was."""
    model = _model()
    sess = ort.InferenceSession(model.SerializeToString())
    session = Session(import_onnx(model), backend="opencl")
    rng = np.random.default_rng(9)

    def check(feed):
        got = session.run(feed)
        for name, expected in zip(("y", "sz"), sess.run(["y", "sz"], feed)):
            np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-6)
        return got

    for _ in range(3):
        check(_feeds(rng))
    plan, replays = _replays(session)
    assert replays
    held = check(_feeds(rng))
    kept = {name: array.copy() for name, array in held.items()}
    check(_feeds(rng))
    assert plan.captured and all(np.array_equal(held[n], kept[n]) for n in kept)
    session.last_plan.executor.pools.clear()
    check(_feeds(rng))
    assert plan.captured is None
    for _ in range(2):
        check(_feeds(rng))
    assert _replays(session)[1]


def test_poisoned_runs_are_never_captured():
    model = _model()
    sess = ort.InferenceSession(model.SerializeToString())
    session = Session(import_onnx(model), backend="opencl", poison=True)
    rng = np.random.default_rng(5)
    for _ in range(4):
        feed = _feeds(rng)
        got = session.run(feed)
        for name, expected in zip(("y", "sz"), sess.run(["y", "sz"], feed)):
            np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-6)
    assert not _replays(session)[1]


def test_each_captured_launch_has_its_own_kernel():
    """Each captured launch has a cl.Kernel of its own, none the device's cached one
    (which the uncaptured launches set arguments on), each keeping its arguments."""
    model = _model()
    session = Session(import_onnx(model), backend="opencl")
    rng = np.random.default_rng(1)
    for _ in range(3):
        session.run(_feeds(rng))
    _, replays = _replays(session)
    kernels = [launch[0] for replay in replays for launch in replay.launches]
    assert len(kernels) >= 5 and len({id(k) for k in kernels}) == len(kernels)
    cached = {id(k) for k in session.last_plan.executor.device._kernels.values()}
    assert not cached & {id(k) for k in kernels}


def test_runs_into_the_callers_arrays_between_captured_runs():
    """A run with `outputs=` binds no fixed views and leaves the capture as it is; the
    plain runs around it still replay it, each result right."""
    model = _model()
    sess = ort.InferenceSession(model.SerializeToString())
    session = Session(import_onnx(model), backend="opencl")
    rng = np.random.default_rng(2)
    for index in range(7):
        feed = _feeds(rng)
        outputs = {"y": np.empty(24, np.float32)} if index % 2 else None
        got = session.run(feed, outputs=outputs) if outputs else session.run(feed)
        if outputs:
            assert got["y"] is outputs["y"]
        for name, expected in zip(("y", "sz"), sess.run(["y", "sz"], feed)):
            np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-6)
    assert _replays(session)[1]


def test_dynamic_plan_captures_only_static_buffers():
    """specialize=False: kernels on buffers with `?` dims (allocations sized at run time)
    stay as they are; the runs, at two shapes in turn, equal uncaptured runs exactly."""
    import example_models

    M = example_models.load()
    model = example_models.small_minilm()
    feeds = [M.minilm_inputs(1, 16, vocab=100, seed=s) for s in range(3)] + \
        [M.minilm_inputs(2, 9, vocab=100, seed=4 + s, padded=3) for s in range(3)]
    captured = Session(import_onnx(model), backend="opencl", specialize=False)
    plain = Session(import_onnx(model), backend="opencl", specialize=False)
    _uncaptured(plain, feeds[0])
    for feed in feeds[:3] + feeds[3:] + feeds[:3]:
        got, want = captured.run(feed), plain.run(feed)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])
    plan, replays = _replays(captured)
    kept = [op.name for handler, op, _ in plan.captured or () if handler is None]
    assert replays and kept   # some captured, some (on `?`-dim buffers) not
