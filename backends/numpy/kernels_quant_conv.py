"""`buffer.compute` fast path of ConvInteger on numpy (kernels.py imports this module,
which registers it in its `FAST` table), sharing the 8-bit products and the centred
operands of kernels_quant.py.

| graph op | how |
|---|---|
| conv_integer (2-D, 8-bit, per-tensor x zero point, per-tensor/channel W's) | on oneDNN: the filters (uint8) times the windows as they lie in the image (int8), one product row of ones for the windows' sums, the product landing in NCHW; else im2col of the centred input (a strided window view, copied once) and one grouped GEMM (2-D for one image and group) |
"""

from __future__ import annotations

import numpy as np

from palimpsest.backends.numpy import int8_products
from palimpsest.backends.numpy.kernels import FAST
from palimpsest.backends.numpy.kernels_quant import (_centre, _exact_floats, _fits_int32,
                                                     _integer_operands)
from palimpsest.dialects.graph.reference.quant import centred


def _conv_integer(inputs, attrs, outs):
    """2-D ConvInteger as im2col (a strided window view of the centred, padded input,
    copied once) and one grouped BLAS GEMM per image batch; per-tensor x zero point,
    per-tensor or per-output-channel W's. Anything else (other ranks, auto_pad the
    reference rejects): the reference."""
    from palimpsest.dialects.graph.reference.nn import _window_geometry

    operands = _integer_operands(inputs, outs)
    if operands is None:
        return False
    out, x, w, x_zero, w_zero = operands
    if x.ndim != 4 or w.ndim != 4 or (w_zero is not None and w_zero.size not in (1, w.shape[0])):
        return False
    n, c, h, width = x.shape
    m, cg, kh, kw = w.shape
    group = int(attrs.get("group", 1))
    kernel_shape = attrs.get("kernel_shape")
    if group < 1 or c != cg * group or m % group or (
            kernel_shape is not None and [int(k) for k in kernel_shape] != [kh, kw]):
        return False
    try:
        strides, dilations, _, begin, end, size = _window_geometry(
            "ConvInteger", attrs, [h, width], [kh, kw])
    except Exception:  # noqa: BLE001 - the reference kernel reports it
        return False
    if min(begin + end) < 0 or out.shape != (n, m, size[0], size[1]):
        return False
    weight = centred(w, w_zero, (-1, 1, 1, 1) if w_zero is not None and w_zero.size > 1
                     else (), (1, 2, 3))
    zero = 0.0 if x_zero is None else float(x_zero.reshape(-1)[0])
    depth, pixels = cg * kh * kw, size[0] * size[1]
    on_onednn = out.flags.c_contiguous and int8_products.usable(
        x.dtype, w.reshape(m, depth)[:m // group].T, n * pixels) \
        and _fits_int32(x.dtype, zero, weight)
    if on_onednn:   # int8 windows (a uint8 x flipped by its top bit, its zero point
        dtype = np.int8   # too); pads read as the zero point
        zero = pad = int(zero) - (128 if x.dtype == np.uint8 else 0)
    else:           # centred float windows; pads 0 once centred
        dtype, weights = _exact_floats(x, zero, weight)
        pad = 0
    padded = np.empty((n, c, h + begin[0] + end[0], width + begin[1] + end[1]), dtype)
    if padded.shape != x.shape:
        padded.fill(pad)
    inner = padded[:, :, begin[0]:begin[0] + h, begin[1]:begin[1] + width]
    if on_onednn:
        _copy_signed(x, inner)
    else:
        _centre(x, zero, dtype, inner)
    sn, sc, sh, sw = padded.strides
    # (a view through the ndarray constructor: numpy's as_strided takes ~6 us)
    windows = np.ndarray((n, c, kh, kw, size[0], size[1]), dtype, padded, 0,
                         (sn, sc, sh * dilations[0], sw * dilations[1],
                          sh * strides[0], sw * strides[1]))
    if on_onednn:
        _onednn_products(out, windows, zero, w, w_zero, weight, group)
        return True
    if n == 1 and group == 1:   # 2-D: numpy's stacked matmul costs more (as products)
        product = np.matmul(weights.reshape(m, depth), windows.reshape(depth, pixels))
    else:
        product = np.matmul(weights.reshape(group, m // group, depth),
                            windows.reshape(n, group, depth, pixels))
    np.copyto(out, product.reshape(out.shape), casting="unsafe")
    return True


def _copy_signed(x, into) -> None:
    """8-bit x into the int8 `into`: a uint8 x flipped by its top bit (x - 128)."""
    if x.dtype == np.int8:
        np.copyto(into, x)
    else:
        np.bitwise_xor(x, np.uint8(0x80), out=into.view(np.uint8))


def _filters(w, w_zero, part):
    """ConvInteger's filters `w` (filters x depth, 8-bit) less `w_zero` as the uint8 left
    operand of oneDNN's GEMM: (the rows as uint8 (int8 ones flipped by the top bit)
    with a row of ones below them, their zero points as int32 (one per row, or one for
    all), each row's sum less depth times its zero point)."""
    rows, shift = int8_products.unsigned(w, 0)
    zeros = np.int32(shift) if w_zero is None else \
        w_zero.astype(np.int32).reshape(-1) + np.int32(shift)
    zeros = np.int32(zeros.reshape(-1)[0]) if zeros.size == 1 else zeros[part]
    sums = rows.sum(axis=1, dtype=np.int32) - np.int32(rows.shape[1]) * zeros
    return np.vstack([rows, np.ones((1, rows.shape[1]), np.uint8)]), zeros, sums


def _onednn_products(out, windows, zero: int, w, w_zero, weight, group) -> None:
    """ConvInteger's grouped product on oneDNN, with the filters as the uint8 operand
    (rows already: m/g x depth) and the int8 windows as the other, copied as they lie
    (depth x pixels: a row per filter tap, each a strided run of the image, ~25x
    faster to copy than the pixels x depth rows of the other order, whose int32
    product a transpose would then put back into the out's order at ~1 ns an element):
    the product comes in the out's own layout (filters x pixels) and is corrected for
    the offsets on its way into the out, exactly (int32 arithmetic wraps; the caller
    checked that the result fits):

        (f - f0)(b - b0) = P - f0 colsum(b) - b0 (rowsum(f) - depth f0)

    colsum(b) as one more row of the product, by a row of ones below the filters
    (numpy's sum over the depth axis, or a product of its own, costs as much as the
    GEMM)."""
    from palimpsest.backends import onednn

    n, c, kh, kw, height, width = windows.shape
    m, per_group = w.shape[0], w.shape[0] // group
    cg, pixels = c // group, height * width
    depth = cg * kh * kw
    flat = w.reshape(m, depth)
    columns = np.empty((cg, kh, kw, height, width), np.int8)
    product = np.empty((per_group + 1, pixels), np.int32)
    sums = product[-1]
    for g in range(group):
        channels = slice(g * per_group, (g + 1) * per_group)
        rows, zeros, row_sums = weight.layout(("onednn-filters", g), lambda: _filters(
            flat[channels], w_zero, channels))
        offsets = (row_sums * np.int32(zero))[..., None]
        for image in range(n):
            block = windows[image, g * cg:(g + 1) * cg]
            if not block.flags.c_contiguous:   # (a 1 x 1 conv's windows are the image)
                np.copyto(columns, block)
                block = columns
            into = out[image, channels].reshape(per_group, pixels)
            onednn.gemm_u8s8(rows, block.reshape(depth, pixels), product, b_plain=True)
            if zeros.ndim:
                np.subtract(product[:-1], zeros[:, None] * sums, out=into)
            else:
                np.multiply(sums, zeros, out=sums)
                np.subtract(product[:-1], sums, out=into)
            if zero:
                into -= offsets


FAST["graph.conv_integer"] = _conv_integer
