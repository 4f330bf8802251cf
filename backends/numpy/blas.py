"""Which BLAS numpy runs on, and with which kernel set.

The numpy backend's GEMM-bound kernels (im2col convs, matmul, gemm) are exactly as fast as
numpy's BLAS, and OpenBLAS picks its kernel set once, when it loads: from the CPU, or from
OPENBLAS_CORETYPE. A pinned kernel set older than the CPU (Haswell's AVX2 kernels on an
AVX-512 CPU) halves GEMM throughput, so benchmarks report it next to their figures.
"""

from __future__ import annotations

import ctypes
import os


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
    import numpy  # noqa: F401  (loads the BLAS)

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
