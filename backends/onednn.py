"""oneDNN's GEMMs, from the `onednn-cpu-gomp` wheel: the 8-bit one (`dnnl_gemm_u8s8s32`)
for the host's integer products (the numpy backend's MatMulInteger, MatMulIntegerToFloat,
ConvInteger and DynamicQuantizeLSTM, and the OpenCL backend's, which a CPU device runs on
the host), and the float32 one (`dnnl_sgemm`, `bound_sgemm`) for the numpy backend's
float products large enough to gain. The library is loaded here once; its other
primitives (convs, elementwise functions) are bound in onednn_primitives.py.

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
import math
import os

# the largest depth whose u8 x s8 sums (at most 255 * 128 a term) stay in int32
MAX_DEPTH = (2**31 - 1) // (255 * 128)
_VNNI = ("avx512_vnni", "avx_vnni", "amx_int8")


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset:
    """The CPU's feature flags (/proc/cpuinfo's first `flags` line; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_has_vnni() -> bool:
    return any(flag in cpu_flags() for flag in _VNNI)


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
def _library():
    """The loaded libdnnl, or None (not installed, or it would not load); looked up once.
    PALIMPSEST_ONEDNN=0 turns it off (every product on numpy's BLAS)."""
    if os.environ.get("PALIMPSEST_ONEDNN", "1") == "0":
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
        return ctypes.CDLL(path)
    except OSError:
        return None


@functools.lru_cache(maxsize=None)
def _gemm():
    """The bound `dnnl_gemm_u8s8s32`, or None (no library, or no VNNI)."""
    library = _library()
    if library is None or not cpu_has_vnni():
        return None
    gemm = getattr(library, "dnnl_gemm_u8s8s32", None)
    if gemm is None:
        return None
    dim, pointer = ctypes.c_int64, ctypes.c_void_p
    gemm.argtypes = [ctypes.c_char, ctypes.c_char, ctypes.c_char, dim, dim, dim,
                     ctypes.c_float, pointer, dim, ctypes.c_uint8, pointer, dim,
                     ctypes.c_int8, ctypes.c_float, pointer, dim, pointer]
    gemm.restype = ctypes.c_int
    return gemm


@functools.lru_cache(maxsize=None)
def _sgemm():
    """The bound `dnnl_sgemm` (row-major float32 C = alpha op(A) op(B) + beta C), or
    None."""
    library = _library()
    sgemm = getattr(library, "dnnl_sgemm", None) if library is not None else None
    if sgemm is None:
        return None
    dim, pointer = ctypes.c_int64, ctypes.c_void_p
    sgemm.argtypes = [ctypes.c_char, ctypes.c_char, dim, dim, dim, ctypes.c_float,
                      pointer, dim, pointer, dim, ctypes.c_float, pointer, dim]
    sgemm.restype = ctypes.c_int
    return sgemm


def available() -> bool:
    """Whether the 8-bit products run on oneDNN here."""
    return _gemm() is not None


def float_gemm_available() -> bool:
    """Whether the float32 products (bound_sgemm) run on oneDNN here."""
    return _sgemm() is not None


@functools.lru_cache(maxsize=None)
def _no_offset():
    import numpy as np

    return np.zeros(1, np.int32)


def gemm_u8s8(a, b_rows, out, b_plain=False) -> None:
    """out (M x N int32) = a (M x K uint8) @ B (int8), exactly, B given as `b_rows` (its
    N x K transpose: a weight's prepared rows) or, where `b_plain`, as K x N (a conv's
    windows as they lie); each operand 2-D with unit column stride, K at most
    MAX_DEPTH. Raises RuntimeError where oneDNN reports a failure (nothing the caller's
    checks let through)."""
    rows, depth = a.shape
    columns = b_rows.shape[1 if b_plain else 0]
    _threads_for(rows * depth * columns)
    status = _gemm()(b"N", b"N" if b_plain else b"T", b"F", rows, columns, depth, 1.0,
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


def bound_gemm_u8s8(a, b_rows, out, accumulate: bool = False):
    """gemm_u8s8(a, b_rows, out) as a call of no arguments, its arguments converted
    once: a loop calling it on the same buffers (an LSTM's steps) saves the ~5 us of
    reading three arrays' addresses and converting 17 arguments each call. With
    `accumulate`, out += the product (beta 1: as fast; oneDNN's offset vectors are not,
    95 against 15 us at 1 x 512 x 2048). The caller keeps the arrays alive."""
    gemm = _gemm()
    rows, depth = a.shape
    arguments = [ctypes.c_char(b"N"), ctypes.c_char(b"T"), ctypes.c_char(b"F")] + [
        ctypes.c_int64(v) for v in (rows, b_rows.shape[0], depth)] + [
        ctypes.c_float(1.0), ctypes.c_void_p(a.ctypes.data), ctypes.c_int64(_leading(a)),
        ctypes.c_uint8(0), ctypes.c_void_p(b_rows.ctypes.data),
        ctypes.c_int64(_leading(b_rows)), ctypes.c_int8(0),
        ctypes.c_float(1.0 if accumulate else 0.0),
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


# oneDNN's float32 GEMM against OpenBLAS 0.3.31 (SkylakeX kernels), one thread, here:
# 10-45% faster from ~64 x 64 x 256 up (an im2col conv's 16 x 144 x 1600: 44 against 75
# us; 128 x 1152 x 1600: 3.1 against 3.6 ms), slower below (32 x 32 x 256: 5.5 against 4.4
# us, the call costs more), no faster for a vector-matrix product nor with 8 columns
# (257 x 512 x 8: 43 against 41 us; with 16, 38 against 52)
SGEMM_FROM = 1 << 19
SGEMM_EDGE = 16
# a batch of products (a grouped conv's groups, a conv's output rows) goes to oneDNN one
# call each where each is this large; numpy's matmul loops over smaller ones in C, and
# gains as much (a conv's 32 x 144 x 160 rows: 12 us each on either)
SGEMM_ITEM_FROM = 1 << 20


def _operand(matrix, address: int):
    """(trans, leading dimension) of a float32 matrix view at `address` as BLAS reads it,
    row-major: b"N" with unit column stride, b"T" with unit row stride; None for other
    strides."""
    rows, columns = matrix.shape[-2:]
    row_bytes, column_bytes = matrix.strides[-2:]
    if row_bytes % 4 or column_bytes % 4 or address % 4:
        return None
    row_stride, column_stride = row_bytes // 4, column_bytes // 4
    if (column_stride == 1 or columns == 1) and (rows == 1 or row_stride >= columns):
        return b"N", row_stride if rows > 1 else max(1, columns)
    if (row_stride == 1 or rows == 1) and (columns == 1 or column_stride >= rows):
        return b"T", column_stride if columns > 1 else max(1, rows)
    return None


def _address(array) -> int:
    return array.__array_interface__["data"][0]


def bound_sgemm(a, b, out):
    """`np.matmul(a, b, out=out)` as a call of no arguments on oneDNN's float32 GEMM, its
    operands' addresses read once (a kernel's recorded calls replay it); None where oneDNN is
    not in use, the operands are not float32 matrices (batched alike or broadcast) that
    BLAS reads as they lie, `out` overlaps them, or the products are too small to gain
    (SGEMM_FROM multiply-adds, SGEMM_EDGE rows and columns). A conv reading a run's input
    binds anew each run: the checks come cheapest first (~3 us for a plain product)."""
    sgemm = _sgemm()
    if sgemm is None or a.ndim < 2 or b.ndim < 2 or out.ndim < 2:
        return None
    import numpy as np

    if not (a.dtype == b.dtype == out.dtype == np.float32):
        return None
    rows, depth = a.shape[-2:]
    columns = b.shape[-1]
    if (b.shape[-2] != depth or out.shape[-2:] != (rows, columns)
            or min(rows, columns) < SGEMM_EDGE or rows * depth * columns < SGEMM_FROM):
        return None
    batch = out.shape[:-2]
    count = math.prod(batch)
    if count > 1 and rows * depth * columns < SGEMM_ITEM_FROM:
        return None
    if count == 1:   # (batch dims of 1 only: one product)
        if math.prod(a.shape[:-2]) != 1 or math.prod(b.shape[:-2]) != 1:
            return None
    else:
        try:
            if np.broadcast_shapes(a.shape[:-2], b.shape[:-2], batch) != batch:
                return None
        except ValueError:
            return None
    if np.may_share_memory(out, a) or np.may_share_memory(out, b):
        return None
    bases = [_address(x) for x in (a, b, out)]
    forms = [_operand(x, at) for x, at in zip((a, b, out), bases)]
    if None in forms or forms[2][0] != b"N":
        return None
    (trans_a, lda), (trans_b, ldb), (_, ldc) = forms
    shared = (trans_a, trans_b, rows, columns, depth, 1.0)
    if count == 1:
        calls = [shared + (bases[0], lda, bases[1], ldb, 0.0, bases[2], ldc)]
    else:
        # each item's address: the operand's own plus the batch index times its strides
        # (0 along a broadcast axis)
        index = np.indices(batch).reshape(len(batch), count)
        at = [(base + np.broadcast_to(x, batch + x.shape[-2:]).strides[:-2] @ index)
              .tolist() for x, base in zip((a, b, out), bases)]
        calls = [shared + (a_at, lda, b_at, ldb, 0.0, out_at, ldc)
                 for a_at, b_at, out_at in zip(*at)]
    work = rows * depth * columns
    kept = (a, b, out)   # the memory the pointers address, alive while the call is

    def call(_kept=kept):
        _threads_for(work)
        for arguments in calls:
            status = sgemm(*arguments)
            if status != 0:
                raise RuntimeError(f"oneDNN's float GEMM failed (status {status}) on "
                                   f"{rows} x {depth} x {columns}")
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
    if _library() is None or _omp_set_num_threads() is None:
        return None
    _THREADS["configured"] = count
    _THREADS["current"] = None
    return count


def summary() -> str:
    """One line for benchmark headers: which products run on oneDNN."""
    if _sgemm() is None:
        reason = "turned off (PALIMPSEST_ONEDNN=0)" \
            if os.environ.get("PALIMPSEST_ONEDNN", "1") == "0" else \
            "onednn-cpu-gomp not installed"
        return f"oneDNN: not in use ({reason}); every GEMM on numpy's BLAS"
    eight = "and 8-bit products" if available() else \
        "products (8-bit ones on float BLAS: no VNNI on this CPU)"
    return (f"oneDNN: float32 products of {SGEMM_FROM} multiply-adds and more {eight} "
            f"({_library_path()})")


__all__ = ["MAX_DEPTH", "available", "bound_gemm_u8s8", "bound_sgemm", "float_gemm_available",
           "gemm_u8s8", "set_threads", "summary"]
