"""Passes: one module each, registered by name. `load_all()` imports them all."""

from __future__ import annotations

import importlib

PASS_MODULES = ("dce", "cse")


def load_all() -> None:
    for name in PASS_MODULES:
        importlib.import_module(f"palimpsest.passes.{name}")
