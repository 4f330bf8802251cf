"""Execute planned kernel-level IR on an OpenCL device.

Memory. Each `memory.arena @pool` is one `cl.Buffer` of the pool's size, allocated the
first time an executor runs it and kept for its later runs (on a CPU device that keeps a
USE_HOST_PTR buffer in the host's array, PoCL's, over an array of ours: runtime.py
`host_buffer`); a `buffer.view` of it is a
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
the op (`host_ops`) and the bytes moved (`transfer_bytes`). On a device that is the
host's CPU nothing moves: the op works on the pools' host arrays in place, and on other
buffers mapped (generic_ops.py `_mapped`). A wait for the queue polls it briefly before
it blocks (runtime.py `Device.wait`).

Captured programs: capture.py (`CapturedPrograms`, a mixin of the executor).

Inputs are copied to the device and results read back, one copy each (`io_bytes`); on
a device that is the host's CPU an input the plan never writes is the caller's array
itself (USE_HOST_PTR: no copy, `bind_input`); a result is read straight into the
caller's array given as `outputs=`, when its dtype, shape and contiguity fit. With
`poison=True`, pools and allocations are filled with 0x5A bytes when they are made (a
read before the first write shows up), when they are freed, and a view of a pool when
its liveness ends (its last use, through aliases), as the numpy backend does: a buffer
used past its end reads 0x5A bytes.

Profiling. With a profiler (`executor.profiler`, backends/profile.py) the executor
enqueues on the device's profiling queue (runtime.py `Device.profiling_queue`; the plain
queue otherwise, which a profiler's removal goes back to) and hands the profiler each
op's events (`collect_events` / `take_events`: its launches and device copies; a host
fallback's wall time, its transfers included, after a finish so that it waits for none
of the work queued before it), which it reads once the run is over: no finish between
ops. A profiled run is never captured (the loop's plain path alone captures).

The loop (the op dispatch, pending buffers, frees, calls, the profiler's timing) is
backends/loop.py, shared with the numpy backend; this module holds the OpenCL hooks.
"""

from __future__ import annotations

import numpy as np

from palimpsest.backends.loop import ExecutorLoop
from palimpsest.backends.numpy.arena import RunStats, dtype_of
from palimpsest.backends.numpy.executor import ErrorsIgnored
from palimpsest.backends.numpy.kernel_ops import kernel_info
from palimpsest.backends.opencl.capture import CapturedPrograms
from palimpsest.backends.opencl.generic_ops import GenericOps
from palimpsest.backends.opencl.kernels import GENERATORS
from palimpsest.backends.opencl.kernels.base import Arg, KernelCall, Unsupported, strides_of
from palimpsest.backends.opencl.runtime import OpTimes
from palimpsest.backends.opencl.runtime import device as open_device


class DeviceArray:
    """A buffer on the device: `nbytes` from byte `offset` of `mem`, row-major; `host`:
    a constant's host array (what was uploaded), else None."""

    __slots__ = ("mem", "offset", "shape", "dtype", "host", "size", "nbytes")

    def __init__(self, mem, offset: int, shape: tuple, dtype: np.dtype, host=None):
        self.mem = mem
        self.offset = offset
        self.shape = shape
        self.dtype = dtype
        self.host = host
        size = 1
        for d in shape:
            size *= d
        self.size = size   # (read at every host op's operands: kept, not recomputed)
        self.nbytes = size * dtype.itemsize


class _Allocation:
    """A `buffer.alloc`'s own cl.Buffer (the loop's allocation handle)."""

    __slots__ = ("mem", "nbytes", "live", "stats")

    def __init__(self, mem, nbytes, stats):
        self.mem, self.nbytes, self.live, self.stats = mem, nbytes, True, stats

    def release(self) -> None:
        self.live = False
        self.mem.release()  # the queue keeps it until the kernels using it are done
        self.stats.live_bytes -= self.nbytes
        self.stats.deallocations += 1


class OpenCLExecutor(GenericOps, CapturedPrograms, ExecutorLoop):
    """Runs functions of one module on one device; pools, constants, generated kernels
    and per-op data are kept across runs."""

    NAME = "OpenCL"
    LEVELS = ("kernel- or buffer-level IR: the kernel, buffer, memory and func dialects")
    ARRAY = DeviceArray
    DEVICE_ARRAY = DeviceArray   # for GenericOps

    def __init__(self, device=None, poison: bool = False, stats: RunStats | None = None):
        self.device = device if device is not None else open_device()
        self.cl = self.device.cl
        self.queue = self.device.queue   # (before the loop's init sets `profiler`)
        self._events = None          # the OpTimes of the op being profiled, or None
        # the events of copies enqueued without waiting, kept (each holds its host array)
        # until the queue is known to be done with them (`_synced`)
        self._copies: list = []
        self._idle = True            # nothing enqueued on `queue` since its last wait
        super().__init__(poison, stats if stats is not None else RunStats())
        self.pools: dict = {}        # pool name -> cl.Buffer (kept across runs)
        self.pool_sizes: dict = {}
        self.launches: dict = {}     # (kernel op, shapes) -> [Launch] or Unsupported
        self._host = None            # the numpy executor for host ops
        self._run_pools: set = set()  # pools this run has counted
        self._infos: dict = {}       # generic op -> numpy ComputeInfo
        self._host_views: dict = {}  # (value, its place) -> (pool host array, its view)
        self._pool_hosts: dict = {}  # pool name -> the host array its buffer is, or None
        self.host_memory: dict = {}  # a pool's cl.Buffer int_ptr -> (it, its host array)
        self._host_segments: dict = {}  # host op -> its operands (`_host_operands`)
        self._derived: dict = {}     # (name, constant's buffer, offset) -> (it, derived)
        self._host_stats = RunStats()    # the host executor's (not read)
        self._segments: dict = {}    # op -> its (ins, outs, workspaces)
        self._pool_arrays: dict = {}  # (pool name, size, dtype) -> its DeviceArray (`pool`)

    # -- runs ----------------------------------------------------------------------------------
    def begin_run(self, stats: RunStats) -> None:
        """Start a run of a kept executor: fresh stats; pools, constants and kernels kept
        (results are read back to the host, so no later run can overwrite them)."""
        self.stats = stats
        self.allocations = {}
        self._run_pools = set()

    def end_run(self) -> None:
        self.allocations = {}

    # The loop keeps the views and reshapes of the pools and constants from one run to
    # the next (CACHE_VIEWS): `pool` gives back the same DeviceArray while its pool keeps
    # its cl.Buffer (every run's results are read back to the host, so nothing a caller
    # holds pins a pool), and `capture` pre-binds the launches of the kernel ops on them.
    CACHE_VIEWS = True

    def run(self, func, inputs: dict, outputs: dict | None = None,
            copy_outputs: bool = True) -> dict:
        """The loop's run, numpy's floating-point errors ignored once for the run's host
        ops (not once per host op, ~2 us each)."""
        with ErrorsIgnored():
            return super().run(func, inputs, outputs, copy_outputs)

    def bind_input(self, index: int, array, plan) -> DeviceArray:
        """The input on the device, a new buffer each run: on a CPU device the caller's
        array itself where the plan writes no alias of it and it is contiguous, else
        made with a copy of the data (on PoCL 0.6 us for 5 KB, where writing a kept
        buffer is a queued command, 60-80 us)."""
        if not isinstance(array, np.ndarray):
            return array
        in_place = array.flags.c_contiguous and index not in plan.written_args \
            and self.device.limits.host_cpu
        host = np.asarray(array, order="C")
        if not in_place:
            self.stats.io_bytes += host.nbytes
        return DeviceArray(self.device.upload(host, in_place), 0, tuple(host.shape),
                           host.dtype)

    def read_output(self, name: str, result, user, copy_outputs: bool):
        """A host array: the result read back (into the caller's array where it fits)."""
        if not isinstance(result, DeviceArray):
            return result
        self.stats.io_bytes += result.nbytes
        if user is None:    # read without waiting: the run's `finish` waits once for all
            return self._download(result, wait=False)
        if not isinstance(user, np.ndarray) or tuple(user.shape) != result.shape:
            raise ValueError(f"output '{name}': the result has shape "
                             f"{result.shape}, the given array "
                             f"{getattr(user, 'shape', type(user).__name__)}")
        if user.dtype == result.dtype and user.flags.c_contiguous and user.flags.writeable:
            self._read(result, user, wait=False)
        else:
            np.copyto(user, self._download(result))
        return user

    def finish(self) -> None:
        self._synced()

    def sync(self) -> None:
        self._synced()

    def _synced(self) -> None:
        """Wait for the queue: the copies enqueued without waiting are done, their events
        (and host arrays) let go."""
        if self._idle:   # (a wait costs a round trip to PoCL's worker even then)
            return
        self.device.wait(self.queue)
        self._copies.clear()
        self._idle = True

    @property
    def profiler(self):
        return self._profiler

    @profiler.setter
    def profiler(self, profiler) -> None:
        self._profiler = profiler
        queue = self.device.queue if profiler is None else self.device.profiling_queue
        if queue is not self.queue:
            self._synced()   # (commands are ordered within one queue only)
            self.queue = queue

    def collect_events(self) -> bool:
        self._events = OpTimes(self.cl)
        return True

    def take_events(self) -> OpTimes:
        events, self._events = self._events, None
        return events

    def _record(self, event) -> None:
        if self._events is not None:
            self._events.events.append(event)

    def setup_seconds(self) -> float:
        return self.device.build_stats.build_seconds

    # -- memory hooks ----------------------------------------------------------------------------
    def allocate(self, op, value, shape, type_) -> DeviceArray:
        dtype = dtype_of(type_.element_type)
        nbytes = dtype.itemsize
        for d in shape:
            nbytes *= d
        mem = self.device.buffer(nbytes, self.poison, self.queue)
        self._idle = self._idle and not self.poison   # (poison: a fill queued)
        self.allocations[value] = _Allocation(mem, nbytes, self.stats)
        stats = self.stats
        stats.allocations += 1
        stats.bytes_allocated += nbytes
        stats.live_bytes += nbytes
        stats.peak_bytes = max(stats.peak_bytes, stats.live_bytes)
        stats.dynamic_allocations += 1
        stats.dynamic_bytes += nbytes
        return DeviceArray(mem, 0, tuple(shape), dtype)

    def slot(self, value, source, offset: int, shape, type_) -> DeviceArray:
        return DeviceArray(source.mem, source.offset + offset, tuple(shape),
                           dtype_of(type_.element_type))

    def pool(self, op, pool_name: str, size: int) -> DeviceArray:
        mem = self.pools.get(pool_name)
        stats = self.stats
        if mem is None or self.pool_sizes[pool_name] < size:
            mem, host = self.device.host_buffer(size, self.poison, self.queue)
            self._idle = self._idle and not self.poison
            self.pools[pool_name] = mem
            self._pool_hosts[pool_name] = host
            # (each entry holds its buffer: no other buffer gets its int_ptr meanwhile)
            self.host_memory = {pool.int_ptr: (pool, self._pool_hosts[name])
                                for name, pool in self.pools.items()
                                if self._pool_hosts.get(name) is not None}
            self.pool_sizes[pool_name] = size
            stats.allocations += 1
            stats.bytes_allocated += size
        if pool_name not in self._run_pools:  # live for the whole run
            self._run_pools.add(pool_name)
            stats.static_bytes += size
            stats.live_bytes += size
            stats.peak_bytes = max(stats.peak_bytes, stats.live_bytes)
        dtype = dtype_of(op.results[0].type.element_type)
        key = (pool_name, size, dtype)
        array = self._pool_arrays.get(key)
        if array is None or array.mem is not mem:   # (the same one while the buffer is)
            array = self._pool_arrays[key] = DeviceArray(mem, 0, (size // dtype.itemsize,),
                                                         dtype)
        return array

    def view(self, op, value, source, offset: int, type_) -> DeviceArray:
        dtype = dtype_of(type_.element_type)
        if type_.strides is not None and tuple(type_.strides) != strides_of(type_.shape):
            raise op.error(f"the OpenCL backend runs row-major buffers, not {type_}")
        view = DeviceArray(source.mem, source.offset + offset, tuple(type_.shape), dtype)
        if offset < 0 or offset + view.nbytes > source.nbytes or view.offset % dtype.itemsize:
            raise op.error(f"cannot view {type_} at byte {offset} of a {source.nbytes}-byte "
                           f"buffer")
        return view

    def reshape(self, op, source) -> DeviceArray:
        shape = op.results[0].type.shape
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

    def constant(self, host) -> DeviceArray:
        mem, kept = self.device.upload_kept(host)
        host = kept.view()
        host.flags.writeable = False    # read-only, as the numpy backend's constants
        return DeviceArray(mem, 0, tuple(host.shape), host.dtype, host)

    def copy(self, source, target) -> None:
        if source.nbytes:
            self._idle = False
            self._record(self.cl.enqueue_copy(
                self.queue, target.mem, source.mem, byte_count=source.nbytes,
                src_offset=source.offset, dst_offset=target.offset))

    def poison_array(self, array) -> None:
        if array.nbytes:
            self._idle = False
            self.cl.enqueue_fill_buffer(self.queue, array.mem, np.uint8(0x5A), array.offset,
                                        array.nbytes)

    def run_generic(self, op, values) -> None:
        self._on_host(op, values)

    # Every wait for the queue is a round trip to PoCL's worker thread, 60-90 us on the
    # 2-CPU VM whatever the size (a 64 KiB copy: 75 us, 10 us of it the copy), so a copy
    # waits only where the host reads the data next: a host op's results go to the
    # device without waiting (the kernels after them are queued behind), its operands
    # are read with one wait for all, a run's outputs with the run's `finish`.

    def _download(self, array: DeviceArray, wait: bool = True) -> np.ndarray:
        host = np.empty(array.shape, array.dtype)
        self._read(array, host, wait)
        return host

    def _read(self, array: DeviceArray, host: np.ndarray, wait: bool = True) -> None:
        """`array` into `host`; without `wait`, `host` holds it after the next `_synced`."""
        if array.nbytes:
            self._idle = False
            self._copies.append(self.cl.enqueue_copy(self.queue, host, array.mem,
                                                     src_offset=array.offset,
                                                     is_blocking=False))
            if wait:
                self._synced()   # (the queue is in order: all before it is done)

    def _write(self, host: np.ndarray, array: DeviceArray) -> None:
        """`host` into `array`, without waiting: the event keeps `host` until the copy is
        done (pyopencl's), and `host` must not change before the next `_synced`."""
        if array.nbytes:
            self._idle = False
            self._copies.append(self.cl.enqueue_copy(
                self.queue, array.mem, np.asarray(host, order="C"), dst_offset=array.offset,
                is_blocking=False))

    # -- kernels -------------------------------------------------------------------------------
    def operands(self, op) -> tuple:
        """The op's (ins, outs, workspaces), found once: an op's operand segments are
        recomputed at each access, which cost a small model's run 40% of its host time."""
        found = self._segments.get(op)
        if found is None:
            found = self._segments[op] = (tuple(op.ins), tuple(op.outs),
                                          tuple(getattr(op, "workspaces", ())))
        return found

    def run_kernel(self, op, values) -> None:
        info = kernel_info(op)
        op_ins, op_outs, op_workspaces = self.operands(op)
        ins = [self._materialized(op, values, v) for v in op_ins]
        shapes = tuple(a.shape for a in ins)
        cls = type(op)
        try:
            outs = [self._sized(values, v, lambda i=i: cls.result_shapes(
                list(shapes), info.config)[i]) for i, v in enumerate(op_outs)]
            workspaces = [self._sized(values, v, lambda role=role: cls.workspace_shape(
                role, list(shapes), info.config)) for v, role in zip(op_workspaces, info.roles)]
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

        launch, queue, events = self.device.launch, self.queue, self._events
        self._idle = False
        for each in launches:
            event = launch(each, buffer, queue)
            if events is not None:
                events.events.append(event)
        self.stats.device_launches += len(launches)


def dump_kernels(executors, directory: str) -> int:
    """Write the OpenCL C of every program the executors generated into `directory`,
    one file per program (`<index>_<op>.cl`, in the order they were generated); the count."""
    import os

    os.makedirs(directory, exist_ok=True)
    written: dict = {}
    for executor in executors:
        if executor is None:
            continue
        for (op, *_), launches in executor.launches.items():  # kernel and generic ops
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
        stats: RunStats | None = None, outputs: dict | None = None, profiler=None) -> dict:
    """Run kernel- or buffer-level `func` on named inputs on an OpenCL device
    (`profiler`: a backends/profile.py Profiler that times the run's ops)."""
    executor = OpenCLExecutor(device, poison, stats)
    executor.profiler = profiler
    return executor.run(func, inputs, outputs)


__all__ = ["DeviceArray", "OpenCLExecutor", "OpenCLTarget", "device_summary", "dump_kernels", "run"]
