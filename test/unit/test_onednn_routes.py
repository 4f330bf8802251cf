"""The numpy backend's float routes on oneDNN (backends/onednn.py's `bound_sgemm`,
backends/onednn_primitives.py's elementwise functions), against numpy on the same
operands: the GEMM on every operand layout BLAS reads as it lies (transposed, strided
rows, 1-row and 1-column, batches with broadcast), the layouts and sizes it must leave
to numpy (overlap, other strides, float64, small products); GELU of both approximations
taken on oneDNN where finite and moderate, the others (NaN, infinities, |x| near
float32's largest) on numpy's passes; sigmoid, swish and hard-swish. Skipped where
oneDNN is not installed."""

from __future__ import annotations

import math

import pytest

np = pytest.importorskip("numpy")

from palimpsest.backends import onednn, onednn_primitives  # noqa: E402
from palimpsest.backends.numpy import kernel_ops  # noqa: E402  (registers the steps)
from palimpsest.backends.numpy import kernel_ops_steps as steps  # noqa: E402

pytestmark = pytest.mark.skipif(not onednn_primitives.available(),
                                reason="oneDNN (onednn-cpu-gomp) not installed")


@pytest.fixture
def small_products(monkeypatch):
    """Every product large enough for oneDNN (the layouts are what is tested)."""
    monkeypatch.setattr(onednn, "SGEMM_FROM", 1)
    monkeypatch.setattr(onednn, "SGEMM_ITEM_FROM", 1)
    monkeypatch.setattr(onednn, "SGEMM_EDGE", 1)


def _operands(rng):
    big = rng.standard_normal((100, 200), dtype=np.float32)
    return {
        "plain": (rng.standard_normal((64, 96), dtype=np.float32),
                  rng.standard_normal((96, 80), dtype=np.float32)),
        "transposed": (rng.standard_normal((96, 64), dtype=np.float32).T,
                       rng.standard_normal((80, 96), dtype=np.float32).T),
        "strided rows": (big[:64, 5:101], big[3:99, 50:130]),
        "one row": (rng.standard_normal((1, 96), dtype=np.float32),
                    rng.standard_normal((96, 80), dtype=np.float32)),
        "one column": (rng.standard_normal((64, 96), dtype=np.float32),
                       rng.standard_normal((96, 1), dtype=np.float32)),
        "batch": (rng.standard_normal((3, 64, 96), dtype=np.float32),
                  rng.standard_normal((3, 96, 80), dtype=np.float32)),
        "broadcast": (rng.standard_normal((2, 1, 64, 96), dtype=np.float32),
                      rng.standard_normal((1, 3, 96, 80), dtype=np.float32)),
        "weights shared": (rng.standard_normal((64, 96), dtype=np.float32),
                           rng.standard_normal((4, 96, 80), dtype=np.float32)),
    }


@pytest.mark.parametrize("layout", ["plain", "transposed", "strided rows", "one row",
                                    "one column", "batch", "broadcast", "weights shared"])
def test_sgemm_layouts(small_products, layout):
    a, b = _operands(np.random.default_rng(1))[layout]
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    canvas = np.full((2,) + want.shape, np.nan, np.float32)
    out = canvas[1]
    call = onednn.bound_sgemm(a, b, out)
    assert call is not None
    call()
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
    assert np.isnan(canvas[0]).all()   # nothing written outside the out
    call()   # again on the same operands: the same
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)


def test_sgemm_leaves_what_it_cannot_take(small_products):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((64, 96), dtype=np.float32)
    b = rng.standard_normal((96, 64), dtype=np.float32)
    assert onednn.bound_sgemm(a, b, a[:, :64]) is None            # out overlaps A
    assert onednn.bound_sgemm(a[:, ::2], b[:48], np.empty((64, 64), np.float32)) is None
    assert onednn.bound_sgemm(a.astype(np.float64), b.astype(np.float64),
                              np.empty((64, 64))) is None
    assert onednn.bound_sgemm(a, b, np.empty((64, 64), np.float32).T) is None


def test_sgemm_sizes():
    """Small products, thin ones and small batched ones stay on numpy's BLAS."""
    rng = np.random.default_rng(3)

    def bound(m, k, n, batch=()):
        a = rng.standard_normal(batch + (m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        return onednn.bound_sgemm(a, b, np.empty(batch + (m, n), np.float32)) is not None

    assert bound(128, 128, 128)
    assert not bound(32, 32, 256)           # under SGEMM_FROM
    assert not bound(4, 4096, 4096)         # 4 rows
    assert not bound(257, 512, 8)           # 8 columns
    assert not bound(32, 144, 160, (12,))   # a batch of small ones
    assert bound(64, 256, 128, (3,))


def _gelu(x, tanh=False):
    x = x.astype(np.float64)
    if tanh:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def _spied(monkeypatch, name) -> list:
    """The arguments of each call of onednn_primitives' factory `name`, as they come."""
    made = []
    original = getattr(onednn_primitives, name)
    monkeypatch.setattr(onednn_primitives, name,
                        lambda *args: made.append(args) or original(*args))
    return made


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_on_onednn(monkeypatch, approximate):
    made = _spied(monkeypatch, "eltwise")
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(5000) * 4).astype(np.float32)
    x[:4] = [1e20, -1e20, 0.0, -0.0]
    out = np.full_like(x, np.nan)
    steps._gelu("graph.gelu", [x], out, {"approximate": approximate},
                      np.empty_like(x))
    assert made == [("gelu_tanh" if approximate == "tanh" else "gelu_erf", 5000)]
    np.testing.assert_allclose(out, _gelu(x, approximate == "tanh"), rtol=1e-5, atol=1.5e-6)
    # in place (an epilogue's out is its in)
    y = x.copy()
    steps._gelu("graph.gelu", [y], y, {"approximate": approximate}, np.empty_like(x))
    np.testing.assert_array_equal(y, out)


@pytest.mark.parametrize("special", [np.inf, -np.inf, np.nan, 3e38, -3e38])
def test_gelu_special_values_take_numpy(special):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(5000).astype(np.float32)
    x[7] = special
    out = np.empty_like(x)
    with np.errstate(invalid="ignore"):   # (-inf * 0)
        steps._gelu("graph.gelu", [x], out, {}, np.empty_like(x))
        want = _gelu(x)
    np.testing.assert_allclose(out, want.astype(np.float32), rtol=1e-5, atol=1e-6)


def _activation(name, x):
    x = x.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if name == "graph.sigmoid":
            return 1 / (1 + np.exp(-x))
        if name == "graph.swish":
            return x / (1 + np.exp(-x))
        return x * np.clip(x / 6 + 0.5, 0, 1)


@pytest.mark.parametrize("name, function", [("graph.sigmoid", "logistic"),
                                            ("graph.swish", "swish"),
                                            ("graph.hard_swish", "hardswish")])
def test_activations_on_onednn(monkeypatch, name, function):
    """From 16K float32 elements a sigmoid, swish or hard-swish is one oneDNN call, within
    3e-7 of float64 relative, 1e-7 absolute (hard-swish cancels near -3; NaN and
    infinities as numpy's, a result below ~1e-37 flushed to 0), in place too; fewer
    elements, float16 or an operand of another shape keep numpy's passes."""
    made = _spied(monkeypatch, "eltwise")
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(1 << 14) * 6).astype(np.float32)
    x[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 3e38, -3e38, -80.0]
    calls = steps.STEP_CALLS[name](name, [x], np.empty_like(x), {}, np.empty_like(x))
    assert [call[0] for call in calls] == [onednn_primitives.eltwise(*made[0])]
    assert made[0][:2] == (function, 1 << 14)
    out = np.full_like(x, 7.0)
    kernel_ops.STEP_IMPLS[name](name, [x], out, {}, np.empty_like(x))
    want = _activation(name, x)
    np.testing.assert_allclose(out, want, rtol=3e-7, atol=1e-7)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    y = x.copy()   # in place (an epilogue's out is its in)
    kernel_ops.STEP_IMPLS[name](name, [y], y, {}, np.empty_like(x))
    np.testing.assert_array_equal(y, out)
    made.clear()
    small = np.empty(1000, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):   # (numpy's passes on the specials)
        kernel_ops.STEP_IMPLS[name](name, [x[:1000]], small, {}, np.empty_like(small))
        half = x.astype(np.float16)
        kernel_ops.STEP_IMPLS[name](name, [half], np.empty_like(half), {},
                                     np.empty_like(half))
    np.testing.assert_allclose(small, _activation(name, x[:1000]), rtol=1e-6, atol=1e-7)
    wide = np.empty((2, 1 << 14), np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        kernel_ops.STEP_IMPLS[name](name, [x], wide, {}, np.empty_like(wide))   # (broadcast)
    assert made == []


@pytest.mark.parametrize("source, dest", [(np.float32, np.float16), (np.float16, np.float32)])
def test_float16_casts_on_onednn_match_numpy(monkeypatch, source, dest):
    """A float16 <-> float32 Cast of 4096 elements or more converts on oneDNN, value for
    value as numpy does: round to nearest even, overflow to inf, subnormals, NaN, -0."""
    from palimpsest.backends.numpy import kernels

    made = _spied(monkeypatch, "convert")
    rng = np.random.default_rng(6)
    wide = (rng.standard_normal(6000) * 1000).astype(np.float32)
    wide[:12] = [np.inf, -np.inf, np.nan, -0.0, 70000.0, -70000.0, 65504.0, 65520.0,
                 6e-8, 3e-8, 1e-5, 1.00048828125]   # (the last: a tie, to even)
    with np.errstate(over="ignore"):   # (70000 -> inf)
        x = wide.astype(source)
        want = x.astype(dest)
    out = np.empty(x.shape, dest)
    assert kernels._cast({}, out, x)
    assert made == [(np.dtype(source).name, np.dtype(dest).name, 6000)]
    np.testing.assert_array_equal(out, want)
    assert np.signbit(out[3])
