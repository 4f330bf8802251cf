"""The graph dialect: ONNX-semantics tensor ops with value semantics.

Importing this package registers every op. Op names, operand order, property kinds and
element types follow CONVENTIONS.md; shape rules live in `shapes.py` (plain functions),
and each op class exposes them through `infer_result_types(operand_types, properties,
constant_operands)`.
"""

from __future__ import annotations

from palimpsest.dialects.graph import (  # noqa: F401  (registration)
    ops_attention, ops_constant, ops_control, ops_data, ops_elementwise, ops_loss, ops_math, ops_nn, ops_quant,
    ops_recurrent, ops_reduce, ops_shape, ops_signal, ops_spatial,
)
from palimpsest.dialects.graph.ops_base import GraphOp, refine_type
from palimpsest.dialects.graph.shapes import ShapeError

__all__ = ["GraphOp", "ShapeError", "graph_ops", "refine_type"]


def graph_ops() -> dict:
    """Every registered graph op class by name."""
    from palimpsest.ir.opdef import registered_ops

    return {name: cls for name, cls in registered_ops().items() if name.startswith("graph.")}
