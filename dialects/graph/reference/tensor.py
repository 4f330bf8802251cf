"""Shape and data-movement kernels, constants (reductions are in reduce.py).

Operands that ONNX made inputs in later opsets (Split's split, Slice's starts/ends/axes/steps,
Pad's pads/value, Squeeze/Unsqueeze axes) are read from the operand when present and
otherwise from the attribute of the same name (older opsets).
"""

from __future__ import annotations

import math

import numpy as np

from palimpsest.dialects.graph.shape_rules_data import slice_dim

from ._common import (
    axes_of,
    choice_attr,
    f_attr,
    i_attr,
    ints_attr,
    ints_of,
    kernel,
    norm_axis,
    op_error,
    opt,
    req,
)

# -- shape manipulation ----------------------------------------------------------------------


@kernel("Reshape")
def reshape(inputs, attrs):
    """Reshape: 0 copies the input dimension (unless allowzero=1), -1 is inferred."""
    x = req("Reshape", inputs, 0, "data")
    shape = ints_of(opt(inputs, 1))
    if shape is None:
        shape = ints_attr(attrs, "shape")  # opset 1-4
    if shape is None:
        raise op_error("Reshape", "missing the shape operand")
    allowzero = i_attr(attrs, "allowzero", 0)
    new = []
    for i, d in enumerate(shape):
        if d == 0 and not allowzero:
            if i >= x.ndim:
                raise op_error("Reshape", f"shape entry {i} is 0 but the input has rank {x.ndim}")
            d = x.shape[i]
        new.append(d)
    if new.count(-1) > 1:
        raise op_error("Reshape", f"more than one -1 in shape {shape}")
    try:
        return [x.reshape(new)]
    except ValueError as e:
        raise op_error("Reshape", f"cannot reshape {x.shape} to {shape}: {e}") from None


@kernel("Flatten")
def flatten(inputs, attrs):
    x = req("Flatten", inputs, 0, "input")
    axis = i_attr(attrs, "axis", 1)
    if not -x.ndim <= axis <= x.ndim:
        raise op_error("Flatten", f"axis {axis} is out of range for rank {x.ndim}")
    if axis < 0:
        axis += x.ndim
    return [x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))]


@kernel("Transpose")
def transpose(inputs, attrs):
    x = req("Transpose", inputs, 0, "data")
    perm = ints_attr(attrs, "perm")
    if perm is None:
        perm = list(range(x.ndim))[::-1]
    if sorted(perm) != list(range(x.ndim)):
        raise op_error("Transpose", f"perm {perm} is not a permutation of rank {x.ndim}")
    return [np.ascontiguousarray(x.transpose(perm))]


@kernel("Concat")
def concat(inputs, attrs):
    xs = [np.asarray(x) for x in inputs if x is not None]
    if not xs:
        raise op_error("Concat", "needs at least one operand")
    if "axis" not in attrs:
        raise op_error("Concat", "missing required attribute 'axis'")
    axis = norm_axis("Concat", i_attr(attrs, "axis", 0), xs[0].ndim)
    return [np.concatenate(xs, axis=axis)]


@kernel("Split", multi=True)
def split(inputs, attrs, num_results=None):
    """Split by the `split` sizes (operand since opset 13, attribute before), else into
    `num_outputs` parts of ceil(dim / num_outputs) (the last one smaller), else into
    `num_results` equal parts (opset < 18 without `split`)."""
    x = req("Split", inputs, 0, "input")
    axis = norm_axis("Split", i_attr(attrs, "axis", 0), x.ndim)
    dim = x.shape[axis]
    sizes = ints_of(opt(inputs, 1))
    if sizes is None:
        sizes = ints_attr(attrs, "split")
    if sizes is None:
        n = attrs.get("num_outputs", num_results)
        if n is None:
            raise op_error("Split", "needs the 'split' operand, 'num_outputs', or num_results")
        n = int(n)
        if n < 1:
            raise op_error("Split", f"num_outputs must be >= 1, got {n}")
        if "num_outputs" in attrs:
            chunk = -(-dim // n)
            sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(n)]
        else:
            if dim % n:
                raise op_error("Split", f"dimension {dim} is not divisible into {n} equal parts")
            sizes = [dim // n] * n
    if sum(sizes) != dim or any(s < 0 for s in sizes):
        raise op_error("Split", f"split sizes {sizes} do not add up to dimension {dim}")
    if num_results is not None and num_results != len(sizes):
        raise op_error("Split", f"{len(sizes)} parts but {num_results} results")
    bounds = np.cumsum([0] + sizes)
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        sl = [slice(None)] * x.ndim
        sl[axis] = slice(int(lo), int(hi))
        out.append(np.ascontiguousarray(x[tuple(sl)]))
    return out


@kernel("Slice")
def slice_(inputs, attrs):
    """Slice with ONNX clamping: negative starts/ends count from the end; for negative steps
    an end below -dim means "through index 0"."""
    x = req("Slice", inputs, 0, "data")
    starts = ints_of(opt(inputs, 1))
    if starts is None:  # opset 1-9 attributes
        starts, ends = ints_attr(attrs, "starts"), ints_attr(attrs, "ends")
        axes, steps = ints_attr(attrs, "axes"), None
    else:
        ends = ints_of(opt(inputs, 2))
        axes = ints_of(opt(inputs, 3))
        steps = ints_of(opt(inputs, 4))
    if starts is None or ends is None or len(starts) != len(ends):
        raise op_error("Slice", "starts and ends must be given with equal lengths")
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    if not len(axes) == len(steps) == len(starts):
        raise op_error("Slice", "starts, ends, axes and steps must have equal lengths")
    sl = [slice(None)] * x.ndim
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        ax = norm_axis("Slice", ax, x.ndim, "axes entry")
        dim = x.shape[ax]
        if sp == 0:
            raise op_error("Slice", "steps must be non-zero")
        st, en, _ = slice_dim(dim, st, en, sp)
        sl[ax] = slice(st, en if en >= 0 else None, sp)
    return [np.ascontiguousarray(x[tuple(sl)])]


@kernel("Gather")
def gather(inputs, attrs):
    x = req("Gather", inputs, 0, "data")
    idx = req("Gather", inputs, 1, "indices")
    if idx.dtype.kind not in "iu":
        raise op_error("Gather", f"indices must be integers, got {idx.dtype}")
    axis = norm_axis("Gather", i_attr(attrs, "axis", 0), x.ndim)
    dim = x.shape[axis]
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        raise op_error("Gather", f"indices out of range [-{dim}, {dim - 1}]")
    return [np.take(x, idx.astype(np.intp, copy=False), axis=axis)]


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


@kernel("GatherElements")
def gather_elements(inputs, attrs):
    """out[i][j][k] = data[index[i][j][k]][j][k] (axis 0); indices have data's rank, may
    be negative (counted from the end) and must lie in [-dim, dim - 1]."""
    x = req("GatherElements", inputs, 0, "data")
    idx = req("GatherElements", inputs, 1, "indices")
    if idx.dtype.kind not in "iu":
        raise op_error("GatherElements", f"indices must be integers, got {idx.dtype}")
    if x.ndim == 0 or idx.ndim != x.ndim:
        raise op_error("GatherElements",
                       f"indices {idx.shape} must have the rank of data {x.shape} (>= 1)")
    axis = norm_axis("GatherElements", i_attr(attrs, "axis", 0), x.ndim)
    for a in range(x.ndim):
        if a != axis and idx.shape[a] > x.shape[a]:
            raise op_error("GatherElements",
                           f"indices {idx.shape} exceed data {x.shape} on axis {a}")
    dim = x.shape[axis]
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        raise op_error("GatherElements", f"indices out of range [-{dim}, {dim - 1}]")
    idx = idx.astype(np.intp, copy=False)
    idx = np.where(idx < 0, idx + dim, idx)
    # take_along_axis needs equal extents off the axis: cut data down to the indices' extents
    sl = tuple(slice(None) if a == axis else slice(0, idx.shape[a]) for a in range(x.ndim))
    return [np.take_along_axis(x[sl], idx, axis=axis)]


@kernel("Pad")
def pad(inputs, attrs):
    """Pad (constant/reflect/edge/wrap) with optional axes; negative pads crop."""
    x = req("Pad", inputs, 0, "data")
    mode = choice_attr("Pad", attrs, "mode", "constant", _PAD_MODES)
    pads = ints_of(opt(inputs, 1))
    if pads is None:
        pads = ints_attr(attrs, "pads")  # opset < 11
    if pads is None:
        raise op_error("Pad", "missing the pads operand")
    cv = opt(inputs, 2)
    if cv is not None and np.size(cv):
        value = np.asarray(cv).reshape(-1)[0]
    else:
        value = attrs.get("value", 0)
    axes = ints_of(opt(inputs, 3))
    if axes is None:
        axes = list(range(x.ndim))
    axes = [norm_axis("Pad", a, x.ndim, "axes entry") for a in axes]
    if len(pads) != 2 * len(axes):
        raise op_error("Pad", f"{len(pads)} pads for {len(axes)} axes")
    width = [[0, 0] for _ in range(x.ndim)]
    for i, a in enumerate(axes):
        width[a] = [pads[i], pads[i + len(axes)]]
    # crop the negative pads first, then pad the positive ones
    crop = tuple(slice(-min(b, 0), x.shape[a] + min(e, 0)) for a, (b, e) in enumerate(width))
    y = x[crop]
    pos = [(max(b, 0), max(e, 0)) for b, e in width]
    if not any(b or e for b, e in pos):
        return [np.ascontiguousarray(y)]
    if mode == "constant":
        y = np.pad(y, pos, mode="constant", constant_values=np.asarray(value).astype(x.dtype))
    else:
        for a, (b, e) in enumerate(pos):
            if (b or e) and y.shape[a] == 0:
                raise op_error("Pad", f"mode '{mode}' cannot pad an empty axis {a}")
        y = np.pad(y, pos, mode=_PAD_MODES[mode])
    return [y]


@kernel("Squeeze")
def squeeze(inputs, attrs):
    x = req("Squeeze", inputs, 0, "data")
    axes = axes_of(inputs, 1, attrs)
    if axes is None:
        return [x.reshape([d for d in x.shape if d != 1])]
    axes = {norm_axis("Squeeze", a, x.ndim, "axes entry") for a in axes}
    for a in axes:
        if x.shape[a] != 1:
            raise op_error("Squeeze", f"cannot squeeze axis {a} of size {x.shape[a]}")
    return [x.reshape([d for i, d in enumerate(x.shape) if i not in axes])]


@kernel("Unsqueeze")
def unsqueeze(inputs, attrs):
    x = req("Unsqueeze", inputs, 0, "data")
    axes = axes_of(inputs, 1, attrs)
    if axes is None:
        raise op_error("Unsqueeze", "missing the axes operand")
    rank = x.ndim + len(axes)
    axes = [norm_axis("Unsqueeze", a, rank, "axes entry") for a in axes]
    if len(set(axes)) != len(axes):
        raise op_error("Unsqueeze", f"repeated axes {axes}")
    dims = iter(x.shape)
    return [x.reshape([1 if i in axes else next(dims) for i in range(rank)])]


@kernel("Expand")
def expand(inputs, attrs):
    """Expand: bidirectional broadcast of the input with `shape`."""
    x = req("Expand", inputs, 0, "input")
    shape = ints_of(req("Expand", inputs, 1, "shape"))
    try:
        out = np.broadcast_shapes(x.shape, tuple(shape))
    except ValueError:
        raise op_error("Expand", f"cannot broadcast {x.shape} with {shape}") from None
    return [np.array(np.broadcast_to(x, out))]


@kernel("Tile")
def tile(inputs, attrs):
    """Tile: repeat the input repeats[i] times along axis i (one non-negative count per axis)."""
    x = req("Tile", inputs, 0, "input")
    repeats = ints_of(req("Tile", inputs, 1, "repeats"))
    if len(repeats) != x.ndim:
        raise op_error("Tile", f"repeats {repeats} must have one entry per axis of {x.shape}")
    if any(r < 0 for r in repeats):
        raise op_error("Tile", f"repeats {repeats} must not be negative")
    return [np.tile(x, repeats) if x.ndim else x.copy()]


# -- constants and shape computations -------------------------------------------------------


@kernel("Constant")
def constant(inputs, attrs):
    """Constant from exactly one of value (tensor), value_float(s), value_int(s)."""
    if "value" in attrs:
        v = attrs["value"]
        if not isinstance(v, np.ndarray):
            raise op_error("Constant", f"attribute 'value' must be a numpy array, got {type(v).__name__}")
        return [np.array(v)]
    if "value_float" in attrs:
        return [np.array(f_attr(attrs, "value_float", 0.0), dtype=np.float32)]
    if "value_floats" in attrs:
        return [np.array([float(e) for e in attrs["value_floats"]], dtype=np.float32)]
    if "value_int" in attrs:
        return [np.array(i_attr(attrs, "value_int", 0), dtype=np.int64)]
    if "value_ints" in attrs:
        return [np.array(ints_attr(attrs, "value_ints"), dtype=np.int64).reshape(-1)]
    for kind in ("sparse_value", "value_string", "value_strings"):
        if kind in attrs:
            raise op_error("Constant", f"unsupported attribute '{kind}' (no sparse or string tensors)")
    raise op_error("Constant", "needs one of value, value_float(s), value_int(s)")


@kernel("Shape")
def shape(inputs, attrs):
    x = req("Shape", inputs, 0, "data")
    r = x.ndim
    start = i_attr(attrs, "start", 0)
    end = i_attr(attrs, "end", r)
    start = min(max(start + r if start < 0 else start, 0), r)
    end = min(max(end + r if end < 0 else end, 0), r)
    return [np.array(x.shape[start:end], dtype=np.int64)]


@kernel("Size")
def size(inputs, attrs):
    """Size: the element count of the input, an int64 scalar."""
    return [np.array(req("Size", inputs, 0, "data").size, dtype=np.int64)]


@kernel("Range")
def range_(inputs, attrs):
    """Range: max(ceil((limit - start) / delta), 0) elements start + i * delta."""
    start = req("Range", inputs, 0, "start")
    limit = req("Range", inputs, 1, "limit")
    delta = req("Range", inputs, 2, "delta")
    dt = start.dtype
    s, l, d = (np.asarray(v).reshape(-1)[0] for v in (start, limit, delta))
    if d == 0:
        raise op_error("Range", "delta must be non-zero")
    if dt.kind in "iu":
        s, l, d = int(s), int(l), int(d)
        n = max(-(-(l - s) // d), 0)
        return [(s + np.arange(n, dtype=np.int64) * d).astype(dt)]
    n = max(math.ceil((float(l) - float(s)) / float(d)), 0)
    return [(float(s) + np.arange(n, dtype=np.float64) * float(d)).astype(dt)]


@kernel("ConstantOfShape")
def constant_of_shape(inputs, attrs):
    dims = ints_of(req("ConstantOfShape", inputs, 0, "input"))
    v = attrs.get("value")
    if v is None:
        v = np.zeros((1,), dtype=np.float32)
    v = np.asarray(v)
    if v.size != 1:
        raise op_error("ConstantOfShape", f"attribute 'value' must have one element, got {v.size}")
    if any(d < 0 for d in dims):
        raise op_error("ConstantOfShape", f"negative dimension in {dims}")
    return [np.full(dims, v.reshape(-1)[0], dtype=v.dtype)]


@kernel("Identity")
def identity(inputs, attrs):
    return [req("Identity", inputs, 0, "input")]
