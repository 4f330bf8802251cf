"""The OpenCL backend end to end (PoCL's CPU device in CI; without a device every test
here skips and says why):

1. every supported ONNX node case through the default pipeline on the device, against
   ONNX's expected outputs;
2. the real models (small variants of examples/onnx_models.py) against the numpy
   backend to 1e-4, at static shapes, at several dynamic sizes through the shape
   specialized plans, and through the dynamic plan (run-time allocations on the device),
   with nothing but shape arithmetic on the host;
3. the executor: pools aligned to the device, kernels built once, outputs read into the
   caller's arrays, poison, fused elementwise chains with broadcasting;
4. palimpsest-run --backend opencl, --device, --dump-kernels and their errors.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import onnx_node_cases as nc
from opencl_support import compare_backends, requires_opencl
from palimpsest.dialects.graph.naming import ONNX_TO_GRAPH

pytestmark = requires_opencl

import example_models  # noqa: E402  (test/unit, on sys.path: conftest.py)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

M = example_models.load()

# -- 1. ONNX node cases --------------------------------------------------------------------------

POLICY = nc.load_policy()
CASES = nc.case_names(set(ONNX_TO_GRAPH))


@pytest.mark.parametrize("name", CASES)
def test_node_case_on_opencl(name):
    case = nc.load_case(name)
    reason = nc.skip_reason(case, POLICY)
    if reason is not None:
        pytest.skip(reason)
    nc.check_case(case, POLICY, through_ir="opencl")


# -- 2. real models ------------------------------------------------------------------------------

# Shape arithmetic of exported models (Shape -> Gather -> Concat -> Reshape) stays on the
# host: integer ops on a few elements, which the issue keeps there.
SHAPE_OPS = ("graph.shape", "graph.gather", "graph.unsqueeze", "graph.concat", "graph.cast",
             "graph.equal", "graph.where", "graph.constant_of_shape", "graph.slice",
             "graph.range", "graph.expand", "kernel.gather", "kernel.concat")

image = example_models.image
small_minilm = example_models.small_minilm
MODELS = {
    **example_models.small_model_cases(),
    "minilm_dynamic": lambda: (small_minilm(),
                               [M.minilm_inputs(1, 16, vocab=100, seed=1),
                                M.minilm_inputs(2, 9, vocab=100, seed=2, padded=3),
                                M.minilm_inputs(1, 32, vocab=100, seed=4)]),
    "ocr_dynamic_width": lambda: (M.ocr_crnn(channels=(8, 16, 16, 16), classes=12), [
        image((1, 1, 32, w), s, "image") for s, w in ((4, 40), (5, 64), (6, 96))]),
    "deep_mlp": lambda: (M.deep_mlp(nodes=120), [image((2, 16, 64), 7, "x")]),
}


def _model_path(tmp_path, model) -> str:
    import onnx

    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    return str(path)


@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_numpy(name, tmp_path):
    model, feeds = MODELS[name]()
    path = _model_path(tmp_path, model)
    for feed in feeds:
        _, _, stats = compare_backends(path, feed, host_ops_allowed=SHAPE_OPS)
        assert stats.device_launches > 0


@pytest.mark.parametrize("name", ["minilm_dynamic", "ocr_dynamic_width"])
def test_dynamic_plan_allocates_on_the_device(name, tmp_path):
    """specialize=False: buffers with `?` dims are device allocations made at run time
    and freed by the IR's deallocs; the results still match."""
    model, feeds = MODELS[name]()
    path = _model_path(tmp_path, model)
    for feed in feeds[:2]:
        _, _, stats = compare_backends(path, feed, host_ops_allowed=SHAPE_OPS,
                                       specialize=False)
        assert stats.dynamic_allocations > 0
        assert stats.deallocations > 0


def test_cached_plans_build_no_new_programs(tmp_path):
    from palimpsest.backends.numpy.session import Session

    model, feeds = MODELS["ocr_dynamic_width"]()
    session = Session(_model_path(tmp_path, model), backend="opencl")
    for feed in feeds:
        session.run(feed)
    device = session.last_plan.executor.device
    builds = device.build_stats.builds
    for feed in feeds:
        session.run(feed)
        assert session.last_stats.cache_hit
    assert device.build_stats.builds == builds


# -- 3. the executor -------------------------------------------------------------------------------

CHAIN = """
func.func @main(%a: tensor<4x8x5xf32>, %b: tensor<8x1xf32>, %c: tensor<5xf32>) -> tensor<4x8x5xf32> {
  %s = graph.add %a, %b : (tensor<4x8x5xf32>, tensor<8x1xf32>) -> tensor<4x8x5xf32>
  %m = graph.mul %s, %c : (tensor<4x8x5xf32>, tensor<5xf32>) -> tensor<4x8x5xf32>
  %t = graph.tanh %m : (tensor<4x8x5xf32>) -> tensor<4x8x5xf32>
  %l = graph.leaky_relu %t {alpha = 0.1 : f32} : (tensor<4x8x5xf32>) -> tensor<4x8x5xf32>
  %r = graph.relu %l : (tensor<4x8x5xf32>) -> tensor<4x8x5xf32>
  func.return %r : tensor<4x8x5xf32>
}"""


def _chain_inputs():
    rng = np.random.default_rng(0)
    return {"a": rng.standard_normal((4, 8, 5), np.float32),
            "b": rng.standard_normal((8, 1), np.float32),
            "c": rng.standard_normal(5, np.float32)}


def test_fused_chain_is_one_kernel():
    _, _, stats = compare_backends(CHAIN, _chain_inputs())
    assert stats.device_launches == 1


def test_float_tanh_is_rounded_from_double():
    """A scalar f32 tanh is `pal_tanh` (runtime.py): where the device has fp64, tanh
    rounded from double, which the quantization ties of int8 models downstream need
    (PoCL's own float tanh is an ulp off often enough to flip them)."""
    from palimpsest.backends.numpy.session import Session
    from palimpsest.backends.opencl.runtime import device
    from palimpsest.dialects import load_all
    from palimpsest.ir.parser import parse

    if not device().device.double_fp_config:
        pytest.skip("the device has no fp64: pal_tanh is its float tanh")
    load_all()
    text = """func.func @f(%x: tensor<65536xf32>) -> tensor<65536xf32> {
      %y = graph.tanh %x : tensor<65536xf32>
      func.return %y : tensor<65536xf32>
    }"""
    x = np.random.default_rng(3).standard_normal(65536).astype(np.float32) * 3
    (got,) = Session(parse(text, "<tanh>"), backend="opencl").run({"x": x}).values()
    np.testing.assert_array_equal(got, np.tanh(x.astype(np.float64)).astype(np.float32))


def test_pools_are_aligned_to_the_device():
    from palimpsest.backends.numpy.session import Session
    from palimpsest.backends.opencl.runtime import device
    from palimpsest.ir.parser import parse

    session = Session(parse(CHAIN, "<chain>"), backend="opencl")
    session.run(_chain_inputs())
    alignment = device().alignment
    pools = [op for op in session.last_plan.module.walk() if op.name == "memory.pool"]
    assert pools and all(op.alignment_bytes % alignment == 0 for op in pools)
    views = [op for op in session.last_plan.module.walk() if op.name == "buffer.view"]
    assert all(op.properties["offset"].value % alignment == 0 for op in views
               if "offset" in op.properties)


def test_outputs_are_read_into_the_callers_array():
    from palimpsest.backends.numpy.session import Session
    from palimpsest.ir.parser import parse

    inputs = _chain_inputs()
    expected, _, _ = compare_backends(CHAIN, inputs)
    session = Session(parse(CHAIN, "<chain>"), backend="opencl")
    name = session.output_names[0]
    out = np.empty((4, 8, 5), np.float32)
    results = session.run(inputs, outputs={name: out})
    assert results[name] is out
    np.testing.assert_allclose(out, expected[name], rtol=1e-5)


def test_inputs_are_bound_in_place_and_never_changed():
    """On a CPU device an input the plan does not write is the caller's memory
    (USE_HOST_PTR, nothing copied in); one it writes (inputs-as-activations) is copied
    in first, and the caller's array stays as it was either way."""
    from palimpsest.backends.binding import find_function
    from palimpsest.backends.numpy.arena import RunStats
    from palimpsest.backends.opencl.executor import run
    from palimpsest.backends.opencl.runtime import device
    from palimpsest.ir.parser import parse
    from palimpsest.ir.printer import print_ir
    from palimpsest.passes.pass_manager import PassManager, parse_pipeline

    text = """func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
      %t = graph.tanh %x : tensor<8xf32>
      %a = graph.abs %t : tensor<8xf32>
      func.return %a : tensor<8xf32>
    }"""
    given = np.linspace(-2, 2, 8, dtype=np.float32)
    for option, copied in (("", False), ("{inputs-as-activations}", True)):
        x = given.copy()
        x.flags.writeable = option == ""   # (a read-only array binds in place too)
        module = parse(text, "f.pal")
        PassManager(parse_pipeline(f"bufferize{option},insert-deallocs")).run(module)
        assert ("buffer.compute %x, %x" in print_ir(module)) == copied
        stats = RunStats()
        outputs = run(find_function(module, None), {"x": x}, poison=True, stats=stats)
        np.testing.assert_allclose(outputs["result0"], np.abs(np.tanh(given)), rtol=1e-6)
        np.testing.assert_array_equal(x, given)
        in_place = device().limits.host_cpu and not copied
        assert stats.io_bytes == (32 if in_place else 64)


def test_poisoned_run_still_matches():
    _, _, stats = compare_backends(CHAIN, _chain_inputs(), poison=True)
    assert stats.device_launches == 1


def test_host_ops_are_counted():
    """An op no generator computes (here an integer op only the host has) runs on the host
    and shows in the stats with the bytes moved: none on a device that is the host's CPU
    (its operands and result mapped in place), else both operands and the result."""
    from palimpsest.backends.opencl.runtime import device

    text = """
func.func @main(%a: tensor<6xi64>, %b: tensor<6xi64>) -> tensor<6xi64> {
  %m = graph.mod %a, %b : (tensor<6xi64>, tensor<6xi64>) -> tensor<6xi64>
  func.return %m : tensor<6xi64>
}"""
    inputs = {"a": np.arange(6, dtype=np.int64) + 7, "b": np.full(6, 4, np.int64)}
    _, _, stats = compare_backends(text, inputs, host_ops_allowed=("graph.mod",))
    assert stats.host_ops == {"graph.mod": 1}
    assert stats.transfer_bytes == (0 if device().limits.host_cpu else 3 * 6 * 8)


# -- 4. palimpsest-run ---------------------------------------------------------------------------------

def _run_tool(*args):
    return subprocess.run([sys.executable, "-m", "palimpsest.tools.run", *args],
                          capture_output=True, text=True, cwd=ROOT)


def test_cli_runs_the_example_on_opencl(tmp_path):
    numpy_dir, opencl_dir, kernels = tmp_path / "np", tmp_path / "cl", tmp_path / "kernels"
    common = ["examples/tiny_cnn.onnx", "--random-inputs", "--seed", "3"]
    assert _run_tool(*common, "--output-dir", str(numpy_dir)).returncode == 0
    done = _run_tool(*common, "--output-dir", str(opencl_dir), "--backend", "opencl",
                     "--stats", "--dump-kernels", str(kernels))
    assert done.returncode == 0, done.stderr
    assert "kernels launched:" in done.stdout and "ops on the host: none" in done.stdout
    for file in numpy_dir.iterdir():
        np.testing.assert_allclose(np.load(opencl_dir / file.name), np.load(file),
                                   rtol=1e-4, atol=1e-5)
    sources = sorted(kernels.glob("*.cl"))
    assert sources and all("__kernel" in p.read_text() for p in sources)


def test_cli_kernel_level_on_opencl(tmp_path):
    done = _run_tool("examples/tiny_cnn.onnx", "--random-inputs", "--backend", "opencl",
                     "--level", "kernel", "--stats")
    assert done.returncode == 0, done.stderr
    assert "kernels launched:" in done.stdout


@pytest.mark.parametrize("args, message", [
    (["--backend", "opencl", "--device", "99"], "no OpenCL device 99"),
    (["--backend", "opencl", "--level", "graph"], "--backend opencl runs kernel-level IR"),
    (["--dump-kernels", "x"], "--device and --dump-kernels need --backend opencl"),
])
def test_cli_errors_are_one_line(args, message):
    done = _run_tool("examples/tiny_cnn.onnx", "--random-inputs", *args)
    assert done.returncode == 1
    assert message in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_bounded_dims_are_planned_on_the_device(tmp_path):
    """A width bound: every activation has a slot in the pools at its bound, viewed at the
    actual width on the device; nothing is allocated at run time."""
    model, feeds = MODELS["ocr_dynamic_width"]()
    path = _model_path(tmp_path, model)
    static = set()
    for feed in feeds:
        _, _, stats = compare_backends(path, feed, host_ops_allowed=SHAPE_OPS,
                                       bounds={"image": {3: 96}}, specialize=False)
        assert stats.dynamic_allocations == 0
        static.add(stats.static_bytes)
    assert len(static) == 1


def test_a_failed_launch_names_the_kernel_its_sizes_and_arguments():
    """A launch the device refuses (here a group size that does not divide the global
    size) is a generator's bug: the error names the kernel, the sizes beside the device's
    limits and every argument, not only OpenCL's code."""
    from palimpsest.backends.opencl.kernels.base import Launch, Ref
    from palimpsest.backends.opencl.runtime import device

    dev = device()
    source = ("__kernel void fill(__global float* a_base, const long a_off, const int n) "
              "{ a_base[a_off + get_global_id(0)] = n; }")
    buffer = dev.buffer(64)
    with pytest.raises(RuntimeError) as raised:
        dev.launch(Launch(source, "fill", (3,), (2,), [Ref("out", 0), np.int32(7)]),
                   lambda ref: (buffer, 0))
    message = str(raised.value)
    assert "kernel 'fill' failed" in message and "INVALID_WORK_GROUP_SIZE" in message
    assert "global (3,), local (2,)" in message
    assert "3 parameters, 3 arguments: buffer 64 B, int64 0, int32 7" in message


@pytest.mark.parametrize("group,stride,pads,channels", [
    (1, 2, (0, 0, 0, 0), 3),      # im2col
    (1, 1, (1, 1, 1, 1), 3),      # the padded image, then the implicit GEMM
    (64, 1, (1, 1, 1, 1), 64),    # depthwise
])
def test_grouped_launches_stay_within_a_gpus_work_item_limits(group, stride, pads, channels):
    """im2col, the padded image and depthwise group their small work-items (for PoCL)
    along every dimension: on a device that takes fewer along one (an NVIDIA GPU: 64 on
    dim 2; 1024 a group) each group stays within its limits and divides the global size."""
    from palimpsest.backends.opencl.kernels.base import GENERATORS, Arg, DeviceLimits, \
        KernelCall

    f32 = np.dtype(np.float32)
    gpu = DeviceLimits(1024, 49152, 132, (1024, 1024, 64))
    size = 64 // stride + (0 if any(pads) else -1)
    workspaces = {"im2col": Arg((channels * 9, size * size), f32),
                  "padded": Arg((channels, 66, 66), f32)}
    call = KernelCall("kernel.conv2d", {"group": group, "strides": (stride, stride),
                                        "dilations": (1, 1), "pads": pads},
                      [Arg((1, channels, 64, 64), f32),
                       Arg((channels, channels // group, 3, 3), f32)],
                      [Arg((1, channels, size, size), f32)], workspaces, gpu)
    launches = GENERATORS["kernel.conv2d"](call)
    assert launches
    # Silero VAD's 1-D conv had its im2col's 256 items along dim 2: a group the GPU refuses
    from palimpsest.backends.opencl.kernels.conv import IM2COL_ITEMS
    from palimpsest.backends.opencl.kernels.linalg import _local_size
    assert _local_size((1, 1, 256), IM2COL_ITEMS, gpu) == (1, 1, 64)
    assert _local_size((3, 5, 256), 4096, gpu) == (3, 5, 64)
    for launch in launches:
        if launch.local_size is None:
            continue
        assert int(np.prod(launch.local_size)) <= gpu.max_work_group_size
        for local, most, size_ in zip(launch.local_size, gpu.max_work_item_sizes,
                                      launch.global_size):
            assert local <= most and size_ % local == 0, (launch.kernel, launch.local_size)
