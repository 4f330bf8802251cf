"""kernel.conv2d's im2col workspace holds at most IM2COL_BAND elements (one output row's
columns at least): the rule (dialects/kernel_nn.py), and both backends filling and
multiplying it a band of output rows at a time, against the graph level's reference with
poisoning (numpy) and against the numpy backend (OpenCL). The band is made small here
(monkeypatched) so that small convs take several bands, a last short one included."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from opencl_support import compare_backends, requires_opencl  # noqa: E402
from test_kernels import check, kernel_ops, lower, model_of, node, rand  # noqa: E402

from palimpsest.dialects import kernel_nn  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402

# (C, M, H x W, kernel, strides, dilations, pads, group, batch)
CASES = [
    (3, 8, (37, 29), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1, 2),    # stride 2: im2col
    (4, 6, (31, 27), (3, 3), (2, 1), (1, 2), (1, 2, 0, 2), 2, 1),    # grouped, dilated
    (2, 5, (40, 33), (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1, 1),    # stride phases
    (6, 6, (12, 10), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 3, 2),    # stride 1, grouped
]


def _model(seed, c, m, hw, kernel, strides, dilations, pads, group, batch):
    rng = np.random.default_rng(seed)
    x = rand(rng, (batch, c) + hw)
    constants = {"w": rand(rng, (m, c // group) + kernel), "b": rand(rng, (m,))}
    attrs = {"strides": list(strides), "dilations": list(dilations), "pads": list(pads),
             "group": group}
    return model_of([node("Conv", ["x", "w", "b"], attrs),
                     node("Relu", ["y"], outs=("z",))], {"x": x}, constants,
                    outputs=("z",)), {"x": x}


def _band(monkeypatch, elements: int) -> None:
    monkeypatch.setattr(kernel_nn.Conv2dOp, "IM2COL_BAND", elements)


def _im2col_shape(module) -> tuple:
    (op,) = kernel_ops(module, "kernel.conv2d")
    roles = type(op).workspace_roles([v.type for v in op.ins], op.config())
    return tuple(op.workspaces[roles.index("im2col")].type.shape)


def test_rule_whole_matrix_when_small_else_bands_of_rows(monkeypatch):
    model, _ = _model(0, *CASES[0])
    # whole: 27 x (19 * 15) = 7,695 elements
    assert _im2col_shape(lower(import_onnx(model))) == (27, 19 * 15)
    _band(monkeypatch, 27 * 15 * 4 + 5)          # four output rows and a bit
    assert _im2col_shape(lower(import_onnx(model))) == (27, 4 * 15)
    _band(monkeypatch, 10)                       # less than a row: one row
    assert _im2col_shape(lower(import_onnx(model))) == (27, 15)


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("elements", [1, 1000])
def test_numpy_bands_match_the_reference(monkeypatch, case, elements):
    _band(monkeypatch, elements)
    model, feeds = _model(case, *CASES[case])
    check(model, feeds, "kernel.conv2d", atol=1e-5)


@requires_opencl
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("elements", [1, 1000])
def test_opencl_bands_match_numpy(monkeypatch, case, elements):
    _band(monkeypatch, elements)
    model, feeds = _model(case, *CASES[case])
    compare_backends(import_onnx(model), feeds, poison=True)
