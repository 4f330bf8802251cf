"""Models with control flow, planned around it.

Each block (the function's body, and each If branch, Loop body and Scan body) is cut at
its If/Loop/Scan ops into straight-line segments. A segment is outlined into a function
of its own and run by a nested `Session`: the default pipeline, its own planned arena,
plans specialized to the shapes met and cached. The region ops run between segments as
the reference executor runs them (backends/reference/executor.py), with their bodies cut
the same way. So what lives inside a branch or a loop body is planned like any function;
only the values crossing a segment boundary (a segment's inputs and results, a region's
operands and results) are arrays held here, and a loop body's plan is compiled once and
reused on every iteration. A segment whose inputs have the dtypes and shapes of its last
run runs that plan again through the lean path (`Session.run_again`: no binding by name,
no per-run checks but those of the inputs, the arenas and views of the last run reused as
the executor reuses them).

Constants are not boundary values: a segment that reads one gets its own copy of the
constant op (its weights shared, not copied), so it stays a constant to the planner. A
segment of graph.identity ops only (a branch passing values on) has no session: each of
its outputs is the array of the value it passes on."""

from __future__ import annotations

import numpy as np

from palimpsest.backends.reference.executor import REGION_OPS, evaluate_op

CONSTANT_OPS = frozenset({"graph.constant"})
_MISSING = object()


class Segment:
    """A run of straight-line ops outlined into a function; `inputs` and `outputs` are the
    values of the enclosing block it reads and defines for later use."""

    def __init__(self, ops: list, session_options: dict):
        from palimpsest.dialects.builtin import ModuleOp
        from palimpsest.dialects.func import FuncOp, ReturnOp
        from palimpsest.ir import attributes as A

        inside = set()
        for op in ops:
            inside.update(op.walk())
        defined = {r for op in ops for r in op.results}
        self.inputs, constants = [], []
        for op in ops:
            for value in _operands(op):
                if value in defined or value in self.inputs or value in constants:
                    continue
                owner = getattr(value, "op", None)
                if owner is not None and owner.name in CONSTANT_OPS:
                    constants.append(value)
                else:
                    self.inputs.append(value)
        self.outputs = [r for op in ops for r in op.results
                        if any(user not in inside for user in r.users())]
        func = FuncOp.build("segment", [v.type for v in self.inputs],
                            [v.type for v in self.outputs])
        block = func.entry_block
        mapping = dict(zip(self.inputs, block.args))
        for value in constants:
            block.append(value.op.clone(mapping))
        for op in ops:
            block.append(op.clone(mapping))
        block.append(ReturnOp([mapping[v] for v in self.outputs], []))

        def names(count, prefix):
            return A.ArrayAttr(tuple(A.DictionaryAttr.of(
                {"palimpsest.name": A.StringAttr(f"{prefix}{i}")}) for i in range(count)))

        func.properties["arg_attrs"] = names(len(self.inputs), "in")
        func.properties["res_attrs"] = names(len(self.outputs), "out")
        self.module = ModuleOp.build([func])
        self.options = session_options
        self.session = None
        self._ins = [(f"in{i}", v) for i, v in enumerate(self.inputs)]
        self._outs = [(f"out{i}", v) for i, v in enumerate(self.outputs)]
        # only graph.identity ops (a branch that passes values on): each output is the
        # array of the value it passes on, no session (planning one would copy it)
        self.passes_on = None
        if all(op.name == "graph.identity" for op in ops):
            self.passes_on = [(value, _passed_on(value)) for value in self.outputs]

    def run(self, scope: "Scope") -> None:
        from palimpsest.backends.numpy.session import Session

        if self.passes_on is not None:
            own = scope.own
            for value, source in self.passes_on:
                own[value] = scope[source]
            return
        session = self.session
        if session is None:
            session = self.session = Session(self.module, **self.options)
        else:   # the plan of the last run, again (most runs): no binding by name
            results = session.run_again([scope[v] for v in self.inputs])
            if results is not None:
                scope.own.update(zip(self.outputs, results))
                return
        arrays = {name: scope[v] for name, v in self._ins}
        if all(type(a) is np.ndarray for a in arrays.values()):
            results = self.session.run_checked(arrays)   # (the executor checks them)
        else:
            results = self.session.run(arrays)
        own = scope.own
        for name, value in self._outs:
            own[value] = results[name]


class Scope:
    """Arrays of the values in reach: a block's own, then its enclosing blocks'."""

    def __init__(self, parent: "Scope | None" = None):
        self.own: dict = {}
        self.parent = parent

    def __getitem__(self, value):
        scope = self
        while scope is not None:
            array = scope.own.get(value, _MISSING)
            if array is not _MISSING:
                return array
            scope = scope.parent
        owner = getattr(value, "op", None)
        if owner is not None and owner.name in CONSTANT_OPS:   # read by a region op
            return evaluate_op(owner, [])[0]
        raise KeyError(value)

    def __setitem__(self, value, array) -> None:
        self.own[value] = array


class BlockPlan:
    """A block as steps: segments, and region ops with a BlockPlan per region."""

    def __init__(self, block, session_options: dict):
        self.steps: list = []
        self.block = block
        run: list = []
        ops = list(block.ops)
        body, terminator = ops[:-1], ops[-1]
        for op in body:
            if op.name in REGION_OPS:
                if run:
                    self.steps.append(Segment(run, session_options))
                    run = []
                self.steps.append(RegionStep(op, [BlockPlan(r.blocks[0], session_options)
                                                  for r in op.regions]))
            elif op.name not in CONSTANT_OPS:
                run.append(op)
        if run:
            self.steps.append(Segment(run, session_options))
        self.terminator = terminator

    def run(self, scope: Scope, args=()) -> list:
        if args:
            scope.own.update(zip(self.block.args, args))
        for step in self.steps:
            step.run(scope)
        return [scope[v] for v in self.terminator.operands]

    def segments(self):
        for step in self.steps:
            if isinstance(step, Segment):
                yield step
            else:
                for region in step.regions:
                    yield from region.segments()


class RegionStep:
    """An If, Loop or Scan between segments, a BlockPlan per region."""

    def __init__(self, op, regions: list):
        self.op = op
        self.regions = regions
        self.taken = None   # an If's branch index the last run took (speculation.py)

    def run(self, scope: Scope) -> None:
        op = self.op
        if op.name == "graph.if":   # (most real exports' only region op: no detour)
            cond = scope[op.operands[0]]
            if type(cond) is np.ndarray and cond.size == 1:
                self.taken = taken = 0 if cond.item() else 1
                results = self.regions[taken].run(Scope(scope))
                scope.own.update(zip(op.results, results))
                return
        regions = self.regions
        results = REGION_OPS[op.name](op, scope, lambda index, args: regions[index].run(
            Scope(scope), args))
        scope.own.update(zip(op.results, results))


def _passed_on(value):
    """The value a chain of graph.identity ops ending in `value` starts from."""
    owner = getattr(value, "op", None)
    while owner is not None and owner.name == "graph.identity":
        value = owner.operands[0]
        owner = getattr(value, "op", None)
    return value


def _operands(op):
    """Every value `op` reads, its nested regions' reads from outside them included."""
    for value in op.operands:
        yield value
    for region in op.regions:
        inner = set()
        for nested in region.blocks[0].ops:
            inner.update(nested.results)
        inner.update(region.blocks[0].args)
        for nested in region.blocks[0].ops:
            for value in _operands(nested):
                if value not in inner:
                    yield value


class SegmentedFunction:
    """The executor protocol of CompiledPlan (begin_run, run, stats, end_run) over a
    function cut into planned segments."""

    def __init__(self, func, session_options: dict):
        self.plan = BlockPlan(func.entry_block, session_options)
        self.stats = None
        self.names = None   # the function's (input names, output names, input set)

    def executor(self):
        return self

    def begin_run(self, stats) -> None:
        self.stats = stats

    def _names(self, func) -> tuple:
        names = self.names
        if names is None:
            from palimpsest.backends.binding import input_names, output_names
            names = self.names = (input_names(func), output_names(func),
                                  frozenset(input_names(func)))
        return names

    def input_checks(self, func) -> list:
        """(name, numpy.ndarray, dtype, shape) per input of a function whose inputs all
        have static shapes, else []: what `run_bound` takes (Session.run_again)."""
        from palimpsest.backends.loop import static_input_checks

        return static_input_checks(func, self._names(func)[0])

    def run(self, func, inputs: dict, outputs: dict | None, copy_outputs: bool = False):
        names = self._names(func)
        if inputs.keys() == names[2] and all(
                type(inputs[n]) is np.ndarray for n in names[0]):
            arrays = [inputs[n] for n in names[0]]   # checked by the Session's run
        else:
            from palimpsest.backends.binding import bind_inputs
            arrays = bind_inputs(func, inputs)
        results = dict(zip(names[1], self.run_bound(func, None, arrays)))
        for name, array in (outputs or {}).items():
            np.copyto(array, results[name])
            results[name] = array
        return results

    def run_bound(self, func, plan, arrays: list) -> list:
        """The results, in output order, of a run on `arrays` (in input order), numpy
        arrays of the inputs' dtypes and shapes (checked by the caller)."""
        from palimpsest.backends.numpy.executor import ErrorsIgnored

        with ErrorsIgnored():   # once for every segment's run
            results = self.plan.run(Scope(), arrays)
        for index, array in enumerate(results):
            if any(array is a for a in arrays):   # passed on by identities: the caller's
                results[index] = array.copy()     # own array, never handed back as a result
        return results

    def end_run(self) -> None:
        pass

    def pool_bytes(self) -> int:
        """The planned arenas of every segment compiled so far (their largest plans)."""
        total = 0
        for segment in self.plan.segments():
            if segment.session is not None:
                total += max((sum(p.pool_sizes.values())
                              for p in segment.session._cache.values()), default=0)
        return total
