"""`bufferize`: graph level → buffer level, in destination-passing style.

    %y = graph.relu %x : tensor<1x8xf32>
becomes
    %y = buffer.alloc {kind = "activation"} : buffer<1x8xf32>
    buffer.compute %x, %y {op = "graph.relu", operandSegmentSizes = array<i32: 1, 1>} : ...

The rules, per function (graph ops at the top level of its body):

- Arguments `tensor<...>` become `buffer<...>` of the same shape and element type; they are
  read-only (bufferization never writes an input) unless `inputs-as-activations` is set,
  and then only in functions no `func.call` calls.
- `graph.constant` becomes `buffer.constant` with the same value attribute (resources stay
  resources).
- Every other graph op gets one `buffer.alloc` per result and a `buffer.compute` that
  writes them. A result with `?` dims gets an alloc with `?` dims and **no size operands**:
  such a buffer is sized at run time by the op that first writes it (the alloc reserves
  nothing until then). Bounds of `?` dims (`#bounds<...>`) stay on the buffer type, so
  plan-memory can place it at its bound.
- **In place**: when an op declares `InPlace` (ir.opdef; the graph dialect's elementwise
  ops and activations), result 0 reuses the storage of an operand instead of a new alloc
  if that operand (1) dies at the op: no later use of any value sharing its storage
  (aliases included; `func.return` is a use), (2) is an activation, never an input (unless
  `inputs-as-activations`) or a constant, (3) has exactly the result's type, (4) is not
  also read by the op through another alias, and (5) with `?` dims in the result, every
  other operand has size 1 (or no dim) at each `?` dim, so broadcasting cannot make the
  result larger than the operand at run time.
- **Aliases**: `graph.reshape`, `graph.flatten`, `graph.squeeze` and `graph.unsqueeze`
  become `buffer.reshape` of the (always contiguous) operand buffer when the result's
  shape follows from the element count alone: static, or one `?` dim beside static dims
  whose product is not 0. `graph.identity` and inference `graph.dropout` (one result, no
  training_mode or a constant false) forward the operand's buffer (a `buffer.reshape` when
  the types differ, e.g. an identity that refines a type).
- **Results**: a function result whose storage is an activation becomes that alloc, with
  its kind changed to `output` (no copy). A result that is an input, a constant, an alias
  of either, or shares storage with an earlier result is copied (`buffer.copy`) into a new
  `buffer.alloc {kind = "output"}` (`?` dims sized with `buffer.dim` of the source).
- `func.call` results are storage the callee allocated (its outputs): returned as they
  are, never reused in place, never deallocated by `insert-deallocs`.
- Afterwards, computations nobody reads (e.g. the shape operand of a reshape that became
  an alias) are erased with their allocs, and so are unused constants.

`in-place=false` turns the reuse off (every result gets its own alloc), to measure it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from palimpsest.dialects.buffer import (
    AllocOp, BufferType, ComputeOp, ConstantOp, CopyOp, DimOp, ReshapeOp, buffer_of,
)
from palimpsest.ir import attributes as A
from palimpsest.ir.core import Operation
from palimpsest.ir.opdef import InPlace
from palimpsest.ir.types import FunctionType, IndexType, TensorType, i32
from palimpsest.passes.pass_manager import ModulePass, register_pass

ALIAS_OPS = ("graph.reshape", "graph.flatten", "graph.squeeze", "graph.unsqueeze")


@dataclass
class BufferizeResult:
    allocs: int = 0          # buffer.alloc ops created (outputs included)
    in_place: int = 0        # results that reuse an operand's storage
    aliases: int = 0         # results that became a buffer.reshape or a forwarded buffer
    output_copies: int = 0   # results copied into an output buffer
    erased: int = 0          # dead computations, constants and aliases erased
    in_place_ops: list = field(default_factory=list)  # graph op names done in place


class _Storage:
    """Memory that buffers share: one alloc, argument, constant or call result, and the
    graph values that live in it (directly or through aliases)."""

    __slots__ = ("kind", "alloc", "values", "last_use")

    def __init__(self, kind: str, alloc: Operation | None = None):
        self.kind = kind          # "alloc" | "arg" | "constant" | "call"
        self.alloc = alloc
        self.values: list = []
        self.last_use = -1        # position of the last op using any of the values


def bufferize(module: Operation, in_place: bool = True,
              inputs_as_activations: bool = False) -> BufferizeResult:
    """Rewrite every function of `module` from tensors to buffers (see the module doc)."""
    result = BufferizeResult()
    functions, calls, called = [], [], set()
    for op in module.walk():
        if op.name == "func.func":
            functions.append(op)
        elif op.name == "func.call":
            calls.append(op)
            callee = op.properties.get("callee")
            if isinstance(callee, A.SymbolRefAttr):
                called.add(callee.root)
    for fn in functions:
        if fn.is_declaration:
            _retype_declaration(fn)
            continue
        writable = inputs_as_activations and fn.properties["sym_name"].value not in called
        _Function(fn, result, in_place, writable).run()
    return result


def _buffer_type(value_type, op: Operation, what: str):
    if not isinstance(value_type, TensorType):
        return value_type
    if value_type.shape is None:
        raise op.error(f"cannot bufferize {what} of unranked type '{value_type}' "
                       f"(run infer-shapes first)")
    return buffer_of(value_type)


def _retype_declaration(fn: Operation) -> None:
    fn_type = fn.type
    inputs = tuple(_buffer_type(t, fn, "an argument") for t in fn_type.inputs)
    results = tuple(_buffer_type(t, fn, "a result") for t in fn_type.results)
    fn.properties["function_type"] = A.TypeAttr(FunctionType(inputs, results))


class _Function:
    def __init__(self, fn: Operation, result: BufferizeResult, in_place: bool,
                 writable_inputs: bool):
        self.fn = fn
        self.result = result
        self.in_place = in_place
        self.writable_inputs = writable_inputs
        self.buffer: dict = {}    # graph value -> buffer value
        self.storage: dict = {}   # graph value -> _Storage
        self.position: dict = {}  # op of the entry block -> index
        self.last_use: dict = {}  # graph value -> index of its last user

    # -- analysis --------------------------------------------------------------------------
    def _check_structure(self) -> None:
        body = self.fn.regions[0]
        if len(body.blocks) > 1:
            if any(op.name.startswith("graph.") for op in body.walk()):
                raise self.fn.error("bufferize handles functions of one block")
        block = body.blocks[0]
        for index, op in enumerate(block.ops):
            self.position[op] = index
            for region in op.regions:
                for inner in region.walk():
                    if inner.name.startswith("graph."):
                        raise inner.error("bufferize handles graph ops at the top level of "
                                          "a function only")

    def _compute_last_uses(self, block) -> None:
        position = self.position

        def last_use(value) -> int:
            last = -1
            for user, _ in value.uses:
                while user is not None and user.parent is not block:
                    user = user.parent_op
                if user is not None and position[user] > last:
                    last = position[user]
            return last

        for arg in block.args:
            self.last_use[arg] = last_use(arg)
        for op in block.ops:
            for value in op.results:
                self.last_use[value] = last_use(value)

    @staticmethod
    def _dies_at(storage: _Storage, position: int) -> bool:
        return storage.last_use <= position

    # -- the rewrite -------------------------------------------------------------------------
    def run(self) -> None:
        self._check_structure()
        block = self.fn.entry_block
        self._compute_last_uses(block)
        for arg in block.args:
            if isinstance(arg.type, TensorType):
                _buffer_type(arg.type, self.fn, "an argument")
                self._bind(arg, arg, _Storage("arg"))
        old_ops = list(block.ops)
        returned = None
        for op in old_ops:
            if op.name == "func.return":
                returned = self._return(op)
            elif op.name == "graph.constant":
                self._constant(op)
            elif op.name.startswith("graph."):
                self._graph_op(op)
            elif op.name == "func.call":
                self._call(op)
            else:
                self._other(op)
        for op in reversed(old_ops):
            if op.name.startswith("graph.") or op.name == "func.call":
                op.erase()
        for arg in block.args:
            if isinstance(arg.type, TensorType):
                arg.type = buffer_of(arg.type)
        fn_type = self.fn.type
        results = returned if returned is not None else fn_type.results
        self.fn.properties["function_type"] = A.TypeAttr(FunctionType(
            tuple(a.type for a in block.args), tuple(results)))
        self.result.erased += _erase_dead(block)

    def _bind(self, value, buffer_value, storage: _Storage) -> None:
        self.buffer[value] = buffer_value
        self.storage[value] = storage
        storage.values.append(value)
        storage.last_use = max(storage.last_use, self.last_use.get(value, -1))

    def _mapped(self, value):
        found = self.buffer.get(value)
        if found is None:
            if isinstance(value.type, TensorType):
                owner = value.owner
                where = owner if isinstance(owner, Operation) else self.fn
                raise where.error(f"bufferize found a tensor value with no buffer: {value}")
            return value
        return found

    def _insert(self, anchor: Operation, op: Operation) -> Operation:
        op.location = anchor.location
        op.source_loc = anchor.source_loc
        anchor.parent.insert_before(anchor, op)
        return op

    def _alloc(self, anchor: Operation, type_: BufferType, name, kind="activation",
               sizes=()) -> Operation:
        alloc = AllocOp(list(sizes), [type_], {"kind": A.StringAttr(kind)},
                        result_names=[name])
        self.result.allocs += 1
        return self._insert(anchor, alloc)

    def _constant(self, op: Operation) -> None:
        value = op.results[0]
        type_ = _buffer_type(value.type, op, "a constant")
        constant = ConstantOp([], [type_], {"value": op.properties["value"]},
                              result_names=[value.name_hint])
        self._insert(op, constant)
        self._bind(value, constant.results[0], _Storage("constant"))

    def _graph_op(self, op: Operation) -> None:
        if self._try_alias(op):
            return
        position = self.position[op]
        if self.in_place and op.has_trait(InPlace) and len(op.results) == 1:
            index = self._in_place_operand(op, position)
            if index is not None:
                source = op.operands[index]
                result = op.results[0]
                self._bind(result, self.buffer[source], self.storage[source])
                self._compute(op, [self.buffer[source]])
                self.result.in_place += 1
                self.result.in_place_ops.append(op.name)
                return
        outs = []
        for value in op.results:
            type_ = _buffer_type(value.type, op, "a result")
            alloc = self._alloc(op, type_, value.name_hint)
            storage = _Storage("alloc", alloc)
            self._bind(value, alloc.results[0], storage)
            outs.append(alloc.results[0])
        self._compute(op, outs)

    def _compute(self, op: Operation, outs: list) -> None:
        ins = [self._mapped(v) for v in op.operands]
        properties = {"op": _op_name(op.name)}
        for key, value in op.properties.items():
            properties["graphSegmentSizes" if key == "operandSegmentSizes" else key] = value
        properties["operandSegmentSizes"] = _segment_sizes(len(ins), len(outs))
        self._insert(op, ComputeOp(ins + outs, [], properties, op.attributes))  # (copied)

    def _in_place_operand(self, op: Operation, position: int) -> int | None:
        result_type = op.results[0].type
        if not isinstance(result_type, TensorType) or result_type.shape is None:
            return None
        trait = next(t for t in type(op).traits if isinstance(t, InPlace))
        for index in trait.candidates(op):
            value = op.operands[index]
            storage = self.storage.get(value)
            if storage is None:
                continue
            if storage.kind != "alloc" and not (storage.kind == "arg" and self.writable_inputs):
                continue
            if not self._dies_at(storage, position) or value.type != result_type:
                continue  # (the cheap checks first)
            if any(other is not value and self.storage.get(other) is storage
                   for other in op.operands):
                continue
            if not self._broadcast_safe(op, index, result_type):
                continue
            return index
        return None

    @staticmethod
    def _broadcast_safe(op: Operation, index: int, result_type: TensorType) -> bool:
        """With `?` dims, the other operands cannot widen the result past operand `index`."""
        shape = result_type.shape
        if None not in shape:
            return True
        for j, other in enumerate(op.operands):
            if j == index:
                continue
            other_shape = getattr(other.type, "shape", None)
            if other_shape is None:
                return False
            for k, dim in enumerate(shape):
                if dim is not None:
                    continue
                aligned = k - (len(shape) - len(other_shape))
                if aligned >= 0 and other_shape[aligned] != 1:
                    return False
        return True

    def _try_alias(self, op: Operation) -> bool:
        if op.name in ALIAS_OPS:
            source = op.operands[0]
        elif op.name == "graph.identity":
            source = op.operands[0]
        elif op.name == "graph.dropout" and len(op.results) == 1 and _inference_dropout(op):
            source = op.operands[0]
        else:
            return False
        result = op.results[0]
        result_type = result.type
        if not isinstance(result_type, TensorType) or result_type.shape is None:
            return False
        if source not in self.buffer:
            return False
        if op.name in ALIAS_OPS and not _reshape_determined(result_type.shape):
            return False
        source_buffer = self.buffer[source]
        source_type = _type_of(source_buffer)
        target_type = buffer_of(result_type)
        if source_type == target_type:
            self._bind(result, source_buffer, self.storage[source])
        else:
            if not (source_type.is_contiguous
                    and source_type.element_type == target_type.element_type):
                return False
            reshape = ReshapeOp([source_buffer], [target_type], result_names=[result.name_hint])
            self._insert(op, reshape)
            self._bind(result, reshape.results[0], self.storage[source])
        self.result.aliases += 1
        return True

    def _call(self, op: Operation) -> None:
        from palimpsest.dialects.func import CallOp

        types = [_buffer_type(r.type, op, "a call result") for r in op.results]
        call = CallOp([self._mapped(v) for v in op.operands], types, dict(op.properties),
                      dict(op.attributes), result_names=[r.name_hint for r in op.results])
        self._insert(op, call)
        for old, new in zip(op.results, call.results):
            if isinstance(old.type, TensorType):
                self._bind(old, new, _Storage("call"))
            else:
                old.replace_all_uses_with(new)

    def _other(self, op: Operation) -> None:
        if any(isinstance(v.type, TensorType) for v in [*op.operands, *op.results]):
            raise op.error("bufferize cannot rewrite this op: it takes or makes tensors and "
                           "is not a graph op")

    def _return(self, op: Operation) -> list:
        new_operands, types, seen = [], [], set()
        for value in op.operands:
            if not isinstance(value.type, TensorType):
                new_operands.append(value)
                types.append(value.type)
                continue
            buffer_value = self._mapped(value)
            storage = self.storage[value]
            if storage.kind in ("alloc", "call") and id(storage) not in seen:
                if storage.kind == "alloc":
                    storage.alloc.properties["kind"] = A.StringAttr("output")
                seen.add(id(storage))
            else:
                buffer_value = self._copy_to_output(op, buffer_value, value)
            new_operands.append(buffer_value)
            types.append(_type_of(buffer_value))
        op.set_operands(new_operands)
        return types

    def _copy_to_output(self, anchor: Operation, source, value):
        type_ = _type_of(source)
        sizes = []
        for index, dim in enumerate(type_.shape):
            if dim is None:
                dim_op = DimOp([source], [IndexType()], {"index": A.IntegerAttr(index)})
                sizes.append(self._insert(anchor, dim_op).results[0])
        name = f"{value.name_hint}_out" if value.name_hint else None
        alloc = self._alloc(anchor, BufferType(type_.shape, type_.element_type, None,
                                               type_.encoding), name,
                            kind="output", sizes=sizes)
        self._insert(anchor, CopyOp([source, alloc.results[0]], []))
        self.result.output_copies += 1
        return alloc.results[0]


@lru_cache(maxsize=256)  # immutable: one per (ins, outs) count, shared by the computes
def _segment_sizes(ins: int, outs: int) -> A.DenseArrayAttr:
    return A.DenseArrayAttr(i32, (ins, outs))


@lru_cache(maxsize=1024)  # immutable: one per graph op name
def _op_name(name: str) -> A.StringAttr:
    return A.StringAttr(name)


def _type_of(buffer_value):
    """The buffer type of a mapped value (arguments are retyped at the end)."""
    type_ = buffer_value.type
    return buffer_of(type_) if isinstance(type_, TensorType) else type_


def _inference_dropout(op: Operation) -> bool:
    from palimpsest.dialects.graph.ops_base import constant_values

    training = op.training_mode
    if training is None:
        return True
    values = constant_values(training)
    return values is not None and not any(values)


def _reshape_determined(shape) -> bool:
    """Whether a reshape's result shape follows from its element count alone."""
    dynamic = sum(d is None for d in shape)
    if dynamic == 0:
        return True
    static = 1
    for d in shape:
        if d is not None:
            static *= d
    return dynamic == 1 and static != 0


def _erase_dead(block) -> int:
    """Erase computations whose outputs nobody reads, then unused constants, aliases,
    dims and allocs (one backward sweep: users are visited before what they use)."""
    erased = 0
    op = block.last
    while op is not None:
        previous = op.prev
        if op.name in ("buffer.constant", "buffer.reshape", "buffer.dim") \
                and not any(r.uses for r in op.results):
            op.erase()
            erased += 1
        elif op.name == "buffer.alloc" and not op.results[0].uses \
                and op.kind.value != "output":
            op.erase()
            erased += 1
        elif op.name == "buffer.compute" and _writes_only_private(op):
            op.erase()
            erased += 1
        op = previous
    return erased


def _writes_only_private(op: Operation) -> bool:
    """Every out is a non-output alloc that no other op uses."""
    for value in op.outs:
        owner = getattr(value, "op", None)
        if owner is None or owner.name != "buffer.alloc" \
                or owner.kind.value == "output":
            return False
        if any(user is not op for user, _ in value.uses):
            return False
    return True


@register_pass
class Bufferize(ModulePass):
    name = "bufferize"
    summary = ("graph level to buffer level (destination-passing style): allocs, "
               "buffer.compute, in-place reuse of dying operands, reshapes as aliases")
    in_place: bool = True
    inputs_as_activations: bool = False

    def apply(self, module: Operation) -> None:
        bufferize(module, in_place=self.in_place,
                  inputs_as_activations=self.inputs_as_activations)


__all__ = ["ALIAS_OPS", "Bufferize", "BufferizeResult", "bufferize"]
