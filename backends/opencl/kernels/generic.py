"""OpenCL generators of the `kernel.generic` graph ops computed element by element:
casts, comparisons and logic, Where, Not, IsNaN / IsInf, Expand, Range and
ConstantOfShape (the executor runs them on the device by the shapes generic_ops.py
gives their outs: their first in's, their ins' broadcast, or the plan's)."""

from __future__ import annotations

import numpy as np

from palimpsest.backends.opencl.kernels.base import (
    Launch, Unsupported, bind, broadcast_index, generator, literal, params, ref, round_up,
)
from palimpsest.backends.opencl.kernels.elementwise import FLOATS, _per_element


@generator("graph.cast")
def cast(call) -> list:
    """A `kernel.generic` graph.cast: C conversion (float to integer truncates toward
    zero, as numpy's astype); to bool is `!= 0`. f16 to and from f32 (lower-to-kernels
    runs f16 ops in f32 between such casts) through vload_half / vstore_half16_rte, core
    OpenCL C without cl_khr_fp16 (PoCL's CPU device has no f16 arithmetic); f16 with any
    other type: the host."""
    x, y = call.ins[0], call.outs[0]
    half = {x.dtype.name, y.dtype.name} == {"float16", "float32"}
    source = "half" if half and x.dtype.name == "float16" else x.ctype
    target = "half" if half and y.dtype.name == "float16" else y.ctype
    value = "(x[i] != 0)" if y.dtype.kind == "b" else "x[i]"
    store = f"y[i] = ({target})({value});"
    size = y.size
    if source == "half":
        store = "y[i] = vload_half(i, x);"
    elif target == "half":
        # 16 a work-item (PoCL: 7.3M elements 19.9 -> 1.7 ms; its scalar vstore_half_rte
        # rounds in software), the last work-item the few left
        full = y.size // 16
        size = full + (y.size % 16 > 0)
        store = (f"if (i < {full}) vstore_half16_rte(vload16(i, x), i, y);\n"
                 f"  else for (long j = {full * 16}L; j < {y.size}L; ++j) "
                 f"vstore_half_rte(x[j], j, y);")
    buffers = [("x", source, False), ("y", target, True)]
    return [_per_element("cast", size, buffers, store, [ref("in", 0), ref("out", 0)])]


_COMPARISONS = {"graph.equal": "==", "graph.less": "<", "graph.greater": ">",
                "graph.less_or_equal": "<=", "graph.greater_or_equal": ">="}
_LOGICAL = {"graph.and": "&&", "graph.or": "||", "graph.xor": "!="}


def _element_launch(call, name: str, value: str, ins) -> list:
    """One work-item per out element stores `value`, a C expression of the element's
    index `i` and of the ins `ins` (in k named `ink`)."""
    out = call.outs[0]
    size = out.size
    if size == 0:
        return []
    buffers = [(f"in{k}", call.ins[k].ctype, False) for k in ins] + [("y", out.ctype, True)]
    return [_per_element(name, size, buffers, f"y[i] = {value};",
                         [ref("in", k) for k in ins] + [ref("out", 0)])]


def _broadcast_launch(call, name: str, expression) -> list:
    """One work-item per out element: `expression(loads)` of each in read at its
    numpy-broadcast index (`loads`: the C expressions), stored in the out. Where the
    out's rows (its last axis) are ROW_MIN long or more, a 2-D launch, one work-item per
    element of a row, whose ins' indices divide by the out's axes once a row, not once an
    element (magika's one-hot Equal, 2048 x 257: 0.33 -> 0.16 ms on PoCL)."""
    out = call.outs[0]
    width = out.shape[-1] if out.shape else 1
    if width < ROW_MIN or out.size == 0 or out.size >= 2 ** 31 - 4096:
        loads = [f"in{k}[{broadcast_index(out.shape, a.shape, 'i')}]"
                 for k, a in enumerate(call.ins)]
        return _element_launch(call, name, expression(loads), range(len(call.ins)))
    rank, rows = len(out.shape), out.size // width
    loads = []
    for k, a in enumerate(call.ins):
        shape = (1,) * (rank - len(a.shape)) + tuple(a.shape)
        row = broadcast_index(out.shape[:-1], shape[:-1], "row")
        loads.append(f"in{k}[({row}) * {shape[-1]} + {'j' if shape[-1] > 1 else '0'}]")
    buffers = [(f"in{k}", a.ctype, False) for k, a in enumerate(call.ins)] + \
        [("y", out.ctype, True)]
    # work-groups of 256 work-items, 32 along a row (rounded up to a multiple of 32;
    # fewer where it is shorter) by 8 rows: on PoCL 2x faster than 8 x 32 or 256 x 1
    local0 = min(32, 1 << (width - 1).bit_length())
    local1 = max(d for d in range(1, min(rows, max(1, 256 // local0)) + 1) if rows % d == 0)
    guard = "" if width % local0 == 0 else f"  if (j >= {width}) return;\n"
    source = (f"__kernel void {name}({params(*buffers)}) {{\n"
              f"  const int j = get_global_id(0), row = get_global_id(1);\n{guard}"
              f"{bind(*buffers)}\n  y[row * {width} + j] = {expression(loads)};\n}}\n")
    return [Launch(source, name, (round_up(width, local0), rows), (local0, local1),
                   [ref("in", k) for k in range(len(call.ins))] + [ref("out", 0)])]


ROW_MIN = 8   # out rows at least this long take _broadcast_launch's 2-D form


@generator(*_COMPARISONS, *_LOGICAL)
def compare(call) -> list:
    """A `kernel.generic` comparison (bool out: 0 or 1) or logical and / or / xor of
    bools, its ins numpy-broadcast to the out (NaN compares unequal, as numpy's)."""
    name = call.op_name
    symbol = _COMPARISONS.get(name) or _LOGICAL[name]
    if name in _LOGICAL:
        return _broadcast_launch(call, "logical",
                                 lambda v: f"(uchar)(({v[0]} != 0) {symbol} ({v[1]} != 0))")
    return _broadcast_launch(call, "compare", lambda v: f"(uchar)({v[0]} {symbol} {v[1]})")


@generator("graph.where")
def where(call) -> list:
    """A `kernel.generic` graph.where: X where the bool condition is set, else Y, the
    three numpy-broadcast to the out."""
    if call.ins[0].dtype != np.bool_ or call.ins[1].dtype != call.ins[2].dtype:
        raise Unsupported("a bool condition and X, Y of one type")
    return _broadcast_launch(call, "where", lambda v: f"({v[0]} ? {v[1]} : {v[2]})")


@generator("graph.not", "graph.is_nan", "graph.is_inf")
def classify(call) -> list:
    """A `kernel.generic` logical not of bools, or IsNaN / IsInf (its detect_negative
    and detect_positive) of floats: a bool per element."""
    from palimpsest.dialects.graph.reference._common import i_attr

    name, x = call.op_name, call.ins[0]
    if name == "graph.not":
        return _broadcast_launch(call, "logical_not", lambda v: f"(uchar)({v[0]} == 0)")
    if x.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise Unsupported(f"{name} of {x.dtype} (float32 or float64)")
    if name == "graph.is_nan":
        return _broadcast_launch(call, "is_nan", lambda v: f"(uchar)(isnan({v[0]}) != 0)")
    signs = [sign for sign, attr in ((">", "detect_positive"), ("<", "detect_negative"))
             if i_attr(call.config, attr, 1)]

    def infinite(v) -> str:
        detected = " || ".join(f"{v[0]} {sign} 0" for sign in signs) or "0"
        return f"(uchar)(isinf({v[0]}) != 0 && ({detected}))"

    return _broadcast_launch(call, "is_inf", infinite)


@generator("graph.expand")
def expand(call) -> list:
    """A `kernel.generic` graph.expand: the data numpy-broadcast to the out's shape (the
    executor sizes the out; the shape operand is not read)."""
    data = KernelCallView(call, call.ins[:1])
    return _broadcast_launch(data, "expand", lambda v: v[0])


class KernelCallView:
    """A call seen with only some of its ins (graph.expand's data, not its shape)."""

    def __init__(self, call, ins):
        self.op_name, self.config, self.ins, self.outs = call.op_name, call.config, ins, \
            call.outs


@generator("graph.range")
def range_(call) -> list:
    """A `kernel.generic` graph.range into a planned out: start + i * delta, in double for
    floats (where the device has it) and in long for integers, as the reference computes
    it; the out's size is the plan's, so limit is not read."""
    t = call.outs[0].ctype
    if t in FLOATS:
        value = ("(" + t + ")((double)in0[0] + (double)i * (double)in2[0])")
        value = (f"\n#ifdef cl_khr_fp64\n  {value}\n#else\n  ({t})(in0[0] + ({t})i * in2[0])"
                 f"\n#endif\n  ")
    else:
        value = f"({t})((long)in0[0] + i * (long)in2[0])"
    return _element_launch(call, "range", value, (0, 2))


@generator("graph.constant_of_shape")
def constant_of_shape(call) -> list:
    """A `kernel.generic` graph.constant_of_shape into a planned out: its value stored
    in every element (the shape operand is not read)."""
    out = call.outs[0]
    value = call.config.get("value")
    value = np.asarray(0.0 if value is None else value).reshape(-1)
    if value.size != 1:
        raise Unsupported("a value of one element")
    t = out.ctype
    v = value[0]
    text = literal(float(v), t) if t in FLOATS else str(int(v))
    return _element_launch(call, "fill", f"({t})({text})", ())
