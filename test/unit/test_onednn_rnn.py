"""GRU and LSTM on oneDNN's RNN primitive (backends/onednn_rnn.py), the numpy backend's
route for sequences of MIN_STEPS steps or more: against onnxruntime over cells, gate
orders, directions, batch, optional states and outputs, weights given at run time; and
the cases that stay on the numpy steps (one step, bidirectional with several batch
entries, oneDNN's route turned off), which must match as well."""

from __future__ import annotations

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from palimpsest.backends import onednn_rnn  # noqa: E402
from palimpsest.backends.numpy.session import Session  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402

pytestmark = pytest.mark.skipif(not onednn_rnn.available(), reason="oneDNN not in use")

GATES = {"GRU": 3, "LSTM": 4}


def _model(op, direction, seq, batch, inputs, hidden, *, lbr=0, bias=True, initial=True,
           outputs=("Y", "Y_h", "Y_c"), weights_as_inputs=False, seed=0):
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    tensors = {"W": rng.uniform(-0.6, 0.6, (dirs, g * hidden, inputs)),
               "R": rng.uniform(-0.6, 0.6, (dirs, g * hidden, hidden))}
    names = ["X", "W", "R", "", "", ""]
    if bias:
        tensors["B"] = rng.uniform(-0.5, 0.5, (dirs, 2 * g * hidden))
        names[3] = "B"
    if initial:
        tensors["H0"] = rng.uniform(-1, 1, (dirs, batch, hidden))
        names[5] = "H0"
        if op == "LSTM":
            tensors["C0"] = rng.uniform(-1, 1, (dirs, batch, hidden))
            names.append("C0")
    while names and not names[-1]:
        names.pop()
    wanted = [o for o in outputs if op == "LSTM" or o != "Y_c"]
    attrs = {"linear_before_reset": lbr} if op == "GRU" else {}
    node = h.make_node(op, names, wanted, direction=direction, hidden_size=hidden, **attrs)
    tensors = {k: v.astype(np.float32) for k, v in tensors.items()}
    given = {k: v for k, v in tensors.items() if weights_as_inputs and k in ("W", "R")}
    graph = h.make_graph(
        [node], "rnn",
        [h.make_tensor_value_info("X", T.FLOAT, [seq, batch, inputs])]
        + [h.make_tensor_value_info(k, T.FLOAT, list(v.shape)) for k, v in given.items()],
        [h.make_tensor_value_info(o, T.FLOAT, None) for o in wanted if o],
        initializer=[numpy_helper.from_array(v, k) for k, v in tensors.items()
                     if k not in given])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 14)])
    model.ir_version = 8
    feeds = {"X": rng.standard_normal((seq, batch, inputs)).astype(np.float32), **given}
    return model, feeds


def _onednn_calls(session) -> int:
    """How many of the kernels' recorded calls are oneDNN recurrent cells."""
    executor = session.last_plan.executor
    return sum(isinstance(getattr(fn, "recurrent", None), onednn_rnn.Recurrent)
               for bound in executor.kernel_entries.values() if bound.memo
               for fn, _, _ in bound.memo[1])


def _check(model, feeds, onednn: bool, runs: int = 3):
    names = [o.name for o in model.graph.output]
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    want = ort.InferenceSession(model.SerializeToString(), options).run(names, feeds)
    session = Session(import_onnx(model), poison=True)
    for _ in range(runs):   # the later runs replay the recorded call on the same arenas
        got = session.run(feeds)
        for name, expected in zip(names, want):
            np.testing.assert_allclose(got[name], expected, rtol=2e-5, atol=2e-5,
                                       err_msg=name)
    assert _onednn_calls(session) == (1 if onednn else 0)


CASES = [(op, direction, batch, lbr)
         for op in ("GRU", "LSTM")
         for direction in ("forward", "reverse", "bidirectional")
         for batch in (1, 3)
         for lbr in ((0, 1) if op == "GRU" else (0,))]


@pytest.mark.parametrize("op,direction,batch,lbr", CASES, ids=[
    f"{o}-{d}-b{b}-lbr{l}" for o, d, b, l in CASES])
def test_cells_match_onnxruntime(op, direction, batch, lbr):
    """Every cell, direction and gate order; bidirectional with several batch entries
    (Y's layout is not oneDNN's) stays on the numpy steps."""
    model, feeds = _model(op, direction, 7, batch, 6, 5, lbr=lbr)
    _check(model, feeds, onednn=not (direction == "bidirectional" and batch > 1))


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
@pytest.mark.parametrize("bias,initial", [(False, False), (True, False), (False, True)])
def test_optional_inputs(op, bias, initial):
    """No B (zero biases), no initial states (zeros)."""
    model, feeds = _model(op, "bidirectional", 5, 1, 4, 8, lbr=1, bias=bias, initial=initial)
    _check(model, feeds, onednn=True)


@pytest.mark.parametrize("op,outputs", [("GRU", ("Y",)), ("GRU", ("", "Y_h")),
                                        ("LSTM", ("Y", "Y_h")), ("LSTM", ("", "", "Y_c"))])
def test_outputs_asked_for(op, outputs):
    """Only some of Y, Y_h, Y_c used by the model."""
    model, feeds = _model(op, "forward", 6, 2, 3, 7, outputs=outputs)
    _check(model, feeds, onednn=True)


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_weights_given_at_run_time(op):
    """W and R graph inputs: packed again at every call, new values followed."""
    model, feeds = _model(op, "bidirectional", 4, 1, 3, 6, lbr=1, weights_as_inputs=True)
    _check(model, feeds, onednn=True)
    session = Session(import_onnx(model))
    for seed in range(2):   # the same arrays refilled, then fresh ones
        _, fresh = _model(op, "bidirectional", 4, 1, 3, 6, lbr=1, weights_as_inputs=True,
                          seed=seed + 1)
        for name in ("W", "R"):
            feeds[name][...] = fresh[name]
        want = ort.InferenceSession(model.SerializeToString()).run(["Y"], feeds)[0]
        np.testing.assert_allclose(session.run(feeds)["Y"], want, rtol=2e-5, atol=2e-5)


def test_larger_cells_and_prepacked_r():
    """A 128-unit bidirectional GRU (a sentence encoder's) over 16 steps: R is
    prepacked by the default pipeline (Rᵀ per gate), which the packing reads."""
    model, feeds = _model("GRU", "bidirectional", 16, 1, 64, 128, lbr=1)
    _check(model, feeds, onednn=True)
    session = Session(import_onnx(model))
    session.run(feeds)
    kernel = next(op for op in session.last_plan.module.walk() if op.name == "kernel.gru")
    assert kernel.properties["packed_r"].value == 1


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_short_sequences_and_the_route_turned_off_stay_on_numpy(op, monkeypatch):
    """One step: the numpy steps (cheaper than a oneDNN call); MIN_STEPS raised: the
    numpy steps for every case above."""
    model, feeds = _model(op, "forward", 1, 1, 4, 6)
    _check(model, feeds, onednn=False)
    monkeypatch.setattr(onednn_rnn, "MIN_STEPS", 1 << 30)
    model, feeds = _model(op, "bidirectional", 6, 1, 4, 6, lbr=1)
    _check(model, feeds, onednn=False)
