"""Locations and diagnostics: every user-facing error is `file:line:col: error: msg`.

A `Diagnostic` carries a location; `DiagnosticError` is the one exception type that
tools catch and render (with the source line and a caret) instead of a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass


class Location:
    """Base of source locations. Locations are immutable and compare by value."""

    __slots__ = ()

    def describe(self) -> str:  # the `file:line:col` prefix of a diagnostic
        return "<unknown>"


@dataclass(frozen=True, slots=True)
class UnknownLoc(Location):
    def describe(self) -> str:
        return "<unknown>"

    def __str__(self) -> str:
        return "loc(unknown)"


@dataclass(frozen=True, slots=True)
class FileLineColLoc(Location):
    filename: str
    line: int
    column: int

    def describe(self) -> str:
        return f"{self.filename}:{self.line}:{self.column}"

    def __str__(self) -> str:
        return f"loc({_quote(self.filename)}:{self.line}:{self.column})"


@dataclass(frozen=True, slots=True)
class NameLoc(Location):
    """`loc("name")` or `loc("name"(child))`: e.g. an ONNX node name."""

    name: str
    child: Location | None = None

    def describe(self) -> str:
        if self.child is not None and not isinstance(self.child, UnknownLoc):
            return f"{self.child.describe()} ({self.name})"
        return self.name

    def __str__(self) -> str:
        if self.child is None:
            return f"loc({_quote(self.name)})"
        return f"loc({_quote(self.name)}({_inner(self.child)}))"


@dataclass(frozen=True, slots=True)
class FusedLoc(Location):
    locations: tuple[Location, ...]
    metadata: object = None  # an attribute, printed `fused<metadata>[...]`

    def describe(self) -> str:
        for loc in self.locations:
            if not isinstance(loc, UnknownLoc):
                return loc.describe()
        return "<unknown>"

    def __str__(self) -> str:
        metadata = f"<{self.metadata}>" if self.metadata is not None else ""
        return f"loc(fused{metadata}[" + ", ".join(_inner(l) for l in self.locations) + "])"


@dataclass(frozen=True, slots=True)
class CallSiteLoc(Location):
    callee: Location
    caller: Location

    def describe(self) -> str:
        return self.callee.describe()

    def __str__(self) -> str:
        return f"loc(callsite({_inner(self.callee)} at {_inner(self.caller)}))"


def _inner(loc: Location) -> str:
    text = str(loc)
    return text[4:-1]  # strip "loc(" and ")"


def _quote(text: str) -> str:
    from palimpsest.ir.attributes import quote_string

    return quote_string(text)


class DiagnosticError(Exception):
    """A user-facing error at a location. Tools print `render()` and exit non-zero."""

    def __init__(self, message: str, location: Location | None = None, notes=()):
        super().__init__(message)
        self.message = message
        self.location = location
        self.notes = list(notes)  # list of (message, location)

    def render(self, sources: "SourceManager | None" = None) -> str:
        lines = [format_diagnostic("error", self.message, self.location, sources)]
        for message, location in self.notes:
            lines.append(format_diagnostic("note", message, location, sources))
        return "\n".join(lines)

    def __str__(self) -> str:
        return format_diagnostic("error", self.message, self.location, None)


class SourceManager:
    """Remembers the text of parsed buffers so diagnostics can show the line and a caret.

    `line_offset` lets one file be split into chunks (`--split-input-file`) that still
    report the line numbers of the whole file.
    """

    def __init__(self):
        self._buffers: dict[str, list[str]] = {}

    def add(self, filename: str, text: str, line_offset: int = 0) -> None:
        lines = self._buffers.setdefault(filename, [])
        chunk = text.split("\n")
        needed = line_offset + len(chunk)
        if len(lines) < needed:
            lines.extend([""] * (needed - len(lines)))
        lines[line_offset:needed] = chunk

    def line(self, filename: str, line: int) -> str | None:
        lines = self._buffers.get(filename)
        if lines is None or not 1 <= line <= len(lines):
            return None
        return lines[line - 1]


def file_location(loc: Location | None) -> FileLineColLoc | None:
    """The first file position inside a (possibly nested) location."""
    if isinstance(loc, FileLineColLoc):
        return loc
    if isinstance(loc, NameLoc):
        return file_location(loc.child)
    if isinstance(loc, FusedLoc):
        for inner in loc.locations:
            found = file_location(inner)
            if found is not None:
                return found
    if isinstance(loc, CallSiteLoc):
        return file_location(loc.callee)
    return None


def format_diagnostic(severity: str, message: str, location: Location | None,
                      sources: SourceManager | None) -> str:
    prefix = location.describe() if location is not None else "<unknown>"
    text = f"{prefix}: {severity}: {message}"
    position = file_location(location)
    if sources is not None and position is not None:
        source_line = sources.line(position.filename, position.line)
        if source_line is not None:
            caret = " " * max(position.column - 1, 0) + "^"
            text += f"\n{source_line}\n{caret}"
    return text


def split_source(text: str, marker: str = "// -----") -> list[tuple[str, int]]:
    """Split `text` at lines that start with `marker`; each chunk comes with the number
    of lines before it, so its diagnostics keep the whole file's line numbers."""
    chunks, current, start = [], [], 0
    for number, line in enumerate(text.split("\n")):
        if line.startswith(marker):
            chunks.append(("\n".join(current), start))
            current, start = [], number + 1
        else:
            current.append(line)
    chunks.append(("\n".join(current), start))
    return chunks
