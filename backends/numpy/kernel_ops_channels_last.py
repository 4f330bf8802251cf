"""conv2d on oneDNN's direct convolutions through channels-last copies
(backends/onednn_primitives.py), for the convs where that beats the numpy paths
(kernel_ops_conv.py, kernel_ops_depthwise.py) with both reorders counted: depthwise
convs (no GEMM to run on) and dense ones with a kernel larger than 1x1 and enough input
channels (whose im2col copies the image kh*kw times). 1x1 convs are GEMMs as they lie and
stay there; so do first layers (few channels: oneDNN's channels-last conv of 3 channels
ran 4x slower than the im2col).

The NHWC copies of an image and of its result live in the conv's own workspaces (its
padded image and its im2col matrix, which this route does not otherwise use); where they
do not fit, the conv keeps the numpy paths. Every decision and address is made once
and the calls recorded (`kernel_ops.record`), as the numpy paths do.
"""

from __future__ import annotations

import numpy as np

from palimpsest.backends import onednn_primitives
from palimpsest.backends.numpy.kernel_ops import _view_as, prepared
from palimpsest.backends.numpy.kernel_ops_elementwise import epilogue_scratch, run_epilogue

# Dense convs: input channels per group from which the channels-last conv gains (a 3x3
# 128 -> 128 on 40 x 40: 3.1 ms with the reorders against 4.5; 16 -> 32 on 320 x 320
# stride 2: no better than the im2col's 3.5)
DENSE_CHANNELS_FROM = 32
# Below this many outputs a conv's three oneDNN calls (~10 us) cost more than they save
OUTPUTS_FROM = 4096


def wanted(x, w, y, config) -> bool:
    """Whether this conv goes to oneDNN (before its workspaces are looked at)."""
    if x.dtype != np.float32 or not onednn_primitives.available():
        return False
    m, cg, kh, kw = w.shape
    if kh * kw == 1 or y[0].size < OUTPUTS_FROM:
        return False
    depthwise = cg == 1 and config["group"] > 1
    return depthwise or cg >= DENSE_CHANNELS_FROM


def _scratch(workspaces, x_elements, y_elements):
    """(x_last, y_last): flat float32 views in the conv's workspaces holding an image's
    and a result's NHWC copies, or None."""
    flats = [_view_as(a, (a.size,)) for a in workspaces
             if a is not None and a.dtype == np.float32 and a.flags.c_contiguous]
    flats.sort(key=lambda a: a.size)
    for flat in flats:
        if flat.size >= x_elements + y_elements:
            return flat[:x_elements], flat[x_elements:x_elements + y_elements]
    for first in flats:
        for second in flats:
            if first is not second and first.size >= x_elements \
                    and second.size >= y_elements:
                return first[:x_elements], second[:y_elements]
    return None


def _conv_for(op, config, x, w, y, has_bias):
    """The op's cache entry for these shapes and strides (made once): [ChannelsLastConv,
    the constant weight last packed, its packing], or None where oneDNN has no such
    conv."""
    made = prepared(op, lambda op, config: {})
    key = (x.shape, x.strides, y.shape, y.strides, w.shape, has_bias)
    if key not in made:
        image, out, kernel = x.shape[1:], y.shape[1:], w.shape[2:]
        strides, dilations = tuple(config["strides"]), tuple(config["dilations"])
        pads = tuple(config["pads"])
        x_strides = [s // 4 for s in x.strides[1:]]
        y_strides = [s // 4 for s in y.strides[1:]]
        if image[2] == kernel[1] == out[2] == 1 and out[1] > 1:
            # a column (H x 1) as the row it is in memory: oneDNN's brgconv runs a
            # 256 -> 512 5x1 conv over 512 x 1 at 39 GFLOP/s, over 1 x 512 at 153
            image, out = (image[0], 1, image[1]), (out[0], 1, out[1])
            kernel = (1, kernel[0])
            strides, dilations = strides[::-1], dilations[::-1]
            pads = (pads[1], pads[0], pads[3], pads[2])
            x_strides = [x_strides[0], x_strides[2], x_strides[1]]
            y_strides = [y_strides[0], y_strides[2], y_strides[1]]
        try:
            made[key] = [onednn_primitives.ChannelsLastConv(
                image, out, kernel, config["group"], strides, dilations, pads, has_bias,
                x_strides, y_strides), None, None]
        except onednn_primitives.OneDnnError:
            made[key] = None
    return made[key]


def calls(op, config, inputs, x, w, bias, y, ws: dict):
    """The conv's calls on oneDNN, or None (the numpy paths run it)."""
    if not wanted(x, w, y, config) or not w.flags.c_contiguous \
            or any(s % 4 for s in x.strides + y.strides) \
            or (bias is not None and not bias.flags.c_contiguous):
        return None
    entry = _conv_for(op, config, x, w, y, bias is not None)
    if entry is None:
        return None
    conv = entry[0]
    scratch = _scratch([ws.get("padded"), ws.get("im2col")], conv.x_elements,
                       conv.y_elements)
    if scratch is None:
        return None
    x_last, y_last = scratch
    steps = []
    if w.flags.writeable:   # an operand computed in the run: packed at every call
        packed = np.empty(conv.weight_elements, np.float32)
        steps.append((conv.pack_weights, (w, packed), {}))
    else:                   # a constant: packed once
        if entry[1] is not w:
            entry[2] = np.empty(conv.weight_elements, np.float32)
            conv.pack_weights(w, entry[2])
            entry[1] = w
        packed = entry[2]
    for image in range(x.shape[0]):
        steps.append((conv.bind(x[image], x_last, packed, bias, y_last, y[image]), (), {}))
    if config.get("epilogue"):
        steps.append((run_epilogue, (config, inputs, y, epilogue_scratch(ws)), {}))
    return steps
