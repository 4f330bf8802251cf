"""The GEMM the numpy backend's products run on, and which BLAS numpy runs on.

The GEMM-bound kernels (im2col convs, conv_transpose, matmul, gemm, a recurrence's
input projection) call `matmul_call`/`matmul`: oneDNN's float32 GEMM where it is in use
and the product large enough to gain (backends/onednn.bound_sgemm; 10-45% faster than
OpenBLAS there), else `np.matmul` on numpy's BLAS. OpenBLAS picks its kernel set once,
when it loads: from the CPU, or from OPENBLAS_CORETYPE. A pinned kernel set older than the
CPU (Haswell's AVX2 kernels on an AVX-512 CPU) halves GEMM throughput, so benchmarks
report it next to their figures.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np

from palimpsest.backends import onednn


def matmul_call(a, b, out) -> tuple:
    """`np.matmul(a, b, out=out)` as a call (fn, args, kwargs) for a kernel's recorded
    calls: oneDNN's GEMM bound to these arrays where it takes them, else numpy's."""
    bound = onednn.bound_sgemm(a, b, out)
    if bound is None:
        return np.matmul, (a, b), {"out": out}
    return bound, (), {}


def matmul(a, b, out) -> None:
    """`np.matmul(a, b, out=out)`, on oneDNN's GEMM where it takes the operands."""
    fn, args, kwargs = matmul_call(a, b, out)
    fn(*args, **kwargs)


def _loaded_openblas() -> str | None:
    """numpy's OpenBLAS among the loaded libraries (scipy may load its own beside it)."""
    found = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                name = os.path.basename(path).lower()
                if "openblas" in name and ".so" in name and path not in found:
                    found.append(path)
    except OSError:
        pass
    numpy_own = [path for path in found if "numpy" in path]
    return (numpy_own or found or [None])[0]


def _call_string(library, names) -> str | None:
    for name in names:
        function = getattr(library, name, None)
        if function is not None:
            function.restype = ctypes.c_char_p
            return function().decode(errors="replace").strip()
    return None


def blas_summary() -> str:
    """One line: the BLAS library, its version and build, and the kernel set in use."""
    path = _loaded_openblas()
    if path is None:
        return "BLAS: not OpenBLAS (numpy.show_config() names it)"
    library = ctypes.CDLL(path)
    # scipy-openblas wheels prefix and suffix their symbols; plain builds do not.
    core = _call_string(library, ("scipy_openblas_get_corename64_",
                                  "scipy_openblas_get_corename", "openblas_get_corename"))
    config = _call_string(library, ("scipy_openblas_get_config64_",
                                    "scipy_openblas_get_config", "openblas_get_config"))
    pinned = os.environ.get("OPENBLAS_CORETYPE")
    origin = f"pinned by OPENBLAS_CORETYPE={pinned}" if pinned else "chosen by OpenBLAS"
    version = config.split("  ")[0] if config else "OpenBLAS"
    return f"BLAS: {version}, kernels {core or '?'} ({origin})"
