"""Normalization kernels: BatchNormalization, LayerNormalization, InstanceNormalization;
Softmax, LogSoftmax; Dropout (inference)."""

from __future__ import annotations

import numpy as np

from ._common import (
    f_attr,
    float_compute_dtype,
    i_attr,
    kernel,
    kernels,
    norm_axis,
    onnx_dtype,
    op_error,
    opt,
    req,
    unsupported,
)

# -- normalization ---------------------------------------------------------------------------


@kernel("BatchNormalization", multi=True)
def batch_norm(inputs, attrs, num_results=None):
    """Inference: Y = (X - mean) / sqrt(var + epsilon) * scale + B over channel axis 1.
    training_mode=1 normalizes with the batch statistics (population variance) and returns
    Y, running_mean, running_var (momentum-blended)."""
    x = req("BatchNormalization", inputs, 0, "X")
    scale = req("BatchNormalization", inputs, 1, "scale")
    bias = req("BatchNormalization", inputs, 2, "B")
    mean = req("BatchNormalization", inputs, 3, "input_mean")
    var = req("BatchNormalization", inputs, 4, "input_var")
    eps = f_attr(attrs, "epsilon", 1e-5)
    cdt = float_compute_dtype(x.dtype)
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2) if x.ndim >= 2 else (-1,)

    def bc(t):
        return np.asarray(t).astype(cdt, copy=False).reshape(shape)

    xc = x.astype(cdt, copy=False)
    training = i_attr(attrs, "training_mode", 0)
    if training:
        axes = (0,) + tuple(range(2, x.ndim))
        cur_mean = xc.mean(axis=axes)
        cur_var = xc.var(axis=axes)
        y = (xc - bc(cur_mean)) / np.sqrt(bc(cur_var) + np.asarray(eps, cdt)) * bc(scale) + bc(bias)
        mom = np.asarray(f_attr(attrs, "momentum", 0.9), cdt)
        run_mean = mean.astype(cdt) * mom + cur_mean * (1 - mom)
        run_var = var.astype(cdt) * mom + cur_var * (1 - mom)
        res = [y.astype(x.dtype, copy=False), run_mean.astype(mean.dtype), run_var.astype(var.dtype)]
        return res[: num_results or 1]
    y = (xc - bc(mean)) / np.sqrt(bc(var) + np.asarray(eps, cdt)) * bc(scale) + bc(bias)
    if (num_results or 1) > 1:
        raise op_error("BatchNormalization", "running_mean/running_var results need training_mode=1")
    return [y.astype(x.dtype, copy=False)]


@kernel("LayerNormalization", multi=True)
def layer_norm(inputs, attrs, num_results=None):
    """Normalize over axes [axis, rank); results Y, Mean, InvStdDev (the last two in the
    stash_type precision, with the normalized axes kept as size 1)."""
    x = req("LayerNormalization", inputs, 0, "X")
    scale = req("LayerNormalization", inputs, 1, "Scale")
    bias = opt(inputs, 2)
    axis = norm_axis("LayerNormalization", i_attr(attrs, "axis", -1), x.ndim)
    eps = f_attr(attrs, "epsilon", 1e-5)
    sdt = onnx_dtype("LayerNormalization", i_attr(attrs, "stash_type", 1), "stash_type")
    if sdt.kind != "f":
        raise unsupported("LayerNormalization", "stash_type", attrs.get("stash_type"))
    axes = tuple(range(axis, x.ndim))
    xc = x.astype(sdt, copy=False)
    mean = xc.mean(axis=axes, keepdims=True)
    d = xc - mean
    var = (d * d).mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(var + np.asarray(eps, sdt))
    y = d * inv * scale.astype(sdt, copy=False)
    if bias is not None:
        y = y + bias.astype(sdt, copy=False)
    res = [y.astype(x.dtype, copy=False), mean, inv]
    return res[: num_results or 1]


@kernel("InstanceNormalization")
def instance_norm(inputs, attrs):
    """Y = scale * (X - mean) / sqrt(var + epsilon) + B, with mean and (population) variance
    of each (image, channel) over the spatial axes; scale and B have one value per channel."""
    x = req("InstanceNormalization", inputs, 0, "input")
    scale = req("InstanceNormalization", inputs, 1, "scale")
    bias = req("InstanceNormalization", inputs, 2, "B")
    if x.ndim < 3:
        raise op_error("InstanceNormalization", f"input must have rank >= 3, got shape {x.shape}")
    c = x.shape[1]
    if scale.size != c or bias.size != c:
        raise op_error("InstanceNormalization",
                       f"scale {scale.shape} and B {bias.shape} must have {c} elements")
    eps = f_attr(attrs, "epsilon", 1e-5)
    cdt = float_compute_dtype(x.dtype)
    shape = (1, c) + (1,) * (x.ndim - 2)
    axes = tuple(range(2, x.ndim))
    xc = x.astype(cdt, copy=False)
    mean = xc.mean(axis=axes, keepdims=True)
    d = xc - mean
    var = (d * d).mean(axis=axes, keepdims=True)
    y = d / np.sqrt(var + np.asarray(eps, cdt)) * scale.astype(cdt).reshape(shape)
    y += bias.astype(cdt).reshape(shape)
    return [y.astype(x.dtype, copy=False)]


def _along_axis(onnx_op, compute):
    """A kernel applying `compute(x, axis)` along `axis` (opset 13+, default -1), or, with
    `coerce_2d` (opsets before 13, default axis 1), along the flattened dims [axis, rank)
    of x seen as 2-D."""
    def fn(inputs, attrs):
        x = req(onnx_op, inputs, 0, "input")
        coerce = i_attr(attrs, "coerce_2d", 0)
        axis = i_attr(attrs, "axis", 1 if coerce else -1)
        axis = norm_axis(onnx_op, axis, x.ndim) if x.ndim else 0
        xc = x.astype(float_compute_dtype(x.dtype), copy=False)
        if coerce:
            rows = int(np.prod(x.shape[:axis], dtype=np.int64))
            y = compute(xc.reshape(rows, -1), 1).reshape(x.shape)
        else:
            y = compute(xc, axis)
        return [y.astype(x.dtype, copy=False)]

    return fn


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _log_softmax(x, axis):
    """x - max - log(sum(exp(x - max)))."""
    with np.errstate(all="ignore"):
        d = x - x.max(axis=axis, keepdims=True)
        return d - np.log(np.exp(d).sum(axis=axis, keepdims=True))


def _hardmax(x, axis):
    """1 at the first maximum along the axis, 0 elsewhere."""
    if x.size == 0:
        return np.zeros_like(x)
    first = np.expand_dims(np.argmax(x, axis=axis), axis)
    out = np.zeros_like(x)
    np.put_along_axis(out, first, 1, axis=axis)
    return out


kernels(_along_axis, {"Softmax": _softmax, "LogSoftmax": _log_softmax, "Hardmax": _hardmax})


@kernel("Dropout", multi=True)
def dropout(inputs, attrs, num_results=None):
    """Inference Dropout: the identity; the optional mask result is all True. training_mode
    (an operand since opset 12) with a non-zero ratio is random and is rejected."""
    x = req("Dropout", inputs, 0, "data")
    ratio = opt(inputs, 1)
    training = opt(inputs, 2)
    if training is not None and bool(np.asarray(training).reshape(-1)[0]):
        r = float(np.asarray(ratio).reshape(-1)[0]) if ratio is not None else 0.5
        if r != 0.0:
            raise op_error(
                "Dropout",
                f"training_mode=True with ratio={r} draws a random mask; only inference "
                "(or ratio=0) is supported",
            )
    res = [x, np.ones(x.shape, dtype=np.bool_)]
    return res[: num_results or 1]
