"""Canonicalization of small recurrent layers that run side by side (attached with
canonicalize.attach; canonicalize.py imports this module).

Speech-enhancement exports split a feature axis into groups and give each group a GRU
of its own (GTCRN's grouped dual-path RNN: two bidirectional GRUs of 4 units over the
same 33 steps, twice over). A recurrent layer's steps run one after the other, each a
dozen small calls whatever the layer's width: at 4 units the calls are the whole cost.
Two independent layers of one kind, with the same attributes, steps and batch, are one
layer of both widths whose W, R (and B, P, initial states) hold theirs side by side,
block-diagonal per gate: each unit reads only its own layer's inputs and units, the
other block's weights being zeros. The merged layer makes the calls of one.

| root | rewrite |
|---|---|
| graph.gru, graph.lstm, graph.rnn | op2(x2, W2, R2, ...) after an independent op1(x1, W1, R1, ...) of the same kind and attributes, layout 0, constant W, R (and B, P), the same sequence_lens or none, hidden sizes summing to at most `MAX_HIDDEN` → op(concat(x1, x2), W, R, ...) with each result sliced back into op1's and op2's (x1 the same value as x2: no concat, W's blocks side by side over one input) |

Independent: op2 reads none of op1's results, directly or through the ops between them;
those of op1's users that come before op2 move to just after it (none of them feeds op2),
so the merged op, at op2's place, precedes every user of both. Each unit's values are
the products and sums of its own layer, plus exact zeros (x * 0 = 0 for finite x; an
infinite or NaN input would spread to the other layer's units), summed in an order the
BLAS picks: equal to the separate layers up to rounding.
"""

from __future__ import annotations

from palimpsest.dialects.graph.canonicalize import attach
from palimpsest.dialects.graph.ops_constant import ConstantOp
from palimpsest.ir import attributes as A
from palimpsest.ir.opdef import lookup_op
from palimpsest.ir.patterns import M, rules
from palimpsest.ir.types import TensorType, i32, i64

# the merged layer's units at most: past a few dozen, the zero blocks' work (R grows
# with the square of the width) starts to cost what the saved calls do
MAX_HIDDEN = 64

# ops searched back from the root for a layer to merge with
_SEARCH = 2000

_WEIGHTS = ("W", "R", "B", "P")
_STATES = ("initial_h", "initial_c")


def _is_constant(value) -> bool:
    return getattr(getattr(value, "op", None), "name", None) == "graph.constant"


def _array(value):
    """The array of a `graph.constant` value, or None where its data cannot be read."""
    try:
        return value.op.properties["value"].to_numpy()
    except (OSError, ValueError, KeyError):
        return None


def _layer(op):
    """(seq, batch, input size, hidden, {operand: value or None}) of a recurrent op the
    rewrite can merge, or None."""
    cls = type(op)
    layout = op.properties.get("layout")
    if layout is not None and layout.value != 0:
        return None
    operands = {name: getattr(op, name, None) for name in
                ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")}
    types = [operands[name].type for name in ("X", "R")]
    if not all(isinstance(t, TensorType) and t.has_static_shape and len(t.shape) == 3
               for t in types):
        return None
    (seq, batch, size), (_, rows, hidden) = types[0].shape, types[1].shape
    if rows != cls.gates * hidden or any(
            operands[name] is not None and not _is_constant(operands[name])
            for name in _WEIGHTS):
        return None
    if any(r.type.bounds is not None for r in op.results if isinstance(r.type, TensorType)):
        return None
    return seq, batch, size, hidden, operands


def _attributes(op) -> dict:
    """The properties two layers must share (all but their width and operand segments)."""
    return {k: v for k, v in op.properties.items()
            if k not in ("hidden_size", "operandSegmentSizes")}


def _partner(op, layer):
    """An earlier op of the block to merge `op` with, its layer, and the ops between them
    that use its results (directly or through each other; in block order): same kind,
    attributes, steps, batch and element type, and `op` not among those users."""
    seq, batch, _, hidden, operands = layer
    element = operands["X"].type.element_type
    attributes = _attributes(op)
    candidate, searched = op.prev, 0
    while candidate is not None and searched < _SEARCH:
        if candidate.name == op.name and _attributes(candidate) == attributes:
            found = _layer(candidate)
            if found is not None and found[:2] == (seq, batch) \
                    and found[3] + hidden <= MAX_HIDDEN \
                    and found[4]["X"].type.element_type == element \
                    and found[4]["sequence_lens"] is operands["sequence_lens"] \
                    and all((found[4][s] is None) == (operands[s] is None) for s in _STATES):
                users = _users_before(candidate, op)
                if users is not None:
                    return candidate, found, users
        candidate, searched = candidate.prev, searched + 1
    return None


def _users_before(first, stop):
    """The ops after `first` and before `stop` (same block) that read `first`'s results,
    directly or through each other (reads in their regions included), in block order;
    None where `stop` is one of them."""
    tainted = {first}
    users = []
    current = first.next
    while current is not None:
        reads = any(getattr(v, "op", None) in tainted
                    for nested in current.walk() for v in nested.operands)
        if current is stop:
            return None if reads else users
        if reads:
            tainted.add(current)
            users.append(current)
        current = current.next
    return None


def _side_by_side(first, second, gates: int, x_shared: bool):
    """W or R of two layers (dirs x gates*H x K each) as one, block-diagonal per gate
    (or, where both read the same input, W's rows side by side over one K)."""
    import numpy as np

    dirs, rows1, k1 = first.shape
    _, rows2, k2 = second.shape
    h1, h2 = rows1 // gates, rows2 // gates
    width = k1 if x_shared else k1 + k2
    merged = np.zeros((dirs, gates, h1 + h2, width), np.result_type(first, second))
    merged[:, :, :h1, :k1] = first.reshape(dirs, gates, h1, k1)
    merged[:, :, h1:, width - k2:] = second.reshape(dirs, gates, h2, k2)
    return merged.reshape(dirs, gates * (h1 + h2), width)


def _per_unit(first, second, blocks: int, dirs: int, widths):
    """B (blocks = 2 x gates) or P (3) of two layers, each block's units side by side; a
    layer without one contributes zeros."""
    import numpy as np

    parts = [np.zeros((dirs, blocks, w)) if a is None else a.reshape(dirs, blocks, w)
             for a, w in zip((first, second), widths)]
    return np.concatenate(parts, axis=2).reshape(dirs, -1)


def merge_side_by_side(rewriter, op):
    layer = _layer(op)
    if layer is None or not any(r.uses for r in op.results):
        return None
    found = _partner(op, layer)
    if found is None:
        return None
    other, other_layer, users = found
    seq, batch, k2, h2, ops2 = layer
    _, _, k1, h1, ops1 = other_layer
    # each layer's weights (None: not given), read once, before anything is built
    weights = {name: [None if ops[name] is None else _array(ops[name])
                      for ops in (ops1, ops2)] for name in _WEIGHTS}
    if any(array is None and ops[name] is not None for name, arrays in weights.items()
           for array, ops in zip(arrays, (ops1, ops2))):
        return None   # (a side file gone: the run reports it)
    cls = type(op)
    hidden = h1 + h2
    x_shared = ops1["X"] is ops2["X"]
    dirs = ops2["W"].type.shape[0]
    element = ops2["X"].type.element_type
    gates = cls.gates

    import numpy as np

    from palimpsest.dialects.graph.evaluate import dense_attr

    dtype = weights["W"][1].dtype

    def constant(array, hint):
        shaped = TensorType(array.shape, element)
        attr = dense_attr(array.astype(dtype), shaped, rewriter.unique_resource_key, hint)
        return rewriter.insert(ConstantOp([], [shaped], {"value": attr})).results[0]

    def joined(values, shape, axis):
        return rewriter.create(lookup_op("graph.concat"), values,
                               [TensorType(shape, element)],
                               {"axis": A.IntegerAttr(axis, i64)}).results[0]

    x = ops2["X"] if x_shared else joined([ops1["X"], ops2["X"]], (seq, batch, k1 + k2), 2)
    operands = {"X": x,
                "W": constant(_side_by_side(*weights["W"], gates, x_shared), "rnn_w_merged"),
                "R": constant(_side_by_side(*weights["R"], gates, False), "rnn_r_merged"),
                "sequence_lens": ops2["sequence_lens"]}
    for name, blocks in (("B", 2 * gates), ("P", 3)):
        if any(a is not None for a in weights[name]):
            operands[name] = constant(_per_unit(*weights[name], blocks, dirs, (h1, h2)),
                                      f"rnn_{name.lower()}_merged")
    for name in _STATES:
        if ops2[name] is not None:
            operands[name] = joined([ops1[name], ops2[name]], (dirs, batch, hidden), 2)
    order = [name for name in ("X", "W", "R", "B", "sequence_lens", "initial_h",
                               "initial_c", "P") if hasattr(cls, name)]
    values = [operands.get(name) for name in order]
    count = max(len(op.results), len(other.results))
    types = [TensorType((seq, dirs, batch, hidden), element)] + \
        [TensorType((dirs, batch, hidden), element)] * (count - 1)
    properties = dict(op.properties)
    properties["hidden_size"] = A.IntegerAttr(hidden, i64)
    properties["operandSegmentSizes"] = A.DenseArrayAttr(
        i32, tuple(0 if v is None else 1 for v in values))
    merged = rewriter.create(cls, [v for v in values if v is not None], types, properties)

    def vector(value):
        return rewriter.insert(ConstantOp.of([value], TensorType((1,), i64))).results[0]

    def part(result, start, end):
        if not result.uses:
            return None
        axis = len(result.type.shape) - 1
        return rewriter.create(
            lookup_op("graph.slice"),
            [merged.results[result.index], vector(start), vector(end), vector(axis)],
            [result.type], {"operandSegmentSizes": A.DenseArrayAttr(i32, (1, 1, 1, 1, 0))}
        ).results[0]

    # op1's users that came before op2 go after it, in their order (none feeds op2)
    anchor = op
    for user in users:
        op.parent.insert_after(anchor, user.detach())
        rewriter.listener.notify_op_modified(user)
        anchor = user
    rewriter.replace_op(other, [part(r, 0, h1) for r in other.results])
    rewriter.replace_op(op, [part(r, h1, hidden) for r in op.results])
    return True


PATTERNS = rules(*((M(name), merge_side_by_side)
                   for name in ("graph.gru", "graph.lstm", "graph.rnn")))

attach(PATTERNS)
