"""Rewrite patterns, declarative matchers and the PatternRewriter: the dialect-agnostic
half of pattern rewriting (MLIR's PatternMatch). Dialects declare their patterns with
these; the greedy driver that applies them lives in passes/rewrite.py.

A pattern is an object with a `root` op name (None: any op), a `benefit`, and
`match_and_rewrite(op, rewriter) -> bool`. It returns True exactly when it changed the
IR, and it changes the IR only through the rewriter, so the driver learns what to look
at again:

    class RemoveIdentity(RewritePattern):
        root = "graph.identity"
        def match_and_rewrite(self, op, rewriter):
            if op.operands[0].type != op.results[0].type:
                return False
            rewriter.replace_op(op, [op.operands[0]])
            return True

Small rules are easier as declarative table entries (tinygrad's PatternMatcher): a
matcher `M(name, *operand matchers)` and a function of the bound names that returns the
replacement (a Value, a list of Values, a new op, True when it rewrote in place, or None
when it declines):

    TABLE = rules(
        (M("graph.transpose", M("graph.transpose", bind="inner"), bind="outer"),
         fold_transposes),                  # fold_transposes(rewriter, outer, inner)
        (M("graph.identity", V("x")), lambda rewriter, op, x: x),
    )
"""

from __future__ import annotations

from typing import Callable

from palimpsest.ir.core import Operation, OpResult, Value

# ---------------------------------------------------------------------------
# Patterns


class RewritePattern:
    """Base of patterns. Subclasses set `root` (an op name, or None for any op) and
    implement `match_and_rewrite`. Higher `benefit` is tried first."""

    root: str | None = None
    benefit: int = 1

    @property
    def label(self) -> str:
        return getattr(self, "_label", None) or type(self).__name__

    def match_and_rewrite(self, op: Operation, rewriter: "PatternRewriter") -> bool:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<pattern {self.label} on {self.root or '*'}>"


class FunctionPattern(RewritePattern):
    """A pattern made of a plain function `fn(op, rewriter) -> bool`."""

    def __init__(self, root: str | None, fn: Callable, benefit: int = 1,
                 label: str | None = None):
        self.root = root
        self.fn = fn
        self.benefit = benefit
        self._label = label or getattr(fn, "__name__", None)

    def match_and_rewrite(self, op, rewriter) -> bool:
        return bool(self.fn(op, rewriter))


def pattern(root: str | None, benefit: int = 1):
    """Decorator: `@pattern("graph.identity") def fold(op, rewriter) -> bool`."""
    def wrap(fn):
        return FunctionPattern(root, fn, benefit)
    return wrap


# ---------------------------------------------------------------------------
# Declarative matchers


class V:
    """Matches any value (optionally only when `where(value)`); binds it to `bind`."""

    def __init__(self, bind: str | None = None, where: Callable[[Value], bool] | None = None):
        self.bind = bind
        self.where = where

    def match_value(self, value: Value, bindings: dict) -> bool:
        if self.where is not None and not self.where(value):
            return False
        return _bind(bindings, self.bind, value)

    def __repr__(self) -> str:
        return f"V({self.bind or ''})"


class M:
    """Matches an op named `name` (a string, a tuple of names, or None for any op)
    whose operands match `operands` (matchers, `V`s, or None for "anything"; a trailing
    `...` allows more operands; leaving all out does not look at the operands).
    Binds the op to `bind`. In an operand position the operand must be a result of such
    an op. `where(op)` adds a condition; `one_use` requires the op's results to have
    exactly one use between them (so a rewrite may absorb the op)."""

    def __init__(self, name: str | tuple | None = None, *operands, bind: str | None = None,
                 where: Callable[[Operation], bool] | None = None, one_use: bool = False):
        self.names = (name,) if isinstance(name, str) else (tuple(name) if name else None)
        self.open = bool(operands) and operands[-1] is Ellipsis
        self.operands = tuple(operands[:-1] if self.open else operands) if operands else None
        self.bind = bind
        self.where = where
        self.one_use = one_use

    @property
    def root(self) -> str | None:
        return self.names[0] if self.names is not None and len(self.names) == 1 else None

    def match_value(self, value: Value, bindings: dict) -> bool:
        return isinstance(value, OpResult) and self.match_op(value.op, bindings)

    def match_op(self, op: Operation, bindings: dict) -> bool:
        if self.names is not None and op.name not in self.names:
            return False
        if self.one_use and sum(len(r.uses) for r in op.results) != 1:
            return False
        if self.operands is not None:
            count = len(self.operands)
            if len(op.operands) < count or (not self.open and len(op.operands) != count):
                return False
            for matcher, value in zip(self.operands, op.operands):
                if matcher is not None and not matcher.match_value(value, bindings):
                    return False
        if self.where is not None and not self.where(op):
            return False
        return _bind(bindings, self.bind, op)

    def __repr__(self) -> str:
        return f"M({self.names}, bind={self.bind})"


def _bind(bindings: dict, name: str | None, item) -> bool:
    if name is None:
        return True
    if name in bindings:  # a name bound twice must be the same value/op
        return bindings[name] is item
    bindings[name] = item
    return True


class Rule(RewritePattern):
    """One entry of a declarative table: a matcher and a rewrite function called as
    `rewrite(rewriter, **bindings)` (the root op is bound as `op` unless the matcher
    names it). The function returns:

    - None or False: no match (it must not have changed anything);
    - a Value, or a list of Values (None for results without uses): replaces the root;
    - an Operation: inserted before the root (unless already inserted), replaces it;
    - True: it rewrote through the rewriter itself.

    Build new ops only once the rule has decided to fire: an op built and then dropped
    is simply never inserted; one inserted and then declined is left to dead-code
    erasure."""

    def __init__(self, matcher: M, rewrite: Callable, benefit: int = 1,
                 label: str | None = None):
        self.matcher = matcher
        self.rewrite = rewrite
        self.root = matcher.root
        self.benefit = benefit
        self._label = label or getattr(rewrite, "__name__", None)
        if self._label == "<lambda>":
            self._label = f"rule on {self.root or '*'}"

    def match_and_rewrite(self, op, rewriter) -> bool:
        bindings: dict = {}
        if not self.matcher.match_op(op, bindings):
            return False
        if self.matcher.bind is None:
            bindings["op"] = op
        result = self.rewrite(rewriter, **bindings)
        if result is None or result is False:
            return False
        if result is True:
            return True
        if isinstance(result, Operation):
            if result.parent is None:
                rewriter.insert(result)
            result = result.results
        elif isinstance(result, Value):
            result = [result]
        rewriter.replace_op(op, list(result))
        return True


def rules(*entries, benefit: int = 1) -> list:
    """A table of (matcher, rewrite) or (matcher, rewrite, benefit) entries as Rules."""
    table = []
    for entry in entries:
        matcher, rewrite, *rest = entry
        table.append(Rule(matcher, rewrite, rest[0] if rest else benefit))
    return table


# ---------------------------------------------------------------------------
# The rewriter


class RewriteListener:
    """What a driver hears from a PatternRewriter."""

    def notify_op_inserted(self, op: Operation) -> None: ...

    def notify_op_modified(self, op: Operation) -> None: ...

    def notify_op_replaced(self, op: Operation, values: list) -> None: ...

    def notify_op_erased(self, op: Operation) -> None: ...

    def notify_value_dropped(self, value: Value) -> None:
        """`value` lost a use (its defining op may now be dead)."""


class PatternRewriter:
    """Edits the IR on behalf of a pattern and notifies the listener (the driver).
    New ops go before the op being rewritten (the root) unless the insertion point is
    moved; they get the root's location when they have none (so diagnostics about them
    point at the source of the op they came from)."""

    def __init__(self, listener: RewriteListener | None = None):
        self.listener = listener or RewriteListener()
        self.root: Operation | None = None
        self.block = None
        self.before: Operation | None = None
        self._keys: set | None = None
        self._key_scope: Operation | None = None

    # -- insertion point -------------------------------------------------------
    def set_root(self, op: Operation) -> None:
        self.root = op
        self.set_insertion_point_before(op)

    def set_insertion_point_before(self, op: Operation) -> None:
        self.block, self.before = op.parent, op

    def set_insertion_point_after(self, op: Operation) -> None:
        self.block, self.before = op.parent, op.next

    def set_insertion_point_to_end(self, block) -> None:
        self.block, self.before = block, None

    # -- creating ----------------------------------------------------------------
    def insert(self, op: Operation) -> Operation:
        if self.block is None:
            raise ValueError("the rewriter has no insertion point")
        if op.location is None and op.source_loc is None and self.root is not None:
            op.location, op.source_loc = self.root.location, self.root.source_loc
        if self.before is None:
            self.block.append(op)
        else:
            self.block.insert_before(self.before, op)
        self.listener.notify_op_inserted(op)
        return op

    def create(self, op_class, operands=(), result_types=(), properties=None,
               attributes=None, regions=(), successors=(), result_names=None) -> Operation:
        op = op_class(operands, result_types, properties, attributes, regions, successors,
                      None, result_names)
        return self.insert(op)

    # -- replacing and erasing ---------------------------------------------------
    def replace_op(self, op: Operation, values) -> None:
        """Replace each result of `op` by the value at its position (None only for a
        result without uses), then erase `op`. Types must match exactly."""
        if isinstance(values, Value):
            values = [values]
        values = list(values)
        if len(values) != len(op.results):
            raise ValueError(f"'{op.name}' has {len(op.results)} results, got "
                             f"{len(values)} replacements")
        for result, value in zip(op.results, values):
            if value is None:
                if result.uses:
                    raise ValueError(f"result #{result.index} of '{op.name}' is used and "
                                     f"has no replacement")
            elif value is result:
                raise ValueError(f"result #{result.index} of '{op.name}' cannot replace itself")
            elif value.type != result.type:
                raise ValueError(f"replacing result #{result.index} of '{op.name}' of type "
                                 f"{result.type} by a value of type {value.type}")
        self.listener.notify_op_replaced(op, values)
        for result, value in zip(op.results, values):
            if value is not None:
                if value.name_hint is None:  # keep the printed name, as xDSL does
                    value.name_hint = result.name_hint
                result.replace_all_uses_with(value)
        self.erase_op(op)

    def replace_op_with(self, op: Operation, new_op: Operation) -> Operation:
        """Insert `new_op` (if it is not in a block yet) and replace `op` by its results."""
        if new_op.parent is None:
            self.insert(new_op)
        self.replace_op(op, new_op.results)
        return new_op

    def erase_op(self, op: Operation) -> None:
        self.listener.notify_op_erased(op)
        operands = [v for nested in op.walk() for v in nested.operands
                    if not (isinstance(v, OpResult) and op.is_ancestor_of(v.op))]
        op.erase()
        for value in operands:
            self.listener.notify_value_dropped(value)

    def replace_all_uses_with(self, old: Value, new: Value) -> None:
        if old is new:
            return
        users = old.users()
        old.replace_all_uses_with(new)
        for user in users:
            self.listener.notify_op_modified(user)
        self.listener.notify_value_dropped(old)

    # -- modifying in place --------------------------------------------------------
    def set_operand(self, op: Operation, index: int, value: Value) -> None:
        old = op.operands[index]
        op.set_operand(index, value)
        self.listener.notify_op_modified(op)
        self.listener.notify_value_dropped(old)

    def set_operands(self, op: Operation, values) -> None:
        old = list(op.operands)
        op.set_operands(values)
        self.listener.notify_op_modified(op)
        for value in old:
            self.listener.notify_value_dropped(value)

    def set_property(self, op: Operation, name: str, attr) -> None:
        """Set (or, with None, remove) a property."""
        if attr is None:
            op.properties.pop(name, None)
        else:
            op.properties[name] = attr
        self.listener.notify_op_modified(op)

    def notify_modified(self, op: Operation) -> None:
        """Tell the driver that `op` was changed in place by other means."""
        self.listener.notify_op_modified(op)

    # -- resources -----------------------------------------------------------------
    def unique_resource_key(self, hint: str) -> str:
        """A `dense_resource` key no blob of the enclosing top-level op uses yet."""
        scope = self.root
        while scope is not None and scope.parent_op is not None:
            scope = scope.parent_op
        if self._keys is None or scope is not self._key_scope:
            from palimpsest.ir.resources import collect_blobs

            self._keys = set(collect_blobs(scope).keys()) if scope is not None else set()
            self._key_scope = scope
        from palimpsest.ir.resources import blob_key_base, unique_name

        return unique_name(blob_key_base(hint), self._keys)


__all__ = [
    "FunctionPattern", "M", "PatternRewriter", "RewriteListener", "RewritePattern", "Rule",
    "V", "pattern", "rules",
]
