"""`kernel.conv_transpose` in OpenCL (the numpy kernel in
backends/numpy/kernel_ops_spatial.py is the reference).

A 2-D one whose kernel is its stride (no pads, no dilation, one group: every out element
meets one tap) is one launch straight into Y (`_tiled`). Otherwise per image, two
launches, as on numpy:

- the register-blocked GEMM of linalg.py (`Gemm`, one batch entry per group) writes
  Wᵀ · X into the `cols` workspace: rows (m, kernel offset), columns the input
  positions. Wᵀ is read in place (its element (r, c) is W[c, r]: unit row stride), X's
  rows are contiguous, so the vectors run along the input positions;
- col2im gathers: one work-item per out element sums, over the kernel offsets whose
  input position i = (o + pad_begin - offset * dilation) / stride is whole and inside
  the input, the `cols` entries, starting from the bias (or zero). Every out element is
  written once, so Y needs no clearing and no atomics. Any rank, group, stride,
  dilation and (negative) pad.

f32 and f64; other types run on the host (the op is kernel.generic for them anyway).
"""

from __future__ import annotations

import math

import numpy as np

from palimpsest.backends.opencl.kernels.base import (
    Launch, Unsupported, bind, generator, params, ref, round_up, strides_of,
)
from palimpsest.backends.numpy.kernel_ops_spatial import _tiles
from palimpsest.backends.opencl.kernels.linalg import (
    LANES, Gemm, Operand, _lane, _pow2_at_most,
)

_ROWS_GROUP = 16   # out rows per work-group


def _n(value: int) -> str:
    value = int(value)
    return f"{value}L" if abs(value) >= 2 ** 31 else str(value)


@generator("kernel.conv_transpose")
def conv_transpose(call) -> list:
    config = call.config
    x, w, y = call.ins[0], call.ins[1], call.outs[0]
    t = y.ctype
    if t not in ("float", "double"):
        raise Unsupported(f"conv_transpose of {y.dtype} on the device")
    if y.size == 0:
        return []
    has_bias = len(call.ins) > 2
    n, c = x.shape[:2]
    group = config["group"]
    cg, mg = c // group, w.shape[1]
    m = mg * group
    kernel, sizes, outs = tuple(w.shape[2:]), tuple(x.shape[2:]), tuple(y.shape[2:])
    rank = len(kernel)
    taps, pixels, out_pixels = math.prod(kernel), math.prod(sizes), math.prod(outs)
    large = max(a.size for a in (x, w, y, *call.workspaces.values())) >= 2 ** 31
    ix = "long" if large else "int"
    if rank == 2 and group == 1 and cg and pixels and list(kernel) == list(config["strides"]) \
            and all(d == 1 for d in config["dilations"]) and not any(config["pads"]) \
            and outs == tuple(s * k for s, k in zip(sizes, kernel)):
        return _tiled(t, ix, (n, c, *sizes), m, kernel, has_bias)
    launches = []
    rows = mg * taps
    if rows and pixels and cg:
        gemm = Gemm(t, rows, pixels, cg, group,
                    Operand("w", f"z * {_n(cg * rows)}", 1, rows),
                    Operand("x", f"image * {_n(c * pixels)} + z * {_n(cg * pixels)}",
                            pixels, 1),
                    Operand("cols", f"z * {_n(rows * pixels)}", pixels, 1),
                    buffers=[("w", t, False), ("x", t, False), ("cols", t, True)], ix=ix)
    else:
        gemm = None
    gather = _col2im(t, ix, m, kernel, sizes, outs, config, has_bias)
    total = m * math.prod(outs[:-1])  # out rows
    local = _ROWS_GROUP if total >= _ROWS_GROUP else None
    args = [ref("ws", "cols")] + ([ref("in", 2)] if has_bias else []) + [ref("out", 0)]
    for image in range(n):
        if gemm is not None:
            launches.append(gemm.vector_launch([ref("in", 1), ref("in", 0), ref("ws", "cols"),
                                                np.int32(image)]))
        launches.append(Launch(gather, "col2im", (round_up(total, local or 1),),
                               (local,) if local else None, args + [np.int32(image)]))
    return launches


_TILED_ROWS = 8   # out channels per work-item of `_tiled`


def _tiled(t: str, ix: str, x_shape, m: int, kernel, has_bias: bool) -> list:
    """A 2-D conv_transpose whose kernel is its stride (no pads, no dilation: the FPN
    upsamplers' 2x2 / 2): every out element meets exactly one tap, so out row
    ih * kh + a, columns j * kw + b, is W[:, :, a, b]ᵀ · X's row ih, plus the bias.
    Each work-item: _TILED_ROWS out channels x one tap row a x a vector of X's columns,
    its kw accumulators per channel (b = 0..kw-1) stored interleaved as kw whole vectors
    (lanes picked by constant selection); the last vector shifted back to end at the
    row's end. No `cols` workspace and no col2im pass (ppocr_v4_det's 24 -> 24 on
    80 x 80: 0.68 -> 0.26 ms on PoCL)."""
    n, c, h, wd = x_shape
    kh, kw = kernel
    ho, wo = h * kh, wd * kw
    lanes = _pow2_at_most(wd, LANES[t])
    vt = t if lanes == 1 else f"{t}{lanes}"
    rows = min(m, _TILED_ROWS)
    buffers = [("w", t, False), ("x", t, False)] + ([("bias", t, False)] if has_bias else []) \
        + [("y", t, True)]
    load = f"vload{lanes}(0, xr + k * {_n(h * wd)})" if lanes > 1 else f"xr[k * {_n(h * wd)}]"
    lines = [f"const {ix} m0 = get_global_id(0) * {rows};",
             f"const {ix} j0 = min(({ix})get_global_id(1) * {lanes}, ({ix}){wd - lanes});",
             f"const {ix} z = get_global_id(2);",   # (image, ih, a)
             f"const {ix} a = z % {kh}, ih = (z / {kh}) % {h}, image = z / {h * kh};",
             f"__global const {t}* xr = x + image * {_n(c * h * wd)} + ih * {wd} + j0;"]
    for i in range(rows):
        lines.append(f"const {ix} channel{i} = min(m0 + {i}, ({ix}){m - 1});")
        lines.append(f"__global const {t}* w{i} = w + channel{i} * {kh * kw} + a * {kw};")
        for b in range(kw):
            start = f"({vt})(bias[channel{i}])" if has_bias else f"({vt})(0)"
            lines.append(f"{vt} acc{i}_{b} = {start};")
    lines.append(f"for ({ix} k = 0; k < {c}; ++k) {{")
    lines.append(f"  const {vt} v = {load};")
    for i in range(rows):
        lines.append("  " + " ".join(
            f"acc{i}_{b} = fma(({vt})(w{i}[k * {m * kh * kw} + {b}]), v, acc{i}_{b});"
            for b in range(kw)))
    lines.append("}")
    for i in range(rows):
        lines.append(f"if (m0 + {i} < {m}) {{")
        lines.append(f"  __global {t}* yr = y + image * {_n(m * ho * wo)} + channel{i} * "
                     f"{_n(ho * wo)} + (ih * {kh} + a) * {wo} + j0 * {kw};")
        # out column j * kw + b of the block holds lane j of acc_b
        for chunk in range(kw):
            parts = [_lane(f"acc{i}_{(chunk * lanes + e) % kw}", lanes,
                           (chunk * lanes + e) // kw) for e in range(lanes)]
            value = f"({vt})({', '.join(parts)})" if lanes > 1 else parts[0]
            store = f"vstore{lanes}({value}, {chunk}, yr);" if lanes > 1 else \
                f"yr[{chunk}] = {value};"
            lines.append(f"  {store}")
        lines.append("}")
    source = (f"__kernel void conv_transpose_tiled({params(*buffers)}) {{\n{bind(*buffers)}\n"
              + "".join(f"  {line}\n" for line in lines) + "}\n")
    args = [ref("in", 1), ref("in", 0)] + ([ref("in", 2)] if has_bias else []) + [ref("out", 0)]
    size = (-(-m // rows), -(-wd // lanes), n * h * kh)
    return [Launch(source, "conv_transpose_tiled", size, (1, 1, 1), args,
                   flush_denormals=True)]


def _col2im(t, ix, m, kernel, sizes, outs, config, has_bias) -> str:
    """One work-item per out row (channel and every out coordinate but the last): the
    row's elements in a loop, each summing the taps that reach it."""
    rank = len(kernel)
    taps, pixels, out_pixels = math.prod(kernel), math.prod(sizes), math.prod(outs)
    strides, dilations, begins = config["strides"], config["dilations"], config["pads"][:rank]
    in_strides, tap_strides = strides_of(sizes), strides_of(kernel)
    row_shape = (m,) + tuple(outs[:-1])
    row_strides = strides_of(row_shape)
    last = rank - 1
    buffers = [("cols", t, False)] + ([("bias", t, False)] if has_bias else []) \
        + [("y", t, True)]
    lines = [f"const {ix} ch = {'i / ' + _n(row_strides[0]) if row_strides[0] != 1 else 'i'};",
             f"__global const {t}* rows = cols + ch * {_n(taps * pixels)};",
             f"__global {t}* yr = y + image * {_n(m * out_pixels)} + i * {_n(outs[-1])};",
             f"const {t} start = {'bias[ch]' if has_bias else '0'};"]
    for a in range(last):
        coord = f"(i / {_n(row_strides[a + 1])})" if row_strides[a + 1] != 1 else "i"
        lines.append(f"const {ix} o{a} = {coord} % {_n(outs[a])};")
    lines.append(f"for ({ix} o{last} = 0; o{last} < {_n(outs[-1])}; ++o{last}) {{")
    lines.append(f"  {t} sum = start;")
    indent = "  "
    loops = 0
    for a in range(rank):
        if _tiles(sizes[a], outs[a], kernel[a], strides[a], dilations[a], begins[a]):
            # exactly one tap reaches each out position along this axis: no loop, no checks
            lines.append(f"{indent}const {ix} t{a} = o{a} + {begins[a]};")
            lines.append(f"{indent}const int j{a} = t{a} % {strides[a]};")
            lines.append(f"{indent}const {ix} i{a} = t{a} / {strides[a]};")
            continue
        loops += 1
        if dilations[a] == 1 and strides[a] > 1:
            # only the taps j = o + begin (mod stride) reach o: every stride-th from the first
            first = f"(int)(((o{a} + {begins[a]}) % {strides[a]} + {strides[a]}) % {strides[a]})"
            lines.append(f"{indent}for (int j{a} = {first}; j{a} < {kernel[a]}; "
                         f"j{a} += {strides[a]}) {{")
            indent += "  "
            lines.append(f"{indent}const {ix} i{a} = (o{a} + {begins[a]} - j{a}) / {strides[a]};")
            lines.append(f"{indent}if (i{a} < 0 || i{a} >= {_n(sizes[a])}) continue;")
            continue
        lines.append(f"{indent}for (int j{a} = 0; j{a} < {kernel[a]}; ++j{a}) {{")
        indent += "  "
        lines.append(f"{indent}const {ix} t{a} = o{a} + {begins[a]} - j{a} * {dilations[a]};")
        if strides[a] == 1:
            lines.append(f"{indent}if (t{a} < 0 || t{a} >= {_n(sizes[a])}) continue;")
            lines.append(f"{indent}const {ix} i{a} = t{a};")
        else:
            lines.append(f"{indent}if (t{a} < 0 || t{a} % {strides[a]}) continue;")
            lines.append(f"{indent}const {ix} i{a} = t{a} / {strides[a]};")
            lines.append(f"{indent}if (i{a} >= {_n(sizes[a])}) continue;")
    tap = " + ".join(f"j{a} * {tap_strides[a]}" if tap_strides[a] != 1 else f"j{a}"
                     for a in range(rank))
    position = " + ".join(f"i{a} * {_n(in_strides[a])}" if in_strides[a] != 1 else f"i{a}"
                          for a in range(rank))
    lines.append(f"{indent}sum += rows[({tap}) * {_n(pixels)} + {position}];")
    for _ in range(loops):
        indent = indent[:-2]
        lines.append(f"{indent}}}")
    lines += [f"  yr[o{last}] = sum;", "}"]
    total = math.prod(row_shape)
    return (f"__kernel void col2im({params(*buffers)}, const int image) {{\n"
            f"  const {ix} i = get_global_id(0);\n"
            f"  if (i >= {_n(total)}) return;\n"
            f"{bind(*buffers)}\n" + "".join(f"  {line}\n" for line in lines) + "}\n")
