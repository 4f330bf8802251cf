"""Canonicalization of a ConvTranspose of stride 1 as a Conv, and of a zero Pad into the
Conv it feeds (attached with canonicalize.attach; canonicalize.py imports this module).

With stride 1 a transposed convolution is a convolution: y[m, o] = sum over c and
offset j of x[c, o + p - d j] w[c, m, j] is, with j' = k - 1 - j, the convolution of x
padded by d (k - 1) - p by the kernel flipped along every spatial axis, its channel axes
swapped per group. Decoders of speech and segmentation models export their 1 x 1
projections and same-size dilated layers so (GTCRN: 9 of its 11 ConvTransposes); as a
Conv each takes the backends' conv paths (1 x 1 as one GEMM, depthwise, fused
epilogues) rather than a GEMM and a col2im of one add per kernel offset. The products
and sums are the same; only the order of the sums may differ.

A zero Pad of a conv's image alone is the conv's own padding: PyTorch exports
EfficientNet's "same" padding (`Conv2dStaticSamePadding`, TF's asymmetric pads) as a
Pad before each conv, its pads computed from static shapes (ukis-csmask's U-Net: 33);
folded, the padded copy of the image leaves the plan, and each backend pads the way
its conv path does (a depthwise conv's own padded windows, or none at all).

| root | rewrite |
|---|---|
| graph.conv | conv(pad(x, pads, 0), W, B) in constant mode, the pad used only there, its pads constant, non-negative and on the spatial axes only, the conv without auto_pad → conv(x, W, B) with the pads added to the conv's |
| graph.conv_transpose | conv_transpose(x, W, B) of 1 or 2 spatial axes, strides 1, no output_padding, output_shape or auto_pad, constant W, pads at most d (k - 1) on each side → conv(x, W', B) with pads d (k - 1) - p, W' = W per group as (M/g, C/g, k..), flipped |
"""

from __future__ import annotations

from palimpsest.dialects.graph.canonicalize import _const, _rank, attach
from palimpsest.dialects.graph.ops_base import constant_values
from palimpsest.dialects.graph.ops_constant import ConstantOp
from palimpsest.ir import attributes as A
from palimpsest.ir.opdef import lookup_op
from palimpsest.ir.patterns import M, V, rules
from palimpsest.ir.types import TensorType, i64


def _ints(op, name, default):
    attr = op.properties.get(name)
    return default if attr is None else [int(v) for v in attr.values]


def conv_transpose_of_stride_one(rewriter, op, x, w):
    w_type = w.results[0].type
    if not isinstance(w_type, TensorType) or not w_type.has_static_shape \
            or len(w_type.shape) < 3:
        return None
    auto_pad = op.properties.get("auto_pad")
    if (auto_pad is not None and auto_pad.value != "NOTSET") \
            or op.properties.get("output_shape") is not None:
        return None
    kernel = list(w_type.shape[2:])
    rank = len(kernel)
    if rank > 2:    # (the backends' conv kernels are 1-D and 2-D; conv_transpose's any)
        return None
    if _ints(op, "kernel_shape", kernel) != kernel \
            or _ints(op, "strides", [1] * rank) != [1] * rank \
            or any(_ints(op, "output_padding", [0] * rank)):
        return None
    dilations = _ints(op, "dilations", [1] * rank)
    pads = _ints(op, "pads", [0] * 2 * rank)
    reach = [d * (k - 1) for d, k in zip(dilations, kernel)]
    conv_pads = [reach[a % rank] - p for a, p in enumerate(pads)]
    if len(conv_pads) != 2 * rank or any(p < 0 for p in conv_pads):
        return None
    group = int(op.properties["group"].value) if op.properties.get("group") is not None else 1
    try:
        weights = w.properties["value"].to_numpy()
    except (OSError, ValueError, KeyError):
        return None
    channels, per_group = weights.shape[:2]
    if channels % group:
        return None
    # (C, M/g, k..) -> per group (M/g, C/g, k..), flipped along every spatial axis
    import numpy as np

    flipped = weights.reshape((group, channels // group, per_group) + tuple(kernel)) \
        .swapaxes(1, 2)[(Ellipsis,) + (slice(None, None, -1),) * rank]
    converted = np.ascontiguousarray(flipped).reshape(
        (group * per_group, channels // group) + tuple(kernel))

    from palimpsest.dialects.graph.evaluate import dense_attr

    shaped = TensorType(converted.shape, w_type.element_type)
    hint = w.properties["value"].blob.key if isinstance(w.properties["value"],
                                                         A.DenseResourceAttr) else "deconv_w"
    attr = dense_attr(converted, shaped, rewriter.unique_resource_key, f"{hint}_as_conv")
    name = w.results[0].name_hint
    w_new = rewriter.insert(ConstantOp([], [shaped], {"value": attr},
                                       result_names=[f"{name}_as_conv" if name else None]))
    properties = {"dilations": A.DenseArrayAttr(i64, tuple(dilations)),
                  "group": A.IntegerAttr(group, i64),
                  "kernel_shape": A.DenseArrayAttr(i64, tuple(kernel)),
                  "pads": A.DenseArrayAttr(i64, tuple(conv_pads))}
    operands = [x, w_new.results[0]] + ([op.b] if op.b is not None else [])
    conv = lookup_op("graph.conv")(operands, [op.results[0].type], properties,
                                   dict(op.attributes), location=op.location)
    conv.source_loc = op.source_loc
    return conv


def pad_into_conv(rewriter, conv, pad, x, pads):
    if pad.properties.get("mode") is not None and pad.properties["mode"].value != "constant":
        return None
    auto_pad = conv.properties.get("auto_pad")
    if auto_pad is not None and auto_pad.value != "NOTSET":
        return None
    rank = _rank(x)
    if rank is None or rank < 3:
        return None
    amounts = constant_values(pads.results[0])
    zero = [0] if pad.constant_value is None else constant_values(pad.constant_value)
    axes = list(range(rank)) if pad.axes is None else constant_values(pad.axes)
    if amounts is None or axes is None or zero is None or any(zero):
        return None
    axes = [int(a) % rank for a in axes]
    if not axes or len(amounts) != 2 * len(axes) or len(set(axes)) != len(axes) \
            or min(amounts) < 0:
        return None
    begins, ends = [0] * rank, [0] * rank
    for axis, begin, end in zip(axes, amounts[:len(axes)], amounts[len(axes):]):
        begins[axis], ends[axis] = begin, end
    if begins[0] or begins[1] or ends[0] or ends[1]:
        return None
    spatial = rank - 2
    own = _ints(conv, "pads", [0] * 2 * spatial)
    if len(own) != 2 * spatial:
        return None
    summed = [p + b for p, b in zip(own, begins[2:] + ends[2:])]
    properties = dict(conv.properties)
    properties["pads"] = A.DenseArrayAttr(i64, tuple(summed))
    operands = [x, conv.w] + ([conv.b] if conv.b is not None else [])
    folded = lookup_op("graph.conv")(operands, [conv.results[0].type], properties,
                                     dict(conv.attributes), location=conv.location)
    folded.source_loc = conv.source_loc
    return folded


PATTERNS = rules((M("graph.conv_transpose", V("x"), _const("w"), ...),
                  conv_transpose_of_stride_one),
                 (M("graph.conv", M("graph.pad", V("x"), _const("pads"), ..., bind="pad",
                                    one_use=True), ..., bind="conv"),
                  pad_into_conv))

attach(PATTERNS)
