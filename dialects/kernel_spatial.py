"""`kernel.conv_transpose`: N-D grouped transposed convolution (graph.conv_transpose,
ops_nn.py) as a GEMM into a planned workspace and a col2im scatter into Y:

| role | shape | holds |
|---|---|---|
| `cols` | (M * k1 * .. * kn) x (D1 * .. * Dn) | one image's Wᵀ · X: row (m, offset), column (input position) |

ins: X (N x C x D1..Dn), W (C x M/group x k1..kn), optional B (M); out N x M x O1..On
with O = stride * (D - 1) + (k - 1) * dilation + 1 - pad_begin - pad_end. `pads` (begins,
then ends) are explicit and may be negative: the lowering folds auto_pad, output_shape
and output_padding into them (output_padding is a negative end pad), so an out position
that no input reaches holds the bias (or zero).
"""

from __future__ import annotations

from palimpsest.dialects.graph import shapes as S
from palimpsest.dialects.kernel_base import (
    KernelOp, _int, _ints, _times, conv_operands_problem, is_float,
)
from palimpsest.ir.opdef import register_op


@register_op
class ConvTransposeOp(KernelOp):
    name = "kernel.conv_transpose"
    arity = (2, 3)
    group = _int(1)
    strides = _ints(None, None, 1)
    dilations = _ints(None, None, 1)
    pads = _ints(None)

    @classmethod
    def check(cls, in_types, config):
        problem = conv_operands_problem(in_types, config, ">=3")
        if problem:
            return problem
        x, w = in_types[0], in_types[1]
        n = len(x.shape) - 2
        if len(config["strides"]) != n or len(config["dilations"]) != n \
                or len(config["pads"]) != 2 * n:
            return f"needs {n} strides and dilations and {2 * n} pads"
        group = config["group"]
        c = x.shape[1]
        if c is not None and (c % group or (w.shape[0] is not None and w.shape[0] != c)):
            return f"input channels of '{x}' do not fit weights '{w}' in {group} groups"
        return None

    @classmethod
    def result_shapes(cls, in_shapes, config):
        x, w = in_shapes[0], in_shapes[1]
        n = len(x) - 2
        pads = config["pads"]
        spatial = []
        for i in range(n):
            size, k = x[2 + i], w[2 + i]
            if size is None or k is None:
                spatial.append(None)
                continue
            out = (config["strides"][i] * (size - 1) + (k - 1) * config["dilations"][i] + 1
                   - pads[i] - pads[i + n])
            if out < 1:
                raise S.ShapeError(f"conv_transpose output size would be {out} in spatial "
                                   f"dimension {i}")
            spatial.append(out)
        m = None if w[1] is None else w[1] * config["group"]
        return [(x[0], m) + tuple(spatial)]

    @classmethod
    def workspace_roles(cls, in_types, config):
        return ["cols"]

    @classmethod
    def workspace_shape(cls, role, in_shapes, config):
        x, w = in_shapes[0], in_shapes[1]
        m = None if w[1] is None else w[1] * config["group"]
        return (_times(m, *w[2:]), _times(*x[2:]))


__all__ = ["ConvTransposeOp"]
