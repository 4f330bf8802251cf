"""com.microsoft DynamicQuantizeLSTM (`graph.dynamic_quantize_lstm`) in OpenCL: the
whole sequence in one launch, one work-group per direction.

onnxruntime's dynamic quantization writes every LSTM of a float model as this op: 8-bit
W and R, X quantized to uint8 over its range once, the hidden state over its own range
at every step. On the host (numpy) each step reads R as float32, four bytes a weight
(voicefilter-lite's 512 x 2048 R: 4 MiB a step, past a core's L2, ~190 us a step); here
a step reads it as it is stored, a byte a weight, and does not leave the device.

A work-group runs its direction's steps in order, its state in local memory:

1. X quantized over all of its range (rint(x / scale) + zero, saturated, less the zero
   point: DynamicQuantizeLinear's float32 arithmetic, as the numpy kernel computes it,
   backends/numpy/kernels_quant.py `_quantization`), and X W^T of every step at once
   (`project`: STEP_BLOCK steps a pass over W's rows, CPU_STEP_BLOCK on a CPU), scaled
   by X's scale times W's, plus W's bias and R's, kept in local memory;
2. a step: h quantized over its own range; each work-item's 16 x U gate columns of
   h R^T (`product_r`), scaled by h's scale times R's, added to the step's projection,
   into the gates; the gates (i, o, f, c) make c and h (sigmoid as
   0.5 (1 + tanh(x / 2))), h written to Y at its time.

Integer products are exact: float32 sums over CHUNK rows (integers below 2**24) added
as ints, a zero point z_j subtracted as z_j times the sum of the quantized row, as the
numpy kernel's centred weights give them. Measured on PoCL (one thread), voicefilter-
lite's 512-unit layers: 4.7 ms a layer of 50 steps (94 us a step), against ~13 ms on
numpy before its steps took oneDNN's products (2.2 ms now).

The VNNI form, on a CPU device with the 8-bit dot product (DeviceLimits.vnni, int8 W and
R, sizes a multiple of 4): the same steps with the products on vpdpbusd (base.py
`VNNI`), W and R packed once per constant in its order (`vnni_w`, `vnni_r`: the
executor's derived buffers), X and h as bytes: voicefilter-lite's layer 1.1 ms (15 us a
step), the host's 2.2.

What it leaves to the host (Unsupported): on a CPU device without the VNNI form, an R the
host multiplies on oneDNN (its 8-bit vector-matrix product, ~15 us a step for
voicefilter-lite's R, the operands mapped in place: `host_products`), a batch other
than 1 (a step's h range spans
the batch, which ties the batch entries together), sequence_lens, peepholes, clip,
input_forget, layout 1, activations other than the defaults, gate columns not a
multiple of 16, state that does not fit the device's local memory.
"""

from __future__ import annotations

import numpy as np

from palimpsest.backends.opencl.kernels.base import (
    VNNI, KernelCall, Launch, Unsupported, bind, derived, generator, params, ref)
from palimpsest.backends.opencl.kernels.lstm import (
    LSTM_CELL, cell_steps, directions, vectors_per_item)

# rows summed in float32 before the sum moves to an int: 256 products of at most
# 255 x 255 stay below 2**24, so each float sum is the exact integer
CHUNK = 256

# (slot, name) of the op's operands (ONNX order)
_SLOTS = ("x", "w", "r", "b", "lengths", "h0", "c0", "p", "w_scale", "w_zero", "r_scale",
          "r_zero")


# DynamicQuantizeLinear's float32 scale and zero point as OpenCL C (quant.py shares it)
QUANTIZATION = """// DynamicQuantizeLinear's scale and zero point over [min(0, lo), max(0, hi)]: q[0] the
// divisor (the scale, 1 when it is 0), q[1] 255 - the zero point, q[2] the scale
inline void quantization(float lo, float hi, __local float* q) {
  lo = fmin(lo, 0.0f); hi = fmax(hi, 0.0f);
  float scale = (hi - lo) / 255.0f;
  float zero = scale != 0.0f ? clamp(rint(0.0f - lo / scale), 0.0f, 255.0f) : 0.0f;
  q[0] = scale != 0.0f ? scale : 1.0f; q[1] = 255.0f - zero; q[2] = scale;
}
"""


def _checked(call: KernelCall) -> dict:
    """The op's operands by name (None when absent), after the checks of what runs on
    the device; Unsupported otherwise."""
    ins = dict(zip(_SLOTS, list(call.ins) + [None] * (len(_SLOTS) - len(call.ins))))
    config = call.config
    dirs, reverse_all = directions(config)
    if ins["lengths"] is not None or ins["p"] is not None:
        raise Unsupported("sequence_lens or peepholes")
    x, w, r = ins["x"], ins["w"], ins["r"]
    if any(v is None for v in (x, w, r, ins["w_scale"], ins["w_zero"], ins["r_scale"],
                               ins["r_zero"])):
        raise Unsupported("a required operand is missing")
    if x.dtype != np.float32 or len(x.shape) != 3 or x.shape[1] != 1:
        raise Unsupported(f"X {x.dtype} {list(x.shape)} (float32, batch 1)")
    steps, _, size = x.shape
    hidden = r.shape[1] if len(r.shape) == 3 else None
    gates = 4 * hidden if hidden else None
    if hidden is None or w.shape != (dirs, size, gates) or r.shape != (dirs, hidden, gates) \
            or any(v.dtype.kind not in "iu" or v.dtype.itemsize != 1 for v in (w, r)) \
            or int(config.get("hidden_size", hidden)) != hidden:
        raise Unsupported(f"W {list(w.shape)}, R {list(r.shape)} (8-bit, {dirs} directions)")
    for name, weight in (("w", w), ("r", r)):
        scale, zero = ins[f"{name}_scale"], ins[f"{name}_zero"]
        if scale.dtype != np.float32 or scale.size not in (dirs, dirs * gates) \
                or zero.dtype != weight.dtype or zero.size not in (dirs, dirs * gates):
            raise Unsupported(f"{name} scale {scale.dtype} {scale.size}, zero point "
                              f"{zero.dtype} {zero.size}")
    b = ins["b"]
    if b is not None and (b.dtype != np.float32 or b.shape != (dirs, 2 * gates)):
        raise Unsupported(f"B {b.dtype} {list(b.shape)}")
    for name in ("h0", "c0"):
        if ins[name] is not None and (ins[name].dtype != np.float32
                                      or ins[name].shape != (dirs, 1, hidden)):
            raise Unsupported(f"{name} {list(ins[name].shape)}")
    if gates % 16 or not steps:
        raise Unsupported(f"{gates} gate columns (a multiple of 16) or no steps")
    outs = list(call.outs)
    if not 1 <= len(outs) <= 3 or outs[0].shape != (steps, dirs, 1, hidden) \
            or any(o.shape != (dirs, 1, hidden) for o in outs[1:]) \
            or any(o.dtype != np.float32 for o in outs):
        raise Unsupported("outs")
    ins.update(dirs=dirs, reverse_all=reverse_all, steps=steps, size=size,
               hidden=hidden, gates=gates)
    return ins


def _product(ctype: str, u: int) -> str:
    """product_r(a, m, out): a work-item's U 16-column vectors of the exact integer sums
    over rows k < H of a[k] (centred integers, as floats) times m (rows G apart), into
    out[0..U): U independent sums a row, each row's a[k] read once."""
    vectors = range(u)
    zeros = " ".join(f"float16 f{v} = (float16)(0.0f);" for v in vectors)
    sums = " ".join(f"f{v} += ak * convert_float16(vload16({v}, row));" for v in vectors)
    return f"""
inline void product_r(__local const float* a, __global const {ctype}* m, int16* out) {{
  {" ".join(f"int16 a{v} = (int16)(0);" for v in vectors)}
  for (int k0 = 0; k0 < H; k0 += CHUNK) {{
    const int end = min(k0 + CHUNK, H);
    {zeros}
    for (int k = k0; k < end; ++k) {{
      const float ak = a[k];
      __global const {ctype}* row = m + k * G;
      {sums}
    }}
    {" ".join(f"a{v} += convert_int16(f{v});" for v in vectors)}
  }}
  {" ".join(f"out[{v}] = a{v};" for v in vectors)}
}}"""


# rows of R a work-item adds to its partial sums at once (`_product_rows`)
ROW_BLOCK = 4


def _product_rows(ctype: str) -> str:
    """product_rows(a, m, lid, part): the row-split form of a step's h R^T, for a CPU
    device: work-item `lid` sums its RPW rows of R (RPW <= CHUNK: its float sums stay
    exact integers) for every gate column, ROW_BLOCK whole rows at a time in order, into
    its row of `part` (LS x G, local); `gather_products` then adds the LS partial rows
    as ints. Whole rows read in order stream from memory; the column form reads a work-
    item's 16 x U columns of every row, a short piece of each 4 KiB page (the 768-unit
    R of voicefilter's embedder, 2.3 MiB past L2: a gemv 164 -> 113 us)."""
    block = range(ROW_BLOCK)
    return f"""
inline void product_rows(__local const float* a, __global const {ctype}* m, const int lid,
                         __local float* part) {{
  const int k0 = lid * RPW, k1 = min(k0 + RPW, H);
  __local float* acc = part + lid * G;
  for (int c = 0; c < G; c += 16) vstore16((float16)(0.0f), 0, acc + c);
  for (int k = k0; k < k1; k += {ROW_BLOCK}) {{   // (RPW is a multiple of ROW_BLOCK)
    {" ".join(f"const float a{i} = a[k + {i}];" for i in block)}
    {" ".join(f"__global const {ctype}* r{i} = m + (k + {i}) * G;" for i in block)}
    for (int c = 0; c < G; c += 16) {{
      float16 s = vload16(0, acc + c);
      {" ".join(f"s += a{i} * convert_float16(vload16(0, r{i} + c));" for i in block)}
      vstore16(s, 0, acc + c);
    }}
  }}
}}
// the U 16-column vectors of work-item lid's columns, the LS partial rows added as ints
inline void gather_products(__local const float* part, const int lid, int16* out) {{
  for (int v = 0; v < U; ++v) {{
    const int col = (lid * U + v) * 16;
    int16 total = (int16)(0);
    for (int w = 0; w < LS; ++w) total += convert_int16(vload16(0, part + w * G + col));
    out[v] = total;
  }}
}}"""


def _rows_per_item(hidden: int, gates: int, items: int, device) -> int | None:
    """RPW, the rows of R each work-item sums in the row-split product (`_product_rows`),
    on a CPU device where R is more than half a core's L2 (in cache the column form is
    3-6% faster: 512 units 55.0 against 56.5 us a step) and each work-item's float sums
    stay exact; else None (the column form)."""
    rows = -(-hidden // items)   # (4 U: items are 4H / 16U)
    big = hidden * gates > device.l2_bytes // 2
    fits = rows <= CHUNK and rows % ROW_BLOCK == 0 and hidden % rows == 0
    return rows if device.host_cpu and big and fits else None


def _columns_per_item(gates: int, limit: int, host_cpu: bool) -> int:
    """U: each work-item's 16-column vectors, the most of lstm.py's `vectors_per_item`
    that divides the gate columns within the work-item limit."""
    for u in vectors_per_item(host_cpu):
        if gates % (16 * u) == 0 and gates // (16 * u) <= limit:
            return u
    raise Unsupported(f"{gates} gate columns need more work-items than {limit}")


# steps whose X row products a work-item sums together (W's row read and converted once
# for them): on a CPU device 8, each 16 weights' conversion shared by twice the FMAs
# (voicefilter-lite's 50 x 512 x 2048 projection: a layer 4.03 -> 3.34 ms on PoCL)
STEP_BLOCK = 4
CPU_STEP_BLOCK = 8


def _projection(w_type: str, steps: int) -> str:
    """project(...): X W^T for every step into `proj` (T x G, local), a work-item's 16
    columns from `col` at a time, `steps` steps per pass over W's rows: the exact
    integer product less the zero point's, times X's scale times W's, plus W's bias,
    plus R's (the reference's order: added to the projection, not to each step)."""
    block = range(steps)
    rows = "\n".join(f"    const int s{i} = min(t0 + {i}, T - 1);" for i in block)
    zeros = " ".join(f"float16 f{i} = (float16)(0.0f);" for i in block)
    sums = "\n".join(f"        f{i} += xq[s{i} * I + k] * wv;" for i in block)
    adds = " ".join(f"a{i} += convert_int16(f{i});" for i in block)
    ints = " ".join(f"int16 a{i} = (int16)(0);" for i in block)
    stores = "\n".join(
        f"    if (t0 + {i} < T) vstore16((convert_float16(a{i} - zi * (int)xsums[s{i}]) * scale"
        f" + bias) + r_bias, 0, proj + s{i} * G + col);" for i in block)
    return f"""
inline void project(__local const float* xq, __local const float* xsums,
                    __global const {w_type}* m, const int col, const float16 zero,
                    const float16 scale, const float16 bias, const float16 r_bias,
                    __local float* proj) {{
  const int16 zi = convert_int16(zero);
  for (int t0 = 0; t0 < T; t0 += {steps}) {{
{rows}
    {ints}
    for (int k0 = 0; k0 < I; k0 += CHUNK) {{
      const int end = min(k0 + CHUNK, I);
      {zeros}
      for (int k = k0; k < end; ++k) {{
        const float16 wv = convert_float16(vload16(0, m + k * G));
{sums}
      }}
      {adds}
    }}
{stores}
  }}
}}"""


# steps whose X rows the VNNI projection multiplies by one packed W vector at once
VNNI_STEP_BLOCK = 8


def _vnni_helpers(u: int) -> str:
    """The VNNI form's functions (base.py `VNNI`) over the weights packed once
    (`vnni_w`, `vnni_r`): `project_vnni`, VNNI_STEP_BLOCK steps' X bytes (less 128, as
    int8) times W's packed vector (plus 128, as uint8: the broadcast operand is the
    signed one, read straight from memory) and `product_vnni`, a step's h bytes times a
    work-item's `u` packed R vectors. The sums are unrolled into named variables: as an
    array indexed in a loop they were kept in memory, a load and a store a product
    (the projection 0.72 ms a voicefilter-lite layer)."""
    steps, vectors = range(VNNI_STEP_BLOCK), range(u)
    return VNNI + f"""
// out[i]: the sums over X's bytes of step min(t0 + i, T - 1) times W's packed column
// vector from col
PAL_VNNI void project_vnni(__local const uint* x8, const int t0, __global const int* packed,
                           const int col, int16* out) {{
  {" ".join(f"pal_v16si acc{i} = PAL_SPLAT(0);" for i in steps)}
  {" ".join(f"__local const uint* x{i} = x8 + min(t0 + {i}, T - 1) * (I / 4);" for i in steps)}
  for (int k4 = 0; k4 < I / 4; ++k4) {{
    const pal_v16si w = *(__global const pal_v16si_u*)(packed + k4 * G + col);
    {" ".join(f"acc{i} = __builtin_ia32_vpdpbusd512(acc{i}, w, PAL_SPLAT((int)x{i}[k4]));"
              for i in steps)}
  }}
  {" ".join(f"out[{i}] = *(const int16*)&acc{i};" for i in steps)}
}}
// out[v]: the sums over h's bytes times R's packed column vector v from col0
PAL_VNNI void product_vnni(__local const uint* h8, __global const int* packed,
                           const int col0, int16* out) {{
  {" ".join(f"pal_v16si acc{v} = PAL_SPLAT(0);" for v in vectors)}
  for (int k4 = 0; k4 < H / 4; ++k4) {{
    const pal_v16si h = PAL_SPLAT((int)h8[k4]);
    __global const pal_v16si_u* row = (__global const pal_v16si_u*)(packed + k4 * G + col0);
    {" ".join(f"acc{v} = __builtin_ia32_vpdpbusd512(acc{v}, h, row[{v}]);" for v in vectors)}
  }}
  {" ".join(f"out[{v}] = *(const int16*)&acc{v};" for v in vectors)}
}}
"""


def vnni_packed(weight, unsigned: bool):
    """An int8 weight (dirs x K x N) as vpdpbusd reads it, per direction K/4 x N words
    (word (k4, n): rows 4 k4 .. 4 k4 + 3 of column n, the first the low byte; each plus
    128 as uint8 where `unsigned`) then the N column sums (of the weight as given): int32
    dirs x (K/4 N + N)."""
    dirs, depth, columns = weight.shape
    words = weight.reshape(dirs, depth // 4, 4, columns).transpose(0, 1, 3, 2)
    if unsigned:
        words = words.view(np.uint8) ^ np.uint8(0x80)
    words = np.ascontiguousarray(words).view(np.int32).reshape(dirs, -1)
    return np.concatenate([words, weight.sum(axis=1, dtype=np.int32)], axis=1)


@derived("vnni_w")
def vnni_w(w):
    """W for the VNNI projection (`vnni_packed`, unsigned)."""
    return vnni_packed(w, True)


@derived("vnni_r")
def vnni_r(r):
    """R for the VNNI steps (`vnni_packed`, signed)."""
    return vnni_packed(r, False)


def _local_floats(steps: int, size: int, hidden: int, gates: int, items: int,
                  split: bool) -> int:
    """The kernel's local memory, in floats: every step's projection and quantized X
    row (and its sum), h quantized, h, c, the gates, the reductions' partials (and the
    row-split product's partial sums)."""
    return steps * gates + steps * size + steps + 3 * hidden + gates + 4 * items + 8 + (
        items * gates if split else 0)


def host_products(r, batch: int) -> bool:
    """Whether the host's steps (backends/numpy/kernels_quant_lstm.py) take each step's
    h R^T on oneDNN's 8-bit products (`r`: R's Arg, dirs x hidden x gates)."""
    from palimpsest.backends.numpy import int8_products

    stand_in = np.broadcast_to(np.zeros((), r.dtype), r.shape[1:])   # (no bytes)
    return int8_products.usable(np.uint8, stand_in, batch)


def _step_quantization(hidden: int, vnni: bool) -> str:
    """A step's h quantized over its own range, each work-item's part of its sum in
    `part`: h's bytes (VNNI form) or centred values (float form). Where H is a multiple
    of 16, a work-item's units 16 at a time (a scalar loop of divisions and rints was
    ~3 us of a 512-unit step on PoCL); the sums are exact integers either way."""
    store = "vstore16(convert_uchar16(qj + (255.0f - h_top)), 0, (__local uchar*)h8 + j);" \
        if vnni else "vstore16(qj, 0, hq + j);"
    scalar = "((__local uchar*)h8)[j] = (uchar)(qj + (255.0f - h_top));" if vnni else \
        "hq[j] = qj;"
    if hidden % 16:
        return f"""    lo = 0.0f; hi = 0.0f;
    for (int j = lid; j < H; j += LS) {{ lo = fmin(lo, hs[j]); hi = fmax(hi, hs[j]); }}
    lows[lid] = lo; highs[lid] = hi;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) gather(lows, highs, q);
    barrier(CLK_LOCAL_MEM_FENCE);
    const float h_div = q[0], h_top = q[1], h_scale = q[2];
    float part = 0.0f;
    for (int j = lid; j < H; j += LS) {{
      const float qj = fmin(rint(hs[j] / h_div), h_top); {scalar} part += qj;
    }}"""
    return f"""    float16 low = (float16)(0.0f), high = (float16)(0.0f);
    for (int j = lid * 16; j < H; j += LS * 16) {{
      const float16 v = vload16(0, hs + j); low = fmin(low, v); high = fmax(high, v);
    }}
    const float8 low8 = fmin(low.lo, low.hi), high8 = fmax(high.lo, high.hi);
    const float4 low4 = fmin(low8.lo, low8.hi), high4 = fmax(high8.lo, high8.hi);
    lows[lid] = fmin(fmin(low4.x, low4.y), fmin(low4.z, low4.w));
    highs[lid] = fmax(fmax(high4.x, high4.y), fmax(high4.z, high4.w));
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) gather(lows, highs, q);
    barrier(CLK_LOCAL_MEM_FENCE);
    const float h_div = q[0], h_top = q[1], h_scale = q[2];
    float16 parts = (float16)(0.0f);
    for (int j = lid * 16; j < H; j += LS * 16) {{
      const float16 qj = fmin(rint(vload16(0, hs + j) / h_div), h_top);
      {store}
      parts += qj;
    }}
    const float8 parts8 = parts.lo + parts.hi;
    const float4 parts4 = parts8.lo + parts8.hi;
    float part = (parts4.x + parts4.y) + (parts4.z + parts4.w);"""


def _float_x_sums() -> str:
    """A step's sum of X's quantized values (less the zero point), exact in float."""
    return """    float total = 0.0f;
    for (int k = 0; k < I; ++k) total += xq[t * I + k];
    xsums[t] = total;"""


def _float_projection(column, bias) -> str:
    """X W^T of every step in the float form (`_projection`), each work-item's columns."""
    b_w = f"vload16(0, {bias} + col)" if bias else "(float16)(0.0f)"
    b_r = f"vload16(0, {bias} + G + col)" if bias else "(float16)(0.0f)"
    return f"""  for (int v = 0; v < U; ++v) {{
    const int col = (lid * U + v) * 16;
    project(xq, xsums, wd + col, col, {column("w_zero")}, x_scale * {column("w_scale")},
            {b_w}, {b_r}, proj);
  }}"""


def _vnni_x_sums() -> str:
    """A step's sum of X's quantized values (less the zero point) from its bytes (less
    128: `_vnni_projection`)."""
    return """    int total = 0;
    for (int k = 0; k < I; ++k) total += ((__local const char*)x8)[t * I + k];
    xsums[t] = (float)(total + I * (128 - (int)(255.0f - x_top)));"""


def _vnni_projection(column, bias) -> str:
    """X W^T of every step in the VNNI form, each work-item's columns VNNI_STEP_BLOCK
    steps at a time: with x' = x8 - 128 (the bytes as int8) and w' = w + 128, the sum
    over x' w' less 128 times the step's centred sum, plus (128 - X's zero point) times
    the column's sum of w' (its sum plus 128 I): the centred X's product by W; less W's
    zero point's term, scaled, plus W's bias and R's."""
    block = VNNI_STEP_BLOCK
    b_w = f"vload16(0, {bias} + col)" if bias else "(float16)(0.0f)"
    b_r = f"vload16(0, {bias} + G + col)" if bias else "(float16)(0.0f)"
    return f"""  for (int v = 0; v < U; ++v) {{
    const int col = (lid * U + v) * 16;
    const int16 column_term = (128 - (int)(255.0f - x_top))
                              * (vload16(0, wp + I / 4 * G + col) + 128 * I);
    const int16 step_factor = 128 + convert_int16({column("w_zero")});
    const float16 scale = x_scale * {column("w_scale")}, w_bias = {b_w}, r_bias = {b_r};
    for (int t0 = 0; t0 < T; t0 += {block}) {{
      int16 sums[{block}];
      project_vnni(x8, t0, wp, col, sums);
      for (int i = 0; i < {block} && t0 + i < T; ++i)
        vstore16((convert_float16(sums[i] + column_term - step_factor * (int)xsums[t0 + i])
                  * scale + w_bias) + r_bias, 0, proj + (t0 + i) * G + col);
    }}
  }}"""


def _x_quantization(vnni: bool) -> str:
    """X quantized over its range: its bytes less 128 (VNNI form: `_vnni_projection`)
    or centred values (float form)."""
    if vnni:
        return """  for (int e = lid; e < T * I; e += LS)
    ((__local uchar*)x8)[e] = (uchar)(fmin(rint(x[e] / x_div), x_top) + (255.0f - x_top)) ^ 0x80;"""
    return """  for (int e = lid; e < T * I; e += LS) xq[e] = fmin(rint(x[e] / x_div), x_top);"""


def _step_product(vnni: bool, row_split: bool) -> str:
    """A step's h R^T into `products`, the centred h's: in the VNNI form h's bytes times
    the packed R less h's zero point times the column sums; else the row-split or the
    column form of the float sums."""
    if vnni:
        return """    product_vnni(h8, rp, lid * U * 16, products);
    for (int v = 0; v < U; ++v)
      products[v] -= (int)(255.0f - h_top) * vload16(0, rp + H / 4 * G + (lid * U + v) * 16);"""
    if row_split:
        return """    product_rows(hq, rd, lid, row_sums); barrier(CLK_LOCAL_MEM_FENCE);
    gather_products(row_sums, lid, products);"""
    return "    product_r(hq, rd + lid * U * 16, products);"


def _vnni_local_bytes(op: dict, items: int) -> int:
    """The VNNI form's local memory: every step's projection, X's bytes (and each
    step's sum), h's bytes, h, c, the gates, the reductions' partials."""
    steps, size, hidden, gates = (op[k] for k in ("steps", "size", "hidden", "gates"))
    return 4 * (steps * gates + steps * size // 4 + steps + hidden // 4 + 2 * hidden
                + gates + 3 * items + 8)


# whether a device with the 8-bit dot product (DeviceLimits.vnni) takes the VNNI form
# (tests turn it off to run the float form there)
USE_VNNI = True


@generator("graph.dynamic_quantize_lstm")
def dynamic_quantize_lstm(call: KernelCall) -> list:
    op = _checked(call)
    limit = min(call.device.max_work_group_size, call.device.max_work_item_sizes[0])
    u = _columns_per_item(op["gates"], limit, call.device.host_cpu)
    items = op["gates"] // (16 * u)
    vnni_bytes = _vnni_local_bytes(op, items)
    vnni = (USE_VNNI and op["w"].dtype == np.int8 and op["r"].dtype == np.int8
            and op["size"] % 4 == 0 and op["hidden"] % 4 == 0
            and vnni_bytes <= call.device.local_mem_size
            and call.device.vnni)   # (last: the device's probe, at its first use)
    if not vnni and call.device.host_cpu and host_products(op["r"], op["x"].shape[1]):
        # on the device's own CPU the host's step, oneDNN's vector-matrix product of
        # bytes, beats this kernel's float sums of them, its operands mapped in place
        # (no copies on such a device): voicefilter-lite's 512-unit layers 7.4 against
        # 14 ms a run, captcha_ocr_int8's 2.3 against 3.1
        raise Unsupported("on a CPU device where the host multiplies its 8-bit R on "
                          "oneDNN (faster)")
    dirs, steps, size, hidden, gates = (op[k] for k in ("dirs", "steps", "size", "hidden",
                                                          "gates"))
    rows_per_item = None if vnni else _rows_per_item(hidden, gates, items, call.device)
    local_bytes = vnni_bytes if vnni else \
        4 * _local_floats(steps, size, hidden, gates, items, bool(rows_per_item))
    if rows_per_item and local_bytes > call.device.local_mem_size:
        rows_per_item = None
        local_bytes = 4 * _local_floats(steps, size, hidden, gates, items, False)
    if local_bytes > call.device.local_mem_size:
        raise Unsupported(f"{local_bytes} bytes of local memory (every step's projection)")
    w_type = "char" if op["w"].dtype == np.int8 else "uchar"
    r_type = "char" if op["r"].dtype == np.int8 else "uchar"
    present = [name for name in ("b", "h0", "c0") if op[name] is not None]
    names = ["y", "yh", "yc"][:len(call.outs)]
    buffers = [("x", "float", False), ("w", w_type, False), ("r", r_type, False)] + [
        (name, "float", False) for name in present] + [
        ("w_scale", "float", False), ("w_zero", w_type, False),
        ("r_scale", "float", False), ("r_zero", r_type, False)] + [
        (name, "float", True) for name in names] + (
        [("w_packed", "int", False), ("r_packed", "int", False)] if vnni else [])
    per_column = {name: op[name].size > dirs
                  for name in ("w_scale", "w_zero", "r_scale", "r_zero")}

    def column(name) -> str:
        """`name` at this direction's 16 columns from `col`, as a float16."""
        if per_column[name]:
            return f"convert_float16(vload16(0, {name} + d * G + col))"
        return f"(float16)((float){name}[d])"

    bias = "b + d * 2 * G" if op["b"] is not None else None
    source = f"""
#define T {steps}
#define I {size}
#define H {hidden}
#define G {gates}
#define LS {items}
#define U {u}
#define CHUNK {CHUNK}
{f"#define RPW {rows_per_item}" if rows_per_item else ""}

{QUANTIZATION}
// the low and high of `lows` / `highs` (LS partials) quantized into q
inline void gather(__local const float* lows, __local const float* highs, __local float* q) {{
  float lo = lows[0], hi = highs[0];
  for (int k = 1; k < LS; ++k) {{ lo = fmin(lo, lows[k]); hi = fmax(hi, highs[k]); }}
  quantization(lo, hi, q);
}}
{_vnni_helpers(u) if vnni else _projection(w_type, CPU_STEP_BLOCK if call.device.host_cpu
                                               else STEP_BLOCK)}
{"" if vnni else _product_rows(r_type) if rows_per_item else _product(r_type, u)}
{LSTM_CELL}

__kernel __attribute__((reqd_work_group_size(LS, 1, 1)))
void dynamic_quantize_lstm({params(*buffers)}) {{
{bind(*buffers)}
  const int d = get_group_id(0);
  const int lid = get_local_id(0);
  const int reverse = {1 if op["reverse_all"] else 0} || d == 1;
  __local float proj[T * G];
  {"__local uint x8[T * I / 4];" if vnni else "__local float xq[T * I];"}
  __local float xsums[T];
  {"__local uint h8[H / 4];" if vnni else "__local float hq[H];"}

  __local float hs[H];
  __local float cs[H];
  __local float gate[G];
  __local float lows[LS];
  __local float highs[LS];
  __local float sums[LS];
  __local float q[4];
  {"__local float row_sums[LS * G];" if rows_per_item else ""}

  // X quantized over all of its range (every direction alike), then X W^T of every step
  float lo = 0.0f, hi = 0.0f;
  for (int e = lid; e < T * I; e += LS) {{ lo = fmin(lo, x[e]); hi = fmax(hi, x[e]); }}
  lows[lid] = lo; highs[lid] = hi;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) gather(lows, highs, q);
  barrier(CLK_LOCAL_MEM_FENCE);
  const float x_div = q[0], x_top = q[1], x_scale = q[2];
{_x_quantization(vnni)}
  for (int j = lid; j < H; j += LS) {{
    hs[j] = {"h0[d * H + j]" if op["h0"] is not None else "0.0f"};
    cs[j] = {"c0[d * H + j]" if op["c0"] is not None else "0.0f"};
  }}
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int t = lid; t < T; t += LS) {{   // (integers below 2**24: exact)
{_vnni_x_sums() if vnni else _float_x_sums()}
  }}
  barrier(CLK_LOCAL_MEM_FENCE);
  __global const {w_type}* wd = w + d * I * G;
  __global const {r_type}* rd = r + d * H * G;
  {"__global const int* wp = w_packed + d * (I / 4 * G + G);" if vnni else ""}
  {"__global const int* rp = r_packed + d * (H / 4 * G + G);" if vnni else ""}
{(_vnni_projection if vnni else _float_projection)(column, bias)}

  for (int s = 0; s < T; ++s) {{
    const int t = reverse ? T - 1 - s : s;
{_step_quantization(hidden, vnni)}
    sums[lid] = part;
    barrier(CLK_LOCAL_MEM_FENCE);
    float hsum = 0.0f;   // (integers below 2**24: exact in any order)
    for (int k = 0; k < LS; ++k) hsum += sums[k];
    int16 products[U];
{_step_product(vnni, bool(rows_per_item))}
    for (int v = 0; v < U; ++v) {{
      const int col = (lid * U + v) * 16;
      const int16 pr = products[v] - convert_int16({column("r_zero")}) * (int)hsum;
      // as the numpy kernel: the step's X W^T (with W's and R's biases), plus h R^T
      // scaled by h's scale times R's
      float16 g = vload16(0, proj + t * G + col)
                  + convert_float16(pr) * (h_scale * {column("r_scale")});
      vstore16(g, 0, gate + col);
    }}
    barrier(CLK_LOCAL_MEM_FENCE);
{cell_steps(f"(t * {dirs} + d) * H + j" if "y" in names else None)}
    barrier(CLK_LOCAL_MEM_FENCE);
  }}
  for (int j = lid; j < H; j += LS) {{
    {"yh[d * H + j] = hs[j];" if "yh" in names else ""}
    {"yc[d * H + j] = cs[j];" if "yc" in names else ""}
  }}
}}
"""
    slot = {name: index for index, name in enumerate(_SLOTS)}
    args = [ref("in", slot["x"]), ref("in", slot["w"]), ref("in", slot["r"])] + [
        ref("in", slot[name]) for name in present] + [
        ref("in", slot[name]) for name in ("w_scale", "w_zero", "r_scale", "r_zero")] + [
        ref("out", index) for index in range(len(names))] + (
        [ref("derived", ("vnni_w", slot["w"])), ref("derived", ("vnni_r", slot["r"]))]
        if vnni else [])
    return [Launch(source, "dynamic_quantize_lstm", (dirs * items,), (items,), args)]
