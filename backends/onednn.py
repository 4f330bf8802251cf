"""oneDNN's 8-bit GEMM (`dnnl_gemm_u8s8s32`), from the `onednn-cpu-gomp` wheel, for the
host's integer products: the numpy backend's MatMulInteger, MatMulIntegerToFloat,
ConvInteger and DynamicQuantizeLSTM (and the OpenCL backend's, which a CPU device runs
on the host).

Why a library: numpy has no integer GEMM, and an 8-bit product through float32 BLAS
reads four bytes a weight and runs at the float FMA rate; oneDNN's JIT kernels use the
CPU's 8-bit dot-product instructions (AVX-512 VNNI, AMX), 3-5x faster on transformer
shapes here (t5's 128 x 512 x 2048: 0.24 ms against 1.8).

Only the plain product is taken: no A or B offsets and no C offset. With any offset
oneDNN 3.2 leaves its fast kernels (a 512 x 2048 vector-matrix product: 19 us plain,
190 with an A offset), so the caller subtracts the zero points' terms itself. Used only
where the CPU has VNNI (avx512_vnni, avx_vnni or amx_int8): there the 8-bit dot products
accumulate exactly in int32; on older AVX-512 the u8 x s8 pairs may saturate int16.

The library is found where pip put the wheel's data files (its installed file list),
else by the loader's search; `available()` is False without it, and the callers keep
their float BLAS route. Threads: the wheel's oneDNN runs on GNU OpenMP, set through
libgomp's `omp_set_num_threads` (`threads.set_threads` calls `set_threads`).
"""

from __future__ import annotations

import ctypes
import functools
import os

# the largest depth whose u8 x s8 sums (at most 255 * 128 a term) stay in int32
MAX_DEPTH = (2**31 - 1) // (255 * 128)
_VNNI = ("avx512_vnni", "avx_vnni", "amx_int8")


def _cpu_has_vnni() -> bool:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return any(flag in flags for flag in _VNNI)
    except OSError:
        pass
    return False


def _library_path() -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, files
        found = [f for f in files("onednn-cpu-gomp") or () if f.name == "libdnnl.so.3"]
    except PackageNotFoundError:
        found = []
    for entry in found:
        path = str(entry.locate())
        if os.path.exists(path):
            return os.path.realpath(path)
    import ctypes.util
    return ctypes.util.find_library("dnnl")


@functools.lru_cache(maxsize=None)
def _gemm():
    """The bound `dnnl_gemm_u8s8s32`, or None (no library, no VNNI, or it would not
    load); looked up once. PALIMPSEST_ONEDNN=0 turns it off (the float route)."""
    if os.environ.get("PALIMPSEST_ONEDNN", "1") == "0" or not _cpu_has_vnni():
        return None
    path = _library_path()
    if path is None:
        return None
    # OpenMP's workers spin ~20k rounds after a product, then sleep (libgomp reads this
    # when it loads, with oneDNN). Its default 300k held the cores that numpy's BLAS
    # threads wanted next (tashkeel at two threads: 36.7 ms a run, 15.5 with 20k); no
    # spin (OMP_WAIT_POLICY=PASSIVE) woke them for every product (t5: 19.8 ms, 13.0)
    os.environ.setdefault("GOMP_SPINCOUNT", "20000")
    try:
        library = ctypes.CDLL(path)
        gemm = library.dnnl_gemm_u8s8s32
    except (OSError, AttributeError):
        return None
    dim, pointer = ctypes.c_int64, ctypes.c_void_p
    gemm.argtypes = [ctypes.c_char, ctypes.c_char, ctypes.c_char, dim, dim, dim,
                     ctypes.c_float, pointer, dim, ctypes.c_uint8, pointer, dim,
                     ctypes.c_int8, ctypes.c_float, pointer, dim, pointer]
    gemm.restype = ctypes.c_int
    return gemm


def available() -> bool:
    return _gemm() is not None


@functools.lru_cache(maxsize=None)
def _no_offset():
    import numpy as np

    return np.zeros(1, np.int32)


def gemm_u8s8(a, b_rows, out) -> None:
    """out (M x N int32) = a (M x K uint8) @ b_rows.T (b_rows: N x K int8), exactly: each
    operand 2-D with unit column stride and K at most MAX_DEPTH. Raises RuntimeError
    where oneDNN reports a failure (nothing the caller's checks let through)."""
    rows, depth = a.shape
    columns = b_rows.shape[0]
    _threads_for(rows * depth * columns)
    status = _gemm()(b"N", b"T", b"F", rows, columns, depth, 1.0,
                     a.ctypes.data, _leading(a), 0, b_rows.ctypes.data, _leading(b_rows),
                     0, 0.0, out.ctypes.data, _leading(out), _no_offset().ctypes.data)
    if status != 0:
        raise RuntimeError(f"oneDNN's u8 x s8 GEMM failed (status {status}) on "
                           f"{rows} x {depth} x {columns}")


def _leading(matrix) -> int:
    """A row-major matrix's leading dimension in elements: its row stride, or its width
    where it has one row (numpy may give a row of a 1-row array any stride)."""
    if matrix.shape[0] == 1:
        return max(1, matrix.shape[1])
    return matrix.strides[0] // matrix.itemsize


def bound_gemm_u8s8(a, b_rows, out):
    """gemm_u8s8(a, b_rows, out) as a call of no arguments, its arguments converted
    once: a loop calling it on the same buffers (an LSTM's steps) saves the ~5 us of
    reading three arrays' addresses and converting 17 arguments each call. The caller
    keeps the arrays alive."""
    gemm = _gemm()
    rows, depth = a.shape
    arguments = [ctypes.c_char(b"N"), ctypes.c_char(b"T"), ctypes.c_char(b"F")] + [
        ctypes.c_int64(v) for v in (rows, b_rows.shape[0], depth)] + [
        ctypes.c_float(1.0), ctypes.c_void_p(a.ctypes.data), ctypes.c_int64(_leading(a)),
        ctypes.c_uint8(0), ctypes.c_void_p(b_rows.ctypes.data),
        ctypes.c_int64(_leading(b_rows)), ctypes.c_int8(0), ctypes.c_float(0.0),
        ctypes.c_void_p(out.ctypes.data), ctypes.c_int64(_leading(out)),
        ctypes.c_void_p(_no_offset().ctypes.data)]

    work = rows * depth * b_rows.shape[0]

    def call():
        _threads_for(work)
        status = gemm(*arguments)
        if status != 0:
            raise RuntimeError(f"oneDNN's u8 x s8 GEMM failed (status {status}) on "
                               f"{rows} x {depth} x {b_rows.shape[0]}")
    return call


@functools.lru_cache(maxsize=None)
def _omp_set_num_threads():
    try:
        setter = ctypes.CDLL("libgomp.so.1").omp_set_num_threads
    except (OSError, AttributeError):
        return None
    setter.argtypes, setter.restype = [ctypes.c_int], None
    return setter


# Products of fewer multiply-adds than this run on one thread: an OpenMP region per
# small product (an LSTM step's h R^T) costs more than it gains, and OpenMP's workers
# spin after it on cores that numpy's BLAS threads want (tashkeel's 256-unit steps at
# two threads: 36.7 ms a run against 17.5 at one thread a step)
PARALLEL_MIN = 1 << 22
_THREADS = {"configured": None, "current": None}


def _threads_for(work: int) -> None:
    """One thread for a small product, else the count `set_threads` configured (else
    OMP_NUM_THREADS, else the physical cores); set only when it changes."""
    if work < PARALLEL_MIN:
        want = 1
    else:
        want = _THREADS["configured"]
        if want is None:
            from palimpsest.backends.threads import physical_cores

            env = os.environ.get("OMP_NUM_THREADS", "")
            want = _THREADS["configured"] = int(env) if env.isdigit() and int(env) > 0 \
                else physical_cores()
    if want != _THREADS["current"]:
        setter = _omp_set_num_threads()
        if setter is not None:
            setter(want)
        _THREADS["current"] = want


def set_threads(count: int) -> int | None:
    """oneDNN's thread count for products of PARALLEL_MIN multiply-adds or more (its
    OpenMP's, for this thread's later calls); None when oneDNN is not in use here."""
    if not available() or _omp_set_num_threads() is None:
        return None
    _THREADS["configured"] = count
    _THREADS["current"] = None
    return count


def summary() -> str:
    """One line for benchmark headers: whether 8-bit products run on oneDNN."""
    if available():
        return f"8-bit GEMM: oneDNN ({_library_path()})"
    reason = "turned off (PALIMPSEST_ONEDNN=0)" \
        if os.environ.get("PALIMPSEST_ONEDNN", "1") == "0" else \
        "no VNNI on this CPU" if not _cpu_has_vnni() else "onednn-cpu-gomp not installed"
    return f"8-bit GEMM: float BLAS ({reason})"


__all__ = ["MAX_DEPTH", "available", "bound_gemm_u8s8", "gemm_u8s8", "set_threads",
           "summary"]
