"""`infer-shapes`: refine the result types of graph ops from their shape rules, fold
the integer shape arithmetic of ONNX exports (Shape → Gather → Concat → Reshape), and
make function result types as precise as what they return.

Known values of integer tensors travel in a side table while walking: a `graph.shape`
of a tensor with `?` dims is a vector with unknown elements, and the gathers, concats,
slices, casts and arithmetic on it keep the elements that are known. A value whose
elements all become known is materialized as a `graph.constant`, so the reshape that
consumes it gets a constant shape operand and a static result.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from palimpsest.dialects.graph.ops_base import (
    Args, GraphOp, ShapeError, constant_values, refine_type,
)
from palimpsest.ir import attributes as A
from palimpsest.ir.core import Operation
from palimpsest.ir.types import FunctionType, TensorType
from palimpsest.passes.pass_manager import ModulePass, register_pass

MAX_MATERIALIZED_ELEMENTS = 256  # folded results larger than this stay computed


@dataclass
class InferShapesResult:
    refined: int = 0          # result types made more precise
    folded: int = 0           # ops replaced by graph.constant
    erased: int = 0           # ops left unused by folding and erased
    functions: list = field(default_factory=list)  # names of functions retyped


class _State:
    """Known values of SSA values while walking: `known` holds int/float elements
    (None where unknown); `symbolic` holds lists where unknown elements may be dim
    tokens; `tokens` names the dynamic dims of each value."""

    def __init__(self):
        self.known: dict = {}
        self.symbolic: dict = {}
        self.tokens: dict = {}

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
        return self.tokens[value]


class _Lazy:
    """A list-like view that computes one operand's entry on first use."""

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


def infer_shapes(root: Operation, fold: bool = True) -> InferShapesResult:
    """Refine types under `root` (usually a module) in place; see the module doc.
    With fold=False no constant is created and no op erased (values still propagate)."""
    result = InferShapesResult()
    # One walk in program order suffices: operands are visited before their users,
    # and functions that are called are never retyped.
    returns = _retypable_returns(root)
    state = _State()
    for op in root.walk():
        if not isinstance(op, GraphOp) or op.parent is None:
            continue
        _visit(op, state, returns, fold, result)
    for fn, ret in returns.values():
        _retype_function(fn, ret, result)
    return result


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
        rets = [op for op in fn.regions[0].walk()
                if op.name == "func.return" and op.parent_op is fn]
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
            if refined != value.type and _retypable(value, returns):
                value.type = refined
                result.refined += 1
    result_types = [r.type for r in op.results]
    try:
        folded = cls.fold_values(args, result_types)
        symbolic = None
        if cls.moves_values or "fold_symbols" in vars(cls):
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
    if fold and op.name != "graph.constant":
        _materialize(op, state, result)


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
@dataclass(frozen=True)
class InferShapes(ModulePass):
    name = "infer-shapes"
    summary = ("refine graph op result types from their shape rules, fold ONNX shape "
               "arithmetic to constants, and update function result types")
    fold: bool = True

    def apply(self, module: Operation) -> None:
        infer_shapes(module, fold=self.fold)
