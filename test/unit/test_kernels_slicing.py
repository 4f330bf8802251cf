"""kernel.split and kernel.slice (dialects/kernel_slicing.py) on the numpy and OpenCL
backends: ONNX's Split and Slice node cases through the kernel level (their sizes,
starts, ends, axes and steps as constants: as graph inputs the lowering cannot read them
and the op stays kernel.generic), numpy poisoned, OpenCL with nothing on the host; the
shapes of the corpus's exports (an LSTM cell's gate split, magika's slices) and negative
steps against onnxruntime; what stays kernel.generic."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import onnx_node_cases as nc  # noqa: E402
from example_models import onnxruntime_run  # noqa: E402
from opencl_support import requires_opencl  # noqa: E402
from palimpsest.backends.binding import find_function  # noqa: E402
from palimpsest.backends.numpy import run_with_stats  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402
from palimpsest.passes.pass_manager import PassManager, parse_pipeline  # noqa: E402

POLICY = nc.load_policy()
CASES = nc.case_names({"Split", "Slice"})


def _lowered(model):
    module = import_onnx(model)
    PassManager(parse_pipeline("infer-shapes,default")).run(module)
    return module


def _kernels(module) -> set:
    return {op.name for op in module.walk() if op.name.startswith("kernel.")}


def _case(name):
    case = nc.load_case(name)
    reason = nc.skip_reason(case, POLICY)
    if reason is not None:
        pytest.skip(reason)
    model = onnx.load(str(nc.ensure_cache() / name / "model.onnx"))
    feeds = dict(case.feeds)
    for value in list(model.graph.input)[1:]:
        model.graph.initializer.append(numpy_helper.from_array(feeds.pop(value.name),
                                                               value.name))
        model.graph.input.remove(value)
    module = _lowered(model)
    kernel = "kernel.split" if case.op_type == "Split" else "kernel.slice"
    assert _kernels(module) == {kernel}
    return case, module, feeds


@pytest.mark.parametrize("name", CASES)
def test_node_case_on_numpy(name):
    case, module, feeds = _case(name)
    outputs, _ = run_with_stats(find_function(module, None), feeds, poison=True)
    nc.assert_results_match(case, [outputs[n] for n in case.node.output], POLICY)


@requires_opencl
@pytest.mark.parametrize("name", CASES)
def test_node_case_on_opencl(name):
    from palimpsest.backends.numpy.arena import RunStats
    from palimpsest.backends.opencl.executor import run

    case, module, feeds = _case(name)
    stats = RunStats()
    outputs = run(find_function(module, None), feeds, poison=True, stats=stats)
    assert not stats.host_ops, f"ran on the host: {stats.host_ops}"
    nc.assert_results_match(case, [outputs[n] for n in case.node.output], POLICY)


def _model(x, node, constants, outs):
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def _i64(*values):
    return np.array(values, np.int64)


REAL = {
    # an exported LSTM cell's gates (captcha_crnn: 40 of these per run)
    "lstm_gates": ((20, 400), "Split", {"split": _i64(100, 100, 100, 100)}, {"axis": 1}, 4),
    "uneven_axis0": ((7, 3, 5), "Split", {"split": _i64(2, 0, 5)}, {}, 3),
    "num_outputs": ((2, 10, 6), "Split", {}, {"axis": -1, "num_outputs": 4}, 4),
    # magika: a strided, axis-permuted slice of a feature map
    "magika_steps": ((2, 64, 50, 1), "Slice",
                     {"starts": _i64(0, 0, 0, 0), "ends": _i64(10 ** 9, 10 ** 9, 10 ** 9, 1),
                      "axes": _i64(0, 2, 1, 3), "steps": _i64(1, 1, 1, 1)}, {}, 1),
    "negative_steps": ((3, 40, 33), "Slice",
                       {"starts": _i64(-1, 30), "ends": _i64(-100, 2),
                        "axes": _i64(2, 1), "steps": _i64(-3, -4)}, {}, 1),
    "crop": ((1, 8, 64, 64), "Slice",
             {"starts": _i64(4, 4), "ends": _i64(-4, 60), "axes": _i64(2, 3)}, {}, 1),
}


def _real(name):
    shape, op, constants, attrs, count = REAL[name]
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    outs = [f"y{i}" for i in range(count)]
    names = {"Split": ["x", "split"] if "split" in constants else ["x"],
             "Slice": ["x", "starts", "ends", "axes", "steps"][:1 + len(constants)]}[op]
    model = _model(x, helper.make_node(op, names, outs, **attrs), constants, outs)
    return model, {"x": x}, outs


def _onnxruntime(model, feeds):
    """The model's outputs, in order, from onnxruntime."""
    pytest.importorskip("onnxruntime")
    return list(onnxruntime_run(model, feeds).values())


@pytest.mark.parametrize("backend", ["numpy", pytest.param("opencl", marks=requires_opencl)])
@pytest.mark.parametrize("name", list(REAL))
def test_real_shapes_against_onnxruntime(name, backend):
    from palimpsest.backends.numpy.session import Session

    model, feeds, outs = _real(name)
    want = _onnxruntime(model, feeds)
    assert _kernels(_lowered(model)) <= {"kernel.split", "kernel.slice"}
    session = Session(import_onnx(model), backend=backend, poison=True)
    for _ in range(2):
        got = session.run(feeds)
        for out, expected in zip(outs, want):
            np.testing.assert_array_equal(got[out], expected)
    if backend == "opencl":
        assert not session.last_stats.run_stats.host_ops


def test_what_stays_generic():
    """Starts from a graph input, and a slice along a `?` dim, stay kernel.generic; the
    same slice along a static dim of that input lowers."""
    x = np.zeros((4, 6), np.float32)
    model = _model(x, helper.make_node("Slice", ["x", "starts", "ends"], ["y"]),
                   {"ends": _i64(2)}, ["y"])
    model.graph.input.append(helper.make_tensor_value_info("starts", TensorProto.INT64, [1]))
    assert _kernels(_lowered(model)) == {"kernel.generic"}
    for axis, kernel in ((0, "kernel.generic"), (1, "kernel.slice")):
        model = _model(x, helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["y"]),
                       {"starts": _i64(1), "ends": _i64(3), "axes": _i64(axis)}, ["y"])
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
        assert _kernels(_lowered(model)) == {kernel}
