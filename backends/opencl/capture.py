"""The OpenCL executor's captured programs: a mixin of `OpenCLExecutor` (executor.py).

The pools' views and reshapes and the constants are the same
DeviceArrays from one run to the next (CACHE_VIEWS: `pool` hands back the same array
while the pool keeps its cl.Buffer), and from the second such run the loop asks for a
capture (backends/loop.py): each run of consecutive kernel ops that runs on the device,
every buffer of a static shape, becomes one `_Replay` whose launches each have a
cl.Kernel of their own with the arguments set once (`Device.bind`), so a run only
enqueues them; the arguments of a buffer made during the run (an input, a reshape of
it, an alloc) are set again at each replay from the run's values. What a small model's
run spent on the host per launch (operands, sizing, the launch lookup, building and
setting the arguments: ~11 us with the enqueue) is ~2.5 us. Host fallbacks stay as they
are; a poisoned run is never captured; a pool made again drops the capture.
"""

from __future__ import annotations

from palimpsest.backends.numpy.arena import dtype_of
from palimpsest.backends.numpy.kernel_ops import kernel_info
from palimpsest.backends.opencl.kernels.base import Unsupported, strides_of
from palimpsest.dialects.buffer import BufferType


class CapturedPrograms:
    """Needs the executor's device, launches, operands, poison and cl module."""

    def capture(self, plan, program: list, values: dict):
        """The lean `program` (its fixed views bound in `values`) with each run of
        consecutive kernel ops that run on the device, every buffer of a static shape,
        replaced by one `_Replay` of their launches, each with a cl.Kernel of its own
        (runtime.py `Device.bind`): the arguments of a fixed buffer (a view or reshape
        of a pool, a constant: the same DeviceArray each lean run) and the scalars set
        once; a buffer made during the run (an input, a reshape of it, an alloc) read
        from the run's values and set at each replay. None when no op is captured. A
        host fallback, an op with a `?`-dim buffer stays as it is; with `poison` nothing
        is captured (a run poisons views as their liveness ends)."""
        if self.poison:
            return None
        fixed = {id(a) for a in (plan.fixed_values or {}).values()}
        fixed.update(id(a) for a in (plan.constants or {}).values())
        captured, replay = [], None
        for entry in program:
            bound = self._bound(entry[1], values, fixed) if entry[0] is None else None
            if bound is None:
                captured.append(entry)
                replay = None
                continue
            if replay is None:
                replay = _Replay(self.cl)
                captured.append((replay, entry[1], entry[2]))
            replay.add(entry[1], bound)
        return captured if len(captured) < len(program) else None

    def _bound(self, op, values: dict, fixed: set):
        """The launches of kernel op `op` bound once (`Device.bind`) with the buffers of
        `fixed` (ids of fixed DeviceArrays) set, the others left as holes, each with its
        value: [(kernel, global size, local size, args, [(position, value)])]; None when
        a buffer not fixed has a `?` dim or the op runs on the host."""
        op_ins, op_outs, op_workspaces = self.operands(op)
        arrays = {}
        for value in op_ins + op_outs + op_workspaces:
            array = values.get(value)
            if id(array) in fixed:
                arrays[value] = array
                continue
            type_ = value.type
            if not isinstance(type_, BufferType) or None in type_.shape \
                    or (type_.strides is not None
                        and tuple(type_.strides) != strides_of(type_.shape)):
                return None
        shapes, dtypes = [], []
        for value in op_ins:
            array = arrays.get(value)
            shapes.append(array.shape if array is not None else tuple(value.type.shape))
            dtypes.append(array.dtype if array is not None
                          else dtype_of(value.type.element_type))
        launches = self.launches.get((op, tuple(shapes), tuple(dtypes)))
        if launches is None or isinstance(launches, Unsupported):
            return None
        groups = {"in": op_ins, "out": op_outs,
                  "ws": dict(zip(kernel_info(op).roles, op_workspaces))}

        def buffer(ref):
            array = arrays.get(groups[ref.group][ref.key])
            return None if array is None else (array.mem, array.offset // array.dtype.itemsize)

        bound = []
        for launch in launches:
            kernel, global_size, local_size, args, holes = self.device.bind(launch, buffer)
            bound.append((kernel, global_size, local_size, args,
                          [(position, groups[ref.group][ref.key]) for position, ref in holes]))
        return bound


class _Replay:
    """Captured kernel ops (`OpenCLExecutor.capture`), as the program's handler: their
    launches, each a (cl.Kernel, global size, local size) with its fixed arguments set
    once, enqueued as they are (on the executor's queue of the moment); a launch with
    holes (buffers made during the run) first gets them from the run's values
    (`patches`: kernel, argument list, [(position, value)]) and its arguments set."""

    __slots__ = ("cl", "launches", "patches", "ops")

    def __init__(self, cl):
        self.cl = cl
        self.launches: list = []
        self.patches: list = []
        self.ops: list = []

    def add(self, op, bound: list) -> None:
        self.ops.append(op)
        for kernel, global_size, local_size, args, holes in bound:
            if holes:
                self.patches.append((kernel, args, holes))
            self.launches.append((kernel, global_size, local_size))

    def __call__(self, executor, op, values, depth) -> None:
        cl = self.cl
        kernel = None
        try:
            for kernel, args, holes in self.patches:   # (each launch has its own kernel)
                for position, value in holes:
                    array = values[value]
                    args[position] = array.mem
                    args[position + 1] = array.offset // array.dtype.itemsize
                kernel.set_args(*args)
            enqueue, queue = cl.enqueue_nd_range_kernel, executor.queue
            executor._idle = False
            for kernel, global_size, local_size in self.launches:
                enqueue(queue, kernel, global_size, local_size)
        except cl.Error as error:   # (each launch ran as it is before it was captured)
            raise RuntimeError(f"OpenCL launch of captured kernel '{kernel.function_name}' "
                               f"failed on {executor.device.name}: {error}") from None
        executor.stats.device_launches += len(self.launches)
