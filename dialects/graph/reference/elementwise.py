"""Elementwise kernels: arithmetic, activations, unary math, comparisons, Where, Cast."""

from __future__ import annotations

import functools
import math

import numpy as np

from ._common import f_attr, i_attr, kernel, onnx_dtype, op_error, opt, req

# -- binary arithmetic (multidirectional numpy broadcasting, result dtype = operand dtype) ----


def _same_dtype(onnx_op: str, a: np.ndarray, b: np.ndarray) -> None:
    if a.dtype != b.dtype:
        raise op_error(onnx_op, f"operand element types differ ({a.dtype} vs {b.dtype})")


def _binary(onnx_op: str, ufunc):
    def fn(inputs, attrs):
        a = req(onnx_op, inputs, 0, "A")
        b = req(onnx_op, inputs, 1, "B")
        _same_dtype(onnx_op, a, b)
        with np.errstate(all="ignore"):
            out = ufunc(a, b)
        return [np.asarray(out, dtype=a.dtype)]

    fn.__name__ = onnx_op.lower()
    return fn


kernel("Add")(_binary("Add", np.add))
kernel("Sub")(_binary("Sub", np.subtract))
kernel("Mul")(_binary("Mul", np.multiply))


@kernel("Div")
def div(inputs, attrs):
    a = req("Div", inputs, 0, "A")
    b = req("Div", inputs, 1, "B")
    _same_dtype("Div", a, b)
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


@kernel("Pow")
def pow_(inputs, attrs):
    """Pow: the result has the base's element type; the exponent may have another type."""
    a = req("Pow", inputs, 0, "X")
    b = req("Pow", inputs, 1, "Y")
    with np.errstate(all="ignore"):
        if a.dtype.kind in "iu" and b.dtype.kind in "iu" and not (b < 0).any():
            out = np.power(a.astype(np.int64), b.astype(np.int64))
        elif a.dtype.kind in "iu":
            # negative integer exponents: pow in double, truncated (C++ static_cast semantics)
            out = np.trunc(np.power(a.astype(np.float64), b.astype(np.float64)))
        elif a.dtype.kind == "f" and a.dtype == b.dtype:
            out = np.power(a, b)
        else:
            out = np.power(a.astype(np.float64), b.astype(np.float64))
    return [np.asarray(out).astype(a.dtype)]


def _variadic(onnx_op: str, ufunc):
    def fn(inputs, attrs):
        xs = [np.asarray(x) for x in inputs if x is not None]
        if not xs:
            raise op_error(onnx_op, "needs at least one operand")
        for x in xs[1:]:
            _same_dtype(onnx_op, xs[0], x)
        out = functools.reduce(ufunc, xs)
        return [np.array(out, dtype=xs[0].dtype)]

    fn.__name__ = onnx_op.lower()
    return fn


kernel("Max")(_variadic("Max", np.maximum))
kernel("Min")(_variadic("Min", np.minimum))

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


# -- unary math --------------------------------------------------------------------------


def _unary(onnx_op: str, ufunc):
    def fn(inputs, attrs):
        x = req(onnx_op, inputs, 0, "input")
        with np.errstate(all="ignore"):
            out = ufunc(x)
        return [np.asarray(out).astype(x.dtype, copy=False)]

    fn.__name__ = onnx_op.lower()
    return fn


kernel("Tanh")(_unary("Tanh", np.tanh))
kernel("Exp")(_unary("Exp", np.exp))
kernel("Log")(_unary("Log", np.log))
kernel("Sqrt")(_unary("Sqrt", np.sqrt))
kernel("Neg")(_unary("Neg", np.negative))
kernel("Abs")(_unary("Abs", np.abs))

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
        _same_dtype(onnx_op, a, b)
        return [np.asarray(ufunc(a, b), dtype=np.bool_)]

    fn.__name__ = onnx_op.lower()
    return fn


kernel("Equal")(_compare("Equal", np.equal))
kernel("Less")(_compare("Less", np.less))
kernel("Greater")(_compare("Greater", np.greater))


@kernel("Where")
def where(inputs, attrs):
    cond = req("Where", inputs, 0, "condition")
    x = req("Where", inputs, 1, "X")
    y = req("Where", inputs, 2, "Y")
    _same_dtype("Where", x, y)
    return [np.where(cond.astype(np.bool_, copy=False), x, y).astype(x.dtype, copy=False)]


@kernel("Cast")
def cast(inputs, attrs):
    """Cast to the ONNX TensorProto element type `to` (FLOAT=1 ... UINT64=13; no STRING,
    BFLOAT16, FLOAT8*, INT4/UINT4, FLOAT4). Float -> integer truncates toward zero;
    anything -> bool is `!= 0`. `saturate` only concerns float8 targets and is ignored."""
    x = req("Cast", inputs, 0, "input")
    if "to" not in attrs:
        raise op_error("Cast", "missing required attribute 'to'")
    to = onnx_dtype("Cast", i_attr(attrs, "to", 0))
    if x.dtype.kind not in "biuf":
        raise op_error("Cast", f"unsupported input element type {x.dtype}")
    with np.errstate(all="ignore"):
        if to == np.bool_:
            return [x != 0]
        return [x.astype(to)]
