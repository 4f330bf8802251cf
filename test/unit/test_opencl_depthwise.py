"""The OpenCL depthwise conv (backends/opencl/kernels/depthwise.py, `_depthwise`):
blocks of output rows x a vector of output columns, each input row's tap vectors loaded
once; the vectors at a row's edges generated apart, their taps one load moved into place
with the padding's lanes zero (`_edge_load`), or a gather where no load fits in the row;
the last vector and the last block of rows shifted back to the map's edge. Against the
numpy backend, poisoned, with and without a fused residual add and activation: strides
1-3 (phases of a strided load at the row's end), dilations, asymmetric and wide pads
(taps with no lane inside the row), maps narrower than a vector, output widths and
heights that are and are not multiples of the vector and the row block, channel
multipliers, batches, f64."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from opencl_support import compare_backends, requires_opencl  # noqa: E402
from test_kernels import model_of, node, rand  # noqa: E402
from test_opencl_conv_panels import _model  # noqa: E402

from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402

from palimpsest.backends.opencl.kernels import conv  # noqa: E402
from palimpsest.backends.opencl.kernels import window  # noqa: E402

pytestmark = requires_opencl

# (name, x shape, w shape, strides, dilations, pads); group = x's channels
CASES = [
    ("3x3 s1 wide", (1, 8, 21, 37), (8, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    ("3x3 s1 16 wide", (1, 4, 16, 16), (4, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    ("5x5 s1 20x20", (1, 6, 20, 20), (6, 1, 5, 5), (1, 1), (1, 1), (2, 2, 2, 2)),
    ("5x5 s1 7x7", (1, 5, 7, 7), (5, 1, 5, 5), (1, 1), (1, 1), (2, 2, 2, 2)),
    ("3x3 s2 even", (2, 6, 28, 28), (6, 1, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    ("3x3 s2 odd", (1, 5, 33, 35), (5, 1, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    ("3x3 s2 pads (0, 0, 1, 1)", (1, 4, 32, 32), (4, 1, 3, 3), (2, 2), (1, 1), (0, 0, 1, 1)),
    ("5x5 s2 14x14", (1, 4, 14, 14), (4, 1, 5, 5), (2, 2), (1, 1), (2, 2, 2, 2)),
    ("3x3 s2 unpadded: strided load past the row", (1, 3, 19, 20), (3, 1, 3, 3), (2, 2),
     (1, 1), (0, 0, 0, 0)),
    ("stride 3 x 2", (1, 4, 23, 40), (4, 1, 3, 3), (3, 2), (1, 1), (1, 2, 0, 1)),
    ("dilation 2 x 3", (1, 4, 19, 26), (4, 1, 3, 3), (1, 1), (2, 3), (2, 3, 2, 3)),
    ("wide pads: taps wholly in the padding", (1, 3, 5, 6), (3, 1, 3, 3), (1, 1), (1, 1),
     (3, 4, 2, 5)),
    ("one output column", (1, 4, 9, 3), (4, 1, 3, 3), (1, 1), (1, 1), (0, 0, 0, 0)),
    ("two output columns", (1, 4, 6, 2), (4, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    ("5 wide: a shifted vector of 4", (1, 3, 11, 5), (3, 1, 3, 3), (1, 1), (1, 1),
     (1, 1, 1, 1)),
    ("one output row", (1, 4, 3, 24), (4, 1, 3, 3), (1, 1), (1, 1), (0, 1, 0, 1)),
    ("channel multiplier 3", (1, 4, 12, 18), (12, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    ("1x1", (2, 5, 6, 6), (5, 1, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
    ("1-D along H", (1, 6, 30, 1), (6, 1, 3, 1), (1, 1), (1, 1), (1, 0, 1, 0)),
    ("7x7 kernel on 4x4", (1, 2, 4, 4), (2, 1, 7, 7), (1, 1), (1, 1), (3, 3, 3, 3)),
    # the whole-plane form (depthwise.py): maps of 2-16 output columns
    ("5x5 s1 14x14", (1, 6, 14, 14), (6, 1, 5, 5), (1, 1), (1, 1), (2, 2, 2, 2)),
    ("3x3 s2 28 -> 14", (1, 5, 28, 28), (5, 1, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    ("3x3 s2 32 -> 16, pads (0, 0, 1, 1)", (1, 3, 32, 32), (3, 1, 3, 3), (2, 2), (1, 1),
     (0, 0, 1, 1)),
    ("9 wide: 7 lanes dropped", (2, 4, 11, 9), (8, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    ("dilation 2, 12 wide", (1, 3, 12, 12), (3, 1, 3, 3), (1, 1), (2, 2), (2, 2, 2, 2)),
    ("5x5 s2 unpadded 17 -> 7", (1, 3, 17, 17), (3, 1, 5, 5), (2, 2), (1, 1), (0, 0, 0, 0)),
    ("3x3 s1 32 wide: two vectors, inner taps loaded", (1, 4, 9, 32), (4, 1, 3, 3), (1, 1),
     (1, 1), (1, 1, 1, 1)),
    ("3x3 s1 40 wide: three vectors, the last partial", (1, 3, 8, 40), (3, 1, 3, 3),
     (1, 1), (1, 1), (1, 1, 1, 1)),
    ("3x3 s2 64 -> 32", (1, 3, 12, 64), (3, 1, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    ("5x5 s1 20 wide, asymmetric pads", (1, 3, 9, 20), (3, 1, 5, 5), (1, 1), (1, 1),
     (1, 2, 3, 0)),
    ("dilation 2 x 3, 26 wide", (1, 2, 8, 26), (2, 1, 3, 3), (1, 1), (2, 3), (2, 3, 2, 3)),
    # blocks of rows of the plane form: edge blocks with their rows known, inner ones
    ("blocks: 3x3 s1 60 tall", (1, 3, 60, 20), (3, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    ("blocks: unpadded, the last shifted", (2, 2, 47, 30), (2, 1, 3, 3), (1, 1), (1, 1),
     (0, 0, 0, 0)),
    ("blocks: 5x5 s2 tall", (1, 3, 90, 24), (3, 1, 5, 5), (2, 2), (1, 1), (2, 2, 2, 2)),
    ("blocks: 112 wide", (1, 2, 30, 112), (2, 1, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    ("blocks: wide pads", (1, 2, 40, 18), (2, 1, 3, 3), (1, 1), (2, 2), (5, 1, 6, 1)),
]


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_depthwise_matches_numpy(case, residual):
    _, x, w, strides, dilations, pads = case
    module, feeds = _model(x, w, strides, dilations, pads, x[1] if w[0] % x[1] == 0 and
                           w[1] == 1 else 1, residual)
    _, _, stats = compare_backends(module, feeds, poison=True)
    assert stats.device_launches >= 1


@pytest.mark.parametrize("case", [CASES[0], CASES[4], CASES[11]], ids=lambda c: c[0])
def test_depthwise_f64(case):
    _, x, w, strides, dilations, pads = case
    module, feeds = _model(x, w, strides, dilations, pads, x[1], True, np.float64)
    compare_backends(module, feeds, poison=True)


def test_edge_vectors_load_once_and_move_lanes():
    """A padded 3x3 conv on a 20-wide map (16 lanes, two vectors, both at an edge): every
    tap of both is one vector load (no gather); lanes wholly in the padding are zero."""
    assert window._depthwise_lanes("float", 20) == 16
    load = window._edge_load("float", 16, -1, 1, 20, "b")
    assert load[0] == "const float16 b = vload16(0, xrow + 0);"
    assert load[1].startswith("(float16)(0.0f, b.s0, b.s1,") and load[1].endswith("b.se)")
    assert window._edge_load("float", 4, -9, 1, 20, "b") == ("", "(float4)(0.0f)")
    # a strided load that would read past the row: none fits, the caller gathers
    assert window._edge_load("float", 4, 3, 2, 10, "b") is None


# (name, x shape, pads, the added in's shape): fed, not constant, so the add stays an
# epilogue step; 14 and 80 wide (the last vector of a row shifted back, and not)
BROADCAST_INS = [
    ("per channel, 80 wide", (1, 6, 12, 80), (1, 1, 1, 1), (1, 6, 1, 1)),
    ("per channel, shifted vector", (1, 5, 9, 14), (1, 1, 1, 1), (1, 5, 1, 1)),
    ("per channel, 3-D", (2, 4, 7, 14), (1, 1, 1, 1), (4, 1, 1)),
    ("per row", (1, 4, 10, 14), (1, 1, 1, 1), (1, 1, 10, 1)),
    ("per column", (1, 4, 10, 14), (1, 1, 1, 1), (14,)),
    ("per column and channel", (1, 4, 9, 20), (0, 1, 0, 1), (1, 4, 1, 20)),
]


@pytest.mark.parametrize("case", BROADCAST_INS, ids=[c[0] for c in BROADCAST_INS])
def test_depthwise_broadcast_epilogue_in(case):
    """An epilogue in broadcast along the width loads one scalar per vector, an in of
    the width one vload (`FusedEpilogue.apply_lanes`' in_row: the depthwise vector lies in
    one output row), not a gather of per-lane broadcast indices (ppocr_v6_tiny_rec's
    per-channel adds: 3-4x slower that way)."""
    _, x_shape, pads, s_shape = case
    rng = np.random.default_rng(1)
    c = x_shape[1]
    feeds = {"x": rand(rng, x_shape, np.float32), "s": rand(rng, s_shape, np.float32)}
    constants = {"w": rand(rng, (c, 1, 3, 3), np.float32)}
    nodes = [node("Conv", ["x", "w"], {"pads": list(pads), "group": c}, outs=("c",)),
             node("Add", ["c", "s"], outs=("a",)), node("HardSwish", ["a"])]
    module = import_onnx(model_of(nodes, feeds, constants))
    _, _, stats = compare_backends(module, feeds, poison=True)
    assert stats.device_launches == 1


@pytest.mark.parametrize("wo, ho, taken", [(14, 8, True), (16, 8, True), (2, 8, True),
                                           (17, 8, True), (64, 8, True), (64, 30, True),
                                           (112, 12, True), (130, 8, False), (1, 8, False)])
def test_plane_form_taken(wo, ho, taken, monkeypatch):
    """Maps of 2-128 output columns (float) take the whole-plane form, one work-item per
    plane or per block of rows; wider ones (and one column) the blocks of rows x a
    vector."""
    planes = []
    monkeypatch.setattr(conv, "depthwise_planes",
                        lambda *args: planes.append(args) or conv_planes(*args))
    x = (1, 3, ho + 2, wo + 2)
    module, feeds = _model(x, (3, 1, 3, 3), (1, 1), (1, 1), (0, 0, 0, 0), 3, False)
    compare_backends(module, feeds, poison=True)
    assert bool(planes) == taken


conv_planes = conv.depthwise_planes


SWISH_CASES = [c for c in CASES if c[0] in (
    "5x5 s1 14x14", "9 wide: 7 lanes dropped", "3x3 s1 40 wide: three vectors, the last partial",
    "blocks: unpadded, the last shifted", "blocks: wide pads", "blocks: 5x5 s2 tall")]


@pytest.mark.parametrize("case", SWISH_CASES, ids=[c[0] for c in SWISH_CASES])
def test_plane_form_swish_applied_after_taps(case):
    """An epilogue calling a math function (SiLU) and reading no in is applied to the
    plane's rows read back after the taps (blocks with rows skipped, partial vectors)."""
    _, x_shape, w_shape, strides, dilations, pads = case
    rng = np.random.default_rng(2)
    feeds = {"x": rand(rng, x_shape, np.float32)}
    constants = {"w": rand(rng, w_shape, np.float32), "b": rand(rng, w_shape[:1], np.float32)}
    attrs = {"strides": list(strides), "dilations": list(dilations), "pads": list(pads),
             "group": x_shape[1]}
    nodes = [node("Conv", ["x", "w", "b"], attrs, outs=("c",)),
             node("Sigmoid", ["c"], outs=("s",)), node("Mul", ["c", "s"])]
    module = import_onnx(model_of(nodes, feeds, constants))
    _, _, stats = compare_backends(module, feeds, poison=True)
    assert stats.device_launches == 1
