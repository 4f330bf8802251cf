"""canonicalize_recurrent: independent small GRU, LSTM and RNN layers of one kind merged
into one layer, block-diagonal, whose results are sliced back; against onnxruntime on
the numpy and OpenCL backends, with the op counts after canonicalize. Layers that depend
on each other, differ in attributes or are too wide stay apart."""

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
from palimpsest.passes.pass_manager import PassManager, parse_pipeline  # noqa: E402

from opencl_support import requires_opencl  # noqa: E402

SEQ, BATCH = 6, 2
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


class _Graph:
    """An ONNX graph under construction: nodes, constants, outputs."""

    def __init__(self):
        self.rng = np.random.default_rng(3)
        self.nodes, self.inits, self.outputs = [], [], []

    def const(self, name, shape, scale=0.5):
        self.inits.append(numpy_helper.from_array(
            self.rng.uniform(-scale, scale, shape).astype(np.float32), name))
        return name

    def layer(self, op, name, x, size, hidden, direction="forward", bias=True,
              initial=None, peepholes=False, outputs=("Y", "Y_h"), **attrs):
        """A recurrent node reading `x` (SEQ x BATCH x size); its outputs' names."""
        dirs = 2 if direction == "bidirectional" else 1
        g = GATES[op]
        ins = [x, self.const(f"{name}_W", (dirs, g * hidden, size)),
               self.const(f"{name}_R", (dirs, g * hidden, hidden)),
               self.const(f"{name}_B", (dirs, 2 * g * hidden)) if bias else "", "",
               initial or ""]
        if op == "LSTM":
            ins.append(initial.replace("h", "c") if initial else "")
            if peepholes:
                ins.append(self.const(f"{name}_P", (dirs, 3 * hidden)))
        while not ins[-1]:
            ins.pop()
        outs = [f"{name}_{o}" if o else "" for o in outputs]
        self.nodes.append(h.make_node(op, ins, outs, direction=direction,
                                      hidden_size=hidden, **attrs))
        return [o for o in outs if o]

    def model(self, inputs: dict):
        graph = h.make_graph(
            self.nodes, "side_by_side",
            [h.make_tensor_value_info(n, T.FLOAT, list(a.shape)) for n, a in inputs.items()],
            [h.make_tensor_value_info(o, T.FLOAT, None) for o in self.outputs],
            self.inits)
        model = h.make_model(graph, opset_imports=[h.make_opsetid("", 14)])
        model.ir_version = 8
        return model


def _counts(model) -> dict:
    module = import_onnx(model)
    PassManager(parse_pipeline("infer-shapes,canonicalize")).run(module)
    names = [op.name for op in module.walk()]
    return {n: names.count(f"graph.{n.lower()}") for n in GATES}


def _check(model, inputs, backend="numpy"):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    names = [o.name for o in model.graph.output]
    want = ort.InferenceSession(model.SerializeToString(), options).run(names, inputs)
    got = Session(import_onnx(model), poison=True, backend=backend).run(inputs)
    for name, expected in zip(names, want):
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-5, err_msg=name)


def _side_by_side():
    """Two bidirectional GRUs (linear_before_reset, one without B) on two inputs sharing
    initial_h, the first one's Y transposed before the second runs (a user that moves);
    two LSTMs on one input (W side by side, no concat), one with peepholes; two RNNs."""
    g = _Graph()
    inputs = {"xa": g.rng.standard_normal((SEQ, BATCH, 5)).astype(np.float32),
              "xb": g.rng.standard_normal((SEQ, BATCH, 3)).astype(np.float32),
              "h": g.rng.standard_normal((2, BATCH, 4)).astype(np.float32)}
    ya, ya_h = g.layer("GRU", "ga", "xa", 5, 4, "bidirectional", initial="h",
                       linear_before_reset=1)
    g.nodes.append(h.make_node("Transpose", [ya], ["ya_t"], perm=[1, 0, 2, 3]))
    yb, yb_h = g.layer("GRU", "gb", "xb", 3, 4, "bidirectional", bias=False, initial="h",
                       linear_before_reset=1)
    la = g.layer("LSTM", "la", "xa", 5, 3, outputs=("Y", "", "Y_c"))
    lb = g.layer("LSTM", "lb", "xa", 5, 6, peepholes=True, outputs=("", "Y_h"))
    ra = g.layer("RNN", "ra", "xb", 3, 2, direction="reverse", outputs=("Y",))
    rb = g.layer("RNN", "rb", "xa", 5, 5, direction="reverse", outputs=("", "Y_h"))
    g.outputs = ["ya_t", ya_h, yb, yb_h, *la, *lb, *ra, *rb]
    return g.model(inputs), inputs


def test_independent_layers_merge_and_match_onnxruntime():
    model, inputs = _side_by_side()
    assert _counts(model) == {"GRU": 1, "LSTM": 1, "RNN": 1}
    _check(model, inputs)


@requires_opencl
def test_merged_layers_on_opencl():
    _check(*_side_by_side(), backend="opencl")


@pytest.mark.parametrize("case", ["dependent", "attributes", "too_wide", "layout"])
def test_layers_that_cannot_merge_stay_apart(case):
    """The second layer reads the first's Y (through a Squeeze), or they differ in an
    attribute, or their widths sum past MAX_HIDDEN, or they are batch-major: two ops,
    still onnxruntime's results."""
    g = _Graph()
    size = 4
    inputs = {"x": g.rng.standard_normal((BATCH, SEQ, size) if case == "layout"
                                         else (SEQ, BATCH, size)).astype(np.float32)}
    hidden = 40 if case == "too_wide" else 4
    extra = {"layout": 1} if case == "layout" else {}
    y1, _ = g.layer("GRU", "g1", "x", size, hidden, **extra)
    x2 = "x"
    if case == "dependent":
        g.nodes.append(h.make_node("Squeeze", [y1, g.const("axes", (1,), 0)], ["y1_s"]))
        g.inits[-1] = numpy_helper.from_array(np.array([1], np.int64), "axes")
        x2, size = "y1_s", hidden
    y2, _ = g.layer("GRU", "g2", x2, size, hidden,
                    linear_before_reset=1 if case == "attributes" else 0, **extra)
    g.outputs = [y1, y2]
    model = g.model(inputs)
    assert _counts(model)["GRU"] == 2
    if case != "layout":    # (onnxruntime runs layout 0 only)
        _check(model, inputs)
