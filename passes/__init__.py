"""Passes: one module each, registered by name when imported. `PASSES` maps each
pass name to its module, so a pipeline imports only the passes it names."""

from __future__ import annotations

import importlib

PASSES = {
    "dce": "dce",
    "cse": "cse",
    "infer-shapes": "infer_shapes",
    "canonicalize": "canonicalize",
    "fold-constants": "fold_constants",
    "inline-static-branches": "inline_branches",
    "bufferize": "bufferize",
    "insert-deallocs": "insert_deallocs",
    "lower-to-kernels": "lower_to_kernels",
    "prepack-weights": "prepack_weights",
    "test-print-liveness": "liveness",
    "plan-memory": "plan_memory",
    "schedule-for-memory": "schedule_for_memory",
}
PASS_MODULES = tuple(dict.fromkeys(PASSES.values()))


def load_pass(name: str) -> None:
    module = PASSES.get(name)
    if module is not None:
        importlib.import_module(f"palimpsest.passes.{module}")


def load_all() -> None:
    for module in PASS_MODULES:
        importlib.import_module(f"palimpsest.passes.{module}")
