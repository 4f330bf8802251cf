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
    return run_block(func.entry_block, values, depth)


def run_block(block, values: dict, depth: int = 0) -> list:
    """Run `block`'s ops with `values` (the enclosing blocks' values, extended in place);
    the values its terminator (func.return or graph.yield) hands back."""
    for op in block.ops:
        if op.name in ("func.return", "graph.yield"):
            return [values[v] for v in op.operands]
        if op.name == "func.call":
            callee = lookup_symbol(op, op.callee)
            results = run_function(callee, [values[v] for v in op.operands], depth + 1)
        elif op.name in REGION_OPS:
            results = REGION_OPS[op.name](
                op, values, lambda index, args, op=op: _region(op, index, values, args, depth))
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
    raise DiagnosticError("a block has no terminator", block.parent_op.loc
                          if block.parent_op is not None else None)


def _region(op, index, values, args, depth):
    block = op.regions[index].blocks[0]
    scope = dict(values)
    scope.update(zip(block.args, args))
    return run_block(block, scope, depth + 1)


# Each region op's runner: (op, values, run_region) -> results, where run_region(index,
# args) runs region `index` on its block arguments (here by interpreting it; the numpy
# backend's segments.py passes planned bodies).
def _if(op, values, run_region):
    import numpy as np

    cond = np.asarray(values[op.operands[0]])
    if cond.size != 1:
        raise op.error(f"'cond' must hold one value, got shape {list(cond.shape)}")
    return run_region(0 if bool(cond.reshape(-1)[0]) else 1, [])


def _loop(op, values, run_region):
    """ONNX Loop: while (no M or i < M) and (no cond or cond)."""
    import numpy as np

    m = op.M
    cond = op.cond
    limit = int(np.asarray(values[m]).reshape(-1)[0]) if m is not None else None
    going = bool(np.asarray(values[cond]).reshape(-1)[0]) if cond is not None else True
    carried = [values[v] for v in op.v_initial]
    scans: list = []
    i = 0
    while going and (limit is None or i < limit):
        out = run_region(0, [np.array(i, np.int64), np.array(going)] + carried)
        going = bool(np.asarray(out[0]).reshape(-1)[0])
        carried = out[1:1 + len(carried)]
        scans.append(out[1 + len(carried):])
        i += 1
    stacked = []
    for k, result in enumerate(op.results[len(carried):]):
        if scans:
            stacked.append(np.stack([np.asarray(s[k]) for s in scans]))
        else:
            stacked.append(np.zeros((0,) + tuple(d or 0 for d in (
                result.type.shape or (0,))[1:]), _dtype(result.type)))
    return carried + stacked


def _scan(op, values, run_region):
    """ONNX Scan 9+: states carried, scan inputs sliced along their axes (reversed where
    the direction is 1), scan outputs stacked along theirs. Scan-8 (`batched`): the same
    per entry of dim 0, results stacked along it."""
    import numpy as np

    inputs = [values[v] for v in op.operands]
    batched = op.properties.get("batched")
    if batched is not None and batched.value:
        per_entry = [_scan_once(op, run_region, [np.asarray(a)[b] for a in inputs])
                     for b in range(np.asarray(inputs[0]).shape[0])]
        return [np.stack(parts) for parts in zip(*per_entry)]
    return _scan_once(op, run_region, inputs)


def _scan_once(op, run_region, inputs):
    import numpy as np

    count = op.properties["num_scan_inputs"].value
    states = inputs[:len(inputs) - count]
    scanned = [np.asarray(a) for a in inputs[len(inputs) - count:]]

    def ints(name, default):
        attr = op.properties.get(name)
        return list(attr.values) if attr is not None else default

    in_axes = ints("scan_input_axes", [0] * count)
    in_dirs = ints("scan_input_directions", [0] * count)
    in_axes = [a % s.ndim for a, s in zip(in_axes, scanned)]
    steps = scanned[0].shape[in_axes[0]] if scanned else 0
    outs: list = []
    for t in range(steps):
        slices = [np.take(s, steps - 1 - t if d else t, axis=a)
                  for s, a, d in zip(scanned, in_axes, in_dirs)]
        out = run_region(0, states + slices)
        states = out[:len(states)]
        outs.append(out[len(states):])
    n_out = len(op.results) - len(states)
    out_axes = ints("scan_output_axes", [0] * n_out)
    out_dirs = ints("scan_output_directions", [0] * n_out)
    stacked = []
    for k in range(n_out):
        parts = [np.asarray(o[k]) for o in outs]
        if out_dirs[k]:
            parts = parts[::-1]
        array = np.stack(parts)
        stacked.append(np.moveaxis(array, 0, out_axes[k] % array.ndim))
    return states + stacked


def _dtype(type_):
    import numpy as np

    from palimpsest.ir.attributes import numpy_dtype_name

    return np.dtype(numpy_dtype_name(type_.element_type))


REGION_OPS = {"graph.if": _if, "graph.loop": _loop, "graph.scan": _scan}


def run(func, inputs: dict) -> dict:
    """Run `func` on named inputs (checked against its signature); named outputs."""
    results = run_function(func, bind_inputs(func, inputs))
    return dict(zip(output_names(func), results))
