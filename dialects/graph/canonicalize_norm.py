"""Canonicalization of a layer normalization written out op by op into
`graph.layer_norm` (attached with canonicalize.attach; canonicalize.py imports this
module), as onnxruntime's LayerNormFusion does.

Exports from before LayerNormalization (opset 17) existed — PyTorch at older opsets,
Paddle2ONNX — spell `nn.LayerNorm` as nine ops:

    d = x - ReduceMean(x, axes); y = d / Sqrt(ReduceMean(Pow(d, 2), axes) + eps) * g + b

which run as nine kernels (two reductions, seven passes). The rules make it one:

| root       | rewrite                                                                 |
|------------|-------------------------------------------------------------------------|
| graph.div  | div(d, sqrt(add(reduce_mean(pow(d, 2) or mul(d, d), axes), eps))), d =   |
|            | sub(x, reduce_mean(x, axes)), axes x's trailing dims, kept, eps one      |
|            | constant (either side of the add) → layer_norm(x, 1, axis, eps)          |
| graph.mul  | mul(layer_norm(x, 1) without a bias, used only there, g), g a constant   |
|            | broadcasting to the normalized dims → layer_norm(x, g)                   |
| graph.add  | add(layer_norm(x, g) without a bias, used only there, b), b likewise     |
|            | → layer_norm(x, g, b)                                                    |

The first changes only rounding: the kernels multiply by 1 / sqrt(var + eps) where the
ops divide (onnxruntime's fused kernel does the same). The other two are exact: the
kernel computes (x - mean) · inv · g + b in that order, as the ops do.
"""

from __future__ import annotations

from palimpsest.dialects.graph import shapes as S
from palimpsest.dialects.graph.canonicalize import _axes, _const, attach
from palimpsest.dialects.graph.ops_base import constant_values
from palimpsest.dialects.graph.ops_constant import ConstantOp
from palimpsest.ir import attributes as A
from palimpsest.ir.opdef import lookup_op
from palimpsest.ir.patterns import M, V, rules
from palimpsest.ir.types import FloatType, TensorType, f32, i64

NORM = "graph.layer_norm"
# the statistics' type (stash_type) a kernel computes in for each element type
_STASH = {"f32": 1, "f64": 11}


def _trailing_axes(axes_op, mean_op, rank: int) -> int | None:
    """The first normalized dim when `mean_op` (a reduce_mean keeping its dims) reduces
    over the last dims of a rank-`rank` input, its axes the constant `axes_op`; else
    None."""
    keep = mean_op.properties.get("keepdims")
    if keep is not None and keep.value != 1:
        return None
    axes = _axes(axes_op.results[0], rank)
    if not axes or axes != list(range(rank - len(axes), rank)):
        return None
    return axes[0]


def _scalar(value) -> float | None:
    known = constant_values(value)
    return float(known[0]) if known is not None and len(known) == 1 else None


def layer_norm_from_parts(rewriter, op, x, d, mean, mean_axes, variance, variance_axes,
                          eps, square):
    t = x.type
    if not isinstance(t, TensorType) or t.shape is None or op.results[0].type != t \
            or not isinstance(t.element_type, FloatType) or t.element_type.name not in _STASH:
        return None
    rank = len(t.shape)
    axis = _trailing_axes(mean_axes, mean, rank)
    if axis is None or _trailing_axes(variance_axes, variance, rank) != axis:
        return None
    if square.name == "graph.pow" and _scalar(square.operands[1]) != 2.0:
        return None
    epsilon = _scalar(eps.results[0])
    if epsilon is None or not epsilon >= 0:
        return None
    one = rewriter.insert(ConstantOp.of([1.0], TensorType((), t.element_type))).results[0]
    norm = lookup_op(NORM)([x, one], [t], {
        "axis": A.IntegerAttr(axis, i64), "epsilon": A.FloatAttr(epsilon, f32),
        "stash_type": A.IntegerAttr(_STASH[t.element_type.name], i64)}, location=op.location)
    norm.source_loc = op.source_loc
    return norm


def _folds_into(norm, value, result, slot: str) -> bool:
    """`value` can become `norm`'s `slot` operand (its scale, all ones until now, or its
    absent bias): of its element type, broadcasting to the normalized dims without
    changing `result`'s type, `norm` used only here and without a bias. (`value` is an
    operand of the root, which the new op replaces: it is defined before it.)"""
    if len(norm.results) != 1 or norm.b is not None or len(norm.results[0].uses) != 1:
        return False
    if slot == "scale" and _scalar(norm.scale) != 1.0:
        return False
    x, t = norm.x.type, value.type
    if not isinstance(t, TensorType) or not t.has_static_shape \
            or t.element_type != x.element_type or result.type != norm.results[0].type:
        return False
    axis = norm.properties["axis"].value % len(x.shape)
    return S.unidirectional_broadcastable(t.shape, x.shape[axis:])


def _with(norm, scale, bias, root):
    """`norm` with `scale` and `bias` (None: none), at `root`'s place."""
    operands = [norm.x, scale] + ([bias] if bias is not None else [])
    made = lookup_op(NORM)(operands, [root.results[0].type], dict(norm.properties),
                           location=norm.location)
    made.source_loc = norm.source_loc
    return made


def scale_into_layer_norm(rewriter, op, norm, g):
    if not _folds_into(norm, g, op.results[0], "scale"):
        return None
    return _with(norm, g, None, op)


def bias_into_layer_norm(rewriter, op, norm, b):
    if not _folds_into(norm, b, op.results[0], "bias"):
        return None
    return _with(norm, norm.scale, b, op)


def _decomposed(square, eps_first: bool) -> M:
    centred = M("graph.sub", V("x"), M("graph.reduce_mean", V("x"), _const("mean_axes"),
                                        bind="mean"), bind="d")
    same = M("graph.sub", bind="d")
    squared = (M("graph.pow", same, _const(), bind="square") if square == "pow"
               else M("graph.mul", same, same, bind="square"))
    variance = M("graph.reduce_mean", squared, _const("variance_axes"), bind="variance")
    plus = (M("graph.add", _const("eps"), variance) if eps_first
            else M("graph.add", variance, _const("eps")))
    return M("graph.div", centred, M("graph.sqrt", plus))


def _either(root: str, slot: str) -> list:
    norm = M(NORM, bind="norm")
    return [M(root, norm, V(slot)), M(root, V(slot), norm)]


PATTERNS = rules(
    *((_decomposed(square, eps_first), layer_norm_from_parts)
      for square in ("pow", "mul") for eps_first in (False, True)),
    *((matcher, scale_into_layer_norm) for matcher in _either("graph.mul", "g")),
    *((matcher, bias_into_layer_norm) for matcher in _either("graph.add", "b")),
)

attach(PATTERNS)
