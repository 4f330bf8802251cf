"""Kernel ops for data movement (`kernel.transpose`, `kernel.concat`, `kernel.gather`,
`kernel.pad`, `kernel.resize`) and `kernel.generic`, the fallback for any other graph op
(see dialects/kernel.py)."""

from __future__ import annotations

from palimpsest.dialects.buffer import ComputeOp
from palimpsest.dialects.graph import shapes as S
from palimpsest.dialects.kernel_base import (
    KernelOp, _float, _floats, _int, _ints, _str, _times, is_float,
)
from palimpsest.ir.opdef import register_op
from palimpsest.ir.types import IntegerType

# -- data movement -------------------------------------------------------------------------------

@register_op
class TransposeOp(KernelOp):
    name = "kernel.transpose"
    perm = _ints(None, None, 0)

    @classmethod
    def result_shapes(cls, in_shapes, config):
        return [S.transpose(in_shapes[0], config["perm"])]


@register_op
class ConcatOp(KernelOp):
    """Joins the ins along `axis` (non-negative)."""

    name = "kernel.concat"
    arity = (1, None)
    axis = _int(None)

    @classmethod
    def check(cls, in_types, config):
        if any(t.element_type != in_types[0].element_type for t in in_types):
            return "joins ins of one element type"
        return None

    @classmethod
    def result_shapes(cls, in_shapes, config):
        return [S.concat(in_shapes, config["axis"])]


@register_op
class GatherOp(KernelOp):
    """data[..., indices, ...] along `axis` (non-negative); ins: data, indices."""

    name = "kernel.gather"
    arity = (2, 2)
    axis = _int(0)

    @classmethod
    def check(cls, in_types, config):
        index = in_types[1].element_type
        if not (isinstance(index, IntegerType) and index.width in (32, 64)):
            return f"takes i32 or i64 indices, got {index}"
        return None

    @classmethod
    def result_shapes(cls, in_shapes, config):
        return [S.gather(in_shapes[0], in_shapes[1], config["axis"])]


@register_op
class PadOp(KernelOp):
    """Pads (or, with negative values, crops) every axis: `pads` = begins then ends.
    Mode constant (ins: data, optional one-element value), edge, reflect or wrap."""

    name = "kernel.pad"
    arity = (1, 2)
    mode = _str("constant", ("constant", "edge", "reflect", "wrap"))
    pads = _ints(None)

    @classmethod
    def check(cls, in_types, config):
        x = in_types[0]
        if len(config["pads"]) != 2 * len(x.shape):
            return f"pads needs {2 * len(x.shape)} values for '{x}', got {len(config['pads'])}"
        if len(in_types) == 2:
            if in_types[1].element_type != x.element_type:
                return "the pad value must have the data's element type"
            if config["mode"] != "constant":
                return f"mode '{config['mode']}' takes no pad value"
        return None

    @classmethod
    def result_shapes(cls, in_shapes, config):
        return [S.pad(in_shapes[0], config["pads"])]


RESIZE_COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                           "align_corners", "asymmetric", "tf_crop_and_resize")


@register_op
class ResizeOp(KernelOp):
    """Separable resize, one axis at a time in `axes` order (ONNX Resize semantics):
    axis `axes[i]` becomes `sizes[i]` long with scale `scales[i]`; `roi` (begin, end per
    axis) for tf_crop_and_resize."""

    name = "kernel.resize"
    axes = _ints(None, None, 0)
    sizes = _ints(None, None, 0)
    scales = _floats(optional=False)
    roi = _floats()
    mode = _str("nearest", ("nearest", "linear", "cubic"))
    coordinate_transformation_mode = _str("half_pixel", RESIZE_COORDINATE_MODES)
    nearest_mode = _str("round_prefer_floor", ("round_prefer_floor", "round_prefer_ceil",
                                               "floor", "ceil"))
    cubic_coeff_a = _float(-0.75)
    exclude_outside = _int(0, (0, 1))
    extrapolation_value = _float(0.0)
    antialias = _int(0, (0, 1))

    @classmethod
    def check(cls, in_types, config):
        x = in_types[0]
        axes, sizes, scales = config["axes"], config["sizes"], config["scales"]
        if not (len(axes) == len(sizes) == len(scales)) or not axes:
            return "axes, sizes and scales need one value per resized axis"
        if len(set(axes)) != len(axes) or max(axes) >= len(x.shape):
            return f"axes {list(axes)} are not distinct dims of '{x}'"
        if config["mode"] != "nearest" and not is_float(x.element_type):
            return f"mode '{config['mode']}' computes f32 or f64"
        if config["coordinate_transformation_mode"] == "tf_crop_and_resize" and (
                config["roi"] is None or len(config["roi"]) != 2 * len(axes)):
            return "tf_crop_and_resize needs a roi of a begin and an end per axis"
        return None

    @classmethod
    def stage_shapes(cls, in_shape, config) -> list:
        """The shape after each resized axis (the last is the result's)."""
        shapes, shape = [], list(in_shape)
        for axis, size in zip(config["axes"], config["sizes"]):
            shape[axis] = size
            shapes.append(tuple(shape))
        return shapes

    @classmethod
    def result_shapes(cls, in_shapes, config):
        return [cls.stage_shapes(in_shapes[0], config)[-1]]

    @classmethod
    def workspace_roles(cls, in_types, config):
        roles = [f"stage{i}" for i in range(len(config["axes"]) - 1)]
        if config["mode"] != "nearest":
            roles.append("taps")
        return roles

    @classmethod
    def workspace_shape(cls, role, in_shapes, config):
        stages = cls.stage_shapes(in_shapes[0], config)
        if role == "taps":
            sizes = [_times(*s) for s in stages]
            return (None if None in sizes else max(sizes),)
        return stages[int(role[len("stage"):])]


# -- any other graph op -------------------------------------------------------------------------

@register_op
class GenericOp(ComputeOp):
    """Graph op `op` run by the backend's implementation of the graph op (its reference
    kernel): the kernel level's fallback, with no workspace. Same operands and
    properties as `buffer.compute`."""

    name = "kernel.generic"
