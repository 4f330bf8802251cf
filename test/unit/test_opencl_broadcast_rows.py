"""The OpenCL comparisons, logical ops and Expand (kernels/elementwise.py,
`_broadcast_launch`) in their 2-D form, one work-item per element of the out's rows
(rows of ROW_MIN elements or more, rounded up to the work-group), against the numpy
backend, poisoned: ins broadcast along the rows, across them, both (a one-hot's column
against a row), from scalars, rank 1 to 4, rows shorter than the work-group and not a
multiple of it; and the per-element form for short rows. Also --dump-kernels with a
generic op's launches."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from opencl_support import compare_backends, requires_opencl  # noqa: E402
from test_kernels import model_of, node  # noqa: E402

from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402

pytestmark = requires_opencl

SHAPES = [
    ("one-hot: column against row", (2048, 1), (257,)),
    ("same shapes, rank 1", (300,), (300,)),
    ("rows of 9, scalar", (5, 9), ()),
    ("across rows", (3, 1, 40), (3, 7, 40)),
    ("rank 4, mixed", (2, 1, 5, 33), (1, 4, 1, 33)),
    ("rows of 6: per element", (4, 6), (4, 1)),
    ("rows of 64", (7, 64), (1, 64)),
]


@pytest.mark.parametrize("op", ["Equal", "Less", "And"])
@pytest.mark.parametrize("name, a, b", SHAPES, ids=[s[0] for s in SHAPES])
def test_comparisons_match_numpy(op, name, a, b):
    rng = np.random.default_rng(3)
    if op == "And":
        feeds = {"a": rng.integers(0, 2, a).astype(bool),
                 "b": rng.integers(0, 2, b).astype(bool)}
    else:
        feeds = {"a": rng.integers(0, 5, a).astype(np.int32),
                 "b": rng.integers(0, 5, b).astype(np.int32)}
    model = model_of([node(op, ["a", "b"])], feeds)
    _, _, stats = compare_backends(import_onnx(model), feeds, poison=True)
    assert stats.device_launches >= 1


@pytest.mark.parametrize("name, a, b", SHAPES, ids=[s[0] for s in SHAPES])
def test_expand_matches_numpy(name, a, b):
    x = np.random.default_rng(4).standard_normal(a).astype(np.float32)
    shape = np.array(np.broadcast_shapes(a, b), np.int64)
    model = model_of([node("Expand", ["x", "shape"])], {"x": x}, {"shape": shape})
    compare_backends(import_onnx(model), {"x": x}, poison=True)


def test_dump_kernels_writes_generic_ops_programs(tmp_path):
    """A generic op's launches (a comparison's) are kept under a longer key than a kernel
    op's; --dump-kernels (executor.dump_kernels) writes both."""
    from palimpsest.backends.numpy.session import Session
    from palimpsest.backends.opencl.executor import dump_kernels

    rng = np.random.default_rng(5)
    feeds = {"a": rng.integers(0, 5, (2048, 1)).astype(np.int32),
             "b": rng.integers(0, 5, (257,)).astype(np.int32)}
    model = model_of([node("Equal", ["a", "b"], outs=("e",)), node("Not", ["e"])], feeds)
    session = Session(import_onnx(model), backend="opencl")
    session.run(feeds)
    assert dump_kernels([session.last_plan.executor], str(tmp_path)) >= 1
    assert any("compare" in path.name for path in tmp_path.iterdir())
