"""Speed on real models (issue 16), what the executor and the lowering rules do for it:

1. A 1-D Conv (Silero VAD's STFT and encoder) lowers to kernel.conv2d over a unit height
   through buffer.reshape aliases (passes/kernel_rules.py `_lower_conv1d`), not to
   kernel.generic: random groups, strides, dilations, pads, auto_pad and bias against the
   graph level with poisoning on, at the kernel level and planned, and followed by an
   activation (the epilogue fold declines the reshaped out and the conv still lowers).
2. The executor loop's per-function programs (backends/loop.py) keep a run's results its
   own: a result held across later runs keeps its values, constants bound once; inputs
   bound without the full check only when they fit exactly.
3. The numpy pools reused across runs only when no result (nor view of one) is held.
4. numpy fast paths (backends/numpy/kernels.py) bit-exact against the reference kernels:
   ScatterND, MatMulInteger, ConvInteger, DynamicQuantizeLinear.
"""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")

from test_kernels import check, kernel_ops, model_of, node, rand  # noqa: E402

from palimpsest.backends.numpy.session import Session  # noqa: E402
from palimpsest.backends.reference.executor import run as run_graph  # noqa: E402
from palimpsest.backends.binding import find_function  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402
from palimpsest.passes.pass_manager import PassManager, parse_pipeline  # noqa: E402


def _conv1d_case(seed):
    rng = np.random.default_rng(seed)
    while True:
        group = int(rng.choice([1, 1, 2, 3]))
        cg, mg = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        if seed % 4 == 3:
            cg, group = 1, int(rng.integers(2, 5))   # depthwise
        k = int(rng.integers(1, 6))
        stride, dilation = int(rng.integers(1, 4)), int(rng.integers(1, 3))
        pads = [int(rng.integers(0, 3)), int(rng.integers(0, 3))]
        n, length = int(rng.integers(1, 3)), int(rng.integers(6, 40))
        if (k - 1) * dilation + 1 <= length + sum(pads):
            break
    x = rand(rng, (n, group * cg, length))
    consts = {"w": rand(rng, (group * mg, cg, k))}
    ins = ["x", "w"]
    if seed % 2:
        consts["b"] = rand(rng, (group * mg,))
        ins.append("b")
    attrs = {"group": group, "strides": [stride], "dilations": [dilation],
             "kernel_shape": [k]}
    if seed % 5 == 2:
        attrs["auto_pad"] = "SAME_UPPER"
        attrs["strides"] = [1]
    else:
        attrs["pads"] = pads
    return x, consts, ins, attrs


@pytest.mark.parametrize("seed", range(10))
def test_conv1d_lowers_to_conv2d(seed):
    x, consts, ins, attrs = _conv1d_case(seed)
    model = model_of([node("Conv", ins, attrs)], {"x": x}, consts)
    module, _ = check(model, {"x": x}, "kernel.conv2d", count=1)
    assert not kernel_ops(module, "kernel.generic")
    reshapes = [op for op in module.walk() if op.name == "buffer.reshape"]
    assert len(reshapes) == 3   # x, w and the out seen as 4-D (aliases, no copy)


def _graph_result(model, feeds):
    graph = import_onnx(model)
    PassManager(parse_pipeline("infer-shapes")).run(graph)
    return run_graph(find_function(graph, None), feeds)


@pytest.mark.parametrize("seed", range(4))
def test_conv1d_planned_with_activation(seed):
    """The default pipeline (epilogue folding, planning) with poisoning on: the conv is a
    kernel, the relu after it too, and the planned run matches the graph level."""
    x, consts, ins, attrs = _conv1d_case(seed)
    model = model_of([node("Conv", ins, attrs, outs=("c",)), node("Relu", ["c"]),
                      node("Conv", ["y", "w2"], {"kernel_shape": [1]}, outs=("z",))],
                     {"x": x}, dict(consts, w2=rand(np.random.default_rng(seed), (
                         2, consts["w"].shape[0], 1))), outputs=("z",))
    want = _graph_result(model, {"x": x})
    session = Session(import_onnx(model), poison=True)
    got = session.run({"x": x})
    np.testing.assert_allclose(got["z"], want["z"], rtol=1e-5, atol=1e-5)
    module = session.last_plan.module
    assert len(kernel_ops(module, "kernel.conv2d")) == 2
    assert not kernel_ops(module, "kernel.generic")


@pytest.mark.parametrize("seed", range(4))
def test_conv1d_opencl(seed):
    from opencl_support import UNAVAILABLE, compare_backends

    if UNAVAILABLE is not None:
        pytest.skip(f"OpenCL tests need a device: {UNAVAILABLE}")
    x, consts, ins, attrs = _conv1d_case(seed)
    model = model_of([node("Conv", ins, attrs, outs=("c",)), node("Relu", ["c"])],
                     {"x": x}, consts)
    want = _graph_result(model, {"x": x})
    _, got, _ = compare_backends(import_onnx(model), {"x": x}, poison=True)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)


def _add_model():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    return model_of([node("Add", ["x", "c"])], {"x": x},
                    {"c": np.full((2, 3), 10, np.float32)}), x


def test_program_constants_bound_once_and_rechecked():
    """The loop binds constants once per executor; a constant whose attribute changes
    between runs (a pass rewrote it) is read again."""
    from palimpsest.ir import attributes as A

    model, x = _add_model()
    session = Session(import_onnx(model))
    first = session.run({"x": x})["y"]
    np.testing.assert_array_equal(first, x + 10)
    held = first.copy()
    again = session.run({"x": x + 1})["y"]
    np.testing.assert_array_equal(again, x + 11)
    np.testing.assert_array_equal(first, held)   # a result is the caller's: never reused
    constant = next(op for op in session.last_plan.module.walk()
                    if op.name == "buffer.constant")
    old = constant.properties["value"]
    constant.properties["value"] = A.DenseElementsAttr.from_numpy(
        np.full((2, 3), 20, np.float32), old.type)
    np.testing.assert_array_equal(session.run({"x": x})["y"], x + 20)


def test_fast_binding_still_checks():
    """Inputs taken as they are only when they fit exactly; anything else is converted
    or refused by the full check, with its message."""
    from palimpsest.backends.binding import BindingError

    model, x = _add_model()
    session = Session(import_onnx(model))
    strided = np.asfortranarray(x)   # taken as it is, copied in by the executor
    np.testing.assert_array_equal(session.run({"x": strided})["y"], x + 10)
    with pytest.raises(BindingError, match="input 'x': expected"):
        session.run({"x": x.tolist()})   # float64 once converted
    with pytest.raises(BindingError, match="input 'x': expected"):
        session.run({"x": x.astype(np.float64)})
    with pytest.raises(BindingError, match="input 'x': expected shape"):
        session.run({"x": x.reshape(3, 2)})
    with pytest.raises(BindingError, match="missing input 'x'"):
        session.run({})
    executor = session.last_plan.executor
    func = session.last_plan.func
    with pytest.raises(BindingError, match="input 'x'"):
        executor.run(func, {"x": np.zeros((2, 2), np.float32)})
    with pytest.raises(BindingError, match="unknown input 'z'"):
        executor.run(func, {"x": x, "z": x})


def test_pool_arenas_reused_only_when_no_result_is_held():
    """The numpy executor reuses a pool's arena (and the views it cached) in the next
    run only when nothing of the last run's results is alive: not a result, not a view
    of one; a held result keeps its values."""
    model, x = _add_model()
    session = Session(import_onnx(model), poison=True)
    session.run({"x": x})
    executor = session.last_plan.executor
    first = executor.kept["io"]
    session.run({"x": x})
    assert executor.kept["io"] is first   # nothing held: the same memory again
    result = session.run({"x": x})["y"]
    held = executor.kept["io"]
    session.run({"x": x + 1})
    assert executor.kept["io"] is not held
    np.testing.assert_array_equal(result, x + 10)
    row = result[1]
    del result
    latest = executor.kept["io"]
    session.run({"x": x})
    assert executor.kept["io"] is latest   # `row` is of an older arena
    result = session.run({"x": x + 2})["y"]
    row = result[1]
    del result
    before = executor.kept["io"]
    session.run({"x": x})
    assert executor.kept["io"] is not before
    np.testing.assert_array_equal(row, x[1] + 12)   # a view of a result keeps it too
    np.testing.assert_array_equal(session.run({"x": x})["y"], x + 10)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_scatter_nd_fast_path(reduction, depth):
    """ScatterND's fast path (kernels.py: one fancy assignment or ufunc.at) against the
    reference kernel's loop: negative indices, duplicates (reduced in order; with none,
    the last update stays), and no temporary."""
    from palimpsest.backends.numpy import run_with_stats
    from test_kernels import lower

    rng = np.random.default_rng(depth)
    data = rng.standard_normal((4, 3, 5)).astype(np.float32)
    count = 6
    index = np.stack([rng.integers(-s, s, count) for s in data.shape[:depth]], axis=-1)
    if reduction != "none":
        index[1] = index[0]   # a duplicate, reduced in order
    updates = rng.standard_normal((count,) + data.shape[depth:]).astype(np.float32)
    if reduction == "none":   # a duplicate: same update (ONNX leaves the order open)
        index[1] = index[0]
        updates[1] = updates[0]
    attrs = {} if reduction == "none" else {"reduction": reduction}
    model = model_of([node("ScatterND", ["x", "i", "u"], attrs)], {"x": data},
                     {"i": index.astype(np.int64), "u": updates}, opset=18)
    want = _graph_result(model, {"x": data})
    module = lower(import_onnx(model))
    got, stats = run_with_stats(find_function(module, None), {"x": data}, poison=True)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6)
    assert "graph.scatter_nd" not in stats.temporary_ops


def test_scatter_nd_out_of_range_still_an_error():
    from palimpsest.ir.diagnostics import DiagnosticError

    data = np.zeros((3, 2), np.float32)
    model = model_of([node("ScatterND", ["x", "i", "u"])], {"x": data},
                     {"i": np.array([[3]], np.int64), "u": np.ones((1, 2), np.float32)})
    with pytest.raises(DiagnosticError):
        Session(import_onnx(model)).run({"x": data})


@pytest.mark.parametrize("a_type,b_type", [(np.uint8, np.int8), (np.uint8, np.uint8),
                                           (np.int8, np.int8)])
@pytest.mark.parametrize("k", [16, 1024])
@pytest.mark.parametrize("b_zero", ["none", "tensor", "column"])
def test_matmul_integer_fast_path(a_type, b_type, k, b_zero):
    """MatMulInteger's fast path (float32 GEMM where exact, else float64; a constant B
    centred once) against the reference kernel, bit for bit, run twice (the kept B)."""
    from palimpsest.backends.numpy import run_with_stats
    from test_kernels import lower

    rng = np.random.default_rng(k)
    info = np.iinfo

    def ints(dtype, shape):
        return rng.integers(info(dtype).min, info(dtype).max + 1, shape).astype(dtype)

    a = ints(a_type, (2, 3, k))
    consts = {"b": ints(b_type, (k, 5)), "az": np.array(ints(a_type, ()), a_type)}
    ins = ["a", "b", "az"]
    if b_zero != "none":
        consts["bz"] = ints(b_type, () if b_zero == "tensor" else (5,))
        ins.append("bz")
    model = model_of([node("MatMulInteger", ins)], {"a": a}, consts)
    want = _graph_result(model, {"a": a})
    module = lower(import_onnx(model))
    func = find_function(module, None)
    for _ in range(2):
        got, stats = run_with_stats(func, {"a": a}, poison=True)
        np.testing.assert_array_equal(got["y"], want["y"])
        assert "graph.matmul_integer" not in stats.temporary_ops


@pytest.mark.parametrize("seed", range(8))
def test_conv_integer_fast_path(seed):
    """ConvInteger's fast path against the reference, bit for bit: groups, strides,
    dilations, pads, u8/i8, per-tensor and per-channel W zero points, run twice."""
    from palimpsest.backends.numpy import run_with_stats
    from test_kernels import lower

    rng = np.random.default_rng(seed)
    group = int(rng.choice([1, 2, 3]))
    cg, mg = int(rng.integers(1, 4)), int(rng.integers(1, 3))
    k = [int(rng.integers(1, 4)), int(rng.integers(1, 4))]
    w_type = np.int8 if seed % 2 else np.uint8
    x = rng.integers(0, 256, (int(rng.integers(1, 3)), group * cg, 9, 8)).astype(np.uint8)
    info = np.iinfo(w_type)
    consts = {"w": rng.integers(info.min, info.max + 1, (group * mg, cg) + tuple(k)
                                ).astype(w_type),
              "xz": np.array(rng.integers(0, 256), np.uint8)}
    ins = ["x", "w", "xz"]
    if seed % 3:
        consts["wz"] = rng.integers(info.min, info.max + 1, () if seed % 3 == 1 else (
            group * mg,)).astype(w_type)
        ins.append("wz")
    attrs = {"group": group, "kernel_shape": k,
             "strides": [int(rng.integers(1, 3)), int(rng.integers(1, 3))],
             "dilations": [int(rng.integers(1, 3)), 1],
             "pads": [int(rng.integers(0, 2)) for _ in range(4)]}
    model = model_of([node("ConvInteger", ins, attrs)], {"x": x}, consts)
    want = _graph_result(model, {"x": x})
    func = find_function(lower(import_onnx(model)), None)
    for _ in range(2):
        got, stats = run_with_stats(func, {"x": x}, poison=True)
        np.testing.assert_array_equal(got["y"], want["y"])
        assert "graph.conv_integer" not in stats.temporary_ops


def test_conv_integer_fast_path_float64():
    """A reduction too long for exact float32 sums (288 * 255 * 255 > 2^24): float64."""
    from palimpsest.backends.numpy import run_with_stats
    from test_kernels import lower

    rng = np.random.default_rng(9)
    x = rng.integers(0, 256, (1, 32, 6, 6)).astype(np.uint8)
    w = rng.integers(0, 256, (4, 32, 3, 3)).astype(np.uint8)
    w[0, 0, 0, 0] = 255
    x[0, 0, 0, 0] = 255
    model = model_of([node("ConvInteger", ["x", "w"], {"kernel_shape": [3, 3]})],
                     {"x": x}, {"w": w})
    want = _graph_result(model, {"x": x})
    got, stats = run_with_stats(find_function(lower(import_onnx(model)), None), {"x": x},
                                poison=True)
    np.testing.assert_array_equal(got["y"], want["y"])
    assert "graph.conv_integer" not in stats.temporary_ops


@pytest.mark.parametrize("case", ["normal", "positive", "negative", "zeros", "ties", "one"])
def test_dynamic_quantize_linear_fast_path(case):
    """DynamicQuantizeLinear's fast path against the reference, bit for bit (all three
    results), including all-positive and all-negative inputs, zeros (scale 0) and
    values at exact .5 steps."""
    from palimpsest.backends.numpy import run_with_stats
    from test_kernels import lower

    rng = np.random.default_rng(3)
    x = {"normal": rng.standard_normal((4, 33)),
         "positive": rng.random((4, 33)) + 0.5,
         "negative": -rng.random((4, 33)) - 0.5,
         "zeros": np.zeros((4, 33)),
         "ties": np.linspace(-2.55, 2.55, 132).reshape(4, 33),
         "one": np.full((1, 1), 3.0)}[case].astype(np.float32)
    model = model_of([node("DynamicQuantizeLinear", ["x"], outs=("y", "s", "z"))],
                     {"x": x}, outputs=("y", "s", "z"))
    want = _graph_result(model, {"x": x})
    got, stats = run_with_stats(find_function(lower(import_onnx(model)), None), {"x": x},
                                poison=True)
    for name in ("y", "s", "z"):
        assert got[name].dtype == want[name].dtype
        np.testing.assert_array_equal(got[name], want[name])
    assert "graph.dynamic_quantize_linear" not in stats.temporary_ops
