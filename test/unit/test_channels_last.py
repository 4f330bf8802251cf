"""conv2d on oneDNN's direct convolutions through channels-last copies
(backends/numpy/kernel_ops_channels_last.py, backends/onednn_primitives.py), against the graph
level's reference: lowered to kernels, printed and parsed back, run with poisoning on
(test_kernels.check); the route itself must have run (or, where it must not take the
conv, must not have). Depthwise (strided, dilated, a multiplier, asymmetric pads, a
batch), dense convs of 32 input channels a group or more, a column image (H x 1, run as
the row it is in memory), weights computed in the run (packed at every call); 1x1 convs,
first layers, small outputs and convs whose workspaces cannot hold the copies keep the
numpy paths. Skipped where oneDNN is not installed."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")

from palimpsest.backends import onednn_primitives  # noqa: E402
import palimpsest.backends.numpy.kernel_ops_channels_last as channels_last  # noqa: E402
from test_kernels import check, model_of, node, rand  # noqa: E402

pytestmark = pytest.mark.skipif(not onednn_primitives.available(),
                                reason="oneDNN (onednn-cpu-gomp) not installed")


def _binds(monkeypatch) -> list:
    """The ChannelsLastConv calls bound, as they are: (image shape, out shape) each."""
    binds = []
    original = onednn_primitives.ChannelsLastConv.bind

    def counted(self, x, x_last, packed, bias, y_last, y):
        binds.append((x.shape, y.shape))
        return original(self, x, x_last, packed, bias, y_last, y)

    monkeypatch.setattr(onednn_primitives.ChannelsLastConv, "bind", counted)
    return binds


def _checked(monkeypatch, seed, x_shape, w_shape, attrs, bias=True, weights_in_run=False):
    """A one-Conv model checked at the kernel level; the route's binds. With
    `weights_in_run`, W is an input scaled in the graph (a buffer computed in the run)."""
    rng = np.random.default_rng(seed)
    binds = _binds(monkeypatch)
    x = rand(rng, x_shape)
    consts = {"w": rand(rng, w_shape)}
    nodes = []
    w_name = "w"
    if weights_in_run:
        consts["two"] = np.array(2.0, np.float32)
        nodes.append(node("Mul", ["w", "two"], {}, outs=["w2"]))
        w_name = "w2"
    ins = ["x", w_name]
    if bias:
        consts["b"] = rand(rng, (w_shape[0],))
        ins.append("b")
    nodes.append(node("Conv", ins, attrs))
    terms = w_shape[1] * w_shape[2] * w_shape[3]
    check(model_of(nodes, {"x": x}, consts), {"x": x}, "kernel.conv2d",
          atol=1e-5 * max(1.0, (terms / 49) ** 0.5))
    return binds


@pytest.mark.parametrize("c, mg, hw, kernel, strides, dilations, pads, n, bias", [
    (32, 1, (40, 40), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, True),
    (48, 1, (41, 37), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 2, True),
    (64, 1, (14, 14), (5, 5), (1, 1), (1, 1), (2, 2, 2, 2), 1, False),
    (24, 2, (30, 31), (3, 3), (1, 1), (2, 2), (2, 2, 2, 2), 1, True),
    (40, 1, (44, 44), (5, 5), (2, 2), (1, 1), (2, 1, 1, 2), 1, True),
    (48, 1, (12, 80), (3, 3), (2, 1), (1, 1), (1, 1, 1, 1), 1, True),
])
def test_depthwise(monkeypatch, c, mg, hw, kernel, strides, dilations, pads, n, bias):
    attrs = {"group": c, "pads": list(pads), "strides": list(strides),
             "dilations": list(dilations)}
    binds = _checked(monkeypatch, c + mg, (n, c) + hw, (c * mg, 1) + kernel, attrs, bias)
    assert len(binds) == n


@pytest.mark.parametrize("c, m, group, hw, kernel, strides, dilations, pads, n", [
    (32, 48, 1, (20, 22), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (64, 64, 1, (17, 15), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 2),
    (32, 32, 1, (16, 16), (3, 3), (1, 1), (2, 2), (2, 2, 2, 2), 1),
    (40, 24, 1, (18, 20), (5, 3), (1, 2), (1, 1), (2, 1, 2, 0), 1),
    (64, 64, 2, (16, 16), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
])
def test_dense(monkeypatch, c, m, group, hw, kernel, strides, dilations, pads, n):
    attrs = {"group": group, "pads": list(pads), "strides": list(strides),
             "dilations": list(dilations)}
    binds = _checked(monkeypatch, c + m, (n, c) + hw, (m, c // group) + kernel, attrs)
    assert len(binds) == n


def test_column_image_runs_as_a_row(monkeypatch):
    """An H x 1 image with an kh x 1 kernel (magika's 256 -> 512 5x1 over 512 x 1) is
    given to oneDNN as the 1 x H row it is in memory (10x faster there)."""
    binds = _checked(monkeypatch, 3, (1, 32, 300, 1), (48, 32, 5, 1),
                     {"pads": [2, 0, 2, 0]})
    assert len(binds) == 1
    made = []
    original = onednn_primitives.ChannelsLastConv.__init__

    def spy(self, image, out, kernel, *args):
        made.append((image, out, kernel))
        original(self, image, out, kernel, *args)

    monkeypatch.setattr(onednn_primitives.ChannelsLastConv, "__init__", spy)
    _checked(monkeypatch, 4, (1, 32, 300, 1), (16, 32, 3, 1), {"pads": [1, 0, 1, 0]})
    assert made == [((32, 1, 300), (16, 1, 300), (1, 3))]


def test_weights_computed_in_the_run(monkeypatch):
    """A W that is a buffer of the run (not a constant) is packed at every call."""
    packs = []
    original = onednn_primitives.ChannelsLastConv.pack_weights
    monkeypatch.setattr(onednn_primitives.ChannelsLastConv, "pack_weights",
                        lambda self, w, packed: (packs.append(w.shape),
                                                 original(self, w, packed)))
    binds = _checked(monkeypatch, 5, (1, 32, 20, 20), (32, 1, 3, 3),
                     {"group": 32, "pads": [1, 1, 1, 1]}, weights_in_run=True)
    assert len(binds) == 1 and packs


@pytest.mark.parametrize("x_shape, w_shape, attrs", [
    ((1, 64, 20, 20), (64, 64, 1, 1), {}),                                  # 1x1
    ((1, 3, 64, 64), (16, 3, 3, 3), {"pads": [1, 1, 1, 1]}),                # first layer
    ((1, 16, 20, 20), (16, 16, 3, 3), {"pads": [1, 1, 1, 1]}),              # few channels
    ((1, 8, 10, 10), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),     # few outputs
])
def test_left_to_the_numpy_paths(monkeypatch, x_shape, w_shape, attrs):
    assert _checked(monkeypatch, 6, x_shape, w_shape, attrs) == []


def test_no_room_in_the_workspaces(monkeypatch):
    """A 1x1 stride-2 conv has an im2col of the output's size and no padded image: no
    room for both copies, so the numpy path runs it."""
    monkeypatch.setattr(channels_last, "wanted", lambda *args: True)
    assert _checked(monkeypatch, 7, (1, 32, 20, 20), (64, 32, 1, 1),
                    {"strides": [2, 2]}) == []


@pytest.mark.parametrize("activation, attrs, expected", [
    ("Relu", {}, ("relu", 0.0, 0.0)),
    ("LeakyRelu", {"alpha": 0.1}, ("relu", 0.1, 0.0)),
    ("Sigmoid", {}, ("logistic", 0.0, 0.0)),
    ("Tanh", {}, ("tanh", 0.0, 0.0)),
    ("HardSwish", {}, ("hardswish", 1 / 6, 0.5)),
    ("HardSigmoid", {"alpha": 0.25, "beta": 0.4}, ("hardsigmoid", 0.25, 0.4)),
    ("Elu", {"alpha": 0.7}, ("elu", 0.7, 0.0)),
    ("Gelu", {}, ("gelu_erf", 0.0, 0.0)),
    ("Gelu", {"approximate": "tanh"}, ("gelu_tanh", 0.0, 0.0)),
    ("Swish", {}, ("swish", 1.0, 0.0)),      # x * sigmoid(x), as YOLO exports it
    ("AddRelu", {}, None),                   # a residual add first: not a post-op
])
def test_activation_as_post_op(monkeypatch, activation, attrs, expected):
    """A conv's fused activation is oneDNN's post-op (no pass of its own); an epilogue
    that reads more than the conv's result runs after it, on numpy."""
    made = []
    original = onednn_primitives.ChannelsLastConv.__init__

    def spy(self, *args):
        made.append(args[10])   # post_op
        original(self, *args)

    monkeypatch.setattr(onednn_primitives.ChannelsLastConv, "__init__", spy)
    binds = _binds(monkeypatch)
    rng = np.random.default_rng(8)
    x = rand(rng, (1, 32, 24, 24))
    consts = {"w": rand(rng, (32, 1, 3, 3)) * 0.5, "b": rand(rng, (32,))}
    conv = node("Conv", ["x", "w", "b"], {"group": 32, "pads": [1, 1, 1, 1]}, outs=["c"])
    if activation == "Swish":
        nodes = [conv, node("Sigmoid", ["c"], outs=["s"]), node("Mul", ["c", "s"])]
    elif activation == "AddRelu":
        consts["r"] = rand(rng, (1, 32, 24, 24))
        nodes = [conv, node("Add", ["c", "r"], outs=["a"]), node("Relu", ["a"])]
    else:
        nodes = [conv, node(activation, ["c"], attrs)]
    check(model_of(nodes, {"x": x}, consts, opset=20), {"x": x}, "kernel.conv2d",
          count=1, atol=2e-6)
    assert len(binds) == 1
    assert len(made) == 1
    if expected is None:
        assert made[0] is None
    else:
        (function, alpha, beta), = made[0]
        assert function == expected[0]
        assert alpha == pytest.approx(expected[1]) and beta == pytest.approx(expected[2])


def test_affine_steps_and_a_channel_bias_as_post_ops(monkeypatch):
    """Paddle's conv epilogues (ppocr_v5_det: + a per-channel vector, * s, + t,
    HardSwish, * u, + v; scalars on either side, a subtraction and a division) run as
    oneDNN's post-ops, the vector as the conv's bias; with a scalar computed in the run
    the epilogue stays on numpy."""
    made = []
    original = onednn_primitives.ChannelsLastConv.__init__

    def spy(self, *args):
        made.append((args[7], args[10]))   # (has a bias, post_ops)
        original(self, *args)

    monkeypatch.setattr(onednn_primitives.ChannelsLastConv, "__init__", spy)
    rng = np.random.default_rng(12)
    x = rand(rng, (1, 32, 24, 24))
    consts = {"w": rand(rng, (32, 1, 3, 3)) * 0.5, "v": rand(rng, (1, 32, 1, 1)),
              "s": np.array(0.8, np.float32), "t": np.array([0.25], np.float32),
              "u": np.array(1.5, np.float32), "d": np.array(2.0, np.float32)}
    nodes = [node("Conv", ["x", "w"], {"group": 32, "pads": [1, 1, 1, 1]}, outs=["c"]),
             node("Add", ["c", "v"], outs=["a0"]), node("Mul", ["s", "a0"], outs=["a1"]),
             node("Add", ["a1", "t"], outs=["a2"]), node("HardSwish", ["a2"], outs=["a3"]),
             node("Sub", ["u", "a3"], outs=["a4"]), node("Div", ["a4", "d"])]
    check(model_of(nodes, {"x": x}, consts), {"x": x}, "kernel.conv2d", count=1,
          atol=2e-6)
    assert len(made) == 1
    has_bias, steps = made[0]
    assert has_bias
    assert [name for name, _, _ in steps] == ["linear", "linear", "hardswish", "linear",
                                              "linear"]
    assert steps[0][1:] == pytest.approx((0.8, 0.0)) and steps[3][1:] == pytest.approx((-1, 1.5))
    assert steps[4][1:] == pytest.approx((0.5, 0.0))
    # a scale computed in the run: not a constant, so the epilogue runs on numpy
    made.clear()
    x2 = {"x": x, "k": np.array(0.8, np.float32)}
    nodes = [node("Conv", ["x", "w"], {"group": 32, "pads": [1, 1, 1, 1]}, outs=["c"]),
             node("Mul", ["c", "k"], outs=["m"]), node("Relu", ["m"])]
    check(model_of(nodes, x2, {"w": consts["w"]}), x2, "kernel.conv2d", count=1,
          atol=2e-6)
    assert made == [(False, None)]


def _modes(monkeypatch) -> list:
    """(reads_last, writes_last) of each ChannelsLastConv made, in order."""
    made = []
    original = onednn_primitives.ChannelsLastConv.__init__

    def spy(self, *args):
        original(self, *args)
        made.append((self.reads_last, self.writes_last))

    monkeypatch.setattr(onednn_primitives.ChannelsLastConv, "__init__", spy)
    return made


@pytest.mark.parametrize("n", [1, 2])
def test_chain_hands_channels_last_data_on(monkeypatch, n):
    """depthwise -> 1x1 -> depthwise (strided) -> 1x1, each result read only by the next
    conv: the inner results stay NHWC (no reorder between the convs); the first conv
    reads the input as it is, the last writes the output in NCHW."""
    made = _modes(monkeypatch)
    rng = np.random.default_rng(9)
    x = rand(rng, (n, 32, 20, 20))
    consts = {"w0": rand(rng, (32, 1, 3, 3)), "w1": rand(rng, (48, 32, 1, 1)) * 0.3,
              "b1": rand(rng, (48,)), "w2": rand(rng, (48, 1, 5, 5)) * 0.3,
              "w3": rand(rng, (64, 48, 1, 1)) * 0.3}
    nodes = [node("Conv", ["x", "w0"], {"group": 32, "pads": [1, 1, 1, 1]}, outs=["c0"]),
             node("Relu", ["c0"], outs=["r0"]),
             node("Conv", ["r0", "w1", "b1"], {}, outs=["c1"]),
             node("HardSwish", ["c1"], outs=["r1"]),
             node("Conv", ["r1", "w2"], {"group": 48, "pads": [2, 2, 2, 2],
                                         "strides": [2, 2]}, outs=["c2"]),
             node("Conv", ["c2", "w3"], {})]
    check(model_of(nodes, {"x": x}, consts), {"x": x}, "kernel.conv2d", count=4,
          atol=1e-4)
    # (the last, a 1x1 conv reading NHWC, is one GEMM: no oneDNN conv)
    assert made == [(False, True), (True, True), (True, True)]


def test_chain_stops_where_a_result_has_other_readers(monkeypatch):
    """A conv result that a residual Add reads too, and one whose epilogue reads
    another operand, are written in NCHW."""
    made = _modes(monkeypatch)
    rng = np.random.default_rng(10)
    x = rand(rng, (1, 32, 20, 20))
    consts = {"w0": rand(rng, (32, 32, 3, 3)) * 0.2, "w1": rand(rng, (32, 32, 3, 3)) * 0.2,
              "w2": rand(rng, (32, 1, 3, 3))}
    nodes = [node("Conv", ["x", "w0"], {"pads": [1, 1, 1, 1]}, outs=["c0"]),
             node("Conv", ["c0", "w1"], {"pads": [1, 1, 1, 1]}, outs=["c1"]),
             node("Add", ["c1", "c0"], outs=["s"]),
             node("Conv", ["s", "w2"], {"group": 32, "pads": [1, 1, 1, 1]})]
    check(model_of(nodes, {"x": x}, consts), {"x": x}, "kernel.conv2d", count=3,
          atol=1e-4)
    assert made == [(False, False)] * 3


def test_chain_of_an_inverted_residual_block(monkeypatch):
    """MobileNetV2's block: 1x1 expand (+ReLU) -> depthwise -> 1x1 project, + the input.
    The 1x1 convs at the chain's ends are GEMMs writing / reading NHWC; the depthwise one
    reads and writes NHWC on oneDNN."""
    made = _modes(monkeypatch)
    rng = np.random.default_rng(11)
    x = rand(rng, (1, 32, 24, 24))
    consts = {"we": rand(rng, (96, 32, 1, 1)) * 0.2, "be": rand(rng, (96,)),
              "wd": rand(rng, (96, 1, 3, 3)), "bd": rand(rng, (96,)),
              "wp": rand(rng, (32, 96, 1, 1)) * 0.1, "bp": rand(rng, (32,))}
    nodes = [node("Conv", ["x", "we", "be"], {}, outs=["e"]),
             node("Relu", ["e"], outs=["er"]),
             node("Conv", ["er", "wd", "bd"], {"group": 96, "pads": [1, 1, 1, 1]},
                  outs=["d"]),
             node("Relu", ["d"], outs=["dr"]),
             node("Conv", ["dr", "wp", "bp"], {}, outs=["p"]),
             node("Add", ["p", "x"])]
    check(model_of(nodes, {"x": x}, consts), {"x": x}, "kernel.conv2d", count=3,
          atol=1e-4)
    assert made == [(True, True)]
