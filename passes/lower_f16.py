"""float16 computed in float32, as onnxruntime's CPU provider computes it: part of
`lower-to-kernels` (its `f16-in-f32` option), before the computes become kernels.

Each f16 compute that has an f32 kernel (kernel_rules.F16_IN_F32) is rewritten to casts
of its f16 ins to f32 (a constant's once, at compile time), the compute on f32 buffers,
and a cast of each result back to f16, as onnxruntime's InsertCastTransformer inserts
them. Its RemoveDuplicateCastTransformer then drops each f32 -> f16 -> f32 pair between
two nodes it runs in f32, and so does this: a lifted compute reads a lifted producer's
f32 result, unrounded, and a rounding cast that no f16 reader needs goes (a chain rounds
once, at its end). An op that only moves values (MOVES) runs on f32 when its ins have
f32 copies at hand, as onnxruntime runs such an isolated node in f32. The casts are
`buffer.compute graph.cast` (both backends run them; the planner sees the f32
temporaries). An f16 buffer's f32 copy serves later lifted computes until its memory
is written; an op that rounds alike before or after (ROUNDING_COMMUTES) folds into its
producer; a lifted elementwise compute writes over an f32 temporary nothing reads after
it."""

from __future__ import annotations

from palimpsest.dialects import kernel as K
from palimpsest.dialects.buffer import AllocOp, ConstantOp
from palimpsest.ir import attributes as A
from palimpsest.ir.core import Operation
from palimpsest.passes.fuse_elementwise import BETWEEN_OK, _root
from palimpsest.passes.kernel_rules import _i, _s, computes_f16_in_f32, is_f16


def f16_in_f32_computes(computes: list, packer) -> tuple:
    """Each f16 compute of F16_IN_F32 (kernel_rules.py) with static shapes becomes
    casts of its f16 ins to f32 (a constant's once, at compile time, through `packer`),
    the compute on f32 buffers, and a cast of each f16 result back into its f16 out,
    kept only where an f16 reader needs it (see the module doc). An f16 buffer cast to
    f32 serves the later lifted computes that read it until something writes its memory. Returns (the computes, casts included, in
    block order; how many computes were lifted)."""
    from palimpsest.dialects.buffer import BufferType, ComputeOp
    from palimpsest.ir.types import f32, i32

    segments = A.DenseArrayAttr(i32, (1, 1))

    def insert_cast(anchor, source, target, to: int, before: bool) -> Operation:
        cast = ComputeOp([source, target], [], {"op": _s("graph.cast"), "to": _i(to),
                                                "operandSegmentSizes": segments})
        cast.location, cast.source_loc = anchor.location, anchor.source_loc
        if before:
            anchor.parent.insert_before(anchor, cast)
        else:
            anchor.parent.insert_after(anchor, cast)
        return cast

    def temporary(anchor, value) -> object:
        hint = value.name_hint
        alloc = AllocOp([], [BufferType(tuple(value.type.shape), f32)],
                        {"kind": _s("activation")},
                        result_names=[f"{hint}_f32" if hint else None])
        alloc.location, alloc.source_loc = anchor.location, anchor.source_loc
        anchor.parent.insert_before(anchor, alloc)
        return alloc.results[0]

    def widened(array):
        return array.astype("float32"), BufferType(array.shape, f32)

    lifted = 0
    out: list = []
    if not computes:
        return out, lifted
    wanted = set(computes)
    shadows: dict = {}   # f16 buffer -> its values cast to f32, while its memory is unwritten
    rounded: dict = {}   # f16 buffer -> (the f32 result it rounds, that cast), likewise
    elementwise: list = []   # lifted elementwise computes (written in place after the walk)
    roundings: dict = {}     # f16 out -> the casts that round lifted results into it
    unread: dict = {}        # f16 out -> its rounding cast, while nothing has read it
    for op in list(computes[0].parent.ops):
        if op.name in BETWEEN_OK:
            _read(unread, op.operands)
            continue
        if op.name != "buffer.compute" or op.regions:
            shadows.clear()   # (writes what it may)
            rounded.clear()
            unread.clear()
            continue
        if op not in wanted:
            _read(unread, op.operands)
            continue
        ins, outs = list(op.ins), list(op.outs)
        halves = [v for v in ins + outs if is_f16(v.type.element_type)]
        if not halves or any(None in v.type.shape for v in halves) or not (
                computes_f16_in_f32(op) or _moves_in_f32(op, ins, rounded, shadows)):
            _read(unread, op.operands)
            _forget_written(shadows, outs)
            _forget_written(rounded, outs)
            out.append(op)
            continue
        replaced = _unrounded(op, ins, outs, rounded)
        for value in ins:
            if value in replaced or not is_f16(value.type.element_type):
                continue
            # a lifted producer's f32 result, unrounded: onnxruntime drops the
            # f32 -> f16 -> f32 cast pair between two nodes it runs in f32
            wide = rounded[value][0] if value in rounded else None
            if wide is None and isinstance(getattr(value, "op", None), ConstantOp):
                wide = packer.packed(value, "f32", widened,
                                     f"{value.name_hint or 'weights'}_f32")
            if wide is None:
                wide = shadows.get(value)
            if wide is None:
                wide = temporary(op, value)
                out.append(insert_cast(op, value, wide, 1, before=True))
                shadows[value] = wide
                _read(unread, [value])
            replaced[value] = wide
        _forget_written(shadows, outs)
        _forget_written(rounded, outs)
        anchor = op
        results = []
        written = {}   # (an out may be an in too: written in place)
        for value in outs:
            if value in written or not is_f16(value.type.element_type):
                continue
            wide = written[value] = temporary(op, value)
            stale = unread.pop(value, None)   # a rounding nothing read, now overwritten
            if stale is not None and stale.parent is not None:
                stale.erase()   # (dropped from `out` at the end, as every erased op)
            anchor = insert_cast(anchor, wide, value, 10, before=False)
            results.append(anchor)
            rounded[value] = (wide, anchor)
            roundings.setdefault(value, []).append(anchor)
            if _root(value) is value:
                unread[value] = anchor
        for index, value in enumerate(op.operands):
            wide = (replaced if index < len(ins) else written).get(value)
            if wide is not None:
                op.set_operand(index, wide)
        for value in ins:   # an f16 buffer that only a rounding cast wrote, now unread
            if value in replaced and value not in outs and _unread(value):
                _erase_buffer(value)
        out.append(op)
        out.extend(results)
        lifted += 1
        if op.properties["op"].value in K.STEPS and len(written) == 1:
            elementwise.append(op)
    for value, casts in roundings.items():   # every reader took the f32 result
        casts = [cast for cast in casts if cast.parent is not None]
        if casts and _unread(value, casts):
            for cast in casts:
                cast.erase()
            _erase_buffer(value)
    for op in elementwise:
        _in_place(op)
    return [op for op in out if op.parent is not None], lifted


# Ops that only move values (exact in f16 and in f32 alike): onnxruntime runs one in
# f32 too when it stands between nodes it runs in f32 (an isolated f16 node), so here one
# runs on f32 when each of its f16 ins has an f32 copy at hand, and no cast is added.
MOVES = ("graph.transpose", "graph.concat", "graph.gather", "graph.pad", "graph.split",
         "graph.slice", "graph.resize")


def _moves_in_f32(op: Operation, ins: list, rounded: dict, shadows: dict) -> bool:
    if op.properties["op"].value not in MOVES or computes_f16_in_f32(op):
        return False   # (a resize that interpolates is a compute)
    return all(not is_f16(v.type.element_type) or v in rounded or v in shadows
               or isinstance(getattr(v, "op", None), ConstantOp) for v in ins)


def _read(unread: dict, values) -> None:
    """Something reads `values` as f16 (or may, through a view): their roundings stay."""
    if unread:
        for value in values:
            unread.pop(_root(value), None)


def _unread(value, writers=()) -> bool:
    """Whether `value` is an activation buffer of its own (not a view) that nothing but
    `writers` and its deallocs use."""
    owner = getattr(value, "op", None)
    return (isinstance(owner, AllocOp) and owner.kind.value == "activation"
            and _root(value) is value
            and all(u in writers or u.name == "buffer.dealloc" for u in value.users()))


def _erase_buffer(value) -> None:
    for user in list(value.users()):
        user.erase()
    value.op.erase()


def _in_place(op: Operation) -> None:
    """A lifted elementwise compute writes its f32 result over an f32 in of its type
    that nothing reads after it (a temporary of `f16_in_f32_computes`: a cast's or a lifted
    producer's), as bufferize writes f32 in place (an in its graph op's InPlace trait
    allows): its own temporary goes."""
    from palimpsest.ir.opdef import InPlace, lookup_op

    target = op.outs[0]
    alloc = target.op
    trait = next((t for t in lookup_op(op.properties["op"].value).traits
                  if isinstance(t, InPlace)), None)
    if trait is None or not isinstance(alloc, AllocOp) or alloc.kind.value != "activation" \
            or any(u is not op and u.name != "buffer.compute" for u in target.users()):
        return
    position = None
    allowed = range(len(op.ins)) if trait.operands is None else trait.operands
    for value in [op.ins[i] for i in allowed if i < len(op.ins)]:
        owner = getattr(value, "op", None)
        if value.type != target.type or not isinstance(owner, AllocOp) \
                or owner.kind.value != "activation" or owner.parent is not op.parent:
            continue
        if position is None:
            position = {o: i for i, o in enumerate(op.parent.ops)}
        if any(u.name != "buffer.compute" or position.get(u, len(position)) > position[op]
               for u in value.users() if u is not op):
            continue
        for user in list(target.users()):
            for index, operand in enumerate(user.operands):
                if operand is target:
                    user.set_operand(index, value)
        alloc.erase()
        return


# Ops whose result rounds to f16 as their operand's rounding would: monotone, exact on
# f16 values (relu(round(x)) = round(relu(x)); max(round(a), b) = round(max(a, b)) for
# an f16 b). Such an op after a lifted compute reads the compute's f32 result, not its
# rounding, when nothing else reads that: one rounding after both, and the pair can fold
# (an epilogue) as onnxruntime's would not, with the same numbers.
ROUNDING_COMMUTES = ("graph.relu", "graph.abs", "graph.neg", "graph.clip", "graph.max",
                     "graph.min", "graph.max_pool")


def _unrounded(op: Operation, ins: list, outs: list, rounded: dict) -> dict:
    """{f16 in: the f32 result its rounding cast reads} for the one in of `op` (of
    ROUNDING_COMMUTES) that a lifted compute's cast wrote and only `op` reads; that cast
    is erased."""
    name = op.properties["op"].value
    if name not in ROUNDING_COMMUTES or (name == "graph.max_pool" and len(outs) != 1):
        return {}
    candidates = ins[:1] if name not in ("graph.max", "graph.min") else ins
    for value in candidates:
        found = rounded.get(value)
        if found is None or ins.count(value) != 1:
            continue
        wide, cast = found
        others = [u for u in value.users()
                  if u is not op and u is not cast and u.name != "buffer.dealloc"]
        if _root(value) is not value or any(u.name != "buffer.compute" for u in others):
            continue   # (an alias might read it)
        if others:   # only ops done with it before the cast, or, when `op` writes it in
            position = {o: i for i, o in enumerate(op.parent.ops)}   # place, after `op`
            if any(not position.get(u, -1) < position[cast] and not (
                    value in outs and position.get(u, -1) > position[op]) for u in others):
                continue
        del rounded[value]
        cast.erase()
        return {value: wide}
    return {}


def _forget_written(shadows: dict, outs: list) -> None:
    if not shadows:
        return
    written = {_root(v) for v in outs}
    for value in [v for v in shadows if _root(v) in written]:
        del shadows[value]
