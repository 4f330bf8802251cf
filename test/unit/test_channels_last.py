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
