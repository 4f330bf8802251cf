"""float16 at the kernel level (passes/lower_to_kernels.py, `_f16_in_f32`): a float16
compute with a float32 kernel runs as onnxruntime's CPU provider runs it — its f16 ins
cast to f32 (constants once, at compile time), the f32 kernel, and its result rounded
back to f16 only where an f16 reader needs it (between two such computes onnxruntime
drops the cast pair) — so both backends run kernels, not the graph reference, and the
results are onnxruntime's. Each model: the lowered IR (no `kernel.generic` but the casts, no cast
of a constant), the numpy backend and the OpenCL backend with poisoning against
onnxruntime and the graph-level reference, and the same model with the lifting off."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from palimpsest.backends.binding import find_function  # noqa: E402
from palimpsest.backends.numpy.session import Session  # noqa: E402
from palimpsest.backends.reference.executor import run as run_graph  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402
from palimpsest.passes.pass_manager import PassManager, parse_pipeline  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from example_models import onnxruntime_run  # noqa: E402
from opencl_support import compare_backends, requires_opencl  # noqa: E402

H = np.float16
PIPELINE = "infer-shapes,canonicalize,bufferize,lower-to-kernels{f16-in-f32=%s}"


def _rng(seed):
    return np.random.default_rng(seed)


def _model(nodes, inputs: dict, constants: dict, outputs=("y",)):
    graph = helper.make_graph(
        [helper.make_node(op, ins, outs, **attrs) for op, ins, outs, attrs in nodes], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT16, list(a.shape))
         for n, a in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT16, None) for n in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), inputs


def conv_bn_swish():
    """Conv (bias) -> BatchNorm -> SiLU (Sigmoid, Mul) -> + X: the BN folds into the
    conv's f16 weights (canonicalize), the SiLU is one step."""
    r = _rng(1)
    x = (r.standard_normal((1, 6, 10, 10)) * 2).astype(H)
    constants = {"w": (r.standard_normal((6, 6, 3, 3)) * 0.3).astype(H),
                 "b": r.standard_normal(6).astype(H),
                 "s": (r.standard_normal(6) * 0.5 + 1).astype(H),
                 "bb": r.standard_normal(6).astype(H),
                 "m": r.standard_normal(6).astype(H),
                 "v": np.abs(r.standard_normal(6) + 1).astype(H)}
    return _model([("Conv", ["x", "w", "b"], ["c"], {"pads": [1, 1, 1, 1]}),
                   ("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"], {}),
                   ("Sigmoid", ["n"], ["g"], {}), ("Mul", ["n", "g"], ["a"], {}),
                   ("Add", ["a", "x"], ["y"], {})], {"x": x}, constants)


def conv_bn():
    """Conv -> BatchNorm alone: bit for bit onnxruntime's (its ConvBNFusion's f16
    arithmetic, then the conv in f32 rounded once)."""
    r = _rng(2)
    x = (r.standard_normal((1, 3, 8, 8)) * 3).astype(H)
    constants = {"w": (r.standard_normal((4, 3, 3, 3)) * 0.3).astype(H),
                 "s": (r.standard_normal(4) * 0.5 + 1).astype(H),
                 "bb": r.standard_normal(4).astype(H), "m": r.standard_normal(4).astype(H),
                 "v": np.abs(r.standard_normal(4) + 1).astype(H)}
    return _model([("Conv", ["x", "w"], ["c"], {"pads": [1, 1, 1, 1]}),
                   ("BatchNormalization", ["c", "s", "bb", "m", "v"], ["y"],
                    {"epsilon": 1e-3})], {"x": x}, constants)


def squeeze_excite():
    """Depthwise conv -> ReLU -> GlobalAveragePool -> 1x1 conv -> Sigmoid -> Mul back
    into the features, strided max pool: X's f32 copy serves the pool and the mul."""
    r = _rng(3)
    x = r.standard_normal((1, 8, 12, 12)).astype(H)
    constants = {"dw": (r.standard_normal((8, 1, 3, 3)) * 0.5).astype(H),
                 "se": (r.standard_normal((8, 8, 1, 1)) * 0.5).astype(H),
                 "sb": r.standard_normal(8).astype(H)}
    return _model([("Conv", ["x", "dw"], ["d"], {"pads": [1, 1, 1, 1], "group": 8}),
                   ("Relu", ["d"], ["r"], {}),
                   ("GlobalAveragePool", ["r"], ["p"], {}),
                   ("Conv", ["p", "se", "sb"], ["q"], {}), ("Sigmoid", ["q"], ["g"], {}),
                   ("Mul", ["r", "g"], ["m"], {}),
                   ("MaxPool", ["m"], ["y"], {"kernel_shape": [2, 2], "strides": [2, 2]})],
                  {"x": x}, constants)


def matmuls():
    """MatMul + bias -> Tanh, Gemm (transB, alpha), Softmax, LayerNormalization."""
    r = _rng(4)
    x = r.standard_normal((5, 16)).astype(H)
    constants = {"k": (r.standard_normal((16, 8)) * 0.3).astype(H),
                 "kb": r.standard_normal(8).astype(H),
                 "g": (r.standard_normal((8, 8)) * 0.3).astype(H),
                 "gc": r.standard_normal(8).astype(H),
                 "ls": r.standard_normal(8).astype(H), "lb": r.standard_normal(8).astype(H)}
    return _model([("MatMul", ["x", "k"], ["mm"], {}), ("Add", ["mm", "kb"], ["ab"], {}),
                   ("Tanh", ["ab"], ["t"], {}),
                   ("Gemm", ["t", "g", "gc"], ["gm"], {"transB": 1, "alpha": 0.5}),
                   ("Softmax", ["gm"], ["sm"], {"axis": -1}),
                   ("LayerNormalization", ["sm", "ls", "lb"], ["y"], {"axis": -1})],
                  {"x": x}, constants)


def elementwise():
    """Two inputs through add, mul (in place: x * x), div, max, clip, neg, abs, exp."""
    r = _rng(5)
    a = r.standard_normal((3, 4, 5)).astype(H)
    b = (r.standard_normal((4, 5)) + 3).astype(H)
    constants = {"lo": H(-1.5), "hi": H(2.25)}
    return _model([("Add", ["a", "b"], ["s"], {}), ("Mul", ["s", "s"], ["q"], {}),
                   ("Div", ["q", "b"], ["d"], {}), ("Max", ["d", "a"], ["m"], {}),
                   ("Clip", ["m", "lo", "hi"], ["c"], {}), ("Neg", ["c"], ["n"], {}),
                   ("Abs", ["n"], ["v"], {}), ("Exp", ["v"], ["e"], {}),
                   ("Sub", ["e", "a"], ["y"], {})], {"a": a, "b": b}, constants)


MODELS = {"conv_bn_swish": conv_bn_swish, "conv_bn": conv_bn,
          "squeeze_excite": squeeze_excite, "matmuls": matmuls, "elementwise": elementwise}


def _onnxruntime(model, feeds):
    pytest.importorskip("onnxruntime")
    return onnxruntime_run(model, feeds)


def _reference(model, feeds):
    graph = import_onnx(model)
    PassManager(parse_pipeline("infer-shapes")).run(graph)
    return run_graph(find_function(graph, None), feeds)


def _lowered(model, lift: bool = True):
    module = import_onnx(model)
    PassManager(parse_pipeline(PIPELINE % ("true" if lift else "false"))).run(module)
    return module


def _close(got, want, name):
    """Within a unit or two in the last place of f16 (onnxruntime's sigmoid, exp and
    tanh are approximations; its sums run in another order)."""
    assert got.dtype == np.float16, name
    got, want = got.astype(np.float32), want.astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3 * max(1.0, np.abs(want).max()),
                               err_msg=name)


@pytest.mark.parametrize("name", list(MODELS))
def test_lowered_to_kernels_with_casts(name):
    """Every compute a kernel: `kernel.generic` only for the casts, none of which reads
    a constant (weights are converted once, at compile time), and every kernel but the
    movers computes f32."""
    model, _ = MODELS[name]()
    module = _lowered(model)
    kernels = [op for op in module.walk() if op.name.startswith("kernel.")]
    generic = [op for op in kernels if op.name == "kernel.generic"]
    assert generic and all(op.properties["op"].value == "graph.cast" for op in generic)
    assert all(op.operands[0].op is None or op.operands[0].op.name != "buffer.constant"
               for op in generic if hasattr(op.operands[0], "op"))
    for op in kernels:
        if op.name not in ("kernel.generic", "kernel.transpose", "kernel.concat"):
            assert all(str(v.type.element_type) == "f32" for v in op.operands), op.name
    unlifted = [op for op in _lowered(model, lift=False).walk() if op.name == "kernel.generic"]
    assert any(op.properties["op"].value != "graph.cast" for op in unlifted)


@pytest.mark.parametrize("name", list(MODELS))
def test_numpy_matches_onnxruntime_and_the_reference(name):
    model, feeds = MODELS[name]()
    got = Session(import_onnx(model), poison=True).run(feeds)
    for expected in (_onnxruntime(model, feeds), _reference(model, feeds)):
        for key, want in expected.items():
            _close(got[key], want, key)


def test_conv_batch_norm_is_onnxruntimes_bit_for_bit():
    model, feeds = conv_bn()
    got = Session(import_onnx(model), poison=True).run(feeds)["y"]
    np.testing.assert_array_equal(got, _onnxruntime(model, feeds)["y"])


def test_a_lifted_result_is_read_unrounded():
    """squeeze-excite: the depthwise conv and its ReLU fold, and their f32 result is what
    the pool and the mul read (no rounding to f16 and back between them, as onnxruntime
    removes that cast pair); the max pool reads the mul's f32 result, and the one cast
    left rounds the function's result."""
    model, _ = squeeze_excite()
    module = _lowered(model)
    ops = list(module.walk())
    (conv,) = [op for op in ops if op.name == "kernel.conv2d" and op.config()["group"] == 8]
    assert conv.config()["epilogue"] == ["graph.relu"]
    d = conv.outs[0]
    (reduce,) = [op for op in ops if op.name == "kernel.reduce"]
    (mul,) = [op for op in ops if op.name == "kernel.elementwise"
              and op.config()["steps"] == ["graph.mul"]]
    assert reduce.ins[0] is d and d in list(mul.ins)
    (pool,) = [op for op in ops if op.name == "kernel.pool2d"]
    assert pool.ins[0] is mul.outs[0]
    casts = [op for op in ops if op.name == "kernel.generic"]
    assert [str(c.operands[1].type.element_type) for c in casts] == ["f32", "f16"]
    assert casts[1].operands[0] is pool.outs[0]


def test_a_chain_rounds_once_as_onnxruntime():
    """x * a + b, times c: onnxruntime computes the chain in f32 and rounds once, so the
    result is its to the bit; rounding after each op would differ."""
    r = _rng(6)
    x = (r.standard_normal((4, 257)) * 3).astype(H)
    constants = {"a": H(1.1), "b": H(0.3), "c": H(-2.7)}
    model, feeds = _model([("Mul", ["x", "a"], ["p"], {}), ("Add", ["p", "b"], ["q"], {}),
                           ("Mul", ["q", "c"], ["y"], {})], {"x": x}, constants)
    want = _onnxruntime(model, feeds)["y"]
    f = np.float32
    per_op = ((x.astype(f) * f(H(1.1))).astype(H).astype(f) + f(H(0.3))).astype(H)
    per_op = (per_op.astype(f) * f(H(-2.7))).astype(H)
    assert np.any(per_op != want)   # the test tells the two apart
    got = Session(import_onnx(model), poison=True).run(feeds)["y"]
    np.testing.assert_array_equal(got, want)


def test_a_pad_between_lifted_ops_moves_f32():
    """x * a, padded, + b: the pad between two lifted ops runs on their f32 values, as
    onnxruntime runs such an isolated node in f32; one cast in, one out, and the result
    is onnxruntime's to the bit."""
    r = _rng(7)
    x = (r.standard_normal((1, 3, 5, 7)) * 3).astype(H)
    constants = {"a": H(1.1), "b": H(0.3), "pads": np.array([0, 0, 1, 2, 0, 0, 2, 1]),
                 "v": H(0.7)}
    model, feeds = _model([("Mul", ["x", "a"], ["p"], {}),
                           ("Pad", ["p", "pads", "v"], ["q"], {}),
                           ("Add", ["q", "b"], ["y"], {})], {"x": x}, constants)
    ops = list(_lowered(model).walk())
    (pad,) = [op for op in ops if op.name == "kernel.pad"]
    assert str(pad.ins[0].type.element_type) == "f32"
    assert len([op for op in ops if op.name == "kernel.generic"]) == 2
    got = Session(import_onnx(model), poison=True).run(feeds)["y"]
    np.testing.assert_array_equal(got, _onnxruntime(model, feeds)["y"])


@pytest.mark.parametrize("name", list(MODELS))
def test_without_lifting_the_same_numbers(name):
    """`f16-in-f32=false`: the graph reference runs them (kernel.generic), as before."""
    model, feeds = MODELS[name]()
    module = import_onnx(model)
    session = Session(module, poison=True,
                      pipeline="infer-shapes,canonicalize,bufferize,"
                               "lower-to-kernels{f16-in-f32=false},insert-deallocs,plan-memory")
    got = session.run(feeds)
    for key, want in _onnxruntime(model, feeds).items():
        _close(got[key], want, key)


@requires_opencl
@pytest.mark.parametrize("name", list(MODELS))
def test_opencl_matches(name):
    """OpenCL runs everything on the device: the f32 kernels, and the casts through
    vload_half / vstore_half16_rte (no cl_khr_fp16 needed)."""
    model, feeds = MODELS[name]()
    _, got, _ = compare_backends(import_onnx(model), feeds, rtol=2e-3, atol=2e-3,
                                 poison=True)
    for key, want in _onnxruntime(model, feeds).items():
        _close(got[key], want, key)


@requires_opencl
@pytest.mark.parametrize("size", [4096, 4099])
def test_opencl_casts_round_as_numpy(size):
    """f32 -> f16 -> f32 on the device, bit for bit numpy's: ties to even, subnormals,
    overflow to infinity, NaN; f32 -> f16 16 elements a work-item, the last few (4099)
    one by one."""
    rng = _rng(6)
    x = (rng.standard_normal(size) * np.exp(rng.uniform(-22, 12, size))).astype(np.float32)
    x[:6] = [np.nan, np.inf, -np.inf, 65520.0, 2.0 ** -25, 1.0 + 2.0 ** -11]
    x[-3:] = [65520.0, 2.0 ** -25, 1.0 + 2.0 ** -11]
    text = f"""func.func @main(%x: tensor<{size}xf32>) -> tensor<{size}xf32> {{
  %h = graph.cast %x {{to = 10}} : (tensor<{size}xf32>) -> tensor<{size}xf16>
  %y = graph.cast %h {{to = 1}} : (tensor<{size}xf16>) -> tensor<{size}xf32>
  func.return %y : tensor<{size}xf32>
}}"""
    _, got, _ = compare_backends(text, {"x": x}, rtol=0, atol=0)
    (y,) = got.values()
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(y, x.astype(np.float16).astype(np.float32))
