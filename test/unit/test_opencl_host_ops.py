"""What the OpenCL executor does around an op it runs on the host (generic_ops.py
`_on_host`) and around a run's outputs: constants read as uploaded, and a wait for the
queue only where the host reads the data next (executor.py `_read`, `_write`)."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from opencl_support import compare_backends, requires_opencl  # noqa: E402
from test_quant_fast import _dq_lstm  # noqa: E402

LSTM = "graph.dynamic_quantize_lstm"


def _host_lstm(tmp_path):
    """A DynamicQuantizeLSTM over a batch of two (the device kernel's is one: it runs on
    the host) with its three outputs, Y, Y_h and Y_c."""
    import onnx

    model, feeds = _dq_lstm("forward", 5, 2, 8, 16, 5)
    path = tmp_path / "lstm.onnx"
    onnx.save(model, str(path))
    return str(path), feeds


@requires_opencl
def test_a_host_op_reads_a_constant_as_uploaded(tmp_path, monkeypatch):
    """An op run on the host reads a constant as the (read-only) host array uploaded, not
    a fresh download each run: what the numpy kernels keep by the weight (an 8-bit
    weight's float copy) is made at the first run only. (captcha_ocr_int8's 8210-column
    product made its 4 MiB copy every run: 45 ms of its 82.)"""
    from palimpsest.backends.numpy.session import Session
    from palimpsest.dialects.graph.reference import quant

    made = []
    original = quant.Centred._made
    monkeypatch.setattr(quant.Centred, "_made",
                        lambda self, dtype: made.append(dtype) or original(self, dtype))
    path, feeds = _host_lstm(tmp_path)
    session = Session(path, backend="opencl")
    first = {name: np.array(value) for name, value in session.run(feeds).items()}
    assert made
    count = len(made)
    again = session.run(feeds)
    assert len(made) == count
    assert session.last_stats.run_stats.host_ops.get(LSTM) == 1
    for name, value in first.items():
        np.testing.assert_array_equal(again[name], value, err_msg=name)


@requires_opencl
def test_a_run_waits_for_the_queue_only_where_the_host_reads(tmp_path, monkeypatch):
    """Each wait for PoCL's queue is a round trip to its worker thread (60-90 us on a
    small VM): the host op's operands are read with one wait for all of them, its
    results go to the device without one, and the run's three outputs are read with
    the run's one wait at its end. The results are the numpy backend's, poisoning on."""
    import pyopencl

    from palimpsest.backends.numpy.session import Session

    path, feeds = _host_lstm(tmp_path)
    compare_backends(path, feeds, rtol=1e-6, atol=1e-6, host_ops_allowed=(LSTM,),
                     poison=True)
    session = Session(path, backend="opencl")
    session.run(feeds)
    executor = session.last_plan.executor
    waits = []
    copy = pyopencl.enqueue_copy

    def counted_copy(*args, **kwargs):
        if kwargs.get("is_blocking", True):
            waits.append("copy")
        return copy(*args, **kwargs)

    monkeypatch.setattr(pyopencl, "enqueue_copy", counted_copy)
    synced = executor._synced
    monkeypatch.setattr(executor, "_synced", lambda: waits.append("finish") or synced())
    got = session.run(feeds)
    assert waits == ["finish", "finish"]
    expected = Session(path).run(feeds)
    for name in ("y", "y_h", "y_c"):
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-6, atol=1e-6,
                                   err_msg=name)


@requires_opencl
def test_a_host_op_after_a_host_op_does_not_wait(tmp_path):
    """A wait with nothing queued since the last one is skipped (on PoCL it still costs
    a round trip to the worker): Relu on the device, then two CumSums on the host (no
    generator) on pool memory, then the output read: one wait before the first CumSum
    and the run's one at its end, none before the second. Results the numpy backend's,
    poisoning on (a poisoned run's fills are queued work too)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from palimpsest.backends.numpy.session import Session

    axis = numpy_helper.from_array(np.array(1, np.int64), "axis")
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("CumSum", ["r", "axis"], ["a"]),
             helper.make_node("CumSum", ["a", "axis"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [axis])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = str(tmp_path / "cumsums.onnx")
    onnx.save(model, path)
    feeds = {"x": np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)}
    compare_backends(path, feeds, rtol=1e-6, atol=1e-6, host_ops_allowed=("graph.cum_sum",),
                     poison=True)
    session = Session(path, backend="opencl")
    session.run(feeds)
    device = session.last_plan.executor.device
    waits = []
    wait = device.wait
    device.wait = lambda queue: waits.append(queue) or wait(queue)
    try:
        got = session.run(feeds)
    finally:
        del device.wait
    assert session.last_stats.run_stats.host_ops == {"graph.cum_sum": 2}
    assert len(waits) == 2
    np.testing.assert_allclose(got["y"], np.cumsum(np.cumsum(np.maximum(feeds["x"], 0), 1), 1),
                               rtol=1e-5, atol=1e-5)


@requires_opencl
def test_a_host_op_works_on_device_memory_in_place(tmp_path):
    """On a device that is the host's CPU and keeps a USE_HOST_PTR buffer in the host's
    array (PoCL's), the pools are such arrays and a host op reads and writes them in
    place: nothing moved, each value the same array object at the next run (so that
    what a numpy kernel binds to its arrays stays bound), the results the numpy
    backend's, poisoning on. Buffers that are not pools (a run's inputs) are mapped."""
    from palimpsest.backends.numpy.session import Session
    from palimpsest.backends.opencl.runtime import device
    from palimpsest.ir.core import BlockArgument

    path, feeds = _host_lstm(tmp_path)
    compare_backends(path, feeds, rtol=1e-6, atol=1e-6, host_ops_allowed=(LSTM,),
                     poison=True)
    dev = device()
    session = Session(path, backend="opencl")
    session.run(feeds)
    executor = session.last_plan.executor
    seen = []
    run_host = executor._host._execute
    executor._host._execute = lambda op, host, depth: seen.append(dict(host)) or \
        run_host(op, host, depth)
    session.run(feeds)
    got = session.run(feeds)
    stats = session.last_stats.run_stats
    assert stats.host_ops.get(LSTM) == 1
    if not dev.limits.host_cpu:
        assert stats.transfer_bytes > 0
        return
    assert stats.transfer_bytes == 0
    assert dev.shares_host_memory == bool(executor.host_memory)
    first, second = seen   # (the inputs are new buffers each run)
    kept = [value for value in first if not isinstance(value, BlockArgument)]
    assert kept and all(second[value] is first[value] for value in kept)
    expected = Session(path).run(feeds)
    for name in ("y", "y_h", "y_c"):
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-6, atol=1e-6,
                                   err_msg=name)


@requires_opencl
def test_shared_host_memory_is_checked():
    """A CPU device shares a USE_HOST_PTR buffer's array only where a fill shows in the
    array and the array's bytes read back (PoCL: yes); a GPU's never."""
    import dataclasses

    from palimpsest.backends.opencl.runtime import Device, device

    dev = device()
    assert dev.shares_host_memory == dev.limits.host_cpu
    mem, host = dev.host_buffer(1000, poison=True)
    dev.queue.finish()
    if host is None:
        return
    assert host.ctypes.data % dev.alignment == 0 and host.nbytes == 1000
    assert np.all(host == 0x5A)
    other = Device.__new__(Device)
    other.limits = dataclasses.replace(dev.limits, host_cpu=False)
    assert other.shares_host_memory is False
