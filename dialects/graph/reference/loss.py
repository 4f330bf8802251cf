"""Reference kernels of ops_loss.py: LpNormalization, LRN, GroupNormalization,
MeanVarianceNormalization, LpPool and the two losses."""

from __future__ import annotations

import itertools

import numpy as np

from ._common import (
    f_attr, float_compute_dtype, i_attr, ints_attr, kernel, norm_axis, op_error, opt, req,
    s_attr,
)
from .nn import _canvas, _pool_setup, _window_slices


def _compute(x):
    return x.astype(float_compute_dtype(x.dtype), copy=False)


@kernel("LpNormalization")
def lp_normalization(inputs, attrs):
    """x / ||x||_p along `axis`; 0 where the norm is 0."""
    x = req("LpNormalization", inputs, 0, "input")
    axis = norm_axis("LpNormalization", i_attr(attrs, "axis", -1), x.ndim)
    p = i_attr(attrs, "p", 2)
    xc = _compute(x)
    norm = np.sum(np.abs(xc) ** p, axis=axis, keepdims=True) ** (1.0 / p)
    with np.errstate(all="ignore"):
        y = np.where(norm == 0, 0, xc / norm)
    return [y.astype(x.dtype)]


@kernel("LRN")
def lrn(inputs, attrs):
    """x / (bias + alpha / size * sum of squares over `size` neighbouring channels)^beta."""
    x = req("LRN", inputs, 0, "X")
    size = i_attr(attrs, "size", 1)
    xc = _compute(x)
    squares = np.pad(xc * xc, [(0, 0), ((size - 1) // 2, size - 1 - (size - 1) // 2)]
                     + [(0, 0)] * (x.ndim - 2))
    window = sum(squares[:, i:i + x.shape[1]] for i in range(size))
    base = f_attr(attrs, "bias", 1.0) + f_attr(attrs, "alpha", 1e-4) / size * window
    return [(xc / base ** f_attr(attrs, "beta", 0.75)).astype(x.dtype)]


@kernel("MeanVarianceNormalization")
def mean_variance_normalization(inputs, attrs):
    """(x - E[x]) / (sqrt(E[(x - E[x])^2]) + 1e-9) over `axes` (default N, H, W)."""
    x = req("MeanVarianceNormalization", inputs, 0, "X")
    axes = tuple(norm_axis("MeanVarianceNormalization", a, x.ndim)
                 for a in ints_attr(attrs, "axes", [0, 2, 3]))
    xc = _compute(x)
    centered = xc - xc.mean(axis=axes, keepdims=True)
    std = np.sqrt((centered * centered).mean(axis=axes, keepdims=True))
    return [(centered / (std + 1e-9)).astype(x.dtype)]


@kernel("GroupNormalization")
def group_normalization(inputs, attrs):
    x = req("GroupNormalization", inputs, 0, "X")
    scale = req("GroupNormalization", inputs, 1, "scale")
    bias = req("GroupNormalization", inputs, 2, "bias")
    groups = i_attr(attrs, "num_groups", 1)
    n, c = x.shape[:2]
    xc = _compute(x).reshape(n, groups, -1)
    mean = xc.mean(axis=2, keepdims=True)
    var = ((xc - mean) ** 2).mean(axis=2, keepdims=True)
    y = ((xc - mean) / np.sqrt(var + f_attr(attrs, "epsilon", 1e-5))).reshape(x.shape)
    if scale.size == groups and groups != c:   # opset 18: one scale and bias per group
        scale, bias = np.repeat(scale, c // groups), np.repeat(bias, c // groups)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return [(y * scale.reshape(shape) + bias.reshape(shape)).astype(x.dtype)]


@kernel("LpPool")
def lp_pool(inputs, attrs):
    """(sum of |x|^p over each window)^(1/p); padding counts as 0."""
    x = req("LpPool", inputs, 0, "X")
    p = i_attr(attrs, "p", 2)
    k_sp, in_sp, strides, dil, pb, pe, out, extent = _pool_setup("LpPool", x, attrs)
    canvas = _canvas(np.abs(_compute(x)) ** p, in_sp, pb, extent, 0)
    total = np.zeros(x.shape[:2] + tuple(out), dtype=canvas.dtype)
    for off in itertools.product(*[range(k) for k in k_sp]):
        total += canvas[(slice(None), slice(None)) + _window_slices(off, dil, strides, out)]
    return [(total ** (1.0 / p)).astype(x.dtype)]


def _nll(onnx_op, log_prob, target, weight, attrs):
    """The loss from log-probabilities [N, C, D...] and targets [N, D...]."""
    ignore = attrs.get("ignore_index")
    reduction = s_attr(attrs, "reduction", "mean")
    classes = log_prob.shape[1]
    target = target.astype(np.int64)
    ignored = target == ignore if ignore is not None else np.zeros(target.shape, bool)
    safe = np.where(ignored, 0, target)
    if np.any((safe < 0) | (safe >= classes)):
        raise op_error(onnx_op, f"a target is out of range for {classes} classes")
    picked = np.take_along_axis(log_prob, safe[:, None], axis=1)[:, 0]
    w = weight[safe] if weight is not None else np.ones(target.shape, log_prob.dtype)
    w = np.where(ignored, 0, w).astype(log_prob.dtype)
    loss = -picked * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction != "mean":
        raise op_error(onnx_op, f"unsupported reduction {reduction!r}")
    if weight is None and ignore is None:
        return loss.mean()
    with np.errstate(invalid="ignore", divide="ignore"):   # every target ignored: NaN
        return loss.sum() / w.sum()


@kernel("NegativeLogLikelihoodLoss")
def negative_log_likelihood_loss(inputs, attrs):
    x = req("NegativeLogLikelihoodLoss", inputs, 0, "input")
    loss = _nll("NegativeLogLikelihoodLoss", _compute(x),
                req("NegativeLogLikelihoodLoss", inputs, 1, "target"), opt(inputs, 2), attrs)
    return [np.asarray(loss).astype(x.dtype)]


@kernel("SoftmaxCrossEntropyLoss", multi=True)
def softmax_cross_entropy_loss(inputs, attrs, num_results=None):
    x = req("SoftmaxCrossEntropyLoss", inputs, 0, "scores")
    xc = _compute(x)
    shifted = xc - xc.max(axis=1, keepdims=True)
    log_prob = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = _nll("SoftmaxCrossEntropyLoss", log_prob,
                req("SoftmaxCrossEntropyLoss", inputs, 1, "labels"), opt(inputs, 2), attrs)
    results = [np.asarray(loss).astype(x.dtype), log_prob.astype(x.dtype)]
    return results[:num_results or 1]
