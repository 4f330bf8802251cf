"""Reference kernels of ops_attention.py."""

from __future__ import annotations

import numpy as np

from ._common import (
    ONNX_DTYPES, f_attr, float_compute_dtype, i_attr, kernel, norm_axis, op_error, opt, req,
    s_attr,
)


def _heads(x, count):
    """[B, S, H*D] -> [B, H, S, D]."""
    b, s, hidden = x.shape
    return x.reshape(b, s, count, hidden // count).transpose(0, 2, 1, 3)


def _window_bias(q_len, kv_len, offset, causal, left, right, dtype):
    """0 where query i may attend key j, -inf elsewhere: causal (j <= i + offset) and the
    sliding window (i + offset - left <= j <= i + offset + right); `offset` a scalar or
    one per batch (then the result is [B, 1, q, kv])."""
    i = np.arange(q_len).reshape(q_len, 1)
    j = np.arange(kv_len).reshape(1, kv_len)
    per_batch = np.ndim(offset) > 0
    position = i + (np.reshape(offset, (-1, 1, 1)) if per_batch else int(offset))
    allowed = np.ones(np.broadcast_shapes(position.shape, j.shape), bool)
    if causal:
        allowed &= j <= position
    if left >= 0:
        allowed &= position - j <= left
    if right >= 0:
        allowed &= j - position <= right
    bias = np.where(allowed, 0.0, -np.inf).astype(dtype)
    return bias.reshape(bias.shape[0], 1, q_len, kv_len) if per_batch else bias


def _masked_softmax(scores):
    """Softmax over the last axis; a row that is all -inf gives zeros."""
    top = np.max(scores, axis=-1, keepdims=True)
    top = np.where(np.isneginf(top), 0, top)
    e = np.exp(scores - top)
    total = e.sum(axis=-1, keepdims=True)
    return e / np.where(total == 0, 1, total)


@kernel("Attention", multi=True)
def attention(inputs, attrs, num_results=None):
    q = req("Attention", inputs, 0, "Q")
    k = req("Attention", inputs, 1, "K")
    v = req("Attention", inputs, 2, "V")
    mask, past_k, past_v, nonpad = (opt(inputs, i) for i in (3, 4, 5, 6))
    dtype = q.dtype
    three_d = q.ndim == 3
    if three_d:
        q_heads, kv_heads = i_attr(attrs, "q_num_heads", 0), i_attr(attrs, "kv_num_heads", 0)
        q, k, v = _heads(q, q_heads), _heads(k, kv_heads), _heads(v, kv_heads)
    scale = attrs.get("scale")
    scale = 1 / np.sqrt(q.shape[3]) if scale is None else float(scale)
    if past_k is not None:
        k = np.concatenate([past_k, k], axis=2)
        v = np.concatenate([past_v, v], axis=2)
    present_k, present_v = k, v
    q_len, kv_len = q.shape[2], k.shape[2]
    compute = float_compute_dtype(dtype)
    bias = np.zeros((q_len, kv_len), compute)
    if mask is not None:
        pad = kv_len - mask.shape[-1]
        if pad > 0:
            mask = np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, pad)],
                          constant_values=False if mask.dtype == np.bool_ else -np.inf)
        if mask.dtype == np.bool_:
            mask = np.where(mask, 0.0, -np.inf)
        bias = bias + mask.astype(compute)
    causal = bool(i_attr(attrs, "is_causal", 0))
    left, right = i_attr(attrs, "left_window_size", -1), i_attr(attrs, "right_window_size", -1)
    if causal or left >= 0 or right >= 0:
        if past_k is None and nonpad is not None:
            offset = nonpad.reshape(-1).astype(np.int64) - q_len
        else:
            offset = past_k.shape[2] if past_k is not None else 0
        bias = bias + _window_bias(q_len, kv_len, offset, causal, left, right, compute)
    if nonpad is not None:
        valid = np.arange(kv_len) < nonpad.reshape(-1, 1)
        bias = bias + np.where(valid, 0.0, -np.inf).reshape(-1, 1, 1, kv_len).astype(compute)
    if q.shape[1] != k.shape[1]:   # grouped-query attention: each KV head serves a group
        repeat = q.shape[1] // k.shape[1]
        k, v = np.repeat(k, repeat, axis=1), np.repeat(v, repeat, axis=1)
    root = np.sqrt(scale)
    scores = (q.astype(compute) * root) @ (np.swapaxes(k, 2, 3).astype(compute) * root)
    softcap = f_attr(attrs, "softcap", 0.0)
    if softcap > 0:
        scores = np.tanh(scores / softcap) * softcap
    mode = i_attr(attrs, "qk_matmul_output_mode", 0)
    with_bias = scores + bias
    qk_output = with_bias if mode == 2 else scores
    precision = attrs.get("softmax_precision")
    if precision is not None:
        with_bias = with_bias.astype(ONNX_DTYPES[int(precision)]).astype(
            float_compute_dtype(ONNX_DTYPES[int(precision)]))
    probabilities = _masked_softmax(with_bias)
    all_masked = np.isneginf(np.max(np.broadcast_to(bias, with_bias.shape[:-2] + bias.shape[-2:]),
                                    axis=-1, keepdims=True))
    probabilities = np.where(all_masked, 0.0, probabilities)
    if mode == 3:
        qk_output = probabilities
    y = probabilities.astype(dtype).astype(compute) @ v.astype(compute)
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
    results = [y.astype(dtype), present_k, present_v, np.asarray(qk_output).astype(dtype)]
    return results[:num_results or 1]


@kernel("RMSNormalization")
def rms_normalization(inputs, attrs):
    x = req("RMSNormalization", inputs, 0, "X")
    scale = req("RMSNormalization", inputs, 1, "scale")
    axis = norm_axis("RMSNormalization", i_attr(attrs, "axis", -1), x.ndim)
    xc = x.astype(float_compute_dtype(x.dtype), copy=False)
    mean_square = np.mean(xc * xc, axis=tuple(range(axis, x.ndim)), keepdims=True)
    y = xc / np.sqrt(mean_square + f_attr(attrs, "epsilon", 1e-5)) * scale
    return [y.astype(x.dtype)]


@kernel("RotaryEmbedding")
def rotary_embedding(inputs, attrs):
    x = req("RotaryEmbedding", inputs, 0, "X")
    cos = req("RotaryEmbedding", inputs, 1, "cos_cache")
    sin = req("RotaryEmbedding", inputs, 2, "sin_cache")
    positions = opt(inputs, 3)
    four_d = x.ndim == 4
    if four_d:
        h = x.transpose(0, 2, 1, 3)                        # [B, S, H, D]
    else:
        heads = i_attr(attrs, "num_heads", 0)
        h = x.reshape(x.shape[0], x.shape[1], heads, -1)
    dim = i_attr(attrs, "rotary_embedding_dim", 0) or h.shape[3]
    if positions is not None:
        cos, sin = cos[positions], sin[positions]
    if cos.shape[-1] != dim // 2 or sin.shape[-1] != dim // 2:
        raise op_error("RotaryEmbedding", f"the caches' last dim must be {dim // 2}, got "
                                          f"{cos.shape[-1]} and {sin.shape[-1]}")
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    rotate = h[..., :dim]
    if i_attr(attrs, "interleaved", 0):
        x1, x2 = rotate[..., 0::2], rotate[..., 1::2]
    else:
        x1, x2 = rotate[..., :dim // 2], rotate[..., dim // 2:]
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    if i_attr(attrs, "interleaved", 0):
        rotated = np.stack([real, imag], axis=-1).reshape(rotate.shape)
    else:
        rotated = np.concatenate([real, imag], axis=-1)
    out = np.concatenate([rotated, h[..., dim:]], axis=-1).astype(x.dtype)
    return [out.transpose(0, 2, 1, 3) if four_d else out.reshape(x.shape)]


@kernel("LinearAttention", multi=True)
def linear_attention(inputs, attrs, num_results=None):
    """A recurrent state S [B, Hkv, Dk, Dv] per step t: decayed by exp(g_t) (gated rules),
    updated with k_t^T (beta_t (v_t - k_t S)) (delta rules) or k_t^T v_t, read as
    scale * q_t S (grouped query heads share a KV head's state)."""
    query = req("LinearAttention", inputs, 0, "query")
    key = req("LinearAttention", inputs, 1, "key")
    value = req("LinearAttention", inputs, 2, "value")
    past, decay, beta = opt(inputs, 3), opt(inputs, 4), opt(inputs, 5)
    q_heads, kv_heads = i_attr(attrs, "q_num_heads", 1), i_attr(attrs, "kv_num_heads", 1)
    rule = s_attr(attrs, "update_rule", "gated_delta")
    b, t, _ = query.shape
    q = _heads(query, q_heads).astype(np.float32)
    k = _heads(key, kv_heads).astype(np.float32)
    v = _heads(value, kv_heads).astype(np.float32)
    d_k, d_v = k.shape[3], v.shape[3]
    if decay is not None:
        decay = (decay.reshape(b, t, kv_heads, 1).transpose(0, 2, 1, 3)
                 if decay.shape[-1] == kv_heads else _heads(decay, kv_heads)).astype(np.float32)
    if beta is not None:
        beta = beta.reshape(b, t, beta.shape[-1], 1).transpose(0, 2, 1, 3).astype(np.float32)
    state = (past.astype(np.float32).copy() if past is not None
             else np.zeros((b, kv_heads, d_k, d_v), np.float32))
    scale = attrs.get("scale")
    scale = 1 / np.sqrt(d_k) if not scale else float(scale)
    group = q_heads // kv_heads
    out = np.zeros((b, q_heads, t, d_v), np.float32)
    for step in range(t):
        k_t, v_t = k[:, :, step], v[:, :, step]
        if rule in ("gated", "gated_delta"):
            state = state * np.exp(decay[:, :, step])[..., None]
        if rule in ("delta", "gated_delta"):
            v_t = beta[:, :, step] * (v_t - np.einsum("bhdm,bhd->bhm", state, k_t))
        state = state + k_t[..., :, None] * v_t[..., None, :]
        shared = np.repeat(state, group, axis=1) if group > 1 else state
        out[:, :, step] = scale * np.einsum("bhd,bhdm->bhm", q[:, :, step], shared)
    output = out.transpose(0, 2, 1, 3).reshape(b, t, q_heads * d_v).astype(query.dtype)
    state_dtype = past.dtype if past is not None else query.dtype
    return [output, state.astype(state_dtype)][:num_results or 1]


@kernel("CausalConvWithState", multi=True)
def causal_conv_with_state(inputs, attrs, num_results=None):
    x = req("CausalConvWithState", inputs, 0, "input")
    weight = req("CausalConvWithState", inputs, 1, "weight")
    bias, past = opt(inputs, 2), opt(inputs, 3)
    batch, channels, length = x.shape
    taps = weight.shape[2]
    if past is None:
        past = np.zeros((batch, channels, taps - 1), x.dtype)
    padded = np.concatenate([past, x], axis=2)
    compute = float_compute_dtype(x.dtype)
    out = np.zeros((batch, channels, length), compute)
    for tap in range(taps):
        out += padded[:, :, tap:tap + length].astype(compute) * \
            weight[:, 0, tap].astype(compute)[None, :, None]
    if bias is not None:
        out += bias.astype(compute)[None, :, None]
    out = out.astype(x.dtype)
    if s_attr(attrs, "activation", "none") in ("silu", "swish"):
        wide = out.astype(np.float32)
        out = (wide / (1 + np.exp(-wide))).astype(x.dtype)
    state = padded[:, :, padded.shape[2] - (taps - 1):]
    return [out, np.ascontiguousarray(state)][:num_results or 1]


@kernel("TensorScatter")
def tensor_scatter(inputs, attrs):
    """`update` written into a copy of `past_cache` along `axis`, at each batch's
    write index (wrapping around in circular mode)."""
    cache = req("TensorScatter", inputs, 0, "past_cache")
    update = req("TensorScatter", inputs, 1, "update")
    indices = opt(inputs, 2)
    axis = norm_axis("TensorScatter", i_attr(attrs, "axis", -2), cache.ndim)
    if axis == 0:
        raise op_error("TensorScatter", "axis must not be the batch axis")
    indices = np.zeros(cache.shape[0], np.int64) if indices is None else indices.reshape(-1)
    circular = s_attr(attrs, "mode", "linear") == "circular"
    out = cache.copy()
    steps = np.arange(update.shape[axis])
    for b in range(cache.shape[0]):
        at = indices[b] + steps
        if circular:
            at = at % cache.shape[axis]
        target = np.moveaxis(out[b], axis - 1, 0)
        target[at] = np.moveaxis(update[b], axis - 1, 0)
    return [out]


@kernel("SwiGLU")
def swiglu(inputs, attrs):
    a = req("SwiGLU", inputs, 0, "A")
    b = req("SwiGLU", inputs, 1, "B")
    alpha = f_attr(attrs, "alpha", 1.0)
    wide = a.astype(float_compute_dtype(a.dtype))
    return [(wide / (1 + np.exp(-alpha * wide)) * b).astype(a.dtype)]
