"""`kernel.split` and `kernel.slice` in OpenCL (the numpy kernels in
backends/numpy/kernel_ops_slicing.py are the reference): one work-item per out element,
moving it as the unsigned integer of its size, as movement.py's copies do (every element
type of a size shares a program). Split launches once per non-empty out; a split out
with a block of 8+ work-items to group, and a slice with rows of 8+ elements, are 2-D
launches with no division per element."""

from __future__ import annotations

from palimpsest.backends.opencl.kernels.base import (
    Launch, bind, generator, params, ref, strides_of,
)
from palimpsest.backends.opencl.kernels.movement import (
    _coord, _kernel, _moved, _n, _per_element, _prelude,
)


@generator("kernel.split")
def split(call) -> list:
    x = call.ins[0]
    axis = call.config["axis"]
    t = _moved(x)
    dim = x.shape[axis]
    inner = 1
    for d in x.shape[axis + 1:]:
        inner *= d
    launches, start = [], 0
    for index, (out, size) in enumerate(zip(call.outs, call.config["sizes"])):
        block = size * inner
        local = max((d for d in range(1, min(block, ROW_ITEMS) + 1) if block % d == 0),
                    default=1)
        if out.size and local >= ROW_MIN:
            # 2-D, as concat's: the out's block by the outer count, no division per element
            buffers = [("x", t, False), ("y", t, True)]
            source = (_prelude(x, out) +
                      f"__kernel void split_rows({params(*buffers)}) {{\n"
                      f"  const IX j = get_global_id(0), o = get_global_id(1);\n"
                      f"{bind(*buffers)}\n"
                      f"  y[o * {_n(block)} + j] = x[o * {_n(dim * inner)} + "
                      f"{_n(start * inner)} + j];\n}}\n")
            launches.append(Launch(source, "split_rows", (block, out.size // block),
                                   (local, 1), [ref("in", 0), ref("out", index)]))
        elif out.size:
            body = [f"const IX r = i % {_n(size * inner)};",
                    f"y[i] = x[(i / {_n(size * inner)}) * {_n(dim * inner)} + "
                    f"{_n(start * inner)} + r];"]
            source = _prelude(x, out) + _kernel("split", [("x", t, False), ("y", t, True)],
                                                out.size, body)
            launches.append(_per_element(source, "split", out.size,
                                         [ref("in", 0), ref("out", index)]))
        start += size
    return launches


@generator("kernel.slice")
def slice_(call) -> list:
    x, out = call.ins[0], call.outs[0]
    t = _moved(x)
    if out.size == 0:
        return []
    config = call.config
    in_strides = strides_of(x.shape)
    base = sum(start * stride for start, size, stride in
               zip(config["starts"], config["sizes"], in_strides) if size != -1)
    terms = [_n(base)]
    kept = [a for a in range(len(out.shape)) if out.shape[a] != 1]  # size-1 axes add 0
    if kept and out.shape[kept[-1]] >= ROW_MIN:
        return [_rows(x, out, kept, config["steps"], in_strides, base, t)]
    for axis, (step, size) in enumerate(zip(config["steps"], config["sizes"])):
        if out.shape[axis] == 1:
            continue
        terms.append(f"{_coord(out.shape, axis)} * {_n(step * in_strides[axis])}")
    body = [f"y[i] = x[{' + '.join(terms)}];"]
    source = _prelude(x, out) + _kernel("slice", [("x", t, False), ("y", t, True)], out.size,
                                        body)
    return [_per_element(source, "slice", out.size, [ref("in", 0), ref("out", 0)])]


ROW_MIN = 8      # out rows at least this long are copied by the 2-D form
ROW_ITEMS = 256  # work-items of a work-group along the row


def _rows(x, out, kept, steps, in_strides, base: int, t: str) -> Launch:
    """A slice as a 2-D launch: axis 0 runs along the out's last axis longer than 1
    (`kept`: the axes longer than 1), axis 1 over the rest, so a row's source is computed
    from the row index (uniform across a work-group's row) and a work-group copies one
    stretch of a row (PoCL: 3-4x over one work-item per element, whose index divides by
    every axis: YOLO's focus slices 0.32 -> 0.08 ms)."""
    last = kept[-1]
    width = out.shape[last]
    row_shape = tuple(out.shape[a] for a in kept[:-1])
    rows = 1
    for d in row_shape:
        rows *= d
    terms = [_n(base)]
    for position, axis in enumerate(kept[:-1]):
        terms.append(f"{_coord(row_shape, position, 'row')} * "
                     f"{_n(steps[axis] * in_strides[axis])}")
    terms.append(f"j * {_n(steps[last] * in_strides[last])}")
    buffers = [("x", t, False), ("y", t, True)]
    source = (_prelude(x, out) +
              f"__kernel void slice_rows({params(*buffers)}) {{\n"
              f"  const IX j = get_global_id(0), row = get_global_id(1);\n{bind(*buffers)}\n"
              f"  y[row * {_n(width)} + j] = x[{' + '.join(terms)}];\n}}\n")
    local0 = max(d for d in range(1, min(width, ROW_ITEMS) + 1) if width % d == 0)
    room = max(1, 64 // local0)
    local1 = max(d for d in range(1, min(rows, room) + 1) if rows % d == 0)
    return Launch(source, "slice_rows", (width, rows), (local0, local1),
                  [ref("in", 0), ref("out", 0)])
