"""onnxruntime's dynamic quantization ops in OpenCL: `graph.dynamic_quantize_linear` and
`graph.matmul_integer_to_float` (com.microsoft MatMulIntegerToFloat), as the numpy
backend computes them (backends/numpy/kernels_quant.py), so that a quantized model's
activations stay on the device between its int8 products (they read back and wrote
each one on the host before).

DynamicQuantizeLinear is one work-group, each work-item a contiguous range of X: X's
range (min(0, min x), max(0, max x)), its float32 scale and zero point (recurrent.py's
`quantization`), then y = saturate(rint(x / scale) + zero).

MatMulIntegerToFloat: a work-item computes ROWS rows of 16 output columns, the integer
products exact (float32 sums over CHUNK rows of K, integers below 2**24, added as ints;
A's zero point subtracted from A as it is read, B's as z_j times the row's sum), then
float(product) * (a_scale * b_scale) + bias, rounded as the numpy kernel rounds them.
B is 2-D (a constant weight), the scales and bias per tensor or per column, A's zero
point per tensor; else the host (Unsupported). The last N % 16 columns (where N is not a
multiple of 16) are a second launch, a work-item a column.
"""

from __future__ import annotations

import numpy as np

from palimpsest.backends.opencl.kernels.base import (
    C_TYPES, VNNI, KernelCall, Launch, Unsupported, bind, derived, generator, params, ref)
from palimpsest.backends.opencl.kernels.recurrent import CHUNK, QUANTIZATION, vnni_packed

# output rows a work-item computes (B's 16-column row read once for them)
ROWS = 4
# Where the device is the host's CPU (PoCL), products of more multiply-adds than this run
# on the host: numpy's kept float copy of B and its BLAS do ~50 G multiply-adds a second
# there, this kernel ~18 (captcha_ocr_int8's 40 x 1024 x 8210: 6.8 ms against 18.5; its
# run on PoCL 44.1 -> 31.0 ms, t5_encoder_int8's 100.7 -> 72.7); transfers cost more
# than that gain on smaller ones
HOST_PRODUCT = 1 << 20
# rows a work-item of the VNNI product computes (B's packed vector read once for them)
VNNI_ROWS = 8
# whether a device with the 8-bit dot product (DeviceLimits.vnni) takes the VNNI form
# (tests turn it off). Past HOST_PRODUCT the host still takes the product: its oneDNN
# (AMX, or VNNI on packed B) beat it (t5_encoder_int8's 128 x 512 x 2048: the model's
# OpenCL run 16.6 -> 22.8 ms on the VNNI form)
USE_VNNI = True
# work-items of DynamicQuantizeLinear's one work-group (at most)
_GROUP = 256


def _byte(arg, what: str) -> str:
    if arg.dtype not in (np.dtype(np.int8), np.dtype(np.uint8)):
        raise Unsupported(f"{what} of {arg.dtype} (8-bit only)")
    return C_TYPES[arg.dtype]


@generator("graph.dynamic_quantize_linear")
def dynamic_quantize_linear(call: KernelCall) -> list:
    (x,), outs = call.ins, call.outs
    if x is None or x.dtype != np.float32 or not 1 <= len(outs) <= 3 \
            or outs[0].shape != x.shape or outs[0].dtype != np.uint8 \
            or any(o.size != 1 for o in outs[1:]):
        raise Unsupported("float32 X and its uint8 Y")
    items = max(1, min(_GROUP, call.device.max_work_group_size,
                       call.device.max_work_item_sizes[0]))
    names = ["y", "y_scale", "y_zero"][:len(outs)]
    buffers = [("x", "float", False), ("y", "uchar", True)] + [
        (name, "float" if name == "y_scale" else "uchar", True) for name in names[1:]]
    source = f"""
#define LS {items}
#define N {x.size}
{QUANTIZATION}
__kernel __attribute__((reqd_work_group_size(LS, 1, 1)))
void dynamic_quantize_linear({params(*buffers)}) {{
{bind(*buffers)}
  const int lid = get_local_id(0);
  __local float lows[LS];
  __local float highs[LS];
  __local float q[4];
  // each work-item a contiguous range, 16 elements a load (PoCL runs the items of a
  // group one after the other: strided ranges would read a cache line per element)
  const long per = ((N + LS - 1) / LS + 15) / 16 * 16;
  const long begin = min((long)lid * per, (long)N), end = min(begin + per, (long)N);
  float16 low = (float16)(0.0f), high = (float16)(0.0f);
  long e = begin;
  for (; e + 16 <= end; e += 16) {{
    const float16 v = vload16(0, x + e);
    low = fmin(low, v); high = fmax(high, v);
  }}
  float lo = 0.0f, hi = 0.0f;
  for (; e < end; ++e) {{ lo = fmin(lo, x[e]); hi = fmax(hi, x[e]); }}
  lo = fmin(lo, fmin(fmin(fmin(low.s0, low.s1), fmin(low.s2, low.s3)),
                     fmin(fmin(low.s4, low.s5), fmin(low.s6, low.s7))));
  lo = fmin(lo, fmin(fmin(fmin(low.s8, low.s9), fmin(low.sa, low.sb)),
                     fmin(fmin(low.sc, low.sd), fmin(low.se, low.sf))));
  hi = fmax(hi, fmax(fmax(fmax(high.s0, high.s1), fmax(high.s2, high.s3)),
                     fmax(fmax(high.s4, high.s5), fmax(high.s6, high.s7))));
  hi = fmax(hi, fmax(fmax(fmax(high.s8, high.s9), fmax(high.sa, high.sb)),
                     fmax(fmax(high.sc, high.sd), fmax(high.se, high.sf))));
  lows[lid] = lo; highs[lid] = hi;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) {{
    for (int k = 1; k < LS; ++k) {{ lo = fmin(lo, lows[k]); hi = fmax(hi, highs[k]); }}
    quantization(lo, hi, q);
    {"y_scale[0] = q[2];" if "y_scale" in names else ""}
    {"y_zero[0] = (uchar)(255.0f - q[1]);" if "y_zero" in names else ""}
  }}
  barrier(CLK_LOCAL_MEM_FENCE);
  const float divisor = q[0], top = q[1], zero = 255.0f - q[1];
  // rint(x / scale) >= -zero (x >= min(0, min x)): only the top saturates
  for (e = begin; e + 16 <= end; e += 16)
    vstore16(convert_uchar16_sat(fmin(rint(vload16(0, x + e) / divisor), top) + zero), 0, y + e);
  for (; e < end; ++e) y[e] = convert_uchar_sat(fmin(rint(x[e] / divisor), top) + zero);
}}
"""
    args = [ref("in", 0)] + [ref("out", index) for index in range(len(outs))]
    return [Launch(source, "dynamic_quantize_linear", (items,), (items,), args)]


def _per_column(arg, columns: int, what: str) -> bool:
    """Whether `arg` (per tensor: one element, or per output column) is per column."""
    if arg.size == 1:
        return False
    if arg.size == columns and all(d == 1 for d in arg.shape[:-1]):
        return True
    raise Unsupported(f"{what} of shape {list(arg.shape)} (per tensor or per column)")


@generator("graph.matmul_integer_to_float")
def matmul_integer_to_float(call: KernelCall) -> list:
    a, b, a_scale, b_scale, a_zero, b_zero, bias = (list(call.ins) + [None] * 3)[:7]
    (out,) = call.outs
    a_type, b_type = _byte(a, "A"), _byte(b, "B")
    if len(b.shape) != 2 or len(a.shape) < 2 or a.shape[-1] != b.shape[0] \
            or out.dtype != np.float32 or out.shape != tuple(a.shape[:-1]) + (b.shape[1],):
        raise Unsupported(f"A {list(a.shape)} by a 2-D B {list(b.shape)}")
    depth, columns = b.shape
    rows = int(np.prod(a.shape[:-1]))
    if not rows or not columns:
        raise Unsupported("no rows or no columns")
    if call.device.host_cpu and rows * depth * columns > HOST_PRODUCT:
        raise Unsupported(f"{rows} x {depth} x {columns} multiply-adds on a CPU device "
                          f"(the host's BLAS is faster)")
    vnni = (USE_VNNI and b.dtype == np.int8 and depth % 4 == 0 and columns >= 16
            and call.device.vnni)   # (last: the device's probe, at its first use)
    if any(v is not None and v.dtype != np.float32 for v in (a_scale, b_scale, bias)) \
            or a_scale.size != 1 or (a_zero is not None and (a_zero.size != 1
                                                            or a_zero.dtype != a.dtype)) \
            or (b_zero is not None and b_zero.dtype != b.dtype):
        raise Unsupported("scales, bias or zero points")
    per = {name: _per_column(arg, columns, name) for name, arg in
           (("b_scale", b_scale), ("b_zero", b_zero), ("bias", bias)) if arg is not None}
    buffers = [("a", a_type, False), ("b", b_type, False), ("a_scale", "float", False),
               ("b_scale", "float", False)] + [
        (name, ctype, False) for name, ctype, arg in (("a_zero", a_type, a_zero),
                                                       ("b_zero", b_type, b_zero),
                                                       ("bias", "float", bias))
        if arg is not None] + [("y", "float", True)]

    args = [ref("in", 0), ref("in", 1), ref("in", 2), ref("in", 3)] + [
        ref("in", index) for index, arg in ((4, a_zero), (5, b_zero), (6, bias))
        if arg is not None] + [ref("out", 0)]
    blocks, tail = -(-rows // ROWS), columns % 16
    if vnni:
        launches = [Launch(_vnni_product_source(rows, depth, columns, buffers, per, a,
                                                a_zero, b_zero, bias),
                           "matmul_integer_to_float", (-(-rows // VNNI_ROWS), columns // 16),
                           None, args + [ref("derived", ("vnni_b", 1))])]
    else:
        launches = [Launch(_product_source(16, 0, rows, depth, columns, buffers, per, a_zero,
                                           b_zero, bias), "matmul_integer_to_float",
                           (blocks, columns // 16), None, args)] if columns >= 16 else []
    if tail:    # the last N % 16 columns, a work-item a column
        launches.append(Launch(_product_source(1, columns - tail, rows, depth, columns,
                                               buffers, per, a_zero, b_zero, bias),
                               "matmul_integer_to_float", (blocks, tail), None, args))
    return launches


@derived("vnni_b")
def vnni_b(b):
    """A 2-D int8 B (K x N, K a multiple of 4) for the VNNI product: `vnni_packed`."""
    return vnni_packed(b[None], False)[0]


def _vnni_product_source(rows: int, depth: int, columns: int, buffers, per: dict, a,
                         a_zero, b_zero, bias) -> str:
    """The VNNI form (base.py `VNNI`): a work-item's VNNI_ROWS rows by 16 columns,
    A's rows read four bytes at a time (an int8 A plus 128: its bytes with the top bit
    flipped, its zero point plus 128) times B packed once (`vnni_b`); the centred
    product is the sum less A's zero point times the column's sum, and, with B's zero
    points, less them times the row's centred sum (the row's bytes summed by the same
    instruction against ones)."""
    block = range(VNNI_ROWS)
    flip = " ^ 0x80808080" if a.dtype == np.int8 else ""
    shift = 128 if a.dtype == np.int8 else 0
    zero = f"(int)a_zero[0] + {shift}" if a_zero is not None else str(shift)
    row_sums = b_zero is not None

    def column(name) -> str:
        return f"convert_float16(vload16(0, {name} + col))" if per[name] else \
            f"(float16)((float){name}[0])"

    return VNNI + f"""
#define M {rows}
#define K {depth}
#define N {columns}
PAL_VNNI void product_vnni(__global const uchar* a, const int r0, __global const int* packed,
                           const int col, int16* out, int16* sums) {{
  {" ".join(f"pal_v16si acc{i} = PAL_SPLAT(0);" for i in block)}
  {" ".join(f"pal_v16si sum{i} = PAL_SPLAT(0);" for i in block) if row_sums else ""}
  {" ".join(f"__global const uchar* a{i} = a + min(r0 + {i}, M - 1) * K;" for i in block)}
  for (int k4 = 0; k4 < K / 4; ++k4) {{
    const pal_v16si b = *(__global const pal_v16si_u*)(packed + k4 * N + col);
{chr(10).join(f"    const pal_v16si w{i} = PAL_SPLAT(as_int(vload4(k4, a{i})){flip});"
              for i in block)}
    {" ".join(f"acc{i} = __builtin_ia32_vpdpbusd512(acc{i}, w{i}, b);" for i in block)}
    {" ".join(f"sum{i} = __builtin_ia32_vpdpbusd512(sum{i}, w{i}, PAL_SPLAT(0x01010101));"
              for i in block) if row_sums else ""}
  }}
  {" ".join(f"out[{i}] = *(const int16*)&acc{i};" for i in block)}
  {" ".join(f"sums[{i}] = *(const int16*)&sum{i};" for i in block) if row_sums else ""}
}}
__kernel void matmul_integer_to_float({params(*buffers, ("b_packed", "int", False))}) {{
{bind(*buffers, ("b_packed", "int", False))}
  const int r0 = get_global_id(0) * {VNNI_ROWS};
  const int col = get_global_id(1) * 16;
  int16 products[{VNNI_ROWS}], sums[{VNNI_ROWS}];
  product_vnni((__global const uchar*)a, r0, b_packed, col, products, sums);
  const int za = {zero};
  const int16 column_term = za * vload16(0, b_packed + K / 4 * N + col);
  const float16 scale = a_scale[0] * {column("b_scale")};
  {f"const int16 zb = convert_int16({column('b_zero')});" if row_sums else ""}
  for (int i = 0; i < {VNNI_ROWS} && r0 + i < M; ++i) {{
    const int16 p = products[i] - column_term{" - zb * (sums[i] - K * za)" if row_sums else ""};
    vstore16(convert_float16(p) * scale{" + " + column("bias") if bias is not None else ""},
             0, y + (r0 + i) * N + col);
  }}
}}
"""


def _product_source(width: int, first: int, rows: int, depth: int, columns: int, buffers,
                    per: dict, a_zero, b_zero, bias) -> str:
    """The kernel whose work-items compute ROWS rows of `width` (16 or 1) output columns
    each, from column `first`."""
    floats, ints = ("float", "int") if width == 1 else (f"float{width}", f"int{width}")

    def load(pointer) -> str:
        return f"(float)({pointer})[0]" if width == 1 else \
            f"convert_float{width}(vload{width}(0, {pointer}))"

    def store(value, pointer) -> str:
        return f"({pointer})[0] = {value}" if width == 1 else \
            f"vstore{width}({value}, 0, {pointer})"

    def column(name) -> str:
        return load(f"{name} + col") if per[name] else f"({floats})((float){name}[0])"

    block = range(ROWS)
    return f"""
#define M {rows}
#define K {depth}
#define N {columns}
#define CHUNK {CHUNK}
__kernel void matmul_integer_to_float({params(*buffers)}) {{
{bind(*buffers)}
  const int r0 = get_global_id(0) * {ROWS};
  const int col = {first} + get_global_id(1) * {width};
  const float za = {"(float)a_zero[0]" if a_zero is not None else "0.0f"};
{chr(10).join(f"  const int r{i}_ = min(r0 + {i}, M - 1);" for i in block)}
  {" ".join(f"{ints} p{i} = ({ints})(0); float s{i} = 0.0f;" for i in block)}
  for (int k0 = 0; k0 < K; k0 += CHUNK) {{
    const int end = min(k0 + CHUNK, K);
    {" ".join(f"{floats} f{i} = ({floats})(0.0f);" for i in block)}
    for (int k = k0; k < end; ++k) {{
      const {floats} bk = {load("b + k * N + col")};
{chr(10).join(f"      const float a{i} = (float)a[r{i}_ * K + k] - za; f{i} += a{i} * bk; s{i} += a{i};" for i in block)}
    }}
    {" ".join(f"p{i} += convert_{ints}(f{i});" for i in block)}
  }}
  const {floats} scale = a_scale[0] * {column("b_scale")};
  {f"const {ints} zb = convert_{ints}({column('b_zero')});" if b_zero is not None else ""}
{chr(10).join(f"  if (r0 + {i} < M) {{ const {ints} p = p{i}{' - zb * (int)s' + str(i) if b_zero is not None else ''}; {store(f'convert_{floats}(p) * scale' + (' + ' + column('bias') if bias is not None else ''), f'y + (r0 + {i}) * N + col')}; }}" for i in block)}
}}
"""
