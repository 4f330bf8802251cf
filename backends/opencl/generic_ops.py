"""The OpenCL executor's graph-level ops (`kernel.generic`, `buffer.compute`): those that
only relayout their data are device copies, those with a generator (graph.cast, the
comparisons, onnxruntime's dynamic quantization ops: kernels/quant.py, recurrent.py) are
launched like kernel ops, and the rest run on the host with the numpy backend, their
operands read back and their outs written to the device (on a device that is the host's
CPU, in place: `_mapped`), counted in the run's stats (`host_ops`, `transfer_bytes`).
A mixin of `OpenCLExecutor` (executor.py)."""

from __future__ import annotations

import time

import numpy as np

from palimpsest.backends.loop import Pending as HostPending
from palimpsest.backends.numpy.executor import Executor, ignoring_errors
from palimpsest.backends.opencl.kernels import GENERATORS
from palimpsest.backends.opencl.kernels.base import DERIVED, Arg, KernelCall, Unsupported

# generic graph ops that keep the data's bytes in order: a device-to-device copy
RELAYOUTS = frozenset({"graph.reshape", "graph.flatten", "graph.squeeze", "graph.unsqueeze",
                       "graph.identity"})


# generic graph ops with a generator (kernels/) whose out has the shape of their first in
SAME_SHAPE_GENERICS = frozenset({"graph.cast"})
# ... whose out has their ins' numpy-broadcast shape
BROADCAST_GENERICS = frozenset({"graph.equal", "graph.less", "graph.greater",
                                "graph.less_or_equal", "graph.greater_or_equal",
                                "graph.and", "graph.or", "graph.xor", "graph.where",
                                "graph.not", "graph.is_nan", "graph.is_inf"})
# ... whose out is run on the device only where the plan sized it
PLANNED_GENERICS = frozenset({"graph.range", "graph.constant_of_shape"})
# ... with several outs, all sized by the plan, whose generator takes the op's operands
# by slot (None where an optional one is absent)
SLOTTED_GENERICS = frozenset({"graph.dynamic_quantize_lstm", "graph.dynamic_quantize_linear",
                              "graph.matmul_integer_to_float", "graph.conv_integer"})


class GenericOps:
    """Needs the executor's values, memory and launch methods."""

    # -- generic ops ------------------------------------------------------------------------------
    def _relayout(self, op, values) -> bool:
        """A `kernel.generic` / `buffer.compute` that only re-reads its data in a new shape
        (reshape, flatten, squeeze, unsqueeze, identity): its out shape from the reference
        kernel run on a zero-byte stand-in of the data (and the small shape operands, read
        back), its bytes copied on the device. False for any other op."""
        from palimpsest.backends.numpy.kernels import ComputeInfo
        from palimpsest.dialects.graph.reference import KERNELS

        info = self._infos.get(op)
        if info is None:
            info = self._infos[op] = ComputeInfo(op)
        op_ins, op_outs, _ = self.operands(op)
        if info.name not in RELAYOUTS or len(op_outs) != 1 or not op_ins:
            return False
        ins = [self._materialized(op, values, v) for v in op_ins]
        data = ins[0]
        host = [np.broadcast_to(np.zeros((), data.dtype), data.shape)]
        for array in ins[1:]:
            host.append(self._download(array))
            self.stats.transfer_bytes += array.nbytes
        try:
            shape = tuple(np.shape(KERNELS[info.name](info.kernel_inputs(host), info.attrs,
                                                      1)[0]))
        except (ValueError, IndexError, TypeError) as error:
            raise op.error(f"failed at run time: {error}") from None
        target = values[op_outs[0]]
        if isinstance(target, self.PENDING):
            target = self._materialize(target, shape, values)
        if target.shape != shape or target.dtype != data.dtype:
            raise op.error(f"'{info.name}' produced {data.dtype} {list(shape)} for a "
                           f"{target.dtype} {list(target.shape)} buffer")
        if data.nbytes and (target.mem is not data.mem or target.offset != data.offset):
            self._idle = False
            self._record(self.cl.enqueue_copy(
                self.queue, target.mem, data.mem, byte_count=data.nbytes,
                src_offset=data.offset, dst_offset=target.offset))
            self.stats.view_copy_bytes += data.nbytes
        return True

    def _generic_on_device(self, op, values) -> bool:
        """A `kernel.generic` whose graph op has a generator (graph.cast: out shaped like
        its in; comparisons and logical ops: like their ins broadcast; range and
        constant_of_shape: into an out the plan sized, else on the host; graph.expand: its
        data broadcast to the shape operand, read back only when the out's shape is not
        planned): launched like a kernel op; False when there is none or it declines."""
        info = self._infos[op]
        generate = GENERATORS.get(info.name)
        op_ins, op_outs, _ = self.operands(op)
        if generate is not None and info.name in SLOTTED_GENERICS:
            return self._slotted_on_device(op, values, info, generate, op_ins, op_outs)
        if generate is None or len(op_outs) != 1:
            return False
        ins = [self._materialized(op, values, v) for v in op_ins]
        if info.name in SAME_SHAPE_GENERICS:
            shape = lambda: ins[0].shape  # noqa: E731
        elif info.name in BROADCAST_GENERICS:
            shape = lambda: tuple(np.broadcast_shapes(*(a.shape for a in ins)))  # noqa: E731
        elif info.name in PLANNED_GENERICS:
            if isinstance(values[op_outs[0]], self.PENDING):
                return False   # its size is in its operands' values: the host says it
            shape = lambda: None  # noqa: E731
        elif info.name == "graph.expand" and len(ins) == 2:
            def shape():
                self.stats.transfer_bytes += ins[1].nbytes
                return tuple(np.broadcast_shapes(
                    ins[0].shape, tuple(int(d) for d in self._download(ins[1]))))
        else:
            return False
        out = self._sized(values, op_outs[0], shape)
        key = (op, tuple(a.shape for a in ins), tuple(a.dtype for a in ins), out.shape)
        return self._launch_generic(key, info, generate, ins, [out])

    def _slotted_on_device(self, op, values, info, generate, op_ins, op_outs) -> bool:
        """A SLOTTED_GENERICS op launched like a kernel op, its operands by slot (the
        generator sees None for an absent optional one), every out planned; False when
        an out is not (its shape is the host's to say) or the generator declines."""
        if any(isinstance(values[v], self.PENDING) for v in op_outs):
            return False
        ins = info.kernel_inputs([self._materialized(op, values, v) for v in op_ins])
        key = (op, tuple(None if a is None else (a.shape, a.dtype) for a in ins))
        return self._launch_generic(key, info, generate, ins, [values[v] for v in op_outs])

    def _launch_generic(self, key, info, generate, ins: list, outs: list) -> bool:
        """Enqueue the launches `generate` makes of the generic op for these operands (None
        for an absent one), made once per `key`; False (nothing enqueued) where it
        declines."""
        launches = self.launches.get(key)
        if launches is None:
            call = KernelCall(info.name, info.attrs,
                              [None if a is None else Arg(a.shape, a.dtype) for a in ins],
                              [Arg(a.shape, a.dtype) for a in outs], {}, self.device.limits)
            try:
                launches = generate(call)
            except Unsupported as reason:
                launches = reason
            self.launches[key] = launches
        if isinstance(launches, Unsupported):
            return False
        self._enqueue(launches, {"in": ins, "out": outs, "ws": {},
                                 "derived": _Derived(self, ins)})
        return True

    def derived(self, name: str, array):
        """DERIVED[name] of DeviceArray `array` on the device: made once for a constant
        (kept by the executor with the constant's buffer), else at each call."""
        constant = array.host is not None
        key = (name, array.mem.int_ptr, array.offset)
        entry = self._derived.get(key) if constant else None
        if entry is not None and entry[0] is array.mem:   # (the entry holds the constant's)
            return entry[1]
        made = np.ascontiguousarray(DERIVED[name](array.host if constant
                                                  else self._download(array)))
        result = self.DEVICE_ARRAY(self.device.upload(made), 0, made.shape, made.dtype)
        if constant:
            self._derived[key] = (array.mem, result)
        return result

    # -- host ops --------------------------------------------------------------------------------
    def _host_operands(self, op) -> tuple:
        """The op's (operands, each once, in order; its ins as a set; its outs; its
        workspaces; the name its stats count it by), found once (an op's operand
        segments are recomputed at each access)."""
        found = self._host_segments.get(op)
        if found is None:
            operands = tuple(dict.fromkeys(op.operands))
            found = self._host_segments[op] = (
                operands, frozenset(op.ins) if hasattr(op, "ins") else frozenset(),
                tuple(op.outs) if hasattr(op, "outs") else (),
                tuple(getattr(op, "workspaces", ())),
                op.properties["op"].value if op.name in ("buffer.compute", "kernel.generic")
                else op.name)
        return found

    def _mapped(self, operands, values) -> tuple:
        """On a device that is the host's CPU, the `operands` in device memory (not
        constants, not pending) as host arrays in place, no copy: in a pool that is host
        memory (`host_memory`: runtime.py `host_buffer`) a view of it; elsewhere each
        cl.Buffer they lie in mapped once over the bytes they span (PoCL hands back its
        own memory). Copies cost captcha_ocr_int8's 21 ConvIntegers 0.23 ms each, a map
        and its release ~70 us. ({value: array}, the maps): the maps are queued without
        waiting; the caller waits once, and releases them when the op is done, before
        anything else is queued.

        A value keeps its array object from one run to the next while its bytes stay
        where they were (one array a value, as the numpy executor's): what a numpy
        kernel binds to its arrays stays bound (MatMulIntegerToFloat's oneDNN call:
        t5_encoder_int8's 56 products bound again at every call took 285 us each,
        against 64)."""
        spans: dict = {}
        arrays: dict = {}
        views: dict = {}
        kept, shared = self._host_views, self.host_memory
        for value in operands:
            array = values[value]
            if not isinstance(array, self.DEVICE_ARRAY) or array.host is not None \
                    or not array.nbytes:
                continue
            pool = shared.get(array.mem.int_ptr)
            if pool is None or pool[0] is not array.mem:
                arrays[value] = array
                low, high = spans.get(array.mem, (array.offset, array.offset))
                spans[array.mem] = (min(low, array.offset),
                                    max(high, array.offset + array.nbytes))
                continue
            host = pool[1]
            key = (value, array.offset, array.shape, array.dtype)
            entry = kept.get(key)
            if entry is None or entry[0] is not host:   # (the entry keeps its host alive)
                entry = kept[key] = (host, host[array.offset:array.offset + array.nbytes]
                                     .view(array.dtype).reshape(array.shape))
            views[value] = entry[1]
        flags = self.cl.map_flags.READ | self.cl.map_flags.WRITE
        maps = {}
        for mem, (low, high) in spans.items():
            self._idle = False
            memory = self.cl.enqueue_map_buffer(self.queue, mem, flags, low, (high - low,),
                                                np.uint8, is_blocking=False)[0]
            maps[mem] = low, memory
        for value, array in arrays.items():
            low, memory = maps[array.mem]
            start = array.offset - low
            views[value] = memory[start:start + array.nbytes].view(array.dtype).reshape(
                array.shape)
        return views, [memory.base for _, memory in maps.values()]

    def _on_host(self, op, values) -> None:
        """Run `op` with the numpy backend: operands read back, outs written to the device
        (in place on the host's CPU)."""
        if op.name in ("buffer.compute", "kernel.generic") and (
                self._relayout(op, values) or self._generic_on_device(op, values)):
            return

        timing = self._events   # profiled: the host's time, transfers in, is the op's
        if timing is not None:
            self._synced()   # (not the device work queued before it)
            start = time.perf_counter()
        if self._host is None:
            self._host = Executor()
            # (a host op's neighbours run on the device: no layout shared with them)
            self._host.CHANNELS_LAST_CHAINS = False
        host_executor = self._host
        host_executor.begin_run(self._host_stats)   # (its stats are not read)
        host_executor.errors_ignored = ignoring_errors()   # (set once by the run)
        operands, ins, outs, workspaces, name = self._host_operands(op)
        mapped, maps = self._mapped(operands, values) if self.device.limits.host_cpu \
            else ({}, ())
        host: dict = {}
        moved = 0
        reading = False
        for value in operands:
            array = values[value]
            if isinstance(array, self.PENDING):
                host[value] = HostPending(array.type, value)
            elif isinstance(array, self.DEVICE_ARRAY):
                if array.host is not None:
                    # a constant: the array uploaded, not a download, so that what the
                    # numpy kernels cache by the array (int8 weights' float copies) is
                    # made once, not every run
                    host[value] = array.host
                elif value in mapped:
                    host[value] = mapped[value]
                elif (value in workspaces or value in outs) and value not in ins:
                    host[value] = np.empty(array.shape, array.dtype)  # written, not read
                else:
                    host[value] = self._download(array, wait=False)
                    moved += array.nbytes
                    reading = True
            else:
                host[value] = array
        if reading or mapped:
            self._synced()   # one wait for all the operands read (or in place)
        try:
            try:
                host_executor._execute(op, host, 0)
            finally:
                host_executor.end_run()
            for value in outs:
                result = host[value]
                target = values[value]
                if isinstance(target, self.PENDING):
                    target = self._materialize(target, result.shape, values)
                if tuple(result.shape) != target.shape:
                    raise op.error(f"produced shape {tuple(result.shape)} for a "
                                   f"{target.shape} buffer")
                view = mapped.get(value)
                if view is None:
                    self._write(result, target)
                    moved += result.nbytes
                elif result is not view:   # (a kernel that made its result anew)
                    np.copyto(view, result)
        finally:
            for memory_map in maps:
                self._idle = False
                memory_map.release(self.queue)   # (queued: the kernels after it wait)
        self.stats.host_ops[name] = self.stats.host_ops.get(name, 0) + 1
        self.stats.transfer_bytes += moved
        if timing is not None:
            timing.host_seconds += time.perf_counter() - start


class _Derived:
    """A launch's "derived" buffer group: (name, in index) -> the executor's `derived`."""

    __slots__ = ("executor", "ins")

    def __init__(self, executor, ins):
        self.executor, self.ins = executor, ins

    def __getitem__(self, key):
        name, index = key
        return self.executor.derived(name, self.ins[index])
