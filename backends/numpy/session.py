"""Sessions: graph-level IR compiled for the shapes it runs at, and run without copies.

    session = Session("model.onnx")             # or a .pal path, or a module op
    session.set_input_shape("image", (1, 1, 32, 160))   # optional, before or after prepare
    session.prepare()                           # compiles what it can now
    outputs = session.run({"image": x})         # or run(inputs, outputs={"probabilities": y})
    print(session.last_stats.summary())

Plans. With `specialize=True` (the default) every run's input shapes (set with
`set_input_shape`, else taken from the arrays) form a signature; the first run at a
signature clones the graph-level module (`clone_op`: the ops, not the weights), makes the function's arguments static at those
shapes and runs the pipeline (`default`: infer-shapes ... plan-memory), so every buffer
whose size follows from the input shapes is planned statically in the pools; the plan is
kept in a bounded LRU cache (`cache_size`) and later runs at that signature reuse it (a
hit). With `specialize=False` (or IR already lowered, whose arguments are buffers) the
module is compiled once with its dynamic shapes: buffers with `?` dims are allocated at run
time and freed after their last use (the `buffer.dealloc`s insert-deallocs wrote), the
static ones stay in the pools. `prepare()` compiles the specialized plan when all input
shapes are known, else the dynamic one; `run` compiles what it needs if prepare did not.

Verification. The module is verified once, when the session is made. Compiles run the
pipeline without the verifier after each pass (on a 500-op model it cost more than the
passes). With `verify="first"` (the default) the first plan is verified once, after its
pipeline: a pass that makes invalid IR of this model fails there, before anything runs.
Later plans run the same passes on the same graph at other shapes and are not verified
again; what differs is shapes, and those stay checked where it matters: lower-to-kernels
builds a kernel only when its verifier's rules accept the operand types, plan-memory's
independent checker passes every plan, and the executor checks shapes as it runs.
`verify="plans"` verifies every plan once, `"passes"` after every pass (errors name the
pass, as palimpsest-opt's default), `"none"` never.

Bounds. `bounds={"x": {0: 8, 2: 1280}}` (or `set_input_bound("x", {0: 8})`) bounds `?`
dims of the inputs (`#bounds<...>` on their types; `palimpsest-run --bound`). Every run
checks them: an input beyond its bounds is an error naming it, the dim and the bound.
They shape the dynamic plan (`specialize=False`, or `prepare()` before the shapes are
known): infer-shapes carries them to every buffer whose `?` dims follow from bounded
ones, and plan-memory places those in the pools at their bounds, so one plan, compiled
once, runs every shape within the bounds with no run-time allocation for them (static
bytes are the worst case; `last_stats.plan` is "bounded"). A specialized plan needs no
bounds (every shape is static): bounds only check its inputs. Setting a bound drops the
dynamic plan (compiled again when next needed); specialized plans are kept.

Profile. With `profile=True` every run's kernel ops are timed (backends/profile.py, a hook
of the executor loop) into `session.profiler`, over all runs: `profiler.table()` per op
kind and per op (calls, total and mean time, share of the runs, GFLOP/s or GB/s), and
`profiler.write_chrome_trace(path)` a Chrome/Perfetto trace with the planned buffers'
offsets (`palimpsest-run --profile`, `--profile-json FILE`).

Threads. `threads=N` sets the BLAS's threads (numpy's GEMMs) and PoCL's CPU device's
(POCL_MAX_PTHREAD_COUNT, read by PoCL once per process: it applies when the session is
the first OpenCL user) for the process; None (the default) sets the physical cores, as
onnxruntime does, leaving a count set in the environment (OPENBLAS_NUM_THREADS, ...) as it
is. `session.threads` says what is in effect (backends/threads.py).

Memory per run (`last_stats`, a `RunReport`): the pools of the plan used (static bytes)
are one arena each; run-time allocations are counted apart (dynamic bytes, allocations,
frees); nothing is both. Inputs are read in place (read-only views) when they have the
argument's dtype and are C-contiguous and aligned, and are written only when the plan was
made with `bufferize{inputs-as-activations}` (a `pipeline` that asks for it): otherwise
one copy, counted in `io_copy_bytes`. An input of another dtype is an error, unless
`cast_inputs=True`: then a same-kind one (float64 for f32) is converted, one counted copy. Arrays given in `run(outputs=...)` become the memory of the
buffers the function returns when their dtype, size, contiguity and alignment allow (the
kernels write into them; no copy), else they are filled with one counted copy. Results
with no array given are returned as they are: views of that run's arenas, which no later
run reuses while they (or views of them) are alive, so they can be handed to another
session as inputs with no copy at all; once the caller drops them, the next run reuses the
arenas and the views the executor made into them (no allocation, no view made again).
"""

from __future__ import annotations

import gc
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from palimpsest.backends.binding import (
    BindingError, bound_input_type, check_bounds, check_input, find_function, input_names,
    output_names, retype_inputs, shaped_input_type, specialize_inputs,
)
from palimpsest.backends.numpy.arena import RunStats
from palimpsest.backends.numpy.executor import Executor
from palimpsest.ir.attributes import numpy_dtype_name
from palimpsest.ir.types import TensorType


VERIFY_MODES = ("first", "plans", "passes", "none")
# Guards (small inputs that decide an If, passes/inline_branches.py): the most distinct
# values a session plans for before it stops (a value that changes every run would
# compile every run).
MAX_GUARD_VALUES = 8
_MISSING = object()


@dataclass
class RunReport:
    """What one `Session.run` did."""

    plan: str = ""                   # "specialized", "dynamic" or "bounded" (dynamic, bounds set)
    signature: tuple | None = None   # the input shapes the plan was made for (None: dynamic)
    cache_hit: bool | None = None    # this run's plan-cache lookup (None: dynamic plan)
    plan_cache_hits: int = 0         # the session's totals after this run
    plan_cache_misses: int = 0
    plan_cache_evictions: int = 0
    static_bytes: int = 0            # the pools of the plan used (planned, one arena each)
    dynamic_bytes: int = 0           # allocated at run time (buffers with sizes unknown)
    allocations: int = 0             # run-time allocations
    frees: int = 0                   # run-time frees (buffer.dealloc)
    io_copy_bytes: int = 0           # inputs and outputs copied (0 when used in place)
    compile_seconds: float = 0.0     # spent compiling a plan for this run (0 on a hit)
    run_seconds: float = 0.0
    run_stats: RunStats = field(default_factory=RunStats)

    def summary(self) -> str:
        cache = ("" if self.cache_hit is None else
                 f" (plan cache: {'hit' if self.cache_hit else 'miss'})")
        return (f"plan: {self.plan}{cache}\n"
                f"plan cache: {self.plan_cache_hits} hits, {self.plan_cache_misses} misses, "
                f"{self.plan_cache_evictions} evictions\n"
                f"static bytes planned: {self.static_bytes}\n"
                f"dynamic bytes: {self.dynamic_bytes} ({self.allocations} allocations, "
                f"{self.frees} frees)\n"
                f"I/O bytes copied: {self.io_copy_bytes}")


@dataclass
class SessionStats:
    """Totals over a session's life."""

    runs: int = 0
    plan_cache_hits: int = 0
    plan_cache_misses: int = 0
    plan_cache_evictions: int = 0
    compiles: int = 0
    compile_seconds: float = 0.0
    io_copy_bytes: int = 0


def clone_op(op, mapping: dict | None = None):
    """A deep copy of `op` (its regions, blocks and ops; values remapped through
    `mapping`, which it fills) sharing the attributes, which are immutable: weights are not
    copied, so cloning a model costs its op count, not its bytes (`Operation.clone`)."""
    return op.clone(mapping)


class CompiledPlan:
    """One lowered module and the executor that runs it (kept across runs)."""

    def __init__(self, module, func, signature, executor, compile_seconds: float):
        self.module = module
        self.func = func
        self.signature = signature      # None: the dynamic plan
        self.compile_seconds = compile_seconds
        self.executor = executor
        self.speculation = None         # segments' plan with an If to speculate on

    @property
    def pool_sizes(self) -> dict:
        sizes = {}
        for op in self.module.regions[0].block.ops:
            if op.name == "memory.pool" and "size" in op.properties:
                sizes[op.properties["sym_name"].value] = op.properties["size"].value
        return sizes

    def run(self, inputs: dict, outputs: dict | None,
            profiler=None) -> tuple[dict, RunStats]:
        executor = self.executor   # op and function info kept across runs
        executor.profiler = profiler
        executor.begin_run(RunStats())
        if profiler is not None:
            profiler.begin_run()   # one run, however many segments' runs it makes
        try:
            results = executor.run(self.func, inputs, outputs, copy_outputs=False)
        finally:
            if profiler is not None:
                profiler.end_run()
        stats = executor.stats
        executor.end_run()
        return results, stats


class Session:
    """Graph-level IR (a module op, a .pal path or an .onnx path) run on the numpy backend
    through plans specialized to the input shapes (see the module docstring)."""

    def __init__(self, module_or_path, *, function: str | None = None,
                 specialize: bool = True, cache_size: int = 8, poison: bool = False,
                 pipeline: str = "default", cast_inputs: bool = False,
                 backend: str = "numpy", device: int | None = None,
                 bounds: dict | None = None,
                 verify: str = "first", profile: bool = False,
                 threads: int | None = None):
        from palimpsest.dialects import load_all
        from palimpsest.ir.verifier import verify as verify_ir

        load_all()
        if isinstance(module_or_path, (str, os.PathLike)):
            path = os.fspath(module_or_path)
            if path.endswith(".onnx"):
                from palimpsest.dialects.graph.from_onnx import import_onnx
                module = import_onnx(path)
            else:
                from palimpsest.ir.parser import parse
                with open(path, encoding="utf-8") as file:
                    module = parse(file.read(), path)
        else:
            module = module_or_path
        verify_ir(module)
        self._module = module
        func = find_function(module, function)
        self.function = func.properties["sym_name"].value
        self.input_names = input_names(func)
        self._input_set = frozenset(self.input_names)
        self.output_names = output_names(func)
        self.input_types = list(func.type.inputs)
        self.graph_level = all(isinstance(t, TensorType) for t in self.input_types)
        self.specialize = specialize and self.graph_level
        self.cache_size = cache_size
        self.poison = poison
        self.pipeline = pipeline
        self.cast_inputs = cast_inputs
        if verify not in VERIFY_MODES:
            raise ValueError(f"unknown verify mode '{verify}' (one of "
                             f"{', '.join(VERIFY_MODES)})")
        self.verify = verify
        self.backend = backend
        from palimpsest.backends.threads import set_threads

        # before the OpenCL device opens: PoCL reads its thread count once per process
        self.threads = set_threads(threads)
        self._threads = threads  # as asked: the segments' sessions (segments.py) ask alike
        self._target = _target(backend, poison, device)
        self.profiler = None
        if profile:  # True, or a Profiler to add to (a segment's session: the model's)
            from palimpsest.backends.profile import Profiler
            self.profiler = profile if isinstance(profile, Profiler) else Profiler()
        self._shapes: dict = {}
        self._input_checks = None    # per input (name, type, fast check): `_input_checks`
        self._again = None           # what `run_again` needs of `last_plan` (`_again`)
        self._bounded: set = set()   # inputs given bounds (set_input_bound)
        # small inputs an If's condition is computed from: their values (<= 8 elements)
        # join the signature, and a plan inlines the branches they and the shapes decide
        self._guards: list = []
        self._guard_values: set = set()   # the distinct values seen (MAX_GUARD_VALUES)
        if self.specialize and has_control_flow(module):
            from palimpsest.passes.inline_branches import branch_guards

            self._guards = branch_guards(func)
        self._cache: OrderedDict = OrderedDict()
        self._dynamic: CompiledPlan | None = None
        self.prepared = False
        self.stats = SessionStats()
        self._last_report = None   # `last_stats`, made when read: `_report`
        self._last_stats: RunReport | None = None
        self.last_plan: CompiledPlan | None = None   # the plan the last run used
        for name, dims in (bounds or {}).items():
            self.set_input_bound(name, dims)

    # -- shapes ------------------------------------------------------------------------------
    def set_input_shape(self, name: str, shape) -> None:
        """Fix input `name`'s shape for the next runs (before or after `prepare`)."""
        index = self._index(name)
        self._shapes[name] = shaped_input_type(name, self.input_types[index], shape).shape
        self._input_checks = None

    def set_input_bound(self, name: str, dims: dict) -> None:
        """Bound `?` dims of input `name` ({dim: bound}): see "Bounds" in the module doc."""
        index = self._index(name)
        if not self.graph_level:
            raise BindingError(f"input '{name}': bounds apply to graph-level IR (tensor "
                               f"arguments), not to '{self.input_types[index]}'")
        type_ = bound_input_type(name, self.input_types[index], dims)
        if name in self._shapes:
            check_bounds(name, type_, self._shapes[name])
        self.input_types[index] = type_
        self._bounded.add(name)
        self._input_checks = None
        self._dynamic = None  # compiled without these bounds

    def input_shape(self, name: str):
        """The shape set for `name`, else its declared one (None dims where dynamic)."""
        if name in self._shapes:
            return self._shapes[name]
        shape = self.input_types[self._index(name)].shape
        return None if shape is None else tuple(shape)

    def _index(self, name: str) -> int:
        if name not in self.input_names:
            raise BindingError(f"unknown input '{name}' (the function takes: "
                               f"{', '.join(self.input_names) or 'no inputs'})")
        return self.input_names.index(name)

    def _known_signature(self):
        shapes = [self.input_shape(n) for n in self.input_names]
        if any(s is None or None in s for s in shapes):
            return None
        return tuple(shapes)

    # -- compiling -----------------------------------------------------------------------------
    def prepare(self) -> None:
        """Compile: the specialized plan when every input shape is known, else the dynamic
        one (a later run at known shapes still specializes). A session with guards (an
        If decided by small inputs) compiles at its first run instead, when their values
        are known: a plan without them would be one no run takes."""
        signature = self._known_signature() if self.specialize else None
        if signature is not None:
            if not self._guards:
                self._lookup(signature)
        else:
            self._dynamic_plan()
        self.prepared = True

    @property
    def cached_signatures(self) -> list:
        return list(self._cache)

    def _clone(self):
        return clone_op(self._module)

    def _signature(self, arrays: list) -> tuple:
        """The plan-cache key of a run's arrays (in input order): their shapes, and with
        guards the values of the small ones (an input changing its value every run, a
        step counter, stops being a guard after MAX_GUARD_VALUES distinct values)."""
        shapes = tuple([a.shape for a in arrays])
        if not self._guards:
            return shapes
        values = tuple((i, arrays[i].dtype.str, tuple(arrays[i].ravel().tolist()))
                       for i in self._guards)
        if values not in self._guard_values:
            self._guard_values.add(values)
            if len(self._guard_values) > MAX_GUARD_VALUES:
                self._guards = []
                return shapes
        return shapes + (values,)

    def _compile(self, signature, branch: int | None = None):
        """The plan for `signature` (None: the dynamic plan); `branch`: the straight-line
        plan of the speculated If's branch `branch` (speculation.py), None where there
        is none."""
        from palimpsest.ir.verifier import verify
        from palimpsest.passes.pass_manager import PassManager, parse_pipeline

        start = time.perf_counter()
        collecting = gc.isenabled()
        gc.disable()  # a compile makes many objects and no garbage worth a GC pass mid-way
        try:
            module = self._clone()
            func = find_function(module, self.function)
            if signature is not None:
                specialize_inputs(func, dict(zip(self.input_names, signature)))
                if has_control_flow(module):
                    # the Ifs whose conditions the shapes (and guards) decide go inline:
                    # what they leave is planned as one function, without segments
                    from palimpsest.passes.inline_branches import inline_static_branches

                    args = func.regions[0].blocks[0].args
                    known = {} if len(signature) == len(args) else {
                        args[i]: np.array(values, np.dtype(dtype)).reshape(signature[i])
                        for i, dtype, values in signature[-1]}
                    inline_static_branches(func, known)
                    if branch is not None:
                        from palimpsest.passes.inline_branches import inline_speculated

                        if not inline_speculated(func, branch) or has_control_flow(module):
                            return None
            elif self._bounded:
                retype_inputs(func, self.input_types)  # the dynamic plan, at the bounds
            if has_control_flow(module):
                # cut at If/Loop/Scan into segments, each planned by a session of its own
                # (segments.py); no infer-shapes at the input shapes: a branch not taken
                # may not fit them
                from palimpsest.backends.numpy.segments import SegmentedFunction

                target = SegmentedFunction(find_function(module, self.function), {
                    "poison": self.poison, "pipeline": self.pipeline,
                    "backend": self.backend, "verify": self.verify,
                    "threads": self._threads, "profile": self.profiler or False})
            elif not any(op.name == "memory.pool" for op in module.regions[0].block.ops):
                pipeline = deallocs_for_planning(parse_pipeline(self.pipeline))
                self._target.adapt_pipeline(pipeline)  # (planned IR runs as is)
                each = self.verify == "passes"
                from palimpsest.passes.schedule_for_memory import reuse_order
                pipeline, keep = reuse_order(self, self._module, module, self.function,
                                             pipeline)  # re-plans reuse the first order
                PassManager(pipeline, verify_each=each, after_pass=keep).run(module)
                if self.verify == "plans" or (self.verify == "first" and not self.stats.compiles):
                    verify(module)  # once, after the passes (module doc: Verification)
        finally:
            if collecting:
                gc.enable()
        seconds = time.perf_counter() - start
        self.stats.compiles += 1
        self.stats.compile_seconds += seconds
        if not has_control_flow(module):
            target = self._target
        plan = CompiledPlan(module, find_function(module, self.function), signature,
                            target.executor(), seconds)
        if signature is not None and has_control_flow(module):
            from palimpsest.passes.inline_branches import speculated_if

            if speculated_if(plan.func) is not None:
                from palimpsest.backends.numpy.speculation import Speculation

                plan.speculation = Speculation(plan, self._compile_branch, self.input_names)
        return plan

    def _compile_branch(self, signature, branch: int):
        """The speculated If's straight-line plan for `branch` (speculation.py), or None
        where that branch cannot be one (region ops inside, shapes it does not fit)."""
        try:
            return self._compile(signature, branch)
        except Exception:   # (any pass failing on a branch the shapes rule out: the
            return None     # segments run it, and say what is wrong if it is taken)

    def _lookup(self, signature) -> tuple[CompiledPlan, bool]:
        plan = self._cache.get(signature)
        if plan is not None:
            self._cache.move_to_end(signature)
            self.stats.plan_cache_hits += 1
            return plan, True
        self.stats.plan_cache_misses += 1
        plan = self._compile(signature)
        if self.cache_size > 0:
            self._cache[signature] = plan
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
                self.stats.plan_cache_evictions += 1
        return plan, False

    def _dynamic_plan(self) -> CompiledPlan:
        if self._dynamic is None:
            self._dynamic = self._compile(None)
        return self._dynamic

    # -- running -------------------------------------------------------------------------------
    def run(self, inputs: dict, outputs: dict | None = None) -> dict:
        """Run on named input arrays; named results (the `outputs` arrays where given)."""
        if not outputs and self.profiler is None and len(inputs) == len(self.input_names):
            # inputs of exactly the last run's dtypes and shapes, its plan still cached:
            # straight to that plan's executor (run_again), ~10 us a run less (what a
            # model of a few dozen small ops feels); else the checks and lookup below
            start = time.perf_counter()
            try:
                arrays = [inputs[name] for name in self.input_names]
            except KeyError:
                arrays = None
            results = self.run_again(arrays) if arrays is not None else None
            if results is not None:
                plan = self.last_plan
                ran = plan if plan.speculation is None else plan.speculation.ran(plan)
                self._report(plan, True, ran.executor.stats, time.perf_counter() - start)
                return dict(zip(self.output_names, results))
        arrays, copied = {}, 0
        checks = self._input_checks
        if checks is None:
            checks = self._input_checks = _input_checks(self.input_names, self.input_types,
                                                        self._shapes)
        if inputs.keys() != self._input_set:
            unknown = [n for n in inputs if n not in self.input_names]
            if unknown:
                self._index(unknown[0])
        for name, type_, check in checks:
            array = inputs.get(name, _MISSING)
            if array is _MISSING:
                raise BindingError(f"missing input '{name}' (expected {type_})")
            if check is not None and type(array) is np.ndarray and array.dtype == check[0] \
                    and (array.shape == check[1] or (
                        check[2] and len(array.shape) == len(check[1]) and all(
                            d is None or d == a for d, a in zip(check[1], array.shape)))):
                arrays[name] = array   # what check_input would accept as it is
                continue
            if not isinstance(array, np.ndarray):
                array = np.asarray(array)
                copied += array.nbytes
            if isinstance(type_, TensorType):
                want = np.dtype(numpy_dtype_name(type_.element_type))
                if self.cast_inputs and array.dtype != want and np.can_cast(
                        array.dtype, want, "same_kind"):
                    array = array.astype(want)    # the one copy, counted
                    copied += array.nbytes
                check_input(name, type_, array)
            if name in self._shapes and tuple(array.shape) != self._shapes[name]:
                raise BindingError(f"input '{name}': its shape was set to "
                                   f"{list(self._shapes[name])}, got an array of shape "
                                   f"{list(array.shape)}")
            arrays[name] = array
        if outputs:
            for name in outputs:
                if name not in self.output_names:
                    raise BindingError(f"unknown output '{name}' (the function returns: "
                                       f"{', '.join(self.output_names)})")
        hit = None
        compile_seconds = 0.0
        if self.specialize:
            signature = self._signature(list(arrays.values()))   # (in input order)
            plan, hit = self._lookup(signature)
            if not hit:
                compile_seconds = plan.compile_seconds
        else:
            fresh = self._dynamic is None
            plan = self._dynamic_plan()
            if fresh:
                compile_seconds = plan.compile_seconds
        start = time.perf_counter()
        results, run_stats = self._run_plan(plan, arrays, outputs)
        self._report(plan, hit, run_stats, time.perf_counter() - start, compile_seconds,
                     copied)
        self.last_plan = plan
        self.stats.runs += 1
        self.prepared = True
        return results

    def _run_plan(self, plan, arrays: dict, outputs: dict | None) -> tuple[dict, RunStats]:
        """`plan.run`, or its speculated If's straight-line plan (speculation.py)."""
        speculation = plan.speculation
        if speculation is not None:
            done = speculation.run_named(arrays, outputs, self.profiler)
            if done is not None:
                return done
        done = plan.run(arrays, outputs, self.profiler)
        if speculation is not None:
            speculation.observe()
        return done

    def _report(self, plan, hit, run_stats, seconds: float, compile_seconds: float = 0.0,
                copied: int = 0) -> None:
        """`last_stats` for a run of `plan` (its RunStats `run_stats`; `copied` input
        bytes copied before it), the I/O bytes added to the session's totals."""
        stats = self.stats
        io_copy_bytes = run_stats.io_bytes + copied
        # made when read (`last_stats`): a RunReport per run costs a small model ~2 us
        kind = "specialized" if plan.signature is not None else (
            "bounded" if self._bounded else "dynamic")
        self._last_report = (kind, plan.signature, hit, run_stats, seconds, compile_seconds,
                             io_copy_bytes, stats.plan_cache_hits, stats.plan_cache_misses,
                             stats.plan_cache_evictions)
        self._last_stats = None
        stats.io_copy_bytes += io_copy_bytes

    @property
    def last_stats(self) -> RunReport | None:
        """What the last `run` did (None before one)."""
        report = self._last_stats
        if report is None and self._last_report is not None:
            (kind, signature, hit, run_stats, seconds, compile_seconds, io_copy_bytes, hits,
             misses, evictions) = self._last_report
            report = self._last_stats = RunReport(
                plan=kind, signature=signature, cache_hit=hit, plan_cache_hits=hits,
                plan_cache_misses=misses, plan_cache_evictions=evictions,
                static_bytes=run_stats.static_bytes, dynamic_bytes=run_stats.dynamic_bytes,
                allocations=run_stats.dynamic_allocations, frees=run_stats.deallocations,
                io_copy_bytes=io_copy_bytes, compile_seconds=compile_seconds,
                run_seconds=seconds, run_stats=run_stats)
        return report


    def run_checked(self, arrays: dict) -> dict:
        """`run` for a caller that hands over numpy arrays already of the inputs' dtypes
        (a control-flow segment's, segments.py): the plan looked up or compiled as `run`
        does, the executor's own binding checks the arrays (shape, dtype: the same errors),
        no RunReport (`last_stats` is left as it was); stats and `last_plan` kept."""
        if self.specialize:
            plan, _ = self._lookup(self._signature(
                list(arrays.values()) if list(arrays) == self.input_names else
                [arrays[n] for n in self.input_names]))
        else:
            plan = self._dynamic_plan()
        results, _ = self._run_plan(plan, arrays, None)
        self.last_plan = plan
        self.stats.runs += 1
        self.prepared = True
        return results

    def run_again(self, arrays: list) -> list | None:
        """The lean run of a control-flow segment (segments.py) whose plan is made, and of
        `run`: when `arrays` (in input order) are numpy arrays of exactly the dtypes and
        shapes of the last run's plan (and the values it was made for, of guard inputs),
        still cached, that plan runs them as `run_checked` would
        and its results come back as a list in output order; else None (nothing ran: the
        caller goes through `run_checked`). No profiler: a profiled session never takes it."""
        plan = self.last_plan
        again = self._again
        if again is None or again[0] is not plan:
            again = self._again = _again(plan, self.profiler)
        _, executor, fplan, checks = again
        if checks is None or len(checks) != len(arrays):
            return None
        for array, (_, ndarray, dtype, shape) in zip(arrays, checks):
            if type(array) is not ndarray or array.shape != shape or array.dtype != dtype:
                return None
        if self._guards:   # the plan was made for its guards' values (an If decided by
            # them): the same values again, else the lookup (`_signature`) finds or makes one
            signature = plan.signature
            if len(signature) != len(arrays) + 1 or any(
                    tuple(arrays[i].ravel().tolist()) != values
                    for i, _, values in signature[-1]):
                return None
        if self._cache.get(plan.signature) is not plan:
            return None
        self._cache.move_to_end(plan.signature)
        self.stats.plan_cache_hits += 1
        self.stats.runs += 1
        speculation = plan.speculation
        if speculation is not None:
            results = speculation.run(arrays)
            if results is not None:
                return results
        executor.begin_run(RunStats())
        results = executor.run_bound(plan.func, fplan, arrays)
        executor.end_run()
        if speculation is not None:
            speculation.observe()
        return results


def _again(plan, profiler) -> tuple:
    """(plan, its executor, the executor's FunctionPlan of it, that one's input checks)
    for `Session.run_again`; the checks None where it cannot take `plan`: none, dynamic, a
    profiled session's, another backend's, or one whose inputs are not all static."""
    if plan is None or plan.signature is None or profiler is not None:
        return (plan, None, None, None)
    executor = plan.executor
    if isinstance(executor, Executor) and plan.func in executor.plans:
        fplan = executor.plans[plan.func]
        return (plan, executor, fplan, fplan.input_checks)
    from palimpsest.backends.numpy.segments import SegmentedFunction

    if isinstance(executor, SegmentedFunction):   # (a model cut at its control flow)
        return (plan, executor, None, executor.input_checks(plan.func))
    return (plan, None, None, None)


def _input_checks(names, types, shapes: dict) -> list:
    """Per input (name, type, check): check is (dtype, dims, dynamic) when an array of
    that dtype whose shape fits dims (None: any size; `dynamic`: dims has one) passes
    `check_input` as it is and `run`'s set-shape check (a tensor with no bounds; dims the
    shape set, if any); else None (the input is checked in full)."""
    checks = []
    for name, type_ in zip(names, types):
        if not isinstance(type_, TensorType) or type_.shape is None or type_.bounds:
            checks.append((name, type_, None))
            continue
        dims = tuple(shapes[name]) if name in shapes else tuple(type_.shape)
        checks.append((name, type_, (np.dtype(numpy_dtype_name(type_.element_type)), dims,
                                     None in dims)))
    return checks


def has_control_flow(module) -> bool:
    from palimpsest.backends.reference.executor import REGION_OPS

    return any(op.name in REGION_OPS for op in module.walk())


class _NumpyTarget:
    def __init__(self, poison: bool):
        self.poison = poison

    def adapt_pipeline(self, pipeline: list) -> None:
        pass

    def executor(self):
        return Executor(self.poison)


def deallocs_for_planning(pipeline: list) -> list:
    """insert-deallocs frees only run-time-sized buffers when plan-memory comes after it:
    plan-memory erases the deallocs of the buffers it places (the same plan, less work in
    a re-plan)."""
    from palimpsest.passes.insert_deallocs import InsertDeallocs

    names = [p.name for p in pipeline]
    if "insert-deallocs" not in names or "plan-memory" not in names:
        return pipeline
    first_plan = names.index("plan-memory")
    return [InsertDeallocs(dynamic_only=True)
            if p.name == "insert-deallocs" and i < first_plan else p
            for i, p in enumerate(pipeline)]


def _target(backend: str, poison: bool, device):
    """What a backend contributes to a session: pipeline settings and an executor."""
    if backend == "numpy":
        return _NumpyTarget(poison)
    if backend == "opencl":
        from palimpsest.backends.opencl.executor import OpenCLTarget
        return OpenCLTarget(poison, device)
    raise ValueError(f"unknown backend '{backend}' (expected numpy or opencl)")


__all__ = ["CompiledPlan", "clone_op", "RunReport", "Session", "SessionStats"]
