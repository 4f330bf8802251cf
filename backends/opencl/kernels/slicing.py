"""`kernel.split` and `kernel.slice` in OpenCL (the numpy kernels in
backends/numpy/kernel_ops_slicing.py are the reference): one work-item per out element,
moving it as the unsigned integer of its size, as movement.py's copies do (every element
type of a size shares a program). Split launches once per non-empty out."""

from __future__ import annotations

from palimpsest.backends.opencl.kernels.base import generator, ref, strides_of
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
        if out.size:
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
    for axis, (step, size) in enumerate(zip(config["steps"], config["sizes"])):
        if out.shape[axis] == 1:
            continue
        terms.append(f"{_coord(out.shape, axis)} * {_n(step * in_strides[axis])}")
    body = [f"y[i] = x[{' + '.join(terms)}];"]
    source = _prelude(x, out) + _kernel("slice", [("x", t, False), ("y", t, True)], out.size,
                                        body)
    return [_per_element(source, "slice", out.size, [ref("in", 0), ref("out", 0)])]
