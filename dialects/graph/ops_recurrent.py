"""Recurrent graph ops: LSTM, GRU and RNN (every opset: forward, reverse, bidirectional;
sequence_lens, initial states, peepholes, layout 0 and 1, custom activations, clip,
input_forget, linear_before_reset). Results Y, Y_h (and Y_c), each optional."""

from __future__ import annotations

from palimpsest.dialects.graph import shapes as S
from palimpsest.dialects.graph.ops_base import (
    AnyTensor, FloatTensor, GraphOp, IndexTensor, ShapeError, float_prop, floats_prop,
    int_prop, segments_prop, str_prop, tensor,
)
from palimpsest.ir.attributes import ArrayAttr, StringAttr
from palimpsest.ir.opdef import PropDef, operand, optional_operand, register_op, \
    variadic_result

ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu",
               "ScaledTanh", "HardSigmoid", "Elu", "Softsign", "Softplus")


def _check_activations(attr):
    names = [a.value for a in attr.value if isinstance(a, StringAttr)]
    if len(names) != len(attr.value):
        return "must be an array of strings"
    unknown = [n for n in names if n not in ACTIVATIONS]
    if unknown:
        return f"has unknown activation '{unknown[0]}' (known: {', '.join(ACTIVATIONS)})"
    return None


class _RecurrentOp(GraphOp):
    X = operand(FloatTensor)
    W = operand(FloatTensor)
    R = operand(FloatTensor)
    B = optional_operand(FloatTensor)
    sequence_lens = optional_operand(IndexTensor)
    initial_h = optional_operand(FloatTensor)
    outputs = variadic_result(AnyTensor)
    activation_alpha = floats_prop()
    activation_beta = floats_prop()
    activations = PropDef(ArrayAttr, optional=True, check=_check_activations,
                          description="an array of activation function names")
    clip = float_prop(optional=True)
    direction = str_prop("forward", choices=("forward", "reverse", "bidirectional"))
    hidden_size = int_prop(optional=True)
    layout = int_prop(0, values=(0, 1))
    operandSegmentSizes = segments_prop()

    gates = 1          # gate blocks in W and R
    state_results = 1  # Y_h (and Y_c for LSTM)

    @classmethod
    def rule(cls, args):
        element = args.same_element("X", "W", "R")
        count = args.num_results if args.num_results is not None else 1
        if not 1 <= count <= 1 + cls.state_results:
            raise ShapeError(f"has {count} results, at most {1 + cls.state_results}")
        dirs = 2 if args["direction"] == "bidirectional" else 1
        x, w, r = args.shape("X"), args.shape("W"), args.shape("R")
        for name, shape in (("X", x), ("W", w), ("R", r)):
            if shape is not None and len(shape) != 3:
                raise ShapeError(f"'{name}' must be 3-D, got {S.fmt(shape)}")
        if w is not None and w[0] is not None and w[0] != dirs:
            raise ShapeError(f"'W' has {w[0]} directions, direction "
                             f"'{args['direction']}' needs {dirs}")
        hidden = args["hidden_size"]
        if hidden is None and r is not None:
            hidden = r[2]
        if hidden is not None and w is not None and w[1] is not None \
                and w[1] != cls.gates * hidden:
            raise ShapeError(f"'W' has {w[1]} rows, expected {cls.gates} x hidden_size "
                             f"{hidden}")
        seq, batch = (None, None) if x is None else (x[0], x[1])
        if args["layout"]:
            seq, batch = batch, seq
            y, state = (batch, seq, dirs, hidden), (batch, dirs, hidden)
        else:
            y, state = (seq, dirs, batch, hidden), (dirs, batch, hidden)
        types = [tensor(y, element)] + [tensor(state, element)] * cls.state_results
        return types[:count]


@register_op
class LSTMOp(_RecurrentOp):
    """Gates i, o, f, c in W/R/B; peepholes P: i, o, f."""

    name = "graph.lstm"
    initial_c = optional_operand(FloatTensor)
    P = optional_operand(FloatTensor)
    input_forget = int_prop(0, values=(0, 1))
    gates = 4
    state_results = 2


@register_op
class GRUOp(_RecurrentOp):
    """Gates z, r, h in W/R/B."""

    name = "graph.gru"
    linear_before_reset = int_prop(0, values=(0, 1))
    gates = 3


@register_op
class RNNOp(_RecurrentOp):
    name = "graph.rnn"
