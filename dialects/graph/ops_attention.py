"""Attention and the transformer blocks of opsets 23-25: Attention (with past/present key
and value caches, masks, causal and sliding windows, grouped heads), RMSNormalization,
RotaryEmbedding, LinearAttention, CausalConvWithState, TensorScatter and SwiGLU."""

from __future__ import annotations

from palimpsest.dialects.graph import bound_rules as B
from palimpsest.dialects.graph import shapes as S
from palimpsest.dialects.graph.ops_base import (
    AnyTensor, FloatTensor, GraphOp, IndexTensor, ShapeError, flag_prop, float_prop,
    int_prop, str_prop, tensor,
)
from palimpsest.dialects.graph.ops_nn import TrailingNormOp
from palimpsest.ir.opdef import (
    operand, optional_operand, register_op, result_def, variadic_result,
)


def _dim(shape, index):
    return shape[index] if shape is not None else None


def _div(a, b):
    return a // b if a is not None and b else None


def _add(a, b):
    return a + b if a is not None and b is not None else None


def _results(args, names, count):
    if count is None:
        count = 1
    if not 1 <= count <= len(names):
        raise ShapeError(f"has {count} results, at most {len(names)} ({', '.join(names)})")
    return count


@register_op
class AttentionOp(GraphOp):
    """Q, K, V: [B, H, S, D] (4-D) or [B, S, H*D] (3-D, heads from q_num_heads and
    kv_num_heads). Results: Y, then optionally present_key, present_value and
    qk_matmul_output."""

    name = "graph.attention"
    q = operand(FloatTensor)
    k = operand(FloatTensor)
    v = operand(FloatTensor)
    attn_mask = optional_operand(AnyTensor)
    past_key = optional_operand(FloatTensor)
    past_value = optional_operand(FloatTensor)
    nonpad_kv_seqlen = optional_operand(IndexTensor)
    y = result_def(AnyTensor)
    extras = variadic_result(AnyTensor)
    is_causal = flag_prop(0)
    kv_num_heads = int_prop(optional=True)
    q_num_heads = int_prop(optional=True)
    qk_matmul_output_mode = int_prop(0, values=(0, 1, 2, 3))
    scale = float_prop(optional=True)
    softcap = float_prop(0.0)
    softmax_precision = int_prop(optional=True)
    left_window_size = int_prop(-1)
    right_window_size = int_prop(-1)

    @classmethod
    def rule(cls, args):
        element = args.same_element("q", "k", "v")
        count = _results(args, ["Y", "present_key", "present_value", "qk_matmul_output"],
                         args.num_results)
        q, k, v = args.shape("q"), args.shape("k"), args.shape("v")
        if q is not None and len(q) not in (3, 4):
            raise ShapeError(f"Q must be 3-D or 4-D, got {S.fmt(q)}")
        past = args.shape("past_key")
        past_len = _dim(past, 2) if args.has("past_key") else 0
        if q is None or k is None or v is None:
            return [tensor(None, element)] * count
        if len(q) == 4:
            if len(k) != 4 or len(v) != 4:
                raise ShapeError("Q, K and V must have the same rank")
            batch, q_heads, q_len, _ = q
            kv_heads, kv_len, k_size, v_size = k[1], k[2], k[3], v[3]
            y = (batch, q_heads, q_len, v_size)
        else:
            q_heads, kv_heads = args["q_num_heads"], args["kv_num_heads"]
            if not q_heads or not kv_heads:
                raise ShapeError("3-D inputs need q_num_heads and kv_num_heads")
            batch, q_len = q[0], q[1]
            kv_len = k[1]
            k_size, v_size = _div(k[2], kv_heads), _div(v[2], kv_heads)
            y = (batch, q_len, None if v_size is None else q_heads * v_size)
        total = _add(past_len, kv_len)
        types = [tensor(y, element), tensor((batch, kv_heads, total, k_size), element),
                 tensor((batch, kv_heads, total, v_size), element),
                 tensor((batch, q_heads, q_len, total), element)]
        return types[:count]


@register_op
class RMSNormOp(TrailingNormOp):
    name = "graph.rms_norm"

    @classmethod
    def rule(cls, args):
        x = args.shape("x")
        if x is not None:
            S.normalize_axis(args["axis"], len(x))
        return [tensor(x, args.element("x"))]


@register_op
class RotaryEmbeddingOp(GraphOp):
    """X: [B, S, H*D] (num_heads given) or [B, H, S, D]; caches [max position or B x S,
    rotary dim / 2]."""

    name = "graph.rotary_embedding"
    x = operand(FloatTensor)
    cos_cache = operand(FloatTensor)
    sin_cache = operand(FloatTensor)
    position_ids = optional_operand(IndexTensor)
    y = result_def(AnyTensor)
    interleaved = flag_prop(0)
    num_heads = int_prop(0)
    rotary_embedding_dim = int_prop(0)

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        x = args.shape("x")
        if x is not None and len(x) not in (3, 4):
            raise ShapeError(f"input must be 3-D or 4-D, got {S.fmt(x)}")
        if x is not None and len(x) == 3 and not args["num_heads"]:
            raise ShapeError("a 3-D input needs num_heads")
        return [tensor(x, args.element("x"))]


@register_op
class LinearAttentionOp(GraphOp):
    """query/key/value: [B, T, H*D]; results output [B, T, Hq*Dv] and present_state
    [B, Hkv, Dk, Dv]."""

    name = "graph.linear_attention"
    query = operand(FloatTensor)
    key = operand(FloatTensor)
    value = operand(FloatTensor)
    past_state = optional_operand(FloatTensor)
    decay = optional_operand(FloatTensor)
    beta = optional_operand(FloatTensor)
    output = result_def(AnyTensor)
    extras = variadic_result(AnyTensor)
    chunk_size = int_prop(optional=True)
    kv_num_heads = int_prop()
    q_num_heads = int_prop()
    scale = float_prop(optional=True)
    update_rule = str_prop("gated_delta", choices=("linear", "gated", "delta", "gated_delta"))

    @classmethod
    def rule(cls, args):
        count = _results(args, ["output", "present_state"], args.num_results)
        q, k, v = args.shape("query"), args.shape("key"), args.shape("value")
        q_heads, kv_heads = args["q_num_heads"], args["kv_num_heads"]
        if q_heads <= 0 or kv_heads <= 0 or q_heads % kv_heads:
            raise ShapeError(f"q_num_heads ({q_heads}) must be a positive multiple of "
                             f"kv_num_heads ({kv_heads})")
        rule = args["update_rule"]
        if args.has("decay") != (rule in ("gated", "gated_delta")):
            raise ShapeError(f"update_rule '{rule}' {'needs' if 'gated' in rule else 'forbids'}"
                             f" the decay input")
        if args.has("beta") != (rule in ("delta", "gated_delta")):
            raise ShapeError(f"update_rule '{rule}' {'needs' if 'delta' in rule else 'forbids'}"
                             f" the beta input")
        element = args.element("query")
        d_k = _div(_dim(k, 2), kv_heads)
        d_v = _div(_dim(v, 2), kv_heads)
        out = (_dim(q, 0), _dim(q, 1), None if d_v is None else q_heads * d_v)
        state_element = args.element("past_state") if args.has("past_state") else element
        return [tensor(out, element),
                tensor((_dim(q, 0), kv_heads, d_k, d_v), state_element)][:count]


@register_op
class CausalConvWithStateOp(GraphOp):
    """Depthwise causal 1-D conv over [B, C, L] continuing from past_state [B, C, K-1];
    results output [B, C, L] and present_state [B, C, K-1]."""

    name = "graph.causal_conv_with_state"
    input = operand(FloatTensor)
    weight = operand(FloatTensor)
    bias = optional_operand(FloatTensor)
    past_state = optional_operand(FloatTensor)
    output = result_def(AnyTensor)
    extras = variadic_result(AnyTensor)
    activation = str_prop("none", choices=("none", "silu", "swish"))

    @classmethod
    def rule(cls, args):
        count = _results(args, ["output", "present_state"], args.num_results)
        x, w = args.shape("input"), args.shape("weight")
        if x is not None and len(x) != 3:
            raise ShapeError(f"input must be [batch, channels, length], got {S.fmt(x)}")
        taps = _dim(w, 2)
        state = (_dim(x, 0), _dim(x, 1), None if taps is None else taps - 1)
        element = args.element("input")
        return [tensor(x, element), tensor(state, element)][:count]


@register_op
class TensorScatterOp(GraphOp):
    name = "graph.tensor_scatter"
    past_cache = operand(AnyTensor)
    update = operand(AnyTensor)
    write_indices = optional_operand(IndexTensor)
    present_cache = result_def(AnyTensor)
    axis = int_prop(-2)
    mode = str_prop("linear", choices=("linear", "circular"))

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        return [tensor(args.shape("past_cache"), args.same_element("past_cache", "update"))]


@register_op
class SwiGLUOp(GraphOp):
    name = "graph.swiglu"
    a = operand(FloatTensor)
    b = operand(FloatTensor)
    y = result_def(AnyTensor)
    alpha = float_prop(1.0)

    bound_rule = classmethod(B.at_upper)

    @classmethod
    def rule(cls, args):
        element = args.same_element("a", "b")
        a, b = args.shape("a"), args.shape("b")
        if a is not None and b is not None:
            S.merge_shapes(a, b, "A and B (SwiGLU does not broadcast)")
        return [tensor(a, element)]
