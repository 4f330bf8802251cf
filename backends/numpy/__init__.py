"""The numpy backend: buffer-level IR executed inside real uint8 arenas.

- `arena.py`: arenas (one aligned uint8 array per alloc or per pool), typed byte views,
  poisoning, and `RunStats` (allocations, bytes allocated, peak bytes, bytes copied).
- `kernels.py`: `buffer.compute` with `out=` fast paths, the reference kernels otherwise
  (its docstring lists which ops still make temporaries).
- `executor.py`: the numpy hooks of the executor loop (`backends/loop.py`): arenas,
  zero-copy I/O, poisoning (`run`, `run_with_stats`).

Importing this package imports numpy.
"""

from palimpsest.backends.numpy.arena import RunStats
from palimpsest.backends.numpy.executor import Executor, run, run_with_stats

__all__ = ["Executor", "RunStats", "run", "run_with_stats"]
