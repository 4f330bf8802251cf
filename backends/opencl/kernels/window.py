"""Loads and stores along a row, and the block of output rows a window slides over: what
the OpenCL depthwise conv (depthwise.py, `_depthwise`) and the vector pool (normalize.py,
`_vector_pool`) share; conv.py's padding and im2col copies read rows with `_row_load`.

A block is a few output rows x one vector of output columns (`_depthwise_lanes`); per
input row the block meets, that row's kw tap vectors are loaded once (`_window_rows`),
a vector at a row's edge as one load inside the row with its lanes moved into place
(`_edge_load`); the last vector of a row is shifted back to end at the row's end and
stores only the lanes no other work-item stores (`_window_store`).
"""

from __future__ import annotations

from palimpsest.backends.opencl.kernels.base import literal
from palimpsest.backends.opencl.kernels.linalg import LANES, _lane, _vload, _vtype

DEPTHWISE_LANE_COST = {16: 1.0, 8: 0.7, 4: 0.5, 2: 0.45}   # a vector's relative time


def _row_load(t: str, lanes: int, pointer: str, stride: int, column: str | None, width: int,
              row: str | None = None, fill: str | None = None):
    """`lanes` elements `stride` apart from `pointer` (column `column` of the row that
    starts at `row`, `width` long): plain vector loads, or with `column` given, lanes
    outside the row read as `fill` (default zero: the conv's padding): each lane's column
    is clamped into the row and gathered, then masked, without branches. Also the span of
    elements the plain form reads."""
    vt = _vtype(t, lanes)
    if column is not None:
        zero = fill or literal(0, t)
        if lanes == 1:
            return (f"(({column}) >= 0 && ({column}) < {width} ? "
                    f"({row})[clamp(({column}), 0, {width - 1})] : {zero})"), 0
        mask = "int" if t == "float" else "long"
        steps = ", ".join(str(i * stride) for i in range(lanes))
        cols = f"(({mask}{lanes})(({mask})({column})) + ({mask}{lanes})({steps}))"
        lanes_ = ", ".join(f"({row})[clamp(({column}) + {i * stride}, 0, {width - 1})]"
                           for i in range(lanes))
        return (f"select(({vt})({lanes_}), ({vt})({zero}), "
                f"{cols} < 0 || {cols} >= {width})"), 0
    if lanes == 1:
        return f"({pointer})[0]", 1
    if stride == 1:
        return _vload(lanes, pointer), lanes
    if stride == 2 and lanes <= 8:
        return f"vload{2 * lanes}(0, {pointer}).even", 2 * lanes
    if stride == 2:
        half = lanes
        return (f"({vt})(vload{half}(0, {pointer}).even, vload{half}(0, ({pointer}) + "
                f"{half}).even)", 2 * lanes)
    return f"({vt})({', '.join(f'({pointer})[{i * stride}]' for i in range(lanes))})", \
        (lanes - 1) * stride + 1


def _store_row(t, lanes, value, pointer, first: str, limit: int) -> str:
    """Store `lanes` values at `pointer` (column `first` of a row of `limit`), dropping
    lanes past the row's end."""
    if lanes == 1:
        return f"({pointer})[0] = {value};"
    if limit % lanes == 0:
        return f"vstore{lanes}({value}, 0, {pointer});"
    lane_stores = " ".join(f"if ({first} + {i} < {limit}) ({pointer})[{i}] = {value}.s{i:x};"
                           for i in range(lanes))
    return (f"if ({first} + {lanes} <= {limit}) vstore{lanes}({value}, 0, {pointer}); "
            f"else {{ {lane_stores} }}")


def _depthwise_lanes(t: str, wo: int) -> int:
    """The vector width of a depthwise work-item's output columns: the fewest columns
    computed (the last vector of a row overlaps the one before it), a wider vector
    preferred at equal count (`DEPTHWISE_LANE_COST`)."""
    widths = [w for w in (16, 8, 4, 2) if w <= min(wo, LANES[t])] or [1]
    return min(widths, key=lambda w: -(-wo // w) * DEPTHWISE_LANE_COST.get(w, 1.0))


def _edge_load(t: str, lanes: int, start: int, stride: int, width: int, name: str,
               fill: str | None = None):
    """The vector of `lanes` input columns start, start + stride, ... of row `xrow`
    (`width` long), `fill` (default zero) outside the row, all offsets known, as (a load
    into `name`, the vector made of it): one plain (or strided) vector load inside the
    row, its lanes moved into place by constant lane selection (no load where no lane is
    inside). None where no such load fits in the row."""
    vt = _vtype(t, lanes)
    zero = fill or literal(0, t)
    columns = [start + i * stride for i in range(lanes)]
    inside = [i for i, col in enumerate(columns) if 0 <= col < width]
    if not inside:
        return "", zero if lanes == 1 else f"({vt})({zero})"
    first, last = inside[0], inside[-1]
    for shift in (first, last - (lanes - 1)):
        # lane i of the result is lane i - shift of the load
        base = columns[0] + shift * stride
        load, span = _row_load(t, lanes, f"xrow + {base}", stride, None, width)
        if base >= 0 and base + span - 1 < width:
            if lanes == 1 or (shift == 0 and first == 0 and last == lanes - 1):
                return "", load
            parts = [_lane(name, lanes, i - shift) if first <= i <= last else zero
                     for i in range(lanes)]
            return f"const {vt} {name} = {load};", f"({vt})({', '.join(parts)})"
    return None


def _window_rows(t: str, lanes: int, rows: int, kernel, strides, dilations, left: int,
                 wo: int, h: int, width: int, combine, fill: str | None = None):
    """What a depthwise conv and a vector pool (normalize.py) share: a work-item's block of
    `rows` output rows x one vector of `lanes` output columns; per input row the block
    meets, that row's kw tap vectors loaded once (`_row_load`; at a row's edges, vector j's
    offsets known, `_edge_load` with `fill` outside the row) and `combine(o, p, q)`, a
    statement, taking tap (p, q) into output row o's accumulator `acc{o}`. Returns
    taps(vectors), the code of the taps of a row of `vectors` vectors, in a kernel that
    has set `xc` (the plane), `ih0` and `iw0` (the block's first input row and column)."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilations
    vt = _vtype(t, lanes)
    col_shift = wo % lanes != 0
    _, span = _row_load(t, lanes, "xr", sw, None, width)
    # input row r of the block (from row oh0 * sh - top) meets output row o at tap p
    meets: dict = {}
    for o in range(rows):
        for p in range(kh):
            meets.setdefault(o * sh + p * dh, []).append((o, p))

    def first_column(j: int) -> int:
        return (min(j * lanes, wo - lanes) if col_shift else j * lanes) * sw - left

    def inside(j: int) -> bool:
        start = first_column(j)
        return start >= 0 and start + (kw - 1) * dw + span - 1 < width

    def body(j: int | None) -> str:
        lines = []
        for r in sorted(meets):
            lines.append(f"    if (ih0 + {r} >= 0 && ih0 + {r} < {h}) {{\n"
                         f"      __global const {t}* xrow = xc + (ih0 + {r}) * {width};\n")
            for q in range(kw):
                if j is None:
                    load, _ = _row_load(t, lanes, f"xrow + iw0 + {q * dw}", sw, None, width)
                else:
                    start = first_column(j) + q * dw
                    found = _edge_load(t, lanes, start, sw, width, f"b{q}", fill)
                    if found is None:
                        found = "", _row_load(t, lanes, None, sw, str(start), width, "xrow",
                                              fill)[0]
                    before, load = found
                    if before:
                        lines.append(f"      {before}\n")
                lines.append(f"      const {vt} v{q} = {load};\n")
            for o, p in meets[r]:
                lines.append("      " + " ".join(combine(o, p, q) for q in range(kw)) + "\n")
            lines.append("    }\n")
        return "".join(lines)

    def taps(vectors: int) -> str:
        """The kernel's taps: the edge vectors each in a branch of its own (their offsets
        known), then any inside vector."""
        edges = [j for j in range(vectors) if not inside(j)]
        branches = [(f"get_global_id(0) == {j}", body(j)) for j in edges]
        if len(edges) < vectors:
            branches.append((None, body(None)))
        code = []
        for k, (condition, lines) in enumerate(branches):
            head = "  " if k == 0 else "  else "
            if condition is not None:
                head += f"if ({condition}) "
            code.append(f"{head}{{\n{lines}  }}\n")
        return "".join(code)

    return taps


def _window_store(t: str, lanes: int, col_shift: bool) -> str:
    """A `_window_rows` block's store of vector `v` at `yr`: whole, or where the row's
    last vector was shifted back (`col_shift`) only the lanes from `block` on, which no
    other work-item stores."""
    full = _store_row(t, lanes, "v", "yr", "ow0", lanes)
    if not col_shift:
        return full
    lane_stores = " ".join(f"if (ow0 + {i} >= block) yr[{i}] = {_lane('v', lanes, i)};"
                           for i in range(lanes))
    return f"if (ow0 == block) {full} else {{ {lane_stores} }}"
