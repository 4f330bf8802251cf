"""ONNX's GRU and LSTM on oneDNN's RNN primitive, for the numpy backend's recurrent
kernels (backends/numpy/kernel_ops_recurrent.py) where they take it.

Why: the numpy kernels' steps are numpy calls, a dozen a step, each on a few dozen
elements (gtcrn's bidirectional 33-step GRUs of 8 units: ~470 calls, 0.2 ms); oneDNN runs
the whole sequence in one call (0.04 ms), its GEMMs and gate math compiled.

The cells match ONNX's with their default activations, no clip, no peepholes and
input_forget 0: oneDNN's GRU gates are u, r, o (ONNX's z, r, h; h_t = u h_{t-1} +
(1 - u) o in both), its linear-before-reset GRU takes a fourth bias row, Rb_h, inside
the reset product as ONNX's does, and its LSTM gates are i, f, c~, o (ONNX's i, o, f,
c). Layouts: X is T x N x C (tnc), Y T x D x N x H, which is oneDNN's T x N x DH
(bidirectional_concat) where D or N is 1; Y_h and Y_c are D x N x H (ldnc, L = 1).
Weights are reordered into the layout the primitive asks for, and the biases summed, once
for constants (at the first call; kept with the call, outside the plan, as the
primitive's own scratchpad is), at every call otherwise. Bound through ctypes on the
library backends/onednn_primitives.py uses; enum values are oneDNN 3.2's.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from palimpsest.backends.onednn_primitives import (
    _FORWARD_INFERENCE, _TAG_ANY, OneDnnError, _check, _desc, _destroy, _handle,
    _Primitives, _runtime, available,
)

_TAG_TNC, _TAG_LDNC, _TAG_LDIGO = 4, 5, 6      # abc, abcd, abcde
_LEFT2RIGHT, _RIGHT2LEFT, _BIDIRECTIONAL_CONCAT = 1, 2, 3
_QUERY_ARG_MD = 255
(_ARG_SRC_LAYER, _ARG_SRC_ITER, _ARG_SRC_ITER_C, _ARG_DST_LAYER, _ARG_DST_ITER,
 _ARG_DST_ITER_C, _ARG_WEIGHTS_LAYER, _ARG_WEIGHTS_ITER, _ARG_BIAS) = (
    1, 2, 3, 17, 18, 19, 33, 34, 41)
# ONNX's gate order -> oneDNN's, per cell
GATE_ORDER = {"gru": (0, 1, 2), "lstm": (0, 2, 3, 1)}
# Sequences shorter than this stay on the numpy steps: a oneDNN call costs ~10 us, a
# one-step GRU's numpy calls less
MIN_STEPS = 2


class Recurrent(_Primitives):
    """One GRU or LSTM shape on oneDNN (`cell` "gru" or "lstm"; `lbr`: GRU's
    linear_before_reset; `direction` ONNX's), with which optional states it reads and
    writes. Raises OneDnnError where oneDNN has no such primitive."""

    def __init__(self, cell: str, lbr: bool, direction: str, seq: int, batch: int,
                 inputs: int, hidden: int, states: tuple, finals: tuple):
        super().__init__()
        library, engine, _ = _runtime()
        dirs = 2 if direction == "bidirectional" else 1
        gates = len(GATE_ORDER[cell])
        self.shape = (cell, dirs, seq, batch, inputs, hidden)
        self.work = seq * batch * dirs * gates * hidden * (inputs + hidden)
        src = _desc((seq, batch, inputs), _TAG_TNC)
        dst = _desc((seq, batch, dirs * hidden), _TAG_TNC)
        state = _desc((1, dirs, batch, hidden), _TAG_LDNC)
        weights = _desc((1, dirs, inputs, gates, hidden), _TAG_ANY)
        recurrence = _desc((1, dirs, hidden, gates, hidden), _TAG_ANY)
        plain = (_desc((1, dirs, inputs, gates, hidden), _TAG_LDIGO),
                 _desc((1, dirs, hidden, gates, hidden), _TAG_LDIGO))
        bias = _desc((1, dirs, gates + (1 if lbr else 0), hidden), _TAG_LDNC)
        has_h, has_c = states
        wants_h, wants_c = finals
        way = {"forward": _LEFT2RIGHT, "reverse": _RIGHT2LEFT,
               "bidirectional": _BIDIRECTIONAL_CONCAT}[direction]
        desc = _handle()
        if cell == "lstm":
            status = library.dnnl_lstm_forward_primitive_desc_create(
                ctypes.byref(desc), engine, _FORWARD_INFERENCE, way, src,
                state if has_h else None, state if has_c else None, weights, recurrence,
                None, None, bias, dst, state if wants_h else None,
                state if wants_c else None, 0, None)
        else:
            create = library.dnnl_lbr_gru_forward_primitive_desc_create if lbr \
                else library.dnnl_gru_forward_primitive_desc_create
            status = create(ctypes.byref(desc), engine, _FORWARD_INFERENCE, way, src,
                            state if has_h else None, weights, recurrence, bias, dst,
                            state if wants_h else None, 0, None)
        try:
            _check(status, f"{cell} primitive")
            packed = [_handle(library.dnnl_primitive_desc_query_md(desc, _QUERY_ARG_MD, arg))
                      for arg in (_ARG_WEIGHTS_LAYER, _ARG_WEIGHTS_ITER)]
            self.packed_bytes = [library.dnnl_memory_desc_get_size(md) for md in packed]
            for name, user, md in zip(("w", "r"), plain, packed):
                self._reorder(name, user, name + "_packed", md)
            args = [(_ARG_SRC_LAYER, "x", src), (_ARG_WEIGHTS_LAYER, "w_packed", packed[0]),
                    (_ARG_WEIGHTS_ITER, "r_packed", packed[1]), (_ARG_BIAS, "bias", bias),
                    (_ARG_DST_LAYER, "y", dst)]
            for wanted, arg, name in ((has_h, _ARG_SRC_ITER, "h0"), (has_c, _ARG_SRC_ITER_C, "c0"),
                                      (wants_h, _ARG_DST_ITER, "yh"),
                                      (wants_c, _ARG_DST_ITER_C, "yc")):
                if wanted:
                    args.append((arg, name, state))
            self._primitive("rnn", desc, args)
        except OneDnnError:
            library.dnnl_primitive_desc_destroy(desc)
            raise
        finally:
            _destroy(src, dst, state, weights, recurrence, bias, *plain)
        self.names = [name for _, name, _ in args]

    def pack(self, w, r, packed_r: bool, out: tuple | None = None) -> tuple:
        """W (D x GH x C) and R (D x GH x H, or D x G x H x H Rᵀ per gate with
        `packed_r`) in the primitive's layouts: into `out`'s two uint8 arrays, else two
        new ones."""
        cell, dirs, _, _, inputs, hidden = self.shape
        order = list(GATE_ORDER[cell])
        gates = len(order)
        plain_w = np.ascontiguousarray(
            w.reshape(dirs, gates, hidden, inputs)[:, order].transpose(0, 3, 1, 2))
        if packed_r:
            r_t = r.reshape(dirs, gates, hidden, hidden)[:, order].transpose(0, 2, 1, 3)
        else:
            r_t = r.reshape(dirs, gates, hidden, hidden)[:, order].transpose(0, 3, 1, 2)
        plain_r = np.ascontiguousarray(r_t)
        if out is None:
            out = tuple(np.empty(size, np.uint8) for size in self.packed_bytes)
        for name, plain, packed in zip(("w", "r"), (plain_w, plain_r), out):
            self._run(name, {name: plain.ctypes.data, name + "_packed": packed.ctypes.data})
        return out

    def biases(self, b, lbr: bool, out) -> None:
        """ONNX's B (D x 2GH: Wb then Rb), or None, as oneDNN's bias rows into `out`
        (1 x D x G(+1) x H): Wb + Rb per gate, the GRU's candidate apart with lbr (Wb_h,
        then Rb_h as the fourth row)."""
        cell, dirs, _, _, _, hidden = self.shape
        order = list(GATE_ORDER[cell])
        rows = out.reshape(dirs, -1, hidden)
        if b is None:
            rows.fill(0)
            return
        gates = len(order)
        halves = b.reshape(dirs, 2, gates, hidden)[:, :, order]
        np.add(halves[:, 0], halves[:, 1], out=rows[:, :gates])
        if lbr:
            np.copyto(rows[:, 2], halves[:, 0, 2])
            np.copyto(rows[:, 3], halves[:, 1, 2])

    def bind(self, arrays: dict):
        """The primitive on these arrays (name -> C-contiguous float32 array: x, w_packed,
        r_packed, bias, y, and h0, c0, yh, yc where it has them), as a call of no
        arguments (the addresses read once; the caller keeps the arrays alive)."""
        address = {name: arrays[name].ctypes.data for name in self.names}
        return self._bound([("rnn", self.names)], address, tuple(arrays.values()),
                           "recurrent cell")


@functools.lru_cache(maxsize=64)
def _recurrent(cell, lbr, direction, seq, batch, inputs, hidden, states, finals):
    try:
        return Recurrent(cell, lbr, direction, seq, batch, inputs, hidden, states, finals)
    except OneDnnError:
        return None


def bound_call(cell: str, lbr: bool, direction: str, x, w, r, b, h0, c0, y, yh, yc,
               packed_r: bool, constant: bool):
    """A call of no arguments running a GRU or LSTM (`cell`) on these arrays with oneDNN
    (ONNX layouts, layout 0; `yh`/`yc`, `h0`/`c0` and `b` may be None), or None where
    this is not its route: oneDNN not in use, not float32, an array not C-contiguous,
    Y not oneDNN's layout (bidirectional with several batch entries), a sequence
    shorter than MIN_STEPS. `constant`: W, R and B hold the same values every run (packed
    once, now; else at every call)."""
    seq, dirs, batch, hidden = y.shape
    if seq < MIN_STEPS or (dirs == 2 and batch != 1) or not available():
        return None
    arrays = [a for a in (x, w, r, b, h0, c0, y, yh, yc) if a is not None]
    if any(a.dtype != np.float32 or not a.flags.c_contiguous for a in arrays):
        return None
    if cell == "lstm":   # (oneDNN's LSTM takes both states, or neither: a zero one /
        # a scratch one for the other, D x N x H, kept with the call)
        if (h0 is None) != (c0 is None):
            zeros = np.zeros((dirs, batch, hidden), np.float32)
            h0, c0 = (zeros, c0) if h0 is None else (h0, zeros)
        if yh is not None and yc is None:
            yc = np.empty((dirs, batch, hidden), np.float32)
    primitive = _recurrent(cell, lbr, direction, seq, batch, x.shape[2], hidden,
                           (h0 is not None, c0 is not None), (yh is not None, yc is not None))
    if primitive is None:
        return None
    bias = np.empty((1, dirs, len(GATE_ORDER[cell]) + (1 if lbr else 0), hidden), np.float32)
    w_packed, r_packed = primitive.pack(w, r, packed_r)
    primitive.biases(b, lbr, bias)
    named = {"x": x, "w_packed": w_packed, "r_packed": r_packed, "bias": bias, "y": y,
             "h0": h0, "c0": c0, "yh": yh, "yc": yc}
    run = primitive.bind({name: a for name, a in named.items() if a is not None})
    if not constant:
        bound = run

        def run():   # (weights given at run time: packed again each call)
            primitive.pack(w, r, packed_r, (w_packed, r_packed))
            primitive.biases(b, lbr, bias)
            bound()
    run.recurrent = primitive   # (which calls of a kernel's are this one's)
    return run
