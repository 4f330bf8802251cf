"""Reference kernels of LSTM, GRU and RNN (ops_recurrent.py).

One loop over time per direction, vectorized over the batch: X's projection for every
step is one matmul up front; a batch entry past its `sequence_lens` keeps its state and
writes zeros to Y; the reverse direction runs each entry's own sequence backwards."""

from __future__ import annotations

import numpy as np

from palimpsest.dialects.graph.naming import CONTRIB_TO_GRAPH, ONNX_TO_GRAPH
from palimpsest.dialects.graph.ops_recurrent import resolve_activations
from palimpsest.dialects.graph.shapes import ShapeError

from ._common import KERNELS, float_compute_dtype, i_attr, kernel, op_error, opt, req, s_attr
from .quant import centred, dynamic_quantize_linear

# name -> function of (x, alpha, beta); names, defaults and the reading of
# activation_alpha/beta: ops_recurrent.resolve_activations
_ACTIVATIONS = {
    "Relu": lambda x, a, b: np.maximum(x, 0),
    "Tanh": lambda x, a, b: np.tanh(x),
    "Sigmoid": lambda x, a, b: 0.5 * (1 + np.tanh(0.5 * x)),
    "Affine": lambda x, a, b: a * x + b,
    "LeakyRelu": lambda x, a, b: np.where(x >= 0, x, a * x),
    "ThresholdedRelu": lambda x, a, b: np.where(x > a, x, 0),
    "ScaledTanh": lambda x, a, b: a * np.tanh(b * x),
    "HardSigmoid": lambda x, a, b: np.clip(a * x + b, 0, 1),
    "Elu": lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0))),
    "Softsign": lambda x, a, b: x / (1 + np.abs(x)),
    "Softplus": lambda x, a, b: np.logaddexp(0, x),
}


_FLOAT_OP = {"DynamicQuantizeLSTM": "LSTM"}


def _activations(onnx_op, attrs, dirs):
    """Per direction, the list of activation callables."""
    names = [n.decode() if isinstance(n, bytes) else n for n in attrs.get("activations") or []]
    try:
        resolved = resolve_activations(ONNX_TO_GRAPH[_FLOAT_OP.get(onnx_op, onnx_op)], names,
                                       attrs.get("activation_alpha"),
                                       attrs.get("activation_beta"), dirs)
    except ShapeError as error:
        raise op_error(onnx_op, str(error)) from None
    functions = [lambda x, fn=_ACTIVATIONS[name], a=a, b=b: fn(x, a, b)
                 for name, a, b in resolved]
    per_dir = len(functions) // dirs
    return [functions[d * per_dir:(d + 1) * per_dir] for d in range(dirs)]


def _backwards(x, lengths):
    """Each batch entry's first `lengths[b]` steps in reverse order (then zeros)."""
    steps = x.shape[0]
    s = np.arange(steps)[:, None]
    source = lengths[None, :] - 1 - s
    valid = source >= 0
    picked = x[np.where(valid, source, 0), np.arange(x.shape[1])[None, :]]
    return np.where(valid[..., None], picked, 0), np.where(valid, source, 0), valid


def _quantized_product(a, weight, d, scale):
    """a @ weight[d] as onnxruntime's DynamicQuantizeLSTM computes it: `a` quantized to
    uint8 over its own range (DynamicQuantizeLinear), an integer product (exact in the
    floats `weight`, a quant.Centred, picks), scaled by a's scale times the weight's (per
    tensor or per column)."""
    aq, a_scale, a_zero = dynamic_quantize_linear([a], {})
    floats = weight.floats(255)[d]
    product = (aq.astype(floats.dtype) - floats.dtype.type(a_zero)) @ floats
    return product.astype(np.float32) * (np.float32(a_scale) * scale.astype(np.float32))


def quantized_weights(w, zero):
    """W or R (dirs x K x N) less its zero point (per direction, or per direction and
    column), centred once per constant (quant.centred)."""
    return centred(w, zero, (w.shape[0], 1, zero.size // w.shape[0]), (1,))


def _weights(onnx_op, inputs, compute):
    """(W, R, project, recur): project(d, x) = x W[d]ᵀ and recur(d, h) = h R[d]ᵀ."""
    w = req(onnx_op, inputs, 1, "W")
    r = req(onnx_op, inputs, 2, "R")
    if onnx_op != "DynamicQuantizeLSTM":
        w, r = w.astype(compute), r.astype(compute)
        return w, r, lambda d, x: x @ w[d].T, lambda d, h: h @ r[d].T
    params = [req(onnx_op, inputs, i, name) for i, name in
              ((8, "W_scale"), (9, "W_zero_point"), (10, "R_scale"), (11, "R_zero_point"))]
    dirs = w.shape[0]
    w_scale, r_scale = params[0].reshape(dirs, -1), params[2].reshape(dirs, -1)
    w_centred, r_centred = quantized_weights(w, params[1]), quantized_weights(r, params[3])

    def project(d, x):
        rows = x.reshape(-1, x.shape[-1])
        return _quantized_product(rows, w_centred, d, w_scale[d]).reshape(
            x.shape[:-1] + (w.shape[2],))

    # W and R in the float ops' layout, only their shapes are read
    return (np.empty((dirs, w.shape[2], 0)), np.empty((dirs, 0, r.shape[1])),
            project, lambda d, h: _quantized_product(h, r_centred, d, r_scale[d]))


def _run(onnx_op, inputs, attrs, num_results):
    x = req(onnx_op, inputs, 0, "X")
    dtype = x.dtype
    compute = float_compute_dtype(dtype)
    layout = i_attr(attrs, "layout", 0)
    w, r, project, recur = _weights(onnx_op, inputs, compute)
    lstm = onnx_op in ("LSTM", "DynamicQuantizeLSTM")
    b, lengths, h0 = opt(inputs, 3), opt(inputs, 4), opt(inputs, 5)
    c0 = opt(inputs, 6) if lstm else None
    peep = opt(inputs, 7) if lstm else None
    if layout:
        x = x.transpose(1, 0, 2)
        h0 = None if h0 is None else h0.transpose(1, 0, 2)
        c0 = None if c0 is None else c0.transpose(1, 0, 2)
    x = x.astype(compute)
    steps, batch = x.shape[:2]
    dirs = w.shape[0]
    hidden = r.shape[2]
    gates = w.shape[1] // hidden
    direction = s_attr(attrs, "direction", "forward")
    clip = attrs.get("clip")
    lengths = (np.full(batch, steps, np.int64) if lengths is None
               else np.asarray(lengths, np.int64).reshape(-1))
    if np.any(lengths < 0) or np.any(lengths > steps):
        raise op_error(onnx_op, f"sequence_lens must be within [0, {steps}], "
                                f"got {lengths.tolist()}")
    bias = (np.zeros((dirs, 2 * gates * hidden), compute) if b is None else b.astype(compute))
    h0 = np.zeros((dirs, batch, hidden), compute) if h0 is None else h0.astype(compute)
    c0 = np.zeros((dirs, batch, hidden), compute) if c0 is None else c0.astype(compute)
    peep = np.zeros((dirs, 3 * hidden), compute) if peep is None else peep.astype(compute)
    activations = _activations(onnx_op, attrs, dirs)
    y = np.zeros((steps, dirs, batch, hidden), compute)
    final_h = np.zeros((dirs, batch, hidden), compute)
    final_c = np.zeros((dirs, batch, hidden), compute)
    for d in range(dirs):
        backwards = direction == "reverse" or d == 1
        xs, where_from, valid = (_backwards(x, lengths) if backwards else
                                 (x, None, np.arange(steps)[:, None] < lengths[None, :]))
        wb, rb = bias[d, :gates * hidden], bias[d, gates * hidden:]
        projected = project(d, xs) + wb          # every step's X W^T at once
        if onnx_op == "DynamicQuantizeLSTM":
            # R's bias too, once for all steps (where the fast kernels add it: one pass a
            # sequence, not one a step), not after each step's h R^T
            projected, rb = projected + rb, None
        h, c = h0[d], c0[d]
        fns = activations[d]
        for t in range(steps):
            h_new, c_new = _cell(onnx_op, projected[t], h, c, r[d], lambda h, d=d: recur(d, h),
                                 rb, peep[d], fns, clip, attrs, hidden)
            keep = valid[t][:, None]
            h = np.where(keep, h_new, h)
            c = np.where(keep, c_new, c)
            out = np.where(keep, h_new, 0)
            if backwards:
                y[where_from[t], d, np.arange(batch)] = np.where(
                    keep, out, y[where_from[t], d, np.arange(batch)])
            else:
                y[t, d] = out
        final_h[d], final_c[d] = h, c
    if layout:
        results = [y.transpose(2, 0, 1, 3), final_h.transpose(1, 0, 2),
                   final_c.transpose(1, 0, 2)]
    else:
        results = [y, final_h, final_c]
    return [a.astype(dtype) for a in results[:num_results or 1]]


def _cell(onnx_op, xw, h, c, r, recur, rb, peep, fns, clip, attrs, hidden):
    """One step: (new hidden state, new cell state). recur(h) = h Rᵀ (GRU splits R); `rb`
    None where `xw` has R's bias already."""
    def clipped(v):
        return np.clip(v, -clip, clip) if clip is not None else v

    if onnx_op == "RNN":
        return fns[0](clipped(xw + recur(h) + rb)), c
    if onnx_op == "GRU":
        f, g = fns
        xz, xr, xh = np.split(xw, 3, axis=-1)
        rz, rr, rh = np.split(r, 3, axis=0)
        bz, br, bh = np.split(rb, 3)
        z = f(clipped(xz + h @ rz.T + bz))
        reset = f(clipped(xr + h @ rr.T + br))
        if i_attr(attrs, "linear_before_reset", 0):
            candidate = g(clipped(xh + reset * (h @ rh.T + bh)))
        else:
            candidate = g(clipped(xh + (reset * h) @ rh.T + bh))
        return (1 - z) * candidate + z * h, c
    f, g, act_h = fns
    gates = xw + recur(h) if rb is None else xw + recur(h) + rb
    gi, go, gf, gc = np.split(gates, 4, axis=-1)
    pi, po, pf = np.split(peep, 3)
    i = f(clipped(gi + pi * c))
    forget = 1 - i if i_attr(attrs, "input_forget", 0) else f(clipped(gf + pf * c))
    c_new = forget * c + i * g(clipped(gc))
    o = f(clipped(go + po * c_new))
    return o * act_h(c_new), c_new


for _op in ("LSTM", "GRU", "RNN"):
    kernel(_op, multi=True)(
        lambda inputs, attrs, num_results=None, _op=_op: _run(_op, inputs, attrs, num_results))
KERNELS[CONTRIB_TO_GRAPH[("com.microsoft", "DynamicQuantizeLSTM")]] = (
    lambda inputs, attrs, num_results=None: _run("DynamicQuantizeLSTM", inputs, attrs,
                                                 num_results))
