"""Dialects: one module each. `load_all()` makes every dialect the tools know available;
each is imported the first time one of its ops or types is used (a file that uses only
`func` and `test` never imports the graph dialect or numpy-backed code)."""

from __future__ import annotations

import importlib

DIALECT_MODULES = ("builtin", "func", "test", "graph", "buffer", "memory", "kernel")
TYPE_KEYWORDS = {"buffer": "buffer"}  # parametric type keyword -> dialect module


def _loader(module: str):
    return lambda: importlib.import_module(f"palimpsest.dialects.{module}")


def load_all(eager: bool = False) -> None:
    from palimpsest.ir.opdef import register_dialect_loader
    from palimpsest.ir.types import register_type_loader

    for name in DIALECT_MODULES:
        if eager:
            importlib.import_module(f"palimpsest.dialects.{name}")
        else:
            register_dialect_loader(name, _loader(name))
    for keyword, module in TYPE_KEYWORDS.items():
        register_type_loader(keyword, _loader(module))
    importlib.import_module("palimpsest.dialects.builtin")  # the implicit module
