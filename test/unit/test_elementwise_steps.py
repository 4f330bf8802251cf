"""The numpy backend's elementwise steps on special values (kernel_ops_steps.py):
erf's float32 tanh form against float64 erf (NaN, +-inf, +-0, subnormals, huge and
saturating magnitudes, chunk boundaries, in place, an f16 out), and chains of erf and
GELU through the kernel level with poisoning on, against the graph level and
onnxruntime."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_kernels import check, find_function, model_of, node, run_with_stats  # noqa: E402

import palimpsest.backends.numpy.kernel_ops  # noqa: E402,F401  (registration order)
from palimpsest.backends.numpy import kernel_ops_steps as ew  # noqa: E402

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-38, 1e-20, -1e-7,
           1e-3, 0.5, -0.84, 1.18, 2.0, -3.0, 3.8, 3.9, 4.0, -4.0, 4.1, 4.5, -4.6, 5.0,
           10.0, -10.0, 1e4, -1e19, 3e38, -3.4e38]


def erf64(x):
    from scipy.special import erf

    return erf(np.asarray(x, np.float64))


def test_erf_f32_special_values_and_accuracy():
    x = np.concatenate([np.array(SPECIAL, np.float32),
                        np.linspace(-6, 6, 200_001, dtype=np.float32),
                        np.float32(10) ** np.linspace(-37, 0.6, 20_001, dtype=np.float32)])
    out = np.full_like(x, np.nan)
    ew._erf_f32(x, out)
    want = erf64(x)
    nan = np.isnan(x)
    assert np.isnan(out[nan]).all() and not np.isnan(out[~nan]).any()
    assert np.abs(out[~nan] - want[~nan]).max() < 2e-7
    normal = ~nan & (np.abs(x) > 1.2e-38) & (np.abs(x) < 0.5)
    assert (np.abs(out[normal] - want[normal]) / np.abs(want[normal])).max() < 4e-7
    assert np.nanmax(np.abs(out)) <= 1                    # never past +-1
    big = np.abs(x) >= 4.1
    np.testing.assert_array_equal(out[big], np.sign(x[big]))   # saturated exactly
    zero = x == 0
    np.testing.assert_array_equal(np.signbit(out[zero]), np.signbit(x[zero]))
    # monotone (to an ulp of float32 rounding) on a fine grid
    grid = np.linspace(-5, 5, 100_001, dtype=np.float32)
    values = np.empty_like(grid)
    ew._erf_f32(grid, values)
    assert np.diff(values).min() >= -1.2e-7


def test_erf_f32_chunks_in_place_and_f16(monkeypatch):
    monkeypatch.setattr(ew, "_ERF_CHUNK", 7)   # chunks of 7, a short last one
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(53) * 3).astype(np.float32)
    x[::5] = np.array(SPECIAL, np.float32)[:11]
    want = np.empty_like(x)
    monkeypatch.setattr(ew, "_ERF_CHUNK", 1 << 16)
    ew._erf_f32(x, want)                         # one chunk
    monkeypatch.setattr(ew, "_ERF_CHUNK", 7)
    got = x.copy()
    ew._erf_f32(got, got)                        # in place, chunked
    np.testing.assert_array_equal(got, want)
    h = x.astype(np.float16)
    out = np.full_like(h, np.nan)
    ew._erf_f32(h, out)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float64), erf64(h), atol=1e-3, equal_nan=True)


def _gelu_and_erf(x):
    """y = x * 0.5 * (1 + erf(x / sqrt(2))) as ONNX exports it (the chains PP-OCR runs),
    and z = a lone Erf of x."""
    consts = {"s": np.array(1.4142135381698608, np.float32), "one": np.array(1, np.float32),
              "half": np.array(0.5, np.float32)}
    nodes = [node("Div", ["x", "s"], outs=["d"]), node("Erf", ["d"], outs=["e"]),
             node("Add", ["e", "one"], outs=["a"]), node("Mul", ["x", "a"], outs=["m"]),
             node("Mul", ["m", "half"], outs=["y"]), node("Erf", ["x"], outs=["z"])]
    return model_of(nodes, {"x": x}, consts, outputs=("y", "z"))


@pytest.mark.parametrize("shape", [(4, 3, 5), (1, 64, 40, 41)])
def test_gelu_and_erf_chains_match_graph_level(shape):
    """x * 0.5 * (1 + erf(x / sqrt(2))) as ONNX exports it (the chains PP-OCR runs), and
    a lone Erf, with special values, poisoned buffers. The chain is one gelu step
    (lower-to-kernels' ACTIVATION_PATTERNS), which halves before it multiplies by x:
    where x * 2 overflows (finite |x| > 1.7e38) the ops give inf and the step GELU's
    value, x (or -0): checked apart."""
    rng = np.random.default_rng(9)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    flat = x.reshape(-1)
    flat[:len(SPECIAL)] = np.array(SPECIAL, np.float32)
    flat[-5:] = [np.nan, 4.0, -4.0, -0.0, 8.0]
    huge = np.isfinite(flat) & (np.abs(flat) > 1.7e38)
    assert huge.any()
    model = _gelu_and_erf(x)
    module, _ = check(model, {"x": np.where(huge.reshape(x.shape), np.float32(1e38), x)},
                      "kernel.elementwise", rtol=1e-5, atol=1e-6)
    assert any(op.config().get("steps") == ["graph.gelu"]
               for op in module.walk() if op.name == "kernel.elementwise")
    got = run_with_stats(find_function(module, None), {"x": x}, poison=True)[0]["y"]
    big = flat[huge]
    np.testing.assert_array_equal(got.reshape(-1)[huge], np.where(big > 0, big, -0.0))


def test_gelu_and_erf_match_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    from palimpsest.backends.numpy.session import Session
    from palimpsest.dialects.graph.from_onnx import import_onnx

    rng = np.random.default_rng(11)
    x = (rng.standard_normal((1, 96, 40, 40)) * 2.5).astype(np.float32)
    flat = x.reshape(-1)
    finite = [v for v in SPECIAL if np.isfinite(v) and abs(v) < 1e30]
    flat[:len(finite)] = np.array(finite, np.float32)
    model = _gelu_and_erf(x)
    for output in model.graph.output:
        output.type.tensor_type.elem_type = 1   # float
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})
    session = Session(import_onnx(model), poison=True)
    for _ in range(3):   # recorded, then replayed calls
        got = session.run({"x": x})
        # (GELU of this many elements runs on oneDNN: within 1.1e-6 of float64's GELU
        # where it is near 0 from below, an ulp of 8 in float32)
        np.testing.assert_allclose(got["y"], want[0], rtol=1e-5, atol=1.5e-6)
        np.testing.assert_allclose(got["z"], want[1], rtol=1e-5, atol=5e-7)
