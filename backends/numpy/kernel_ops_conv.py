"""Sliding-window kernels on numpy: conv2d (im2col + grouped matmul, depthwise per kernel
offset) and pool2d (max / avg over strided window views). Registered in `KERNEL_IMPLS`
(kernel_ops.py, which imports this module); the table there says how each works."""

from __future__ import annotations

import numpy as np

from palimpsest.backends.numpy.kernel_ops import (
    _scalar, _view_as, config_of, impl, workspaces_by_role)
from palimpsest.dialects import kernel as K


def _window(src, p, q, dh, dw, sh, sw, ho, wo):
    """The (C, ho, wo) strided view of `src` (C, H, W) read by kernel offset (p, q)."""
    return src[:, p * dh:p * dh + (ho - 1) * sh + 1:sh, q * dw:q * dw + (wo - 1) * sw + 1:sw]


def _im2col_view(src, kh, kw, dh, dw, sh, sw, ho, wo):
    """The read-only (C, kh, kw, ho, wo) view of `src` (C, H, W): [c, p, q] is the window
    of kernel offset (p, q) (what `_window` gives), without a copy."""
    from numpy.lib.stride_tricks import as_strided

    c = src.shape[0]
    s0, s1, s2 = src.strides
    return as_strided(src, (c, kh, kw, ho, wo), (s0, s1 * dh, s2 * dw, s1 * sh, s2 * sw),
                      writeable=False)


def _fill_border(canvas, top, left, height, width, value) -> None:
    """Fill everything of `canvas` (C, Eh, Ew) outside [top, top+height) x [left,
    left+width) with `value`."""
    canvas[:, :top] = value
    canvas[:, top + height:] = value
    canvas[:, top:top + height, :left] = value
    canvas[:, top:top + height, left + width:] = value


# -- conv2d -----------------------------------------------------------------------------------

@impl("kernel.conv2d")
def conv2d(op, inputs, outputs, workspaces):
    config = config_of(op)
    ws = workspaces_by_role(op, workspaces)
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    y = outputs[0]
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    group = config["group"]
    sh, sw = config["strides"]
    dh, dw = config["dilations"]
    top, left = config["pads"][0], config["pads"][1]
    ho, wo = y.shape[2], y.shape[3]
    mg = m // group
    weights = w.reshape(group, mg, cg * kh * kw)
    padded, cols = ws.get("padded"), ws.get("im2col")
    if padded is not None:
        _fill_border(padded, top, left, h, wd, 0)
    if K.Conv2dOp.is_depthwise(w.shape, config):
        _depthwise(x, w, y, padded, ws.get("product"), top, left, (sh, sw), (dh, dw))
        if bias is not None:
            np.add(y, bias.reshape(1, m, 1, 1), out=y)
        return
    if cols is not None:
        cols5 = _view_as(cols, (c, kh, kw, ho, wo))
        matrix = _view_as(cols, (group, cg * kh * kw, ho * wo))
    for image in range(n):
        src = x[image]
        if padded is not None:
            np.copyto(padded[:, top:top + h, left:left + wd], src)
            src = padded
        if cols is not None:  # all kernel offsets in one strided copy
            np.copyto(cols5, _im2col_view(src, kh, kw, dh, dw, sh, sw, ho, wo))
            mat = matrix
        else:  # 1x1, stride 1, no pads: the image is the matrix
            mat = src.reshape(group, cg, h * wd)
        np.matmul(weights, mat, out=_view_as(y[image], (group, mg, ho * wo)))
    if bias is not None:
        np.add(y, bias.reshape(1, m, 1, 1), out=y)


def _depthwise(x, w, y, padded, product, top, left, strides, dilations):
    """One input channel per group: y[n, c*mg + j] = sum over kernel offsets of
    w[c*mg + j, 0, p, q] * window(p, q)[c], accumulated in Y through `product`."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    mg = m // c
    ho, wo = y.shape[2], y.shape[3]
    (sh, sw), (dh, dw) = strides, dilations
    weights = w.reshape(c, mg, kh, kw)
    if product is not None:
        product4 = _view_as(product, (c, mg, ho, wo))
    for image in range(n):
        src = x[image]
        if padded is not None:
            np.copyto(padded[:, top:top + h, left:left + wd], src)
            src = padded
        target = _view_as(y[image], (c, mg, ho, wo))
        for p in range(kh):
            for q in range(kw):
                window = _window(src, p, q, dh, dw, sh, sw, ho, wo)[:, None]
                scale = weights[:, :, p, q][:, :, None, None]
                if p == 0 and q == 0:
                    np.multiply(window, scale, out=target)
                else:
                    np.multiply(window, scale, out=product4)
                    np.add(target, product4, out=target)


# -- pool2d -------------------------------------------------------------------------------------

def _window_counts(size, k, s, d, begin, end, out, include_pad) -> list:
    """How many cells of each window along one axis count toward an average."""
    lo, hi = (-begin, size + end) if include_pad else (0, size)
    counts = []
    for j in range(out):
        start = j * s - begin
        counts.append(sum(1 for t in range(k) if lo <= start + t * d < hi))
    return counts


@impl("kernel.pool2d")
def pool2d(op, inputs, outputs, workspaces):
    config = config_of(op)
    ws = workspaces_by_role(op, workspaces)
    x, y = inputs[0], outputs[0]
    n, c, h, wd = x.shape
    kh, kw = config["kernel_shape"]
    sh, sw = config["strides"]
    dh, dw = config["dilations"]
    top, left = config["pads"][0], config["pads"][1]
    ho, wo = y.shape[2], y.shape[3]
    is_max = config["mode"] == "max"
    padded = ws.get("padded")
    if padded is not None:
        if not is_max:
            fill = 0
        elif x.dtype.kind == "f":
            fill = -np.inf
        else:
            fill = np.iinfo(x.dtype).min
        eh, ew = padded.shape[1], padded.shape[2]
        rows, cols = max(0, min(h, eh - top)), max(0, min(wd, ew - left))
        _fill_border(padded, top, left, rows, cols, fill)
    for image in range(n):
        src = x[image]
        if padded is not None:
            np.copyto(padded[:, top:top + rows, left:left + cols], src[:, :rows, :cols])
            src = padded
        target = y[image]
        for index, (p, q) in enumerate((p, q) for p in range(kh) for q in range(kw)):
            window = _window(src, p, q, dh, dw, sh, sw, ho, wo)
            if index == 0:
                np.copyto(target, window)
            elif is_max:
                np.maximum(target, window, out=target)
            else:
                np.add(target, window, out=target)
    if is_max:
        return
    divisor = ws.get("divisor")
    if divisor is None:
        np.divide(y, _scalar(kh * kw, y.dtype), out=y)
        return
    include = config["count_include_pad"]
    pads = config["pads"]
    rows_count = _window_counts(h, kh, sh, dh, pads[0], pads[2], ho, include)
    cols_count = _window_counts(wd, kw, sw, dw, pads[1], pads[3], wo, include)
    np.multiply.outer(np.asarray(rows_count, y.dtype), np.asarray(cols_count, y.dtype),
                      out=divisor)
    np.divide(y, divisor, out=y)
