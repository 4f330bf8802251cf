"""`kernel.attention`: scaled dot-product attention (graph.attention, ops_attention.py) in
its common form — Q, K, V (3-D with q_num_heads/kv_num_heads, or 4-D), an optional mask,
causal or not, grouped-query heads — with its scratch as workspaces the planner sees:

| role | shape | holds |
|---|---|---|
| `scores` | B x Hq x Sq x Skv | Q·Kᵀ, then the softmax rows in place |
| `stats` | B x Hq x Sq x 1 | each row's max, then its sum |
| `context` (3-D) | B x Hq x Sq x Dv | softmax · V before its heads are interleaved into Y |

ins: Q, K, V and, when `masked`, the mask (bool, or Q's type: added). The rest of
Attention (past/present caches, softcap, qk outputs, windows, nonpad lengths) stays
`kernel.generic`.
"""

from __future__ import annotations

from palimpsest.dialects.kernel_base import KernelOp, _int, is_float
from palimpsest.ir import attributes as A
from palimpsest.ir.opdef import PropDef, register_op
from palimpsest.ir.types import i1


@register_op
class AttentionOp(KernelOp):
    name = "kernel.attention"
    arity = (3, 4)
    is_causal = _int(0, (0, 1))
    q_num_heads = _int(0)
    kv_num_heads = _int(0)
    scale = PropDef(A.FloatAttr, description="an f32 float")

    @classmethod
    def dims(cls, in_shapes, config) -> tuple:
        """(B, Hq, Sq, Skv, Dv)."""
        q, k, v = in_shapes[:3]
        if len(q) == 4:
            return q[0], q[1], q[2], k[2], v[3]
        heads, kv_heads = config["q_num_heads"], config["kv_num_heads"]
        dv = v[2] // kv_heads if v[2] is not None else None
        return q[0], heads, q[1], k[1], dv

    @classmethod
    def check(cls, in_types, config):
        q, k, v = in_types[:3]
        if not is_float(q.element_type) or k.element_type != q.element_type \
                or v.element_type != q.element_type:
            return "computes f32 or f64, with Q, K and V alike"
        rank = len(q.shape)
        if rank not in (3, 4) or len(k.shape) != rank or len(v.shape) != rank:
            return "takes Q, K and V all 3-D or all 4-D"
        if rank == 3 and (config["q_num_heads"] <= 0 or config["kv_num_heads"] <= 0):
            return "3-D Q, K, V need q_num_heads and kv_num_heads"
        if len(in_types) == 4 and in_types[3].element_type not in (i1, q.element_type):
            return "takes a bool mask or one of Q's element type"
        return None

    @classmethod
    def result_shapes(cls, in_shapes, config):
        b, hq, sq, _, dv = cls.dims(in_shapes, config)
        if len(in_shapes[0]) == 4:
            return [(b, hq, sq, dv)]
        return [(b, sq, None if dv is None else hq * dv)]

    @classmethod
    def workspace_roles(cls, in_types, config):
        return ["scores", "stats"] + (["context"] if len(in_types[0].shape) == 3 else [])

    @classmethod
    def workspace_shape(cls, role, in_shapes, config):
        b, hq, sq, skv, dv = cls.dims(in_shapes, config)
        return {"scores": (b, hq, sq, skv), "stats": (b, hq, sq, 1),
                "context": (b, hq, sq, dv)}[role]
