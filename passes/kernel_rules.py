"""The lowering rules of `lower-to-kernels` (passes/lower_to_kernels.py): how one
`buffer.compute` reads (`_Compute`), and per graph op the kernel op, ins and properties
that implement it (`RULES`; None: `kernel.generic`), with `_fits`, whether the kernel
op would verify."""

from __future__ import annotations

import math
from functools import lru_cache
from types import SimpleNamespace

from palimpsest.dialects import kernel as K
from palimpsest.dialects.graph import shapes as S
from palimpsest.ir import attributes as A
from palimpsest.ir.core import Operation
from palimpsest.ir.opdef import OPTIONAL, SINGLE, lookup_op, operand_groups, segment_sizes
from palimpsest.ir.types import FloatType, f32

# ---------------------------------------------------------------------------
# One buffer.compute, as the lowering sees it


class _Compute:
    """A `buffer.compute`: graph op name, properties (as attributes), operand slots."""

    __slots__ = ("op", "name", "props", "ins", "outs", "graph_class", "_slots", "lowered")

    def __init__(self, op: Operation):
        self.op = op
        self.name = op.properties["op"].value
        props = op.graph_properties()
        for key, value in op.attributes.items():  # undeclared properties parsed as attributes
            if "." not in key and key not in props:
                props[key] = value
        self.props = props
        groups = operand_groups(op)  # (fresh lists)
        self.ins = groups["ins"]
        self.outs = groups["outs"]
        self.graph_class = lookup_op(self.name)
        self._slots: dict | None = None
        self.lowered = None  # a rule's result when it changed the IR (asked again: the same)

    @property
    def slots(self) -> dict:
        """The ins by the graph op's operand names (computed when a rule first asks:
        elementwise steps never do)."""
        if self._slots is not None:
            return self._slots
        slots: dict = {}
        graph_class = self.graph_class
        if graph_class is not None and graph_class.direct_operands \
                and len(self.ins) == len(graph_class.operand_defs):  # one in per operand
            slots = {d.field_name: v for d, v in zip(graph_class.operand_defs, self.ins)}
        elif graph_class is not None:
            sizes = segment_sizes(SimpleNamespace(properties=self.props), self.ins,
                                  graph_class.operand_defs, "operandSegmentSizes")
            if not isinstance(sizes, str):
                position = 0
                for definition, size in zip(graph_class.operand_defs, sizes):
                    group = self.ins[position:position + size]
                    if definition.kind == SINGLE:
                        slots[definition.field_name] = group[0]
                    elif definition.kind == OPTIONAL:
                        slots[definition.field_name] = group[0] if group else None
                    else:
                        slots[definition.field_name] = group
                    position += size
        self._slots = slots
        return slots

    def prop(self, name, default=None):
        attr = self.props.get(name)
        return default if attr is None else A.to_python(attr)

    def __getitem__(self, slot):
        return self.slots.get(slot)


def _element(value):
    return value.type.element_type


def _shape(value):
    return tuple(value.type.shape)


def is_f16(element) -> bool:
    return isinstance(element, FloatType) and element.name == "f16"


def _static(shape) -> bool:
    return None not in shape


def _constant_ints(value) -> list | None:
    """The integer elements of a `buffer.constant` (None when not a known constant)."""
    values = _constant_values(value)
    if values is None or not all(isinstance(v, int) and not isinstance(v, bool)
                                 for v in values):
        return None
    return values


def _constant_values(value) -> list | None:
    from palimpsest.dialects.graph.ops_base import dense_values

    owner = getattr(value, "op", None)
    if owner is None or owner.name != "buffer.constant":
        return None
    return dense_values(owner.properties.get("value"))


_SMALL_INTS = tuple(A.IntegerAttr(i) for i in range(256))  # wiring, axes: shared, immutable


def _i(value) -> A.IntegerAttr:
    value = int(value)
    return _SMALL_INTS[value] if 0 <= value < 256 else A.IntegerAttr(value)


def _f(value) -> A.FloatAttr:
    return A.FloatAttr(float(value), f32)


@lru_cache(maxsize=1024)  # immutable: one per string (step names, modes)
def _s(value) -> A.StringAttr:
    return A.StringAttr(value)


# ---------------------------------------------------------------------------
# The rules: compute -> (kernel class, ins, properties) or None (kernel.generic)


def _window_pads(c: _Compute, x_shape, kernel, strides, dilations):
    """Explicit (top, left, bottom, right) pads from pads/auto_pad; None when auto_pad
    needs sizes that are not static."""
    auto_pad = c.prop("auto_pad", "NOTSET")
    if auto_pad == "VALID":
        return [0, 0, 0, 0]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if None in x_shape[2:] or None in kernel:
            return None
        begins, ends = [], []
        for size, k, s, d in zip(x_shape[2:], kernel, strides, dilations):
            b, e = S.same_pads(size, k, s, d, auto_pad)
            begins.append(b)
            ends.append(e)
        return begins + ends
    pads = c.prop("pads")
    return list(pads) if pads is not None else [0, 0, 0, 0]


def _lower_conv(c: _Compute):
    x, w, b = c["x"], c["w"], c["b"]
    if x is not None and w is not None and len(_shape(x)) == 3 and len(_shape(w)) == 3:
        return _lower_conv1d(c)
    if x is None or w is None or len(_shape(x)) != 4 or len(_shape(w)) != 4:
        return None
    if not K.is_float(_element(x)) or any(_element(v) != _element(x)
                                          for v in (w, b) if v is not None):
        return None
    strides = c.prop("strides") or [1, 1]
    dilations = c.prop("dilations") or [1, 1]
    pads = _window_pads(c, _shape(x), _shape(w)[2:], strides, dilations)
    if pads is None:
        return None
    props = {"group": _i(c.prop("group", 1)), "strides": K.int_array(strides),
             "dilations": K.int_array(dilations), "pads": K.int_array(pads)}
    return K.Conv2dOp, [v for v in (x, w, b) if v is not None], props


def _lower_conv1d(c: _Compute):
    """A 1-D conv (N x C x L) as a conv2d over a unit height: X, W and the out seen as
    N x C x 1 x L (and M x C/g x 1 x k, N x M x 1 x Lo) through `buffer.reshape`s
    (aliases: no copy) inserted before the compute, the out's reshape written by the
    kernel. Only when the kernel fits; the reshapes are then in the IR, so the rule
    keeps its result on `c` and answers the same when asked again (an epilogue fold
    asks first: it does not fold through the reshape and leaves the compute to
    `compute`)."""
    from palimpsest.dialects.buffer import BufferType, ReshapeOp

    if c.lowered is not None:
        return c.lowered
    x, w, b = c["x"], c["w"], c["b"]
    if len(c.outs) != 1 or not K.is_float(_element(x)) or any(
            _element(v) != _element(x) for v in (w, b) if v is not None):
        return None
    out = c.outs[0]
    values = (x, w, out)
    if any(not isinstance(v.type, BufferType) or v.type.strides is not None
           or v.type.encoding is not None or len(v.type.shape) != 3
           or v.type.shape.count(None) > 1 for v in values):
        return None  # a reshape at run time needs contiguous memory and one `?` at most
    strides = c.prop("strides") or [1]
    dilations = c.prop("dilations") or [1]
    if len(strides) != 1 or len(dilations) != 1:
        return None
    pads = _window_pads(c, _shape(x), _shape(w)[2:], strides, dilations)
    if pads == [0, 0, 0, 0] and c.prop("pads") is None:
        pads = [0, 0]   # (the 2-D default)
    if pads is None or len(pads) != 2:
        return None
    props = {"group": _i(c.prop("group", 1)), "strides": K.int_array([1, strides[0]]),
             "dilations": K.int_array([1, dilations[0]]),
             "pads": K.int_array([0, pads[0], 0, pads[1]])}
    types = [BufferType(v.type.shape[:2] + (1,) + v.type.shape[2:], v.type.element_type)
             for v in values]
    typed = [SimpleNamespace(type=t) for t in types]
    if _fitting_config(K.Conv2dOp, typed[:2] + ([b] if b is not None else []), typed[2:],
                       props) is None:
        return None
    seen = []
    for value, type_ in zip(values, types):
        reshape = ReshapeOp([value], [type_], result_names=[
            f"{value.name_hint}_2d" if value.name_hint else None])
        reshape.location = c.op.location
        reshape.source_loc = c.op.source_loc
        c.op.parent.insert_before(c.op, reshape)
        seen.append(reshape.results[0])
    c.outs[0] = seen[2]   # the kernel writes the out through its 4-D alias
    c.lowered = (K.Conv2dOp, seen[:2] + ([b] if b is not None else []), props)
    return c.lowered


def _lower_conv_transpose(c: _Compute):
    """graph.conv_transpose → kernel.conv_transpose (kernel_spatial.py): auto_pad,
    output_shape and output_padding folded into explicit (possibly negative) pads, as the
    reference places them."""
    x, w, b = c["x"], c["w"], c["b"]
    if x is None or w is None or len(_shape(x)) < 3 or len(_shape(w)) != len(_shape(x)):
        return None
    if not K.is_float(_element(x)) or any(_element(v) != _element(x)
                                          for v in (w, b) if v is not None):
        return None
    n = len(_shape(x)) - 2
    kernel, sizes = list(_shape(w)[2:]), list(_shape(x)[2:])
    if None in kernel or (c.prop("kernel_shape") is not None
                          and list(c.prop("kernel_shape")) != kernel):
        return None
    strides = list(c.prop("strides") or [1] * n)
    dilations = list(c.prop("dilations") or [1] * n)
    extra = list(c.prop("output_padding") or [0] * n)
    if len(strides) != n or len(dilations) != n or len(extra) != n:
        return None
    reach = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    auto_pad = c.prop("auto_pad", "NOTSET")
    output_shape = c.prop("output_shape")
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if None in sizes:
            return None
        if output_shape is not None:
            if len(output_shape) not in (n, n + 2):
                return None
            out = list(output_shape)[-n:]
        else:
            out = [size * s for size, s in zip(sizes, strides)]
        begins, ends = [], []
        for size, s, r, e, o in zip(sizes, strides, reach, extra, out):
            total = s * (size - 1) + r + e - o
            begin = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            begins.append(begin)
            ends.append(s * (size - 1) + r - begin - o)
    elif auto_pad == "VALID":
        begins, ends = [0] * n, [-e for e in extra]
    else:
        pads = list(c.prop("pads") or [0] * (2 * n))
        if len(pads) != 2 * n:
            return None
        begins, ends = pads[:n], [p - e for p, e in zip(pads[n:], extra)]
    props = {"group": _i(c.prop("group", 1)), "strides": K.int_array(strides),
             "dilations": K.int_array(dilations), "pads": K.int_array(begins + ends)}
    return K.ConvTransposeOp, [v for v in (x, w, b) if v is not None], props


def _lower_matmul(c: _Compute):
    a, b = c["a"], c["b"]
    if a is None or b is None or _element(a) != _element(b) or not K.is_numeric(_element(a)):
        return None
    if not _shape(a) or not _shape(b):
        return None
    return K.MatmulOp, [a, b], {}


def _lower_gemm(c: _Compute):
    a, b, bias = c["a"], c["b"], c["c"]
    if a is None or b is None or not K.is_float(_element(a)) or any(
            _element(v) != _element(a) for v in (b, bias) if v is not None):
        return None
    if len(_shape(a)) != 2 or len(_shape(b)) != 2:
        return None
    props = {"transA": _i(c.prop("transA", 0)), "transB": _i(c.prop("transB", 0)),
             "alpha": _f(c.prop("alpha", 1.0)), "beta": _f(c.prop("beta", 1.0))}
    return K.MatmulOp, [v for v in (a, b, bias) if v is not None], props


def _lower_pool(c: _Compute):
    x = c["x"]
    if x is None or len(_shape(x)) != 4 or len(c.outs) != 1:
        return None
    mode = "max" if c.name == "graph.max_pool" else "avg"
    kernel = c.prop("kernel_shape")
    if kernel is None or len(kernel) != 2:
        return None
    strides = c.prop("strides") or [1, 1]
    dilations = c.prop("dilations") or [1, 1]
    pads = _window_pads(c, _shape(x), kernel, strides, dilations)
    if pads is None:
        return None
    ceil_mode = c.prop("ceil_mode", 0) if c.prop("auto_pad", "NOTSET") in ("NOTSET", "VALID") \
        else 0
    props = {"mode": _s(mode), "kernel_shape": K.int_array(kernel),
             "strides": K.int_array(strides), "dilations": K.int_array(dilations),
             "pads": K.int_array(pads), "ceil_mode": _i(ceil_mode),
             "count_include_pad": _i(c.prop("count_include_pad", 0))}
    return K.Pool2dOp, [x], props


def _lower_global_pool(c: _Compute):
    x = c["x"]
    if x is None or len(_shape(x)) < 3 or not (K.is_float(_element(x))
                                               or is_f16(_element(x))):
        return None   # (f16: kernel.reduce accumulates in f32, rounds once)
    mode = "mean" if c.name == "graph.global_average_pool" else "max"
    props = {"mode": _s(mode), "axes": K.int_array(range(2, len(_shape(x)))),
             "keepdims": _i(1)}
    return K.ReduceOp, [x], props


def _normalized_axis(c: _Compute, rank: int, default: int):
    axis = c.prop("axis", default)
    if not -rank <= axis < rank:
        return None
    return axis + rank if axis < 0 else axis


def _lower_softmax(c: _Compute):
    x = c["input"]
    if x is None or not K.is_float(_element(x)) or not _shape(x):
        return None
    axis = _normalized_axis(c, len(_shape(x)), -1)
    if axis is None or (c.prop("coerce_2d", 0) and axis != len(_shape(x)) - 1):
        return None   # softmax over several flattened dims: kernel.generic
    return K.SoftmaxOp, [x], {"axis": _i(axis)}


def _lower_layer_norm(c: _Compute):
    x, scale, b = c["x"], c["scale"], c["b"]
    if x is None or scale is None or len(c.outs) != 1 or not K.is_float(_element(x)):
        return None
    if any(_element(v) != _element(x) for v in (scale, b) if v is not None):
        return None
    stash = {"f32": 1, "f64": 11}[_element(x).name]
    if c.prop("stash_type", 1) != stash or not _shape(x):
        return None
    axis = _normalized_axis(c, len(_shape(x)), -1)
    if axis is None:
        return None
    return (K.LayerNormOp, [v for v in (x, scale, b) if v is not None],
            {"axis": _i(axis), "epsilon": _f(c.prop("epsilon", 1e-5))})


def _lower_reduce(c: _Compute):
    x = c["data"]
    if x is None:
        return None
    rank = len(_shape(x))
    axes_value = c["axes"]
    axes = []
    if axes_value is not None:
        axes = _constant_ints(axes_value)
        if axes is None:
            return None
    if not axes:
        if c.prop("noop_with_empty_axes", 0):
            return None
        axes = list(range(rank))
    if not rank or any(not -rank <= a < rank for a in axes):
        return None
    axes = sorted({a + rank if a < 0 else a for a in axes})
    mode = {"graph.reduce_mean": "mean", "graph.reduce_sum": "sum",
            "graph.reduce_max": "max"}[c.name]
    props = {"mode": _s(mode), "axes": K.int_array(axes), "keepdims": _i(c.prop("keepdims", 1))}
    return K.ReduceOp, [x], props


def _lower_transpose(c: _Compute):
    x = c["data"]
    if x is None:
        return None
    perm = c.prop("perm")
    if perm is None:
        perm = list(range(len(_shape(x))))[::-1]
    return K.TransposeOp, [x], {"perm": K.int_array(perm)}


def _lower_concat(c: _Compute):
    xs = [v for v in c.ins]
    if not xs or not _shape(xs[0]) or any(_element(v) != _element(xs[0]) for v in xs):
        return None
    axis = _normalized_axis(c, len(_shape(xs[0])), 0)
    if axis is None:
        return None
    return K.ConcatOp, xs, {"axis": _i(axis)}


def _lower_gather(c: _Compute):
    data, indices = c["data"], c["indices"]
    if data is None or indices is None or not _shape(data):
        return None
    axis = _normalized_axis(c, len(_shape(data)), 0)
    if axis is None:
        return None
    return K.GatherOp, [data, indices], {"axis": _i(axis)}


def _lower_pad(c: _Compute):
    x, pads_value = c["data"], c["pads"]
    if x is None or pads_value is None:
        return None
    pads = _constant_ints(pads_value)
    shape = _shape(x)
    rank = len(shape)
    if pads is None:
        return None
    axes_value = c["axes"]
    axes = list(range(rank))
    if axes_value is not None:
        axes = _constant_ints(axes_value)
        if axes is None or any(not -rank <= a < rank for a in axes):
            return None
        axes = [a + rank if a < 0 else a for a in axes]
    if len(pads) != 2 * len(axes) or len(set(axes)) != len(axes):
        return None
    full = [0] * (2 * rank)
    for j, axis in enumerate(axes):
        full[axis], full[axis + rank] = pads[j], pads[j + len(axes)]
    mode = c.prop("mode", "constant")
    ins = [x]
    value = c["constant_value"]
    if value is not None:
        count = value.type.num_elements()
        if count is None or _element(value) != _element(x):
            return None
        if count and mode == "constant":
            ins.append(value)
    if mode != "constant":
        if not _static(shape):
            return None
        for axis in range(rank):
            begin, end = full[axis], full[axis + rank]
            size = shape[axis] + min(begin, 0) + min(end, 0)
            most = max(begin, end, 0)
            limit = {"edge": size if size > 0 else 0, "reflect": size - 1, "wrap": size}[mode]
            if most and (most > limit if mode != "edge" else size <= 0):
                return None
    return K.PadOp, ins, {"mode": _s(mode), "pads": K.int_array(full)}


def _lower_split(c: _Compute):
    """graph.split → kernel.split: the sizes are the outs' (static) extents along the
    axis, which the graph op's shape rule gave them."""
    x = c["input"]
    if x is None or not _shape(x) or not c.outs:
        return None
    axis = _normalized_axis(c, len(_shape(x)), 0)
    if axis is None:
        return None
    sizes = [_shape(v)[axis] if len(_shape(v)) == len(_shape(x)) else None for v in c.outs]
    if None in sizes:
        return None
    return K.SplitOp, [x], {"axis": _i(axis), "sizes": K.int_array(sizes)}


def _lower_slice(c: _Compute):
    """graph.slice → kernel.slice with constant starts/ends/axes/steps and static sliced
    dims: ONNX's clamping done here (as the reference does, slice.indices)."""
    x = c["data"]
    if x is None or not _shape(x):
        return None
    shape = _shape(x)
    rank = len(shape)
    starts, ends = (_constant_ints(c[name]) if c[name] is not None else None
                    for name in ("starts", "ends"))
    if starts is None or ends is None or len(starts) != len(ends):
        return None
    axes = list(range(len(starts))) if c["axes"] is None else _constant_ints(c["axes"])
    steps = [1] * len(starts) if c["steps"] is None else _constant_ints(c["steps"])
    if axes is None or steps is None or not len(axes) == len(steps) == len(starts):
        return None
    begin, step, size = [0] * rank, [1] * rank, [-1] * rank
    for start, end, axis, by in zip(starts, ends, axes, steps):
        if not -rank <= axis < rank or by == 0:
            return None
        axis = axis + rank if axis < 0 else axis
        dim = shape[axis]
        if dim is None or size[axis] != -1 or step[axis] != 1:
            return None   # a `?` dim, or an axis named twice
        if start < 0:
            start += dim
        if end < 0:
            end += dim
        if by > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        count = len(range(start, end, by))
        begin[axis], step[axis], size[axis] = (start, by, count) if count else (0, 1, 0)
    return K.SliceOp, [x], {"starts": K.int_array(begin), "steps": K.int_array(step),
                            "sizes": K.int_array(size)}


def _lower_resize(c: _Compute):
    x = c["x"]
    if x is None or not _static(_shape(x)) or not _shape(x):
        return None
    shape = _shape(x)
    mode = c.prop("mode", "nearest")
    ctm = c.prop("coordinate_transformation_mode", "half_pixel")
    if mode != "nearest" and not K.is_float(_element(x)):
        return None
    if c.prop("antialias", 0) and mode == "nearest":
        return None
    rank = len(shape)
    axes = c.prop("axes")
    axes = list(range(rank)) if axes is None else [a + rank if a < 0 else a for a in axes]
    scales = c["scales"]
    sizes = c["sizes"]
    scale_values = _constant_values(scales) if scales is not None else None
    size_values = _constant_ints(sizes) if sizes is not None else None
    has_scales = scales is not None and scales.type.num_elements() != 0
    has_sizes = sizes is not None and sizes.type.num_elements() != 0
    if has_scales == has_sizes:
        return None
    if has_scales:
        if scale_values is None or len(scale_values) != len(axes) or any(v <= 0 for v in
                                                                          scale_values):
            return None
        scale_list = [float(v) for v in scale_values]
        out = [int(math.floor(v * shape[a])) for v, a in zip(scale_list, axes)]
    else:
        if size_values is None or len(size_values) != len(axes):
            return None
        scale_list = [s / shape[a] for s, a in zip(size_values, axes)]
        policy = c.prop("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            s = min(scale_list) if policy == "not_larger" else max(scale_list)
            scale_list = [s] * len(axes)
            out = [int(s * shape[a] + 0.5) for a in axes]
        else:
            out = list(size_values)
    roi = None
    if ctm == "tf_crop_and_resize":
        roi_value = c["roi"]
        values = _constant_values(roi_value) if roi_value is not None else None
        if values is None:
            return None
        values = [float(v) for v in values]
        if len(values) == 2 * len(axes):
            roi = {a: (values[i], values[i + len(axes)]) for i, a in enumerate(axes)}
        elif len(values) == 2 * rank:
            roi = {a: (values[a], values[a + rank]) for a in axes}
        else:
            return None
    kept_axes, kept_sizes, kept_scales, kept_roi = [], [], [], []
    for a, s, o in zip(axes, scale_list, out):
        ra = roi[a] if roi is not None else None
        if o == shape[a] and math.isclose(s, 1.0) and (ra is None or ra == (0.0, 1.0)):
            continue  # the reference skips this axis
        kept_axes.append(a)
        kept_sizes.append(o)
        kept_scales.append(s)
        if ra is not None:
            kept_roi.append(ra)
    if not kept_axes:
        return None
    props = {"axes": K.int_array(kept_axes), "sizes": K.int_array(kept_sizes),
             "scales": K.f64_array(kept_scales), "mode": _s(mode),
             "coordinate_transformation_mode": _s(ctm),
             "nearest_mode": _s(c.prop("nearest_mode", "round_prefer_floor")),
             "cubic_coeff_a": _f(c.prop("cubic_coeff_a", -0.75)),
             "exclude_outside": _i(c.prop("exclude_outside", 0)),
             "extrapolation_value": _f(c.prop("extrapolation_value", 0.0)),
             "antialias": _i(c.prop("antialias", 0))}
    if kept_roi:
        props["roi"] = K.f64_array([r[0] for r in kept_roi] + [r[1] for r in kept_roi])
    return K.ResizeOp, [x], props


def _lower_recurrent(c: _Compute):
    """graph.lstm/gru/rnn → kernel.lstm/gru/rnn (kernel_recurrent.py)."""
    cls = {"graph.lstm": K.LstmOp, "graph.gru": K.GruOp, "graph.rnn": K.RnnOp}[c.name]
    given = [name for name in cls.OPTIONAL_INS if c[name] is not None]
    ins = [c["X"], c["W"], c["R"]] + [c[name] for name in given]
    props = cls.properties_from(c.name, c.prop, given)
    return None if any(v is None for v in ins) or props is None else (cls, ins, props)


def _lower_attention(c: _Compute):
    """graph.attention → kernel.attention (kernel_attention.py) in its common form: one
    result, no caches, no softcap, windows or nonpad lengths, a mask as wide as K."""
    q, k, v, mask = c["q"], c["k"], c["v"], c["attn_mask"]
    if q is None or k is None or v is None or len(c.outs) != 1:
        return None
    if any(c[name] is not None for name in ("past_key", "past_value", "nonpad_kv_seqlen")):
        return None
    if (c.prop("softcap", 0.0) or c.prop("qk_matmul_output_mode", 0)
            or c.prop("left_window_size", -1) != -1 or c.prop("right_window_size", -1) != -1
            or c.prop("softmax_precision") is not None):
        return None
    shape, k_shape = _shape(q), _shape(k)
    if shape is None or k_shape is None:
        return None
    heads = c.prop("q_num_heads", 0) or 0
    head_size = shape[-1] if len(shape) == 4 else (
        shape[-1] // heads if heads and shape[-1] is not None else None)
    scale = c.prop("scale")
    if scale is None:
        if head_size is None:
            return None
        scale = 1 / math.sqrt(head_size)
    if mask is not None:
        mask_shape, kv = _shape(mask), k_shape[-2] if len(k_shape) == 4 else k_shape[1]
        if mask_shape is None or kv is None or mask_shape[-1] != kv or len(mask_shape) > 4:
            return None
    props = {"is_causal": _i(c.prop("is_causal", 0)), "scale": _f(scale),
             "q_num_heads": _i(heads), "kv_num_heads": _i(c.prop("kv_num_heads", 0) or 0)}
    ins = [q, k, v] + ([mask] if mask is not None else [])
    return K.AttentionOp, ins, props


RULES = {
    "graph.conv": _lower_conv,
    "graph.conv_transpose": _lower_conv_transpose,
    "graph.matmul": _lower_matmul,
    "graph.gemm": _lower_gemm,
    "graph.max_pool": _lower_pool,
    "graph.average_pool": _lower_pool,
    "graph.global_average_pool": _lower_global_pool,
    "graph.global_max_pool": _lower_global_pool,
    "graph.softmax": _lower_softmax,
    "graph.layer_norm": _lower_layer_norm,
    "graph.reduce_mean": _lower_reduce,
    "graph.reduce_sum": _lower_reduce,
    "graph.reduce_max": _lower_reduce,
    "graph.transpose": _lower_transpose,
    "graph.concat": _lower_concat,
    "graph.gather": _lower_gather,
    "graph.pad": _lower_pad,
    "graph.split": _lower_split,
    "graph.slice": _lower_slice,
    "graph.resize": _lower_resize,
    "graph.attention": _lower_attention,
    "graph.lstm": _lower_recurrent,
    "graph.gru": _lower_recurrent,
    "graph.rnn": _lower_recurrent,
}


# Graph ops that a float16 compute runs as onnxruntime's CPU provider runs them (its
# InsertCastTransformer): the f16 ins cast to f32 (constants once, at compile time), the
# f32 kernel, the result rounded back to f16 where an f16 reader needs it
# (passes/lower_f16.py). Not the ops that move f16 as it is (transpose, concat, gather,
# pad, split, slice) nor nearest resize, exact in f16 (they run on f32 only between
# lifted ops: lower_f16.MOVES), nor the reductions, which accumulate
# f16 in f32 and round once (kernel.reduce). The global pools are lifted all the same:
# the f32 copy of their input usually serves the op after them too (squeeze-excite's
# mul), and kernel.reduce reads f32 faster.
F16_IN_F32 = frozenset(set(K.STEPS) | {
    "graph.conv", "graph.conv_transpose", "graph.matmul", "graph.gemm", "graph.max_pool",
    "graph.average_pool", "graph.global_average_pool", "graph.global_max_pool",
    "graph.softmax", "graph.layer_norm", "graph.resize", "graph.attention", "graph.lstm",
    "graph.gru", "graph.rnn"})


def computes_f16_in_f32(op: Operation) -> bool:
    """Whether `op` (a buffer.compute of f16 values) runs in f32 (F16_IN_F32)."""
    name = op.properties["op"].value
    if name not in F16_IN_F32:
        return False
    if name == "graph.resize":
        mode = op.properties.get("mode")
        return mode is not None and mode.value != "nearest"
    return True


def _fits(cls, ins, outs, props) -> bool:
    """Whether the kernel op would verify: operand types, result types, properties."""
    return _fitting_config(cls, ins, outs, props) is not None


def _fitting_config(cls, ins, outs, props) -> tuple | None:
    """(config, workspace roles, workspace types) when the kernel op would verify (the
    config is `config_of(props)`; `emit` reuses all three); None when it would not."""
    for name, definition in cls.prop_defs.items():
        attr = props.get(name)
        if attr is None:
            if not definition.optional and name != "operandSegmentSizes":
                return None
        elif not isinstance(attr, definition.attr_class) or (
                definition.check is not None and definition.check(attr)):
            return None
    config = cls.config_of(props)
    in_types = [v.type for v in ins]
    try:
        if cls.check(in_types, config):
            return None
        shapes = cls.result_shapes([tuple(t.shape) for t in in_types], config)
        elements = cls.result_elements(in_types, config)
        roles = cls.workspace_roles(in_types, config)
        workspaces = cls.workspace_types(in_types, config)
    except (S.ShapeError, KeyError, TypeError, IndexError, ValueError):
        return None
    if not cls.outs_arity[0] <= len(outs) <= min(cls.outs_arity[1], len(shapes)):
        return None
    for value, shape, element in zip(outs, shapes, elements):
        if value.type.element_type != element:
            return None
        if shape is not None and not K._compatible(shape, value.type.shape):
            return None
    return config, roles, workspaces
