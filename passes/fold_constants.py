"""`fold-constants`: evaluate graph ops whose operands are all `graph.constant`s with
the numpy reference kernels and replace them by `graph.constant`s.

Only results of static type with at most `max-elements` elements are folded (so a
small constant feeding an expand or constant_of_shape does not become a huge one). A
folded value is a readable `dense<...>` when small, and a `dense_resource<...>` blob
with inline data when large. Ops the reference cannot evaluate (no kernel, unreadable
weights, inputs it rejects, a random dropout) are left for run time to report. The
greedy driver folds chains in one sweep and erases the constants left unused.
"""

from __future__ import annotations


from palimpsest.ir.core import Operation, OpResult
from palimpsest.ir.diagnostics import DiagnosticError
from palimpsest.ir.patterns import RewritePattern
from palimpsest.ir.types import TensorType
from palimpsest.passes.pass_manager import ModulePass, option, register_pass
from palimpsest.passes.rewrite import GreedyRewriteDriver, RewriteStats

DEFAULT_MAX_ELEMENTS = 1 << 20


def _constant_op(value):
    owner = value.op if isinstance(value, OpResult) else None
    return owner if owner is not None and owner.name == "graph.constant" else None


class FoldConstantOperands(RewritePattern):
    """Any graph op (but a constant) whose operands are all constants."""

    root = None

    def __init__(self, max_elements: int = DEFAULT_MAX_ELEMENTS):
        self.max_elements = max_elements

    def foldable(self, op: Operation) -> bool:
        if not op.name.startswith("graph.") or op.name == "graph.constant":
            return False
        if not op.operands or op.regions or not op.results:
            return False
        if any(_constant_op(v) is None for v in op.operands):
            return False
        for result in op.results:
            t = result.type
            if not isinstance(t, TensorType) or not t.has_static_shape:
                return False
            if t.num_elements() > self.max_elements:
                return False
        return True

    def match_and_rewrite(self, op, rewriter) -> bool:
        if not self.foldable(op):
            return False
        from palimpsest.dialects.graph.evaluate import (
            dense_attr, evaluate_op, has_kernel, numpy_dtype,
        )

        if not has_kernel(op.name):
            return False
        dtypes = [numpy_dtype(r.type) for r in op.results]
        if any(d is None for d in dtypes):
            return False
        try:
            inputs = [_constant_op(v).properties["value"].to_numpy() for v in op.operands]
        except (OSError, ValueError, KeyError):
            return False
        try:
            arrays = evaluate_op(op, inputs)
        except DiagnosticError:
            return False
        if len(arrays) != len(op.results):
            return False
        values = []
        for result, array, dtype in zip(op.results, arrays, dtypes):
            array = _exactly(array, result.type, dtype)
            if array is None:
                return False
            values.append(array)
        from palimpsest.dialects.graph.ops_constant import ConstantOp

        replacements = []
        for result, array in zip(op.results, values):
            hint = result.name_hint or op.name.split(".", 1)[1]
            attr = dense_attr(array, result.type, rewriter.unique_resource_key, hint)
            constant = rewriter.insert(ConstantOp([], [result.type], {"value": attr}))
            replacements.append(constant.results[0])
        rewriter.replace_op(op, replacements)
        return True


def _exactly(array, type_: TensorType, dtype):
    """`array` as `type_` (shape and dtype), or None when that would change a value."""
    import numpy as np

    array = np.asarray(array)
    if tuple(array.shape) != tuple(type_.shape):
        return None
    if array.dtype == dtype:
        return array
    try:
        with np.errstate(all="ignore"):
            converted = array.astype(dtype)
    except (TypeError, ValueError):
        return None
    same = converted.astype(array.dtype) == array
    if array.dtype.kind in "fc":
        same |= np.isnan(array) & np.isnan(converted.astype(array.dtype))
    return converted if bool(np.all(same)) else None


def fold_constants(root: Operation, max_elements: int = DEFAULT_MAX_ELEMENTS,
                   max_iterations: int = 10) -> RewriteStats:
    """Fold every graph op under `root` whose operands are constants; statistics."""
    driver = GreedyRewriteDriver([FoldConstantOperands(max_elements)], max_iterations)
    driver.run(root)
    return driver.stats


@register_pass
class FoldConstants(ModulePass):
    name = "fold-constants"
    summary = "evaluate graph ops whose operands are all constants into constants"

    max_elements: int = option(DEFAULT_MAX_ELEMENTS, minimum=0)

    def apply(self, module: Operation) -> None:
        fold_constants(module, self.max_elements)
