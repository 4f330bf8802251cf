"""Resize (opset 11-19 operands X, roi, scales, sizes): separable, one axis at a time.

Modes: nearest (nearest_mode round_prefer_floor/round_prefer_ceil/floor/ceil), linear, cubic
(cubic_coeff_a, exclude_outside), antialias for linear/cubic; every coordinate transformation
mode (half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric,
tf_crop_and_resize with extrapolation_value); scales or sizes with axes and
keep_aspect_ratio_policy. Nearest is a gather (exact, any dtype); linear/cubic compute their weights in float64 and
accumulate in float32 (float16/float32 inputs) or float64 (doubles, integers), then round to
the input type (integers: round half to even, then saturate, like ONNX's reference).
"""

from __future__ import annotations

import math

import numpy as np

from ._common import (
    choice_attr, f_attr, i_attr, ints_attr, kernel, norm_axis, op_error, opt, req,
    unsupported,
)

_MODES = ("nearest", "linear", "cubic")
_COORD_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
)
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")


def _source_coords(ctm, out_int, scale, in_len, roi):
    """Map output indices to (fractional) input coordinates; the second value flags
    positions outside the input (tf_crop_and_resize only)."""
    y = np.arange(out_int, dtype=np.float64)
    out_len = scale * in_len  # may be fractional when computed from a scale
    outside = None
    if ctm == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_int / out_len)
        x = offset + (y + 0.5) / scale - 0.5
    elif ctm == "pytorch_half_pixel":
        x = (y + 0.5) / scale - 0.5 if out_len > 1 else np.full(out_int, -0.5)
    elif ctm == "align_corners":
        x = y * (in_len - 1) / (out_len - 1) if out_len != 1 else np.zeros(out_int)
    elif ctm == "asymmetric":
        x = y / scale
    else:  # tf_crop_and_resize
        r0, r1 = roi
        if out_len != 1:
            x = y * (r1 - r0) * (in_len - 1) / (out_len - 1)
        else:
            x = np.full(out_int, (r1 - r0) * (in_len - 1) / 2)
        x = x + r0 * (in_len - 1)
        outside = (x < 0) | (x > in_len - 1)
    return x, outside


def _nearest_indices(coords, nearest_mode, in_len):
    """Source indices of `nearest` resizing: `coords` rounded as `nearest_mode` says."""
    floor = np.floor(coords)
    frac = coords - floor
    if nearest_mode == "round_prefer_floor":
        up = frac > 0.5
    elif nearest_mode == "round_prefer_ceil":
        up = frac >= 0.5
    elif nearest_mode == "floor":
        up = np.zeros_like(frac, dtype=bool)
    else:  # ceil
        up = frac > 0
    return np.clip(floor + up, 0, in_len - 1).astype(np.intp)


def _cubic(d, a):
    """Keys cubic convolution weight for distance d (array)."""
    d = np.abs(d)
    d2, d3 = d * d, d * d * d
    near = (a + 2) * d3 - (a + 3) * d2 + 1
    far = a * d3 - 5 * a * d2 + 8 * a * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _taps(mode, ratio, scale, antialias, cubic_a):
    """(first tap offset relative to floor-ish base, weights (out, n))."""
    r = ratio[:, None]
    if mode == "linear":
        if antialias and scale < 1:
            start = math.floor(-1 / scale) + 1
            offs = np.arange(start, 2 - start)
            w = np.clip(1 - np.abs((offs[None, :] - r) * scale), 0, 1)
            return start, w / w.sum(axis=1, keepdims=True)
        return 0, np.concatenate([1 - r, r], axis=1)
    # cubic
    if antialias and scale < 1:
        start = math.floor(-2 / scale) + 1
        offs = np.arange(start, 2 - start)
        w = _cubic(scale * (offs[None, :] - r), cubic_a)
        return start, w / w.sum(axis=1, keepdims=True)
    offs = np.arange(-1, 3)
    return -1, _cubic(offs[None, :] - r, cubic_a)


def tap_table(mode, coords, scale, antialias, cubic_a, exclude_outside, in_len):
    """Linear/cubic taps of each output position along one axis: (neighbours, weights),
    both (out, taps); neighbours are source indices before clipping, weights float64
    (with `exclude_outside`, taps outside [0, in_len) get 0 and the rest renormalize)."""
    # base = ceil(x) - 1, ratio in (0, 1]: an integral x takes ratio 1 on its left tap
    base = np.ceil(coords) - 1
    start, weights = _taps(mode, coords - base, scale, antialias, cubic_a)
    taps = weights.shape[1]
    neighbours = base[:, None].astype(np.int64) + start + np.arange(taps)[None, :]
    if exclude_outside:
        weights = np.where((neighbours < 0) | (neighbours >= in_len), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return neighbours, weights


def _resize_axis(data, axis, out_int, scale, roi, opts):
    mode, ctm = opts["mode"], opts["ctm"]
    in_len = data.shape[axis]
    if out_int == 0:
        shape = list(data.shape)
        shape[axis] = 0
        return np.empty(shape, dtype=data.dtype)
    x, outside = _source_coords(ctm, out_int, scale, in_len, roi)
    if mode == "nearest":
        res = np.take(data, _nearest_indices(x, opts["nearest_mode"], in_len), axis=axis)
    else:
        nb, w = tap_table(mode, x, scale, opts["antialias"], opts["cubic_a"],
                          opts["exclude_outside"], in_len)
        n = w.shape[1]
        idx = np.clip(nb, 0, in_len - 1).astype(np.intp)
        w = w.astype(data.dtype)
        wshape = (1,) * axis + (out_int,) + (1,) * (data.ndim - axis - 1)
        res = None
        for j in range(n):  # one whole-tensor gather per tap
            term = np.take(data, idx[:, j], axis=axis)
            term *= w[:, j].reshape(wshape)
            if res is None:
                res = term
            else:
                res += term
    if outside is not None and outside.any():
        mshape = (1,) * axis + (out_int,) + (1,) * (data.ndim - axis - 1)
        res = np.where(outside.reshape(mshape), opts["extrapolation_value"], res)
    return res


@kernel("Resize")
def resize(inputs, attrs):
    x = req("Resize", inputs, 0, "X")
    roi = opt(inputs, 1)
    scales = opt(inputs, 2)
    sizes = opt(inputs, 3)
    mode = choice_attr("Resize", attrs, "mode", "nearest", _MODES)
    ctm = choice_attr("Resize", attrs, "coordinate_transformation_mode", "half_pixel",
                      _COORD_MODES)
    nearest_mode = choice_attr("Resize", attrs, "nearest_mode", "round_prefer_floor",
                               _NEAREST_MODES)
    policy = choice_attr("Resize", attrs, "keep_aspect_ratio_policy", "stretch",
                         _ASPECT_POLICIES)
    antialias = i_attr(attrs, "antialias", 0)
    if antialias not in (0, 1) or (antialias and mode == "nearest"):
        raise unsupported("Resize", "antialias", antialias, (0,) if mode == "nearest" else (0, 1))
    opts = {
        "mode": mode,
        "ctm": ctm,
        "nearest_mode": nearest_mode,
        "antialias": bool(antialias),
        "cubic_a": f_attr(attrs, "cubic_coeff_a", -0.75),
        "exclude_outside": i_attr(attrs, "exclude_outside", 0),
        "extrapolation_value": f_attr(attrs, "extrapolation_value", 0.0),
    }
    r = x.ndim
    axes = ints_attr(attrs, "axes")
    axes = list(range(r)) if axes is None else [norm_axis("Resize", a, r, "axes entry") for a in axes]
    has_scales = scales is not None and np.size(scales) > 0
    has_sizes = sizes is not None and np.size(sizes) > 0
    if has_scales == has_sizes:
        raise op_error("Resize", "exactly one of the scales and sizes operands must be given")
    if has_scales:
        sc = [float(v) for v in np.asarray(scales).reshape(-1)]
        if len(sc) != len(axes):
            raise op_error("Resize", f"{len(sc)} scales for {len(axes)} axes")
        if any(v <= 0 for v in sc):
            raise op_error("Resize", f"scales must be positive, got {sc}")
        out = [int(math.floor(v * x.shape[a])) for v, a in zip(sc, axes)]
    else:
        sz = [int(v) for v in np.asarray(sizes).reshape(-1)]
        if len(sz) != len(axes):
            raise op_error("Resize", f"{len(sz)} sizes for {len(axes)} axes")
        sc = [s / x.shape[a] for s, a in zip(sz, axes)]
        if policy != "stretch":
            s = min(sc) if policy == "not_larger" else max(sc)
            sc = [s] * len(axes)
            out = [int(s * x.shape[a] + 0.5) for a in axes]
        else:
            out = sz
    roi_v = None
    if ctm == "tf_crop_and_resize":
        if roi is None or np.size(roi) == 0:
            raise op_error("Resize", "coordinate_transformation_mode 'tf_crop_and_resize' needs roi")
        rv = [float(v) for v in np.asarray(roi).reshape(-1)]
        if len(rv) == 2 * len(axes):
            roi_v = {a: (rv[i], rv[i + len(axes)]) for i, a in enumerate(axes)}
        elif len(rv) == 2 * r:
            roi_v = {a: (rv[a], rv[a + r]) for a in axes}
        else:
            raise op_error("Resize", f"roi has {len(rv)} values for {len(axes)} axes")
    if mode == "nearest":
        y = x
    else:  # float32 accumulation for float16/32 inputs; float64 for doubles and integers
        y = x.astype(np.float32 if x.dtype in (np.float16, np.float32) else np.float64)
    for a, s, o in zip(axes, sc, out):
        ra = roi_v[a] if roi_v is not None else None
        if o == y.shape[a] and math.isclose(s, 1.0) and (ra is None or ra == (0.0, 1.0)):
            continue
        y = _resize_axis(y, a, o, s, ra, opts)
    if mode == "nearest":
        if y is x:
            y = x.copy()
        if roi_v is not None:  # extrapolation_value may have promoted the dtype
            y = y.astype(x.dtype, copy=False)
        return [y]
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        y = np.clip(np.round(y), info.min, info.max)
    return [y.astype(x.dtype)]
