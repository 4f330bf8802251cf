"""The numpy backend's quantized fast paths (backends/numpy/kernels_quant.py) and the
centred weights they share with the reference (dialects/graph/reference/quant.centred):
bit for bit against the reference kernels, and against onnxruntime."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from palimpsest.backends.binding import find_function  # noqa: E402
from palimpsest.backends.numpy import run_with_stats  # noqa: E402
from palimpsest.backends.reference.executor import run as run_graph  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402
from palimpsest.dialects.graph.reference import quant  # noqa: E402
from palimpsest.passes.pass_manager import PassManager, parse_pipeline  # noqa: E402


def _run_both(model, feeds):
    """(graph level: the reference kernels, planned numpy level: the fast paths, stats)."""
    graph = import_onnx(model)
    PassManager(parse_pipeline("infer-shapes")).run(graph)
    want = run_graph(find_function(graph, None), feeds)
    from test_kernels import lower

    got, stats = run_with_stats(find_function(lower(import_onnx(model)), None), feeds,
                                poison=True)
    return want, got, stats


def _onnxruntime(model, feeds):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in model.graph.output], session.run(None, feeds)))


class _Route:
    """Which route a test's 8-bit products take, and oneDNN's GEMM and packed-product
    calls it saw."""

    def __init__(self, name):
        self.name, self.calls = name, []

    def check(self):
        """oneDNN ran on its route, never on the float one."""
        assert bool(self.calls) == (self.name == "onednn"), (self.name, len(self.calls))


def _take_route(name, monkeypatch) -> _Route:
    from palimpsest.backends import onednn
    from palimpsest.backends.numpy import int8_products

    route = _Route(name)
    if name == "float":
        monkeypatch.setattr(int8_products, "usable", lambda *args: False)
    else:
        if not onednn.available():
            pytest.skip(f"oneDNN is not usable here ({onednn.summary()})")
        monkeypatch.setattr(int8_products, "SMALLEST", 0)   # every product, however small
    gemm, packed = onednn.gemm_u8s8, int8_products.packed_product
    monkeypatch.setattr(onednn, "gemm_u8s8", lambda *args, **kwargs: route.calls.append(
        args[0].shape) or gemm(*args, **kwargs))

    def packed_product(*args, **kwargs):
        done = packed(*args, **kwargs)
        if done:
            route.calls.append(args[0].shape)
        return done
    monkeypatch.setattr(int8_products, "packed_product", packed_product)
    packed_copy = int8_products.packed

    def packed_for_binding(weight, rows, *args):   # (MatMulIntegerToFloat's bound call)
        made = packed_copy(weight, rows, *args)
        if made is not None:
            route.calls.append((rows, weight.rows.shape[1]))
        return made
    monkeypatch.setattr(int8_products, "packed", packed_for_binding)
    return route


@pytest.fixture(params=["float", "onednn"])
def route(request, monkeypatch):
    """Both routes of the 8-bit products: float BLAS on centred floats, and oneDNN's
    u8 x s8 GEMM (skipped where it is not usable)."""
    return _take_route(request.param, monkeypatch)


@pytest.fixture
def float_route(monkeypatch):
    """The float route, for tests of its blocks and float types."""
    return _take_route("float", monkeypatch)


def test_centred_float32_only_where_exact_and_kept_for_constants():
    """float32 where 255 * (the largest column sum of |w - zero|) < 2**24, else float64
    first (float32 made on demand); one object per read-only pair, a new one for a
    writable array."""
    rng = np.random.default_rng(5)
    small = rng.integers(-20, 20, (1, 64, 32)).astype(np.int8)
    zero = np.array([3], np.int8)
    small.flags.writeable = zero.flags.writeable = False
    entry = quant.centred(small, zero, (1, 1, 1), (1,))
    np.testing.assert_array_equal(entry.narrow, small.astype(np.float32) - 3)
    assert entry.bound == np.abs(small.astype(np.int64) - 3).sum(axis=1).max()
    assert entry.floats(255).dtype == np.float32
    assert quant.centred(small, zero, (1, 1, 1), (1,)) is entry
    wide = np.full((1, 1024, 8), 127, np.int8)   # 255 * 1024 * 127 > 2**24
    wide.flags.writeable = False
    entry = quant.centred(wide, zero, (1, 1, 1), (1,))
    assert entry.floats(255).dtype == np.float64
    assert entry.floats(1).dtype == np.float32   # exact for a small enough operand
    writable = small.copy()
    assert quant.centred(writable, None) is not quant.centred(writable, None)


def test_centred_makes_its_floats_only_when_read_and_keeps_no_constant_alive():
    """A Centred knows its bound and float type without a float copy; the copy it makes
    when read is the weight less its zero point; a cached constant's entry holds the
    constant weakly (dropped with it)."""
    import gc

    rng = np.random.default_rng(6)
    weight = rng.integers(0, 256, (32, 16)).astype(np.uint8)
    zero = np.array(120, np.uint8)
    weight.flags.writeable = zero.flags.writeable = False
    entry = quant.centred(weight, zero)
    assert entry._narrow is None and entry._wide is None
    assert entry.float_type(255) == np.float32
    assert entry._narrow is None
    np.testing.assert_array_equal(entry.narrow, weight.astype(np.float32) - 120)
    np.testing.assert_array_equal(entry.wide, weight.astype(np.float64) - 120)
    (key,) = [key for key, kept in quant._CENTRED.items() if kept is entry]
    del weight
    gc.collect()    # (other tests' entries may go with it: this one's key is checked)
    assert key not in quant._CENTRED


def _dq_lstm(direction, steps, batch, size, hidden, seed, *, per_column=False,
             r_range=(-128, 128), optional=True, peephole=False, unsigned=False,
             lengths=None):
    """A DynamicQuantizeLSTM; int8 weights have zero points 0 (onnxruntime's rule),
    uint8 weights (`unsigned`) zero points near 128."""
    rng = np.random.default_rng(seed)
    kind, shift = (np.uint8, 128) if unsigned else (np.int8, 0)
    dirs = 2 if direction == "bidirectional" else 1
    gates = 4 * hidden
    per = dirs * gates if per_column else dirs
    consts = {
        "W": (rng.integers(-128, 128, (dirs, size, gates)) + shift).astype(kind),
        "R": (rng.integers(*r_range, (dirs, hidden, gates)) + shift).astype(kind),
        "B": rng.normal(0, 0.1, (dirs, 2 * gates)).astype(np.float32),
        "ws": rng.uniform(0.002, 0.01, per).astype(np.float32).reshape(
            (dirs, gates) if per_column else (dirs,)),
        "wz": (rng.integers(-5, 5, per) * bool(shift) + shift).astype(kind).reshape(
            (dirs, gates) if per_column else (dirs,)),
        "rs": rng.uniform(0.002, 0.01, per).astype(np.float32).reshape(
            (dirs, gates) if per_column else (dirs,)),
        "rz": (rng.integers(-5, 5, per) * bool(shift) + shift).astype(kind).reshape(
            (dirs, gates) if per_column else (dirs,)),
        "P": rng.normal(0, 0.1, (dirs, 3 * hidden)).astype(np.float32)}
    feeds = {"x": rng.normal(0, 1, (steps, batch, size)).astype(np.float32)}
    ins = ["x", "W", "R", "B", "", "", "", "", "ws", "wz", "rs", "rz"]
    if optional:
        feeds["h0"] = rng.normal(0, 0.5, (dirs, batch, hidden)).astype(np.float32)
        feeds["c0"] = rng.normal(0, 0.5, (dirs, batch, hidden)).astype(np.float32)
        ins[5:7] = ["h0", "c0"]
    else:
        ins[3] = ""
        del consts["B"]
    if lengths is not None:
        consts["L"] = np.asarray(lengths, np.int32)
        ins[4] = "L"
    if peephole:
        ins[7] = "P"
    else:
        del consts["P"]
    node = helper.make_node("DynamicQuantizeLSTM", ins, ["y", "y_h", "y_c"],
                            domain="com.microsoft", hidden_size=hidden, direction=direction)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape))
         for n, a in feeds.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "y_h", "y_c")],
        [numpy_helper.from_array(a, n) for n, a in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    return model, feeds


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("case", ["plain", "per_column", "no_optional", "float64_r",
                                  "unsigned", "one_by_one"])
def test_dynamic_quantize_lstm_fast_path(direction, case, monkeypatch, route):
    """The fast DynamicQuantizeLSTM against the reference kernel, bit for bit (each
    step's hidden state quantized per direction, both directions in one loop, or one
    after the other where only one R fits the L2 cache; R too wide for exact float32
    sums in float64), and against onnxruntime."""
    if case == "float64_r" and route.name == "onednn":
        pytest.skip("float64 is the float route's")
    if case == "one_by_one":   # an L2 cache that holds one direction's R (16 x 64 f32)
        from palimpsest.backends.numpy import kernels_quant_lstm

        monkeypatch.setattr(kernels_quant_lstm, "_l2_bytes", lambda: 16 * 64 * 4 * 4 // 3 + 1
                            if route.name == "float" else 16 * 64 * 4 // 3 + 1)
        groups, steps = [], kernels_quant_lstm._lstm_steps
        monkeypatch.setattr(kernels_quant_lstm, "_lstm_steps",
                            lambda *args: groups.append(args[0].shape[1]) or steps(*args))
    model, feeds = _dq_lstm(direction, 7, 2, 12, 16 if case != "float64_r" else 640, 1,
                            per_column=case == "per_column", optional=case != "no_optional",
                            r_range=(-128, 128) if case != "float64_r" else (100, 128),
                            unsigned=case == "unsigned")
    if case == "float64_r":
        from palimpsest.dialects.graph.reference.recurrent import quantized_weights

        r = numpy_helper.to_array(model.graph.initializer[1])
        rz = numpy_helper.to_array(model.graph.initializer[-1])
        assert quantized_weights(r, rz).floats(255).dtype == np.float64
    want, got, stats = _run_both(model, feeds)
    assert "graph.dynamic_quantize_lstm" not in stats.temporary_ops   # the fast path ran
    if case == "one_by_one":
        assert groups == ([1, 1] if direction == "bidirectional" else [1])
    route.check()
    for name in ("y", "y_h", "y_c"):
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    expected = _onnxruntime(model, feeds)
    for name in ("y", "y_h", "y_c"):
        np.testing.assert_allclose(got[name], expected[name], atol=2e-3, err_msg=name)


@pytest.mark.parametrize("case", ["peephole", "short_sequence", "full_lengths"])
def test_dynamic_quantize_lstm_declines_to_the_reference(case, route):
    """Peepholes and sequences shorter than X are the reference kernel's (the fast path
    declines); sequence lengths all X's are the fast path's. Either way onnxruntime's
    result."""
    model, feeds = _dq_lstm("bidirectional", 5, 2, 8, 8, 2, peephole=case == "peephole",
                            lengths={"peephole": None, "short_sequence": [5, 3],
                                     "full_lengths": [5, 5]}[case])
    want, got, stats = _run_both(model, feeds)
    assert ("graph.dynamic_quantize_lstm" in stats.temporary_ops) == (case != "full_lengths")
    expected = _onnxruntime(model, feeds)
    for name in ("y", "y_h", "y_c"):
        np.testing.assert_array_equal(got[name], want[name])
        np.testing.assert_allclose(got[name], expected[name], atol=2e-3, err_msg=name)


@pytest.mark.parametrize("a_zero,k,expect", [
    (128, 1000, "float32"),    # 128 * 1000 * 100 < 2**24 from uint8's range
    (128, 2000, "reduced"),    # too wide from uint8's range; A's own range is narrow
    (0, 2000, "float64")])     # A reaches 255: float64
def test_matmul_integer_float32_where_exact(a_zero, k, expect, float_route):
    """MatMulInteger picks float32 from A's type range, else from A's own range (two
    byte reductions), else float64; every result equals onnxruntime's exactly."""
    rng = np.random.default_rng(7)
    b = np.full((k, 3), 100, np.int8)
    b[:, 1] = -100
    if expect == "float64":
        a = rng.integers(0, 256, (4, k)).astype(np.uint8)
        a[0, 0] = 255
    else:
        a = rng.integers(a_zero - 10, a_zero + 10, (4, k)).astype(np.uint8)
    b.flags.writeable = False
    assert quant.centred(b).exact_narrow(128) == (expect == "float32")
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, list(a.shape))],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [numpy_helper.from_array(np.asarray(b), "b"),
         numpy_helper.from_array(np.array(a_zero, np.uint8), "az")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    want, got, stats = _run_both(model, {"a": a})
    assert "graph.matmul_integer" not in stats.temporary_ops
    np.testing.assert_array_equal(got["y"], want["y"])
    np.testing.assert_array_equal(got["y"], _onnxruntime(model, {"a": a})["y"])


@pytest.mark.parametrize("exponent", [np.float32(3), np.float32(2), np.int64(3),
                                      np.float32(2.5)])
def test_pow_cube_and_square_as_onnxruntime(exponent):
    """Pow by a scalar 2 or 3 is x * x (* x), as onnxruntime computes it (np.power's cube
    is an ulp away on about a third of float32 inputs): the reference and the fused
    elementwise step (t5's GELU: Pow, then Mul and Add) equal onnxruntime bit for bit;
    another exponent stays np.power's."""
    rng = np.random.default_rng(11)
    x = rng.normal(0, 3, (4, 257)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Pow", ["x", "e"], ["p"]), helper.make_node("Mul", ["p", "k"], ["m"]),
         helper.make_node("Add", ["x", "m"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(exponent), "e"),
         numpy_helper.from_array(np.float32(0.044715), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    want, got, _ = _run_both(model, {"x": x})
    expected = _onnxruntime(model, {"x": x})["y"]
    if float(exponent) in (2, 3):
        np.testing.assert_array_equal(want["y"], expected)
        np.testing.assert_array_equal(got["y"], expected)
    else:
        np.testing.assert_allclose(got["y"], expected, rtol=1e-6)


@pytest.mark.parametrize("l2", [None, 8192])
def test_matmul_integer_large_a_by_blocks_of_rows(l2, monkeypatch, float_route):
    """A large A is centred a cache-sized block of rows at a time (an 8 KiB "L2": blocks
    of 2 rows of 256, the last one short): still onnxruntime's result, bit for bit."""
    from palimpsest.backends.numpy import kernels_quant

    if l2 is not None:
        monkeypatch.setattr(kernels_quant, "_l2_bytes", lambda: l2)
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (3, 5, 256)).astype(np.uint8)
    b = rng.integers(-128, 128, (256, 3)).astype(np.int8)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, list(a.shape))],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [numpy_helper.from_array(b, "b"), numpy_helper.from_array(np.array(131, np.uint8), "az"),
         numpy_helper.from_array(np.array([3, -7, 0], np.int8), "bz")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    want, got, stats = _run_both(model, {"a": a})
    assert "graph.matmul_integer" not in stats.temporary_ops
    np.testing.assert_array_equal(got["y"], want["y"])
    np.testing.assert_array_equal(got["y"], _onnxruntime(model, {"a": a})["y"])


@pytest.mark.parametrize("case", ["normal", "ties", "positive"])
def test_dynamic_quantize_linear_by_blocks(case, monkeypatch):
    """DynamicQuantizeLinear a block at a time (a 1 KiB "L2": blocks of 64 elements, the
    last one short) equals the reference and onnxruntime, bit for bit, saturation and
    ties included."""
    from palimpsest.backends.numpy import kernels_quant

    monkeypatch.setattr(kernels_quant, "_l2_bytes", lambda: 1024)
    rng = np.random.default_rng(8)
    x = {"normal": rng.standard_normal((4, 33)),
         "ties": np.linspace(-2.55, 2.55, 132).reshape(4, 33),
         "positive": rng.random((4, 33)) + 0.5}[case].astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info(n, t, None) for n, t in
         (("y", TensorProto.UINT8), ("s", TensorProto.FLOAT), ("z", TensorProto.UINT8))], [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    want, got, stats = _run_both(model, {"x": x})
    assert "graph.dynamic_quantize_linear" not in stats.temporary_ops
    expected = _onnxruntime(model, {"x": x})
    for name in ("y", "s", "z"):
        np.testing.assert_array_equal(got[name], want[name])
        np.testing.assert_array_equal(got[name], expected[name])


def _product_model(op, a, b, a_zero, b_zero, rng):
    """A one-node MatMulInteger or com.microsoft MatMulIntegerToFloat (random per-column
    B scales and bias) of an input `a` like the given one by the constant `b`."""
    width = b.shape[1]
    consts = [numpy_helper.from_array(b, "b"), numpy_helper.from_array(a_zero, "az"),
              numpy_helper.from_array(np.asarray(b_zero), "bz")]
    if op == "MatMulInteger":
        node = helper.make_node(op, ["a", "b", "az", "bz"], ["y"])
        out_type = TensorProto.INT32
    else:
        consts += [numpy_helper.from_array(np.float32(0.02), "sa"),
                   numpy_helper.from_array(rng.uniform(0.01, 0.05, width).astype(np.float32),
                                           "sb"),
                   numpy_helper.from_array(rng.normal(0, 1, width).astype(np.float32), "c")]
        node = helper.make_node(op, ["a", "b", "sa", "sb", "az", "bz", "c"], ["y"],
                                domain="com.microsoft")
        out_type = TensorProto.FLOAT
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(
            "a", TensorProto.UINT8 if a.dtype == np.uint8 else TensorProto.INT8, list(a.shape))],
        [helper.make_tensor_value_info("y", out_type, None)], consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.parametrize("weight", ["int8", "uint8_per_tensor", "uint8_per_column"])
@pytest.mark.parametrize("op", ["MatMulInteger", "MatMulIntegerToFloat"])
def test_product_weight_converted_by_blocks_of_columns(weight, op, monkeypatch, float_route):
    """A product of at least _CONVERT_ROWS rows reads the 8-bit weight, converted (and
    centred) a block of columns at a time (a 64 KiB "L2": blocks of 64 columns of 64, the
    last one short), each block scaled and biased: the reference's result bit for bit,
    and onnxruntime's."""
    from palimpsest.backends.numpy import kernels_quant

    monkeypatch.setattr(kernels_quant, "_l2_bytes", lambda: 65536)
    blocks = []
    columns = kernels_quant._weight_columns
    monkeypatch.setattr(kernels_quant, "_weight_columns", lambda *args: (
        (blocks.append((part, block.dtype, block.base is not None)) or (part, block))
        for part, block in columns(*args)))
    rng = np.random.default_rng(12)
    rows, depth, width = kernels_quant._CONVERT_ROWS + 3, 64, 150
    a = rng.integers(0, 256, (rows, depth)).astype(np.uint8)
    if weight == "int8":
        b, b_zero = rng.integers(-128, 128, (depth, width)).astype(np.int8), np.int8(0)
    else:
        b = rng.integers(0, 256, (depth, width)).astype(np.uint8)
        b_zero = rng.integers(100, 156, width if weight == "uint8_per_column" else ()
                              ).astype(np.uint8)
    model = _product_model(op, a, b, np.uint8(131), b_zero, rng)
    want, got, stats = _run_both(model, {"a": a})
    assert not stats.temporary_ops
    assert [(p.start, p.stop) for p, _, _ in blocks] == [(0, 64), (64, 128), (128, 150)]
    assert all(dtype == np.float32 and converted for _, dtype, converted in blocks)
    np.testing.assert_array_equal(got["y"], want["y"])
    expected = _onnxruntime(model, {"a": a})["y"]
    if op == "MatMulInteger":
        np.testing.assert_array_equal(got["y"], expected)
    else:
        np.testing.assert_allclose(got["y"], expected, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("case", ["plain", "per_column", "unsigned"])
def test_dynamic_quantize_lstm_input_weight_by_blocks_of_columns(direction, case,
                                                                 monkeypatch, float_route):
    """At least _CONVERT_ROWS steps: X W^T from W's 8-bit columns, converted a block at a
    time (a 4 KiB "L2": blocks of 16 of W's 64 gates): the reference's result bit for
    bit, and onnxruntime's."""
    from palimpsest.backends.numpy import kernels_quant, kernels_quant_lstm

    monkeypatch.setattr(kernels_quant, "_l2_bytes", lambda: 4096)
    blocks = []
    columns = kernels_quant._weight_columns
    monkeypatch.setattr(kernels_quant_lstm, "_weight_columns", lambda *args: (
        blocks.append(part) or (part, block) for part, block in columns(*args)))
    model, feeds = _dq_lstm(direction, kernels_quant._CONVERT_ROWS + 1, 1, 12, 16, 4,
                            per_column=case == "per_column", unsigned=case == "unsigned")
    want, got, stats = _run_both(model, feeds)
    assert "graph.dynamic_quantize_lstm" not in stats.temporary_ops
    dirs = 2 if direction == "bidirectional" else 1
    assert [(p.start, p.stop) for p in blocks] == [(0, 16), (16, 32), (32, 48), (48, 64)] * dirs
    expected = _onnxruntime(model, feeds)
    for name in ("y", "y_h", "y_c"):
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
        np.testing.assert_allclose(got[name], expected[name], atol=2e-3, err_msg=name)


def test_extremes_by_blocks_as_min_and_max(monkeypatch):
    """x's min and max a cache-sized block at a time (a 1 KiB "L2": blocks of 64 float32)
    equal x.min() and x.max(), a NaN in any block propagating; an empty x gives (0, 0)."""
    from palimpsest.backends.numpy import kernels_quant

    monkeypatch.setattr(kernels_quant, "_l2_bytes", lambda: 1024)
    x = np.random.default_rng(9).normal(0, 3, (5, 41)).astype(np.float32)
    assert kernels_quant._extremes(x) == (float(x.min()), float(x.max()))
    assert kernels_quant._extremes(x[:, ::2]) == (float(x[:, ::2].min()), float(x[:, ::2].max()))
    x[4, 40] = np.nan
    assert all(np.isnan(v) for v in kernels_quant._extremes(x))
    assert kernels_quant._extremes(np.zeros((0, 3), np.float32)) == (0.0, 0.0)


@pytest.mark.parametrize("zero", [None, "per_tensor", "per_column"])
def test_weight_columns_of_one_width_from_kept_contiguous_blocks(zero, monkeypatch,
                                                                  float_route):
    """_weight_columns splits a weight into blocks of one width (384 columns, at most 256
    a block: 2 x 192, not 256 + 128) converted from contiguous 8-bit copies made once per
    constant weight and kept by its Centred: each block is b less its zero point."""
    from palimpsest.backends.numpy import kernels_quant

    depth, width = 64, 384
    monkeypatch.setattr(kernels_quant, "_l2_bytes", lambda: 16 * depth * 256)
    rng = np.random.default_rng(13)
    b = rng.integers(0, 256, (depth, width)).astype(np.uint8)
    b_zero = None if zero is None else rng.integers(
        100, 156, width if zero == "per_column" else ()).astype(np.uint8)
    b.flags.writeable = False
    if b_zero is not None:
        b_zero.flags.writeable = False
    shape = (1, -1) if zero == "per_column" else ()
    weight = quant.centred(b, b_zero, shape, (0,))
    want = b.astype(np.float32) - (0 if b_zero is None else b_zero.astype(np.float32))
    kept = []
    for _ in range(2):
        spans = []
        for columns, block in kernels_quant._weight_columns(   # (one buffer: each in turn)
                b, b_zero, weight, 255, kernels_quant._CONVERT_ROWS):
            np.testing.assert_array_equal(block, want[:, columns])
            spans.append((columns.start, columns.stop))
        assert spans == [(0, 192), (192, 384)]
        kept.append(weight.layout(("columns", (), 192), list))
    assert kept[0] is kept[1] and len(kept[0]) == 2
    assert all(part.flags.c_contiguous and part.dtype == np.uint8 for part in kept[0])
    assert quant.centred(b, b_zero, shape, (0,)) is weight
    # the 8-bit blocks were enough: no float copy of the weight was made
    assert weight._narrow is None and weight._wide is None


@pytest.mark.parametrize("a_zero", [None, 131])
@pytest.mark.parametrize("layout", ["contiguous", "strided_a", "strided_out"])
def test_matmul_integer_fast_path_on_any_layout(a_zero, layout, route):
    """The MatMulInteger fast path on a stacked A (2-D GEMMs over its flattened rows when
    A and the out are contiguous), on a strided A and into a strided out: the reference's
    result, bit for bit."""
    from palimpsest.backends.numpy import kernels_quant
    from palimpsest.dialects.graph.reference.quant import matmul_integer

    rng = np.random.default_rng(14)
    a = rng.integers(0, 256, (2, 40, 96)).astype(np.uint8)
    if layout == "strided_a":
        a = a[:, :, ::2]
    b = rng.integers(-128, 128, (a.shape[-1], 70)).astype(np.int8)
    b.flags.writeable = False
    zeros = [None if a_zero is None else np.array(a_zero, np.uint8), np.array(3, np.int8)]
    out = np.zeros((2, 40, 140 if layout == "strided_out" else 70), np.int32)
    view = out[:, :, ::2] if layout == "strided_out" else out
    assert kernels_quant._matmul_integer([a, b] + zeros, {}, [view])
    np.testing.assert_array_equal(view, matmul_integer([a, b] + zeros, {})[0])
    if layout != "strided_out":     # (oneDNN writes only a contiguous out)
        route.check()


@pytest.mark.parametrize("kernel, pads, strides", [(1, 0, 1), (3, 1, 1), (3, 1, 2)])
def test_conv_integer_one_image_one_group(kernel, pads, strides, route):
    """ConvInteger of one image and one group (one 2-D GEMM; a 1x1 unpadded conv reads
    the centred image as its columns, no copy): the reference's and onnxruntime's result,
    bit for bit."""
    rng = np.random.default_rng(15)
    x = rng.integers(0, 256, (1, 6, 9, 11)).astype(np.uint8)
    w = rng.integers(0, 256, (5, 6, kernel, kernel)).astype(np.uint8)
    graph = helper.make_graph(
        [helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"],
                          kernel_shape=[kernel, kernel], pads=[pads] * 4,
                          strides=[strides, strides])], "g",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.uint8(121), "xz"),
         numpy_helper.from_array(np.uint8(130), "wz")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    want, got, stats = _run_both(model, {"x": x})
    assert "graph.conv_integer" not in stats.temporary_ops
    route.check()
    np.testing.assert_array_equal(got["y"], want["y"])
    np.testing.assert_array_equal(got["y"], _onnxruntime(model, {"x": x})["y"])


@pytest.mark.parametrize("a_type,b_zero", [(np.uint8, "per_column"), (np.int8, "per_tensor"),
                                           (np.uint8, None)])
@pytest.mark.parametrize("op", ["MatMulInteger", "MatMulIntegerToFloat"])
def test_products_at_the_extremes_on_both_routes(op, a_type, b_zero, route):
    """Both routes, operands at their types' extremes (where an int16 pair sum would
    saturate) and a stacked A of more rows than one block: the reference's result bit
    for bit, and onnxruntime's (exactly for MatMulInteger)."""
    rng = np.random.default_rng(21)
    info = np.iinfo(a_type)
    a = rng.choice(np.array([info.min, info.max, 0, 1], a_type), (2, 150, 300))
    b = rng.choice(np.array([-128, 127, -1], np.int8), (300, 40))
    zero = {"per_column": rng.integers(-3, 4, 40).astype(np.int8),
            "per_tensor": np.int8(-2), None: np.int8(0)}[b_zero]
    a_zero = np.array(info.max if a_type == np.int8 else 3, a_type)
    model = _product_model(op, a, b, a_zero, zero, rng)
    want, got, stats = _run_both(model, {"a": a})
    assert not stats.temporary_ops
    route.check()
    np.testing.assert_array_equal(got["y"], want["y"])
    if op == "MatMulInteger" and a_type == np.uint8:    # (onnxruntime's MatMulInteger
        np.testing.assert_array_equal(got["y"], _onnxruntime(model, {"a": a})["y"])  # is u8)
    elif op != "MatMulInteger":
        np.testing.assert_allclose(got["y"], _onnxruntime(model, {"a": a})["y"], rtol=1e-6,
                                   atol=1e-3)


@pytest.mark.parametrize("x_type, w_type", [(np.uint8, np.uint8), (np.int8, np.uint8),
                                            (np.uint8, np.int8)])
def test_conv_integer_groups_and_images_on_both_routes(x_type, w_type, route):
    """Two images, two groups, stride 2 and pads (read as the x zero point), on both
    routes: the reference's result bit for bit; for uint8 x and W (a per-tensor W zero
    point) onnxruntime's too; else a per-output-channel W zero point (onnxruntime's
    ConvInteger takes neither), for int8 W one with both signs."""
    rng = np.random.default_rng(22)
    info, w_info = np.iinfo(x_type), np.iinfo(w_type)
    x = rng.integers(info.min, info.max + 1, (2, 6, 13, 12)).astype(x_type)
    w = rng.integers(w_info.min, w_info.max + 1, (8, 3, 3, 3)).astype(w_type)
    w_zero = np.uint8(131) if x_type == w_type == np.uint8 else \
        rng.integers(120, 136, 8).astype(np.uint8) if w_type == np.uint8 else \
        rng.integers(-6, 7, 8).astype(np.int8)
    graph = helper.make_graph(
        [helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], kernel_shape=[3, 3],
                          pads=[1, 0, 1, 2], strides=[2, 2], group=2)], "g",
        [helper.make_tensor_value_info("x", TensorProto.UINT8 if x_type == np.uint8
                                       else TensorProto.INT8, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [numpy_helper.from_array(w, "w"),
         numpy_helper.from_array(np.array(info.max - 5, x_type), "xz"),
         numpy_helper.from_array(w_zero, "wz")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    want, got, stats = _run_both(model, {"x": x})
    assert "graph.conv_integer" not in stats.temporary_ops
    route.check()
    np.testing.assert_array_equal(got["y"], want["y"])
    if x_type == w_type == np.uint8:
        np.testing.assert_array_equal(got["y"], _onnxruntime(model, {"x": x})["y"])


@pytest.mark.parametrize("rows,columns", [(1, 1), (1, 33), (70, 1), (3, 5)])
def test_int8_product_of_one_row_or_column(rows, columns, monkeypatch):
    """oneDNN's product where a matrix has one row or one column (numpy may give such a
    row any stride; oneDNN takes the width as its leading dimension): exact, with
    uint8 and per-column zero points."""
    from palimpsest.backends.numpy import int8_products

    route = _take_route("onednn", monkeypatch)
    rng = np.random.default_rng(23)
    a = rng.integers(0, 256, (rows, 77)).astype(np.uint8)
    b = rng.integers(0, 256, (77, columns)).astype(np.uint8)
    b_zero = rng.integers(0, 256, columns).astype(np.uint8)
    out = np.empty((rows, columns), np.int32)
    int8_products.product(a, 9, int8_products.Int8Weight(b, b_zero), out)
    route.check()
    np.testing.assert_array_equal(out, (a.astype(np.int64) - 9) @ (b.astype(np.int64)
                                                                   - b_zero.astype(np.int64)))


@pytest.mark.parametrize("epilogue", ["int32", "common scale", "column scales",
                                      "column scales and bias"])
def test_packed_int8_product_exact(epilogue, monkeypatch):
    """oneDNN's matmul on a packed weight: the exact product less a's zero point, into
    int32, or rounded once to float32, times the scales (one, or one per column) and plus
    the bias as numpy's float32 operations (oneDNN's epilogue keeps them two roundings:
    values checked bit for bit), on a's extremes."""
    from palimpsest.backends.numpy import int8_products

    _take_route("onednn", monkeypatch)
    rng = np.random.default_rng(31)
    a = rng.choice(np.array([0, 1, 254, 255], np.uint8), (37, 300))
    b = rng.integers(-128, 128, (300, 50)).astype(np.int8)
    weight = int8_products.Int8Weight(b, None)
    exact = ((a.astype(np.int64) - 7) @ b.astype(np.int64)).astype(np.int32)
    scales = bias = None
    if epilogue == "int32":
        out, want = np.empty((37, 50), np.int32), exact
    else:
        scales = rng.uniform(1e-4, 1e-2, 1 if epilogue == "common scale" else 50) \
            .astype(np.float32)
        want = exact.astype(np.float32) * scales
        if "bias" in epilogue:
            bias = rng.standard_normal(50).astype(np.float32)
            want = want + bias
        out = np.empty((37, 50), np.float32)
    assert int8_products.packed_product(a, 7, weight, out, scales, bias)
    np.testing.assert_array_equal(out, want)


def test_packed_int8_product_keeps_a_few_copies_and_leaves_zero_points(monkeypatch):
    """A weight keeps packed copies for PACKED_KINDS row counts, then leaves other row
    counts to the plain GEMM (False, nothing written) while its packed ones still run;
    a single row (a vector-matrix product) and a weight with zero points of its own are
    never packed."""
    from palimpsest.backends.numpy import int8_products

    _take_route("onednn", monkeypatch)
    rng = np.random.default_rng(32)
    b = rng.integers(-128, 128, (64, 16)).astype(np.int8)
    weight = int8_products.Int8Weight(b, None)
    first = int8_products.PACKED_ROWS_FROM
    for rows in range(first - 1, first + int8_products.PACKED_KINDS + 1):
        a = rng.integers(0, 256, (rows, 64)).astype(np.uint8)
        out = np.full((rows, 16), -1, np.int32)
        done = int8_products.packed_product(a, 3, weight, out)
        assert done == (first <= rows < first + int8_products.PACKED_KINDS)
        if done:
            np.testing.assert_array_equal(out, (a.astype(np.int64) - 3) @ b.astype(np.int64))
        else:
            assert (out == -1).all()
    assert len(weight.packed) == int8_products.PACKED_KINDS
    assert int8_products.packed_product(a[:first], 3, weight, out[:first])
    zero_points = int8_products.Int8Weight(b, rng.integers(-3, 4, 16).astype(np.int8))
    assert not int8_products.packed_product(a, 3, zero_points, out)


def test_onednn_threads_one_for_small_products_configured_for_large(monkeypatch):
    """A product below PARALLEL_MIN multiply-adds runs on one OpenMP thread, a larger
    one on the count set_threads configured; the count is set only when it changes."""
    from palimpsest.backends import onednn

    if not onednn.available():
        pytest.skip(f"oneDNN is not usable here ({onednn.summary()})")
    counts = []
    monkeypatch.setattr(onednn, "_omp_set_num_threads", lambda: counts.append)
    monkeypatch.setitem(onednn._THREADS, "configured", None)
    monkeypatch.setitem(onednn._THREADS, "current", None)
    assert onednn.set_threads(2) == 2
    for work in (10, 20, onednn.PARALLEL_MIN, 2 * onednn.PARALLEL_MIN, 30):
        onednn._threads_for(work)
    assert counts == [1, 2, 1]


def test_prepared_weights_on_huge_page_chunks():
    """Weights prepared once lie in 2 MiB-aligned chunks (backends/host.py), 64-byte
    aligned, side by side without overlapping; a large Int8Weight's rows are such an
    array (a chunk of their own past half a chunk) and hold b's transpose, uint8 flipped
    to int8."""
    from palimpsest.backends import host
    from palimpsest.backends.host import HUGE_PAGES_FROM
    from palimpsest.backends.numpy.int8_products import Int8Weight

    arrays = [host.huge_page_empty(shape, dtype) for shape, dtype in
              [((3, 5), np.int8), ((7,), np.int32), ((1000, 300), np.uint8), ((2,), np.float32)]]
    for index, array in enumerate(arrays):
        assert array.flags.c_contiguous and array.ctypes.data % 64 == 0
        array.fill(index + 1)
    for index, array in enumerate(arrays):
        assert np.all(array == index + 1)
    big = host.huge_page_empty((host._CHUNK,), np.uint8)
    assert big.ctypes.data % host._HUGE_PAGE == 0
    rng = np.random.default_rng(1)
    b = rng.integers(0, 256, (512, HUGE_PAGES_FROM // 512 + 8)).astype(np.uint8)
    weight = Int8Weight(b, None)
    assert weight.rows.dtype == np.int8 and weight.rows.flags.c_contiguous
    np.testing.assert_array_equal(weight.rows.astype(np.int16), b.T.astype(np.int16) - 128)
    assert not weight.rows.flags.owndata    # (a view of its chunk)


def test_matmul_integer_to_float_bound_call_follows_each_run(monkeypatch):
    """MatMulIntegerToFloat on a packed weight is bound once to its arrays
    (kernels_quant._bind_packed) and made again while they are the same objects: runs on
    new inputs (A, its scale and zero point from DynamicQuantizeLinear; an int8 A with
    a run-time bias) stay bit for bit the reference's, and the packed weights are looked
    up on the first run only."""
    from palimpsest.backends import onednn
    from palimpsest.backends.numpy import int8_products
    from palimpsest.backends.numpy.session import Session
    from palimpsest.backends.reference.executor import run as run_graph
    from palimpsest.backends.binding import find_function
    from palimpsest.dialects.graph.from_onnx import import_onnx

    if not onednn.available():
        pytest.skip(f"oneDNN is not usable here ({onednn.summary()})")
    lookups = []
    packed = int8_products.packed
    monkeypatch.setattr(int8_products, "packed",
                        lambda *args: lookups.append(args[1]) or packed(*args))
    rng = np.random.default_rng(4)
    w = rng.integers(-128, 128, (64, 128)).astype(np.int8)
    consts = {"w": w, "ws": rng.uniform(0.001, 0.01, 128).astype(np.float32),
              "wb": rng.normal(0, 1, 128).astype(np.float32),
              "a8z": np.array(-3, np.int8), "a8s": np.array(0.05, np.float32)}
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulIntegerToFloat", ["xq", "w", "xs", "ws", "xz", "", "wb"],
                              ["y"], domain="com.microsoft"),
             helper.make_node("MatMulIntegerToFloat", ["a8", "w", "a8s", "ws", "a8z", "",
                                                       "bias"], ["y8"], domain="com.microsoft")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 64]),
                     helper.make_tensor_value_info("a8", TensorProto.INT8, [8, 64]),
                     helper.make_tensor_value_info("bias", TensorProto.FLOAT, [128])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "y8")],
        [numpy_helper.from_array(v, n) for n, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    session = Session(import_onnx(model))
    reference = find_function(import_onnx(model), None)
    feeds = {"x": np.empty((1, 8, 64), np.float32), "a8": np.empty((8, 64), np.int8),
             "bias": np.empty(128, np.float32)}
    for run in range(5):   # the same input arrays refilled, no result held across runs
        feeds["x"][...] = rng.normal(0, run + 1, (1, 8, 64))
        feeds["a8"][...] = rng.integers(-128, 128, (8, 64))
        feeds["bias"][...] = rng.normal(0, 1, 128)
        got, want = session.run(feeds), run_graph(reference, feeds)
        for name in ("y", "y8"):
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{name} run {run}")
        del got
    # each product's packed weight looked up once (the first run's arenas are not the
    # next one's: the second run binds again)
    assert len(lookups) <= 4
