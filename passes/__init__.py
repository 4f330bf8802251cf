"""Passes: one module each, registered by name. `load_all()` imports them all."""

from __future__ import annotations

import importlib

PASS_MODULES = ("dce", "cse", "infer_shapes", "canonicalize", "fold_constants", "bufferize",
                "insert_deallocs", "liveness", "plan_memory")


def load_all() -> None:
    for name in PASS_MODULES:
        importlib.import_module(f"palimpsest.passes.{name}")
