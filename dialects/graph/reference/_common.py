"""Shared helpers of the graph-dialect numpy reference: the kernel registry, attribute and
operand accessors, ONNX element-type tables."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from palimpsest.dialects.graph.naming import ONNX_TO_GRAPH
from palimpsest.dialects.graph.ops_base import ONNX_DTYPES as GRAPH_ONNX_DTYPES
from palimpsest.ir.attributes import numpy_dtype_name

Kernel = Callable[..., list]

# Read-only arrays that are a run's inputs rather than constants: the views a backend
# binds a caller's arrays as, handed again while the caller hands the same array, refilled
# or not (id -> weak reference). What is made once from a read-only operand (centred
# weights, packed copies) asks `is_constant` first.
_RUN_INPUTS: dict = {}


def mark_run_input(array) -> None:
    """`array` (read-only) is a run's input: its values may change from run to run."""
    import weakref

    key = id(array)
    _RUN_INPUTS[key] = weakref.ref(array, lambda _, key=key: _RUN_INPUTS.pop(key, None))


def is_run_input(array) -> bool:
    """Whether `array` was marked a run's input (`mark_run_input`)."""
    ref = _RUN_INPUTS.get(id(array))
    return ref is not None and ref() is array


def is_constant(array) -> bool:
    """Whether `array` holds the same values every run: read-only, and not a run's
    input (`mark_run_input`)."""
    return not array.flags.writeable and not is_run_input(array)

KERNELS: dict[str, Kernel] = {}


def kernel(onnx_op: str, *, multi: bool = False) -> Callable[[Callable], Callable]:
    """Register a kernel for ONNX op type `onnx_op` under its graph-dialect name.

    Every registered kernel has the signature `(inputs, attrs, num_results=None)`. Kernels of
    single-result ops are written as `f(inputs, attrs)` and wrapped here; `multi=True` marks a
    kernel that takes `num_results` itself (ops with optional or variadic results).
    """
    name = ONNX_TO_GRAPH[onnx_op]

    def register(fn: Callable) -> Callable:
        if multi:
            wrapped = fn
        else:

            def wrapped(inputs, attrs, num_results=None, _fn=fn):
                return _fn(inputs, attrs)

            wrapped.__name__ = fn.__name__
            wrapped.__doc__ = fn.__doc__
            wrapped.__qualname__ = fn.__qualname__
        wrapped.onnx_op = onnx_op
        wrapped.graph_op = name
        KERNELS[name] = wrapped
        return fn

    return register



def kernels(family: Callable, table: dict) -> None:
    """Register a family of kernels: `family(onnx_op, *spec)` for each `onnx_op: spec` of
    `table` (a spec that is not a tuple is the one argument), named after its op."""
    for onnx_op, spec in table.items():
        fn = family(onnx_op, *(spec if isinstance(spec, tuple) else (spec,)))
        fn.__name__ = onnx_op.lower()
        kernel(onnx_op)(fn)

def op_error(onnx_op: str, message: str) -> ValueError:
    return ValueError(f"{ONNX_TO_GRAPH.get(onnx_op, onnx_op)} ({onnx_op}): {message}")


def unsupported(onnx_op: str, attr: str, value: Any, supported: Sequence | None = None) -> ValueError:
    msg = f"unsupported value {value!r} for attribute '{attr}'"
    if supported:
        msg += f" (supported: {', '.join(repr(s) for s in supported)})"
    return op_error(onnx_op, msg)


def opt(inputs: Sequence, i: int) -> np.ndarray | None:
    """The i-th operand, or None when it is absent (omitted trailing input or None)."""
    if i < len(inputs):
        return inputs[i]
    return None


def req(onnx_op: str, inputs: Sequence, i: int, what: str) -> np.ndarray:
    x = opt(inputs, i)
    if x is None:
        raise op_error(onnx_op, f"missing required operand #{i} ({what})")
    return np.asarray(x)


def s_attr(attrs: dict, name: str, default: str) -> str:
    v = attrs.get(name, default)
    if isinstance(v, bytes):
        v = v.decode("utf-8")
    return v


def choice_attr(onnx_op: str, attrs: dict, name: str, default: str, choices) -> str:
    """A string attribute that must be one of `choices` (else: unsupported)."""
    v = s_attr(attrs, name, default)
    if v not in choices:
        raise unsupported(onnx_op, name, v, tuple(choices))
    return v


def i_attr(attrs: dict, name: str, default: int) -> int:
    v = attrs.get(name, default)
    return int(v)


def f_attr(attrs: dict, name: str, default: float) -> float:
    return float(attrs.get(name, default))


def ints_attr(attrs: dict, name: str, default: Sequence[int] | None = None) -> list[int] | None:
    v = attrs.get(name)
    if v is None:
        return None if default is None else list(default)
    return [int(e) for e in np.asarray(v).reshape(-1)]


def ints_of(x: np.ndarray | Sequence[int] | None) -> list[int] | None:
    """A 1-D integer tensor operand (shape, axes, pads ...) as a Python list."""
    if x is None:
        return None
    return [int(e) for e in np.asarray(x).reshape(-1)]


def axes_of(inputs: Sequence, i: int, attrs: dict) -> list[int] | None:
    """The `axes` operand at position `i` (opset 13/18 form), else the `axes` attribute of
    older opsets; None when there is neither."""
    axes = ints_of(opt(inputs, i))
    return ints_attr(attrs, "axes") if axes is None else axes


def same_dtype(onnx_op: str, a: np.ndarray, b: np.ndarray) -> None:
    """Two operands that must share their element type."""
    if a.dtype != b.dtype:
        raise op_error(onnx_op, f"operand element types differ ({a.dtype} vs {b.dtype})")


def norm_axis(onnx_op: str, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise op_error(onnx_op, f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def float_compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype to accumulate in: float16 computes in float32, other floats as themselves."""
    dtype = np.dtype(dtype)
    if dtype == np.float16 or dtype in SMALL_FLOATS:
        return np.dtype(np.float32)
    if dtype.kind == "f":
        return dtype
    return np.dtype(np.float64)


# ONNX TensorProto.DataType enum values -> numpy dtypes the reference supports: the
# element types the graph dialect maps the codes to (ops_base.ONNX_DTYPES), as numpy knows them.
ONNX_DTYPES: dict[int, np.dtype] = {code: np.dtype(numpy_dtype_name(element))
                                    for code, element in GRAPH_ONNX_DTYPES.items()}
SMALL_FLOATS = frozenset(ONNX_DTYPES[code] for code in (16, 17, 18, 19, 20, 23, 24))

ONNX_DTYPE_NAMES: dict[int, str] = {
    0: "UNDEFINED", 1: "FLOAT", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32",
    7: "INT64", 8: "STRING", 9: "BOOL", 10: "FLOAT16", 11: "DOUBLE", 12: "UINT32", 13: "UINT64",
    14: "COMPLEX64", 15: "COMPLEX128", 16: "BFLOAT16", 17: "FLOAT8E4M3FN", 18: "FLOAT8E4M3FNUZ",
    19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ", 21: "UINT4", 22: "INT4", 23: "FLOAT4E2M1",
    24: "FLOAT8E8M0", 25: "UINT2", 26: "INT2",
}


def onnx_dtype(onnx_op: str, to: int, attr: str = "to") -> np.dtype:
    try:
        return ONNX_DTYPES[int(to)]
    except KeyError:
        name = ONNX_DTYPE_NAMES.get(int(to), "unknown")
        raise op_error(
            onnx_op, f"unsupported element type {int(to)} ({name}) for attribute '{attr}'"
        ) from None
