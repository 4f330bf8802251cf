"""Execute buffer-level IR with numpy, inside real arenas.

Every buffer is a numpy view into a uint8 arena (arena.py): `buffer.alloc` allocates one
arena (its `buffer.dealloc` releases it); an alloc with `?` dims and no size operands is
allocated when the op that writes it first knows the shape; `memory.arena @pool` is one
arena of the pool's size per run (the last run's again when nothing outside the executor
still sees it: see CACHE_VIEWS) and `buffer.view` a typed view at a byte offset of it
(with bounded `?` dims, `#bounds<...>`, a slot planned at the bounds: the op writing it
views it at the actual shape, which must fit the bounds, else an error names the buffer);
`buffer.reshape` is a view of the same memory (never a copy); `buffer.constant` is a
read-only array; `buffer.compute` writes the graph op's results into its out views
(kernels.py: `out=` where numpy can, else the reference kernel and one counted copy).

Inputs are bound without a copy when they are C-contiguous arrays of the right dtype
(read-only: an op that writes one fails loudly), and copied into an arena only when the
IR writes an input (`bufferize{inputs-as-activations}`), or when it is misaligned. Outputs
are copied out of their arenas, except into the caller's arrays given as `outputs=`: those
become the memory of the returned buffers when they can (no copy; session.py uses this),
else get one counted copy; a pool's arena is then allocated only up to the end of its
other views (not at all when the caller's arrays are all it holds, as `@io` usually is). With `poison=True` an arena is filled with poison when it is allocated and when
its `buffer.dealloc` runs, and a view of a pool when its liveness ends (its last use,
through aliases), so a buffer used past its end reads NaN (floats) or 0x5A bytes.
Two views of a pool are two buffers even where their bytes overlap: data never flows
from one to the other (planned IR spells an alias as a `buffer.reshape` of one view), so
the end of one poisons bytes the other may only read after writing them.
"""

from __future__ import annotations

import sys
import threading
import weakref
from functools import partial

import numpy as np

from palimpsest.backends.host import HUGE_PAGES_FROM, huge_page_copy
from palimpsest.backends.loop import (ExecutorLoop, FunctionPlan, Pending, arguments_read,
                                      check_bounds)
from palimpsest.backends.numpy.arena import (
    Arena, RunStats, byte_view, dtype_of, poison as poison_array,
)
from palimpsest.backends.numpy.kernels import FAST, ComputeInfo, infer_out_shapes
from palimpsest.dialects.graph.reference._common import is_run_input, mark_run_input

# buffer.constant op -> (its attribute, the read-only array): shared by every executor
_CONSTANTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

_Pending = Pending  # the loop's (backends/loop.py)
_execute_kernel = None  # kernel_ops.execute_kernel, imported at the first kernel


class Executor(ExecutorLoop):
    """One run: arenas, stats, and the values of the functions it executes (the loop is
    backends/loop.py; these are the numpy backend's hooks)."""

    NAME = "numpy"
    # convs next to each other may pass their data in channels-last layout
    # (kernel_ops_channels_last.py); not in the OpenCL backend's host executor
    CHANNELS_LAST_CHAINS = True
    LEVELS = "buffer-level IR: the buffer, memory and func dialects"
    ARRAY = np.ndarray
    CAPTURED_VALUES = True   # (kernel_ops._Replay reads none; every other entry its op's)

    def __init__(self, poison: bool = False, stats: RunStats | None = None):
        super().__init__(poison, stats if stats is not None else RunStats())
        self.constants = _CONSTANTS
        self.pools: dict = {}         # pool name -> Arena
        self.infos: dict = {}         # buffer.compute -> (ComputeInfo, ins, outs, FAST path)
        self.fast_calls: dict = {}    # buffer.compute -> its last fast call's arrays
        self.bound: dict = {}         # output buffer value -> the caller's array (run(outputs=))
        self.pool_views: dict = {}    # memory.arena -> its views' (value, offset, bytes)
        self.pool_dtypes: dict = {}   # memory.arena -> its result's element dtype
        self.errors_ignored = False   # inside `run`: numpy's floating-point errors ignored
        self.kept: dict = {}          # pool name -> the last run's Arena (see CACHE_VIEWS)
        self.kernel_entries: dict = {}   # kernel op -> kernel_ops._Bound, at its first call
        self.channels_last_chains: dict = {}   # id(block) -> (block, its convs' layouts)
        self.input_reshapes: dict = {}   # buffer.reshape of an input -> (input view, its view)

    @property
    def arenas(self) -> dict:
        """The run's allocations (alloc value -> Arena)."""
        return self.allocations

    @arenas.setter
    def arenas(self, allocations: dict) -> None:
        self.allocations = allocations

    # -- entry points --------------------------------------------------------------------------
    def begin_run(self, stats: RunStats) -> None:
        """Start a run of a kept executor: fresh memory (results are views of a run's
        arenas, which no later run reuses while they or views of them are alive) and fresh
        stats; op and function info kept."""
        self.stats = stats
        self.pools, self.allocations = {}, {}

    def end_run(self) -> None:
        self.pools, self.allocations = {}, {}

    # The pools' arenas of the last run are kept (`kept`) and reused by the next run when
    # nothing outside the executor sees their memory any more: the loop then finds the
    # same arena arrays and binds the views and reshapes it kept from the last run
    # (CACHE_VIEWS) instead of making them again. `run` records, once the results are
    # out, how many references to each arena's memory are the executor's own (its kept
    # views: every numpy view points to the base array that owns the memory); a later run
    # reuses the arena only when that is still all (the caller dropped every result and
    # every view of one: results are handed out as fresh views, never as the kept ones).
    CACHE_VIEWS = True

    def run(self, func, inputs: dict, outputs: dict | None = None,
            copy_outputs: bool = True) -> dict:
        """`outputs` (name -> array): the caller's arrays to write the results into; each
        one that is C-contiguous, aligned, writeable, of the result's dtype and size and
        overlaps no input becomes the memory of the buffer the function returns (no copy),
        any other is filled with one counted copy. `copy_outputs=False` returns the other
        results as they are (fresh views of this run's arenas, which no later run reuses
        while they or views of them are alive)."""
        self.bound = {}
        pools = None
        try:
            with ErrorsIgnored():   # once per run (or model), not once per kernel
                self.errors_ignored = True
                named = super().run(func, inputs, outputs, copy_outputs)
            pools = self.pools
        finally:
            self.errors_ignored = False
            self.bound = {}
        if pools is not None and not outputs:
            self._keep(pools, named.values())
        return named

    def run_bound(self, func, plan: FunctionPlan, arrays: list) -> list:
        """`run(func, ..., copy_outputs=False)` with no `outputs` for a caller that has
        checked `arrays` itself (numpy arrays of exactly `plan.input_checks`' dtypes and
        shapes, in argument order) and has no profiler: the results as a list (fresh
        views, as `run` hands them out). The lean path of a control-flow segment's run
        (segments.py)."""
        self.bound = {}
        self.caching = self.CACHE_VIEWS
        bind = self.bind_input
        bound = [bind(index, array, plan) for index, array in enumerate(arrays)]
        try:
            with ErrorsIgnored():
                self.errors_ignored = True
                results = self.run_function(func, bound)
        finally:
            self.errors_ignored = False
        results = [r.view() if isinstance(r, np.ndarray) else r for r in results]
        self._keep(self.pools, results)
        return results

    def _keep(self, pools: dict, handed) -> None:
        """Keep this run's pool arenas for the next run, each with the count of the
        references to its memory that are the executor's own (all there are now, less
        the results)."""
        kept = {}
        for name, arena in pools.items():
            raw = arena.data.base
            results = sum(1 for r in handed if isinstance(r, np.ndarray) and r.base is raw)
            arena.baseline = sys.getrefcount(raw) - 2 - results  # less `raw` and the arg
            kept[name] = arena
        self.kept = kept

    def bind_input(self, index: int, array, plan: FunctionPlan):
        written = index in plan.written_args
        # the caller handing the same array again (a streaming loop's buffers, refilled
        # in place) gets the same read-only view of it: the kernels reading it keep their
        # recorded calls (kernel_ops.record) instead of making them each run, and the
        # captured program stays (loop.py checks the inputs it was captured with)
        last = plan.input_views.get(index)   # (the array, its view; the array kept by the
        if last is not None and last[0] is array and not written \
                and last[1].shape == array.shape and last[1].strides == array.strides \
                and last[1].dtype == array.dtype:   # view: never resized, same memory,
            return last[1]                         # contiguous and aligned as it was)
        if written or not array.flags.c_contiguous or not array.flags.aligned:
            arena = Arena(array.nbytes, self.stats, poison=False)
            copy = arena.typed(array.shape, array.dtype)
            np.copyto(copy, array)
            self.stats.io_bytes += array.nbytes
            return copy
        view = array.view()
        view.flags.writeable = False
        mark_run_input(view)   # (read-only, yet no constant: nothing made once from it)
        plan.input_views[index] = (array, view)
        return view

    def read_output(self, name: str, array, user, copy_outputs: bool):
        if user is not None and isinstance(array, np.ndarray):
            if not (array.size == user.size and array.size and
                    array.__array_interface__["data"][0] == user.ctypes.data
                    and array.dtype == user.dtype and array.flags.c_contiguous):
                if array.shape != user.shape:
                    raise ValueError(f"output '{name}': the result has shape "
                                     f"{array.shape}, the given array {user.shape}")
                np.copyto(user, array)
                self.stats.io_bytes += array.nbytes
            return user
        if isinstance(array, np.ndarray) and copy_outputs:
            self.stats.io_bytes += array.nbytes
            return np.array(array, copy=True)
        if isinstance(array, np.ndarray):
            return array.view()   # the caller's own object, never one the executor keeps
        return array

    def prepare_outputs(self, func, plan: FunctionPlan, inputs: list, outputs: dict) -> None:
        from palimpsest.backends.binding import output_names

        for name, root in zip(output_names(func), plan.output_roots):
            user = outputs.get(name)
            if root is None or user is None:
                continue
            if not isinstance(user, np.ndarray):
                raise ValueError(f"output '{name}': expected a numpy array, got "
                                 f"{type(user).__name__}")
            dtype = dtype_of(root.type.element_type)
            if (user.dtype != dtype or not user.flags.c_contiguous or not user.flags.aligned
                    or not user.flags.writeable
                    or any(np.may_share_memory(user, a) for a in inputs)):
                continue  # filled with one copy after the run
            self.bound[root] = user

    def _bound_as(self, value, shape):
        """The caller's output array bound to `value`, viewed at `shape`; None when there
        is none or its size does not fit."""
        user = self.bound.get(value)
        if user is None or user.size != int(np.prod(shape, dtype=np.int64)):
            return None
        return user.reshape(tuple(shape))

    def released(self, value) -> bool:
        return value in self.bound  # the caller's output array

    # -- memory hooks ----------------------------------------------------------------------------
    def allocate(self, op, value, shape, type_) -> np.ndarray:
        if self.bound:
            user = self._bound_as(value, shape)
            if user is not None:
                return user
        dtype = dtype_of(type_.element_type)
        count = 1
        for d in shape:
            count *= d
        arena = Arena(count * dtype.itemsize, self.stats, self.poison)
        self.stats.dynamic_allocations += 1
        self.stats.dynamic_bytes += arena.nbytes
        self.allocations[value] = arena
        return arena.typed(tuple(shape), dtype)

    def slot(self, value, source, offset: int, shape, type_) -> np.ndarray:
        if self.bound:
            user = self._bound_as(value, shape)
            if user is not None:
                return user
        return byte_view(source, offset, shape, dtype_of(type_.element_type))

    def view(self, op, value, source, offset: int, type_) -> np.ndarray:
        if self.bound:
            user = self._bound_as(value, type_.shape)
            if user is not None:
                return user
        try:
            return byte_view(source, offset, type_.shape, dtype_of(type_.element_type),
                             type_.strides)
        except (ValueError, TypeError) as error:
            raise op.error(f"cannot view {type_} at byte {offset} of a {source.nbytes}-byte "
                           f"buffer: {error}") from None

    def reshape(self, op, source) -> np.ndarray:
        last = self.input_reshapes.get(op)
        if last is not None and last[0] is source:
            return last[1]
        view = source.view()
        try:
            view.shape = tuple(-1 if d is None else d for d in op.results[0].type.shape)
        except (AttributeError, ValueError) as error:
            raise op.error(f"cannot view a buffer of shape {source.shape} as "
                           f"{op.results[0].type}: {error}") from None
        if is_run_input(source):   # an input bound again: its reshape made once too, so
            mark_run_input(view)   # the kernels reading it are captured (bind_input)
            self.input_reshapes[op] = (source, view)
        return view

    def constant(self, host) -> np.ndarray:
        # (a large one read whole by a vector-matrix product each step: host.py)
        array = huge_page_copy(host) if host.nbytes >= HUGE_PAGES_FROM else host.view()
        array.flags.writeable = False
        return array

    def copy(self, source, target) -> None:
        np.copyto(target, source)

    def poison_array(self, array) -> None:
        poison_array(array)

    def pool(self, op, pool_name: str, size: int) -> np.ndarray:
        arena = self.pools.get(pool_name)
        dtype = self.pool_dtypes.get(op)
        if dtype is None:   # (a type's hash is a Python call: once per arena op)
            dtype = self.pool_dtypes[op] = dtype_of(op.results[0].type.element_type)
        if arena is None:
            if self.bound:
                needed = self._pool_needed(op, size)
                if needed < size:  # the views past `needed` are the caller's output arrays
                    needed = -(-needed // dtype.itemsize) * dtype.itemsize
                    if not needed:
                        return np.empty(0, dtype)  # every view is the caller's: no arena
                    # not kept under the pool's name: it fits this arena op's views only
                    arena = Arena(needed, self.stats, self.poison)
                    self.stats.static_bytes += needed
                    return arena.data.view(dtype)
            kept = self.kept.pop(pool_name, None)
            if kept is not None and kept.nbytes == size and kept.unshared():
                kept.renew(self.stats, self.poison)
                arena = self.pools[pool_name] = kept
            else:
                arena = self.pools[pool_name] = Arena(size, self.stats, self.poison)
            self.stats.static_bytes += size
            typed = arena.typed_views.get(dtype)
            if typed is None:
                typed = arena.typed_views[dtype] = arena.data.view(dtype)
            return typed
        return arena.data.view(dtype)

    def _pool_needed(self, op, size: int) -> int:
        """The bytes of `op`'s arena that its views use, leaving out the views the
        caller's output arrays replace (`run(outputs=...)`); `size` when a user of the
        arena is not a view at a static offset and shape."""
        views = self.pool_views.get(op)
        if views is None:
            views = self.pool_views[op] = _pool_views(op)
        if views is False:
            return size
        needed = 0
        for value, offset, nbytes in views:
            if self._bound_as(value, value.type.shape) is None:
                needed = max(needed, offset + nbytes)
        return needed

    # -- ops hooks -----------------------------------------------------------------------------------
    def run_kernel(self, op, values) -> None:  # kernel level: backends/numpy/kernel_ops.py
        self.kernel_runner()(op, values)

    def kernel_runner(self):
        global _execute_kernel
        if _execute_kernel is None:
            from palimpsest.backends.numpy.kernel_ops import execute_kernel
            _execute_kernel = execute_kernel
        return partial(_execute_kernel, self)   # (a local of the run: no cycle kept)

    def capture(self, plan, program: list, values: dict):
        from palimpsest.backends.numpy.kernel_ops import capture

        return capture(self, program, values)

    def arguments_captured(self, func, program: list, captured, arrays: list) -> tuple:
        return arguments_read(func, program, captured, arrays)   # (replays hold arrays)

    def run_generic(self, op, values) -> None:
        self._compute(op, values)

    def generic_replay(self, op, values):
        """A captured program's handler of buffer.compute / kernel.generic `op` whose last
        call took its fast path on the arrays `values` holds now (the same objects), else
        None: the fast path called on them again, none of `_compute`'s lookups (its
        checks are the fast path's own: one that declines sends the op to `_compute`)."""
        last = self.fast_calls.get(op)
        entry = self.infos.get(op)
        if last is None or entry is None:
            return None
        ins, outs, inputs = last
        info, in_values, out_values, fast = entry
        run = getattr(fast, "run", None)   # (one out: kernels.fast's; others are not kept)
        if run is None or len(ins) != len(in_values) or len(outs) != len(out_values) or any(
                values.get(v) is not a for v, a in zip(in_values + out_values, ins + outs)):
            return None
        planned = getattr(fast, "calls", None)
        if planned is not None:   # its numpy calls, replayed with the kernels' (merged)
            from palimpsest.backends.numpy.kernel_ops import replay_of

            calls = planned(info.attrs, outs[0], *inputs)
            if calls is not None:
                return replay_of(op, calls)
        return _FastReplay(run, inputs, info.attrs, outs[0])

    # -- buffer.compute ----------------------------------------------------------------------------
    def _compute(self, op, values) -> None:
        entry = self.infos.get(op)
        if entry is None:   # (op.ins and op.outs read the operand segments on every call)
            info = ComputeInfo(op)
            entry = self.infos[op] = (info, tuple(op.ins), tuple(op.outs),
                                      FAST.get(info.name))
        info, in_values, out_values, fast = entry
        if info.graph_class is None:
            raise op.error(f"computes unknown op '{info.name}'")
        ins = [values[v] for v in in_values]
        for array in ins:
            if isinstance(array, _Pending):   # (an error naming it)
                ins = [self._materialized(op, values, v) for v in in_values]
        inputs = info.kernel_inputs(ins)
        outs = [values[v] for v in out_values]
        pending = any(isinstance(o, _Pending) for o in outs)
        if pending:
            shapes = infer_out_shapes(info, ins, [v.type for v in in_values])
            if shapes is not None:
                outs = [self._materialize(o, s, values) if isinstance(o, _Pending) else o
                        for o, s in zip(outs, shapes)]
                pending = any(isinstance(o, _Pending) for o in outs)
        if fast is not None and not pending:
            try:
                if self.errors_ignored:   # (by `run`, once)
                    done = fast(inputs, info.attrs, outs)
                else:
                    with np.errstate(all="ignore"):
                        done = fast(inputs, info.attrs, outs)
            except (ValueError, TypeError, IndexError) as error:
                raise op.error(f"failed at run time: {error}") from None
            if done:
                self.fast_calls[op] = (ins, outs, inputs)   # (for `generic_replay`)
                return
        from palimpsest.dialects.graph.reference import KERNELS

        kernel = KERNELS.get(info.name)
        if kernel is None:
            raise op.error(f"computes '{info.name}', which has no reference implementation")
        try:
            results = kernel(inputs, info.attrs, len(outs))
        except (ValueError, IndexError, TypeError) as error:
            raise op.error(f"failed at run time: {error}") from None
        if len(results) != len(outs):
            raise op.error(f"'{info.name}' produced {len(results)} results for "
                           f"{len(outs)} out buffers")
        for index, (result, out) in enumerate(zip(results, outs)):
            result = np.asarray(result)
            if isinstance(out, _Pending):
                out = self._materialize(out, result.shape, values)
            if result.shape != out.shape or result.dtype != out.dtype:
                raise op.error(f"'{info.name}' produced {result.dtype} {list(result.shape)} "
                               f"for out #{index}, a {out.dtype} {list(out.shape)} buffer")
            if result is out or (result.ctypes.data == out.ctypes.data
                                 and result.strides == out.strides):
                continue
            if any(np.may_share_memory(result, x) for x in ins):
                self.stats.view_copy_bytes += result.nbytes
            else:
                self.stats.temporary_bytes += result.nbytes
                self.stats.temporary_ops[info.name] = self.stats.temporary_ops.get(info.name, 0) + 1
            np.copyto(out, result)


class _FastReplay:
    """A captured buffer.compute / kernel.generic op: its fast path on the same arrays
    (`run(attrs, out, *inputs)`, which fitted them: kernels.fast)."""

    __slots__ = ("run", "inputs", "attrs", "out")

    def __init__(self, run, inputs, attrs, out):
        self.run, self.inputs, self.attrs, self.out = run, inputs, attrs, out

    def __call__(self, executor, op, values, depth) -> None:
        try:
            done = self.run(self.attrs, self.out, *self.inputs)
        except (ValueError, TypeError, IndexError) as error:
            raise op.error(f"failed at run time: {error}") from None
        if not done:
            executor._compute(op, values)


class _Depth(threading.local):
    depth = 0


_IGNORING = _Depth()


def ignoring_errors() -> bool:
    """Whether an `ErrorsIgnored` block is open (this thread)."""
    return _IGNORING.depth > 0


class ErrorsIgnored:
    """numpy's floating-point errors ignored inside (`with ErrorsIgnored(): ...`), the
    error state set once however runs nest: a model cut at its control flow runs a
    segment's executor per segment (segments.py), inside the model's own block."""

    __slots__ = ("state",)

    def __enter__(self):
        self.state = None
        if not _IGNORING.depth:
            self.state = np.errstate(all="ignore")
            self.state.__enter__()
        _IGNORING.depth += 1

    def __exit__(self, *exc) -> None:
        _IGNORING.depth -= 1
        if self.state is not None:
            self.state.__exit__(*exc)


def _pool_views(arena) -> list | bool:
    """[(view, byte offset, bytes)] of the `buffer.view`s of a `memory.arena`; False when
    it has another user, or a view at a dynamic offset, with `?` dims or strides."""
    views = []
    for user in arena.results[0].users():
        type_ = user.results[0].type if user.name == "buffer.view" else None
        if type_ is None or "offset" not in user.properties or type_.strides is not None \
                or type_.nbytes() is None:
            return False
        views.append((user.results[0], user.properties["offset"].value, type_.nbytes()))
    return views


def run(func, inputs: dict, *, poison: bool = False, stats: RunStats | None = None,
        outputs: dict | None = None, profiler=None) -> dict:
    """Run buffer-level `func` on named inputs; named output arrays (copies, or the
    caller's `outputs` arrays written in place). `profiler`: a backends/profile.py
    Profiler that times the run's ops."""
    executor = Executor(poison, stats)
    executor.profiler = profiler
    return executor.run(func, inputs, outputs)


def run_with_stats(func, inputs: dict, *, poison: bool = False) -> tuple[dict, RunStats]:
    stats = RunStats()
    outputs = Executor(poison, stats).run(func, inputs)
    return outputs, stats


__all__ = ["ErrorsIgnored", "Executor", "RunStats", "check_bounds", "run", "run_with_stats"]
