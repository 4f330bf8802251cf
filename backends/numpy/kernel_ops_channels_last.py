"""conv2d on oneDNN's direct convolutions through channels-last copies
(backends/onednn_primitives.py), for the convs where that beats the numpy paths
(kernel_ops_conv.py, kernel_ops_depthwise.py) with both reorders counted: depthwise
convs (no GEMM to run on) and dense ones with a kernel larger than 1x1 and enough input
channels (whose im2col copies the image kh*kw times). 1x1 convs are GEMMs as they lie and
stay there; so do first layers (few channels: oneDNN's channels-last conv of 3 channels
ran 4x slower than the im2col).

The NHWC copies of an image and of its result live in the conv's own workspaces (its
padded image and its im2col matrix, which this route does not otherwise use); where they
do not fit, the conv keeps the numpy paths. A fused epilogue of activations and
scalar-constant affine steps runs as oneDNN's post-ops (`post_ops`). Convs that hand
their result to the next conv keep it in NHWC between them (`layout`, `_chains`: no
copies on that side; 1x1 convs at a chain's ends as one GEMM). Every decision and
address is made once and the calls recorded (`kernel_ops.record`), as the numpy paths
do.
"""

from __future__ import annotations

import numpy as np

from palimpsest.backends import onednn_primitives
from palimpsest.backends.numpy import kernel_ops
from palimpsest.backends.numpy.arena import dtype_of
from palimpsest.backends.numpy.blas import matmul_call
from palimpsest.backends.numpy.kernel_ops import _view_as, is_constant_value, prepared
from palimpsest.backends.numpy.kernel_ops_elementwise import (
    core_inputs, epilogue_calls, epilogue_scratch)

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


# A fused epilogue runs as the conv's oneDNN post-ops (applied as the result is written:
# no pass over it) where each step is one of these activations of the step before
# (step -> its props -> (onednn_primitives.ELTWISE name, alpha, beta)), or that result
# times, plus, minus or over a scalar constant (oneDNN's "linear"), or, first and where
# the conv has no bias, plus a constant per-channel vector (as its bias): the affine
# steps of Paddle's exports around their activations (ppocr_v4_det: 24 convs of
# mul, add, hard_swish, mul, add)
_POST_OPS = {
    "graph.relu": lambda props: ("relu", 0.0, 0.0),
    "graph.leaky_relu": lambda props: ("relu", props.get("alpha", 0.01), 0.0),
    "graph.sigmoid": lambda props: ("logistic", 0.0, 0.0),
    "graph.tanh": lambda props: ("tanh", 0.0, 0.0),
    "graph.swish": lambda props: ("swish", props.get("alpha", 1.0), 0.0),
    "graph.hard_swish": lambda props: ("hardswish", 1 / 6, 0.5),
    "graph.hard_sigmoid": lambda props: ("hardsigmoid", props.get("alpha", 0.2),
                                         props.get("beta", 0.5)),
    "graph.elu": lambda props: ("elu", props.get("alpha", 1.0), 0.0),
    "graph.gelu": lambda props: ("gelu_tanh" if props.get("approximate") == "tanh"
                                 else "gelu_erf", 0.0, 0.0),
}
_AFFINE = ("graph.mul", "graph.add", "graph.sub", "graph.div")


def post_ops(config, count: int, has_bias: bool, scalar, channels):
    """The epilogue as oneDNN post-ops: (steps, bias), `steps` ((ELTWISE name, alpha,
    beta), ...) in order, `bias` the index of the per-channel vector its first step adds
    (or None); None where a step is not one of those (see _POST_OPS). `count`: the
    kernel's ins; `scalar(i)`: in i's value where it is a constant of one element, else
    None; `channels(i)`: whether in i is a constant per-channel vector."""
    names = config.get("epilogue")
    if not names:
        return None
    props = config.get("epilogue_props") or [None] * len(names)
    steps, bias, previous = [], None, count
    for i, (name, refs, step_props) in enumerate(zip(names, config["epilogue_wiring"],
                                                     props)):
        refs = list(refs)
        if name in _POST_OPS and refs == [previous]:
            steps.append(_POST_OPS[name](step_props or {}))
        elif name in _AFFINE and len(refs) == 2 and refs.count(previous) == 1:
            first = refs[0] == previous
            other = refs[1] if first else refs[0]
            if other >= count:
                return None
            if name == "graph.add" and i == 0 and not has_bias and channels(other):
                bias = other
            else:
                value = scalar(other)
                if value is None or (name == "graph.div" and (not first or value == 0)):
                    return None
                steps.append(("linear",) + {
                    "graph.mul": (value, 0.0), "graph.add": (1.0, value),
                    "graph.sub": (1.0, -value) if first else (-1.0, value),
                    "graph.div": (1 / value if value else 0.0, 0.0)}[name])
        else:
            return None
        previous = count + 1 + i
    return tuple(steps), bias


def _post_ops_on(config, ins: list, arrays, has_bias: bool, m: int):
    """post_ops of a conv with IR ins `ins` (its constants: the `buffer.constant` ones),
    their values read from `arrays(i)` (in i's array, None where not at hand): the
    kernel's own at run time, the executor's constants in the chain analysis, so both
    make the same post-ops (and one primitive)."""
    def constant(i):
        return is_constant_value(ins[i]) and arrays(i) is not None

    def scalar(i):
        return float(arrays(i).reshape(-1)[0]) if constant(i) and arrays(i).size == 1 \
            else None

    def channels(i):
        if not constant(i):
            return False
        a = arrays(i)
        return a.size == m and a.flags.c_contiguous \
            and (1,) * (4 - a.ndim) + tuple(a.shape) == (1, m, 1, 1)
    return post_ops(config, len(ins), has_bias, scalar, channels)


def _room(sizes, x_elements, y_elements):
    """Where the NHWC copies go among workspaces of `sizes` elements: (i, j) (the
    image's copy at the start of workspace i, the result's in workspace j, after the
    image's where i == j; either None when not needed), or None where they do not fit."""
    order = sorted(range(len(sizes)), key=lambda i: sizes[i])
    if not x_elements and not y_elements:
        return None, None
    if not x_elements or not y_elements:
        need = x_elements or y_elements
        for i in order:
            if sizes[i] >= need:
                return (i, None) if x_elements else (None, i)
        return None
    for i in order:
        if sizes[i] >= x_elements + y_elements:
            return i, i
    for i in order:
        for j in order:
            if i != j and sizes[i] >= x_elements and sizes[j] >= y_elements:
                return i, j
    return None


def _scratch(workspaces, x_elements, y_elements):
    """(x_last, y_last): flat float32 views in the conv's workspaces (its padded image,
    its im2col) holding an image's and a result's NHWC copies (a 0 size: None), or
    None where they do not fit."""
    flats = [_view_as(a, (a.size,)) if a is not None and a.dtype == np.float32
             and a.flags.c_contiguous else None for a in workspaces]
    room = _room([0 if a is None else a.size for a in flats], x_elements, y_elements)
    if room is None:
        return None
    i, j = room
    x_last = None if i is None else flats[i][:x_elements]
    offset = x_elements if i == j else 0
    y_last = None if j is None else flats[j][offset:offset + y_elements]
    return x_last, y_last


def _conv_for(op, config, shapes, strides, has_bias, fused, mode=(False, False)):
    """The op's cache entry for these shapes ((x, y, w)) and byte strides ((x, y)),
    made once: [ChannelsLastConv, the constant weight last packed, its packing], or None
    where oneDNN has no such conv. `fused`: the post-ops (a tuple), or None; `mode`:
    (reads_last, writes_last)."""
    made = prepared(op, lambda op, config: {})
    key = (shapes, strides, has_bias, fused, mode)
    if key not in made:
        (x_shape, y_shape, w_shape), (x_bytes, y_bytes) = shapes, strides
        image, out, kernel = x_shape[1:], y_shape[1:], w_shape[2:]
        conv_strides, dilations = tuple(config["strides"]), tuple(config["dilations"])
        pads = tuple(config["pads"])
        x_strides = [s // 4 for s in x_bytes[1:]]
        y_strides = [s // 4 for s in y_bytes[1:]]
        if image[2] == kernel[1] == out[2] == 1 and out[1] > 1:
            # a column (H x 1) as the row it is in memory (in NCHW and in NHWC alike):
            # oneDNN's brgconv runs a 256 -> 512 5x1 conv over 512 x 1 at 39 GFLOP/s,
            # over 1 x 512 at 153
            image, out = (image[0], 1, image[1]), (out[0], 1, out[1])
            kernel = (1, kernel[0])
            conv_strides, dilations = conv_strides[::-1], dilations[::-1]
            pads = (pads[1], pads[0], pads[3], pads[2])
            x_strides = [x_strides[0], x_strides[2], x_strides[1]]
            y_strides = [y_strides[0], y_strides[2], y_strides[1]]
        try:
            made[key] = [onednn_primitives.ChannelsLastConv(
                image, out, kernel, config["group"], conv_strides, dilations, pads,
                has_bias, x_strides, y_strides, fused, *mode), None, None]
        except onednn_primitives.OneDnnError:
            made[key] = None
    return made[key]


def _pointwise(w_shape, config) -> bool:
    """A 1x1 conv of one group, stride 1, no pads: a GEMM in either layout."""
    return tuple(w_shape[2:]) == (1, 1) and config["group"] == 1 \
        and tuple(config["strides"]) == (1, 1) and not any(config["pads"])


def _pointwise_calls(config, inputs, x, w, bias, y, ws, reads_last):
    """A 1x1 conv at a chain's end as one GEMM an image, reading its image in NHWC
    (reads_last) or writing its result so: W (M x C) times the image's pixels, whichever
    way they lie (oneDNN's conv of one NCHW and one NHWC side is its slow reference)."""
    n, c = x.shape[:2]
    m, pixels = w.shape[0], y.shape[2] * y.shape[3]
    weights = _view_as(w, (m, c))
    steps = []
    for image in range(n):
        if reads_last:   # Y (M x HW) = W X^T, X: HW x C
            out = _view_as(y[image], (m, pixels))
            steps.append(matmul_call(weights, _view_as(x[image], (pixels, c)).T, out))
            along = (m, 1)
        else:            # Y^T (HW x M) = X^T W^T, X: C x HW
            out = _view_as(y[image], (pixels, m))
            steps.append(matmul_call(_view_as(x[image], (c, pixels)).T, weights.T, out))
            along = (1, m)
        if bias is not None:
            steps.append((np.add, (out, _view_as(bias, along)), {"out": out}))
    if config.get("epilogue"):   # (writing NHWC: a post-op's step, elementwise)
        steps.extend(epilogue_calls(config, inputs, y, epilogue_scratch(ws)))
    return steps


def calls(op, config, inputs, x, w, bias, y, ws: dict):
    """The conv's calls on oneDNN, or None (the numpy paths run it)."""
    mode = layout(op)
    chained = mode != (False, False)
    if not chained and not wanted(x, w, y, config):
        return None
    if mode[0] != mode[1] and _pointwise(w.shape, config):
        return _pointwise_calls(config, inputs, x, w, bias, y, ws, mode[0])
    plan = _post_ops_on(config, list(op.ins), inputs.__getitem__, bias is not None,
                        w.shape[0])
    if chained and mode[1] and config.get("epilogue") and plan is None:
        # (the chain analysis found these post-ops: an epilogue on numpy would read NHWC)
        raise ValueError("a conv chained in channels-last layout lost its post-ops")
    fused = None
    if plan is not None:
        fused = plan[0]
        if plan[1] is not None:   # (the epilogue's first add: the conv's bias)
            bias = _view_as(inputs[plan[1]], (w.shape[0],))
    usable = w.flags.c_contiguous and not any(s % 4 for s in x.strides + y.strides) \
        and (bias is None or bias.flags.c_contiguous)
    entry = _conv_for(op, config, (x.shape, y.shape, w.shape), (x.strides, y.strides),
                      bias is not None, fused, mode) if usable else None
    scratch = None
    if entry is not None:
        conv = entry[0]
        scratch = _scratch([ws.get("padded"), ws.get("im2col")],
                           0 if conv.reads_last else conv.x_elements,
                           0 if conv.writes_last else conv.y_elements)
    if scratch is None:
        if chained:   # (the chain analysis made this conv and found its room)
            raise ValueError("a conv chained in channels-last layout cannot run on oneDNN")
        return None
    x_last, y_last = scratch
    steps = []
    if not is_constant_value(op.ins[1]):   # (computed in the run, or its input: packed each call)
        packed = np.empty(conv.weight_elements, np.float32)
        steps.append((conv.pack_weights, (w, packed), {}))
    else:                          # a constant: packed once
        if entry[1] is not w:
            entry[2] = np.empty(conv.weight_elements, np.float32)
            conv.pack_weights(w, entry[2])
            entry[1] = w
        packed = entry[2]
    for image in range(x.shape[0]):
        steps.append((conv.bind(x[image], x_last, packed, bias, y_last, y[image]), (), {}))
    if config.get("epilogue") and plan is None:
        steps.extend(epilogue_calls(config, inputs, y, epilogue_scratch(ws)))
    return steps


# -- chains: convs that hand each other channels-last data ----------------------------------

# A chained conv's input channels a group, at least, unless depthwise (oneDNN's
# channels-last conv of a 3-channel image ran 4x slower than the im2col)
CHAIN_CHANNELS_FROM = 8


def layout(op) -> tuple:
    """(reads_last, writes_last) of conv `op` as the numpy executor runs it: a conv
    whose result only the next conv reads (as its image) writes it in NHWC, and that
    conv reads it so, with no reorder between them; (False, False) for the others."""
    executor = kernel_ops.running_executor(op)
    if executor is None or not getattr(executor, "CHANNELS_LAST_CHAINS", False) \
            or not onednn_primitives.available():
        return False, False
    chains = executor.channels_last_chains
    block = op.parent
    found = chains.get(id(block))
    if found is None or found[0] is not block:
        found = chains[id(block)] = (block, _chains(block, executor.constants))
    return found[1].get(op, (False, False))


def _facts(op):
    """What the chain analysis needs of conv `op` from its types: (config, shapes (x, y,
    w), whether it has a bias, its workspaces' sizes), or None where it cannot chain."""
    config = kernel_ops.config_of(op)
    ins = core_inputs(config, list(op.ins))
    values = (ins[0], op.outs[0], ins[1])
    types = [v.type for v in values]
    if any(not t.has_static_shape or dtype_of(t.element_type) != np.float32
           for t in types):
        return None
    shapes = tuple(tuple(t.shape) for t in types)
    (n, c, _, _), (_, m, ho, wo), (_, cg, _, _) = shapes
    depthwise = cg == 1 and config["group"] > 1
    if m * ho * wo < OUTPUTS_FROM or (cg < CHAIN_CHANNELS_FROM and not depthwise):
        return None
    roles = kernel_ops.kernel_info(op).roles
    sizes = []
    for role in ("padded", "im2col"):
        value = op.workspaces[roles.index(role)] if role in roles else None
        sizes.append(0 if value is None or dtype_of(value.type.element_type) != np.float32
                     else value.type.num_elements() or 0)
    return config, shapes, len(ins) > 2, sizes


def _contiguous(shape) -> tuple:
    """A contiguous 4-D float32 buffer's byte strides (a conv's image or result)."""
    _, c, h, w = shape
    return 4 * c * h * w, 4 * h * w, 4 * w, 4


def _chains(block, constants: dict) -> dict:
    """conv op -> (reads_last, writes_last) for the convs of `block` that hand their
    result to the next conv: its only reader, reading it as its image, in this block,
    and an epilogue that is none or post-ops. A conv that cannot take its side's
    reorder copies in its workspaces (or that oneDNN declines) leaves its chain.
    `constants`: the executor's (buffer.constant op -> (attribute, array))."""
    facts = {op: f for op in block.ops if op.name == "kernel.conv2d"
             for f in [_facts(op)] if f is not None}

    def plan_of(op, has_bias, m):
        ins = list(op.ins)
        return _post_ops_on(kernel_ops.config_of(op), ins,
                            lambda i: (constants.get(ins[i].op) or (None, None))[1],
                            has_bias, m)
    edges = {}
    for a, (config, _, _, _) in facts.items():
        y = a.outs[0]
        readers = [user for user in y.users()
                   if user is not a and user.name != "buffer.dealloc"]
        if len(readers) != 1 or readers[0] not in facts:
            continue
        b = readers[0]
        if b.ins[0] is not y or sum(v is y for v in b.operands) != 1:
            continue
        if config.get("epilogue"):
            plan = plan_of(a, facts[a][2], facts[a][1][2][0])
            # (a 1x1 conv writing NHWC runs its epilogue on numpy: no per-channel step)
            if plan is None or (plan[1] is not None and _pointwise(facts[a][1][2], config)):
                continue
        edges[a] = b
    while True:
        readers = {b: a for a, b in edges.items()}
        dropped = None
        for op in list(edges) + list(readers):
            config, shapes, has_bias, sizes = facts[op]
            mode = (op in readers, op in edges)
            if mode[0] != mode[1] and _pointwise(shapes[2], config):
                continue   # (one GEMM: no copies, no oneDNN conv)
            x_shape, y_shape = shapes[0], shapes[1]
            plan = plan_of(op, has_bias, shapes[2][0])
            entry = _conv_for(op, config, shapes, (_contiguous(x_shape), _contiguous(y_shape)),
                              has_bias or (plan is not None and plan[1] is not None),
                              None if plan is None else plan[0], mode)
            x_need = 0 if mode[0] else int(np.prod(x_shape[1:]))
            y_need = 0 if mode[1] else int(np.prod(y_shape[1:]))
            if entry is None or _room(sizes, x_need, y_need) is None:
                dropped = op
                break
        if dropped is None:
            break
        edges.pop(dropped, None)
        if dropped in readers:
            edges.pop(readers[dropped], None)
    readers = {b: a for a, b in edges.items()}
    return {op: (op in readers, op in edges) for op in list(edges) + list(readers)}
