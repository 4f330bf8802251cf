"""graph.matmul_integer_to_float (com.microsoft MatMulIntegerToFloat): the canonicalize
rules that make it from onnxruntime's dynamically quantized MatMul
(dialects/graph/canonicalize_quant.py), its reference kernel and its numpy fast path,
bit for bit against the unfused chain's reference run and within tolerance of
onnxruntime; the contrib op imported directly, against onnxruntime running it."""

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
from palimpsest.passes.pass_manager import PassManager, parse_pipeline  # noqa: E402

FUSED = "graph.matmul_integer_to_float"
CHAIN = ("graph.matmul_integer", "graph.cast", "graph.mul", "graph.add")


def _names(module) -> list:
    return [op.name for op in find_function(module, None).walk()
            if op.name.startswith("graph.") and op.name != "graph.constant"]


def _reference(model, pipeline):
    module = import_onnx(model)
    PassManager(parse_pipeline(pipeline)).run(module)
    return module


def _runs(model, feeds):
    """(the unfused chain's reference run, the canonicalized graph's reference run, the
    planned numpy run of the canonicalized graph, its stats, the canonicalized ops)."""
    from test_kernels import lower

    unfused = run_graph(find_function(_reference(model, "infer-shapes"), None), feeds)
    canonical = _reference(model, "infer-shapes,canonicalize")
    fused = run_graph(find_function(canonical, None), feeds)
    got, stats = run_with_stats(
        find_function(lower(import_onnx(model), "infer-shapes,canonicalize,bufferize,"
                            "lower-to-kernels,insert-deallocs"), None), feeds, poison=True)
    return unfused, fused, got, stats, _names(canonical)


def _onnxruntime(model, feeds, optimize=False):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in model.graph.output], session.run(None, feeds)))


def _assert_bit_identical(*runs):
    first = runs[0]
    for run in runs[1:]:
        assert list(run) == list(first)
        for name, value in first.items():
            assert run[name].dtype == value.dtype, name
            np.testing.assert_array_equal(run[name], value, err_msg=name)


def _quantized_by_onnxruntime(tmp_path, weight_type, per_channel, bias, k=64, n=24):
    """A float MatMul (+ bias Add) quantized by onnxruntime's own tool, dynamically:
    DynamicQuantizeLinear, MatMulInteger, Cast, Mul(Cast, Mul(x_scale, W_scale)), Add."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(1)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m" if bias else "y"])]
    inits = [numpy_helper.from_array(rng.normal(0, 0.1, (k, n)).astype(np.float32), "w")]
    if bias:
        nodes.append(helper.make_node("Add", ["m", "bias"], ["y"]))
        inits.append(numpy_helper.from_array(rng.normal(0, 0.1, n).astype(np.float32),
                                             "bias"))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    source, target = tmp_path / "float.onnx", tmp_path / "int8.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              str(source))
    quantize_dynamic(str(source), str(target), per_channel=per_channel,
                     weight_type={"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}[
                         weight_type])
    model = onnx.load(str(target))
    kinds = [node.op_type for node in model.graph.node]
    assert {"DynamicQuantizeLinear", "MatMulInteger", "Cast"} <= set(kinds), kinds
    return model


@pytest.mark.parametrize("weight_type", ["int8", "uint8"])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_onnxruntime_quantizer_chain_fused(tmp_path, weight_type, per_channel, bias):
    """The chain onnxruntime's quantize_dynamic writes becomes one op, and each run of it
    (reference kernel, numpy fast path) equals the unfused chain's reference run bit
    for bit, and onnxruntime within tolerance."""
    model = _quantized_by_onnxruntime(tmp_path, weight_type, per_channel, bias)
    feeds = {"x": np.random.default_rng(2).normal(0, 1, (1, 5, 64)).astype(np.float32)}
    unfused, fused, got, stats, names = _runs(model, feeds)
    assert names.count(FUSED) == 1 and not set(CHAIN) & set(names), names
    assert FUSED not in stats.temporary_ops
    _assert_bit_identical(unfused, fused, got)
    np.testing.assert_allclose(got["y"], _onnxruntime(model, feeds)["y"], rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(got["y"], _onnxruntime(model, feeds, optimize=True)["y"],
                               rtol=1e-4, atol=1e-4)


def _chain(a_type, w, w_zero, w_scale, *, bias=None, a_zero=True, extra_outputs=(),
           scale_first=False, bias_first=False, a_shape=(2, 3, 16)):
    """DynamicQuantizeLinear(x) or a quantized input `a`, then MatMulInteger, Cast and
    the scale Muls, as onnxruntime's quantizer writes them (operand orders optional)."""
    nodes, inits = [], [numpy_helper.from_array(w, "w"),
                        numpy_helper.from_array(w_scale, "ws")]
    if a_type == "dql":
        nodes.append(helper.make_node("DynamicQuantizeLinear", ["x"], ["a", "as", "az"]))
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(a_shape))]
    else:
        inputs = [helper.make_tensor_value_info("a", a_type, list(a_shape)),
                  helper.make_tensor_value_info("as", TensorProto.FLOAT, [])]
        if a_zero:
            inputs.append(helper.make_tensor_value_info("az", a_type, []))
    zeros = ["az" if a_zero else ""]
    if w_zero is not None:
        inits.append(numpy_helper.from_array(w_zero, "wz"))
        zeros.append("wz")
    while zeros and not zeros[-1]:
        zeros.pop()
    nodes += [helper.make_node("MatMulInteger", ["a", "w"] + zeros, ["p"]),
              helper.make_node("Cast", ["p"], ["c"], to=TensorProto.FLOAT),
              helper.make_node("Mul", ["as", "ws"], ["s"]),
              helper.make_node("Mul", ["s", "c"] if scale_first else ["c", "s"],
                               ["m" if bias is not None else "y"])]
    if bias is not None:
        inits.append(numpy_helper.from_array(bias, "bias"))
        nodes.append(helper.make_node("Add", ["bias", "m"] if bias_first else ["m", "bias"],
                                      ["y"]))
    outputs = [helper.make_tensor_value_info(
        name, TensorProto.INT32 if name == "p" else TensorProto.FLOAT, None)
        for name in ("y",) + tuple(extra_outputs)]
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _weights(rng, dtype, k=16, n=8):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, (k, n)).astype(dtype)


@pytest.mark.parametrize("w_dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("w_zero", ["none", "tensor", "column"])
@pytest.mark.parametrize("w_scale", ["tensor", "column"])
def test_chain_variants_fused_bit_identical(w_dtype, w_zero, w_scale):
    """Zero points absent, per tensor or per column; scales per tensor or per column;
    int8 or uint8 weights; the Mul and Add operands either way round."""
    rng = np.random.default_rng(3)
    w = _weights(rng, w_dtype)
    zero = {"none": None, "tensor": np.array(3, w_dtype),
            "column": rng.integers(0, 5, 8).astype(w_dtype)}[w_zero]
    scale = (np.array(0.02, np.float32) if w_scale == "tensor"
             else rng.uniform(0.01, 0.05, 8).astype(np.float32))
    bias = rng.normal(0, 1, 8).astype(np.float32)
    model = _chain("dql", w, zero, scale, bias=bias, scale_first=w_zero == "tensor",
                   bias_first=w_dtype == np.uint8)
    feeds = {"x": rng.normal(0, 2, (2, 3, 16)).astype(np.float32)}
    unfused, fused, got, stats, names = _runs(model, feeds)
    assert names == ["graph.dynamic_quantize_linear", FUSED], names
    assert FUSED not in stats.temporary_ops
    _assert_bit_identical(unfused, fused, got)
    np.testing.assert_allclose(got["y"], _onnxruntime(model, feeds)["y"], rtol=1e-5,
                               atol=1e-5)


def test_cast_rounds_above_2_24_as_the_chain():
    """Products past 2**24 round when cast to float32; the fused op rounds them the
    same (here the GEMM runs in float64 and is rounded once into the float32 out)."""
    k = 2048
    a = np.full((1, 4, k), 255, np.uint8)
    a[0, 1, ::3] = 0
    w = np.full((k, 5), 127, np.int8)
    w[::7, 1] = -128
    model = _chain(TensorProto.UINT8, w, None, np.array(1.0, np.float32), a_zero=False,
                   a_shape=(1, 4, k))
    feeds = {"a": a, "as": np.array(1.0, np.float32)}
    unfused, fused, got, stats, names = _runs(model, feeds)
    assert names == [FUSED]
    exact = a[0].astype(np.int64) @ w.astype(np.int64)
    assert (exact > 2 ** 24).any() and (exact.astype(np.float32) != exact).any()
    _assert_bit_identical(unfused, fused, got)
    np.testing.assert_array_equal(got["y"][0], exact.astype(np.float32))


@pytest.mark.parametrize("l2", [None, 4096])
def test_fast_path_blocks_of_rows(l2, monkeypatch):
    """A large A a cache-sized block of rows at a time (a 4 KiB "L2": blocks of 4 rows,
    the last one short), each block scaled and biased while cached: bit for bit."""
    from palimpsest.backends.numpy import kernels_quant

    if l2 is not None:
        monkeypatch.setattr(kernels_quant, "_l2_bytes", lambda: l2)
    rng = np.random.default_rng(4)
    w = _weights(rng, np.int8, 64, 6)
    model = _chain("dql", w, np.array([1, -2, 0, 3, 0, 5], np.int8),
                   rng.uniform(0.01, 0.05, 6).astype(np.float32),
                   bias=rng.normal(0, 1, 6).astype(np.float32), a_shape=(3, 5, 64))
    feeds = {"x": rng.normal(0, 2, (3, 5, 64)).astype(np.float32)}
    unfused, fused, got, stats, names = _runs(model, feeds)
    assert names == ["graph.dynamic_quantize_linear", FUSED]
    assert FUSED not in stats.temporary_ops
    _assert_bit_identical(unfused, fused, got)


@pytest.mark.parametrize("other_use", ["product", "cast", "scaled"])
def test_declines_where_an_intermediate_has_another_use(other_use):
    """The int32 product used elsewhere: nothing fuses. The cast used elsewhere: it
    becomes the fused op with unit scales (exact), the Mul stays. The scaled product
    used elsewhere: the bias Add stays. Every output as the unfused chain's."""
    rng = np.random.default_rng(5)
    extra = {"product": "p", "cast": "c", "scaled": "m"}[other_use]
    model = _chain("dql", _weights(rng, np.int8), None, np.array(0.03, np.float32),
                   bias=rng.normal(0, 1, 8).astype(np.float32), extra_outputs=(extra,))
    feeds = {"x": rng.normal(0, 2, (2, 3, 16)).astype(np.float32)}
    unfused, fused, got, _, names = _runs(model, feeds)
    expected = {"product": ["graph.matmul_integer", "graph.cast", "graph.mul",
                            "graph.add"],
                "cast": [FUSED, "graph.mul", "graph.add"],
                "scaled": [FUSED, "graph.add"]}[other_use]
    assert [n for n in names if n not in ("graph.dynamic_quantize_linear",
                                          "graph.mul")] \
        == [n for n in expected if n != "graph.mul"], names
    assert ("graph.mul" in names) == (other_use != "scaled"), names
    _assert_bit_identical(unfused, fused, got)


def test_declines_a_scale_per_row():
    """A scale along the rows (not per tensor or per column) is left to the Mul."""
    rng = np.random.default_rng(6)
    model = _chain("dql", _weights(rng, np.int8), None,
                   rng.uniform(0.01, 0.05, (3, 1)).astype(np.float32))
    feeds = {"x": rng.normal(0, 2, (2, 3, 16)).astype(np.float32)}
    unfused, fused, got, _, names = _runs(model, feeds)
    assert names.count("graph.mul") == 2 and FUSED in names, names
    _assert_bit_identical(unfused, fused, got)


def _contrib(a, b, a_scale, b_scale, a_zero=None, b_zero=None, bias=None):
    """One com.microsoft MatMulIntegerToFloat node, A a graph input, the rest constants."""
    names, inits = ["a", "b", "as", "bs"], [numpy_helper.from_array(b, "b"),
                                          numpy_helper.from_array(a_scale, "as"),
                                          numpy_helper.from_array(b_scale, "bs")]
    for name, value in (("az", a_zero), ("bz", b_zero), ("bias", bias)):
        names.append(name if value is not None else "")
        if value is not None:
            inits.append(numpy_helper.from_array(value, name))
    while not names[-1]:
        names.pop()
    node = helper.make_node("MatMulIntegerToFloat", names, ["y"], domain="com.microsoft")
    a_type = helper.np_dtype_to_tensor_dtype(a.dtype)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("a", a_type, list(a.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.parametrize("case", ["plain", "zero_points", "column", "bias"])
def test_contrib_op_imported_as_onnxruntime_runs_it(case):
    """com.microsoft MatMulIntegerToFloat imports as the graph op; the reference and
    the fast path agree bit for bit and with onnxruntime within tolerance."""
    rng = np.random.default_rng(7)
    a = rng.integers(0, 256, (2, 7, 32)).astype(np.uint8)
    b = rng.integers(-128, 128, (32, 12)).astype(np.int8)
    args = {"a_zero": np.array(131, np.uint8)} if case != "plain" else {}
    if case in ("zero_points", "column", "bias"):
        args["b_zero"] = (np.array(2, np.int8) if case == "zero_points"
                          else rng.integers(-3, 4, 12).astype(np.int8))
    b_scale = (rng.uniform(0.001, 0.01, 12) if case in ("column", "bias")
               else np.array(0.004)).astype(np.float32)
    if case == "bias":
        args["bias"] = rng.normal(0, 1, 12).astype(np.float32)
    model = _contrib(a, b, np.array(0.02, np.float32), b_scale, **args)
    feeds = {"a": a}
    module = import_onnx(model)
    assert _names(module) == [FUSED]
    from test_kernels import lower

    want = run_graph(find_function(_reference(model, "infer-shapes"), None), feeds)
    got, stats = run_with_stats(find_function(lower(import_onnx(model)), None), feeds,
                                poison=True)
    assert FUSED not in stats.temporary_ops
    _assert_bit_identical(want, got)
    np.testing.assert_allclose(got["y"], _onnxruntime(model, feeds)["y"], rtol=1e-5,
                               atol=1e-4)


def test_float16_chain_fused_bit_identical():
    """A cast to float16 and float16 scales: the reference kernel's steps round in
    float16 as the chain's (the numpy fast path leaves it to the reference)."""
    rng = np.random.default_rng(8)
    nodes = [helper.make_node("MatMulInteger", ["a", "w"], ["p"]),
             helper.make_node("Cast", ["p"], ["c"], to=TensorProto.FLOAT16),
             helper.make_node("Mul", ["as", "ws"], ["s"]),
             helper.make_node("Mul", ["c", "s"], ["m"]),
             helper.make_node("Add", ["m", "bias"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("a", TensorProto.INT8, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)],
        [numpy_helper.from_array(_weights(rng, np.int8), "w"),
         numpy_helper.from_array(np.array(0.0123, np.float16), "as"),
         numpy_helper.from_array(rng.uniform(0.01, 0.05, 8).astype(np.float16), "ws"),
         numpy_helper.from_array(rng.normal(0, 1, 8).astype(np.float16), "bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"a": rng.integers(-128, 128, (4, 16)).astype(np.int8)}
    unfused, fused, got, _, names = _runs(model, feeds)
    assert names == [FUSED]
    _assert_bit_identical(unfused, fused, got)


@pytest.mark.parametrize("scale,bias,error", [
    ("tensor<1x6xf32>", "tensor<6xf32>", None),
    ("tensor<5x6xf32>", "tensor<6xf32>", None),
    ("tensor<3x6xf32>", "tensor<6xf32>", "'b_scale' must broadcast into the 5x6 product"),
    ("tensor<f32>", "tensor<f16>", "must have the same element type")])
def test_verifier_scales_and_bias(scale, bias, error):
    """The scales and the bias broadcast into the product without growing it, in one
    float type."""
    from palimpsest.dialects import load_all
    from palimpsest.ir.diagnostics import DiagnosticError
    from palimpsest.ir.parser import parse
    from palimpsest.ir.verifier import verify

    load_all()
    text = f"""func.func @f(%a: tensor<5x8xi8>, %b: tensor<8x6xi8>, %s: tensor<f32>,
        %t: {scale}, %c: {bias}) -> tensor<5x6xf32> {{
      %y = graph.matmul_integer_to_float %a, %b, %s, %t, %c {{operandSegmentSizes =
        array<i32: 1, 1, 1, 1, 0, 0, 1>}} : (tensor<5x8xi8>, tensor<8x6xi8>, tensor<f32>,
        {scale}, {bias}) -> tensor<5x6xf32>
      func.return %y : tensor<5x6xf32>
    }}"""
    if error is None:
        verify(parse(text, "f.pal"))
    else:
        with pytest.raises(DiagnosticError, match=error):
            verify(parse(text, "f.pal"))
