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
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

Dim = int | None
Shape = tuple  # tuple[Dim, ...]


class ShapeError(ValueError):
    """The operands, attributes or known values can never make a valid op."""


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


def conv(x, w, kernel_shape=None, strides=None, pads=None, dilations=None, group: int = 1,
         auto_pad: str = "NOTSET"):
    """Conv: X is N x C x D1..Dn, W is M x C/group x k1..kn; result N x M x O1..On."""
    if auto_pad not in AUTO_PADS:
        raise ShapeError(f"auto_pad must be one of {', '.join(AUTO_PADS)}, got '{auto_pad}'")
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
    if w is not None:
        if kernel_shape is not None:
            for i, (k, d) in enumerate(zip(kernel_shape, w[2:])):
                if d is not None and d != k:
                    raise ShapeError(f"kernel_shape {kernel_shape} does not match the weight "
                                     f"shape {fmt(w)} (spatial dimension {i})")
        else:
            kernel_shape = list(w[2:])
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
    if auto_pad not in AUTO_PADS:
        raise ShapeError(f"auto_pad must be one of {', '.join(AUTO_PADS)}, got '{auto_pad}'")
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
    if w is not None:
        if kernel_shape is not None:
            for i, (k, d) in enumerate(zip(kernel_shape, w[2:])):
                if d is not None and d != k:
                    raise ShapeError(f"kernel_shape {kernel_shape} does not match the weight "
                                     f"shape {fmt(w)} (spatial dimension {i})")
        else:
            kernel_shape = list(w[2:])
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
    if auto_pad not in AUTO_PADS:
        raise ShapeError(f"auto_pad must be one of {', '.join(AUTO_PADS)}, got '{auto_pad}'")
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


def _vals(values) -> str:
    return "[" + ", ".join("?" if v is None else str(v) for v in values) + "]"


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
        rank = max(len(x), target_len)
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
