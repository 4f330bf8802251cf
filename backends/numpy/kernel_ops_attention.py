"""`kernel.attention` on numpy (dialects/kernel_attention.py): every product into the
planned scores, stats and context workspaces with `out=`, grouped-query heads as a
broadcast over each KV head's group (no repeated K or V)."""

from __future__ import annotations

import numpy as np

from palimpsest.backends.numpy.kernel_ops import config_of, impl, workspaces_by_role


def _heads(x, heads):
    """[B, S, H*D] seen as [B, H, S, D] (a view)."""
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


@impl("kernel.attention")
def attention(op, inputs, outputs, workspaces):
    config = config_of(op)
    ws = workspaces_by_role(op, workspaces)
    q, k, v = inputs[:3]
    mask = inputs[3] if len(inputs) > 3 else None
    three_d = q.ndim == 3
    if three_d:
        q = _heads(q, config["q_num_heads"])
        k, v = _heads(k, config["kv_num_heads"]), _heads(v, config["kv_num_heads"])
    b, hq, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    group = hq // hkv
    scores, stats = ws["scores"], ws["stats"]
    grouped = scores.reshape(b, hkv, group, sq, skv)
    np.matmul(q.reshape(b, hkv, group, sq, d), np.swapaxes(k, 2, 3)[:, :, None], out=grouped)
    np.multiply(scores, scores.dtype.type(config["scale"]), out=scores)
    if mask is not None:
        if mask.dtype == np.bool_:
            np.copyto(scores, -np.inf, where=~mask)
        else:
            np.add(scores, mask, out=scores)
    if config["is_causal"]:
        np.copyto(scores, -np.inf, where=np.triu(np.ones((sq, skv), bool), 1))
    # softmax along the rows; a row that is all -inf gives zeros (as ONNX says)
    np.max(scores, axis=-1, keepdims=True, out=stats)
    np.copyto(stats, 0, where=np.isneginf(stats))
    np.subtract(scores, stats, out=scores)
    np.exp(scores, out=scores)
    np.sum(scores, axis=-1, keepdims=True, out=stats)
    np.copyto(stats, 1, where=stats == 0)
    np.divide(scores, stats, out=scores)
    y = outputs[0]
    context = ws["context"] if three_d else y
    np.matmul(grouped, v[:, :, None], out=context.reshape(b, hkv, group, sq, v.shape[3]))
    if three_d:
        np.copyto(y.reshape(b, sq, hq, v.shape[3]), context.transpose(0, 2, 1, 3))
