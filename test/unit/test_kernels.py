"""The kernel level: the kernel dialect, `lower-to-kernels` and the numpy kernels.

1. Each kernel op against the graph level (reference kernels) on random shapes: conv
   (groups, strides, dilations, pads, auto_pad), matmul/gemm, pooling (ceil_mode,
   count_include_pad), softmax, layer_norm, reduce, elementwise steps and chains,
   transpose, concat, gather, pad, resize. Every model is lowered with
   infer-shapes,bufferize,lower-to-kernels,insert-deallocs, printed and parsed back, and
   run on the numpy backend with poisoning on; the kernel op the test is about must be
   in the IR (not kernel.generic), and no kernel may fall back to a temporary.
2. ONNX's backend node cases through the kernel level (their non-first inputs made
   constants, so pads/scales/axes lower to kernels too).
3. Real models (small ResNet, MobileNetV2, MiniLM): same outputs at graph and kernel level,
   also after plan-memory (workspaces sharing the arena with activations).
4. Workspace rules, fusion (intermediate buffers disappear), verifier errors,
   palimpsest-run --level kernel.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from palimpsest.backends.binding import find_function  # noqa: E402
from palimpsest.backends.numpy import run_with_stats  # noqa: E402
from palimpsest.backends.reference.executor import run as run_graph  # noqa: E402
from palimpsest.dialects import kernel as K  # noqa: E402
from palimpsest.dialects.buffer import BufferType  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402
from palimpsest.dialects.graph.naming import ONNX_TO_GRAPH  # noqa: E402
from palimpsest.ir.attributes import StringAttr  # noqa: E402
from palimpsest.ir.diagnostics import DiagnosticError  # noqa: E402
from palimpsest.ir.parser import parse  # noqa: E402
from palimpsest.ir.printer import print_ir  # noqa: E402
from palimpsest.ir.types import f32, f64, i32  # noqa: E402
from palimpsest.ir.verifier import verify  # noqa: E402
from palimpsest.passes.lower_to_kernels import RULES, lower_to_kernels  # noqa: E402
from palimpsest.passes.pass_manager import PassManager, parse_pipeline  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
KERNEL_PIPELINE = "infer-shapes,bufferize,lower-to-kernels,insert-deallocs"


import example_models  # noqa: E402  (test/unit, on sys.path: conftest.py)
from ir_checks import reparsed  # noqa: E402
import onnx_node_cases as nc  # noqa: E402

M = example_models.load()

ONNX_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
              np.dtype(np.float16): TensorProto.FLOAT16, np.dtype(np.int32): TensorProto.INT32,
              np.dtype(np.int64): TensorProto.INT64, np.dtype(np.int8): TensorProto.INT8,
              np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.bool_): TensorProto.BOOL}


# -- helpers -----------------------------------------------------------------------------------

def model_of(nodes, inputs: dict, constants: dict | None = None, outputs=("y",), opset=17):
    """An ONNX model: `inputs` name -> array (graph inputs), `constants` name -> array
    (initializers), nodes as (op_type, inputs, outputs, attrs)."""
    graph_inputs = [helper.make_tensor_value_info(n, ONNX_TYPES[a.dtype], list(a.shape))
                    for n, a in inputs.items()]
    initializers = [numpy_helper.from_array(np.asarray(a), n)
                    for n, a in (constants or {}).items()]
    graph_outputs = [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None)
                     for n in outputs]
    made = [helper.make_node(op, list(ins), list(outs), **(attrs or {}))
            for op, ins, outs, attrs in nodes]
    graph = helper.make_graph(made, "g", graph_inputs, graph_outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def node(op, ins, attrs=None, outs=("y",)):
    return (op, ins, outs, attrs)


def lower(module, pipeline=KERNEL_PIPELINE):
    """Run `pipeline`, print and parse the result back (checking the round trip)."""
    PassManager(parse_pipeline(pipeline)).run(module)
    return reparsed(module, "kernel.pal")


def kernel_ops(module, name=None) -> list:
    return [op for op in module.walk() if op.name.startswith("kernel.")
            and (name is None or op.name == name)]


def assert_same(got: dict, want: dict, what: str, rtol=1e-5, atol=1e-6) -> None:
    assert list(got) == list(want), what
    for name, expected in want.items():
        actual = got[name]
        assert actual.dtype == expected.dtype, (what, name, actual.dtype, expected.dtype)
        assert actual.shape == expected.shape, (what, name, actual.shape, expected.shape)
        if expected.dtype.kind == "f":
            np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol,
                                       err_msg=f"{what}: {name}")
        else:
            np.testing.assert_array_equal(actual, expected, err_msg=f"{what}: {name}")


def check(model, feeds, kernel: str, roles=None, count=None, rtol=1e-5, atol=1e-6):
    """Graph level vs kernel level on `feeds`; `kernel` must be used; `roles`: the
    workspace roles of its (first) op; `count`: how many `kernel` ops."""
    graph = import_onnx(model)
    verify(graph)
    PassManager(parse_pipeline("infer-shapes")).run(graph)
    expected = run_graph(find_function(graph, None), feeds)
    module = lower(import_onnx(model))
    ops = kernel_ops(module, kernel)
    assert ops, f"no {kernel} in\n{print_ir(module)}"
    if count is not None:
        assert len(ops) == count, print_ir(module)
    if roles is not None:
        op = ops[0]
        assert type(op).workspace_roles([v.type for v in op.ins], op.config()) == roles
        assert len(op.workspaces) == len(roles)
        for value in op.workspaces:
            assert value.op.name == "buffer.alloc"
            assert value.op.properties["kind"].value == "workspace"
    outputs, stats = run_with_stats(find_function(module, None), feeds, poison=True)
    assert_same(outputs, expected, kernel, rtol, atol)
    if not kernel_ops(module, "kernel.generic"):
        assert stats.temporary_bytes == 0, stats.temporary_ops
    assert stats.live_bytes == sum(a.nbytes for a in outputs.values())  # all else freed
    return module, stats


def rand(rng, shape, dtype=np.float32):
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-20, 20, shape).astype(dtype)


# -- 1. each kernel op on random shapes -------------------------------------------------------

def _conv_case(seed):
    rng = np.random.default_rng(seed)
    while True:
        group = int(rng.choice([1, 1, 2, 3]))
        cg, mg = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        depthwise = seed % 5 == 4
        if depthwise:
            cg, mg = 1, int(rng.integers(1, 3))
            group = int(rng.integers(2, 6))
        k = [int(rng.integers(1, 4)), int(rng.integers(1, 4))]
        strides = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
        dilations = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
        pads = [int(rng.integers(0, 3)) for _ in range(4)]
        n, h, w = int(rng.integers(1, 3)), int(rng.integers(4, 10)), int(rng.integers(4, 10))
        if all((kk - 1) * d + 1 <= size + pads[a] + pads[a + 2]
               for a, (kk, d, size) in enumerate(zip(k, dilations, (h, w)))):
            break
    x = rand(rng, (n, group * cg, h, w))
    weights = rand(rng, (group * mg, cg) + tuple(k))
    consts = {"w": weights}
    ins = ["x", "w"]
    if seed % 2:
        consts["b"] = rand(rng, (group * mg,))
        ins.append("b")
    attrs = {"group": group, "strides": strides, "dilations": dilations, "pads": pads,
             "kernel_shape": k}
    model = model_of([node("Conv", ins, attrs)], {"x": x}, consts)
    return model, {"x": x}, pads, k, strides, cg == 1 and group > 1


@pytest.mark.parametrize("seed", range(12))
def test_conv2d_random(seed):
    model, feeds, pads, k, strides, depthwise = _conv_case(seed)
    roles = ["padded"] if any(pads) else []
    if depthwise:
        roles += [] if k == [1, 1] else ["im2col"]
    elif not (k == [1, 1] and strides == [1, 1] and not any(pads)):
        roles.append("im2col")
    check(model, feeds, "kernel.conv2d", roles)


@pytest.mark.parametrize("multiplier, kernel", [(1, [3, 3]), (2, [2, 3]), (1, [1, 1])])
def test_conv2d_depthwise_im2col_is_a_band(multiplier, kernel):
    rng = np.random.default_rng(3)
    x = rand(rng, (2, 4, 7, 6))
    attrs = {"group": 4, "pads": [1, 0, 1, 2], "strides": [2, 1]}
    model = model_of([node("Conv", ["x", "w", "b"], attrs)], {"x": x},
                     {"w": rand(rng, (4 * multiplier, 1) + tuple(kernel)),
                      "b": rand(rng, (4 * multiplier,))})
    module, _ = check(model, {"x": x}, "kernel.conv2d",
                      ["padded"] + ([] if kernel == [1, 1] else ["im2col"]))
    op = kernel_ops(module, "kernel.conv2d")[0]
    if kernel != [1, 1]:
        # all 4 channels fit in the band: per channel its kh*kw rows and its multiplier's
        # results, Ho rows of the padded width (6 + 0 + 2)
        ho = op.outs[0].type.shape[2]
        per = (kernel[0] * kernel[1] + multiplier) * ho * 8
        assert list(op.workspaces[1].type.shape) == [4 * per]


# Every way the depthwise kernel reads its rows: stride 1 from the padded image or from X
# itself (flat runs, dilated too), stride 2 from the stride phases (3x3, 5x5, uneven
# pads), the exact windows (strided and dilated; strided X without pads; phases that do
# not fit the padded workspace, an odd padded height); several bands
# of channels (the 40x40 images: 64 channels do not fit one band), a multiplier, a batch.
@pytest.mark.parametrize("c, mg, hw, kernel, strides, dilations, pads, n", [
    (6, 1, (9, 8), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 2),
    (6, 2, (9, 8), (3, 3), (1, 1), (1, 1), (0, 0, 0, 0), 1),
    (5, 1, (10, 9), (3, 2), (1, 1), (2, 3), (2, 1, 0, 2), 1),
    (6, 1, (10, 8), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 2),
    (6, 1, (9, 8), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1),
    (4, 3, (12, 12), (5, 5), (2, 2), (1, 1), (2, 2, 2, 2), 1),
    (4, 1, (11, 10), (3, 3), (3, 2), (1, 1), (0, 2, 1, 0), 1),
    (4, 1, (11, 10), (3, 3), (2, 2), (2, 1), (1, 1, 1, 1), 1),
    (4, 2, (11, 10), (3, 3), (2, 1), (1, 1), (0, 0, 0, 0), 2),
    (64, 1, (40, 40), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (64, 1, (40, 40), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1),
    (64, 2, (40, 40), (3, 3), (2, 2), (2, 2), (1, 1, 1, 1), 1),
])
def test_conv2d_depthwise_layouts(c, mg, hw, kernel, strides, dilations, pads, n):
    rng = np.random.default_rng(c * 7 + mg)
    x = rand(rng, (n, c) + hw)
    attrs = {"group": c, "pads": list(pads), "strides": list(strides),
             "dilations": list(dilations)}
    model = model_of([node("Conv", ["x", "w", "b"], attrs)], {"x": x},
                     {"w": rand(rng, (c * mg, 1) + kernel), "b": rand(rng, (c * mg,))})
    module, _ = check(model, {"x": x}, "kernel.conv2d",
                      (["padded"] if any(pads) else []) + ["im2col"])
    op = kernel_ops(module, "kernel.conv2d")[0]
    band = op.workspaces[-1].type.shape[0]
    per = (kernel[0] * kernel[1] + mg) * op.outs[0].type.shape[2] * (hw[1] + pads[1] + pads[3])
    assert band == max(per, min(c * per, K.Conv2dOp.DEPTHWISE_BAND))


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_conv2d_auto_pad(auto_pad):
    rng = np.random.default_rng(1)
    x = rand(rng, (1, 2, 7, 6))
    model = model_of([node("Conv", ["x", "w"], {"auto_pad": auto_pad, "strides": [2, 1]})],
                     {"x": x}, {"w": rand(rng, (3, 2, 3, 2))})
    check(model, {"x": x}, "kernel.conv2d")


def test_conv2d_pointwise_needs_no_workspace():
    rng = np.random.default_rng(2)
    x = rand(rng, (2, 6, 5, 5), np.float64)
    model = model_of([node("Conv", ["x", "w", "b"], {"group": 2})], {"x": x},
                     {"w": rand(rng, (4, 3, 1, 1), np.float64), "b": rand(rng, (4,), np.float64)})
    check(model, {"x": x}, "kernel.conv2d", roles=[])


@pytest.mark.parametrize("a_shape, b_shape", [
    ((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)),
    ((2, 1, 3, 4), (5, 4, 6)), ((1, 7), (7, 1))])
def test_matmul_random(a_shape, b_shape):
    rng = np.random.default_rng(len(a_shape) * 10 + len(b_shape))
    a, b = rand(rng, a_shape), rand(rng, b_shape)
    check(model_of([node("MatMul", ["a", "b"])], {"a": a, "b": b}), {"a": a, "b": b},
          "kernel.matmul", roles=[])


def test_matmul_integers():
    rng = np.random.default_rng(3)
    a, b = rand(rng, (2, 3, 4), np.int32), rand(rng, (4, 2), np.int32)
    check(model_of([node("MatMul", ["a", "b"])], {"a": a, "b": b}), {"a": a, "b": b},
          "kernel.matmul")


@pytest.mark.parametrize("trans_a, trans_b, alpha, beta, c_shape", [
    (0, 0, 1.0, 1.0, (3, 5)), (1, 0, 0.5, 1.0, (5,)), (0, 1, 1.0, 0.25, (1,)),
    (1, 1, 2.0, 3.0, (3, 1)), (0, 0, 1.5, 0.0, (3, 5)), (0, 1, 1.0, 1.0, None)])
def test_gemm(trans_a, trans_b, alpha, beta, c_shape):
    rng = np.random.default_rng(4)
    a = rand(rng, (4, 3) if trans_a else (3, 4))
    consts = {"b": rand(rng, (5, 4) if trans_b else (4, 5))}
    ins = ["a", "b"]
    if c_shape is not None:
        consts["c"] = rand(rng, c_shape)
        ins.append("c")
    attrs = {"transA": trans_a, "transB": trans_b, "alpha": alpha, "beta": beta}
    check(model_of([node("Gemm", ins, attrs)], {"a": a}, consts), {"a": a}, "kernel.matmul")


POOL_CASES = [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, ["padded"]),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, ["padded"]),
    ("MaxPool", {"kernel_shape": [2, 3], "dilations": [2, 1], "pads": [0, 1, 1, 0],
                 "ceil_mode": 1, "strides": [2, 3]}, ["padded"]),
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}, []),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, ["padded", "divisor"]),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
     ["padded"]),
    ("AveragePool", {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1,
                     "count_include_pad": 1, "pads": [1, 0, 0, 0]}, ["padded", "divisor"]),
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [1, 2]}, []),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
     ["padded", "divisor"]),
]


@pytest.mark.parametrize("index", range(len(POOL_CASES)))
def test_pool2d(index):
    op, attrs, roles = POOL_CASES[index]
    rng = np.random.default_rng(index)
    x = rand(rng, (2, 3, 7, 8))
    check(model_of([node(op, ["x"], attrs)], {"x": x}), {"x": x}, "kernel.pool2d", roles)


def test_max_pool_integers():
    rng = np.random.default_rng(5)
    x = rng.integers(-100, 100, (1, 2, 5, 5)).astype(np.int8)
    model = model_of([node("MaxPool", ["x"], {"kernel_shape": [2, 2], "pads": [1, 1, 0, 0]})],
                     {"x": x}, opset=12)
    check(model, {"x": x}, "kernel.pool2d", ["padded"])


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools_are_reductions(op):
    rng = np.random.default_rng(6)
    x = rand(rng, (2, 3, 4, 5))
    check(model_of([node(op, ["x"])], {"x": x}), {"x": x}, "kernel.reduce", roles=[])


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_softmax(axis):
    rng = np.random.default_rng(7)
    x = rand(rng, (3, 4, 5)) * 4
    module, _ = check(model_of([node("Softmax", ["x"], {"axis": axis})], {"x": x}), {"x": x},
                      "kernel.softmax", ["stats"])
    stats = kernel_ops(module, "kernel.softmax")[0].workspaces[0]
    shape = [3, 4, 5]
    shape[axis] = 1
    assert list(stats.type.shape) == shape


@pytest.mark.parametrize("axis, scale_shape, bias", [
    (-1, (5,), True), (1, (4, 5), False), (-2, (1, 5), True), (0, (3, 4, 5), True)])
def test_layer_norm(axis, scale_shape, bias):
    rng = np.random.default_rng(8)
    x = rand(rng, (3, 4, 5))
    consts = {"s": rand(rng, scale_shape)}
    ins = ["x", "s"]
    if bias:
        consts["b"] = rand(rng, scale_shape)
        ins.append("b")
    model = model_of([node("LayerNormalization", ins, {"axis": axis})], {"x": x}, consts)
    module, _ = check(model, {"x": x}, "kernel.layer_norm", ["mean", "var"])
    op = kernel_ops(module, "kernel.layer_norm")[0]
    normalized = axis % 3
    assert [list(v.type.shape) for v in op.workspaces] == \
        [[3, 4, 5][:normalized] + [1] * (3 - normalized)] * 2


@pytest.mark.parametrize("op, axes, keepdims, dtype, roles", [
    ("ReduceMean", [1], 1, np.float32, []), ("ReduceMean", [0, -1], 0, np.float64, []),
    ("ReduceSum", [2], 0, np.float32, []), ("ReduceMax", [0, 2], 1, np.float32, []),
    ("ReduceMean", [1], 0, np.int32, ["acc"]), ("ReduceSum", [0], 1, np.int64, []),
    ("ReduceSum", [1, 2], 1, np.float16, ["acc"]), ("ReduceMean", None, 1, np.float16, ["acc"]),
    ("ReduceMax", [1], 0, np.int8, [])])
def test_reduce(op, axes, keepdims, dtype, roles):
    rng = np.random.default_rng(9)
    x = rand(rng, (3, 4, 5), dtype)
    consts, ins = {}, ["x"]
    if axes is not None:
        consts["axes"] = np.array(axes, np.int64)
        ins.append("axes")
    model = model_of([node(op, ins, {"keepdims": keepdims})], {"x": x}, consts, opset=18)
    check(model, {"x": x}, "kernel.reduce", roles, rtol=1e-3 if dtype == np.float16 else 1e-5)


UNARY = ["Relu", "Neg", "Abs", "Exp", "Log", "Sqrt", "Tanh", "Sigmoid", "Erf", "HardSigmoid",
         "HardSwish", "LeakyRelu", "Sign", "Floor", "Ceil", "Round", "Sin", "Cos", "Reciprocal",
         "Softplus", "Softsign", "Elu", "Selu"]
SCRATCH = ("HardSwish", "LeakyRelu", "Softsign", "Elu", "Selu")


@pytest.mark.parametrize("op", UNARY)
def test_elementwise_unary_steps(op):
    rng = np.random.default_rng(10)
    x = rand(rng, (3, 7)) * 3
    if op in ("Log", "Sqrt"):
        x = np.abs(x) + 0.1
    attrs = {"alpha": 0.3} if op in ("LeakyRelu", "HardSigmoid", "Elu") else {}
    roles = ["scratch"] if op in SCRATCH else []
    check(model_of([node(op, ["x"], attrs)], {"x": x}), {"x": x}, "kernel.elementwise", roles)


@pytest.mark.parametrize("op, dtype", [("Add", np.float32), ("Sub", np.int32),
                                       ("Mul", np.float64), ("Div", np.float32),
                                       ("Pow", np.float32), ("Max", np.float32),
                                       ("Min", np.int64)])
def test_elementwise_binary_steps_broadcast(op, dtype):
    rng = np.random.default_rng(11)
    a, b = rand(rng, (2, 1, 4), dtype), rand(rng, (3, 1), dtype)
    if op == "Pow":
        a = np.abs(a) + 0.5
    check(model_of([node(op, ["a", "b"])], {"a": a, "b": b}), {"a": a, "b": b},
          "kernel.elementwise")


def test_elementwise_chain_fuses_with_broadcast_and_shared_inputs():
    """x -> Add(b) -> Relu -> Mul(x) -> Sigmoid -> Max(c, ·, d) -> Clip(lo, hi): one
    kernel; a step's result broadcast by the next one (b is 1x4, the out 3x4)."""
    rng = np.random.default_rng(12)
    x, b = rand(rng, (1, 4)), rand(rng, (1, 4))
    consts = {"k": rand(rng, (3, 4)), "c": rand(rng, (4,)), "d": rand(rng, (3, 1)),
              "lo": np.array(0.1, np.float32), "hi": np.array(0.7, np.float32)}
    nodes = [node("Add", ["x", "b"], outs=["t0"]), node("Relu", ["t0"], outs=["t1"]),
             node("Mul", ["k", "t1"], outs=["t2"]), node("Sigmoid", ["t2"], outs=["t3"]),
             node("Max", ["c", "t3", "d"], outs=["t4"]), node("Clip", ["t4", "lo", "hi"])]
    module, _ = check(model_of(nodes, {"x": x, "b": b}, consts), {"x": x, "b": b},
                      "kernel.elementwise", count=1)
    op = kernel_ops(module, "kernel.elementwise")[0]
    assert op.config()["steps"] == ["graph.add", "graph.relu", "graph.mul", "graph.sigmoid",
                                    "graph.max", "graph.clip"]


def test_elementwise_clip_one_bound_and_batch_norm_chain():
    rng = np.random.default_rng(13)
    x = rand(rng, (2, 3, 4, 4))
    consts = {"s": rand(rng, (3,)), "b": rand(rng, (3,)), "m": rand(rng, (3,)),
              "v": np.abs(rand(rng, (3,))) + 0.5, "hi": np.array(0.5, np.float32)}
    nodes = [node("BatchNormalization", ["x", "s", "b", "m", "v"], {"epsilon": 1e-3},
                  outs=["t0"]),
             node("Clip", ["t0", "", "hi"], outs=["t1"]), node("LeakyRelu", ["t1"])]
    module, _ = check(model_of(nodes, {"x": x}, consts), {"x": x}, "kernel.elementwise",
                      roles=["scratch"], count=1)


@pytest.mark.parametrize("block", [1, 7, 97, 1000])
def test_elementwise_chain_in_blocks(monkeypatch, block):
    """A chain over more than CHAIN_WHOLE elements runs a block of the out at a time:
    a batch_norm step reading an in (per-channel statistics at the block's channels),
    a broadcast in, a clip's scalar bound and a step that needs scratch, the numbers
    of the reference."""
    from palimpsest.backends.numpy import kernel_ops, kernel_ops_elementwise  # (in order)

    assert kernel_ops.STEP_IMPLS
    monkeypatch.setattr(kernel_ops_elementwise, "CHAIN_WHOLE", block)
    monkeypatch.setattr(kernel_ops_elementwise, "CHAIN_BLOCK", block)
    rng = np.random.default_rng(16)
    x, r = rand(rng, (2, 3, 5, 6)), rand(rng, (3, 1, 6))
    consts = {"s": rand(rng, (3,)), "b": rand(rng, (3,)), "m": rand(rng, (3,)),
              "v": np.abs(rand(rng, (3,))) + 0.5, "hi": np.array(0.5, np.float32)}
    nodes = [node("BatchNormalization", ["x", "s", "b", "m", "v"], outs=["t0"]),
             node("Add", ["t0", "r"], outs=["t1"]), node("HardSwish", ["t1"], outs=["t2"]),
             node("Clip", ["t2", "", "hi"], outs=["t3"]), node("LeakyRelu", ["t3"])]
    check(model_of(nodes, {"x": x, "r": r}, consts), {"x": x, "r": r},
          "kernel.elementwise", count=1)


@pytest.mark.parametrize("perm", [[1, 0, 2], [2, 0, 1], None])
def test_transpose(perm):
    rng = np.random.default_rng(14)
    x = rand(rng, (2, 3, 4))
    attrs = {"perm": perm} if perm is not None else {}
    check(model_of([node("Transpose", ["x"], attrs)], {"x": x}), {"x": x}, "kernel.transpose")


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis):
    rng = np.random.default_rng(15)
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    for i, s in enumerate(shapes):
        s[axis] += i
    xs = {f"x{i}": rand(rng, tuple(s)) for i, s in enumerate(shapes)}
    check(model_of([node("Concat", list(xs), {"axis": axis})], xs), xs, "kernel.concat")


@pytest.mark.parametrize("axis, index_dtype", [(0, np.int64), (1, np.int32), (-1, np.int64)])
def test_gather(axis, index_dtype):
    rng = np.random.default_rng(16)
    x = rand(rng, (4, 5, 6))
    dim = x.shape[axis]
    indices = rng.integers(-dim, dim, (2, 3)).astype(index_dtype)
    check(model_of([node("Gather", ["x", "i"], {"axis": axis})], {"x": x}, {"i": indices}),
          {"x": x}, "kernel.gather")


def test_gather_out_of_range_is_an_error():
    feeds = {"x": np.zeros((3, 2), np.float32), "i": np.array([3], np.int64)}
    module = lower(import_onnx(model_of([node("Gather", ["x", "i"])], feeds)))
    assert kernel_ops(module, "kernel.gather")
    with pytest.raises(DiagnosticError, match="out of range"):
        run_with_stats(find_function(module, None), feeds)


@pytest.mark.parametrize("mode, pads, axes, value", [
    ("constant", [1, 0, 2, 2, 1, 0], None, 1.5), ("constant", [0, -1, 1, 2], [0, 2], None),
    ("edge", [2, 1, 0, 3, 0, 2], None, None), ("reflect", [1, 2, 1, 2, 1, 1], None, None),
    ("wrap", [2, 0, 3, 1, 4, 0], None, None), ("reflect", [0, -1, 2, 0, 0, 1], None, None)])
def test_pad(mode, pads, axes, value):
    rng = np.random.default_rng(17)
    x = rand(rng, (3, 4, 5))
    consts, ins = {"pads": np.array(pads, np.int64)}, ["x", "pads"]
    if value is not None:
        consts["value"] = np.array(value, np.float32)
        ins.append("value")
    if axes is not None:
        if value is None:
            ins.append("")
        consts["axes"] = np.array(axes, np.int64)
        ins.append("axes")
    model = model_of([node("Pad", ins, {"mode": mode})], {"x": x}, consts, opset=18)
    check(model, {"x": x}, "kernel.pad", roles=[])


RESIZE_CASES = [
    ({"mode": "nearest"}, "scales", [1, 1, 2.0, 1.5]),
    ({"mode": "nearest", "nearest_mode": "floor", "coordinate_transformation_mode": "asymmetric"},
     "scales", [1, 1, 0.6, 2.5]),
    ({"mode": "nearest", "nearest_mode": "ceil", "coordinate_transformation_mode": "align_corners"},
     "sizes", [2, 3, 7, 3]),
    ({"mode": "linear"}, "scales", [1, 1, 1.7, 0.8]),
    ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, "sizes",
     [2, 3, 9, 1]),
    ({"mode": "linear", "antialias": 1}, "scales", [1, 1, 0.5, 0.6]),
    ({"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}, "scales", [1, 1, 1.5, 2.0]),
    ({"mode": "cubic", "coordinate_transformation_mode": "half_pixel_symmetric"}, "scales",
     [1, 1, 0.75, 1.25]),
    ({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
      "extrapolation_value": 9.0}, "sizes", [2, 3, 4, 6]),
    ({"mode": "nearest", "keep_aspect_ratio_policy": "not_larger", "axes": [2, 3]}, "sizes",
     [8, 9]),
    ({"mode": "linear"}, "scales", [1.0, 2.0, 1.0, 1.5]),
    ({"mode": "nearest"}, "scales", [2.0, 0.5, 2.0, 1.0]),
]


@pytest.mark.parametrize("index", range(len(RESIZE_CASES)))
def test_resize(index):
    attrs, given, values = RESIZE_CASES[index]
    rng = np.random.default_rng(18)
    x = rand(rng, (2, 3, 5, 4))
    consts = {"roi": np.array([], np.float32), "scales": np.array([], np.float32)}
    if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        consts["roi"] = np.array([0, 0, 0.1, -0.2, 1, 1, 0.9, 1.3], np.float32)
    if given == "scales":
        consts["scales"] = np.array(values, np.float32)
        ins = ["x", "roi", "scales"]
    else:
        consts["sizes"] = np.array(values, np.int64)
        ins = ["x", "roi", "scales", "sizes"]
    model = model_of([node("Resize", ins, attrs)], {"x": x}, consts, opset=19)
    module, _ = check(model, {"x": x}, "kernel.resize")
    op = kernel_ops(module, "kernel.resize")[0]
    config = op.config()
    expected_roles = [f"stage{i}" for i in range(len(config["axes"]) - 1)]
    if config["mode"] != "nearest":
        expected_roles.append("taps")
    assert [v.name_hint.rsplit("_", 1)[-1] for v in op.workspaces] == \
        [r.rsplit("_", 1)[-1] for r in expected_roles]


# -- 2. ONNX's node cases through the kernel level ------------------------------------------------

KERNEL_GRAPH_OPS = set(RULES) | set(K.STEPS)
POLICY = nc.load_policy()
NODE_CASES = nc.case_names({onnx_op for onnx_op, graph_op in ONNX_TO_GRAPH.items()
                            if graph_op in KERNEL_GRAPH_OPS})


def _constant_inputs(model, feeds):
    """The model with every graph input but the first turned into an initializer."""
    graph = model.graph
    feeds = dict(feeds)
    for value in list(graph.input)[1:]:
        if value.name in feeds:
            graph.initializer.append(numpy_helper.from_array(feeds.pop(value.name), value.name))
    del graph.input[1:]
    return model, feeds


@pytest.mark.parametrize("constants", [False, True], ids=["inputs", "constants"])
@pytest.mark.parametrize("name", NODE_CASES)
def test_node_case_through_the_kernel_level(name, constants):
    case = nc.load_case(name)
    reason = nc.skip_reason(case, POLICY)
    if reason is not None:
        pytest.skip(reason)
    model = onnx.load(str(nc.ensure_cache() / case.name / "model.onnx"))
    feeds = case.feeds
    if constants:
        model, feeds = _constant_inputs(model, feeds)
    module = import_onnx(model)
    verify(module)
    module = lower(module)
    outputs, _ = run_with_stats(find_function(module, None), feeds, poison=True)
    nc.assert_results_match(case, [outputs.get(n) if n else None for n in case.node.output], POLICY)


def test_node_cases_exercise_every_kernel():
    """With constant operands, the node cases reach every kernel op but layer_norm (its
    cases ask for Mean/InvStdDev too, which kernel.layer_norm does not produce)."""
    used = set()
    for name in NODE_CASES:
        case = nc.load_case(name)
        if nc.skip_reason(case, POLICY) is not None:
            continue
        model, _ = _constant_inputs(onnx.load(str(nc.ensure_cache() / name / "model.onnx")),
                                    case.feeds)
        module = import_onnx(model)
        PassManager(parse_pipeline(KERNEL_PIPELINE)).run(module)
        used |= {op.name for op in kernel_ops(module)}
    assert used >= set(K.KERNEL_OPS) - {"kernel.layer_norm"}


# -- 3. real models ----------------------------------------------------------------------------

MODELS = example_models.small_model_cases()


@pytest.fixture(scope="module")
def model_levels():
    """{model: (feeds, graph outputs, {fuse: (kernel module, [(outputs, stats)])})}."""
    results = {}
    for name, build in MODELS.items():
        model, feeds = build()
        graph = import_onnx(model)
        PassManager(parse_pipeline("infer-shapes")).run(graph)
        expected = [run_graph(find_function(graph, None), f) for f in feeds]
        levels = {}
        for fuse in (True, False):
            module = lower(import_onnx(model),
                           f"infer-shapes,bufferize,lower-to-kernels"
                           f"{{fuse-elementwise={str(fuse).lower()}}},insert-deallocs")
            func = find_function(module, None)
            levels[fuse] = (module, [run_with_stats(func, f, poison=True) for f in feeds])
        results[name] = (feeds, expected, levels)
    return results


@pytest.mark.parametrize("name", list(MODELS))
def test_model_same_outputs_at_graph_and_kernel_level(name, model_levels):
    feeds, expected, levels = model_levels[name]
    for fuse, (module, runs) in levels.items():
        for index, ((outputs, stats), want) in enumerate(zip(runs, expected)):
            what = f"{name} run {index} (fuse={fuse})"
            assert_same(outputs, want, what)
            assert not any(np.isnan(a).any() for a in outputs.values()), what
            assert stats.live_bytes == sum(a.nbytes for a in outputs.values()), what


@pytest.mark.parametrize("name", ["resnet", "mobilenet_v2", "minilm_static"])
def test_model_lowers_to_specific_kernels(name, model_levels):
    """Convolutions, pools, matmuls, softmax and layer norms get kernels of their own;
    their scratch is workspaces; fusion leaves fewer, longer elementwise kernels."""
    _, _, levels = model_levels[name]
    fused, unfused = levels[True][0], levels[False][0]
    for kind in ("kernel.conv2d", "kernel.matmul", "kernel.softmax", "kernel.layer_norm"):
        assert len(kernel_ops(fused, kind)) == len(kernel_ops(unfused, kind))
    assert len(kernel_ops(fused, "kernel.elementwise")) < \
        len(kernel_ops(unfused, "kernel.elementwise"))
    generic = {op.properties["op"].value for op in kernel_ops(fused, "kernel.generic")}
    assert generic <= {"graph.cast"}, generic
    workspaces = [op for op in fused.walk() if op.name == "buffer.alloc"
                  and op.properties["kind"].value == "workspace"]
    assert workspaces
    for alloc in workspaces:  # alloc, kernel, dealloc: adjacent
        (user,) = [u for u in alloc.results[0].users() if u.name.startswith("kernel.")]
        dealloc = [u for u in alloc.results[0].users() if u.name == "buffer.dealloc"]
        assert len(dealloc) == 1
        op = alloc
        while op is not user:
            assert op.name == "buffer.alloc"
            op = op.next
        op = user.next
        while op is not dealloc[0]:
            assert op.name == "buffer.dealloc"
            op = op.next


@pytest.mark.parametrize("name", ["resnet", "mobilenet_v2", "minilm_static"])
def test_planned_kernel_level_shares_workspaces(name):
    """plan-memory after lower-to-kernels: workspaces are views of the activation pool
    that overlap activations dead during their op; the planned run is still right."""
    model, feeds = MODELS[name]()
    graph = import_onnx(model)
    PassManager(parse_pipeline("infer-shapes")).run(graph)
    expected = [run_graph(find_function(graph, None), f) for f in feeds]
    module = lower(import_onnx(model), KERNEL_PIPELINE + ",plan-memory")
    views = [op for op in module.walk() if op.name == "buffer.view"]
    assert any(op.properties.get("kind") is not None and
               op.properties["kind"].value == "workspace" for op in views) or any(
        op.attributes.get("kind") is not None and op.attributes["kind"].value == "workspace"
        for op in views)
    for feed, want in zip(feeds, expected):
        outputs, stats = run_with_stats(find_function(module, None), feed, poison=True)
        assert_same(outputs, want, f"{name} planned")
        assert stats.temporary_bytes == 0 or kernel_ops(module, "kernel.generic")


# -- 4. rules, fusion, errors, tools --------------------------------------------------------------

def test_workspace_rules():
    x, w = BufferType((2, 3, 8, 8), f32), BufferType((4, 3, 3, 3), f32)
    config = K.Conv2dOp.config_of({"pads": K.int_array([1, 2, 1, 0]),
                                   "strides": K.int_array([2, 1])})
    assert K.Conv2dOp.workspace_types([x, w], config) == [
        BufferType((3, 10, 10), f32), BufferType((27, 32), f32)]
    dynamic = BufferType((None, 3, None, 8), f32)
    assert K.Conv2dOp.workspace_types([dynamic, w], config) == [
        BufferType((3, None, 10), f32), BufferType((27, None), f32)]
    pointwise = K.Conv2dOp.config_of({})
    assert K.Conv2dOp.workspace_types([x, BufferType((4, 3, 1, 1), f32)], pointwise) == []
    pool = K.Pool2dOp.config_of({"mode": StringAttr("avg"), "kernel_shape": K.int_array([2, 2]),
                                 "strides": K.int_array([2, 2])})
    assert K.Pool2dOp.workspace_types([x], pool) == []
    assert K.Pool2dOp.workspace_types([BufferType((1, 3, 7, 7), f32)],
                                      {**pool, "ceil_mode": 1}) == [
        BufferType((3, 8, 8), f32), BufferType((4, 4), f32)]
    reduce = K.ReduceOp.config_of({"mode": StringAttr("mean"), "axes": K.int_array([1])})
    assert K.ReduceOp.workspace_types([BufferType((4, 8), i32)], reduce) == [
        BufferType((4, 1), f64)]
    assert K.ReduceOp.workspace_types([BufferType((4, 8), f32)], reduce) == []


CHAIN = """
func.func @chain(%x: tensor<16x16xf32>, %b: tensor<16xf32>) -> tensor<16x16xf32> {
  %r = graph.relu %x : tensor<16x16xf32>
  %a = graph.add %r, %b : (tensor<16x16xf32>, tensor<16xf32>) -> tensor<16x16xf32>
  %e = graph.exp %a : tensor<16x16xf32>
  %t = graph.tanh %e : tensor<16x16xf32>
  %s = graph.sub %t, %x : tensor<16x16xf32>
  func.return %s : tensor<16x16xf32>
}
"""


def test_fusion_removes_intermediate_buffers():
    rng = np.random.default_rng(20)
    feeds = {"x": rand(rng, (16, 16)), "b": rand(rng, (16,))}
    expected = run_graph(find_function(parse(CHAIN, "chain.pal"), None), feeds)

    def allocs(module):
        return sum(1 for op in module.walk() if op.name == "buffer.alloc")

    runs = {}
    for fuse in (False, True):
        module = parse(CHAIN, "chain.pal")
        PassManager(parse_pipeline("bufferize{in-place=false}")).run(module)
        before = allocs(module)
        result = lower_to_kernels(module, fuse_elementwise=fuse)
        module = lower(module, "insert-deallocs")
        runs[fuse] = (before, allocs(module), result,
                      run_with_stats(find_function(module, None), feeds, poison=True), module)
    before, after_plain, plain, (out_plain, stats_plain), _ = runs[False]
    _, after_fused, fused, (out_fused, stats_fused), module = runs[True]
    assert before == after_plain == 5
    assert after_fused == 1 and fused.erased_allocs == 4 and fused.fused == 4
    assert plain.erased_allocs == 0 and plain.kernels == {"kernel.elementwise": 5}
    (op,) = kernel_ops(module)
    assert op.config()["steps"] == ["graph.relu", "graph.add", "graph.exp", "graph.tanh",
                                    "graph.sub"]
    one = 16 * 16 * 4
    assert stats_plain.allocations == 5 and stats_fused.allocations == 1
    assert stats_fused.bytes_allocated == one and stats_plain.peak_bytes >= 2 * one
    for outputs in (out_plain, out_fused):
        assert_same(outputs, expected, "chain")


def test_fusion_never_clobbers_an_input_read_later():
    """t = exp(x); o = t - o (in place over o): a fused chain would write exp(x) into o
    before the sub reads o, so the two stay apart."""
    text = """
    func.func @f(%x: buffer<8xf32>, %c: buffer<8xf32>) -> buffer<8xf32> {
      %t = buffer.alloc {kind = "activation"} : buffer<8xf32>
      buffer.compute %x, %t {op = "graph.exp", operandSegmentSizes = array<i32: 1, 1>} : buffer<8xf32>, buffer<8xf32>
      %o = buffer.alloc {kind = "output"} : buffer<8xf32>
      buffer.copy %c, %o : buffer<8xf32>, buffer<8xf32>
      buffer.compute %t, %o, %o {op = "graph.sub", operandSegmentSizes = array<i32: 2, 1>} : buffer<8xf32>, buffer<8xf32>, buffer<8xf32>
      func.return %o : buffer<8xf32>
    }"""
    module = parse(text, "f.pal")
    result = lower_to_kernels(module)
    verify(module)
    assert result.fused == 0 and len(kernel_ops(module, "kernel.elementwise")) == 2
    x = np.linspace(-1, 1, 8).astype(np.float32)
    c = np.arange(8, dtype=np.float32)
    outputs, _ = run_with_stats(find_function(module, None), {"x": x, "c": c}, poison=True)
    np.testing.assert_allclose(outputs["result0"], np.exp(x) - c, rtol=1e-6)


def test_lowering_after_insert_deallocs_moves_and_erases_deallocs():
    rng = np.random.default_rng(21)
    feeds = {"x": rand(rng, (16, 16)), "b": rand(rng, (16,))}
    expected = run_graph(find_function(parse(CHAIN, "chain.pal"), None), feeds)
    module = parse(CHAIN, "chain.pal")
    module = lower(module, "bufferize{in-place=false},insert-deallocs,lower-to-kernels")
    assert sum(1 for op in module.walk() if op.name == "buffer.dealloc") == 0
    outputs, stats = run_with_stats(find_function(module, None), feeds, poison=True)
    assert_same(outputs, expected, "chain")
    assert stats.allocations == 1


def test_invalid_kernel_ops_are_verifier_errors(parse_text):
    text = """
    func.func @f(%x: buffer<1x3x8x8xf32>, %w: buffer<4x3x3x3xf32>, %y: buffer<1x4x6x6xf32>, %c: buffer<27x30xf32>) {
      kernel.conv2d %x, %w, %y, %c {operandSegmentSizes = array<i32: 2, 1, 1>} : buffer<1x3x8x8xf32>, buffer<4x3x3x3xf32>, buffer<1x4x6x6xf32>, buffer<27x30xf32>
      func.return
    }"""
    with pytest.raises(DiagnosticError, match="workspace 'im2col' is 'buffer<27x30xf32>' but "
                                              "must be 'buffer<27x36xf32>'"):
        verify(parse_text(text))


def test_palimpsest_run_level_kernel(tmp_path, capsys):
    from palimpsest.tools import run as run_tool

    model = M.tiny_cnn()
    path = tmp_path / "tiny.onnx"
    onnx.save(model, str(path))
    outputs = {}
    for level in ("graph", "kernel"):
        out_dir = tmp_path / level
        argv = [str(path), "--random-inputs", "--level", level, "--output-dir", str(out_dir)]
        if level == "kernel":
            argv += ["--poison", "--stats"]
        assert run_tool.main(argv) == 0
        outputs[level] = np.load(out_dir / "logits.npy")
    printed = capsys.readouterr().out
    assert "peak bytes" in printed and "from kernel temporaries 0" in printed
    np.testing.assert_allclose(outputs["kernel"], outputs["graph"], rtol=1e-5, atol=1e-6)


def test_kernels_make_no_hidden_full_size_temporaries(monkeypatch):
    """Each kernel on ~1 MiB tensors, traced with tracemalloc (numpy reports its
    allocations to it): beyond its outs and workspaces a kernel allocates only numpy's
    fixed-size iteration buffers and O(axis) index vectors, never a tensor-sized array."""
    import tracemalloc

    import palimpsest.backends.numpy.kernel_ops as kernel_ops_module

    peaks = {}

    def traced(name, fn):
        def run(op, inputs, outputs, workspaces):
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            fn(op, inputs, outputs, workspaces)
            peak = tracemalloc.get_traced_memory()[1] - before
            peaks[name] = max(peaks.get(name, 0), peak)
        return run

    for name, fn in kernel_ops_module.KERNEL_IMPLS.items():
        monkeypatch.setitem(kernel_ops_module.KERNEL_IMPLS, name, traced(name, fn))
    rng = np.random.default_rng(22)
    x = rand(rng, (1, 16, 128, 128))  # 1 MiB
    rows = rand(rng, (256, 1024))     # 1 MiB
    consts = {
        "w": rand(rng, (16, 16, 3, 3)), "dw": rand(rng, (16, 1, 3, 3)), "s": rand(rng, (16,)),
        "bb": rand(rng, (16,)), "m": rand(rng, (16,)), "v": np.abs(rand(rng, (16,))) + 1,
        "lo": np.array(-1, np.float32), "hi": np.array(1, np.float32),
        "g": rand(rng, (1024,)), "k": rand(rng, (1024, 1024)) / 32, "c": rand(rng, (1024,)),
        "pads": np.array([0, 0, 2, 1, 0, 0, 1, 2], np.int64),
        "roi": np.array([], np.float32), "scales": np.array([1, 1, 1.5, 0.75], np.float32),
    }
    nodes = [
        node("Conv", ["x", "w"], {"pads": [1, 1, 1, 1]}, outs=["c0"]),
        node("Conv", ["c0", "dw"], {"pads": [1, 1, 1, 1], "group": 16}, outs=["c1"]),
        node("BatchNormalization", ["c1", "s", "bb", "m", "v"], outs=["e0"]),
        node("HardSwish", ["e0"], outs=["e1"]), node("LeakyRelu", ["e1"], outs=["e2"]),
        node("Sigmoid", ["e2"], outs=["e3"]), node("Clip", ["e3", "lo", "hi"], outs=["e4"]),
        node("MaxPool", ["e4"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, outs=["p0"]),
        node("AveragePool", ["p0"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                     "ceil_mode": 1, "strides": [1, 1]}, outs=["p1"]),
        node("Pad", ["p1", "pads"], {"mode": "reflect"}, outs=["y0"]),
        node("Resize", ["y0", "roi", "scales"], {"mode": "linear"}, outs=["y1"]),
        node("Softmax", ["rows"], outs=["r0"]),
        node("LayerNormalization", ["r0", "g", "c"], outs=["r1"]),
        node("Gemm", ["r1", "k", "c"], {"beta": 0.5, "transB": 1}, outs=["r2"]),
        node("ReduceMean", ["r2"], {"axes": [1]}, outs=["r3"]),
    ]
    feeds = {"x": x, "rows": rows}
    model = model_of(nodes, feeds, consts, outputs=("y1", "r2", "r3"), opset=17)
    module = lower(import_onnx(model))
    assert not kernel_ops(module, "kernel.generic")
    func = find_function(module, None)
    tracemalloc.start()
    try:
        run_with_stats(func, feeds)  # warm: first-call imports
        peaks.clear()
        _, stats = run_with_stats(func, feeds, poison=True)
    finally:
        tracemalloc.stop()
    assert stats.temporary_bytes == 0
    # the elementwise chain after the depthwise conv runs as that conv's epilogue
    (depthwise,) = [op for op in kernel_ops(module, "kernel.conv2d") if op.config()["group"] > 1]
    assert depthwise.config()["epilogue"] == ["graph.batch_norm", "graph.hard_swish",
                                              "graph.leaky_relu", "graph.sigmoid", "graph.clip"]
    assert set(peaks) >= {"kernel.conv2d", "kernel.pool2d",
                          "kernel.pad", "kernel.resize", "kernel.softmax",
                          "kernel.layer_norm", "kernel.matmul", "kernel.reduce"}
    for name, peak in peaks.items():
        assert peak < 256 * 1024, (name, peak)  # tensors here are 1 MiB or more


def test_erf_step_without_scipy(monkeypatch):
    """Without scipy, an erf step copies the reference kernel's result into the out."""
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.special", None)
    rng = np.random.default_rng(23)
    x = rand(rng, (4, 6))
    nodes = [node("Mul", ["x", "h"], outs=["t0"]), node("Erf", ["t0"], outs=["t1"]),
             node("Add", ["t1", "x"])]
    check(model_of(nodes, {"x": x}, {"h": np.array(0.7, np.float32)}), {"x": x},
          "kernel.elementwise", count=1)
