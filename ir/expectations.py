"""`--verify-diagnostics`, with MLIR's semantics: the input says which diagnostics it
expects, in comments, and the run passes only when exactly those are produced.

    // expected-error @+1 {{redefinition of SSA value}}
    // expected-error {{...}}        on the same line
    // expected-error @below {{...}} / @above / @-2
A message matches when the expected text is a substring of it. Expected notes are
checked when written; notes nobody expects are not errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from palimpsest.ir.diagnostics import DiagnosticError, FileLineColLoc, file_location

_EXPECTED = re.compile(
    r"expected-(error|warning|note|remark)\s*(@[+-]?\d+|@above|@below)?\s*\{\{(.*?)\}\}")


@dataclass
class Expectation:
    severity: str
    line: int       # 1-based line of the whole file the diagnostic must point at
    message: str
    written_at: int
    matched: bool = False


def collect_expectations(text: str, line_offset: int = 0) -> list[Expectation]:
    lines = text.split("\n")
    found = []
    for index, line in enumerate(lines):
        for match in _EXPECTED.finditer(line):
            severity, where, message = match.groups()
            here = index + 1 + line_offset
            if where is None:
                target = here
            elif where == "@above":
                target = _nearest_code_line(lines, index, -1) + line_offset
            elif where == "@below":
                target = _nearest_code_line(lines, index, +1) + line_offset
            else:
                target = here + int(where[1:])
            found.append(Expectation(severity, target, message, here))
    return found


def _nearest_code_line(lines, index, step) -> int:
    position = index + step
    while 0 <= position < len(lines):
        stripped = lines[position].strip()
        if stripped and "expected-" not in stripped:
            return position + 1
        position += step
    return index + 1


def check_diagnostics(expectations: list[Expectation], produced: list[DiagnosticError],
                      filename: str) -> list[str]:
    """Problems (as `file:line: error: ...` lines); empty when everything matched."""
    problems = []
    for error in produced:
        entries = [("error", error.message, error.location)] + [
            ("note", message, loc) for message, loc in error.notes]
        for severity, message, loc in entries:
            position = file_location(loc)
            line = position.line if position is not None else None
            match = next((e for e in expectations if not e.matched and e.severity == severity
                          and e.line == line and e.message in message), None)
            if match is not None:
                match.matched = True
            elif severity != "note":
                where = loc.describe() if loc is not None else filename
                problems.append(f"{where}: error: unexpected {severity}: {message}")
    for expectation in expectations:
        if not expectation.matched:
            problems.append(f"{filename}:{expectation.written_at}: error: expected "
                            f"{expectation.severity} \"{expectation.message}\" was not produced "
                            f"at line {expectation.line}")
    return problems


__all__ = ["Expectation", "collect_expectations", "check_diagnostics", "FileLineColLoc"]
