"""The float LSTM (`kernel.lstm`, dialects/kernel_recurrent.py) in OpenCL: the whole
sequence in one launch, one work-group per direction and batch entry (the entries of a
float LSTM are independent), as recurrent.py runs onnxruntime's 8-bit LSTM.

Before, the op ran on the host: every run read X, W, R and the states back and wrote
the outs to the device (captcha_ocr's bidirectional 512-unit layer: 16 MiB of weights
a run). Here the weights never leave the device, and a model's LSTM is one launch.

A work-group runs its direction's steps in order, its state in local memory:

1. X W^T plus both biases for a chunk of steps (`project`: four steps per pass over a
   row of W, W's rows read as 16-wide vectors), kept in local memory; the chunk is as
   many steps as the device's local memory holds (all of them on PoCL's 2 MiB, a few
   on a GPU's 48 KiB). Not the `projected` workspace: it holds one direction's steps
   (the numpy kernel runs the directions in turn), and here both directions and every
   batch entry run at once; chunks in local memory bound nothing and cost nothing
   extra, since W's rows are re-read every four steps anyway;
2. a step: h R^T (`packed_r`, prepack-weights' R^T per gate: each work-item's U
   V-wide vectors of gate columns, the rows of R^T read as vectors, h[k] broadcast;
   R as given (dirs x 4H x H): one dot product a gate column, as W's), plus the step's
   projection, into the gates; the gates (i, o, f, c) make c and h (sigmoid as
   0.5 (1 + tanh(x / 2)), as the numpy kernel computes it), h written to Y.

The float GRU (gru.py) is made of the same pieces: `checked`, `chunk_steps`, `prelude`,
`kernel_head`, `projection` and `recurrence` (a product by R over a range of gate columns).

What it leaves to the host (Unsupported): sequence_lens, peepholes, clip,
input_forget, layout 1, activations other than the defaults, other than float32, a
gate vector that does not fit local memory.
"""

from __future__ import annotations

import numpy as np

from palimpsest.backends.opencl.kernels.base import (
    KernelCall, Launch, Unsupported, bind, generator, params, ref)

_DEFAULT_ACTIVATIONS = ("Sigmoid", "Tanh", "Tanh")
# steps whose X rows a work-item multiplies by a row of W at once (the row read once)
STEP_BLOCK = 4


# the cell's step of one unit as the numpy kernel computes it (recurrent.py's int8 LSTM
# shares it): sigmoid as 0.5 (1 + tanh(x / 2)); unit j's gates i, o, f, c at j, H + j,
# 2H + j, 3H + j; its new c and h into cs and hs, h returned
SIGMOID = """
inline float sigmoid_(float v) { return 0.5f * (1.0f + tanh(0.5f * v)); }
inline float16 sigmoid16(float16 v) { return 0.5f * (1.0f + tanh(0.5f * v)); }
"""
LSTM_CELL = SIGMOID + """
inline float lstm_cell(__local const float* gate, __local float* cs, __local float* hs,
                       const int j) {
  const float i_ = sigmoid_(gate[j]), o = sigmoid_(gate[H + j]);
  const float f = sigmoid_(gate[2 * H + j]);
  const float c = f * cs[j] + i_ * tanh(gate[3 * H + j]);
  const float h = o * tanh(c);
  cs[j] = c; hs[j] = h;
  return h;
}
// units j..j+15 at once
inline float16 lstm_cell16(__local const float* gate, __local float* cs, __local float* hs,
                           const int j) {
  const float16 i_ = sigmoid16(vload16(0, gate + j)), o = sigmoid16(vload16(0, gate + H + j));
  const float16 f = sigmoid16(vload16(0, gate + 2 * H + j));
  const float16 c = f * vload16(0, cs + j) + i_ * tanh(vload16(0, gate + 3 * H + j));
  const float16 h = o * tanh(c);
  vstore16(c, 0, cs + j); vstore16(h, 0, hs + j);
  return h;
}
"""


def cell_steps(y_index: str | None) -> str:
    """The C loop of a step's cell over every unit j < H, h written to y at `y_index`
    (a C expression of j; None: Y is not an out). Where H is a multiple of 16 each
    work-item takes 16 units at once: PoCL vectorizes a work-group's loop over plain
    arithmetic, not over math calls, and the cell's five tanh a unit, one at a time,
    were about half a step (voicefilter-lite's 512 units: ~30 us of ~69)."""
    scalar = f"y[{y_index}] = h;" if y_index else ""
    vector = f"vstore16(h, 0, y + {y_index});" if y_index else ""
    return f"""#if H % 16 == 0
      for (int j = lid * 16; j < H; j += LS * 16) {{
        const float16 h = lstm_cell16(gate, cs, hs, j);
        {vector}
      }}
#else
      for (int j = lid; j < H; j += LS) {{
        const float h = lstm_cell(gate, cs, hs, j);
        {scalar}
      }}
#endif"""


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def directions(config: dict, activations=_DEFAULT_ACTIVATIONS) -> tuple:
    """(directions, whether all run in reverse) of a recurrent op's `config`, after the
    checks of the attributes every device kernel of this family declines: activations
    other than the defaults (per direction), clip, input_forget, layout 1 (recurrent.py's
    int8 LSTM checks its own with it)."""
    direction = _text(config.get("direction", "forward"))
    dirs = 2 if direction == "bidirectional" else 1
    names = [_text(n) for n in config.get("activations") or []]
    if names not in ([], list(activations) * dirs):
        raise Unsupported(f"activations {names}")
    if config.get("clip") is not None or int(config.get("input_forget", 0) or 0) \
            or int(config.get("layout", 0) or 0):
        raise Unsupported("clip, input_forget or layout 1")
    return dirs, direction == "reverse"


def checked(call: KernelCall, gate_count: int = 4, activations=_DEFAULT_ACTIVATIONS,
            states=("initial_h", "initial_c")) -> dict:
    """The op's operands by role (None when absent) and its sizes, after the checks of
    what runs on the device; Unsupported otherwise. `gate_count`, `activations` (the
    defaults, per direction) and `states` (initial state ins) are the op's: LSTM's by
    default, gru.py passes GRU's."""
    config = call.config
    given = [_text(n) for n in config.get("optional_ins") or []]
    if len(call.ins) != 3 + len(given):
        raise Unsupported("operands")
    ins = dict(zip(["X", "W", "R"] + given, call.ins))
    dirs, reverse_all = directions(config, activations)
    if "sequence_lens" in ins or "P" in ins:
        raise Unsupported("sequence_lens or peepholes")
    x, w, r = ins["X"], ins["W"], ins["R"]
    if any(a.dtype != np.float32 for a in ins.values()):
        raise Unsupported("not float32")
    if len(x.shape) != 3:
        raise Unsupported(f"X {list(x.shape)}")
    steps, batch, size = x.shape
    packed = bool(int(config.get("packed_r", 0) or 0))
    hidden = r.shape[-1] if r.shape else 0
    gates = gate_count * hidden
    want_r = (dirs, gate_count, hidden, hidden) if packed else (dirs, gates, hidden)
    if not hidden or w.shape != (dirs, gates, size) or r.shape != want_r:
        raise Unsupported(f"W {list(w.shape)}, R {list(r.shape)}")
    if "B" in ins and ins["B"].shape != (dirs, 2 * gates):
        raise Unsupported(f"B {list(ins['B'].shape)}")
    for name in states:
        if name in ins and ins[name].shape != (dirs, batch, hidden):
            raise Unsupported(f"{name} {list(ins[name].shape)}")
    outs = list(call.outs)
    if not 1 <= len(outs) <= 1 + len(states) \
            or outs[0].shape != (steps, dirs, batch, hidden) \
            or any(o.shape != (dirs, batch, hidden) for o in outs[1:]) \
            or any(o.dtype != np.float32 for o in outs):
        raise Unsupported("outs")
    if not steps or not batch:
        raise Unsupported("no steps or no batch")
    return dict(ins=ins, dirs=dirs, reverse_all=reverse_all, steps=steps,
                batch=batch, size=size, hidden=hidden, gates=gates, packed=packed)


def _vector(width: int) -> tuple:
    """(type, load(p), store(v, p)) of a `width`-float vector (1: a float)."""
    if width == 1:
        return "float", "(*({p}))", "*({p}) = {v}"
    return f"float{width}", f"vload{width}(0, {{p}})", f"vstore{width}({{v}}, 0, {{p}})"


def _dots(space: str, rows: int) -> str:
    """dot{rows}_{space}(a0.., m, out): out[r] = the sum over k < n of ar[k] * m[k], the
    rows read as 16-wide vectors (a scalar tail), m read once for every row."""
    rs = range(rows)
    args = ", ".join(f"{space} const float* a{i}" for i in rs)
    return f"""
inline void dot{rows}_{space.strip('_')}({args}, __global const float* m, const int n,
                                          float* out) {{
  {" ".join(f"float16 s{i} = (float16)(0.0f);" for i in rs)}
  int k = 0;
  for (; k + 16 <= n; k += 16) {{
    const float16 w = vload16(0, m + k);
    {" ".join(f"s{i} += vload16(0, a{i} + k) * w;" for i in rs)}
  }}
  {" ".join(f"float r{i} = hsum16(s{i});" for i in rs)}
  for (; k < n; ++k) {{
    const float w = m[k];
    {" ".join(f"r{i} += a{i}[k] * w;" for i in rs)}
  }}
  {" ".join(f"out[{i}] = r{i};" for i in rs)}
}}"""


def vectors_per_item(host_cpu: bool) -> tuple:
    """The counts of gate-column vectors a recurrent kernel's work-item may take, most
    first. PoCL runs a work-group's items as a loop, so on a CPU device a work-item's
    independent sums a row are what keep its FMA units busy: up to 16 (an int8 step of
    512 units 68 -> 57 us, of 256 units 32 -> 25 us); a GPU keeps more work-items of 4."""
    return (16, 8, 4, 2, 1) if host_cpu else (4, 2, 1)


def widths(hidden: int, limit: int, gate_count: int = 4, host_cpu: bool = False) -> tuple:
    """(V, U, items): the packed product's vectors of V gate columns (V divides H: a
    vector stays in one gate's contiguous row of R^T), U of them a work-item (the most
    of `vectors_per_item` dividing the vectors of `gate_count` gates), the group's
    items."""
    width = next(v for v in (16, 8, 4, 2, 1) if hidden % v == 0)
    vectors = gate_count * hidden // width
    per = next(u for u in vectors_per_item(host_cpu) if vectors % u == 0)
    return width, per, max(1, min(vectors // per, limit, 256))


def chunk_steps(call: KernelCall, op: dict, fixed_floats: int) -> int:
    """Steps whose projection local memory holds beside `fixed_floats` other floats
    (at least one step; Unsupported otherwise)."""
    gates = op["gates"]
    chunk = min(op["steps"], (call.device.local_mem_size - 4 * fixed_floats - 64) // (4 * gates))
    if chunk < 1:
        raise Unsupported(f"{gates} gates past {call.device.local_mem_size} bytes of "
                          "local memory")
    return chunk


def prelude(op: dict, chunk: int, width: int, per: int, items: int) -> str:
    """The program's sizes as macros and the dot products the projection (and an R as
    given) use."""
    return f"""
#define T {op["steps"]}
#define NB {op["batch"]}
#define I {op["size"]}
#define H {op["hidden"]}
#define G {op["gates"]}
#define D {op["dirs"]}
#define S {chunk}
#define LS {items}
#define V {width}
#define U {per}
#define NV (G / V)

inline float hsum16(float16 v) {{
  const float8 a = v.lo + v.hi; const float4 b = a.lo + a.hi; const float2 c = b.lo + b.hi;
  return c.x + c.y;
}}
{_dots("__global", STEP_BLOCK)}
{_dots("__local", 1)}
"""


def projection(bias: str) -> str:
    """The loop making X W^T plus `bias` (a C expression of gate column g) of a chunk's
    steps s0 .. end into `proj` (in the order they run), a gate column at a time."""
    block = range(STEP_BLOCK)
    rows = " ".join(f"const int q{i} = min(p0 + {i}, end - 1);" for i in block)
    x_rows = ", ".join(
        f"x + ((reverse ? T - 1 - q{i} : q{i}) * NB + n) * I" for i in block)
    stores = " ".join(f"if (p0 + {i} < end) proj[(q{i} - s0) * G + g] = out[{i}] + b_g;"
                      for i in block)
    return f"""
    for (int g = lid; g < G; g += LS) {{
      __global const float* wr = wd + g * I;
      const float b_g = {bias};
      for (int p0 = s0; p0 < end; p0 += {STEP_BLOCK}) {{
        {rows}
        float out[{STEP_BLOCK}];
        dot{STEP_BLOCK}_global({x_rows}, wr, I, out);
        {stores}
      }}
    }}"""


def recurrence(packed: bool, width: int, state: str, first: str, count: str,
               init: str | None) -> str:
    """The loop putting gate columns first .. first + count of `state` R^T (plus
    `init`'s columns, a local array, where given) into `gate`. Packed (prepack-weights'
    R^T per gate): each work-item's U V-wide vectors of gate columns, the rows of R^T
    read as vectors, state[k] broadcast; R as given (dirs x G x H): one dot product a
    gate column, as W's."""
    vtype, load, store = _vector(width)
    if packed:
        start = load.format(p=f"{init} + col") if init else f"({vtype})(0.0f)"
        return f"""
    for (int gi = lid; gi < ({count}) / (U * V); gi += LS) {{
      {vtype} acc[U];
      __global const float* rows[U];
      for (int v = 0; v < U; ++v) {{
        const int col = {first} + (gi * U + v) * V;
        rows[v] = rd + (col / H) * H * H + col % H;
        acc[v] = {start};
      }}
      for (int k = 0; k < H; ++k) {{
        const float hk = {state}[k];
        for (int v = 0; v < U; ++v) acc[v] += hk * {load.format(p="rows[v] + k * H")};
      }}
      for (int v = 0; v < U; ++v)
        {store.format(v="acc[v]", p=f"gate + {first} + (gi * U + v) * V")};
    }}"""
    return f"""
    for (int g = {first} + lid; g < {first} + {count}; g += LS) {{
      float sum[1];
      dot1_local({state}, rd + g * H, H, sum);
      gate[g] = sum[0]{f" + {init}[g]" if init else ""};
    }}"""


def operands(op: dict, optional: tuple, out_names: list, outs: int) -> tuple:
    """(out names, buffers, args) of the kernel: X, W, R, the `optional` ins given (as
    lower-case names), then the outs (the first `outs` of `out_names`)."""
    ins = op["ins"]
    present = [name for name in optional if name in ins]
    names = out_names[:outs]
    buffers = [("x", "float", False), ("w", "float", False), ("r", "float", False)] + [
        (name.lower(), "float", False) for name in present] + [
        (name, "float", True) for name in names]
    slot = {role: index for index, role in enumerate(ins)}   # (X, W, R, optional_ins)
    args = [ref("in", slot[role]) for role in ["X", "W", "R"] + present] + [
        ref("out", index) for index in range(len(names))]
    return names, buffers, args


def kernel_head(name: str, buffers: list, op: dict, states: tuple) -> str:
    """The kernel's signature and first lines: its direction d and batch entry n, the
    local arrays (the projections, `states` of H floats each, the gates) and the
    direction's W and R."""
    arrays = "\n".join(f"  __local float {state}[H];" for state in states)
    return f"""__kernel __attribute__((reqd_work_group_size(LS, 1, 1)))
void {name}({params(*buffers)}) {{
{bind(*buffers)}
  const int d = get_group_id(0) / NB;
  const int n = get_group_id(0) % NB;
  const int lid = get_local_id(0);
  const int reverse = {1 if op["reverse_all"] else 0} || d == 1;
  __local float proj[S * G];
{arrays}
  __local float gate[G];
  __global const float* wd = w + d * G * I;
  __global const float* rd = r + d * G * H;"""


@generator("kernel.lstm")
def lstm(call: KernelCall) -> list:
    op = checked(call)
    ins = op["ins"]
    dirs, batch, hidden, gates = (op[k] for k in ("dirs", "batch", "hidden", "gates"))
    limit = min(call.device.max_work_group_size, call.device.max_work_item_sizes[0])
    width, per, items = widths(hidden, limit, host_cpu=call.device.host_cpu)
    chunk = chunk_steps(call, op, 2 * hidden + gates)
    names, buffers, args = operands(op, ("B", "initial_h", "initial_c"), ["y", "yh", "yc"],
                                    len(call.outs))
    bias = "B" in ins
    source = f"""{prelude(op, chunk, width, per, items)}
{LSTM_CELL}

{kernel_head("lstm", buffers, op, ("hs", "cs"))}
  for (int j = lid; j < H; j += LS) {{
    hs[j] = {"initial_h[(d * NB + n) * H + j]" if "initial_h" in ins else "0.0f"};
    cs[j] = {"initial_c[(d * NB + n) * H + j]" if "initial_c" in ins else "0.0f"};
  }}
  for (int s0 = 0; s0 < T; s0 += S) {{
    // X W^T + Wb + Rb of the chunk's steps (in the order they run), a gate column at a time
    const int end = min(s0 + S, T);
{projection("b[d * 2 * G + g] + b[d * 2 * G + G + g]" if bias else "0.0f")}
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = s0; s < end; ++s) {{
      const int t = reverse ? T - 1 - s : s;
      const int cur = s - s0;
{recurrence(op["packed"], width, "hs", "0", "G", "(proj + cur * G)")}
      barrier(CLK_LOCAL_MEM_FENCE);
{cell_steps("((t * D + d) * NB + n) * H + j" if "y" in names else None)}
      barrier(CLK_LOCAL_MEM_FENCE);
    }}
  }}
  for (int j = lid; j < H; j += LS) {{
    {"yh[(d * NB + n) * H + j] = hs[j];" if "yh" in names else ""}
    {"yc[(d * NB + n) * H + j] = cs[j];" if "yc" in names else ""}
  }}
}}
"""
    return [Launch(source, "lstm", (dirs * batch * items,), (items,), args)]
