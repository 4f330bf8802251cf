"""The float GRU (`kernel.gru`) on the OpenCL device (backends/opencl/kernels/gru.py: the
whole sequence in one launch) against the numpy backend and onnxruntime, poisoning on:
directions, both linear_before_reset values, B and initial_h given or not, Y only / Y_h
only, R packed by prepack-weights or as given, a batch, small hidden sizes and ones not
a multiple of the vector width; what the kernel leaves to the host (sequence_lens, clip,
other activations, layout 1) still runs there."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from opencl_support import (  # noqa: E402
    compare_backends, on_device_as_onnxruntime, recurrent_model, requires_opencl)

GRU = "kernel.gru"


def _model(tmp_path, direction="forward", *, steps=5, batch=1, size=12, hidden=16,
           bias=True, initial=False, outputs=("Y", "Y_h"), r_input=False, lengths=None,
           layout=0, **attrs):
    """An ONNX GRU saved to tmp_path (opencl_support.recurrent_model); R a graph input
    when `r_input`. Returns (path, feeds, model)."""
    rng = np.random.default_rng(7)
    dirs = 2 if direction == "bidirectional" else 1
    inits = {"W": rng.uniform(-0.5, 0.5, (dirs, 3 * hidden, size)),
             "B": rng.uniform(-0.5, 0.5, (dirs, 6 * hidden)),
             "H0": rng.uniform(-1, 1, (batch, dirs, hidden) if layout else (dirs, batch, hidden))}
    inits["R"] = rng.uniform(-0.5, 0.5, (dirs, 3 * hidden, hidden))
    names = ["X", "W", "R", "B" if bias else "", "L" if lengths else "",
             "H0" if initial else ""]
    if lengths:
        inits["L"] = np.array(lengths)
    return recurrent_model(
        tmp_path, "GRU", inits, names, outputs,
        (batch, steps, size) if layout else (steps, batch, size), r_input=r_input,
        direction=direction, hidden_size=hidden, **({"layout": layout} if layout else {}),
        **attrs)


def _on_device(tmp_path, direction="forward", **kwargs):
    on_device_as_onnxruntime(*_model(tmp_path, direction, **kwargs), GRU)


@requires_opencl
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("linear_before_reset", [0, 1])
@pytest.mark.parametrize("bias, initial", [(True, True), (False, False), (True, False)])
def test_gru_runs_on_the_device(tmp_path, direction, linear_before_reset, bias, initial):
    _on_device(tmp_path, direction, bias=bias, initial=initial,
               linear_before_reset=linear_before_reset)


@requires_opencl
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("linear_before_reset", [0, 1])
@pytest.mark.parametrize("hidden, size", [
    (4, 3),      # gtcrn's smallest: one 4-wide vector a gate
    (6, 4),      # 2-wide vectors, X rows shorter than one 16-wide vector
    (7, 37),     # scalars; X rows of two 16-wide vectors and a tail
    (40, 20),    # 8-wide vectors
    (128, 20),   # 16-wide vectors, 8 a work-item (a CPU device's)
])
def test_gru_hidden_sizes(tmp_path, direction, linear_before_reset, hidden, size):
    _on_device(tmp_path, direction, hidden=hidden, size=size, initial=True,
               linear_before_reset=linear_before_reset)


@requires_opencl
@pytest.mark.parametrize("r_input", [False, True])
@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_r_packed_or_as_given(tmp_path, r_input, linear_before_reset):
    """A constant R is stored as R^T per gate (prepack-weights, packed_r = 1); an R the
    model is given arrives as ONNX lays it out (dirs x 3H x H)."""
    _on_device(tmp_path, "bidirectional", r_input=r_input, initial=True, steps=9,
               linear_before_reset=linear_before_reset)


@requires_opencl
@pytest.mark.parametrize("outputs", [("Y",), ("", "Y_h")])
def test_gru_outputs_used_or_not(tmp_path, outputs):
    _on_device(tmp_path, "bidirectional", outputs=outputs, initial=True)


@requires_opencl
@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_batch_entries_are_work_groups(tmp_path, linear_before_reset):
    _on_device(tmp_path, "bidirectional", batch=3, initial=True, steps=6,
               linear_before_reset=linear_before_reset)


@requires_opencl
@pytest.mark.parametrize("case", ["lengths", "clip", "activations", "layout"])
def test_gru_the_kernel_leaves_to_the_host(tmp_path, case):
    attrs = {"lengths": {"lengths": [5, 3]}, "clip": {"clip": 0.5},
             "activations": {"activations": ["HardSigmoid", "Tanh"]},
             "layout": {"layout": 1}}[case]
    path, feeds, _ = _model(tmp_path, "forward", initial=True, batch=2, **attrs)
    _, _, stats = compare_backends(path, feeds, rtol=1e-5, atol=1e-5,
                                   host_ops_allowed=(GRU,), poison=True)
    assert stats.host_ops.get(GRU) == 1


@requires_opencl
@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_in_chunks_of_steps(tmp_path, monkeypatch, linear_before_reset):
    """A device with little local memory: 8 steps' projections in chunks of 3, 3 and 2."""
    import dataclasses

    from palimpsest.backends.opencl.kernels import GENERATORS
    from palimpsest.backends.opencl.kernels.gru import gru

    def small(call):
        (launch,) = gru(dataclasses.replace(call, device=dataclasses.replace(
            call.device, local_mem_size=4 * (2 * 16 + 48) + 64 + 3 * 4 * 48)))
        assert "#define S 3\n" in launch.source
        return [launch]

    monkeypatch.setitem(GENERATORS, GRU, small)
    _on_device(tmp_path, "bidirectional", steps=8, initial=True,
               linear_before_reset=linear_before_reset)
