"""`lower-to-kernels`: buffer level → kernel level.

Each `buffer.compute` becomes the kernel op that implements it (dialects/kernel.py), and
each of the kernel's workspaces becomes a `buffer.alloc {kind = "workspace"}` right
before it and a `buffer.dealloc` right after, so every byte of intra-op scratch is in
the IR and the planner can share it with activations that are dead during the op:

    %y_padded = buffer.alloc {kind = "workspace"} : buffer<3x34x34xf32>
    %y_im2col = buffer.alloc {kind = "workspace"} : buffer<27x1024xf32>
    kernel.conv2d %x, %w, %b, %y, %y_padded, %y_im2col {...}
    buffer.dealloc %y_im2col : buffer<27x1024xf32>
    buffer.dealloc %y_padded : buffer<3x34x34xf32>

| graph op | kernel op | when (otherwise `kernel.generic`) |
|---|---|---|
| conv | conv2d | 4-D, f32/f64 (f16: below); auto_pad SAME_* needs static spatial dims |
| conv_transpose | conv_transpose (workspace: `cols`) | rank >= 3, f32/f64, static kernel dims; auto_pad SAME_* and output_shape need static spatial dims |
| matmul, gemm | matmul | same element types (gemm: f32/f64) |
| max_pool (one result), average_pool | pool2d | 4-D; auto_pad as conv |
| global_average_pool, global_max_pool | reduce (mean/max over the spatial dims) | f16/f32/f64 |
| softmax | softmax | f32/f64 |
| layer_norm (one result) | layer_norm | f32/f64, stash_type of the same precision |
| reduce_mean, reduce_sum, reduce_max | reduce | constant (or absent) axes |
| elementwise ops (kernel.STEPS) | elementwise | one element type (f32/f64 for float-only ops) |
| transpose, concat, gather | transpose, concat, gather | |
| split | split | static extents of the outs along the axis |
| slice | slice | constant starts/ends/axes/steps, each axis named once, static sliced dims |
| pad | pad | constant pads and axes; edge/reflect/wrap need static shapes that allow them |
| resize | resize | static shapes, constant scales/sizes/roi; linear/cubic f32/f64 |
| lstm, gru, rnn | lstm, gru, rnn (workspaces: projected inputs, Rᵀ, step state) | f32/f64 |

Every other op (and one whose operands do not fit the rule) becomes `kernel.generic`,
run by the backend with the graph op's implementation, with no workspace.

**Fusion** (`fuse-elementwise`, default true): consecutive elementwise computes A, B
where B reads A's out T exactly once become one `kernel.elementwise` at B's place, when

- only allocs, deallocs, constants, reshapes, views and dims lie between them, and none
  of those uses T other than a dealloc of T;
- either T is an `activation` alloc used by A, B and its dealloc only (T disappears:
  its alloc and dealloc are erased), or B writes T in place (the fused op writes T);
- the fused op's out shares no storage with an in read after the first step (each step
  is computed into the out buffer, so such an in would be overwritten before it is
  read).

Deallocs lying between the fused computes that free something the chain reads move to
right after the fused op. `fuse-elementwise=false` makes every elementwise compute its
own one-step `kernel.elementwise`. Before chains form, an activation written out as
several ops that read its input twice (`ACTIVATION_PATTERNS`: SiLU, hard-swish, GELU) becomes
the one step it is.

**Epilogues** (`fuse-epilogues`, default true): a chain right after a conv, matmul or
gemm (only the ops above between them), whose first step reads the product T once,
folds into that kernel as its epilogue (dialects/kernel_elementwise.py, `Epilogue`), one
kernel op at the chain's place writing the chain's out, when T feeds only the chain (an
`activation` alloc, or written in place by the chain), no chain in and no kernel in
shares storage with the out, and the kernel op verifies. T's buffer and the chain's
intermediates go.

**float16** (`f16-in-f32`, default true; lower_f16.py): first, as onnxruntime's CPU provider runs f16
(its InsertCastTransformer), each f16 compute of `F16_IN_F32` (kernel_rules.py: the ops
above with an f32 kernel, elementwise steps included) with static shapes becomes a cast
of each f16 in to f32 (`kernel.generic` graph.cast, which both backends run; a
constant's cast is done once, at compile time: a new f32 constant), the compute on f32
buffers (so it lowers, fuses and folds as f32 does, and the planner sees the f32
temporaries), and a cast of each result back into its f16 out: each op's result
rounded to f16, as onnxruntime's are. An f16 buffer cast to f32 serves every later
lifted compute that reads it until its memory is written. An op whose result rounds as
its operand's would (`ROUNDING_COMMUTES`: relu, abs, neg, clip, max, min, max_pool)
reads its lifted producer's f32 result when nothing else reads the rounding: one cast
rounds both, and the two can fold. This runs after the activation patterns (onnxruntime
fuses Sigmoid*Mul unrounded too); conv + batch-norm is folded before, by canonicalize,
in f16 arithmetic as onnxruntime's ConvBNFusion does. Ops that move or reduce f16 as it
is (transpose, concat, gather, pad, split, slice, reduce, nearest resize) keep it.

**Prepacked weights** (`prepack-weights`, default true): then passes/prepack_weights.py
stores a transposed matmul's constant operand transposed, once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from palimpsest.dialects import kernel as K
from palimpsest.dialects.buffer import AllocOp, DeallocOp
from palimpsest.ir import attributes as A
from palimpsest.ir.core import Operation
from palimpsest.passes.fuse_elementwise import (  # noqa: F401
    BETWEEN_OK, _as_step, _chain_out, _chains, _root, _Step,
)
from palimpsest.passes.kernel_rules import (  # noqa: F401
    RULES, _Compute, _fits, _fitting_config, _i, _s,
)
from palimpsest.passes.lower_f16 import f16_in_f32_computes
from palimpsest.passes.pass_manager import ModulePass, register_pass


@dataclass
class LowerToKernelsResult:
    kernels: dict = field(default_factory=dict)   # kernel op name -> count
    generic: dict = field(default_factory=dict)   # graph op lowered to kernel.generic -> count
    fused: int = 0               # computes merged into the compute before them
    epilogues: int = 0           # elementwise chains folded into a conv/matmul as its epilogue
    prepacked: int = 0           # kernel operands that now read a prepacked constant
    f16_in_f32: int = 0          # f16 computes run in f32 between casts
    erased_allocs: int = 0       # intermediate buffers that fusion removed
    workspaces: int = 0          # workspace allocs inserted
    workspace_bytes: int = 0     # their static bytes (dynamic ones not counted)


# ---------------------------------------------------------------------------
# Emitting kernel ops


class _Lowering:
    def __init__(self, result: LowerToKernelsResult):
        self.result = result

    def _insert_before(self, anchor: Operation, op: Operation) -> Operation:
        op.location = anchor.location
        op.source_loc = anchor.source_loc
        anchor.parent.insert_before(anchor, op)
        return op

    def emit(self, anchor: Operation, cls, ins: list, outs: list, props: dict,
             fit: tuple | None = None) -> tuple:
        """`cls` on ins/outs before `anchor`, its workspaces allocated right before it
        and freed right after it: (the kernel op, the last op inserted). `fit`: what
        `_fitting_config` returned for them, when the caller has it."""
        if fit is None:
            in_types = [v.type for v in ins]
            config = cls.config_of(props)
            fit = (config, cls.workspace_roles(in_types, config),
                   cls.workspace_types(in_types, config))
        _, roles, types = fit
        hint = outs[0].name_hint if outs and outs[0].name_hint else None
        workspaces = []
        for role, type_ in zip(roles, types):
            alloc = AllocOp([], [type_], {"kind": _s("workspace")},
                            result_names=[f"{hint}_{role}" if hint else role])
            self._insert_before(anchor, alloc)
            workspaces.append(alloc.results[0])
            self.result.workspaces += 1
            size = type_.nbytes()
            if size is not None:
                self.result.workspace_bytes += size
        properties = dict(props)
        properties["operandSegmentSizes"] = K.segment_sizes_attr(len(ins), len(outs),
                                                                 len(workspaces))
        kernel = self._insert_before(anchor, cls(ins + outs + workspaces, [], properties))
        after = kernel
        for value in reversed(workspaces):
            dealloc = DeallocOp([value], [], location=kernel.location)
            dealloc.source_loc = kernel.source_loc
            kernel.parent.insert_after(after, dealloc)
            after = dealloc
        self.result.kernels[cls.name] = self.result.kernels.get(cls.name, 0) + 1
        return kernel, after

    def generic(self, c: _Compute) -> Operation:
        op = c.op
        properties = dict(op.properties)
        kernel = self._insert_before(op, K.GenericOp(list(op.operands), [], properties,
                                                     dict(op.attributes)))
        self.result.generic[c.name] = self.result.generic.get(c.name, 0) + 1
        self.result.kernels["kernel.generic"] = self.result.kernels.get("kernel.generic", 0) + 1
        return kernel

    def compute(self, c: _Compute) -> None:
        rule = RULES.get(c.name)
        lowered = rule(c) if rule is not None else None
        fit = None if lowered is None else _fitting_config(lowered[0], lowered[1], c.outs,
                                                            lowered[2])
        if fit is not None:
            cls, ins, props = lowered
            self.emit(c.op, cls, ins, c.outs, props, fit)
        else:
            self.generic(c)
        c.op.erase()

    def epilogue(self, c: _Compute, chain: list) -> bool:
        """Lower `c` (conv, matmul or gemm) with `chain` folded in as its epilogue (see
        the module doc); False (nothing changed) when it does not fit."""
        folded = _epilogue_fold(c, chain)
        if folded is None:
            return False
        cls, ins, props, out, fit = folded
        t = c.outs[0]
        first, last = c.op, chain[-1].op
        kernel, anchor = self.emit(last, cls, ins, [out], props, fit)
        _move_frees(first, last, kernel, anchor, ins, [t])
        for step in chain:
            step.op.erase()
        c.op.erase()
        intermediates = _unique([t] + [s.out for s in chain[:-1]])
        for value in intermediates:
            if value is out:
                continue
            for user in value.users():
                if user.name == "buffer.dealloc":
                    user.erase()
            value.op.erase()
            self.result.erased_allocs += 1
        self.result.fused += len(chain)
        self.result.epilogues += 1
        return True

    def chain(self, chain: list) -> None:
        if len(chain) == 1 or not self._fused(chain):
            for step in chain:
                self._single(step)

    def _single(self, step: _Step) -> None:
        ins = _unique(step.args)
        props = {"steps": A.ArrayAttr((_s(step.name),)),
                 "wiring": A.ArrayAttr((A.ArrayAttr(tuple(_i(ins.index(v))
                                                          for v in step.args)),))}
        if step.props:
            props["step_props"] = A.ArrayAttr((A.DictionaryAttr.of(step.props),))
        fit = _fitting_config(K.ElementwiseOp, ins, [step.out], props)
        if fit is not None:
            self.emit(step.op, K.ElementwiseOp, ins, [step.out], props, fit)
        else:
            self.generic(step.compute)
        step.op.erase()

    def _fused(self, chain: list) -> bool:
        ins: list = []
        wiring = []
        for index, step in enumerate(chain):
            refs = []
            for position, value in enumerate(step.args):
                if index and position == step.chain_position:
                    refs.append(None)
                    continue
                if value not in ins:
                    ins.append(value)
                refs.append(ins.index(value))
            wiring.append(refs)
        n = len(ins)
        wiring = [[n + index - 1 if r is None else r for r in refs]
                  for index, refs in enumerate(wiring)]
        props = {"steps": A.ArrayAttr(tuple(_s(s.name) for s in chain)),
                 "wiring": A.ArrayAttr(tuple(A.ArrayAttr(tuple(_i(r) for r in refs))
                                             for refs in wiring))}
        if any(s.props for s in chain):
            props["step_props"] = A.ArrayAttr(tuple(A.DictionaryAttr.of(s.props)
                                                    for s in chain))
        out = _chain_out(chain)
        fit = _fitting_config(K.ElementwiseOp, ins, [out], props)
        if fit is None:
            return False
        first, last = chain[0].op, chain[-1].op
        kernel, anchor = self.emit(last, K.ElementwiseOp, ins, [out], props, fit)
        intermediates = _unique([s.out for s in chain[:-1] if s.out is not out])
        _move_frees(first, last, kernel, anchor, ins, intermediates)
        for step in chain:
            step.op.erase()
        for value in intermediates:
            for user in value.users():
                if user.name == "buffer.dealloc":
                    user.erase()
            value.op.erase()
            self.result.erased_allocs += 1
        self.result.fused += len(chain) - 1
        return True


def _move_frees(first: Operation, last: Operation, kernel: Operation, anchor: Operation,
                ins: list, kept: list) -> None:
    """The deallocs between the fused computes `first`..`last` that free what the fused
    `kernel` reads (`ins`) move after it (after `anchor`, the last op `emit` inserted);
    those of `kept` (the intermediates the fusion erases) stay."""
    read_roots = {_root(v) for v in ins}
    moved = []
    op = first.next
    while op is not None and op is not last:
        following = op.next
        if op.name == "buffer.dealloc" and not any(op.operands[0] is v for v in kept) \
                and _root(op.operands[0]) in read_roots:
            op.detach()
            moved.append(op)
        op = following
    for dealloc in moved:
        kernel.parent.insert_after(anchor, dealloc)
        anchor = dealloc


def _unique(values: list) -> list:
    result = []
    for v in values:
        if v not in result:
            result.append(v)
    return result


EPILOGUE_PRODUCERS = ("graph.conv", "graph.matmul", "graph.gemm")


def _producer(chain: list, records: dict):
    """The conv/matmul/gemm compute right before `chain` (only BETWEEN_OK ops between),
    or None."""
    op = chain[0].op.prev
    while op is not None and op.name in BETWEEN_OK:
        op = op.prev
    record = records.get(op) if op is not None else None
    if record is None or record.name not in EPILOGUE_PRODUCERS or len(record.outs) != 1:
        return None
    return record


def _epilogue_fold(c: _Compute, chain: list):
    """(kernel class, ins, props, out, fit) of `c`'s kernel with `chain` as its epilogue,
    when the product T feeds only the chain (an activation alloc, or written in place by
    the chain), no chain in and no kernel in shares memory with the fused out, and the
    kernel op verifies; None otherwise."""
    rule = RULES.get(c.name)
    lowered = rule(c) if rule is not None else None
    if lowered is None or lowered[0] not in (K.Conv2dOp, K.MatmulOp) or lowered[2].get(
            "epilogue") is not None:
        return None
    cls, core, props = lowered
    t = c.outs[0]
    head = chain[0]
    positions = [i for i, v in enumerate(head.args) if v is t]
    if len(positions) != 1 or (positions[0] and K.STEPS[head.name][0] not in ("binary",
                                                                             "variadic")):
        return None
    out = _chain_out(chain)
    owner = getattr(t, "op", None)
    if out is not t and (owner is None or owner.name != "buffer.alloc"
                         or owner.kind.value != "activation"):
        return None
    members = {s.op for s in chain} | {c.op}
    if out is not t and any(user not in members and user.name != "buffer.dealloc"
                            for user in t.users()):
        return None
    t_root, out_root = _root(t), _root(out)
    chain_ins = []
    for index, step in enumerate(chain):
        chain_at = positions[0] if index == 0 else step.chain_position
        for i, v in enumerate(step.args):
            if i == chain_at:
                continue
            if _root(v) is t_root or _root(v) is out_root:
                return None
            if v not in chain_ins:
                chain_ins.append(v)
    if out is not t and any(_root(v) is out_root for v in core):
        return None
    ins = list(core) + chain_ins
    n = len(ins)
    wiring = []
    for index, step in enumerate(chain):
        chain_at = positions[0] if index == 0 else step.chain_position
        wiring.append(A.ArrayAttr(tuple(
            _i(n + index) if i == chain_at else _i(len(core) + chain_ins.index(v))
            for i, v in enumerate(step.args))))
    props = dict(props)
    props["epilogue"] = A.ArrayAttr(tuple(_s(s.name) for s in chain))
    props["epilogue_wiring"] = A.ArrayAttr(tuple(wiring))
    if chain_ins:
        props["epilogue_ins"] = _i(len(chain_ins))
    if any(s.props for s in chain):
        props["epilogue_props"] = A.ArrayAttr(tuple(A.DictionaryAttr.of(s.props)
                                                    for s in chain))
    fit = _fitting_config(cls, ins, [out], props)
    if fit is None:
        return None
    return cls, ins, props, out, fit


# Activations that exporters write as several elementwise ops reading the activation's
# input T twice — which stops a chain, and so the fold into the conv/matmul before it —
# and the one step (of kernel.STEPS) each is. A pattern: its ops in order, each op's
# operands: "T", "prev" (the op before's result) or a number (a one-element constant);
# add and mul match either operand order.
ACTIVATION_PATTERNS = {
    "graph.swish": [                 # SiLU: T * sigmoid(T) (YOLO, EfficientNet)
        [("graph.sigmoid", ["T"]), ("graph.mul", ["T", "prev"])],
    ],
    "graph.hard_swish": [            # T * relu6(T + 3) / 6 (PicoDet, MobileNetV3 exports)
        [("graph.add", ["T", 3.0]), ("graph.clip", ["prev", 0.0, 6.0]),
         ("graph.mul", ["T", "prev"]), ("graph.div", ["prev", 6.0])],
        [("graph.add", ["T", 3.0]), ("graph.clip", ["prev", 0.0, 6.0]),
         ("graph.mul", ["T", "prev"]), ("graph.mul", ["prev", 1 / 6])],
    ],
    "graph.gelu": [                  # T * 0.5 * (1 + erf(T / sqrt 2)) (PyTorch, Paddle)
        [("graph.div", ["T", math.sqrt(2)]), ("graph.erf", ["prev"]),
         ("graph.add", ["prev", 1.0]), ("graph.mul", ["T", "prev"]),
         ("graph.mul", ["prev", 0.5])],
        [("graph.mul", ["T", 1 / math.sqrt(2)]), ("graph.erf", ["prev"]),
         ("graph.add", ["prev", 1.0]), ("graph.mul", ["T", "prev"]),
         ("graph.mul", ["prev", 0.5])],
        [("graph.div", ["T", math.sqrt(2)]), ("graph.erf", ["prev"]),
         ("graph.add", ["prev", 1.0]), ("graph.mul", ["prev", 0.5]),
         ("graph.mul", ["T", "prev"])],
    ],
}
_COMMUTATIVE = ("graph.add", "graph.mul")
_PLAIN_PROPS = ("op", "operandSegmentSizes", "graphSegmentSizes")


def _constant_is(value, number: float) -> bool:
    """Whether `value` is a one-element constant equal to `number` (a constant that
    cannot be read, a side file gone, is not: the run reports it)."""
    owner = getattr(value, "op", None)
    if owner is None or owner.name != "buffer.constant" or any(
            d != 1 for d in value.type.shape):
        return False
    try:
        array = owner.properties["value"].to_numpy()
    except (ValueError, OSError):
        return False
    return array.size == 1 and abs(float(array.reshape(-1)[0]) - number) <= 1e-6 * abs(number)


def _match_operands(ins: list, spec: list, t, prev, commutative: bool) -> bool:
    def one(value, want) -> bool:
        if want == "T":
            return value is t
        if want == "prev":
            return value is prev
        return _constant_is(value, want)

    if len(ins) != len(spec):
        return False
    if all(one(v, w) for v, w in zip(ins, spec)):
        return True
    return commutative and len(ins) == 2 and one(ins[0], spec[1]) and one(ins[1], spec[0])


def _match_pattern(head, pattern: list, order: dict, by_op: dict):
    """(T, the member computes, Y) when `pattern` starts at compute `head`, else None."""
    name, spec = pattern[0]
    if head.properties["op"].value != name:
        return None
    ins, outs = head.operands[:-1], head.operands[-1:]
    if len(outs) != 1:
        return None
    t = ins[spec.index("T")] if "T" in spec and len(ins) == len(spec) else None
    if t is None or not _match_operands(ins, spec, t, None, name in _COMMUTATIVE):
        return None
    members = [head]
    for name, spec in pattern[1:]:
        prev = members[-1].operands[-1]
        after = sorted((u for u in prev.users() if u in by_op and u in order
                        and order[u] > order[members[-1]]), key=order.get)
        if not after:
            return None
        member = after[0]   # the next op reading the previous result: the pattern's
        if member.properties["op"].value != name or len(member.operands) != len(spec) + 1 \
                or not _match_operands(member.operands[:-1], spec, t, prev,
                                       name in _COMMUTATIVE):
            return None
        members.append(member)
    for member in members:
        if member.attributes or any(k not in _PLAIN_PROPS for k in member.properties):
            return None
        segments = member.properties.get("graphSegmentSizes")
        if segments is not None and any(v != 1 for v in segments.values):
            return None
    y = members[-1].operands[-1]
    if not all(m.operands[-1].type == t.type for m in members):
        return None
    return t, members, y


def _activations_as_steps(computes: list) -> list:
    """Each ACTIVATION_PATTERNS match T -> ... -> Y becomes one compute of its step,
    T -> Y, where the pattern's first op was (right after T's producer, where a fold
    looks for its chain), so the product T has one reader and folds with it into its
    conv or matmul as the epilogue. Only where nothing else sees the difference: every
    buffer a member writes is read by no other op between the first member and the
    last (nor after, but Y), and Y's alloc can move up to the first member. The
    intermediates' buffers go. Returns the computes, rewritten."""
    by_op = {op: index for index, op in enumerate(computes)}
    order = None   # op positions in the current block
    for head in list(computes):
        if head.parent is None or head not in by_op:
            continue
        if order is None or head not in order:
            order = {op: i for i, op in enumerate(head.parent.ops)}
        for step, patterns in ACTIVATION_PATTERNS.items():
            match = next((m for m in (_match_pattern(head, p, order, by_op) for p in patterns)
                          if m is not None), None)
            if match is not None and _replace_with_step(step, *match, order, computes, by_op):
                order = None
                break
    return [op for op in computes if op.parent is not None]


def _replace_with_step(step: str, t, members: list, y, order: dict, computes: list,
                       by_op: dict) -> bool:
    from palimpsest.dialects.buffer import ComputeOp
    from palimpsest.ir.types import i32

    head, last = members[0], members[-1]
    first, end = order[head], order[last]
    written = _unique([m.operands[-1] for m in members])
    for value in written:
        for user in value.users():
            if user in members or user.name == "buffer.dealloc" or value is y and (
                    order.get(user, end + 1) > end):
                continue
            if order.get(user, first) >= first:   # (another block's op: unknown)
                return False
    y_owner = getattr(y, "op", None)
    move = y_owner is not None and y_owner.name == "buffer.alloc" \
        and order.get(y_owner, -1) > first
    if move and (y_owner.operands or y_owner.parent is not head.parent):
        return False
    dropped = [v for v in written if v is not y and v is not t
               and getattr(v, "op", None) is not None and v.op.name == "buffer.alloc"
               and all(u in members or u.name == "buffer.dealloc" for u in v.users())]
    if move:
        y_owner.detach()
        head.parent.insert_before(head, y_owner)
    new = ComputeOp([t, y], [], {"op": A.StringAttr(step),
                                 "operandSegmentSizes": A.DenseArrayAttr(i32, (1, 1))})
    new.location, new.source_loc = last.location, last.source_loc
    head.parent.insert_before(head, new)
    computes[by_op[head]] = new
    by_op[new] = by_op[head]
    for member in members:
        by_op.pop(member, None)
        member.erase()
    for value in dropped:
        for user in list(value.users()):
            user.erase()
        value.op.erase()
    return True


def lower_to_kernels(module: Operation, fuse_elementwise: bool = True,
                     fuse_epilogues: bool = True, prepack_weights: bool = True,
                     f16_in_f32: bool = True) -> LowerToKernelsResult:
    """Rewrite every `buffer.compute` under `module` to kernel ops (see the module doc)."""
    result = LowerToKernelsResult()
    lowering = _Lowering(result)
    blocks: dict = {}
    for op in module.walk():
        if op.name == "buffer.compute" and op.parent is not None:
            blocks.setdefault(op.parent, []).append(op)
    packer = None
    if f16_in_f32:
        from palimpsest.passes.prepack_weights import _Packer

        packer = _Packer(module)
    for block, computes in blocks.items():
        if fuse_elementwise:
            computes = _activations_as_steps(computes)
        if f16_in_f32:   # (after the activations: onnxruntime fuses those too, unrounded)
            computes, lifted = f16_in_f32_computes(computes, packer)
            result.f16_in_f32 += lifted
        records = [_Compute(op) for op in computes]
        steps = {}
        for record in records:
            step = _as_step(record)
            if step is not None:
                steps[record.op] = step
        chains = _chains(block, steps, fuse_elementwise)
        folded = set()
        if fuse_epilogues:
            producers = {record.op: record for record in records if record.op not in steps}
            for chain in chains:
                record = _producer(chain, producers)
                if record is not None and record.op not in folded \
                        and lowering.epilogue(record, chain):
                    folded.add(record.op)
                    folded.add(id(chain))
        for record in records:
            if record.op not in steps and record.op not in folded:
                lowering.compute(record)
        for chain in chains:
            if id(chain) not in folded:
                lowering.chain(chain)
    if packer is not None:
        packer.erase_unread()
    if prepack_weights:
        from palimpsest.passes.prepack_weights import prepack_weights as prepack

        result.prepacked = prepack(module)
    return result


@register_pass
class LowerToKernels(ModulePass):
    name = "lower-to-kernels"
    summary = ("buffer level to kernel level: a kernel op per buffer.compute, workspaces "
               "as explicit allocs, chains of elementwise ops fused")
    fuse_elementwise: bool = True
    fuse_epilogues: bool = True
    prepack_weights: bool = True
    f16_in_f32: bool = True

    def apply(self, module: Operation) -> None:
        lower_to_kernels(module, fuse_elementwise=self.fuse_elementwise,
                         fuse_epilogues=self.fuse_epilogues,
                         prepack_weights=self.prepack_weights, f16_in_f32=self.f16_in_f32)


__all__ = ["LowerToKernels", "LowerToKernelsResult", "RULES", "lower_to_kernels"]
