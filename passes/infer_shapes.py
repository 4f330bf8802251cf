"""`infer-shapes`: refine the result types of graph ops from their shape rules, fold
the integer shape arithmetic of ONNX exports (Shape → Gather → Concat → Reshape), and
make function result types as precise as what they return.

Known values of integer tensors travel in a side table while walking: a `graph.shape`
of a tensor with `?` dims is a vector with unknown elements, and the gathers, concats,
slices, casts and arithmetic on it keep the elements that are known. A value whose
elements all become known is materialized as a `graph.constant`, so the reshape that
consumes it gets a constant shape operand and a static result.

Bounds: a `?` dim may carry an upper bound (`#bounds<...>`, from the IR or the command
line). Each op's bound rule (dialects/graph/bound_rules.py) gives its results' `?` dims
the bounds that follow from its operands', where the op declares one; an unknown element
of a shape vector that is known to equal a bounded dim counts at that bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from palimpsest.dialects.graph.bound_rules import with_upper
from palimpsest.dialects.graph.ops_base import (
    Args, GraphOp, ShapeError, constant_values, refine_type,
)
from palimpsest.ir import attributes as A
from palimpsest.ir.core import Operation
from palimpsest.ir.types import FunctionType, TensorType, check_dims
from palimpsest.passes.pass_manager import ModulePass, register_pass

MAX_MATERIALIZED_ELEMENTS = 256  # folded results larger than this stay computed


@dataclass
class InferShapesResult:
    refined: int = 0          # result types made more precise
    folded: int = 0           # ops replaced by graph.constant
    erased: int = 0           # ops left unused by folding and erased
    functions: list = field(default_factory=list)  # names of functions retyped
    bounded: int = 0          # result types given (tighter) bounds


class _State:
    """Known values of SSA values while walking: `known` holds int/float elements
    (None where unknown); `symbolic` holds lists where unknown elements may be dim
    tokens; `tokens` names the dynamic dims of each value."""

    def __init__(self):
        self.known: dict = {}
        self.symbolic: dict = {}
        self.tokens: dict = {}
        self.token_bounds: dict = {}  # token -> the bound of the dim it names
        self.foldable: list = []      # ops to replace by constants, once the walk is done

    def known_of(self, value):
        if value not in self.known:
            self.known[value] = constant_values(value)
        return self.known[value]

    def symbolic_of(self, value):
        found = self.symbolic.get(value)
        return found if found is not None else self.known_of(value)

    def tokens_of(self, value):
        """('dim', n, i) for each dynamic dim i of `value` (None for static dims)."""
        if value not in self.tokens:
            shape = getattr(value.type, "shape", None)
            serial = len(self.tokens)
            self.tokens[value] = None if shape is None else [
                ("dim", serial, i) if d is None else None for i, d in enumerate(shape)]
            for token, bound in zip(self.tokens[value] or (), value.type.bounds or ()):
                if token is not None and bound is not None:
                    self.token_bounds[token] = bound
        return self.tokens[value]

    def upper_values_of(self, value):
        """Known values where a token of a bounded dim is that bound (see Args)."""
        values = self.symbolic_of(value)
        if values is None or value not in self.symbolic:
            return values
        return [self.token_bounds.get(v) if v is not None and not isinstance(v, (int, float))
                else v for v in values]

    def has_bounds(self, operands, types) -> bool:
        """Whether an operand has bounded dims, or values holding a bounded dim."""
        for t in types:  # (a loop, not any(): asked of every op visited)
            if getattr(t, "encoding", None) is not None and isinstance(t, TensorType) \
                    and t.bounds is not None:
                return True
        return bool(self.token_bounds) and any(
            v in self.symbolic and any(w in self.token_bounds for w in self.symbolic[v]
                                       if not isinstance(w, (int, float)))
            for v in operands)


class _Lazy:
    """A list-like view that computes one operand's entry on first use."""

    __slots__ = ("operands", "compute", "cache")  # three per op visited

    def __init__(self, operands, compute):
        self.operands = operands
        self.compute = compute
        self.cache: dict = {}

    def __getitem__(self, index):
        if index not in self.cache:
            self.cache[index] = self.compute(self.operands[index])
        return self.cache[index]

    def __len__(self):
        return len(self.operands)


def infer_shapes(root: Operation, fold: bool = True, regions: bool = True) -> InferShapesResult:
    """Refine types under `root` (usually a module) in place; see the module doc.
    With fold=False no constant is created and no op erased (values still propagate);
    with regions=False only the ops of function bodies are visited, not those inside a
    graph op's regions (a branch not taken may not fit the shapes: inline_branches.py)."""
    result = InferShapesResult()
    # One walk in program order suffices: operands are visited before their users,
    # and functions that are called are never retyped.
    returns = _retypable_returns(root)
    state = _State()
    for op in root.walk() if regions else _body_ops(root):
        if not isinstance(op, GraphOp) or op.parent is None or _settled_constant(op):
            continue
        _visit(op, state, returns, fold, result)
    # Folded last to first: a chain of ops whose values are all known (Shape → Gather →
    # Concat) becomes one constant, for its last op, whose inputs are then erased as
    # orphans; folding each op as it was visited made a constant per op that the next
    # fold orphaned. Ops visited later read known values from `state`, not constants.
    for op in reversed(state.foldable):
        if op.parent is not None:
            _materialize(op, state, result)
    for fn, ret in returns.values():
        _retype_function(fn, ret, result)
    return result


def _body_ops(root: Operation):
    """The ops of each function body under `root`, none inside their ops' regions."""
    for fn in root.walk():
        if fn.name == "func.func" and fn.regions and fn.regions[0].blocks:
            yield from list(fn.regions[0].blocks[0].ops)


def _settled_constant(op: GraphOp) -> bool:
    """A graph.constant typed as its value (as the verifier requires): there is nothing
    to infer, and its elements are read lazily, by the ops that use them
    (`_State.known_of`). Models are often half constants, so this halves the visits."""
    return op.name == "graph.constant" and op.results[0].type == getattr(
        op.properties.get("value"), "type", None)


def _retypable_returns(root: Operation) -> dict:
    """{id(func.return): (func.func, func.return)} for functions with one return that
    no func.call references (so their type can change without touching callers)."""
    called = set()
    functions = []
    for op in root.walk():
        if op.name == "func.call":
            callee = op.properties.get("callee")
            if isinstance(callee, A.SymbolRefAttr):
                called.add(callee.root)
        elif op.name == "func.func":
            functions.append(op)
    found = {}
    for fn in functions:
        name = fn.properties["sym_name"].value
        if name in called or not fn.regions or not fn.regions[0].blocks:
            continue
        rets = [op for block in fn.regions[0].blocks for op in block.ops
                if op.name == "func.return"]  # (the ops whose parent op is fn)
        if len(rets) == 1:
            found[id(rets[0])] = (fn, rets[0])
    return found


def _retypable(value, returns) -> bool:
    """Whether every user of `value` accepts a more precise type."""
    for user, _ in value.uses:
        if isinstance(user, GraphOp) or not user.is_registered:
            continue
        if user.name == "func.return" and id(user) in returns:
            continue
        if user.name.startswith("test."):
            continue
        return False
    return True


def _visit(op: GraphOp, state: _State, returns: dict, fold: bool,
           result: InferShapesResult) -> None:
    cls = type(op)
    operands = op.operands
    types = [v.type for v in operands]
    args = Args(cls, types, op.properties, _Lazy(operands, state.known_of), len(op.results),
                _Lazy(operands, state.tokens_of), _Lazy(operands, state.symbolic_of))
    try:
        inferred = cls.rule(args)
    except ShapeError as error:
        raise op.error(str(error)) from None
    if inferred is not None:
        for index, (value, expected) in enumerate(zip(op.results, inferred)):
            try:
                refined = refine_type(value.type, expected)
            except ShapeError:
                raise op.error(f"result #{index} has type '{value.type}' but infer-shapes "
                               f"computed '{expected}'") from None
            problem = check_dims(getattr(refined, "shape", None))
            if problem:
                raise op.error(f"result #{index}: {problem}")
            if refined is not value.type and _retypable(value, returns):  # (a new type)
                value.type = refined
                result.refined += 1
    if state.has_bounds(operands, types):
        _bound(op, state, returns, result)
    result_types = [r.type for r in op.results]
    try:
        folded = cls.fold_values(args, result_types)
        symbolic = None
        # Dim tokens come from `?` dims: with none among the operands and none carried in
        # known values so far, fold_symbols could only repeat fold_values (skipped).
        if (cls.moves_values or "fold_symbols" in vars(cls)) and (
                state.symbolic or not _static(types)):
            values = [state.known_of(v) for v in operands]
            for name in cls.moves_values:
                for i in args.positions(name):
                    values[i] = state.symbolic_of(operands[i])
            symbolic = cls.fold_symbols(
                Args(cls, types, op.properties, values, len(op.results),
                     _Lazy(operands, state.tokens_of)), result_types)
    except ShapeError as error:
        raise op.error(str(error)) from None
    for value, values in zip(op.results, folded or ()):
        if values is not None and _fits(value, values):
            state.known[value] = values
    for value, values in zip(op.results, symbolic or ()):
        if values is not None and _fits(value, values) \
                and any(v is not None and not isinstance(v, (int, float)) for v in values):
            state.symbolic[value] = values
    if fold and folded and op.name != "graph.constant":  # results with known values
        state.foldable.append(op)


def _bound(op: GraphOp, state: _State, returns: dict, result: InferShapesResult) -> None:
    """Bound the `?` dims of `op`'s results by its bound rule (bound_rules.py)."""
    cls = type(op)
    operands = op.operands
    args = Args(cls, [v.type for v in operands], op.properties,
                _Lazy(operands, state.known_of), len(op.results),
                upper_values=_Lazy(operands, state.upper_values_of))
    uppers = cls.bound_rule(args)
    for value, upper in zip(op.results, uppers or ()):
        bounded = with_upper(value.type, upper)
        if bounded != value.type and _retypable(value, returns):
            value.type = bounded
            result.bounded += 1


def _static(types) -> bool:
    for t in types:
        shape = getattr(t, "shape", None)
        if shape is None or None in shape:
            return False
    return True


def _fits(value, values) -> bool:
    return isinstance(value.type, TensorType) and value.type.num_elements() == len(values)


def _materialize(op: GraphOp, state: _State, result: InferShapesResult) -> None:
    from palimpsest.dialects.graph.ops_constant import ConstantOp

    replacements = []
    for value in op.results:
        values = state.known.get(value)
        type_ = value.type
        if (values is None or None in values or not value.uses
                or not isinstance(type_, TensorType) or not type_.has_static_shape
                or len(values) > MAX_MATERIALIZED_ELEMENTS):
            return
        replacements.append((value, values))
    if not replacements:
        return
    producers = [v.op for v in op.operands if hasattr(v, "op")]
    block = op.parent
    for value, values in replacements:
        constant = ConstantOp.of(values, value.type, op.location)
        constant.source_loc = op.source_loc
        constant.results[0].name_hint = value.name_hint
        block.insert_before(op, constant)
        state.known[constant.results[0]] = values
        value.replace_all_uses_with(constant.results[0])
    op.erase()
    result.folded += 1
    _erase_orphans(producers, result)


def _erase_orphans(ops, result: InferShapesResult) -> None:
    """Erase graph ops that folding left without users, and their producers in turn."""
    work = list(ops)
    while work:
        op = work.pop()
        if op.parent is None or not isinstance(op, GraphOp):
            continue
        if any(r.uses for r in op.results):
            continue
        work.extend(v.op for v in op.operands if hasattr(v, "op"))
        op.erase()
        result.erased += 1


def _retype_function(fn: Operation, ret: Operation, result: InferShapesResult) -> None:
    fn_type = fn.properties["function_type"].value
    returned = tuple(v.type for v in ret.operands)
    if returned == fn_type.results or len(returned) != len(fn_type.results):
        return
    fn.properties["function_type"] = A.TypeAttr(FunctionType(fn_type.inputs, returned))
    result.functions.append(fn.properties["sym_name"].value)


@register_pass
class InferShapes(ModulePass):
    name = "infer-shapes"
    summary = ("refine graph op result types from their shape rules, fold ONNX shape "
               "arithmetic to constants, and update function result types")
    fold: bool = True

    def apply(self, module: Operation) -> None:
        infer_shapes(module, fold=self.fold)
