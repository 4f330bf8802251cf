"""pool2d on numpy: max / avg, separable through the padded workspace (rows, then
columns, padding cells skipped), or over strided window views. Registered in
`KERNEL_IMPLS` (kernel_ops.py, which imports this module); the table there says how it
works."""

from __future__ import annotations

import numpy as np

from palimpsest.backends.numpy.kernel_ops import (
    _scalar, _view_as, config_of, impl, workspaces_by_role)
# the window helpers, read when a kernel runs: kernel_ops imports this module while
# kernel_ops_conv (which imports kernel_ops) may still be loading
from palimpsest.backends.numpy import kernel_ops_conv as windows


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
    combine = np.maximum if is_max else np.add
    padded = ws.get("padded")
    rows = _axis_taps(h, kh, sh, dh, top, ho)
    cols = _axis_taps(wd, kw, sw, dw, left, wo)
    if padded is not None and rows and cols and padded.size >= c * ho * wd:
        # separable: rows first (their taps read whole image rows), then columns, through
        # the padded workspace; padding cells are skipped, not read
        middle = _view_as(_view_as(padded, (padded.size,))[:c * ho * wd], (c, ho, wd))
        for image in range(n):
            _pool_axis(x[image], middle, 1, rows, combine)
            _pool_axis(middle, y[image], 2, cols, combine)
    else:
        _pool_windows(x, y, padded, ((kh, kw), (sh, sw), (dh, dw), (top, left)), combine)
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


def _axis_taps(size, k, s, d, begin, out):
    """Along one axis: per kernel tap that reads the input, (input slice, output range
    [lo, hi)), the tap that every output reads first; None when no tap reads the input
    for every output (then a window can lie wholly in the padding)."""
    taps = []
    for t in range(k):
        lo, hi, start = windows._tap_range(size, t * d, s, begin, out)
        if hi > lo:
            taps.append((slice(start, start + (hi - lo - 1) * s + 1, s), lo, hi))
    full = [tap for tap in taps if tap[1] == 0 and tap[2] == out]
    if not full:
        return None
    return full[:1] + [tap for tap in taps if tap is not full[0]]


def _pool_axis(src, dst, axis, taps, combine):
    """dst = combine over `taps` of src along `axis` (1 or 2 of C x H x W)."""
    def at(a, index):
        return a[:, index] if axis == 1 else a[:, :, index]

    (base, _, out), others = taps[0], taps[1:]
    if not others:
        np.copyto(dst, at(src, base))
        return
    first, lo, hi = others[0]
    # the base tap joins the second over the second's range, and is copied elsewhere
    part = slice(base.start + lo * base.step, base.start + (hi - 1) * base.step + 1, base.step)
    combine(at(src, part), at(src, first), out=at(dst, slice(lo, hi)))
    if lo:
        np.copyto(at(dst, slice(0, lo)), at(src, slice(base.start, base.start + (lo - 1) *
                                                        base.step + 1, base.step)))
    if hi < out:
        start = base.start + hi * base.step
        np.copyto(at(dst, slice(hi, out)),
                  at(src, slice(start, start + (out - hi - 1) * base.step + 1, base.step)))
    for tap, lo, hi in others[1:]:
        window = at(dst, slice(lo, hi))
        combine(window, at(src, tap), out=window)


def _pool_windows(x, y, padded, geometry, combine):
    """Every kernel offset's strided window combined into Y, through the padded image;
    `geometry` = (kernel, strides, dilations, (top, left) pads)."""
    n, c, h, wd = x.shape
    (kh, kw), (sh, sw), (dh, dw), (top, left) = geometry
    ho, wo = y.shape[2], y.shape[3]
    if padded is not None:
        if combine is np.add:
            fill = 0
        elif x.dtype.kind == "f":
            fill = -np.inf
        else:
            fill = np.iinfo(x.dtype).min
        eh, ew = padded.shape[1], padded.shape[2]
        rows, cols = max(0, min(h, eh - top)), max(0, min(wd, ew - left))
        windows._fill_border(padded, top, left, rows, cols, fill)
    for image in range(n):
        src = x[image]
        if padded is not None:
            np.copyto(padded[:, top:top + rows, left:left + cols], src[:, :rows, :cols])
            src = padded
        target = y[image]
        for index, (p, q) in enumerate((p, q) for p in range(kh) for q in range(kw)):
            window = windows._window(src, p, q, dh, dw, sh, sw, ho, wo)
            if index == 0:
                np.copyto(target, window)
            else:
                combine(target, window, out=target)
