"""`buffer.compute` on numpy: write a graph op's results into its out buffers.

Where numpy can, the result is computed straight into the out view (`out=`), with no
full-size temporary:

| graph op | how |
|---|---|
| add, sub, mul (numeric), div (floats); and, or, xor (bool) | one ufunc with `out=` |
| max, min (variadic) | a chain of `np.maximum` / `np.minimum` with `out=` |
| equal, less, greater, less_or_equal, greater_or_equal | one comparison ufunc with `out=` (bool out) |
| relu, neg, abs (numeric); exp, log, sqrt, tanh (floats); not (bool) | one ufunc with `out=` |
| clip | `np.maximum` then `np.minimum`, both `out=` |
| cast | `np.copyto(..., casting="unsafe")` (to bool: `np.not_equal(x, 0, out=)`) |
| where | `np.copyto` of one branch, then `np.copyto(..., where=cond)` of the other (an in-place `x` branch needs a bool temporary of `not cond`) |
| matmul | `np.matmul(..., out=)` |
| gemm (f32/f64) | `np.matmul(..., out=)`, then `*= alpha`, `+= beta * C` (C-sized temporary when beta != 1) |
| batch_norm (inference, f32/f64) | four ufuncs with `out=`; per-channel temporaries only |
| softmax (f32/f64) | max and sum along the axis (reduced-size temporaries), subtract/exp/divide with `out=` |
| layer_norm (one result, f32/f64) | subtract/multiply/add with `out=`; **one full-size temporary** (`d * d` for the variance) |
| global_average_pool (f32/f64) | `np.mean(..., out=)` |
| transpose | `np.copyto(out, x.transpose(perm))` (a strided view, no temporary) |
| concat | `np.concatenate(..., out=)` |
| gather | `np.take(..., out=, mode="wrap")` after the reference's range check |
| expand | `np.copyto(out, np.broadcast_to(x, shape))` |
| matmul_integer, conv_integer, dynamic_quantize_linear, dynamic_quantize_lstm | kernels_quant.py: exact integer products through BLAS on centred floats, float32 where exact |
| scatter_nd | `np.copyto(out, data)`, then one fancy-indexed assignment (reduction none) or one `ufunc.at` (add, mul, max, min); indices out of range: the reference kernel, which reports them |

Every other op runs its reference kernel (`dialects/graph/reference`) and the result is
copied into the out view with `np.copyto`. That copy is counted in `RunStats`: as
`temporary_bytes` when the kernel made a fresh array (conv, conv_transpose, max_pool,
average_pool, global_max_pool, sigmoid, hard_sigmoid, hard_swish, leaky_relu, erf, pow,
pad, resize, slice, split, reduce_*, range, shape, constant_of_shape, layer_norm with
Mean/InvStdDev results, batch_norm in training mode, the dropout mask, and the ops above
when their dtype or a memory overlap rules the fast path out), as `view_copy_bytes` when
it returned a view of an operand (reshape, flatten, squeeze, unsqueeze, identity and
dropout data when they are not aliases): a copy, but no temporary.
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import numpy as np

from palimpsest.backends import onednn_primitives
from palimpsest.backends.numpy.blas import matmul
from palimpsest.dialects.graph.evaluate import attribute_value
from palimpsest.ir.opdef import OPTIONAL, lookup_op, segment_sizes

FAST: dict = {}


def fast(*names, family: bool = False):
    """Registers the fast path of ops `names`: `fn(attrs, out, *inputs)` writes the op's
    one result into `out` and returns True, or returns False having written nothing (the
    reference kernel then runs). Its parameters say how many inputs it takes: a call with
    another number, or with several outs, is not its case. `family=True`: `fn(name)`
    makes such a function for each op of a table. (numpy's error state is set by the
    executor, once per run.)"""
    def register(fn):
        for name in names:
            FAST[name] = _one_out(fn(name) if family else fn)
        return fn
    return register


def _one_out(run):
    """`run(attrs, out, *inputs)` as FAST calls it: (inputs, attrs, outs) -> bool."""
    params = list(inspect.signature(run).parameters.values())[2:]
    least = sum(p.kind == p.POSITIONAL_OR_KEYWORD and p.default is p.empty for p in params)
    most = None if any(p.kind == p.VAR_POSITIONAL for p in params) else len(params)

    def call(inputs, attrs, outs):
        count = len(inputs)
        return len(outs) == 1 and least <= count and (most is None or count <= most) \
            and run(attrs, outs[0], *inputs)
    call.run = run   # (a replay of a call that fitted: executor.generic_replay)
    call.calls = getattr(run, "calls", None)
    return call


# -- the op's description, once per op ---------------------------------------------------------

class ComputeInfo:
    """What running one `buffer.compute` needs: the graph op, its ONNX attributes, and
    how its `ins` map to the kernel's operand slots."""

    __slots__ = ("name", "graph_class", "properties", "attrs", "slots", "num_outs")

    def __init__(self, op):
        self.name = op.properties["op"].value
        self.graph_class = lookup_op(self.name)
        properties = op.graph_properties()
        # the pretty form parses undeclared properties back as attributes: take them too
        for key, value in op.attributes.items():
            if "." not in key and key not in properties:
                properties[key] = value
        self.properties = properties
        try:
            self.attrs = {k: attribute_value(v) for k, v in properties.items()
                          if k != "operandSegmentSizes"}
        except OSError as error:
            raise op.error(f"cannot read its data: {error.strerror or error}: "
                           f"'{error.filename}'") from None
        except ValueError as error:
            raise op.error(f"cannot read its data: {error}") from None
        self.num_outs = len(op.outs)
        ins = op.ins
        self.slots = None
        if self.graph_class is not None:
            sizes = segment_sizes(SimpleNamespace(properties=properties), ins,
                                  self.graph_class.operand_defs, "operandSegmentSizes")
            if isinstance(sizes, str):
                raise op.error(f"ins do not fit '{self.name}': {sizes}")
            slots, position = [], 0
            for definition, size in zip(self.graph_class.operand_defs, sizes):
                if definition.kind == OPTIONAL and size == 0:
                    slots.append(None)  # an absent optional operand: None for the kernel
                else:
                    slots.extend(range(position, position + size))
                position += size
            while slots and slots[-1] is None:
                slots.pop()
            self.slots = slots

    def kernel_inputs(self, arrays: list) -> list:
        return [None if s is None else arrays[s] for s in self.slots]


# -- shapes of outs that are sized at run time --------------------------------------------------

def infer_out_shapes(info: ComputeInfo, inputs: list, ins_types: list) -> list | None:
    """Static result shapes from the op's shape rule on the actual operand shapes (and
    the values of small integer operands); None when the rule cannot tell."""
    from palimpsest.ir.types import TensorType

    cls = info.graph_class
    if cls is None or not hasattr(cls, "infer_result_types"):
        return None
    types, values = [], []
    for array, type_ in zip(inputs, ins_types):
        types.append(TensorType(tuple(array.shape), type_.element_type))
        if array.dtype.kind in "iu" and array.size <= 256:
            values.append([int(v) for v in array.reshape(-1)])
        else:
            values.append(None)
    inferred = cls.infer_result_types(types, info.properties, values, info.num_outs)
    if inferred is None or any(t is None or t.shape is None or None in t.shape
                               for t in inferred):
        return None
    return [tuple(t.shape) for t in inferred]


# -- the fast paths -----------------------------------------------------------------------------
# FAST[op](inputs, attrs, outs), with every out materialized, returns True when it wrote
# the results, False (having written nothing) when the reference kernel must run.

def _same_dtype(out, *xs) -> bool:
    return all(x is not None and x.dtype == out.dtype for x in xs)


def _fits(out, *xs) -> bool:
    shape = out.shape
    if all(x.shape == shape for x in xs):
        return True
    key = (shape, *(x.shape for x in xs))
    fits = _BROADCASTS.get(key)
    if fits is None:   # (np.broadcast_shapes: ~3 us a call, so once per set of shapes)
        try:
            fits = np.broadcast_shapes(*key[1:]) == shape
        except ValueError:
            fits = False
        if len(_BROADCASTS) < 4096:
            _BROADCASTS[key] = fits
    return fits


_BROADCASTS: dict = {}   # (out shape, operand shapes...) -> whether they broadcast to it


def _overlaps(out, *xs) -> bool:
    return any(x is not None and np.may_share_memory(out, x) for x in xs)


# op -> (ufunc, the dtype kinds it runs on)
_BINARY = {"graph.add": (np.add, "iuf"), "graph.sub": (np.subtract, "iuf"),
           "graph.mul": (np.multiply, "iuf"), "graph.div": (np.true_divide, "f"),
           "graph.and": (np.logical_and, "b"), "graph.or": (np.logical_or, "b"),
           "graph.xor": (np.logical_xor, "b")}


def _planned(plan):
    """A fast path from `plan(attrs, out, *inputs)`, which gives its numpy calls
    ([(fn, args, kwargs)], on these very arrays) or None where it declines: the calls
    made now; `plan` kept as the function's `calls` (executor.generic_replay records
    them, so a captured program replays the calls with no checks between)."""
    def run(attrs, out, *inputs):
        calls = plan(attrs, out, *inputs)
        if calls is None:
            return False
        for fn, args, kwargs in calls:
            fn(*args, **kwargs)
        return True
    run.__signature__ = inspect.signature(plan)   # (its arity, for _one_out)
    run.calls = plan
    return run


@fast(*_BINARY, family=True)
def _binary(name):
    ufunc, kinds = _BINARY[name]

    def plan(attrs, out, a, b):
        if not _same_dtype(out, a, b) or out.dtype.kind not in kinds or not _fits(out, a, b):
            return None
        return [(ufunc, (a, b), {"out": out})]
    return _planned(plan)


_VARIADIC = {"graph.max": np.maximum, "graph.min": np.minimum}


@fast(*_VARIADIC, family=True)
def _variadic(name):
    ufunc = _VARIADIC[name]

    def run(attrs, out, *inputs):
        xs = [x for x in inputs if x is not None]
        if not xs or not _same_dtype(out, *xs) or out.dtype.kind not in "iuf" \
                or not _fits(out, *xs) or _overlaps(out, *xs[2:]):
            return False
        if len(xs) == 1:
            np.copyto(out, xs[0])
            return True
        ufunc(xs[0], xs[1], out=out)
        for x in xs[2:]:
            ufunc(out, x, out=out)
        return True
    return run


_COMPARE = {"graph.equal": np.equal, "graph.less": np.less, "graph.greater": np.greater,
            "graph.less_or_equal": np.less_equal, "graph.greater_or_equal": np.greater_equal}


@fast(*_COMPARE, family=True)
def _compare(name):
    ufunc = _COMPARE[name]

    def plan(attrs, out, a, b):
        if a.dtype != b.dtype or out.dtype != np.bool_ or not _fits(out, a, b):
            return None
        return [(ufunc, (a, b), {"out": out})]
    return _planned(plan)


def _relu(x, out):
    np.maximum(x, np.asarray(0, dtype=x.dtype), out=out)


# op -> (ufunc, the dtype kinds it runs on)
_UNARY = {"graph.neg": (np.negative, "iuf"), "graph.abs": (np.abs, "iuf"),
          "graph.relu": (_relu, "iuf"), "graph.exp": (np.exp, "f"), "graph.log": (np.log, "f"),
          "graph.sqrt": (np.sqrt, "f"), "graph.tanh": (np.tanh, "f"),
          "graph.not": (np.logical_not, "b")}


def _same_shape_and_kind(out, x, kinds: str) -> bool:
    """An elementwise op on one array can write `out` directly."""
    return _same_dtype(out, x) and out.dtype.kind in kinds and x.shape == out.shape


@fast(*_UNARY, family=True)
def _unary(name):
    ufunc, kinds = _UNARY[name]

    def plan(attrs, out, x):
        if not _same_shape_and_kind(out, x, kinds):
            return None
        return [(ufunc, (x,), {"out": out})]
    return _planned(plan)


@fast("graph.clip")
def _clip(attrs, out, x, lo=None, hi=None):
    if not _same_shape_and_kind(out, x, "iuf"):
        return False
    lo = attrs.get("min") if lo is None else lo
    hi = attrs.get("max") if hi is None else hi
    bounds = [(np.maximum, b) for b in [lo] if b is not None and np.size(b)] + \
             [(np.minimum, b) for b in [hi] if b is not None and np.size(b)]
    source = x
    for ufunc, bound in bounds:
        ufunc(source, np.asarray(bound, dtype=x.dtype).reshape(()), out=out)
        source = out
    if not bounds:
        np.copyto(out, x)
    return True


@fast("graph.cast")
def _cast(attrs, out, x):
    if x.dtype.isbuiltin != 1 or out.dtype.isbuiltin != 1 or x.shape != out.shape:
        return False   # ml_dtypes' small types: saturation and rounding, the reference's
    if out.dtype == np.bool_:
        np.not_equal(x, 0, out=out)
    elif not _converted(x, out):
        np.copyto(out, x, casting="unsafe")
    return True


# float16 <-> float32 casts of this many elements or more on oneDNN (numpy converts
# float32 to float16 element by element: 4M elements 11.5 ms, oneDNN 1.0)
_CONVERT_FROM = 4096


def _converted(x, out) -> bool:
    """out = x converted on oneDNN where it takes the pair of types; False (nothing
    written) for the others, small ones and ones not contiguous or overlapping."""
    if x.size < _CONVERT_FROM or x.dtype == out.dtype or not x.flags.c_contiguous \
            or not out.flags.c_contiguous or _overlaps(out, x):
        return False
    conversion = onednn_primitives.convert(x.dtype.name, out.dtype.name, x.size)
    if conversion is None:
        return False
    conversion(x, out)
    return True


@fast("graph.where")
def _where(attrs, out, cond, x, y):
    if cond.dtype != np.bool_ or not _same_dtype(out, x, y) or not _fits(out, cond, x, y):
        return False
    if _same_view(out, y):
        if _overlaps(out, cond) or (_overlaps(out, x) and not _same_view(out, x)):
            return False
        np.copyto(out, x, where=cond)
    elif _same_view(out, x):
        if _overlaps(out, cond, y):
            return False
        np.copyto(out, y, where=np.logical_not(cond))
    else:
        if _overlaps(out, cond, x, y):
            return False
        np.copyto(out, y)
        np.copyto(out, x, where=cond)
    return True


def _same_view(a, b) -> bool:
    # (the data pointers, ~1 us each to read, only of arrays that may overlap)
    return (a.shape == b.shape and a.strides == b.strides and a.dtype == b.dtype
            and np.may_share_memory(a, b)
            and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


@fast("graph.matmul")
def _matmul(attrs, out, a, b):
    if not _same_dtype(out, a, b) or out.dtype.kind not in "iuf" or _overlaps(out, a, b) \
            or a.ndim < 2 or b.ndim < 2:
        return False
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        return False
    if a.shape[-1] != b.shape[-2] or batch + (a.shape[-2], b.shape[-1]) != out.shape:
        return False
    matmul(a, b, out)
    return True


@fast("graph.gemm")
def _gemm(attrs, out, a, b, c=None):
    if out.dtype not in (np.float32, np.float64) or not _same_dtype(out, a, b) \
            or a.ndim != 2 or b.ndim != 2 or _overlaps(out, a, b, c):
        return False
    if int(attrs.get("transA", 0)):
        a = a.T
    if int(attrs.get("transB", 0)):
        b = b.T
    if a.shape[1] != b.shape[0] or (a.shape[0], b.shape[1]) != out.shape:
        return False
    if c is not None and (c.dtype != out.dtype or not _fits(out, out, c)):
        return False
    alpha = float(attrs.get("alpha", 1.0))
    beta = float(attrs.get("beta", 1.0))
    matmul(a, b, out)
    if alpha != 1.0:
        np.multiply(out, np.asarray(alpha, dtype=out.dtype), out=out)
    if c is not None:
        if beta == 1.0:
            np.add(out, c, out=out)
        else:
            np.add(out, c * np.asarray(beta, dtype=out.dtype), out=out)
    return True


@fast("graph.batch_norm")
def _batch_norm(attrs, out, x, scale, bias, mean, var):
    if int(attrs.get("training_mode", 0)) or out.dtype not in (np.float32, np.float64) \
            or not _same_dtype(out, x) or x.shape != out.shape or x.ndim < 2 \
            or _overlaps(out, scale, bias, mean, var):
        return False
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)

    def bc(t):
        return np.asarray(t).astype(out.dtype, copy=False).reshape(shape)

    eps = np.asarray(float(attrs.get("epsilon", 1e-5)), out.dtype)
    np.subtract(x, bc(mean), out=out)
    np.divide(out, np.sqrt(bc(var) + eps), out=out)
    np.multiply(out, bc(scale), out=out)
    np.add(out, bc(bias), out=out)
    return True


def _axis(attrs, ndim, default=-1):
    axis = int(attrs.get("axis", default))
    if not -ndim <= axis < max(ndim, 1):
        return None
    return axis + ndim if axis < 0 else axis


@fast("graph.softmax")
def _softmax(attrs, out, x):
    if out.dtype not in (np.float32, np.float64) or not _same_dtype(out, x) \
            or x.shape != out.shape or x.ndim == 0:
        return False
    axis = _axis(attrs, x.ndim)
    if axis is None or (attrs.get("coerce_2d") and axis != x.ndim - 1):
        return False   # softmax over flattened dims: the reference kernel
    np.subtract(x, x.max(axis=axis, keepdims=True), out=out)
    np.exp(out, out=out)
    np.divide(out, out.sum(axis=axis, keepdims=True), out=out)
    return True


@fast("graph.layer_norm")
def _layer_norm(attrs, out, x, scale, bias=None):
    if out.dtype not in (np.float32, np.float64) or not _same_dtype(out, x, scale) \
            or x.shape != out.shape or x.ndim == 0 or int(attrs.get("stash_type", 1)) != \
            {np.dtype(np.float32): 1, np.dtype(np.float64): 11}[out.dtype] \
            or (bias is not None and bias.dtype != out.dtype) or _overlaps(out, scale, bias):
        return False
    axis = _axis(attrs, x.ndim)
    if axis is None:
        return False
    axes = tuple(range(axis, x.ndim))
    eps = np.asarray(float(attrs.get("epsilon", 1e-5)), out.dtype)
    mean = x.mean(axis=axes, keepdims=True)
    np.subtract(x, mean, out=out)
    var = (out * out).mean(axis=axes, keepdims=True)  # the one full-size temporary
    np.multiply(out, 1 / np.sqrt(var + eps), out=out)
    np.multiply(out, scale, out=out)
    if bias is not None:
        np.add(out, bias, out=out)
    return True


@fast("graph.global_average_pool")
def _global_average_pool(attrs, out, x):
    if out.dtype not in (np.float32, np.float64) or not _same_dtype(out, x) or x.ndim < 2 \
            or out.shape != x.shape[:2] + (1,) * (x.ndim - 2):
        return False
    np.mean(x, axis=tuple(range(2, x.ndim)), keepdims=True, dtype=out.dtype, out=out)
    return True


@fast("graph.transpose")
def _transpose(attrs, out, x):
    perm = attrs.get("perm")
    perm = list(range(x.ndim))[::-1] if perm is None else [int(p) for p in perm]
    if sorted(perm) != list(range(x.ndim)) or not _same_dtype(out, x) \
            or tuple(x.shape[p] for p in perm) != out.shape or _overlaps(out, x):
        return False
    np.copyto(out, x.transpose(perm))
    return True


@fast("graph.concat")
def _concat(attrs, out, *inputs):
    xs = [x for x in inputs if x is not None]
    if not xs or "axis" not in attrs or not _same_dtype(out, *xs) or _overlaps(out, *xs):
        return False
    axis = _axis(attrs, xs[0].ndim, 0)
    if axis is None or any(x.ndim != out.ndim for x in xs) or out.ndim == 0:
        return False
    expected = list(xs[0].shape)
    expected[axis] = sum(x.shape[axis] for x in xs)
    if tuple(expected) != out.shape:
        return False
    np.concatenate(xs, axis=axis, out=out)
    return True


@fast("graph.gather")
def _gather(attrs, out, x, idx):
    if idx.dtype.kind not in "iu" or not _same_dtype(out, x) or x.ndim == 0 \
            or _overlaps(out, x, idx):
        return False
    axis = _axis(attrs, x.ndim, 0)
    if axis is None or x.shape[:axis] + idx.shape + x.shape[axis + 1:] != out.shape:
        return False
    dim = x.shape[axis]
    if idx.size and (dim == 0 or idx.min() < -dim or idx.max() >= dim):
        return False  # the reference kernel reports it
    np.take(x, idx.astype(np.intp, copy=False), axis=axis, out=out, mode="wrap")
    return True


@fast("graph.expand")
def _expand(attrs, out, x, shape):
    if not _same_dtype(out, x) or _overlaps(out, x):
        return False
    shape = tuple(int(d) for d in np.asarray(shape).reshape(-1))
    try:
        if np.broadcast_shapes(x.shape, shape) != out.shape:
            return False
    except ValueError:
        return False
    np.copyto(out, np.broadcast_to(x, out.shape))
    return True


_SCATTER_REDUCE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


@fast("graph.scatter_nd")
def _scatter_nd(attrs, out, data, indices, updates):
    """ScatterND as one fancy-indexed assignment (reduction none: duplicate indices keep
    the last update, as the reference's loop does) or one `ufunc.at` (add, mul, max,
    min), into the out after copying `data` in; indices checked against the data's
    shape before anything is scattered (by numpy's own check for the assignment), the
    reference kernel reporting what does not fit."""
    reduction = attrs.get("reduction", "none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction != "none" and reduction not in _SCATTER_REDUCE:
        return False
    if not _same_dtype(out, data, updates) or indices.dtype.kind not in "iu" \
            or data.shape != out.shape or indices.ndim < 1 or _overlaps(out, indices, updates):
        return False
    depth = indices.shape[-1]
    if not 1 <= depth <= data.ndim:
        return False
    flat = indices.reshape(-1, depth).astype(np.intp, copy=False)
    if updates.shape != indices.shape[:-1] + data.shape[depth:]:
        return False
    if reduction != "none":   # (the assignment below checks its indices itself)
        limits = np.asarray(data.shape[:depth], np.intp)
        if flat.size and (np.any(flat < -limits) or np.any(flat >= limits)):
            return False
    rows = updates.reshape((flat.shape[0],) + data.shape[depth:])
    if not _same_view(out, data):
        if _overlaps(out, data):
            return False
        np.copyto(out, data)
    at = tuple(flat.T)
    if reduction == "none":
        try:   # numpy checks every index (ONNX's range, [-dim, dim)) before it writes
            out[at] = rows
        except IndexError:
            return False
    else:
        _SCATTER_REDUCE[reduction].at(out, at, rows)
    return True


# the quantized ops' fast paths (matmul_integer, conv_integer, dynamic_quantize_linear,
# dynamic_quantize_lstm) register themselves
from palimpsest.backends.numpy import kernels_quant  # noqa: E402,F401
from palimpsest.backends.numpy import kernels_quant_conv  # noqa: E402,F401
from palimpsest.backends.numpy import kernels_quant_lstm  # noqa: E402,F401


__all__ = ["ComputeInfo", "FAST", "infer_out_shapes"]
