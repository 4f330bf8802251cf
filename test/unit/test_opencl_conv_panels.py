"""The OpenCL conv2d's two GEMM forms (backends/opencl/kernels/conv.py), each case
run in both where the conv has stride 1 (IM2COL_COST set to force one): the explicit
im2col, packed in panels of the GEMM's column block with the last columns in a narrower
panel and two GEMMs reading them as contiguous streams, and the implicit one (stride
1), whose GEMM reads the input rows in place (a padded conv from the `padded`
workspace, filled per image; an unpadded one straight from the input, every image in
one launch). Against the numpy backend, poisoned: bands with and without a narrow panel
and of only a narrow one, vectors of output columns that cross a panel (widths that are
not a multiple of the im2col vector), groups, strides and dilations, batch > 1, f64, a
fused residual add and activation (the narrow panel's GEMM writes its columns of Y at an
offset)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from opencl_support import compare_backends, record_calls, requires_opencl  # noqa: E402
from test_kernels import model_of, node, rand  # noqa: E402

from palimpsest.backends.opencl.kernels import conv  # noqa: E402
from palimpsest.dialects import kernel_nn  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402

pytestmark = requires_opencl

# (name, x shape, w shape, strides, dilations, pads, group)
CASES = [
    ("13x13: a partial last panel, two bands", (1, 5, 13, 13), (16, 5, 3, 3), (1, 1),
     (1, 1), (1, 1, 1, 1), 1),
    ("width 52: vectors cross panels", (1, 4, 20, 52), (9, 4, 3, 3), (1, 1), (1, 1),
     (1, 1, 1, 1), 1),
    ("groups, batch 2", (2, 6, 9, 11), (8, 3, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 2),
    ("stride 2, dilation 2", (1, 3, 31, 37), (7, 3, 3, 3), (2, 2), (2, 2), (2, 1, 2, 3), 1),
    ("one output column", (1, 3, 9, 3), (5, 3, 3, 3), (1, 1), (1, 1), (0, 0, 0, 0), 1),
    ("whole panels only", (1, 3, 8, 12), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    ("no pads, groups, batch 2", (2, 4, 10, 12), (6, 2, 3, 3), (1, 1), (1, 1),
     (0, 0, 0, 0), 2),
    ("stride 1, dilation 2", (1, 3, 15, 17), (5, 3, 3, 3), (1, 1), (2, 2), (2, 2, 2, 2), 1),
    ("1x1 padded", (1, 4, 6, 7), (5, 4, 1, 1), (1, 1), (1, 1), (1, 0, 0, 1), 1),
    # one column wide: a conv along H run as one along W of a one-row image
    ("1-D along H", (2, 6, 40, 1), (8, 6, 5, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1),
    ("1-D along H, padded, dilated", (1, 6, 33, 1), (8, 6, 3, 1), (1, 1), (2, 1),
     (3, 0, 1, 0), 1),
    ("1-D along H, strided", (1, 6, 41, 1), (8, 6, 5, 1), (3, 1), (1, 1), (2, 0, 2, 0), 1),
    ("1-D along H, depthwise", (1, 6, 30, 1), (6, 1, 3, 1), (1, 1), (1, 1), (1, 0, 1, 0), 6),
    ("1x1 stride 2", (2, 8, 15, 21), (24, 8, 1, 1), (2, 2), (1, 1), (0, 0, 0, 0), 1),
    # strided along W and padded: the padded rows split by column phase
    ("stride 2, padded, batch 2", (2, 3, 20, 23), (8, 3, 3, 3), (2, 2), (1, 1),
     (1, 1, 1, 1), 1),
    ("stride 3 x 2, uneven phases, dilation 2", (1, 4, 17, 30), (6, 4, 3, 3), (2, 3),
     (1, 2), (1, 2, 0, 1), 1),
    ("5x5 stride 2, pads (1, 1, 2, 2)", (1, 3, 32, 32), (24, 3, 5, 5), (2, 2), (1, 1),
     (1, 1, 2, 2), 1),
    ("stride 4, groups, 16-lane phases", (1, 4, 9, 70), (6, 2, 2, 3), (1, 4), (1, 1),
     (0, 2, 0, 1), 2),
    ("stride 2 along H only, unpadded (in place)", (1, 4, 17, 12), (6, 4, 3, 3), (2, 1),
     (1, 1), (0, 0, 0, 0), 1),
    ("stride 3, a phase wholly in the padding", (1, 2, 6, 2), (4, 2, 3, 3), (1, 3), (1, 1),
     (1, 3, 1, 3), 1),
    ("wide rows, pads 2", (1, 3, 5, 45), (4, 3, 5, 5), (1, 1), (1, 1), (2, 2, 2, 2), 1),
]


def _model(x_shape, w_shape, strides, dilations, pads, group, residual: bool,
           dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    x = rand(rng, x_shape, dtype)
    constants = {"w": rand(rng, w_shape, dtype), "b": rand(rng, (w_shape[0],), dtype)}
    attrs = {"strides": list(strides), "dilations": list(dilations), "pads": list(pads),
             "group": group}
    nodes = [node("Conv", ["x", "w", "b"], attrs, outs=("c",))]
    feeds = {"x": x}
    if residual:
        n, _, h, w = x_shape
        out = [n, w_shape[0]] + [(size + pads[i] + pads[i + 2] - dilations[i] *
                                  (w_shape[2 + i] - 1) - 1) // strides[i] + 1
                                 for i, size in enumerate((h, w))]
        feeds["r"] = rand(rng, tuple(out), dtype)
        nodes += [node("Add", ["c", "r"], outs=("s",)), node("Relu", ["s"], outs=("y",))]
    else:
        nodes += [node("Relu", ["c"], outs=("y",))]
    return import_onnx(model_of(nodes, feeds, constants)), feeds


FORMS = {"im2col": -1e9, "implicit": 1e9}


def _form(monkeypatch, form: str) -> list:
    """Force `form` (the flat form, test_opencl_conv_flat.py's, left out); the list
    records each call of the implicit form's generator."""
    monkeypatch.setattr(conv, "IM2COL_COST", FORMS[form])
    monkeypatch.setattr(conv, "_planes", lambda call, g: None)
    return record_calls(monkeypatch, conv, "_implicit")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_both_forms_match_numpy(monkeypatch, case, residual, form):
    calls = _form(monkeypatch, form)
    module, feeds = _model(*case[1:], residual)
    _, _, stats = compare_backends(module, feeds, poison=True)
    assert stats.device_launches >= 1
    depthwise = case[2][1] == 1 and case[6] > 1
    # the implicit form reads a padded conv from its `padded` workspace (split by column
    # phase when strided along W), an unpadded one in place (stride 1 along W only)
    implicit = any(case[5]) or case[3][1] == 1
    assert bool(calls) == (form == "implicit" and implicit and not depthwise)


@pytest.mark.parametrize("form", FORMS)
def test_both_forms_f64(monkeypatch, form):
    _form(monkeypatch, form)
    module, feeds = _model(*CASES[0][1:], True, np.float64)
    compare_backends(module, feeds, poison=True)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("elements", [1, 2700])
def test_bands_of_few_rows(monkeypatch, elements, form):
    """A workspace of one output row (13 columns: a panel of 8 and one of 5) or of 60
    columns (bands of 4 output rows: a panel of 32 and one of 20; the last band of one
    row, 13 columns, only a narrow panel)."""
    monkeypatch.setattr(kernel_nn.Conv2dOp, "IM2COL_BAND", elements)
    module, feeds = _model(*CASES[0][1:], True)
    compare_backends(module, feeds, poison=True)


@pytest.mark.parametrize("form", FORMS)
def test_one_column_images_with_a_workspace_narrower_than_their_height(monkeypatch, form):
    """An im2col workspace of 12 columns, less than the 36 output rows: the 1-D conv is
    not turned into one along W (its im2col rows would not fit)."""
    _form(monkeypatch, form)
    monkeypatch.setattr(kernel_nn.Conv2dOp, "IM2COL_BAND", 12 * 30)
    module, feeds = _model((1, 6, 40, 1), (8, 6, 5, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1, True)
    compare_backends(module, feeds, poison=True)
