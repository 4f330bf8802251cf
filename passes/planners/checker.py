"""An independent plan checker: a plan is checked, not trusted.

Written separately from the planners (no shared code beyond the :class:`Interval`
record): one sweep over time keeps the buffers live at that moment sorted by offset,
and each buffer that becomes live is compared with its neighbours in that order. A
valid plan costs O(n log n + n * live); an invalid one is reported in full up to a
limit.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import Iterable, Mapping

from .intervals import Interval

__all__ = ["check_plan"]

MAX_PROBLEMS = 100


def _describe(iv: Interval, offset: int) -> str:
    return (
        f"{iv.id!r} (live [{iv.start}, {iv.end}), bytes [{offset}, {offset + iv.size}))"
    )


def check_plan(
    intervals: Iterable[Interval],
    offsets: Mapping[str, int],
    capacity: int | None = None,
    alignment: int = 1,
    max_problems: int = MAX_PROBLEMS,
) -> list[str]:
    """Return the problems of a plan, as sentences; an empty list means it is valid.

    Checks: every interval has an integer offset and no offset names an unknown id;
    offsets are >= 0 and multiples of ``max(alignment, interval.alignment)``; each
    buffer ends within ``capacity`` (if given); and no two buffers live at the same
    time (half-open lifetimes) share a byte.
    """
    problems: list[str] = []
    ivs = list(intervals)
    known: dict[str, Interval] = {}
    for iv in ivs:
        if iv.id in known:
            problems.append(f"duplicate buffer id {iv.id!r}")
        known[iv.id] = iv
    for ident in offsets:
        if ident not in known:
            problems.append(f"offset given for unknown buffer {ident!r}")

    sweep: list[tuple[Interval, int]] = []
    for iv in ivs:
        if iv.id not in offsets:
            problems.append(f"buffer {iv.id!r} has no offset")
            continue
        off = offsets[iv.id]
        if isinstance(off, bool) or not isinstance(off, int):
            problems.append(f"buffer {iv.id!r} has a non-integer offset {off!r}")
            continue
        bad = False
        if not isinstance(iv.size, int) or iv.size < 0:
            problems.append(f"buffer {iv.id!r} has an invalid size {iv.size!r}")
            bad = True
        if not isinstance(iv.start, int) or not isinstance(iv.end, int) or iv.end < iv.start:
            problems.append(f"buffer {iv.id!r} has an invalid lifetime [{iv.start}, {iv.end})")
            bad = True
        if off < 0:
            problems.append(f"buffer {iv.id!r} has a negative offset {off}")
        align = max(alignment, iv.alignment if isinstance(iv.alignment, int) else 1, 1)
        if off % align:
            problems.append(
                f"buffer {iv.id!r} at offset {off} is misaligned: "
                f"offset must be a multiple of {align}"
            )
        if bad:
            continue
        if capacity is not None and off + iv.size > capacity:
            problems.append(
                f"buffer {iv.id!r} ends at byte {off + iv.size}, beyond capacity {capacity} "
                f"(offset {off}, size {iv.size})"
            )
        if iv.size > 0 and iv.end > iv.start:
            sweep.append((iv, off))

    # Sweep: at equal times, lifetimes that end are removed before new ones start.
    events: list[tuple[int, int, int]] = []
    for k, (iv, _) in enumerate(sweep):
        events.append((iv.start, 1, k))
        events.append((iv.end, 0, k))
    events.sort()
    live: list[tuple[int, int]] = []  # (offset, k), sorted
    clean = True  # while no overlap was found, the live buffers are pairwise disjoint
    overlaps = 0
    for _, kind, k in events:
        iv, off = sweep[k]
        key = (off, k)
        if kind == 0:
            del live[bisect_left(live, key)]
            continue
        at = bisect_left(live, key)
        top = off + iv.size
        clash: list[int] = []
        # Buffers below: with disjoint live buffers their tops grow with their offsets,
        # so the scan can stop at the first one that ends at or below `off`.
        for p in range(at - 1, -1, -1):
            o2, k2 = live[p]
            if o2 + sweep[k2][0].size > off:
                clash.append(k2)
            elif clean:
                break
        for p in range(at, len(live)):
            o2, k2 = live[p]
            if o2 >= top:
                break
            clash.append(k2)
        insort(live, key)
        for k2 in clash:
            clean = False
            overlaps += 1
            if overlaps > max_problems:
                break
            other, o2 = sweep[k2]
            t0, t1 = max(iv.start, other.start), min(iv.end, other.end)
            b0, b1 = max(off, o2), min(top, o2 + other.size)
            problems.append(
                f"buffers {other.id!r} and {iv.id!r} overlap at bytes [{b0}, {b1}) "
                f"while both live over [{t0}, {t1}): "
                f"{_describe(other, o2)} and {_describe(iv, off)}"
            )
        if overlaps > max_problems:
            problems.append(f"stopped after {max_problems} overlaps")
            break
    return problems
