"""An If a model computes its own condition for, run as a straight-line plan of the branch
it took last (a session's plan for one input signature; backends/numpy/session.py).

A model cut at its control flow runs as segments (segments.py): a session per segment,
the If between them, each segment's results held as arrays. For a model whose only
region op is one If on a value it computes (openWakeWord's verifier: a second MLP run
when the first one's score passes a threshold), that machinery is most of a small
model's run time. Such an If (passes/inline_branches.py `speculated_if`) is
speculated on instead: the branch the last run took is inlined (`inline_speculated`)
with the condition as one more result, and that straight-line function is planned and
run as any model is (one arena, the lean path, captured kernels). A run whose condition
picks the other branch runs the other branch's plan (planned at its first use) from the
start, and the next runs speculate on it; a branch that cannot be planned alone (region
ops inside, shapes it does not fit) and a run that fails on the branch it speculated on
go to the segments, which are right by construction (and raise the error a model's
input really causes). The first run of a signature runs the segments and sees which
branch the If takes.

What it costs: a changed condition runs the ops before the If twice in that run; a
speculated plan's memory is planned apart from the segments' (each allocated when
first used)."""

from __future__ import annotations

import numpy as np

from palimpsest.backends.binding import output_names
from palimpsest.backends.numpy.arena import RunStats
from palimpsest.backends.numpy.executor import Executor


class Speculation:
    """The speculated If of one segmented plan (`plan`, for `signature`): the
    straight-line plan per branch index (compiled by `compile(signature, index)`, None
    where it cannot be), and the branch the next run speculates on (None: run the
    segments)."""

    def __init__(self, plan, compile, input_names: list):
        self.segmented = plan
        self.compile = compile
        self.input_names = input_names
        self.plans: dict = {}
        self.predicted = None
        self.step = next((step for step in plan.executor.plan.steps
                          if getattr(step, "op", None) is not None
                          and step.op.name == "graph.if"), None)
        self.last = None   # the straight-line plan the last run used (None: segments)

    def observe(self) -> None:
        """After a run of the segments: speculate on the branch the If took."""
        taken = getattr(self.step, "taken", None)
        if taken is not None and self._plan(taken) is not None:
            self.predicted = taken

    def ran(self, segmented):
        """The plan the last run used: a straight-line one, else `segmented`."""
        return self.last if self.last is not None else segmented

    def run(self, arrays: list):
        """The results (output order) of a run on `arrays` (input order, checked by the
        caller), on the branch the condition picks; None where the segments must run."""
        def run_one(plan):
            results = self._run(plan, arrays)
            return results[:-1], results[-1]
        return self._speculate(run_one)

    def run_named(self, inputs: dict, outputs: dict | None, profiler):
        """`run` for the named path of Session.run (the caller's output arrays, a
        profiler): (named results, RunStats), or None where the segments must run."""
        def run_one(plan):
            named, stats = plan.run(inputs, outputs, profiler)
            return (named, stats), named.pop(_condition_name(plan))
        return self._speculate(run_one)

    def _speculate(self, run_one):
        """`run_one(plan)` -> (what the run gives, its condition) on the predicted
        branch's plan, and on the other branch's where the condition picks it (then the
        next runs speculate on that one); None (and no prediction: the segments run and
        see the branch) where a plan is missing or its run fails."""
        self.last = None
        index = self.predicted
        for _ in range(2):
            plan = None if index is None else self._plan(index)
            if plan is None:
                break
            try:
                done, condition = run_one(plan)
            except Exception:   # (on the wrong branch; the segments raise a real one)
                break
            taken = _taken(condition)
            if taken == index:
                self.predicted, self.last = index, plan
                return done
            index = taken
        self.predicted = None
        return None

    def _plan(self, index: int):
        if index not in self.plans:
            self.plans[index] = self.compile(self.segmented.signature, index)
        return self.plans[index]

    def _run(self, plan, arrays: list) -> list:
        """A run of straight-line `plan` on `arrays`: its results, condition last."""
        executor = plan.executor
        function_plan = executor.plans.get(plan.func) if type(executor) is Executor else None
        if function_plan is not None and function_plan.input_checks:
            executor.begin_run(RunStats())
            results = executor.run_bound(plan.func, function_plan, arrays)
            executor.end_run()
            return results
        named, _ = plan.run(dict(zip(self.input_names, arrays)), None, None)
        return [named[name] for name in output_names(plan.func)]


def _taken(condition) -> int:
    """The branch index a run's If condition (one element: speculated_if) picks."""
    if type(condition) is not np.ndarray:
        condition = np.asarray(condition)
    return 0 if condition.item() else 1


def _condition_name(plan) -> str:
    return output_names(plan.func)[-1]
