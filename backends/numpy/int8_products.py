"""8-bit integer products on oneDNN's u8 x s8 GEMM (backends/onednn.py), exact, for the
quantized fast paths (kernels_quant.py, kernels_quant_lstm.py).

oneDNN takes the plain product only (its fast kernels have no offsets), so a product
(a - a0)(b - b0) is made from P = a' b' as

    (a' - a0')(b' - b0') = P - a0' colsum(b') - (rowsum(a') - K a0') (x) b0'

with a' the uint8 left operand (an int8 one flipped by its top bit: a + 128, its zero
point too) and b' the int8 right one (a uint8 weight likewise less 128). int32 arithmetic
wraps, so every step is exact where the result fits in int32, which the callers check
(the centred weight's bound). A weight is prepared once per constant (kept by its
`Centred`): b' transposed into rows (oneDNN's vector-matrix product reads B^T rows 3x
faster than B's columns), its column sums and its shifted zero points.

A constant weight without zero points of its own, multiplied by two rows or more, goes to
oneDNN's matmul primitive instead (`packed_product`): b' packed once into its layout, a's
zero point and a float out's scales and bias applied by the primitive itself.
"""

from __future__ import annotations

import numpy as np

from palimpsest.backends import onednn
from palimpsest.backends.host import weight_empty

# below this many multiply-adds oneDNN's call (~5-8 us) costs more than the float route
SMALLEST = 1 << 16


class Int8Weight:
    """b' as oneDNN reads it: `rows` (N x K int8, b' transposed), `sums` (N, int32:
    each column's sum) and `zeros` (b0' as N int32, or None where all are 0)."""

    __slots__ = ("rows", "sums", "zeros", "packed")

    def __init__(self, b, b_zero):
        shift = 128 if b.dtype == np.uint8 else 0
        rows = weight_empty((b.shape[1], b.shape[0]), np.int8)
        if shift:
            np.bitwise_xor(b.T, np.uint8(0x80), out=rows.view(np.uint8))
        else:
            np.copyto(rows, b.T)
        self.rows = rows
        self.sums = rows.sum(axis=1, dtype=np.int32)
        zeros = np.zeros(b.shape[1], np.int32) if b_zero is None else \
            np.broadcast_to(b_zero.astype(np.int32).reshape(-1), (b.shape[1],))
        zeros = zeros - shift
        self.zeros = zeros if zeros.any() else None
        self.packed = {}


def usable(a_type, b, rows: int) -> bool:
    """Whether a product of `rows` rows of an `a_type` operand by the 2-D `b` goes to
    oneDNN: both 8-bit integers, oneDNN installed and usable here, the depth keeping
    every sum in int32, and the product large enough to pay for the call."""
    depth, columns = b.shape
    return (np.dtype(a_type) in (np.uint8, np.int8) and b.dtype in (np.uint8, np.int8)
            and depth <= onednn.MAX_DEPTH and rows * depth * columns >= SMALLEST
            and onednn.available())


def prepared(b, b_zero, weight, part=()) -> Int8Weight:
    """b (K x N, 8-bit) less b_zero (None, per tensor or per column) as an Int8Weight,
    made once and kept by `weight` (b's Centred, or a stack's whose `part` b is)."""
    return weight.layout(("onednn", part), lambda: Int8Weight(b, b_zero))


# packed copies of one weight, one per (rows, epilogue) it is multiplied with: a model
# whose rows change every run (a sequence length) keeps its first few and then takes the
# plain GEMM, instead of packing a new copy per length
PACKED_KINDS = 4
# a vector-matrix product stays on the plain GEMM, whose gemv kernel is faster there (1 x
# 512 x 1024 with its epilogue: 16 against 23 us); from two rows the packed one wins (24
# against 37 us)
PACKED_ROWS_FROM = 2


def packed_product(a, zero: int, weight: Int8Weight, out, scales=None, bias=None) -> bool:
    """out = (a - zero) @ b [* scales] [+ bias] on oneDNN's matmul primitive with b packed
    once (onednn_primitives.Int8MatMul; kept by the Int8Weight: the caller's b is a
    constant): `a` (M x K uint8) and `out` (M x N: int32, or float32 with `scales`, one
    or one per column, and `bias`, one per column, float32) contiguous. False (nothing
    written) where b has zero points of its own, a has fewer than PACKED_ROWS_FROM rows,
    oneDNN has no such product, or the weight already has PACKED_KINDS packed copies."""
    kind = None if scales is None else "common" if scales.size == 1 else "columns"
    made = packed(weight, len(a), kind, bias is not None)
    if made is None:
        return False
    matmul, copy = made
    matmul(a, np.array([zero], np.int32), copy, out, scales, bias)
    return True


def packed(weight: Int8Weight, rows: int, kind, bias: bool):
    """(onednn_primitives.Int8MatMul, b's packed copy) of `weight` for a product of
    `rows` rows with `kind` scales (None, "common", "columns") and a bias or not, made
    at its first request; None where `packed_product` declines (see there)."""
    from palimpsest.backends import onednn_primitives

    if weight.zeros is not None or rows < PACKED_ROWS_FROM \
            or not onednn_primitives.available():
        return None
    columns, depth = weight.rows.shape
    key = (rows, kind, bias)
    made = weight.packed.get(key)
    if made is None:
        if len(weight.packed) >= PACKED_KINDS:
            return None
        try:
            matmul = onednn_primitives.Int8MatMul(rows, depth, columns, kind, bias)
        except onednn_primitives.OneDnnError:
            made = False
        else:
            copy = weight_empty((matmul.weight_bytes,), np.uint8)
            matmul.pack(weight.rows, copy)
            made = (matmul, copy)
        weight.packed[key] = made
    return made or None


def unsigned(a, zero: int):
    """(a as uint8, its zero point): an int8 a flipped by its top bit (a + 128)."""
    if a.dtype == np.int8:
        return a.view(np.uint8) ^ np.uint8(0x80), zero + 128
    return a, zero


def product(a, zero: int, weight: Int8Weight, out, gemm=None, into=None) -> None:
    """out (M x N int32, rows contiguous) = (a - zero) @ (b - b_zero), exactly: `a`
    (M x K uint8, rows contiguous) and `weight` b's Int8Weight; see the module doc.
    `gemm`: onednn.bound_gemm_u8s8(a, weight.rows, out), where the caller bound it.
    `into`: a float32 array the result is also cast into (saving a pass where the
    weight's zero points are all 0)."""
    if gemm is None:
        onednn.gemm_u8s8(a, weight.rows, out)
    else:
        gemm()
    if weight.zeros is None and into is not None:
        np.subtract(out, weight.sums * np.int32(zero), out=into, casting="unsafe")
        return
    if zero:
        np.subtract(out, weight.sums * np.int32(zero), out=out)
    if weight.zeros is not None:
        row_terms = a.sum(axis=1, dtype=np.int32)
        if zero:
            row_terms -= np.int32(a.shape[1] * zero)
        out -= row_terms[:, None] * weight.zeros
    if into is not None:
        np.copyto(into, out, casting="unsafe")


__all__ = ["Int8Weight", "PACKED_KINDS", "PACKED_ROWS_FROM", "SMALLEST", "packed",
           "packed_product", "prepared", "product", "unsigned", "usable"]
