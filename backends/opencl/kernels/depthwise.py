"""The whole-plane form of the OpenCL depthwise conv, for maps at most one vector wide.

conv.py's `_depthwise` gives each work-item a vector of output columns on a few output
rows and loads each input row's kw tap vectors from memory, each (at the row's edges)
with its lanes moved into place; on maps of 7-16 columns it computes narrow or
overlapping vectors (14 wide: two 8-lane vectors, both at an edge) and reloads the
rows between its blocks. Here one work-item computes a whole output plane of one
channel, one vector of `lanes` >= Wo columns per output row: each input row is loaded
once, as a few vectors of `lanes` (power-of-two pieces, never past the row's end), and
every tap vector is those vectors' lanes moved into place with the padding's lanes zero
(one shuffle each, no load); an output row is stored as soon as its last input row is
in (so only ~kh accumulators are live). Every offset is known, so the row loops are
unrolled and rows in the padding left out, with no branches.
"""

from __future__ import annotations

from palimpsest.backends.opencl.kernels.base import Launch, bind, literal, params, ref
from palimpsest.backends.opencl.kernels.linalg import (
    LANES, _index_type, _lane, _local_size, _vtype,
)

PLANE_ITEMS = 16        # work-items (planes) per work-group
PLANE_TAPS = 1600       # most multiply-adds (output rows x kh x kw) unrolled in a kernel


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


def plane_lanes(t: str, g: dict, epilogue) -> int | None:
    """The vector width of the whole-plane form for geometry `g`, or None where it does
    not apply: a map wider than a vector (or of one column), too many taps to unroll, or
    an epilogue in read along the row where the vector runs past the row's end."""
    wo = g["wo"]
    lanes = 1 << (wo - 1).bit_length()
    if wo < 2 or lanes > LANES[t] or g["ho"] * g["kh"] * g["kw"] > PLANE_TAPS:
        return None
    if lanes != wo and epilogue is not None and any(
            epilogue.call.ins[a.key].shape[-1:] not in ((), (1,)) for a in epilogue.args):
        return None
    return lanes


def depthwise_planes(call, t: str, g: dict, has_bias: bool, epilogue, lanes: int) -> Launch:
    """One work-item per output plane (image x channel), see the module doc."""
    kh, kw, sh, sw, dh, dw = g["kh"], g["kw"], g["sh"], g["sw"], g["dh"], g["dw"]
    ho, wo, h, wd, c, m = g["ho"], g["wo"], g["h"], g["wd"], g["c"], g["m"]
    top, left = g["top"], g["left"]
    ix = _index_type(*call.ins, call.outs[0])
    vt = _vtype(t, lanes)
    zero = literal(0, t)
    buffers = [("x", t, False), ("w", t, False)] + ([("bias", t, False)] if has_bias else []) \
        + [("y", t, True)] + (epilogue.buffers if epilogue is not None else [])
    lines = [f"__kernel void depthwise_planes({params(*buffers)}) {{\n{bind(*buffers)}\n"
             f"  const {ix} plane = get_global_id(0);\n"   # image * M + output channel
             f"  const {ix} m = plane % {m}, image = plane / {m};\n"
             f"  __global const {t}* xc = x + (image * {c} + m / {m // c}) * {h * wd};\n"
             f"  __global {t}* yc = y + plane * {ho * wo};\n"
             f"  __global const {t}* wm = w + m * {kh * kw};\n"]
    lines += [f"  const {t} w{p}_{q} = wm[{p * kw + q}];\n"
              for p in range(kh) for q in range(kw)]
    # input row r meets output row o at tap p; o is stored after its last such row
    meets: dict = {}
    for o in range(ho):
        for p in range(kh):
            r = o * sh + p * dh - top
            if 0 <= r < h:
                meets.setdefault(r, []).append((o, p))
    last = {o: r for r in sorted(meets) for o, _ in meets[r]}
    chunks = -(-wd // lanes)

    def store(o: int) -> str:
        value = f"acc{o} + ({vt})(bias[m])" if has_bias else f"acc{o}"
        fused = "" if epilogue is None else "\n    " + epilogue.apply_lanes(
            "v", lanes, f"plane * {ho * wo} + {o * wo}", 1, in_row=True)
        stores = " ".join(
            f"vstore{size}({_swizzle('v', lanes, at, size)}, 0, yr + {at});" if size > 1
            else f"yr[{at}] = {_lane('v', lanes, at)};" for at, size in _pieces(wo))
        return (f"  {{\n    {vt} v = {value};{fused}\n"
                f"    __global {t}* yr = yc + {o * wo};\n    {stores}\n  }}\n")

    lines += [f"  {vt} acc{o} = 0;\n" for o in range(ho)]
    lines += [store(o) for o in range(ho) if o not in last]   # wholly in the padding
    for r in sorted(meets):
        lines.append(f"  {{\n    __global const {t}* xrow = xc + {r * wd};\n")
        for k in range(chunks):
            count = min(lanes, wd - k * lanes)
            lines.append(f"    const {vt} r{k} = "
                         f"{_row_vector(t, lanes, f'xrow + {k * lanes}', count)};\n")
        for q in range(kw):
            columns = [j * sw + q * dw - left for j in range(lanes)]
            parts = [_lane(f"r{col // lanes}", lanes, col % lanes) if 0 <= col < wd and j < wo
                     else zero for j, col in enumerate(columns)]
            if lanes == 1:
                lines.append(f"    const {vt} v{q} = {parts[0]};\n")
            else:
                lines.append(f"    const {vt} v{q} = ({vt})({', '.join(parts)});\n")
        for o, p in meets[r]:
            lines.append("    " + " ".join(f"acc{o} = fma(v{q}, ({vt})(w{p}_{q}), acc{o});"
                                           for q in range(kw)) + "\n")
        lines.append("  }\n")
        lines += [store(o) for o, _ in meets[r] if last[o] == r]
    lines.append("}\n")
    args = [ref("in", 0), ref("in", 1)] + ([ref("in", 2)] if has_bias else []) \
        + [ref("out", 0)] + (epilogue.args if epilogue is not None else [])
    size = (g["n"] * m, 1, 1)
    functions = epilogue.source() if epilogue is not None else ""
    return Launch(functions + "".join(lines), "depthwise_planes", size,
                  _local_size(size, PLANE_ITEMS, call.device), args)
