"""Folding integer shape arithmetic on plain Python lists (row-major, elements may be
None): the `*_values` functions. No numpy: palimpsest-opt must start without it.
`shapes.py` re-exports every public name here.
"""

from __future__ import annotations

from typing import Callable, Sequence

from palimpsest.dialects.graph.shape_rules_data import range_length, shape_op_range, slice_dim
from palimpsest.dialects.graph.shapes import (
    Shape, ShapeError, broadcast, normalize_axes, normalize_axis, product,
)


# ---------------------------------------------------------------------------
# Folding integer shape arithmetic on plain lists (row-major, elements may be None)


def _strides(shape) -> list:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return list(reversed(strides))


def _indices(shape):
    """All multi-indices of a static shape, row-major."""
    total = product(shape)
    strides = _strides(shape)
    for flat in range(total):
        yield tuple((flat // s) % d if d else 0 for s, d in zip(strides, shape))


def shape_values(x, start: int = 0, end: int | None = None) -> list:
    lo, hi = shape_op_range(len(x), start, end)
    return list(x[lo:hi])


def gather_values(data: list, data_shape, indices: list, indices_shape, axis: int = 0) -> list:
    axis = normalize_axis(axis, len(data_shape))
    outer = product(data_shape[:axis])
    size = data_shape[axis]
    inner = product(data_shape[axis + 1:])
    result = []
    for o in range(outer):
        for index in indices:
            if index is None:
                result.extend([None] * inner)
                continue
            if not -size <= index < size:
                raise ShapeError(f"gather index {index} is out of range for dimension {axis} "
                                 f"of size {size}")
            index = index + size if index < 0 else index
            base = (o * size + index) * inner
            result.extend(data[base:base + inner])
    return result


def concat_values(parts: Sequence, axis: int = 0) -> list:
    """`parts` is a list of (values, shape)."""
    rank = len(parts[0][1])
    axis = normalize_axis(axis, rank)
    outer = product(parts[0][1][:axis])
    result = []
    for o in range(outer):
        for values, shape in parts:
            chunk = product(shape[axis:])
            result.extend(values[o * chunk:(o + 1) * chunk])
    return result


def slice_values(values: list, shape, starts, ends, axes=None, steps=None) -> list:
    count = len(starts)
    axes = list(range(count)) if axes is None else normalize_axes(axes, len(shape))
    steps = [1] * count if steps is None else steps
    ranges = [range(d) for d in shape]
    for j, axis in enumerate(axes):
        start, stop, length = slice_dim(shape[axis], starts[j], ends[j], steps[j])
        ranges[axis] = range(start, start + length * steps[j], steps[j])
    strides = _strides(shape)
    result = []

    def visit(level, offset):
        if level == len(shape):
            result.append(values[offset])
            return
        for i in ranges[level]:
            visit(level + 1, offset + i * strides[level])

    visit(0, 0)
    return result


def transpose_values(values: list, shape, perm=None) -> list:
    perm = list(reversed(range(len(shape)))) if perm is None else list(perm)
    out_shape = [shape[p] for p in perm]
    strides = _strides(shape)
    return [values[sum(idx[k] * strides[perm[k]] for k in range(len(perm)))]
            for idx in _indices(out_shape)]


def broadcast_values(fn: Callable, operands: Sequence) -> tuple[list, Shape]:
    """Apply `fn` elementwise to (values, shape) operands with numpy broadcasting.
    An element is None when any input element is None or `fn` returns None."""
    shapes = [tuple(s) for _, s in operands]
    out_shape = broadcast(*shapes)
    rank = len(out_shape)
    prepared = []
    for values, shape in operands:
        padded = (1,) * (rank - len(shape)) + shape
        strides = _strides(padded)
        prepared.append((values, [0 if d == 1 else s for d, s in zip(padded, strides)]))
    result = []
    for idx in _indices(out_shape):
        args = [values[sum(i * s for i, s in zip(idx, strides))] for values, strides in prepared]
        result.append(None if any(a is None for a in args) else fn(*args))
    return result, out_shape


def range_values(start, limit, delta) -> list:
    return [start + i * delta for i in range(range_length(start, limit, delta))]


def expand_values(values: list, shape, target) -> tuple[list, Shape]:
    out_shape = broadcast(tuple(shape), tuple(target))
    ones = [0] * product(out_shape)
    return broadcast_values(lambda v, _: v, [(values, tuple(shape)), (ones, out_shape)])


def int_div(a: int, b: int):
    """ONNX integer Div (truncation toward zero); None for division by zero."""
    if b == 0:
        return None
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q
