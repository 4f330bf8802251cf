"""What changed between ONNX opsets, as rewrites of a node into the form the graph op takes.

The graph dialect follows each op's latest opset (CONVENTIONS.md). A model exported at an
older opset is imported by rewriting each of its nodes, before the importer maps it, into
the newest form that means the same thing:

- attributes that later became inputs keep their names, and the importer turns them into
  constant operands (Squeeze's `axes`, Split's `split`, Slice's `starts`...); only the ones
  whose name or shape differs are rewritten here (Pad's `value`, TopK's scalar `k`);
- legacy attributes without effect at inference are dropped (`consumed_inputs`,
  `is_test`, BatchNormalization's `spatial = 1`, Gemm's `broadcast`);
- changed semantics become explicit properties or attribute values: Softmax, LogSoftmax
  and Hardmax before 13 coerce their input to 2-D at `axis` (default 1); Resize-10 and
  Upsample have no `roi` input and sample `asymmetric` with `floor` rounding;
- what has no equivalent is refused, naming the attribute and the opset.

`adapt(node, opset)` returns the node itself when nothing changes, else a rewritten copy
(the model is never modified). Each rule is `(op types, first opset where it no longer
applies, function)`; a function takes `(node, opset)` and returns the rewritten node.
"""

from __future__ import annotations


class OpsetError(ValueError):
    """A node of an old opset with no equivalent in the graph dialect (the importer
    turns it into a diagnostic naming the node)."""


def _attrs(node) -> dict:
    return {a.name: a for a in node.attribute}


def _copy(node):
    import onnx

    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    return copy


def _set_attrs(node, remove=(), add=None):
    """A copy of `node` without the attributes named in `remove` and with `add`
    ({name: python value}) set."""
    from onnx import helper

    copy = _copy(node)
    keep = [a for a in copy.attribute if a.name not in remove and a.name not in (add or {})]
    del copy.attribute[:]
    copy.attribute.extend(keep)
    for name, value in (add or {}).items():
        copy.attribute.append(helper.make_attribute(name, value))
    return copy


def _drop_legacy(node, opset):
    legacy = [name for name in ("consumed_inputs", "is_test") if name in _attrs(node)]
    return _set_attrs(node, remove=legacy) if legacy else node


def _coerce_2d(node, opset):
    """Softmax/LogSoftmax/Hardmax < 13: flatten to [prod(d[:axis]), prod(d[axis:])],
    normalize each row, reshape back; `axis` defaults to 1."""
    axis = _attrs(node).get("axis")
    return _set_attrs(node, add={"axis": axis.i if axis is not None else 1, "coerce_2d": 1})


def _pad_value(node, opset):
    """Pad < 11: `pads` and `value` attributes; the graph op takes `constant_value`."""
    attrs = _attrs(node)
    if "paddings" in attrs:  # Pad-1's name for pads
        node = _set_attrs(node, remove=("paddings",), add={"pads": list(attrs["paddings"].ints)})
        attrs = _attrs(node)
    if "value" not in attrs:
        return node
    return _set_attrs(node, remove=("value",), add={"constant_value": attrs["value"].f})


def _batch_norm(node, opset):
    attrs = _attrs(node)
    spatial = attrs.get("spatial")
    if spatial is not None and spatial.i != 1:
        raise OpsetError(f"BatchNormalization with spatial = {spatial.i} (opset {opset}): "
                         f"per-element statistics are not supported")
    return _set_attrs(node, remove=("spatial", "is_test", "consumed_inputs"))


def _legacy_broadcast(node, opset):
    """Binary ops < 7: `broadcast = 1` with `axis` aligns B's dims at A's `axis`; without
    `axis`, at the trailing dims, which is numpy's rule that the graph op follows."""
    attrs = _attrs(node)
    if "axis" in attrs and attrs.get("broadcast") is not None and attrs["broadcast"].i:
        raise OpsetError(f"legacy broadcasting with 'axis' = {attrs['axis'].i} (opset "
                         f"{opset}) is not supported; re-export at opset 7 or later")
    return _set_attrs(node, remove=("broadcast", "axis", "consumed_inputs"))


def _resize_10(node, opset):
    """Resize-10 and Upsample-9 are (X, scales); Upsample-7 has a `scales` attribute.
    Both sample `asymmetric`, nearest rounding down."""
    import onnx

    copy = _set_attrs(node, remove=("scales",), add={
        "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"})
    mode = _attrs(copy).get("mode")
    if mode is not None and mode.s == b"bilinear":  # Upsample-7's other spelling
        copy = _set_attrs(copy, add={"mode": "linear"})
    inputs = list(node.input)
    scales = _attrs(node).get("scales")
    if scales is not None:   # Upsample-7: the attribute becomes the 'scales' operand
        copy.attribute.append(onnx.helper.make_attribute("scales", list(scales.floats)))
        inputs = inputs[:1]
    del copy.input[:]
    copy.input.extend([inputs[0], ""] + inputs[1:2])
    copy.op_type = "Resize"
    return copy


def _top_k(node, opset):
    """TopK-1: `k` is an attribute; later a 1-D input of one element."""
    k = _attrs(node).get("k")
    if k is None:
        return node
    return _set_attrs(node, remove=("k",), add={"k": [k.i]})


def _cast_string_to(node, opset):
    """Cast-1 spelled `to` as a type name."""
    import onnx

    to = _attrs(node).get("to")
    if to is None or to.type != onnx.AttributeProto.STRING:
        return node
    name = to.s.decode().upper()
    code = onnx.TensorProto.DataType.Value(name) if name in onnx.TensorProto.DataType.keys() \
        else None
    if code is None:
        raise OpsetError(f"Cast to '{to.s.decode()}' (opset {opset}) names no ONNX type")
    return _set_attrs(node, add={"to": code})


def _dft_17(node, opset):
    """DFT-17: `axis` is an attribute, default 1 (opset 20: an input, default -2)."""
    if "axis" in _attrs(node):
        return node
    return _set_attrs(node, add={"axis": 1})


def _roi_align_10(node, opset):
    """RoiAlign-10 had no coordinate_transformation_mode: it did `output_half_pixel`."""
    if "coordinate_transformation_mode" in _attrs(node):
        return node
    return _set_attrs(node, add={"coordinate_transformation_mode": "output_half_pixel"})


_BINARY = ("Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "And", "Or", "Xor",
           "PRelu")
_LEGACY = ("Relu", "Sigmoid", "Tanh", "Exp", "Log", "Neg", "Abs", "Reciprocal", "Floor", "Ceil",
           "Sqrt", "LeakyRelu", "Elu", "Selu", "HardSigmoid", "Clip", "Max", "Min", "Sum",
           "Mean", "Dropout", "Concat", "Softmax", "InstanceNormalization")

RULES: list = [
    (("Softmax", "LogSoftmax", "Hardmax"), 13, _coerce_2d),
    (("Pad",), 11, _pad_value),
    (("BatchNormalization",), 9, _batch_norm),
    (_BINARY, 7, _legacy_broadcast),
    (("Gemm",), 7, lambda node, opset: _set_attrs(node, remove=("broadcast",))),
    (("Resize",), 11, _resize_10),
    (("Upsample",), 10**6, _resize_10),
    (("TopK",), 10, _top_k),
    (("Cast",), 6, _cast_string_to),
    (("DFT",), 20, _dft_17),
    (("RoiAlign",), 16, _roi_align_10),
    (_LEGACY, 7, _drop_legacy),
]

_BY_OP: dict = {}
for _ops, _until, _fn in RULES:
    for _op in _ops:
        _BY_OP.setdefault(_op, []).append((_until, _fn))


def adapt(node, opset: int):
    """`node` in the form of its op's latest opset (see the module docstring)."""
    for until, fn in _BY_OP.get(node.op_type, ()):
        if opset < until:
            node = fn(node, opset)
    return node
