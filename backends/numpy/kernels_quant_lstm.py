"""`buffer.compute` fast path of com.microsoft's DynamicQuantizeLSTM on numpy (kernels.py
imports this module, which registers it in its `FAST` table), sharing the 8-bit products
and DynamicQuantizeLinear's arithmetic of kernels_quant.py.

| graph op | how |
|---|---|
| dynamic_quantize_lstm (LSTM's default activations, no clip, peepholes or short sequences) | X projected by one GEMM per direction (on oneDNN: W packed once, the scales and bias in its epilogue; else per block of W's columns, as matmul_integer's); one loop over time for both directions (or one after the other where that keeps each R in L2), in preallocated buffers |

Where oneDNN is usable (int8_products), X W^T and each step's h R^T are its exact 8-bit
products (h as uint8, a vector-matrix product a direction); else the centred floats
through BLAS.
"""

from __future__ import annotations

import numpy as np

from palimpsest.backends.host import l2_bytes as _l2_bytes
from palimpsest.backends.numpy import int8_products
from palimpsest.backends.numpy.kernels import FAST, _overlaps
from palimpsest.backends.numpy.kernels_quant import (_extremes, _quantization, _saturates,
                                                     _weight_columns)
from palimpsest.dialects.graph.reference._common import is_constant


def _float_recurrence(r_floats, shape):
    """recur(quantized, zeros, scales, g) of `_lstm_steps` through float BLAS: g = the
    centred h times R's centred floats `r_floats` (exact: float32 where that is), rounded
    once to float32, times `scales`."""
    f32 = np.float32
    product = np.empty(shape[:-1] + r_floats.shape[-1:], r_floats.dtype) \
        if r_floats.dtype != f32 else None
    centred_h = np.empty(shape, r_floats.dtype) if product is not None else None

    def recur(quantized, zeros, scales, g):
        if product is None:
            np.matmul(quantized, r_floats, out=g)
            np.multiply(g, scales, out=g)
            return
        np.copyto(centred_h, quantized)
        np.matmul(centred_h, r_floats, out=product)
        np.multiply(product, scales, out=g, dtype=f32)   # (product rounded once first)
    return recur


def _onednn_recurrence(weights, shape):
    """recur of `_lstm_steps` on oneDNN: h quantized to uint8 (the centred h plus its
    direction's zero point) and one vector-matrix product a direction by its R
    (`weights`: Int8Weight each) into int32, each direction's GEMM bound once to its
    buffers; for R without zero points of its own the product accumulates onto the zero
    point's term (-zero times R's column sums, both directions in one pass), and the
    exact result is cast and scaled into g in one pass."""
    from palimpsest.backends import onednn

    dirs = shape[0]
    unsigned = np.empty(shape, np.uint8)
    columns = len(weights[0].rows)
    product = np.empty(shape[:-1] + (columns,), np.int32)
    plain = all(w.zeros is None for w in weights)
    gemms = [onednn.bound_gemm_u8s8(unsigned[d], weights[d].rows, product[d],
                                    accumulate=plain) for d in range(dirs)]
    sums = np.stack([w.sums for w in weights]).reshape(dirs, 1, columns)
    negated = np.empty((dirs, 1, 1), np.int32)
    shifts = np.empty((dirs, 1, 1), np.float32)

    def recur(quantized, zeros, scales, g):
        if dirs == 1:   # (Python numbers: computed in float32, int32)
            np.add(quantized, zeros[0], out=unsigned, casting="unsafe")
            if plain:
                np.multiply(sums, -zeros[0], out=product)
        else:
            negated[:, 0, 0] = [-z for z in zeros]
            shifts[:, 0, 0] = zeros
            np.add(quantized, shifts, out=unsigned, casting="unsafe")
            if plain:
                np.multiply(sums, negated, out=product)
        if plain:
            for gemm in gemms:
                gemm()
        else:
            for d in range(dirs):
                int8_products.product(unsigned[d], zeros[d], weights[d], product[d], gemms[d])
        np.multiply(product, scales, out=g, dtype=np.float32)
    return recur


def _lstm_steps(projected, recur, r_scale, h, c, hs) -> bool:
    """The steps of a group of directions, in place: `projected` (steps x dirs x batch x
    4H: X W^T + Wb + Rb, in step order) in, the hidden states into `hs` (in step order), the
    cell state `c` (from its initial value); `h`: the initial hidden state;
    recur(centred quantized h, its zero points, scales, g): g = the exact h R product,
    rounded once to float32, times `scales` (per direction and column: h's scale times
    R's, halved for the sigmoid gates). `projected` is halved in place for the sigmoid
    gates. False where a step's quantization scale is not finite."""
    f32 = np.float32
    dirs, batch, hidden = h.shape
    sigmoid = 3 * hidden
    quantized = np.empty(h.shape, f32)
    g = np.empty((dirs, batch, 4 * hidden), f32)
    sigmoids = g[..., :sigmoid]
    i, o, f, cell = (g[..., k * hidden:(k + 1) * hidden] for k in range(4))
    # the sigmoid gates' x / 2 made by halving their terms first: the projection once,
    # the product's scale each step (halving is exact in binary floating point: the same
    # sums, each half the size), one numpy call a step fewer
    np.multiply(projected[..., :sigmoid], 0.5, out=projected[..., :sigmoid])
    halves = np.ones(4 * hidden, f32)
    halves[:sigmoid] = 0.5
    # per-direction values as ufunc operands: a Python float (float32's value) for one
    # direction, else a dirs x 1 x 1 array filled each step
    per_tensor = r_scale.size == dirs
    r_scales = r_scale.reshape(dirs, -1)[:, 0].tolist() if per_tensor else None
    r_scale = r_scale * halves
    divisors_of = np.empty((dirs, 1, 1), f32)
    tops_of = np.empty((dirs, 1, 1), f32)
    scales_of = np.empty((dirs, 1, 4 * hidden), f32)

    def per_direction(values, into):
        if dirs == 1:
            return values[0]
        into[:, 0, 0] = values
        return into

    flats = hs.reshape(len(hs), dirs, -1)
    flat = h.reshape(dirs, -1)
    for s in range(len(projected)):
        highs = np.maximum.reduce(flat, axis=1).tolist()
        quantization = _quantization(np.minimum.reduce(flat, axis=1).tolist(), highs)
        if quantization is None:
            return False
        divisors, tops, scales = quantization
        # rint(h / scale) + zero, saturated, less the zero point: rint(h / scale) is at
        # least -zero (h >= min(0, min h), and zero is rint(-min(0, min h) / scale)), so
        # only the top can saturate
        np.divide(h, per_direction(divisors, divisors_of), out=quantized)
        np.rint(quantized, out=quantized)
        if _saturates(highs, divisors, tops):
            np.minimum(quantized, per_direction(tops, tops_of), out=quantized)
        if per_tensor:   # h's scale times R's, in float32 as the reference (halved)
            if dirs == 1:
                np.multiply(halves, float(f32(scales[0] * r_scales[0])), out=scales_of)
            else:
                divisors_of[:, 0, 0] = [float(f32(a * b)) for a, b in zip(scales, r_scales)]
                np.multiply(divisors_of, halves, out=scales_of)
        else:
            np.multiply(per_direction(scales, divisors_of), r_scale, out=scales_of)
        recur(quantized, [int(255 - top) for top in tops], scales_of, g)
        np.add(projected[s], g, out=g)               # (the sigmoid gates' x / 2)
        np.tanh(g, out=g)                            # sigmoid: 0.5 * (1 + tanh(x / 2))
        np.add(sigmoids, 1, out=sigmoids)
        np.multiply(sigmoids, 0.5, out=sigmoids)
        np.multiply(f, c, out=c)
        np.multiply(i, cell, out=cell)
        np.add(c, cell, out=c)
        h, flat = hs[s], flats[s]
        np.tanh(c, out=h)
        np.multiply(o, h, out=h)
    return True


def _dynamic_quantize_lstm(inputs, attrs, outs):
    """com.microsoft's DynamicQuantizeLSTM as the reference (graph/reference/recurrent.py)
    computes it, bit for bit, without its per-step allocations: X quantized once (a
    direction's reversed steps keep its range) and projected by one GEMM per direction
    into a step-ordered buffer (the second direction's steps reversed), then a loop over
    time (`_lstm_steps`) running the directions side by side (or one after the other,
    where that keeps each R in cache): each direction's hidden state quantized over its
    own range (DynamicQuantizeLinear's float32 arithmetic) and centred in one buffer,
    one batched GEMM by the centred R, the gates in place.
    LSTM's default activations without clip, peepholes, input_forget, layout 1 or
    sequences shorter than X: the reference."""
    from palimpsest.dialects.graph.reference._common import i_attr, s_attr
    from palimpsest.dialects.graph.reference.recurrent import quantized_weights

    if len(inputs) != 12 or not 1 <= len(outs) <= 3:
        return False
    x, w, r, b, lengths, h0, c0, peep, w_scale, w_zero, r_scale, r_zero = inputs
    direction = s_attr(attrs, "direction", "forward")
    dirs = 2 if direction == "bidirectional" else 1
    names = [n.decode() if isinstance(n, bytes) else n for n in attrs.get("activations") or []]
    if any(v is None for v in (x, w, r, w_scale, w_zero, r_scale, r_zero)) \
            or peep is not None or attrs.get("clip") is not None \
            or i_attr(attrs, "input_forget", 0) or i_attr(attrs, "layout", 0) \
            or names not in ([], ["Sigmoid", "Tanh", "Tanh"] * dirs) \
            or x.dtype != np.float32 or x.ndim != 3 or not x.shape[0] \
            or w.ndim != 3 or r.ndim != 3 or w.dtype.kind not in "iu" or w.dtype.itemsize != 1 \
            or r.dtype.kind not in "iu" or r.dtype.itemsize != 1:
        return False
    steps, batch, size = x.shape
    hidden = r.shape[1]
    gates = 4 * hidden
    state = (dirs, batch, hidden)
    if w.shape != (dirs, size, gates) or r.shape != (dirs, hidden, gates) \
            or i_attr(attrs, "hidden_size", hidden) != hidden \
            or any(p.size not in (dirs, dirs * gates)
                   for p in (w_scale, w_zero, r_scale, r_zero)) \
            or (b is not None and b.shape != (dirs, 2 * gates)) \
            or (lengths is not None and (lengths.size != batch or np.any(lengths != steps))) \
            or any(v is not None and v.shape != state for v in (h0, c0)) \
            or outs[0].shape != (steps, dirs, batch, hidden) \
            or any(o.shape != state for o in outs[1:]) \
            or any(o.dtype != np.float32 for o in outs) \
            or any(_overlaps(o, x, h0, c0) for o in outs):
        return False
    f32 = np.float32
    bias = np.zeros((dirs, 2 * gates), f32) if b is None else b.astype(f32)
    w_bias, r_bias = bias[:, None, :gates], bias[:, None, gates:]
    w_scale = w_scale.astype(f32).reshape(dirs, 1, -1)
    r_scale = r_scale.astype(f32).reshape(dirs, 1, -1)

    # every step's X W^T, in step order: direction d's step s is its time reversed(d)[s]
    low, high = _extremes(x)
    quantization = _quantization([low], [high])
    if quantization is None:
        return False
    (divisor,), (top,), (x_scale,) = quantization
    w_centred = quantized_weights(w, w_zero)
    xc = np.divide(x.reshape(-1, size), f32(divisor))    # X quantized, centred
    np.rint(xc, out=xc)
    if _saturates([high], [divisor], [top]):
        np.minimum(xc, f32(top), out=xc)
    projected = np.empty((steps, dirs, batch, gates), f32)
    product = np.empty((len(xc), gates), f32)     # (a float64 product rounded once)
    w_zeros = w_zero.reshape(dirs, -1)
    on_onednn = int8_products.usable(np.uint8, w[0], len(xc))
    if on_onednn:   # X as uint8 (the centred values plus their zero point)
        x_zero = 255 - int(top)
        xq = np.add(xc, f32(x_zero)).astype(np.uint8)
        exact = np.empty((len(xc), gates), np.int32)
    else:
        xc = xc.astype(w_centred.float_type(255), copy=False)
    for d in range(dirs):
        view = projected[::-1, d] if direction == "reverse" or d == 1 else projected[:, d]
        if on_onednn:
            prepared = int8_products.prepared(w[d], w_zeros[d], w_centred, d)
            scales = np.ascontiguousarray((f32(x_scale) * w_scale[d]).reshape(-1))
            if is_constant(w) and int8_products.packed_product(
                    xq, x_zero, prepared, product, scales, np.ascontiguousarray(
                        w_bias[d].reshape(-1))):   # (scaled and biased as below)
                np.copyto(view, product.reshape(steps, batch, gates))
                continue
            int8_products.product(xq, x_zero, prepared, exact)
            np.copyto(product, exact, casting="unsafe")
        else:
            for columns, block in _weight_columns(w[d], w_zeros[d], w_centred, 255,
                                                  len(xc), d):
                np.matmul(xc, block, out=product[:, columns])
        np.multiply(product.reshape(steps, batch, gates), f32(x_scale) * w_scale[d], out=view)
        np.add(view, w_bias[d], out=view)
    if b is not None:   # R's bias in every step's projection (as the reference: after W's)
        np.add(projected, r_bias, out=projected)

    r_centred = quantized_weights(r, r_zero)
    r_zeros = r_zero.reshape(dirs, -1)
    r_on_onednn = int8_products.usable(np.uint8, r[0], batch)
    r_weights = [int8_products.prepared(r[d], r_zeros[d], r_centred, d)
                 for d in range(dirs)] if r_on_onednn else None
    r_floats = None if r_on_onednn else r_centred.floats(255)
    hs = np.empty((steps,) + state, f32)         # the hidden states, in step order
    c = np.zeros(state, f32) if c0 is None else c0.astype(f32)
    h = np.zeros(state, f32) if h0 is None else h0.astype(f32)
    # both directions in one loop (half the numpy calls), unless one direction's R
    # fits in a core's L2 cache and both do not: then one after the other, each R
    # staying cached across its steps
    one = r[0].nbytes if r_on_onednn else r_floats[0].nbytes
    groups = [slice(d, d + 1) for d in range(dirs)] if dirs > 1 and one <= 0.75 * _l2_bytes() \
        < dirs * one else [slice(0, dirs)]
    for group in groups:
        shape = (group.stop - group.start, batch, hidden)
        recur = _onednn_recurrence(r_weights[group], shape) if r_on_onednn else \
            _float_recurrence(r_floats[group], shape)
        if not _lstm_steps(projected[:, group], recur, r_scale[group], h[group], c[group],
                           hs[:, group]):
            return False    # a scale not finite: the reference's (nothing written yet)
    h = hs[-1]
    for d in range(dirs):
        np.copyto(outs[0][:, d], hs[::-1, d] if direction == "reverse" or d == 1 else hs[:, d])
    if len(outs) > 1:
        np.copyto(outs[1], h)
    if len(outs) > 2:
        np.copyto(outs[2], c)
    return True


FAST["graph.dynamic_quantize_lstm"] = _dynamic_quantize_lstm
