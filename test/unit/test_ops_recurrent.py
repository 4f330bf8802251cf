"""LSTM, GRU and RNN against onnxruntime over their attributes: directions, sequence_lens
(each entry its own length), initial states, peepholes, layout, every activation in every
position, clip, linear_before_reset, omitted leading outputs, opsets 1 and 3, f64 and f16;
through a Session at the planned level (kernel.lstm/gru/rnn for f32 and f64), with a
dynamic sequence length (run-time-sized or bounded workspaces). One-line diagnostics for
bad attributes; the kernel's workspaces in the IR; a kernel run allocates nothing."""

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
           outputs=("Y", "Y_h", "Y_c"), opset=14, dtype=np.float32, batch=BATCH,
           hidden=HIDDEN, **attrs):
    rng = np.random.default_rng(11)
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    inits = {"W": rng.uniform(-0.5, 0.5, (dirs, g * hidden, INPUT)),
             "R": rng.uniform(-0.5, 0.5, (dirs, g * hidden, hidden)),
             "B": rng.uniform(-0.5, 0.5, (dirs, 2 * g * hidden))}
    names = ["X", "W", "R", "B", "", ""]
    if lengths:
        inits["L"] = np.resize(np.array([5, 2, 4], np.int32), batch)
        names[4] = "L"
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    if initial:
        inits["H0"] = rng.uniform(-1, 1, state)
        names[5] = "H0"
        if op == "LSTM":
            inits["C0"] = rng.uniform(-1, 1, state)
            names.append("C0")
    if peepholes:
        names += [""] * (7 - len(names)) + ["P"]
        inits["P"] = rng.uniform(-0.5, 0.5, (dirs, 3 * hidden))
    while names and not names[-1]:
        names.pop()
    wanted = list(outputs) if op == "LSTM" else [o for o in outputs if o != "Y_c"]
    if opset >= 14:
        attrs["layout"] = layout
    attrs.setdefault("hidden_size", hidden)
    node = h.make_node(op, names, wanted, direction=direction, **attrs)
    element = {np.float32: T.FLOAT, np.float64: T.DOUBLE, np.float16: T.FLOAT16}[dtype]
    x_shape = [batch, SEQ, INPUT] if layout else [SEQ, batch, INPUT]
    graph = h.make_graph(
        [node], "rnn", [h.make_tensor_value_info("X", element, x_shape)],
        [h.make_tensor_value_info(o, element, None) for o in wanted if o],
        initializer=[numpy_helper.from_array(
            v.astype(np.int32 if k == "L" else dtype), k) for k, v in inits.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8
    return model, np.random.default_rng(5).standard_normal(x_shape).astype(dtype)


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


# -- every activation, older opsets, other element types ---------------------------------------

# explicit alpha/beta: where the spec leaves a default to "the ONNX operator of the same
# name", onnxruntime takes 0 for Affine, ThresholdedRelu and ScaledTanh
PARAMETERS = {"Affine": (0.7, 0.2), "LeakyRelu": (0.3, None), "ThresholdedRelu": (0.1, None),
              "ScaledTanh": (1.5, 0.6), "HardSigmoid": (0.3, 0.4), "Elu": (0.8, None)}
NAMES = ["Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh",
         "HardSigmoid", "Elu", "Softsign", "Softplus"]
PER_DIRECTION = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"),
                 "RNN": ("Tanh",)}


def _with_activation(op, position, name):
    names = list(PER_DIRECTION[op])
    names[position] = name
    attrs = {"activations": names}
    alpha, beta = PARAMETERS.get(name, (None, None))
    if alpha is not None:
        attrs["activation_alpha"] = [alpha]
    if beta is not None:
        attrs["activation_beta"] = [beta]
    return attrs


ACTIVATION_GRID = [(op, position, name) for op in PER_DIRECTION
                   for position in range(len(PER_DIRECTION[op])) for name in NAMES]


@pytest.mark.parametrize("op,position,name", ACTIVATION_GRID,
                         ids=[f"{o}-{p}-{n}" for o, p, n in ACTIVATION_GRID])
def test_every_activation_in_every_position(op, position, name):
    _check(*_model(op, "reverse", lengths=True, initial=True, clip=2.5,
                   **_with_activation(op, position, name)))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_opset_1_matches_opset_7(op):
    """Opsets 1 (output_sequence) and 3 (GRU's linear_before_reset) mean what opset 7
    does; onnxruntime runs opset 7 and later."""
    extra = {"linear_before_reset": 1} if op == "GRU" else {}
    old, x = _model(op, "bidirectional", lengths=True, initial=True, opset=3 if extra else 1,
                    output_sequence=1, **extra)
    new, _ = _model(op, "bidirectional", lengths=True, initial=True, opset=7, **extra)
    names = [o.name for o in new.graph.output]
    want = ort.InferenceSession(new.SerializeToString()).run(names, {"X": x})
    got = Session(import_onnx(old), poison=True).run({"X": x})
    for name, expected in zip(names, want):
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_double_precision(op):
    """f64 runs on the kernel; onnxruntime has f32 only: its results on the f32 twin."""
    model, x = _model(op, "bidirectional", lengths=True, initial=True, dtype=np.float64)
    twin, _ = _model(op, "bidirectional", lengths=True, initial=True)
    names = [o.name for o in model.graph.output]
    want = ort.InferenceSession(twin.SerializeToString()).run(names, {"X": x.astype(np.float32)})
    got = Session(import_onnx(model), poison=True).run({"X": x})
    for name, expected in zip(names, want):
        assert got[name].dtype == np.float64
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-5)


def test_half_precision_lstm_runs_in_the_reference():
    model, x = _model("LSTM", "forward", lengths=True, dtype=np.float16)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"X": x})
    got = Session(import_onnx(model), poison=True).run({"X": x})
    for name, expected in zip(["Y", "Y_h", "Y_c"], want):
        assert got[name].dtype == np.float16
        np.testing.assert_allclose(got[name].astype(np.float32), expected.astype(np.float32),
                                   rtol=1e-2, atol=1e-2)


# -- diagnostics ---------------------------------------------------------------------------------

@pytest.mark.parametrize("op,attrs,message", [
    ("RNN", {"activations": ["Foo"]}, "unknown activation 'Foo'"),
    ("LSTM", {"activations": ["Sigmoid", "Tanh"]}, "needs 3 activations"),
    ("GRU", {"layout": 2}, "layout"),
    ("LSTM", {"direction": "sideways"}, "direction"),
    ("RNN", {"hidden_size": 5}, "'W' must have shape"),
])
def test_bad_attributes_are_one_line_diagnostics(op, attrs, message):
    from palimpsest.dialects.graph.from_onnx import OnnxImportError
    from palimpsest.ir.diagnostics import DiagnosticError

    model, x = _model(op, **attrs)
    with pytest.raises((OnnxImportError, DiagnosticError)) as caught:
        Session(import_onnx(model)).run({"X": x})
    text = str(caught.value)
    assert message in text and len(text.strip().splitlines()) == 1, text


def test_sequence_lengths_out_of_range_are_refused_at_run_time():
    from palimpsest.ir.diagnostics import DiagnosticError

    model, x = _model("GRU", lengths=True)
    for init in model.graph.initializer:
        if init.name == "L":
            init.CopyFrom(numpy_helper.from_array(np.array([6, 1, 2], np.int32), "L"))
    with pytest.raises(DiagnosticError, match="sequence_lens"):
        Session(import_onnx(model)).run({"X": x})


# -- the kernel level ----------------------------------------------------------------------------

# R is a constant here: prepack-weights stores Rᵀ per gate, so no `recurrence` workspace
ROLES = ("projected", "state", "valid")


def _dynamic(model):
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "seq"
    return model


def _opt(tmp_path, model, pipeline):
    from palimpsest.tools.onnx_import import main as import_main
    from palimpsest.tools.opt import main as opt_main

    onnx.save(model, str(tmp_path / "m.onnx"))
    assert import_main([str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.pal")]) == 0
    out = tmp_path / f"{pipeline}.pal"
    assert opt_main([str(tmp_path / "m.pal"), "-p", pipeline, "-o", str(out)]) == 0
    return out.read_text().splitlines()


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_workspaces_are_allocated_around_the_kernel_op(tmp_path, op):
    """to-kernels: each workspace a buffer.alloc right before kernel.<op> and freed right
    after; default: the run-time-sized ones (a `?` sequence length) stay allocs, the
    others are planned views of the arena."""
    model = _dynamic(_model(op, "bidirectional", lengths=True, initial=True)[0])
    lines = _opt(tmp_path, model, "to-kernels")
    at = next(i for i, line in enumerate(lines) if f"kernel.{op.lower()} " in line)
    assert "packed_r = 1" in lines[at] and "recurrence" not in "".join(lines), lines[at]
    roles = ROLES
    before = lines[at - len(roles):at]
    for role, line in zip(roles, before):
        assert f'_{role} = buffer.alloc {{kind = "workspace"}}' in line, line
    after = lines[at + 1:at + 1 + len(roles)]
    assert all("buffer.dealloc" in line for line in after), after
    planned = _opt(tmp_path, model, "default")
    assert any(f"kernel.{op.lower()} " in line for line in planned)
    for role in roles:
        line = next(line for line in planned if f"%Y_{role} = " in line)
        if role in ("projected", "valid"):  # sized by the sequence length
            assert 'buffer.alloc {kind = "workspace"}' in line and "?" in line, line
        else:
            assert 'buffer.view %arena_activations {kind = "workspace", offset' in line, line


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("bounded", [False, True])
def test_planned_runs_with_a_dynamic_sequence_length(op, bounded):
    """One plan for every length: workspaces sized at run time, or planned at the bound."""
    model = _dynamic(_model(op, "bidirectional", lengths=False, initial=True)[0])
    session = Session(import_onnx(model), poison=True, specialize=False,
                      bounds={"X": {0: 8}} if bounded else None)
    reference = ort.InferenceSession(model.SerializeToString())
    names = [o.name for o in model.graph.output]
    for steps in (3, 8):
        x = np.random.default_rng(steps).standard_normal((steps, BATCH, INPUT)).astype(
            np.float32)
        got = session.run({"X": x})
        assert (session.last_stats.allocations == 0) == bounded
        for name, expected in zip(names, reference.run(names, {"X": x})):
            np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-5)


def _lowered_kernel(model):
    from palimpsest.passes.pass_manager import PassManager, parse_pipeline

    module = import_onnx(model)
    PassManager(parse_pipeline("to-kernels")).run(module)
    return next(op for op in module.walk() if op.name.startswith("kernel.")
                and op.name != "kernel.generic")


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_the_kernel_allocates_nothing(op):
    """Every array a step touches is an in, an out or a workspace: running the kernel
    traces less memory than one batch x hidden temporary (32 KiB here)."""
    import tracemalloc

    from palimpsest.backends.numpy.arena import dtype_of
    from palimpsest.backends.numpy.kernel_ops import KERNEL_IMPLS

    model, x = _model(op, "bidirectional", lengths=True, initial=True, peepholes=op == "LSTM",
                      clip=3.0, batch=64, hidden=128,
                      **({"linear_before_reset": 1} if op == "GRU" else {}))
    kernel = _lowered_kernel(model)
    values = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    values["X"] = x
    # constants as the IR holds them (R prepacked: Rᵀ per gate), X as given
    def value_of(v):
        owner = getattr(v, "op", None)
        if owner is not None and owner.name == "buffer.constant":
            return owner.properties["value"].to_numpy()
        return values[v.name_hint] if v.name_hint in values else values["X"]

    ins = [value_of(v) for v in kernel.ins]
    buffers = [np.zeros(v.type.shape, dtype_of(v.type.element_type))
               for v in list(kernel.outs) + list(kernel.workspaces)]
    outs, workspaces = buffers[:len(kernel.outs)], buffers[len(kernel.outs):]
    run = KERNEL_IMPLS[kernel.name]
    run(kernel, ins, outs, workspaces)   # first run: caches the op's config
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        run(kernel, ins, outs, workspaces)
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    assert peak < 8192, peak
