"""OpenCL elementwise chains that call a math function run on vectors of CHAIN_LANES
elements per work-item (backends/opencl/kernels/elementwise.py): the vector and the
element-by-element tail agree with the numpy backend (poisoned), row-broadcast and
last-dim ins load as one scalar / one vload where a vector stays in one row, and a
vector f32 tanh is rounded from double as the scalar one is."""

from __future__ import annotations

import numpy as np
import pytest

from opencl_support import compare_backends, requires_opencl

pytestmark = requires_opencl


def _chain(shape, b_shape, c_shape, dtype="f32"):
    s = "x".join(map(str, shape))
    b = "x".join(map(str, b_shape))
    c = "x".join(map(str, c_shape))
    t, tb, tc = f"tensor<{s}x{dtype}>", f"tensor<{b}x{dtype}>", f"tensor<{c}x{dtype}>"
    # GELU (tanh form) of a + b, times c, then sigmoid, exp and a leaky relu
    return f"""func.func @main(%a: {t}, %b: {tb}, %c: {tc}) -> {t} {{
      %s = graph.add %a, %b : ({t}, {tb}) -> {t}
      %g = graph.gelu %s {{approximate = "tanh"}} : ({t}) -> {t}
      %h = graph.tanh %g : ({t}) -> {t}
      %m = graph.mul %h, %c : ({t}, {tc}) -> {t}
      %e = graph.sigmoid %m : ({t}) -> {t}
      %l = graph.leaky_relu %e {{alpha = 0.1 : f32}} : ({t}) -> {t}
      %r = graph.max %l, %a : ({t}, {t}) -> {t}
      func.return %r : {t}
    }}"""


CASES = {
    # last dim a multiple of 16: row broadcast one scalar, last-dim in one vload
    "rows": ((2, 3, 32), (2, 3, 1), (32,)),
    # last dim not a multiple: lanes cross rows (gathers), a tail of 5 elements
    "gathers": ((1, 5, 37), (1, 5, 1), (37,)),
    # fewer elements than one vector: the scalar form
    "small": ((1, 3, 4), (3, 1), (4,)),
    # a whole-tensor broadcast and a scalar
    "scalars": ((4, 48), (1,), (1, 1)),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_vector_chains_match_numpy(case, dtype):
    shape, b_shape, c_shape = CASES[case]
    np_type = np.float32 if dtype == "f32" else np.float64
    rng = np.random.default_rng(1)
    inputs = {"a": rng.standard_normal(shape).astype(np_type) * 2,
              "b": rng.standard_normal(b_shape).astype(np_type),
              "c": rng.standard_normal(c_shape).astype(np_type)}
    _, _, stats = compare_backends(_chain(shape, b_shape, c_shape, dtype), inputs,
                                   poison=True)
    assert stats.device_launches == 1


# plain arithmetic (no math call) with a broadcast in: vectors of the widest lanes that
# stay within a row (16, 8, 4), else the per-element form. (out, scale, bias, lanes)
BROADCASTS = {
    "channel scale, rows of 80": ((1, 6, 10, 80), (1, 6, 1, 1), (1, 6, 10, 80), 16),
    "channel scale, rows of 40": ((2, 5, 3, 40), (1, 5, 1, 1), (1,), 8),
    "row bias, rows of 20": ((3, 7, 20), (3, 7, 1), (20,), 4),
    "rows of 6: per element": ((3, 5, 6), (3, 5, 1), (1,), 1),
}


@pytest.mark.parametrize("case", sorted(BROADCASTS))
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_broadcast_chains_run_on_vectors(case, dtype):
    from palimpsest.backends.opencl.kernels import elementwise
    from palimpsest.backends.opencl.kernels.base import Arg, KernelCall

    shape, s_shape, b_shape, lanes = BROADCASTS[case]
    np_type = np.float32 if dtype == "f32" else np.float64
    if dtype == "f64":
        lanes = min(lanes, 8)
    t, ts, tb = (f"tensor<{'x'.join(map(str, d))}x{dtype}>" for d in (shape, s_shape, b_shape))
    text = f"""func.func @main(%a: {t}, %s: {ts}, %b: {tb}) -> {t} {{
      %m = graph.mul %a, %s : ({t}, {ts}) -> {t}
      %r = graph.add %m, %b : ({t}, {tb}) -> {t}
      %y = graph.relu %r : ({t}) -> {t}
      func.return %y : {t}
    }}"""
    rng = np.random.default_rng(4)
    inputs = {"a": rng.standard_normal(shape).astype(np_type),
              "s": rng.standard_normal(s_shape).astype(np_type),
              "b": rng.standard_normal(b_shape).astype(np_type)}
    _, _, stats = compare_backends(text, inputs, poison=True)
    assert stats.device_launches == 1
    dt = np.dtype(np_type)
    call = KernelCall("kernel.elementwise",
                      {"steps": ["graph.mul", "graph.add", "graph.relu"],
                       "wiring": [[0, 1], [3, 2], [4]], "step_props": None},
                      [Arg(shape, dt), Arg(s_shape, dt), Arg(b_shape, dt)], [Arg(shape, dt)])
    (launch,) = elementwise.elementwise(call)
    size = int(np.prod(shape))
    assert launch.global_size[0] >= size // lanes and launch.global_size[0] < size // lanes + 16
    assert (f"vstore{lanes}" in launch.source) == (lanes > 1)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_erf_and_gelu_match_numpy(dtype):
    """f32 erf (and GELU's) is the numpy backend's rational function (`pal_erf`), on
    vectors and the tail; NaN stays NaN, infinities and large values saturate to +-1."""
    n = 16 * 40 + 7
    np_type = np.float32 if dtype == "f32" else np.float64
    t = f"tensor<{n}x{dtype}>"
    text = f"""func.func @main(%x: {t}) -> ({t}, {t}) {{
      %e = graph.erf %x : ({t}) -> {t}
      %g = graph.gelu %x : ({t}) -> {t}
      func.return %e, %g : {t}, {t}
    }}"""
    x = np.random.default_rng(5).standard_normal(n).astype(np_type) * 2.5
    x[:8] = [np.nan, np.inf, -np.inf, 10.0, -10.0, 0.0, -0.0, 4.0]
    x[-3:] = [np.nan, 3.9, -1e-8]
    expected, actual, _ = compare_backends(text, {"x": x}, rtol=1e-5, atol=1e-6, poison=True)
    erf = np.asarray(actual["e"] if "e" in actual else list(actual.values())[0])
    assert np.isnan(erf[0]) and np.isnan(erf[-3])
    assert erf[1] == 1 and erf[2] == -1


def test_vector_and_tail_tanh_are_rounded_from_double():
    from palimpsest.backends.numpy.session import Session
    from palimpsest.backends.opencl.runtime import device
    from palimpsest.dialects import load_all
    from palimpsest.ir.parser import parse

    if not device().device.double_fp_config:
        pytest.skip("the device has no fp64: pal_tanh is its float tanh")
    load_all()
    n = 65536 + 13   # 4096 vectors and a tail
    text = f"""func.func @f(%x: tensor<{n}xf32>) -> tensor<{n}xf32> {{
      %y = graph.tanh %x : tensor<{n}xf32>
      func.return %y : tensor<{n}xf32>
    }}"""
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32) * 3
    (got,) = Session(parse(text, "<tanh>"), backend="opencl").run({"x": x}).values()
    np.testing.assert_array_equal(got, np.tanh(x.astype(np.float64)).astype(np.float32))


# -- comparisons, logical ops and expand on the device ------------------------------------------

def _model(tmp_path, nodes, inputs, outputs, initializers=()):
    import onnx
    from onnx import TensorProto, helper

    types = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32,
             np.dtype(np.int64): TensorProto.INT64, np.dtype(np.bool_): TensorProto.BOOL}
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, types[np.dtype(d)], s)
                     for n, d, s in inputs],
        [helper.make_tensor_value_info(n, types[np.dtype(d)], s) for n, d, s in outputs],
        list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    return str(path)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_comparisons_and_logical_ops_run_on_the_device(tmp_path, dtype):
    from onnx import helper

    nodes = [helper.make_node("Equal", ["a", "b"], ["eq"]),
             helper.make_node("Less", ["a", "b"], ["lt"]),
             helper.make_node("Greater", ["b", "a"], ["gt"]),
             helper.make_node("LessOrEqual", ["a", "b"], ["le"]),
             helper.make_node("GreaterOrEqual", ["a", "b"], ["ge"]),
             helper.make_node("And", ["lt", "eq"], ["both"]),
             helper.make_node("Or", ["lt", "gt"], ["either"]),
             helper.make_node("Xor", ["le", "ge"], ["one"]),
             helper.make_node("Cast", ["one"], ["f"], to=1)]
    path = _model(tmp_path, nodes, [("a", dtype, [3, 1, 5]), ("b", dtype, [4, 1])],
                  [("both", np.bool_, [3, 4, 5]), ("either", np.bool_, [3, 4, 5]),
                   ("f", np.float32, [3, 4, 5])])
    rng = np.random.default_rng(2)
    inputs = {"a": rng.integers(-2, 3, (3, 1, 5)).astype(dtype),
              "b": rng.integers(-2, 3, (4, 1)).astype(dtype)}
    _, _, stats = compare_backends(path, inputs, poison=True)
    assert stats.transfer_bytes == 0


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_where_not_isnan_isinf_run_on_the_device(tmp_path, dtype):
    """Where (its three operands broadcast), Not, IsNaN and IsInf (each sign alone or
    both) on the device, NaN and infinities among the floats: as the numpy backend
    (minilm_int8's seven Where and six IsNaN ran on the host, a round trip each)."""
    from onnx import helper

    nodes = [helper.make_node("IsNaN", ["x"], ["nan"]),
             helper.make_node("IsInf", ["x"], ["inf"]),
             helper.make_node("IsInf", ["x"], ["pos"], detect_negative=0),
             helper.make_node("IsInf", ["x"], ["neg"], detect_positive=0),
             helper.make_node("Or", ["nan", "inf"], ["bad"]),
             helper.make_node("Not", ["bad"], ["good"]),
             helper.make_node("Where", ["good", "a", "b"], ["picked"]),
             helper.make_node("Where", ["c", "a", "b"], ["chosen"])]
    path = _model(tmp_path, nodes,
                  [("x", np.float32, [3, 4, 5]), ("a", dtype, [3, 1, 5]), ("b", dtype, [4, 1]),
                   ("c", np.bool_, [5])],
                  [("picked", dtype, [3, 4, 5]), ("chosen", dtype, [3, 4, 5]),
                   ("pos", np.bool_, [3, 4, 5]), ("neg", np.bool_, [3, 4, 5]),
                   ("good", np.bool_, [3, 4, 5])])
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    x.reshape(-1)[[1, 7, 19, 30, 44]] = [np.nan, np.inf, -np.inf, np.nan, np.inf]
    inputs = {"x": x, "a": rng.integers(-9, 9, (3, 1, 5)).astype(dtype),
              "b": rng.integers(-9, 9, (4, 1)).astype(dtype),
              "c": rng.integers(0, 2, 5).astype(np.bool_)}
    expected, actual, stats = compare_backends(path, inputs, poison=True)
    assert not stats.host_ops
    finite = np.isfinite(x)
    np.testing.assert_array_equal(actual["good"], finite)
    np.testing.assert_array_equal(actual["pos"], np.isposinf(x))
    np.testing.assert_array_equal(actual["neg"], np.isneginf(x))
    np.testing.assert_array_equal(actual["picked"], np.where(finite, inputs["a"], inputs["b"]))


def test_expand_runs_on_the_device(tmp_path):
    from onnx import helper, numpy_helper

    shape = numpy_helper.from_array(np.array([2, 3, 4, 5], np.int64), "shape")
    nodes = [helper.make_node("Expand", ["x", "shape"], ["y"]),
             helper.make_node("Expand", ["x", "dims"], ["z"])]
    path = _model(tmp_path, nodes, [("x", np.float32, [3, 1, 5]), ("dims", np.int64, [3])],
                  [("y", np.float32, [2, 3, 4, 5]), ("z", np.float32, None)], [shape])
    inputs = {"x": np.random.default_rng(4).standard_normal((3, 1, 5)).astype(np.float32),
              "dims": np.array([1, 6, 5], np.int64)}
    expected, actual, stats = compare_backends(path, inputs, poison=True)
    assert actual["z"].shape == (3, 6, 5)
    assert not stats.host_ops


# -- max pools as two separable passes (kernels/normalize.py, _separable_max) ------------------

SEPARABLE = [
    ("spp 5", (1, 3, 13, 13), [5, 5], {"pads": [2, 2, 2, 2]}),
    ("spp 13", (1, 2, 13, 13), [13, 13], {"pads": [6, 6, 6, 6]}),
    ("dilated", (2, 2, 14, 15), [5, 5], {"dilations": [2, 2], "pads": [4, 4, 4, 4]}),
    ("uneven pads", (1, 2, 12, 16), [7, 5], {"pads": [3, 1, 2, 2]}),
    ("stride 2, ceil", (1, 2, 16, 20), [9, 9], {"strides": [2, 1], "pads": [4, 4, 4, 4],
                                                "ceil_mode": 1}),
]


@pytest.mark.parametrize("name, shape, kernel, props", SEPARABLE, ids=[s[0] for s in SEPARABLE])
@pytest.mark.parametrize("dtype, np_dtype", [("f32", np.float32), ("i32", np.int32)])
def test_separable_max_pool(name, shape, kernel, props, dtype, np_dtype):
    from palimpsest.backends.opencl.kernels.normalize import SEPARABLE_WIDTH
    from test_opencl_normalize import _data, _pool_graph

    graph = _pool_graph("max", shape, kernel, dtype, **props)
    x = _data(shape, np_dtype) if dtype != "f32" else _data(shape)
    if dtype == "f32":
        x[0, 0, 3, 4] = np.nan   # NaN wins, as np.maximum's
    _, actual, _ = compare_backends(graph, {"x": x}, poison=True)
    (y,) = actual.values()
    kh, kw = kernel
    # the shape is one the separable form takes
    assert shape[3] <= SEPARABLE_WIDTH and kh * kw * y.shape[3] > 2 * (kh * shape[3] + kw * y.shape[3])


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
def test_range_and_constant_of_shape_into_planned_outs(tmp_path, dtype):
    """As YOLO heads make their anchor grids: Range's limit and ConstantOfShape's shape
    come from a shape, so the plan sizes the outs and both run on the device."""
    from onnx import TensorProto, helper, numpy_helper

    to = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64,
          np.int32: TensorProto.INT32}[dtype]
    inits = [numpy_helper.from_array(np.array(3, np.int64), "axis3"),
             numpy_helper.from_array(np.array(dtype(0.5 if dtype == np.float32 else -2)),
                                     "start"),
             numpy_helper.from_array(np.array(dtype(0.75 if dtype == np.float32 else 3)),
                                     "delta"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([0], np.int64), "zero")]
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "axis3"], ["width"]),
             helper.make_node("Cast", ["width"], ["limit"], to=to),
             helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
             helper.make_node("Unsqueeze", ["width", "zero"], ["w1"]),
             helper.make_node("Concat", ["w1", "one"], ["dims"], axis=0),
             helper.make_node("ConstantOfShape", ["dims"], ["c"],
                              value=numpy_helper.from_array(np.array([7], dtype)))]
    path = _model(tmp_path, nodes, [("x", np.float32, [1, 3, 4, 10])],
                  [("r", dtype, None), ("c", dtype, None)], inits)
    x = np.zeros((1, 3, 4, 10), np.float32)
    expected, actual, stats = compare_backends(path, {"x": x}, poison=True)
    assert actual["c"].shape == (10, 1) and (actual["c"] == 7).all()
    assert not stats.host_ops


# -- slices as rows (kernels/slicing.py, _rows) ----------------------------------------------------

SLICES = {
    "focus rows": ([0], [2 ** 31], [2], [2]),
    "focus columns": ([1], [2 ** 31], [3], [2]),
    "reversed columns": ([-2], [-2 ** 31], [3], [-3]),
    "crop both": ([1, 2], [-1, 19], [2, 3], [1, 1]),
    "three axes": ([1, 5, 0], [3, 1, 20], [1, 2, 3], [1, -2, 2]),
}


@pytest.mark.parametrize("case", sorted(SLICES))
@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.int64])
def test_row_slices(tmp_path, case, dtype):
    from onnx import TensorProto, helper, numpy_helper

    starts, ends, axes, steps = SLICES[case]
    inits = [numpy_helper.from_array(np.array(v, np.int64), n)
             for n, v in (("starts", starts), ("ends", ends), ("axes", axes), ("steps", steps))]
    shape = (2, 4, 10, 21)
    x = (np.random.default_rng(5).standard_normal(shape) * 50).astype(dtype)
    onnx_type = {np.float32: TensorProto.FLOAT, np.uint8: TensorProto.UINT8,
                 np.int64: TensorProto.INT64}[dtype]
    node = helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx_type, shape)],
                              [helper.make_tensor_value_info("y", onnx_type, None)], inits)
    import onnx

    path = tmp_path / "slice.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    _, actual, stats = compare_backends(str(path), {"x": x}, poison=True)
    index = [slice(None)] * 4
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[a] = slice(s, None if abs(e) >= 2 ** 31 else e, st)
    np.testing.assert_array_equal(actual["y"], x[tuple(index)])
    assert not stats.host_ops


# -- concat as blocks by outer count (kernels/movement.py) -----------------------------------------

@pytest.mark.parametrize("axis, shapes", [
    (1, [(1, 192, 6, 6), (1, 96, 6, 6), (1, 5, 6, 6)]),        # one outer: 2-D, batch 1
    (1, [(3, 4, 5, 8), (3, 2, 5, 8)]),                          # three outers
    (3, [(2, 3, 4, 17), (2, 3, 4, 1), (2, 3, 4, 13)]),          # prime blocks: 1-D
    (0, [(2, 7), (5, 7)]),
])
@pytest.mark.parametrize("dtype", [np.float32, np.uint8])
def test_concat(tmp_path, axis, shapes, dtype):
    from onnx import TensorProto, helper

    onnx_type = {np.float32: TensorProto.FLOAT, np.uint8: TensorProto.UINT8}[dtype]
    names = [f"x{i}" for i in range(len(shapes))]
    node = helper.make_node("Concat", names, ["y"], axis=axis)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, onnx_type, s)
                      for n, s in zip(names, shapes)],
        [helper.make_tensor_value_info("y", onnx_type, None)])
    import onnx

    path = tmp_path / "concat.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    rng = np.random.default_rng(6)
    feeds = {n: (rng.standard_normal(s) * 50).astype(dtype) for n, s in zip(names, shapes)}
    _, actual, stats = compare_backends(str(path), feeds, poison=True)
    np.testing.assert_array_equal(actual["y"], np.concatenate(list(feeds.values()), axis))
    assert not stats.host_ops


def test_row_slice_with_trailing_unit_axes(tmp_path):
    """magika's conv slices: out (1, 12, 9, 1), the rows along axis 2."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.array(v, np.int64), n)
             for n, v in (("starts", [1, 2]), ("ends", [13, 20]), ("axes", [1, 2]),
                          ("steps", [1, 2]))]
    shape = (1, 16, 20, 1)
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    node = helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, shape)], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], inits)
    import onnx

    path = tmp_path / "slice.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    _, actual, _ = compare_backends(str(path), {"x": x}, poison=True)
    np.testing.assert_array_equal(actual["y"], x[:, 1:13, 2:20:2, :])
