"""Recurrent graph ops: LSTM, GRU and RNN (every opset: forward, reverse, bidirectional;
sequence_lens, initial states, peepholes, layout 0 and 1, custom activations, clip,
input_forget, linear_before_reset). Results Y, Y_h (and Y_c), each optional.

Opsets 1 and 3 have `output_sequence` (Y is optional when 0): it changes no value, as
Y is a result exactly when the model names it; opset 1 GRU has no
`linear_before_reset` (its default, 0, is that opset's semantics); opset 14 added
`layout`. The activation table and how `activation_alpha`/`activation_beta` are read
(`resolve_activations`) are shared by the reference kernels and the kernel lowering."""

from __future__ import annotations

from palimpsest.dialects.graph.bound_rules import at_upper
from palimpsest.dialects.graph import shapes as S
from palimpsest.dialects.graph.ops_base import (
    AnyTensor, FloatTensor, GraphOp, IndexTensor, ShapeError, flag_prop, float_prop,
    floats_prop, int_prop, str_prop, tensor, tensor_where,
)
from palimpsest.ir.types import IntegerType
from palimpsest.ir.attributes import ArrayAttr, StringAttr
from palimpsest.ir.opdef import PropDef, operand, optional_operand, register_op, \
    variadic_result

# name -> (default alpha, default beta); None: the function takes no such parameter. The
# defaults are the ONNX operators' of the same name (the spec's rule).
ACTIVATIONS = {
    "Relu": (None, None), "Tanh": (None, None), "Sigmoid": (None, None),
    "Affine": (1.0, 0.0), "LeakyRelu": (0.01, None), "ThresholdedRelu": (1.0, None),
    "ScaledTanh": (1.0, 1.0), "HardSigmoid": (0.2, 0.5), "Elu": (1.0, None),
    "Softsign": (None, None), "Softplus": (None, None),
}
_BY_LOWER = {name.lower(): name for name in ACTIVATIONS}

# per direction: LSTM f, g, h; GRU f, g; RNN f
DEFAULT_ACTIVATIONS = {"graph.lstm": ("Sigmoid", "Tanh", "Tanh"),
                       "graph.dynamic_quantize_lstm": ("Sigmoid", "Tanh", "Tanh"),
                       "graph.gru": ("Sigmoid", "Tanh"), "graph.rnn": ("Tanh",)}


def canonical_activation(name: str) -> str | None:
    """The spec's spelling of an activation name (onnxruntime accepts any case)."""
    return _BY_LOWER.get(name.lower())


def resolve_activations(op_name: str, names, alphas, betas, directions: int) -> list:
    """Every activation function of the op, in order (direction 0's, then direction
    1's), as (name, alpha, beta). `activation_alpha` and `activation_beta` are consumed
    in order by the functions that take the parameter, the rest taking their defaults
    (onnxruntime's reading of the spec); 0.0 stands for a parameter a function does not
    take. ShapeError when the names do not fit the op."""
    per_direction = DEFAULT_ACTIVATIONS[op_name]
    if names is None or not len(names):
        names = list(per_direction) * directions
    if len(names) != len(per_direction) * directions:
        raise ShapeError(f"needs {len(per_direction) * directions} activations "
                         f"({len(per_direction)} per direction), got {len(names)}")
    alphas = [] if alphas is None else list(alphas)
    betas = [] if betas is None else list(betas)
    resolved = []
    for name in names:
        canonical = canonical_activation(name)
        if canonical is None:
            raise ShapeError(f"unknown activation '{name}' (known: "
                             f"{', '.join(ACTIVATIONS)})")
        default_alpha, default_beta = ACTIVATIONS[canonical]
        alpha = 0.0 if default_alpha is None else (alphas.pop(0) if alphas else default_alpha)
        beta = 0.0 if default_beta is None else (betas.pop(0) if betas else default_beta)
        resolved.append((canonical, float(alpha), float(beta)))
    return resolved


def _check_activations(attr):
    if not all(isinstance(a, StringAttr) for a in attr.value):
        return "must be an array of strings"
    unknown = [a.value for a in attr.value if canonical_activation(a.value) is None]
    if unknown:
        return f"has unknown activation '{unknown[0]}' (known: {', '.join(ACTIVATIONS)})"
    return None


QuantizedTensor = tensor_where("a tensor of i8 or ui8",
                               lambda t: isinstance(t, IntegerType) and t.width == 8)


def _expect(args, name: str, expected: tuple) -> None:
    """Operand `name`, when given, has `expected` (None dims: any) as its shape."""
    shape = args.shape(name)
    if shape is None:
        return
    if len(shape) != len(expected) or not S.shapes_compatible(shape, expected):
        raise ShapeError(f"'{name}' must have shape {S.fmt(expected)}, got {S.fmt(shape)}")


def _times(a, b):
    return None if a is None or b is None else a * b


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
    output_sequence = flag_prop(0)  # opsets 1 and 3 (see the module doc)

    gates = 1          # gate blocks in W and R
    state_results = 1  # Y_h (and Y_c for LSTM)
    states = ("initial_h",)
    float_operands = ("X", "W", "R", "B")   # one element type
    weights_transposed = False   # W, R as (dirs, rows, K); DynamicQuantizeLSTM's (dirs, K, rows)

    bound_rule = classmethod(at_upper)

    @classmethod
    def directions(cls, args) -> int:
        return 2 if args["direction"] == "bidirectional" else 1

    @classmethod
    def rule(cls, args):
        element = args.same_element(*cls.float_operands, *cls.states)
        count = args.num_results if args.num_results is not None else 1
        if not 1 <= count <= 1 + cls.state_results:
            raise ShapeError(f"has {count} results, at most {1 + cls.state_results}")
        dirs = cls.directions(args)
        activations = args["activations"]
        resolve_activations(cls.name, [a.value for a in activations.value]
                            if activations is not None else None,
                            args["activation_alpha"], args["activation_beta"], dirs)
        x, w, r = args.shape("X"), args.shape("W"), args.shape("R")
        for name, shape in (("X", x), ("W", w), ("R", r)):
            if shape is not None and len(shape) != 3:
                raise ShapeError(f"'{name}' must be 3-D, got {S.fmt(shape)}")
        hidden = args["hidden_size"]
        if hidden is not None and hidden < 1:
            raise ShapeError(f"hidden_size must be positive, got {hidden}")
        if hidden is None and r is not None:
            hidden = r[1] if cls.weights_transposed else r[2]
        seq, batch, size = (None, None, None) if x is None else x
        if args["layout"]:
            seq, batch = batch, seq
        rows = _times(cls.gates, hidden)
        if cls.weights_transposed:
            _expect(args, "W", (dirs, size, rows))
            _expect(args, "R", (dirs, hidden, rows))
        else:
            _expect(args, "W", (dirs, rows, size))
            _expect(args, "R", (dirs, rows, hidden))
        _expect(args, "B", (dirs, _times(2, rows)))
        _expect(args, "sequence_lens", (batch,))
        state = (batch, dirs, hidden) if args["layout"] else (dirs, batch, hidden)
        for name in cls.states:
            _expect(args, name, state)
        cls.check_extra(args, dirs, hidden)
        y = (batch, seq, dirs, hidden) if args["layout"] else (seq, dirs, batch, hidden)
        types = [tensor(y, element)] + [tensor(state, element)] * cls.state_results
        return types[:count]

    @classmethod
    def check_extra(cls, args, dirs, hidden) -> None:
        """Checks of the operands only some ops have."""


@register_op
class LSTMOp(_RecurrentOp):
    """Gates i, o, f, c in W/R/B; peepholes P: i, o, f."""

    name = "graph.lstm"
    initial_c = optional_operand(FloatTensor)
    P = optional_operand(FloatTensor)
    input_forget = flag_prop(0)
    gates = 4
    state_results = 2
    states = ("initial_h", "initial_c")

    @classmethod
    def check_extra(cls, args, dirs, hidden) -> None:
        args.same_element("X", "P")
        _expect(args, "P", (dirs, _times(3, hidden)))


@register_op
class GRUOp(_RecurrentOp):
    """Gates z, r, h in W/R/B."""

    name = "graph.gru"
    linear_before_reset = flag_prop(0)
    gates = 3


@register_op
class RNNOp(_RecurrentOp):
    name = "graph.rnn"


@register_op
class DynamicQuantizeLSTMOp(LSTMOp):
    """onnxruntime's com.microsoft DynamicQuantizeLSTM, which its quantization tool emits
    for LSTM: W (dirs, input_size, 4·hidden) and R (dirs, hidden, 4·hidden) are int8 or
    uint8 with a scale and zero point per direction (or per direction and column). Each
    GEMM quantizes its float operand to uint8 over its own range, as
    DynamicQuantizeLinear does, and multiplies in integers: X for every step at once,
    the hidden state once per step."""

    name = "graph.dynamic_quantize_lstm"
    W = operand(QuantizedTensor)
    R = operand(QuantizedTensor)
    W_scale = operand(FloatTensor)
    W_zero_point = operand(QuantizedTensor)
    R_scale = operand(FloatTensor)
    R_zero_point = operand(QuantizedTensor)
    float_operands = ("X", "B", "W_scale", "R_scale")
    weights_transposed = True

    @classmethod
    def check_extra(cls, args, dirs, hidden) -> None:
        super().check_extra(args, dirs, hidden)
        for weight in ("W", "R"):
            args.same_element(weight, f"{weight}_zero_point")
            for param in (f"{weight}_scale", f"{weight}_zero_point"):
                shape = args.shape(param)
                if shape is not None and not (
                        S.shapes_compatible(shape, (dirs,))
                        or S.shapes_compatible(shape, (dirs, _times(4, hidden)))):
                    raise ShapeError(f"'{param}' must have shape [{dirs}] or "
                                     f"[{dirs}, 4·hidden], got {S.fmt(shape)}")
