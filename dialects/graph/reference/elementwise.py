"""Elementwise kernels: arithmetic, activations, unary math, comparisons, logical ops,
Where, Cast."""

from __future__ import annotations

import functools
import math

import numpy as np

from ._common import (
    ONNX_DTYPES,
    SMALL_FLOATS,
    choice_attr,
    f_attr,
    float_compute_dtype,
    i_attr,
    kernel,
    kernels,
    onnx_dtype,
    op_error,
    opt,
    req,
    s_attr,
    same_dtype,
    unsupported,
)

# -- binary arithmetic (multidirectional numpy broadcasting, result dtype = operand dtype) ----


def _binary(onnx_op: str, ufunc):
    def fn(inputs, attrs):
        a = req(onnx_op, inputs, 0, "A")
        b = req(onnx_op, inputs, 1, "B")
        same_dtype(onnx_op, a, b)
        with np.errstate(all="ignore"):
            out = ufunc(a, b)
        return [np.asarray(out, dtype=a.dtype)]

    return fn


kernels(_binary, {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply})


@kernel("Div")
def div(inputs, attrs):
    a = req("Div", inputs, 0, "A")
    b = req("Div", inputs, 1, "B")
    same_dtype("Div", a, b)
    with np.errstate(all="ignore"):
        if a.dtype.kind == "u":
            out = np.floor_divide(a, b)
        elif a.dtype.kind == "i":
            # Integer division truncates toward zero (C semantics), not numpy's floor.
            q = np.floor_divide(a, b)
            fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
            out = q + fix.astype(q.dtype)
        else:
            out = np.true_divide(a, b)
    return [np.asarray(out, dtype=a.dtype)]


def cube_or_square(exponent, rank: int) -> bool:
    """Whether Pow's exponent is one number, 2 or 3, that leaves the base's shape as it is."""
    return exponent.size == 1 and exponent.ndim <= rank and exponent.dtype.kind in "iuf" \
        and float(exponent.reshape(-1)[0]) in (2.0, 3.0)


@kernel("Pow")
def pow_(inputs, attrs):
    """Pow: the result has the base's element type; the exponent may have another type."""
    a = req("Pow", inputs, 0, "X")
    b = req("Pow", inputs, 1, "Y")
    with np.errstate(all="ignore"):
        if a.dtype.kind == "f" and cube_or_square(b, a.ndim):
            # onnxruntime's: x * x, x * x * x in the base's type (np.power's cube can be
            # an ulp away, and is ~100x slower)
            out = a * a if float(b.reshape(-1)[0]) == 2 else a * a * a
        elif a.dtype.kind in "iu" and b.dtype.kind in "iu" and not (b < 0).any():
            out = np.power(a.astype(np.int64), b.astype(np.int64))
        elif a.dtype.kind in "iu":
            # negative integer exponents: pow in double, truncated (C++ static_cast semantics)
            out = np.trunc(np.power(a.astype(np.float64), b.astype(np.float64)))
        elif a.dtype.kind == "f" and a.dtype == b.dtype:
            out = np.power(a, b)
        else:
            out = np.power(a.astype(np.float64), b.astype(np.float64))
    return [np.asarray(out).astype(a.dtype)]


@kernel("Mod")
def mod(inputs, attrs):
    """Mod: fmod=0 takes the sign of the divisor (numpy's mod, Python's %), fmod=1 the sign
    of the dividend (C fmod). Integer division by zero gives 0."""
    a = req("Mod", inputs, 0, "A")
    b = req("Mod", inputs, 1, "B")
    same_dtype("Mod", a, b)
    fmod = i_attr(attrs, "fmod", 0)
    if fmod not in (0, 1):
        raise unsupported("Mod", "fmod", fmod, (0, 1))
    with np.errstate(all="ignore"):
        out = np.fmod(a, b) if fmod else np.mod(a, b)
    return [np.asarray(out, dtype=a.dtype)]


def _variadic(onnx_op: str, ufunc):
    def fn(inputs, attrs):
        xs = [np.asarray(x) for x in inputs if x is not None]
        if not xs:
            raise op_error(onnx_op, "needs at least one operand")
        for x in xs[1:]:
            same_dtype(onnx_op, xs[0], x)
        out = functools.reduce(ufunc, xs)
        return [np.array(out, dtype=xs[0].dtype)]

    return fn


kernels(_variadic, {"Max": np.maximum, "Min": np.minimum, "Sum": np.add})


@kernel("Mean")
def mean(inputs, attrs):
    """Mean: the broadcast sum divided by the operand count (float16 sums in float32)."""
    xs = [np.asarray(x) for x in inputs if x is not None]
    if not xs:
        raise op_error("Mean", "needs at least one operand")
    for x in xs[1:]:
        same_dtype("Mean", xs[0], x)
    cdt = float_compute_dtype(xs[0].dtype)
    with np.errstate(all="ignore"):
        total = functools.reduce(np.add, [x.astype(cdt, copy=False) for x in xs])
        out = np.asarray(total / np.asarray(len(xs), dtype=cdt))
    return [out.astype(xs[0].dtype)]

# -- activations -------------------------------------------------------------------------


def _scalar(x: np.ndarray, v: float):
    return np.asarray(v, dtype=x.dtype)


@kernel("Relu")
def relu(inputs, attrs):
    x = req("Relu", inputs, 0, "X")
    return [np.maximum(x, _scalar(x, 0))]


@kernel("LeakyRelu")
def leaky_relu(inputs, attrs):
    x = req("LeakyRelu", inputs, 0, "X")
    alpha = _scalar(x, f_attr(attrs, "alpha", 0.01))
    return [np.where(x < 0, x * alpha, x).astype(x.dtype, copy=False)]


@kernel("Clip")
def clip(inputs, attrs):
    """Clip: min/max are optional scalar operands (opset >= 11) or attributes (opset 6).
    When min > max every element becomes max (min is applied first)."""
    x = req("Clip", inputs, 0, "input")
    lo = opt(inputs, 1)
    hi = opt(inputs, 2)
    if lo is None and "min" in attrs:
        lo = attrs["min"]
    if hi is None and "max" in attrs:
        hi = attrs["max"]
    out = x
    if lo is not None and np.size(lo):
        out = np.maximum(out, np.asarray(lo, dtype=x.dtype).reshape(()))
    if hi is not None and np.size(hi):
        out = np.minimum(out, np.asarray(hi, dtype=x.dtype).reshape(()))
    return [np.array(out, dtype=x.dtype)]


@kernel("Sigmoid")
def sigmoid(inputs, attrs):
    x = req("Sigmoid", inputs, 0, "X")
    with np.errstate(over="ignore"):
        e = np.exp(-np.abs(x))
        out = np.where(x >= 0, 1 / (1 + e), e / (1 + e))
    return [out.astype(x.dtype, copy=False)]


@kernel("HardSigmoid")
def hard_sigmoid(inputs, attrs):
    x = req("HardSigmoid", inputs, 0, "X")
    alpha = _scalar(x, f_attr(attrs, "alpha", 0.2))
    beta = _scalar(x, f_attr(attrs, "beta", 0.5))
    out = np.clip(x * alpha + beta, _scalar(x, 0), _scalar(x, 1))
    return [out.astype(x.dtype, copy=False)]


@kernel("HardSwish")
def hard_swish(inputs, attrs):
    x = req("HardSwish", inputs, 0, "X")
    gate = np.clip(x * _scalar(x, 1 / 6) + _scalar(x, 0.5), _scalar(x, 0), _scalar(x, 1))
    return [(x * gate).astype(x.dtype, copy=False)]


def _float_input(onnx_op: str, inputs) -> tuple[np.ndarray, np.ndarray]:
    """The float operand X and X in its compute dtype (float16 computes in float32)."""
    x = req(onnx_op, inputs, 0, "X")
    if x.dtype.kind != "f" and x.dtype not in SMALL_FLOATS:
        raise op_error(onnx_op, f"unsupported element type {x.dtype}")
    return x, x.astype(float_compute_dtype(x.dtype), copy=False)


@kernel("Elu")
def elu(inputs, attrs):
    """Elu: x for x >= 0, alpha * (exp(x) - 1) below."""
    x, xc = _float_input("Elu", inputs)
    alpha = _scalar(xc, f_attr(attrs, "alpha", 1.0))
    with np.errstate(all="ignore"):
        out = np.where(xc < 0, np.expm1(np.minimum(xc, 0)) * alpha, xc)
    return [out.astype(x.dtype, copy=False)]


@kernel("Selu")
def selu(inputs, attrs):
    """Selu: gamma * x for x > 0, gamma * alpha * (exp(x) - 1) otherwise."""
    x, xc = _float_input("Selu", inputs)
    alpha = _scalar(xc, f_attr(attrs, "alpha", 1.67326319217681884765625))
    gamma = _scalar(xc, f_attr(attrs, "gamma", 1.05070102214813232421875))
    with np.errstate(all="ignore"):
        out = np.where(xc > 0, xc, np.expm1(np.minimum(xc, 0)) * alpha) * gamma
    return [out.astype(x.dtype, copy=False)]


@kernel("Softplus")
def softplus(inputs, attrs):
    """Softplus: log(1 + exp(x)), as logaddexp(0, x) (no overflow for large x)."""
    x, xc = _float_input("Softplus", inputs)
    return [np.logaddexp(_scalar(xc, 0), xc).astype(x.dtype, copy=False)]


@kernel("Softsign")
def softsign(inputs, attrs):
    x, xc = _float_input("Softsign", inputs)
    with np.errstate(all="ignore"):
        out = xc / (_scalar(xc, 1) + np.abs(xc))
    return [out.astype(x.dtype, copy=False)]


_GELU_APPROXIMATIONS = ("none", "tanh")


@kernel("Gelu")
def gelu(inputs, attrs):
    """Gelu: x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt(2))) (approximate="none", libm's erf
    in double precision), or 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
    (approximate="tanh")."""
    x, _ = _float_input("Gelu", inputs)
    approximate = choice_attr("Gelu", attrs, "approximate", "none", _GELU_APPROXIMATIONS)
    xd = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if approximate == "tanh":
            inner = math.sqrt(2 / math.pi) * (xd + 0.044715 * xd * xd * xd)
            out = 0.5 * xd * (1 + np.tanh(inner))
        else:
            out = 0.5 * xd * (1 + _erf_f64(xd / math.sqrt(2)).astype(np.float64))
    return [np.asarray(out).astype(x.dtype)]


# -- unary math --------------------------------------------------------------------------


def _unary(onnx_op: str, ufunc):
    def fn(inputs, attrs):
        x = req(onnx_op, inputs, 0, "input")
        with np.errstate(all="ignore"):
            out = ufunc(x)
        return [np.asarray(out).astype(x.dtype, copy=False)]

    return fn


kernels(_unary, {
    "Tanh": np.tanh, "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt, "Neg": np.negative,
    "Abs": np.abs, "Sign": np.sign, "Floor": np.floor, "Ceil": np.ceil,
    "Round": np.round,  # half to even, as ONNX says
    "Sin": np.sin, "Cos": np.cos,
})


@kernel("Reciprocal")
def reciprocal(inputs, attrs):
    x, xc = _float_input("Reciprocal", inputs)
    with np.errstate(all="ignore"):
        out = _scalar(xc, 1) / xc
    return [out.astype(x.dtype, copy=False)]

_erf_f64 = np.frompyfunc(math.erf, 1, 1)


@kernel("Erf")
def erf(inputs, attrs):
    """Erf via libm's erf (math.erf) in double precision, rounded to the input type."""
    x = req("Erf", inputs, 0, "input")
    if x.dtype.kind != "f":
        raise op_error("Erf", f"unsupported element type {x.dtype}")
    out = _erf_f64(x.astype(np.float64)).astype(np.float64)
    return [np.asarray(out).astype(x.dtype)]


# -- comparisons, selection, conversion ----------------------------------------------------


def _compare(onnx_op: str, ufunc):
    def fn(inputs, attrs):
        a = req(onnx_op, inputs, 0, "A")
        b = req(onnx_op, inputs, 1, "B")
        same_dtype(onnx_op, a, b)
        return [np.asarray(ufunc(a, b), dtype=np.bool_)]

    return fn


kernels(_compare, {"Equal": np.equal, "Less": np.less, "Greater": np.greater,
                   "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal})


def _bool_operand(onnx_op: str, inputs, i: int, what: str) -> np.ndarray:
    x = req(onnx_op, inputs, i, what)
    if x.dtype != np.bool_:
        raise op_error(onnx_op, f"operand {what} must be bool, got {x.dtype}")
    return x


def _logical(onnx_op: str, ufunc):
    names = ("A", "B") if ufunc.nin == 2 else ("X",)  # ONNX's operand names

    def fn(inputs, attrs):
        operands = [_bool_operand(onnx_op, inputs, i, name) for i, name in enumerate(names)]
        return [np.asarray(ufunc(*operands), dtype=np.bool_)]

    return fn


kernels(_logical, {"And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
                   "Not": np.logical_not})


@kernel("Where")
def where(inputs, attrs):
    cond = req("Where", inputs, 0, "condition")
    x = req("Where", inputs, 1, "X")
    y = req("Where", inputs, 2, "Y")
    same_dtype("Where", x, y)
    return [np.where(cond.astype(np.bool_, copy=False), x, y).astype(x.dtype, copy=False)]


_FLOAT8 = (17, 18, 19, 20)


def _to_float8e8m0(x, saturate: bool, round_mode: str):
    """The power-of-two exponent of each float32 (the only bits float8e8m0 has), rounded
    as `round_mode` says; NaN and infinities become the NaN pattern 0xFF."""
    import ml_dtypes

    bits = np.asarray(x, np.float32).view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.uint16)
    special = exponent == 0xFF
    if round_mode == "nearest":
        guard = (bits & 0x400000) > 0
        rest = (bits & 0x3FFFFF) > 0
        up = guard & (rest | (exponent > 0) | ((bits & 0x200000) > 0))
    elif round_mode == "up":
        up = (bits & 0x7FFFFF) > 0
    elif round_mode == "down":
        up = np.zeros(bits.shape, bool)
    else:
        raise unsupported("Cast", "round_mode", round_mode, ("up", "down", "nearest"))
    up &= ~special
    if saturate:
        up &= exponent != 0xFE
    out = np.where(special, 0xFF, exponent + up).astype(np.uint8)
    return out.view(ml_dtypes.float8_e8m0fnu)


def cast_to(x: np.ndarray, to: int, saturate: bool = True, round_mode: str = "up"):
    """`x` as ONNX element type `to`: floats to integers truncate toward zero, anything to
    bool is `!= 0`; to a float8 type with `saturate`, out-of-range values (infinities
    too) become the type's largest finite value, else NaN/inf."""
    import ml_dtypes

    dtype = onnx_dtype("Cast", to)
    with np.errstate(all="ignore"):
        if dtype == np.bool_:
            return x.astype(np.float64) != 0 if x.dtype.isbuiltin != 1 else x != 0
        if to == 24:
            return _to_float8e8m0(x.astype(np.float32), saturate, round_mode)
        if to in _FLOAT8 and saturate:
            info = ml_dtypes.finfo(dtype)
            wide = x.astype(np.float32)
            return np.clip(wide, float(info.min), float(info.max)).astype(dtype)
        if x.dtype.isbuiltin != 1 and dtype.kind in "iu":   # ml_dtypes float -> integer
            return x.astype(np.float32).astype(dtype)
        return x.astype(dtype)


@kernel("Cast")
def cast(inputs, attrs):
    x = req("Cast", inputs, 0, "input")
    if "to" not in attrs:
        raise op_error("Cast", "missing required attribute 'to'")
    return [cast_to(x, i_attr(attrs, "to", 0), bool(i_attr(attrs, "saturate", 1)),
                    s_attr(attrs, "round_mode", "up"))]


@kernel("CastLike")
def cast_like(inputs, attrs):
    x = req("CastLike", inputs, 0, "input")
    target = req("CastLike", inputs, 1, "target_type")
    code = next(c for c, dtype in ONNX_DTYPES.items() if dtype == target.dtype)
    return [cast_to(x, code,
                    bool(i_attr(attrs, "saturate", 1)), s_attr(attrs, "round_mode", "up"))]
