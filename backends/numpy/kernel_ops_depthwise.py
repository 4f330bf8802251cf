"""Depthwise conv2d on numpy (one input channel per group), `conv2d`'s paths for it
(kernel_ops_conv.py calls `_depthwise`): by kernel column (`_depthwise_columns`: one
batched matmul per kernel column of banded weights by the image's rows as they lie, or
the padded image's, or its column phases), else by kernel row and row phase
(`_depthwise_rows_first`) or a band of channels' im2col rows. Each returns its steps as
calls, which conv2d records and replays; the window helpers they read are
kernel_ops_conv.py's."""

from __future__ import annotations

import math

import numpy as np

from palimpsest.backends.numpy.kernel_ops import _Calls, _view_as
from palimpsest.dialects.graph.reference._common import is_constant
from palimpsest.backends.numpy.kernel_ops_conv import (
    _as_strided, _copy_phase_taps, _fill_border, _im2col_view, _phase_view, _split_phases,
    _strided, _tap_range, _window)


def _depthwise(x, w, bias, y, padded, cols, pads, strides, dilations):
    """One input channel per group: `_depthwise_columns` where it applies, else this.
    A band of channels at a time (as many as the im2col
    workspace holds), each channel's kernel-offset rows are copied into the workspace and
    one batched matmul multiplies them by that channel's weights:
    y[n, c*mg + j] = w[c*mg + j] . rows[c], bias added as the results are copied to Y.

    The rows are runs of the source image read at a unit stride, so each copies one long
    run per channel: stride 1, the padded image (or X) flat, row (p, q) starting at
    p*dh*Wp + q*dw; strided and undilated, its stride phases (in the padded workspace),
    row (p, q) in phase (p % sh, q % sw) at (p//sh)*Wq + q//sw. A result row then has the
    source's width, of which Y takes the first Wo. Otherwise (strided and dilated, or a
    strided X without pads) the rows are the exact (Ho, Wo) windows.

    Returns these steps as calls (`_Calls`, their views made here; conv2d records and
    runs them), or None having run the convolution (`_depthwise_rows_first`)."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    mg, taps = m // c, kh * kw
    ho, wo = y.shape[2], y.shape[3]
    (sh, sw), (dh, dw), (top, left) = strides, dilations, pads
    if _DEPTHWISE_COLUMNS and ho * wo * kh * kw >= (
            _COLUMNS_FROM if not is_constant(w) or not _KEEP_BANDED else _COLUMNS_KEPT_FROM):
        calls = _depthwise_columns(x, w, bias, y, padded, cols, pads, strides, dilations)
        if calls is not None:
            return calls
    weights = w.reshape(c, mg, taps)
    band = 0 if cols is None else \
        _depthwise_rows_band(cols.size, c, mg, (kh, kw), strides, dh, ho, wo)
    if band:
        _depthwise_rows_first(x, weights, bias, y, padded, cols, band, (kh, kw), pads,
                              strides, dilations)
        return None
    bias4 = None if bias is None else bias.reshape(c, mg, 1, 1)
    calls = _Calls()
    calls.views = [(weights, w)] + ([] if bias is None else [(bias4, bias)])
    phases = _phase_view(padded, c, strides, dilations)
    if padded is not None and phases is None:
        calls.append((_fill_border, (padded, top, left, h, wd, 0), {}))
    # the rows' layout (the same source strides for every image): a run of the result
    # row width wq per output row, the last Wo long
    width, (s0, s1, s2) = (wd, x.strides[1:]) if padded is None else \
        (padded.shape[2], padded.strides)
    flat = phases is None and (sh, sw) == (1, 1) and s1 == width * s2
    wq = phases.shape[4] if phases is not None else width if flat else wo
    run = (ho - 1) * wq + wo
    band = c if cols is None else \
        max(1, min(c, min(cols.size, _DEPTHWISE_L2) // ((taps + mg) * run)))
    size = y.itemsize
    for image in range(n):
        src = x[image]
        if phases is not None:
            calls.append((_split_phases, (src, phases, top, left, strides), {}))
        elif padded is not None:
            calls.append((np.copyto, (padded[:, top:top + h, left:left + wd], src), {}))
            src = padded
        target = _view_as(y[image], (c, mg, ho, wo))
        if cols is None:  # 1x1: each channel's window times its weights
            calls.append((np.multiply, (_window(src, 0, 0, dh, dw, sh, sw, ho, wo)[:, None],
                                        weights[:, :, :, None]), {"out": target}))
            if bias4 is not None:
                calls.append((np.add, (target, bias4), {"out": target}))
            continue
        for c0 in range(0, c, band):
            k = min(band, c - c0)
            rows = _view_as(cols[:k * taps * run], (k, kh, kw, run))
            if phases is not None:
                calls.append((_copy_phase_taps, (phases[:, :, c0:c0 + k], rows, (kh, kw),
                                                 strides), {}))
            elif flat:
                calls.append((np.copyto, (rows, _as_strided(
                    src[c0:c0 + k], (k, kh, kw, run), (s0, s1 * dh, s2 * dw, s2))), {}))
            else:
                calls.append((np.copyto, (
                    _view_as(rows, (k, kh, kw, ho, wo)),
                    _im2col_view(src, kh, kw, dh, dw, sh, sw, ho, wo)[c0:c0 + k]), {}))
            results = _view_as(cols[k * taps * run:k * (taps + mg) * run], (k, mg, run))
            calls.append((np.matmul, (weights[c0:c0 + k], _view_as(rows, (k, taps, run))),
                          {"out": results}))
            fresh = _as_strided(results, (k, mg, ho, wo),
                                (mg * run * size, run * size, wq * size, size))
            if bias4 is None:
                calls.append((np.copyto, (target[c0:c0 + k], fresh), {}))
            else:
                calls.append((np.add, (fresh, bias4[c0:c0 + k]), {"out": target[c0:c0 + k]}))
    return calls


# A depthwise band (T and the per-kernel-row products; the im2col path's rows and results)
# of about this many elements (f32: 512 KiB) stays in L2 between the copy that fills it
# and the matmul and sum that read it (a band the size of the 2 MiB workspace: 10-25%
# slower; 256 KiB or 1 MiB: within 5%)
_DEPTHWISE_L2 = 1 << 17
# `_depthwise_rows_first` makes kh BLAS calls per channel, the im2col path one: below this
# many outputs per channel times kernel taps (3x3 at 16x16, 5x5 at 8x8: 7-13% slower;
# 5x5 at 10x10: 20% faster) the calls cost more than the copies they save
_DEPTHWISE_ROWS_FROM = 2500


def _depthwise_rows_band(size, c, mg, kernel, strides, dh, ho, wo):
    """How many channels a band of `_depthwise_rows_first` takes: per channel its T (kw x
    sh x (Ho + (kh-1)*dh // sh) x Wo) and its kh x M/C products (Ho*Wo each), as many as
    fit _DEPTHWISE_L2 elements and the workspace (`size`); 0 when not one channel fits."""
    (kh, kw), sh = kernel, strides[0]
    per = kw * sh * (ho + (kh - 1) * dh // sh) * wo + kh * mg * ho * wo
    if per > size or ho * wo * kh * kw < _DEPTHWISE_ROWS_FROM:
        return 0
    return max(1, min(c, min(size, _DEPTHWISE_L2) // per))


def _live_kernel_rows(kh, dh, sh, ho, top, h):
    """The kernel rows [lo, hi) whose windows reach the image: row p reads padded rows
    p*dh, p*dh + sh, ... (Ho of them), all in the pads (zeros) outside [lo, hi), as the
    outer rows of a 5x5 kernel over a 2-row image with 2 pads."""
    lo = 0
    while lo < kh and lo * dh + (ho - 1) * sh < top:
        lo += 1
    hi = kh
    while hi > lo and (hi - 1) * dh >= top + h:
        hi -= 1
    return lo, hi


def _depthwise_rows_first(x, weights, bias, y, padded, cols, band, kernel, pads, strides,
                          dilations):
    """Depthwise without an im2col: per band of channels, T = the padded image's rows
    read at each kernel column, by stride phase of the rows (sh strided copies), T[c, q]
    flat (sh x Hq x Wo, phase a holding rows a, a + sh, ...). Kernel row p's kw rows of
    a channel are then runs of T (phase p*dh % sh, from its row p*dh // sh), Hq*Wo*sh
    apart: a BLAS matrix as it lies, so one batched matmul per phase multiplies each
    channel's kernel rows (kw weights each) by them, and the kh products are summed into
    Y (exactly Ho x Wo: nothing to copy out), the bias added while they are in cache;
    kernel rows that read only pads are left out. Two passes over kw copies of the
    image's rows 1/sh, where the im2col copies kh*kw."""
    n, c, h, wd = x.shape
    _, mg, taps = weights.shape
    kh, kw = kernel
    (sh, sw), (dh, dw) = strides, dilations
    top, left = pads[0], pads[1]
    ho, wo = y.shape[2], y.shape[3]
    hq, size = ho + (kh - 1) * dh // sh, ho * wo
    plane = sh * hq * wo
    # kernel rows p0, p0 + step, ... share a phase and lie `rise` rows apart in it
    step = sh // math.gcd(sh, dh)
    rise = dh // math.gcd(sh, dh)
    live = _live_kernel_rows(kh, dh, sh, ho, top, h)
    by_row = _view_as(weights, (c, mg, kh, kw)).transpose(0, 2, 1, 3)
    flat = _view_as(cols, (cols.size,))
    item = flat.itemsize
    if padded is not None:
        _fill_border(padded, top, left, h, wd, 0)
    for image in range(n):
        src = x[image]
        if padded is not None:
            np.copyto(padded[:, top:top + h, left:left + wd], src)
            src = padded
        s0, s1, s2 = src.strides
        target = _view_as(y[image], (c, mg, size))
        for c0 in range(0, c, band):
            k = min(band, c - c0)
            t_size = k * kw * plane
            t5 = _view_as(flat[:t_size], (k, kw, sh, hq, wo))
            for phase in range(sh):  # its rows past the image's are never read
                rows = min(hq, -(-(src.shape[1] - phase) // sh))
                np.copyto(t5[:, :, phase, :rows],
                          _as_strided(src[c0:c0 + k, phase:], (k, kw, rows, wo),
                                      (s0, s2 * dw, s1 * sh, s2 * sw)))
            products = _view_as(flat[t_size:t_size + k * kh * mg * size], (k, kh, mg, size))
            for p0 in range(live[0], min(live[0] + step, live[1])):
                start = (p0 * dh % sh * hq + p0 * dh // sh) * wo
                count = len(range(p0, live[1], step))
                np.matmul(by_row[c0:c0 + k, p0:live[1]:step],
                          _as_strided(flat[start:], (k, count, kw, size),
                                      (kw * plane * item, rise * wo * item, plane * item,
                                       item)),
                          out=products[:, p0:live[1]:step])
            out = target[c0:c0 + k]
            if live[1] > live[0]:
                np.add.reduce(products[:, live[0]:live[1]], axis=1, out=out)
            else:
                out.fill(0)
            if bias is not None:
                np.add(out, _view_as(bias[c0 * mg:(c0 + k) * mg], (k, mg, 1)), out=out)


# -- depthwise by kernel column ----------------------------------------------------------------

# `_depthwise_columns` on (off: the paths above; A/B measurements and tests)
_DEPTHWISE_COLUMNS = True
# ... its banded weights of a constant W made once, outside the workspace, and kept by
# the recorded calls, not made again each run (a fill and a strided copy): W read-only
# and the same object run after run is a constant (a run's input is a new read-only view
# each run, a buffer an op writes is writeable). They take R*K/(kh*kw) times W's memory
# (text_orientation: 3.6 MiB for 215 KiB of depthwise weights; blazeface_back 1.1 MiB).
# In-model per-op A/B, with _COLUMNS_KEPT_FROM (sessions made old, new, new, old; one
# thread, 13 alternating runs): text_orientation op sum 11.51 -> 11.09 ms (5x5 at 14x14,
# 256 channels, 0.85-0.9x), ppocr_mobile_cls 0.99x, blazeface_back 1.02x (its 3x3 weights
# are few: within the noise)
_KEEP_BANDED = True
# ... from this many outputs per channel times kernel taps: below it, its kw BLAS calls
# per channel (or more) cost more than the im2col's one and its copies (in-model A/B, one
# thread: 3x3 at 8x8 and 10x10 outputs, 1x5 at 1x40: 10-90% slower; 3x3 at 16x16 even;
# 5x5 at 2x48 to 10x10, 3x3 from 3x80: 25-60% faster) ...
_COLUMNS_FROM = 2000
# ... or this many with kept banded weights (one-Conv A/B after a Relu, replayed, one
# thread: 5x5 at 7x7 (512 channels) 0.42 -> 0.30 ms, 5x5/2 at 14x14 0.37 -> 0.29, 3x3/2
# at 28x28 (128) 0.38 -> 0.29, 3x3 at 14x14 (256) 0.32 -> 0.26, 3x3 at 8x8 (96) 0.93x;
# at 4x4 even, 1x5 at 1x40 1.14x: below). text_orientation's 5x5 at 7x7 in-model: 0.45
# -> 0.33 ms
_COLUMNS_KEPT_FROM = 500
# Its cost of one 2-D product of a batched matmul in ns: per BLAS call, and per
# multiply-add (fitted on 3x3 and 5x5 layers of 14x14 to 128x128 outputs, one thread)
_CALL_NS, _MAC_NS = 40.0, 0.025
# ... of building its banded weights, per element (a fill) and per weight (a strided
# copy); of a tail band's numpy call, shared by the channels of a band (about 100)
_BUILD_NS = (0.2, 1.0)
_TAIL_NS = 15.0


def _band_rows(ho, wo, kh, sh, dh) -> int:
    """The output rows R of one product of `_depthwise_columns`, the cheapest per channel
    and kernel column by (_CALL_NS, _MAC_NS, _BUILD_NS): R rows read K = (R-1)*sh +
    (kh-1)*dh + 1 source rows, so a larger R makes fewer BLAS calls, of K/kh times the
    multiply-adds each output needs, and larger banded weights to build each run; a
    tail band costs a numpy call more (_TAIL_NS)."""
    best, rows = None, 1
    for r in range(1, min(ho, 16) + 1):
        span = (r - 1) * sh + (kh - 1) * dh + 1
        cost = -(-ho // r) * (_CALL_NS + _MAC_NS * r * span * wo) \
            + _BUILD_NS[0] * r * span + _BUILD_NS[1] * r * kh + (_TAIL_NS if ho % r else 0)
        if best is None or cost < best:
            best, rows = cost, r
    return rows


def _border_runs(canvas, top, left, height, width) -> list:
    """`_border`'s parts of a C-contiguous `canvas` (C, Eh, Ew) as flat runs: the top
    rows with the first row's left pad, each row's right pad with the next row's left
    pad, the last row's right pad with the bottom rows (3 strided views, not 4 with
    runs of a pad's width)."""
    c, eh, ew = canvas.shape
    if not canvas.flags.c_contiguous or height == 0 or width == 0:
        return [canvas]
    flat = _view_as(canvas, (c * eh * ew,))
    rows = _view_as(canvas, (c, eh * ew))
    gap = ew - width
    parts = [rows[:, :top * ew + left], rows[:, (top + height - 1) * ew + left + width:]]
    if height > 1 and gap:
        item = flat.itemsize
        parts.append(_strided(flat, top * ew + left + width, (c, height - 1, gap),
                              (eh * ew * item, ew * item, item)))
    return [part for part in parts if part.size]


def _depthwise_columns(x, w, bias, y, padded, cols, pads, strides, dilations):
    """Depthwise (one input channel per group, M/C outputs each) as one batched matmul
    per kernel column q, without an im2col. Along a column of the source the taps of
    kernel column q are a BLAS matrix as it lies: output rows i*R ... i*R + R-1 read
    source rows i*R*sh ... (K = (R-1)*sh + (kh-1)*dh + 1 of them, a row apart) at columns
    q*dw ... q*dw + Wo-1, and R x K banded weights (row s holds the channel's column q at
    s*sh + p*dh: Wt) times them give those R output rows, exactly Y's layout. The kw
    products are summed into Y (the first written there), a band of channels at a time
    while it is in L2, then the bias. The source: X itself, stride 1 along the width
    (`_direct_plan`: the bands and kernel columns that meet the pads by narrower
    products), else the padded image; strided, its column phases (phase b = columns b, b + sw, ...; kernel column q reads
    phase q*dw % sw from column q*dw // sw), zeros in the pads. Wt is made each run from
    W (a fill and one strided copy), or once for a constant W (`_KEEP_BANDED`).

    Returns the steps as calls (`_Calls`, views made here), or None where it does not
    apply (not f32/f64, 1x1, or the workspaces do not hold Wt, a band's products and
    the column phases)."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    mg = m // c
    ho, wo = y.shape[2], y.shape[3]
    (sh, sw), (dh, dw), (top, left) = strides, dilations, pads
    if cols is None or y.dtype not in (np.float32, np.float64) or x.dtype != y.dtype \
            or w.dtype != y.dtype or ho * wo == 0:
        return None
    flat = _view_as(cols, (cols.size,))
    item = flat.itemsize
    rows = _band_rows(ho, wo, kh, sh, dh)
    nb, tail = divmod(ho, rows)
    span = (rows - 1) * sh + (kh - 1) * dh + 1
    need = (ho - 1) * sh + (kh - 1) * dh + 1   # source rows read
    wt_size = kw * c * mg * rows * span
    per = mg * ho * wo if kw > 1 else 0   # a channel's products
    room = flat.size - wt_size
    phases = None
    if sw > 1:
        wq = wo + (kw - 1) * dw // sw
        phase_size = sw * c * need * wq
        if padded is not None and phase_size <= padded.size:
            phases = _view_as(_view_as(padded, (padded.size,))[:phase_size], (sw, c, need, wq))
        else:
            room -= phase_size
            if room < 0:
                return None
            phases = _view_as(flat[flat.size - phase_size:], (sw, c, need, wq))
        source = sw * need * wq
    else:
        source = need * (wd if padded is None else padded.shape[2])
    if room < per:
        return None
    band = max(1, min(c, _DEPTHWISE_L2 // (2 * mg * ho * wo + source)))
    if per:
        band = min(band, room // per)
    calls = _Calls()
    by_column = _view_as(w, (c, mg, kh, kw)).transpose(3, 0, 1, 2)[:, :, :, None, :]
    calls.views.append((by_column, w))
    if not is_constant(w) or not _KEEP_BANDED:
        wt = _view_as(flat[:wt_size], (kw, c, mg, rows, span))
        calls.append((wt.fill, (0,), {}))
        calls.append((np.copyto, (_band_diagonals(wt, kh, sh, dh), by_column), {}))
    else:   # a constant's: made once, kept by the recorded calls
        wt = np.zeros((kw, c, mg, rows, span), w.dtype)
        np.copyto(_band_diagonals(wt, kh, sh, dh), by_column)
    wt = wt[:, :, :, None]   # (kw, C, M/C, 1, R, K): broadcast over the bands
    bias4 = None
    if bias is not None:
        bias4 = _view_as(bias, (c, mg, 1, 1))
        calls.views.append((bias4, bias))
    direct = None if sw > 1 or padded is None or not _DIRECT else \
        _direct_plan((h, wd), (ho, wo), (kh, kw), rows, sh, (dh, dw), (top, left))
    if sw == 1 and padded is not None and direct is None:
        calls.extend((part.fill, (0,), {}) for part in _border_runs(padded, top, left, h, wd))
    products = flat[wt_size:wt_size + band * per]
    for image in range(n):
        src = x[image]
        if phases is not None:
            calls.append((_split_columns, (src, phases, top, left, sw), {}))
        elif padded is not None and direct is None:
            calls.append((np.copyto, (padded[:, top:top + h, left:left + wd], src), {}))
            src = padded
        target = _view_as(y[image], (c, mg, ho, wo))
        for c0 in range(0, c, band):
            k = min(band, c - c0)
            out = target[c0:c0 + k]
            product = _view_as(products[:k * per], (k, mg, ho, wo)) if per else None
            if direct is not None:
                calls.extend(_direct_calls(direct, wt[:, c0:c0 + k], src[c0:c0 + k], out,
                                           product, rows, sh, top))
            for q in range(kw if direct is None else 0):
                dest = out if q == 0 else product
                if phases is not None:
                    base = phases[q * dw % sw, c0:c0 + k, :, q * dw // sw:]
                else:
                    base = src[c0:c0 + k, :, q * dw:]
                s0, s1, s2 = base.strides
                weights = wt[q, c0:c0 + k]
                if nb:
                    calls.append((np.matmul, (weights, _as_strided(
                        base, (k, 1, nb, span, wo), (s0, 0, rows * sh * s1, s1, s2))),
                        {"out": _view_as(dest[:, :, :nb * rows], (k, mg, nb, rows, wo))}))
                if tail:
                    last = (tail - 1) * sh + (kh - 1) * dh + 1
                    calls.append((np.matmul, (weights[:, :, 0, :tail, :last], _as_strided(
                        base[:, nb * rows * sh:], (k, 1, last, wo), (s0, 0, s1, s2))),
                        {"out": dest[:, :, nb * rows:]}))
                if q:
                    calls.append((np.add, (out, product), {"out": out}))
            if bias4 is not None:
                calls.append((np.add, (out, bias4[c0:c0 + k]), {"out": out}))
    return calls


# `_depthwise_columns` reads X itself, stride 1 along the width, not a padded copy and
# its zeroed border (the bands of rows and the kernel columns that meet the pads by
# narrower products, which also leave out the taps on pad rows). In-model per-op A/B
# (profiled sessions made in the order old, new, new, old: the order alone moved a
# session's op times by up to 5-10%; one thread, 11-15 alternating runs):
# ppocr_mobile_cls's 5x5 on 2-3 row images 0.68-0.83x (op sum 3.10 -> 2.83 ms),
# blazeface_front 3.51 -> 3.37, text_orientation's 3x3 at 56x56 0.84x (op sum 0.98-1.0x:
# the stride-2 layer after it then fills its own workspace cold), blazeface_back's 3x3
# at 128x128 0.94-1.06x (op sum 1.03x, within the noise)
_DIRECT = True


def _direct_plan(size, out, kernel, rows, sh, dilations, pads):
    """How `_depthwise_columns` reads the unpadded image (H, W) stride 1 along the width:
    (order, columns, middle, edges), or None where a product cannot write all of Y
    (no kernel column reads inside the image for every output column, or a band of
    output rows reads only pads). Kernel column q reads image columns [first, first +
    j1 - j0) for outputs [j0, j1) (`columns[q]`; `order`: the first covers them all, the
    kernel columns wholly in the pads left out). Bands [middle) of R output rows read
    their K rows inside the image (one batched product); `edges`: the others (i, rows,
    t0, t1, a): output rows i*R ... read image rows a + t0 ... a + t1 - 1, taps t0 to
    t1 of the banded weights' K."""
    (h, wd), (ho, wo), (kh, kw), (dh, dw), (top, left) = size, out, kernel, dilations, pads
    columns = [_tap_range(wd, q * dw, 1, left, wo) for q in range(kw)]
    full = [q for q in range(kw) if columns[q][:2] == (0, wo)]
    if not full:
        return None
    order = full[:1] + [q for q in range(kw) if q != full[0] and columns[q][1] > columns[q][0]]
    bands = []
    for i in range(-(-ho // rows)):
        count = min(rows, ho - i * rows)
        a = i * rows * sh - top
        t0, t1 = max(0, -a), min((count - 1) * sh + (kh - 1) * dh + 1, h - a)
        if t1 <= t0:
            return None
        bands.append((i, count, t0, t1, a))
    span = (rows - 1) * sh + (kh - 1) * dh + 1
    inside = [b[0] for b in bands if b[1] == rows and b[2] == 0 and b[3] == span]
    middle = (inside[0], inside[0] + 1) if inside else (0, 0)
    while middle[1] in inside:
        middle = (middle[0], middle[1] + 1)
    edges = [b for b in bands if not middle[0] <= b[0] < middle[1]]
    return order, columns, middle, edges


def _direct_calls(plan, wt, src, out, product, rows, sh, top) -> list:
    """The calls of one band of channels of `_depthwise_columns` by `_direct_plan`:
    per kernel column (the first into Y, the rest into `product`, zeros in the columns
    they do not reach, and added to Y), the middle bands in one batched product, each
    edge band in one with the banded weights' taps it reads."""
    order, columns, (i0, i1), edges = plan
    k, mg = out.shape[0], out.shape[1]
    s0, s1, s2 = src.strides
    calls = []
    for q in order:
        j0, j1, first = columns[q]
        width = j1 - j0
        dest = out if q == order[0] else product
        weights = wt[q]   # (k, M/C, 1, R, K)
        if i1 > i0:
            span = weights.shape[-1]
            calls.append((np.matmul, (weights, _as_strided(
                src[:, i0 * rows * sh - top:, first:], (k, 1, i1 - i0, span, width),
                (s0, 0, rows * sh * s1, s1, s2))), {"out": _view_as(
                    dest[:, :, i0 * rows:i1 * rows, j0:j1], (k, mg, i1 - i0, rows, width))}))
        for i, count, t0, t1, a in edges:
            calls.append((np.matmul, (weights[:, :, 0, :count, t0:t1],
                                      src[:, None, a + t0:a + t1, first:first + width]),
                          {"out": dest[:, :, i * rows:i * rows + count, j0:j1]}))
        if dest is product:   # (zeros where it reads pads: one contiguous add is faster)
            calls.extend((part.fill, (0,), {}) for part in (
                product[:, :, :, :j0], product[:, :, :, j1:]) if part.size)
            calls.append((np.add, (out, product), {"out": out}))
    return calls


def _band_diagonals(wt, kh, sh, dh):
    """The (kw, C, M/C, R, kh) view of the banded weights `wt` (kw, C, M/C, R, K, C-
    contiguous) at their taps: row s holds kernel row p at column s*sh + p*dh."""
    kw, c, mg, rows, span = wt.shape
    flat = _view_as(wt, (wt.size,))
    return _strided(flat, 0, (kw, c, mg, rows, kh), tuple(
        flat.itemsize * s for s in (c * mg * rows * span, mg * rows * span, rows * span,
                                    span + sh, dh)))


def _split_columns(image, phases, top, left, sw) -> None:
    """phases[b] (C x rows x Wq) = columns b, b + sw, ... of the padded `image` (C, H, W),
    its first rows (as many as `phases` has), zeros in the pads."""
    _, h, wd = image.shape
    _, _, need, wq = phases.shape
    r0, r1 = min(need, top), max(min(need, top), min(need, top + h))
    for b in range(sw):
        phase = phases[b]
        j0, j1, start = _tap_range(wd, b, sw, left, wq)
        if r0:
            phase[:, :r0] = 0
        if r1 < need:
            phase[:, r1:] = 0
        inside = phase[:, r0:r1]
        if j0:
            inside[:, :, :j0] = 0
        if j1 < wq:
            inside[:, :, j1:] = 0
        if j1 > j0 and r1 > r0:
            np.copyto(inside[:, :, j0:j1],
                      image[:, r0 - top:r1 - top, start:start + (j1 - j0 - 1) * sw + 1:sw])
