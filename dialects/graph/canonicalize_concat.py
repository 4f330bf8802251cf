"""Canonicalization of a slice that reads one operand of a concat (attached with
canonicalize.attach; canonicalize.py imports this module).

Streaming exports build a step's context by concatenating the cache and the new frame,
then slice the parts each layer reads; the slice of the cache alone, or of the frame
alone, is a copy of (part of) an operand the concat copied in the first place. When a
slice takes a range of the concat's axis that lies within one operand (and every other
axis whole), it reads that operand: the operand itself where the range is all of it,
else a slice of it. The concat then goes where nothing else reads it. Exact (the same
elements, moved once fewer); gtcrn: 15 of its 27 slices of a concat.

| root        | rewrite                                                                |
|-------------|------------------------------------------------------------------------|
| graph.slice | slice(concat(x_0, ..., x_n, a), [s:e] on a and any ranges of the other |
|             | axes, steps 1), [s:e] within x_i's rows o_i .. o_i + w_i → x_i when    |
|             | the slice is all of it, else slice(x_i, [s - o_i : e - o_i] on a and   |
|             | the other ranges)                                                      |
"""

from __future__ import annotations

from palimpsest.dialects.graph.canonicalize import _same, _static_shape, attach
from palimpsest.dialects.graph.ops_base import constant_values
from palimpsest.dialects.graph.ops_constant import ConstantOp
from palimpsest.dialects.graph.shape_rules_data import slice_dim
from palimpsest.ir import attributes as A
from palimpsest.ir.opdef import lookup_op
from palimpsest.ir.patterns import M, rules
from palimpsest.ir.types import TensorType, i32, i64


def _ranges(op, shape) -> dict | None:
    """{axis: (start, end)} of slice `op` on a tensor of `shape`, ONNX's negative and
    out-of-range bounds resolved; None unless every bound is a constant and every step 1."""
    rank = len(shape)
    starts, ends = constant_values(op.starts), constant_values(op.ends)
    if starts is None or ends is None or len(starts) != len(ends):
        return None
    axes = range(len(starts)) if op.axes is None else constant_values(op.axes)
    steps = [1] * len(starts) if op.steps is None else constant_values(op.steps)
    if axes is None or steps is None or len(axes) != len(starts) or len(steps) != len(starts):
        return None
    ranges = {}
    for axis, start, end, step in zip(axes, starts, ends, steps):
        axis = int(axis)
        if int(step) != 1 or not -rank <= axis < rank or axis % rank in ranges:
            return None
        start, end, _ = slice_dim(shape[axis % rank], int(start), int(end), 1)
        ranges[axis % rank] = (start, end)
    return ranges


def slice_within_concat(rewriter, op, concat):
    shape = _static_shape(concat.results[0])
    if shape is None or any(_static_shape(v) is None for v in concat.operands):
        return None
    rank = len(shape)
    axis = concat.properties["axis"].value % rank if rank else 0
    ranges = _ranges(op, shape)
    if ranges is None:
        return None
    start, end = ranges.get(axis, (0, shape[axis]))
    offset = 0
    for part in concat.operands:
        width = part.type.shape[axis]
        if offset <= start < end <= offset + width:
            ranges[axis] = (start - offset, end - offset)
            kept = {a: r for a, r in sorted(ranges.items()) if r != (0, part.type.shape[a])}
            if not kept:
                return _same(part, op.results[0])

            def vector(values):
                return rewriter.insert(ConstantOp.of(
                    list(values), TensorType((len(kept),), i64))).results[0]

            return rewriter.create(
                lookup_op("graph.slice"),
                [part, vector(r[0] for r in kept.values()), vector(r[1] for r in kept.values()),
                 vector(kept)], [op.results[0].type],
                {"operandSegmentSizes": A.DenseArrayAttr(i32, (1, 1, 1, 1, 0))}).results[0]
        offset += width
    return None


PATTERNS = rules((M("graph.slice", M("graph.concat", ..., bind="concat"), ...),
                  slice_within_concat))

attach(PATTERNS)
