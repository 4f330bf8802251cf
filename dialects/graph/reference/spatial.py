"""Reference kernels of ops_spatial.py, and Upsample (which the importer turns into Resize)."""

from __future__ import annotations

import itertools

import numpy as np

from ._common import i_attr, ints_attr, ints_of, kernel, norm_axis, op_error, opt, req, s_attr
from .resize import resize

# -- GridSample ---------------------------------------------------------------------------


def _reflect(x, low, high):
    """Reflect x into [low, high] by the nearer border, repeatedly."""
    span = high - low
    if span <= 0:
        return np.full_like(x, low)
    below, above = x < low, x > high
    dx = np.where(below, low - x, np.where(above, x - high, 0.0))
    n = np.floor(dx / span)
    r = dx - n * span
    even = (n % 2) == 0
    from_low = np.where(even, low + r, high - r)
    from_high = np.where(even, high - r, low + r)
    return np.where(below, from_low, np.where(above, from_high, x))


def _cubic_weights(t):
    """Keys' cubic convolution weights (a = -0.75) of the taps at -1, 0, 1, 2."""
    a = -0.75

    def near(d):
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


@kernel("GridSample")
def grid_sample(inputs, attrs):
    x = req("GridSample", inputs, 0, "X")
    grid = req("GridSample", inputs, 1, "grid").astype(np.float64)
    mode = s_attr(attrs, "mode", "linear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding = s_attr(attrs, "padding_mode", "zeros")
    align = i_attr(attrs, "align_corners", 0)
    dims = x.shape[2:]
    rank = len(dims)
    coords = grid[..., ::-1]          # grid's last dim is (x, y, z...): reversed to dim order
    n_index = np.arange(x.shape[0]).reshape((-1,) + (1,) * (grid.ndim - 2))
    taps_per_dim = []
    for d in range(rank):
        size = dims[d]
        c = coords[..., d]
        pos = (c + 1) / 2 * (size - 1) if align else ((c + 1) * size - 1) / 2
        low, high = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        if mode == "nearest":
            pos = np.rint(pos)
        # Padding applies to each tap, as in PyTorch and onnxruntime. Reflecting the
        # position too changes nothing (the reflected signal is symmetric) but keeps far
        # positions near the image; clamping it would change cubic taps near the border.
        if padding == "reflection":
            pos = np.where((pos < low) | (pos > high), _reflect(pos, low, high), pos)
        if mode == "nearest":
            taps = [(pos.astype(np.int64), np.ones_like(pos))]
        else:
            base = np.floor(pos)
            t = pos - base
            if mode == "linear":
                offsets, weights = (0, 1), (1 - t, t)
            else:
                offsets, weights = (-1, 0, 1, 2), _cubic_weights(t)
            taps = [((base + o).astype(np.int64), w) for o, w in zip(offsets, weights)]
        fixed = []
        for index, weight in taps:
            if padding == "zeros":
                valid = (index >= 0) & (index < size)
                weight = np.where(valid, weight, 0.0)
                index = np.clip(index, 0, size - 1)
            elif padding == "border":
                index = np.clip(index, 0, size - 1)
            else:
                index = np.clip(np.trunc(_reflect(index.astype(np.float64), low, high))
                                .astype(np.int64), 0, size - 1)
            fixed.append((index, weight))
        taps_per_dim.append(fixed)
    out = np.zeros(grid.shape[:-1] + (x.shape[1],), np.float64)
    xd = x.astype(np.float64)
    for combination in itertools.product(*taps_per_dim):
        weight = np.ones(grid.shape[:-1])
        index = [n_index, slice(None)]
        for i, w in combination:
            weight = weight * w
            index.append(i)
        # advanced indices split by the channel slice: numpy puts their dims first
        values = xd[tuple(index)]
        out += values * weight[..., None]
    y = np.moveaxis(out, -1, 1)
    return [y.astype(x.dtype)]


# -- AffineGrid ---------------------------------------------------------------------------


def _base_coords(size, align):
    if align:
        return np.linspace(-1, 1, size) if size > 1 else np.zeros(1)
    return (np.arange(size) * 2 + 1) / size - 1


@kernel("AffineGrid")
def affine_grid(inputs, attrs):
    theta = req("AffineGrid", inputs, 0, "theta")
    size = ints_of(req("AffineGrid", inputs, 1, "size"))
    align = i_attr(attrs, "align_corners", 0)
    spatial = size[2:]
    axes = [_base_coords(s, align) for s in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")       # dim order (D,) H, W
    points = np.stack([m for m in mesh[::-1]] + [np.ones_like(mesh[0])], axis=-1)
    flat = points.reshape(-1, len(spatial) + 1)
    grid = np.einsum("pk,nck->npc", flat, theta.astype(np.float64))
    return [grid.reshape((size[0],) + tuple(spatial) + (len(spatial),)).astype(theta.dtype)]


# -- RoiAlign -----------------------------------------------------------------------------


def _roi_samples(start, bin_size, bins, grid):
    """Sample positions along one axis: bins x grid."""
    offsets = (np.arange(grid) + 0.5) * bin_size / grid
    return start + np.arange(bins)[:, None] * bin_size + offsets[None, :]


def _roi_taps(pos, size):
    """(low, high, weight of low, weight of high, valid) as ONNX's RoiAlign reads them."""
    valid = (pos >= -1.0) & (pos <= size)
    pos = np.maximum(pos, 0)
    low = pos.astype(np.int64)
    at_end = low >= size - 1
    low = np.where(at_end, size - 1, low)
    high = np.where(at_end, size - 1, low + 1)
    pos = np.where(at_end, low, pos)
    frac = pos - low
    return low, high, 1 - frac, frac, valid


@kernel("RoiAlign")
def roi_align(inputs, attrs):
    x = req("RoiAlign", inputs, 0, "X")
    rois = req("RoiAlign", inputs, 1, "rois").astype(np.float64)
    batch = ints_of(req("RoiAlign", inputs, 2, "batch_indices"))
    if any(not 0 <= b < x.shape[0] for b in batch):
        raise op_error("RoiAlign", f"batch_indices {batch} are out of range for a batch of "
                       f"{x.shape[0]}")
    out_h, out_w = i_attr(attrs, "output_height", 1), i_attr(attrs, "output_width", 1)
    ratio = i_attr(attrs, "sampling_ratio", 0)
    scale = float(attrs.get("spatial_scale", 1.0))
    half_pixel = s_attr(attrs, "coordinate_transformation_mode", "half_pixel") == "half_pixel"
    mode = s_attr(attrs, "mode", "avg")
    height, width = x.shape[2:]
    y = np.zeros((len(rois), x.shape[1], out_h, out_w), np.float64)
    shift = 0.5 if half_pixel else 0.0
    for r, (roi, b) in enumerate(zip(rois, batch)):
        x0, y0, x1, y1 = roi * scale - shift
        roi_w, roi_h = x1 - x0, y1 - y0
        if not half_pixel:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        grid_h = ratio if ratio > 0 else int(np.ceil(roi_h / out_h))
        grid_w = ratio if ratio > 0 else int(np.ceil(roi_w / out_w))
        ys = _roi_samples(y0, roi_h / out_h, out_h, grid_h)   # out_h x grid_h
        xs = _roi_samples(x0, roi_w / out_w, out_w, grid_w)
        yl, yh, wyl, wyh, vy = _roi_taps(ys, height)
        xl, xh, wxl, wxh, vx = _roi_taps(xs, width)
        image = x[b].astype(np.float64)                          # C x H x W
        shape = (out_h, grid_h, out_w, grid_w)

        def tap(yi, xi, wy, wx):
            values = image[:, yi[:, :, None, None], xi[None, None, :, :]]
            weight = (wy[:, :, None, None] * wx[None, None, :, :])
            return values * weight

        valid = (vy[:, :, None, None] & vx[None, None, :, :]).reshape(shape)
        taps = [tap(yl, xl, wyl, wxl), tap(yl, xh, wyl, wxh), tap(yh, xl, wyh, wxl),
                tap(yh, xh, wyh, wxh)]
        if mode == "avg":
            total = np.where(valid, sum(taps), 0.0)
            y[r] = total.sum(axis=(2, 4)) / max(grid_h * grid_w, 1)
        else:
            best = np.where(valid, np.maximum.reduce(taps), 0.0)
            y[r] = best.max(axis=(2, 4))
    return [y.astype(x.dtype)]


# -- Col2Im, DeformConv, MaxUnpool --------------------------------------------------------


def _spatial_attrs(attrs, rank):
    dilations = ints_attr(attrs, "dilations", [1] * rank)
    pads = ints_attr(attrs, "pads", [0] * (2 * rank))
    strides = ints_attr(attrs, "strides", [1] * rank)
    return dilations, pads, strides


@kernel("Col2Im")
def col2im(inputs, attrs):
    x = req("Col2Im", inputs, 0, "input")
    image = ints_of(req("Col2Im", inputs, 1, "image_shape"))
    block = ints_of(req("Col2Im", inputs, 2, "block_shape"))
    rank = len(image)
    dilations, pads, strides = _spatial_attrs(attrs, rank)
    padded = [image[i] + pads[i] + pads[i + rank] for i in range(rank)]
    counts = [(padded[i] - dilations[i] * (block[i] - 1) - 1) // strides[i] + 1
              for i in range(rank)]
    n, cols = x.shape[0], x.shape[1]
    channels = cols // int(np.prod(block))
    blocks = x.reshape((n, channels) + tuple(block) + tuple(counts))
    out = np.zeros((n, channels) + tuple(padded), x.dtype)
    for offset in itertools.product(*[range(b) for b in block]):
        at = tuple(slice(o * d, o * d + (c - 1) * s + 1, s)
                   for o, d, c, s in zip(offset, dilations, counts, strides))
        out[(slice(None), slice(None)) + at] += blocks[(slice(None), slice(None)) + offset]
    crop = tuple(slice(pads[i], pads[i] + image[i]) for i in range(rank))
    return [np.ascontiguousarray(out[(slice(None), slice(None)) + crop])]


def _linear_zero_outside(image, positions):
    """image: C x D1..Dn sampled at float positions (n arrays of one shape) by multilinear
    interpolation; corners outside the image count as 0."""
    dims = image.shape[1:]
    lows = [np.floor(p).astype(np.int64) for p in positions]
    out = np.zeros((image.shape[0],) + positions[0].shape)
    for corner in itertools.product((0, 1), repeat=len(dims)):
        weight = np.ones(positions[0].shape)
        index = [slice(None)]
        for p, low, step, size in zip(positions, lows, corner, dims):
            i = low + step
            weight = np.where((i >= 0) & (i < size), weight * (1 - np.abs(p - i)), 0.0)
            index.append(np.clip(i, 0, size - 1))
        out += weight * image[tuple(index)]
    return out


@kernel("DeformConv")
def deform_conv(inputs, attrs):
    """Conv whose kernel taps are moved by `offset` (multilinear samples, 0 outside) and
    scaled by `mask`; any number of spatial dims."""
    x = req("DeformConv", inputs, 0, "X").astype(np.float64)
    w = req("DeformConv", inputs, 1, "W").astype(np.float64)
    offset = req("DeformConv", inputs, 2, "offset").astype(np.float64)
    bias, mask = opt(inputs, 3), opt(inputs, 4)
    n, c = x.shape[:2]
    out_c, kernel = w.shape[0], w.shape[2:]
    rank = len(kernel)
    dilations, pads, strides = _spatial_attrs(attrs, rank)
    group, offset_group = i_attr(attrs, "group", 1), i_attr(attrs, "offset_group", 1)
    out = offset.shape[2:]
    taps = int(np.prod(kernel))
    offset = offset.reshape((n, offset_group, taps, rank) + out)
    mask = np.ones((n, offset_group, taps) + out) if mask is None else \
        mask.astype(np.float64).reshape((n, offset_group, taps) + out)
    # each output position's first kernel tap, along each dim (broadcastable to `out`)
    bases = [(np.arange(o) * s - p).reshape([-1 if i == d else 1 for i in range(rank)])
             for d, (o, s, p) in enumerate(zip(out, strides, pads))]
    columns = np.zeros((n, c, taps) + out)
    per_group = c // offset_group
    for b in range(n):
        for g in range(offset_group):
            channels = slice(g * per_group, (g + 1) * per_group)
            for k, tap in enumerate(itertools.product(*[range(size) for size in kernel])):
                positions = [bases[d] + tap[d] * dilations[d] + offset[b, g, k, d]
                             for d in range(rank)]
                columns[b, channels, k] = _linear_zero_outside(x[b, channels], positions) \
                    * mask[b, g, k]
    in_per_group, out_per_group = c // group, out_c // group
    positions = int(np.prod(out))
    y = np.zeros((n, out_c, positions))
    for g in range(group):
        cols = columns[:, g * in_per_group:(g + 1) * in_per_group].reshape(n, -1, positions)
        weights = w[g * out_per_group:(g + 1) * out_per_group].reshape(out_per_group, -1)
        y[:, g * out_per_group:(g + 1) * out_per_group] = weights @ cols
    if bias is not None:
        y += bias.reshape(1, -1, 1)
    return [y.reshape((n, out_c) + out).astype(inputs[0].dtype)]


@kernel("MaxUnpool")
def max_unpool(inputs, attrs):
    """X's values at their flat `I` indices of the pooled input's shape (inferred from the
    pooling attributes); a larger output_shape pads that at the end of each dim."""
    x = req("MaxUnpool", inputs, 0, "X")
    indices = req("MaxUnpool", inputs, 1, "I").astype(np.int64)
    kernel_shape = ints_attr(attrs, "kernel_shape")
    rank = len(kernel_shape)
    _, pads, strides = _spatial_attrs(attrs, rank)
    inferred = list(x.shape[:2]) + [(d - 1) * s + k - pads[i] - pads[i + rank] for i, (
        d, s, k) in enumerate(zip(x.shape[2:], strides, kernel_shape))]
    unpooled = np.zeros(int(np.prod(inferred)), x.dtype)
    flat = indices.reshape(-1)
    outside = flat[(flat < 0) | (flat >= unpooled.size)]
    if outside.size:
        # ONNX indexes the unpooled shape the attributes infer (output_shape only pads it)
        raise op_error("MaxUnpool", f"index {int(outside[0])} is outside the unpooled shape "
                       f"{inferred} inferred from the pooling attributes")
    unpooled[flat] = x.reshape(-1)
    unpooled = unpooled.reshape(inferred)
    shape = opt(inputs, 2)
    if shape is None:
        return [unpooled]
    out = np.zeros(ints_of(shape), x.dtype)
    out[tuple(slice(0, d) for d in inferred)] = unpooled
    return [out]


# -- CenterCropPad, SpaceToDepth, DepthToSpace -------------------------------------------


@kernel("CenterCropPad")
def center_crop_pad(inputs, attrs):
    x = req("CenterCropPad", inputs, 0, "input_data")
    target = ints_of(req("CenterCropPad", inputs, 1, "shape"))
    axes = ints_attr(attrs, "axes") or list(range(x.ndim))
    axes = [norm_axis("CenterCropPad", a, x.ndim) for a in axes]
    if len(target) != len(axes):
        raise op_error("CenterCropPad", f"shape has {len(target)} entries for {len(axes)} axes")
    out_shape = list(x.shape)
    source, dest = [slice(None)] * x.ndim, [slice(None)] * x.ndim
    for axis, size in zip(axes, target):
        have = x.shape[axis]
        out_shape[axis] = size
        if size < have:
            start = (have - size) // 2
            source[axis] = slice(start, start + size)
        elif size > have:
            start = (size - have) // 2
            dest[axis] = slice(start, start + have)
    out = np.zeros(out_shape, x.dtype)
    out[tuple(dest)] = x[tuple(source)]
    return [out]


@kernel("SpaceToDepth")
def space_to_depth(inputs, attrs):
    x = req("SpaceToDepth", inputs, 0, "input")
    b = i_attr(attrs, "blocksize", 1)
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b)
    if s_attr(attrs, "mode", "DCR") == "DCR":
        y = y.transpose(0, 3, 5, 1, 2, 4)
    else:
        y = y.transpose(0, 1, 3, 5, 2, 4)
    return [np.ascontiguousarray(y.reshape(n, c * b * b, h // b, w // b))]


@kernel("DepthToSpace")
def depth_to_space(inputs, attrs):
    x = req("DepthToSpace", inputs, 0, "input")
    b = i_attr(attrs, "blocksize", 1)
    n, c, h, w = x.shape
    if s_attr(attrs, "mode", "DCR") == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return [np.ascontiguousarray(y.reshape(n, c // (b * b), h * b, w * b))]


# -- Upsample -----------------------------------------------------------------------------


@kernel("Upsample")
def upsample(inputs, attrs):
    """Upsample-7 (a `scales` attribute) and -9 (a scales operand): Resize with asymmetric
    coordinates, nearest rounding down (the rewrite onnx_opsets.py makes on import)."""
    x = req("Upsample", inputs, 0, "X")
    scales = opt(inputs, 1)
    if scales is None:
        scales = attrs.get("scales")
    if scales is None:
        raise op_error("Upsample", "needs scales (an operand since opset 9, before an attribute)")
    mode = s_attr(attrs, "mode", "nearest")
    if mode not in ("nearest", "linear", "bilinear"):
        raise op_error("Upsample", f"unsupported mode {mode!r} (nearest, linear)")
    return resize([x, None, np.asarray(scales, np.float32)], {
        "mode": "linear" if mode == "bilinear" else mode,
        "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"})
