"""Fast paths of the numpy kernels that cut per-run overhead on small models, each
against the graph level (reference kernels) with poisoning on (test_kernels.check)."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")

from test_kernels import check, model_of, node, rand  # noqa: E402  (test/unit on sys.path)


# pads (begins then ends, per axis of a 3x4x5 x) whose borders are each one slab copy,
# at the limits (a reflect pad of size - 1, its end slice stopping before index 0; a
# wrap pad of size), and one reaching past the interior (cell by cell)
@pytest.mark.parametrize("mode, pads", [
    ("reflect", [0, 0, 4, 0, 3, 4]), ("reflect", [2, 3, 0, 2, 0, 1]),
    ("edge", [3, 0, 6, 2, 5, 1]), ("wrap", [3, 4, 5, 3, 4, 5]),
    ("edge", [0, -1, 2, 1, 0, -2])])
def test_pad_border_slabs(mode, pads):
    rng = np.random.default_rng(5)
    x = rand(rng, (3, 4, 5))
    model = model_of([node("Pad", ["x", "pads"], {"mode": mode})], {"x": x},
                     {"pads": np.array(pads, np.int64)}, opset=18)
    check(model, {"x": x}, "kernel.pad", roles=[])


@pytest.mark.parametrize("index", [[-3, -1], [-4, 0], [0, 2], [3, 0]])
def test_scatter_nd_index_range(index):
    """ScatterND's fast path leaves the index check to numpy's assignment (ONNX's range
    is numpy's, [-dim, dim)): an index outside it is still the op's error; a negative
    one inside scatters as the reference does."""
    from palimpsest.backends.numpy.session import Session
    from palimpsest.dialects.graph.from_onnx import import_onnx
    from palimpsest.ir.diagnostics import DiagnosticError

    data = np.arange(6, dtype=np.float32).reshape(3, 2)
    model = model_of([node("ScatterND", ["x", "i", "u"])], {"x": data},
                     {"i": np.array([index], np.int64), "u": np.full(1, 9, np.float32)})
    session = Session(import_onnx(model), poison=True)
    if not all(-d <= i < d for i, d in zip(index, data.shape)):
        with pytest.raises(DiagnosticError, match="out of"):
            session.run({"x": data})
        return
    want = data.copy()
    want[tuple(index)] = 9
    np.testing.assert_array_equal(session.run({"x": data})["y"], want)


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("initial", [False, True])
@pytest.mark.parametrize("outputs", [("Y", "Y_h"), ("Y",), ("", "Y_h")])
def test_gru_both_directions_in_one_loop(monkeypatch, batch, initial, outputs):
    """A bidirectional GRU with linear_before_reset runs both directions in one loop
    (kernel_ops_recurrent._paired_gru: an odd sequence, so a last half-chunk of one
    pair) and matches onnxruntime, poisoning on."""
    pytest.importorskip("onnxruntime")
    from palimpsest.backends.numpy import kernel_ops_recurrent as rec
    from test_ops_recurrent import _check, _model

    calls = []
    paired = rec._paired_gru
    monkeypatch.setattr(rec, "_paired_gru", lambda *a: calls.append(1) or paired(*a))
    _check(*_model("GRU", "bidirectional", initial=initial, batch=batch, outputs=outputs,
                   linear_before_reset=1))
    assert calls
