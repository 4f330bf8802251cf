"""Shape rules of the graph dialect, as plain functions of shapes, attribute values and
known constant values. No IR objects: the op declarations, `infer-shapes` and
bufferization call these, and unit tests call them alone.

Conventions:
- A shape is a tuple of dims; a dim is an int, or None for a dynamic (`?`) dim.
- A shape that is None has an unknown rank (`tensor<*x...>`).
- Known values of an operand are a flat list in row-major order; an element may be
  None when only some elements are known (e.g. the shape of a tensor with `?` dims).
- Attribute values are Python values (int, float, str, list of int/float), already
  defaulted by the caller where ONNX has a default.
- A rule raises ShapeError with a message a user understands when the inputs can
  never be valid; it returns None dims (or a None shape) where it cannot tell.

The `*_values` functions fold integer shape arithmetic on plain Python lists (no numpy:
palimpsest-opt must start without it).

This module holds the shared helpers and broadcasting; the rules themselves live in
sibling modules and are re-exported here, so `shapes.<name>` reaches every one of them:
- `shape_rules_nn`: linear algebra, convolution and pooling, normalization, reductions;
- `shape_rules_data`: reshape, transpose, concat, split, slice, gather, pad, resize,
  squeeze/unsqueeze, expand, tile, shape, range;
- `shape_folding`: the `*_values` folding of integer shape arithmetic.
"""

from __future__ import annotations

from typing import Sequence

Dim = int | None
Shape = tuple  # tuple[Dim, ...]


class ShapeError(ValueError):
    """The operands, attributes or known values can never make a valid op."""


# numpy's most dims (NPY_MAXDIMS): a shape operand longer than this describes no tensor
MAX_RANK = 64


def check_rank(rank: int | None, what: str) -> int | None:
    """`rank` (the static length of a shape operand), or a ShapeError past MAX_RANK."""
    if rank is not None and rank > MAX_RANK:
        raise ShapeError(f"{what} has {rank} elements: a tensor has at most {MAX_RANK} dims")
    return rank


# ---------------------------------------------------------------------------
# Small helpers


def fmt(shape) -> str:
    """`3x?x4` for a shape, `scalar` for rank 0, `*` for unknown rank."""
    if shape is None:
        return "*"
    if not shape:
        return "scalar"
    return "x".join("?" if d is None else str(d) for d in shape)


def product(dims) -> int | None:
    """Product of the dims, or None when any is dynamic."""
    total = 1
    for d in dims:
        if d is None:
            return None
        total *= d
    return total


def num_elements(shape) -> int | None:
    return None if shape is None else product(shape)


def is_static(shape) -> bool:
    return shape is not None and all(d is not None for d in shape)


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    """`axis` in [-rank, rank-1] mapped to [0, rank-1]."""
    if not -rank <= axis < rank:
        raise ShapeError(f"{what} {axis} is out of range for rank {rank} "
                         f"(expected a value in [{-rank}, {rank - 1}])")
    return axis + rank if axis < 0 else axis


def normalize_axes(axes: Sequence, rank: int, what: str = "axes") -> list:
    """Each axis normalized; duplicates are an error. Unknown (None) axes stay None."""
    result = []
    for axis in axes:
        if axis is None:
            result.append(None)
            continue
        if not -rank <= axis < rank:
            raise ShapeError(f"{what} value {axis} is out of range for rank {rank} "
                             f"(expected a value in [{-rank}, {rank - 1}])")
        result.append(axis + rank if axis < 0 else axis)
    known = [a for a in result if a is not None]
    if len(set(known)) != len(known):
        raise ShapeError(f"{what} {list(axes)} has repeated axes")
    return result


def merge_dim(a: Dim, b: Dim, what: str = "dimension") -> Dim:
    """The more precise of two dims that must be equal."""
    if a is None:
        return b
    if b is None or a == b:
        return a
    raise ShapeError(f"{what} mismatch: {a} vs {b}")


def merge_shapes(a, b, what: str = "shapes"):
    """The more precise of two shapes that must be equal (for refining types)."""
    if a is None:
        return b
    if b is None:
        return a
    if a == b:  # the common case when refining a type: nothing to merge
        return tuple(a)
    if len(a) != len(b):
        raise ShapeError(f"{what} have different ranks: {fmt(a)} vs {fmt(b)}")
    result = []
    for index, (x, y) in enumerate(zip(a, b)):
        if x is not None and y is not None and x != y:
            raise ShapeError(f"{what} differ in dimension {index}: {fmt(a)} vs {fmt(b)}")
        result.append(x if x is not None else y)
    return tuple(result)


def shapes_compatible(a, b) -> bool:
    try:
        merge_shapes(a, b)
    except ShapeError:
        return False
    return True


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def _vals(values) -> str:
    return "[" + ", ".join("?" if v is None else str(v) for v in values) + "]"


# ---------------------------------------------------------------------------
# Broadcasting (numpy / ONNX multidirectional)


def broadcast_dim(a: Dim, b: Dim) -> Dim:
    if a == 1:
        return b
    if b == 1:
        return a
    if a is None:
        return b  # b is None or static n != 1: `?` must be 1 or n
    if b is None or a == b:
        return a
    raise ValueError


def broadcast(*shapes, what: str = "operands"):
    """numpy broadcasting of any number of shapes; None if any rank is unknown."""
    if len(shapes) == 2 and shapes[0] is not None and shapes[1] is not None:
        a, b = shapes  # the common cases, answered at once: one shape, or with a scalar
        if a == b or not b:
            return tuple(a)
        if not a:
            return tuple(b)
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)
    result = []
    for i in range(rank):
        dim = 1
        for shape in shapes:
            offset = i - (rank - len(shape))
            if offset < 0:
                continue
            try:
                dim = broadcast_dim(dim, shape[offset])
            except ValueError:
                listed = " and ".join(fmt(s) for s in shapes)
                raise ShapeError(
                    f"{what} are not broadcast-compatible: {listed} (dimension {i} of the "
                    f"result: {dim} vs {shape[offset]})") from None
        result.append(dim)
    return tuple(result)


def unidirectional_broadcastable(source, target) -> bool:
    """Whether `source` broadcasts to `target` without changing `target` (Gemm's C)."""
    if source is None or target is None:
        return True
    if len(source) > len(target):
        return False
    for s, t in zip(reversed(source), reversed(target)):
        if s is None or t is None or s == 1 or s == t:
            continue
        return False
    return True


# ---------------------------------------------------------------------------
# The rules, re-exported (imported last: the modules import the helpers above)

from palimpsest.dialects.graph.shape_rules_nn import (  # noqa: E402,F401
    matmul,
    gemm,
    AUTO_PADS,
    conv_output_dim,
    same_pads,
    conv,
    conv_transpose,
    pool,
    global_pool,
    layer_norm_stats,
    reduce,
    arg_reduce,
)
from palimpsest.dialects.graph.shape_rules_data import (  # noqa: E402,F401
    reshape,
    flatten,
    check_perm,
    transpose,
    concat,
    split,
    slice_dim,
    slice_shape,
    gather,
    pad,
    resize,
    squeeze,
    unsqueeze,
    expand,
    tile,
    shape_op_range,
    shape_of,
    range_length,
)
from palimpsest.dialects.graph.shape_folding import (  # noqa: E402,F401
    shape_values,
    gather_values,
    concat_values,
    slice_values,
    transpose_values,
    broadcast_values,
    range_values,
    expand_values,
    int_div,
)
