"""Bound rules of the graph dialect: the largest shape each result can have.

A `?` dim may carry an upper bound (`tensor<1x?xf32, #bounds<?, 1280>>`); `infer-shapes`
carries bounds from the function's inputs to every result whose `?` dims follow from
bounded ones, so that bufferization and `plan-memory` can place those buffers statically
at their worst case. A bound rule works on *upper shapes* (`ShapedType.upper_shape`:
static dims as they are, a bounded `?` dim at its bound, None where a `?` dim has no
bound) and returns one upper shape per result, or None. It must be sound: every run whose
operands fit their bounds gives results that fit what it returns. Where it cannot tell,
a dim is None and the result dim stays an unbounded `?`.

An op declares its rule as `bound_rule = classmethod(<one of the functions below>)` (an op
whose result has one operand's type declares both with `rule, bound_rule =
same_type_as("x")`, ops_base.py: `at_upper`):

- `at_upper`: the op's shape rule evaluated at the operands' upper shapes. Sound for
  rules whose result dims never shrink when an operand dim grows and that never widen a
  `?` to a static dim of another operand (broadcasting does: that is `broadcast_bounds`):
  unary ops, normalizations, conv and pooling, reductions, transpose, flatten, squeeze,
  unsqueeze, gather, pad, tile, resize, gemm.
- `broadcast_bounds`: numpy broadcasting of every operand (a dim is the largest bound).
- `matmul_bounds`, `concat_bounds`, `reshape_bounds`, `slice_bounds`, `split_bounds`,
  `expand_bounds`, `constant_of_shape_bounds`: rules of their own.

Values of shape vectors take part too: infer-shapes tracks an unknown element that is
exactly a dim of some tensor (the `graph.shape` → gather → concat idiom, see
`Args.symbolic`), so `Args.upper_value` gives the bound of that dim where the element is
unknown. Only rules whose results grow with those values use them (reshape targets, slice
ends, expand and constant_of_shape shapes).
"""

from __future__ import annotations

from palimpsest.dialects.graph.shapes import ShapeError, normalize_axis, product
from palimpsest.ir.types import MAX_DIM, TensorType


def broadcast_upper(*shapes):
    """numpy broadcasting of upper shapes: each dim is the largest of the operands' (a
    `?` broadcast against 1 is itself, and equal to the other dim otherwise)."""
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)
    result = []
    for i in range(rank):
        dims = [s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0]
        result.append(None if any(d is None for d in dims) else max(dims))
    return tuple(result)


# ---------------------------------------------------------------------------
# The rules: (cls, args) -> [upper shape | None per result] | None


def at_upper(cls, args):
    """The op's own shape rule at the operands' upper shapes (see the module doc)."""
    try:
        inferred = cls.rule(args.at_upper())
    except ShapeError:
        return None
    if inferred is None:
        return None
    return [t.shape if isinstance(t, TensorType) else None for t in inferred]


def broadcast_bounds(cls, args):
    uppers = [args.upper_of(i) for i in range(args.count)]
    return [broadcast_upper(*uppers)]


def matmul_bounds(cls, args):
    a, b = args.upper("a"), args.upper("b")
    if a is None or b is None or not a or not b:
        return None
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    batch = broadcast_upper(a2[:-2], b2[:-2])
    result = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        result = result[:-2] + result[-1:]
    if len(b) == 1:
        result = result[:-1]
    return [result]


def concat_bounds(cls, args):
    """The concat axis: the sum of the operands' bounds; other dims are equal in every
    operand, so the smallest bound any of them has."""
    uppers = args.uppers("inputs")
    if not uppers or any(u is None for u in uppers):
        return None
    rank = len(uppers[0])
    if rank == 0 or any(len(u) != rank for u in uppers):
        return None
    try:
        axis = normalize_axis(args["axis"], rank)
    except ShapeError:
        return None
    result = []
    for i in range(rank):
        dims = [u[i] for u in uppers]
        if i == axis:
            result.append(sum(dims) if None not in dims else None)
        else:
            known = [d for d in dims if d is not None]
            result.append(min(known) if known else None)
    return [tuple(result)]


def reshape_bounds(cls, args):
    """Each target element at its value (or, unknown, at the bound of the dim it is
    known to equal); 0 copies the input dim; -1 is at most the input's elements at
    their bound over the other dims at their least (1 where unknown)."""
    x = args.upper("data")
    target = args.upper_value("shape")
    if target is None:
        return None
    allowzero = args["allowzero"]
    # the elements known exactly: a bound is no lower bound. A bound is at least 1, so a
    # 0 or a -1 is always a known element.
    exact = args.value("shape")
    result, lowest, infer_at = [], [], None
    for i, v in enumerate(target):
        known = exact[i] if exact is not None and i < len(exact) else None
        if v is None:
            result.append(None)
            lowest.append(1)
        elif v == 0 and not allowzero:
            dim = x[i] if x is not None and i < len(x) else None
            result.append(dim)
            static = args.shape("data")
            lowest.append(static[i] if static is not None and i < len(static)
                          and static[i] is not None else 1)
        elif v == -1:
            result.append(None)
            lowest.append(1)
            infer_at = i
        else:
            result.append(v)
            lowest.append(known if known is not None else 1)
    if infer_at is not None:
        total = product(x) if x is not None else None
        others = product(d for i, d in enumerate(lowest) if i != infer_at)
        if total is not None and others:
            result[infer_at] = total // others
    return [tuple(result)]


def slice_bounds(cls, args):
    """A slice is never longer than the sliced dim; with a known start >= 0, a known
    step > 0 and an end that is known or bounded (>= 0), at most ceil((end - start) /
    step)."""
    x = args.upper("data")
    if x is None:
        return None
    result = list(x)
    axes = args.ints("axes") if args.has("axes") else None
    starts, ends = args.ints("starts"), args.upper_value("ends")
    count = len(starts) if starts is not None else None
    if axes is None and not args.has("axes") and count is not None:
        axes = list(range(count))
    steps = args.ints("steps") if args.has("steps") else ([1] * count if count else None)
    if axes is None or starts is None or ends is None or steps is None \
            or not len(axes) == len(starts) == len(ends) == len(steps):
        return [tuple(result)]
    for axis, start, end, step in zip(axes, starts, ends, steps):
        if axis is None or start is None or end is None or step is None:
            continue
        try:
            axis = normalize_axis(axis, len(x))
        except ShapeError:
            return None
        if start >= 0 and end >= 0 and step > 0:
            length = max(0, -((start - end) // step))
            result[axis] = length if result[axis] is None else min(result[axis], length)
    return [tuple(result)]


def split_bounds(cls, args):
    """Every part is at most the whole."""
    x = args.upper("input")
    return [x] * (args.num_results or 0) if x is not None else None


def expand_bounds(cls, args):
    x, target = args.upper("input"), args.upper_value("shape")
    if target is None:
        return None
    return [broadcast_upper(x, tuple(target))]


def constant_of_shape_bounds(cls, args):
    dims = args.upper_value("input")
    return None if dims is None else [tuple(dims)]




def with_upper(type_, upper):
    """`type_` with each `?` dim bounded by `upper` (a bound it already has is kept
    where it is tighter); `type_` itself when nothing changes."""
    if not isinstance(type_, TensorType) or type_.shape is None or upper is None \
            or len(upper) != len(type_.shape):
        return type_
    old = type_.bounds or (None,) * len(upper)
    bounds = []
    for dim, new, have in zip(type_.shape, upper, old):
        if dim is not None:
            bounds.append(None)
            continue
        # a dim of size 0 is still bounded by 1: bounds are at least 1
        if new is not None and new > MAX_DIM:  # no int64 bound: as good as none
            new = None
        candidates = [b for b in (None if new is None else max(new, 1), have) if b is not None]
        bounds.append(min(candidates) if candidates else None)
    return type_.with_bounds(bounds)


__all__ = [
    "at_upper", "broadcast_bounds", "broadcast_upper", "concat_bounds",
    "constant_of_shape_bounds", "expand_bounds", "matmul_bounds", "reshape_bounds",
    "slice_bounds", "split_bounds", "with_upper",
]
