"""`kernel.matmul` in OpenCL, and the register-blocked GEMM that conv.py's
`kernel.conv2d` runs too.

Matrix products are register-blocked: a work-item keeps ROWS x VECTORS vector
accumulators (16 float / 8 double lanes: one 512-bit register each), per step of k
loads VECTORS vectors of the "vector operand" and ROWS broadcast scalars of the "scalar
operand", and writes its block once, with alpha, beta * C (or a conv's bias) applied on
the way out. Work-groups are one work-item, so PoCL's CPU device runs each as straight
vector code, and the row blocks are the fastest grid axis, so neighbouring work-groups
share a column strip of the vector operand in cache. Tiles in local memory, the usual
GPU design, measured 2-4x slower on PoCL (barriers spill every work-item's accumulators
to memory, and the CPU caches hold the tiles anyway), so the tiles live in registers.
The multiply-adds are `fma()`, never `mad()`: PoCL (3.1, LLVM 15) lowers `mad` to a
multiply and an add, half the rate of the one fused instruction `fma` becomes where the
hardware has FMA units (every current CPU and GPU): the GEMM went from ~80 to 100-145
GFLOP/s on one AVX-512 core. The GEMMs are built to flush subnormals (`Launch`): with
fma, ppocr_v6_small_det's activations came to carry them (its roundings differ from a
mul-then-add's), and every multiply-add on one takes a microcode assist (its 1x1 convs
on 10x10 maps: 0.6 -> 20 ms each; the model 2x slower).

Which output axis the vectors run along follows the operands' layout (`matmul`): along
n when B's rows are contiguous, along m when A is transposed (the block is written
transposed), along k (dot products, summed across lanes at the end) when both operands
are contiguous in k (A @ B^T, Gemm's transB). Edges: rows past the end are clamped
(computed twice, stored once), and the last column block is shifted left to end at the
last column (it stores only the columns no other block stores), so every load is a
plain in-bounds vector load.
"""

from __future__ import annotations

import numpy as np

from palimpsest.backends.opencl.kernels.base import (
    DeviceLimits, Launch, Unsupported, bind, broadcast_index, generator, literal, params, ref,
)
from palimpsest.backends.opencl.kernels.elementwise import fused_epilogue


def _core_count(call) -> int:
    """How many ins are the kernel's own (the rest are its epilogue's)."""
    return len(call.ins) - (call.config.get("epilogue_ins") or 0)

LANES = {"float": 16, "double": 8}   # one 512-bit register
ROWS = 8                            # rows x vectors accumulators per work-item, up to 24 of
VECTORS = {3: 1.15, 2: 1.0, 1: 0.8}  # the 32 registers; vectors -> measured relative speed
                                    # (8 x 2 beat 16 x 1 by 10-40%, 8 x 3 beat 8 x 2 by 5-25%)
DOT_BLOCK = 16                      # outputs per work-item in the k-vector (dot) form


def _vtype(t: str, lanes: int) -> str:
    return t if lanes == 1 else f"{t}{lanes}"


def _vload(lanes: int, pointer: str) -> str:
    return f"({pointer})[0]" if lanes == 1 else f"vload{lanes}(0, {pointer})"


def _lane(value: str, lanes: int, i: int) -> str:
    return value if lanes == 1 else f"{value}.s{i:x}"


def _hsum(value: str, lanes: int) -> str:
    """The sum of a vector's lanes, halving the width each step."""
    while lanes > 1:
        value = f"({value}).lo + ({value}).hi" if lanes > 2 else f"({value}).x + ({value}).y"
        lanes //= 2
    return f"({value})"


def _pow2_at_most(value: int, cap: int) -> int:
    lanes = 1
    while lanes * 2 <= min(value, cap):
        lanes *= 2
    return lanes


def _local_size(global_size, items: int, device: DeviceLimits) -> tuple:
    """Up to `items` work-items per work-group, filling dim 0 first, each dim a divisor of
    the global size, within the device's group and per-dimension limits (an NVIDIA GPU
    takes 64 along dim 2). PoCL runs a work-group's items as one loop, so grouping the
    small items of im2col and depthwise saves its per-work-group dispatch (3-18x on
    im2col)."""
    items = min(items, device.max_work_group_size)
    dims = device.max_work_item_sizes
    local = []
    for index, size in enumerate(global_size):
        room = max(1, items // max(1, int(np.prod(local, dtype=np.int64))))
        room = min(room, dims[index] if index < len(dims) else 1)
        local.append(max(d for d in range(1, min(size, room) + 1) if size % d == 0))
    return tuple(local)


def _index_type(*args) -> str:
    """int indices while every buffer fits 2^31 elements (cheaper address arithmetic)."""
    return "int" if max(a.size for a in args) < 2 ** 31 else "long"


class Operand:
    """A matrix inside a buffer: element (i, j) at `offset + i * s0 + j * s1`, where
    `offset` is a C expression of the batch index `z` and the `image` argument. A
    `panel`-wide operand (GEMM's Q only) is packed in column panels instead: element
    (i, j) at `offset + (j / panel) * panel_size + i * panel + j % panel`, so a work-item's
    column block reads one contiguous stream (see `_im2col`). A `runs` = (pitch, run)
    operand (GEMM's Y only) holds column j at `(j / pitch) * run + j % pitch`, and only
    the columns with j % pitch < run: an output image whose rows are computed `pitch`
    apart, the columns between them dropped (see `_flat`)."""

    def __init__(self, name: str, offset: str, s0: int, s1: int, panel: int | None = None,
                 panel_size: int = 0, taps: tuple = (), runs: tuple | None = None):
        self.name, self.offset, self.s0, self.s1 = name, offset, s0, s1
        self.panel, self.panel_size = panel, panel_size
        self.taps = taps   # per tap axis, the offsets of its taps: see `Gemm.vector_source`
        self.runs = runs


class Gemm:
    """Y[r, c] = alpha * sum_k P[r, k] * Q[k, c] + beta * C[r, c] over `batch` matrices
    (P, Q, Y, C are `Operand`s; `buffers` the kernel's buffers, in argument order)."""

    def __init__(self, t, rows, cols, depth, batch, p, q, y, c=None, alpha=1.0, beta=1.0,
                 buffers=(), ix="int", epilogue=None, lanes_in=None):
        self.t, self.rows, self.cols, self.depth, self.batch = t, rows, cols, depth, batch
        self.p, self.q, self.y, self.c = p, q, y, c
        self.alpha, self.beta, self.buffers, self.ix = alpha, beta, list(buffers), ix
        self.epilogue = epilogue   # a FusedEpilogue (elementwise.py) applied as Y is stored
        # where a block's vector of Y's columns lies in the out, for its epilogue's loads
        # (FusedEpilogue.apply_lanes): "row", one row of the out's last dim (a matmul's
        # Y rows are the out's rows), so an in of that dim is one vload; "plane", one
        # (image, channel) plane (a conv's Y rows are channels, its columns pixels), so
        # an in broadcast over the spatial dims is one scalar; None: each lane's own
        # index, the ins gathered lane by lane, a division or two a lane (a classifier's
        # bias over 6906 columns took half as long again as its product)
        self.lanes_in = lanes_in
        if epilogue is not None:
            self.buffers += epilogue.buffers

    def _head(self, name: str) -> str:
        return (f"__kernel void {name}({params(*self.buffers)}, const int image) "
                f"{{\n{bind(*self.buffers)}\n  const {self.ix} z = get_global_id(2);\n")

    def _program(self, lines: list) -> str:
        """The kernel's source, after the epilogue functions its stores call."""
        functions = self.epilogue.source() if self.epilogue is not None else ""
        return functions + "".join(lines)

    def _args(self, args: list) -> list:
        """The launch's arguments: the caller's buffers, the epilogue's, then `image`."""
        if self.epilogue is None:
            return list(args)
        return list(args[:-1]) + self.epilogue.args + [args[-1]]

    def _finish(self, value: str, row: str, col: str, c_loader) -> str:
        """`value` (a block row) with alpha and beta * C applied."""
        t = self.t
        if self.alpha != 1.0:
            value = f"{literal(self.alpha, t)} * {value}"
        if self.c is not None and self.beta != 0.0:
            addend = c_loader(row, col)
            if self.beta != 1.0:
                addend = f"{literal(self.beta, t)} * {addend}"
            value = f"{value} + {addend}"
        return value

    # -- vectors along the output's columns ---------------------------------------------------
    def vector_source(self, rows_per_item: int, lanes: int, vectors: int) -> str:
        """Each work-item: `rows_per_item` rows x `vectors` vectors of `lanes` columns."""
        t, ix, R, W, V = self.t, self.ix, rows_per_item, lanes, vectors
        vt = _vtype(t, W)
        width = V * W
        p, q, y, c = self.p, self.q, self.y, self.c
        lines = [self._head("gemm")]
        # row blocks first: neighbouring work-groups share Q's column strip (in L1/L2),
        # 1.1-1.6x over column blocks first on the conv shapes
        lines.append(f"  const {ix} row0 = get_global_id(0) * {R};\n"
                     f"  const {ix} block = get_global_id(1) * {width};\n")
        # the last block ends at the last column: vector loads never leave the matrix (a
        # packed Q is whole panels, one a block)
        packed = q.panel is not None
        assert not packed or (q.panel == width and self.cols % width == 0), (q.panel, width)
        shifted = self.cols % width != 0
        col0 = f"min(block, ({ix}){self.cols - width})" if shifted else "block"
        lines.append(f"  const {ix} col0 = {col0};\n")
        for i in range(R):
            row = f"min(row0 + {i}, ({ix}){self.rows - 1})" if self.rows % R else f"row0 + {i}"
            lines.append(f"  const {ix} r{i} = {row};\n"
                         f"  __global const {t}* p{i} = {p.name} + ({p.offset}) + r{i} * {p.s0};\n")
            lines += [f"  {vt} acc{i}_{v} = 0;\n" for v in range(V)]
        start = f"(block / {width}) * {q.panel_size}" if packed else f"col0 * {q.s1}"
        lines.append(f"  __global const {t}* qk = {q.name} + ({q.offset}) + {start};\n")
        # Q's row k at qk + k * s0; with `taps` (per tap axis, its taps' offsets), k is an
        # outer index and one index per tap axis, row (k0, t...) at qk + k0 * s0 +
        # sum(taps[axis][t]): an implicit im2col, the taps unrolled
        offsets = [0]
        for axis in q.taps:
            offsets = [o + offset for o in offsets for offset in axis]
        per = len(offsets)
        lines.append(f"  for ({ix} k0 = 0; k0 < {self.depth // per}; ++k0) {{\n"
                     f"    __global const {t}* qr = qk + k0 * {q.s0};\n")
        for tap, offset in enumerate(offsets):
            k = f"k0 * {per} + {tap}" if per > 1 else "k0"
            for v in range(V):
                if q.s1 == 1:
                    load = _vload(W, f"qr + {offset + v * W}")
                else:  # a strided row of Q: gathered lane by lane
                    load = f"({vt})(" + ", ".join(f"qr[{offset + (v * W + j) * q.s1}]"
                                                  for j in range(W)) + ")"
                lines.append(f"    const {vt} b{tap}_{v} = {load};\n")
            for i in range(R):
                lines.append(f"    {{ const {vt} a = ({vt})(p{i}[({k}) * {p.s1}]);" +
                             "".join(f" acc{i}_{v} = fma(a, b{tap}_{v}, acc{i}_{v});"
                                     for v in range(V)) + " }\n")
        lines.append("  }\n")

        def load_c(row, col):
            base = f"{c.name}[({c.offset}) + {row} * {c.s0}"
            if c.s1 == 0 or W == 1:
                return f"({vt})({base} + {col} * {c.s1}])"
            if c.s1 == 1:
                return _vload(W, f"{c.name} + ({c.offset}) + {row} * {c.s0} + {col}")
            return f"({vt})(" + ", ".join(f"{base} + ({col} + {j}) * {c.s1}]"
                                           for j in range(W)) + ")"

        for i in range(R):
            lines.append(f"  if (row0 + {i} < {self.rows}) {{\n"
                         f"    __global {t}* yr = {y.name} + ({y.offset}) + r{i} * {y.s0};\n")
            for v in range(V):
                col = f"col0 + {v * W}"
                value = self._finish(f"acc{i}_{v}", f"r{i}", f"({col})", load_c)
                if y.runs is not None:
                    lines.append(self._runs_store(f"v{v}", W, value, col, f"r{i}", shifted))
                    continue
                lane_stores = " ".join(
                    ("" if not shifted else f"if ({col} + {j} >= block) ") +
                    f"yr[({col} + {j}) * {y.s1}] = {_lane(f'v{v}', W, j)};" for j in range(W))
                lines.append(f"    {{ {'' if self.epilogue else 'const '}{vt} v{v} = {value};\n")
                if self.epilogue is not None:
                    index = f"({y.offset}) + r{i} * {y.s0} + ({col}) * {y.s1}"
                    apply = self.epilogue.apply_lanes(
                        f"v{v}", W, index, y.s1, in_row=self.lanes_in == "row" and y.s1 == 1,
                        in_plane=self.lanes_in is not None and y.s1 == 1)
                    lines.append(f"      {apply}\n")
                if y.s1 == 1 and W > 1:
                    full = f"vstore{W}(v{v}, 0, yr + {col});"
                    lines.append(f"      if (col0 == block) {full} else {{ {lane_stores} }}\n"
                                 if shifted else f"      {full}\n")
                else:
                    lines.append(f"      {lane_stores}\n")
                lines.append("    }\n")
            lines.append("  }\n")
        lines.append("}\n")
        return self._program(lines)

    def _runs_store(self, var: str, W: int, value: str, col: str, row: str,
                    shifted: bool) -> str:
        """The store of a block vector `var` = `value` from column `col` of row `row` into
        a `runs` Y (`Operand`): one vector store where its columns lie in one run, else
        lane by lane in a loop, the columns between runs dropped (and with `shifted`, the
        columns before `block`, which the block before stores). An epilogue without ins
        is applied once before the branch; one with ins in each branch, reading its ins
        at each lane's element (one copy of its code in each: the loop and the single
        epilogue keep the kernel small, which PoCL compiles in proportion)."""
        t, ix, y = self.t, self.ix, self.y
        vt = _vtype(t, W)
        pitch, run = y.runs
        whole = "" if not shifted else " && col0 == block"
        base = f"({y.offset}) + {row} * {y.s0}"
        epilogue, ins = self.epilogue, self.epilogue is not None and self.epilogue.buffers
        lines = [f"    {{ {vt} {var} = {value};\n"
                 f"      const {ix} j = {col}, oh = j / {pitch}, ow = j - oh * {pitch};\n"]
        fast = f"vstore{W}({var}, 0, yr + oh * {run} + ow);"
        if epilogue is not None:
            apply = epilogue.apply_lanes(var, W, f"{base} + oh * {run} + ow", 1,
                                         in_plane=self.lanes_in is not None)
            if ins:
                fast = f"{apply} {fast}"
            else:   # the lanes' indices unused
                lines.append(f"      {apply}\n")
        lines.append(f"      if (ow + {W} <= {run}{whole}) {{ {fast} }} else {{\n")
        if ins:
            lanes = ", ".join(str(j) for j in range(W))
            it = f"int{W}"
            lines.append(f"        const {it} jl = ({it})((int)j) + ({it})({lanes});\n"
                         f"        const {it} ohl = jl / {pitch};\n"
                         f"        const {it} at = ohl * {run} + min(jl - ohl * {pitch}, "
                         f"{run - 1});\n"
                         f"        {epilogue.apply_at(var, W, base, 'at')}\n")
        keep = " && l >= block" if shifted else ""
        lines.append(f"        {t} lane[{W}]; vstore{W}({var}, 0, lane);\n"
                     f"        for ({ix} l = j; l < j + {W}; ++l) {{\n"
                     f"          const {ix} lh = l / {pitch}, lw = l - lh * {pitch};\n"
                     f"          if (lw < {run}{keep}) yr[lh * {run} + lw] = lane[l - j];\n"
                     f"        }}\n      }}\n    }}\n")
        return "".join(lines)

    def vector_launch(self, args, shape: tuple | None = None) -> Launch:
        """`shape`: the (lanes, vectors) of a block (a packed Q's panel), else
        `vector_shape`'s."""
        lanes, vectors = shape or vector_shape(self.t, self.cols)
        rows = min(ROWS, self.rows)
        source = self.vector_source(rows, lanes, vectors)
        blocks = -(-self.cols // (lanes * vectors))
        return Launch(source, "gemm", (-(-self.rows // rows), blocks, self.batch), (1, 1, 1),
                      self._args(args), flush_denormals=True)

    # -- vectors along k (dot products) ---------------------------------------------------------
    def dot_source(self, rows_per_item: int, cols_per_item: int, lanes: int) -> str:
        """P (row, k) and Q (col, k), both contiguous along k: `s0` is the row / col
        stride."""
        t, ix, R, C, W = self.t, self.ix, rows_per_item, cols_per_item, lanes
        vt = _vtype(t, W)
        p, q, y, c = self.p, self.q, self.y, self.c
        # the smaller operand's blocks are the fastest grid axis: its rows are read again
        # for each block of the other's, from cache, where the other streams once
        # (captcha_ocr's 20 x 1024 x 8210 classifier, 33 MB of weights: 6.7 -> 3.5 ms)
        rows_first = self.rows <= self.cols
        lines = [self._head("gemm_dot"),
                 f"  const {ix} row0 = get_global_id({0 if rows_first else 1}) * {R};\n"
                 f"  const {ix} col0 = get_global_id({1 if rows_first else 0}) * {C};\n"]
        for i in range(R):
            lines.append(f"  const {ix} r{i} = min(row0 + {i}, ({ix}){self.rows - 1});\n"
                         f"  __global const {t}* p{i} = {p.name} + ({p.offset}) + r{i} * {p.s0};\n")
        for j in range(C):
            lines.append(f"  const {ix} c{j} = min(col0 + {j}, ({ix}){self.cols - 1});\n"
                         f"  __global const {t}* q{j} = {q.name} + ({q.offset}) + c{j} * {q.s0};\n")
        body = "".join(f"  {vt} acc{i}_{j} = 0;\n" for i in range(R) for j in range(C))
        lines.append(body)
        whole = self.depth // W * W
        lines.append(f"  for ({ix} k = 0; k < {whole}; k += {W}) {{\n")
        lines += [f"    const {vt} a{i} = {_vload(W, f'p{i} + k')};\n" for i in range(R)]
        lines += [f"    const {vt} b{j} = {_vload(W, f'q{j} + k')};\n" for j in range(C)]
        lines += [f"    acc{i}_{j} = fma(a{i}, b{j}, acc{i}_{j});\n"
                  for i in range(R) for j in range(C)]
        lines.append("  }\n")
        for i in range(R):
            for j in range(C):
                lines.append(f"  {t} s{i}_{j} = {_hsum(f'acc{i}_{j}', W)};\n")
                if whole < self.depth:
                    lines.append(f"  for ({ix} k = {whole}; k < {self.depth}; ++k) "
                                 f"s{i}_{j} = fma(p{i}[k], q{j}[k], s{i}_{j});\n")

        def load_c(row, col):
            return f"{c.name}[({c.offset}) + {row} * {c.s0} + {col} * {c.s1}]"

        for i in range(R):
            for j in range(C):
                value = self._finish(f"s{i}_{j}", f"r{i}", f"c{j}", load_c)
                index = f"({y.offset}) + r{i} * {y.s0} + c{j} * {y.s1}"
                if self.epilogue is not None:
                    value = self.epilogue.apply(value, index)
                lines.append(f"  if (row0 + {i} < {self.rows} && col0 + {j} < {self.cols}) "
                             f"{y.name}[{index}] = {value};\n")
        lines.append("}\n")
        return self._program(lines)

    def dot_launch(self, args) -> Launch:
        lanes = LANES[self.t]
        rows = min(4, self.rows)
        cols = min(DOT_BLOCK // rows, self.cols)
        source = self.dot_source(rows, cols, lanes)
        blocks = (-(-self.rows // rows), -(-self.cols // cols))
        if self.rows > self.cols:   # (dot_source's grid order)
            blocks = blocks[::-1]
        return Launch(source, "gemm_dot", blocks + (self.batch,), (1, 1, 1),
                      self._args(args), flush_denormals=True)


def vector_shape(t: str, cols: int) -> tuple:
    """(lanes, vectors) of a work-item's column block for `cols` columns: the fewest
    columns computed, weighed by how fast each width runs them."""
    lanes = _pow2_at_most(cols, LANES[t])
    vectors = min((v for v in VECTORS if cols >= v * lanes),
                  key=lambda v: -(-cols // (v * lanes)) * v / VECTORS[v])
    return lanes, vectors


def _float_type(arg) -> str:
    t = arg.ctype
    if t not in LANES:
        raise Unsupported(f"the OpenCL matmul and conv kernels compute f32 and f64, not "
                          f"{arg.dtype}")
    return t


# -- matmul -----------------------------------------------------------------------------------

def _batch_offset(out_batch, in_batch, matrix_size: int) -> str:
    """The element offset of batch `z`'s matrix in an operand whose batch dims
    numpy-broadcast to `out_batch`."""
    if matrix_size == 0 or all(d == 1 for d in in_batch):
        return "0"
    return f"({broadcast_index(out_batch, in_batch, 'z')}) * {matrix_size}"


# Where the device is the host's CPU (PoCL), a float product whose B has this many
# elements or more (past L2: it streams from memory) runs on the host's oneDNN GEMM,
# unless it takes the dot form, whose grid streams B once: the vector form took 7.7 ms
# on 20 x 1024 x 8210 (33 MB of weights, B as k x n) where oneDNN took 5.7; the dot
# form (B as n x k, captcha_ocr's classifier) takes 3.5
HOST_WEIGHTS = 1 << 22


def _host_gemm() -> bool:
    from palimpsest.backends import onednn

    return onednn.float_gemm_available()


@generator("kernel.matmul")
def matmul(call) -> list:
    config = call.config
    a, b, out = call.ins[0], call.ins[1], call.outs[0]
    t = _float_type(out)
    if out.size == 0:
        return []
    # 1-D operands as numpy promotes them; op(A) is m x k, op(B) k x n
    a_shape = (1,) + tuple(a.shape) if len(a.shape) == 1 else tuple(a.shape)
    b_shape = tuple(b.shape) + (1,) if len(b.shape) == 1 else tuple(b.shape)
    m = a_shape[-1] if config["transA"] else a_shape[-2]
    k = a_shape[-2] if config["transA"] else a_shape[-1]
    n = b_shape[-2] if config["transB"] else b_shape[-1]
    batch_shape = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    batch = int(np.prod(batch_shape, dtype=np.int64))
    # element strides of op(A) as (m, k) and of op(B) as (k, n) in their buffers
    a_s = (1, m) if config["transA"] else (k, 1)
    b_s = (1, k) if config["transB"] else (n, 1)
    lanes = LANES[t]
    along_n = b_s[1] == 1 and n >= lanes
    along_m = a_s[0] == 1 and m >= lanes
    dots = a_s[1] == 1 and b_s[0] == 1 and k >= lanes
    dot_form = not (along_n or along_m) and dots
    if call.device.host_cpu and t == "float" and k * n >= HOST_WEIGHTS and batch == 1 \
            and not dot_form and _host_gemm():
        raise Unsupported(f"{m} x {k} x {n} on a CPU device, {k * n} weights (the host's "
                          f"oneDNN GEMM streams them faster)")
    a_off = _batch_offset(batch_shape, a_shape[:-2], m * k)
    b_off = _batch_offset(batch_shape, b_shape[:-2], k * n)
    y = Operand("y", f"z * {m * n}" if batch > 1 else "0", n, 1)
    buffers = [("a", t, False), ("b", t, False)]
    args = [ref("in", 0), ref("in", 1)]
    c = None
    if _core_count(call) > 2 and config["beta"] != 0.0:
        c_shape = _full_c_shape(call.ins[2].shape, out.shape, len(a.shape) == 1,
                                len(b.shape) == 1)
        c_rows, c_cols = c_shape[-2:]
        c = Operand("c", _batch_offset(batch_shape, c_shape[:-2], c_rows * c_cols),
                    c_cols if c_rows != 1 else 0, 1 if c_cols != 1 else 0)
        buffers.append(("c", t, False))
        args.append(ref("in", 2))
    buffers.append(("y", t, True))
    args += [ref("out", 0), np.int32(0)]
    common = dict(alpha=config["alpha"], beta=config["beta"], buffers=buffers,
                  ix=_index_type(*call.ins, out), epilogue=fused_epilogue(call))
    if along_n or not (along_m or dots):
        # vectors along n: rows of B (gathered when B is transposed and nothing is better)
        return [Gemm(t, m, n, k, batch, Operand("a", a_off, *a_s), Operand("b", b_off, *b_s),
                     y, c, lanes_in="row", **common).vector_launch(args)]
    if along_m:
        # vectors along m: columns of a transposed A; the block is Y's transpose
        flip = lambda o: o and Operand(o.name, o.offset, o.s1, o.s0)  # noqa: E731
        return [Gemm(t, n, m, k, batch, Operand("b", b_off, b_s[1], b_s[0]),
                     Operand("a", a_off, a_s[1], a_s[0]), flip(y), flip(c),
                     **common).vector_launch(args)]
    return [Gemm(t, m, n, k, batch, Operand("a", a_off, *a_s),
                 Operand("b", b_off, b_s[1], b_s[0]), y, c, **common).dot_launch(args)]


def _full_c_shape(c_shape, y_shape, a_vector: bool, b_vector: bool) -> tuple:
    """C's shape aligned to the product's (batch..., m, n): padded to Y's rank, with the
    dims that a 1-D A or B dropped from Y put back as 1s."""
    c_shape = (1,) * (len(y_shape) - len(c_shape)) + tuple(c_shape)
    if a_vector:
        at = len(c_shape) if b_vector else len(c_shape) - 1
        c_shape = c_shape[:at] + (1,) + c_shape[at:]
    if b_vector:
        c_shape = c_shape + (1,)
    return c_shape
