"""The greedy pattern rewrite driver (MLIR's GreedyPatternRewriteDriver).

`apply_patterns_greedily(root, patterns)` runs the patterns on every op nested under
`root` until nothing changes (a fixpoint) or the iteration cap, erasing ops that became
trivially dead on the way. It returns True at a fixpoint; `GreedyRewriteDriver` also
reports how many rewrites each pattern made and why it stopped.

Patterns, the declarative matchers (`M`, `V`, `rules`) and the `PatternRewriter` are
declared in ir/patterns.py (dialects declare patterns, and dialects do not import
passes); they are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from palimpsest.ir.core import Operation, OpResult
from palimpsest.ir.patterns import (  # noqa: F401  (re-exported)
    FunctionPattern, M, PatternRewriter, RewriteListener, RewritePattern, Rule, V, pattern,
    rules,
)
from palimpsest.passes.dce import is_trivially_dead

# ---------------------------------------------------------------------------
# The greedy driver


class PatternSet:
    """Patterns indexed by root op name, each list ordered by benefit (stable)."""

    def __init__(self, patterns: Iterable[RewritePattern]):
        self.patterns = list(patterns)
        self._by_name: dict = {}
        self._generic = [p for p in self.patterns if p.root is None]

    def for_op(self, name: str) -> list:
        found = self._by_name.get(name)
        if found is None:
            specific = [p for p in self.patterns if p.root == name]
            found = sorted(specific + self._generic, key=lambda p: -p.benefit)
            self._by_name[name] = found
        return found


@dataclass
class RewriteStats:
    converged: bool = False
    stop_reason: str = ""        # "fixpoint", "iteration limit" or "rewrite limit"
    iterations: int = 0
    rewrites: int = 0            # successful pattern applications
    erased: int = 0              # ops erased as trivially dead by the driver
    by_pattern: dict = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.rewrites or self.erased)


class _Worklist:
    """A stack of ops with O(1) membership and removal (removed entries are skipped)."""

    def __init__(self):
        self.stack: list = []
        self.members: dict = {}

    def push(self, op: Operation) -> None:
        if op not in self.members:
            self.members[op] = None
            self.stack.append(op)

    def remove(self, op: Operation) -> None:
        self.members.pop(op, None)

    def pop(self) -> Operation | None:
        while self.stack:
            op = self.stack.pop()
            if op in self.members:
                del self.members[op]
                return op
        return None


class GreedyRewriteDriver(RewriteListener):
    """Applies patterns to every op nested under a root until a fixpoint.

    Each iteration puts every op under the root on a worklist (in program order when
    `top_down`, else reversed) and processes it: an op that is trivially dead (unused,
    no effects) is erased, otherwise the first pattern for it that succeeds is applied.
    A change puts the affected ops back on the worklist: new ops, the users of replaced
    or modified ops, and the defining ops of values that lost a use (they may now be
    dead). An iteration that changes nothing ends the run at a fixpoint; otherwise the
    next iteration starts, up to `max_iterations`. `max_rewrites` (default: 64 per op,
    at least 10000) stops patterns that undo each other inside one iteration."""

    def __init__(self, patterns, max_iterations: int = 10, *, max_rewrites: int | None = None,
                 top_down: bool = True, erase_dead: bool = True):
        if max_iterations < 1:
            raise ValueError(f"max_iterations must be at least 1, got {max_iterations}")
        self.patterns = patterns if isinstance(patterns, PatternSet) else PatternSet(patterns)
        self.max_iterations = max_iterations
        self.max_rewrites = max_rewrites
        self.top_down = top_down
        self.erase_dead = erase_dead
        self.stats = RewriteStats()
        self.rewriter = PatternRewriter(self)
        self._worklist = _Worklist()
        self._root: Operation | None = None
        self._changed = False

    # -- listener ------------------------------------------------------------------
    def _add(self, op: Operation | None) -> None:
        if op is not None and op is not self._root and op.parent is not None:
            self._worklist.push(op)

    def notify_op_inserted(self, op):
        self._changed = True
        for nested in op.walk():
            self._add(nested)

    def notify_op_modified(self, op):
        self._changed = True
        self._add(op)
        for result in op.results:
            for user in result.users():
                self._add(user)

    def notify_op_replaced(self, op, values):
        self._changed = True
        for result in op.results:
            for user in result.users():
                self._add(user)

    def notify_op_erased(self, op):
        self._changed = True
        for nested in op.walk():
            self._worklist.remove(nested)

    def notify_value_dropped(self, value):
        if isinstance(value, OpResult) and not value.uses:
            self._add(value.op)

    # -- driving -------------------------------------------------------------------
    def run(self, root: Operation) -> bool:
        """Rewrite under `root`; True when a fixpoint was reached."""
        self._root = root
        stats = self.stats
        budget = self.max_rewrites
        ops = None
        if budget is None:
            ops = list(root.walk(include_self=False))  # (also the first iteration's)
            budget = max(10000, 64 * len(ops))
        while True:
            if stats.iterations == self.max_iterations:
                stats.stop_reason = "iteration limit"
                break
            stats.iterations += 1
            if ops is None:
                ops = list(root.walk(include_self=False))
            for op in (reversed(ops) if self.top_down else ops):
                self._worklist.push(op)
            ops = None
            self._changed = False
            if not self._drain(budget):
                stats.stop_reason = "rewrite limit"
                break
            if not self._changed:
                stats.converged = True
                stats.stop_reason = "fixpoint"
                break
        self._worklist = _Worklist()
        return stats.converged

    def _drain(self, budget: int) -> bool:
        stats, rewriter = self.stats, self.rewriter
        while True:
            op = self._worklist.pop()
            if op is None:
                return True
            if op.parent is None:
                continue
            results = op.results  # (a used first result: alive, no need to ask)
            if self.erase_dead and not (results and results[0].uses) \
                    and is_trivially_dead(op):
                rewriter.set_root(op)
                rewriter.erase_op(op)
                stats.erased += 1
                continue
            for candidate in self.patterns.for_op(op.name):
                rewriter.set_root(op)
                if candidate.match_and_rewrite(op, rewriter):
                    self._changed = True
                    stats.rewrites += 1
                    label = candidate.label
                    stats.by_pattern[label] = stats.by_pattern.get(label, 0) + 1
                    if stats.rewrites >= budget:
                        self._worklist = _Worklist()
                        return False
                    break


def apply_patterns_greedily(root: Operation, patterns, max_iterations: int = 10,
                            **options) -> bool:
    """Apply `patterns` under `root` until a fixpoint (True) or a limit (False).
    Options: `max_rewrites`, `top_down`, `erase_dead` (see GreedyRewriteDriver)."""
    return GreedyRewriteDriver(patterns, max_iterations, **options).run(root)


__all__ = [
    "FunctionPattern", "GreedyRewriteDriver", "M", "PatternRewriter", "PatternSet",
    "RewriteListener", "RewritePattern", "RewriteStats", "Rule", "V",
    "apply_patterns_greedily", "pattern", "rules",
]
