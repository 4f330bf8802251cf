"""The OpenCL depthwise conv (one input channel per group; conv.py's `conv2d` picks the
form): the whole-plane form for maps a few vectors wide (`plane_rows`,
`depthwise_planes`), else blocks of rows (`_depthwise`).

`_depthwise` gives each work-item a vector of output columns on a few output rows and
loads each input row's kw tap vectors from memory, each (at the row's edges) with its
lanes moved into place (window.py's `_window_rows`, which the vector pool uses too); on
maps of 7-16 columns it computes narrow or overlapping vectors (14 wide: two 8-lane
vectors, both at an edge) and reloads the rows between its blocks. In the whole-plane
form one work-item computes a whole output plane of one channel, up to PLANE_VECTORS
vectors per output row (one of `lanes` >= Wo on maps up to a vector wide): each input
row is read once, a tap vector wholly inside the row (stride 1) as one load, every other
one as lanes moved into place, with the padding's lanes zero, from the row's vectors
(loaded in power-of-two pieces, never past the row's end); an output row is stored as
soon as its last input row is in (so only ~kh rows of accumulators are live). Every
offset is known, so the row loops are unrolled and rows in the padding left out, with no
branches. PLANE_TAPS bounds the unrolled code: a taller plane is split into blocks of
rows, one work-item each, the blocks meeting the padding (and a last one shifted back to
end at the map's end) generated apart with their rows known, every other block from its
first row at run time (`_edge_blocks`).
"""

from __future__ import annotations

import re

from palimpsest.backends.opencl.kernels.base import Launch, bind, literal, params, ref
from palimpsest.backends.opencl.kernels.elementwise import _CALLS
from palimpsest.backends.opencl.kernels.linalg import (
    LANES, _index_type, _lane, _local_size, _vtype,
)
from palimpsest.backends.opencl.kernels.window import (
    _depthwise_lanes, _window_rows, _window_store,
)

PLANE_ITEMS = 16        # work-items (planes) per work-group
PLANE_TAPS = 800        # most vector multiply-adds (output rows x vectors x kh x kw)
                        # unrolled in a kernel (2304, a 64x64 3x3: 5.7 s to compile)
PLANE_VECTORS = 8       # most vectors per output row
PLANE_ROWS = 4          # fewest output rows per work-item

DEPTHWISE_ITEMS = 64
DEPTHWISE_ROWS = 4                  # output rows per depthwise work-item (2: 0-25% slower,
                                    # 6: spills on 5x5 kernels)


def _pieces(n: int) -> list:
    """`n` as (offset, size) pieces of decreasing powers of two."""
    out, at = [], 0
    for size in (16, 8, 4, 2, 1):
        while n - at >= size:
            out.append((at, size))
            at += size
    return out


def _swizzle(value: str, lanes: int, at: int, size: int) -> str:
    if size == lanes:
        return value
    return f"{value}.s" + "".join(f"{at + i:x}" for i in range(size))


def _row_vector(t: str, lanes: int, pointer: str, count: int) -> str:
    """`count` <= `lanes` elements from `pointer` as a vector of `lanes`, the rest zero:
    loads of power-of-two pieces, none past the `count` elements."""
    parts = [f"vload{size}(0, {pointer} + {at})" if size > 1 else f"({pointer})[{at}]"
             for at, size in _pieces(count)]
    parts += [f"({_vtype(t, size)})({literal(0, t)})" for _, size in _pieces(lanes - count)]
    return parts[0] if len(parts) == 1 else f"({_vtype(t, lanes)})({', '.join(parts)})"


def _edge_blocks(g: dict, rows: int) -> list:
    """The blocks of `rows` output rows (the last shifted back to end at the map's end)
    generated with their rows known: those meeting the padding, and a shifted last one."""
    ho, sh, dh, kh, top, h = g["ho"], g["sh"], g["dh"], g["kh"], g["top"], g["h"]
    blocks = -(-ho // rows)
    edges = []
    for j in range(blocks):
        oh0 = min(j * rows, ho - rows)
        first, end = oh0 * sh - top, (oh0 + rows - 1) * sh + (kh - 1) * dh - top
        if first < 0 or end >= h or oh0 != j * rows:
            edges.append(j)
    return edges


def plane_rows(t: str, g: dict, epilogue):
    """(lanes, output rows per work-item) of the whole-plane form for geometry `g` (rows
    of up to PLANE_VECTORS vectors), or None where it does not apply: a wider map (or one
    of one column), too many taps to unroll even in blocks of PLANE_ROWS rows, or an
    epilogue in read along the row where a vector runs past the row's end."""
    wo, ho, taps = g["wo"], g["ho"], g["kh"] * g["kw"]
    lanes = min(1 << (wo - 1).bit_length(), LANES[t])
    vectors = -(-wo // lanes)
    if wo < 2 or vectors > PLANE_VECTORS:
        return None
    if wo % lanes and epilogue is not None and any(
            epilogue.call.ins[a.key].shape[-1:] not in ((), (1,)) for a in epilogue.args):
        return None
    if ho * vectors * taps <= PLANE_TAPS:
        return lanes, ho
    # every edge block and the inner one are generated apart
    for rows in range(min(ho - 1, PLANE_TAPS // (vectors * taps)), PLANE_ROWS - 1, -1):
        variants = len(_edge_blocks(g, rows)) + 1
        if variants * rows * vectors * taps <= PLANE_TAPS:
            return lanes, rows
    return None


def plane_weights(t: str, ix: str, g: dict) -> list:
    """A depthwise kernel's lines that find, from `plane` (image * M + output channel),
    its channel m and image, the input channel's plane `xc` and the kernel's taps as
    w{p}_{q} (`_depthwise` has them too)."""
    kh, kw, h, wd, c, m = g["kh"], g["kw"], g["h"], g["wd"], g["c"], g["m"]
    return [f"  const {ix} m = plane % {m}, image = plane / {m};\n",
            f"  __global const {t}* xc = x + (image * {c} + m / {m // c}) * {h * wd};\n",
            f"  __global const {t}* wm = w + m * {kh * kw};\n"] + [
        f"  const {t} w{p}_{q} = wm[{p * kw + q}];\n" for p in range(kh) for q in range(kw)]


def depthwise_planes(call, t: str, g: dict, has_bias: bool, epilogue, lanes: int,
                     rows: int) -> Launch:
    """One work-item per block of `rows` output rows of a plane (image x channel), see
    the module doc."""
    kh, kw, sh, sw, dh, dw = g["kh"], g["kw"], g["sh"], g["sw"], g["dh"], g["dw"]
    ho, wo, h, wd, c, m = g["ho"], g["wo"], g["h"], g["wd"], g["c"], g["m"]
    top, left = g["top"], g["left"]
    ix = _index_type(*call.ins, call.outs[0])
    vt = _vtype(t, lanes)
    zero = literal(0, t)
    vectors = -(-wo // lanes)
    chunks = -(-wd // lanes)
    buffers = [("x", t, False), ("w", t, False)] + ([("bias", t, False)] if has_bias else []) \
        + [("y", t, True)] + (epilogue.buffers if epilogue is not None else [])
    lines = [f"__kernel void depthwise_planes({params(*buffers)}) {{\n{bind(*buffers)}\n"
             f"  const {ix} plane = get_global_id(0);\n"]   # image * M + output channel
    lines += plane_weights(t, ix, g)
    lines.append(f"  __global {t}* yc = y + plane * {ho * wo};\n")

    # an epilogue that calls a math function (SiLU's exp) is applied after the taps, to
    # the plane's stored rows read back, where it reads no in (that could be the out):
    # each call spills every live register (no callee-saved vector registers), which
    # inside the taps are the weights and accumulators (960ch 16x16 5x5 + SiLU:
    # 0.30 -> 0.19 ms; without the SiLU 0.13)
    deferred = epilogue is not None and not epilogue.args and bool(
        _CALLS.intersection(call.config["epilogue"]))

    def store(o: int, b: int, row) -> str:
        acc, at0 = f"acc{o}_{b}", b * lanes
        at = f"{row * wo + at0}" if isinstance(row, int) else f"({row}) * {wo} + {at0}"
        value = f"{acc} + ({vt})(bias[m])" if has_bias else acc
        fused = "" if epilogue is None or deferred else "\n    " + epilogue.apply_lanes(
            "v", lanes, f"plane * {ho * wo} + {at}", 1, in_row=True)
        stores = " ".join(
            f"vstore{size}({_swizzle('v', lanes, a, size)}, 0, yr + {a});" if size > 1
            else f"yr[{a}] = {_lane('v', lanes, a)};"
            for a, size in _pieces(min(lanes, wo - at0)))
        return (f"  {{\n    {vt} v = {value};{fused}\n"
                f"    __global {t}* yr = yc + {at};\n    {stores}\n  }}\n")

    def tap(b: int, q: int) -> str:
        """Vector b's tap q on row `xrow`: a plain load where stride 1 and every lane is
        inside the row, else the row's lanes moved into place."""
        valid = min(lanes, wo - b * lanes)
        columns = [(b * lanes + j) * sw + q * dw - left for j in range(lanes)]
        if sw == 1 and valid == lanes and columns[0] >= 0 and columns[-1] < wd:
            return f"vload{lanes}(0, xrow + {columns[0]})" if lanes > 1 else \
                f"xrow[{columns[0]}]"
        parts = [_lane(f"r{col // lanes}", lanes, col % lanes) if 0 <= col < wd and j < valid
                 else zero for j, col in enumerate(columns)]
        return parts[0] if lanes == 1 else f"({vt})({', '.join(parts)})"

    def block(oh0: int | None, first: int = 0) -> list:
        """The block from output row `oh0` (known, its rows in the padding left out and
        those before `first` not stored; None: from `oh0` set at run time, all inside)."""
        # the block's input row r meets its output row o at tap p; o is stored after
        # its last such row
        meets: dict = {}
        for o in range(rows):
            for p in range(kh):
                r = o * sh + p * dh
                if oh0 is None or 0 <= oh0 * sh - top + r < h:
                    meets.setdefault(r, []).append((o, p))
        last = {o: r for r in sorted(meets) for o, _ in meets[r]}
        kept = [o for o in range(rows) if oh0 is None or oh0 + o >= first]

        def out_row(o: int):
            return oh0 + o if oh0 is not None else f"oh0 + {o}"

        code = [f"  {vt} acc{o}_{b} = 0;\n" for o in kept for b in range(vectors)]
        code += [store(o, b, out_row(o)) for o in kept if o not in last   # all padding
                 for b in range(vectors)]
        for r in sorted(meets):
            at = f"{(oh0 * sh - top + r) * wd}" if oh0 is not None else f"(ih0 + {r}) * {wd}"
            code.append(f"  {{\n    __global const {t}* xrow = xc + {at};\n")
            taps = {(b, q): tap(b, q) for b in range(vectors) for q in range(kw)}
            used = "".join(taps.values())
            for k in range(chunks):
                if re.search(rf"\br{k}\b", used):   # no load where no tap moves its lanes
                    count = min(lanes, wd - k * lanes)
                    code.append(f"    const {vt} r{k} = "
                                f"{_row_vector(t, lanes, f'xrow + {k * lanes}', count)};\n")
            for b in range(vectors):
                code += [f"    const {vt} v{b}_{q} = {taps[b, q]};\n" for q in range(kw)]
                for o, p in meets[r]:
                    if o in kept:
                        code.append("    " + " ".join(
                            f"acc{o}_{b} = fma(v{b}_{q}, ({vt})(w{p}_{q}), acc{o}_{b});"
                            for q in range(kw)) + "\n")
            code.append("  }\n")
            code += [store(o, b, out_row(o)) for o, _ in meets[r]
                     if last[o] == r and o in kept for b in range(vectors)]
        if deferred:
            start = kept[0] if kept else rows
            base = f"{oh0} + o" if oh0 is not None else "oh0 + o"
            code.append(f"  for (int o = {start}; o < {rows}; o++) {{\n"
                        f"    __global {t}* yr = yc + ({base}) * {wo};\n")
            for b in range(vectors):
                at0 = b * lanes
                count = min(lanes, wo - at0)
                apply = epilogue.apply_lanes(
                    "v", lanes, f"plane * {ho * wo} + ({base}) * {wo} + {at0}", 1, in_row=True)
                stores = " ".join(
                    f"vstore{size}({_swizzle('v', lanes, a, size)}, 0, yr + {at0 + a});"
                    if size > 1 else f"yr[{at0 + a}] = {_lane('v', lanes, a)};"
                    for a, size in _pieces(count))
                code.append(f"    {{ {vt} v = {_row_vector(t, lanes, f'yr + {at0}', count)};"
                            f"\n      {apply}\n      {stores} }}\n")
            code.append("  }\n")
        return code

    blocks = -(-ho // rows)
    if blocks == 1:
        lines += block(0)
    else:
        # the blocks meeting the padding (and a shifted last one) each with its rows
        # known, in a branch of its own; any other from its row at run time
        edges = _edge_blocks(g, rows)
        for k, j in enumerate(edges):
            head = "  if" if k == 0 else "  else if"
            lines.append(f"{head} (get_global_id(1) == {j}) {{\n")
            lines += block(min(j * rows, ho - rows), j * rows)
            lines.append("  }\n")
        lines.append(f"  {'else ' if edges else ''}{{\n  const {ix} oh0 = get_global_id(1) * {rows}, "
                     f"ih0 = oh0 * {sh} - {top};\n")
        lines += block(None)
        lines.append("  }\n")
    lines.append("}\n")
    args = [ref("in", 0), ref("in", 1)] + ([ref("in", 2)] if has_bias else []) \
        + [ref("out", 0)] + (epilogue.args if epilogue is not None else [])
    size = (g["n"] * m, blocks, 1)
    functions = epilogue.source() if epilogue is not None else ""
    return Launch(functions + "".join(lines), "depthwise_planes", size,
                  _local_size(size, PLANE_ITEMS, call.device), args)


def _depthwise(call, t: str, g: dict, has_bias: bool, epilogue) -> Launch:
    """One input channel per group: each work-item computes DEPTHWISE_ROWS output rows x
    one vector of output columns of one channel, reading the input rows in place: per
    input row the block meets, that row's kw tap vectors are loaded once and multiplied
    into every output row the row meets (each was loaded per output row before). Rows
    outside the input are skipped. The vectors of a row whose taps all lie inside the
    input rows load plainly; the others (at the row's edges: the first, the last...) are
    generated apart, their column offsets known, each tap's vector one load inside the
    row with its lanes moved into place and the padding's lanes zero (`_edge_load`; a
    clamped, masked gather only where no load fits). The old kernel gathered every tap
    of an edge vector lane by lane: 2/3 of the work-items on 20-wide maps. The last vector
    of a row and the last block of rows are shifted back to end at the map's edge, so
    every store is whole; the columns and rows another work-item stores are not stored
    twice (an epilogue's in may be the out itself)."""
    kh, kw, sh, sw, dh, dw = g["kh"], g["kw"], g["sh"], g["sw"], g["dh"], g["dw"]
    ho, wo, h, wd, c, m = g["ho"], g["wo"], g["h"], g["wd"], g["c"], g["m"]
    top, left = g["top"], g["left"]
    ix = _index_type(*call.ins, call.outs[0])
    lanes = _depthwise_lanes(t, wo)
    rows = min(ho, DEPTHWISE_ROWS)
    vt = _vtype(t, lanes)
    buffers = [("x", t, False), ("w", t, False)] + ([("bias", t, False)] if has_bias else []) \
        + [("y", t, True)] + (epilogue.buffers if epilogue is not None else [])
    vectors = -(-wo // lanes)
    col_shift = wo % lanes != 0
    row_shift = ho % rows != 0
    taps = _window_rows(t, lanes, rows, (kh, kw), (sh, sw), (dh, dw), left, wo, h, wd,
                        lambda o, p, q: f"acc{o} = fma(v{q}, ({vt})(w{p}_{q}), acc{o});")
    lines = [f"__kernel void depthwise({params(*buffers)}) {{\n{bind(*buffers)}\n"
             f"  const {ix} block = get_global_id(0) * {lanes}, "
             f"first = get_global_id(1) * {rows};\n"
             f"  const {ix} plane = get_global_id(2);\n"   # image * M + output channel
             f"  const {ix} ow0 = {f'min(block, ({ix}){wo - lanes})' if col_shift else 'block'};\n"
             f"  const {ix} oh0 = {f'min(first, ({ix}){ho - rows})' if row_shift else 'first'};\n"
             f"  const {ix} ih0 = oh0 * {sh} - {top}, iw0 = ow0 * {sw} - {left};\n"]
    lines += plane_weights(t, ix, g)
    lines += [f"  {vt} acc{o} = 0;\n" for o in range(rows)]
    lines.append(taps(vectors))
    for o in range(rows):
        value = f"acc{o} + ({vt})(bias[m])" if has_bias else f"acc{o}"
        row = f"(plane * {ho} + oh0 + {o}) * {wo}"
        fused = "" if epilogue is None else "\n    " + epilogue.apply_lanes(
            "v", lanes, f"{row} + ow0", 1, in_row=True)
        store = _window_store(t, lanes, col_shift)
        guard = f"if (oh0 + {o} >= first) " if row_shift else ""
        lines.append(f"  {guard}{{\n    {vt} v = {value};{fused}\n"
                     f"    __global {t}* yr = y + {row} + ow0;\n    {store}\n  }}\n")
    lines.append("}\n")
    args = [ref("in", 0), ref("in", 1)] + ([ref("in", 2)] if has_bias else []) \
        + [ref("out", 0)] + (epilogue.args if epilogue is not None else [])
    size = (vectors, -(-ho // rows), g["n"] * m)
    functions = epilogue.source() if epilogue is not None else ""
    return Launch(functions + "".join(lines), "depthwise", size,
                  _local_size(size, DEPTHWISE_ITEMS, call.device), args)
