"""Shape rules of the graph dialect's compute ops: linear algebra (matmul, gemm),
convolution and pooling, normalization and reductions. Plain functions; the conventions
are those of `shapes.py`, which re-exports every public name here.
"""

from __future__ import annotations

from palimpsest.dialects.graph.shapes import (
    Dim, ShapeError, _ceil_div, broadcast, fmt, normalize_axes, normalize_axis,
    unidirectional_broadcastable,
)


# ---------------------------------------------------------------------------
# Linear algebra


def matmul(a, b):
    """numpy.matmul: 1-D operands are promoted and the added dim removed again."""
    if a is None or b is None:
        return None
    if len(a) == 0 or len(b) == 0:
        raise ShapeError("matmul operands must have rank 1 or more, got a scalar")
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    k_a, k_b = a2[-1], b2[-2]
    if k_a is not None and k_b is not None and k_a != k_b:
        raise ShapeError(f"matmul contracting dimensions differ: {fmt(a)} and {fmt(b)} "
                         f"({k_a} vs {k_b})")
    batch = broadcast(a2[:-2], b2[:-2], what="matmul batch dimensions")
    result = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        result = result[:-2] + result[-1:]
    if len(b) == 1:
        result = result[:-1]
    return result


def gemm(a, b, c=None, trans_a: int = 0, trans_b: int = 0):
    """Gemm: op(A) is MxK, op(B) is KxN, C broadcasts to MxN; result MxN."""
    for name, shape in (("A", a), ("B", b)):
        if shape is not None and len(shape) != 2:
            raise ShapeError(f"gemm operand {name} must have rank 2, got {fmt(shape)}")
    m = k1 = k2 = n = None
    if a is not None:
        m, k1 = (a[1], a[0]) if trans_a else (a[0], a[1])
    if b is not None:
        k2, n = (b[1], b[0]) if trans_b else (b[0], b[1])
    if k1 is not None and k2 is not None and k1 != k2:
        raise ShapeError(f"gemm contracting dimensions differ: op(A) is {fmt((m, k1))}, "
                         f"op(B) is {fmt((k2, n))}")
    result = (m, n)
    if c is not None and not unidirectional_broadcastable(c, result):
        raise ShapeError(f"gemm operand C of shape {fmt(c)} does not broadcast to "
                         f"{fmt(result)}")
    return result


# ---------------------------------------------------------------------------
# Convolution and pooling

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _check_auto_pad(auto_pad: str) -> None:
    if auto_pad not in AUTO_PADS:
        raise ShapeError(f"auto_pad must be one of {', '.join(AUTO_PADS)}, got '{auto_pad}'")


def _spatial_attrs(n: int, kernel_shape, strides, pads, dilations, what: str):
    kernel_shape = list(kernel_shape) if kernel_shape is not None else None
    strides = list(strides) if strides else [1] * n
    dilations = list(dilations) if dilations else [1] * n
    pads = list(pads) if pads else [0] * (2 * n)
    for name, values, count in (("kernel_shape", kernel_shape, n), ("strides", strides, n),
                                ("dilations", dilations, n), ("pads", pads, 2 * n)):
        if values is not None and len(values) != count:
            raise ShapeError(f"{what} has {n} spatial dimensions, so '{name}' needs {count} "
                             f"values, got {len(values)}")
    for name, values in (("kernel_shape", kernel_shape), ("strides", strides),
                         ("dilations", dilations)):
        if values is not None and any(v < 1 for v in values):
            raise ShapeError(f"'{name}' values must be positive, got {values}")
    if any(p < 0 for p in pads):
        raise ShapeError(f"'pads' values must not be negative, got {pads}")
    return kernel_shape, strides, pads, dilations


def conv_output_dim(size: Dim, kernel: int, stride: int = 1, dilation: int = 1,
                    pad_begin: int = 0, pad_end: int = 0, auto_pad: str = "NOTSET",
                    ceil_mode: bool = False, axis: int = 0) -> Dim:
    """Output size of one spatial dim of a sliding window (conv or pooling)."""
    if size is None:
        return None
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return _ceil_div(size, stride)
    if auto_pad == "VALID":
        pad_begin = pad_end = 0
    effective = (kernel - 1) * dilation + 1
    padded = size + pad_begin + pad_end
    if padded < effective:
        raise ShapeError(f"the window (effective size {effective}) is larger than the padded "
                         f"input ({padded}) in spatial dimension {axis}")
    if ceil_mode:
        steps = _ceil_div(padded - effective, stride)
        # the last window must start inside the input or the leading padding
        if steps * stride >= size + pad_begin:
            steps -= 1
    else:
        steps = (padded - effective) // stride
    return steps + 1


def same_pads(size: int, kernel: int, stride: int, dilation: int, auto_pad: str):
    """(begin, end) padding of SAME_UPPER / SAME_LOWER for a static input size."""
    out = _ceil_div(size, stride)
    total = max(0, (out - 1) * stride + (kernel - 1) * dilation + 1 - size)
    small, large = total // 2, total - total // 2
    return (small, large) if auto_pad == "SAME_UPPER" else (large, small)


def _kernel_of(kernel_shape, w):
    """The kernel's spatial dims: `kernel_shape` checked against the weight's, or the
    weight's own when it is not given."""
    if w is None:
        return kernel_shape
    if kernel_shape is None:
        return list(w[2:])
    for i, (k, d) in enumerate(zip(kernel_shape, w[2:])):
        if d is not None and d != k:
            raise ShapeError(f"kernel_shape {kernel_shape} does not match the weight "
                             f"shape {fmt(w)} (spatial dimension {i})")
    return kernel_shape


def conv(x, w, kernel_shape=None, strides=None, pads=None, dilations=None, group: int = 1,
         auto_pad: str = "NOTSET"):
    """Conv: X is N x C x D1..Dn, W is M x C/group x k1..kn; result N x M x O1..On."""
    _check_auto_pad(auto_pad)
    if group < 1:
        raise ShapeError(f"group must be positive, got {group}")
    if x is not None and len(x) < 3:
        raise ShapeError(f"conv input must have rank 3 or more (N x C x spatial...), got {fmt(x)}")
    if w is not None and len(w) < 3:
        raise ShapeError(f"conv weight must have rank 3 or more (M x C/group x kernel...), "
                         f"got {fmt(w)}")
    if x is not None and w is not None and len(x) != len(w):
        raise ShapeError(f"conv input {fmt(x)} and weight {fmt(w)} must have the same rank")
    rank = len(x) if x is not None else len(w) if w is not None else (
        len(kernel_shape) + 2 if kernel_shape is not None else None)
    if rank is None:
        return None
    n = rank - 2
    kernel_shape, strides, pads, dilations = _spatial_attrs(
        n, kernel_shape, strides, pads, dilations, "conv")
    kernel_shape = _kernel_of(kernel_shape, w)
    m = w[0] if w is not None else None
    if m is not None and m % group:
        raise ShapeError(f"the weight's output channels ({m}) are not divisible by "
                         f"group ({group})")
    if x is not None and w is not None and x[1] is not None and w[1] is not None:
        if x[1] != w[1] * group:
            raise ShapeError(f"input channels ({x[1]}) must equal weight channels ({w[1]}) "
                             f"times group ({group})")
    if x is not None and x[1] is not None and x[1] % group:
        raise ShapeError(f"input channels ({x[1]}) are not divisible by group ({group})")
    batch = x[0] if x is not None else None
    spatial = []
    for i in range(n):
        size = x[2 + i] if x is not None else None
        k = kernel_shape[i] if kernel_shape is not None else None
        if k is None:
            spatial.append(None if auto_pad not in ("SAME_UPPER", "SAME_LOWER") or size is None
                           else _ceil_div(size, strides[i]))
            continue
        spatial.append(conv_output_dim(size, k, strides[i], dilations[i], pads[i], pads[i + n],
                                       auto_pad, axis=i))
    return (batch, m) + tuple(spatial)


def conv_transpose(x, w, kernel_shape=None, strides=None, pads=None, dilations=None,
                   group: int = 1, auto_pad: str = "NOTSET", output_padding=None,
                   output_shape=None):
    """ConvTranspose: X is N x C x D.., W is C x M/group x k..; result N x M x O.."""
    _check_auto_pad(auto_pad)
    if group < 1:
        raise ShapeError(f"group must be positive, got {group}")
    for name, shape in (("input", x), ("weight", w)):
        if shape is not None and len(shape) < 3:
            raise ShapeError(f"conv_transpose {name} must have rank 3 or more, got {fmt(shape)}")
    if x is not None and w is not None and len(x) != len(w):
        raise ShapeError(f"conv_transpose input {fmt(x)} and weight {fmt(w)} must have the "
                         f"same rank")
    rank = len(x) if x is not None else len(w) if w is not None else None
    if rank is None:
        return None
    n = rank - 2
    kernel_shape, strides, pads, dilations = _spatial_attrs(
        n, kernel_shape, strides, pads, dilations, "conv_transpose")
    output_padding = list(output_padding) if output_padding else [0] * n
    if len(output_padding) != n:
        raise ShapeError(f"'output_padding' needs {n} values, got {len(output_padding)}")
    if output_shape is not None:
        output_shape = list(output_shape)
        if len(output_shape) == n + 2:
            output_shape = output_shape[2:]
        if len(output_shape) != n:
            raise ShapeError(f"'output_shape' needs {n} values, got {len(output_shape)}")
    kernel_shape = _kernel_of(kernel_shape, w)
    if x is not None and w is not None and x[1] is not None and w[0] is not None:
        if x[1] != w[0]:
            raise ShapeError(f"input channels ({x[1]}) must equal the weight's first "
                             f"dimension ({w[0]})")
    if x is not None and x[1] is not None and x[1] % group:
        raise ShapeError(f"input channels ({x[1]}) are not divisible by group ({group})")
    m = w[1] * group if w is not None and w[1] is not None else None
    batch = x[0] if x is not None else None
    spatial = []
    for i in range(n):
        if output_shape is not None:
            spatial.append(output_shape[i])
            continue
        size = x[2 + i] if x is not None else None
        k = kernel_shape[i] if kernel_shape is not None else None
        if size is None:
            spatial.append(None)
        elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            spatial.append(size * strides[i])
        elif k is None:
            spatial.append(None)
        else:
            begin, end = (0, 0) if auto_pad == "VALID" else (pads[i], pads[i + n])
            out = (strides[i] * (size - 1) + output_padding[i] + (k - 1) * dilations[i] + 1
                   - begin - end)
            if out < 1:
                raise ShapeError(f"conv_transpose output size would be {out} in spatial "
                                 f"dimension {i}")
            spatial.append(out)
    return (batch, m) + tuple(spatial)


def pool(x, kernel_shape, strides=None, pads=None, dilations=None, auto_pad: str = "NOTSET",
         ceil_mode: int = 0):
    """MaxPool / AveragePool: result N x C x O1..On."""
    _check_auto_pad(auto_pad)
    if kernel_shape is None:
        raise ShapeError("pooling needs 'kernel_shape'")
    n = len(kernel_shape)
    if x is not None and len(x) != n + 2:
        raise ShapeError(f"pooling input must have rank {n + 2} for a {n}-D kernel_shape, "
                         f"got {fmt(x)}")
    kernel_shape, strides, pads, dilations = _spatial_attrs(
        n, kernel_shape, strides, pads, dilations, "pooling")
    if x is None:
        return None
    spatial = tuple(
        conv_output_dim(x[2 + i], kernel_shape[i], strides[i], dilations[i], pads[i],
                        pads[i + n], auto_pad, bool(ceil_mode), axis=i)
        for i in range(n))
    return (x[0], x[1]) + spatial


def global_pool(x):
    if x is None:
        return None
    if len(x) < 2:
        raise ShapeError(f"global pooling input must have rank 2 or more, got {fmt(x)}")
    return (x[0], x[1]) + (1,) * (len(x) - 2)


# ---------------------------------------------------------------------------
# Normalization and reductions


def layer_norm_stats(x, axis: int):
    """Shape of LayerNormalization's Mean / InvStdDev outputs."""
    if x is None:
        return None
    axis = normalize_axis(axis, len(x))
    return tuple(x[:axis]) + (1,) * (len(x) - axis)


def reduce(x, axes=None, keepdims: int = 1, noop_with_empty_axes: int = 0,
           axes_count: int | None = None):
    """Reduce*: `axes` None or [] reduces everything (or nothing with
    noop_with_empty_axes). `axes` may hold None for unknown axes; `axes_count` is the
    number of axes when only that is known."""
    if x is None:
        return None
    rank = len(x)
    if axes is None and axes_count is not None:
        axes = [None] * axes_count
    if not axes:
        if noop_with_empty_axes:
            return tuple(x)
        return (1,) * rank if keepdims else ()
    axes = normalize_axes(axes, rank)
    if any(a is None for a in axes):
        if keepdims:
            return tuple(1 if d == 1 else None for d in x)
        return (None,) * (rank - len(axes)) if len(axes) <= rank else None
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(x))
    return tuple(d for i, d in enumerate(x) if i not in axes)


def arg_reduce(x, axis: int = 0, keepdims: int = 1):
    if x is None:
        return None
    axis = normalize_axis(axis, len(x))
    if keepdims:
        return tuple(1 if i == axis else d for i, d in enumerate(x))
    return tuple(d for i, d in enumerate(x) if i != axis)
