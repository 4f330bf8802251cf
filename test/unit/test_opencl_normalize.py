"""The OpenCL generators of kernels/normalize.py against the numpy backend: pool2d (max
and avg: pads, strides, dilations, ceil_mode, count_include_pad; integer max), global
pools, softmax on every axis (short and long rows, large values), layer_norm over one
and two trailing dims, reductions over leading / middle / trailing / scattered / all
axes with and without keepdims, integer sums and max; the ONNX reduce and layer_norm
node cases made lowerable (test_opencl_backend.py runs every node case as it comes,
where these two stay on the host: their axes are a graph input, and LayerNormalization
cases ask for the Mean and InvStdDev outputs); f64 and the f16 fallback; and that no
kernel writes outside its out."""

from __future__ import annotations

import importlib.util
import sys

import pytest

np = pytest.importorskip("numpy")

from opencl_support import compare_backends, requires_opencl  # noqa: E402

pytestmark = requires_opencl

RNG = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def _reseed():
    """The same data for a test however the tests are selected or ordered."""
    global RNG
    RNG = np.random.default_rng(7)


def _tensor(shape, dtype="f32") -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + dtype + ">"


def _data(shape, dtype=np.float32, scale=1.0):
    if np.dtype(dtype).kind == "f":
        return (RNG.standard_normal(shape) * scale).astype(dtype)
    info = np.iinfo(dtype)
    low, high = max(info.min, -100), min(info.max, 100)
    return RNG.integers(low, high, shape, endpoint=True).astype(dtype)


def _ints(values) -> str:
    return "array<i64: " + ", ".join(str(v) for v in values) + ">"


def _one_op(op_text: str, x_type: str, out_type: str) -> str:
    return (f"func.func @f(%x: {x_type}) -> {out_type} {{\n"
            f"  {op_text}\n"
            f"  func.return %y : {out_type}\n}}\n")


# -- pooling -------------------------------------------------------------------------------------

def _pool_graph(mode, shape, kernel, dtype="f32", **props):
    from palimpsest.dialects.graph import shapes as S

    out = S.pool(tuple(shape), list(kernel), props.get("strides", [1, 1]),
                 props.get("pads", [0, 0, 0, 0]), props.get("dilations", [1, 1]), "NOTSET",
                 props.get("ceil_mode", 0))
    attrs = [f"kernel_shape = {_ints(kernel)}"]
    for name, value in sorted(props.items()):
        attrs.append(f"{name} = {_ints(value)}" if isinstance(value, list)
                     else f"{name} = {value}")
    x_type, out_type = _tensor(shape, dtype), _tensor(out, dtype)
    op = (f"%y = graph.{mode}_pool %x {{{', '.join(attrs)}}} : ({x_type}) -> {out_type}")
    return _one_op(op, x_type, out_type)


POOLS = [
    ("plain 2x2", [2, 2], {}),
    ("stride 2", [2, 2], {"strides": [2, 2]}),
    ("pads", [3, 3], {"pads": [1, 1, 1, 1]}),
    ("uneven pads, strides", [3, 2], {"pads": [2, 0, 1, 1], "strides": [2, 1]}),
    ("dilations", [2, 3], {"dilations": [2, 2], "pads": [1, 2, 1, 0]}),
    ("ceil_mode", [3, 3], {"strides": [2, 2], "ceil_mode": 1}),
    ("ceil_mode with pads", [2, 2], {"strides": [3, 2], "pads": [1, 1, 0, 0],
                                     "ceil_mode": 1}),
]


@pytest.mark.parametrize("mode", ["max", "average"])
@pytest.mark.parametrize("name, kernel, props", POOLS, ids=[p[0] for p in POOLS])
def test_pool(mode, name, kernel, props):
    compare_backends(_pool_graph(mode, (2, 3, 9, 10), kernel, **props),
                     {"x": _data((2, 3, 9, 10))})


@pytest.mark.parametrize("name, kernel, props",
                         [p for p in POOLS if "pads" in p[2] or "ceil_mode" in p[2]],
                         ids=[p[0] for p in POOLS if "pads" in p[2] or "ceil_mode" in p[2]])
def test_average_pool_counting_pads(name, kernel, props):
    props = dict(props, count_include_pad=1)
    compare_backends(_pool_graph("average", (1, 2, 7, 8), kernel, **props),
                     {"x": _data((1, 2, 7, 8))})


# the vector pool (`_vector_pool`): 16-lane vectors, edge vectors with -inf lanes, a
# shifted last vector and row block; (shape, kernel, props)
WIDE_POOLS = [
    ("2x2 / 2", (1, 3, 34, 36), [2, 2], {"strides": [2, 2]}),
    ("2x2 / 1, pads (0, 0, 1, 1)", (1, 2, 21, 37), [2, 2], {"pads": [0, 0, 1, 1]}),
    ("3x3 / 2, pads 1", (2, 2, 31, 45), [3, 3], {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("5x5 / 1, pads 2 (SPP)", (1, 2, 13, 13), [5, 5], {"pads": [2, 2, 2, 2]}),
    ("3x3 / 2, ceil_mode", (1, 2, 18, 40), [3, 3], {"strides": [2, 2], "ceil_mode": 1}),
    ("dilations, wide pads", (1, 2, 9, 22), [3, 3], {"dilations": [2, 3],
                                                     "pads": [2, 4, 1, 5]}),
    ("3 x 2 / (3, 3)", (1, 2, 20, 50), [3, 2], {"strides": [3, 3]}),
]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("mode", ["max", "average"])
@pytest.mark.parametrize("name, shape, kernel, props", WIDE_POOLS,
                         ids=[p[0] for p in WIDE_POOLS])
def test_vector_pool(mode, name, shape, kernel, props, dtype):
    np_type = np.float32 if dtype == "f32" else np.float64
    x = _data(shape).astype(np_type)
    x[0, 0, 0, :3] = np.nan            # NaN wins a max, at the edge and inside
    x[0, -1, 5, 7] = np.nan
    compare_backends(_pool_graph(mode, shape, kernel, dtype, **props), {"x": x},
                     poison=True)


@pytest.mark.parametrize("dtype, np_dtype", [("i32", np.int32), ("i8", np.int8),
                                             ("i64", np.int64)])
def test_integer_max_pool(dtype, np_dtype):
    graph = _pool_graph("max", (1, 2, 6, 7), [3, 3], dtype, pads=[1, 1, 1, 1],
                        strides=[2, 2], ceil_mode=1)
    compare_backends(graph, {"x": _data((1, 2, 6, 7), np_dtype)})


def test_max_pool_keeps_nan_and_pads_with_minus_infinity():
    x = -np.abs(_data((1, 1, 5, 5))) - 1
    x[0, 0, 2, 2] = np.nan
    compare_backends(_pool_graph("max", (1, 1, 5, 5), [3, 3], pads=[1, 1, 1, 1]), {"x": x})


@pytest.mark.parametrize("kind", ["average", "max"])
def test_global_pool(kind):
    x_type, out_type = _tensor((2, 5, 7, 9)), _tensor((2, 5, 1, 1))
    graph = _one_op(f"%y = graph.global_{kind}_pool %x : ({x_type}) -> {out_type}",
                    x_type, out_type)
    compare_backends(graph, {"x": _data((2, 5, 7, 9))})


# -- softmax --------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, axis", [
    ((6, 128), -1),          # attention rows: one work-group each
    ((4, 12, 7), -1),        # short rows: one work-item each
    ((3, 1003), 1),          # rows longer than a work-group, a scalar tail
    ((5, 40, 6), 1),         # a middle axis, few rows: work-groups over strided rows
    ((3, 64, 100), 1),       # a middle axis, many rows: one work-item each, 4 rows at once
    ((6, 10, 16), 1),        # short strided rows: one work-item each, 8 rows at once
    ((50, 8), 0),            # the leading axis
    ((1,), 0),
], ids=str)
def test_softmax(shape, axis):
    t = _tensor(shape)
    graph = _one_op(f"%y = graph.softmax %x {{axis = {axis}}} : {t}", t, t)
    compare_backends(graph, {"x": _data(shape, scale=3.0)})


@pytest.mark.parametrize("width", [10, 300])
def test_softmax_of_large_values_does_not_overflow(width):
    t = _tensor((4, width))
    x = _data((4, width), scale=50.0) + np.float32(1e4)
    x[1] = -x[1]
    compare_backends(_one_op(f"%y = graph.softmax %x {{axis = 1}} : {t}", t, t), {"x": x})


# -- layer_norm -----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, axis, scale_shape, bias", [
    ((8, 384), -1, (384,), True),        # MiniLM's hidden size: work-groups
    ((3, 5, 16), -1, (16,), False),      # short rows: one work-item each
    ((2, 6, 20), 1, (6, 20), True),      # two normalized dims
    ((2, 6, 20), 1, (20,), False),       # a scale broadcast over the normalized dims
    ((4, 3, 40), -2, (1, 40), True),
    ((5, 390), -1, (1,), True),          # one scale for all; a scalar tail
], ids=str)
def test_layer_norm(shape, axis, scale_shape, bias):
    x_type, s_type = _tensor(shape), _tensor(scale_shape)
    operands, types = "%x, %s", f"{x_type}, {s_type}"
    if bias:
        operands, types = operands + ", %b", types + f", {s_type}"
    args = f"%x: {x_type}, %s: {s_type}" + (f", %b: {s_type}" if bias else "")
    graph = (f"func.func @f({args}) -> {x_type} {{\n"
             f"  %y = graph.layer_norm {operands} {{axis = {axis}}} : ({types}) -> {x_type}\n"
             f"  func.return %y : {x_type}\n}}\n")
    inputs = {"x": _data(shape, scale=2.0) + 3, "s": _data(scale_shape)}
    if bias:
        inputs["b"] = _data(scale_shape)
    compare_backends(graph, inputs)


# -- reduce ---------------------------------------------------------------------------------------

def _reduce_graph(mode, shape, axes, keepdims, dtype="f32"):
    reduced = range(len(shape)) if axes is None else axes
    kept = [1 if i in reduced else d for i, d in enumerate(shape)] if keepdims \
        else [d for i, d in enumerate(shape) if i not in reduced]
    x_type, out_type = _tensor(shape, dtype), _tensor(kept, dtype)
    if axes is None:
        op = (f"%y = graph.reduce_{mode} %x {{keepdims = {keepdims}}} : ({x_type}) -> "
              f"{out_type}")
        return _one_op(op, x_type, out_type)
    a_type = _tensor((len(axes),), "i64")
    return (f"func.func @f(%x: {x_type}) -> {out_type} {{\n"
            f"  %a = graph.constant {{value = dense<[{', '.join(map(str, axes))}]> : "
            f"{a_type}}} : {a_type}\n"
            f"  %y = graph.reduce_{mode} %x, %a {{keepdims = {keepdims}}} : "
            f"({x_type}, {a_type}) -> {out_type}\n"
            f"  func.return %y : {out_type}\n}}\n")


REDUCTIONS = [
    ((6, 203), [1]),          # trailing, long rows: work-groups, a scalar tail
    ((7, 5, 9), [2]),         # trailing, short rows
    ((300, 6), [0]),          # leading, few outputs: work-groups over strided rows
    ((40, 300), [0]),         # leading, many outputs: one work-item each
    ((4, 50, 6), [1]),        # middle
    ((12, 16, 8), [1]),       # middle, short rows: one work-item per 8 rows
    ((4, 5, 6, 7), [0, 2]),   # scattered
    ((3, 4, 5, 6), [1, 2, 3]),
    ((5, 70, 3), None),       # every axis
]


@pytest.mark.parametrize("mode", ["mean", "sum", "max"])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("shape, axes", REDUCTIONS, ids=str)
def test_reduce(mode, keepdims, shape, axes):
    compare_backends(_reduce_graph(mode, shape, axes, keepdims), {"x": _data(shape)})


@pytest.mark.parametrize("mode", ["sum", "max"])
@pytest.mark.parametrize("dtype, np_dtype", [("i32", np.int32), ("i64", np.int64),
                                             ("i8", np.int8)])
@pytest.mark.parametrize("shape, axes", [((6, 200), [1]), ((40, 30), [0]), ((20, 64), [0]),
                                         ((3, 4, 5), [0, 2])], ids=str)
def test_integer_reduce(mode, dtype, np_dtype, shape, axes):
    """Integer sums wrap in their own type, as numpy's do (i8 sums of 200 overflow)."""
    compare_backends(_reduce_graph(mode, shape, axes, 1, dtype),
                     {"x": _data(shape, np_dtype)})


@pytest.mark.parametrize("shape, axes", [((5, 7), [1]), ((5, 16), [0]), ((3, 80), [1])],
                         ids=str)
def test_integer_mean_truncates(shape, axes):
    compare_backends(_reduce_graph("mean", shape, axes, 0, "i32"),
                     {"x": _data(shape, np.int32)})


@pytest.mark.parametrize("shape, axis", [((40, 100), 1), ((100, 40), 0), ((20, 16), 0)],
                         ids=str)
def test_reduce_max_keeps_nan(shape, axis):
    x = _data(shape)
    x[2, 7] = x[13, 3] = np.nan
    x[3, :] = x[:, 4] = -np.inf
    compare_backends(_reduce_graph("max", shape, [axis], 0), {"x": x})


def test_minilm_block_stays_on_the_device():
    """softmax over attention rows of 128 and layer_norm over 384 in one graph."""
    scores, hidden = _tensor((12, 128, 128)), _tensor((128, 384))
    vec = _tensor((384,))
    graph = (f"func.func @f(%s: {scores}, %h: {hidden}, %g: {vec}, %b: {vec}) -> "
             f"({scores}, {hidden}) {{\n"
             f"  %p = graph.softmax %s {{axis = -1}} : {scores}\n"
             f"  %n = graph.layer_norm %h, %g, %b {{axis = -1, epsilon = 1.0e-12 : f32}} : "
             f"({hidden}, {vec}, {vec}) -> {hidden}\n"
             f"  func.return %p, %n : {scores}, {hidden}\n}}\n")
    _, _, stats = compare_backends(graph, {"s": _data((12, 128, 128), scale=4.0),
                                           "h": _data((128, 384)), "g": _data((384,)),
                                           "b": _data((384,))})
    assert stats.device_launches >= 2


# -- ONNX node cases ------------------------------------------------------------------------------

def _node_cases():
    import onnx_node_cases  # test/unit, on sys.path: conftest.py

    return onnx_node_cases


def _case_names():
    """The reduce and layer_norm node cases (none without onnx or the case cache)."""
    if importlib.util.find_spec("onnx") is None:
        return []
    return _node_cases().case_names({"ReduceMean", "ReduceSum", "ReduceMax",
                                     "LayerNormalization"})


def _on_device_model(case):
    """The case's model with what keeps its node off the device removed: a Reduce's axes
    input frozen into an initializer (lowering needs constant axes), LayerNormalization's
    optional Mean and InvStdDev outputs dropped (lowering takes Y alone)."""
    import onnx
    from onnx import numpy_helper

    nc = _node_cases()
    model = onnx.load(str(nc.ensure_cache() / case.name / "model.onnx"))
    graph, node = model.graph, model.graph.node[0]
    feeds = dict(case.feeds)
    if case.op_type.startswith("Reduce") and len(node.input) > 1 and node.input[1]:
        axes = node.input[1]
        graph.initializer.append(numpy_helper.from_array(feeds.pop(axes), axes))
        kept = [vi for vi in graph.input if vi.name != axes]
        del graph.input[:]
        graph.input.extend(kept)
    outputs = 1 if case.op_type == "LayerNormalization" else len(node.output)
    del node.output[outputs:]
    kept = list(graph.output)[:outputs]
    del graph.output[:]
    graph.output.extend(kept)
    return model, feeds


@pytest.mark.parametrize("name", _case_names())
def test_onnx_node_case_kernels_run_on_the_device(name):
    """The reduce and layer_norm node cases, made lowerable: all of them on the device
    (bool inputs and no-op reductions excepted: kernel.reduce takes numbers and one axis
    or more)."""
    from palimpsest.backends.binding import find_function
    from palimpsest.backends.numpy.arena import RunStats
    from palimpsest.backends.opencl.executor import run
    from palimpsest.dialects.graph.from_onnx import import_onnx
    from palimpsest.passes.pass_manager import PassManager, parse_pipeline

    nc = _node_cases()
    case = nc.load_case(name)
    reason = nc.skip_reason(case, nc.load_policy())
    if reason is not None:
        pytest.skip(reason)
    model, feeds = _on_device_model(case)
    module = import_onnx(model)
    PassManager(parse_pipeline("infer-shapes")).run(module)
    PassManager(parse_pipeline("default")).run(module)
    stats = RunStats()
    got = list(run(find_function(module, None), feeds, stats=stats).values())[0]
    want = case.expected[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, equal_nan=True, **nc.FLOAT_TOLERANCE)
    else:
        np.testing.assert_array_equal(got, want)
    # a no-op reduction (no axes, noop_with_empty_axes) is not a kernel.reduce
    noop = case.attrs.get("noop_with_empty_axes") and not np.size(case.inputs[1])
    if case.inputs[0].dtype != np.bool_ and not noop:
        assert not stats.host_ops, stats.host_ops


# -- element types ---------------------------------------------------------------------------------

def test_f64_kernels():
    """double: the same kernels with double vectors and literals."""
    rows, image = _tensor((6, 130), "f64"), _tensor((1, 2, 9, 9), "f64")
    pooled, reduced = _tensor((1, 2, 5, 5), "f64"), _tensor((6, 1), "f64")
    vec = _tensor((130,), "f64")
    graph = (f"func.func @f(%x: {rows}, %g: {vec}, %i: {image}) -> "
             f"({rows}, {rows}, {reduced}, {pooled}) {{\n"
             f"  %s = graph.softmax %x {{axis = 1}} : {rows}\n"
             f"  %n = graph.layer_norm %x, %g {{axis = 1, stash_type = 11}} : ({rows}, {vec}) -> {rows}\n"
             f"  %a = graph.constant {{value = dense<[1]> : tensor<1xi64>}} : tensor<1xi64>\n"
             f"  %m = graph.reduce_max %x, %a : ({rows}, tensor<1xi64>) -> {reduced}\n"
             f"  %p = graph.average_pool %i {{kernel_shape = {_ints([3, 3])}, "
             f"pads = {_ints([1, 1, 1, 1])}, strides = {_ints([2, 2])}}} : "
             f"({image}) -> {pooled}\n"
             f"  func.return %s, %n, %m, %p : {rows}, {rows}, {reduced}, {pooled}\n}}\n")
    compare_backends(graph, {"x": _data((6, 130), np.float64), "g": _data((130,), np.float64),
                             "i": _data((1, 2, 9, 9), np.float64)})


def test_f16_reduce_runs_on_the_host():
    """No OpenCL C type for f16 here: the generator declines and the run counts it."""
    _, _, stats = compare_backends(_reduce_graph("sum", (4, 50), [1], 1, "f16"),
                                   {"x": _data((4, 50), np.float16)}, rtol=1e-3,
                                   host_ops_allowed=("kernel.reduce",))
    assert stats.host_ops == {"kernel.reduce": 1}


@pytest.mark.parametrize("op, config, shapes", [
    ("kernel.softmax", {"axis": 1}, [(5, 301)]),
    ("kernel.softmax", {"axis": 1}, [(3, 64, 100)]),
    ("kernel.layer_norm", {"axis": 1, "epsilon": 1e-5}, [(5, 390), (390,), (390,)]),
    ("kernel.reduce", {"mode": "sum", "axes": [0], "keepdims": 0}, [(20, 64)]),
    ("kernel.reduce", {"mode": "max", "axes": [1], "keepdims": 1}, [(6, 203)]),
    ("kernel.pool2d", {"mode": "avg", "kernel_shape": [3, 3], "strides": [2, 2],
                       "dilations": [1, 1], "pads": [1, 1, 0, 0], "ceil_mode": 1,
                       "count_include_pad": 1}, [(2, 3, 9, 10)]),
], ids=lambda v: v if isinstance(v, str) else None)
def test_kernels_write_only_their_outs(op, config, shapes):
    """Sentinels on both sides of the out survive, and every out element is written."""
    from palimpsest.backends.opencl.kernels import GENERATORS
    from palimpsest.backends.opencl.kernels.base import Arg, KernelCall
    from palimpsest.backends.opencl.runtime import device
    from palimpsest.dialects import kernel as K

    dev = device()
    cls = next(c for c in vars(K).values() if getattr(c, "name", None) == op)
    out_shape = cls.result_shapes(list(shapes), config)[0]
    ins = [_data(s) for s in shapes]
    out = Arg(tuple(out_shape), np.dtype(np.float32))
    call = KernelCall(op, config, [Arg(a.shape, a.dtype) for a in ins], [out], {}, dev.limits)
    guard = 64
    sentinel = np.full(out.size + 2 * guard, 1234.5, np.float32)
    buffers = {("in", k): (dev.upload(a), 0) for k, a in enumerate(ins)}
    buffers[("out", 0)] = (dev.upload(sentinel), guard)
    for launch in GENERATORS[op](call):
        dev.launch(launch, lambda r: buffers[(r.group, r.key)])
    result = np.empty_like(sentinel)
    dev.cl.enqueue_copy(dev.queue, result, buffers[("out", 0)][0])
    assert (result[:guard] == 1234.5).all() and (result[-guard:] == 1234.5).all()
    assert not (result[guard:-guard] == 1234.5).any()
