"""`kernel.conv2d` in OpenCL, on linalg.py's register-blocked GEMM.

Depthwise (one input channel per group) convs run directly, both forms in depthwise.py:
a vector of output columns on DEPTHWISE_ROWS output rows per work-item, each input row's
tap vectors loaded once, the vectors at a row's edges generated apart with their padding
made by moving lanes (`_depthwise`, on window.py's `_window_rows`), or on maps up to 8
vectors wide a whole output plane (or a block of its rows) per work-item
(`depthwise_planes`); a 1x1, stride 1, unpadded conv multiplies the weights by the image
itself (all images and groups in one launch); otherwise the GEMM multiplies each group's
weights by the im2col matrix, either implicit (its rows read in place from the input, or
from the `padded` workspace that a padded conv fills per image, its rows split by column
phase when strided along W, `_implicit`), flat (the same, but each row of the im2col
matrix one run over the whole image, the columns between output rows computed and
dropped, `_flat`; strided, the padded image laid out as phase planes) or explicit (per
band of output rows an im2col kernel fills the `im2col` workspace, packed in panels of
the GEMM's column block). The implicit forms write nothing before the GEMM; the implicit
one's blocks hold one output row (wasted columns where the row is not a whole number of
vectors), the flat one's stores cost more where a vector spans two rows. A cost model
takes the cheapest (`_form`): the flat form for 3x3 convs on maps of 10-104 columns
(nudenet_320n's 20 x 20: 75 -> 120 GFLOP/s), blocks of one row on wide maps of few
channels, the explicit im2col on some narrow maps of many channels and for an unpadded
conv strided along W. Padding in im2col is computed by index checks (vector loads inside
the row, a clamped gather and a mask at its edges: window.py's `_row_load`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from palimpsest.backends.opencl.kernels.base import (
    DeviceLimits, Launch, bind, generator, literal, params, ref,
)
from palimpsest.backends.opencl.kernels.depthwise import (
    _depthwise, depthwise_planes, plane_rows)
from palimpsest.backends.opencl.kernels.elementwise import fused_epilogue
from palimpsest.backends.opencl.kernels.linalg import (
    LANES, VECTORS, Gemm, Operand, _core_count, _float_type, _index_type, _local_size,
    _pow2_at_most, _vtype, vector_shape,
)
from palimpsest.backends.opencl.kernels.window import _row_load

CONV_LANES = 8                      # output columns per im2col vector
IM2COL_ITEMS = 256                  # work-items per work-group (see _local_size)
PAD_ROWS = 16                       # padded rows per work-group of pad_image
IM2COL_COST = 60                    # an im2col element's cost in the GEMM's multiply-adds:
                                    # fitted to 3x3 convs of 96-256 channels on 13-52 wide
                                    # maps, timed both ways (its write alone is ~30: 0.4 ns
                                    # against ~75 G multiply-adds/s; the GEMM then reads it
                                    # from L2/L3, not the input rows from L1)
FLAT_STORE = 90                     # a flat GEMM's store of a vector that spans two
                                    # output rows (lane by lane), in the vector's
                                    # multiply-adds: 43-69 cycles measured on convs of
                                    # 27-144 deep dot products (a 3-channel first layer,
                                    # 160 wide with 1 column between rows: 10% of its
                                    # vectors, 13% slower than blocks of one output row)


def _block_speed(t: str, cols: int) -> float:
    """The GEMM's relative speed on `cols` columns: the share of the columns its blocks
    compute that exist, times the speed of the block's width (VECTORS) and of its
    vectors' (a vector of 8 floats does half the multiply-adds of one of 16)."""
    lanes, vectors = vector_shape(t, cols)
    return cols / (-(-cols // (lanes * vectors)) * lanes * vectors) * VECTORS[vectors] * \
        lanes / LANES[t]


def _panel_speed(t: str, cols: int) -> float:
    """`_block_speed` of the explicit im2col's GEMMs on a band of `cols` columns: whole
    panels of the block's width, then one GEMM over the narrower rest (`conv2d`)."""
    lanes, vectors = vector_shape(t, cols)
    full = cols // (lanes * vectors) * lanes * vectors
    rest = cols - full
    time = full / (VECTORS[vectors] * lanes / LANES[t]) + \
        (rest / _block_speed(t, rest) if rest else 0)
    return cols / time


# -- conv2d -------------------------------------------------------------------------------------

def _geometry(call):
    """The conv's sizes; a conv along H of images one column wide (a 1-D conv exported as
    Nx C x L x 1, unpadded along W) is the same conv along W of images one row high (the
    same bytes), so its output rows are long and its vectors run along them (where its
    im2col workspace, if it fills one, holds a whole such row)."""
    config = call.config
    x, w, y = call.ins[0], call.ins[1], call.outs[0]
    top, left, bottom, right = config["pads"]
    g = dict(n=x.shape[0], c=x.shape[1], h=x.shape[2], wd=x.shape[3], m=w.shape[0],
             cg=w.shape[1], kh=w.shape[2], kw=w.shape[3], ho=y.shape[2], wo=y.shape[3],
             group=config["group"], sh=config["strides"][0], sw=config["strides"][1],
             dh=config["dilations"][0], dw=config["dilations"][1], top=top, left=left,
             hp=x.shape[2] + top + bottom, wp=x.shape[3] + left + right)
    im2col = call.workspaces.get("im2col")
    fits = im2col is None or (g["cg"] == 1 and g["group"] > 1) or im2col.shape[1] >= g["ho"]
    if g["wd"] == g["kw"] == g["wo"] == 1 and left == right == 0 and g["ho"] > 1 and fits:
        for a, b in [("h", "wd"), ("kh", "kw"), ("ho", "wo"), ("sh", "sw"), ("dh", "dw"),
                     ("top", "left"), ("hp", "wp")]:
            g[a], g[b] = g[b], g[a]
    return g


@generator("kernel.conv2d")
def conv2d(call) -> list:
    y = call.outs[0]
    t = _float_type(y)
    if y.size == 0:
        return []
    g = _geometry(call)
    has_bias = _core_count(call) > 2
    epilogue = fused_epilogue(call)
    if g["cg"] == 1 and g["group"] > 1:
        plane = plane_rows(t, g, epilogue)
        if plane is not None:
            return [depthwise_planes(call, t, g, has_bias, epilogue, *plane)]
        return [_depthwise(call, t, g, has_bias, epilogue)]
    group, mg = g["group"], g["m"] // g["group"]
    depth = g["cg"] * g["kh"] * g["kw"]
    pixels = g["ho"] * g["wo"]
    ix = _index_type(*call.ins, y, *call.workspaces.values())
    weights = f"(z % {group}) * {mg * depth}" if group > 1 else "0"
    bias = Operand("bias", f"(z % {group}) * {mg}" if group > 1 else "0", 1, 0) \
        if has_bias else None
    buffers = [("w", t, False)] + ([("bias", t, False)] if has_bias else []) + [("y", t, True)]
    args = [ref("in", 1)] + ([ref("in", 2)] if has_bias else []) + [ref("out", 0)]
    if "im2col" not in call.workspaces:
        # 1x1, stride 1, no pads: each image's groups are the matrices; one launch for all
        gemm = Gemm(t, mg, pixels, depth, g["n"] * group, Operand("w", weights, depth, 1),
                    Operand("x", f"z * {g['cg'] * g['h'] * g['wd']}", g["h"] * g["wd"], 1),
                    Operand("y", f"z * {mg * pixels}", pixels, 1), bias,
                    buffers=[("x", t, False)] + buffers, ix=ix, epilogue=epilogue, lanes_in="plane")
        return [gemm.vector_launch([ref("in", 0)] + args + [np.int32(0)])]
    width = call.workspaces["im2col"].shape[1]
    band = max(1, min(g["ho"], width // g["wo"]))
    planes = _planes(call, g)
    form = _form(t, g, mg, depth, band, planes, "padded" in call.workspaces)
    if form == "flat":
        return _flat(call, t, g, ix, has_bias, buffers, args, epilogue, planes)
    if form == "implicit":
        return _implicit(call, t, g, ix, has_bias, buffers, args, epilogue)
    # the im2col workspace holds `band` whole output rows (kernel_nn's IM2COL_BAND): per
    # image, each band of rows is filled, then multiplied into its rows of Y; `image`
    # counts bands (image * bands + band). The band's columns are packed in panels of the
    # GEMM's column block, the last `rem` columns in a narrower one (`_panels`), so each
    # work-item's block reads one contiguous stream (the rows of an unpacked band are
    # `width` apart, which at power-of-two widths put a block's rows in one cache set:
    # 26 -> 92 GFLOP/s at 256 x 1024 x 2304): one GEMM over the whole panels, one over
    # the narrow one.
    bands = -(-g["ho"] // band)
    shape = vector_shape(t, band * g["wo"])
    panel = shape[0] * shape[1]
    y_at = (f"(image / {bands}) * {g['m'] * pixels} + z * {mg * pixels} + "
            f"(image % {bands}) * {band * g['wo']}")
    programs = {}   # rows -> the im2col launch and the GEMM launches, made once each
    launches = []
    for image in range(g["n"]):
        for b in range(bands):
            rows = min(band, g["ho"] - b * band)
            if rows not in programs:
                full = rows * g["wo"] // panel * panel
                rem = rows * g["wo"] - full
                base = f"z * {depth * width}"
                gemms = [(full, Operand("cols", base, panel, 1, panel, depth * panel), "",
                          shape),
                         (rem, Operand("cols", f"{base} + {depth * full}", rem, 1),
                          f" + {full}", None)]
                source, size = _im2col(t, g, ix, rows, band, bands, width, depth, panel)
                programs[rows] = [Launch(source, "im2col", size,
                                         _local_size(size, IM2COL_ITEMS, call.device),
                                         [ref("in", 0), ref("ws", "im2col"), None])] + [
                    Gemm(t, mg, cols, depth, group, Operand("w", weights, depth, 1), q,
                         Operand("y", y_at + shift, pixels, 1), bias,
                         buffers=[("cols", t, False)] + buffers, ix=ix, epilogue=epilogue,
                         lanes_in="plane")
                    .vector_launch([ref("ws", "im2col")] + args + [None], block)
                    for cols, q, shift, block in gemms if cols]
            at = np.int32(image * bands + b)
            for launch in programs[rows][0 if depth and g["c"] else 1:]:
                launches.append(replace(launch, args=launch.args[:-1] + [at]))
    return launches


def _planes(call, g: dict):
    """What `_flat` reads the image as: (rows, row pitch) of each phase plane, or None
    where it cannot (strided and unpadded, or planes too large: `_flat_planes`)."""
    if "padded" in call.workspaces:
        return _flat_planes(g)
    return (g["h"], g["wd"]) if g["sh"] == g["sw"] == 1 else None


def _form(t: str, g: dict, mg: int, depth: int, band: int, planes, padded: bool) -> str:
    """The cheapest of the GEMM forms a conv may take, by their modelled costs per
    output pixel and multiply-add of its dot product: the GEMM's (its rows over its
    block speed, `_block_speed`: a flat GEMM's columns counted as the pixels they keep)
    plus the explicit im2col's writes (IM2COL_COST) or the flat form's stores (FLAT_STORE
    a vector that spans two output rows, spread over the dot product's depth)."""
    costs = {"explicit": mg / _panel_speed(t, band * g["wo"]) + IM2COL_COST}
    # a conv strided along W takes the implicit form where it fills `padded`
    if g["sw"] == 1 or padded:
        costs["implicit"] = mg / _block_speed(t, g["wo"])
    if planes is not None:
        pitch, wo = planes[1], g["wo"]
        cols = (g["ho"] - 1) * pitch + wo
        if cols >= LANES[t]:
            kept = g["ho"] * wo / cols
            # the share of vectors that span two output rows with columns between
            split = 0 if pitch == wo else min(1, (LANES[t] - 1 + pitch - wo) / pitch)
            costs["flat"] = mg / (_block_speed(t, cols) * kept) + \
                FLAT_STORE * split * mg / depth
    return min(costs, key=costs.get)


def _phases(width: int, stride: int) -> list:
    """Where each column phase of a `width` long row starts when the row is stored split
    by phase (columns r, r + stride, r + 2 * stride... of phase r, in order): phase r
    holds ceil((width - r) / stride) columns. Stride 1: [0], the row as it is."""
    whole, rem = divmod(width, stride)
    return [r * whole + min(r, rem) for r in range(stride)]


def _implicit(call, t: str, g: dict, ix: str, has_bias: bool, buffers: list, args: list,
              epilogue) -> list:
    """A conv as an implicit im2col: Q's row (c, p, q) for the output pixels of row `oh`
    is the input row oh * sh + p * dh of channel c from column q * dw on, read in place
    (`Operand.taps`), so no im2col is written (it cost as much as the GEMM on convs of
    few channels). Each output row of each group is one matrix of the GEMM's batch. A
    padded conv copies each image into the `padded` workspace first (zeros around), so
    every load is a plain vector load; strided along W (sw > 1), the copy stores each
    padded row split by column phase (`_phases`), so the output columns' inputs for one
    tap are sw apart in the row but contiguous in their phase (first layers: 3 -> 16
    channels, 3x3 / 2 on 320x320, 0.5 -> 0.2 ms; im2col had been half the time). An
    unpadded conv reads the input in place (stride 1 along W)."""
    group, mg = g["group"], g["m"] // g["group"]
    ho, wo, cg = g["ho"], g["wo"], g["cg"]
    sh, sw = g["sh"], g["sw"]
    depth = cg * g["kh"] * g["kw"]
    padded = "padded" in call.workspaces
    assert padded or sw == 1, "an unpadded conv strided along W takes the explicit im2col"
    hp, wp = g["hp"], g["wp"]
    phases = _phases(wp, sw)
    matrix, row = f"(z / {ho})", f"(z % {ho})"      # image * group + group index, out row
    within = f"{matrix} % {group}"
    image = "image" if padded else f"{matrix} / {group}"   # padded: one image a launch
    source = f"(({within}) * {cg * hp * wp} + {row} * {sh * wp})" if padded else \
        f"(({image}) * {g['c'] * hp * wp} + ({within}) * {cg * hp * wp} + {row} * {sh * wp})"
    columns = tuple(phases[(q * g["dw"]) % sw] + (q * g["dw"]) // sw for q in range(g["kw"]))
    q = Operand("x", source, hp * wp, 1,
                taps=(tuple(p * g["dh"] * wp for p in range(g["kh"])), columns))
    y = Operand("y", f"({image}) * {g['m'] * ho * wo} + ({within}) * {mg * ho * wo} + "
                     f"{row} * {wo}", ho * wo, 1)
    bias = Operand("bias", f"({within}) * {mg}", 1, 0) if has_bias else None
    gemm = Gemm(t, mg, wo, depth, (1 if padded else g["n"]) * group * ho,
                Operand("w", f"({within}) * {mg * depth}", depth, 1), q, y, bias,
                buffers=[("x", t, False)] + buffers, ix=ix, epilogue=epilogue, lanes_in="plane")
    if not padded:
        return [gemm.vector_launch([ref("in", 0)] + args + [np.int32(0)])]
    multiply = gemm.vector_launch([ref("ws", "padded")] + args + [None])
    fill = _pad_image(t, g, ix, call.device)
    return [replace(launch, args=launch.args[:-1] + [np.int32(image)])
            for image in range(g["n"]) for launch in (fill, multiply)]


def _flat_planes(g: dict):
    """The (rows, columns) of each phase plane `_flat` reads (`_pad_image`'s `planes`):
    the rows and columns the output's taps meet in each phase (the whole padded image at
    stride 1), or None where the planes do not fit the `padded` workspace (a padded size
    not a multiple of the stride)."""
    hpp = g["ho"] + (g["kh"] - 1) * g["dh"] // g["sh"]
    wpp = g["wo"] + (g["kw"] - 1) * g["dw"] // g["sw"]
    return (hpp, wpp) if g["sh"] * g["sw"] * hpp * wpp <= g["hp"] * g["wp"] else None


def _flat(call, t: str, g: dict, ix: str, has_bias: bool, buffers: list, args: list,
          epilogue, planes: tuple) -> list:
    """A conv as an implicit im2col over the whole image: Q's row (c, p, q) is a flat run
    of (Ho - 1) * wpp + Wo elements from the tap's first input element, so output pixel
    (oh, ow) is column oh * wpp + ow and a block's vectors run on across output rows.
    At stride 1 the run is read from the padded image (or the input, unpadded), wpp its
    row pitch; strided, `_pad_image` lays out the padded image as planes of one row and
    column phase each (`planes` = their rows and columns, `_flat_planes`), tap (p, q)
    reading the plane of its phases from row p * dh // sh, column q * dw // sw. The
    wpp - Wo columns between two output rows are computed and dropped (Y's `runs`):
    Wo / wpp of the work is kept (20 wide maps: 91%), where `_implicit`'s blocks of one
    output row keep Wo / (Wo rounded up to whole vectors) (20: 63%) and the explicit
    im2col writes its matrix first (on 20 x 20 maps, as long as its GEMM)."""
    group, mg = g["group"], g["m"] // g["group"]
    ho, wo, cg = g["ho"], g["wo"], g["cg"]
    sh, sw, dh, dw = g["sh"], g["sw"], g["dh"], g["dw"]
    hpp, wpp = planes
    plane = hpp * wpp
    depth = cg * g["kh"] * g["kw"]
    padded = "padded" in call.workspaces
    within = f"(z % {group})"
    image = "image" if padded else f"(z / {group})"   # padded: one image a launch
    channel = sh * sw * plane
    source = f"{within} * {cg * channel}" if padded else \
        f"{image} * {g['c'] * channel} + {within} * {cg * channel}"
    q = Operand("x", source, channel, 1,
                taps=(tuple((p * dh) % sh * sw * plane + (p * dh) // sh * wpp
                            for p in range(g["kh"])),
                      tuple((q * dw) % sw * plane + (q * dw) // sw for q in range(g["kw"]))))
    # no columns between output rows (unpadded along W at stride 1): Y is one run
    y = Operand("y", f"{image} * {g['m'] * ho * wo} + {within} * {mg * ho * wo}", ho * wo, 1,
                runs=(wpp, wo) if wpp != wo else None)
    bias = Operand("bias", f"{within} * {mg}", 1, 0) if has_bias else None
    gemm = Gemm(t, mg, (ho - 1) * wpp + wo, depth, (1 if padded else g["n"]) * group,
                Operand("w", f"{within} * {mg * depth}", depth, 1), q, y, bias,
                buffers=[("x", t, False)] + buffers, ix=ix, epilogue=epilogue, lanes_in="plane")
    if not padded:
        return [gemm.vector_launch([ref("in", 0)] + args + [np.int32(0)])]
    multiply = gemm.vector_launch([ref("ws", "padded")] + args + [None])
    fill = _pad_image(t, g, ix, call.device, planes)
    return [replace(launch, args=launch.args[:-1] + [np.int32(image)])
            for image in range(g["n"]) for launch in (fill, multiply)]


def _pad_image(t: str, g: dict, ix: str, device: DeviceLimits, planes=None) -> Launch:
    """The launch that copies image `image` (its last argument) into the `padded`
    workspace, zeros around, each padded row split by column phase (`_phases`) when the
    conv is strided along W: a work-item per padded row; per phase, the columns before
    and after the input's are zeros and those between are copied in vectors (every sw-th
    input element), all bounds known when generating, a row above or below the input
    zeros. (A work-item per vector gathered lane by lane at the row's edges: 2-3x
    slower.) With `planes` = (hpp, wpp), the layout `_flat` reads: per channel, a plane
    of hpp rows x wpp columns per (row phase, column phase), the phases' columns past
    the padded row zeros, and a work-item per plane row of the row phases."""
    hp, wp, sh, sw, wd, left = g["hp"], g["wp"], g["sh"], g["sw"], g["wd"], g["left"]
    lanes = _pow2_at_most(wd, LANES[t])
    vt = _vtype(t, lanes)
    zero = literal(0, t)
    _, span = _row_load(t, lanes, "s", sw, None, wd)
    if planes is None:
        phases = [(r, start, len(range(r, wp, sw))) for r, start in enumerate(_phases(wp, sw))]
        blanks, rows = [(0, wp)], hp
        at = (f"  const {ix} ih = h - {g['top']};\n"
              f"  __global {t}* out = padded + (c * {hp} + h) * {wp};\n")
    else:
        hpp, wpp = planes
        phases = [(r, r * hpp * wpp, wpp) for r in range(sw)]
        blanks, rows = [(start, count) for _, start, count in phases], sh * hpp
        at = (f"  const {ix} a = h / {hpp}, ph = h % {hpp};\n"
              f"  const {ix} ih = ph * {sh} + a - {g['top']};\n"
              f"  __global {t}* out = padded + c * {sh * sw * hpp * wpp} + "
              f"(a * {sw * hpp} + ph) * {wpp};\n")
    lines = []
    for r, start, count in phases:
        # phase column j is padded column r + j * sw, input column r + j * sw - left
        first = max(0, -(-(left - r) // sw))               # the first inside the input
        last = min(count - 1, (wd - 1 + left - r) // sw)    # the last inside
        vector_last = (wd - span + left - r) // sw          # the last a vector may start at
        lines.append(f"    {{ __global {t}* o = out + {start};\n")
        if first > last:
            lines.append(f"      for (int j = 0; j < {count}; ++j) o[j] = {zero};\n    }}\n")
            continue
        lines.append(f"      for (int j = 0; j < {first}; ++j) o[j] = {zero};\n"
                     f"      __global const {t}* s = xrow + {r + first * sw - left};\n"
                     f"      int j = {first};\n")
        if lanes > 1 and vector_last >= first:
            load, _ = _row_load(t, lanes, f"s + (j - {first}) * {sw}", sw, None, wd)
            lines.append(f"      for (; j <= {vector_last}; j += {lanes}) "
                         f"vstore{lanes}({load}, 0, o + j);\n")
        lines.append(f"      for (; j <= {last}; ++j) o[j] = s[(j - {first}) * {sw}];\n"
                     f"      for (; j < {count}; ++j) o[j] = {zero};\n    }}\n")
    zeros = []
    for start, count in blanks:
        zeros.append(f"    {{ __global {t}* o = out + {start}; int j = 0;\n" +
                     (f"      for (; j + {lanes} <= {count}; j += {lanes}) "
                      f"vstore{lanes}(({vt})({zero}), 0, o + j);\n" if lanes > 1 else "") +
                     f"      for (; j < {count}; ++j) o[j] = {zero}; }}\n")
    pad_buffers = [("x", t, False), ("padded", t, True)]
    size = (rows, g["c"])
    source = (
        f"__kernel void pad_image({params(*pad_buffers)}, const int image) {{\n"
        f"{bind(*pad_buffers)}\n"
        f"  const {ix} h = get_global_id(0), c = get_global_id(1);\n{at}"
        f"  if (ih < 0 || ih >= {g['h']}) {{\n" + "".join(zeros) +
        f"  }} else {{\n"
        f"    __global const {t}* xrow = x + ((image * {g['c']} + c) * {g['h']} + ih) * "
        f"{wd};\n" + "".join(lines) + "  }\n}\n")
    return Launch(source, "pad_image", size, _local_size(size, PAD_ROWS, device),
                  [ref("in", 0), ref("ws", "padded"), None])


def _im2col(t: str, g: dict, ix: str, rows: int, band: int, bands: int, width: int,
            depth: int, panel: int):
    """`rows` output rows of one image's (C * kh * kw) x (Ho * Wo) matrix, from row
    (image % bands) * band on (`image` = image * bands + band index): row (c, p, q) holds
    the input pixels kernel offset (p, q) of channel c meets, zero where that is padding.
    Each group's `depth` rows start `depth * width` elements apart, packed as `_panels`
    says."""
    lanes = _pow2_at_most(g["wo"], CONV_LANES)
    vt = _vtype(t, lanes)
    taps = g["kh"] * g["kw"]
    buffers = [("x", t, False), ("cols", t, True)]
    fast, span = _row_load(t, lanes, "xr", g["sw"], None, g["wd"])
    checked, _ = _row_load(t, lanes, "xr", g["sw"], "iw", g["wd"], "xrow")
    source = (
        f"__kernel void im2col({params(*buffers)}, const int image) {{\n{bind(*buffers)}\n"
        f"  const {ix} ow0 = get_global_id(0) * {lanes}, ob = get_global_id(1);\n"
        f"  const {ix} oh = (image % {bands}) * {band} + ob, n = image / {bands};\n"
        f"  const {ix} row = get_global_id(2);\n"
        f"  const {ix} c = row / {taps}, p = (row / {g['kw']}) % {g['kh']}, "
        f"q = row % {g['kw']};\n"
        f"  const {ix} ih = oh * {g['sh']} + p * {g['dh']} - {g['top']};\n"
        f"  const {ix} iw = ow0 * {g['sw']} + q * {g['dw']} - {g['left']};\n"
        f"  {vt} v = 0;\n"
        f"  if (ih >= 0 && ih < {g['h']}) {{\n"
        f"    __global const {t}* xrow = x + ((n * {g['c']} + c) * {g['h']} + ih) * "
        f"{g['wd']};\n"
        f"    __global const {t}* xr = xrow + iw;\n"
        f"    if (iw >= 0 && iw + {span - 1} < {g['wd']}) v = {fast};\n"
        f"    else v = {checked};\n  }}\n"
        f"  const {ix} col = ob * {g['wo']} + ow0;\n"
        f"{_panels(ix, lanes, g['wo'], rows * g['wo'], width, depth, panel)}}}\n")
    return source, (-(-g["wo"] // lanes), rows, g["c"] * taps)


def _panels(ix: str, lanes: int, wo: int, cols: int, width: int, depth: int,
            panel: int) -> str:
    """im2col's store of `v` (`lanes` columns from band column `col`, of `cols`; lanes
    past the output row's end dropped) into row `row` of the packed band: each group's
    (`depth` rows, `width` apart) columns [0, full) in panels of `panel` columns, (k, j) at
    `(j / panel) * depth * panel + k * panel + j % panel`, then the last `rem` columns in
    one `rem` wide, (k, j) at `full * depth + k * rem + j - full`. A vector within one
    panel is one store, else lane by lane."""
    full = cols // panel * panel
    rem = cols - full

    def at(column: str) -> str:
        packed = f"({column} / {panel}) * {depth * panel} + kr * {panel} + {column} % {panel}"
        tail = f"{full * depth} + kr * {rem} + {column} - {full}"
        where = packed if not rem else tail if not full else \
            f"({column} < {full} ? {packed} : {tail})"
        return f"cols + base + {where}"

    head = (f"  const {ix} kr = row % {depth}, base = (row / {depth}) * {depth * width};\n")
    if lanes == 1:
        return f"{head}  *({at('col')}) = v;\n"
    within = [f"ow0 + {lanes} <= {wo}"]
    if full:
        inside = f"col % {panel} + {lanes} <= {panel}"
        within.append(f"((col + {lanes} <= {full} && {inside}) || col >= {full})" if rem
                      else inside)
    lane_stores = " ".join(f"if (ow0 + {i} < {wo}) *({at(f'(col + {i})')}) = v.s{i:x};"
                           for i in range(lanes))
    return (f"{head}  if ({' && '.join(within)}) vstore{lanes}(v, 0, {at('col')});\n"
            f"  else {{ {lane_stores} }}\n")
