"""Plain data for memory planning: intervals, plans, the lower bound, CSV files.

An :class:`Interval` is one buffer: it is live over the half-open time range
``[start, end)`` and needs ``size`` bytes at an offset that is a multiple of its
alignment. A planner turns a list of intervals into a :class:`Plan`: one byte offset
per interval such that no two intervals that are live at the same time overlap.

Nothing here knows about the IR; the plan-memory pass builds intervals from liveness.
The CSV format is MiniMalloc's (google/minimalloc): a header ``id,lower,upper,size``
(plus an optional ``alignment`` column), one buffer a row, live over ``[lower, upper)``;
planned files add an ``offset`` column.
"""

from __future__ import annotations

import csv
import io
import operator
import os
import re
from dataclasses import dataclass, field
from typing import IO, Iterable, Mapping, Sequence, Union

__all__ = [
    "Interval",
    "Plan",
    "PlanError",
    "IntervalError",
    "lower_bound",
    "peak_live",
    "normalize_intervals",
    "read_csv",
    "read_csv_offsets",
    "write_csv",
]


@dataclass(frozen=True)
class Interval:
    """One buffer: ``size`` bytes live over time steps ``[start, end)``."""

    id: str
    start: int
    end: int
    size: int
    alignment: int = 1


@dataclass
class Plan:
    """The result of planning: an offset per interval id, and how good it is."""

    offsets: dict[str, int]
    peak: int
    lower_bound: int
    algorithm: str
    seconds: float
    optimal: bool
    stats: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def ratio(self) -> float:
        """``peak / lower_bound``: 1.0 is a perfect plan (1.0 when nothing is live)."""
        if self.lower_bound == 0:
            return 1.0
        return self.peak / self.lower_bound


class PlanError(Exception):
    """A plan cannot be made: the intervals need more memory than the capacity."""


class IntervalError(PlanError, ValueError):
    """The intervals themselves are malformed (bad CSV row, negative size, ...).

    For CSV input, ``path`` and ``line`` say where, and the message starts with
    ``path:line:`` so that a tool can print it as is.
    """

    def __init__(self, message: str, path: str | None = None, line: int | None = None):
        self.path = path
        self.line = line
        self.detail = message
        if path is not None and line is not None:
            message = f"{path}:{line}: {message}"
        elif path is not None:
            message = f"{path}: {message}"
        super().__init__(message)


def _as_int(value, what: str, ident: str) -> int:
    if isinstance(value, bool):
        raise IntervalError(f"interval {ident!r}: {what} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise IntervalError(
            f"interval {ident!r}: {what} must be an integer, got {value!r}"
        ) from None


def normalize_intervals(intervals: Iterable[Interval]) -> list[Interval]:
    """Validate intervals and return them as a list of plain-int :class:`Interval`.

    Raises :class:`IntervalError` for a duplicate id, a negative size, ``end < start``
    or an alignment below 1. An empty lifetime (``start == end``) is allowed: such a
    buffer is never live and conflicts with nothing.
    """
    result: list[Interval] = []
    seen: set[str] = set()
    for iv in intervals:
        if not isinstance(iv, Interval):
            raise IntervalError(f"expected an Interval, got {type(iv).__name__}")
        ident = iv.id
        if ident in seen:
            raise IntervalError(f"duplicate interval id {ident!r}")
        seen.add(ident)
        start = _as_int(iv.start, "start", ident)
        end = _as_int(iv.end, "end", ident)
        size = _as_int(iv.size, "size", ident)
        align = _as_int(iv.alignment, "alignment", ident)
        if end < start:
            raise IntervalError(f"interval {ident!r}: end {end} is before start {start}")
        if size < 0:
            raise IntervalError(f"interval {ident!r}: negative size {size}")
        if align < 1:
            raise IntervalError(f"interval {ident!r}: alignment {align} is below 1")
        if (start, end, size, align) != (iv.start, iv.end, iv.size, iv.alignment):
            iv = Interval(ident, start, end, size, align)
        result.append(iv)
    return result


def peak_live(intervals: Iterable[Interval]) -> tuple[int, int | None]:
    """``(bytes, time)``: the most bytes live at one moment, and the first such moment.

    The time is None when nothing is ever live.
    """
    events: list[tuple[int, int]] = []
    for iv in intervals:
        if iv.size > 0 and iv.end > iv.start:
            events.append((iv.start, iv.size))
            events.append((iv.end, -iv.size))
    # At equal times ends (negative) come first: lifetimes are half-open.
    events.sort()
    live = best = 0
    when = None
    for time, delta in events:
        live += delta
        if live > best:
            best, when = live, time
    return best, when


def lower_bound(intervals: Iterable[Interval]) -> int:
    """The most bytes live at one moment: no plan can use a smaller pool."""
    return peak_live(intervals)[0]


# --------------------------------------------------------------------------- CSV

_REQUIRED = ("id", "lower", "upper", "size")
_OPTIONAL = ("alignment", "offset")

PathOrFile = Union[str, "os.PathLike[str]", IO[str]]

# A cell's integer: ASCII digits with an optional sign, as MiniMalloc reads them. Python's
# int() also takes '1_000' and other scripts' digits ('٣'), which no CSV tool writes.
_INTEGER = re.compile(r"[+-]?[0-9]+")
_MAX_DIGITS = 4000  # below Python's int() limit for decimal strings (4300)
_OTHER_DELIMITERS = (";", "\t", "|")


def _cell_int(cell: str) -> int:
    """The integer in a (stripped) CSV cell; ValueError with the reason if there is none."""
    if not _INTEGER.fullmatch(cell):
        raise ValueError(f"is not an integer: {_shorten(cell)!r}")
    if len(cell) > _MAX_DIGITS:
        raise ValueError(f"has {len(cell)} digits, more than {_MAX_DIGITS}")
    return int(cell)


def _shorten(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _source_name(path_or_file) -> str:
    if isinstance(path_or_file, (str, os.PathLike)):
        return os.fspath(path_or_file)
    return str(getattr(path_or_file, "name", "<input>"))


def _read_rows(path_or_file, want_offsets: bool):
    name = _source_name(path_or_file)
    if isinstance(path_or_file, (str, os.PathLike)):
        try:
            with open(path_or_file, "rb") as f:
                text = f.read()
        except OSError as e:
            raise IntervalError(f"cannot read file: {e.strerror or e}", path=name) from None
    else:
        text = path_or_file.read()
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            line = text.count(b"\n", 0, e.start) + 1
            column = e.start - (text.rfind(b"\n", 0, e.start) + 1) + 1
            raise IntervalError(f"not UTF-8 text (byte {text[e.start]:#04x} at column "
                                f"{column})", name, line) from None
    if text.startswith("\ufeff"):  # a byte-order mark, as spreadsheets write UTF-8 CSV
        text = text[1:]
    reader = csv.reader(io.StringIO(text, newline=""))
    header = None
    columns: dict[str, int] = {}
    intervals: list[Interval] = []
    offsets: dict[str, int | None] = {}
    seen: dict[str, int] = {}
    for line, row in _rows(reader, name):
        if not row or all(not cell.strip() for cell in row):
            continue
        if header is None:
            header = [cell.strip().lower() for cell in row]
            for index, col in enumerate(header):
                if col in columns:
                    raise IntervalError(f"column {col!r} appears twice in the header", name, line)
                columns[col] = index
            missing = [c for c in _REQUIRED if c not in columns]
            if missing and len(header) == 1:
                used = [d for d in _OTHER_DELIMITERS if d in header[0]]
                if used:
                    raise IntervalError(
                        f"the header is not comma-separated (it has {used[0]!r}): expected "
                        "id,lower,upper,size[,alignment]",
                        name,
                        line,
                    )
            if missing:
                raise IntervalError(
                    f"missing column {missing[0]!r} in header (expected "
                    f"id,lower,upper,size[,alignment]; got {_show(','.join(header))})",
                    name,
                    line,
                )
            continue
        if len(row) != len(header):
            raise IntervalError(
                f"expected {len(header)} fields ({_show(','.join(header))}), got {len(row)}",
                name,
                line,
            )
        ident = row[columns["id"]].strip()
        if not ident:
            raise IntervalError("empty id", name, line)
        if ident in seen:
            raise IntervalError(
                f"duplicate id {ident!r} (first on line {seen[ident]})", name, line
            )
        seen[ident] = line
        values = {}
        for col in _REQUIRED[1:] + _OPTIONAL:
            if col not in columns:
                continue
            cell = row[columns[col]].strip()
            if col == "offset" and (not want_offsets or cell == ""):
                continue
            try:
                values[col] = _cell_int(cell)
            except ValueError as e:
                raise IntervalError(f"{col} of {_shorten(ident)!r} {e}", name, line) from None
        lower, upper, size = values["lower"], values["upper"], values["size"]
        align = values.get("alignment", 1)
        if lower >= upper:
            raise IntervalError(
                f"{ident!r}: lower {lower} must be below upper {upper} "
                "(lifetimes are half-open [lower, upper))",
                name,
                line,
            )
        if lower < 0:
            raise IntervalError(f"{ident!r}: negative lower {lower}", name, line)
        if size < 0:
            raise IntervalError(f"{ident!r}: negative size {size}", name, line)
        if align < 1:
            raise IntervalError(f"{ident!r}: alignment {align} is below 1", name, line)
        intervals.append(Interval(ident, lower, upper, size, align))
        if want_offsets:
            offsets[ident] = values.get("offset")
    if header is None:
        raise IntervalError("empty file: expected a header id,lower,upper,size", name, 1)
    return intervals, offsets


def _rows(reader, name: str):
    """(line, row) for the rows of a csv reader, a row's line the one it starts on (a
    quoted cell can span lines); its errors (a field over the csv module's size limit)
    become IntervalErrors naming the line."""
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise IntervalError(f"malformed CSV: {e}", name, start) from None
        yield start, row


def _show(text: str, limit: int = 80) -> str:
    """A cell or header for a one-line message: control characters (a quoted cell's
    line breaks) escaped, long text cut."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return _shorten(text, limit)


def read_csv(path_or_file: PathOrFile) -> list[Interval]:
    """Read intervals from a MiniMalloc CSV file (a path or an open text file).

    The header names the columns ``id,lower,upper,size`` in any order, plus an
    optional ``alignment``; an ``offset`` column (a planned file) is accepted and
    ignored, as are columns with other names. Raises :class:`IntervalError` naming
    the file, the line and the problem.
    """
    return _read_rows(path_or_file, want_offsets=False)[0]


def read_csv_offsets(path_or_file: PathOrFile) -> tuple[list[Interval], dict[str, int]]:
    """Read a planned CSV file: the intervals and the ``offset`` column.

    Rows with an empty offset cell are left out of the offsets (the checker then
    reports them as missing).
    """
    intervals, offsets = _read_rows(path_or_file, want_offsets=True)
    return intervals, {k: v for k, v in offsets.items() if v is not None}


def write_csv(
    path_or_file: PathOrFile, intervals: Sequence[Interval], offsets: Mapping[str, int]
) -> None:
    """Write intervals with their planned offsets: ``id,lower,upper,size[,alignment],offset``.

    The ``alignment`` column is written only when some interval has one above 1.
    """
    missing = [iv.id for iv in intervals if iv.id not in offsets]
    if missing:
        raise IntervalError(f"no offset for interval {missing[0]!r}")
    with_align = any(iv.alignment != 1 for iv in intervals)
    header = ["id", "lower", "upper", "size"] + (["alignment"] if with_align else []) + ["offset"]

    def emit(f):
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header)
        for iv in intervals:
            row = [iv.id, iv.start, iv.end, iv.size]
            if with_align:
                row.append(iv.alignment)
            row.append(offsets[iv.id])
            writer.writerow(row)

    if isinstance(path_or_file, (str, os.PathLike)):
        with open(path_or_file, "w", newline="", encoding="utf-8") as f:
            emit(f)
    else:
        emit(path_or_file)
