"""Reference kernels of ops_quant.py."""

from __future__ import annotations

import numpy as np

from palimpsest.dialects.graph.naming import CONTRIB_TO_GRAPH

from ._common import (KERNELS, ONNX_DTYPES, i_attr, is_constant, kernel, norm_axis, op_error,
                      opt, req)
from .elementwise import cast_to
from .nn import conv

_INTEGER_RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127),
                   np.dtype(np.uint16): (0, 65535), np.dtype(np.int16): (-32768, 32767),
                   ONNX_DTYPES[21]: (0, 15), ONNX_DTYPES[22]: (-8, 7),
                   ONNX_DTYPES[25]: (0, 3), ONNX_DTYPES[26]: (-2, 1)}
_DTYPE_CODES = {dtype: code for code, dtype in ONNX_DTYPES.items()}


def _along(param, x, axis, block_size, onnx_op):
    """A scale or zero point broadcast against x: per tensor (one element), per axis
    (1-D along `axis`) or blocked (x's shape with `axis` divided into blocks)."""
    param = np.asarray(param)
    if param.size == 1:
        return param.reshape(())
    axis = norm_axis(onnx_op, axis, x.ndim)
    if block_size:
        expanded = np.repeat(param, block_size, axis=axis)
        return np.take(expanded, np.arange(x.shape[axis]), axis=axis)
    if param.ndim != 1 or param.shape[0] != x.shape[axis]:
        raise op_error(onnx_op, f"a scale of shape {param.shape} fits neither per-tensor nor "
                                f"per-axis ({x.shape[axis]} along axis {axis}) quantization")
    shape = [1] * x.ndim
    shape[axis] = -1
    return param.reshape(shape)


def _wide(x):
    return x.astype(np.float64) if x.dtype.isbuiltin != 1 or x.dtype.kind != "f" else x


# integer weights centred (their zero point subtracted), per read-only array (a constant:
# the same object every run, so it is converted once, not on every run):
# (id(values), id(zero), zero_shape, contract) -> Centred, dropped with the array
_CENTRED: dict = {}


class Centred:
    """An integer weight less its zero point, as floats that make its integer products
    exact through BLAS: `narrow` (float32) and `wide` (float64), each made when first
    asked (a product that converts the 8-bit weight itself a block at a time never
    makes either: t5's 75 MB of float32 copies), and `bound`, the largest sum of
    |weight - zero| over the contracted axes. A product with an operand of magnitude at
    most m sums integers below m * bound, every partial sum included: exact in float32
    when that is below 2**24 (`exact_narrow`), in float64 below 2**53 (any 8-bit
    product shorter than 10**11)."""

    __slots__ = ("bound", "_narrow", "_wide", "_layouts", "_source", "ref", "__weakref__")

    def __init__(self, values, zero, zero_shape, contract):
        # the bound from integers: an 8-bit weight less its zero point fits int16 (half
        # the transient of int32, which a 16-bit one needs)
        wide = np.int16 if values.dtype.itemsize == 1 else np.int32
        centred = values.astype(wide)
        if zero is not None:
            centred -= zero.astype(wide).reshape(zero_shape)
        self.bound = float(np.abs(centred).sum(axis=contract, dtype=np.int64).max()) \
            if centred.size else 0.0
        self._narrow = self._wide = None
        # what the floats are made from: the arrays themselves, or (a cached constant's,
        # which `centred` sets `ref` for) the weak reference, so that the cache entry
        # does not keep the constant alive
        self._source = (values, zero, zero_shape)
        self._layouts: dict = {}

    def _made(self, dtype):
        values, zero, zero_shape = self._source
        if values is None:
            values = self.ref()
        made = values.astype(np.float64)
        if zero is not None:
            made -= zero.astype(np.float64).reshape(zero_shape)
        return made.astype(dtype, copy=False)

    def exact_narrow(self, largest) -> bool:
        return largest * self.bound < 2.0 ** 24

    def float_type(self, largest):
        """The float type whose products with an operand of magnitude <= `largest` are
        exact (no copy made)."""
        return np.float32 if self.exact_narrow(largest) else np.float64

    @property
    def narrow(self):
        if self._narrow is None:
            self._narrow = self._made(np.float32)
        return self._narrow

    @property
    def wide(self):
        if self._wide is None:
            self._wide = self._made(np.float64)
        return self._wide

    def floats(self, largest):
        """The copy whose products with an operand of magnitude <= `largest` are exact."""
        return self.narrow if self.exact_narrow(largest) else self.wide

    def layout(self, key, make):
        """make(): a backend's own arrangement of the weight (its 8-bit values in blocks,
        say), made at the first call with `key` and kept as long as this object (a
        constant's: made once)."""
        made = self._layouts.get(key)
        if made is None:
            made = self._layouts[key] = make()
        return made


def centred(values, zero=None, zero_shape=(), contract=(0,)) -> Centred:
    """`values` - `zero` (None, or `zero` reshaped to `zero_shape` to broadcast against
    `values`) as a `Centred` whose `bound` sums over the `contract` axes; kept while
    `values` lives when both arrays are read-only (constants)."""
    import weakref

    if not is_constant(values) or (zero is not None and not is_constant(zero)):
        return Centred(values, zero, zero_shape, contract)
    key = (id(values), id(zero), tuple(zero_shape), tuple(contract))
    entry = _CENTRED.get(key)
    if entry is not None and entry.ref() is values and entry._source[1] is zero:
        return entry
    entry = Centred(values, zero, zero_shape, contract)
    entry.ref = weakref.ref(values, lambda _, key=key: _CENTRED.pop(key, None))
    # its floats made from `ref`: the cache keeps no strong reference to the constant
    entry._source = (None,) + entry._source[1:]
    _CENTRED[key] = entry
    return entry


def quantize(value, scale, zero_point, dtype, saturate=True):
    """value / scale rounded half to even, plus the zero point, saturated to `dtype`."""
    scaled = value / scale
    if dtype in _INTEGER_RANGES:
        low, high = _INTEGER_RANGES[dtype]
        q = np.rint(scaled)
        if zero_point is not None:
            q = q + zero_point.astype(np.float64)
        return np.clip(q, low, high).astype(dtype)
    if zero_point is not None:
        scaled = scaled + zero_point.astype(np.float64)
    return cast_to(np.asarray(scaled, np.float32), _DTYPE_CODES[dtype], saturate)


@kernel("QuantizeLinear")
def quantize_linear(inputs, attrs):
    x = req("QuantizeLinear", inputs, 0, "x")
    scale, zero_point = req("QuantizeLinear", inputs, 1, "y_scale"), opt(inputs, 2)
    axis, block = i_attr(attrs, "axis", 1), i_attr(attrs, "block_size", 0)
    if zero_point is not None:
        dtype = zero_point.dtype
    elif i_attr(attrs, "output_dtype", 0):
        dtype = ONNX_DTYPES[i_attr(attrs, "output_dtype", 0)]
    else:
        dtype = np.dtype(np.uint8)
    precision = i_attr(attrs, "precision", 0)
    compute = ONNX_DTYPES[precision] if precision else (
        np.float32 if scale.dtype.isbuiltin != 1 else scale.dtype)
    s = _along(scale, x, axis, block, "QuantizeLinear").astype(compute)
    z = None if zero_point is None else _along(zero_point, x, axis, block, "QuantizeLinear")
    value = x.astype(compute) / s * 1   # in the scale's (or precision's) type, as ONNX says
    return [quantize(value.astype(np.float64), 1.0, z, dtype, bool(i_attr(attrs, "saturate", 1)))]


@kernel("DequantizeLinear")
def dequantize_linear(inputs, attrs):
    x = req("DequantizeLinear", inputs, 0, "x")
    scale, zero_point = req("DequantizeLinear", inputs, 1, "x_scale"), opt(inputs, 2)
    axis, block = i_attr(attrs, "axis", 1), i_attr(attrs, "block_size", 0)
    out = ONNX_DTYPES[i_attr(attrs, "output_dtype", 0)] if i_attr(attrs, "output_dtype", 0) \
        else scale.dtype
    value = _wide(x).astype(np.float64)
    if zero_point is not None:
        value = value - _wide(_along(zero_point, x, axis, block, "DequantizeLinear")).astype(
            np.float64)
    s = _along(scale, x, axis, block, "DequantizeLinear")
    compute = np.float32 if s.dtype.isbuiltin != 1 else s.dtype
    return [(value.astype(compute) * s.astype(compute)).astype(out)]


@kernel("DynamicQuantizeLinear", multi=True)
def dynamic_quantize_linear(inputs, attrs, num_results=None):
    """uint8 over [min(0, min x), max(0, max x)]; scale and zero point computed in float32,
    as ONNX's reference and onnxruntime do (in float64 the scale can differ by an ulp,
    and the model's quantized values with it)."""
    x = req("DynamicQuantizeLinear", inputs, 0, "x").astype(np.float32)
    low = np.minimum(np.float32(0), x.min()) if x.size else np.float32(0)
    high = np.maximum(np.float32(0), x.max()) if x.size else np.float32(0)
    scale = (high - low) / np.float32(255)
    zero = np.uint8(np.clip(np.rint(np.float32(0) - low / scale), 0, 255)) if scale else \
        np.uint8(0)
    y = quantize(x, scale, np.asarray(zero), np.dtype(np.uint8)) if scale else \
        np.zeros(x.shape, np.uint8)
    return [y, np.asarray(scale, np.float32), np.asarray(zero, np.uint8)][:num_results or 3]


def _dequantized(x, scale, zero_point, axis):
    """(x - zero point) * scale in float64; per-axis parameters along `axis`."""
    value = x.astype(np.float64)
    if zero_point is not None:
        value = value - _along(zero_point, x, axis, 0, "QLinear").astype(np.float64)
    return value * _along(scale, x, axis, 0, "QLinear").astype(np.float64)


@kernel("QLinearMatMul")
def qlinear_matmul(inputs, attrs):
    a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = (
        req("QLinearMatMul", inputs, i, n) for i, n in enumerate(
            ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale",
             "y_zero_point")))
    product = _dequantized(a, a_scale, a_zero, -2) @ _dequantized(b, b_scale, b_zero, -1)
    return [quantize(product, y_scale.astype(np.float64).reshape(-1)[0] if y_scale.size == 1
                     else y_scale.astype(np.float64), y_zero, y_zero.dtype)]


@kernel("MatMulInteger")
def matmul_integer(inputs, attrs):
    a, b = req("MatMulInteger", inputs, 0, "A"), req("MatMulInteger", inputs, 1, "B")
    a_zero, b_zero = opt(inputs, 2), opt(inputs, 3)
    # in float64 through BLAS: 8-bit products summed are exact there (below 2^53 for any
    # K under 10^11), where numpy's integer matmul has no BLAS and runs ~100x slower
    left = a.astype(np.float64) - (0 if a_zero is None else _along(
        a_zero, a, -2, 0, "MatMulInteger").astype(np.float64))
    right = b.astype(np.float64) - (0 if b_zero is None else _along(
        b_zero, b, -1, 0, "MatMulInteger").astype(np.float64))
    return [np.matmul(left, right).astype(np.int32)]


def matmul_integer_to_float(inputs, attrs, num_results=None):
    """com.microsoft MatMulIntegerToFloat as the chain it fuses computes it: the int32
    product (exact; MatMulInteger's kernel), cast to the scales' float type (rounded
    above 2**24 in float32), times a_scale · b_scale (multiplied first, in that type),
    plus the bias, each step rounded in that type."""
    what = "MatMulIntegerToFloat"
    a, b = req(what, inputs, 0, "A"), req(what, inputs, 1, "B")
    a_scale, b_scale = req(what, inputs, 2, "a_scale"), req(what, inputs, 3, "b_scale")
    a_zero, b_zero, bias = opt(inputs, 4), opt(inputs, 5), opt(inputs, 6)
    if a_scale.dtype != b_scale.dtype or a_scale.dtype.kind != "f" \
            or (bias is not None and bias.dtype != a_scale.dtype):
        raise op_error(what, f"the scales and the bias must be of one float type, got "
                             f"{a_scale.dtype}, {b_scale.dtype}"
                             + (f" and {bias.dtype}" if bias is not None else ""))
    product = matmul_integer([a, b, a_zero, b_zero], attrs)[0].astype(a_scale.dtype)
    y = np.multiply(product, np.multiply(a_scale, b_scale))
    if bias is not None:
        y = np.add(y, bias)
    return [y]


KERNELS[CONTRIB_TO_GRAPH[("com.microsoft", "MatMulIntegerToFloat")]] = matmul_integer_to_float


def _conv_attrs(attrs):
    return {k: v for k, v in attrs.items()
            if k in ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")}


@kernel("ConvInteger")
def conv_integer(inputs, attrs):
    x, w = req("ConvInteger", inputs, 0, "x"), req("ConvInteger", inputs, 1, "w")
    x_zero, w_zero = opt(inputs, 2), opt(inputs, 3)
    xv = x.astype(np.float64) - (0 if x_zero is None else float(np.asarray(x_zero).reshape(-1)[0]))
    wv = w.astype(np.float64) - (0 if w_zero is None else _along(
        w_zero, w, 0, 0, "ConvInteger").astype(np.float64))
    y = conv([xv, wv], _conv_attrs(attrs))[0]
    return [np.rint(y).astype(np.int32)]


@kernel("QLinearConv")
def qlinear_conv(inputs, attrs):
    x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero = (
        req("QLinearConv", inputs, i, "operand") for i in range(8))
    bias = opt(inputs, 8)
    xv = _dequantized(x, x_scale, x_zero, 1)
    wv = _dequantized(w, w_scale, w_zero, 0)
    y = conv([xv, wv], _conv_attrs(attrs))[0]
    if bias is not None:
        bias_scale = float(np.asarray(x_scale).reshape(-1)[0]) * np.asarray(
            w_scale, np.float64).reshape(-1)
        y = y + (bias.astype(np.float64) * bias_scale).reshape((1, -1) + (1,) * (y.ndim - 2))
    return [quantize(y, float(np.asarray(y_scale).reshape(-1)[0]), y_zero, y_zero.dtype)]
