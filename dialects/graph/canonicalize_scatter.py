"""Canonicalization of a ScatterND that writes one box of its data (attached with
canonicalize.attach; canonicalize.py imports this module).

PyTorch exports a slice assignment (`cache[:, :, k:k + 2] = x`, the rolling caches of
streaming models) as ScatterND with constant indices that spell out every coordinate
of the slice. Run as written, each run scatters element by element on the host (and on
OpenCL reads the data back to do it). When the indices name one box that differs from
the data's full extent along one axis only, the result is the data's part before the
box, the updates and its part after, joined along that axis: two slices and a concat,
kernels on every backend, exact (a box has no duplicate indices, so the order of the
writes cannot matter).

| root            | rewrite                                                            |
|-----------------|--------------------------------------------------------------------|
| graph.scatter_nd | scatter_nd(data, indices, updates), reduction none, constant       |
|                 | indices of shape (n_0, ..., n_{d-1}, d) holding start + (i_0, ...,  |
|                 | i_{d-1}) at (i_0, ..., i_{d-1}), the box full but along one axis a → |
|                 | concat(slice(data, [:s] on a), updates, slice(data, [s + n_a:] on a), |
|                 | a) (empty parts left out; the box the whole data: updates)         |
"""

from __future__ import annotations

from palimpsest.dialects.graph.canonicalize import _const, attach
from palimpsest.dialects.graph.ops_constant import ConstantOp
from palimpsest.ir import attributes as A
from palimpsest.ir.opdef import lookup_op
from palimpsest.ir.patterns import M, V, rules
from palimpsest.ir.types import TensorType, i32, i64

# indices are read (and compared with the box they would span) up to this many elements
_MAX_INDICES = 1 << 20


def _box(indices, data_shape) -> list | None:
    """[(start, size)] per indexed axis when `indices` (an integer array of shape (n_0,
    ..., n_{d-1}, d)) holds start + (i_0, ..., i_{d-1}) at each (i_0, ..., i_{d-1}),
    negative indices counted from the end as ONNX does; None otherwise (out of range
    included: the kernel reports it)."""
    import numpy as np

    depth = indices.shape[-1]
    if indices.ndim != depth + 1 or not indices.size:
        return None
    dims = np.asarray(data_shape[:depth], np.int64)
    if np.any(indices < -dims) or np.any(indices >= dims):
        return None
    normalized = np.where(indices < 0, indices + dims, indices)
    start = normalized[(0,) * depth]
    grid = np.stack(np.meshgrid(*(np.arange(n) for n in indices.shape[:-1]), indexing="ij"),
                    axis=-1)
    if not np.array_equal(normalized, start + grid):
        return None
    return [(int(s), int(n)) for s, n in zip(start, indices.shape[:-1])]


def scatter_box_to_concat(rewriter, op, data, indices, updates):
    reduction = op.properties.get("reduction")
    if reduction is not None and reduction.value != "none":
        return None
    result = op.results[0].type
    shapes = [getattr(v.type, "shape", None) for v in (data, updates)]
    if any(s is None or None in s for s in shapes) or result != data.type \
            or result.bounds is not None:
        return None
    data_shape, updates_shape = shapes
    attr = indices.properties.get("value")
    index_type = getattr(attr, "type", None)
    if not isinstance(index_type, TensorType) or not index_type.has_static_shape \
            or not 1 <= len(index_type.shape) or index_type.num_elements() > _MAX_INDICES:
        return None
    depth = index_type.shape[-1]
    if not 1 <= depth <= len(data_shape) or tuple(updates_shape) != \
            tuple(index_type.shape[:-1]) + tuple(data_shape[depth:]):
        return None
    box = _box(attr.to_numpy(), data_shape)
    if box is None:
        return None
    partial = [axis for axis, (start, size) in enumerate(box)
               if (start, size) != (0, data_shape[axis])]
    if not partial:
        return updates if updates.type == result else None
    if len(partial) > 1:
        return None
    axis = partial[0]
    start, size = box[axis]
    element = result.element_type

    def vector(values):
        return rewriter.insert(ConstantOp.of(values, TensorType((len(values),), i64))).results[0]

    def part(begin, end):
        shape = list(data_shape)
        shape[axis] = end - begin
        return rewriter.create(
            lookup_op("graph.slice"), [data, vector([begin]), vector([end]), vector([axis])],
            [TensorType(tuple(shape), element)],
            {"operandSegmentSizes": A.DenseArrayAttr(i32, (1, 1, 1, 1, 0))}).results[0]

    pieces = ([part(0, start)] if start else []) + [updates] + (
        [part(start + size, data_shape[axis])] if start + size < data_shape[axis] else [])
    return rewriter.create(lookup_op("graph.concat"), pieces, [result],
                           {"axis": A.IntegerAttr(axis, i64)}).results[0]


PATTERNS = rules((M("graph.scatter_nd", V("data"), _const("indices"), V("updates")),
                  scatter_box_to_concat))

attach(PATTERNS)
