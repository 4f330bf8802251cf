"""The float LSTM (`kernel.lstm`) on the OpenCL device (backends/opencl/kernels/lstm.py:
the whole sequence in one launch) against the numpy backend and onnxruntime, poisoning
on: directions, B and initial states given or not, Y only / Y_h only, R packed by
prepack-weights or as given, a batch, hidden sizes not a multiple of 16; what the kernel
leaves to the host (peepholes, sequence_lens, clip) still runs there."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from opencl_support import (  # noqa: E402
    compare_backends, on_device_as_onnxruntime, recurrent_model, requires_opencl)

LSTM = "kernel.lstm"


def _model(tmp_path, direction="forward", *, steps=5, batch=1, size=12, hidden=16,
           bias=True, initial=False, outputs=("Y", "Y_h", "Y_c"), r_input=False,
           peepholes=False, lengths=None, **attrs):
    """An ONNX LSTM saved to tmp_path (opencl_support.recurrent_model); R a graph input
    when `r_input`. Returns (path, feeds, model)."""
    rng = np.random.default_rng(3)
    dirs = 2 if direction == "bidirectional" else 1
    inits = {"W": rng.uniform(-0.5, 0.5, (dirs, 4 * hidden, size)),
             "B": rng.uniform(-0.5, 0.5, (dirs, 8 * hidden)),
             "H0": rng.uniform(-1, 1, (dirs, batch, hidden)),
             "C0": rng.uniform(-1, 1, (dirs, batch, hidden)),
             "P": rng.uniform(-0.5, 0.5, (dirs, 3 * hidden))}
    names = ["X", "W", "R", "B" if bias else "", "L" if lengths else "",
             "H0" if initial else "", "C0" if initial else "", "P" if peepholes else ""]
    inits["R"] = rng.uniform(-0.5, 0.5, (dirs, 4 * hidden, hidden))
    if lengths:
        inits["L"] = np.array(lengths)
    return recurrent_model(tmp_path, "LSTM", inits, names, outputs, (steps, batch, size),
                           r_input=r_input, direction=direction, hidden_size=hidden, **attrs)


def _on_device(tmp_path, direction="forward", **kwargs):
    on_device_as_onnxruntime(*_model(tmp_path, direction, **kwargs), LSTM)


@requires_opencl
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("bias, initial", [(True, True), (False, False), (True, False)])
def test_lstm_runs_on_the_device(tmp_path, direction, bias, initial):
    _on_device(tmp_path, direction, bias=bias, initial=initial)


@requires_opencl
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("hidden, size", [
    (6, 4),      # 6 units: 2-wide vectors, X rows shorter than one 16-wide vector
    (7, 37),     # 7: scalars; X rows of two 16-wide vectors and a tail
    (40, 20),    # 8-wide vectors
    (32, 12),    # 16-wide vectors, 8 a work-item (a CPU device's)
    (64, 20),    # 16 a work-item (a CPU device's)
])
def test_lstm_hidden_sizes_not_a_multiple_of_16(tmp_path, direction, hidden, size):
    _on_device(tmp_path, direction, hidden=hidden, size=size, initial=True)


@requires_opencl
@pytest.mark.parametrize("r_input", [False, True])
def test_lstm_r_packed_or_as_given(tmp_path, r_input):
    """A constant R is stored as R^T per gate (prepack-weights, packed_r = 1); an R the
    model is given arrives as ONNX lays it out (dirs x 4H x H)."""
    _on_device(tmp_path, "bidirectional", r_input=r_input, initial=True, steps=9)


@requires_opencl
@pytest.mark.parametrize("outputs", [("Y",), ("", "Y_h"), ("", "", "Y_c")])
def test_lstm_outputs_used_or_not(tmp_path, outputs):
    _on_device(tmp_path, "bidirectional", outputs=outputs, initial=True)


@requires_opencl
def test_lstm_batch_entries_are_work_groups(tmp_path):
    _on_device(tmp_path, "bidirectional", batch=3, initial=True, steps=6)


@requires_opencl
@pytest.mark.parametrize("case", ["peepholes", "lengths", "clip"])
def test_lstm_the_kernel_leaves_to_the_host(tmp_path, case):
    path, feeds, _ = _model(tmp_path, "forward", initial=True, batch=2,
                            peepholes=case == "peepholes",
                            lengths=[5, 3] if case == "lengths" else None,
                            **({"clip": 0.5} if case == "clip" else {}))
    _, _, stats = compare_backends(path, feeds, rtol=1e-5, atol=1e-5,
                                   host_ops_allowed=(LSTM,), poison=True)
    assert stats.host_ops.get(LSTM) == 1


def test_lstm_projection_chunks_fit_local_memory():
    """Every step's projection in local memory where it fits (PoCL's 2 MiB), chunks of
    steps where it does not (a GPU's 48 KiB: captcha_ocr's 2048 gate columns,
    4 steps a chunk); a gate vector past local memory is left to the host."""
    from palimpsest.backends.opencl.kernels.base import Arg, DeviceLimits, KernelCall, Unsupported
    from palimpsest.backends.opencl.kernels.lstm import lstm

    def call(local_bytes, hidden=512):
        arg = lambda *shape: Arg(shape, np.dtype(np.float32))  # noqa: E731
        ins = [arg(20, 1, 512), arg(2, 4 * hidden, 512), arg(2, 4, hidden, hidden),
               arg(2, 8 * hidden)]
        outs = [arg(20, 2, 1, hidden)]
        config = {"direction": "bidirectional", "optional_ins": ["B"], "packed_r": 1,
                  "activations": ["Sigmoid", "Tanh", "Tanh"] * 2}
        limits = DeviceLimits(max_work_group_size=1024, local_mem_size=local_bytes,
                              max_work_item_sizes=(1024, 1024, 64))
        return lstm(KernelCall(LSTM, config, ins, outs, {}, limits))

    (launch,) = call(2 << 20)
    assert "#define S 20\n" in launch.source and launch.global_size == (64,)
    (launch,) = call(48 << 10)
    assert "#define S 4\n" in launch.source
    with pytest.raises(Unsupported, match="local memory"):
        call(48 << 10, hidden=2048)


@requires_opencl
@pytest.mark.parametrize("direction", ["reverse", "bidirectional"])
def test_lstm_in_chunks_of_steps(tmp_path, monkeypatch, direction):
    """A device with little local memory: the projection made 3 steps at a time (fewer
    than a block of 4), 8 steps in chunks of 3, 3 and 2."""
    import dataclasses

    from palimpsest.backends.opencl.kernels import GENERATORS
    from palimpsest.backends.opencl.kernels.lstm import lstm

    def small(call):
        (launch,) = lstm(dataclasses.replace(call, device=dataclasses.replace(
            call.device, local_mem_size=4 * (2 * 16 + 64) + 64 + 3 * 4 * 64)))
        assert "#define S 3\n" in launch.source
        return [launch]

    monkeypatch.setitem(GENERATORS, LSTM, small)
    _on_device(tmp_path, direction, steps=8, initial=True)
