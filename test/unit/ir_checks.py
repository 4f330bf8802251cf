"""A check the tests share on IR: printed text parses back to the same IR (compared
structurally, ignoring SSA names), and printing that prints the same text."""

from __future__ import annotations

from palimpsest.ir.compare import first_difference
from palimpsest.ir.parser import parse
from palimpsest.ir.printer import print_ir
from palimpsest.ir.verifier import verify


def reparsed(module, filename: str = "test.pal"):
    """`module` printed and parsed back as `filename`, verified, checked to be the same IR
    and to print the same text; returns the parsed copy."""
    text = print_ir(module)
    again = parse(text, filename)
    verify(again)
    difference = first_difference(module, again)
    assert difference is None, difference
    assert print_ir(again) == text
    return again
