"""Execute buffer-level IR with numpy, inside real arenas.

Every buffer is a numpy view into a uint8 arena (arena.py): `buffer.alloc` allocates one
arena (its `buffer.dealloc` releases it); an alloc with `?` dims and no size operands is
allocated when the op that writes it first knows the shape; `memory.arena @pool` is one
arena of the pool's size per run and `buffer.view` a typed view at a byte offset of it
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

import weakref

import numpy as np

from palimpsest.backends.binding import bind_inputs, output_names
from palimpsest.backends.numpy.arena import (
    Arena, RunStats, byte_view, dtype_of, poison as poison_array,
)
from palimpsest.backends.numpy.kernels import FAST, ComputeInfo, infer_out_shapes
from palimpsest.dialects.buffer import BufferType
from palimpsest.ir.diagnostics import DiagnosticError
from palimpsest.ir.opdef import WRITE, IsTerminator
from palimpsest.ir.verifier import lookup_symbol

_CONSTANTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class _Pending:
    """An alloc with `?` dims and no sizes, or a view of a pool with bounded `?` dims:
    memory (or the view of its slot, `slot` = (byte array, offset)) comes when its shape
    is known."""

    __slots__ = ("type", "value", "slot")

    def __init__(self, type_: BufferType, value, slot=None):
        self.type = type_
        self.value = value
        self.slot = slot


class Executor:
    """One run: arenas, stats, and the values of the functions it executes."""

    def __init__(self, poison: bool = False, stats: RunStats | None = None):
        self.poison = poison
        self.stats = stats if stats is not None else RunStats()
        self.pools: dict = {}         # pool name -> Arena
        self.arenas: dict = {}        # alloc value -> Arena
        self.infos: dict = {}         # buffer.compute -> ComputeInfo
        self.plans: dict = {}         # func -> _FunctionPlan
        self.bound: dict = {}         # output buffer value -> the caller's array (run(outputs=))
        self.pool_views: dict = {}    # memory.arena -> its views' (value, offset, bytes)

    # -- entry points --------------------------------------------------------------------------
    def begin_run(self, stats: RunStats) -> None:
        """Start a run of a kept executor: fresh memory (results are views of a run's
        arenas, which no later run reuses) and fresh stats; op and function info kept."""
        self.stats = stats
        self.pools, self.arenas = {}, {}

    def end_run(self) -> None:
        self.pools, self.arenas = {}, {}

    def run(self, func, inputs: dict, outputs: dict | None = None,
            copy_outputs: bool = True) -> dict:
        """`outputs` (name -> array): the caller's arrays to write the results into; each
        one that is C-contiguous, aligned, writeable, of the result's dtype and size and
        overlaps no input becomes the memory of the buffer the function returns (no copy),
        any other is filled with one counted copy. `copy_outputs=False` returns the other
        results as they are (views of this run's arenas, which no later run reuses)."""
        arrays = bind_inputs(func, inputs)
        plan = self._plan(func)
        self.bound = {}
        if outputs:
            self._bind_outputs(func, plan, arrays, outputs)
        bound = []
        for index, array in enumerate(arrays):
            if index in plan.written_args or not array.flags.c_contiguous \
                    or not array.flags.aligned:
                arena = Arena(array.nbytes, self.stats, poison=False)
                copy = arena.typed(array.shape, array.dtype)
                np.copyto(copy, array)
                self.stats.io_bytes += array.nbytes
                bound.append(copy)
            else:
                view = array.view()
                view.flags.writeable = False
                bound.append(view)
        results = self.run_function(func, bound)
        self.bound = {}
        named = {}
        for name, array in zip(output_names(func), results):
            user = outputs.get(name) if outputs else None
            if user is not None and isinstance(array, np.ndarray):
                if not (array.size == user.size and array.size and
                        array.__array_interface__["data"][0] == user.ctypes.data
                        and array.dtype == user.dtype and array.flags.c_contiguous):
                    if array.shape != user.shape:
                        raise ValueError(f"output '{name}': the result has shape "
                                         f"{array.shape}, the given array {user.shape}")
                    np.copyto(user, array)
                    self.stats.io_bytes += array.nbytes
                named[name] = user
            elif isinstance(array, np.ndarray) and copy_outputs:
                named[name] = np.array(array, copy=True)
                self.stats.io_bytes += array.nbytes
            else:
                named[name] = array
        return named

    def _bind_outputs(self, func, plan, inputs: list, outputs: dict) -> None:
        names = output_names(func)
        unknown = [n for n in outputs if n not in names]
        if unknown:
            raise ValueError(f"unknown output '{unknown[0]}' (the function returns: "
                             f"{', '.join(names)})")
        for name, root in zip(names, plan.output_roots):
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

    def run_function(self, func, arrays: list, depth: int = 0) -> list:
        if depth > 64:
            raise func.error("call depth exceeds 64 (recursion?)")
        if func.is_declaration:
            raise func.error("is a declaration: there is no body to run")
        plan = self._plan(func)
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
            for dying in plan.poison_after.get(op, ()):
                if self.poison and isinstance(values.get(dying), np.ndarray):
                    poison_array(values[dying])
        raise func.error("has no func.return")

    # -- per function, once ---------------------------------------------------------------------
    def _plan(self, func) -> "_FunctionPlan":
        plan = self.plans.get(func)
        if plan is None:
            plan = self.plans[func] = _FunctionPlan(func)
        return plan

    # -- one op ------------------------------------------------------------------------------------
    def _execute(self, op, values: dict, depth: int) -> None:
        name = op.name
        if name == "buffer.compute":
            self._compute(op, values)
        elif name == "buffer.alloc":
            self._alloc(op, values)
        elif name == "buffer.dealloc":
            self._dealloc(op, values)
        elif name == "buffer.constant":
            values[op.results[0]] = self._constant(op)
        elif name == "buffer.reshape":
            values[op.results[0]] = self._reshape(op, values)
        elif name == "buffer.view":
            values[op.results[0]] = self._view(op, values)
        elif name == "buffer.copy":
            self._copy(op, values)
        elif name == "buffer.dim":
            source = self._materialized(op, values, op.operands[0])
            values[op.results[0]] = int(source.shape[op.properties["index"].value])
        elif name == "memory.arena":
            values[op.results[0]] = self._pool(op)
        elif name == "func.call":
            callee = lookup_symbol(op, op.callee)
            results = self.run_function(callee, [values[v] for v in op.operands], depth + 1)
            for result, array in zip(op.results, results, strict=True):
                values[result] = array
        elif name.startswith("kernel."):  # kernel level: backends/numpy/kernel_ops.py
            from palimpsest.backends.numpy.kernel_ops import execute_kernel
            execute_kernel(self, op, values)
        else:
            raise DiagnosticError(f"the numpy backend cannot run '{name}' (buffer-level IR: "
                                  f"the buffer, memory and func dialects)", op.loc)

    def _materialized(self, op, values, value) -> np.ndarray:
        array = values[value]
        if isinstance(array, _Pending):
            raise op.error(f"reads a buffer that was never written ({value.type})")
        return array

    def _new_arena(self, shape, type_: BufferType) -> tuple[Arena, np.ndarray]:
        dtype = dtype_of(type_.element_type)
        count = 1
        for d in shape:
            count *= d
        arena = Arena(count * dtype.itemsize, self.stats, self.poison)
        self.stats.dynamic_allocations += 1
        self.stats.dynamic_bytes += arena.nbytes
        return arena, arena.typed(tuple(shape), dtype)

    def _alloc(self, op, values) -> None:
        type_ = op.results[0].type
        sizes = iter(values[v] for v in op.operands)
        if None in type_.shape and not op.operands:
            values[op.results[0]] = _Pending(type_, op.results[0])
            return
        shape = tuple(d if d is not None else int(next(sizes)) for d in type_.shape)
        if any(d < 0 for d in shape):
            raise op.error(f"has a negative size: {shape}")
        if self.bound:
            user = self._bound_as(op.results[0], shape)
            if user is not None:
                values[op.results[0]] = user
                return
        arena, array = self._new_arena(shape, type_)
        self.arenas[op.results[0]] = arena
        values[op.results[0]] = array

    def _materialize(self, pending: _Pending, shape, values) -> np.ndarray:
        if pending.type.bounds is not None:
            check_bounds(pending, shape)
        if self.bound:
            user = self._bound_as(pending.value, shape)
            if user is not None:
                values[pending.value] = user
                return user
        if pending.slot is not None:
            source, offset = pending.slot
            array = byte_view(source, offset, shape, dtype_of(pending.type.element_type))
            values[pending.value] = array
            return array
        arena, array = self._new_arena(shape, pending.type)
        self.arenas[pending.value] = arena
        values[pending.value] = array
        return array

    def _dealloc(self, op, values) -> None:
        value = op.operands[0]
        arena = self.arenas.get(value)
        if arena is None:
            if value in self.bound:
                return  # the caller's output array
            if isinstance(values.get(value), _Pending):
                values.pop(value)  # never written: nothing was allocated
                return
            raise op.error("frees a buffer that no buffer.alloc of this run allocated")
        if not arena.live:
            raise op.error("frees a buffer twice")
        if self.poison:
            poison_array(values[value])
        arena.release()

    def _constant(self, op) -> np.ndarray:
        attr = op.properties["value"]
        cached = _CONSTANTS.get(op)
        if cached is not None and cached[0] is attr:
            return cached[1]
        try:
            array = np.asarray(attr.to_numpy())
        except OSError as error:
            raise op.error(f"cannot read its data: {error.strerror or error}: "
                           f"'{error.filename}'") from None
        except ValueError as error:
            raise op.error(f"cannot read its data: {error}") from None
        array = array.view()
        array.flags.writeable = False
        _CONSTANTS[op] = (attr, array)
        return array

    def _reshape(self, op, values) -> np.ndarray:
        source = self._materialized(op, values, op.operands[0])
        shape = op.results[0].type.shape
        if shape.count(None) > 1:
            raise op.error("needs a static shape, or one '?' dim, to reshape at run time")
        view = source.view()
        try:
            view.shape = tuple(-1 if d is None else d for d in shape)
        except (AttributeError, ValueError) as error:
            raise op.error(f"cannot view a buffer of shape {source.shape} as "
                           f"{op.results[0].type}: {error}") from None
        return view

    def _view(self, op, values) -> np.ndarray:
        source = self._materialized(op, values, op.operands[0])
        type_ = op.results[0].type
        if None in type_.shape:
            if not type_.is_bounded or "offset" not in op.properties:
                raise op.error(f"views with '?' dims need a bound on each and a static "
                               f"offset ({type_})")
            # a slot planned at the bounds: viewed once the writer knows the shape
            return _Pending(type_, op.results[0], (source, op.properties["offset"].value))
        if self.bound:
            user = self._bound_as(op.results[0], type_.shape)
            if user is not None:
                return user
        offset = op.properties["offset"].value if "offset" in op.properties \
            else int(values[op.operands[1]])
        try:
            return byte_view(source, offset, type_.shape, dtype_of(type_.element_type),
                             type_.strides)
        except (ValueError, TypeError) as error:
            raise op.error(f"cannot view {type_} at byte {offset} of a {source.nbytes}-byte "
                           f"buffer: {error}") from None

    def _copy(self, op, values) -> None:
        source = self._materialized(op, values, op.operands[0])
        target = values[op.operands[1]]
        if isinstance(target, _Pending):
            target = self._materialize(target, source.shape, values)
        if target.shape != source.shape:
            raise op.error(f"copies shape {source.shape} into shape {target.shape}")
        np.copyto(target, source)
        self.stats.copy_op_bytes += source.nbytes

    def _pool(self, op) -> np.ndarray:
        pool_name = op.properties["pool"].root
        arena = self.pools.get(pool_name)
        if arena is None:
            size = op.results[0].type.shape[0]
            if size is None:
                pool = lookup_symbol(op, op.properties["pool"])
                size_attr = pool.properties.get("size") if pool is not None else None
                if size_attr is None:
                    raise op.error(f"pool @{pool_name} has no size (plan the memory first)")
                size = size_attr.value
            dtype = dtype_of(op.results[0].type.element_type)
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
            arena = self.pools[pool_name] = Arena(size, self.stats, self.poison)
            self.stats.static_bytes += size
        dtype = dtype_of(op.results[0].type.element_type)
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

    # -- buffer.compute ----------------------------------------------------------------------------
    def _compute(self, op, values) -> None:
        from palimpsest.dialects.graph.reference import KERNELS

        info = self.infos.get(op)
        if info is None:
            info = self.infos[op] = ComputeInfo(op)
        if info.graph_class is None:
            raise op.error(f"computes unknown op '{info.name}'")
        ins = [self._materialized(op, values, v) for v in op.ins]
        inputs = info.kernel_inputs(ins)
        out_values = op.outs
        outs = [values[v] for v in out_values]
        if any(isinstance(o, _Pending) for o in outs):
            shapes = infer_out_shapes(info, ins, [v.type for v in op.ins])
            if shapes is not None:
                outs = [self._materialize(o, s, values) if isinstance(o, _Pending) else o
                        for o, s in zip(outs, shapes)]
        fast = FAST.get(info.name)
        if fast is not None and not any(isinstance(o, _Pending) for o in outs):
            try:
                with np.errstate(all="ignore"):
                    done = fast(inputs, info.attrs, outs)
            except (ValueError, TypeError, IndexError) as error:
                raise op.error(f"failed at run time: {error}") from None
            if done:
                return
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


def check_bounds(pending: _Pending, shape) -> None:
    """A buffer (an alloc's or a view's result) beyond its bounds is an error naming it."""
    upper = pending.type.upper_shape
    if len(shape) != len(upper) or any(u is not None and d > u for d, u in zip(shape, upper)):
        value = pending.value
        raise value.op.error(f"{'%' + value.name_hint if value.name_hint else 'a buffer'} has "
                             f"shape {list(shape)} at run time, beyond its bounds "
                             f"{['?' if u is None else u for u in upper]} ({pending.type})")


class _FunctionPlan:
    """What a run needs to know about a function beyond its ops: which arguments the IR
    writes (they are copied in), and after which op each pooled view dies (to poison it)."""

    def __init__(self, func):
        from palimpsest.passes.insert_deallocs import BlockOrder, alias_closure

        self.written_args: set = set()
        self.poison_after: dict = {}
        self.output_roots: list = []  # per result: the buffer a caller's array can replace
        if func.is_declaration:
            return
        block = func.entry_block
        self.output_roots = _output_roots(block)
        for index, arg in enumerate(block.args):
            if not isinstance(arg.type, BufferType):
                continue
            closure = set(alias_closure(arg))
            for value in closure:
                for user in value.users():
                    effects = user.memory_effects()
                    if effects is None or any(kind == WRITE and target in closure
                                              for kind, target in effects):
                        self.written_args.add(index)
        order = None
        for op in block.ops:
            if op.name != "buffer.view" or not _from_pool(op.operands[0]):
                continue
            order = order or BlockOrder(block)
            closure = alias_closure(op.results[0])
            last, local = order.last_user(closure)
            if last is None or not local or last.has_trait(IsTerminator) or any(
                    user.has_trait(IsTerminator) for v in closure for user in v.users()):
                continue
            self.poison_after.setdefault(last, []).append(op.results[0])


def _output_roots(block) -> list:
    """Per returned value, the buffer it is (through `buffer.reshape`s) when that buffer
    is a `buffer.alloc` or a `buffer.view` of a `memory.arena` of this block, returned once
    and written by no other returned value's chain; else None."""
    ret = block.last
    if ret is None or ret.name != "func.return":
        return []
    roots = []
    for value in ret.operands:
        owner = getattr(value, "op", None)
        while owner is not None and owner.name == "buffer.reshape":
            value = owner.operands[0]
            owner = getattr(value, "op", None)
        ok = owner is not None and owner.parent is block and isinstance(
            value.type, BufferType) and (owner.name == "buffer.alloc" or (
                owner.name == "buffer.view" and _from_pool(value)
                and getattr(owner.operands[0], "op", None) is not None
                and owner.operands[0].op.name == "memory.arena"))
        roots.append(value if ok else None)
    for index, root in enumerate(roots):
        if root is not None and roots.count(root) > 1:
            roots[index] = None
    return roots


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


def _from_pool(value) -> bool:
    owner = getattr(value, "op", None)
    while owner is not None and owner.name in ("buffer.view", "buffer.reshape"):
        owner = getattr(owner.operands[0], "op", None)
    return owner is not None and owner.name == "memory.arena"


def run(func, inputs: dict, *, poison: bool = False, stats: RunStats | None = None,
        outputs: dict | None = None) -> dict:
    """Run buffer-level `func` on named inputs; named output arrays (copies, or the
    caller's `outputs` arrays written in place)."""
    return Executor(poison, stats).run(func, inputs, outputs)


def run_with_stats(func, inputs: dict, *, poison: bool = False) -> tuple[dict, RunStats]:
    stats = RunStats()
    outputs = Executor(poison, stats).run(func, inputs)
    return outputs, stats


__all__ = ["Executor", "RunStats", "check_bounds", "run", "run_with_stats"]
