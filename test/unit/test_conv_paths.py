"""The numpy conv2d's faster paths (backends/numpy/kernel_ops_conv.py, the depthwise ones
in kernel_ops_depthwise.py; oneDNN's channels-last route turned off), each against the graph level's reference on shapes that
take it: lowered to kernels, printed and parsed back, run with poisoning on
(test_kernels.check), and the path itself must have run.

- depthwise, f32/f64, kh*kw*Ho*Wo >= 500 (a constant W: its banded weights made once)
  or 2000 (W computed in the run: made each run): `_depthwise_columns` (a batched matmul
  per kernel column of banded weights by the padded image's rows or column phases as
  they lie, summed into Y); smaller ones keep the im2col path. Runs after the first
  replay the kept banded weights; W computed in the run, or a new W fed, is read anew.
  Stride 1 along the width, X is read as it lies (`_direct_plan`: edge bands of rows
  and kernel columns by narrower products), unless no kernel column reaches every
  output column or a band of rows reads only pads (then the padded copy).
- dense convs of at most 1600 weights an output (first layers, few channels):
  `_conv_output_rows` (the padded rows, channels inside rows, per kernel column; one
  GEMM per output row).
- with `_depthwise_columns` off, depthwise with kh*kw*Ho*Wo >= 2500 (3x3 from 17x17
  outputs, 5x5 from 10x10): `_depthwise_rows_first` (T by kernel column and row phase,
  a batched matmul per band and phase, kernel rows summed into Y): pads or none (X read
  as it lies), a multiplier, dilations, strides (2x2, 3x2, 2x1, with a dilation),
  several bands, a batch, f64, kernel rows that read only pads; smaller images keep
  the im2col path.
- dense (with `_conv_output_rows` off), stride 1 along the height, 32x32 outputs or
  more: `_conv_kernel_rows` (T by kernel column, one GEMM per kernel row summed into Y,
  in bands of output rows).
- the im2col in bands of output rows, the bias added band by band (strided, grouped,
  dilated, stride phases).
"""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")

import palimpsest.backends.numpy.kernel_ops_channels_last as channels_last  # noqa: E402
import palimpsest.backends.numpy.kernel_ops_conv as conv  # noqa: E402
import palimpsest.backends.numpy.kernel_ops_depthwise as depthwise  # noqa: E402
from test_kernels import check, model_of, node, rand  # noqa: E402


@pytest.fixture(autouse=True)
def numpy_paths(monkeypatch):
    """These are the numpy paths' tests: convs that oneDNN would take stay on them
    (test_channels_last.py tests that route)."""
    monkeypatch.setattr(channels_last, "wanted", lambda *args: False)


def _counting(monkeypatch, name) -> list:
    """Calls of `name` (kernel_ops_depthwise's, else kernel_ops_conv's), as they happen:
    each call's arguments."""
    calls = []
    module = depthwise if hasattr(depthwise, name) else conv
    original = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def _conv_model(rng, x_shape, w_shape, attrs, bias, dtype=np.float32):
    x = rand(rng, x_shape, dtype)
    consts = {"w": rand(rng, w_shape, dtype)}
    ins = ["x", "w"]
    if bias:
        consts["b"] = rand(rng, (w_shape[0],), dtype)
        ins.append("b")
    return model_of([node("Conv", ins, attrs)], {"x": x}, consts), {"x": x}


def _checked(monkeypatch, path, seed, x_shape, w_shape, attrs, bias=True,
             dtype=np.float32) -> list:
    """A one-Conv model (random X, W, bias) checked at the kernel level (atol 1e-5 for
    sums of up to 49 products, growing as the square root of more); the calls of
    `path` it made."""
    calls = _counting(monkeypatch, path)
    model, feeds = _conv_model(np.random.default_rng(seed), x_shape, w_shape, attrs, bias,
                               dtype)
    terms = w_shape[1] * w_shape[2] * w_shape[3]
    check(model, feeds, "kernel.conv2d", atol=1e-5 * max(1.0, (terms / 49) ** 0.5))
    return calls


@pytest.mark.parametrize("c, mg, hw, kernel, strides, dilations, pads, n, bias, dtype", [
    (8, 1, (20, 18), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 2, True, np.float32),
    (5, 2, (11, 13), (5, 5), (1, 1), (1, 1), (2, 2, 2, 2), 1, False, np.float32),
    (4, 1, (40, 48), (3, 2), (1, 2), (2, 1), (2, 0, 1, 1), 1, True, np.float32),
    (6, 1, (20, 20), (3, 3), (1, 1), (1, 1), (0, 0, 0, 0), 1, True, np.float32),
    (6, 3, (30, 31), (1, 3), (1, 1), (1, 2), (0, 2, 0, 2), 2, True, np.float64),
    (96, 1, (40, 40), (5, 5), (1, 1), (1, 1), (2, 2, 2, 2), 1, True, np.float32),
    (6, 1, (40, 42), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 2, True, np.float32),
    (4, 2, (30, 31), (5, 5), (2, 2), (1, 1), (2, 2, 2, 2), 1, True, np.float32),
    (5, 1, (43, 40), (3, 3), (3, 2), (2, 1), (2, 1, 0, 2), 1, False, np.float32),
    (3, 1, (41, 40), (3, 3), (2, 1), (2, 1), (0, 0, 0, 0), 1, True, np.float64),
    (40, 1, (44, 44), (5, 5), (2, 2), (1, 1), (2, 1, 1, 2), 1, True, np.float32),
    # kernel rows that read only pads (left out): above and below a 2-row image, around
    # a 1-row image strided, dilated
    (6, 1, (2, 100), (5, 5), (1, 1), (1, 1), (2, 2, 2, 2), 1, True, np.float32),
    (4, 2, (1, 240), (5, 5), (2, 2), (1, 1), (2, 2, 2, 2), 1, True, np.float32),
    (3, 1, (2, 200), (3, 3), (1, 1), (2, 1), (2, 1, 2, 1), 1, False, np.float32),
])
def test_depthwise_rows_first(monkeypatch, c, mg, hw, kernel, strides, dilations, pads, n,
                              bias, dtype):
    monkeypatch.setattr(depthwise, "_DEPTHWISE_COLUMNS", False)
    attrs = {"group": c, "pads": list(pads), "strides": list(strides),
             "dilations": list(dilations)}
    assert _checked(monkeypatch, "_depthwise_rows_first", c + mg, (n, c) + hw,
                    (c * mg, 1) + kernel, attrs, bias, dtype)


@pytest.mark.parametrize("c, hw, kernel, strides, pads", [
    (96, (4, 4), (3, 3), (1, 1), (1, 1, 1, 1)),
    (64, (8, 8), (3, 3), (2, 2), (1, 1, 1, 1)),
    (32, (1, 40), (1, 5), (1, 1), (0, 2, 0, 2)),
    (16, (6, 6), (5, 5), (2, 2), (2, 2, 2, 2)),
])
def test_depthwise_columns_not_below(monkeypatch, c, hw, kernel, strides, pads):
    """Fewer than _COLUMNS_KEPT_FROM outputs per channel times taps (a constant W):
    the im2col path."""
    taken = _taken(monkeypatch, "_depthwise_columns")
    _checked(monkeypatch, "_depthwise_columns", c, (1, c) + hw, (c, 1) + kernel,
             {"group": c, "pads": list(pads), "strides": list(strides)})
    assert not taken


def test_depthwise_small_images_keep_im2col(monkeypatch):
    """A 7x7 image: kh BLAS calls per channel cost more than the copies they save."""
    monkeypatch.setattr(depthwise, "_DEPTHWISE_COLUMNS", False)
    assert not _checked(monkeypatch, "_depthwise_rows_first", 7, (1, 16, 7, 7),
                        (16, 1, 5, 5), {"group": 16, "pads": [2, 2, 2, 2]})



def _taken(monkeypatch, name) -> list:
    """The results of `name` (kernel_ops_depthwise's, else kernel_ops_conv's; None where
    it declined), as they come."""
    results = []
    module = depthwise if hasattr(depthwise, name) else conv
    original = getattr(module, name)

    def counted(*args, **kwargs):
        results.append(original(*args, **kwargs))
        return results[-1]

    monkeypatch.setattr(module, name, counted)
    return results


# `_depthwise_columns` (a batched matmul per kernel column of banded weights, the kw
# products summed into Y): the corpus's shapes (3x3 and 5x5, strides 1 and 2, 1-3 row
# images, 7x7 to 80x80) and odd ones: asymmetric and one-sided pads, no pads (X read as it
# lies, strided: its column phases in the im2col workspace), dilations (with strides),
# kernels 1x5, 5x1, 3x2, multipliers, a batch, f64, bands of output rows with a tail
# (R chosen by cost: 17 or 23 rows), several bands of channels.
@pytest.mark.parametrize("c, mg, hw, kernel, strides, dilations, pads, n, bias, dtype", [
    (24, 1, (64, 64), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, True, np.float32),
    (24, 1, (64, 64), (3, 3), (2, 2), (1, 1), (0, 0, 1, 1), 1, True, np.float32),
    (32, 1, (56, 56), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1, False, np.float32),
    (64, 1, (14, 14), (5, 5), (1, 1), (1, 1), (2, 2, 2, 2), 1, True, np.float32),
    (32, 1, (7, 7), (5, 5), (2, 2), (1, 1), (2, 2, 2, 2), 1, True, np.float32),
    (20, 1, (2, 96), (5, 5), (1, 1), (1, 1), (2, 2, 2, 2), 1, True, np.float32),
    (10, 1, (3, 96), (5, 5), (2, 1), (1, 1), (2, 2, 2, 2), 1, True, np.float32),
    (16, 1, (3, 80), (1, 5), (1, 1), (1, 1), (0, 2, 0, 2), 1, True, np.float32),
    (8, 1, (20, 18), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 2, True, np.float32),
    (5, 2, (11, 13), (5, 5), (1, 1), (1, 1), (2, 2, 2, 2), 1, False, np.float32),
    (4, 1, (40, 48), (3, 2), (1, 2), (2, 1), (2, 0, 1, 1), 1, True, np.float32),
    (6, 1, (17, 23), (3, 3), (1, 1), (1, 1), (0, 0, 0, 0), 1, True, np.float32),
    (6, 3, (30, 31), (1, 3), (1, 1), (1, 2), (0, 2, 0, 2), 2, True, np.float64),
    (4, 2, (30, 31), (5, 5), (2, 2), (1, 1), (2, 2, 2, 2), 1, True, np.float32),
    (5, 1, (43, 40), (3, 3), (3, 2), (2, 1), (2, 1, 0, 2), 1, False, np.float32),
    (3, 1, (41, 40), (3, 3), (2, 1), (2, 1), (0, 0, 0, 0), 1, True, np.float64),
    (3, 2, (29, 31), (3, 3), (2, 3), (1, 1), (0, 0, 0, 0), 2, True, np.float32),
    (4, 1, (33, 9), (5, 1), (2, 1), (3, 1), (4, 0, 3, 0), 1, True, np.float32),
    (6, 1, (2, 100), (5, 5), (1, 1), (1, 1), (2, 2, 2, 2), 1, True, np.float32),
    (4, 2, (1, 240), (5, 5), (2, 2), (1, 1), (2, 2, 2, 2), 1, True, np.float32),
    (3, 1, (2, 200), (3, 3), (1, 1), (2, 1), (2, 1, 2, 1), 1, False, np.float32),
    (7, 1, (17, 9), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, True, np.float32),
    (96, 1, (40, 40), (5, 5), (1, 1), (1, 1), (2, 2, 2, 2), 1, True, np.float32),
])
def test_depthwise_columns(monkeypatch, c, mg, hw, kernel, strides, dilations, pads, n,
                           bias, dtype):
    monkeypatch.setattr(depthwise, "_COLUMNS_KEPT_FROM", 0)   # (the small ones too)
    taken = _taken(monkeypatch, "_depthwise_columns")
    attrs = {"group": c, "pads": list(pads), "strides": list(strides),
             "dilations": list(dilations)}
    _checked(monkeypatch, "_depthwise_columns", c + mg, (n, c) + hw, (c * mg, 1) + kernel,
             attrs, bias, dtype)
    assert taken and all(calls is not None for calls in taken)


@pytest.mark.parametrize("rows, channels", [(1, 1 << 17), (5, 3)])
def test_depthwise_columns_bands(monkeypatch, rows, channels):
    """Forced bands: one output row a product (every band a tail-free full one), and 5
    rows over a 23-row image (a tail of 3), 3 channels a band over 10 (a last band of 1)."""
    monkeypatch.setattr(depthwise, "_band_rows", lambda *args: rows)
    monkeypatch.setattr(depthwise, "_DEPTHWISE_L2", channels * (2 * 23 * 21 + 25 * 23))
    taken = _taken(monkeypatch, "_depthwise_columns")
    _checked(monkeypatch, "_depthwise_columns", rows, (2, 10, 23, 21), (10, 1, 3, 3),
             {"group": 10, "pads": [1, 2, 1, 0], "strides": [1, 1]})
    assert taken and all(calls is not None for calls in taken)


# X read as it lies (`_direct_plan`) or, where it cannot be, the padded copy: a top
# band and a bottom band with a tail (R forced to 3), rows strided and dilated, a
# multiplier, a 2-row image whose every band meets the pads, a batch, f64; no kernel
# column reaching every output column (pads of 2 beside a 3-wide kernel); a band of
# output rows reading only pads (a 1-row kernel under 3 pad rows, 3 rows a band)
@pytest.mark.parametrize("c, mg, hw, kernel, strides, dilations, pads, n, dtype, direct", [
    (4, 1, (23, 17), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, np.float32, True),
    (3, 2, (26, 19), (5, 3), (2, 1), (1, 2), (3, 2, 1, 0), 2, np.float32, True),
    (5, 1, (2, 40), (5, 5), (1, 1), (1, 1), (2, 2, 2, 2), 1, np.float64, True),
    (3, 1, (20, 12), (3, 3), (1, 1), (2, 1), (0, 1, 4, 1), 1, np.float32, True),
    (4, 1, (9, 10), (3, 3), (1, 1), (1, 1), (1, 2, 1, 2), 1, np.float32, False),
    (4, 1, (9, 10), (1, 3), (1, 1), (1, 1), (3, 1, 0, 1), 1, np.float32, False),
])
def test_depthwise_columns_direct(monkeypatch, c, mg, hw, kernel, strides, dilations,
                                  pads, n, dtype, direct):
    monkeypatch.setattr(depthwise, "_COLUMNS_KEPT_FROM", 0)
    monkeypatch.setattr(depthwise, "_band_rows", lambda *args: 3)
    plans = _taken(monkeypatch, "_direct_plan")
    attrs = {"group": c, "pads": list(pads), "strides": list(strides),
             "dilations": list(dilations)}
    assert _checked(monkeypatch, "_depthwise_columns", c, (n, c) + hw, (c * mg, 1) + kernel,
                    attrs, True, dtype)
    assert plans and all((plan is not None) == direct for plan in plans)
    if direct:   # (edge bands)
        assert all(plan[3] for plan in plans)


def _runs_match_reference(model, feeds: list, what: str):
    """A Session on `model`, poisoning on, run on each of `feeds` in turn: each run's
    output matches the graph level's on that feed."""
    from palimpsest.backends.binding import find_function
    from palimpsest.backends.numpy.session import Session
    from palimpsest.backends.reference.executor import run as run_graph
    from palimpsest.dialects.graph.from_onnx import import_onnx

    graph = import_onnx(model)
    session = Session(import_onnx(model), poison=True)
    for index, feed in enumerate(feeds):
        want = run_graph(find_function(graph, None), feed)["y"]
        np.testing.assert_allclose(session.run(feed)["y"], want, rtol=1e-5, atol=1e-5,
                                   err_msg=f"{what}: run {index}")


def test_depthwise_columns_kept_weights_replayed(monkeypatch):
    """A constant W's banded weights are made once (`_KEEP_BANDED`): the conv (after a
    Relu, so that it reads a pool buffer) records its calls at the first run and the
    later runs, on new inputs, replay them with the kept weights (3x3 and a 5x5 stride
    2 with a multiplier, a hard-swish fused), matching the reference each run."""
    taken = _taken(monkeypatch, "_depthwise_columns")
    rng = np.random.default_rng(11)
    x = rand(rng, (1, 6, 20, 22))
    model = model_of([node("Relu", ["x"], outs=["r"]),
                      node("Conv", ["r", "w1", "b1"], {"group": 6, "pads": [1, 1, 1, 1]},
                           outs=["c1"]),
                      node("Conv", ["c1", "w2"], {"group": 6, "pads": [2, 2, 2, 2],
                                                  "strides": [2, 2]}, outs=["c2"]),
                      node("HardSwish", ["c2"], outs=["y"])],
                     {"x": x}, {"w1": rand(rng, (6, 1, 3, 3)), "b1": rand(rng, (6,)),
                                "w2": rand(rng, (12, 1, 5, 5))})
    _runs_match_reference(model, [{"x": rand(np.random.default_rng(s), x.shape)}
                                  for s in range(4)], "kept banded weights")
    assert len(taken) == 2 and all(calls is not None for calls in taken)


@pytest.mark.parametrize("computed", [True, False])
def test_depthwise_columns_weights_read_each_run(monkeypatch, computed):
    """A W computed in the run (a Mul by a fed scale: a pool buffer, written) has its
    banded weights made each run; a fed W (a new read-only view each run) makes the
    conv's calls anew each run: a new W every run, each run matches the reference."""
    taken = _taken(monkeypatch, "_depthwise_columns")
    rng = np.random.default_rng(12)
    x, w = rand(rng, (1, 5, 24, 20)), rand(rng, (5, 1, 3, 3))
    conv_node = node("Conv", ["r", "w", "b"], {"group": 5, "pads": [1, 1, 1, 1]})
    if computed:
        nodes = [node("Mul", ["w0", "s"], outs=["w"])]
        inputs, constants = {"x": x, "s": np.ones(1, np.float32)}, {"w0": w}
        feeds = [{"x": x, "s": np.array([scale], np.float32)} for scale in (1, -2, 0.5)]
    else:
        nodes, inputs, constants = [], {"x": x, "w": w}, {}
        feeds = [{"x": x, "w": rand(np.random.default_rng(s), w.shape)} for s in range(3)]
    constants["b"] = rand(rng, (5,))
    model = model_of(nodes + [node("Relu", ["x"], outs=["r"]), conv_node], inputs,
                     constants)
    _runs_match_reference(model, feeds, "W read each run")
    assert taken and all(calls is not None for calls in taken)


# Dense convs of at most 1600 weights an output (`_conv_output_rows`: S = the padded
# rows, channels inside rows, per kernel column; one GEMM per output row): first layers
# (3x3/2, 5x5/2 with uneven pads, 7x7/2), strides 1 to 3 and uneven, a column dilation,
# 2x2 with one-sided pads, a one-channel image, no pads, a kernel wider than the image's
# pads reach, a batch, f64, no bias; 32 to 177 channels (PP-OCR's 3x3/2 and 3x3 of few
# outputs); not with a row dilation, nor Wo < M/4, nor more weights an output.
@pytest.mark.parametrize("c, m, hw, kernel, strides, dilations, pads, n, bias, dtype", [
    (3, 16, (64, 64), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1, True, np.float32),
    (3, 24, (64, 64), (5, 5), (2, 2), (1, 1), (1, 1, 2, 2), 1, True, np.float32),
    (3, 8, (45, 43), (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 2, True, np.float32),
    (16, 8, (40, 40), (2, 2), (1, 1), (1, 1), (0, 0, 1, 1), 1, True, np.float32),
    (8, 16, (33, 35), (3, 3), (2, 3), (1, 2), (2, 1, 0, 3), 1, False, np.float32),
    (1, 4, (16, 50), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 2, True, np.float64),
    (4, 6, (12, 13), (3, 2), (1, 3), (1, 1), (0, 0, 0, 0), 1, True, np.float32),
    (2, 3, (9, 11), (5, 5), (1, 1), (1, 3), (4, 0, 1, 6), 1, True, np.float32),
    (32, 16, (40, 40), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1, True, np.float32),
    (64, 16, (24, 20), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 2, True, np.float32),
    (177, 24, (14, 12), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, False, np.float64),
    (40, 32, (30, 28), (5, 5), (2, 1), (1, 1), (2, 2, 2, 2), 1, True, np.float32),
])
def test_dense_output_rows(monkeypatch, c, m, hw, kernel, strides, dilations, pads, n, bias,
                           dtype):
    taken = _taken(monkeypatch, "_conv_output_rows")
    attrs = {"pads": list(pads), "strides": list(strides), "dilations": list(dilations)}
    _checked(monkeypatch, "_conv_output_rows", c * 5 + m, (n, c) + hw, (m, c) + kernel,
             attrs, bias, dtype)
    assert taken and all(calls is not None for calls in taken)


@pytest.mark.parametrize("c, m, hw, dilations", [
    (3, 8, (20, 20), (2, 1)),     # a row dilation
    (12, 128, (28, 28), (1, 1)),  # Wo < M/4
    (200, 8, (20, 20), (1, 1)),   # more weights an output than _OUTPUT_ROWS_K
])
def test_dense_output_rows_not_taken(monkeypatch, c, m, hw, dilations):
    taken = _taken(monkeypatch, "_conv_output_rows")
    _checked(monkeypatch, "_conv_output_rows", c, (1, c) + hw, (m, c, 3, 3),
             {"pads": [1, 1, 1, 1], "dilations": list(dilations)})
    assert not taken



@pytest.mark.parametrize("hw, kernel, strides, pads, chunk", [
    ((23, 20), (3, 3), (1, 1), (1, 1, 1, 1), 1),
    ((30, 21), (5, 5), (2, 2), (1, 1, 2, 2), 5400),   # 3 output rows a band
    ((17, 19), (2, 2), (1, 1), (0, 0, 1, 1), 4 * 3 * 2 * 19 * 6),   # 5 rows a band, 2 last
    ((25, 16), (3, 3), (3, 1), (4, 0, 5, 1), 1),   # bands wholly in the top or bottom pad
])
def test_dense_output_rows_in_bands(monkeypatch, hw, kernel, strides, pads, chunk):
    """Bands of output rows (forced by _CHUNK_BYTES: one output row, or a few): the first
    starts in the top pad, the last runs into the bottom one, a batch of 2."""
    monkeypatch.setattr(conv, "_CHUNK_BYTES", chunk)
    taken = _taken(monkeypatch, "_conv_output_rows")
    _checked(monkeypatch, "_conv_output_rows", sum(hw), (2, 3) + hw, (5, 3) + kernel,
             {"pads": list(pads), "strides": list(strides)})
    assert taken and all(calls is not None for calls in taken)

def test_dense_output_rows_with_epilogue(monkeypatch):
    taken = _taken(monkeypatch, "_conv_output_rows")
    rng = np.random.default_rng(5)
    x = rand(rng, (1, 3, 30, 30))
    model = model_of([node("Conv", ["x", "w", "b"], {"pads": [1, 1, 1, 1], "strides": [2, 2]},
                           outs=("c",)),
                      node("Relu", ["c"])], {"x": x},
                     {"w": rand(rng, (8, 3, 3, 3)), "b": rand(rng, (8,))})
    check(model, {"x": x}, "kernel.conv2d", atol=1e-5)
    assert taken and taken[0] is not None

# Dense convs, stride 1 along the height, 32x32 outputs or more: `_conv_kernel_rows`
# (T by kernel column, one GEMM per kernel row summed into Y): pads or none, dilations,
# a column stride, a 2x2 kernel with uneven pads, a batch, f64, a fused epilogue (Relu).
@pytest.mark.parametrize("c, m, hw, kernel, strides, dilations, pads, n, bias, dtype", [
    (3, 8, (34, 36), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 2, True, np.float32),
    (5, 4, (36, 34), (3, 3), (1, 1), (1, 1), (0, 0, 0, 0), 1, False, np.float32),
    (4, 6, (40, 70), (3, 2), (1, 2), (2, 1), (2, 0, 1, 1), 1, True, np.float32),
    (6, 3, (33, 33), (2, 2), (1, 1), (1, 1), (0, 0, 1, 1), 1, True, np.float64),
    (2, 5, (32, 40), (5, 5), (1, 1), (1, 2), (2, 4, 2, 4), 1, True, np.float32),
    (3, 4, (40, 36), (3, 1), (1, 1), (1, 1), (1, 0, 1, 0), 1, True, np.float32),
])
def test_dense_kernel_rows(monkeypatch, c, m, hw, kernel, strides, dilations, pads, n,
                           bias, dtype):
    monkeypatch.setattr(conv, "_OUTPUT_ROWS_K", 0)
    attrs = {"pads": list(pads), "strides": list(strides), "dilations": list(dilations)}
    calls = _checked(monkeypatch, "_conv_kernel_rows", c * 3 + m, (n, c) + hw,
                     (m, c) + kernel, attrs, bias, dtype)
    assert len(calls) == n


# Bands of 8 output rows (the fewest): T's band starts inside the top pad, in the image,
# and runs into the bottom pad; dilated rows reach across bands.
@pytest.mark.parametrize("hw, kernel, dilations, pads", [
    ((37, 33), (3, 3), (1, 1), (1, 1, 1, 1)),
    ((40, 32), (5, 3), (2, 1), (3, 0, 5, 2)),
    ((33, 36), (2, 2), (1, 1), (0, 0, 1, 1)),
])
def test_dense_kernel_rows_in_bands(monkeypatch, hw, kernel, dilations, pads):
    monkeypatch.setattr(conv, "_OUTPUT_ROWS_K", 0)
    monkeypatch.setattr(conv, "_KERNEL_ROWS_BAND", 1)
    calls = _checked(monkeypatch, "_conv_kernel_rows", sum(hw), (1, 3) + hw, (4, 3) + kernel,
                     {"pads": list(pads), "dilations": list(dilations)})
    assert calls and calls[0][5] == 8   # the band: output rows


def test_dense_kernel_rows_with_epilogue(monkeypatch):
    monkeypatch.setattr(conv, "_OUTPUT_ROWS_K", 0)
    calls = _counting(monkeypatch, "_conv_kernel_rows")
    rng = np.random.default_rng(11)
    x = rand(rng, (1, 4, 33, 33))
    model = model_of([node("Conv", ["x", "w", "b"], {"pads": [1, 1, 1, 1]}, outs=("c",)),
                      node("Relu", ["c"])], {"x": x},
                     {"w": rand(rng, (6, 4, 3, 3)), "b": rand(rng, (6,))})
    check(model, {"x": x}, "kernel.conv2d", atol=1e-5)
    assert calls


def test_dense_small_images_keep_im2col(monkeypatch):
    monkeypatch.setattr(conv, "_OUTPUT_ROWS_K", 0)
    assert not _checked(monkeypatch, "_conv_kernel_rows", 5, (1, 8, 20, 20), (8, 8, 3, 3),
                        {"pads": [1, 1, 1, 1]})


# The im2col in bands of output rows (forced here: bands of one row), the bias added
# band by band: strided, grouped, dilated.
@pytest.mark.parametrize("c, m, group, hw, kernel, strides, dilations, pads", [
    (3, 4, 1, (9, 10), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    (4, 6, 2, (8, 9), (3, 2), (1, 2), (2, 1), (0, 1, 2, 1)),
    (2, 3, 1, (12, 11), (7, 7), (2, 2), (1, 1), (3, 3, 3, 3)),
])
def test_im2col_bands_add_bias(monkeypatch, c, m, group, hw, kernel, strides, dilations,
                               pads):
    monkeypatch.setattr(conv, "_CHUNK_FROM", 0)
    monkeypatch.setattr(conv, "_CHUNK_BYTES", 1)
    attrs = {"group": group, "pads": list(pads), "strides": list(strides),
             "dilations": list(dilations)}
    _checked(monkeypatch, "_im2col_rows_first", c * m, (2, c) + hw, (m, c // group) + kernel,
             attrs)
