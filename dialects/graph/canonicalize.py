"""Canonicalization patterns of the graph dialect, as small declarative tables.

Importing this module attaches the patterns to the op classes (their
`canonicalization_patterns`); the `canonicalize` pass imports it. Every rewrite keeps
the numbers the reference executor computes: the ones that drop or merge data movement
are exact, and the batch-norm fold changes only rounding. A value is replaced only by
one of exactly the same type, so function signatures and users never see a new type.

| root              | rewrite                                                            |
|-------------------|--------------------------------------------------------------------|
| graph.identity    | identity(x) → x                                                    |
| graph.dropout     | dropout(x) at inference → x (a used mask → constant true)          |
| graph.cast        | cast(x) to x's own element type → x                                |
| graph.reshape     | reshape(x) / flatten(x) to x's own static shape → x                |
| graph.flatten     |                                                                    |
| graph.reshape     | reshape(reshape|flatten|squeeze|unsqueeze(x), s) → reshape(x, s)   |
| graph.transpose   | transpose(x) with the identity perm → x                            |
| graph.transpose   | transpose(transpose(x, p), q) → transpose(x, p∘q), or x            |
| graph.transpose   | transpose(concat(transpose(a, p), transpose(b, p), ...), q) →      |
|                   | transpose(concat(a, b, ..., p's axis), p∘q), or the concat alone:  |
|                   | an NHWC export's skip joins concat in NCHW, as onnxruntime's       |
|                   | transpose optimizer has them                                       |
| graph.squeeze     | squeeze(unsqueeze(x, a), a) → x                                    |
| graph.unsqueeze   | unsqueeze(squeeze(x, a), a) → x                                    |
| graph.gather      | gather(f(w, ...), i) with f elementwise (or a cast) of constants,   |
|                   | used only there → f(gather(w, i), ...): weights dequantized per    |
|                   | gathered row instead of whole tables per run                       |
| graph.pow         | pow(x, 2 or 3) of a float x, the exponent one constant → x * x or   |
|                   | x * x * x (exact: the reference's and onnxruntime's own square and |
|                   | cube), which a backend's elementwise chains fuse without a pow     |
| graph.batch_norm  | batch_norm(conv(x, W, B)) with constant W, B and bn params, the     |
|                   | conv used only there → conv(x, W', B') (weights rescaled)          |
| graph.einsum      | a two-operand contraction → transposes, reshapes and one matmul     |
|                   | (canonicalize_einsum.py)                                           |
| graph.scatter_nd  | a ScatterND whose constant indices write one box, full but along    |
|                   | one axis → slices of the data and the updates, concatenated       |
|                   | (canonicalize_scatter.py)                                          |
| graph.div         | a layer norm written out op by op (mean, sub, pow, mean, add, sqrt, |
|                   | div, and the mul and add after) → graph.layer_norm                 |
|                   | (canonicalize_norm.py)                                             |
| graph.conv_transpose | of stride 1 (no output padding or shape, pads at most d (k - 1)) → |
|                   | conv of the kernel flipped, channels swapped per group, pads        |
|                   | d (k - 1) - p (canonicalize_conv.py)                               |
| graph.conv        | conv(pad(x, 0), W, B), the pad's only user, pads on the spatial     |
|                   | axes only → conv(x, W, B) with the pads added (canonicalize_conv.py) |
| graph.gru         | two independent recurrent layers of one kind and attributes over   |
| graph.lstm        | the same steps, small (their widths summing to at most 64) → one   |
| graph.rnn         | layer of both widths, weights block-diagonal, results sliced back  |
|                   | (canonicalize_recurrent.py)                                        |
| graph.slice       | a slice of a concat within one operand → that operand or a slice   |
|                   | of it (canonicalize_concat.py)                                     |

numpy is imported only inside the batch-norm fold, when it fires.
"""

from __future__ import annotations

from palimpsest.dialects.graph import shapes as S
from palimpsest.dialects.graph.ops_base import constant_values
from palimpsest.dialects.graph.ops_constant import ConstantOp
from palimpsest.ir import attributes as A
from palimpsest.ir.opdef import lookup_op
from palimpsest.ir.types import FloatType, TensorType, i1, i64
from palimpsest.ir.patterns import M, V, rules

RESHAPE_LIKE = ("graph.reshape", "graph.flatten", "graph.squeeze", "graph.unsqueeze")


def _const(bind: str | None = None) -> M:
    """An operand defined by `graph.constant` (the op is bound)."""
    return M("graph.constant", bind=bind)


def _same(value, result):
    """`value` when it can stand for `result` (same type), else None (decline)."""
    return value if value.type == result.type else None


def _rank(value) -> int | None:
    shape = getattr(value.type, "shape", None)
    return None if shape is None else len(shape)


def _static_shape(value):
    t = value.type
    return t.shape if isinstance(t, TensorType) and t.has_static_shape else None


# ---------------------------------------------------------------------------
# Ops that do nothing


def remove_identity(rewriter, op, x):
    return _same(x, op.results[0])


def remove_same_type_cast(rewriter, op, x):
    return _same(x, op.results[0])


def remove_static_noop_reshape(rewriter, op, x):
    """reshape/flatten whose input already has the (static) result type."""
    if _static_shape(x) is None:
        return None
    return _same(x, op.results[0])


def remove_inference_dropout(rewriter, op):
    """Dropout is the identity unless training with a non-zero ratio."""
    if op.training_mode is not None:
        training = constant_values(op.training_mode)
        if training is None or len(training) != 1:
            return None
        if training[0]:
            ratio = constant_values(op.ratio) if op.ratio is not None else [0.5]
            if ratio is None or len(ratio) != 1 or ratio[0] != 0.0:
                return None
    data = op.data
    if data.type != op.results[0].type:
        return None
    replacements = [data]
    for mask in op.results[1:]:
        if not mask.uses:
            replacements.append(None)
            continue
        if not isinstance(mask.type, TensorType) or not mask.type.has_static_shape \
                or mask.type.element_type != i1:
            return None
        replacements.append(rewriter.insert(ConstantOp.of([True], mask.type)).results[0])
    return replacements


# ---------------------------------------------------------------------------
# Chains of data movement


def fold_reshape_chain(rewriter, outer, inner):
    """reshape(R(x), s) → reshape(x, s) for a reshape-like R: all keep the row-major
    order, so only the final shape matters. A 0 in `s` copies a dim of R(x) (unless
    allowzero), so then `s` is replaced by the result's static dims, or the rule
    declines."""
    x = inner.operands[0]
    shape = outer.operands[1]
    allowzero = outer.properties.get("allowzero")
    if not (allowzero is not None and allowzero.value == 1):
        known = constant_values(shape)
        if known is None or 0 in known:
            dims = _static_shape(outer.results[0])
            if dims is None:
                return None
            new_shape = ConstantOp.of(list(dims), TensorType((len(dims),), i64))
            rewriter.insert(new_shape)
            rewriter.set_operand(outer, 1, new_shape.results[0])
            if 0 in dims:
                rewriter.set_property(outer, "allowzero", A.IntegerAttr(1, i64))
    rewriter.set_operand(outer, 0, x)
    return True


def _perm(op) -> list | None:
    attr = op.properties.get("perm")
    if attr is not None:
        return list(attr.values)
    rank = _rank(op.operands[0])
    return None if rank is None else list(reversed(range(rank)))


def _is_identity(perm) -> bool:
    return perm is not None and perm == list(range(len(perm)))


def remove_identity_transpose(rewriter, op, x):
    return _same(x, op.results[0]) if _is_identity(_perm(op)) else None


def fold_transpose_chain(rewriter, outer, inner):
    """transpose(transpose(x, p), q): result dim j is x's dim p[q[j]]."""
    p, q = _perm(inner), _perm(outer)
    if p is None or q is None or len(p) != len(q):
        return None
    combined = [p[j] for j in q]
    x = inner.operands[0]
    if _is_identity(combined) and x.type == outer.results[0].type:
        return x
    rewriter.set_operand(outer, 0, x)
    rewriter.set_property(outer, "perm", A.DenseArrayAttr(i64, tuple(combined)))
    return True


def sink_transposes_through_concat(rewriter, outer, concat):
    """transpose(concat(transpose(a_i, p)..., axis k), q): the concat of the a_i along
    p[k] is the inner concat with its dims in x's order, so the transposes compose as
    in a chain (fold_transpose_chain) and cancel where p∘q is the identity."""
    inners = [getattr(v, "op", None) for v in concat.operands]
    if not inners or any(t is None or t.name != "graph.transpose" for t in inners):
        return None
    p, q = _perm(inners[0]), _perm(outer)
    rank = _rank(concat.results[0])
    if p is None or q is None or rank is None or len(p) != rank or any(
            _perm(t) != p for t in inners[1:]):
        return None
    axis = p[concat.properties["axis"].value % rank]
    parts = [t.operands[0] for t in inners]
    shapes = [getattr(v.type, "shape", None) for v in parts]
    if any(shape is None or None in shape for shape in shapes):
        return None
    shape = S.concat(shapes, axis)   # (the inner concat checked the other dims agree)
    joined = type(concat)(parts, [TensorType(tuple(shape), concat.results[0].type.element_type)],
                          {**concat.properties, "axis": A.IntegerAttr(axis, i64)},
                          dict(concat.attributes), location=concat.location)
    joined.source_loc = concat.source_loc
    combined = [p[j] for j in q]
    if _is_identity(combined):
        return joined if joined.results[0].type == outer.results[0].type else None
    rewriter.insert(joined)
    rewriter.set_operand(outer, 0, joined.results[0])
    rewriter.set_property(outer, "perm", A.DenseArrayAttr(i64, tuple(combined)))
    return True


def _axes(axes_value, rank, shape=None) -> list | None:
    """Sorted, normalized axes from a constant operand; with no operand (squeeze), the
    dims of size 1 of a fully static `shape`."""
    if rank is None:
        return None
    if axes_value is None:
        if shape is None or any(d is None for d in shape):
            return None
        return [i for i, d in enumerate(shape) if d == 1]
    known = constant_values(axes_value)
    if known is None or any(not -rank <= a < rank for a in known):
        return None
    normalized = sorted(a % rank for a in known)
    return normalized if len(set(normalized)) == len(normalized) else None


def cancel_unsqueeze_of_squeeze(rewriter, outer, inner):
    """unsqueeze(squeeze(x, a), a) → x: both axes lists count in x's dims."""
    x = inner.operands[0]
    rank = _rank(x)
    shape = getattr(x.type, "shape", None)
    removed = _axes(inner.axes, rank, shape)
    inserted = _axes(outer.axes, rank)
    if removed is None or removed != inserted:
        return None
    return _same(x, outer.results[0])


def cancel_squeeze_of_unsqueeze(rewriter, outer, inner):
    """squeeze(unsqueeze(x, a), a) → x: both axes lists count in the unsqueezed dims."""
    middle = inner.results[0]
    rank = _rank(middle)
    inserted = _axes(inner.axes, rank)
    removed = _axes(outer.axes, rank, getattr(middle.type, "shape", None))
    if inserted is None or inserted != removed:
        return None
    return _same(inner.operands[0], outer.results[0])


# ---------------------------------------------------------------------------
# Gathers from elementwise functions of constants


def _elementwise_names() -> tuple:
    from palimpsest.dialects.graph.ops_elementwise import ElementwiseOp

    names, pending = {"graph.cast"}, [ElementwiseOp]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        name = getattr(cls, "name", None)
        if name and not name.startswith("<"):
            names.add(name)
    return tuple(sorted(names))


def _computed_from_constants(value, depth: int = 4) -> bool:
    """`value` is a constant, or (within `depth` ops) a function of constants only."""
    op = getattr(value, "op", None)
    if op is None:
        return False
    if op.name == "graph.constant":
        return True
    return depth > 0 and not op.regions and all(
        _computed_from_constants(v, depth - 1) for v in op.operands)


def gather_before_elementwise(rewriter, gather, inner, indices):
    """gather(f(a, b, ...), i, axis) → f(gather(a, i), gather(b, i), ...): exact, as f
    works element by element and a gather only picks elements. An operand that lacks
    the gathered axis (broadcast from the right) is used as it is; one that has it must
    have the data's extent there. Only for f of constants (weights dequantized before an
    embedding lookup, as quantized exports write them): f then runs on the picked rows,
    not on the whole table every run."""
    data = inner.results[0]
    data_shape, result = getattr(data.type, "shape", None), gather.results[0].type
    index_shape = getattr(indices.type, "shape", None)
    if data_shape is None or index_shape is None or not isinstance(result, TensorType) \
            or result.shape is None:
        return None
    if not all(_computed_from_constants(v) for v in inner.operands):
        return None
    rank, picked = len(data_shape), len(index_shape)
    axis_attr = gather.properties.get("axis")
    axis = (axis_attr.value if axis_attr is not None else 0) % max(rank, 1)
    bounds = result.bounds or (None,) * len(result.shape)
    operands = []
    for value in inner.operands:
        shape = _static_shape(value)
        if shape is None:
            return None
        own_axis = axis - (rank - len(shape))
        if own_axis < 0:          # broadcast along the gathered axis and all before it
            operands.append(value)
            continue
        if shape[own_axis] != data_shape[axis]:
            return None
        lead = (None,) * own_axis
        trail = (None,) * (len(shape) - own_axis - 1)
        gathered_type = TensorType(
            shape[:own_axis] + result.shape[axis:axis + picked] + shape[own_axis + 1:],
            value.type.element_type).with_bounds(lead + bounds[axis:axis + picked] + trail)
        picker = lookup_op("graph.gather")([value, indices], [gathered_type],
                                           {"axis": A.IntegerAttr(own_axis, i64)})
        picker.source_loc = gather.source_loc
        operands.append(rewriter.insert(picker).results[0])
    applied = type(inner)(operands, [result], dict(inner.properties), dict(inner.attributes),
                          location=gather.location)
    applied.source_loc = gather.source_loc
    return applied


# ---------------------------------------------------------------------------
# A square or a cube as products


def pow_as_products(rewriter, op, x, exponent):
    """pow(x, 2) → x * x, pow(x, 3) → x * x * x: what the reference computes for these
    exponents (dialects/graph/reference/elementwise.py `cube_or_square`), so the same
    numbers; a pow in a fused chain is a libm call per element (PoCL's: 0.28 ms on T5's
    98k-element RMS norms, against a multiply's few µs)."""
    t = x.type
    if op.results[0].type != t or not _float_element(x):
        return None
    known = constant_values(exponent.results[0])
    if known is None or len(known) != 1 or float(known[0]) not in (2.0, 3.0):
        return None
    mul = lookup_op("graph.mul")
    product = rewriter.create(mul, [x, x], [t]).results[0]
    if float(known[0]) == 3.0:
        product = rewriter.create(mul, [product, x], [t]).results[0]
    return product


# ---------------------------------------------------------------------------
# Batch normalization folded into the convolution before it


def _float_element(value) -> bool:
    t = value.type
    return isinstance(t, TensorType) and isinstance(t.element_type, FloatType) \
        and t.element_type.name in ("f16", "f32", "f64")


def fold_batch_norm_into_conv(rewriter, bn, conv, x, w, scale, bias, mean, var):
    """Y = (conv(x, W) + B - mean) * s + bias with s = scale / sqrt(var + eps)
    = conv(x, W * s[:, None, ...]) + ((B - mean) * s + bias)."""
    if len(bn.results) != 1 or (bn.training_mode is not None and bn.training_mode.value != 0):
        return None
    conv_bias = conv.b
    bias_op = None
    if conv_bias is not None:
        bias_op = conv_bias.op if getattr(conv_bias, "op", None) is not None else None
        if bias_op is None or bias_op.name != "graph.constant":
            return None
    y = conv.results[0]
    if not _float_element(y) or not _float_element(bn.results[0]):
        return None
    if y.type.element_type != bn.results[0].type.element_type:
        return None
    w_type = w.results[0].type
    if not isinstance(w_type, TensorType) or not w_type.has_static_shape or not w_type.shape:
        return None
    channels = w_type.shape[0]
    try:
        import numpy as np

        # f16: in f16, each operation rounded, as onnxruntime's ConvBNFusion computes it
        dtype = np.float16 if w_type.element_type.name == "f16" else np.float64

        def load(op):
            return op.properties["value"].to_numpy().astype(dtype)

        weights = load(w)
        params = [load(op).reshape(-1) for op in (scale, bias, mean, var)]
        old_bias = load(bias_op).reshape(-1) if bias_op is not None \
            else np.zeros(channels, dtype)
    except (OSError, ValueError, KeyError):
        return None
    if any(p.shape != (channels,) for p in params) or old_bias.shape != (channels,):
        return None
    s, b, m, v = params
    epsilon = bn.properties.get("epsilon")
    eps = epsilon.value if epsilon is not None else 1e-5
    factor = s / np.sqrt(v + eps)
    new_weights = weights * factor.reshape((channels,) + (1,) * (weights.ndim - 1))
    new_bias = (old_bias - m) * factor + b

    from palimpsest.dialects.graph.evaluate import dense_attr

    element = w_type.element_type
    hint = w.properties["value"].blob.key if isinstance(w.properties["value"],
                                                         A.DenseResourceAttr) else "conv_w"
    w_attr = dense_attr(new_weights, w_type, rewriter.unique_resource_key, f"{hint}_bn")
    b_type = TensorType((channels,), element)
    b_attr = dense_attr(new_bias, b_type, rewriter.unique_resource_key, f"{hint}_bn_bias")
    name = w.results[0].name_hint
    w_new = rewriter.insert(ConstantOp([], [w_type], {"value": w_attr},
                                       result_names=[f"{name}_bn" if name else None]))
    b_new = rewriter.insert(ConstantOp([], [b_type], {"value": b_attr},
                                       result_names=[f"{name}_bn_bias" if name else None]))
    folded = type(conv)([x, w_new.results[0], b_new.results[0]], [bn.results[0].type],
                        dict(conv.properties), dict(conv.attributes), location=conv.location)
    folded.source_loc = conv.source_loc
    return folded


# ---------------------------------------------------------------------------
# The tables, attached to the op classes

PATTERNS = rules(
    (M("graph.identity", V("x")), remove_identity),
    (M("graph.dropout"), remove_inference_dropout),
    (M("graph.cast", V("x")), remove_same_type_cast),
    (M("graph.reshape", V("x"), V()), remove_static_noop_reshape, 2),
    (M("graph.flatten", V("x")), remove_static_noop_reshape, 2),
    (M("graph.reshape", M(RESHAPE_LIKE, bind="inner"), V(), bind="outer"), fold_reshape_chain),
    (M("graph.transpose", V("x")), remove_identity_transpose, 2),
    (M("graph.transpose", M("graph.transpose", bind="inner"), bind="outer"),
     fold_transpose_chain),
    (M("graph.transpose", M("graph.concat", ..., bind="concat", one_use=True),
       bind="outer"), sink_transposes_through_concat),
    (M("graph.unsqueeze", M("graph.squeeze", bind="inner"), V(), bind="outer"),
     cancel_unsqueeze_of_squeeze),
    (M("graph.squeeze", M("graph.unsqueeze", bind="inner"), ..., bind="outer"),
     cancel_squeeze_of_unsqueeze),
    (M("graph.gather", M(_elementwise_names(), bind="inner", one_use=True), V("indices"),
       bind="gather"), gather_before_elementwise),
    (M("graph.pow", V("x"), _const("exponent")), pow_as_products),
    (M("graph.batch_norm",
       M("graph.conv", V("x"), _const("w"), ..., bind="conv", one_use=True),
       _const("scale"), _const("bias"), _const("mean"), _const("var"), bind="bn"),
     fold_batch_norm_into_conv),
)


def attach(patterns) -> None:
    """Add `patterns` to the `canonicalization_patterns` of their root op classes."""
    by_root: dict = {}
    for item in patterns:
        by_root.setdefault(item.root, []).append(item)
    for root, items in by_root.items():
        cls = lookup_op(root)
        if cls is None:
            continue
        existing = getattr(cls, "canonicalization_patterns", None) or ()
        existing = list(existing() if callable(existing) else existing)
        cls.canonicalization_patterns = tuple(existing) + tuple(
            p for p in items if p not in existing)


attach(PATTERNS)

# the quantized ops' patterns (MatMulInteger, Cast and scale Muls into one op)
from palimpsest.dialects.graph import canonicalize_quant  # noqa: E402,F401
# a two-operand Einsum as transposes, reshapes and one matmul
from palimpsest.dialects.graph import canonicalize_einsum  # noqa: E402,F401
# a ScatterND that writes one box as slices and a concat
from palimpsest.dialects.graph import canonicalize_scatter  # noqa: E402,F401
# a layer normalization written out op by op as graph.layer_norm
from palimpsest.dialects.graph import canonicalize_norm  # noqa: E402,F401
# a slice of a concat that reads one of its operands: that operand
from palimpsest.dialects.graph import canonicalize_concat  # noqa: E402,F401
# small recurrent layers side by side as one, block-diagonal
from palimpsest.dialects.graph import canonicalize_recurrent  # noqa: E402,F401
# a ConvTranspose of stride 1 as a Conv
from palimpsest.dialects.graph import canonicalize_conv  # noqa: E402,F401
