"""Dialects: one module each. `load_all()` registers every dialect the tools know."""

from __future__ import annotations

import importlib

DIALECT_MODULES = ("builtin", "func", "test", "graph", "buffer", "memory")


def load_all() -> None:
    for name in DIALECT_MODULES:
        importlib.import_module(f"palimpsest.dialects.{name}")
