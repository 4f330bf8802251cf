"""Shape rules of the graph dialect's shape and data-movement ops: reshape, flatten,
transpose, concat, split, slice, gather, pad, resize, squeeze/unsqueeze, expand, tile,
shape and range. Plain functions; the conventions are those of `shapes.py`, which
re-exports every public name here.
"""

from __future__ import annotations

import math

from palimpsest.dialects.graph.shapes import (
    ShapeError, _ceil_div, _vals, broadcast, check_rank, fmt, normalize_axes, normalize_axis,
    num_elements, product,
)


# ---------------------------------------------------------------------------
# Shape and data movement


def reshape(x, target=None, target_len: int | None = None, allowzero: int = 0,
            x_symbols=None, target_symbols=None):
    """Reshape. `target` holds the shape operand's values (elements may be None), or
    is None when unknown; then `target_len` (its static length) gives the rank.
    Optionally `x_symbols` names the input's dynamic dims with opaque tokens and
    `target_symbols` has such a token where a target element is unknown but known to
    equal that input dim (x.view(x.size(0), -1)): the -1 can then still be computed."""
    if target is None:
        target_len = check_rank(target_len, "reshape's shape operand")
        return None if target_len is None else (None,) * target_len
    known = [v for v in target if v is not None]
    if known.count(-1) > 1:
        raise ShapeError(f"reshape target {_vals(target)} has more than one -1")
    if any(v < -1 for v in known):
        raise ShapeError(f"reshape target {_vals(target)} has a negative dimension other "
                         f"than -1")
    if allowzero and 0 in known and -1 in known:
        raise ShapeError(f"reshape target {_vals(target)} has both 0 and -1 while allowzero "
                         f"is set")
    result: list = []
    copied: dict = {}  # result dim -> the input dim it is known to equal
    infer_at = None
    for i, v in enumerate(target):
        if v is None:
            result.append(None)
            token = target_symbols[i] if target_symbols is not None else None
            if (x is not None and x_symbols is not None and _is_token(token)
                    and token in x_symbols):
                source = list(x_symbols).index(token)
                if source not in copied.values():
                    copied[i] = source
        elif v == 0 and not allowzero:
            if x is not None and i >= len(x):
                raise ShapeError(f"reshape target {_vals(target)} copies dimension {i} (0) "
                                 f"but the input {fmt(x)} has rank {len(x)}")
            result.append(x[i] if x is not None else None)
            if i not in copied.values():
                copied[i] = i
        elif v == -1:
            result.append(None)
            infer_at = i
        else:
            result.append(v)
    if x is None:
        return tuple(result)
    if infer_at is not None:
        sources = set(copied.values())
        rest_in = product(d for i, d in enumerate(x) if i not in sources)
        rest_out = product(d for i, d in enumerate(result) if i not in copied and i != infer_at)
        if rest_in is None or rest_out is None or 0 in (x[i] for i in sources):
            total, others = num_elements(x), product(
                d for i, d in enumerate(result) if i != infer_at)
            if total is not None and others is not None:
                rest_in, rest_out = total, others
        if rest_in is not None and rest_out is not None:
            if rest_out == 0 or rest_in % rest_out:
                raise ShapeError(f"cannot reshape {fmt(x)} into {_vals(target)}: "
                                 f"{rest_in} elements do not divide by {rest_out}")
            result[infer_at] = rest_in // rest_out
    total_in, total_out = num_elements(x), product(result)
    if total_in is not None and total_out is not None and total_in != total_out:
        raise ShapeError(f"cannot reshape {fmt(x)} ({total_in} elements) into "
                         f"{fmt(tuple(result))} ({total_out} elements)")
    return tuple(result)


def _is_token(value) -> bool:
    return value is not None and not isinstance(value, (int, float))


def flatten(x, axis: int = 1):
    if x is None:
        return None
    rank = len(x)
    if not -rank <= axis <= rank:
        raise ShapeError(f"axis {axis} is out of range for rank {rank} "
                         f"(expected a value in [{-rank}, {rank}])")
    if axis < 0:
        axis += rank
    return (product(x[:axis]), product(x[axis:]))


def check_perm(perm, rank: int) -> None:
    if sorted(perm) != list(range(rank)):
        raise ShapeError(f"perm {list(perm)} is not a permutation of [0, {rank})"
                         if rank else f"perm {list(perm)} must be empty for a scalar")


def transpose(x, perm=None):
    if x is None:
        return None
    if perm is None:
        return tuple(reversed(x))
    if len(perm) != len(x):
        raise ShapeError(f"perm {list(perm)} has {len(perm)} entries but the input has rank "
                         f"{len(x)}")
    check_perm(perm, len(x))
    return tuple(x[p] for p in perm)


def concat(shapes, axis: int):
    ranked = [s for s in shapes if s is not None]
    if not ranked:
        return None
    rank = len(ranked[0])
    for s in ranked:
        if len(s) != rank:
            raise ShapeError(f"concat operands must have the same rank, got "
                             f"{' and '.join(fmt(t) for t in ranked)}")
    if rank == 0:
        raise ShapeError("concat operands must have rank 1 or more, got scalars")
    axis = normalize_axis(axis, rank)
    result = []
    for i in range(rank):
        if i == axis:
            dims = [s[i] for s in ranked]
            unknown = len(ranked) != len(shapes) or any(d is None for d in dims)
            result.append(None if unknown else sum(dims))
            continue
        dim = None
        for s in ranked:
            if s[i] is not None and dim is not None and s[i] != dim:
                raise ShapeError(
                    f"concat operands differ in dimension {i} (not the concat axis {axis}): "
                    f"{' and '.join(fmt(t) for t in ranked)}")
            dim = s[i] if s[i] is not None else dim
        result.append(dim)
    return tuple(result)


def split(x, axis: int = 0, sizes=None, num_outputs: int | None = None,
          count: int | None = None):
    """Split into `count` results (the op's result count). `sizes` are the split
    operand's values (elements may be None); `num_outputs` is opset 18's attribute."""
    if num_outputs is not None:
        if num_outputs < 1:
            raise ShapeError(f"num_outputs must be positive, got {num_outputs}")
        if count is not None and count != num_outputs:
            raise ShapeError(f"num_outputs is {num_outputs} but the op has {count} results")
        count = num_outputs
    if sizes is not None:
        if count is not None and len(sizes) != count:
            raise ShapeError(f"split sizes {_vals(sizes)} give {len(sizes)} parts but the op "
                             f"has {count} results")
        count = len(sizes)
        if any(s is not None and s < 0 for s in sizes):
            raise ShapeError(f"split sizes {_vals(sizes)} must not be negative")
    if count is None:
        return None
    if count < 1:
        raise ShapeError("split needs at least one result")
    if x is None:
        return [None] * count
    axis = normalize_axis(axis, len(x))
    dim = x[axis]
    if sizes is not None:
        if dim is not None and all(s is not None for s in sizes) and sum(sizes) != dim:
            raise ShapeError(f"split sizes {_vals(sizes)} sum to {sum(sizes)}, but dimension "
                             f"{axis} of {fmt(x)} is {dim}")
        parts = list(sizes)
    elif dim is None:
        parts = [None] * count
    elif num_outputs is not None:  # parts of ceil(dim / n), the rest at the end
        chunk = _ceil_div(dim, count)
        parts = [min(chunk, max(dim - i * chunk, 0)) for i in range(count)]
    else:
        if dim % count:
            raise ShapeError(f"dimension {axis} of {fmt(x)} ({dim}) does not split evenly "
                             f"into {count} parts")
        parts = [dim // count] * count
    return [tuple(p if i == axis else d for i, d in enumerate(x)) for p in parts]


def slice_dim(size: int, start: int, end: int, step: int) -> tuple[int, int, int]:
    """ONNX Slice's clamping for one axis: (start, stop, length)."""
    if start < 0:
        start += size
    if end < 0:
        end += size
    if step > 0:
        start = min(max(start, 0), size)
        end = min(max(end, 0), size)
        length = max(0, _ceil_div(end - start, step))
    else:
        start = min(max(start, 0), size - 1)
        end = min(max(end, -1), size - 1)
        length = max(0, _ceil_div(start - end, -step))
    return start, end, length


def _slice_params(rank, starts, ends, axes, steps, count):
    """Per-axis (start, end, step) with None where unknown; None axes = unknown axes."""
    if starts is not None and ends is not None and len(starts) != len(ends):
        raise ShapeError(f"slice starts {_vals(starts)} and ends {_vals(ends)} have different "
                         f"lengths")
    if count is None:
        count = len(starts) if starts is not None else len(ends) if ends is not None else None
    for name, values in (("axes", axes), ("steps", steps)):
        if values is not None and count is not None and len(values) != count:
            raise ShapeError(f"slice {name} {_vals(values)} must have {count} entries like "
                             f"starts")
    if axes is None:
        axes = list(range(count)) if count is not None else None
    if axes is not None:
        axes = normalize_axes(axes, rank, "slice axes")
    if steps is not None and 0 in steps:
        raise ShapeError(f"slice steps {_vals(steps)} must not be 0")
    return starts, ends, axes, steps, count


def slice_shape(x, starts=None, ends=None, axes=None, steps=None, count: int | None = None):
    """Slice. starts/ends/axes/steps are known values (elements may be None) or None
    when unknown; `count` is the static length of starts when its values are unknown;
    absent axes mean [0, count), absent steps 1 (pass steps=[1]*count)."""
    if x is None:
        return None
    starts, ends, axes, steps, count = _slice_params(len(x), starts, ends, axes, steps, count)
    if axes is None or any(a is None for a in axes):
        return (None,) * len(x)
    result = list(x)
    for j, axis in enumerate(axes):
        size = x[axis]
        start = starts[j] if starts is not None else None
        end = ends[j] if ends is not None else None
        step = steps[j] if steps is not None else None
        if size is None or start is None or end is None or step is None:
            result[axis] = None
        else:
            result[axis] = slice_dim(size, start, end, step)[2]
    return tuple(result)


def gather(data, indices, axis: int = 0, index_values=None):
    if data is None:
        return None
    rank = len(data)
    if rank == 0:
        raise ShapeError("gather data must have rank 1 or more, got a scalar")
    axis = normalize_axis(axis, rank)
    size = data[axis]
    if size is not None and index_values is not None:
        for v in index_values:
            if v is not None and not -size <= v < size:
                raise ShapeError(f"gather index {v} is out of range for dimension {axis} of "
                                 f"size {size}")
    if indices is None:
        return None
    return tuple(data[:axis]) + tuple(indices) + tuple(data[axis + 1:])


def pad(x, pads=None, axes=None, pads_count: int | None = None):
    """Pad: `pads` = begins then ends for each axis in `axes` (default: all)."""
    if x is None:
        return None
    rank = len(x)
    axes = list(range(rank)) if axes is None else normalize_axes(axes, rank, "pad axes")
    count = len(pads) if pads is not None else pads_count
    if count is not None and count != 2 * len(axes):
        raise ShapeError(f"pads needs {2 * len(axes)} values (begin and end for each of "
                         f"{len(axes)} axes), got {count}")
    if any(a is None for a in axes):
        return (None,) * rank
    result = list(x)
    n = len(axes)
    for j, axis in enumerate(axes):
        begin = pads[j] if pads is not None else None
        end = pads[j + n] if pads is not None else None
        if x[axis] is None or begin is None or end is None:
            result[axis] = None
            continue
        size = x[axis] + begin + end
        if size < 0:
            raise ShapeError(f"pads {_vals(pads)} make dimension {axis} negative ({size})")
        result[axis] = size
    return tuple(result)


def resize(x, scales=None, sizes=None, axes=None, keep_aspect_ratio_policy: str = "stretch"):
    """Resize: exactly one of scales/sizes (values, elements may be None)."""
    if scales is not None and sizes is not None:
        raise ShapeError("resize takes either scales or sizes, not both")
    if x is None:
        return None
    rank = len(x)
    axes = list(range(rank)) if axes is None else normalize_axes(axes, rank, "resize axes")
    given = scales if scales is not None else sizes
    if given is None:
        return (None,) * rank
    if len(given) != len(axes):
        what = "scales" if scales is not None else "sizes"
        raise ShapeError(f"resize {what} has {len(given)} values but there are {len(axes)} axes")
    result = list(x)
    if scales is not None:
        for axis, scale in zip(axes, scales):
            if scale is not None and scale <= 0:
                raise ShapeError(f"resize scales must be positive, got {scale}")
            result[axis] = (None if x[axis] is None or scale is None
                            else int(math.floor(x[axis] * scale)))
        return tuple(result)
    if keep_aspect_ratio_policy == "stretch" or any(s is None for s in sizes):
        for axis, size in zip(axes, sizes):
            result[axis] = size
        return tuple(result)
    if keep_aspect_ratio_policy not in ("not_larger", "not_smaller"):
        raise ShapeError(f"keep_aspect_ratio_policy must be stretch, not_larger or "
                         f"not_smaller, got '{keep_aspect_ratio_policy}'")
    if any(x[a] is None for a in axes):
        for axis in axes:
            result[axis] = None
        return tuple(result)
    ratios = [size / x[axis] for axis, size in zip(axes, sizes)]
    scale = min(ratios) if keep_aspect_ratio_policy == "not_larger" else max(ratios)
    for axis in axes:
        result[axis] = _round_half_away(scale * x[axis])
    return tuple(result)


def _round_half_away(value: float) -> int:
    return int(math.floor(value + 0.5)) if value >= 0 else -int(math.floor(-value + 0.5))


def squeeze(x, axes=None):
    if x is None:
        return None
    if axes is None:
        if any(d is None for d in x):
            return None  # a `?` may or may not be 1
        return tuple(d for d in x if d != 1)
    axes = normalize_axes(axes, len(x), "squeeze axes")
    if any(a is None for a in axes):
        return (None,) * (len(x) - len(axes))
    for axis in axes:
        if x[axis] is not None and x[axis] != 1:
            raise ShapeError(f"cannot squeeze dimension {axis} of {fmt(x)}: its size is "
                             f"{x[axis]}, not 1")
    return tuple(d for i, d in enumerate(x) if i not in axes)


def unsqueeze(x, axes):
    if x is None:
        return None
    rank = len(x) + len(axes)
    axes = normalize_axes(axes, rank, "unsqueeze axes")
    if any(a is None for a in axes):
        return (None,) * rank
    rest = iter(x)
    return tuple(1 if i in axes else next(rest) for i in range(rank))


def expand(x, target=None, target_len: int | None = None):
    """Expand: bidirectional broadcast of the input with the shape operand's values."""
    if target is None:
        if target_len is None or x is None:
            return None
        rank = max(len(x), check_rank(target_len, "expand's shape operand"))
        padded = (1,) * (rank - len(x)) + tuple(x)
        return tuple(d if d is not None and d != 1 else None for d in padded)
    if any(v is not None and v < 0 for v in target):
        raise ShapeError(f"expand shape {_vals(target)} must not be negative")
    return broadcast(x, tuple(target), what="expand input and shape")


def tile(x, repeats=None, repeats_len: int | None = None):
    if x is None:
        return None
    count = len(repeats) if repeats is not None else repeats_len
    if count is not None and count != len(x):
        raise ShapeError(f"tile repeats needs {len(x)} values (the input rank), got {count}")
    if repeats is None:
        return (None,) * len(x)
    if any(r is not None and r < 0 for r in repeats):
        raise ShapeError(f"tile repeats {_vals(repeats)} must not be negative")
    return tuple(None if d is None or r is None else d * r for d, r in zip(x, repeats))


def shape_op_range(rank: int, start: int = 0, end: int | None = None) -> tuple[int, int]:
    """The dims [start, stop) that Shape returns, ONNX's clamping."""
    if start < 0:
        start += rank
    stop = rank if end is None else (end + rank if end < 0 else end)
    start = min(max(start, 0), rank)
    stop = min(max(stop, 0), rank)
    return start, max(start, stop)


def shape_of(x, start: int = 0, end: int | None = None):
    """Result shape of Shape: 1-D."""
    if x is None:
        return (None,)
    lo, hi = shape_op_range(len(x), start, end)
    return (hi - lo,)


def range_length(start, limit, delta) -> int:
    if delta == 0:
        raise ShapeError("range delta must not be 0")
    return max(int(math.ceil((limit - start) / delta)), 0)
