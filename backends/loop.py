"""The executor loop every backend shares: it walks a function's ops, binds each value to
the backend's memory, and calls the backend's hooks for what differs.

A backend is a subclass of `ExecutorLoop` that names its array type (`ARRAY`: numpy's
ndarray, OpenCL's DeviceArray) and implements the hooks:

| hook | called for | does |
|---|---|---|
| `allocate(op, value, shape, type_)` | `buffer.alloc`, a `?`-dim buffer once its shape is known | memory of its own, recorded in `self.allocations` (a handle with `live` and `release()`) |
| `pool(op, name, size)` | `memory.arena` | the pool's memory (one arena per run, or kept) |
| `view(op, value, source, offset, type_)` | `buffer.view` at a static shape | a typed view at a byte offset |
| `slot(value, source, offset, shape, type_)` | a bounded `?`-dim view once its shape is known | the same, at the actual shape |
| `reshape(op, source)` | `buffer.reshape` | the same memory in another shape, never a copy |
| `constant(host)` | `buffer.constant` (once per op and value) | the weights, where kernels read them |
| `copy(source, target)` | `buffer.copy` | a copy on the backend |
| `run_kernel(op, values)` | `kernel.*` but `kernel.generic` | the kernel, on the backend |
| `kernel_runner()` | each function's run | `run_kernel` as a callable f(op, values) (a backend may hand its dispatch function itself, one call less per kernel) |
| `capture(plan, program, values)` | a plain run of the lean program, from its second | the program with kernel ops the backend can replay as they are (the same calls on the same arrays) replaced by their replay, or None (the default: none can) |
| `run_generic(op, values)` | `buffer.compute`, `kernel.generic` | the graph op, on the backend or its host |
| `poison_array(array)` | with `poison=True`: an allocation made, freed, a pool view whose liveness ended | fill it with poison |
| `bind_input(index, array, plan)` / `read_output(name, result, user, copy)` | `run` | inputs in, results out (zero-copy where the backend can) |
| `sync()` | the profiler, around each kernel (a backend without events) | wait for the work queued so far |
| `collect_events()` / `take_events()` | the profiler, before and after each kernel | False: no device events (the default); else start collecting the op's, then hand them over as an object whose `resolve()`, once the run is over, gives (seconds, (start, end) in device ns or None) |
| `setup_seconds()` | the profiler | seconds spent building programs so far (left out of op times) |

The loop itself owns what is the same everywhere: the op dispatch, `func.call` and
`func.return`, `buffer.dim`, pending buffers (a `?`-dim alloc or bounded view, given
memory when the kernel that writes it knows its shape, and checked against its bounds),
the frees and their errors (twice, never allocated), reading constants, the per-function
facts (which arguments the IR writes, after which op each pool view dies, which buffers
a caller's output arrays may replace), and the profiler hook (`self.profiler`,
backends/profile.py): each kernel op, `buffer.compute` and `buffer.copy` is timed
(by its device events where the backend has them, else between two `sync()`s) and
recorded with its buffers.

Per-op overhead is paid once per executor where it can be: each function's ops become a
program (`_program`: per op its handler, or None for a kernel op, which goes straight to
`run_kernel`), its constants are read once and rebound per run (checked by attribute
identity), inputs of exactly the declared static shape and dtype are bound without the
full check, and with `CACHE_VIEWS` (the numpy backend) the static views and reshapes of
the pool arenas and constants (`_fixed_ops`) are bound all at once from the last run's,
their ops left out of the program, while the backend's `pool` hands back the same arenas
(it does when no result of the last run is alive) and the constants are unchanged; a
plain run (no profiler, no poison) walks the program with no per-op check for either.
From the second such run the backend may `capture` that program: a kernel op whose every
buffer is one of those fixed arrays does the same thing each run, and the numpy backend
replaces it by the numpy calls it recorded (backends/numpy/kernel_ops.py `record`),
replayed with no dispatch at all; the capture is dropped with the fixed views.
"""

from __future__ import annotations

from palimpsest.backends.binding import bind_inputs, input_names, output_names
from palimpsest.dialects.buffer import BufferType
from palimpsest.ir.diagnostics import DiagnosticError
from palimpsest.ir.opdef import WRITE, IsTerminator
from palimpsest.ir.verifier import lookup_symbol

# the ops the profiler times (the others only bind memory)
TIMED = frozenset({"buffer.compute", "buffer.copy"})


class Pending:
    """An alloc with `?` dims and no sizes, or a view of a pool with bounded `?` dims
    (`slot`: the source and byte offset): memory comes when its shape is known."""

    __slots__ = ("type", "value", "slot")

    def __init__(self, type_: BufferType, value, slot=None):
        self.type = type_
        self.value = value
        self.slot = slot


def check_bounds(pending: Pending, shape) -> None:
    """A buffer (an alloc's or a view's result) beyond its bounds is an error naming it."""
    upper = pending.type.upper_shape
    if len(shape) != len(upper) or any(u is not None and d > u for d, u in zip(shape, upper)):
        value = pending.value
        raise value.op.error(f"{'%' + value.name_hint if value.name_hint else 'a buffer'} has "
                             f"shape {list(shape)} at run time, beyond its bounds "
                             f"{['?' if u is None else u for u in upper]} ({pending.type})")


class ExecutorLoop:
    """One run's walk over a function's ops (see the module doc); backends add hooks."""

    NAME = "?"                  # the backend, in errors
    LEVELS = ""                 # the IR it runs, in errors
    ARRAY: type = object        # the backend's array type
    PENDING = Pending
    # True: the views and reshapes of a function's pool arenas and constants at static
    # offsets and shapes (`FunctionPlan.fixed_results`) are kept from one run to the next
    # and bound as they are, their ops skipped, while the backend's `pool` gives the very
    # same arena arrays back (`_bind_fixed`) and no constant was read again
    CACHE_VIEWS = False

    def __init__(self, poison: bool, stats):
        self.poison = poison
        self.stats = stats
        self.allocations: dict = {}  # alloc value -> handle (live, release()) this run
        self.plans: dict = {}        # func -> FunctionPlan
        self.constants: dict = {}    # buffer.constant op -> (attr, array)
        self.profiler = None         # backends/profile.py Profiler, or None
        self.caching = False         # this run may bind and record fixed views (CACHE_VIEWS)

    # -- hooks (see the module doc) ----------------------------------------------------------------
    def allocate(self, op, value, shape, type_):
        raise NotImplementedError

    def pool(self, op, name: str, size: int):
        raise NotImplementedError

    def view(self, op, value, source, offset: int, type_):
        raise NotImplementedError

    def slot(self, value, source, offset: int, shape, type_):
        raise NotImplementedError

    def reshape(self, op, source):
        raise NotImplementedError

    def constant(self, host):
        raise NotImplementedError

    def copy(self, source, target) -> None:
        raise NotImplementedError

    def run_kernel(self, op, values) -> None:
        raise NotImplementedError

    def run_generic(self, op, values) -> None:
        raise NotImplementedError

    def kernel_runner(self):
        """`run_kernel` as the loop calls it for one function's run: f(op, values)."""
        return self.run_kernel

    # Whether a captured program's entries read from `values` only their op's operands
    # (a replay whose handler's READS_VALUES is False none): its runs then start from a
    # values dict of those alone (`_run_captured`)
    CAPTURED_VALUES = False

    def capture(self, plan: "FunctionPlan", program: list, values: dict):
        """The lean `program` with what the backend can replay as is replaced (module
        doc), or None."""
        return None

    def arguments_captured(self, func, program: list, captured, arrays: list) -> tuple:
        """The arguments `captured` (the program `capture` made) holds as arrays, which
        a later run must bind again for it to stay valid; () where it reads them anew
        each replay."""
        return ()

    def poison_array(self, array) -> None:
        pass

    def bind_input(self, index: int, array, plan: "FunctionPlan"):
        return array

    def prepare_outputs(self, func, plan: "FunctionPlan", arrays: list, outputs: dict) -> None:
        pass

    def read_output(self, name: str, result, user, copy_outputs: bool):
        return result

    def released(self, value) -> bool:
        """True when a `buffer.dealloc` of `value`, which no alloc of this run allocated,
        frees nothing on purpose (the numpy backend: a caller's output array)."""
        return False

    def sync(self) -> None:
        pass

    def setup_seconds(self) -> float:
        """Seconds spent so far building programs (left out of the profiler's op times)."""
        return 0.0

    def collect_events(self) -> bool:
        return False

    def take_events(self):
        return None

    def finish(self) -> None:
        """The end of `run`: results are where the caller can read them."""

    # -- runs ----------------------------------------------------------------------------------------
    def run(self, func, inputs: dict, outputs: dict | None = None,
            copy_outputs: bool = True) -> dict:
        """Named results of `func` on named inputs; `outputs` (name -> array): the caller's
        arrays to write them into (in place where the backend can, else one counted copy);
        `copy_outputs=False`: results the backend can hand out as they are (the numpy
        backend's arena views) are not copied."""
        plan = self._plan(func)
        arrays = plan.bind(func, inputs)
        names = plan.output_names
        if outputs:
            unknown = [n for n in outputs if n not in names]
            if unknown:
                raise ValueError(f"unknown output '{unknown[0]}' (the function returns: "
                                 f"{', '.join(names)})")
        profiler = self.profiler
        self.caching = self.CACHE_VIEWS and not outputs
        if profiler is not None:
            profiler.begin_run()
        try:
            if outputs:
                self.prepare_outputs(func, plan, arrays, outputs)
            bound = [self.bind_input(index, array, plan) for index, array in enumerate(arrays)]
            results = self.run_function(func, bound)
            named = {name: self.read_output(name, result,
                                            outputs.get(name) if outputs else None,
                                            copy_outputs)
                     for name, result in zip(names, results)}
            self.finish()
        finally:
            if profiler is not None:
                profiler.end_run()
        return named

    def run_function(self, func, arrays: list, depth: int = 0) -> list:
        if depth > 64:
            raise func.error("call depth exceeds 64 (recursion?)")
        if func.is_declaration:
            raise func.error("is a declaration: there is no body to run")
        plan = self._plan(func)
        if self.CAPTURED_VALUES and plan.captured_base is not None \
                and plan.captured_base[0] is plan.captured and self.caching \
                and self.profiler is None and not self.poison and not self.bound:
            # (no caller's output arrays, `bound`: the arenas are then cut to fit them)
            results = self._run_captured(func, plan, arrays, depth)
            if results is not None:
                return results
        program = plan.program
        values = self._constants_of(plan)
        values.update(zip(func.entry_block.args, arrays))
        pools = None
        if self.caching and plan.lean is not None:
            program, pools = self._bind_fixed(plan, values, depth)
        poison_after = plan.poison_after if self.poison else None
        profiler = self.profiler
        if profiler is None and not poison_after:   # the loop of a plain run
            if pools is None and program is plan.lean:   # the lean program, views bound
                captured = plan.captured
                if captured and _other_arguments(plan, arrays):
                    # (another argument array: a kernel captured reading the last one would
                    # read it still; capture again once two runs bind the same arguments)
                    captured = plan.captured = None
                    plan.lean_runs = 0
                if captured is None:
                    plan.lean_runs += 1
                    if plan.lean_runs > 1:
                        captured = plan.captured = self.capture(plan, program, values) or ()
                        plan.captured_args = self.arguments_captured(func, program,
                                                                     captured, arrays)
                        plan.captured_base = (captured, _values_read(captured, plan.ret,
                                                                     values)) \
                            if captured and self.CAPTURED_VALUES else None
                if captured:
                    program = captured
            self._run_plain(program, values, depth)
            program = ()
        array_type = self.ARRAY
        run_kernel = self.kernel_runner() if program else None
        for handler, op, timed in program:
            if profiler is not None and timed:
                profiler.measure(self, op, values, depth)
            elif handler is None:
                run_kernel(op, values)
            else:
                handler(self, op, values, depth)
            if poison_after:
                dying = poison_after.get(op)
                if dying:
                    for value in dying:
                        array = values.get(value)
                        if isinstance(array, array_type):
                            self.poison_array(array)
        if pools is not None:   # a full run: its fixed views, for the next runs
            plan.fixed_values = {v: values[v] for v in plan.fixed_results}
            plan.fixed_pools = pools
            plan.captured, plan.lean_runs = None, 0
        return _returned(func, plan, values)

    def _run_plain(self, program: list, values: dict, depth: int) -> None:
        """`program`'s entries in order, with no profiler or poison: a kernel op (handler
        None) through the backend's runner, the others through their handler."""
        run_kernel = None
        for handler, op, _ in program:
            if handler is not None:
                handler(self, op, values, depth)
            else:
                if run_kernel is None:
                    run_kernel = self.kernel_runner()
                run_kernel(op, values)

    def _run_captured(self, func, plan: "FunctionPlan", arrays: list, depth: int):
        """A run of the captured program (`capture`) on the very arenas and constants it
        was captured on, with a values dict of only what its entries that read one and
        the return read (`captured_base`, made at the capture): no dict of every constant
        and fixed view made and dropped each run, which a model of a few small ops
        feels, cold caches most. None where that is not the case (nothing ran but the
        arena ops, whose arenas the full run below takes as they are)."""
        if not _constants_current(plan) or _other_arguments(plan, arrays):
            return None
        pool = self.pool
        last = plan.fixed_pools
        if last is None or len(last) != len(plan.arena_calls):
            return None
        for (op, _, name, size), array in zip(plan.arena_calls, last):
            if pool(op, name, size) is not array:
                return None
        captured, base = plan.captured_base
        values = dict(base)
        values.update(zip(func.entry_block.args, arrays))
        self._run_plain(captured, values, depth)
        return _returned(func, plan, values)

    def _bind_fixed(self, plan: "FunctionPlan", values: dict, depth: int):
        """Run the function's `memory.arena` ops (all at its head); when each gives back
        the very array it gave the run that last bound the fixed views (the backend kept
        the arena), bind those views and reshapes as they are and return the program
        without them, and None; else the program without the arena ops, and the arenas'
        arrays (the run then records its fixed views)."""
        calls = plan.arena_calls
        if calls is None:   # (op, result, pool name, size) once per function
            calls = plan.arena_calls = [(op, op.results[0]) + _pool_size(op)
                                        for op in plan.arena_ops]
        pools = []
        pool = self.pool
        for op, result, name, size in calls:
            array = values[result] = pool(op, name, size)
            pools.append(array)
        last = plan.fixed_pools
        if last is not None and all(a is b for a, b in zip(pools, last)):
            values.update(plan.fixed_values)
            return plan.lean, None
        plan.fixed_pools = plan.fixed_values = plan.captured = None
        return plan.unpooled, pools

    def _constants_of(self, plan: "FunctionPlan") -> dict:
        """A fresh values dict holding the function's constants, read (and put where the
        kernels read them) once per executor: later runs only check that each op still
        holds the attribute it was read from."""
        bound = plan.constants
        if bound is not None and _constants_current(plan):
            return dict(bound)
        values: dict = {}
        attrs = []
        plan.fixed_pools = plan.fixed_values = plan.captured = None   # old constants' views
        for op in plan.constant_ops:
            self._constant(op, values, 0)
            attrs.append((op, op.properties["value"]))
        plan.constants, plan.constant_attrs = dict(values), attrs
        return values

    def _plan(self, func) -> "FunctionPlan":
        plan = self.plans.get(func)
        if plan is None:
            plan = self.plans[func] = FunctionPlan(func)
        return plan

    # -- one op --------------------------------------------------------------------------------------
    def _execute(self, op, values: dict, depth: int) -> None:
        name = op.name
        if name.startswith("kernel.") and name != "kernel.generic":
            self.run_kernel(op, values)
            return
        handler = _HANDLERS.get(name)
        if handler is None:
            raise DiagnosticError(f"the {self.NAME} backend cannot run '{name}' "
                                  f"({self.LEVELS})", op.loc)
        handler(self, op, values, depth)

    def _materialized(self, op, values, value):
        array = values[value]
        if isinstance(array, Pending):
            raise op.error(f"reads a buffer that was never written ({value.type})")
        return array

    def _materialize(self, pending: Pending, shape, values):
        """The memory of a pending buffer whose shape is known now."""
        shape = tuple(int(d) for d in shape)
        if pending.type.bounds is not None:
            check_bounds(pending, shape)
        if pending.slot is not None:
            source, offset = pending.slot
            array = self.slot(pending.value, source, offset, shape, pending.type)
        else:
            if any(d < 0 for d in shape):
                raise pending.value.op.error(f"has a negative size: {shape}")
            array = self.allocate(pending.value.op, pending.value, shape, pending.type)
        values[pending.value] = array
        return array

    def _sized(self, values, value, shape):
        """The memory of `value`; a pending one sized by `shape()` (ValueError when it
        cannot say)."""
        array = values[value]
        if isinstance(array, Pending):
            concrete = shape()
            if concrete is None or None in concrete:
                raise ValueError("cannot size a buffer from the operand shapes")
            array = self._materialize(array, concrete, values)
        return array

    def _alloc(self, op, values, depth) -> None:
        type_ = op.results[0].type
        if None in type_.shape and not op.operands:
            values[op.results[0]] = Pending(type_, op.results[0])
            return
        sizes = iter(values[v] for v in op.operands)
        shape = tuple(d if d is not None else int(next(sizes)) for d in type_.shape)
        if any(d < 0 for d in shape):
            raise op.error(f"has a negative size: {shape}")
        values[op.results[0]] = self.allocate(op, op.results[0], shape, type_)

    def _dealloc(self, op, values, depth) -> None:
        value = op.operands[0]
        handle = self.allocations.get(value)
        if handle is None:
            if isinstance(values.get(value), Pending):
                values.pop(value)  # never written: nothing was allocated
                return
            if self.released(value):
                return
            raise op.error("frees a buffer that no buffer.alloc of this run allocated")
        if not handle.live:
            raise op.error("frees a buffer twice")
        if self.poison:
            self.poison_array(values[value])
        handle.release()

    def _pool(self, op, values, depth) -> None:
        values[op.results[0]] = self.pool(op, *_pool_size(op))

    def _view(self, op, values, depth) -> None:
        source = self._materialized(op, values, op.operands[0])
        type_ = op.results[0].type
        if None in type_.shape:
            if not type_.is_bounded or "offset" not in op.properties:
                raise op.error(f"views with '?' dims need a bound on each and a static "
                               f"offset ({type_})")
            # a slot planned at the bounds: viewed once the writer knows the shape
            values[op.results[0]] = Pending(type_, op.results[0],
                                            (source, op.properties["offset"].value))
            return
        offset = op.properties["offset"].value if "offset" in op.properties \
            else int(values[op.operands[1]])
        values[op.results[0]] = self.view(op, op.results[0], source, offset, type_)

    def _reshape(self, op, values, depth) -> None:
        source = self._materialized(op, values, op.operands[0])
        if op.results[0].type.shape.count(None) > 1:
            raise op.error("needs a static shape, or one '?' dim, to reshape at run time")
        values[op.results[0]] = self.reshape(op, source)

    def _constant(self, op, values, depth) -> None:
        attr = op.properties["value"]
        cached = self.constants.get(op)
        if cached is not None and cached[0] is attr:
            values[op.results[0]] = cached[1]
            return
        import numpy as np

        try:
            host = np.asarray(attr.to_numpy())
        except OSError as error:
            raise op.error(f"cannot read its data: {error.strerror or error}: "
                           f"'{error.filename}'") from None
        except ValueError as error:
            raise op.error(f"cannot read its data: {error}") from None
        array = self.constant(host)
        self.constants[op] = (attr, array)
        values[op.results[0]] = array

    def _copy(self, op, values, depth) -> None:
        source = self._materialized(op, values, op.operands[0])
        target = values[op.operands[1]]
        if isinstance(target, Pending):
            target = self._materialize(target, source.shape, values)
        if target.shape != source.shape:
            raise op.error(f"copies shape {source.shape} into shape {target.shape}")
        self.copy(source, target)
        self.stats.copy_op_bytes += source.nbytes

    def _dim(self, op, values, depth) -> None:
        source = self._materialized(op, values, op.operands[0])
        values[op.results[0]] = int(source.shape[op.properties["index"].value])

    def _call(self, op, values, depth) -> None:
        callee = lookup_symbol(op, op.callee)
        results = self.run_function(callee, [values[v] for v in op.operands], depth + 1)
        for result, array in zip(op.results, results, strict=True):
            values[result] = array

    def _generic(self, op, values, depth) -> None:
        self.run_generic(op, values)


_HANDLERS = {
    "buffer.compute": ExecutorLoop._generic,
    "kernel.generic": ExecutorLoop._generic,
    "buffer.alloc": ExecutorLoop._alloc,
    "buffer.dealloc": ExecutorLoop._dealloc,
    "buffer.constant": ExecutorLoop._constant,
    "buffer.reshape": ExecutorLoop._reshape,
    "buffer.view": ExecutorLoop._view,
    "buffer.copy": ExecutorLoop._copy,
    "buffer.dim": ExecutorLoop._dim,
    "memory.arena": ExecutorLoop._pool,
    "func.call": ExecutorLoop._call,
}


def _constants_current(plan: "FunctionPlan") -> bool:
    """Whether each constant op still holds the attribute its array was read from."""
    return all(op.properties["value"] is attr for op, attr in plan.constant_attrs)


def _other_arguments(plan: "FunctionPlan", arrays: list) -> bool:
    """Whether `arrays` are not the arguments the captured program holds (a kernel
    captured reading the last ones would read them still)."""
    return any(a is not b for a, b in zip(arrays, plan.captured_args))


def _returned(func, plan: "FunctionPlan", values: dict) -> list:
    """The function's results, as its return reads them from `values`."""
    ret = plan.ret
    if ret is None:
        raise func.error("has no func.return")
    results = []
    for v in ret.operands:
        value = values[v]
        if isinstance(value, Pending):
            raise ret.error(f"returns a buffer that was never written ({v.type})")
        results.append(value)
    return results


def _values_read(captured: list, ret, values: dict) -> dict:
    """The entries of `values` that the entries of `captured` other than the backend's
    replays (a handler whose READS_VALUES is False) and the function's return read."""
    read = [v for handler, op, _ in captured
            if getattr(handler, "READS_VALUES", True) for v in op.operands]
    if ret is not None:
        read.extend(ret.operands)
    return {v: values[v] for v in read if v in values}


def arguments_read(func, program: list, captured, arrays: list) -> tuple:
    """`arrays` (a run's arguments) when an op the backend captured (an entry of
    `captured` not in `program`) reads an argument itself or a reshape of one, else
    ()."""
    if not captured:
        return ()
    args = set(func.entry_block.args)
    for op in func.entry_block.ops:
        if op.name == "buffer.reshape" and op.operands[0] in args:
            args.update(op.results)
    originals = set(map(id, program))
    reads = any(id(entry) not in originals and any(v in args for v in entry[1].operands)
                for entry in captured)
    return tuple(arrays) if reads else ()


class FunctionPlan:
    """What a run needs to know about a function beyond its ops: which arguments the IR
    writes (a backend that binds inputs in place copies those), after which op each pooled
    view dies (to poison it), and per result the buffer a caller's array can replace."""

    def __init__(self, func):
        from palimpsest.passes.insert_deallocs import BlockOrder, alias_closure

        self.written_args: set = set()
        self.poison_after: dict = {}
        self.output_roots: list = []  # per result: the buffer a caller's array can replace
        self.output_names = output_names(func)
        self.input_names = input_names(func)
        self.input_checks = None      # per input (name, dtype, shape): see `bind`
        self.program = None           # [(handler, op, timed)]: `_program`
        self.ret = None               # the func.return
        self.constant_ops: list = []  # the buffer.constant ops, bound once (`_constants_of`)
        self.constants = None         # their result -> array, once read
        self.constant_attrs: list = []
        self.arena_ops: list = []     # the memory.arena ops, when all are at the head
        self.arena_calls = None       # per one: (op, result, pool name, size), once known
        self.fixed_results: list = []  # static views, reshapes of them, constants (CACHE_VIEWS)
        self.lean = self.unpooled = None   # the program less those ops / less the arenas
        self.fixed_values = None      # fixed result -> array, as the last full run bound
        self.fixed_pools = None       # the arena arrays of that run
        self.captured = None          # the lean program as the backend captured it, () none
        self.captured_args = ()       # the arguments it was captured with
        self.captured_base = None     # (captured, the values its runs start from)
        self.lean_runs = 0            # lean runs since the fixed views were bound
        self.input_views: dict = {}   # argument index -> (array, the view a backend bound)
        if func.is_declaration:
            return
        last = func.entry_block.last
        if last is not None and last.name == "func.return":
            self.ret = last
        self.constant_ops = [op for op in func.entry_block.ops
                             if op.name == "buffer.constant"]
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
            if op.name != "buffer.view" or not from_pool(op.operands[0]):
                continue
            order = order or BlockOrder(block)
            closure = alias_closure(op.results[0])
            last, local = order.last_user(closure)
            if last is None or not local or last.has_trait(IsTerminator) or any(
                    user.has_trait(IsTerminator) for v in closure for user in v.users()):
                continue
            self.poison_after.setdefault(last, []).append(op.results[0])
        self.arena_ops, fixed = _fixed_ops(block, self.poison_after)
        self.fixed_results = [op.results[0] for op in fixed]
        self.program = _program(func)
        if self.arena_ops or fixed:
            self.unpooled = [step for step in self.program if step[1] not in self.arena_ops]
            skip = fixed | set(self.arena_ops)
            self.lean = [step for step in self.program if step[1] not in skip]

    def bind(self, func, inputs: dict) -> list:
        """The input arrays in argument order: numpy arrays of exactly the static shape
        and dtype each argument declares are taken as they are; anything else goes
        through `bind_inputs`, which converts, checks and names what does not fit."""
        checks = self.input_checks
        if checks is None:
            checks = self.input_checks = static_input_checks(func, self.input_names)
        if checks and len(inputs) == len(checks):
            arrays = []
            for name, ndarray, dtype, shape in checks:
                array = inputs.get(name)
                if type(array) is not ndarray or array.shape != shape \
                        or array.dtype != dtype:
                    break
                arrays.append(array)
            else:
                return arrays
        return bind_inputs(func, inputs)


def static_input_checks(func, names) -> list:
    """(name, numpy.ndarray, dtype, shape) per argument when every argument is a tensor or
    buffer of static shape with no bounds (what `FunctionPlan.bind` takes as it is); []
    otherwise."""
    from palimpsest.ir.attributes import numpy_dtype_name
    from palimpsest.ir.types import ShapedType

    import numpy as np

    checks = []
    for name, type_ in zip(names, func.type.inputs):
        if not isinstance(type_, ShapedType) or type_.shape is None or None in type_.shape \
                or type_.bounds is not None or getattr(type_, "strides", None) is not None:
            return []
        try:
            dtype = np.dtype(numpy_dtype_name(type_.element_type))
        except (TypeError, ValueError, KeyError):
            return []
        checks.append((name, np.ndarray, dtype, tuple(type_.shape)))
    return checks


def _program(func) -> list:
    """The function's ops as the loop runs them: (handler, op, timed) with handler None
    for a kernel op other than kernel.generic (the backend's `run_kernel`), else the
    loop's handler of the op; `timed`: the profiler measures it. Constants are bound
    apart (`_constants_of`) and the func.return read after the loop."""
    program = []
    for op in func.entry_block.ops:
        name = op.name
        if name == "func.return":
            break
        if name == "buffer.constant":
            continue
        timed = name in TIMED or name.startswith("kernel.")
        if name.startswith("kernel.") and name != "kernel.generic":
            program.append((None, op, timed))
        else:
            program.append((_HANDLERS.get(name, _unknown), op, timed))
    return program


_FIXED_ROOTS = frozenset({"memory.arena", "buffer.constant"})


def _fixed_ops(block, poison_after: dict) -> tuple[list, set]:
    """The block's `memory.arena` ops, when every one comes before any op but a
    `buffer.constant`, and the `buffer.view`s (static offset and shape) and
    `buffer.reshape`s (static shape) of them or of constants, directly or through each
    other, after which nothing is poisoned: what one run binds is what the next binds on
    the same arenas and constants. ([], set()) when the arenas are not all at the head."""
    arenas, fixed, head = [], set(), True
    for op in block.ops:
        name = op.name
        if name == "memory.arena":
            if not head:
                return [], set()
            arenas.append(op)
            continue
        if name != "buffer.constant":
            head = False
        if name not in ("buffer.view", "buffer.reshape") or op in poison_after:
            continue
        source = getattr(op.operands[0], "op", None)
        type_ = op.results[0].type
        if source is None or (source not in fixed and source.name not in _FIXED_ROOTS) \
                or None in type_.shape or (name == "buffer.view" and (
                    "offset" not in op.properties or len(op.operands) != 1)):
            continue
        fixed.add(op)
    return arenas, fixed


def _pool_size(op) -> tuple:
    """(pool name, bytes) of a `memory.arena` op: its type's size, else its pool's."""
    name = op.properties["pool"].root
    size = op.results[0].type.shape[0]
    if size is None:
        pool = lookup_symbol(op, op.properties["pool"])
        size_attr = pool.properties.get("size") if pool is not None else None
        if size_attr is None:
            raise op.error(f"pool @{name} has no size (plan the memory first)")
        size = size_attr.value
    return name, size


def _unknown(self, op, values, depth) -> None:
    raise DiagnosticError(f"the {self.NAME} backend cannot run '{op.name}' "
                          f"({self.LEVELS})", op.loc)


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
                owner.name == "buffer.view" and from_pool(value)
                and getattr(owner.operands[0], "op", None) is not None
                and owner.operands[0].op.name == "memory.arena"))
        roots.append(value if ok else None)
    for index, root in enumerate(roots):
        if root is not None and roots.count(root) > 1:
            roots[index] = None
    return roots


def from_pool(value) -> bool:
    """True when `value` is (a view or reshape of) a `memory.arena`."""
    owner = getattr(value, "op", None)
    while owner is not None and owner.name in ("buffer.view", "buffer.reshape"):
        owner = getattr(owner.operands[0], "op", None)
    return owner is not None and owner.name == "memory.arena"


__all__ = ["ExecutorLoop", "FunctionPlan", "Pending", "check_bounds", "from_pool"]
