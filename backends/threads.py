"""Thread counts, set explicitly: the BLAS that numpy's GEMMs run on, and PoCL's CPU
device (the OpenCL backend). `Session(threads=N)` and `palimpsest-run --threads N` call
`set_threads`; the default is the machine's physical cores, as onnxruntime's
intra-op pool does (hyper-threads share a core's FMA units: a GEMM gains nothing from
them and loses to their contention).

BLAS. Where oneDNN runs the float products (backends/onednn.py: its GEMMs and convs),
it takes the count too, through its OpenMP. Two pools' idle workers, each spinning after
its own calls, take each other's cores: OpenBLAS's spin 2^28 cycles by default
(ppocr_v4_det at two threads: 70 ms a run, onnxruntime 22). The package shortens that
to 2^16 (`OPENBLAS_THREAD_TIMEOUT`, read when numpy loads OpenBLAS; palimpsest/
__init__.py) when it is imported before numpy (25 ms); where numpy came first, numpy's
BLAS keeps one thread beside oneDNN (27 ms; its vector-matrix products, an LSTM's steps,
lose their second thread: captcha_crnn 26 ms against 20). OpenBLAS (numpy's wheels ship
it) is set and read back through its own
`openblas_set_num_threads` / `openblas_get_num_threads` (the scipy-openblas builds spell
them `scipy_openblas_..._64_`), in the library numpy loaded; takes effect at once, for the
whole process. Another BLAS (MKL, BLIS, Accelerate) is set through threadpoolctl when it is
installed (it is not a dependency). `threads=None` leaves the BLAS alone when
OPENBLAS_NUM_THREADS, OMP_NUM_THREADS or MKL_NUM_THREADS is set: the user chose.

OpenCL (PoCL's CPU device, "pthread"/"cpu"). PoCL reads POCL_MAX_PTHREAD_COUNT once,
when the process first asks for OpenCL platforms, and sizes its worker pool (and the
device's MAX_COMPUTE_UNITS, which reads it back) from it; PoCL 3.1's CPU device has no
sub-device partitioning (CL_DEVICE_PARTITION_PROPERTIES is empty), and there is no API to
change the pool later. So the count takes effect only when set before the first OpenCL
use in the process: `set_threads` sets it then, and says (`ThreadSettings.opencl_note`)
when OpenCL was already opened with another count. Other OpenCL platforms (GPUs) run
their own scheduling; the count does not apply.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from dataclasses import dataclass

BLAS_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
POCL_ENV = "POCL_MAX_PTHREAD_COUNT"


def physical_cores() -> int:
    """The physical cores this process may run on (its CPU affinity, hyper-threads of one
    core counted once); os.cpu_count() where the topology cannot be read."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = list(range(os.cpu_count() or 1))
    cores = set()
    for cpu in cpus:
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
        try:
            with open(base + "physical_package_id", encoding="ascii") as file:
                package = file.read().strip()
            with open(base + "core_id", encoding="ascii") as file:
                core = file.read().strip()
        except OSError:
            return max(1, len(cpus))
        cores.add((package, core))
    return max(1, len(cores))


@functools.lru_cache(maxsize=None)
def _openblas():
    """(set, get) of numpy's OpenBLAS, or None when numpy runs on another BLAS (looked up
    once: the library numpy loaded stays)."""
    from palimpsest.backends.numpy.blas import _loaded_openblas

    import numpy  # noqa: F401  (loads the BLAS)

    path = _loaded_openblas()
    if path is None:
        return None
    library = ctypes.CDLL(path)
    for prefix, suffix in (("scipy_openblas", "64_"), ("scipy_openblas", ""),
                           ("openblas", "")):
        setter = getattr(library, f"{prefix}_set_num_threads{suffix}", None)
        getter = getattr(library, f"{prefix}_get_num_threads{suffix}", None)
        if setter is not None and getter is not None:
            setter.argtypes, setter.restype = [ctypes.c_int], None
            getter.argtypes, getter.restype = [], ctypes.c_int
            return setter, getter
    return None


def blas_threads() -> int | None:
    """The BLAS's thread count now (read back from the library); None when unknown."""
    found = _openblas()
    if found is not None:
        return int(found[1]())
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    counts = [info["num_threads"] for info in threadpool_info() if info.get("user_api") == "blas"]
    return counts[0] if counts else None


def set_blas_threads(count: int) -> int | None:
    """Set the BLAS's thread count for the whole process; the count read back (None
    when the BLAS cannot be set: not OpenBLAS and no threadpoolctl)."""
    found = _openblas()
    if found is not None:
        found[0](int(count))
        return int(found[1]())
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return None
    threadpool_limits(int(count), user_api="blas")
    return blas_threads()


def _opencl_opened() -> bool:
    """True when this process has asked for OpenCL platforms (PoCL has read its env)."""
    runtime = sys.modules.get("palimpsest.backends.opencl.runtime")
    if runtime is not None and getattr(runtime, "_DEVICES", None):
        return True
    return "pyopencl" in sys.modules and _pyopencl_platforms_listed()


def _pyopencl_platforms_listed() -> bool:
    # pyopencl keeps no public flag; a context or a platform listing made by anyone
    # happened if the ICD loader is mapped into the process
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return any("libpocl" in line for line in maps)
    except OSError:
        return False


@dataclass
class ThreadSettings:
    """What `set_threads` did: the count asked for, the BLAS's (read back) and PoCL's."""

    requested: int
    blas: int | None = None          # read back from the BLAS; None: not settable here
    onednn: int | None = None        # oneDNN's (its OpenMP's); None: oneDNN not in use
    opencl: int | None = None        # POCL_MAX_PTHREAD_COUNT in effect for this process
    opencl_note: str = ""            # why the OpenCL count is not the one asked for

    def summary(self) -> str:
        blas = "not settable (not OpenBLAS, no threadpoolctl)" if self.blas is None \
            else str(self.blas)
        opencl = "PoCL default" if self.opencl is None else str(self.opencl)
        note = f" ({self.opencl_note})" if self.opencl_note else ""
        onednn = "" if self.onednn is None else f"oneDNN {self.onednn}, "
        return f"threads: {onednn}BLAS {blas}, OpenCL (PoCL CPU) {opencl}{note}"


def blas_count(count: int) -> int:
    """numpy's BLAS threads for a session of `count`: one beside oneDNN's when OpenBLAS's
    workers spin long after their calls (see the module doc), else `count`."""
    from palimpsest import BLAS_TIMEOUT_SET
    from palimpsest.backends import onednn

    return count if BLAS_TIMEOUT_SET or not onednn.float_gemm_available() else 1


def set_threads(count: int | None = None) -> ThreadSettings:
    """Set the BLAS and PoCL thread counts to `count` (None: the physical cores, leaving
    a count the user set in the environment as it is); see the module doc."""
    explicit = count is not None
    if count is None:
        count = physical_cores()
    if count < 1:
        raise ValueError(f"threads must be at least 1, got {count}")
    settings = ThreadSettings(count)
    if explicit or not any(os.environ.get(name) for name in BLAS_ENV):
        from palimpsest.backends import onednn

        settings.onednn = onednn.set_threads(count) if onednn.float_gemm_available() \
            else None
        settings.blas = set_blas_threads(blas_count(count))
    else:
        settings.blas = blas_threads()
    current = os.environ.get(POCL_ENV)
    if _opencl_opened():
        settings.opencl = int(current) if current and current.isdigit() else None
        if settings.opencl != count and explicit:
            settings.opencl_note = (f"OpenCL was opened before with "
                                    f"{current or 'the default'}; PoCL reads "
                                    f"{POCL_ENV} once per process")
    elif explicit or not current:
        os.environ[POCL_ENV] = str(count)
        settings.opencl = count
    else:
        settings.opencl = int(current) if current.isdigit() else None
    return settings


__all__ = ["ThreadSettings", "blas_count", "blas_threads", "physical_cores", "set_blas_threads",
           "set_threads"]
