"""Interpret graph-level IR with the numpy reference kernels."""

from __future__ import annotations

from palimpsest.backends.binding import bind_inputs, output_names
from palimpsest.ir import attributes as A
from palimpsest.ir.diagnostics import DiagnosticError
from palimpsest.ir.opdef import OPTIONAL, VARIADIC, segment_sizes
from palimpsest.ir.verifier import lookup_symbol


def attribute_value(attr):
    """A property as the reference kernels take it."""
    if isinstance(attr, (A.DenseElementsAttr, A.DenseResourceAttr)):
        return attr.to_numpy()
    return A.to_python(attr)


def kernel_inputs(op, values: dict) -> list:
    """Operand arrays in ONNX order, with None for an absent optional operand."""
    cls = type(op)
    sizes = segment_sizes(op, op.operands, cls.operand_defs, "operandSegmentSizes")
    inputs, position = [], 0
    for definition, size in zip(cls.operand_defs, sizes):
        group = [values[v] for v in op.operands[position:position + size]]
        position += size
        if definition.kind == VARIADIC:
            inputs.extend(group)
        elif definition.kind == OPTIONAL and not group:
            inputs.append(None)
        else:
            inputs.extend(group)
    while inputs and inputs[-1] is None:
        inputs.pop()
    return inputs


def _evaluate(op, values: dict):
    from palimpsest.dialects.graph.reference import KERNELS

    kernel = KERNELS.get(op.name)
    if kernel is None:
        raise op.error("has no reference implementation")
    attrs = {k: attribute_value(v) for k, v in op.properties.items()
             if k != "operandSegmentSizes"}
    try:
        return kernel(kernel_inputs(op, values), attrs, len(op.results))
    except (ValueError, IndexError, TypeError) as error:
        raise op.error(f"failed at run time: {error}") from None


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
