"""`buffer.compute` fast paths of the quantized graph ops on numpy (kernels.py imports
this module, which registers them in its `FAST` table).

Integer products are exact. Where oneDNN's 8-bit GEMM is usable (int8_products: the
onednn-cpu-gomp wheel, a CPU with VNNI) and the product is not tiny, they run on it in
int32 (ConvInteger, in kernels_quant_conv.py, alike). Else through
BLAS on centred floats (the zero points subtracted: dialects/graph/reference/
quant.centred, a constant centred once): in float32 where every partial sum is an
integer below 2**24, else in float64. The tables below say the float route.

| graph op | how |
|---|---|
| matmul_integer (8-bit, per-tensor A zero point, per-tensor/column B's) | A centred into one temporary (float32 where exact; a large A a cache-sized block of rows at a time) and one GEMM (per block); from 32 rows on, B's 8-bit columns (copied contiguous once per constant, in blocks of one width) converted into a float32 block in L2 and one GEMM per block of columns |
| matmul_integer_to_float (as matmul_integer; float32 scales and bias per tensor/column) | matmul_integer's GEMM written as float32 into the out, then scaled (and the bias added) in place, per block while cached |
| dynamic_quantize_linear (f32) | min/max, then divide, rint, saturate and add the zero point into the uint8 out, a cache-sized block at a time |
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from palimpsest.backends.host import l2_bytes as _l2_bytes
from palimpsest.backends.numpy import int8_products
from palimpsest.backends.numpy.kernels import FAST, _overlaps
from palimpsest.dialects.graph.reference._common import is_constant
from palimpsest.dialects.graph.reference.quant import centred


def _largest(a, zero: float, weight) -> float:
    """max |a - zero| as the exactness of a product by the centred `weight` needs it:
    from a's type's range, else, when that is too wide for float32 (`weight.bound`
    times it past 2**24), from two reductions over a's bytes."""
    info = np.iinfo(a.dtype)
    largest = max(zero - info.min, info.max - zero)
    if not weight.exact_narrow(largest) and a.size:
        largest = max(zero - float(a.min()), float(a.max()) - zero)
    return largest


def _fits_int32(a_type, zero: float, weight) -> bool:
    """Whether every product of an `a_type` operand less `zero` by the centred `weight`
    fits in int32 (from the type's range and the weight's bound)."""
    info = np.iinfo(a_type)
    return weight.bound * max(zero - info.min, info.max - zero) < 2.0 ** 31


def _exact_floats(a, zero: float, weight):
    """The float type in which `a` - `zero` times the centred `weight` is exact (float32
    when every product sum stays below 2**24, else float64), and the weight in it."""
    floats = weight.floats(_largest(a, zero, weight))
    return floats.dtype.type, floats


def _integer_operands(inputs, outs):
    """(out, a, b, a's zero point, b's) of MatMulInteger or ConvInteger when both
    operands are 8-bit integers, a's zero point per tensor and the out int32; else
    None."""
    if not 2 <= len(inputs) <= 4 or outs[0].dtype != np.int32:
        return None
    a, b, a_zero, b_zero = (list(inputs) + [None, None])[:4]
    if a is None or b is None or any(v.dtype.kind not in "iu" or v.dtype.itemsize != 1
                                     for v in (a, b)) \
            or (a_zero is not None and a_zero.size != 1):
        return None
    return outs[0], a, b, a_zero, b_zero


def _matmul_integer(inputs, attrs, outs):
    """MatMulInteger as one BLAS GEMM of the centred operands. Per-tensor A zero point,
    per-tensor or per-column B zero point; anything else: the reference kernel."""
    operands = _integer_operands(inputs, outs)
    return operands is not None and _centred_matmul(*operands)


def _centred_matmul(out, a, b, a_zero, b_zero, epilogue=None, scaled=None) -> bool:
    """out = (a - a_zero) @ (b - b_zero) through BLAS on the centred operands (float32
    where exact), into out's type: int32, or float32 (the exact integer rounded once,
    as a cast of the int32 rounds it), then `epilogue(rows)` on each block of rows
    written (on oneDNN's packed product, `scaled`: the epilogue as (float32 scales, one or
    one per column, and None or a bias per column), where it takes it). A 2-D b,
    per-tensor A zero point, per-tensor or per-column B's; False (nothing written)
    otherwise, or where an int32 could overflow."""
    if a.ndim < 2 or b.ndim != 2 or (b_zero is not None and b_zero.size not in (1, b.shape[-1])) \
            or a.shape[-1] != b.shape[0] or out.shape != a.shape[:-1] + b.shape[-1:]:
        return False
    weight = centred(b, b_zero, (1, -1) if b_zero is not None and b_zero.size > 1 else (),
                     (0,))
    zero = 0.0 if a_zero is None else float(a_zero.reshape(-1)[0])
    if not _fits_int32(a.dtype, zero, weight):
        return False
    depth = a.shape[-1]
    if out.flags.c_contiguous and int8_products.usable(a.dtype, b, a.size // max(depth, 1)):
        _onednn_matmul(out, a, b, b_zero, int(zero), weight, epilogue, scaled)
        return True
    largest = _largest(a, zero, weight)
    dtype = weight.float_type(largest)    # (the float copy made only where it is read)
    direct = out.dtype == dtype           # a float32 product straight into the out

    def store(rows, centred_rows):
        for columns, block in _weight_columns(b, b_zero, weight, largest,
                                              centred_rows.size // depth):
            part = rows[..., columns]
            if direct:
                np.matmul(centred_rows, block, out=part)
            else:
                np.copyto(part, np.matmul(centred_rows, block), casting="unsafe")
        if epilogue is not None:
            epilogue(rows)

    flat = a.flags.c_contiguous and out.flags.c_contiguous
    if flat:    # 2-D GEMMs: numpy's stacked matmul of (1, 64, 512) by 512 x 384 costs
        a, out = a.reshape(-1, depth), out.reshape(-1, out.shape[-1])   # ~40 us more
    chunk = max(1, _l2_bytes() // 4 // (depth * np.dtype(dtype).itemsize))
    if a.size <= chunk * depth or not flat:
        store(out, _centre(a, zero, dtype, np.empty(a.shape, dtype)))
        return True
    # a large A centred a block of rows at a time, into a buffer that stays in cache
    buffer = np.empty((chunk, depth), dtype)
    for start in range(0, len(a), chunk):
        block = buffer[:len(a) - start] if start + chunk > len(a) else buffer
        store(out[start:start + chunk], _centre(a[start:start + chunk], zero, dtype, block))
    return True


def _onednn_matmul(out, a, b, b_zero, zero: int, weight, epilogue, scaled=None) -> None:
    """`_centred_matmul` on oneDNN (int8_products): a constant b's product on its packed
    copy, the float out's scales and bias (`scaled`) in oneDNN's epilogue; else into an
    int32 out directly, into a float32 one through an int32 block of rows that stays in
    cache, each block cast (the exact integer rounded once) and its epilogue run while
    cached."""
    depth, columns = b.shape
    prepared = int8_products.prepared(b, b_zero, weight)
    a, zero = int8_products.unsigned(np.ascontiguousarray(a).reshape(-1, depth), zero)
    out = out.reshape(-1, columns)
    if is_constant(b) and (out.dtype == np.int32 or scaled is not None):
        scales = bias = None
        if out.dtype != np.int32:   # (oneDNN reads one bias per column)
            scales, bias = scaled
            scales = np.ascontiguousarray(scales)
            bias = None if bias is None else np.ascontiguousarray(
                np.broadcast_to(bias, (columns,)))
        if int8_products.packed_product(a, zero, prepared, out, scales, bias):
            return
    if out.dtype == np.int32:
        int8_products.product(a, zero, prepared, out)
        if epilogue is not None:
            epilogue(out)
        return
    chunk = max(64, _l2_bytes() // 4 // (4 * columns))
    block = np.empty((min(chunk, len(a)), columns), np.int32)
    for start in range(0, len(a), chunk):
        rows = out[start:start + chunk]
        part = block[:len(rows)]
        int8_products.product(a[start:start + chunk], zero, prepared, part, into=rows)
        if epilogue is not None:
            epilogue(rows)


def _centre(a, zero: float, dtype, out):
    """out = a - zero, in float `dtype`: a cast, then the subtraction in that type (one
    subtract of the 8-bit a into floats casts through a buffer: 12 vs 6 us for 64 x 512)."""
    np.copyto(out, a, casting="unsafe")
    if zero:
        np.subtract(out, dtype(zero), out=out)
    return out


# below this many rows a product reads its weight at most a few times per element: the
# float copy, read once, costs no more than converting the 8-bit weight
_CONVERT_ROWS = 32


def _weight_columns(b, b_zero, weight, largest, rows, part=()):
    """(column slice, float weight columns) covering b less its zero point b_zero (per
    tensor or per column; `weight` its Centred) for a product by a block of `rows` rows
    of A whose values less its zero point are at most `largest`. The Centred's float
    copy (`weight.floats(largest)`), in one piece, for a float64 product or fewer than
    _CONVERT_ROWS rows; else b's 8-bit columns converted
    (and centred) a block at a time into one float32 buffer of at most a quarter of L2:
    a weight read per run (every model's weights together outgrow the caches) costs 1
    byte per element from memory instead of 4, and its float block is read by the GEMM
    from L2. Blocks of one width (384 columns as 2 x 192, not 256 + 128), their 8-bit
    columns copied contiguous once and kept by `weight` (the Centred `right` comes
    from: b's, or a stack's whose `part` b is): a contiguous block converts in a third
    of the time of a slice of b's rows (512 x 256 of 1024 columns: 15 vs 45 us). Bit
    for bit: both hold the same integers."""
    if weight.float_type(largest) != np.float32 or rows < _CONVERT_ROWS:
        yield slice(None), weight.floats(largest)[part]
        return
    depth, width = b.shape
    most = max(16, _l2_bytes() // 4 // (4 * depth) // 16 * 16)
    count = -(-width // most)
    step = (-(-width // count) + 15) // 16 * 16     # at most `most`, a multiple of 16
    blocks = weight.layout(("columns", part, step), lambda: [
        np.ascontiguousarray(b[:, start:start + step]) for start in range(0, width, step)])
    buffer = np.empty((depth, min(step, width)), np.float32)
    # (a cast, then the zero point subtracted in float32: a third of the time of one
    # subtract of the 8-bit arrays into float32, which casts through a buffer)
    zero = None if b_zero is None or not b_zero.any() else b_zero.reshape(-1).astype(np.float32)
    for start, columns8 in zip(range(0, width, step), blocks):
        columns = slice(start, start + columns8.shape[1])
        block = buffer[:, :columns8.shape[1]]
        np.copyto(block, columns8, casting="unsafe")
        if zero is not None:
            np.subtract(block, zero if zero.size == 1 else zero[columns], out=block)
        yield columns, block


# MatMulIntegerToFloat on a packed weight, bound to its arrays (`_bind_packed`): id(out)
# -> (weak references to the op's arrays, the bound call)
_BOUND: dict = {}
_BOUND_KEPT = 256    # entries kept before the dead ones are dropped


def _matmul_integer_to_float(inputs, attrs, outs):
    """com.microsoft MatMulIntegerToFloat as the reference computes it, bit for bit: the
    product written as float32 (`_centred_matmul`), then, a block of rows at a time
    while it is in cache, times a_scale · b_scale (multiplied first, in float32) and
    plus the bias, in place. float32 scales, bias and out; the scale and bias
    broadcasting along the rows (per tensor, per column); else the reference. On a
    constant weight's packed copy the call is bound once to the op's arrays and made
    again while they are the same objects (`_bind_packed`)."""
    if not 4 <= len(inputs) <= 7 or len(outs) != 1:
        return False
    a, b, a_scale, b_scale, a_zero, b_zero, bias = (list(inputs) + [None] * 3)[:7]
    out = outs[0]
    arrays = (a, b, a_scale, b_scale, a_zero, b_zero, bias, out)
    bound = _BOUND.get(id(out))
    if bound is not None and all(
            (r is None and v is None) or (r is not None and r() is v)
            for r, v in zip(bound[0], arrays)):
        bound[1](a, a_scale, b_scale, a_zero, bias)
        return True
    if any(v is None for v in (a, b, a_scale, b_scale)) or out.dtype != np.float32 \
            or any(v is not None and v.dtype != np.float32 for v in (a_scale, b_scale, bias)) \
            or any(v.dtype.kind not in "iu" or v.dtype.itemsize != 1 for v in (a, b)) \
            or (a_zero is not None and a_zero.size != 1) \
            or _overlaps(out, a, b, a_scale, b_scale, a_zero, b_zero, bias):
        return False
    scale = np.multiply(a_scale, b_scale)
    if not all(v is None or v.ndim == 0 or (
            v.ndim <= out.ndim and v.shape[-1] in (1, out.shape[-1])
            and all(d == 1 for d in v.shape[:-1])) for v in (scale, bias)):
        return False
    run = _bind_packed(out, a, b, scale, b_zero, bias)
    if run is not None:
        if len(_BOUND) >= _BOUND_KEPT:
            for key in [k for k, (refs, _) in _BOUND.items()
                        if any(r is not None and r() is None for r in refs)]:
                del _BOUND[key]
        _BOUND[id(out)] = (tuple(None if v is None else weakref.ref(v) for v in arrays), run)
        run(a, a_scale, b_scale, a_zero, bias)
        return True
    scale = scale.reshape(scale.shape[-1:])
    bias = None if bias is None else bias.reshape(bias.shape[-1:])

    def epilogue(rows):
        np.multiply(rows, scale, out=rows)
        if bias is not None:
            np.add(rows, bias, out=rows)

    return _centred_matmul(out, a, b, a_zero, b_zero, epilogue, (scale, bias))


def _bind_packed(out, a, b, scale, b_zero, bias):
    """MatMulIntegerToFloat (its checks passed; `scale` a_scale times b_scale) as a call
    on oneDNN's packed product (`int8_products.packed`) bound to `b` and `out`, given the
    op's other arrays at each call (the very ones: it keeps no reference to them, nor to
    out's arena), or None where that is not its route: b a constant with constant zero
    points of none of its own, A's rows contiguous and enough of them, every product
    within int32 whatever A's zero point. The call reads what a run may change (A, its
    zero point, the scales, a bias that is not a constant) into the primitive's bound
    buffers, then runs it: the same float32 operations as `_centred_matmul`'s packed
    route, without its per-call checks and conversions (t5's 64 x 512 x 1024 product:
    105 -> 49 us a call)."""
    if not is_constant(b) or b.ndim != 2 or a.ndim < 2 or not a.flags.c_contiguous \
            or not out.flags.c_contiguous or a.shape[-1] != b.shape[0] \
            or out.shape != a.shape[:-1] + b.shape[-1:] \
            or (b_zero is not None and (not is_constant(b_zero)
                                        or b_zero.size not in (1, b.shape[-1]))):
        return None
    depth, columns = b.shape
    rows = a.size // depth
    weight = centred(b, b_zero, (1, -1) if b_zero is not None and b_zero.size > 1 else (),
                     (0,))
    # (A's zero point at its type's minimum: the widest range of a - zero there is)
    if not _fits_int32(a.dtype, float(np.iinfo(a.dtype).min), weight) \
            or not int8_products.usable(a.dtype, b, rows):
        return None
    prepared = int8_products.prepared(b, b_zero, weight)
    kind = "common" if scale.size == 1 else "columns"
    made = int8_products.packed(prepared, rows, kind, bias is not None)
    if made is None:
        return None
    matmul, copy = made
    flip = a.dtype == np.int8           # (int8 A as uint8: flipped by its top bit)
    # (an uint8 A's own memory is bound: its address only, the array not kept)
    unsigned = np.empty((rows, depth), np.uint8) if flip else None
    zero = np.zeros(1, np.int32)
    scales = np.empty(scale.shape, np.float32)
    biases = None if bias is None else np.empty(columns, np.float32)
    constant_bias = bias is not None and is_constant(bias)
    if constant_bias:
        np.copyto(biases, np.broadcast_to(bias.reshape(bias.shape[-1:]), (columns,)))
    call = matmul.bound(unsigned if flip else a.reshape(rows, depth), zero, copy,
                        out.reshape(rows, columns), scales.reshape(-1), biases)
    shift = 128 if flip else 0

    def run(a, a_scale, b_scale, a_zero, bias):
        if flip:
            np.bitwise_xor(a.reshape(rows, depth).view(np.uint8), np.uint8(0x80),
                           out=unsigned)
        zero[0] = (0 if a_zero is None else int(a_zero.reshape(-1)[0])) + shift
        np.multiply(a_scale, b_scale, out=scales)
        if bias is not None and not constant_bias:
            np.copyto(biases, np.broadcast_to(bias.reshape(bias.shape[-1:]), (columns,)))
        call()
    return run


def _dynamic_quantize_linear(inputs, attrs, outs):
    """DynamicQuantizeLinear as the reference computes it (float32 scale and zero point
    from min(0, min x) and max(0, max x); y = saturate(rint(x / scale) + zero)), through
    one float32 temporary of at most an eighth of L2 (a contiguous x a block at a time)
    into the out: rint(x / scale) lies within [-255, 255], so adding the zero point in
    float32 is as exact as the reference's float64. Non-float32 x, or a scale that is
    not finite: the reference kernel."""
    if len(inputs) != 1 or not 1 <= len(outs) <= 3:
        return False
    x, y = inputs[0], outs[0]
    if x is None or x.dtype != np.float32 or y.dtype != np.uint8 or y.shape != x.shape \
            or (len(outs) > 1 and (outs[1].dtype != np.float32 or outs[1].size != 1)) \
            or (len(outs) > 2 and (outs[2].dtype != np.uint8 or outs[2].size != 1)) \
            or _overlaps(y, x):
        return False
    low, high = _extremes(x)
    quantization = _quantization([low], [high])
    if quantization is None:
        return False
    (divisor,), (top,), (scale,) = quantization
    saturates = _saturates([high], [divisor], [top])
    scale, zero = np.float32(scale), np.uint8(255 - top)
    if scale:
        offset, top = np.float32(zero), np.float32(top)
        flat = x.flags.c_contiguous and y.flags.c_contiguous
        xs, ys = (x.reshape(-1), y.reshape(-1)) if flat else (x, y)
        block = max(1, _l2_bytes() // 16) if flat else x.size   # elements, float32
        scaled = np.empty(min(block, x.size) if flat else x.shape, np.float32)
        for start in range(0, x.size, block):   # a block at a time: `scaled` stays cached
            part = scaled[:min(block, x.size - start)] if flat else scaled
            np.divide(xs[start:start + block] if flat else xs, scale, out=part)
            np.rint(part, out=part)
            # rint(x / scale) >= rint(min(0, min x) / scale) = -zero: only the top saturates
            if saturates:
                np.minimum(part, top, out=part)
            np.add(part, offset, out=ys[start:start + block] if flat else ys, casting="unsafe")
    else:   # x all zeros
        y.fill(0)
    if len(outs) > 1:
        outs[1].reshape(-1)[0] = scale
    if len(outs) > 2:
        outs[2].reshape(-1)[0] = zero
    return True


def _extremes(x) -> tuple[float, float]:
    """(min x, max x) as Python floats, (0, 0) for an empty x; a NaN propagates. A
    contiguous x larger than a quarter of L2 a block at a time, each block's max read
    from cache right after its min: one pass over memory instead of two."""
    if not x.size:
        return 0.0, 0.0
    block = max(1, _l2_bytes() // 4 // x.itemsize)
    if x.size <= block or not x.flags.c_contiguous:
        return float(x.min()), float(x.max())
    flat, lows, highs = x.reshape(-1), [], []
    for start in range(0, flat.size, block):
        part = flat[start:start + block]
        lows.append(part.min())
        highs.append(part.max())
    return float(np.min(lows)), float(np.max(highs))


def _saturates(highs, divisors, tops) -> bool:
    """Whether rint(x / divisor) can pass its top for an x of at most `high` (a range
    of `_quantization`'s): only where rint(high / divisor) does (float32 division and
    rint are monotonic), by one where it rounds up at both ends of the range; else the
    saturating pass is skipped."""
    for high, divisor, top in zip(highs, divisors, tops):
        # the float32 quotient (the double one rounded once), rounded half to even
        quotient = float(np.float32(high / divisor))
        if (round(quotient) if math.isfinite(quotient) else quotient) > top:
            return True
    return False


def _quantization(lows, highs):
    """Per range (an LSTM direction's h, or all of x), DynamicQuantizeLinear's float32
    scale and zero point over [min(0, low), max(0, high)] as (divisors, 255 - zero
    points, scales): Python floats rounded to float32 after each operation, which for +,
    -, * and / of float32 values is the float32 operation's result (and far fewer numpy
    calls); a zero scale (all zeros) divides by 1. None where a scale is not finite."""
    divisors, tops, scales = [], [], []
    for low, high in zip(lows, highs):
        low, high = min(low, 0.0), max(high, 0.0)
        scale = float(np.float32(float(np.float32(high - low)) / 255.0))
        if not math.isfinite(scale):
            return None
        zero = min(max(round(0.0 - float(np.float32(low / scale))), 0), 255) if scale else 0
        divisors.append(scale or 1.0)
        tops.append(255.0 - zero)
        scales.append(scale)
    return divisors, tops, scales


for _name, _run in (("graph.matmul_integer", _matmul_integer),
                    ("graph.matmul_integer_to_float", _matmul_integer_to_float),
                    ("graph.dynamic_quantize_linear", _dynamic_quantize_linear)):
    FAST[_name] = _run
