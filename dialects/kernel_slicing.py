"""Kernel ops that copy parts of their in: `kernel.split` (graph.split) and `kernel.slice`
(graph.slice), with constant geometry and no workspace.

- `kernel.split`: out i is the in's `sizes[i]` elements along `axis` after the outs
  before it (the sizes add up to the axis, checked at run time where it is `?`).
- `kernel.slice`: per axis, out element j along it is in element `starts[a] + j *
  steps[a]` (steps non-zero, possibly negative); `sizes[a]` elements, or -1: the whole
  axis (start 0, step 1, for axes the slice leaves alone, which may be `?`). The lowering
  clamps ONNX's starts and ends (slice.indices) into this form.
"""

from __future__ import annotations

from palimpsest.dialects.kernel_base import KernelOp, _int, _ints
from palimpsest.ir.opdef import register_op


@register_op
class SplitOp(KernelOp):
    name = "kernel.split"
    outs_arity = (1, 1 << 16)
    axis = _int(None)
    sizes = _ints(None, None, 0)

    @classmethod
    def check(cls, in_types, config):
        x = in_types[0]
        axis, sizes = config["axis"], config["sizes"]
        if not 0 <= axis < len(x.shape):
            return f"axis {axis} is not a dim of '{x}'"
        if not sizes:
            return "needs one size per out"
        dim = x.shape[axis]
        if dim is not None and sum(sizes) != dim:
            return f"sizes {list(sizes)} do not add up to dim {axis} of '{x}'"
        return None

    @classmethod
    def result_shapes(cls, in_shapes, config):
        shape, axis = list(in_shapes[0]), config["axis"]
        return [tuple(shape[:axis]) + (size,) + tuple(shape[axis + 1:])
                for size in config["sizes"]]

    @classmethod
    def result_elements(cls, in_types, config):
        return [in_types[0].element_type] * len(config["sizes"])


@register_op
class SliceOp(KernelOp):
    name = "kernel.slice"
    starts = _ints(None, None, 0)
    steps = _ints(None)
    sizes = _ints(None, None, -1)

    @classmethod
    def check(cls, in_types, config):
        x = in_types[0]
        starts, steps, sizes = config["starts"], config["steps"], config["sizes"]
        if not len(starts) == len(steps) == len(sizes) == len(x.shape):
            return f"needs a start, step and size per dim of '{x}'"
        for axis, (start, step, size, dim) in enumerate(zip(starts, steps, sizes, x.shape)):
            if size == -1:
                if start != 0 or step != 1:
                    return f"dim {axis}: a whole axis (size -1) starts at 0 with step 1"
                continue
            if step == 0:
                return f"dim {axis}: steps must be non-zero"
            if size and dim is not None and not (
                    0 <= start < dim and 0 <= start + (size - 1) * step < dim):
                return f"dim {axis}: {size} elements from {start} by {step} leave '{x}'"
        return None

    @classmethod
    def result_shapes(cls, in_shapes, config):
        return [tuple(dim if size == -1 else size
                      for dim, size in zip(in_shapes[0], config["sizes"]))]


__all__ = ["SliceOp", "SplitOp"]
