"""What the OpenCL tests share: the skip marker (no pyopencl or no platform: the tests
say why and skip) and a comparison of the OpenCL backend with the numpy backend."""

from __future__ import annotations

import os

import numpy as np
import pytest

from palimpsest.backends.opencl.runtime import availability

UNAVAILABLE = availability()
if UNAVAILABLE is not None and os.environ.get("PALIMPSEST_REQUIRE_OPENCL"):
    # CI installs PoCL (.ci/run): a missing device there is a failure, not a skip
    raise RuntimeError(f"PALIMPSEST_REQUIRE_OPENCL is set but: {UNAVAILABLE}")
requires_opencl = pytest.mark.skipif(UNAVAILABLE is not None,
                                     reason=f"OpenCL tests need a device: {UNAVAILABLE}")


def compare_backends(module_or_path, inputs: dict, *, rtol: float = 1e-4, atol: float = 1e-5,
                     host_ops_allowed=(), **session_options):
    """Run `module_or_path` (graph-level IR text, module or path) through a numpy and an
    OpenCL session; assert the results agree and that only `host_ops_allowed` ran on
    the host. Returns (numpy results, OpenCL results, the OpenCL run's stats)."""
    from palimpsest.backends.numpy.session import Session

    if isinstance(module_or_path, str) and not module_or_path.endswith((".pal", ".onnx")):
        from palimpsest.dialects import load_all
        from palimpsest.ir.parser import parse

        load_all()
        module_or_path = parse(module_or_path, "<test>")
    expected = Session(module_or_path, **session_options).run(inputs)
    session = Session(module_or_path, backend="opencl", **session_options)
    actual = session.run(inputs)
    assert set(actual) == set(expected)
    for name in expected:
        want, got = np.asarray(expected[name]), np.asarray(actual[name])
        assert got.dtype == want.dtype and got.shape == want.shape, name
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True,
                                       err_msg=name)
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)
    stats = session.last_stats.run_stats
    unexpected = {op: n for op, n in stats.host_ops.items() if op not in host_ops_allowed}
    assert not unexpected, f"ran on the host: {unexpected}"
    return expected, actual, stats


def recurrent_model(tmp_path, op_type: str, values: dict, names: list, outputs,
                    x_shape, *, r_input: bool = False, **attrs) -> tuple:
    """A one-node ONNX `op_type` (LSTM, GRU) saved to tmp_path: `names` its ins ("" for
    one left out), `values` those other than X (sequence lengths "L" as int32, the rest
    float32), R a graph input when `r_input` (not a constant: prepack-weights leaves it
    as given, packed_r = 0); X random. Returns (path, feeds, model)."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper

    names = list(names)
    while not names[-1]:
        names.pop()
    used = {k: v for k, v in values.items() if k in names}
    feeds = {"X": np.random.default_rng(5).standard_normal(x_shape).astype(np.float32)}
    inputs = [h.make_tensor_value_info("X", T.FLOAT, list(x_shape))]
    if r_input:
        feeds["R"] = used.pop("R").astype(np.float32)
        inputs.append(h.make_tensor_value_info("R", T.FLOAT, list(feeds["R"].shape)))
    node = h.make_node(op_type, names, list(outputs), **attrs)
    graph = h.make_graph(
        [node], op_type.lower(), inputs,
        [h.make_tensor_value_info(o, T.FLOAT, None) for o in outputs if o],
        initializer=[numpy_helper.from_array(v.astype(np.int32 if k == "L" else np.float32), k)
                     for k, v in used.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 14)])
    model.ir_version = 8
    path = tmp_path / f"{op_type.lower()}.onnx"
    onnx.save(model, str(path))
    return str(path), feeds, model


def on_device_as_onnxruntime(path: str, feeds: dict, model, op_name: str, *,
                             tolerance: float = 1e-5) -> None:
    """`compare_backends` on the ONNX model saved at `path` (poisoning on), `op_name`
    run on the device, and the OpenCL results against onnxruntime's (one thread)."""
    import onnxruntime as ort

    _, got, stats = compare_backends(path, feeds, rtol=tolerance, atol=tolerance, poison=True)
    assert op_name not in stats.host_ops
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options)
    names = [o.name for o in model.graph.output]
    for name, want in zip(names, session.run(names, feeds)):
        np.testing.assert_allclose(got[name], want, rtol=tolerance, atol=tolerance,
                                   err_msg=name)


def record_calls(monkeypatch, module, name: str) -> list:
    """Wrap `module.name` (a generator's form) so that each call's arguments are appended
    to the list returned: which form a launch took."""
    calls = []
    original = getattr(module, name)

    def recorded(*args):
        calls.append(args)
        return original(*args)

    monkeypatch.setattr(module, name, recorded)
    return calls
