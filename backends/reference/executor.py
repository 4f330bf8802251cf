"""Interpret graph-level IR with the numpy reference kernels."""

from __future__ import annotations

from palimpsest.backends.binding import bind_inputs, output_names
from palimpsest.dialects.graph.evaluate import (  # noqa: F401  (re-exported)
    attribute_value, evaluate_op, kernel_inputs,
)
from palimpsest.ir.diagnostics import DiagnosticError
from palimpsest.ir.verifier import lookup_symbol


def _evaluate(op, values: dict):
    return evaluate_op(op, [values[v] for v in op.operands])


def run_function(func, arrays: list, depth: int = 0) -> list:
    """Run `func` on positional arrays; returns its results."""
    if depth > 64:
        raise func.error("call depth exceeds 64 (recursion?)")
    values = dict(zip(func.entry_block.args, arrays))
    for op in func.entry_block.ops:
        if op.name == "func.return":
            return [values[v] for v in op.operands]
        if op.name == "func.call":
            callee = lookup_symbol(op, op.callee)
            results = run_function(callee, [values[v] for v in op.operands], depth + 1)
        elif op.name.startswith("graph."):
            results = _evaluate(op, values)
        else:
            raise DiagnosticError(f"the reference executor cannot run '{op.name}' (only the "
                                  f"graph, func and builtin dialects)", op.loc)
        if len(results) != len(op.results):
            raise op.error(f"produced {len(results)} results at run time, expected "
                           f"{len(op.results)}")
        for result, array in zip(op.results, results):
            values[result] = array
    raise func.error("has no func.return")


def run(func, inputs: dict) -> dict:
    """Run `func` on named inputs (checked against its signature); named outputs."""
    results = run_function(func, bind_inputs(func, inputs))
    return dict(zip(output_names(func), results))
