"""Data-movement kernels on numpy: transpose, concat, gather, pad, resize. Registered in
`KERNEL_IMPLS` (kernel_ops.py, which imports this module); the table there says how each
works."""

from __future__ import annotations

import numpy as np

from palimpsest.backends.numpy.kernel_ops import (
    _scalar, _view_as, config_of, impl, is_constant_value, record, recorded, replay, replayed,
    workspaces_by_role)


# -- data movement --------------------------------------------------------------------------------

@impl("kernel.transpose")
def transpose(op, inputs, outputs, workspaces):
    x, y = inputs[0], outputs[0]
    replayed(op, (x, y), lambda: [(np.copyto, (y, x.transpose(config_of(op)["perm"])), {})])


@impl("kernel.concat")
def concat(op, inputs, outputs, workspaces):
    y = outputs[0]
    replayed(op, (*inputs, y), lambda: [
        (np.concatenate, (inputs,), {"axis": config_of(op)["axis"], "out": y})])


@impl("kernel.gather")
def gather(op, inputs, outputs, workspaces):
    x, indices = inputs
    y = outputs[0]
    replayed(op, (x, indices, y), lambda: _gather_calls(
        config_of(op)["axis"], x, indices, y, is_constant_value(op.ins[1])))


def _gather_calls(axis: int, x, indices, y, constant: bool = False) -> list:
    """The indices checked (each run where they may be computed; once, as the calls are
    made, for a constant), then one np.take."""
    dim = x.shape[axis]
    if constant and indices.size:
        _check_indices(indices, dim)
    calls = [(_check_indices, (indices, dim), {})] if indices.size and not constant else []
    if indices.dtype == np.intp:
        return calls + [(np.take, (x, indices), {"axis": axis, "out": y, "mode": "wrap"})]
    return calls + [(_take, (x, indices, axis, y), {})]


def _check_indices(indices, dim: int) -> None:
    if dim == 0 or indices.min() < -dim or indices.max() >= dim:
        raise ValueError(f"gather indices out of range [-{dim}, {dim - 1}]")


def _take(x, indices, axis: int, y) -> None:
    np.take(x, indices.astype(np.intp), axis=axis, out=y, mode="wrap")


@impl("kernel.pad")
def pad(op, inputs, outputs, workspaces):
    arrays = (*inputs, *outputs)
    calls = recorded(op, arrays)
    if calls is None:   # its copies, views made once per set of arrays (kernel_ops.record)
        calls = _pad_calls(config_of(op), inputs, outputs[0])
        record(op, arrays, calls)
    replay(calls)


def _pad_calls(config, inputs, y) -> list:
    """The copies of a pad: the interior, then the borders axis by axis (constant fills
    from a view of the value, or edge/reflect/wrap slabs within Y)."""
    x = inputs[0]
    rank = x.ndim
    pads = config["pads"]
    begins, ends = pads[:rank], pads[rank:]
    crop = tuple(slice(-min(b, 0), x.shape[a] + min(e, 0))
                 for a, (b, e) in enumerate(zip(begins, ends)))
    src = x[crop]
    lead = [max(b, 0) for b in begins]
    interior = tuple(slice(b, b + n) for b, n in zip(lead, src.shape))
    calls = [(np.copyto, (y[interior], src), {})]
    mode = config["mode"]
    if mode == "constant":
        # (the value read at each run: a view of its in)
        value = inputs[1].reshape(-1)[:1].reshape(()) if len(inputs) > 1 else 0
        for a in range(rank):
            for side in (y[(slice(None),) * a + (slice(0, lead[a]),)],
                         y[(slice(None),) * a + (slice(lead[a] + src.shape[a], None),)]):
                if side.size:
                    calls.append((np.copyto, (side, value), {"casting": "unsafe"}))
        return calls
    for a in range(rank):  # axis by axis, over the already padded extent of earlier axes
        size = src.shape[a]
        b = lead[a]
        e = y.shape[a] - b - size
        region = [slice(None)] * a + [None] + list(interior[a + 1:])

        def copy(target, source, _region=region, _a=a):
            _region[_a] = target
            dst = tuple(_region)
            _region[_a] = source
            calls.append((np.copyto, (y[dst], y[tuple(_region)]), {}))

        slabs = _border_slabs(mode, b, size, e)
        if slabs is not None:   # each side one copy of (a reversed, for reflect) slab
            for target, source in slabs:
                copy(target, source)
            continue
        for j in range(b):
            offset = b - j  # distance before the first interior cell
            source = {"edge": b, "reflect": b + offset, "wrap": b + size - offset}[mode]
            copy(slice(j, j + 1), slice(source, source + 1))
        for j in range(b + size, y.shape[a]):
            offset = j - (b + size - 1)  # distance after the last interior cell
            source = {"edge": b + size - 1, "reflect": b + size - 1 - offset,
                      "wrap": b + offset - 1}[mode]
            copy(slice(j, j + 1), slice(source, source + 1))
    return calls


def _border_slabs(mode: str, b: int, size: int, e: int):
    """[(target, source)] slices along one axis filling its `b` cells before and `e`
    after an interior of `size` cells at `b`, each side in one copy whose source lies in
    the interior (edge: the one border cell, broadcast; reflect: reversed; wrap: as it
    is); None when a side's source would reach past the interior (cell by cell then)."""
    last = b + size - 1
    if mode == "edge":
        fits = size >= 1
        before, after = slice(b, b + 1), slice(last, last + 1)
    elif mode == "reflect":
        fits = b <= size - 1 and e <= size - 1
        stop = last - 1 - e
        before, after = slice(2 * b, b, -1), slice(last - 1, stop if stop >= 0 else None, -1)
    elif mode == "wrap":
        fits = b <= size and e <= size
        before, after = slice(size, size + b), slice(b, b + e)
    else:
        return None
    if not fits:
        return None
    return [(slice(0, b), before)] * (b > 0) + [(slice(last + 1, last + 1 + e), after)] * (e > 0)


@impl("kernel.resize")
def resize(op, inputs, outputs, workspaces):
    from palimpsest.dialects.graph.reference.resize import (
        _nearest_indices, _source_coords, tap_table,
    )

    config = config_of(op)
    ws = workspaces_by_role(op, workspaces)
    x, y = inputs[0], outputs[0]
    mode = config["mode"]
    ctm = config["coordinate_transformation_mode"]
    axes, sizes, scales = config["axes"], config["sizes"], config["scales"]
    roi = config["roi"]
    count = len(axes)
    data = x
    for i, (axis, size, scale) in enumerate(zip(axes, sizes, scales)):
        target = y if i == count - 1 else ws[f"stage{i}"]
        in_len = data.shape[axis]
        if size == 0:
            data = target
            continue
        axis_roi = (roi[i], roi[i + count]) if roi is not None else None
        coords, outside = _source_coords(ctm, size, scale, in_len, axis_roi)
        shape = (1,) * axis + (size,) + (1,) * (data.ndim - axis - 1)
        if mode == "nearest":
            index = _nearest_indices(coords, config["nearest_mode"], in_len)
            np.take(data, index, axis=axis, out=target, mode="clip")
        else:
            neighbours, weights = tap_table(mode, coords, scale, bool(config["antialias"]),
                                            config["cubic_coeff_a"],
                                            config["exclude_outside"], in_len)
            taps = weights.shape[1]
            index = np.clip(neighbours, 0, in_len - 1).astype(np.intp)
            weights = weights.astype(y.dtype)
            tap = _view_as(ws["taps"][:target.size], target.shape)
            for j in range(taps):
                term = target if j == 0 else tap
                np.take(data, index[:, j], axis=axis, out=term, mode="clip")
                np.multiply(term, weights[:, j].reshape(shape), out=term)
                if j:
                    np.add(target, tap, out=target)
        if outside is not None and outside.any():
            np.copyto(target, _scalar(config["extrapolation_value"], target.dtype),
                      where=outside.reshape(shape))
        data = target
