"""Reductions (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
ReduceSumSquare, ReduceLogSumExp) and ArgMax / ArgMin.

`axes` is an operand since opset 18 (ReduceSum: 13) and an attribute before; the operand is
read when present, otherwise the attribute. No axes (or an empty list) reduces every axis,
unless noop_with_empty_axes=1: then nothing is reduced, but the elementwise steps of the
composite reductions still apply (ReduceL1 gives |x|, ReduceL2 sqrt(x * x), ReduceSumSquare
x * x, as ONNX specifies). Results keep the input's element type; float16 accumulates in
float32, and an empty reduction gives the ONNX identity (0 for sums, 1 for ReduceProd,
-inf/+inf (the type's minimum/maximum) for ReduceMax/ReduceMin, -inf for ReduceLogSumExp).
"""

from __future__ import annotations

import numpy as np

from ._common import (
    axes_of,
    float_compute_dtype,
    i_attr,
    kernels,
    norm_axis,
    op_error,
    req,
    unsupported,
)


def _reduce_axes(onnx_op, x, inputs, attrs):
    """The normalized axes to reduce, or None for the noop case."""
    axes = axes_of(inputs, 1, attrs)
    if not axes:
        if i_attr(attrs, "noop_with_empty_axes", 0):
            return None
        return tuple(range(x.ndim))
    return tuple(sorted({norm_axis(onnx_op, a, x.ndim, "axes entry") for a in axes}))


def _reduction(onnx_op, compute):
    def fn(inputs, attrs):
        x = req(onnx_op, inputs, 0, "data")
        axes = _reduce_axes(onnx_op, x, inputs, attrs)
        if axes is None:
            # noop_with_empty_axes: reduce over no axes; composite reductions still apply
            # their elementwise steps (ReduceL1 -> |x|, ReduceSumSquare -> x * x, ...)
            axes = ()
        keep = bool(i_attr(attrs, "keepdims", 1))
        with np.errstate(all="ignore"):
            y = compute(x, axes, keep)
        return [np.asarray(y).astype(x.dtype, copy=False)]

    return fn


def _acc_dtype(x):
    """Floats accumulate in their compute dtype, integers in their own type."""
    return float_compute_dtype(x.dtype) if x.dtype.kind == "f" else x.dtype


def _sum(x, axes, keep):
    return np.sum(x, axis=axes, keepdims=keep, dtype=_acc_dtype(x))


def _mean(x, axes, keep):
    if x.dtype.kind == "f":
        return np.mean(x, axis=axes, keepdims=keep, dtype=float_compute_dtype(x.dtype))
    return np.trunc(np.mean(x, axis=axes, keepdims=keep, dtype=np.float64))


def _lowest(dtype, lowest: bool = True):
    """The ONNX identity of an empty ReduceMax (ReduceMin: lowest=False), numpy's
    `initial`: -inf, the type minimum, False (+inf, the type maximum, True)."""
    if dtype.kind == "f":
        return -np.inf if lowest else np.inf
    if dtype.kind in "iu":
        return np.iinfo(dtype).min if lowest else np.iinfo(dtype).max
    return not lowest


def _max(x, axes, keep):
    return np.max(x, axis=axes, keepdims=keep, initial=_lowest(x.dtype))


def _min(x, axes, keep):
    return np.min(x, axis=axes, keepdims=keep, initial=_lowest(x.dtype, lowest=False))


def _prod(x, axes, keep):
    return np.prod(x, axis=axes, keepdims=keep, dtype=_acc_dtype(x))


def _l1(x, axes, keep):
    return _sum(np.abs(x), axes, keep)


def _sum_square(x, axes, keep):
    xc = x.astype(_acc_dtype(x), copy=False)
    return np.sum(xc * xc, axis=axes, keepdims=keep)


def _l2(x, axes, keep):
    """sqrt of the sum of squares (integers: the square root truncated, as ONNX's reference)."""
    s = _sum_square(x, axes, keep)
    return np.sqrt(s if x.dtype.kind == "f" else s.astype(np.float64))


def _log_sum_exp(x, axes, keep):
    """log(sum(exp(x))), shifted by the finite maximum so large inputs do not overflow.
    Integer inputs (allowed before opset 28) compute in float64 and are truncated."""
    xc = x.astype(float_compute_dtype(x.dtype), copy=False)
    m = np.max(xc, axis=axes, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0).astype(xc.dtype, copy=False)
    y = np.log(np.sum(np.exp(xc - m), axis=axes, keepdims=True)) + m
    if not keep:
        y = np.squeeze(y, axis=axes)
    return y


def _log_sum(x, axes, keep):
    return np.log(_sum(x, axes, keep))


kernels(_reduction, {
    "ReduceSum": _sum, "ReduceLogSum": _log_sum, "ReduceMean": _mean, "ReduceMax": _max,
    "ReduceMin": _min, "ReduceProd": _prod, "ReduceL1": _l1, "ReduceL2": _l2,
    "ReduceSumSquare": _sum_square, "ReduceLogSumExp": _log_sum_exp,
})

# -- ArgMax / ArgMin ----------------------------------------------------------------------------


def _arg_reduction(onnx_op, pick):
    def fn(inputs, attrs):
        """The int64 index of the first (select_last_index=1: last) extreme along `axis`
        (default 0); keepdims=1 (the default) keeps the axis as size 1."""
        x = req(onnx_op, inputs, 0, "data")
        if x.ndim == 0:
            raise op_error(onnx_op, "input must have rank >= 1")
        axis = norm_axis(onnx_op, i_attr(attrs, "axis", 0), x.ndim)
        keep = i_attr(attrs, "keepdims", 1)
        last = i_attr(attrs, "select_last_index", 0)
        if last not in (0, 1):
            raise unsupported(onnx_op, "select_last_index", last, (0, 1))
        dim = x.shape[axis]
        if dim == 0:
            raise op_error(onnx_op, f"cannot select along axis {axis} of size 0")
        if last:
            idx = (dim - 1) - pick(np.flip(x, axis), axis=axis)
        else:
            idx = pick(x, axis=axis)
        idx = np.asarray(idx, dtype=np.int64)
        if keep:
            idx = np.expand_dims(idx, axis)
        return [idx]

    return fn


kernels(_arg_reduction, {"ArgMax": np.argmax, "ArgMin": np.argmin})
