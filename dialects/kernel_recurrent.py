"""Kernel ops of the recurrent networks: `kernel.lstm`, `kernel.gru` and `kernel.rnn`
(graph.lstm/gru/rnn, ops_recurrent.py), with their scratch as workspaces (see
dialects/kernel.py):

    kernel.lstm %x, %w, %r, %b, %y, %y_h, %y_c, %projected, %recurrence, %state
        {activations = ["Sigmoid", "Tanh", "Tanh"], direction = "forward",
         optional_ins = ["B"], ...}

ins: X, W, R, then the optional ins the graph op was given, in ONNX order, as
`optional_ins` names them (B, sequence_lens, initial_h, and initial_c, P for LSTM).
outs: Y, then Y_h (and Y_c), the first ones the model uses. `activations` holds every
function (per direction: LSTM f, g, h; GRU f, g; RNN f) and `activation_alpha` /
`activation_beta` one value each, resolved by the lowering (`resolve_activations`).

Workspaces, reused by each direction in turn (G gates of H units: LSTM 4, GRU 3, RNN 1),
gate-major so that every array a step touches is contiguous (numpy buffers a ufunc over
a strided or broadcast operand):

| role | shape | holds |
|---|---|---|
| `projected` | G x seq x batch x H | X·Wᵀ (one matmul for every step) plus the biases |
| `recurrence` | G x H x H | Rᵀ per gate, contiguous (BLAS is 1.3-1.8x slower on R's transpose); none with `packed_r` |
| `state` | rows x batch x H | what the steps read and write, below |
| `valid` (given sequence_lens) | seq x batch, i1 | which entries a step updates |

With `packed_r = 1` (prepack-weights, for a constant R), R is already that layout, dirs x
G x H x H, Rᵀ per direction and gate: no `recurrence` workspace, no copy per run.

The rows of `state` (`state_rows`; one workspace rather than six, since a planner pads
each buffer to its alignment and searches more orders the more buffers there are):
`gates` (LSTM, GRU: G; a step's H·Rᵀ, then its gates in place), `hidden` (2: the state
and the next one), `cell` (LSTM: 2), `scratch` (LSTM 3, GRU 2, RNN 1: peephole terms,
r ⊙ H, the activations' second operand), `bias` (given B: each gate's biases per batch
entry; GRU with linear_before_reset: G + 1, Rbh apart), `peepholes` (LSTM given P: 3).
"""

from __future__ import annotations

from palimpsest.dialects.graph.ops_recurrent import ACTIVATIONS, resolve_activations
from palimpsest.dialects.graph.shapes import ShapeError
from palimpsest.dialects.kernel_base import (
    KernelOp, _floats, _int, _str, f64_array, is_float,
)
from palimpsest.ir import attributes as A
from palimpsest.ir.opdef import PropDef, register_op
from palimpsest.ir.types import IntegerType, f32, i1


def _strings(allowed, optional=False) -> PropDef:
    def check(attr):
        if not all(isinstance(a, A.StringAttr) and a.value in allowed for a in attr.value):
            return f"must be an array of strings among {', '.join(allowed)}, got {attr}"
        return None
    return PropDef(A.ArrayAttr, optional=optional, check=check,
                   description="an array of strings")


class _RecurrentKernel(KernelOp):
    arity = (3, 8)
    direction = _str("forward", ("forward", "reverse", "bidirectional"))
    layout = _int(0, (0, 1))
    activations = _strings(tuple(ACTIVATIONS))
    activation_alpha = _floats(optional=False)
    activation_beta = _floats(optional=False)
    clip = PropDef(A.FloatAttr, optional=True, description="an f32 float")
    optional_ins = _strings(("B", "sequence_lens", "initial_h", "initial_c", "P"),
                            optional=True)
    packed_r = _int(0, (0, 1))   # R given as dirs x G x H x H, Rᵀ per gate (module doc)

    gates = 1                                           # G
    OPTIONAL_INS = ("B", "sequence_lens", "initial_h")  # in ONNX order
    PER_DIRECTION = 1                                   # activations per direction
    STATES = ("hidden",)                                # state workspaces

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.outs_arity = (1, 1 + len(cls.STATES))  # Y, then a final state per STATES

    @classmethod
    def properties_from(cls, graph_op: str, prop, given: list) -> dict | None:
        """The kernel's properties for graph op `graph_op` whose properties `prop(name,
        default)` reads and which was given the optional ins `given`; None when its
        activations do not fit (the graph op's verifier says why)."""
        direction = prop("direction", "forward")
        try:
            resolved = resolve_activations(graph_op, prop("activations"),
                                           prop("activation_alpha"), prop("activation_beta"),
                                           2 if direction == "bidirectional" else 1)
        except ShapeError:
            return None
        props = {"direction": A.StringAttr(direction),
                 "layout": A.IntegerAttr(prop("layout", 0)),
                 "activations": A.ArrayAttr(tuple(A.StringAttr(n) for n, _, _ in resolved)),
                 "activation_alpha": f64_array(alpha for _, alpha, _ in resolved),
                 "activation_beta": f64_array(beta for _, _, beta in resolved),
                 "optional_ins": A.ArrayAttr(tuple(A.StringAttr(n) for n in given))}
        if prop("clip") is not None:
            props["clip"] = A.FloatAttr(float(prop("clip")), f32)
        for name in ("input_forget", "linear_before_reset"):
            if name in cls.prop_defs:
                props[name] = A.IntegerAttr(prop(name, 0))
        return props

    @classmethod
    def in_roles(cls, config) -> list:
        """The name of each in (X, W, R, then `optional_ins`)."""
        return ["X", "W", "R"] + list(config["optional_ins"] or [])

    @classmethod
    def check(cls, in_types, config):
        roles = cls.in_roles(config)
        given = roles[3:]
        if [n for n in cls.OPTIONAL_INS if n in given] != given:
            return (f"optional_ins must name optional ins of {cls.name} in ONNX order "
                    f"({', '.join(cls.OPTIONAL_INS)}), got {', '.join(given)}")
        if len(in_types) != len(roles):
            return f"takes {len(roles)} ins (X, W, R, {', '.join(given)}), got {len(in_types)}"
        x = in_types[0]
        for role, t in zip(roles, in_types):
            if role == "sequence_lens":
                if not (isinstance(t.element_type, IntegerType)
                        and t.element_type.width in (32, 64)) or len(t.shape) != 1:
                    return f"takes 1-D i32 or i64 sequence_lens, got '{t}'"
            elif t.element_type != x.element_type or not is_float(x.element_type):
                return "computes f32 or f64, with X, W, R, B, the states and P alike"
        packed = {"R": 4 if config["packed_r"] else 3}
        for role, t in zip(roles, in_types):
            rank = packed.get(role, {"B": 2, "P": 2, "sequence_lens": 1}.get(role, 3))
            if len(t.shape) != rank:
                return f"takes a {rank}-D {role}, got '{t}'"
        dirs = 2 if config["direction"] == "bidirectional" else 1
        count = cls.PER_DIRECTION * dirs
        for name in ("activations", "activation_alpha", "activation_beta"):
            if len(config[name]) != count:
                return f"{name} must have {count} values, got {len(config[name])}"
        w = in_types[1].shape
        if w[0] is not None and w[0] != dirs:
            return f"W has {w[0]} directions, '{config['direction']}' needs {dirs}"
        r = in_types[2].shape
        if config["packed_r"] and r[1] is not None and r[1] != cls.gates:
            return f"a packed R has {cls.gates} gates in dim 1, got '{in_types[2]}'"
        return None

    @staticmethod
    def hidden_size(r_shape, config):
        """H, from R's shape (dirs x G·H x H, or packed dirs x G x H x H)."""
        return r_shape[3] if config.get("packed_r") else r_shape[2]

    @classmethod
    def result_shapes(cls, in_shapes, config):
        x, r = in_shapes[0], in_shapes[2]
        seq, batch = (x[1], x[0]) if config["layout"] else (x[0], x[1])
        dirs = 2 if config["direction"] == "bidirectional" else 1
        hidden = cls.hidden_size(r, config)
        if config["layout"]:
            y, state = (batch, seq, dirs, hidden), (batch, dirs, hidden)
        else:
            y, state = (seq, dirs, batch, hidden), (dirs, batch, hidden)
        return [y] + [state] * len(cls.STATES)

    @classmethod
    def result_elements(cls, in_types, config):
        return [in_types[0].element_type] * (1 + len(cls.STATES))

    @classmethod
    def bias_rows(cls, config) -> int:
        """Rows of the biases in `state`: one per gate (and GRU's Rbh apart)."""
        return cls.gates

    @classmethod
    def state_rows(cls, config) -> dict:
        """The rows of the `state` workspace, by purpose (see the module doc)."""
        given = config["optional_ins"] or []
        counts = [("gates", cls.gates if cls.gates > 1 else 0), ("hidden", 2),
                  ("cell", 2 if "cell" in cls.STATES else 0),
                  ("scratch", min(cls.gates, 3)),
                  ("bias", cls.bias_rows(config) if "B" in given else 0),
                  ("peepholes", 3 if "P" in given else 0)]
        rows, start = {}, 0
        for name, count in counts:
            if count:
                rows[name] = range(start, start + count)
                start += count
        return rows

    @classmethod
    def workspace_roles(cls, in_types, config):
        given = config["optional_ins"] or []
        return ["projected"] + ([] if config["packed_r"] else ["recurrence"]) + ["state"] + (
            ["valid"] if "sequence_lens" in given else [])

    @classmethod
    def workspace_shape(cls, role, in_shapes, config):
        x, r = in_shapes[0], in_shapes[2]
        hidden = cls.hidden_size(r, config)
        seq, batch = (x[1], x[0]) if config["layout"] else (x[0], x[1])
        if role == "projected":
            return (cls.gates, seq, batch, hidden)
        if role == "recurrence":
            return (cls.gates, hidden, hidden)
        if role == "state":
            return (max(rows.stop for rows in cls.state_rows(config).values()), batch, hidden)
        if role == "valid":
            return (seq, batch)
        raise KeyError(role)

    @classmethod
    def workspace_element(cls, role, in_types, config):
        return i1 if role == "valid" else in_types[0].element_type


@register_op
class LstmOp(_RecurrentKernel):
    """Gates i, o, f, c; peepholes P: i, o, f; `input_forget` couples f to 1 - i."""

    name = "kernel.lstm"
    input_forget = _int(0, (0, 1))
    gates = 4
    OPTIONAL_INS = ("B", "sequence_lens", "initial_h", "initial_c", "P")
    PER_DIRECTION = 3
    STATES = ("hidden", "cell")


@register_op
class GruOp(_RecurrentKernel):
    """Gates z, r, h; `linear_before_reset` applies r after H·Rhᵀ + Rbh."""

    name = "kernel.gru"
    linear_before_reset = _int(0, (0, 1))
    gates = 3
    PER_DIRECTION = 2

    @classmethod
    def bias_rows(cls, config) -> int:
        return cls.gates + (1 if config["linear_before_reset"] else 0)


@register_op
class RnnOp(_RecurrentKernel):
    name = "kernel.rnn"


RECURRENT_KERNELS = {"graph.lstm": LstmOp, "graph.gru": GruOp, "graph.rnn": RnnOp}

__all__ = ["GruOp", "LstmOp", "RECURRENT_KERNELS", "RnnOp"]
