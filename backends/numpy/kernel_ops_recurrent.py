"""Recurrent kernels on numpy: kernel.lstm, kernel.gru and kernel.rnn (kernel_recurrent.py).
Registered in `KERNEL_IMPLS` (kernel_ops.py, which imports this module).

A GRU or LSTM that the fast path below would take, over two steps or more, runs on
oneDNN's RNN primitive instead where it is in use (backends/onednn_rnn.py: one call for
the whole sequence, weights packed once for constants; gtcrn's GRUs 0.45 -> 0.1 ms a
run); the rest of this module is the route elsewhere, and for one step, a
bidirectional cell with several batch entries, layout 1 and the general cells.

Per direction: X·Wᵀ for every step is one `np.matmul` into the `projected` workspace
(gate-major: G x seq x batch x H), and the biases that do not depend on the state are
added to it once (one add per step over every gate); Rᵀ is copied contiguous into the
`recurrence` workspace (BLAS is 1.3-1.8x slower on a transposed view at larger batches),
unless prepack-weights stored R so (`packed_r`), or there is one batch entry or one step
(then the product is a matrix-vector one, as fast on R's rows as on a copy, or the copy
would serve one step: R's transposed view is read as it is, 76 us saved per run on
Silero VAD's 4x128x128 R). Then one step per time index (backwards for `reverse` and the
second direction): a batched `np.matmul` of the hidden state by Rᵀ into the `gates` rows
of the `state` workspace, and in-place ufuncs on whole gates.

LSTM and GRU with their default activations, no clip, peepholes or input_forget, and
every batch entry running every step take the fast loop (`_fast_gru`, `_fast_lstm`):
a step writes the next hidden state straight into its row of Y and the next step reads
it there (no copy, no halves to swap), sigmoid is 0.5 * tanh(0.5 * x) + 0.5 with 0.5 a
row of the scratch (an array operand costs less than a scalar one), outs are given by
position: about half the numpy calls of a general step, which is what a step costs at
the sizes of the models using them. A bidirectional GRU with linear_before_reset (as
PyTorch exports it) on that path runs both directions in one loop (`_paired_gru`), each
call on both directions' rows: half the calls again (name_romanizer_encoder's two
16-step GRUs, H 128: 1.23 -> 0.99 ms a run); with one batch entry its projections lie
pair-major and, up to 16 units, both directions' Rᵀ make one block-diagonal matrix (one
`np.dot` a step; kept with the calls). The fast path's steps are built as calls
(views made once) that kernel_ops.record keeps and replays while the kernel's arrays
are the same objects; an op whose arrays change each run (it reads a function's state
arguments) makes them as they come (`_Now`). Otherwise a step writes the next state into the
other half of the `hidden` (`cell`) rows; with every batch entry within its sequence
length the halves swap, otherwise the entries still running copy it over
(`np.copyto(where=)`, the `valid` mask filled once) and the others keep their state and
write zeros to Y. Nothing is allocated: every array a step touches is an out, an in or
a workspace, and contiguous, so numpy's ufuncs need no buffers either (bias and peephole
vectors are broadcast once into their rows of the `state` workspace)."""

from __future__ import annotations

import weakref

import numpy as np

from palimpsest.backends import onednn_rnn
from palimpsest.backends.numpy.blas import matmul_call
from palimpsest.backends.numpy.kernel_ops import (
    _Calls, _scalar, _view_as, config_of, impl, record, recorded, recording, replay,
    workspaces_by_role)
from palimpsest.dialects.graph.reference._common import is_constant

# -- activations, in place: f(x, alpha, beta, scratch) with scratch shaped as x ------------------


def _relu(x, a, b, s):
    np.maximum(x, 0, out=x)


def _tanh(x, a, b, s):
    np.tanh(x, out=x)


def _sigmoid(x, a, b, s):  # 0.5 * (1 + tanh(x / 2)): no overflow, and 4x faster than
    np.multiply(x, 0.5, out=x)  # scipy's expit
    np.tanh(x, out=x)
    np.add(x, 1, out=x)
    np.multiply(x, 0.5, out=x)


def _affine(x, a, b, s):
    np.multiply(x, a, out=x)
    np.add(x, b, out=x)


def _leaky_relu(x, a, b, s):  # max(x, 0) + a * min(x, 0)
    np.minimum(x, 0, out=s)
    np.multiply(s, a, out=s)
    np.maximum(x, 0, out=x)
    np.add(x, s, out=x)


def _thresholded_relu(x, a, b, s):
    np.subtract(x, a, out=s)
    np.heaviside(s, 0, out=s)  # 1 where x > alpha, else 0 (a bool out would be cast)
    np.multiply(x, s, out=x)


def _scaled_tanh(x, a, b, s):
    np.multiply(x, b, out=x)
    np.tanh(x, out=x)
    np.multiply(x, a, out=x)


def _hard_sigmoid(x, a, b, s):
    np.multiply(x, a, out=x)
    np.add(x, b, out=x)
    np.clip(x, 0, 1, out=x)


def _elu(x, a, b, s):  # max(x, 0) + a * (exp(min(x, 0)) - 1)
    np.minimum(x, 0, out=s)
    np.expm1(s, out=s)
    np.multiply(s, a, out=s)
    np.maximum(x, 0, out=x)
    np.add(x, s, out=x)


def _softsign(x, a, b, s):
    np.abs(x, out=s)
    np.add(s, 1, out=s)
    np.divide(x, s, out=x)


def _softplus(x, a, b, s):
    np.logaddexp(x, 0, out=x)


ACTIVATIONS = {
    "Relu": _relu, "Tanh": _tanh, "Sigmoid": _sigmoid, "Affine": _affine,
    "LeakyRelu": _leaky_relu, "ThresholdedRelu": _thresholded_relu,
    "ScaledTanh": _scaled_tanh, "HardSigmoid": _hard_sigmoid, "Elu": _elu,
    "Softsign": _softsign, "Softplus": _softplus,
}


def _bound(config, direction: int, per_direction: int) -> list:
    """Direction `direction`'s activations as f(x, scratch)."""
    start = direction * per_direction
    return [lambda x, s, fn=ACTIVATIONS[name], a=a, b=b: fn(x, a, b, s)
            for name, a, b in zip(config["activations"][start:start + per_direction],
                                  config["activation_alpha"][start:start + per_direction],
                                  config["activation_beta"][start:start + per_direction])]


# -- the cells: step(t, h, c, h_next, c_next) writes the next state ------------------------------

class _Cell:
    """What every step of one direction reads: Rᵀ per gate (G x H x H), the projected
    inputs (G x seq x batch x H), the workspaces and the activations."""

    def __init__(self, config, r_t, projected, rows, activations):
        self.r_t = r_t
        self.projected = projected
        self.gates = rows.get("gates")
        self.scratch_rows = rows["scratch"]
        self.scratch = rows["scratch"][0]
        self.bias = rows.get("bias")
        self.peepholes = rows.get("peepholes")
        self.activations = activations
        self.clip = config["clip"]
        self.config = config

    def clipped(self, x):
        if self.clip is not None:
            np.clip(x, -self.clip, self.clip, out=x)
        return x

    def peephole(self, gate, which, c):
        if self.peepholes is not None:
            np.multiply(c, self.peepholes[which], out=self.scratch)
            np.add(gate, self.scratch, out=gate)


class _Lstm(_Cell):
    def step(self, t, h, c, h_next, c_next):
        g, s, projected = self.gates, self.scratch, self.projected
        f_act, g_act, h_act = self.activations
        np.matmul(h, self.r_t, out=g)
        for k in range(4):
            np.add(g[k], projected[k, t], out=g[k])
        i, o, f, cand = g
        if self.peepholes is None:  # i, o and f at once (o does not read C')
            f_act(self.clipped(g)[:3], self.scratch_rows[:3])
        else:
            self.peephole(i, 0, c)
            f_act(self.clipped(i), s)
            self.peephole(f, 2, c)
            f_act(self.clipped(f), s)
        if self.config["input_forget"]:
            np.subtract(1, i, out=f)
        g_act(self.clipped(cand), s)
        np.multiply(f, c, out=c_next)         # C' = f * C + i * g(c)
        np.multiply(i, cand, out=i)
        np.add(c_next, i, out=c_next)
        if self.peepholes is not None:
            self.peephole(o, 1, c_next)
            f_act(self.clipped(o), s)
        np.copyto(h_next, c_next)             # H' = o * h(C')
        h_act(h_next, s)
        np.multiply(h_next, o, out=h_next)


class _Gru(_Cell):
    def step(self, t, h, c, h_next, c_next):
        g, s, projected = self.gates, self.scratch, self.projected
        f_act, g_act = self.activations
        z, reset, cand = g
        if self.config["linear_before_reset"]:  # h~ = g(xWh + Wbh + r * (H Rhᵀ + Rbh))
            np.matmul(h, self.r_t, out=g)
            if self.bias is not None:
                np.add(cand, self.bias[3], out=cand)
        else:                                   # h~ = g(xWh + (r * H) Rhᵀ + Wbh + Rbh)
            np.matmul(h, self.r_t[:2], out=g[:2])
        for gate, k in ((z, 0), (reset, 1)):
            np.add(gate, projected[k, t], out=gate)
        f_act(self.clipped(g[:2]), self.scratch_rows[:2])  # z and r at once
        if self.config["linear_before_reset"]:
            np.multiply(cand, reset, out=cand)
        else:
            np.multiply(reset, h, out=s)
            np.matmul(s, self.r_t[2], out=cand)
        np.add(cand, projected[2, t], out=cand)
        g_act(self.clipped(cand), s)
        np.subtract(h, cand, out=h_next)        # H' = (1 - z) * h~ + z * H
        np.multiply(h_next, z, out=h_next)
        np.add(h_next, cand, out=h_next)


class _Rnn(_Cell):
    def step(self, t, h, c, h_next, c_next):
        np.matmul(h, self.r_t[0], out=h_next)
        np.add(h_next, self.projected[0, t], out=h_next)
        self.activations[0](self.clipped(h_next), self.scratch)


_CELLS = {"kernel.lstm": _Lstm, "kernel.gru": _Gru, "kernel.rnn": _Rnn}


# -- the kernel ------------------------------------------------------------------------------------

# the default activations, for which a direction runs `_fast_gru` / `_fast_lstm`
_DEFAULTS = {"kernel.gru": ("Sigmoid", "Tanh"), "kernel.lstm": ("Sigmoid", "Tanh", "Tanh")}
_SETUPS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class _Setup:
    """What an op's properties decide, worked out once per op (again when they change):
    the `state` rows, the ins' roles, and per direction whether its steps take the fast
    path (default activations, no clip, no peepholes, no input_forget)."""

    __slots__ = ("config", "rows", "in_roles", "fast")

    def __init__(self, op, config):
        cls = type(op)
        self.config = config
        self.rows = {name: slice(span.start, span.stop)
                     for name, span in cls.state_rows(config).items()}
        self.in_roles = cls.in_roles(config)
        per = cls.PER_DIRECTION
        default = _DEFAULTS.get(op.name)
        plain = (default is not None and config["clip"] is None
                 and "P" not in self.in_roles and not config.get("input_forget"))
        self.fast = [plain and tuple(config["activations"][d * per:(d + 1) * per]) == default
                     for d in range(len(config["activations"]) // per)]


def _setup(op, config) -> _Setup:
    setup = _SETUPS.get(op)
    if setup is None or setup.config is not config:
        setup = _SETUPS[op] = _Setup(op, config)
    return setup


@impl("kernel.lstm")
@impl("kernel.gru")
@impl("kernel.rnn")
def recurrent(op, inputs, outputs, workspaces):
    arrays = (*inputs, *outputs, *workspaces)
    calls = recorded(op, arrays)
    if calls is None:
        calls = _recurrent(op, inputs, outputs, workspaces)
        if calls is None:   # (run: a general cell, or sequence lengths)
            return
        if all(np.may_share_memory(a, b) for a, b in calls.views):   # nothing copied
            record(op, arrays, calls)
    replay(calls)


def _recurrent(op, inputs, outputs, workspaces):
    """The fast path's calls (every direction on it, no sequence lengths: its steps
    depend on shapes alone, so kernel_ops.record keeps them with their views, made
    once); otherwise runs the kernel and returns None."""
    config = config_of(op)
    setup = _setup(op, config)
    cls = type(op)
    ws = workspaces_by_role(op, workspaces)
    state_ws = ws["state"]
    rows = {name: state_ws[span] for name, span in setup.rows.items()}
    given = dict(zip(setup.in_roles, inputs))
    x, w, r = given["X"], given["W"], given["R"]
    lengths = given.get("sequence_lens")
    initial = [given.get("initial_h"), given.get("initial_c")]
    y, finals = outputs[0], outputs[1:]
    if layout := config["layout"]:  # every array seen time-major or direction-major
        x = x.transpose(1, 0, 2)
        y = y.transpose(1, 2, 0, 3)
        finals = [a.transpose(1, 0, 2) for a in finals]
        initial = [None if a is None else a.transpose(1, 0, 2) for a in initial]
    seq, dirs, batch, size = y.shape
    gate_count, projected = cls.gates, ws["projected"]
    valid, full = ws.get("valid"), seq
    if lengths is not None:
        if np.any(lengths < 0) or np.any(lengths > seq):
            raise ValueError(f"sequence_lens must be within [0, {seq}], got {lengths.tolist()}")
        for t in range(seq):
            np.greater(lengths, t, out=valid[t])
        full = int(lengths.min()) if batch else seq  # steps where every entry runs
    hidden, cell = rows["hidden"], rows.get("cell")
    fast = lengths is None and all(setup.fast) and seq > 0
    calls = _Calls() if recording(op) else _Now()   # (_Now: made as they come)
    if fast and not layout and isinstance(calls, _Calls) and op.name != "kernel.rnn":
        run = onednn_rnn.bound_call(
            "lstm" if cell is not None else "gru", bool(config.get("linear_before_reset")),
            config["direction"], x, w, r, given.get("B"), initial[0], initial[1], y,
            finals[0] if finals else None, finals[1] if len(finals) > 1 else None,
            bool(config["packed_r"]),
            all(is_constant(a) for a in (w, r, given.get("B")) if a is not None))
        if run is not None:   # (the whole sequence in one oneDNN call: module doc)
            calls.append((run, (), {}))
            return calls
    if (fast and dirs == 2 and cell is None and seq >= 2 and not layout
            and config["linear_before_reset"] and y.flags.c_contiguous
            and projected.flags.c_contiguous and state_ws.flags.c_contiguous
            and state_ws.shape[0] >= (10 if "B" in given else 8)):
        _paired_gru(calls, x, w, r, given.get("B"), initial[0], config["packed_r"],
                    projected, state_ws, y, finals)
        return calls if isinstance(calls, _Calls) else None
    for d in range(dirs):
        w_t = w[d].reshape(gate_count, size, -1).transpose(0, 2, 1)  # per gate: input x H
        steps = calls if fast else _Now()
        steps.views.append((w_t, w))
        if layout:  # a GEMM per step and gate (X is batch-major)
            steps.append((np.matmul, (x[None], w_t[:, None]), {"out": projected}))
        else:       # a GEMM per gate over every step
            steps.append(matmul_call(_view_as(x, (seq * batch, x.shape[2])), w_t,
                                     _view_as(projected, (gate_count, seq * batch, size))))
        steps.append((_fold_biases, (config, given.get("B"), d, rows.get("bias"), projected),
                      {}))
        if "peepholes" in rows:
            peepholes = rows["peepholes"]
            for k in range(3):
                steps.append((np.copyto, (peepholes[k], given["P"][d, k * size:(k + 1) * size]),
                              {}))
        for state, start in ((hidden, initial[0]), (cell, initial[1])):
            if state is not None:
                if start is None:
                    steps.append((state[0].fill, (0,), {}))
                else:
                    steps.append((np.copyto, (state[0], start[d]), {}))
        if config["packed_r"]:   # Rᵀ per gate already (prepack-weights)
            r_t = r[d]
        elif batch == 1 or seq == 1:  # a copy costs more than it saves (module doc)
            r_t = r[d].reshape(gate_count, size, size).transpose(0, 2, 1)
            steps.views.append((r_t, r))
        else:
            r_t = ws["recurrence"]
            steps.append((np.copyto, (r_t, r[d].reshape(gate_count, size, size).transpose(
                0, 2, 1)), {}))
        reverse = config["direction"] == "reverse" or d == 1
        if fast:
            order = range(seq - 1, -1, -1) if reverse else range(seq)
            if cell is None:
                last = [_fast_gru(calls, order, r_t, projected, rows, y[:, d],
                                  config["linear_before_reset"])]
            else:
                last = _fast_lstm(calls, order, r_t, projected, rows, y[:, d])
            for final, state in zip(finals, last):
                calls.append((np.copyto, (final[d], state), {}))
            continue
        step = _CELLS[op.name](config, r_t, projected, rows,
                               _bound(config, d, cls.PER_DIRECTION)).step
        current = _loop(step, seq, reverse, valid, full, y[:, d], hidden, cell)
        for final, state in zip(finals, (hidden, cell)):
            np.copyto(final[d], state[current])
    return calls if fast and isinstance(calls, _Calls) else None


class _Now:
    """Makes each call as it is appended (the general path, or an op kernel_ops.record
    gave up on: nothing kept)."""

    def __init__(self):
        self.views: list = []

    @staticmethod
    def append(call) -> None:
        fn, args, kwargs = call
        fn(*args, **kwargs)

    def extend(self, calls) -> None:
        for call in calls:
            self.append(call)

    def __iadd__(self, calls):
        self.extend(calls)
        return self


def _fold_biases(config, bias, d, bias_rows, projected):
    """Add to X·Wᵀ the biases no step needs apart (Wb + Rb; GRU with linear_before_reset:
    Wbh alone, Rbh in the row after the gates'), each broadcast once into its `bias`
    rows, then one add of every gate's rows per step: adds of same-shape arrays, since
    numpy buffers a broadcast operand (up to 8192 elements); a `projected` of at most
    `_BROADCAST_ADD` elements (a buffer of that size at most) takes one broadcast add."""
    if bias is None:
        return
    gate_count = projected.shape[0]
    b = bias[d].reshape(2, gate_count, projected.shape[3])
    sums = bias_rows[:gate_count, 0]
    np.add(b[0], b[1], out=sums)
    if config.get("linear_before_reset"):
        np.copyto(sums[2], b[0, 2])
        np.copyto(bias_rows[3], b[1, 2])
    if projected.size <= _BROADCAST_ADD:
        np.add(projected, sums[:, None, None], projected)
        return
    gates = bias_rows[:gate_count]
    if gates.shape[1] > 1:   # (per gate: numpy copies a source it cannot prove apart)
        for k in range(gate_count):
            np.copyto(gates[k, 1:], sums[k])
    add = np.add
    for t in range(projected.shape[1]):
        step = projected[:, t]
        add(step, gates, step)


_BROADCAST_ADD = 1024   # elements: gtcrn's 3 x 33 x 1 x 8, one add instead of 33
# a one-entry paired GRU of at most this many units a direction multiplies by its two
# directions' Rᵀ as one block-diagonal matrix (at 32 numpy's broadcast batch is as fast)
_WIDE_R_UNITS = 16


# -- the fast path: default activations, every entry running every step (module doc) -----


def _sigmoid_calls(x, half, halved: bool = False) -> list:
    """The calls of sigmoid(x) in place as 0.5 * tanh(0.5 * x) + 0.5, `half` 0.5 in x's
    shape or a 0-d array (the rounding of `_sigmoid`: scaling by 0.5 is exact); `halved`:
    x holds 0.5 * x already."""
    return ([] if halved else [(np.multiply, (x, half, x), {})]) + [
        (np.tanh, (x, x), {}), (np.multiply, (x, half, x), {}), (np.add, (x, half, x), {})]


def _fast_gru(calls, order, r_t, projected, rows, y, linear_before_reset) -> np.ndarray:
    """A GRU direction's steps (module doc), appended to `calls`; the last hidden state
    (a row of Y)."""
    mul, add, sub, tanh, matmul = np.multiply, np.add, np.subtract, np.tanh, np.matmul
    g = rows["gates"]
    z, reset, cand = g
    zr = g[:2]
    scratch = rows["scratch"]
    half = scratch[:2]
    calls.append((half.fill, (0.5,), {}))
    gated = scratch[2]              # r * H (without linear_before_reset)
    p_zr, p_cand = projected[:2], projected[2]
    rbh = rows["bias"][3] if linear_before_reset and "bias" in rows else None
    r_zr, r_cand = r_t[:2], r_t[2]
    h = rows["hidden"][0]
    summed, p_summed, p_after = zr, p_zr, p_cand
    if rbh is not None and len(order) > 2:
        # X·Whᵀ + Wbh parked in Y's rows (each read by its step before the step writes its
        # state there) and Rbh in their place in `projected`: one add of every gate a step
        calls.append((np.copyto, (y, p_cand), {}))
        calls.append((np.copyto, (p_cand, rbh), {}))
        summed, p_summed, p_after, rbh = g, projected, y, None
    for t in order:
        h_next = y[t]
        if linear_before_reset:     # h~ = g(xWh + Wbh + r * (H Rhᵀ + Rbh))
            calls.append((matmul, (h, r_t, g), {}))
            if rbh is not None:
                calls.append((add, (cand, rbh, cand), {}))
        else:                       # h~ = g(xWh + (r * H) Rhᵀ + Wbh + Rbh)
            calls.append((matmul, (h, r_zr, zr), {}))
        calls.append((add, (summed, p_summed[:, t], summed), {}))
        calls.extend(_sigmoid_calls(zr, half))
        if linear_before_reset:
            calls.append((mul, (cand, reset, cand), {}))
        else:
            calls.append((mul, (reset, h, gated), {}))
            calls.append((matmul, (gated, r_cand, cand), {}))
        calls += [(add, (cand, p_after[t], cand), {}), (tanh, (cand, cand), {}),
                  (sub, (h, cand, h_next), {}),     # H' = (1 - z) * h~ + z * H
                  (mul, (h_next, z, h_next), {}), (add, (h_next, cand, h_next), {})]
        h = h_next
    return h


def _paired_gru(calls, x, w, r, bias, initial, packed, projected, state_ws, y,
                finals) -> None:
    """A bidirectional GRU with linear_before_reset on the fast path (module doc), both
    directions in one loop: pair i is the forward step at time i and the backward step
    at time seq-1-i, each numpy call on both directions' contiguous rows at once (half
    the calls of two direction loops). X·Wᵀ is projected half the sequence at a time,
    both directions (the backward's times in order) into `projected`; the pair's hidden
    states are updated in place in the `state` workspace and copied into their two rows
    of Y (through one view of both: their distance varies with i). With one batch entry
    (streaming models) `projected` is pair-major instead (pair k's gates, both
    directions, one contiguous block) and pair k's states go into its z block, read by
    then: every call of a step on contiguous rows, and Y written twice a chunk. `state`
    rows: 0-5 the gates (gate-major, then direction), 6-7 the hidden states, 8-9 Rbh
    (with B).
    The calls are appended to `calls`."""
    seq, _, batch, size = y.shape
    dtype, item = y.dtype, y.itemsize
    block = batch * size                  # one (batch, H) row, in elements
    rows = _view_as(state_ws.reshape(-1)[:(10 if bias is not None else 8) * block],
                    (-1, batch, size))
    g = _view_as(rows[:6], (3, 2, batch, size))
    zr, z, reset, cand = g[:2], g[0], g[1], g[2]
    h = rows[6:8]
    if initial is None:
        calls.append((h.fill, (0,), {}))
    else:
        calls.append((np.copyto, (h, initial), {}))
    rbh = None
    if bias is not None:
        rbh = rows[8:10]
        for d in range(2):
            calls.append((np.copyto, (rbh[d], bias[d].reshape(2, 3, size)[1, 2]), {}))
    # Rᵀ per gate and direction, the hidden states broadcast over the gates
    r_t = (r if packed else r.reshape(2, 3, size, size).transpose(0, 1, 3, 2)).transpose(
        1, 0, 2, 3)
    calls.views.append((r_t, r))
    h_all = h[None]
    single = batch == 1
    r_wide = None
    if single and size <= _WIDE_R_UNITS:
        # both directions' Rᵀ as one block-diagonal (2H x 6H) matrix: a step's product is
        # one vector-matrix np.dot (0.4 against numpy's 1.0 us broadcast batch at H 8);
        # kept with the calls (12 KiB at most), filled once for a constant (packed) R,
        # else each run
        # z's and r's columns hold Rᵀ / 2, and their projections are halved once a
        # chunk, so a step's sigmoid starts at tanh: 0.5 * x is exact, the same bits as
        # scaling the step's sum (one call fewer a step, of 13)
        r_wide = np.zeros((2 * size, 6 * size), dtype)
        blocks = r_wide.reshape(2, size, 3, 2, size)
        fill = [(np.multiply, (r_t[k, d], _scalar(0.5, dtype), blocks[d, :, k, d]), {})
                if k < 2 else (np.copyto, (blocks[d, :, k, d], r_t[k, d]), {})
                for k in range(3) for d in range(2)]
        for call in fill if packed else ():
            call[0](*call[1])
        if not packed:
            calls += fill
    half = _scalar(0.5, dtype)
    b_bytes = block * item
    pair = 2 * b_bytes                    # Y's rows of pair i: forward at i, backward at
    ys = [np.ndarray((2, batch, size), dtype, y, i * pair,   # seq-1-i
                     ((seq - 1 - 2 * i) * pair + b_bytes, size * item, item))
          for i in range(seq)]
    flat = projected.reshape(-1)
    chunk = seq // 2                      # two directions' gates fit in `projected`
    g_flat = _view_as(g, (1, 6 * size)) if r_wide is not None else None
    mul, add, sub, tanh, matmul = np.multiply, np.add, np.subtract, np.tanh, np.matmul
    for i0 in range(0, seq, chunk):
        n = min(chunk, seq - i0)
        if single:    # pair-major: pair k's gates of both directions one contiguous block
            pairs = _view_as(flat[:6 * n * block], (n, 3, 2, size))
            p = [pairs[:, :, 0].transpose(1, 0, 2), pairs[::-1, :, 1].transpose(1, 0, 2)]
        else:
            p = _view_as(flat[:6 * n * block], (2, 3, n, batch, size))
        for d, times in ((0, slice(i0, i0 + n)), (1, slice(seq - i0 - n, seq - i0))):
            w_t = w[d].reshape(3, size, -1).transpose(0, 2, 1)
            calls.views.append((w_t, w))
            calls.append((matmul, (_view_as(x[times], (n * batch, x.shape[2])), w_t),
                          {"out": p[d] if single else _view_as(p[d], (3, n * batch, size))}))
            if bias is not None:   # Wb + Rb (Wbh alone for the candidate)
                sums = g[:, 0, 0]
                b = bias[d].reshape(2, 3, size)
                calls.views.append((b, bias))
                calls += [(add, (b[0], b[1]), {"out": sums}),
                          (np.copyto, (sums[2], b[0, 2]), {}),
                          (add, (p[d], sums[:, None] if single else sums[:, None, None]),
                           {"out": p[d]})]
            if r_wide is not None:   # (the halved z and r: see r_wide)
                calls.append((mul, (p[d][:2], half, p[d][:2]), {}))
        if single:
            p_zr = [_view_as(pairs[k, :2], (2, 2, 1, size)) for k in range(n)]
            p_cand = [_view_as(pairs[k, 2], (2, 1, size)) for k in range(n)]
        else:
            # pair k of the chunk: the forward's time i0+k at p[0, :, k], the backward's
            # time seq-1-i0-k at p[1, :, n-1-k]
            apart = (4 * n - 1) * b_bytes
            p_zr = [np.ndarray((2, 2, batch, size), dtype, flat, k * b_bytes,
                               (n * b_bytes, apart - 2 * k * b_bytes, size * item, item))
                    for k in range(n)]
            p_cand = [np.ndarray((2, batch, size), dtype, flat, (2 * n + k) * b_bytes,
                                 (apart - 2 * k * b_bytes, size * item, item))
                      for k in range(n)]
        for k in range(n):
            # the next state: with one batch entry, in pair k's z block (read by then),
            # contiguous for the next pair's calls; else in the state rows, then Y
            h_next = _view_as(pairs[k, 0], (2, 1, size)) if single else h
            if r_wide is not None:
                calls.append((np.dot, (_view_as(h_all, (1, 2 * size)), r_wide, g_flat), {}))
            else:
                calls.append((matmul, (h_all, r_t, g), {}))
            if rbh is not None:
                calls.append((add, (cand, rbh, cand), {}))
            calls.append((add, (zr, p_zr[k], zr), {}))
            calls.extend(_sigmoid_calls(zr, half, halved=r_wide is not None))
            calls += [(mul, (cand, reset, cand), {}),   # h~ = g(xWh + Wbh + r * (H Rhᵀ + Rbh))
                      (add, (cand, p_cand[k], cand), {}), (tanh, (cand, cand), {}),
                      (sub, (h_all[0], cand, h_next), {}),   # H' = (1 - z) * h~ + z * H
                      (mul, (h_next, z, h_next), {}), (add, (h_next, cand, h_next), {})]
            if single:
                h_all = h_next[None]
            else:
                calls.append((np.copyto, (ys[i0 + k], h), {}))
        if single:   # the chunk's states into Y (the backward's times reversed), the
            # last one kept in the state rows (the next chunk's projection overwrites it)
            states = pairs[:, 0]
            calls += [(np.copyto, (y[i0:i0 + n, 0, 0], states[:, 0]), {}),
                      (np.copyto, (y[seq - i0 - n:seq - i0, 1, 0][::-1], states[:, 1]), {}),
                      (np.copyto, (h, h_all[0]), {})]
            h_all = h[None]
    for final in finals:
        calls.append((np.copyto, (final, h), {}))


def _fast_lstm(calls, order, r_t, projected, rows, y) -> tuple:
    """An LSTM direction's steps (module doc), appended to `calls`: the last hidden state
    (a row of Y) and the last cell state (a `cell` row)."""
    mul, add, tanh, matmul = np.multiply, np.add, np.tanh, np.matmul
    g = rows["gates"]
    i, o, f, cand = g
    iof = g[:3]
    half = rows["scratch"][:3]
    calls.append((half.fill, (0.5,), {}))
    cells = rows["cell"]
    current = 0
    h = rows["hidden"][0]
    for t in order:
        h_next = y[t]
        c, c_next = cells[current], cells[1 - current]
        calls += [(matmul, (h, r_t, g), {}), (add, (g, projected[:, t], g), {})]
        calls.extend(_sigmoid_calls(iof, half))
        calls += [(tanh, (cand, cand), {}),
                  (mul, (f, c, c_next), {}),        # C' = f * C + i * g(c)
                  (mul, (i, cand, i), {}), (add, (c_next, i, c_next), {}),
                  (tanh, (c_next, h_next), {}),     # H' = o * h(C')
                  (mul, (h_next, o, h_next), {})]
        h = h_next
        current = 1 - current
    return h, cells[current]


def _loop(step, seq, reverse, valid, full, y, hidden, cell):
    """Run the steps in order; each entry's state stops at its sequence length (steps t
    >= its length: state kept, zeros in Y). The index of the halves holding the final
    states."""
    current = 0
    for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
        following = 1 - current
        step(t, hidden[current], None if cell is None else cell[current],
             hidden[following], None if cell is None else cell[following])
        if t < full:  # every entry runs this step
            current = following
            np.copyto(y[t], hidden[current])
            continue
        running = valid[t][:, None]
        for state in (hidden, cell):
            if state is not None:
                np.copyto(state[current], state[following], where=running)
        y[t].fill(0)
        np.copyto(y[t], hidden[following], where=running)
    return current
