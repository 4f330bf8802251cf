"""`kernel.resize` in OpenCL (the numpy kernel in backends/numpy/kernel_ops_movement.py
is the reference): tables computed on the host at generation time, with the reference's
own functions, are baked into the source as `__constant` arrays. Nearest is one pass over
every axis (an index per out position of each axis, -1 where tf_crop_and_resize
extrapolates), a work-item per out row where nothing extrapolates (its source row found
once, then vectors: copies, integer upsamples as repeated lanes), its elements moved as
unsigned integers of their size (movement.py); linear and cubic (every tap count,
antialias and exclude_outside included) run one pass per axis through the `stage<i>`
workspaces, as the reference does, so float rounding follows it step by step. The `taps`
workspace is unused. Tables larger than the 64 KiB of __constant memory every device has
(a cubic resize to some 3000+ positions on one axis) run on the host.
"""

from __future__ import annotations

import numpy as np

from palimpsest.backends.opencl.kernels.base import (
    Unsupported, generator, literal, ref, strides_of,
)
from palimpsest.backends.opencl.kernels.movement import (
    _coord, _kernel, _moved, _n, _per_element, _prelude,
)

# OpenCL's guaranteed minimum of __constant memory (CL_DEVICE_MAX_CONSTANT_BUFFER_SIZE,
# full profile): resize tables up to this size fit on any device
_CONSTANT_BUDGET = 64 * 1024


def _table(name: str, ctype: str, values) -> str:
    items = ", ".join(literal(v, ctype) if ctype in ("float", "double") else str(int(v))
                      for v in values)
    return f"__constant {ctype} {name}[{len(values)}] = {{{items}}};\n"


def _check_tables(nbytes: int) -> None:
    if nbytes > _CONSTANT_BUDGET:
        raise Unsupported(f"resize tables of {nbytes} bytes exceed the {_CONSTANT_BUDGET} "
                          f"bytes of __constant memory every device has")


@generator("kernel.resize")
def resize(call) -> list:
    config = call.config
    x, out = call.ins[0], call.outs[0]
    if out.size == 0:
        return []
    if x.size == 0:
        raise Unsupported("resizes an empty input (the host reports the error)")
    if config["mode"] == "nearest":
        return _resize_nearest(call)
    return _resize_filtered(call)


def _axis_coords(config, i: int, in_len: int):
    from palimpsest.dialects.graph.reference.resize import _source_coords

    roi, count = config["roi"], len(config["axes"])
    axis_roi = (roi[i], roi[i + count]) if roi is not None else None
    return _source_coords(config["coordinate_transformation_mode"], config["sizes"][i],
                          config["scales"][i], in_len, axis_roi)


def _resize_nearest(call) -> list:
    from palimpsest.dialects.graph.reference.resize import _nearest_indices

    config = call.config
    x, out = call.ins[0], call.outs[0]
    t = _moved(x)
    in_strides = strides_of(x.shape)
    tables, lines = [], ["IX off = 0;"]
    extrapolates = False
    for i, axis in enumerate(config["axes"]):
        coords, outside = _axis_coords(config, i, x.shape[axis])
        index = _nearest_indices(coords, config["nearest_mode"], x.shape[axis])
        if outside is not None and outside.any():
            index = np.where(outside, -1, index)
            extrapolates = True
        tables.append(_table(f"INDEX{axis}", "int", index))
    _check_tables(4 * sum(config["sizes"]))
    if not extrapolates and len(x.shape) >= 1:
        return _resize_nearest_rows(call, tables, t)
    if extrapolates:
        lines.append("int inside = 1;")
    for axis in range(len(x.shape)):
        coord = _coord(out.shape, axis)
        if axis not in config["axes"]:
            lines.append(f"off += {coord} * {_n(in_strides[axis])};")
            continue
        lines.append(f"{{ const IX s = INDEX{axis}[{coord}];")
        if extrapolates:
            lines.append("  if (s < 0) inside = 0;")
        lines.append(f"  off += s * {_n(in_strides[axis])}; }}")
    if extrapolates:  # the value as the out's type stores it, moved as its bits
        value = np.asarray(config["extrapolation_value"], dtype=x.dtype)
        bits = int(value.view(np.dtype(f"u{x.dtype.itemsize}")))
        lines.append(f"y[i] = inside ? x[off] : ({t}){bits}UL;")
    else:
        lines.append("y[i] = x[off];")
    buffers = [("x", t, False), ("y", t, True)]
    source = _prelude(x, out) + "".join(tables) + _kernel("resize_nearest", buffers,
                                                          out.size, lines)
    return [_per_element(source, "resize_nearest", out.size, [ref("in", 0), ref("out", 0)])]


_ROW_LANES = 16   # elements per vector of the row-wise nearest resize


def _resize_nearest_rows(call, tables: list, t: str) -> list:
    """Nearest resize without extrapolation, one work-item per out row (all axes but the
    last): its source row's offset found once (the per-element kernel divided and looked
    up every axis for every element: 2.4 GB/s on PoCL), then the row in vectors: a copy
    where the last axis keeps its size and indices, an integer upsample (index o // k,
    ppocr's FPN x2 and x4) as vector loads whose lanes are each repeated k times, any
    other table element by element."""
    from palimpsest.dialects.graph.reference.resize import _nearest_indices

    config = call.config
    x, out = call.ins[0], call.outs[0]
    rank = len(out.shape)
    width, in_width = out.shape[-1], x.shape[-1]
    rows = out.size // width if width else 0
    in_strides = strides_of(x.shape)
    row_shape = tuple(out.shape[:-1])
    lines = ["IX off = 0;"]
    for axis in range(rank - 1):
        coord = _coord(row_shape, axis)
        if axis in config["axes"]:
            lines.append(f"off += INDEX{axis}[{coord}] * {_n(in_strides[axis])};")
        else:
            lines.append(f"off += {coord} * {_n(in_strides[axis])};")
    lines += ["__global const T* xr = x + off;", f"__global T* yr = y + i * {_n(width)};"]
    index = None
    if rank - 1 in config["axes"]:
        i = config["axes"].index(rank - 1)
        coords, _ = _axis_coords(config, i, in_width)
        index = np.asarray(_nearest_indices(coords, config["nearest_mode"], in_width))
    columns = np.arange(width)
    lanes = _ROW_LANES
    vt = f"{t}{lanes}"
    if index is None or (width == in_width and (index == columns).all()):
        lines += ["IX c = 0;",
                  f"for (; c + {lanes} <= {width}; c += {lanes}) "
                  f"vstore{lanes}(vload{lanes}(0, xr + c), 0, yr + c);",
                  f"for (; c < {width}; ++c) yr[c] = xr[c];"]
    else:
        k = width // in_width if in_width else 0
        if k in (2, 4, 8) and width == k * in_width and (index == columns // k).all():
            parts = ", ".join(f"a.s{j // k:x}" for j in range(lanes))
            lines += ["IX c = 0;",
                      f"for (; c + {lanes} <= {width}; c += {lanes}) {{",
                      f"  const {t}{lanes // k} a = vload{lanes // k}(0, xr + c / {k});",
                      f"  vstore{lanes}(({vt})({parts}), 0, yr + c);",
                      "}",
                      f"for (; c < {width}; ++c) yr[c] = xr[c / {k}];"]
        else:
            lines.append(f"for (IX c = 0; c < {width}; ++c) yr[c] = xr[INDEX{rank - 1}[c]];")
    buffers = [("x", t, False), ("y", t, True)]
    source = (_prelude(x, out) + f"#define T {t}\n" + "".join(tables)
              + _kernel("resize_rows", buffers, rows, lines))
    return [_per_element(source, "resize_rows", rows, [ref("in", 0), ref("out", 0)])]


def _resize_filtered(call) -> list:
    """Linear or cubic: one launch per axis, stage to stage as the numpy kernel goes."""
    from palimpsest.dialects.graph.reference.resize import tap_table

    config = call.config
    x, out = call.ins[0], call.outs[0]
    t = out.ctype
    if t not in ("float", "double"):
        raise Unsupported(f"{config['mode']} resize of {x.dtype} on the device")
    launches = []
    shape = list(x.shape)
    count = len(config["axes"])
    for i, (axis, size, scale) in enumerate(zip(config["axes"], config["sizes"],
                                                config["scales"])):
        in_len = shape[axis]
        coords, outside = _axis_coords(config, i, in_len)
        neighbours, weights = tap_table(config["mode"], coords, scale,
                                        bool(config["antialias"]), config["cubic_coeff_a"],
                                        config["exclude_outside"], in_len)
        taps = weights.shape[1]
        weights = weights.astype(out.dtype)
        # tap j of out position o reads clamp(FIRST[o] + j) (the reference's clipped
        # neighbours): one index per position keeps the tables small
        tables = [_table("FIRST", "int", neighbours[:, 0]),
                  _table("WEIGHT", t, weights.reshape(-1))]
        extrapolates = outside is not None and outside.any()
        if extrapolates:
            tables.append(_table("OUTSIDE", "uchar", outside.astype(np.uint8)))
        _check_tables(size * (4 + 1 + taps * out.dtype.itemsize))
        inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
        shape[axis] = size
        total = int(np.prod(shape, dtype=np.int64))
        lines = [f"const IX o = (i / {_n(inner)}) % {_n(size)};",
                 f"const IX r = i % {_n(inner)};",
                 f"__global const {t}* row = x + (i / {_n(size * inner)}) * "
                 f"{_n(in_len * inner)} + r;"]
        if extrapolates:
            value = literal(config["extrapolation_value"], t)
            lines.append(f"if (OUTSIDE[o]) {{ y[i] = {value}; return; }}")
        at = f"clamp(first + j, 0, {in_len - 1}) * {_n(inner)}"
        lines += ["const int first = FIRST[o];",
                  f"__constant const {t}* w = WEIGHT + o * {taps};",
                  f"{t} sum = row[clamp(first, 0, {in_len - 1}) * {_n(inner)}] * w[0];",
                  f"for (int j = 1; j < {taps}; ++j) sum += row[{at}] * w[j];",
                  "y[i] = sum;"]
        buffers = [("x", t, False), ("y", t, True)]
        source = (_prelude(x, out, *call.workspaces.values()) + "".join(tables)
                  + _kernel("resize_axis", buffers, total, lines))
        read = ref("in", 0) if i == 0 else ref("ws", f"stage{i - 1}")
        write = ref("out", 0) if i == count - 1 else ref("ws", f"stage{i}")
        launches.append(_per_element(source, "resize_axis", total, [read, write]))
    return launches
