"""The numpy backend's paths for small models, where Python per-op overhead decides the
speed: the recurrent kernels' fast steps (default activations, every batch entry running
every step: the next hidden state written straight into Y) against onnxruntime, with
poison, at every direction and layout, with and without biases, repeated runs on one
session (the arena and its views reused) agreeing with the first."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from palimpsest.backends.numpy.session import Session  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402

SEQ, INPUT, HIDDEN = 4, 3, 5
GATES = {"LSTM": 4, "GRU": 3}


def _model(op, direction, batch, bias=True, initial=True, lbr=0, outputs=("Y", "Y_h", "Y_c"),
           hidden=HIDDEN):
    from test_onednn_rnn import _model as recurrent_model

    return recurrent_model(op, direction, SEQ, batch, INPUT, hidden, lbr=lbr, bias=bias,
                           initial=initial, outputs=outputs, seed=3)[0]


# batch 9 with hidden 40: biases folded per step (a `projected` past _BROADCAST_ADD)
CASES = [(op, direction, batch, bias, lbr)
         for op in ("LSTM", "GRU")
         for direction in ("forward", "reverse", "bidirectional")
         for batch in (1, 3, 9)
         for bias in (True, False)
         for lbr in ((0, 1) if op == "GRU" else (0,))]


@pytest.fixture(params=["numpy", "onednn"])
def recurrent_route(request, monkeypatch):
    """The numpy steps (oneDNN's route off), or oneDNN's where it takes the case
    (backends/onednn_rnn.py)."""
    from palimpsest.backends import onednn_rnn

    if request.param == "numpy":
        monkeypatch.setattr(onednn_rnn, "MIN_STEPS", 1 << 30)
    elif not onednn_rnn.available():
        pytest.skip("oneDNN not in use")
    return request.param


@pytest.mark.parametrize("op,direction,batch,bias,lbr", CASES, ids=[
    f"{o}-{d}-b{b}-{'bias' if s else 'nobias'}-lbr{l}" for o, d, b, s, l in CASES])
def test_fast_recurrent_steps_match_onnxruntime(op, direction, batch, bias, lbr,
                                                recurrent_route):
    model = _model(op, direction, batch, bias=bias, initial=bias, lbr=lbr,
                   hidden=40 if batch == 9 else HIDDEN)
    x = np.random.default_rng(7).standard_normal((SEQ, batch, INPUT)).astype(np.float32)
    names = [o.name for o in model.graph.output]
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    want = ort.InferenceSession(model.SerializeToString(), options).run(names, {"X": x})
    session = Session(import_onnx(model), poison=True)
    assert any(op.name.startswith("kernel.") and op.name[7:] == model.graph.node[0]
               .op_type.lower() for op in _planned(session, x).walk())
    for _ in range(3):   # the second and later runs reuse the arena and its views
        got = session.run({"X": x})
        for name, expected in zip(names, want):
            np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-5,
                                       err_msg=name)


def test_fast_steps_with_only_the_final_state_requested():
    """Y unused by the model: the steps still write their states into its buffer."""
    model = _model("GRU", "bidirectional", 2, lbr=1, outputs=("", "Y_h"))
    x = np.random.default_rng(8).standard_normal((SEQ, 2, INPUT)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString()).run(["Y_h"], {"X": x})[0]
    got = Session(import_onnx(model), poison=True).run({"X": x})["Y_h"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _planned(session, x):
    session.run({"X": x})
    return session.last_plan.module


def test_fixed_views_bound_from_the_last_run_only_on_the_same_arenas():
    """The loop binds a function's static arena views and reshapes from the last run
    (their ops left out) only while the executor hands back the same arenas: a held
    result makes the next run take fresh arenas and make its views again; with poison,
    every run matches onnxruntime and a held result keeps its values."""
    model = _model("LSTM", "bidirectional", 2)
    xs = [np.random.default_rng(seed).standard_normal((SEQ, 2, INPUT)).astype(np.float32)
          for seed in range(4)]
    sess = ort.InferenceSession(model.SerializeToString())
    names = [o.name for o in model.graph.output]
    session = Session(import_onnx(model), poison=True)

    def check(x):
        got = session.run({"X": x})
        for name, expected in zip(names, sess.run(names, {"X": x})):
            np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-5)
        return got

    check(xs[0])
    executor = session.last_plan.executor
    plan = executor.plans[session.last_plan.func]
    assert plan.arena_ops and plan.fixed_results and len(plan.lean) < len(plan.unpooled)
    check(xs[1])
    bound = plan.fixed_values
    assert bound is not None
    check(xs[2])
    assert plan.fixed_values is bound          # the same arenas: the views bound as they were
    held = check(xs[3])["Y"]
    kept = held.copy()
    check(xs[0])
    assert plan.fixed_values is not bound      # the held result: fresh arenas, views made again
    np.testing.assert_array_equal(held, kept)
    del held
    again = plan.fixed_values
    check(xs[1])
    check(xs[2])
    assert plan.fixed_values is again


@pytest.mark.parametrize("op", ["LSTM", "GRU", "GRU-lbr"])
@pytest.mark.parametrize("seq,batch", [(4, 1), (1, 3), (4, 3)])
def test_recurrence_read_from_a_run_time_r(op, seq, batch, recurrent_route):
    """R an input (not prepacked): with one batch entry or one step its transposed view
    is read as it is, else copied into the `recurrence` workspace; both as onnxruntime.
    (GRU-lbr: a bidirectional GRU with linear_before_reset, both directions in one loop,
    with one batch entry its Rᵀ halves and all filled into one matrix each run.)"""
    rng = np.random.default_rng(9)
    attrs = {"linear_before_reset": 1} if op == "GRU-lbr" else {}
    op = op.removesuffix("-lbr")
    g = GATES[op]
    node = h.make_node(op, ["X", "W", "R", "B"], ["Y", "Y_h"], hidden_size=HIDDEN,
                       direction="bidirectional", **attrs)
    graph = h.make_graph(
        [node], "rnn",
        [h.make_tensor_value_info("X", T.FLOAT, [seq, batch, INPUT]),
         h.make_tensor_value_info("R", T.FLOAT, [2, g * HIDDEN, HIDDEN])],
        [h.make_tensor_value_info(o, T.FLOAT, None) for o in ("Y", "Y_h")],
        initializer=[numpy_helper.from_array(
            rng.uniform(-0.7, 0.7, shape).astype(np.float32), name) for name, shape in
            (("W", (2, g * HIDDEN, INPUT)), ("B", (2, 2 * g * HIDDEN)))])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 14)])
    model.ir_version = 8
    feeds = {"X": rng.standard_normal((seq, batch, INPUT)).astype(np.float32),
             "R": rng.uniform(-0.7, 0.7, (2, g * HIDDEN, HIDDEN)).astype(np.float32)}
    want = ort.InferenceSession(model.SerializeToString()).run(["Y", "Y_h"], feeds)
    session = Session(import_onnx(model), poison=True)
    for _ in range(2):
        got = session.run(feeds)
        for name, expected in zip(("Y", "Y_h"), want):
            np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-5)
    kernel = next(op for op in session.last_plan.module.walk()
                  if op.name in ("kernel.lstm", "kernel.gru"))
    assert "packed_r" not in kernel.properties   # (a run-time R is never prepacked)


def test_fixed_reshapes_of_a_constant_follow_a_new_value():
    """A 1-D conv's weights reach its kernel through a `buffer.reshape` of the constant,
    bound from the last run like the arena views; a constant given a new value (a pass
    rewrote it) is read again and the reshape made again from it."""
    from palimpsest.ir import attributes as A

    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 3, 12)).astype(np.float32)
    weights = [rng.standard_normal((4, 3, 3)).astype(np.float32) for _ in range(2)]

    def conv(w):
        node = h.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3])
        graph = h.make_graph([node], "conv", [h.make_tensor_value_info("x", T.FLOAT, x.shape)],
                             [h.make_tensor_value_info("y", T.FLOAT, None)],
                             initializer=[numpy_helper.from_array(w, "w")])
        model = h.make_model(graph, opset_imports=[h.make_opsetid("", 14)])
        model.ir_version = 8
        return model

    want = [ort.InferenceSession(conv(w).SerializeToString()).run(["y"], {"x": x})[0]
            for w in weights]
    session = Session(import_onnx(conv(weights[0])), poison=True)
    for _ in range(3):
        np.testing.assert_allclose(session.run({"x": x})["y"], want[0], rtol=1e-5, atol=1e-5)
    module = session.last_plan.module
    plan = session.last_plan.executor.plans[session.last_plan.func]
    constant = next(op for op in module.walk() if op.name == "buffer.constant"
                    and op.results[0].type.shape == (4, 3, 3))
    reshape = next(op for op in module.walk() if op.name == "buffer.reshape"
                   and op.operands[0] is constant.results[0])
    assert reshape.results[0] in plan.fixed_results
    old = constant.properties["value"]
    constant.properties["value"] = A.DenseElementsAttr.from_numpy(weights[1], old.type)
    for _ in range(2):
        np.testing.assert_allclose(session.run({"x": x})["y"], want[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("flag", [True, False])
def test_identity_branches_pass_their_values_on(flag):
    """An If branch of Identity ops only (as Silero VAD's shape checks have) passes its
    values on without a session of its own: an outer input, a chain of identities, an
    initializer; the other branch computes; both against onnxruntime, poisoned, and a
    result held across runs keeps its values. The flag is data (the max of a 9-element
    input compared: more elements than a guard has), so the If stays (a bool input would
    be a guard: the branch inlined)."""
    then = h.make_graph(
        [h.make_node("Identity", ["x"], ["a"]), h.make_node("Identity", ["a"], ["b"]),
         h.make_node("Identity", ["k"], ["c"])],
        "then", [], [h.make_tensor_value_info(n, T.FLOAT, None) for n in ("b", "c")])
    other = h.make_graph(
        [h.make_node("Relu", ["x"], ["r"]), h.make_node("Neg", ["k"], ["n"])],
        "else", [], [h.make_tensor_value_info(n, T.FLOAT, None) for n in ("r", "n")])
    graph = h.make_graph(
        [h.make_node("Tanh", ["x0"], ["x"]),
         h.make_node("ReduceMax", ["f"], ["fmax"], keepdims=0),
         h.make_node("Greater", ["fmax", "zero"], ["flag"]),
         h.make_node("If", ["flag"], ["y", "z"], then_branch=then, else_branch=other),
         h.make_node("Add", ["y", "x"], ["s"])],
        "g", [h.make_tensor_value_info("x0", T.FLOAT, [2, 3]),
              h.make_tensor_value_info("f", T.FLOAT, [9])],
        [h.make_tensor_value_info(n, T.FLOAT, None) for n in ("y", "z", "s")],
        initializer=[numpy_helper.from_array(np.arange(4, dtype=np.float32), "k"),
                     numpy_helper.from_array(np.array(0, np.float32), "zero")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString())
    session = Session(import_onnx(model), poison=True)
    held = None
    for seed in range(3):
        feeds = {"x0": np.random.default_rng(seed).standard_normal((2, 3)).astype(np.float32),
                 "f": np.full(9, 1.0 if flag else -1.0, np.float32)}
        got = session.run(feeds)
        for name, expected in zip(("y", "z", "s"), sess.run(["y", "z", "s"], feeds)):
            np.testing.assert_allclose(got[name], expected, rtol=1e-6, atol=1e-6)
        if held is None:
            held, kept = got["y"], got["y"].copy()
    np.testing.assert_array_equal(held, kept)
    passing = [s for s in session.last_plan.executor.plan.segments()
               if s.passes_on is not None]
    assert len(passing) == 1 and passing[0].session is None


def test_an_input_passed_on_to_a_result_is_copied():
    """A model whose If branch passes an input on to a result returns a copy: the caller's
    array is never handed back as a result."""
    then = h.make_graph([h.make_node("Identity", ["x"], ["a"])], "then", [],
                        [h.make_tensor_value_info("a", T.FLOAT, None)])
    other = h.make_graph([h.make_node("Neg", ["x"], ["b"])], "else", [],
                         [h.make_tensor_value_info("b", T.FLOAT, None)])
    graph = h.make_graph(
        [h.make_node("If", ["flag"], ["y"], then_branch=then, else_branch=other)], "g",
        [h.make_tensor_value_info("x", T.FLOAT, [3]),
         h.make_tensor_value_info("flag", T.BOOL, [])],
        [h.make_tensor_value_info("y", T.FLOAT, None)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    x = np.arange(3, dtype=np.float32)
    y = Session(import_onnx(model)).run({"x": x, "flag": np.array(True)})["y"]
    np.testing.assert_array_equal(y, x)
    assert not np.may_share_memory(y, x)


def test_captured_program_replays_kernels_on_fixed_views():
    """From the second run on the same arenas, a kernel op whose buffers are all fixed
    views (pool views, constants) runs as the numpy calls it recorded, with no dispatch
    (backends/numpy/kernel_ops.py `capture`): every later run still matches onnxruntime;
    a held result drops the capture with the fixed views; indices computed from the data
    are still checked at every run."""
    from palimpsest.backends.numpy.kernel_ops import _Replay
    from palimpsest.ir.diagnostics import DiagnosticError

    rng = np.random.default_rng(11)
    w = rng.standard_normal((6, 6)).astype(np.float32)
    nodes = [h.make_node("Tanh", ["x"], ["t"]),
             h.make_node("MatMul", ["t", "w"], ["m"]),
             h.make_node("Transpose", ["m"], ["tr"], perm=[1, 0]),
             h.make_node("Softmax", ["tr"], ["s"], axis=-1),
             h.make_node("ReduceSum", ["s", "axes"], ["r"], keepdims=0),
             h.make_node("Cast", ["i"], ["ic"], to=T.INT64),
             h.make_node("Gather", ["s", "ic"], ["g"], axis=0),
             h.make_node("Concat", ["g", "s"], ["y"], axis=0)]
    graph = h.make_graph(
        nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [4, 6]),
                     h.make_tensor_value_info("i", T.FLOAT, [2])],
        [h.make_tensor_value_info("y", T.FLOAT, None), h.make_tensor_value_info("r", T.FLOAT, None)],
        initializer=[numpy_helper.from_array(w, "w"),
                     numpy_helper.from_array(np.array([1], np.int64), "axes")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    sess = ort.InferenceSession(model.SerializeToString())
    session = Session(import_onnx(model))

    def feeds():
        return {"x": rng.standard_normal((4, 6)).astype(np.float32),
                "i": rng.integers(0, 6, 2).astype(np.float32)}

    def check(feed, hold=False):
        got = session.run(feed)
        for name, want in zip(("y", "r"), sess.run(["y", "r"], feed)):
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6)
        return got if hold else None

    for _ in range(4):
        check(feeds())
    plan = session.last_plan.executor.plans[session.last_plan.func]
    replays = [op.name for handler, _, _ in plan.captured or () if isinstance(handler, _Replay)
               for op in handler.ops]
    assert {"kernel.matmul", "kernel.transpose", "kernel.softmax", "kernel.reduce",
            "kernel.gather", "kernel.concat"} <= set(replays)
    held = check(feeds(), hold=True)
    check(feeds())
    assert plan.captured is None          # fresh arenas: no fixed views, no capture
    del held
    for _ in range(3):
        check(feeds())
    assert plan.captured
    bad = feeds()
    bad["i"][1] = 9.0
    with pytest.raises(DiagnosticError, match="gather indices out of range") as raised:
        session.run(bad)
    # (the kernels run as one merged replay: the error still names the op that failed)
    assert "'kernel.gather' op" in str(raised.value)


def test_kernels_reading_an_input_handed_again_are_captured():
    """A caller handing the same input arrays run after run (a streaming loop refilling
    them in place) gets the same bound views: the kernels reading the inputs directly
    (a Gather of the state, a Pad of the signal) are captured too, and follow the new
    contents, as do the kernels reading a reshape of one (a MatMul of the flattened
    state: the reshape made once too); another array object drops that capture (a
    captured kernel would read the old array) until two runs bind the same arrays again.
    Every run matches onnxruntime."""
    from palimpsest.backends.numpy.kernel_ops import _Replay

    nodes = [h.make_node("Gather", ["state", "zero"], ["h0"], axis=0),
             h.make_node("Pad", ["x", "pads"], ["xp"], mode="reflect"),
             h.make_node("MatMul", ["xp", "w"], ["m"]),
             h.make_node("Add", ["m", "h0"], ["y"]),
             h.make_node("Flatten", ["state"], ["flat"], axis=0),    # (a reshape of it)
             h.make_node("MatMul", ["flat", "w2"], ["m2"]),
             h.make_node("Mul", ["m2", "m2"], ["y2"])]
    rng = np.random.default_rng(5)
    graph = h.make_graph(
        nodes, "stream", [h.make_tensor_value_info("x", T.FLOAT, [1, 6]),
                          h.make_tensor_value_info("state", T.FLOAT, [2, 1, 4])],
        [h.make_tensor_value_info("y", T.FLOAT, None),
         h.make_tensor_value_info("y2", T.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.array(0, np.int64), "zero"),
                     numpy_helper.from_array(np.array([0, 1, 0, 1], np.int64), "pads"),
                     numpy_helper.from_array(
                         rng.standard_normal((8, 4)).astype(np.float32), "w"),
                     numpy_helper.from_array(
                         rng.standard_normal((8, 3)).astype(np.float32), "w2")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    reference = ort.InferenceSession(model.SerializeToString())
    session = Session(import_onnx(model))
    x = np.zeros((1, 6), np.float32)
    state = np.zeros((2, 1, 4), np.float32)

    def check(feed):
        got = session.run(feed)
        for name, want in zip(("y", "y2"), reference.run(["y", "y2"], feed)):
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6)

    def replayed():
        plan = session.last_plan.executor.plans[session.last_plan.func]
        return {op.name for handler, _, _ in plan.captured or () if isinstance(handler, _Replay)
                for op in handler.ops}

    for _ in range(4):   # the same arrays, refilled in place
        x[...] = rng.standard_normal(x.shape)
        state[...] = rng.standard_normal(state.shape)
        check({"x": x, "state": state})
    assert {"kernel.gather", "kernel.pad", "kernel.matmul"} <= replayed()
    plan = session.last_plan.executor.plans[session.last_plan.func]
    assert sum(op.name == "kernel.matmul" for handler, _, _ in plan.captured
               if isinstance(handler, _Replay) for op in handler.ops) == 2   # (flattened too)
    other = rng.standard_normal((2, 1, 4)).astype(np.float32)
    check({"x": x, "state": other})       # another state array: not the captured one's
    assert "kernel.gather" not in replayed()
    check({"x": x, "state": other})
    check({"x": x, "state": other})
    assert {"kernel.gather", "kernel.pad"} <= replayed()
    check({"x": x.copy(), "state": state})


def test_generic_ops_on_fixed_views_are_captured():
    """An op run as kernel.generic through its fast path (a comparison with a broadcast
    scalar, a Cast) on fixed views is captured (numpy executor `generic_replay`): its
    numpy calls where the fast path gives them, else the fast path on the same arrays;
    every run follows the new data and matches onnxruntime; a held result drops the
    capture, as for kernels."""
    from palimpsest.backends.numpy.executor import _FastReplay
    from palimpsest.backends.numpy.kernel_ops import _Replay

    nodes = [h.make_node("Tanh", ["x"], ["t"]),
             h.make_node("GreaterOrEqual", ["t", "half"], ["ge"]),
             h.make_node("Where", ["ge", "t", "x"], ["w"]),
             h.make_node("Less", ["w", "t"], ["lt"]),
             h.make_node("Cast", ["lt"], ["y"], to=T.FLOAT)]
    graph = h.make_graph(
        nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [3, 5])],
        [h.make_tensor_value_info("w", T.FLOAT, None), h.make_tensor_value_info("y", T.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.array(0.25, np.float32), "half")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    reference = ort.InferenceSession(model.SerializeToString())
    session = Session(import_onnx(model))
    rng = np.random.default_rng(3)

    def check(hold=False):
        feed = {"x": rng.standard_normal((3, 5)).astype(np.float32)}
        got = session.run(feed)
        want_w, want_y = reference.run(["w", "y"], feed)
        np.testing.assert_allclose(got["w"], want_w, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(got["y"], want_y)
        return got if hold else None

    for _ in range(4):
        check()
    plan = session.last_plan.executor.plans[session.last_plan.func]
    # (a comparison's numpy call replayed with the kernels' calls; a Cast, whose route
    # may be oneDNN's, through its fast path's function)
    replayed = {op.properties["op"].value for handler, _, _ in plan.captured or ()
                if isinstance(handler, _Replay) for op in handler.ops
                if op.name == "kernel.generic"}
    fast = {op.properties["op"].value for handler, op, _ in plan.captured or ()
            if isinstance(handler, _FastReplay)}
    assert {"graph.greater_or_equal", "graph.less"} <= replayed and "graph.cast" in fast
    held = check(hold=True)
    check()
    assert plan.captured is None
    del held
    for _ in range(3):
        check()
    assert plan.captured


@pytest.mark.parametrize("case", ["matmul_integer", "depthwise"])
def test_weights_given_as_inputs_refilled_in_place_are_read_anew(case):
    """A read-only bound input is no constant (reference._common.is_constant): a weight
    given as a graph input, the same array refilled in place run after run, is read
    anew (no centred or packed copy, no banded depthwise weight kept from the first
    run). Every run matches onnxruntime."""
    rng = np.random.default_rng(8)
    if case == "matmul_integer":
        nodes = [h.make_node("MatMulInteger", ["a", "b"], ["y"])]
        shapes = {"a": ((16, 64), T.UINT8, np.uint8), "b": ((64, 96), T.INT8, np.int8)}
    else:
        nodes = [h.make_node("Conv", ["x", "w"], ["y"], group=8, pads=[1, 1, 1, 1])]
        shapes = {"x": ((1, 8, 40, 40), T.FLOAT, np.float32),
                  "w": ((8, 1, 3, 3), T.FLOAT, np.float32)}
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, t, list(s))
                                      for n, (s, t, _) in shapes.items()],
                         [h.make_tensor_value_info("y", T.INT32 if case == "matmul_integer"
                                                   else T.FLOAT, None)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    reference = ort.InferenceSession(model.SerializeToString())
    session = Session(import_onnx(model))
    feeds = {n: np.empty(s, d) for n, (s, _, d) in shapes.items()}
    for _ in range(4):
        for name, (shape, _, dtype) in shapes.items():
            feeds[name][...] = (rng.integers(-128, 128, shape) if dtype != np.float32
                                else rng.standard_normal(shape)).astype(dtype)
        got = session.run(feeds)["y"]
        np.testing.assert_allclose(got, reference.run(["y"], feeds)[0], rtol=1e-5, atol=1e-5)
        del got
