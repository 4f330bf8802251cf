"""`canonicalize`: apply every op's canonicalization patterns greedily, then DCE.

An op class contributes patterns through `canonicalization_patterns`: a class attribute
holding a list (or tuple) of patterns, or a classmethod returning one. A dialect package
may keep its patterns in a `canonicalize` submodule that attaches them to its op classes
(e.g. dialects/graph/canonicalize.py); the pass imports those of the dialects whose
ops occur in the IR before collecting.
"""

from __future__ import annotations

import importlib
import importlib.util

from palimpsest.ir.core import Operation
from palimpsest.ir.diagnostics import DiagnosticError
from palimpsest.ir.opdef import lookup_op, registered_ops
from palimpsest.passes.dce import eliminate_dead_code
from palimpsest.passes.pass_manager import ModulePass, option, register_pass
from palimpsest.passes.rewrite import GreedyRewriteDriver, RewriteStats


def load_dialect_patterns(dialects=None) -> None:
    """Import `palimpsest.dialects.<d>.canonicalize` for each dialect package (of
    `dialects`, default all the tools know) that has one."""
    from palimpsest import dialects as package

    for name in (dialects if dialects is not None else getattr(package, "DIALECT_MODULES", ())):
        module = f"palimpsest.dialects.{name}"
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            continue
        if found is None or found.submodule_search_locations is None:  # not a package
            continue
        try:
            importlib.import_module(f"{module}.canonicalize")
        except ModuleNotFoundError as error:
            if error.name != f"{module}.canonicalize":
                raise


def collect_canonicalization_patterns(root: Operation | None = None) -> list:
    """The canonicalization patterns of the op classes, each pattern once: of every
    registered op, or, given `root`, of the ops that occur under it (dialects stay
    unloaded until used, so patterns of a dialect absent from the IR cannot matter;
    MLIR likewise collects from the loaded dialects only)."""
    if root is None:
        load_dialect_patterns()
        classes = [cls for _, cls in sorted(registered_ops().items())]
    else:
        names = sorted({op.name for op in root.walk()})
        load_dialect_patterns(sorted({name.split(".", 1)[0] for name in names}))
        classes = [cls for cls in map(lookup_op, names) if cls is not None]
    patterns, seen = [], set()
    for cls in classes:
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
        patterns = collect_canonicalization_patterns(root)
    driver = GreedyRewriteDriver(patterns, max_iterations)
    driver.run(root)
    driver.stats.erased += eliminate_dead_code(root)
    return driver.stats


@register_pass
class Canonicalize(ModulePass):
    name = "canonicalize"
    summary = "simplify ops with their canonicalization patterns (greedily) and erase dead ones"

    max_iterations: int = option(10, minimum=1)
    test_convergence: bool = False  # an error when no fixpoint is reached

    def apply(self, module: Operation) -> None:
        stats = canonicalize(module, self.max_iterations)
        if self.test_convergence and not stats.converged:
            raise DiagnosticError(f"canonicalize did not converge: stopped at the "
                                  f"{stats.stop_reason} after {stats.iterations} iterations",
                                  module.loc)
