"""Execute planned kernel-level IR on an OpenCL device.

Memory. Each `memory.arena @pool` is one `cl.Buffer` of the pool's size, allocated the
first time an executor runs it and kept for its later runs; a `buffer.view` of it is a
`DeviceArray`, a (cl.Buffer, byte offset) pair with a shape and dtype, and kernels get it
as a buffer and an element offset (kernels/base.py). Sessions plan with the pools
aligned to the device's MEM_BASE_ADDR_ALIGN (`OpenCLTarget.adapt_pipeline`). A
`buffer.alloc` (a buffer whose size the plan could not know) is a `cl.Buffer` of its own,
made when the alloc runs, or when the kernel that writes it knows its shape, and released
at its `buffer.dealloc`; `buffer.reshape` and `buffer.view` never copy; `buffer.copy` is
a device-to-device copy; a `buffer.constant` is uploaded once per executor.

Kernels. A kernel op is generated (kernels/) at its concrete operand shapes, once per
op and shape signature, and its programs are built once per source text (runtime.py):
a run enqueues kernels on one in-order queue and waits only to read the results back.
A `kernel.generic` that only changes its data's shape (reshape, flatten, squeeze,
unsqueeze, identity with a run-time shape operand) is a device-to-device copy. What no
generator computes on the device (other `kernel.generic` and `buffer.compute` ops, an
element type a generator declines) runs on the host with the numpy backend's implementation:
its operands are read back, its outs written to the device, and the run's stats count
the op (`host_ops`) and the bytes moved (`transfer_bytes`).

Inputs are copied to the device and results read back, one copy each (`io_bytes`); a
result is read straight into the caller's array given as `outputs=`, when its dtype,
shape and contiguity fit. With `poison=True`, pools and allocations are filled with 0x5A
bytes when they are made (a read before the first write shows up); unlike the numpy
backend, buffers are not poisoned when their lifetime ends.
"""

from __future__ import annotations

import numpy as np

from palimpsest.backends.binding import bind_inputs, output_names
from palimpsest.backends.numpy.arena import RunStats, dtype_of
from palimpsest.backends.numpy.executor import check_bounds
from palimpsest.backends.numpy.kernel_ops import kernel_info
from palimpsest.backends.opencl.generic_ops import GenericOps
from palimpsest.backends.opencl.kernels import GENERATORS
from palimpsest.backends.opencl.kernels.base import Arg, KernelCall, Unsupported, strides_of
from palimpsest.backends.opencl.runtime import device as open_device
from palimpsest.ir.diagnostics import DiagnosticError
from palimpsest.ir.verifier import lookup_symbol


class DeviceArray:
    """A buffer on the device: `nbytes` from byte `offset` of `mem`, row-major."""

    __slots__ = ("mem", "offset", "shape", "dtype")

    def __init__(self, mem, offset: int, shape: tuple, dtype: np.dtype):
        self.mem = mem
        self.offset = offset
        self.shape = shape
        self.dtype = dtype

    @property
    def size(self) -> int:
        count = 1
        for d in self.shape:
            count *= d
        return count

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize


class _Pending:
    """An alloc with `?` dims and no sizes, or a view of a pool with bounded `?` dims
    (`slot`: the pool's DeviceArray and the byte offset): memory comes when its shape is
    known."""

    __slots__ = ("type", "value", "slot")

    def __init__(self, type_, value, slot=None):
        self.type = type_
        self.value = value
        self.slot = slot


class _Allocation:
    __slots__ = ("mem", "nbytes", "live")

    def __init__(self, mem, nbytes):
        self.mem, self.nbytes, self.live = mem, nbytes, True


class OpenCLExecutor(GenericOps):
    """Runs functions of one module on one device; pools, constants, generated kernels
    and per-op data are kept across runs."""

    PENDING = _Pending          # for GenericOps
    DEVICE_ARRAY = DeviceArray

    def __init__(self, device=None, poison: bool = False, stats: RunStats | None = None):
        self.device = device if device is not None else open_device()
        self.cl = self.device.cl
        self.queue = self.device.queue
        self.poison = poison
        self.stats = stats if stats is not None else RunStats()
        self.pools: dict = {}        # pool name -> cl.Buffer (kept across runs)
        self.pool_sizes: dict = {}
        self.constants: dict = {}    # buffer.constant op -> DeviceArray
        self.allocations: dict = {}  # alloc value -> _Allocation (this run)
        self.launches: dict = {}     # (kernel op, shapes) -> [Launch] or Unsupported
        self._host = None            # the numpy executor for host ops
        self._run_pools: set = set()  # pools this run has counted
        self._infos: dict = {}       # generic op -> numpy ComputeInfo

    # -- runs ----------------------------------------------------------------------------------
    def begin_run(self, stats: RunStats) -> None:
        """Start a run of a kept executor: fresh stats; pools, constants and kernels kept
        (results are read back to the host, so no later run can overwrite them)."""
        self.stats = stats
        self.allocations = {}
        self._run_pools = set()

    def end_run(self) -> None:
        self.allocations = {}

    def run(self, func, inputs: dict, outputs: dict | None = None,
            copy_outputs: bool = True) -> dict:
        """Named host arrays: the results read back (into the caller's `outputs` arrays
        where given and fitting, else fresh arrays)."""
        arrays = bind_inputs(func, inputs)
        names = output_names(func)
        if outputs:
            unknown = [n for n in outputs if n not in names]
            if unknown:
                raise ValueError(f"unknown output '{unknown[0]}' (the function returns: "
                                 f"{', '.join(names)})")
        bound = []
        for array in arrays:
            if isinstance(array, np.ndarray):
                host = np.asarray(array, order="C")
                bound.append(DeviceArray(self.device.upload(host), 0, tuple(host.shape),
                                         host.dtype))
                self.stats.io_bytes += host.nbytes
            else:
                bound.append(array)
        results = self.run_function(func, bound)
        named = {}
        for name, result in zip(names, results):
            if not isinstance(result, DeviceArray):
                named[name] = result
                continue
            user = outputs.get(name) if outputs else None
            if user is not None:
                if not isinstance(user, np.ndarray) or tuple(user.shape) != result.shape:
                    raise ValueError(f"output '{name}': the result has shape "
                                     f"{result.shape}, the given array "
                                     f"{getattr(user, 'shape', type(user).__name__)}")
                if user.dtype == result.dtype and user.flags.c_contiguous \
                        and user.flags.writeable:
                    self._read(result, user)
                else:
                    np.copyto(user, self._download(result))
                named[name] = user
            else:
                named[name] = self._download(result)
            self.stats.io_bytes += result.nbytes
        self.queue.finish()
        return named

    def run_function(self, func, arrays: list, depth: int = 0) -> list:
        if depth > 64:
            raise func.error("call depth exceeds 64 (recursion?)")
        if func.is_declaration:
            raise func.error("is a declaration: there is no body to run")
        values = dict(zip(func.entry_block.args, arrays))
        for op in func.entry_block.ops:
            if op.name == "func.return":
                results = []
                for v in op.operands:
                    value = values[v]
                    if isinstance(value, _Pending):
                        raise op.error(f"returns a buffer that was never written ({v.type})")
                    results.append(value)
                return results
            self._execute(op, values, depth)
        raise func.error("has no func.return")

    # -- one op ------------------------------------------------------------------------------
    def _execute(self, op, values: dict, depth: int) -> None:
        name = op.name
        if name.startswith("kernel.") and name != "kernel.generic":
            self._kernel(op, values)
        elif name == "buffer.view":
            values[op.results[0]] = self._view(op, values)
        elif name == "buffer.reshape":
            values[op.results[0]] = self._reshape(op, values)
        elif name == "memory.arena":
            values[op.results[0]] = self._pool(op)
        elif name == "buffer.alloc":
            self._alloc(op, values)
        elif name == "buffer.dealloc":
            self._dealloc(op, values)
        elif name == "buffer.constant":
            values[op.results[0]] = self._constant(op)
        elif name == "buffer.copy":
            self._copy(op, values)
        elif name == "buffer.dim":
            source = self._materialized(op, values, op.operands[0])
            values[op.results[0]] = int(source.shape[op.properties["index"].value])
        elif name in ("buffer.compute", "kernel.generic"):
            self._on_host(op, values)
        elif name == "func.call":
            callee = lookup_symbol(op, op.callee)
            results = self.run_function(callee, [values[v] for v in op.operands], depth + 1)
            for result, array in zip(op.results, results, strict=True):
                values[result] = array
        else:
            raise DiagnosticError(f"the OpenCL backend cannot run '{name}' (kernel- or "
                                  f"buffer-level IR: the kernel, buffer, memory and func "
                                  f"dialects)", op.loc)

    def _materialized(self, op, values, value) -> DeviceArray:
        array = values[value]
        if isinstance(array, _Pending):
            raise op.error(f"reads a buffer that was never written ({value.type})")
        return array

    # -- memory --------------------------------------------------------------------------------
    def _new(self, value, shape, element_type, values) -> DeviceArray:
        dtype = dtype_of(element_type)
        shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in shape):
            raise ValueError(f"negative size {shape}")
        nbytes = dtype.itemsize
        for d in shape:
            nbytes *= d
        mem = self.device.buffer(nbytes, self.poison)
        self.allocations[value] = _Allocation(mem, nbytes)
        stats = self.stats
        stats.allocations += 1
        stats.bytes_allocated += nbytes
        stats.live_bytes += nbytes
        stats.peak_bytes = max(stats.peak_bytes, stats.live_bytes)
        stats.dynamic_allocations += 1
        stats.dynamic_bytes += nbytes
        array = DeviceArray(mem, 0, shape, dtype)
        values[value] = array
        return array

    def _materialize(self, pending: "_Pending", shape, values) -> DeviceArray:
        """The memory of a buffer whose shape is known now: a device allocation, or for a
        view with bounded `?` dims its slot in the pool (planned at the bounds)."""
        if pending.slot is None:
            return self._new(pending.value, shape, pending.type.element_type, values)
        check_bounds(pending, shape)
        source, offset = pending.slot
        array = DeviceArray(source.mem, source.offset + offset, tuple(int(d) for d in shape),
                            dtype_of(pending.type.element_type))
        values[pending.value] = array
        return array

    def _alloc(self, op, values) -> None:
        type_ = op.results[0].type
        if None in type_.shape and not op.operands:
            values[op.results[0]] = _Pending(type_, op.results[0])
            return
        sizes = iter(values[v] for v in op.operands)
        shape = tuple(d if d is not None else int(next(sizes)) for d in type_.shape)
        try:
            self._new(op.results[0], shape, type_.element_type, values)
        except ValueError as error:
            raise op.error(f"cannot allocate: {error}") from None

    def _dealloc(self, op, values) -> None:
        value = op.operands[0]
        allocation = self.allocations.get(value)
        if allocation is None:
            if isinstance(values.get(value), _Pending):
                values.pop(value)  # never written: nothing was allocated
                return
            raise op.error("frees a buffer that no buffer.alloc of this run allocated")
        if not allocation.live:
            raise op.error("frees a buffer twice")
        allocation.live = False
        allocation.mem.release()  # the queue keeps it until the kernels using it are done
        self.stats.live_bytes -= allocation.nbytes
        self.stats.deallocations += 1

    def _pool(self, op) -> DeviceArray:
        pool_name = op.properties["pool"].root
        mem = self.pools.get(pool_name)
        size = op.results[0].type.shape[0]
        if size is None:
            pool = lookup_symbol(op, op.properties["pool"])
            size_attr = pool.properties.get("size") if pool is not None else None
            if size_attr is None:
                raise op.error(f"pool @{pool_name} has no size (plan the memory first)")
            size = size_attr.value
        stats = self.stats
        if mem is None or self.pool_sizes[pool_name] < size:
            mem = self.pools[pool_name] = self.device.buffer(size, self.poison)
            self.pool_sizes[pool_name] = size
            stats.allocations += 1
            stats.bytes_allocated += size
        if pool_name not in self._run_pools:  # live for the whole run
            self._run_pools.add(pool_name)
            stats.static_bytes += size
            stats.live_bytes += size
            stats.peak_bytes = max(stats.peak_bytes, stats.live_bytes)
        dtype = dtype_of(op.results[0].type.element_type)
        return DeviceArray(mem, 0, (size // dtype.itemsize,), dtype)

    def _view(self, op, values) -> DeviceArray:
        source = self._materialized(op, values, op.operands[0])
        type_ = op.results[0].type
        if None in type_.shape:
            if not type_.is_bounded or "offset" not in op.properties:
                raise op.error(f"views with '?' dims need a bound on each and a static "
                               f"offset ({type_})")
            # a slot planned at the bounds: viewed once the writer knows the shape
            return _Pending(type_, op.results[0], (source, op.properties["offset"].value))
        dtype = dtype_of(type_.element_type)
        if type_.strides is not None and tuple(type_.strides) != strides_of(type_.shape):
            raise op.error(f"the OpenCL backend runs row-major buffers, not {type_}")
        offset = op.properties["offset"].value if "offset" in op.properties \
            else int(values[op.operands[1]])
        view = DeviceArray(source.mem, source.offset + offset, tuple(type_.shape), dtype)
        if offset < 0 or offset + view.nbytes > source.nbytes or view.offset % dtype.itemsize:
            raise op.error(f"cannot view {type_} at byte {offset} of a {source.nbytes}-byte "
                           f"buffer")
        return view

    def _reshape(self, op, values) -> DeviceArray:
        source = self._materialized(op, values, op.operands[0])
        shape = op.results[0].type.shape
        if shape.count(None) > 1:
            raise op.error("needs a static shape, or one '?' dim, to reshape at run time")
        known = 1
        for d in shape:
            if d is not None:
                known *= d
        if None in shape:
            if known == 0 or source.size % known:
                raise op.error(f"cannot view a buffer of shape {source.shape} as "
                               f"{op.results[0].type}")
            shape = tuple(source.size // known if d is None else d for d in shape)
        elif known != source.size:
            raise op.error(f"cannot view a buffer of shape {source.shape} as "
                           f"{op.results[0].type}")
        return DeviceArray(source.mem, source.offset, tuple(shape), source.dtype)

    def _constant(self, op) -> DeviceArray:
        attr = op.properties["value"]
        cached = self.constants.get(op)
        if cached is not None and cached[0] is attr:
            return cached[1]
        try:
            host = np.asarray(attr.to_numpy(), order="C")
        except OSError as error:
            raise op.error(f"cannot read its data: {error.strerror or error}: "
                           f"'{error.filename}'") from None
        except ValueError as error:
            raise op.error(f"cannot read its data: {error}") from None
        array = DeviceArray(self.device.upload(host), 0, tuple(host.shape), host.dtype)
        self.constants[op] = (attr, array)
        return array

    def _copy(self, op, values) -> None:
        source = self._materialized(op, values, op.operands[0])
        target = values[op.operands[1]]
        if isinstance(target, _Pending):
            target = self._materialize(target, source.shape, values)
        if target.shape != source.shape:
            raise op.error(f"copies shape {source.shape} into shape {target.shape}")
        if source.nbytes:
            self.cl.enqueue_copy(self.queue, target.mem, source.mem, byte_count=source.nbytes,
                                 src_offset=source.offset, dst_offset=target.offset)
        self.stats.copy_op_bytes += source.nbytes

    def _download(self, array: DeviceArray) -> np.ndarray:
        host = np.empty(array.shape, array.dtype)
        self._read(array, host)
        return host

    def _read(self, array: DeviceArray, host: np.ndarray) -> None:
        if array.nbytes:
            self.cl.enqueue_copy(self.queue, host, array.mem, src_offset=array.offset,
                                 is_blocking=True)

    def _write(self, host: np.ndarray, array: DeviceArray) -> None:
        if array.nbytes:
            self.cl.enqueue_copy(self.queue, array.mem, np.asarray(host, order="C"),
                                 dst_offset=array.offset, is_blocking=True)

    # -- kernels -------------------------------------------------------------------------------
    def _kernel(self, op, values) -> None:
        info = kernel_info(op)
        ins = [self._materialized(op, values, v) for v in op.ins]
        shapes = tuple(a.shape for a in ins)
        cls = type(op)
        try:
            outs = [self._sized(values, v, lambda i=i: cls.result_shapes(
                list(shapes), info.config)[i]) for i, v in enumerate(op.outs)]
            workspaces = [self._sized(values, v, lambda role=role: cls.workspace_shape(
                role, list(shapes), info.config)) for v, role in zip(op.workspaces, info.roles)]
        except ValueError as error:
            raise op.error(f"failed at run time: {error}") from None
        key = (op, shapes, tuple(a.dtype for a in ins))
        launches = self.launches.get(key)
        if launches is None:
            call = KernelCall(op.name, info.config, [Arg(a.shape, a.dtype) for a in ins],
                              [Arg(a.shape, a.dtype) for a in outs],
                              {role: Arg(a.shape, a.dtype) for role, a in
                               zip(info.roles, workspaces)}, self.device.limits)
            generate = GENERATORS.get(op.name)
            try:
                if generate is None:
                    raise Unsupported(f"no OpenCL generator for '{op.name}'")
                launches = generate(call)
            except Unsupported as reason:
                launches = reason
            self.launches[key] = launches
        if isinstance(launches, Unsupported):
            self._on_host(op, values)
            return
        self._enqueue(launches, {"in": ins, "out": outs,
                                 "ws": dict(zip(info.roles, workspaces))})

    def _enqueue(self, launches: list, groups: dict) -> None:
        """Launch with each Ref bound to its DeviceArray's buffer and element offset."""
        def buffer(ref):
            array = groups[ref.group][ref.key]
            return array.mem, array.offset // array.dtype.itemsize

        for launch in launches:
            self.device.launch(launch, buffer)
        self.stats.device_launches += len(launches)

    def _sized(self, values, value, shape) -> DeviceArray:
        array = values[value]
        if isinstance(array, _Pending):
            concrete = shape()
            if concrete is None or None in concrete:
                raise ValueError("cannot size a buffer from the operand shapes")
            array = self._materialize(array, concrete, values)
        return array

def dump_kernels(executors, directory: str) -> int:
    """Write the OpenCL C of every program the executors generated into `directory`,
    one file per program (`<index>_<op>.cl`, in the order they were generated); the count."""
    import os

    os.makedirs(directory, exist_ok=True)
    written: dict = {}
    for executor in executors:
        if executor is None:
            continue
        for (op, _, _), launches in executor.launches.items():
            if isinstance(launches, Unsupported):
                continue
            for launch in launches:
                if launch.source not in written:
                    stem = f"{len(written):03d}_{op.name.split('.', 1)[1]}_{launch.kernel}"
                    written[launch.source] = os.path.join(directory, stem + ".cl")
    for source, path in written.items():
        with open(path, "w", encoding="utf-8") as file:
            file.write(source)
    return len(written)


def device_summary(executor, stats: RunStats) -> str:
    """The device lines of `--stats`: where the run ran, what it launched and built."""
    build = executor.device.build_stats
    host = ", ".join(f"{op} x{n}" for op, n in sorted(stats.host_ops.items())) or "none"
    return (f"device: {executor.device.name}\n"
            f"kernels launched: {stats.device_launches}\n"
            f"ops on the host: {host} ({stats.transfer_bytes} bytes moved)\n"
            f"programs built: {build.builds} in {build.build_seconds:.3f} s "
            f"({build.hits} kernel cache hits)")


class OpenCLTarget:
    """The OpenCL backend's part of a session (backends/numpy/session.py): pools aligned
    to the device, and an executor on it."""

    def __init__(self, poison: bool = False, device_index: int | None = None):
        self.device = open_device(device_index)
        self.poison = poison

    def adapt_pipeline(self, pipeline: list) -> None:
        import dataclasses

        for index, step in enumerate(pipeline):
            if step.name == "plan-memory" and step.default_alignment < self.device.alignment:
                pipeline[index] = dataclasses.replace(
                    step, default_alignment=self.device.alignment)

    def executor(self) -> OpenCLExecutor:
        return OpenCLExecutor(self.device, self.poison)


def run(func, inputs: dict, *, device=None, poison: bool = False,
        stats: RunStats | None = None, outputs: dict | None = None) -> dict:
    """Run kernel- or buffer-level `func` on named inputs on an OpenCL device."""
    return OpenCLExecutor(device, poison, stats).run(func, inputs, outputs)


__all__ = ["DeviceArray", "OpenCLExecutor", "OpenCLTarget", "device_summary", "dump_kernels", "run"]
