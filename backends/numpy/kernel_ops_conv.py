"""conv2d on numpy: im2col + grouped matmul; without an im2col, dense convs by kernel row
(runs of a row-shifted copy of the image that are BLAS matrices as they lie) and dense
convs of few weights an output (first layers, few channels) by output row
(`_conv_output_rows`: the image's rows with channels inside rows, per kernel column, one
GEMM per output row);
depthwise convs (one input channel per group) in kernel_ops_depthwise.py (by kernel
column: banded weights times the image's rows as they lie). Registered in
`KERNEL_IMPLS` (kernel_ops.py, which imports this module); the table there says how it
works (it predates the paths above). A conv whose images take one GEMM each (1x1, or one
im2col band) keeps its calls, views made, per executor and replays them while its arrays
are the same objects (`_one_gemm`, kernel_ops.record): on Silero VAD's 1-row convs
deciding and viewing cost twice the numpy work; the paths above and the depthwise ones
are recorded likewise. The window helpers here (`_window`, `_fill_border`, `_tap_range`,
`_as_strided`, the stride phases) serve the depthwise paths and pool2d too
(kernel_ops_pool.py)."""

from __future__ import annotations

import numpy as np

from palimpsest.backends.numpy.blas import matmul, matmul_call
from palimpsest.backends.numpy.kernel_ops import (
    _Calls, _view_as, config_of, impl, record, recorded, replay, workspaces_by_role)
from palimpsest.backends.numpy.kernel_ops_elementwise import (
    core_inputs, epilogue_calls, epilogue_scratch, run_epilogue)
from palimpsest.dialects import kernel as K


def _window(src, p, q, dh, dw, sh, sw, ho, wo):
    """The (C, ho, wo) strided view of `src` (C, H, W) read by kernel offset (p, q)."""
    return src[:, p * dh:p * dh + (ho - 1) * sh + 1:sh, q * dw:q * dw + (wo - 1) * sw + 1:sw]


def _as_strided(array, shape, strides):
    """A read-only strided view of `array` (the im2col copies only read through these).
    Of a contiguous `array` through the ndarray constructor, which also checks that the
    view stays inside it (numpy's as_strided: ~10x the time, 6 us, per view)."""
    if array.flags.c_contiguous:
        view = np.ndarray(shape, array.dtype, array, 0, strides)
        view.flags.writeable = False
        return view
    from numpy.lib.stride_tricks import as_strided

    return as_strided(array, shape, strides, writeable=False)


def _strided(flat, offset, shape, strides):
    """The view of the contiguous 1-D `flat` from element `offset` with `shape` and byte
    `strides` (the ndarray constructor checks that it stays inside `flat`)."""
    return np.ndarray(shape, flat.dtype, flat, offset * flat.itemsize, strides)


def _im2col_view(src, kh, kw, dh, dw, sh, sw, ho, wo):
    """The read-only (C, kh, kw, ho, wo) view of `src` (C, H, W): [c, p, q] is the window
    of kernel offset (p, q) (what `_window` gives), without a copy."""
    c = src.shape[0]
    s0, s1, s2 = src.strides
    return _as_strided(src, (c, kh, kw, ho, wo), (s0, s1 * dh, s2 * dw, s1 * sh, s2 * sw))


def _fill_border(canvas, top, left, height, width, value) -> None:
    """Fill everything of `canvas` (C, Eh, Ew) outside [top, top+height) x [left,
    left+width) with `value`."""
    for part in _border(canvas, top, left, height, width):
        part[...] = value


def _border(canvas, top, left, height, width) -> list:
    """The views of `canvas` (C, Eh, Ew) outside [top, top+height) x [left, left+width)."""
    return [canvas[:, :top], canvas[:, top + height:], canvas[:, top:top + height, :left],
            canvas[:, top:top + height, left + width:]]


# -- conv2d -----------------------------------------------------------------------------------

# An im2col matrix larger than _CHUNK_FROM bytes is filled and multiplied a band of output
# rows at a time, each band about _CHUNK_BYTES: the GEMM then packs columns still in L2
# instead of reading back what the copy pushed out to memory (a 7x7 stem conv at 224x224:
# 12% faster). Smaller matrices stay whole: a band re-reads the weights (a 512-channel
# 7x7 layer: 40% slower in bands), and small GEMMs run below BLAS's peak.
_CHUNK_FROM = 4 << 20
_CHUNK_BYTES = 768 << 10


@impl("kernel.conv2d")
def conv2d(op, inputs, outputs, workspaces):
    arrays = (*inputs, *outputs, *workspaces)
    calls = recorded(op, arrays)
    if calls is not None:   # the last call's on these arrays (`_one_gemm`)
        replay(calls)
        return
    config = config_of(op)
    ws = workspaces_by_role(op, workspaces)
    core = core_inputs(config, inputs)
    x, w = core[0], core[1]
    bias = core[2] if len(core) > 2 else None
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
    calls = channels_last.calls(op, config, inputs, x, w, bias, y, ws)
    if calls is not None:
        record(op, arrays, calls)
        replay(calls)
        return
    if K.Conv2dOp.is_depthwise(w.shape, config):
        calls = depthwise._depthwise(x, w, bias, y, padded, cols, (top, left), (sh, sw),
                                     (dh, dw))
        if calls is None:   # (done)
            run_epilogue(config, inputs, y, epilogue_scratch(ws))
            return
        if config.get("epilogue"):
            calls.extend(epilogue_calls(config, inputs, y, epilogue_scratch(ws)))
        if all(np.may_share_memory(a, b) for a, b in calls.views):   # no operand copied
            record(op, arrays, calls)
        replay(calls)
        return
    if group == 1 and c * kh * kw <= _OUTPUT_ROWS_K and 4 * wo >= m and dh == 1 and kh > 1 \
            and cols is not None:
        calls = _conv_output_rows(x, w, bias, y, cols, (top, left), (sh, sw), dw)
        if calls is not None:
            if config.get("epilogue"):
                calls.extend(epilogue_calls(config, inputs, y, epilogue_scratch(ws)))
            if all(np.may_share_memory(a, b) for a, b in calls.views):
                record(op, arrays, calls)
            replay(calls)
            return
    rows_band = 0 if group > 1 or sh > 1 or kh == 1 or cols is None else \
        _kernel_rows_band(cols.size, c, m, (kh, kw), dh, ho, wo, cols.itemsize)
    if not rows_band:
        calls = _one_gemm(config, inputs, x, w, bias, y, ws, (kh, kw), (sh, sw),
                          (dh, dw), (top, left))
        if calls is not None:
            record(op, arrays, calls)
            replay(calls)
            return
    if rows_band:
        for image in range(n):
            _conv_kernel_rows(x[image], w, bias, y[image], cols, rows_band, (top, left), sw,
                              (dh, dw))
        bias = None  # added band by band, in cache
    elif cols is None:  # 1x1, stride 1, no pads: the image is the matrix
        for image in range(n):
            matmul(weights, x[image].reshape(group, cg, h * wd),
                   _view_as(y[image], (group, mg, ho * wo)))
    else:
        flat = _view_as(cols, (cols.size,))
        row_size = max(1, c * kh * kw * wo)   # one output row's im2col columns
        band = min(ho, cols.size // row_size)   # what the workspace holds (IM2COL_BAND)
        if row_size * ho * cols.itemsize > _CHUNK_FROM:
            band = max(1, min(band, _CHUNK_BYTES // (cols.itemsize * row_size)))
        phases = _phase_layout(padded, c, (kh, kw), (sh, sw), (dh, dw))
        rows_first = None
        if phases is None and sh == 1:
            rows_first = _rows_first(flat, padded, c, (kh, kw), dh, ho, wo, band)
        if padded is not None and phases is None and rows_first is None:
            _fill_border(padded, top, left, h, wd, 0)
        if rows_first is not None:
            t_rows = ho + (kh - 1) * dh
            t4 = _view_as(flat[rows_first[0]:rows_first[0] + c * kw * t_rows * wo],
                          (c, kw, t_rows, wo))
        for image in range(n):
            src = x[image]
            if phases is not None:
                _split_phases(src, phases, top, left, (sh, sw))
            elif rows_first is not None:
                _rows_t(src, t4, dw, sw, top, left)
            elif padded is not None:
                np.copyto(padded[:, top:top + h, left:left + wd], src)
                src = padded
            target = _view_as(y[image], (group, mg, ho * wo))
            for r0 in range(0, ho, band):
                rows = min(band, ho - r0)
                part = flat[:c * kh * kw * rows * wo]
                if phases is not None:
                    _copy_phase_taps(phases[:, :, :, r0:], _view_as(part, (c, kh, kw, rows, wo)),
                                     (kh, kw), (sh, sw))
                elif rows_first is not None:
                    _im2col_rows_first(flat, rows_first, t4, r0, rows, (kh, kw), dh)
                else:  # all kernel offsets in one strided copy
                    np.copyto(_view_as(part, (c, kh, kw, rows, wo)),
                              _im2col_view(src, kh, kw, dh, dw, sh, sw, ho, wo)
                              [:, :, :, r0:r0 + rows])
                out = target[:, :, r0 * wo:(r0 + rows) * wo]
                matmul(weights, _view_as(part, (group, cg * kh * kw, rows * wo)), out)
                if bias is not None and band < ho:  # while the band is in cache
                    np.add(out, _view_as(bias, (group, mg, 1)), out=out)
        if band < ho:
            bias = None
    if bias is not None:
        np.add(y, bias.reshape(1, m, 1, 1), out=y)
    run_epilogue(config, inputs, y, epilogue_scratch(ws))


def _one_gemm(config, inputs, x, w, bias, y, ws, kernel, strides, dilations, pads):
    """The calls of a conv whose images each take one GEMM: 1x1 without an im2col, or
    the im2col of all kernel offsets in one strided copy (no stride phases, no rows-first
    copy) in one band; each call's views made here once (`record`: a small conv's steps
    cost less than deciding and viewing them; views only, never a copy of an operand).
    None for the other paths."""
    (kh, kw), (sh, sw), (dh, dw), (top, left) = kernel, strides, dilations, pads
    n, c, h, wd = x.shape
    m, cg, group = w.shape[0], w.shape[1], config["group"]
    mg = m // group
    ho, wo = y.shape[2], y.shape[3]
    padded, cols = ws.get("padded"), ws.get("im2col")
    calls = []
    try:
        weights = _view_as(w, (group, mg, cg * kh * kw))
        if bias is not None:
            calls.append((np.add, (y, _view_as(bias, (1, m, 1, 1))), {"out": y}))
        images = [_view_as(x[image], (group, cg, h * wd)) for image in range(n)] \
            if cols is None else None
    except ValueError:   # (an operand that is not contiguous)
        return None
    if cols is None:
        for image in range(n):
            calls.insert(image, matmul_call(weights, images[image],
                                            _view_as(y[image], (group, mg, ho * wo))))
    else:
        size = c * kh * kw * ho * wo
        if size > cols.size or size * cols.itemsize > _CHUNK_FROM or _phase_layout(
                padded, c, kernel, strides, dilations) is not None or (sh == 1 and _rows_first(
                    _view_as(cols, (cols.size,)), padded, c, kernel, dh, ho, wo, ho)
                is not None):
            return None
        part = _view_as(cols, (cols.size,))[:size]
        steps = [(side.fill, (0,), {})
                 for side in _border(padded, top, left, h, wd) if side.size] \
            if padded is not None else []
        for image in range(n):
            src = x[image]
            if padded is not None:
                steps.append((np.copyto, (padded[:, top:top + h, left:left + wd], src), {}))
                src = padded
            steps.append((np.copyto, (_view_as(part, (c, kh, kw, ho, wo)),
                                      _im2col_view(src, kh, kw, dh, dw, sh, sw, ho, wo)), {}))
            steps.append(matmul_call(weights, _view_as(part, (group, cg * kh * kw, ho * wo)),
                                     _view_as(y[image], (group, mg, ho * wo))))
        calls = steps + calls   # (the bias after the GEMMs)
    if config.get("epilogue"):
        calls.extend(epilogue_calls(config, inputs, y, epilogue_scratch(ws)))
    return calls


# Below this many outputs per channel (32x32) the kh GEMMs of `_conv_kernel_rows` run
# slower than the one of the im2col (a 26x26 image: 4% slower, 80x80: 40% faster)
_KERNEL_ROWS_FROM = 1024
# `_conv_kernel_rows` fills T and multiplies a band of output rows at a time, T's band
# about this many bytes (and 8 rows at least: each band copies kh-1 rows more)
_KERNEL_ROWS_BAND = 1 << 20


def _kernel_rows_band(size, c, m, kernel, dh, ho, wo, itemsize):
    """The output rows per band of `_conv_kernel_rows`, or 0 where it does not pay
    (Ho*Wo < _KERNEL_ROWS_FROM) or the im2col workspace (`size` elements) does not hold
    what it keeps there: T's band (C x kw x (rows + (kh-1)*dh) x Wo), the weights by
    kernel row (kh x M x C*kw) and a kernel row's product (M x rows*Wo)."""
    kh, kw = kernel
    if ho * wo < _KERNEL_ROWS_FROM:
        return 0
    rows = min(ho, max(8, _KERNEL_ROWS_BAND // (itemsize * c * kw * wo)))
    if c * kw * (rows + (kh - 1) * dh) * wo + m * c * kh * kw + m * rows * wo > size:
        return 0
    return rows


def _conv_kernel_rows(image, w, bias, out, cols, band, pads, sw, dilations):
    """One image of a conv with stride 1 along the height, without an im2col, `band`
    output rows at a time: T = the padded image's rows read at each kernel column
    (`_rows_t`, C x kw planes of (rows + (kh-1)*dh) x Wo, zeros for the pads), in which
    kernel row p's C*kw rows are runs of rows*Wo at offset p*dh*Wo, a plane apart: a
    BLAS matrix as it lies. Y = the sum over kernel rows of W[:, :, p] (M x C*kw,
    repacked) times it: kh GEMMs, each product after the first added to Y, then the
    bias (while the band is in cache). kw copies of the image (and kh-1 rows a band)
    where the im2col makes kh*kw."""
    c, _, _ = image.shape
    m, _, kh, kw = w.shape
    dh, dw = dilations
    ho, wo = out.shape[1], out.shape[2]
    n = ho * wo
    flat = _view_as(cols, (cols.size,))
    t_size, w_size = c * kw * (band + (kh - 1) * dh) * wo, m * c * kh * kw
    by_row = _view_as(flat[t_size:t_size + w_size], (kh, m, c, kw))
    np.copyto(by_row, w.transpose(2, 0, 1, 3))
    by_row = _view_as(by_row, (kh, m, c * kw))
    scratch = flat[t_size + w_size:t_size + w_size + m * band * wo]
    target = _view_as(out, (m, n))
    item = flat.itemsize
    for r0 in range(0, ho, band):
        rows = min(band, ho - r0)
        hq, size = rows + (kh - 1) * dh, rows * wo
        _rows_t(image, _view_as(flat[:c * kw * hq * wo], (c, kw, hq, wo)), dw, sw,
                pads[0], pads[1], r0)
        part = target[:, r0 * wo:r0 * wo + size]
        product = _view_as(scratch[:m * size], (m, size))
        for p in range(kh):
            b_rows = _as_strided(flat[p * dh * wo:], (c * kw, size), (hq * wo * item, item))
            matmul(by_row[p], b_rows, part if p == 0 else product)
            if p:
                np.add(part, product, out=part)
        if bias is not None:
            np.add(part, _view_as(bias, (m, 1)), out=part)


def _tap_range(size, offset, stride, begin, out):
    """Along one axis, for a window tap at `offset` (tap index x dilation) with `begin`
    pads: the outputs [lo, hi) whose input index j*stride + offset - begin lies inside
    [0, size), and that index for output lo."""
    lo = max(0, -((offset - begin) // stride))
    hi = max(lo, min(out, (size - 1 + begin - offset) // stride + 1))
    return lo, hi, lo * stride + offset - begin


def _rows_first(flat, padded, c, kernel, dh, ho, wo, band):
    """Where the rows-first im2col (`_rows_t`, `_im2col_rows_first`) keeps its row-shifted
    copy T of the image: (offset, None) past the largest band's im2col rows when it fits
    there, else (0, spare) at the start of the im2col workspace, read in place (one band,
    T at most half the im2col matrix, channel 0's T through `spare`, the flat padded
    workspace); None when neither fits or the kernel is one row high."""
    kh, kw = kernel
    t_rows = ho + (kh - 1) * dh
    if kh == 1:
        return None
    if c * kh * kw * band * wo + c * kw * t_rows * wo <= flat.size:
        return (c * kh * kw * band * wo, None)
    if band < ho or padded is None or 2 * t_rows > kh * ho or padded.size < kw * t_rows * wo:
        return None
    return (0, _view_as(padded, (padded.size,)))


def _rows_t(image, t4, dw, sw, top, left, r0=0):
    """T[c, q] (`t4`, C x kw x (Ho + (kh-1)*dh) x Wo) = the padded image's rows (from row
    `r0` on) read at kernel column q, zeros in the pads: no padded copy."""
    _, h, wd = image.shape
    _, kw, hq, wo = t4.shape
    lo = min(hq, max(0, top - r0))  # T rows [lo, hi) lie inside the image
    hi = max(lo, min(hq, top + h - r0))
    if lo:
        t4[:, :, :lo] = 0
    if hi < hq:
        t4[:, :, hi:] = 0
    i0 = lo + r0 - top
    for q in range(kw if hi > lo else 0):
        inside = t4[:, q, lo:hi]
        jlo, jhi, start = _tap_range(wd, q * dw, sw, left, wo)
        if jhi == jlo:
            inside[...] = 0
            continue
        if jlo:
            inside[:, :, :jlo] = 0
        if jhi < wo:
            inside[:, :, jhi:] = 0
        np.copyto(inside[:, :, jlo:jhi],
                  image[:, i0:i0 + hi - lo, start:start + (jhi - jlo - 1) * sw + 1:sw])


def _im2col_rows_first(flat, layout, t4, r0, rows, kernel, dh):
    """Output rows [r0, r0 + rows) of the im2col matrix, stride 1 along the height, from T
    (`_rows_t`): im2col[c, p, q] = rows r0 + p*dh ... of T[c, q], one contiguous run of
    rows*Wo each, where gathering every (p, q) window copies runs of Wo (15-30% faster for
    28x28 to 7x7 images, whose rows are short)."""
    c, kw, hq, wo = t4.shape
    kh = kernel[0]
    n = rows * wo
    a, b = kh * kw * n, kw * hq * wo  # im2col and T elements per channel
    size = flat.itemsize
    strides = (b * size, dh * wo * size, hq * wo * size, size)
    offset, spare = layout
    if spare is None:  # T lies past the band's rows
        np.copyto(_view_as(flat[:c * a], (c, kh, kw, n)),
                  _as_strided(flat[offset + r0 * wo:], (c, kh, kw, n), strides))
        return
    # T is read in place, channel blocks from the last down: a block's T lies wholly
    # below the im2col rows it writes (c1*b <= c0*a); channel 0's T moves to `spare`
    c1 = c
    while c1 > 1:
        c0 = max(1, -(-c1 * b // a))
        np.copyto(_view_as(flat[c0 * a:c1 * a], (c1 - c0, kh, kw, n)),
                  _as_strided(flat[c0 * b:], (c1 - c0, kh, kw, n), strides))
        c1 = c0
    np.copyto(spare[:b], flat[:b])
    np.copyto(_view_as(flat[:a], (1, kh, kw, n)), _as_strided(spare, (1, kh, kw, n), strides))


def _phase_layout(padded, c, kernel, strides, dilations):
    """The padded workspace seen as the stride phases of the padded image, (sh, sw, C,
    Hq, Wq) with phase [a, b] = padded[:, a::sh, b::sw], when that pays: a strided conv
    whose windows overlap enough (kh*kw >= 4*sh*sw, e.g. a 7x7 stride-2 stem) copies
    each phase's rows whole instead of gathering every sh-th element kh*kw times (the
    im2col copy 2x faster). None otherwise."""
    (kh, kw), (sh, sw) = kernel, strides
    if kh * kw < 4 * sh * sw:
        return None
    return _phase_view(padded, c, strides, dilations)


def _phase_view(padded, c, strides, dilations):
    """The padded workspace as the (sh, sw, C, Hq, Wq) stride phases of the padded image,
    when it holds them and the conv is strided and undilated; None otherwise."""
    sh, sw = strides
    if padded is None or tuple(dilations) != (1, 1) or sh * sw == 1:
        return None
    hq, wq = -(-padded.shape[1] // sh), -(-padded.shape[2] // sw)
    if sh * sw * c * hq * wq > padded.size:
        return None
    return _view_as(_view_as(padded, (padded.size,))[:sh * sw * c * hq * wq],
                    (sh, sw, c, hq, wq))


def _split_phases(image, phases, top, left, strides):
    """Write the padded `image` (C, H, W) as its stride phases (zeros in the pads)."""
    sh, sw = strides
    _, h, wd = image.shape
    phases.fill(0)
    for a in range(sh):
        i0, i1, r = _tap_range(h, a, sh, top, phases.shape[3])  # phase rows in the image
        rows = i1 - i0
        for b in range(sw):
            j0, j1, q = _tap_range(wd, b, sw, left, phases.shape[4])
            cols = j1 - j0
            if rows > 0 and cols > 0:
                np.copyto(phases[a, b, :, i0:i0 + rows, j0:j0 + cols],
                          image[:, r:r + (rows - 1) * sh + 1:sh, q:q + (cols - 1) * sw + 1:sw])


def _copy_phase_taps(phases, dest, kernel, strides):
    """dest[:, p, q] (C x kh x kw x tail) from the stride phases (sh, sw, C, Hq, Wq):
    kernel offset (p, q) reads phase (p % sh, q % sw) at a unit-stride shift of (p//sh,
    q//sw); the tail is (rows, Wo) of the phase, or one flat run along its rows."""
    (kh, kw), (sh, sw) = kernel, strides
    tail = dest.shape[3:]
    for a in range(min(sh, kh)):
        for b in range(min(sw, kw)):
            src = phases[a, b]
            s0, s1, s2 = src.strides
            view = _as_strided(src, (dest.shape[0], len(range(a, kh, sh)),
                                     len(range(b, kw, sw))) + tail,
                               (s0, s1, s2) + ((s1, s2) if len(tail) == 2 else (s2,)))
            np.copyto(dest[:, a::sh, b::sw], view)


# -- dense convs of few weights an output, by output row ---------------------------------------

# `_conv_output_rows` for dense convs of at most this many weights an output (C*kh*kw),
# with Wo at least a quarter of M (one-Conv A/B, 1 thread, conv op medians: a first
# layer on an RGB image 3x3/2 at 224-320, 5x5/2 at 128-256, 7x7/2 at 224: 0.53-0.68x the
# time of the im2col; 8 or 16 channels 2x2 or 3x3 at 20x20 to 160x160: 0.5-0.9x; 12 ->
# 128 channels at 28x28 (Wo < M/4): 1.2x). Up to 1600 (was 16 channels): a GEMM of few
# output channels runs below BLAS's peak (16 x 288 by 288 x 6400: 62 GFLOP/s) where
# each output row's is in L2, and S copies the image kw times where the im2col copies
# it kh*kw/sh^2 times. One-Conv A/B after a Relu: 32 -> 16 3x3/2 at 160x160 3.33 -> 1.80
# ms, 64 -> 16 3x3 at 80x80 2.96 -> 1.75, 32 -> 32 3x3 at 80x80 2.23 -> 1.38, 128 -> 128
# 3x3 at 56x56 16.2 -> 11.5, 64 -> 16 5x5 at 80x80 9.2 -> 6.2, 32 -> 64 3x3/2 at 80x80
# 0.85x; 64 -> 64 3x3/2 at 40x40 1.05x; 256 -> 64 3x3 at 40x40 (2304) 1.42x: not taken
_OUTPUT_ROWS_K = 1600


def _conv_output_rows(x, w, bias, y, cols, pads, strides, dw):
    """A dense conv (one group, no row dilation) as one GEMM per output row, without an
    im2col: S = the padded image's rows, channels inside rows, each read at every kernel
    column (S[r, c, q] = padded row r of channel c at columns q*dw, q*dw + sw, ...: Wo
    each, zeros for the pads), in which output row i's kh*C*kw rows are one run of S
    from row i*sh, Wo apart: a BLAS matrix as it lies. Y[:, i] = W (M x kh*C*kw, kernel
    rows outermost: copied each run) times it, batched over the rows, written straight
    into Y, the bias added. kw strided copies of the image where the im2col makes kh*kw.
    In bands of output rows, S's rows for a band about _CHUNK_BYTES (each band copies
    kh - sh rows more), so that the GEMM reads S from L2.

    Returns the steps as calls (`_Calls`), or None where the im2col workspace does not
    hold a band's S and the reordered weights."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    ho, wo = y.shape[2], y.shape[3]
    (sh, sw), (top, left) = strides, pads
    if y.dtype not in (np.float32, np.float64) or x.dtype != y.dtype or w.dtype != y.dtype \
            or ho * wo == 0:
        return None
    flat = _view_as(cols, (cols.size,))
    item = flat.itemsize
    row = c * kw * wo   # one row of S
    k = kh * c * kw
    # output rows a band: S's rows for them about _CHUNK_BYTES (they stay in L2 from the
    # copies to the GEMM), all of them when S is smaller
    band = max(1, min(ho, (_CHUNK_BYTES // (item * row) - kh) // sh + 1))
    span = (band - 1) * sh + kh   # S rows a band reads
    if span * row + m * k > flat.size:
        return None
    calls = _Calls()
    s4 = _view_as(flat[:span * row], (span, c, kw, wo))
    packed = _view_as(flat[span * row:span * row + m * k], (m, kh, c, kw))
    by_row = _view_as(w, (m, c, kh, kw)).transpose(0, 2, 1, 3)
    calls.views.append((by_row, w))
    calls.append((np.copyto, (packed, by_row), {}))
    weights = _view_as(packed, (m, k))
    bias3 = None
    if bias is not None:
        bias3 = _view_as(bias, (m, 1, 1))
        calls.views.append((bias3, bias))
    columns = [_tap_range(wd, q * dw, sw, left, wo) for q in range(kw)]
    for image in range(n):
        src = x[image]
        for i0 in range(0, ho, band):
            rows = min(band, ho - i0)
            p0, used = i0 * sh, (rows - 1) * sh + kh   # the band's padded rows
            a0 = min(used, max(0, top - p0))            # [a0, a1): inside the image
            a1 = max(a0, min(used, top + h - p0))
            if a0:
                calls.append((s4[:a0].fill, (0,), {}))
            if a1 < used:
                calls.append((s4[a1:used].fill, (0,), {}))
            for q, (j0, j1, first) in enumerate(columns):
                if a1 == a0:
                    continue
                if j1 == j0:
                    calls.append((s4[a0:a1, :, q].fill, (0,), {}))
                    continue
                if j0:
                    calls.append((s4[a0:a1, :, q, :j0].fill, (0,), {}))
                if j1 < wo:
                    calls.append((s4[a0:a1, :, q, j1:].fill, (0,), {}))
                i = p0 + a0 - top   # the image row of S's row a0
                calls.append((np.copyto, (s4[a0:a1, :, q, j0:j1], src[
                    :, i:i + a1 - a0, first:first + (j1 - j0 - 1) * sw + 1:sw
                ].transpose(1, 0, 2)), {}))
            out = y[image][:, i0:i0 + rows]
            calls.append(matmul_call(weights, _strided(
                flat, 0, (rows, k, wo), (sh * row * item, wo * item, item)),
                out.transpose(1, 0, 2)))
            if bias3 is not None:
                calls.append((np.add, (out, bias3), {"out": out}))
    return calls


# (last: the depthwise paths read the window helpers above; called through the module,
# whichever of the two is imported first)
from palimpsest.backends.numpy import kernel_ops_channels_last as channels_last  # noqa: E402
from palimpsest.backends.numpy import kernel_ops_depthwise as depthwise  # noqa: E402
