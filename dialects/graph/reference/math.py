"""Reference kernels of ops_math.py: inverse and hyperbolic trigonometry, Celu, Mish,
Swish, Shrink, ThresholdedRelu, PRelu, IsInf/IsNaN, bitwise ops and BitShift."""

from __future__ import annotations

import numpy as np

from ._common import (
    ONNX_DTYPES, f_attr, i_attr, kernel, kernels, op_error, req, s_attr, same_dtype,
)
from .elementwise import _binary, _float_input, _scalar, _unary

kernels(_unary, {"Acos": np.arccos, "Acosh": np.arccosh, "Asin": np.arcsin,
                 "Asinh": np.arcsinh, "Atan": np.arctan, "Atanh": np.arctanh,
                 "Cosh": np.cosh, "Sinh": np.sinh, "Tan": np.tan})


@kernel("Celu")
def celu(inputs, attrs):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
    x, xc = _float_input("Celu", inputs)
    alpha = _scalar(xc, f_attr(attrs, "alpha", 1.0))
    with np.errstate(all="ignore"):
        out = np.maximum(xc, 0) + np.minimum(0, alpha * np.expm1(xc / alpha))
    return [out.astype(x.dtype, copy=False)]


@kernel("Mish")
def mish(inputs, attrs):
    """x * tanh(softplus(x))."""
    x, xc = _float_input("Mish", inputs)
    with np.errstate(all="ignore"):
        out = xc * np.tanh(np.logaddexp(_scalar(xc, 0), xc))
    return [out.astype(x.dtype, copy=False)]


@kernel("Swish")
def swish(inputs, attrs):
    """x * sigmoid(alpha * x)."""
    x, xc = _float_input("Swish", inputs)
    alpha = _scalar(xc, f_attr(attrs, "alpha", 1.0))
    with np.errstate(all="ignore"):
        out = xc / (1 + np.exp(-alpha * xc))
    return [out.astype(x.dtype, copy=False)]


@kernel("ThresholdedRelu")
def thresholded_relu(inputs, attrs):
    x = req("ThresholdedRelu", inputs, 0, "X")
    alpha = _scalar(x, f_attr(attrs, "alpha", 1.0))
    return [np.where(x > alpha, x, _scalar(x, 0)).astype(x.dtype, copy=False)]


@kernel("Shrink")
def shrink(inputs, attrs):
    """x - bias above lambd, x + bias below -lambd, 0 between (computed in float64 and
    cast back, as integer inputs are allowed)."""
    x = req("Shrink", inputs, 0, "input")
    bias, lambd = f_attr(attrs, "bias", 0.0), f_attr(attrs, "lambd", 0.5)
    xd = x.astype(np.float64)
    out = np.where(xd < -lambd, xd + bias, np.where(xd > lambd, xd - bias, 0.0))
    return [out.astype(x.dtype)]


@kernel("PRelu")
def prelu(inputs, attrs):
    x = req("PRelu", inputs, 0, "X")
    slope = req("PRelu", inputs, 1, "slope")
    same_dtype("PRelu", x, slope)
    return [np.where(x < 0, x * slope, x).astype(x.dtype, copy=False)]


@kernel("IsNaN")
def is_nan(inputs, attrs):
    return [np.isnan(req("IsNaN", inputs, 0, "X"))]


@kernel("IsInf")
def is_inf(inputs, attrs):
    x = req("IsInf", inputs, 0, "X")
    negative = i_attr(attrs, "detect_negative", 1)
    positive = i_attr(attrs, "detect_positive", 1)
    return [np.isinf(x) & (((x < 0) & bool(negative)) | ((x > 0) & bool(positive)))]


kernels(_binary, {"BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or,
                  "BitwiseXor": np.bitwise_xor})
kernels(_unary, {"BitwiseNot": np.invert})


@kernel("BitShift")
def bit_shift(inputs, attrs):
    """Logical left shifts, arithmetic right shifts (opset 28 allows signed types); a
    count below 0 or of the type's width or more leaves only the sign fill: -1 for a right
    shift of a negative X, else 0 (numpy would wrap the count)."""
    x = req("BitShift", inputs, 0, "X")
    y = req("BitShift", inputs, 1, "Y")
    direction = s_attr(attrs, "direction", "")
    if direction not in ("LEFT", "RIGHT"):
        raise op_error("BitShift", f"direction must be LEFT or RIGHT, got {direction!r}")
    x, y = np.broadcast_arrays(x, y)
    out_of_range = (y < 0) | (y >= x.dtype.itemsize * 8)
    count = np.where(out_of_range, 0, y)
    if direction == "RIGHT":
        out = np.right_shift(x, count.astype(x.dtype))
        fill = np.where(x < 0, -1, 0) if x.dtype.kind == "i" else 0
    else:
        unsigned = np.dtype(f"u{x.dtype.itemsize}")
        out = np.left_shift(x.view(unsigned), count.astype(unsigned)).view(x.dtype)
        fill = 0
    return [np.where(out_of_range, fill, out).astype(x.dtype)]


@kernel("BitCast")
def bit_cast(inputs, attrs):
    x = req("BitCast", inputs, 0, "input")
    target = ONNX_DTYPES[i_attr(attrs, "to", 0)]
    if target.itemsize != x.dtype.itemsize:
        raise op_error("BitCast", f"cannot reinterpret {x.dtype} as {target}")
    return [np.array(x, copy=True).view(target)]   # (ascontiguousarray makes a 0-d 1-d)
