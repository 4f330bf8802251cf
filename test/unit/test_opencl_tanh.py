"""`pal_tanh` (backends/opencl/runtime.py), the OpenCL backend's float tanh, rounded from
a double tanh computed as (e^2x - 1) / (e^2x + 1), clamped, with a Taylor series near 0.
Every float it returns is the double tanh rounded to float: scalar and vector (a fused
chain's lanes) forms, on inputs from 1e-6 to 1e2 in magnitude, subnormals, +-0, +-inf
and NaN; and subnormals read and made by kernels built without flushing after a GEMM
built with it (-cl-denorms-are-zero) ran."""

from __future__ import annotations

import numpy as np
import pytest

from opencl_support import requires_opencl

pytestmark = requires_opencl


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(7)
    parts = [rng.standard_normal(8192) * scale for scale in (1e-6, 1e-4, 1e-3, 3e-3, 0.1, 1,
                                                             3, 9, 30, 100)]
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-38, 1e-3, -1e-3,
               20.0, -20.0, 9.1, 1e30, -1e30]
    x = np.concatenate(parts + [np.array(special)]).astype(np.float32)
    return np.concatenate([x, np.zeros(-len(x) % 64, np.float32)])


@pytest.mark.parametrize("vector", [False, True])
def test_tanh_is_the_double_tanh_rounded(vector):
    from palimpsest.backends.opencl.kernels.base import Launch, ref
    from palimpsest.backends.opencl.runtime import device, run_launches

    if not device().device.double_fp_config:
        pytest.skip("the device has no fp64: pal_tanh is its float tanh")
    x = _inputs()
    lanes = 16 if vector else 1
    kind = "float16" if vector else "float"
    load = "vload16(0, x + i)" if vector else "x[i]"
    store = "vstore16(v, 0, y + i)" if vector else "y[i] = v"
    source = (f"__kernel void k(__global const float* x_base, const long x_off, "
              f"__global float* y_base, const long y_off) {{\n"
              f"  __global const float* x = x_base + x_off; __global float* y = y_base + y_off;\n"
              f"  const int i = get_global_id(0) * {lanes};\n"
              f"  const {kind} v = pal_tanh({load}); {store};\n}}\n")
    launch = Launch(source, "k", (len(x) // lanes,), None, [ref("in", 0), ref("out", 0)])
    (got,) = run_launches([launch], [x], [np.empty_like(x)])
    want = np.tanh(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))


def test_subnormals_survive_after_a_flushing_gemm():
    """The GEMMs are built with -cl-denorms-are-zero (linalg.py); a kernel built without
    it, launched after one, still reads and returns subnormals."""
    from palimpsest.backends.opencl.kernels.base import Launch, ref
    from palimpsest.backends.opencl.kernels.linalg import Gemm, Operand
    from palimpsest.backends.opencl.runtime import run_launches

    a = np.full((8, 16), 1e-20, np.float32)
    b = np.full((16, 16), 1e-20, np.float32)
    buffers = [("a", "float", False), ("b", "float", False), ("y", "float", True)]
    gemm = Gemm("float", 8, 16, 16, 1, Operand("a", "0", 16, 1), Operand("b", "0", 16, 1),
                Operand("y", "0", 16, 1), buffers=buffers)
    launch = gemm.vector_launch([ref("in", 0), ref("in", 1), ref("out", 0), np.int32(0)])
    assert launch.flush_denormals
    (product,) = run_launches([launch], [a, b], [np.ones((8, 16), np.float32)])
    assert not product.any()                       # 16 * 1e-40: subnormal, flushed
    x = np.array([1e-45, -1e-40, 1e-38, 2.0] * 16, np.float32)
    copy = Launch("__kernel void k(__global const float* x_base, const long x_off, "
                  "__global float* y_base, const long y_off) { const int i = "
                  "get_global_id(0); y_base[y_off + i] = x_base[x_off + i]; }", "k",
                  (len(x),), None, [ref("in", 0), ref("out", 0)])
    (got,) = run_launches([copy], [x], [np.empty_like(x)])
    np.testing.assert_array_equal(got, x)
