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
| conv | conv2d | 4-D, f32/f64; auto_pad SAME_* needs static spatial dims |
| conv_transpose | conv_transpose (workspace: `cols`) | rank >= 3, f32/f64, static kernel dims; auto_pad SAME_* and output_shape need static spatial dims |
| matmul, gemm | matmul | same element types (gemm: f32/f64) |
| max_pool (one result), average_pool | pool2d | 4-D; auto_pad as conv |
| global_average_pool, global_max_pool | reduce (mean/max over the spatial dims) | f32/f64 |
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
own one-step `kernel.elementwise`.
"""

from __future__ import annotations

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
from palimpsest.passes.pass_manager import ModulePass, register_pass


@dataclass
class LowerToKernelsResult:
    kernels: dict = field(default_factory=dict)   # kernel op name -> count
    generic: dict = field(default_factory=dict)   # graph op lowered to kernel.generic -> count
    fused: int = 0               # computes merged into the compute before them
    epilogues: int = 0           # elementwise chains folded into a conv/matmul as its epilogue
    prepacked: int = 0           # kernel operands that now read a prepacked constant
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
        read_roots = {_root(v) for v in ins}
        moved = []
        op = first.next
        while op is not None and op is not last:
            following = op.next
            if op.name == "buffer.dealloc" and op.operands[0] is not t \
                    and _root(op.operands[0]) in read_roots:
                op.detach()
                moved.append(op)
            op = following
        for dealloc in moved:
            kernel.parent.insert_after(anchor, dealloc)
            anchor = dealloc
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
        # deallocs between the fused computes that free what the chain reads move after it
        read_roots = {_root(v) for v in ins}
        intermediates = _unique([s.out for s in chain[:-1] if s.out is not out])
        moved = []
        op = first.next
        while op is not None and op is not last:
            following = op.next
            if op.name == "buffer.dealloc" and op.operands[0] not in intermediates \
                    and _root(op.operands[0]) in read_roots:
                op.detach()
                moved.append(op)
            op = following
        for dealloc in moved:
            kernel.parent.insert_after(anchor, dealloc)
            anchor = dealloc
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


def _silu_as_swish(computes: list) -> list:
    """SiLU as exporters write it, S = sigmoid(T); Y = T * S (YOLO's convs, EfficientNet's
    blocks), with S read by the mul alone: one `graph.swish` T -> Y in the sigmoid's
    place (Y's alloc moved up to it; nothing between may use Y), so the chain reads T
    once and folds into T's conv as its epilogue (two readers of T stopped both). S's
    buffer goes unless the mul wrote in place into it. Returns the computes, rewritten."""
    from palimpsest.dialects.buffer import ComputeOp
    from palimpsest.ir.types import i32

    by_op = {op: index for index, op in enumerate(computes)}
    erased = set()
    block = order = None   # (op positions in the block, for what lies between two ops)
    for sigmoid in computes:
        if sigmoid in erased or sigmoid.properties["op"].value != "graph.sigmoid" \
                or len(sigmoid.operands) != 2:
            continue
        t, s = sigmoid.operands
        owner = getattr(s, "op", None)
        muls = [u for u in s.users() if u in by_op and u.properties["op"].value == "graph.mul"
                and len(u.operands) == 3 and {id(v) for v in u.operands[:2]} == {id(t), id(s)}]
        if owner is None or owner.name != "buffer.alloc" or len(muls) != 1 or t is s:
            continue
        mul = muls[0]
        y = mul.operands[2]
        if mul.attributes or any(k not in ("op", "operandSegmentSizes") for k in mul.properties) \
                or not t.type == s.type == y.type:
            continue
        # the swish goes where the sigmoid was (right after T's producer, where a fold
        # looks for its chain): Y must exist there and nothing in between may use it; S
        # may have no other reader (but Y's, after the mul, where the mul wrote S)
        if order is None or sigmoid.parent is not block:
            block = sigmoid.parent
            order = {op: i for i, op in enumerate(block.ops)}
        if mul not in order:
            continue
        between = lambda u: order[sigmoid] < order.get(u, -1) < order[mul]  # noqa: E731
        others = [u for u in s.users() if u not in (sigmoid, mul) and u.name != "buffer.dealloc"]
        if others and (y is not s or any(order.get(u, -1) < order[mul] for u in others)):
            continue
        y_owner = getattr(y, "op", None)
        if y is not s and (any(between(u) for u in y.users()) or y is not t and (
                y_owner is None or y_owner.name != "buffer.alloc" or y_owner.operands
                or y_owner.parent is not block)):
            continue
        if y is not s and y is not t:
            y_owner.detach()
            sigmoid.parent.insert_before(sigmoid, y_owner)
        swish = ComputeOp([t, y], [], {"op": A.StringAttr("graph.swish"),
                                       "operandSegmentSizes": A.DenseArrayAttr(i32, (1, 1))})
        swish.location, swish.source_loc = mul.location, mul.source_loc
        sigmoid.parent.insert_before(sigmoid, swish)
        computes[by_op[sigmoid]] = swish
        by_op[swish] = by_op[sigmoid]
        del by_op[mul]
        mul.erase()
        sigmoid.erase()
        erased.add(sigmoid)
        order = None
        if y is not s:
            for user in list(s.users()):
                user.erase()
            owner.erase()
    return [op for op in computes if op not in erased and op.parent is not None]


def lower_to_kernels(module: Operation, fuse_elementwise: bool = True,
                     fuse_epilogues: bool = True,
                     prepack_weights: bool = True) -> LowerToKernelsResult:
    """Rewrite every `buffer.compute` under `module` to kernel ops (see the module doc)."""
    result = LowerToKernelsResult()
    lowering = _Lowering(result)
    blocks: dict = {}
    for op in module.walk():
        if op.name == "buffer.compute" and op.parent is not None:
            blocks.setdefault(op.parent, []).append(op)
    for block, computes in blocks.items():
        if fuse_elementwise:
            computes = _silu_as_swish(computes)
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
    if prepack_weights:
        from palimpsest.passes.prepack_weights import prepack_weights as prepack

        result.prepacked = prepack(module)
    return result


@register_pass
@dataclass(frozen=True)
class LowerToKernels(ModulePass):
    name = "lower-to-kernels"
    summary = ("buffer level to kernel level: a kernel op per buffer.compute, workspaces "
               "as explicit allocs, chains of elementwise ops fused")
    fuse_elementwise: bool = True
    fuse_epilogues: bool = True
    prepack_weights: bool = True

    def apply(self, module: Operation) -> None:
        lower_to_kernels(module, fuse_elementwise=self.fuse_elementwise,
                         fuse_epilogues=self.fuse_epilogues,
                         prepack_weights=self.prepack_weights)


__all__ = ["LowerToKernels", "LowerToKernelsResult", "RULES", "lower_to_kernels"]
