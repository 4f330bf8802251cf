"""`kernel.pool2d`, `kernel.softmax`, `kernel.layer_norm` and `kernel.reduce` in OpenCL.

pool2d: one work-item per output element loops over its window, skipping the cells a
pad or a ceil_mode overhang puts outside the input (what the numpy backend's `padded`
workspace holds there, -inf / the integer minimum / 0, changes neither a max nor a sum),
and an average divides by the count of the window's cells that count (every cell with
count_include_pad, up to the end pads; else the cells inside the input). Neither
workspace is used.

softmax, layer_norm and reduce walk rows: the elements that reduce to one value (a
softmax row along its axis, the normalized trailing dims, the reduced axes), at a base
offset per row and a per-element offset (strided for a softmax along a non-last axis
or a reduction over leading or scattered axes); `_Rows` says how:

- contiguous rows of 8 elements or more: one work-group per row, each work-item
  reading every group-size-th vector of 8 (`vload8`; then a scalar tail) and the
  partial results combined in a local-memory tree; rows of few vectors are one
  work-item's loop over its vectors;
- strided rows: one work-item per row when they are short or many (neighbouring
  work-items read neighbouring elements), taking 8 (4, 2) neighbouring rows at once as
  the lanes of vectors when the rows are neighbours in memory; else a work-group per
  row as above, element by element.

Vectors matter on PoCL, whose vectorizer works across work-items and not along a
work-item's loop: a row loop of scalars measured 5-8x slower on softmax rows of 128,
and 3x on a mean over a middle axis. The workspaces are unused: row statistics stay
in registers.

Numerics follow the numpy backend: softmax is exp(x - max) / sum; layer_norm is
two-pass (mean, then the mean of squared deviations) and (x - mean) * (1 / sqrt(var +
eps)) * scale + B; max keeps NaN (as np.maximum) and starts from -inf or the integer
minimum; an integer sum wraps in its own type (accumulated unsigned: signed overflow
is undefined in C); an integer mean accumulates in double and truncates, as the numpy
backend's f64 `acc` workspace does. f16 (no OpenCL C type here) runs on the host.
"""

from __future__ import annotations

from palimpsest.backends.opencl.kernels.base import (
    Launch, Unsupported, bind, broadcast_index, generator, literal, params, ref, round_up,
    strides_of,
)
from palimpsest.backends.opencl.kernels.linalg import _local_size, _vtype
from palimpsest.backends.opencl.kernels.window import (
    _depthwise_lanes, _window_rows, _window_store,
)

FLOATS = ("float", "double")

VECTOR = 8          # contiguous rows are read and written in vectors of this many elements
VECTORS_PER_ITEM = 2  # a work-group row gives each work-item at least this many vectors
# strided rows shorter than this are one work-item's loop: a tree would be mostly barriers
SHORT_ROW = 32
MANY_ROWS = 256     # strided rows are one work-item's loop when there are this many
# a work-group runs on one core of a CPU device (PoCL), its work-items looped between
# barriers: larger groups only add tree steps there (measured: 16-32 work-items per row
# beat 64-256 by 1.5-3x); 32 still fills a GPU warp
MAX_GROUP = 32
ITEM_GROUP = 64     # work-group size of the one-work-item-per-row and pool kernels

_TYPE_MIN = {"char": "CHAR_MIN", "short": "SHRT_MIN", "int": "INT_MIN", "long": "LONG_MIN",
             "uchar": "0", "ushort": "0", "uint": "0", "ulong": "0"}
_UNSIGNED_ACC = {"char": "uint", "short": "uint", "int": "uint", "long": "ulong",
                 "uchar": "uint", "ushort": "uint", "uint": "uint", "ulong": "ulong"}

SUM = "({a} + {b})"


def _lowest(t: str) -> str:
    return literal(float("-inf"), t) if t in FLOATS else _TYPE_MIN[t]


def _max_of(t: str) -> tuple:
    """(C functions, combine) for a max in `t` where NaN wins, as with np.maximum:
    `max_of` on scalars, `max_of16` (8, 4, 2) on vectors; integers use the builtin max."""
    if t not in FLOATS:
        return "", "max({a}, {b})"
    # b != b rather than isnan(b): PoCL calls isnan out of line, 4x slower in a pool
    functions = f"{t} max_of(const {t} a, const {t} b) {{ return (b > a || b != b) ? b : a; }}\n"
    for n in (2, 4, 8, 16):
        v = f"{t}{n}"
        functions += (f"{v} max_of{n}(const {v} a, const {v} b) {{ "
                      f"return select(a, b, (b > a) | (b != b)); }}\n")
    return functions, "max_of{n}({a}, {b})"


def _one_item_launch(source: str, name: str, count: int, args: list) -> list:
    local = ITEM_GROUP if count >= ITEM_GROUP else None
    return [Launch(source, name, (round_up(count, local or 1),),
                   (local,) if local else None, args)]


def _pow2_at_most(limit: int) -> int | None:
    if limit < 2:
        return None
    size = 1
    while size * 2 <= limit:
        size *= 2
    return size


# -- rows -----------------------------------------------------------------------------------------

def _collapse(dims) -> list:
    """(size, stride) dims, row-major, without size-1 dims and with neighbours that step
    as one dim merged."""
    merged: list = []
    for size, stride in dims:
        if size == 1:
            continue
        if merged and merged[-1][1] == size * stride:
            merged[-1] = (merged[-1][0] * size, stride)
        else:
            merged.append((size, stride))
    return merged


def _offset(dims, flat: str) -> str:
    """A C expression for the element offset of row-major index `flat` over `dims`
    ((size, stride) pairs, already collapsed)."""
    if not dims:
        return "0"
    terms = []
    inner = 1
    for position, (size, stride) in enumerate(reversed(dims)):
        coord = flat if inner == 1 else f"({flat} / {inner}L)"
        if position < len(dims) - 1:  # the outermost index is below its size already
            coord = f"({coord} % {size}L)"
        terms.append(coord if stride == 1 else f"{coord} * {stride}L")
        inner *= size
    return " + ".join(reversed(terms))


def _vec(t: str, n: int) -> str:
    return t if n == 1 else f"{t}{n}"


class _Rows:
    """The rows of `shape` that reduce over `axes`, and how a kernel walks them: `count`
    rows of `width` elements, row `row` at offset `base`, its element `j` at `base + at`;
    `local` is the work-group size per row, or None for one work-item per row.

    `vectors` is how many vectors of 8 a contiguous row starts with (a scalar tail
    follows); with `lanes` > 1 a work-item takes that many neighbouring rows, and every
    value the kernel keeps per row is a vector of the lanes' values."""

    def __init__(self, shape, axes, device):
        strides = strides_of(shape)
        kept = _collapse((d, s) for i, (d, s) in enumerate(zip(shape, strides))
                         if i not in axes)
        reduced = _collapse((d, s) for i, (d, s) in enumerate(zip(shape, strides))
                            if i in axes)
        self.count = 1
        for size, _ in kept:
            self.count *= size
        self.width = 1
        for size, _ in reduced:
            self.width *= size
        self.base = _offset(kept, "row")
        self.at = _offset(reduced, "j")
        contiguous = self.at in ("j", "0")
        self.vectors = self.width // VECTOR if contiguous else 0
        if self.vectors:
            work = self.vectors // VECTORS_PER_ITEM
        elif self.width < SHORT_ROW or (not contiguous and self.count >= MANY_ROWS):
            work = 0
        else:
            work = self.width
        self.local = _pow2_at_most(min(MAX_GROUP, device.max_work_group_size, work))
        self.lanes = 1
        if not contiguous and self.local is None and kept and kept[-1][1] == 1:
            self.lanes = next((n for n in (8, 4, 2) if kept[-1][0] % n == 0), 1)

    def head(self, scratch_type: str) -> str:
        """The kernel's first lines: which row, and (work-group rows) the local scratch."""
        if self.local is None:
            first = "get_global_id(0)" + (f" * {self.lanes}" if self.lanes > 1 else "")
            return (f"  const long row = {first};\n"
                    f"  if (row >= {self.count}L) return;\n"
                    f"  const long base = {self.base};\n")
        return (f"  __local {scratch_type} scratch[{self.local}];\n"
                f"  const long row = get_group_id(0);\n"
                f"  const int lid = get_local_id(0);\n"
                f"  const long base = {self.base};\n")

    def _spans(self) -> list:
        """(loop header, vector width) per part of the row: vectors, then scalars (or
        the lanes' vectors)."""
        start, step = ("lid", self.local) if self.local else ("0", 1)
        spans = []
        if self.vectors:
            spans.append((f"for (long j = {start}; j < {self.vectors}L; j += {step})", VECTOR))
        first = self.vectors * VECTOR
        if first < self.width:
            begin = start if not first else f"{first}L + {start}"
            spans.append((f"for (long j = {begin}; j < {self.width}L; j += {step})",
                          self.lanes))
        return spans

    def load(self, buffer: str, n: int) -> str:
        if n == 1:
            return f"{buffer}[base + {self.at}]"
        if self.lanes > 1:
            return f"vload{n}(0, {buffer} + base + {self.at})"
        return f"vload{n}(j, {buffer} + base)"

    def store(self, buffer: str, value: str, n: int) -> str:
        if n == 1:
            return f"{buffer}[base + {self.at}] = {value};"
        if self.lanes > 1:
            return f"vstore{n}({value}, 0, {buffer} + base + {self.at});"
        return f"vstore{n}({value}, j, {buffer} + base);"

    def each(self, body) -> str:
        """Lines that run `body(n)` (a statement) on every element (n = 1) or vector."""
        return "".join(f"  {header} {{ {body(n)} }}\n" for header, n in self._spans())

    def reduce(self, name: str, t: str, init: str, combine: str, load_type: str, term,
               also=None) -> str:
        """Lines that leave the row's reduction in `name` (type `t`, or a vector of the
        lanes' values) in every work-item. `combine` is a C expression of `{a}` and `{b}`
        (`{n}`: the vector width, "" for scalars); `term(n)` the value of an element
        (or vector) `v` of `load_type` from x; `also(n)`, a statement run on each, may
        use that value as `e`."""
        def merge(a, b, n=1):
            return combine.format(a=a, b=b, n=n if n > 1 else "")

        rt = _vec(t, self.lanes)
        lines = [f"  {rt} {name} = ({rt})({init});"]
        for header, n in self._spans():
            vt = _vec(t, n)
            total = name if n == self.lanes else f"{name}{n}"
            step = (f"const {_vec(load_type, n)} v = {self.load('x', n)}; "
                    f"const {vt} e = {term(n)}; "
                    f"{also(n) + ' ' if also else ''}{total} = {merge(total, 'e', n)};")
            if n == self.lanes:
                lines.append(f"  {header} {{ {step} }}")
                continue
            parts = [f"{total}.s{k}" for k in range(n)]
            while len(parts) > 1:
                parts = [merge(parts[k], parts[k + 1]) for k in range(0, len(parts), 2)]
            lines += [f"  {{ {vt} {total} = ({vt})({init});",
                      f"    {header} {{ {step} }}",
                      f"    {name} = {merge(name, parts[0])}; }}"]
        if self.local is not None:
            lines += [f"  scratch[lid] = {name};",
                      "  barrier(CLK_LOCAL_MEM_FENCE);",
                      f"  for (int span = {self.local // 2}; span > 0; span >>= 1) {{",
                      f"    if (lid < span) scratch[lid] = "
                      f"{merge('scratch[lid]', 'scratch[lid + span]')};",
                      "    barrier(CLK_LOCAL_MEM_FENCE);",
                      "  }",
                      f"  {name} = scratch[0];",
                      # the next reduction writes scratch again: everyone must have read it
                      "  barrier(CLK_LOCAL_MEM_FENCE);"]
        return "\n".join(lines) + "\n"

    def launch(self, source: str, name: str, args: list) -> list:
        if self.count == 0:
            return []
        if self.local is None:
            return _one_item_launch(source, name, self.count // self.lanes, args)
        return [Launch(source, name, (self.count * self.local,), (self.local,), args)]


# -- softmax --------------------------------------------------------------------------------------

@generator("kernel.softmax")
def softmax(call) -> list:
    x = call.ins[0]
    t = x.ctype
    rows = _Rows(x.shape, (call.config["axis"],), call.device)
    buffers = [("x", t, False), ("y", t, True)]
    functions, max_combine = _max_of(t)
    source = (functions +
              f"__kernel void softmax({params(*buffers)}) {{\n{bind(*buffers)}\n" +
              rows.head(t) +
              rows.reduce("top", t, _lowest(t), max_combine, t, lambda n: "v") +
              # y holds exp(x - max) until the sum is known: one exp per element; each
              # work-item reads back only what it wrote, so no barrier is needed
              rows.reduce("total", t, literal(0, t), SUM, t, lambda n: "exp(v - top)",
                          lambda n: rows.store("y", "e", n)) +
              rows.each(lambda n: rows.store("y", f"{rows.load('y', n)} / total", n)) +
              "}\n")
    return rows.launch(source, "softmax", [ref("in", 0), ref("out", 0)])


# -- layer_norm -----------------------------------------------------------------------------------

def _gather(buffer: str, t: str, normalized, shape, n: int) -> str:
    """The element (n = 1) or vector of `buffer` (of `shape`, broadcast to the
    `normalized` dims) at the row's element or vector `j`."""
    if n == 1:
        return f"{buffer}[{broadcast_index(normalized, shape, 'j')}]"
    whole = broadcast_index(normalized, shape, "k")
    if whole == "k":
        return f"vload{n}(j, {buffer})"
    if whole == "0":
        return f"{buffer}[0]"  # a scalar operand widens to the vector
    lanes = ", ".join(f"{buffer}[{broadcast_index(normalized, shape, f'({n} * j + {k})')}]"
                      for k in range(n))
    return f"({t}{n})({lanes})"


@generator("kernel.layer_norm")
def layer_norm(call) -> list:
    x = call.ins[0]
    t = x.ctype
    axis = call.config["axis"]
    normalized = tuple(x.shape[axis:])
    rows = _Rows(x.shape, tuple(range(axis, len(x.shape))), call.device)
    has_bias = len(call.ins) > 2
    buffers = [("x", t, False), ("scale", call.ins[1].ctype, False)]
    if has_bias:
        buffers.append(("bias", call.ins[2].ctype, False))
    buffers.append(("y", t, True))
    width = literal(rows.width, t)

    def normalize(n):
        result = (f"({rows.load('x', n)} - mean) * rstd * "
                  f"{_gather('scale', t, normalized, call.ins[1].shape, n)}")
        if has_bias:
            result += f" + {_gather('bias', t, normalized, call.ins[2].shape, n)}"
        return rows.store("y", result, n)

    source = (f"__kernel void layer_norm({params(*buffers)}) {{\n{bind(*buffers)}\n" +
              rows.head(t) +
              rows.reduce("sum", t, literal(0, t), SUM, t, lambda n: "v") +
              f"  const {t} mean = sum / {width};\n" +
              rows.reduce("squares", t, literal(0, t), SUM, t,
                          lambda n: "(v - mean) * (v - mean)") +
              f"  const {t} rstd = {literal(1, t)} / "
              f"sqrt(squares / {width} + {literal(call.config['epsilon'], t)});\n" +
              rows.each(normalize) +
              "}\n")
    args = [ref("in", k) for k in range(len(call.ins))] + [ref("out", 0)]
    return rows.launch(source, "layer_norm", args)


# -- reduce ---------------------------------------------------------------------------------------

@generator("kernel.reduce")
def reduce(call) -> list:
    x = call.ins[0]
    t = x.ctype
    mode = call.config["mode"]
    rows = _Rows(x.shape, tuple(call.config["axes"]), call.device)
    functions = ""
    lanes = rows.lanes
    convert = f"convert_{_vec(t, lanes)}"
    if mode == "max":
        functions, combine = _max_of(t)
        acc, init, result = t, _lowest(t), "acc"
    elif t in FLOATS:
        acc, init, combine = t, literal(0, t), SUM
        result = "acc" if mode == "sum" else f"acc / {literal(rows.width, t)}"
    elif mode == "sum":  # wraps in t, as numpy's sum does; unsigned: no undefined overflow
        acc, init, combine = _UNSIGNED_ACC[t], "0", SUM
        result = f"{convert}(acc)"
    else:  # integer mean: in double, truncated (the numpy backend's f64 acc workspace)
        acc, init, combine = "double", "0.0", SUM
        result = f"{convert}(trunc(acc / {literal(rows.width, 'double')}))"
    term = (lambda n: "v") if acc == t else (lambda n: f"convert_{_vec(acc, n)}(v)")
    buffers = [("x", t, False), ("y", call.outs[0].ctype, True)]
    if lanes > 1:
        store = f"vstore{lanes}({result}, 0, y + row);"
    else:
        store = f"y[row] = {result};"
    if rows.local is not None:
        store = f"if (lid == 0) {store}"
    source = (functions +
              f"__kernel void reduce({params(*buffers)}) {{\n{bind(*buffers)}\n" +
              rows.head(acc) +
              rows.reduce("acc", acc, init, combine, t, term) +
              f"  {store}\n}}\n")
    return rows.launch(source, "reduce", [ref("in", 0), ref("out", 0)])


# -- pool2d ---------------------------------------------------------------------------------------

SEPARABLE_WIDTH = 64   # input rows a work-item of the separable max pool keeps in registers


def _separable_max(call, t, x_shape, y_shape, kernel, strides, dilations, pads) -> list:
    """A max pool as two passes in one work-item per output row: the max down the
    window's rows of every input column (kept in a private array), then the max across
    the window's columns of those, kh * W + kw * Wo taps instead of kh * kw * Wo (YOLO's
    SPP 13x13 pool on a 13x13 map: 6x fewer). NaN wins, as in the direct form."""
    n, c, h, w = x_shape
    ho, wo = y_shape
    kh, kw = kernel
    sh, sw = strides
    dh, dw = dilations
    top, left = pads
    buffers = [("x", t, False), ("y", t, True)]
    functions, combine = _max_of(t)
    take = combine.format(a="acc", b="{}", n="")
    total = n * c * ho
    source = functions + (
        f"__kernel void pool2d_rows({params(*buffers)}) {{\n"
        f"  const long i = get_global_id(0);\n"
        f"  if (i >= {total}L) return;\n{bind(*buffers)}\n"
        f"  const int oh = i % {ho};\n"
        f"  const __global {t}* plane = x + (i / {ho}) * {h * w}L;\n"
        f"  const int h0 = oh * {sh} - {top};\n"
        f"  const int p0 = h0 < 0 ? (-h0 + {dh - 1}) / {dh} : 0;\n"
        f"  const int p1 = min({kh}, ({h} - h0 + {dh - 1}) / {dh});\n"
        f"  {t} down[{w}];\n"
        f"  for (int col = 0; col < {w}; ++col) {{\n"
        f"    {t} acc = {_lowest(t)};\n"
        f"    for (int p = p0; p < p1; ++p) acc = "
        f"{take.format(f'plane[(h0 + p * {dh}) * {w} + col]')};\n"
        f"    down[col] = acc;\n  }}\n"
        f"  __global {t}* out = y + i * {wo};\n"
        f"  for (int ow = 0; ow < {wo}; ++ow) {{\n"
        f"    const int w0 = ow * {sw} - {left};\n"
        f"    const int q0 = w0 < 0 ? (-w0 + {dw - 1}) / {dw} : 0;\n"
        f"    const int q1 = min({kw}, ({w} - w0 + {dw - 1}) / {dw});\n"
        f"    {t} acc = {_lowest(t)};\n"
        f"    for (int q = q0; q < q1; ++q) acc = {take.format(f'down[w0 + q * {dw}]')};\n"
        f"    out[ow] = acc;\n  }}\n}}\n")
    return _one_item_launch(source, "pool2d_rows", total, [ref("in", 0), ref("out", 0)])


POOL_ROWS = 4   # output rows per work-item of the vector pool
POOL_ITEMS = 64


def _vector_pool(call, t: str, is_max: bool):
    """A float max pool (any pads, dilations, ceil_mode) or an unpadded average pool as
    the depthwise conv runs (depthwise.py, `_depthwise`, on window.py's `_window_rows`):
    each work-item POOL_ROWS output rows x one vector of output columns of one plane; per
    input row the block meets, its kw tap vectors loaded once and combined into every
    output row the row meets; rows outside the input skipped, the vectors at a row's edges
    generated apart with the lanes outside the input -inf (a max ignores them, as the
    numpy kernel does); the last vector and row block shifted back, nothing stored twice.
    The per-element kernel ran loops of run-time bounds per output (ppocr_v6_tiny_det's
    2x2 / 1 pool on 16 x 160 x 160: 4.4 ms on PoCL)."""
    x, y = call.ins[0], call.outs[0]
    config = call.config
    n, c, h, w = x.shape
    ho, wo = y.shape[2], y.shape[3]
    kh, kw = config["kernel_shape"]
    sh, sw = config["strides"]
    dh, dw = config["dilations"]
    top, left = config["pads"][0], config["pads"][1]
    lanes = _depthwise_lanes(t, wo)
    rows = min(ho, POOL_ROWS)
    vt = _vtype(t, lanes)
    fill = _lowest(t) if is_max else None
    functions, combine = _max_of(t) if is_max else ("", "({a} + {b})")
    step = lambda acc, v: combine.format(a=acc, b=v, n=lanes)  # noqa: E731
    vectors = -(-wo // lanes)
    col_shift, row_shift = wo % lanes != 0, ho % rows != 0
    taps = _window_rows(t, lanes, rows, (kh, kw), (sh, sw), (dh, dw), left, wo, h, w,
                        lambda o, p, q: f"acc{o} = {step(f'acc{o}', f'v{q}')};", fill)
    buffers = [("x", t, False), ("y", t, True)]
    init = f"({vt})({_lowest(t)})" if is_max else f"({vt})({literal(0, t)})"
    lines = [f"__kernel void pool2d({params(*buffers)}) {{\n{bind(*buffers)}\n"
             f"  const int block = get_global_id(0) * {lanes}, "
             f"first = get_global_id(1) * {rows};\n"
             f"  const long plane = get_global_id(2);\n"
             f"  const int ow0 = {f'min(block, {wo - lanes})' if col_shift else 'block'};\n"
             f"  const int oh0 = {f'min(first, {ho - rows})' if row_shift else 'first'};\n"
             f"  const int ih0 = oh0 * {sh} - {top}, iw0 = ow0 * {sw} - {left};\n"
             f"  __global const {t}* xc = x + plane * {h * w}L;\n"]
    lines += [f"  {vt} acc{o} = {init};\n" for o in range(rows)]
    lines.append(taps(vectors))
    for o in range(rows):
        value = f"acc{o}" if is_max else f"acc{o} / ({vt})({literal(kh * kw, t)})"
        store = _window_store(t, lanes, col_shift)
        guard = f"if (oh0 + {o} >= first) " if row_shift else ""
        lines.append(f"  {guard}{{\n    const {vt} v = {value};\n"
                     f"    __global {t}* yr = y + (plane * {ho} + oh0 + {o}) * {wo} + ow0;\n"
                     f"    {store}\n  }}\n")
    lines.append("}\n")
    size = (vectors, -(-ho // rows), n * c)
    return Launch(functions + "".join(lines), "pool2d", size,
                  _local_size(size, POOL_ITEMS, call.device),
                  [ref("in", 0), ref("out", 0)])


@generator("kernel.pool2d")
def pool2d(call) -> list:
    x, y = call.ins[0], call.outs[0]
    t = x.ctype
    config = call.config
    is_max = config["mode"] == "max"
    if not is_max and t not in FLOATS:
        raise Unsupported(f"averages floats, not {t}")
    n, c, h, w = x.shape
    ho, wo = y.shape[2], y.shape[3]
    kh, kw = config["kernel_shape"]
    sh, sw = config["strides"]
    dh, dw = config["dilations"]
    top, left, bottom, right = config["pads"]
    total = n * c * ho * wo
    if total == 0:
        return []
    buffers = [("x", t, False), ("y", t, True)]
    functions = ""
    if t in FLOATS and wo >= 4 and (is_max or (not any(config["pads"]) and
                                               not config["ceil_mode"])):
        return [_vector_pool(call, t, is_max)]
    if is_max and w <= SEPARABLE_WIDTH and kh * kw * wo > 2 * (kh * w + kw * wo):
        return _separable_max(call, t, (n, c, h, w), (ho, wo), (kh, kw), (sh, sw), (dh, dw),
                              (top, left))
    if is_max:
        functions, combine = _max_of(t)
        init, finish = _lowest(t), "acc"
        update = f"acc = {combine.format(a='acc', b='v', n='')};"
    else:
        # the cells that count: with count_include_pad, every one up to the end pads
        # (a ceil_mode overhang past them does not count); else those inside the input
        include = config["count_include_pad"]
        lo_h, hi_h = (-top, h + bottom) if include else (0, h)
        lo_w, hi_w = (-left, w + right) if include else (0, w)
        init, update = literal(0, t), "acc += v;"
        finish = f"acc / ({t})(rows * cols)"
    lines = ["  const long i = get_global_id(0);",
             f"  if (i >= {total}L) return;",
             bind(*buffers),
             f"  const int ow = i % {wo};",
             f"  const int oh = (i / {wo}) % {ho};",
             f"  const __global {t}* plane = x + (i / {ho * wo}) * {h * w}L;",
             f"  const int h0 = oh * {sh} - {top};",
             f"  const int w0 = ow * {sw} - {left};",
             f"  {t} acc = {init};"]
    if not is_max:
        lines += ["  int rows = 0, cols = 0;",
                  f"  for (int p = 0; p < {kh}; ++p) {{ const int at = h0 + p * {dh}; "
                  f"rows += at >= {lo_h} && at < {hi_h}; }}",
                  f"  for (int q = 0; q < {kw}; ++q) {{ const int at = w0 + q * {dw}; "
                  f"cols += at >= {lo_w} && at < {hi_w}; }}"]
    # the window's taps inside the input, as loop bounds: no branch in the loops
    # (no test per tap)
    lines += [f"  const int p0 = h0 < 0 ? (-h0 + {dh - 1}) / {dh} : 0;",
              f"  const int p1 = min({kh}, ({h} - h0 + {dh - 1}) / {dh});",
              f"  const int q0 = w0 < 0 ? (-w0 + {dw - 1}) / {dw} : 0;",
              f"  const int q1 = min({kw}, ({w} - w0 + {dw - 1}) / {dw});",
              "  for (int p = p0; p < p1; ++p) {",
              f"    const __global {t}* xr = plane + (h0 + p * {dh}) * {w} + w0;",
              "    for (int q = q0; q < q1; ++q) {",
              f"      const {t} v = xr[q * {dw}];",
              f"      {update}",
              "    }",
              "  }",
              f"  y[i] = {finish};"]
    source = (functions +
              f"__kernel void pool2d({params(*buffers)}) {{\n" + "\n".join(lines) + "\n}\n")
    return _one_item_launch(source, "pool2d", total, [ref("in", 0), ref("out", 0)])
