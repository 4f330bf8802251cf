"""What the host's CPU is, where a kernel's shape depends on it: a core's L2 cache (the
numpy backend's int8 blocks, and the OpenCL generators for a CPU device, which is the
host's own); and memory on huge pages for the weights the backends prepare once
(`huge_page_empty`, `huge_page_copy`, `weight_empty`) and for the pools a CPU device
shares with the host (`aligned_empty`)."""

from __future__ import annotations

import functools
import math
import mmap


@functools.lru_cache(maxsize=None)
def l2_bytes() -> int:
    """A core's L2 cache in bytes, as Linux says (sysfs); 1 MiB where it does not."""
    import glob

    for folder in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            with open(f"{folder}/level", encoding="ascii") as f:
                if f.read().strip() != "2":
                    continue
            with open(f"{folder}/size", encoding="ascii") as f:
                text = f.read().strip().upper()
            return int(text.rstrip("KM")) << {"K": 10, "M": 20}.get(text[-1:], 0)
        except (OSError, ValueError):
            continue
    return 1 << 20


# Weights prepared once (an 8-bit GEMM's transposed rows, oneDNN's packed copies) are
# laid side by side in 2 MiB-aligned chunks that Linux backs with huge pages (madvise, as
# THP's default "madvise" mode asks): an LSTM step's vector-matrix product streams its
# whole R from L2, and on 4 KiB pages a 1 MiB R is 256 TLB entries, which the numpy calls
# between two steps evict (voicefilter-lite's 512 x 2048 R: 19 -> 15 us a product
# between numpy calls, 15 -> 12.5 alone). Outside the memory plan, as the weights are.
_HUGE_PAGE = 2 << 20
# a weight from this size on goes on huge pages; smaller ones as numpy allocates them
HUGE_PAGES_FROM = 256 << 10
_CHUNK = 8 << 20
_ALIGN = 64


class _HugePageChunks:
    def __init__(self):
        self.chunk = None     # the current chunk (a uint8 array) and its next free offset
        self.offset = 0

    def take(self, nbytes: int):
        """`nbytes` of a chunk, 64-byte aligned, as a uint8 array (its chunk kept alive by
        the view)."""
        if nbytes > _CHUNK // 2:    # a chunk of its own
            return _mapped(nbytes)[:nbytes]
        if self.chunk is None or self.offset + nbytes > len(self.chunk):
            self.chunk, self.offset = _mapped(_CHUNK), 0
        start = self.offset
        self.offset = -(-(start + nbytes) // _ALIGN) * _ALIGN
        return self.chunk[start:start + nbytes]


def _mapped(nbytes: int):
    """An anonymous mapping of at least `nbytes` from a 2 MiB boundary, advised to use
    huge pages where the kernel offers them, as a uint8 array."""
    import numpy as np

    size = -(-nbytes // _HUGE_PAGE) * _HUGE_PAGE
    try:   # (private: shared anonymous memory gets no transparent huge pages)
        region = mmap.mmap(-1, size + _HUGE_PAGE,
                           flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (AttributeError, TypeError, OSError):   # (no such mapping here)
        return np.empty(size, np.uint8)
    raw = np.frombuffer(region, np.uint8)
    start = (-raw.ctypes.data) % _HUGE_PAGE
    advise = getattr(region, "madvise", None)
    flag = getattr(mmap, "MADV_HUGEPAGE", None)
    if advise is not None and flag is not None:
        try:
            advise(flag, start, size)
        except OSError:   # (a kernel without THP: 4 KiB pages, as numpy's)
            pass
    return raw[start:start + size]


_CHUNKS = _HugePageChunks()


def huge_page_empty(shape, dtype):
    """An uninitialized C-contiguous array for a weight prepared once, on huge pages
    where Linux gives them (see above)."""
    import numpy as np

    dtype = np.dtype(dtype)
    return _CHUNKS.take(math.prod(shape) * dtype.itemsize).view(dtype).reshape(shape)


def huge_page_copy(array):
    """A copy of `array` (C-contiguous) on huge pages (`huge_page_empty`)."""
    import numpy as np

    copy = huge_page_empty(array.shape, array.dtype)
    np.copyto(copy, array)
    return copy


def aligned_empty(nbytes: int, alignment: int):
    """`nbytes` uninitialized bytes (a uint8 array) from an `alignment`-byte boundary (a
    power of two up to 2 MiB): a mapping of their own on huge pages from HUGE_PAGES_FROM
    bytes (freed with the array), else numpy's memory."""
    if nbytes >= HUGE_PAGES_FROM:
        return _mapped(nbytes)[:nbytes]
    return numpy_aligned_empty(nbytes, alignment)


def numpy_aligned_empty(nbytes: int, alignment: int):
    """`nbytes` uninitialized bytes of numpy's memory (a uint8 array whose `base` owns
    them) from an `alignment`-byte boundary."""
    import numpy as np

    raw = np.empty(nbytes + alignment, np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start:start + nbytes]


def weight_empty(shape, dtype):
    """An uninitialized array for a weight prepared once: on huge pages from
    HUGE_PAGES_FROM bytes (an LSTM's R, streamed from L2 at every step, then pays no TLB
    misses), else as numpy allocates."""
    import numpy as np

    dtype = np.dtype(dtype)
    if math.prod(shape) * dtype.itemsize >= HUGE_PAGES_FROM:
        return huge_page_empty(shape, dtype)
    return np.empty(shape, dtype)
