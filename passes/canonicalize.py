"""`canonicalize`: apply every op's canonicalization patterns greedily, then DCE.

An op class contributes patterns through `canonicalization_patterns`: a class attribute
holding a list (or tuple) of patterns, or a classmethod returning one. A dialect package
may keep its patterns in a `canonicalize` submodule that attaches them to its op classes
(e.g. dialects/graph/canonicalize.py); the pass imports such modules before collecting.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from palimpsest.ir.core import Operation
from palimpsest.ir.diagnostics import DiagnosticError
from palimpsest.ir.opdef import registered_ops
from palimpsest.passes.dce import eliminate_dead_code
from palimpsest.passes.pass_manager import ModulePass, register_pass
from palimpsest.passes.rewrite import GreedyRewriteDriver, RewriteStats


def load_dialect_patterns() -> None:
    """Import `palimpsest.dialects.<d>.canonicalize` for every dialect package that has one."""
    from palimpsest import dialects

    for name in getattr(dialects, "DIALECT_MODULES", ()):
        module = f"palimpsest.dialects.{name}"
        try:
            package = importlib.import_module(module)
        except ImportError:
            continue
        if not hasattr(package, "__path__"):  # a plain module, not a package
            continue
        try:
            importlib.import_module(f"{module}.canonicalize")
        except ModuleNotFoundError as error:
            if error.name != f"{module}.canonicalize":
                raise


def collect_canonicalization_patterns() -> list:
    """The canonicalization patterns of every registered op class, each pattern once."""
    load_dialect_patterns()
    patterns, seen = [], set()
    for _, cls in sorted(registered_ops().items()):
        found = getattr(cls, "canonicalization_patterns", None)
        if found is None:
            continue
        if callable(found):
            found = found()
        for item in found or ():
            if id(item) not in seen:
                seen.add(id(item))
                patterns.append(item)
    return patterns


def canonicalize(root: Operation, max_iterations: int = 10, patterns=None) -> RewriteStats:
    """Run the canonicalization patterns under `root` to a fixpoint (or the iteration
    cap), then erase what is dead. Returns the driver's statistics."""
    if patterns is None:
        patterns = collect_canonicalization_patterns()
    driver = GreedyRewriteDriver(patterns, max_iterations)
    driver.run(root)
    driver.stats.erased += eliminate_dead_code(root)
    return driver.stats


@register_pass
@dataclass(frozen=True)
class Canonicalize(ModulePass):
    name = "canonicalize"
    summary = "simplify ops with their canonicalization patterns (greedily) and erase dead ones"

    max_iterations: int = 10
    test_convergence: bool = False  # an error when no fixpoint is reached

    def apply(self, module: Operation) -> None:
        if self.max_iterations < 1:
            raise DiagnosticError(f"canonicalize: max-iterations must be at least 1, got "
                                  f"{self.max_iterations}", None)
        stats = canonicalize(module, self.max_iterations)
        if self.test_convergence and not stats.converged:
            raise DiagnosticError(f"canonicalize did not converge: stopped at the "
                                  f"{stats.stop_reason} after {stats.iterations} iterations",
                                  module.loc)
