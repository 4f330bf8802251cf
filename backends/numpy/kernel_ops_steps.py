"""The steps of fused elementwise chains and epilogues on numpy (kernel_ops_elementwise.py
runs them): each registers in `STEP_IMPLS` (kernel_ops.py) under the graph op it
computes, writing its out from its args with ufuncs and `out=`; those whose numpy calls
follow from their arrays alone also give them as calls (`STEP_CALLS`, `step_calls`), so a
recorded chain replays them with no step function between. The f32/f16 erf is tanh of an
odd polynomial, evaluated in float32 chunks; GELU, and from 16K float32 elements sigmoid,
swish and hard-swish, run on oneDNN's eltwise JIT."""

from __future__ import annotations

import math

import numpy as np

from palimpsest.backends import onednn_primitives
from palimpsest.backends.numpy.kernel_ops import CLIP, replay, step
from palimpsest.dialects.graph.reference.elementwise import cube_or_square
from palimpsest.dialects.kernel_elementwise import clip_bounds

# (value, dtype) -> a read-only 0-d array: a step's constants, made once (np.asarray took
# ~0.1 us of each of a hard-swish's four passes on a small tensor)
_CONSTS: dict = {}


def _const(value, dtype) -> np.ndarray:
    key = (value, dtype)
    try:
        array = _CONSTS.get(key)
    except TypeError:   # (an unhashable value)
        return np.asarray(value, dtype=dtype)
    if array is None:
        if len(_CONSTS) >= 1024:   # (NaN keys never match)
            _CONSTS.clear()
        array = _CONSTS[key] = np.asarray(value, dtype=dtype)
        array.flags.writeable = False
    return array


# A step writes `out` from `args` (numpy arrays; the chain value is `out` itself); it must
# be right when an arg is `out` (the same view): every ufunc reads element i before
# writing it, and multi-ufunc steps read their operand before overwriting `out`.

_UNARY = {"graph.neg": np.negative, "graph.abs": np.abs, "graph.exp": np.exp,
          "graph.log": np.log, "graph.sqrt": np.sqrt, "graph.tanh": np.tanh,
          "graph.sign": np.sign, "graph.floor": np.floor, "graph.ceil": np.ceil,
          "graph.round": np.round, "graph.sin": np.sin, "graph.cos": np.cos,
          "graph.reciprocal": np.reciprocal, "graph.acos": np.arccos,
          "graph.acosh": np.arccosh, "graph.asin": np.arcsin, "graph.asinh": np.arcsinh,
          "graph.atan": np.arctan, "graph.atanh": np.arctanh, "graph.cosh": np.cosh,
          "graph.sinh": np.sinh, "graph.tan": np.tan, "graph.bitwise_not": np.invert}


# Steps whose numpy calls follow from their arrays alone give them as calls
# (`STEP_CALLS`, for `step_calls`: a recorded chain replays them with no step function
# between); the step itself makes them.

def _unary_calls(name, args, out, props, scratch):
    return [(_UNARY[name], (args[0],), {"out": out})]   # (np.round: no ufunc)


def _relu_calls(name, args, out, props, scratch):
    if out.dtype.kind == "f":  # np.clip is 2x faster than np.maximum (NaN propagates alike)
        return [(CLIP, (args[0], _const(0, out.dtype), _const(np.inf, out.dtype), out), {})]
    return [(np.maximum, (args[0], _const(0, out.dtype), out), {})]


# From this many float32 elements a sigmoid, swish or hard-swish runs on oneDNN's JIT, in
# one pass where numpy makes four (1M elements: sigmoid 1.28 ms -> 0.32, hard-swish 1.16
# -> 0.21; 16K: 14 -> 9 us; below, the call's ~6 us cost more). The values: within 3e-7
# relative of float64's, NaN and infinities as numpy's; a result below ~1e-37 in
# magnitude (a sigmoid of x < -85) is 0
_ONEDNN_FROM = 1 << 14


def _onednn_calls(function: str, x, out, *parameters, smallest: int = _ONEDNN_FROM):
    """The step as one call of oneDNN's `function` (onednn_primitives.ELTWISE, with its
    alpha and beta as `parameters` where it has them) where it takes it: float32 `x`
    shaped like `out`, both contiguous, at least `smallest` elements, oneDNN at hand;
    else None."""
    if out.dtype != np.float32 or out.size < smallest or x.dtype != out.dtype \
            or x.shape != out.shape or not (x.flags.c_contiguous and out.flags.c_contiguous):
        return None
    function = onednn_primitives.eltwise(function, out.size, *parameters)
    return None if function is None else [(function, (x, out), {})]


def _sigmoid_calls(name, args, out, props, scratch):
    return _onednn_calls("logistic", args[0], out) or [
        (np.negative, (args[0], out), {}), (np.exp, (out, out), {}),
        (np.add, (out, _const(1, out.dtype), out), {}), (np.reciprocal, (out, out), {})]


def _swish_calls(name, args, out, props, scratch):
    alpha = props.get("alpha", 1.0)
    x = args[0]
    return _onednn_calls("swish", x, out, alpha) or [
        (np.multiply, (x, _const(-alpha, out.dtype), scratch), {}),
        (np.exp, (scratch, scratch), {}), (np.add, (scratch, _const(1, out.dtype), scratch), {}),
        (np.divide, (x, scratch, out), {})]


def _hard_swish_calls(name, args, out, props, scratch):
    x = args[0]
    return _onednn_calls("hardswish", x, out, 1 / 6, 0.5) or [
        (np.multiply, (x, _const(1 / 6, out.dtype), scratch), {}),
        (np.add, (scratch, _const(0.5, out.dtype), scratch), {}),
        (CLIP, (scratch, _const(0, out.dtype), _const(1, out.dtype), scratch), {}),
        (np.multiply, (x, scratch, out), {})]


@step(*_UNARY)
def _unary(name, args, out, props, scratch):
    replay(_unary_calls(name, args, out, props, scratch))


@step("graph.relu")
def _relu(name, args, out, props, scratch):
    replay(_relu_calls(name, args, out, props, scratch))


@step("graph.sigmoid")
def _sigmoid(name, args, out, props, scratch):
    replay(_sigmoid_calls(name, args, out, props, scratch))


@step("graph.erf")
def _erf(name, args, out, props, scratch):
    x = args[0]
    if (out.dtype in (np.float32, np.float16) and x.dtype == out.dtype and x.shape == out.shape
            and x.flags.c_contiguous and out.flags.c_contiguous):
        _erf_f32(x.reshape(-1), out.reshape(-1))
        return
    try:
        from scipy.special import erf
    except ImportError:  # the reference kernel (a temporary), copied in
        from palimpsest.dialects.graph.reference import KERNELS

        np.copyto(out, KERNELS["graph.erf"]([args[0]], {})[0])
        return
    erf(args[0], out=out)


# erf(x) = tanh(x * R(x^2)) on x clamped to [-4.5, 4.5], R of degree 6 (R(0) = 2 / sqrt(pi);
# fitted on [0, 4] to atanh(erf(x)) / x, each error weighted by how much it moves erf:
# (1 - erf^2) x; x R(x^2) grows on, 15.1 at 4.5, past numpy's f32 tanh's 1 at 10),
# evaluated in float32 in place in chunks of _ERF_CHUNK elements: 16 numpy passes where
# Eigen's rational x * P(x^2) / Q(x^2) (the OpenCL backend's pal_erf) takes 24, the
# passes being memory-bound (L2). Max abs error 1.7e-7 against float64 erf (the
# rational's 4.4e-7), relative 2.7e-7 on normal |x| < 0.5; erf is +-1 exactly from
# |x| = 4.07 on (0.99999994 from 3.82: numpy's f32 tanh below 10), NaN stays NaN and
# erf(-0) = -0. A/B in one process (1 thread, f32, medians): 2000 elements 14.9 -> 10.6
# us, 12800 40.1 -> 30.8, 46080 121 -> 84, 102400 250 -> 168, 307200 804 -> 608 (in
# chunks of 65536; in the PP-OCR models chunks of 32768 and 65536 measure the same, and
# 16384 no slower than 1%). (Powers of x^2 as a matrix, P and Q by one GEMM, measured
# slower in a model.) Temporaries: two chunk-sized float32 vectors (256 KiB), a third
# for an f16 out.
_ERF_R = (1.1283791670955126, 0.10276880761271524, -0.0001903034161549411,
          -0.0006214335551735278, 8.830465582597384e-05, -5.779394243399207e-06,
          1.4815528767135577e-07)
_ERF_R32 = tuple(np.float32(c) for c in reversed(_ERF_R))   # x^12's first
_ERF_CHUNK = 32768


def _erf_f32(x: np.ndarray, out: np.ndarray) -> None:
    """erf of flat `x` into flat `out` (may be the same memory)."""
    f32 = np.float32
    size = x.shape[0]
    chunk = min(size, _ERF_CHUNK)
    v = np.empty(chunk, f32)
    x2 = np.empty(chunk, f32)
    p = None if out.dtype == f32 else np.empty(chunk, f32)
    lo, hi = f32(-4.5), f32(4.5)
    r0, r1, *rs = _ERF_R32
    for start in range(0, size, chunk):
        stop = min(start + chunk, size)
        n = stop - start
        if n != v.shape[0]:
            v, x2 = v[:n], x2[:n]
            p = p if p is None else p[:n]
        CLIP(x[start:stop], lo, hi, out=v)  # read before `out` (maybe x) is written
        acc = out[start:stop] if p is None else p
        np.multiply(v, v, out=x2)
        np.multiply(x2, r0, out=acc)
        np.add(acc, r1, out=acc)
        for c in rs:
            np.multiply(acc, x2, out=acc)
            np.add(acc, c, out=acc)
        np.multiply(acc, v, out=acc)
        np.tanh(acc, out=acc)
        if p is not None:
            np.copyto(out[start:stop], acc, casting="same_kind")


@step("graph.softplus")
def _softplus(name, args, out, props, scratch):
    np.logaddexp(_const(0, out.dtype), args[0], out=out)


@step("graph.softsign")
def _softsign(name, args, out, props, scratch):
    x = args[0]
    np.abs(x, out=scratch)
    np.add(scratch, _const(1, out.dtype), out=scratch)
    np.divide(x, scratch, out=out)


@step("graph.elu", "graph.selu")
def _elu(name, args, out, props, scratch):
    # elu: where(x < 0, alpha * expm1(x), x) == max(x, 0) + alpha * expm1(min(x, 0));
    # selu: gamma times that (its alpha and gamma defaults are SELU's constants)
    x = args[0]
    zero = _const(0, out.dtype)
    selu = name == "graph.selu"
    alpha = props.get("alpha", 1.67326319217681884765625 if selu else 1.0)
    np.minimum(x, zero, out=scratch)
    np.expm1(scratch, out=scratch)
    np.multiply(scratch, _const(alpha, out.dtype), out=scratch)
    np.maximum(x, zero, out=out)
    np.add(out, scratch, out=out)
    if selu:
        np.multiply(out, _const(props.get("gamma", 1.05070102214813232421875), out.dtype),
                    out=out)


@step("graph.hard_sigmoid")
def _hard_sigmoid(name, args, out, props, scratch):
    np.multiply(args[0], _const(props.get("alpha", 0.2), out.dtype), out=out)
    np.add(out, _const(props.get("beta", 0.5), out.dtype), out=out)
    CLIP(out, _const(0, out.dtype), _const(1, out.dtype), out=out)


@step("graph.hard_swish")
def _hard_swish(name, args, out, props, scratch):
    replay(_hard_swish_calls(name, args, out, props, scratch))


# From this many float32 elements a GELU runs on oneDNN's JIT (one pass; its erf within
# 1.1e-6 of float64's): 76800 elements 35 us against numpy's 200 (the erf's 16 passes)
_GELU_ONEDNN_FROM = 4096
_GELU_ONEDNN_RANGE = 1e30


@step("graph.gelu")
def _gelu(name, args, out, props, scratch):
    # none: 0.5 * x * (1 + erf(x / sqrt(2))); tanh: 0.5 * x * (1 + tanh(sqrt(2 / pi) *
    # (x + 0.044715 * x^3))); the factor in scratch, x read before out is written
    x = args[0]
    dtype = out.dtype
    tanh = props.get("approximate", "none") == "tanh"
    calls = _onednn_calls("gelu_tanh" if tanh else "gelu_erf", x, out,
                          smallest=_GELU_ONEDNN_FROM)
    # (oneDNN's GELU of an infinity is NaN and of 3e38 inf: such x, and NaNs, which fail
    # both comparisons, take the passes below)
    if calls is not None and -_GELU_ONEDNN_RANGE < x.min() and x.max() < _GELU_ONEDNN_RANGE:
        replay(calls)
        return
    if tanh:
        np.multiply(x, x, out=scratch)
        np.multiply(scratch, _const(0.044715, dtype), out=scratch)
        np.add(scratch, _const(1, dtype), out=scratch)
        np.multiply(scratch, x, out=scratch)
        np.multiply(scratch, _const(math.sqrt(2 / math.pi), dtype), out=scratch)
        np.tanh(scratch, out=scratch)
    else:
        np.multiply(x, _const(1 / math.sqrt(2), dtype), out=scratch)
        _erf("graph.erf", [scratch], scratch, {}, None)
    np.add(scratch, _const(1, dtype), out=scratch)
    np.multiply(scratch, _const(0.5, dtype), out=scratch)
    np.multiply(x, scratch, out=out)


@step("graph.leaky_relu")
def _leaky_relu(name, args, out, props, scratch):
    # where(x < 0, alpha * x, x) == max(x, 0) + alpha * min(x, 0)
    x = args[0]
    zero = _const(0, out.dtype)
    np.minimum(x, zero, out=scratch)
    np.multiply(scratch, _const(props.get("alpha", 0.01), out.dtype), out=scratch)
    np.maximum(x, zero, out=out)
    np.add(out, scratch, out=out)


@step("graph.celu")
def _celu(name, args, out, props, scratch):
    # max(x, 0) + min(0, alpha * expm1(x / alpha))
    x = args[0]
    alpha = _const(props.get("alpha", 1.0), out.dtype)
    np.divide(x, alpha, out=scratch)
    np.expm1(scratch, out=scratch)
    np.multiply(scratch, alpha, out=scratch)
    np.minimum(scratch, _const(0, out.dtype), out=scratch)
    np.maximum(x, _const(0, out.dtype), out=out)
    np.add(out, scratch, out=out)


@step("graph.mish")
def _mish(name, args, out, props, scratch):
    x = args[0]
    np.logaddexp(_const(0, out.dtype), x, out=scratch)
    np.tanh(scratch, out=scratch)
    np.multiply(x, scratch, out=out)


@step("graph.swish")
def _swish(name, args, out, props, scratch):
    replay(_swish_calls(name, args, out, props, scratch))


@step("graph.thresholded_relu")
def _thresholded_relu(name, args, out, props, scratch):
    below = args[0] <= _const(props.get("alpha", 1.0), out.dtype)   # a bool temporary
    np.copyto(out, args[0])
    out[below] = 0


@step("graph.shrink")
def _shrink(name, args, out, props, scratch):
    x = args[0]
    bias = _const(props.get("bias", 0.0), out.dtype)
    lambd = _const(props.get("lambd", 0.5), out.dtype)
    low, high = x < -lambd, x > lambd          # bool temporaries, read before out is written
    np.copyto(out, x)
    out[~(low | high)] = 0
    np.add(out, bias, out=out, where=low)
    np.subtract(out, bias, out=out, where=high)


@step("graph.prelu")
def _prelu(name, args, out, props, scratch):
    # where(x < 0, slope * x, x) == max(x, 0) + slope * min(x, 0)
    x, slope = args
    zero = _const(0, out.dtype)
    np.minimum(x, zero, out=scratch)
    np.multiply(scratch, slope, out=scratch)
    np.maximum(x, zero, out=out)
    np.add(out, scratch, out=out)


_BINARY = {"graph.add": np.add, "graph.sub": np.subtract, "graph.mul": np.multiply,
           "graph.div": np.true_divide, "graph.pow": np.power,
           "graph.bitwise_and": np.bitwise_and, "graph.bitwise_or": np.bitwise_or,
           "graph.bitwise_xor": np.bitwise_xor}


def _binary_calls(name, args, out, props, scratch):
    if name == "graph.pow":   # (its square and cube: the step's own checks)
        return None
    return [(_BINARY[name], (args[0], args[1], out), {})]


@step(*_BINARY)
def _binary(name, args, out, props, scratch):
    x, y = args
    if name == "graph.pow" and out.dtype.kind == "f" and cube_or_square(y, out.ndim):
        # as the reference: x * x (* x), onnxruntime's square and cube
        square = out if not np.may_share_memory(out, x) else np.empty_like(out)
        np.multiply(x, x, out=square)
        if float(y.reshape(-1)[0]) == 3:
            np.multiply(square, x, out=out)
        elif square is not out:
            np.copyto(out, square)
        return
    _BINARY[name](x, y, out=out)   # (pow's general case; the others: _binary_calls)


_VARIADIC = {"graph.max": np.maximum, "graph.min": np.minimum}


@step(*_VARIADIC)
def _variadic(name, args, out, props, scratch):
    ufunc = _VARIADIC[name]
    # the chain value (out) first: the others never overwrite it before it is read
    ordered = [a for a in args if a is out] + [a for a in args if a is not out]
    if len(ordered) == 1:
        if ordered[0] is not out:
            np.copyto(out, ordered[0])
        return
    ufunc(ordered[0], ordered[1], out=out)
    for a in ordered[2:]:
        ufunc(out, a, out=out)


@step("graph.clip")
def _clip(name, args, out, props, scratch):
    lo, hi = clip_bounds(props, list(args[1:]))
    source = args[0]
    if lo is not None and hi is not None and out.dtype.kind == "f":
        CLIP(source, lo.reshape(()), hi.reshape(()), out=out)  # one pass, SIMD
        return
    if lo is not None:
        np.maximum(source, lo.reshape(()), out=out)
        source = out
    if hi is not None:
        np.minimum(source, hi.reshape(()), out=out)
        source = out
    if source is not out:
        np.copyto(out, source)


@step("graph.batch_norm")
def _batch_norm(name, args, out, props, scratch):
    x, scale, bias, mean, var = args
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    eps = _const(props.get("epsilon", 1e-5), out.dtype)
    np.subtract(x, mean.reshape(shape), out=out)
    np.divide(out, np.sqrt(var.reshape(shape) + eps), out=out)  # a per-channel temporary
    np.multiply(out, scale.reshape(shape), out=out)
    np.add(out, bias.reshape(shape), out=out)


def step_calls(run, name: str, args: list, out, props, scratch) -> list:
    """A step as calls to record ([(fn, args, kwargs)]): the numpy calls it makes, with
    its arrays bound (STEP_CALLS), so a replay makes them with no step function between
    (its checks and constants made once); else the one call of the step."""
    calls = STEP_CALLS.get(name)
    made = calls(name, args, out, props, scratch) if calls is not None else None
    return made if made is not None else [(run, (name, args, out, props, scratch), {})]


# graph op -> calls(name, args, out, props, scratch) giving `step_calls` its calls (the
# step's numpy calls, as the step makes them), or None where the step decides at run time
STEP_CALLS: dict = {**{name: _unary_calls for name in _UNARY}, "graph.relu": _relu_calls,
                    "graph.sigmoid": _sigmoid_calls, "graph.swish": _swish_calls,
                    "graph.hard_swish": _hard_swish_calls,
                    **{name: _binary_calls for name in _BINARY}}
