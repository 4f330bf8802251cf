"""LSTM, GRU and RNN against onnxruntime over their attributes: directions, sequence_lens
(each entry its own length), initial states, peepholes, layout, activations, clip,
linear_before_reset, omitted leading outputs; through a Session at the planned level."""

from __future__ import annotations

import itertools

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from palimpsest.backends.numpy.session import Session  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402

SEQ, BATCH, INPUT, HIDDEN = 5, 3, 4, 6
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _model(op, direction="forward", layout=0, lengths=False, initial=False, peepholes=False,
           outputs=("Y", "Y_h", "Y_c"), **attrs):
    rng = np.random.default_rng(11)
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    inits = {"W": rng.uniform(-0.5, 0.5, (dirs, g * HIDDEN, INPUT)),
             "R": rng.uniform(-0.5, 0.5, (dirs, g * HIDDEN, HIDDEN)),
             "B": rng.uniform(-0.5, 0.5, (dirs, 2 * g * HIDDEN))}
    names = ["X", "W", "R", "B", "", ""]
    if lengths:
        inits["L"] = np.array([5, 2, 4], np.int32)
        names[4] = "L"
    state = (BATCH, dirs, HIDDEN) if layout else (dirs, BATCH, HIDDEN)
    if initial:
        inits["H0"] = rng.uniform(-1, 1, state)
        names[5] = "H0"
        if op == "LSTM":
            inits["C0"] = rng.uniform(-1, 1, state)
            names.append("C0")
    if peepholes:
        names += [""] * (7 - len(names)) + ["P"]
        inits["P"] = rng.uniform(-0.5, 0.5, (dirs, 3 * HIDDEN))
    while names and not names[-1]:
        names.pop()
    wanted = list(outputs) if op == "LSTM" else [o for o in outputs if o != "Y_c"]
    node = h.make_node(op, names, wanted, hidden_size=HIDDEN, direction=direction,
                       layout=layout, **attrs)
    x_shape = [BATCH, SEQ, INPUT] if layout else [SEQ, BATCH, INPUT]
    graph = h.make_graph(
        [node], "rnn", [h.make_tensor_value_info("X", T.FLOAT, x_shape)],
        [h.make_tensor_value_info(o, T.FLOAT, None) for o in wanted if o],
        initializer=[numpy_helper.from_array(
            v.astype(np.int32 if k == "L" else np.float32), k) for k, v in inits.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 14)])
    model.ir_version = 8
    return model, np.random.default_rng(5).standard_normal(x_shape).astype(np.float32)


def _check(model, x):
    """Against onnxruntime; it runs layout 0 only, so a layout-1 model is compared with
    its layout-0 twin on the transposed input (outputs transposed back)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    names = [o.name for o in model.graph.output]
    node = model.graph.node[0]
    layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
    twin = model
    if layout:
        twin = onnx.ModelProto()
        twin.CopyFrom(model)
        for a in twin.graph.node[0].attribute:
            if a.name == "layout":
                a.i = 0
        for init in twin.graph.initializer:
            if init.name in ("H0", "C0"):
                init.CopyFrom(numpy_helper.from_array(
                    numpy_helper.to_array(init).transpose(1, 0, 2).copy(), init.name))
        dims = twin.graph.input[0].type.tensor_type.shape.dim
        dims[0].dim_value, dims[1].dim_value = dims[1].dim_value, dims[0].dim_value
    feed = x.transpose(1, 0, 2) if layout else x
    want = ort.InferenceSession(twin.SerializeToString(), options).run(names, {"X": feed})
    if layout:
        want = [w.transpose(2, 0, 1, 3) if w.ndim == 4 else w.transpose(1, 0, 2) for w in want]
    got = Session(import_onnx(model), poison=True).run({"X": x})
    for name, expected in zip(names, want):
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-5, err_msg=name)


GRID = list(itertools.product(["LSTM", "GRU", "RNN"], ["forward", "reverse", "bidirectional"],
                              [0, 1], [False, True]))


@pytest.mark.parametrize("op,direction,layout,lengths", GRID,
                         ids=[f"{o}-{d}-layout{l}-{'lens' if s else 'full'}"
                              for o, d, l, s in GRID])
def test_directions_layouts_and_sequence_lengths(op, direction, layout, lengths):
    _check(*_model(op, direction, layout, lengths, initial=True))


def test_lstm_peepholes_clip_and_custom_activations():
    _check(*_model("LSTM", "bidirectional", peepholes=True, initial=True, clip=0.7,
                   activations=["HardSigmoid", "Tanh", "Softsign"] * 2,
                   activation_alpha=[0.3, 0.3], activation_beta=[0.4, 0.4]))


def test_gru_linear_before_reset_with_leaky_relu():
    _check(*_model("GRU", "forward", lengths=True, linear_before_reset=1,
                   activations=["Sigmoid", "LeakyRelu"], activation_alpha=[0.2]))


def test_rnn_relu_activation():
    _check(*_model("RNN", "reverse", activations=["Relu"]))


def test_lstm_with_only_the_final_states_requested():
    """A CRNN head reads Y_h only: Y is an omitted (empty) output before it."""
    _check(*_model("LSTM", "bidirectional", outputs=("", "Y_h")))


def test_lstm_with_a_dynamic_sequence_length():
    model, _ = _model("LSTM", "forward")
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "seq"
    session = Session(import_onnx(model), poison=True)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    reference = ort.InferenceSession(model.SerializeToString(), options)
    for steps in (2, 7):
        x = np.random.default_rng(steps).standard_normal((steps, BATCH, INPUT)).astype(
            np.float32)
        got = session.run({"X": x})
        for name, expected in zip(["Y", "Y_h", "Y_c"], reference.run(None, {"X": x})):
            np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-5)
