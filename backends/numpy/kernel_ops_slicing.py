"""`kernel.split` and `kernel.slice` on numpy (dialects/kernel_slicing.py): each out is one
`np.copyto` from a basic-slicing view of the in, nothing allocated. Registered in
`KERNEL_IMPLS` (kernel_ops.py, which imports this module)."""

from __future__ import annotations

import numpy as np

from palimpsest.backends.numpy.kernel_ops import config_of, impl, prepared, replayed


@impl("kernel.split")
def split(op, inputs, outputs, workspaces):
    replayed(op, (inputs[0], *outputs), lambda: _split_calls(config_of(op), inputs[0], outputs))


def _split_calls(config, x, outputs) -> list:
    axis = config["axis"]
    if sum(config["sizes"]) != x.shape[axis]:
        raise ValueError(f"split sizes {list(config['sizes'])} do not add up to dimension "
                         f"{x.shape[axis]}")
    calls = []
    start = 0
    lead = (slice(None),) * axis
    for out, size in zip(outputs, config["sizes"]):
        calls.append((np.copyto, (out, x[lead + (slice(start, start + size),)]), {}))
        start += size
    return calls


def slices(config) -> tuple:
    """The basic-slicing index of a kernel.slice."""
    index = []
    for start, step, size in zip(config["starts"], config["steps"], config["sizes"]):
        if size == -1:
            index.append(slice(None))
            continue
        end = start + step * size
        index.append(slice(start, end if end >= 0 else None, step))
    return tuple(index)


@impl("kernel.slice")
def slice_(op, inputs, outputs, workspaces):
    x, y = inputs[0], outputs[0]
    replayed(op, (x, y), lambda: [(np.copyto, (y, x[prepared(op, _slices_of)]), {})])


def _slices_of(op, config) -> tuple:
    return slices(config)
