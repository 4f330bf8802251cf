"""Fast paths of the numpy kernels that cut per-run overhead on small models, each
against the graph level (reference kernels) with poisoning on (test_kernels.check)."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")

from test_kernels import check, model_of, node, rand  # noqa: E402  (test/unit on sys.path)


# pads (begins then ends, per axis of a 3x4x5 x) whose borders are each one slab copy,
# at the limits (a reflect pad of size - 1, its end slice stopping before index 0; a
# wrap pad of size), and one reaching past the interior (cell by cell)
@pytest.mark.parametrize("mode, pads", [
    ("reflect", [0, 0, 4, 0, 3, 4]), ("reflect", [2, 3, 0, 2, 0, 1]),
    ("edge", [3, 0, 6, 2, 5, 1]), ("wrap", [3, 4, 5, 3, 4, 5]),
    ("edge", [0, -1, 2, 1, 0, -2])])
def test_pad_border_slabs(mode, pads):
    rng = np.random.default_rng(5)
    x = rand(rng, (3, 4, 5))
    model = model_of([node("Pad", ["x", "pads"], {"mode": mode})], {"x": x},
                     {"pads": np.array(pads, np.int64)}, opset=18)
    check(model, {"x": x}, "kernel.pad", roles=[])


@pytest.mark.parametrize("index", [[-3, -1], [-4, 0], [0, 2], [3, 0]])
def test_scatter_nd_index_range(index):
    """ScatterND's fast path leaves the index check to numpy's assignment (ONNX's range
    is numpy's, [-dim, dim)): an index outside it is still the op's error; a negative
    one inside scatters as the reference does."""
    from palimpsest.backends.numpy.session import Session
    from palimpsest.dialects.graph.from_onnx import import_onnx
    from palimpsest.ir.diagnostics import DiagnosticError

    data = np.arange(6, dtype=np.float32).reshape(3, 2)
    model = model_of([node("ScatterND", ["x", "i", "u"])], {"x": data},
                     {"i": np.array([index], np.int64), "u": np.full(1, 9, np.float32)})
    session = Session(import_onnx(model), poison=True)
    if not all(-d <= i < d for i, d in zip(index, data.shape)):
        with pytest.raises(DiagnosticError, match="out of"):
            session.run({"x": data})
        return
    want = data.copy()
    want[tuple(index)] = 9
    np.testing.assert_array_equal(session.run({"x": data})["y"], want)


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("initial", [False, True])
@pytest.mark.parametrize("outputs", [("Y", "Y_h"), ("Y",), ("", "Y_h")])
def test_gru_both_directions_in_one_loop(monkeypatch, batch, initial, outputs):
    """A bidirectional GRU with linear_before_reset runs both directions in one loop
    (kernel_ops_recurrent._paired_gru: an odd sequence, so a last half-chunk of one
    pair) and matches onnxruntime, poisoning on (oneDNN's route, which takes one batch
    entry, turned off: backends/onednn_rnn.py)."""
    pytest.importorskip("onnxruntime")
    from palimpsest.backends import onednn_rnn
    from palimpsest.backends.numpy import kernel_ops_recurrent as rec
    from test_ops_recurrent import _check, _model

    monkeypatch.setattr(onednn_rnn, "MIN_STEPS", 1 << 30)
    calls = []
    paired = rec._paired_gru
    monkeypatch.setattr(rec, "_paired_gru", lambda *a: calls.append(1) or paired(*a))
    _check(*_model("GRU", "bidirectional", initial=initial, batch=batch, outputs=outputs,
                   linear_before_reset=1))
    assert calls


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("case", ["computed_r", "no_bias"])
def test_gru_both_directions_with_r_computed_or_no_bias(batch, case):
    """The paired loop with an R computed at run time (not prepacked: the one-entry
    loop's block-diagonal Rᵀ refilled each run) or without B (no Rbh rows), across runs
    on new inputs, against onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper, numpy_helper

    from palimpsest.backends.numpy.session import Session
    from palimpsest.dialects.graph.from_onnx import import_onnx
    from test_ops_recurrent import _model

    model, x = _model("GRU", "bidirectional", initial=True, batch=batch, linear_before_reset=1)
    graph = model.graph
    if case == "computed_r":
        graph.node[0].input[2] = "R2"
        graph.node.insert(0, helper.make_node("Mul", ["R", "k"], ["R2"]))
        graph.initializer.append(numpy_helper.from_array(np.array(1.5, np.float32), "k"))
    else:
        graph.node[0].input[3] = ""
    names = [o.name for o in graph.output]
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    reference = ort.InferenceSession(model.SerializeToString(), options)
    session = Session(import_onnx(model), poison=True)
    for seed in range(3):
        feed = x * (seed + 1)
        want = reference.run(names, {"X": feed})
        got = session.run({"X": feed})
        for name, expected in zip(names, want):
            np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("poison", [False, True])
def test_conv_calls_replayed_on_fresh_data(monkeypatch, poison):
    """A conv whose images take one GEMM records its calls on its arrays and replays
    them while the arrays are the same objects (kernel_ops.record / recorded): runs on
    new inputs, one after another, still match the reference (3x3 padded with bias and
    ReLU, a 1x1 after it, a SiLU chain (kernel.elementwise records its steps alike),
    depthwise 3x3 and 5x5 stride 2 (by stride phases), a ConvTranspose (alike), a 3x3)."""
    from palimpsest.backends.binding import find_function
    from palimpsest.backends.numpy import kernel_ops
    from palimpsest.backends.numpy.session import Session
    from palimpsest.backends.reference.executor import run as run_graph
    from palimpsest.dialects.graph.from_onnx import import_onnx

    rng = np.random.default_rng(3)
    w1, b1 = rand(rng, (8, 3, 3, 3)), rand(rng, (8,))
    w2, w3 = rand(rng, (4, 8, 1, 1)), rand(rng, (5, 4, 3, 3))
    d1, d2, b2 = rand(rng, (4, 1, 3, 3)), rand(rng, (4, 1, 5, 5)), rand(rng, (4,))
    t1 = rand(rng, (4, 4, 3, 3))
    x = rand(rng, (1, 3, 9, 9))
    model = model_of([node("Conv", ["x", "w1", "b1"], {"pads": [1, 1, 1, 1]}, outs=["c1"]),
                      node("Relu", ["c1"], outs=["r1"]),
                      node("Conv", ["r1", "w2"], outs=["c2"]),
                      node("Sigmoid", ["c2"], outs=["g2"]),
                      node("Mul", ["c2", "g2"], outs=["s2"]),
                      node("Conv", ["s2", "d1"], {"pads": [1, 1, 1, 1], "group": 4},
                           outs=["c3"]),
                      node("Conv", ["c3", "d2", "b2"], {"pads": [2, 2, 2, 2], "group": 4,
                                                        "strides": [2, 2]}, outs=["c4"]),
                      node("ConvTranspose", ["c4", "t1", "b2"], {"strides": [2, 2],
                                                                 "pads": [1, 1, 1, 1]},
                           outs=["c5"]),
                      node("Conv", ["c5", "w3"], {"pads": [1, 1, 1, 1]}, outs=["y"])],
                     {"x": x}, {"w1": w1, "b1": b1, "w2": w2, "w3": w3, "d1": d1, "d2": d2,
                                "b2": b2, "t1": t1})
    from palimpsest.backends.numpy import (
        kernel_ops_conv, kernel_ops_elementwise, kernel_ops_spatial)

    replays = []
    recorded = kernel_ops.recorded

    def counted(op, arrays):
        calls = recorded(op, arrays)
        replays.append(calls is not None)
        return calls
    monkeypatch.setattr(kernel_ops_conv, "recorded", counted)
    monkeypatch.setattr(kernel_ops_spatial, "recorded", counted)
    monkeypatch.setattr(kernel_ops_elementwise, "recorded", counted)
    session = Session(import_onnx(model), poison=poison)
    graph = import_onnx(model)
    for seed in range(4):
        feed = {"x": rand(np.random.default_rng(seed), (1, 3, 9, 9))}
        want = run_graph(find_function(graph, None), feed)["y"]
        np.testing.assert_allclose(session.run(feed)["y"], want, rtol=1e-5,
                                   atol=1e-6 * float(np.abs(want).max()))
    # the five between recorded at the first run, then replayed while the executor
    # keeps its arena (the first conv reads the input, the last writes the result: new
    # arrays each run; with poisoning, a view poisoned after its last use is made anew)
    assert sum(replays) >= 3


@pytest.mark.parametrize("op, direction, extra", [
    ("LSTM", "forward", {}), ("GRU", "reverse", {}),
    ("GRU", "bidirectional", {"linear_before_reset": 1}), ("LSTM", "bidirectional", {})])
def test_recurrent_calls_replayed_on_fresh_data(monkeypatch, op, direction, extra):
    """A recurrent kernel on the fast path records its calls (projection, biases, every
    step) and replays them while its arrays are the same objects: a session's runs on
    new inputs, one after another, match onnxruntime (X scaled first, so the kernel
    reads an arena buffer, the same array each run)."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper, numpy_helper

    from palimpsest.backends.numpy import kernel_ops_recurrent as rec
    from palimpsest.backends.numpy.session import Session
    from palimpsest.dialects.graph.from_onnx import import_onnx
    from test_ops_recurrent import _model

    model, x = _model(op, direction, initial=True, **extra)
    graph = model.graph
    graph.node[0].input[0] = "X2"
    graph.node.insert(0, helper.make_node("Mul", ["X", "k"], ["X2"]))
    graph.initializer.append(numpy_helper.from_array(np.array(1.5, np.float32), "k"))
    names = [o.name for o in graph.output]
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    reference = ort.InferenceSession(model.SerializeToString(), options)
    hits = []
    recorded = rec.recorded
    monkeypatch.setattr(rec, "recorded",
                        lambda op_, arrays: hits.append(recorded(op_, arrays)) or hits[-1])
    session = Session(import_onnx(model), poison=True)
    for seed in range(4):
        feed = {"X": np.random.default_rng(seed).standard_normal(x.shape).astype(np.float32)}
        got = session.run(feed)
        for name, want in zip(names, reference.run(names, feed)):
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-5, err_msg=name)
        del got   # (results alive keep the executor from reusing their arena's views)
    assert any(h is not None for h in hits)


@pytest.mark.parametrize("op, ufunc, logical", [
    ("GreaterOrEqual", np.greater_equal, False), ("LessOrEqual", np.less_equal, False),
    ("And", np.logical_and, True), ("Or", np.logical_or, True), ("Xor", np.logical_xor, True),
    ("Not", np.logical_not, True)])
def test_comparisons_and_logic_write_their_out(op, ufunc, logical):
    """Comparisons and bool logic (an If's condition, a mask) run as one ufunc into the
    out, not through the reference kernel and a copy (which RunStats counts as a
    temporary), with the reference's results, broadcasting included."""
    from palimpsest.backends.binding import find_function
    from palimpsest.backends.numpy import run_with_stats
    from palimpsest.dialects.graph.from_onnx import import_onnx
    from palimpsest.passes.pass_manager import PassManager, parse_pipeline
    from test_kernels import KERNEL_PIPELINE

    rng = np.random.default_rng(7)
    if logical:
        a, b = rng.random((3, 4)) < 0.5, rng.random((4,)) < 0.5
    else:
        a, b = rng.integers(0, 3, (3, 4)).astype(np.float32), np.float32([0, 1, 2, 1])
    ins = {"a": a} if op == "Not" else {"a": a, "b": b}
    model = model_of([node(op, list(ins))], ins, opset=16)
    module = import_onnx(model)
    PassManager(parse_pipeline(KERNEL_PIPELINE)).run(module)
    outputs, stats = run_with_stats(find_function(module, None), ins, poison=True)
    np.testing.assert_array_equal(outputs["y"], ufunc(*ins.values()))
    assert stats.temporary_bytes == 0, stats.temporary_ops
