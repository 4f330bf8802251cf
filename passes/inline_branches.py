"""`inline-static-branches`: a `graph.if` in a function's body whose condition is known
at compile time is replaced by the ops of the branch it takes; the other branch goes.

A condition is known when it folds from constants: the shape arithmetic infer-shapes
folds once the input shapes are static (Shape → Gather → Equal), and the small
integer/bool ops after it, evaluated with the reference kernels. Exports branch on
both: PyTorch's scripted Silero VAD branches on its `sr` input and then six more times
on shapes, so a session that knows the shapes and `sr` (backends/numpy/session.py:
such inputs are its guards) inlines all seven and plans the model as one function, with
no control-flow segments. The inlined ops keep reading the values they read from the
enclosing scope; the If's results become the branch's yields.

Only function bodies are walked, never the ops inside a region: a branch not taken may
not fit the shapes (Silero's 8 kHz branch squeezes a dim that is 2 at 16 kHz), so its
ops are neither inferred nor evaluated. After an If is inlined its branch's Ifs are in
the body, and the walk repeats until no condition is known.
"""

from __future__ import annotations

from palimpsest.ir.core import Operation
from palimpsest.ir.types import TensorType
from palimpsest.passes.infer_shapes import infer_shapes
from palimpsest.passes.pass_manager import ModulePass, register_pass

# Condition slices are scalar logic: values larger than this are not evaluated.
MAX_EVALUATED_ELEMENTS = 64
# A guard is an argument of at most this many elements (its value joins a plan's key).
MAX_GUARD_ELEMENTS = 8


def inline_static_branches(func: Operation, known: dict | None = None) -> int:
    """Inline every `graph.if` of `func`'s body whose condition is known; `known` maps
    block arguments of `func` to arrays that stand for them (as constants) first. The
    number of Ifs inlined."""
    block = func.regions[0].blocks[0]
    for arg, array in (known or {}).items():
        if arg.has_uses():
            arg.replace_all_uses_with(_constant_before(block, block.first, array, arg.type))
    inlined = 0
    while True:
        infer_shapes(func, regions=False)
        memo: dict = {}
        taken = []
        for op in block.ops:
            if op.name == "graph.if":
                condition = _evaluate(op.operands[0], memo)
                if condition is not None and condition.size == 1:
                    taken.append((op, bool(condition.reshape(-1)[0])))
        if not taken:
            return inlined
        for op, condition in taken:
            _inline(op, 0 if condition else 1)
        inlined += len(taken)


def _constant_before(block, anchor, array, type_: TensorType):
    import numpy as np

    from palimpsest.dialects.graph.evaluate import dense_attr
    from palimpsest.dialects.graph.ops_constant import ConstantOp

    constant = ConstantOp([], [type_], {"value": dense_attr(np.asarray(array), type_)})
    block.insert_before(anchor, constant)
    return constant.results[0]


def _evaluate(value, memo: dict):
    """`value` as an array when it follows from constants through small ops of the body
    with reference kernels, else None."""
    import numpy as np

    if value in memo:
        return memo[value]
    memo[value] = None   # (a cycle cannot occur in a block in order; this caps the walk)
    op = getattr(value, "op", None)
    if op is None or op.regions or not isinstance(value.type, TensorType) \
            or not value.type.has_static_shape \
            or value.type.num_elements() > MAX_EVALUATED_ELEMENTS:
        return None
    if op.name == "graph.constant":
        try:
            found = op.properties["value"].to_numpy()
        except (OSError, ValueError, KeyError):
            return None
    else:
        from palimpsest.dialects.graph.evaluate import evaluate_op, has_kernel
        from palimpsest.ir.diagnostics import DiagnosticError

        if not op.name.startswith("graph.") or not has_kernel(op.name):
            return None
        inputs = [_evaluate(v, memo) for v in op.operands]
        if any(i is None for i in inputs):
            return None
        try:
            found = np.asarray(evaluate_op(op, inputs)[op.results.index(value)])
        except DiagnosticError:
            return None
    memo[value] = found
    return found


def _inline(op: Operation, index: int) -> None:
    """Move region `index`'s ops (but its graph.yield) before `op`; `op`'s results become
    the yielded values; `op` goes, with the other branch (and its condition, a constant
    now, when nothing else reads it)."""
    block = op.parent
    region = op.regions[index].blocks[0]
    yielded = list(region.terminator.operands)
    for inner in list(region.ops):
        if inner is region.terminator:
            break
        inner.detach()
        block.insert_before(op, inner)
    for result, value in zip(op.results, yielded):
        result.replace_all_uses_with(value)
    condition = getattr(op.operands[0], "op", None)
    op.erase()
    if condition is not None and condition.name == "graph.constant" \
            and not condition.results[0].has_uses():
        condition.erase()


@register_pass
class InlineStaticBranches(ModulePass):
    name = "inline-static-branches"
    summary = "inline each graph.if of a function body whose condition folds to a constant"

    def apply(self, module: Operation) -> None:
        for op in list(module.walk()):
            if op.name == "func.func" and op.regions and op.regions[0].blocks:
                inline_static_branches(op)


def branch_guards(func: Operation, ifs=None) -> list:
    """Indices of `func`'s arguments that a condition of a `graph.if` of its body (of
    `ifs`, when given: palimpsest-opt names the inputs that decide one If) is computed
    from through small values only (at most MAX_EVALUATED_ELEMENTS elements each, as
    `_evaluate` reads; the argument itself at most MAX_GUARD_ELEMENTS): a session that
    knows their values (its guards: Silero VAD's `sr`, DeepFilterNet's `atten_lim_db`;
    palimpsest-plan's `--value`) can inline that If. The walk stops at a
    large value: a condition on a model's output (openWakeWord's verifier) has none."""
    block = func.regions[0].blocks[0]
    args = list(block.args)
    found = set()
    seen = set()
    stack = [op.operands[0] for op in (block.ops if ifs is None else ifs)
             if op.name == "graph.if" and op.operands]
    while stack:
        value = stack.pop()
        if value in seen:
            continue
        seen.add(value)
        t = value.type
        if not isinstance(t, TensorType) or not t.has_static_shape \
                or t.num_elements() > MAX_EVALUATED_ELEMENTS:
            continue
        op = getattr(value, "op", None)
        if op is None:
            if value in args and t.num_elements() <= MAX_GUARD_ELEMENTS:
                found.add(args.index(value))
        elif not op.regions:
            stack.extend(op.operands)
    return sorted(found)


# The result a speculated function appends: the If's condition (backends/numpy/
# speculation.py checks it against the branch inlined)
CONDITION_RESULT = "palimpsest.if_condition"


def speculated_if(func: Operation):
    """The `graph.if` of `func`'s body a run can speculate on: the body's only op with
    regions, its condition computed in the body (not a constant, not an argument: an If
    an argument decides is a guard's, inlined at its values), one element. Else None."""
    block = func.regions[0].blocks[0]
    found = [op for op in block.ops if op.regions]
    if len(found) != 1 or found[0].name != "graph.if":
        return None
    op = found[0]
    condition = op.operands[0]
    owner = getattr(condition, "op", None)
    if owner is None or owner.name == "graph.constant" \
            or not isinstance(condition.type, TensorType) \
            or not condition.type.has_static_shape or condition.type.num_elements() != 1:
        return None
    return op


def inline_speculated(func: Operation, index: int) -> bool:
    """`func` with its speculated If (`speculated_if`) replaced by branch `index`'s ops
    and the If's condition appended to its results (named CONDITION_RESULT): one
    straight-line function whose run is right when the condition picks that branch.
    False (func unchanged) where there is no such If or the branch holds region ops."""
    from palimpsest.dialects.func import ReturnOp
    from palimpsest.ir import attributes as A
    from palimpsest.ir.types import FunctionType

    op = speculated_if(func)
    if op is None or any(inner.regions for inner in op.regions[index].blocks[0].ops):
        return False
    block = func.regions[0].blocks[0]
    ret = block.terminator
    condition = op.operands[0]
    block.insert_before(ret, ReturnOp(list(ret.operands) + [condition], []))
    ret.erase()
    fn_type = func.type
    func.properties["function_type"] = A.TypeAttr(FunctionType(
        fn_type.inputs, tuple(fn_type.results) + (condition.type,)))
    names = func.properties.get("res_attrs")
    entries = list(names.value) if isinstance(names, A.ArrayAttr) else []
    entries += [A.DictionaryAttr.of({})] * (len(fn_type.results) - len(entries))
    entries.append(A.DictionaryAttr.of({"palimpsest.name": A.StringAttr(CONDITION_RESULT)}))
    func.properties["res_attrs"] = A.ArrayAttr(tuple(entries))
    _inline(op, index)
    return True
