"""Canonicalization of the graph dialect's two-operand Einsum into a matmul (attached
with canonicalize.attach; canonicalize.py imports this module), as onnxruntime's Einsum
kernel computes a contraction: each operand transposed to (batch, free, contracted)
order and flattened to 3-D (2-D without batch labels), one batched matmul, the result
unflattened and transposed to the equation's output order. The reference runs
np.einsum on the host, one op; this is a matmul kernel on every backend (DeepFilterNet's
grouped linears `btgi,gih->btgh`, its inverse DFT `fi,fij->j`).

| root         | rewrite                                                                 |
|--------------|-------------------------------------------------------------------------|
| graph.einsum | einsum("A,B->O", a, b), explicit, static shapes, every label of A or B  |
|              | in the other operand or in O, none twice in one operand →               |
|              | transpose(reshape(matmul(reshape(transpose(a)), reshape(transpose(b))))) |
|              | (identity transposes and reshapes left out)                              |

The products sum in another order than np.einsum's loops: float results within
rounding, as onnxruntime's are.
"""

from __future__ import annotations

from math import prod

from palimpsest.dialects.graph.canonicalize import attach
from palimpsest.dialects.graph.ops_constant import ConstantOp
from palimpsest.ir import attributes as A
from palimpsest.ir.opdef import lookup_op
from palimpsest.ir.patterns import M, rules
from palimpsest.ir.types import TensorType, i64


def _labels(equation: str):
    """(labels of a, labels of b, output labels) of an explicit two-operand equation
    without ellipses or repeated labels in an operand; None otherwise."""
    text = equation.replace(" ", "")
    if "->" not in text or "." in text:
        return None
    ins, out = text.split("->")
    parts = ins.split(",")
    if len(parts) != 2 or any(len(set(p)) != len(p) for p in parts + [out]):
        return None
    return parts[0], parts[1], out


def einsum_to_matmul(rewriter, op):
    labels = _labels(op.properties["equation"].value)
    if labels is None or len(op.operands) != 2:
        return None
    a_labels, b_labels, out_labels = labels
    a, b = op.operands
    result = op.results[0].type
    shapes = [getattr(v.type, "shape", None) for v in (a, b, op.results[0])]
    if any(s is None or None in s for s in shapes):
        return None
    size = {}
    for letters, shape in ((a_labels, shapes[0]), (b_labels, shapes[1])):
        for letter, dim in zip(letters, shape):
            if size.setdefault(letter, dim) != dim:
                return None   # (a broadcast label: left to the reference)
    batch = [c for c in out_labels if c in a_labels and c in b_labels]
    left = [c for c in out_labels if c in a_labels and c not in b_labels]
    right = [c for c in out_labels if c in b_labels and c not in a_labels]
    contracted = [c for c in a_labels if c in b_labels and c not in out_labels]
    if len(batch) + len(left) + len(contracted) != len(a_labels) or \
            len(batch) + len(right) + len(contracted) != len(b_labels):
        return None   # a label summed within one operand
    element = result.element_type
    if TensorType(tuple(size[c] for c in out_labels), element) != result:
        return None   # (decided before any op is made: a bounded or encoded result)

    def made(name, operands, shape, properties=None):
        return rewriter.create(lookup_op(name), operands, [TensorType(tuple(shape), element)],
                               properties or {}).results[0]

    def transposed(source, letters, order):
        perm = [letters.index(c) for c in order]
        if perm == list(range(len(perm))):
            return source
        return made("graph.transpose", [source], [size[c] for c in order],
                    {"perm": A.DenseArrayAttr(i64, tuple(perm))})

    def reshaped(source, shape):
        if tuple(shape) == tuple(source.type.shape):
            return source
        dims = TensorType((len(shape),), i64)
        target = rewriter.create(ConstantOp, [], [dims], {
            "value": A.DenseElementsAttr(dims, tuple(shape))}).results[0]
        return made("graph.reshape", [source, target], shape)

    lead = [prod(size[c] for c in batch)] if batch else []
    rows, depth = prod(size[c] for c in left), prod(size[c] for c in contracted)
    columns = prod(size[c] for c in right)
    lhs = reshaped(transposed(a, a_labels, batch + left + contracted), lead + [rows, depth])
    rhs = reshaped(transposed(b, b_labels, batch + contracted + right),
                   lead + [depth, columns])
    product = made("graph.matmul", [lhs, rhs], lead + [rows, columns])
    order = batch + left + right
    return transposed(reshaped(product, [size[c] for c in order]), order, list(out_labels))


PATTERNS = rules((M("graph.einsum"), einsum_to_matmul))

attach(PATTERNS)
