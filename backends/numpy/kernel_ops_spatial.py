"""Spatial kernels on numpy: `kernel.conv_transpose` (dialects/kernel_spatial.py).
Registered in `KERNEL_IMPLS` (kernel_ops.py, which imports this module).

conv_transpose, per image: one GEMM `np.matmul(Wᵀ, X, out=cols)` (per group a batched
matmul of the groups' Wᵀ views, which BLAS reads transposed, no copy) into the `cols`
workspace, rows (m, kernel offset), columns the input positions; then col2im: for each
kernel offset, the input positions whose out position o = i * stride + offset *
dilation - pad_begin lies in Y are one strided slice of Y per axis, so the offset's rows
go there in one ufunc call. When the offsets' positions never overlap and tile Y (a
2x2 stride-2 upsampling: every out cell is hit exactly once) they are copied
(`np.copyto`) and the bias added after; otherwise Y starts as the bias (or zero) and
each offset is added (`np.add(out=)`). Nothing is allocated but numpy's views.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from palimpsest.backends.numpy.blas import matmul_call
from palimpsest.backends.numpy.kernel_ops import (
    _Calls, _view_as, config_of, impl, record, recorded, replay)


def _axis_plan(size: int, out: int, k: int, stride: int, dilation: int, begin: int):
    """Per kernel offset along one axis: (input slice, out slice) of the positions it
    reaches inside Y, or None when it reaches none."""
    plans = []
    for j in range(k):
        shift = j * dilation - begin               # o = i * stride + shift
        first = max(0, -(shift // stride))         # the first i with o >= 0
        last = min(size - 1, (out - 1 - shift) // stride)
        if last < first:
            plans.append(None)
            continue
        o_first = first * stride + shift
        plans.append((slice(first, last + 1),
                      slice(o_first, o_first + (last - first) * stride + 1, stride)))
    return plans


def _tiles(size: int, out: int, k: int, stride: int, dilation: int, begin: int) -> bool:
    """Whether the offsets along one axis hit every out position exactly once: the
    positions i * stride + j are [0, size * stride) once each when k == stride (any
    dilation for k == 1), and Y must lie inside them."""
    return k == stride and (k == 1 or dilation == 1) and begin >= 0 \
        and begin + out <= size * stride


@impl("kernel.conv_transpose")
def conv_transpose(op, inputs, outputs, workspaces):
    arrays = (*inputs, *outputs, *workspaces)
    calls = recorded(op, arrays)
    if calls is None:   # its steps, views made once per set of arrays (kernel_ops.record)
        calls = _conv_transpose_calls(config_of(op), inputs, outputs, workspaces)
        if all(np.may_share_memory(a, b) for a, b in calls.views):   # nothing copied
            record(op, arrays, calls)
    replay(calls)


def _conv_transpose_calls(config, inputs, outputs, workspaces) -> "_Calls":
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    y, cols = outputs[0], workspaces[0]
    n, c = x.shape[:2]
    group = config["group"]
    cg, mg = c // group, w.shape[1]
    m = mg * group
    kernel, sizes, outs = w.shape[2:], x.shape[2:], y.shape[2:]
    rank = len(kernel)
    taps, pixels = math.prod(kernel), math.prod(sizes)
    strides, dilations, begins = config["strides"], config["dilations"], config["pads"][:rank]
    calls = _Calls()
    if y.size == 0:
        return calls
    plans = [_axis_plan(*args) for args in zip(sizes, outs, kernel, strides, dilations, begins)]
    tiled = all(_tiles(*args) for args in zip(sizes, outs, kernel, strides, dilations,
                                              begins))
    bias = None if b is None else b.reshape((m,) + (1,) * rank)
    calls.views = [] if b is None else [(bias, b)]
    if group == 1:
        wt = _view_as(w, (c, m * taps)).T
    else:
        wt = _view_as(w, (group, cg, mg * taps)).transpose(0, 2, 1)
    cols2 = _view_as(cols, (group, mg * taps, pixels)) if group > 1 else cols
    # cols as (M, k1..kn, D1..Dn): offset j's rows, at its input positions
    blocks = _view_as(cols, (m,) + tuple(kernel) + tuple(sizes))
    for image in range(n):
        xi = x[image]
        target = y[image]
        if group == 1:
            calls.append(matmul_call(wt, _view_as(xi, (c, pixels)), cols))
        else:
            calls.append(matmul_call(wt, _view_as(xi, (group, cg, pixels)), cols2))
        if not tiled:
            if bias is None:
                calls.append((target.fill, (0,), {}))
            else:
                calls.append((np.copyto, (target, bias), {}))
        for offset in itertools.product(*(range(k) for k in kernel)):
            parts = [plans[a][j] for a, j in enumerate(offset)]
            if any(p is None for p in parts):
                continue
            source = blocks[(slice(None),) + offset + tuple(p[0] for p in parts)]
            dest = target[(slice(None),) + tuple(p[1] for p in parts)]
            if tiled:
                calls.append((np.copyto, (dest, source), {}))
            else:
                calls.append((np.add, (dest, source), {"out": dest}))
        if tiled and bias is not None:
            calls.append((np.add, (target, bias), {"out": target}))
    return calls
