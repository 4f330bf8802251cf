"""Arenas: the real memory of a numpy run.

Every buffer the backend executes is a numpy view into a `uint8` arena. An arena is one
aligned `np.uint8` array: one per `buffer.alloc` (allocated at the alloc, released at its
`buffer.dealloc`), or one per memory pool (`memory.arena @pool`, the pool's size in bytes,
allocated once per run and live for all of it). `RunStats` counts what a run allocates and
copies; `poison` overwrites memory whose lifetime has ended (floats with NaN, everything
else with 0x5A bytes) so that a buffer read after its end shows up as wrong numbers.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np

from palimpsest.backends.host import numpy_aligned_empty
from palimpsest.ir.attributes import numpy_dtype_name

ALIGNMENT = 64
POISON_BYTE = 0x5A


_DTYPES: dict = {}


def dtype_of(element_type) -> np.dtype:
    dtype = _DTYPES.get(element_type)
    if dtype is None:
        dtype = _DTYPES[element_type] = np.dtype(numpy_dtype_name(element_type))
    return dtype


@dataclass
class RunStats:
    """What one run did with memory. Bytes are the bytes asked for (alignment padding
    not counted)."""

    allocations: int = 0       # arenas allocated (per alloc, per pool, inputs copied in)
    bytes_allocated: int = 0   # their total size
    peak_bytes: int = 0        # the most arena bytes live at one moment
    live_bytes: int = 0        # arena bytes live now (at the end: outputs and pools)
    copy_op_bytes: int = 0     # buffer.copy
    temporary_bytes: int = 0   # copied into an out buffer from a kernel's fresh temporary
    view_copy_bytes: int = 0   # copied into an out buffer from a view of an operand
    io_bytes: int = 0          # inputs copied in, outputs copied out
    deallocations: int = 0
    static_bytes: int = 0         # of bytes_allocated: pool arenas (the static plan)
    dynamic_allocations: int = 0  # of allocations: per-alloc arenas made at run time
    dynamic_bytes: int = 0        # their bytes (inputs copied in are io, not dynamic)
    temporary_ops: dict = field(default_factory=dict)  # graph op -> times it made one
    device_launches: int = 0      # OpenCL: kernels enqueued
    host_ops: dict = field(default_factory=dict)  # OpenCL: op -> times run on the host
    transfer_bytes: int = 0       # OpenCL: moved between host and device for host ops

    @property
    def bytes_copied(self) -> int:
        return self.copy_op_bytes + self.temporary_bytes + self.view_copy_bytes + self.io_bytes

    def summary(self) -> str:
        return (f"allocations: {self.allocations}\n"
                f"bytes allocated: {self.bytes_allocated}\n"
                f"peak bytes: {self.peak_bytes}\n"
                f"bytes copied: {self.bytes_copied} (buffer.copy {self.copy_op_bytes}, "
                f"from kernel temporaries {self.temporary_bytes}, from operand views "
                f"{self.view_copy_bytes}, inputs/outputs {self.io_bytes})")


class Arena:
    """One aligned uint8 array, accounted in `stats` while it is live."""

    __slots__ = ("data", "nbytes", "live", "stats", "typed_views", "baseline")

    def __init__(self, nbytes: int, stats: RunStats, poison: bool = False):
        self.data = numpy_aligned_empty(nbytes, ALIGNMENT)   # (`data.base` owns it)
        self.nbytes = nbytes
        self.typed_views: dict = {}   # dtype -> the whole arena seen as that dtype (kept)
        self.baseline = None          # references to its memory that are the executor's own
        self._account(stats, poison)

    def _account(self, stats: RunStats, poison: bool) -> None:
        self.live = True
        self.stats = stats
        stats.allocations += 1
        stats.bytes_allocated += self.nbytes
        stats.live_bytes += self.nbytes
        stats.peak_bytes = max(stats.peak_bytes, stats.live_bytes)
        if poison:  # memory read before it is written shows up too
            self.data.fill(POISON_BYTE)

    def renew(self, stats: RunStats, poison: bool) -> None:
        """The same memory for another run, counted as a fresh allocation (and poisoned
        again): only when nothing outside the executor still sees it (`unshared`)."""
        self._account(stats, poison)

    def references(self) -> int:
        """How many references its memory (the base array every view of it points to)
        has, less this call's own (getrefcount's argument)."""
        return sys.getrefcount(self.data.base) - 1

    def unshared(self) -> bool:
        """True when the only references to its memory are the ones counted in
        `baseline` (the executor's cached views), i.e. no result of an earlier run, nor a
        view of one, is alive."""
        return self.baseline is not None and self.references() == self.baseline

    def typed(self, shape, dtype: np.dtype) -> np.ndarray:
        """The arena's first bytes as a C-contiguous array."""
        count = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
        return self.data[:count * dtype.itemsize].view(dtype).reshape(shape)

    def release(self) -> None:
        if self.live:
            self.live = False
            self.stats.live_bytes -= self.nbytes
            self.stats.deallocations += 1


def poison(array: np.ndarray) -> None:
    """Overwrite `array` (any view: typed, strided) with the poison of its dtype."""
    if array.size == 0 or not array.flags.writeable:
        return
    if array.dtype.kind in "fc":
        array.fill(np.nan)
    else:
        array.fill(np.frombuffer(bytes([POISON_BYTE]) * array.dtype.itemsize,
                                 dtype=array.dtype)[0])


def byte_view(source: np.ndarray, offset: int, shape, dtype: np.dtype,
              strides=None) -> np.ndarray:
    """A typed view at byte `offset` of the 1-D byte array `source`; `strides` in
    elements (None: row-major). ValueError when it does not fit."""
    if source.ndim != 1 or source.dtype.itemsize != 1 or not source.flags.c_contiguous:
        raise ValueError(f"views need a contiguous 1-D byte buffer, got {source.dtype} "
                         f"{source.shape}")
    byte_strides = None if strides is None else tuple(s * dtype.itemsize for s in strides)
    return np.ndarray(tuple(shape), dtype=dtype, buffer=source, offset=offset,
                      strides=byte_strides)


__all__ = ["ALIGNMENT", "Arena", "POISON_BYTE", "RunStats", "byte_view", "dtype_of", "poison"]
