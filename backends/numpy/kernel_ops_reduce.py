"""Kernels that reduce along an axis, on numpy: matmul (over K), softmax and layer_norm
(through their stats workspaces), reduce. Registered in `KERNEL_IMPLS` (kernel_ops.py,
which imports this module); the table there says how each works."""

from __future__ import annotations

import math

import numpy as np

from palimpsest.backends.numpy.blas import matmul_call
from palimpsest.backends.numpy.kernel_ops import (
    _scalar, _view_as, config_of, impl, replay, replayed, workspaces_by_role)
from palimpsest.backends.numpy.kernel_ops_elementwise import core_inputs, epilogue_calls


# -- matmul -------------------------------------------------------------------------------------

@impl("kernel.matmul")
def matmul(op, inputs, outputs, workspaces):
    y = outputs[0]
    replayed(op, (*inputs, y, *workspaces), lambda: _matmul_calls(config_of(op), inputs, y,
                                                                   workspaces))


def _matmul_calls(config, inputs, y, workspaces) -> list:
    calls = _product_calls(config, core_inputs(config, inputs), y)
    if config["epilogue"]:
        calls.extend(epilogue_calls(config, inputs, y,
                                    workspaces[-1] if workspaces else None))
    return calls


def _product_calls(config, inputs, y) -> list:
    """alpha * A @ B (+ beta * C) into y, as calls."""
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    if config["transA"]:
        a = np.swapaxes(a, -1, -2)
    if config["transB"]:
        b = np.swapaxes(b, -1, -2)
    calls = [matmul_call(a, b, y)]
    alpha, beta = config["alpha"], config["beta"]
    if c is None or beta == 0.0:
        if alpha != 1.0:
            calls.append((np.multiply, (y, _scalar(alpha, y.dtype)), {"out": y}))
        return calls
    if beta == 1.0:
        if alpha != 1.0:
            calls.append((np.multiply, (y, _scalar(alpha, y.dtype)), {"out": y}))
        return calls + [(np.add, (y, c), {"out": y})]
    # alpha*AB + beta*C = beta * (alpha/beta * AB + C): no C-sized temporary
    return calls + [(np.multiply, (y, _scalar(alpha / beta, y.dtype)), {"out": y}),
                    (np.add, (y, c), {"out": y}),
                    (np.multiply, (y, _scalar(beta, y.dtype)), {"out": y})]


# -- normalization ------------------------------------------------------------------------------

try:   # np.einsum without its Python layer (~0.6 us a call): what it calls, unoptimized
    from numpy._core.multiarray import c_einsum as _einsum
except ImportError:   # (numpy 1.x)
    try:
        from numpy.core.multiarray import c_einsum as _einsum
    except ImportError:
        _einsum = np.einsum

# Rows up to this long are summed with `np.einsum` (3x faster than np.sum on short rows,
# which pays a reduction setup per row; its SIMD accumulators lose no precision that
# matters at this length); longer rows keep np.sum's pairwise summation.
_EINSUM_ROW = 1024


def _row_sum_rows(rows: np.ndarray, out: np.ndarray):
    """`rows` when they are short enough to sum with einsum into `out` (flat), else None."""
    return rows if 0 < rows.shape[1] <= _EINSUM_ROW and out.flags.c_contiguous else None


@impl("kernel.softmax")
def softmax(op, inputs, outputs, workspaces):
    x, y, stats = inputs[0], outputs[0], workspaces[0]
    replayed(op, (x, y, stats), lambda: _softmax_calls(config_of(op)["axis"], x, y, stats))


def _softmax_calls(axis: int, x, y, stats) -> list:
    # fmax's reduce loop is 1.5x faster than max's on short rows; a NaN still makes its
    # whole row NaN (through exp and the sum), as with max
    calls = [(np.fmax.reduce, (x,), {"axis": axis, "keepdims": True, "out": stats}),
             (np.subtract, (x, stats), {"out": y}), (np.exp, (y,), {"out": y})]
    rows = _row_sum_rows(y.reshape(-1, y.shape[-1]), stats) \
        if axis == y.ndim - 1 and y.size and y.flags.c_contiguous else None
    if rows is not None:
        calls.append((_einsum, ("ij->i", rows), {"out": stats.reshape(-1)}))
    else:
        calls.append((np.sum, (y,), {"axis": axis, "keepdims": True, "out": stats}))
    return calls + [(np.divide, (y, stats), {"out": y})]


@impl("kernel.layer_norm")
def layer_norm(op, inputs, outputs, workspaces):
    def make():
        return _layer_norm_calls(op, inputs, outputs, workspaces)

    if inputs[0].flags.c_contiguous:
        replayed(op, (*inputs, *outputs, *workspaces), make)
    else:   # X's rows are a copy: made anew each call, never recorded
        replay(make())


def _layer_norm_calls(op, inputs, outputs, workspaces) -> list:
    """Y = (X - mean) / sqrt(var + eps) * scale (+ B) over the rows of X's normalized
    dims, as numpy calls on views made once (replayed while the buffers stay)."""
    config = config_of(op)
    ws = workspaces_by_role(op, workspaces)
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    y = outputs[0]
    axis = config["axis"]
    rows = math.prod(x.shape[:axis])
    width = math.prod(x.shape[axis:])
    x2 = x.reshape(rows, width)
    y2 = _view_as(y, (rows, width))
    mean = _view_as(ws["mean"], (rows,))
    var = _view_as(ws["var"], (rows,))
    count = _scalar(width, y.dtype)
    summed = _row_sum_rows(x2, mean) if x2.flags.c_contiguous and rows else None
    if rows == 1 and summed is not None:
        # one row (a keyword spotter's dense layers): its mean and scale as numpy
        # scalars, the same float operations as the calls below, six calls for eleven
        calls = [(_einsum, ("ij->i", summed), {"out": mean}),
                 (_centre_row, (x2, mean, count.dtype.type(width), y2), {}),
                 (_einsum, ("ij,ij->i", y2, y2), {"out": var}),
                 (_scale_row, (y2, var, count.dtype.type(width),
                               count.dtype.type(config["epsilon"])), {}),
                 (np.multiply, (y, scale), {"out": y})]
        if bias is not None:
            calls.append((np.add, (y, bias), {"out": y}))
        return calls
    calls = [(_einsum, ("ij->i", summed), {"out": mean}) if summed is not None
             else (np.sum, (x2,), {"axis": 1, "out": mean}),
             (np.divide, (mean, count), {"out": mean}),
             (np.subtract, (x2, mean[:, None]), {"out": y2}),
             (_einsum, ("ij,ij->i", y2, y2), {"out": var}),
             (np.divide, (var, count), {"out": var}),
             (np.add, (var, _scalar(config["epsilon"], y.dtype)), {"out": var}),
             (np.sqrt, (var,), {"out": var}),
             (np.reciprocal, (var,), {"out": var}),
             (np.multiply, (y2, var[:, None]), {"out": y2}),
             (np.multiply, (y, scale), {"out": y})]
    if bias is not None:
        calls.append((np.add, (y, bias), {"out": y}))
    return calls


def _centre_row(x, mean, count, y) -> None:
    """y = x - sum / count for a one-row x (mean[0] holding the row's sum)."""
    np.subtract(x, mean[0] / count, out=y)


def _scale_row(y, var, count, epsilon) -> None:
    """y *= 1 / sqrt(sum of squares / count + epsilon), one row (var[0] the sum)."""
    one = count.dtype.type(1)
    np.multiply(y, one / np.sqrt(var[0] / count + epsilon), out=y)


# -- reduce ---------------------------------------------------------------------------------------

@impl("kernel.reduce")
def reduce(op, inputs, outputs, workspaces):
    x, y = inputs[0], outputs[0]
    acc = workspaces[0] if workspaces else None
    replayed(op, (x, y, *workspaces), lambda: _reduce_calls(config_of(op), x, y, acc))


def _reduce_calls(config, x, y, acc) -> list:
    axes = tuple(config["axes"])
    keep = bool(config["keepdims"])
    target = acc if acc is not None else y
    mode = config["mode"]
    # the ufuncs' reductions themselves, as np.mean / np.sum / np.max compute them (their
    # Python layers cost more than the reduction of a small tensor)
    if mode in ("mean", "sum"):
        calls = [(np.add.reduce, (x,), {"axis": axes, "dtype": target.dtype, "out": target,
                                        "keepdims": keep})]
        if mode == "mean":
            calls.append((np.true_divide, (target, np.intp(math.prod(x.shape[a] for a in axes))),
                          {"out": target, "casting": "unsafe"}))
            if acc is not None and y.dtype.kind in "iu":
                calls.append((np.trunc, (acc,), {"out": acc}))
    else:
        initial = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        calls = [(np.maximum.reduce, (x,), {"axis": axes, "out": target, "keepdims": keep,
                                            "initial": initial})]
    if acc is not None:
        calls.append((np.copyto, (y, acc), {"casting": "unsafe"}))
    return calls
