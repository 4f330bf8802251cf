"""Control flow with ONNX subgraphs as regions: graph.if, graph.loop, graph.scan and the
terminator graph.yield.

Regions are not isolated from above: a branch or body uses the enclosing block's values
directly, as an ONNX subgraph names outer-scope values. Result types are what the
importer (or the text) declares; the verifier checks them against the terminators.

    %r = graph.if %cond : (tensor<i1>) -> tensor<?x4xf32> ({
      %a = graph.relu %x : tensor<2x4xf32>
      graph.yield %a : tensor<2x4xf32>
    }, {
      graph.yield %y : tensor<3x4xf32>
    })
"""

from __future__ import annotations

from palimpsest.dialects.graph.ops_base import (
    AnyTensor, GraphOp, ShapeError, flag_prop, int_prop, ints_prop, tensor,
)
from palimpsest.dialects.graph.shapes import merge_shapes
from palimpsest.ir.core import Operation
from palimpsest.ir.opdef import (
    IsTerminator, Pure, operand, optional_operand, region_def, register_op, variadic_operand,
    variadic_result,
)
from palimpsest.ir.types import TensorType


@register_op
class YieldOp(Operation):
    """The values a branch or loop body hands back to its region op."""

    name = "graph.yield"
    operands_ = variadic_operand()
    traits = (Pure(), IsTerminator())


def compatible(declared, produced) -> bool:
    """Whether a value of type `produced` may stand for a result declared `declared`
    (same element type; known dims equal where both are known)."""
    if not isinstance(declared, TensorType) or not isinstance(produced, TensorType):
        return declared == produced
    if declared.element_type != produced.element_type:
        return False
    if declared.shape is None or produced.shape is None:
        return True
    try:
        merge_shapes(tuple(declared.shape), tuple(produced.shape))
    except ShapeError:
        return False
    return True


class _RegionOp(GraphOp):
    """A graph op whose regions compute its results (no shape rule: the regions say)."""

    @classmethod
    def rule(cls, args):
        return None

    def yielded(self, region_index: int) -> list:
        last = self.regions[region_index].blocks[0].terminator
        if last is None or last.name != "graph.yield":
            raise self.error(f"region #{region_index} must end in graph.yield")
        return [v.type for v in last.operands]

    def check_yield(self, region_index: int, expected: list, what: str) -> None:
        produced = self.yielded(region_index)
        if len(produced) != len(expected):
            raise self.error(f"{what} yields {len(produced)} values, expected {len(expected)}")
        for index, (want, got) in enumerate(zip(expected, produced)):
            if not compatible(want, got):
                raise self.error(f"{what} yields {got} as value #{index}, which does not fit "
                                 f"{want}")


@register_op
class IfOp(_RegionOp):
    """Runs `then_branch` when `cond` (one boolean) is true, else `else_branch`; the
    results are the branch's yields."""

    name = "graph.if"
    cond = operand(AnyTensor)
    outputs = variadic_result(AnyTensor)
    then_branch = region_def(single_block=True)
    else_branch = region_def(single_block=True)

    def verify_(self) -> None:
        super().verify_()
        types = [r.type for r in self.results]
        self.check_yield(0, types, "then_branch")
        self.check_yield(1, types, "else_branch")


@register_op
class LoopOp(_RegionOp):
    """ONNX Loop: up to `M` iterations while `cond`; the body's block arguments are the
    iteration number, the condition and the loop-carried values; it yields the next
    condition, the carried values and one element of each scan output (stacked into the
    results after the carried ones)."""

    name = "graph.loop"
    M = optional_operand(AnyTensor)
    cond = optional_operand(AnyTensor)
    v_initial = variadic_operand(AnyTensor)
    outputs = variadic_result(AnyTensor)
    body = region_def(single_block=True)

    def verify_(self) -> None:
        super().verify_()
        carried = len(self.v_initial)
        block = self.regions[0].blocks[0]
        if len(block.args) != 2 + carried:
            raise self.error(f"body takes {len(block.args)} arguments, expected 2 + "
                             f"{carried} carried values")
        produced = self.yielded(0)
        if len(produced) != 1 + len(self.results):
            raise self.error(f"body yields {len(produced)} values, expected the condition "
                             f"and {len(self.results)} more")


@register_op
class ScanOp(_RegionOp):
    """ONNX Scan (opset 9+): the body's arguments are the states then one slice of each
    scan input; it yields the next states then one slice of each scan output."""

    name = "graph.scan"
    initial_state_and_scan_inputs = variadic_operand(AnyTensor)
    outputs = variadic_result(AnyTensor)
    body = region_def(single_block=True)
    num_scan_inputs = int_prop()
    scan_input_axes = ints_prop()
    scan_input_directions = ints_prop()
    scan_output_axes = ints_prop()
    scan_output_directions = ints_prop()
    batched = flag_prop(0)   # Scan-8: dim 0 is a batch, scanned entry by entry

    def verify_(self) -> None:
        super().verify_()
        block = self.regions[0].blocks[0]
        if len(block.args) != len(self.operands):
            raise self.error(f"body takes {len(block.args)} arguments, expected "
                             f"{len(self.operands)}")
        if len(self.yielded(0)) != len(self.results):
            raise self.error(f"body yields {len(self.yielded(0))} values for "
                             f"{len(self.results)} results")
