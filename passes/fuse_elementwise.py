"""Elementwise fusion for `lower-to-kernels` (passes/lower_to_kernels.py, whose module
doc gives the rules): which computes a `kernel.elementwise` step can run (`_as_step`)
and which consecutive steps form one chain (`_link`, `_chains`). The pass emits each
chain as one kernel op."""

from __future__ import annotations

from palimpsest.dialects import kernel as K
from palimpsest.ir import attributes as A
from palimpsest.ir.types import i32
from palimpsest.passes.kernel_rules import _Compute, _element, _shape

# ops that may lie between two fused computes: none of them writes memory
BETWEEN_OK = ("buffer.alloc", "buffer.dealloc", "buffer.constant", "buffer.reshape",
              "buffer.view", "buffer.dim")


# ---------------------------------------------------------------------------
# Elementwise steps and chains


class _Step:
    """An elementwise compute that a `kernel.elementwise` step can run."""

    __slots__ = ("compute", "op", "name", "args", "props", "out", "chain_position")

    def __init__(self, compute: _Compute, args: list, props: dict):
        self.compute = compute
        self.op = compute.op
        self.name = compute.name
        self.args = args          # buffer values, in the step's operand order
        self.props = props        # graph properties (attributes)
        self.out = compute.outs[0]
        self.chain_position = None  # which arg is the chain value (steps after the first)


def _as_step(c: _Compute) -> _Step | None:
    if c.name not in K.STEPS or len(c.outs) != 1:
        return None
    form, kind, _ = K.STEPS[c.name]
    out = c.outs[0]
    element = _element(out)
    if not K.is_numeric(element) or (kind == "float" and not K.is_float(element)):
        return None
    props = {k: v for k, v in c.props.items() if k != "operandSegmentSizes"}
    if form == "clip":
        x = c["input"]
        if x is None:
            return None
        args = [x]
        present = []
        for slot in ("min", "max"):
            bound = c[slot]
            if bound is not None and bound.type.num_elements() != 0:
                if bound.type.num_elements() != 1:
                    return None
                args.append(bound)
                present.append(1)
            else:
                present.append(0)
        if present == [0, 1]:
            props["operandSegmentSizes"] = A.DenseArrayAttr(i32, (1, 0, 1))
    elif form == "batch_norm":
        args = list(c.ins)
        if c.prop("training_mode", 0) or len(args) != 5 or len(_shape(args[0])) < 2 \
                or any(len(_shape(v)) != 1 for v in args[1:]):
            return None
    else:
        args = [v for v in c.ins]
        low, high = K.STEP_ARITY[form]
        if len(args) < low or (high is not None and len(args) > high):
            return None
    if any(_element(v) != element for v in args):
        return None
    return _Step(c, args, props)


def _root(value):
    """The buffer `value` is memory of: through reshapes and views to an alloc, an
    argument, a constant or a call result."""
    while True:
        owner = getattr(value, "op", None)
        if owner is None or owner.name not in ("buffer.reshape", "buffer.view"):
            return value
        value = owner.operands[0]


def _chain_out(chain: list):
    return chain[-1].out


def _link(chain: list, between: list, step: _Step) -> bool:
    """Whether `step` can join `chain` (see passes/lower_to_kernels.py's module doc);
    sets its chain position."""
    tail = chain[-1]
    t = tail.out
    if _element(step.out) != _element(t):
        return False
    for op in between:
        if op.name not in BETWEEN_OK:
            return False
        if t in op.operands and op.name != "buffer.dealloc":
            return False
    positions = [i for i, v in enumerate(step.args) if v is t]
    if len(positions) != 1:
        return False
    position = positions[0]
    form = K.STEPS[step.name][0]
    if position and form not in ("binary", "variadic"):
        return False
    t_root = _root(t)
    if any(_root(v) is t_root for i, v in enumerate(step.args) if i != position):
        return False
    if step.out is t:
        new_out = t
    else:
        owner = getattr(t, "op", None)
        if owner is None or owner.name != "buffer.alloc" or \
                owner.kind.value != "activation":
            return False
        members = {s.op for s in chain}
        for user in t.users():  # T carries only the chain's values (in place or not)
            if user not in members and user is not step.op and user.name != "buffer.dealloc":
                return False
        new_out = step.out
    out_root = _root(new_out)
    for index, member in enumerate(chain + [step]):
        for i, v in enumerate(member.args):
            if index and i == member.chain_position:
                continue
            if member is step and i == position:
                continue
            if _root(v) is out_root and (index or v is not new_out):
                return False
    step.chain_position = position
    return True


def _chains(block, steps: dict, fuse: bool) -> list:
    """The elementwise chains of `block`, each a list of _Step in program order."""
    chains, current, between = [], None, []
    for op in block.ops:
        step = steps.get(op)
        if step is not None:
            if fuse and current is not None and _link(current, between, step):
                current.append(step)
            else:
                current = [step]
                chains.append(current)
            between = []
        elif current is not None:
            if op.name in BETWEEN_OK:
                between.append(op)
            else:
                current, between = None, []
    return chains
