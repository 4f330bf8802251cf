"""Palimpsest: a multi-level compiler IR for neural networks (README.md)."""

import os as _os
import sys as _sys

# OpenBLAS's idle workers spin up to 2^28 cycles after each call (its default) on the
# cores oneDNN's threads want next: ppocr_v4_det at two threads took 70 ms a run, 25
# with 2^16. OpenBLAS reads this when numpy loads it, so it counts only when numpy loads
# after this (or the user set it): backends/threads.py gives numpy's BLAS one thread
# beside oneDNN otherwise.
BLAS_TIMEOUT_SET = "numpy" not in _sys.modules or "OPENBLAS_THREAD_TIMEOUT" in _os.environ
_os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "16")
