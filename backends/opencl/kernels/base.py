"""What a kernel generator sees and returns.

A generator turns one kernel op, at concrete shapes, into OpenCL launches:

    @generator("kernel.softmax")
    def softmax(call: KernelCall) -> list[Launch]: ...

`call.ins` / `call.outs` are `Arg`s (shape, dtype, C type), `call.workspaces` maps the
op's workspace roles to `Arg`s, `call.config` holds the op's properties as Python values
(`KernelOp.config()`), `call.device` the limits of the device. Shapes are concrete, so a
generator bakes them into the source as constants: a program is compiled once per shape
signature and cached by its text (runtime.py), never per run.

Buffers are passed as (pool, element offset) pairs: in the source, `params(...)`
declares `__global T* NAME_base, const long NAME_off` for each buffer and `bind(...)`
opens the kernel with `__global T* NAME = NAME_base + NAME_off;`. A `Launch` lists its
arguments in the order of the kernel's parameters: `ref("in", 0)`, `ref("out", 0)`,
`ref("ws", "im2col")` for a buffer (two kernel arguments), numpy scalars
(`np.int32(...)`, `np.float32(...)`) for the rest. `ref("derived", (name, index))` is the
in at `index` re-laid out by `DERIVED[name]` (a `@derived(name)` function of its host
array: 8-bit weights in the dot product instruction's order), which the executor makes
once per constant and keeps on the device.

A generator raises `Unsupported(reason)` for what it does not compute on the device (an
element type, a mode): the executor then runs the op on the host, counted in the run's
stats, so a run that should stay on the device can be checked to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

GENERATORS: dict = {}

# numpy dtype -> OpenCL C type (bool: numpy's one byte, 0 or 1)
C_TYPES = {np.dtype(np.bool_): "uchar", np.dtype(np.float32): "float", np.dtype(np.float64): "double",
           np.dtype(np.int32): "int", np.dtype(np.int64): "long",
           np.dtype(np.int8): "char", np.dtype(np.uint8): "uchar",
           np.dtype(np.int16): "short", np.dtype(np.uint16): "ushort",
           np.dtype(np.uint32): "uint", np.dtype(np.uint64): "ulong"}


class Unsupported(Exception):
    """The generator does not compute this op on the device; the reason says why."""


@dataclass(frozen=True)
class Arg:
    """A buffer operand of the op: its concrete shape and element dtype."""

    shape: tuple
    dtype: np.dtype

    @property
    def ctype(self) -> str:
        ctype = C_TYPES.get(self.dtype)
        if ctype is None:
            raise Unsupported(f"no OpenCL type for {self.dtype}")
        return ctype

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1


@dataclass(frozen=True)
class DeviceLimits:
    max_work_group_size: int = 256
    local_mem_size: int = 32768
    compute_units: int = 1
    # work-items a group may have along each dimension (NVIDIA: 1024, 1024, 64)
    max_work_item_sizes: tuple = (256, 256, 64)
    # the device is the host's own CPU (PoCL's): its cores are numpy's too
    host_cpu: bool = False
    # a core's L2 cache in bytes where the device is the host's CPU (sysfs), else 0
    l2_bytes: int = 0
    # generated code may use the CPU's 8-bit dot product (`VNNI`: a truth
    # value, probed at its first use)
    vnni: bool = False


@dataclass
class KernelCall:
    op_name: str
    config: dict
    ins: list
    outs: list
    workspaces: dict = field(default_factory=dict)   # role -> Arg
    device: DeviceLimits = field(default_factory=DeviceLimits)


@dataclass(frozen=True)
class Ref:
    """A buffer argument: group "in" / "out" (index), "ws" (role) or "derived" ((name,
    index): DERIVED[name] of in `index`)."""

    group: str
    key: object


def ref(group: str, key) -> Ref:
    if group not in ("in", "out", "ws", "derived"):
        raise ValueError(f"unknown buffer group '{group}'")
    return Ref(group, key)


# name -> fn(host array) -> host array: an in re-laid out for a kernel (8-bit weights
# in the dot product instruction's order), made once per constant by the executor
# (`derived`) and kept with it on the device; of an in that is not a constant, made at
# each launch
DERIVED: dict = {}


def derived(name: str):
    """Register a DERIVED transform under `name` (a decorator)."""
    def register(fn):
        DERIVED[name] = fn
        return fn
    return register


# The CPU's 8-bit dot product in generated code: PoCL compiles a CPU device's kernels for
# the nearest CPU its kernel library was built for (a Sapphire Rapids runs as
# skylake-avx512, without AVX-512 VNNI), but a function marked target("avx512vnni") may
# call vpdpbusd's builtin (sixteen sums of four u8 x s8 products an instruction): this
# preamble's types and macros. Where the host's CPU has the instruction and the device is
# that CPU, `DeviceLimits.vnni` builds a kernel of it at its first use (an 8-bit op's
# generator asking: runtime.py `_vnni_works`) and is true where the sums are right.
VNNI = """typedef int pal_v16si __attribute__((__vector_size__(64)));
typedef int pal_v16si_u __attribute__((__vector_size__(64), __aligned__(4)));   // (loads)
#define PAL_VNNI __attribute__((target("avx512vnni")))
#define PAL_SPLAT(w) ((pal_v16si){w, w, w, w, w, w, w, w, w, w, w, w, w, w, w, w})
"""


@dataclass
class Launch:
    source: str            # a whole program (one or more kernels)
    kernel: str            # the kernel function to launch
    global_size: tuple
    local_size: tuple | None
    args: list             # Ref or numpy scalar, in parameter order
    # built with -cl-denorms-are-zero: subnormal floats read and made as zero (a product's
    # terms below 1.2e-38 change no sum measurably, and each one costs a CPU a microcode
    # assist of ~100 cycles: see linalg.py)
    flush_denormals: bool = False


def generator(*names):
    def register(fn):
        for name in names:
            GENERATORS[name] = fn
        return fn
    return register


# -- source helpers ------------------------------------------------------------------------------

def _pointer(ctype: str, writable: bool) -> str:
    return f"__global {'' if writable else 'const '}{ctype}*"


def params(*buffers) -> str:
    """Kernel parameters for buffers given as (name, ctype, writable)."""
    return ", ".join(f"{_pointer(ctype, writable)} {name}_base, const long {name}_off"
                     for name, ctype, writable in buffers)


def bind(*buffers) -> str:
    """The kernel's first lines: each buffer's pointer at its offset."""
    return "\n".join(f"  {_pointer(ctype, writable)} {name} = {name}_base + {name}_off;"
                     for name, ctype, writable in buffers)


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def strides_of(shape) -> tuple:
    """Row-major element strides."""
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))


def broadcast_index(out_shape, in_shape, flat: str = "i") -> str:
    """A C expression for the element of an input of `in_shape` (numpy-broadcast to
    `out_shape`) that row-major element `flat` of the output reads."""
    rank = len(out_shape)
    in_shape = (1,) * (rank - len(in_shape)) + tuple(in_shape)
    if tuple(in_shape) == tuple(out_shape):
        return flat
    if all(d == 1 for d in in_shape):
        return "0"
    out_strides = strides_of(out_shape)
    in_strides = strides_of(in_shape)
    terms = []
    for axis in range(rank):
        if in_shape[axis] == 1 or out_shape[axis] == 1:
            continue
        coord = f"({flat} / {out_strides[axis]})" if out_strides[axis] != 1 else flat
        if axis > 0:
            coord = f"({coord} % {out_shape[axis]})"
        terms.append(coord if in_strides[axis] == 1 else f"{coord} * {in_strides[axis]}")
    return " + ".join(terms) if terms else "0"


def literal(value, ctype: str) -> str:
    """A C literal of `value` in `ctype` (infinities and NaN spelled for OpenCL C)."""
    if ctype in ("float", "double"):
        value = float(value)
        suffix = "f" if ctype == "float" else ""
        if value != value:
            return "NAN" if ctype == "float" else "((double)NAN)"
        if value in (float("inf"), float("-inf")):
            sign = "-" if value < 0 else ""
            return f"({sign}INFINITY)" if ctype == "float" else f"({sign}(double)INFINITY)"
        return f"{value!r}{suffix}"
    value = int(value)
    if ctype == "long":
        return f"{value}L"
    return str(value)


__all__ = ["Arg", "C_TYPES", "DeviceLimits", "GENERATORS", "KernelCall", "Launch", "Ref",
           "Unsupported", "bind", "broadcast_index", "generator", "literal", "params", "ref",
           "round_up", "strides_of"]
