"""Canonicalization patterns of the graph dialect's quantized ops: onnxruntime's
MatMulIntegerToFloatFusion, as three small rules (attached with canonicalize.attach;
canonicalize.py imports this module, so the `canonicalize` pass loads them with its own).

onnxruntime's quantization tool (dynamic quantization) writes every float MatMul as

    xq, xs, xz = DynamicQuantizeLinear(x)
    y = Mul(Cast<float>(MatMulInteger(xq, Wq, xz, Wz)), Mul(xs, Ws))   [+ Add(y, bias)]

which runs as an int32 product, a cast pass and a multiply pass (and a bias pass). The
rules fold it into `graph.matmul_integer_to_float` (com.microsoft MatMulIntegerToFloat),
whose kernels write the float product and scale it in place:

| root       | rewrite                                                                  |
|------------|--------------------------------------------------------------------------|
| graph.cast | cast<float>(matmul_integer(a, b, az, bz)), the product used only there    |
|            | → matmul_integer_to_float(a, b, 1, 1, az, bz)                             |
| graph.mul  | mul(matmul_integer_to_float(a, b, 1, 1, ...), s), the first used only     |
|            | there, s per tensor or per output column → its scales (sa, sb) where s is |
|            | mul(sa, sb), else (1, s)                                                  |
| graph.add  | add(matmul_integer_to_float(...) without a bias, used only there, c), c   |
|            | per tensor or per output column → the same with bias c                    |

Each keeps the numbers exactly: float(p) · 1 · 1 is float(p); float(p) · (1 · s) is
float(p) · s; float(p) · (sa · sb) is the chain's product (IEEE multiplication and
addition commute bit for bit, so either operand order matches). A Mul after one whose
scales are not both 1 would round twice where the fused op rounds once: it declines.
"""

from __future__ import annotations

from palimpsest.dialects.graph.canonicalize import _float_element, attach
from palimpsest.dialects.graph.ops_base import constant_values
from palimpsest.dialects.graph.ops_constant import ConstantOp
from palimpsest.ir import attributes as A
from palimpsest.ir.opdef import lookup_op
from palimpsest.ir.patterns import M, V, rules
from palimpsest.ir.types import TensorType, i32

FUSED = "graph.matmul_integer_to_float"


def _per_column(value, result) -> bool:
    """`value` (static shape, `result`'s element type) is per tensor (one element) or
    per column of `result`: no more dims than it, all but the last 1, the last 1 or
    `result`'s last (static) dim."""
    t, r = value.type, result.type
    if not isinstance(t, TensorType) or not t.has_static_shape \
            or t.element_type != r.element_type or len(t.shape) > len(r.shape):
        return False
    if not t.shape:
        return True
    return all(d == 1 for d in t.shape[:-1]) and (t.shape[-1] == 1 or (
        len(r.shape) > 0 and t.shape[-1] == r.shape[-1]))


def _is_one(value) -> bool:
    known = constant_values(value)
    return known is not None and len(known) == 1 and known[0] == 1


def _fused(operands, result_type, location, source_loc):
    """A matmul_integer_to_float of (a, b, a_scale, b_scale, a_zero, b_zero, bias)."""
    sizes = tuple(0 if v is None else 1 for v in operands)
    op = lookup_op(FUSED)([v for v in operands if v is not None], [result_type],
                          {"operandSegmentSizes": A.DenseArrayAttr(i32, sizes)},
                          location=location)
    op.source_loc = source_loc
    return op


def _operands(op) -> list:
    return [op.a, op.b, op.a_scale, op.b_scale, op.a_zero_point, op.b_zero_point, op.bias]


def cast_of_matmul_integer(rewriter, cast, product):
    """cast<float>(matmul_integer(...)) → matmul_integer_to_float(..., scales 1, 1)."""
    result = cast.results[0]
    if not _float_element(result) or result.type.shape is None or result.type.shape != product.results[0].type.shape:
        return None
    one = rewriter.insert(ConstantOp.of([1.0], TensorType((), result.type.element_type)))
    unit = one.results[0]
    return _fused([product.a, product.b, unit, unit, product.a_zero_point,
                   product.b_zero_point, None], result.type, cast.location, cast.source_loc)


def _one_element(value) -> bool:
    return all(d == 1 for d in value.type.shape)


def _scales(scale, result):
    """(a_scale, b_scale) for a Mul by `scale`: the operands of the Mul that makes it
    when both are per tensor or one per tensor and one per column (that one b's); else
    (None, `scale`)."""
    op = getattr(scale, "op", None)
    if op is not None and op.name == "graph.mul" and len(op.operands) == 2:
        p, q = op.operands
        if _per_column(p, result) and _per_column(q, result):
            if _one_element(p):
                return p, q
            if _one_element(q):
                return q, p
    return None, scale


def fold_scale_into_fused(rewriter, mul, fused, scale):
    """mul(matmul_integer_to_float(a, b, 1, 1, az, bz), s) → matmul_integer_to_float(a,
    b, sa, sb, az, bz), with s = mul(sa, sb) where it is one, else (1, s)."""
    result = mul.results[0]
    if result.type != fused.results[0].type or fused.bias is not None \
            or not (_is_one(fused.a_scale) and _is_one(fused.b_scale)) \
            or not _per_column(scale, result):
        return None
    a_scale, b_scale = _scales(scale, result)
    operands = _operands(fused)
    operands[2:4] = [a_scale if a_scale is not None else fused.a_scale, b_scale]
    return _fused(operands, result.type, mul.location, mul.source_loc)


def fold_bias_into_fused(rewriter, add, fused, bias):
    """add(matmul_integer_to_float(...), c) → matmul_integer_to_float(..., bias c)."""
    result = add.results[0]
    if result.type != fused.results[0].type or fused.bias is not None \
            or not _per_column(bias, result):
        return None
    operands = _operands(fused)
    operands[6] = bias
    return _fused(operands, result.type, add.location, add.source_loc)


def _product(bind):
    return M(FUSED, bind=bind, one_use=True)


PATTERNS = rules(
    (M("graph.cast", M("graph.matmul_integer", bind="product", one_use=True), bind="cast"),
     cast_of_matmul_integer),
    (M("graph.mul", _product("fused"), V("scale"), bind="mul"), fold_scale_into_fused),
    (M("graph.mul", V("scale"), _product("fused"), bind="mul"), fold_scale_into_fused),
    (M("graph.add", _product("fused"), V("bias"), bind="add"), fold_bias_into_fused),
    (M("graph.add", V("bias"), _product("fused"), bind="add"), fold_bias_into_fused),
)

attach(PATTERNS)
