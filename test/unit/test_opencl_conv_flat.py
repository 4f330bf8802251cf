"""The OpenCL conv2d's flat form (backends/opencl/kernels/conv.py, `_flat`): the GEMM
runs over the whole image as one flat run of columns, output rows `wpp` apart, and its
stores drop the columns between them (one vector store inside a row, lane by lane
across two rows, an epilogue's ins gathered at each lane's element). Forced (FLAT_STORE
set very low) on test_opencl_conv_panels.py's cases and some of its own, against the
numpy backend, poisoned: padded and unpadded (read in place, every image in one launch),
strided (the padded image laid out as phase planes), dilated, groups, batch 2, maps
narrower than a vector (a vector spans several output rows), f64, a fused residual add;
and where the phase planes do not fit the `padded` workspace the conv keeps another
form. The cost model takes the flat form for the 3x3 convs on 10-40 wide maps."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from opencl_support import compare_backends, record_calls, requires_opencl  # noqa: E402
from test_opencl_conv_panels import CASES, _model  # noqa: E402

from palimpsest.backends.opencl.kernels import conv  # noqa: E402

pytestmark = requires_opencl

# (name, x shape, w shape, strides, dilations, pads, group)
FLAT_CASES = CASES + [
    ("10 wide: vectors span two rows", (1, 8, 10, 10), (12, 8, 3, 3), (1, 1), (1, 1),
     (1, 1, 1, 1), 1),
    ("4 wide: vectors span four rows", (1, 5, 9, 4), (6, 5, 3, 3), (1, 1), (1, 1),
     (1, 1, 1, 1), 1),
    ("stride 2, even sizes (phase planes)", (2, 6, 20, 20), (10, 6, 3, 3), (2, 2), (1, 1),
     (1, 1, 1, 1), 1),
    ("stride 2, groups, dilation 2", (1, 8, 24, 18), (6, 4, 3, 3), (2, 2), (2, 2),
     (2, 2, 2, 2), 2),
    ("unpadded 3x3, batch 2", (2, 5, 12, 19), (7, 5, 3, 3), (1, 1), (1, 1), (0, 0, 0, 0), 1),
]


def _forced(monkeypatch) -> list:
    """Make the flat form the cheapest wherever it applies; the list records its calls."""
    monkeypatch.setattr(conv, "FLAT_STORE", -1e9)
    return record_calls(monkeypatch, conv, "_flat")


def _fits(x_shape, w_shape, strides, dilations, pads) -> bool:
    """Whether the flat form applies: stride 1 unpadded, or padded with phase planes
    that fit the `padded` workspace, and at least a vector of columns."""
    out = [(size + pads[i] + pads[i + 2] - dilations[i] * (w_shape[2 + i] - 1) - 1) //
           strides[i] + 1 for i, size in enumerate(x_shape[2:])]
    padded = [size + pads[i] + pads[i + 2] for i, size in enumerate(x_shape[2:])]
    planes = [out[i] + (w_shape[2 + i] - 1) * dilations[i] // strides[i] for i in range(2)]
    if any(pads):
        fits = strides[0] * strides[1] * planes[0] * planes[1] <= padded[0] * padded[1]
    else:
        fits = tuple(strides) == (1, 1)
        planes = list(x_shape[2:])
    return fits and (out[0] - 1) * planes[1] + out[1] >= 16


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("case", FLAT_CASES, ids=[c[0] for c in FLAT_CASES])
def test_flat_matches_numpy(monkeypatch, case, residual):
    calls = _forced(monkeypatch)
    x_shape, w_shape = case[1], case[2]
    module, feeds = _model(*case[1:], residual)
    compare_backends(module, feeds, poison=True)
    depthwise = w_shape[1] == 1 and case[6] > 1
    one_by_one = w_shape[2:] == (1, 1) and tuple(case[3]) == (1, 1) and not any(case[5])
    # the 1-D convs along H run as convs along W of one-row images (`_geometry`)
    if x_shape[3] == 1 and w_shape[3] == 1:
        x_shape, w_shape = x_shape[:2] + x_shape[2:][::-1], w_shape[:2] + w_shape[2:][::-1]
        case = case[:3] + (case[3][::-1], case[4][::-1],
                           (case[5][1], case[5][0], case[5][3], case[5][2])) + case[6:]
    expected = not depthwise and not one_by_one and _fits(x_shape, w_shape, *case[3:6])
    assert bool(calls) == expected


def test_flat_f64(monkeypatch):
    calls = _forced(monkeypatch)
    module, feeds = _model(*FLAT_CASES[-3][1:], True, np.float64)
    compare_backends(module, feeds, poison=True)
    assert calls


def test_odd_sizes_keep_another_form(monkeypatch):
    """Stride 2 on a 15 x 15 image padded by 1: its phase planes (8 x 8 each) would take
    4 x 64 elements of a channel's 17 x 17."""
    calls = _forced(monkeypatch)
    module, feeds = _model((1, 4, 15, 15), (6, 4, 3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1,
                           True)
    compare_backends(module, feeds, poison=True)
    assert not calls


def test_cost_model_takes_flat_on_small_maps():
    g = dict(ho=20, wo=20, h=20, wd=20, hp=22, wp=22, kh=3, kw=3, sh=1, sw=1, dh=1, dw=1)
    assert conv._form("float", g, 64, 576, 20, (22, 22), True) == "flat"
    # a 160-wide first layer (3 channels, stride 2): blocks of one output row lose nothing
    g = dict(ho=160, wo=160, h=320, wd=320, hp=322, wp=322, kh=3, kw=3, sh=2, sw=2, dh=1,
             dw=1)
    assert conv._form("float", g, 16, 27, 6, conv._flat_planes(g), True) == "implicit"
