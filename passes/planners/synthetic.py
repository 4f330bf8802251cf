"""Seeded instance generators for the planners' tests and benchmark.

* :func:`perfect_packing` cuts a ``capacity x horizon`` rectangle (bytes x time) into
  pieces with random guillotine cuts. Every moment is covered exactly, so the lower
  bound is ``capacity`` and a plan that reaches it is known to exist (the cut itself).
* :func:`random_program` imitates the buffers of a long program: most die soon after
  they are made, a few live long; used to time the planners at scale.
"""

from __future__ import annotations

import random

from .intervals import Interval

__all__ = ["perfect_packing", "random_program"]


def perfect_packing(
    pieces: int,
    capacity: int = 1024,
    horizon: int = 100,
    seed: int = 0,
    granule: int = 1,
) -> tuple[list[Interval], dict[str, int]]:
    """``(intervals, offsets)``: a tight instance and the packing it was cut from.

    Sizes and offsets are multiples of ``granule``. Fewer pieces come back when the
    rectangle cannot be cut further (a piece 1 time step and 1 granule in size).
    """
    if capacity % granule:
        raise ValueError("capacity must be a multiple of granule")
    rng = random.Random(seed)
    rects = [(0, horizon, 0, capacity)]  # (t0, t1, b0, b1)
    stuck = 0
    while len(rects) < pieces and stuck < 50 * pieces:
        k = rng.randrange(len(rects))
        t0, t1, b0, b1 = rects[k]
        can_time = t1 - t0 >= 2
        can_bytes = (b1 - b0) // granule >= 2
        if not (can_time or can_bytes):
            stuck += 1
            continue
        if can_time and (not can_bytes or rng.random() < 0.5):
            t = rng.randrange(t0 + 1, t1)
            rects[k : k + 1] = [(t0, t, b0, b1), (t, t1, b0, b1)]
        else:
            b = b0 + granule * rng.randrange(1, (b1 - b0) // granule)
            rects[k : k + 1] = [(t0, t1, b0, b), (t0, t1, b, b1)]
    rng.shuffle(rects)
    intervals = []
    offsets = {}
    for n, (t0, t1, b0, b1) in enumerate(rects):
        ident = f"p{n}"
        intervals.append(Interval(ident, t0, t1, b1 - b0))
        offsets[ident] = b0
    return intervals, offsets


def random_program(
    count: int,
    seed: int = 0,
    mean_life: float = 8.0,
    long_share: float = 0.02,
    long_life: int = 400,
    sizes: tuple[int, int] = (64, 1 << 20),
    per_step: float = 2.0,
) -> list[Interval]:
    """``count`` buffers made at about ``per_step`` a time step.

    Most live an exponentially distributed time (mean ``mean_life`` steps); a share
    ``long_share`` live up to ``long_life`` steps. Sizes are log-uniform in ``sizes``
    and rounded up to 64 bytes.
    """
    rng = random.Random(seed)
    lo, hi = sizes
    result = []
    for n in range(count):
        start = int(n / per_step)
        if rng.random() < long_share:
            life = rng.randint(1, long_life)
        else:
            life = 1 + int(rng.expovariate(1.0 / mean_life))
        size = int(lo * (hi / lo) ** rng.random())
        size = (size + 63) // 64 * 64
        result.append(Interval(f"b{n}", start, start + life, size))
    return result
