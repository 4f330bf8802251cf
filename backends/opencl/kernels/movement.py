"""Data movement in OpenCL: `kernel.transpose`, `kernel.concat`, `kernel.gather`,
`kernel.pad` (the numpy kernels in backends/numpy/kernel_ops_movement.py are the
reference).

A copy never looks at an element's value, so every kernel here (and resize.py's nearest)
moves elements as the unsigned integer of their size: one program per element size
serves every type of that size, bool and float16 included.

- transpose: size-1 axes are dropped and axes that stay neighbours are merged first (NCHW
  -> NHWC is a 3-D (N, C, HW) -> (N, HW, C) transpose). When the innermost axis moves,
  16x16 tiles go through local memory, so reads and writes are both row-contiguous, or
  where one side is at most 8 long (an image's 3 channels), 16 positions of the other
  side per work-item in vectors whose lanes are moved by constant selection, or where
  both sides are multiples of 8, 8 x 8 blocks in registers; when it stays, rows are
  copied as they are.
- concat: one kernel per (non-empty) in copies it into its slab of the out (2-D: its
  block by the outer count, where the block has a divisor to make work-groups of).
- gather: one work-item per out element; indices wrap as numpy's `mode="wrap"` does, so
  negative indices count from the end (an index out of range, which the numpy kernel
  reports, wraps too).
- pad: each axis maps to its source (constant, edge, reflect, wrap; negative pads
  crop), a work-item per out row where rows are PAD_ROW_FROM long or more (the row's
  kept run copied, its pads filled or mapped), else per out element; pads larger than
  the reference defines run on the host.
- resize: resize.py (its tables, and the float filters).
"""

from __future__ import annotations

import numpy as np

from palimpsest.backends.opencl.kernels.base import (
    Launch, Unsupported, bind, generator, params, ref, round_up, strides_of,
)

_UNSIGNED = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}
_GROUP = 256
_CONCAT_LOCAL_MIN = 16   # the 2-D concat where a block has a divisor this large
# transpose tiles: TILE x TILE elements, a work-group of TILE x TILE_ROWS work-items.
# 16 x 16 (one element per work-item): on PoCL's CPU device smaller tiles measured
# faster than 32 x 8 (its barriers split the work-group into loops); GPUs do well with
# either
_TILE, _TILE_ROWS = 16, 16


def _moved(arg) -> str:
    """The C type that moves one element of `arg` unchanged."""
    ctype = _UNSIGNED.get(arg.dtype.itemsize)
    if ctype is None:
        raise Unsupported(f"no OpenCL type of {arg.dtype.itemsize} bytes for {arg.dtype}")
    return ctype


def _n(value: int) -> str:
    value = int(value)
    return f"{value}L" if abs(value) >= 2 ** 31 else str(value)


def _prelude(*args) -> str:
    """The program's index type IX: 32-bit arithmetic (much faster division, on CPUs
    above all) when every buffer has fewer than 2^31 elements."""
    large = any(arg.size >= 2 ** 31 for arg in args)
    return f"#define IX {'long' if large else 'int'}\n"


def _coord(shape, axis: int, flat: str = "i") -> str:
    """Coordinate `axis` of row-major element `flat` (< the size) of `shape`."""
    stride = strides_of(shape)[axis]
    coord = f"({flat} / {_n(stride)})" if stride != 1 else flat
    return f"({coord} % {_n(shape[axis])})" if axis > 0 else coord


def _per_element(source: str, name: str, size: int, args: list) -> Launch:
    """A launch of one work-item per element (the kernel returns past `size`)."""
    local = _GROUP if size >= _GROUP else None
    return Launch(source, name, (round_up(size, local or 1),), (local,) if local else None,
                  args)


def _kernel(name: str, buffers: list, size: int, body: list) -> str:
    return (f"__kernel void {name}({params(*buffers)}) {{\n"
            f"  const IX i = get_global_id(0);\n"
            f"  if (i >= {_n(size)}) return;\n"
            f"{bind(*buffers)}\n" + "".join(f"  {line}\n" for line in body) + "}\n")


# -- transpose ---------------------------------------------------------------------------------

def simplify_transpose(shape, perm) -> tuple:
    """(shape, perm) of the same data movement with size-1 axes dropped and runs of input
    axes that stay adjacent and in order merged into one."""
    kept = [a for a in range(len(shape)) if shape[a] != 1]
    perm = [kept.index(a) for a in perm if shape[a] != 1]
    shape = [shape[a] for a in kept]
    runs: list = []  # runs of input axes, in output order
    for axis in perm:
        if runs and runs[-1][-1] + 1 == axis:
            runs[-1].append(axis)
        else:
            runs.append([axis])
    by_input = sorted(runs, key=lambda run: run[0])
    merged = [int(np.prod([shape[a] for a in run])) for run in by_input]
    return tuple(merged), tuple(by_input.index(run) for run in runs)


@generator("kernel.transpose")
def transpose(call) -> list:
    x, out = call.ins[0], call.outs[0]
    t = _moved(x)
    if out.size == 0:
        return []
    shape, perm = simplify_transpose(x.shape, call.config["perm"])
    rank = len(shape)
    buffers = [("x", t, False), ("y", t, True)]
    if (rank == 2 and perm == (1, 0)) or (rank == 3 and perm == (0, 2, 1)):
        planes = shape if rank == 3 else (1,) + tuple(shape)
        narrow = _narrow_transpose(planes, t, buffers, _prelude(x, out))
        if narrow is None:
            narrow = _block_transpose(planes, t, buffers, _prelude(x, out))
        if narrow is not None:
            return [narrow]
    if rank >= 2 and perm[-1] != rank - 1:
        tiled = _tiled_transpose(shape, perm, buffers, call.device.max_work_group_size,
                                 _prelude(x, out))
        if tiled is not None:
            return [tiled]
    # the innermost axis stays (or nothing moves, or no tile fits a work-group): a row
    # of the out per launch row, so the row's offsets are computed once for all of it
    out_shape = [shape[p] for p in perm] or [1]
    in_strides = strides_of(shape)
    rows = out_shape[:-1]
    terms = [f"{_coord(rows, k, 'row')} * {_n(in_strides[p])}" for k, p in enumerate(perm[:-1])]
    terms.append(f"col * {_n(in_strides[perm[-1]])}" if perm and in_strides[perm[-1]] != 1
                 else "col")
    body = [f"y[row * {_n(out_shape[-1])} + col] = x[{' + '.join(terms)}];"]
    source = (f"{_prelude(x, out)}__kernel void transpose({params(*buffers)}) {{\n"
              f"  const IX col = get_global_id(0), row = get_global_id(1);\n"
              f"{bind(*buffers)}\n" + "".join(f"  {line}\n" for line in body) + "}\n")
    return [Launch(source, "transpose", (out_shape[-1], out.size // out_shape[-1]), None,
                   [ref("in", 0), ref("out", 0)])]


NARROW = 8          # the short side of a transpose that takes `_narrow_transpose`
_NARROW_LANES = 16


def _narrow_transpose(shape, t: str, buffers, prelude: str):
    """(B, P, Q) -> (B, Q, P) where P or Q is at most NARROW (an NHWC image to NCHW:
    Q = 3 channels; and back): each work-item moves 16 positions of the long side with
    all of the short side's elements, C vector loads and C vector stores whose lanes are
    picked out of the loaded vectors by constant selection. The tiled form padded the
    short side to 16 and went through local memory (blazeface_back's 256 x 256 x 3 input:
    2.2 ms on PoCL). None where neither side is short or the long one is under 16."""
    batch, p, q = shape
    lanes = _NARROW_LANES
    if q <= NARROW and p >= lanes:
        count, length, gather = q, p, True     # deinterleave: x rows of q, out rows of p
    elif p <= NARROW and q >= lanes:
        count, length, gather = p, q, False    # interleave: x rows of q, out rows of p
    else:
        return None
    vt = f"{t}{lanes}"
    pieces = -(-length // lanes)
    lines = ["const IX piece = get_global_id(0), b = get_global_id(1);",
             f"const IX r0 = piece * {lanes};",
             f"__global const {t}* xb = x + b * {_n(count * length)};",
             f"__global {t}* yb = y + b * {_n(count * length)};",
             f"if (r0 + {lanes} <= {_n(length)}) {{"]
    if gather:
        # x's 16 * count elements from (r0, 0) on: chunk k lane l is element 16k + l,
        # (r, c) = divmod(16k + l, count); out row c, column r0 + r
        lines += [f"  const {vt} a{k} = vload{lanes}({k}, xb + r0 * {count});"
                  for k in range(count)]
        for c in range(count):
            parts = ", ".join(f"a{(i * count + c) // lanes}.s{(i * count + c) % lanes:x}"
                              for i in range(lanes))
            lines.append(f"  vstore{lanes}(({vt})({parts}), 0, yb + {c} * {_n(length)} + r0);")
        tail = f"yb[c * {_n(length)} + r] = xb[r * {count} + c];"
    else:
        lines += [f"  const {vt} a{c} = vload{lanes}(0, xb + {c} * {_n(length)} + r0);"
                  for c in range(count)]
        for k in range(count):
            parts = ", ".join(f"a{(k * lanes + j) % count}.s{(k * lanes + j) // count:x}"
                              for j in range(lanes))
            lines.append(f"  vstore{lanes}(({vt})({parts}), {k}, yb + r0 * {count});")
        tail = f"yb[r * {count} + c] = xb[c * {_n(length)} + r];"
    lines += ["} else {",
              f"  for (IX r = r0; r < {_n(length)}; ++r)",
              f"    for (int c = 0; c < {count}; ++c) {tail}",
              "}"]
    source = prelude + (f"__kernel void transpose_narrow({params(*buffers)}) {{\n"
                        f"{bind(*buffers)}\n" + "".join(f"  {line}\n" for line in lines) +
                        "}\n")
    local0 = max(d for d in range(1, min(pieces, 64) + 1) if pieces % d == 0)
    return Launch(source, "transpose_narrow", (pieces, batch), (local0, 1),
                  [ref("in", 0), ref("out", 0)])


_BLOCK = 8   # the side of `_block_transpose`'s blocks


def _block_transpose(shape, t: str, buffers, prelude: str):
    """(B, P, Q) -> (B, Q, P) with P and Q multiples of 8: each work-item moves an 8 x 8
    block in registers, 8 vector loads of its rows and 8 vector stores of its columns
    (lanes picked by constant selection), no local memory and no barrier (the tiled form's
    barriers split PoCL's work-group loops: magika's 512 x 256 transpose 0.23 -> 0.05 ms).
    None where a side is not a multiple of 8."""
    batch, p, q = shape
    k = _BLOCK
    if p % k or q % k:
        return None
    vt = f"{t}{k}"
    lines = ["const IX bq = get_global_id(0) * 8, bp = get_global_id(1) * 8, "
             "b = get_global_id(2);",
             f"__global const {t}* xb = x + b * {_n(p * q)} + bp * {_n(q)} + bq;",
             f"__global {t}* yb = y + b * {_n(p * q)} + bq * {_n(p)} + bp;"]
    lines += [f"const {vt} r{i} = vload{k}(0, xb + {i * q});" for i in range(k)]
    for j in range(k):
        parts = ", ".join(f"r{i}.s{j}" for i in range(k))
        lines.append(f"vstore{k}(({vt})({parts}), 0, yb + {j * p});")
    source = prelude + (f"__kernel void transpose_blocks({params(*buffers)}) {{\n"
                        f"{bind(*buffers)}\n" + "".join(f"  {line}\n" for line in lines) +
                        "}\n")
    size = (q // k, p // k, batch)
    local0 = max(d for d in range(1, min(size[0], 16) + 1) if size[0] % d == 0)
    local1 = max(d for d in range(1, min(size[1], max(1, 64 // local0)) + 1)
                 if size[1] % d == 0)
    return Launch(source, "transpose_blocks", size, (local0, local1, 1),
                  [ref("in", 0), ref("out", 0)])


def _tiled_transpose(shape, perm, buffers, max_group: int, prelude: str):
    """A TILE x TILE tile of the plane (input axis p = the out's innermost, input's
    innermost axis l) per work-group: read along l into local memory, written along p.
    The other axes are the third launch dimension."""
    tile, rows = _TILE, _TILE_ROWS
    while rows > 1 and tile * rows > max_group:
        rows //= 2
    if tile * rows > max_group:
        return None
    rank = len(shape)
    p, last = perm[-1], rank - 1
    in_strides = strides_of(shape)
    out_strides = strides_of([shape[a] for a in perm])
    out_stride_of = {a: out_strides[k] for k, a in enumerate(perm)}  # per input axis
    rest = [a for a in range(rank) if a not in (p, last)]
    batch = int(np.prod([shape[a] for a in rest])) if rest else 1
    decode = ["IX rest = get_global_id(2);", "IX xb = 0, yb = 0;"]
    for a in reversed(rest):
        decode.append(f"{{ const IX c = rest % {_n(shape[a])}; "
                      f"rest /= {_n(shape[a])}; xb += c * {_n(in_strides[a])}; "
                      f"yb += c * {_n(out_stride_of[a])}; }}")
    size_p, size_l = shape[p], shape[last]
    read_if = write_if = ""
    if size_p % tile or size_l % tile:  # edge tiles: some work-items have no element
        read_if = f"if (p0 + r < {_n(size_p)} && l0 + tx < {_n(size_l)}) "
        write_if = f"if (l0 + r < {_n(size_l)} && p0 + tx < {_n(size_p)}) "
    body = decode + [
        f"__local {buffers[0][1]} tile[{tile}][{tile + 1}];  // +1: no bank conflicts",
        f"const IX l0 = (IX)get_group_id(0) * {tile};",
        f"const IX p0 = (IX)get_group_id(1) * {tile};",
        "const int tx = get_local_id(0), ty = get_local_id(1);",
        f"for (int r = ty; r < {tile}; r += {rows})",
        f"  {read_if}tile[r][tx] = x[xb + (p0 + r) * {_n(in_strides[p])} + l0 + tx];",
        "barrier(CLK_LOCAL_MEM_FENCE);",
        f"for (int r = ty; r < {tile}; r += {rows})",
        f"  {write_if}y[yb + (l0 + r) * {_n(out_stride_of[last])} + p0 + tx] = tile[tx][r];",
    ]
    source = prelude + (f"__kernel __attribute__((reqd_work_group_size({tile}, {rows}, 1)))\n"
              f"void transpose_tiled({params(*buffers)}) {{\n{bind(*buffers)}\n"
              + "".join(f"  {line}\n" for line in body) + "}\n")
    groups_l, groups_p = -(-size_l // tile), -(-size_p // tile)
    return Launch(source, "transpose_tiled", (groups_l * tile, groups_p * rows, batch),
                  (tile, rows, 1), [ref("in", 0), ref("out", 0)])


# -- concat ------------------------------------------------------------------------------------

@generator("kernel.concat")
def concat(call) -> list:
    out = call.outs[0]
    axis = call.config["axis"]
    t = _moved(out)
    inner = int(np.prod(out.shape[axis + 1:], dtype=np.int64))
    out_block = out.shape[axis] * inner
    buffers = [("x", t, False), ("y", t, True)]
    kernels, parts, offset = [], [], 0
    for index, arg in enumerate(call.ins):
        block = arg.shape[axis] * inner
        if arg.size and block:
            name = f"concat{index}"
            local = max(d for d in range(1, min(block, _GROUP) + 1) if block % d == 0)
            if local >= _CONCAT_LOCAL_MIN:
                # 2-D: the in's block by the outer count, no division per element (PoCL:
                # 1.8x over one work-item per element computing i / block, i % block)
                kernels.append(
                    f"__kernel void {name}({params(*buffers)}) {{\n"
                    f"  const IX j = get_global_id(0), o = get_global_id(1);\n"
                    f"{bind(*buffers)}\n"
                    f"  y[o * {_n(out_block)} + {_n(offset)} + j] = x[o * {_n(block)} + j];"
                    f"\n}}\n")
                parts.append((name, (block, arg.size // block), (local, 1), index))
            else:   # a block with no divisor to make work-groups of
                body = [f"y[(i / {_n(block)}) * {_n(out_block)} + {_n(offset)} "
                        f"+ i % {_n(block)}] = x[i];"]
                kernels.append(_kernel(name, buffers, arg.size, body))
                parts.append((name, arg.size, None, index))
        offset += block
    source = _prelude(out, *call.ins) + "".join(kernels)  # one program for all ins
    return [Launch(source, name, size, local, [ref("in", index), ref("out", 0)])
            if local else _per_element(source, name, size, [ref("in", index), ref("out", 0)])
            for name, size, local, index in parts]


# -- gather ------------------------------------------------------------------------------------

@generator("kernel.gather")
def gather(call) -> list:
    data, indices = call.ins
    out = call.outs[0]
    axis = call.config["axis"]
    t = _moved(data)
    if out.size == 0:
        return []
    dim = data.shape[axis]
    if dim == 0:
        raise Unsupported("gathers from an empty axis (the host reports the error)")
    inner = int(np.prod(data.shape[axis + 1:], dtype=np.int64))
    count = indices.size
    buffers = [("x", t, False), ("idx", indices.ctype, False), ("y", t, True)]
    body = [f"const IX r = i % {_n(inner)};",
            f"const IX k = (i / {_n(inner)}) % {_n(count)};",
            f"const IX o = i / {_n(count * inner)};",
            f"IX j = (IX)(idx[k] % {_n(dim)});  // numpy's mode=\"wrap\"",
            f"if (j < 0) j += {_n(dim)};",
            f"y[i] = x[(o * {_n(dim)} + j) * {_n(inner)} + r];"]
    source = _prelude(data, out) + _kernel("gather", buffers, out.size, body)
    return [_per_element(source, "gather", out.size, [ref("in", 0), ref("in", 1), ref("out", 0)])]


# -- pad ---------------------------------------------------------------------------------------

_SOURCE_COORD = {  # the source of a coordinate s before (< 0) or after (>= n) the kept data
    "edge": "s = s < 0 ? 0 : (s >= {n} ? {n} - 1 : s);",
    "reflect": "s = s < 0 ? -s : (s >= {n} ? 2 * ({n} - 1) - s : s);",
    "wrap": "s = s < 0 ? s + {n} : (s >= {n} ? s - {n} : s);",
}


# a pad whose out rows (its last axis) are this long or longer runs a work-item per row
# (the row's source found once, its kept run copied, its pads filled) rather than per
# element (each element's coordinates divided out: a 144 x 129 x 129 image, 4.9 ms)
PAD_ROW_FROM = 16


@generator("kernel.pad")
def pad(call) -> list:
    x, out = call.ins[0], call.outs[0]
    mode = call.config["mode"]
    pads = call.config["pads"]
    t = _moved(x)
    if out.size == 0:
        return []
    rank = len(x.shape)
    rows = out.shape[-1] >= PAD_ROW_FROM and rank > 0
    in_strides = strides_of(x.shape)
    lines = ["IX off = 0;"]
    if mode == "constant":
        lines.append("int inside = 1;")
    for a in range(rank - 1 if rows else rank):
        begin, end = pads[a], pads[a + rank]
        coord = _coord(out.shape[:-1], a, "r") if rows else _coord(out.shape, a)
        lines += _pad_axis(mode, x.shape[a], begin, end, coord, in_strides[a])
    buffers = [("x", t, False)]
    args = [ref("in", 0)]
    value = "0"
    if mode == "constant" and len(call.ins) > 1:
        buffers.append(("v", t, False))
        args.append(ref("in", 1))
        value = "v[0]"
    buffers.append(("y", t, True))
    if not rows:
        lines.append(f"y[i] = inside ? x[off] : {value};" if mode == "constant"
                     else "y[i] = x[off];")
        source = _prelude(x, out) + _kernel("pad", buffers, out.size, lines)
        return [_per_element(source, "pad", out.size, args + [ref("out", 0)])]
    count = out.size // out.shape[-1]
    lines += _pad_row(t, mode, x.shape[-1], pads[rank - 1], pads[2 * rank - 1],
                      out.shape[-1], value)
    body = "\n  ".join(lines)
    source = (_prelude(x, out) + f"__kernel void pad_rows({params(*buffers)}) {{\n"
              f"{bind(*buffers)}\n  const IX r = get_global_id(0);\n"
              f"  if (r >= {_n(count)}) return;\n  {body}\n}}\n")
    return [_per_element(source, "pad_rows", count, args + [ref("out", 0)])]


def _pad_axis(mode: str, size: int, begin: int, end: int, coord: str, stride: int) -> list:
    """The lines adding an out coordinate's source along one axis to `off` (constant
    mode: clearing `inside` where it falls in the pads)."""
    kept = size + min(begin, 0) + min(end, 0)  # the data left after crops
    lead, crop = max(begin, 0), -min(begin, 0)
    if max(begin, end, 0) == 0:  # not padded: the coordinate maps straight through
        return [f"off += ({coord} + {_n(crop)}) * {_n(stride)};"]
    n = _n(kept)
    lines = [f"{{ IX s = {coord} - {_n(lead)};"]
    if mode == "constant":
        lines.append(f"  if (s < 0 || s >= {n}) inside = 0;")
    else:
        lines.append("  " + _SOURCE_COORD[mode].format(n=_fitting(mode, kept, begin, end)))
    lines.append(f"  off += (s + {_n(crop)}) * {_n(stride)}; }}")
    return lines


def _fitting(mode: str, kept: int, begin: int, end: int) -> str:
    """`kept` (as C) where the reference's `mode` pads of `begin`, `end` find their source
    within the kept data (it copies within the out), else Unsupported."""
    most = max(begin, end)
    fits = kept > 0 if mode == "edge" else most <= (kept - 1 if mode == "reflect" else kept)
    if not fits:
        raise Unsupported(f"{mode} pads of {most} on an axis of {kept} elements")
    return _n(kept)


def _pad_row(t: str, mode: str, size: int, begin: int, end: int, width: int,
             value: str) -> list:
    """The lines writing out row `r` (`width` long) from the source row at `off`: its
    kept run copied, its pads filled with `value` or mapped to their sources."""
    kept = size + min(begin, 0) + min(end, 0)
    lead, crop = max(begin, 0), -min(begin, 0)
    lines = [f"__global {t}* yr = y + r * {_n(width)};",
             f"__global const {t}* xr = x + off + {_n(crop)};"]
    if mode == "constant":
        lines.append(f"if (!inside) {{ for (IX j = 0; j < {_n(width)}; ++j) yr[j] = {value};"
                     f" return; }}")
        fill = f"yr[j] = {value};"
    else:
        n = _fitting(mode, kept, begin, end) if max(begin, end, 0) else _n(kept)
        fill = (f"{{ IX s = j - {_n(lead)}; " + _SOURCE_COORD[mode].format(n=n) +
                " yr[j] = xr[s]; }")
    lines += [f"for (IX j = 0; j < {_n(lead)}; ++j) {fill}",
              f"for (IX j = 0; j < {_n(kept)}; ++j) yr[{_n(lead)} + j] = xr[j];",
              f"for (IX j = {_n(lead + kept)}; j < {_n(width)}; ++j) {fill}"]
    return lines
