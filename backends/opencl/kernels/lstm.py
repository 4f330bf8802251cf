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
LSTM_CELL = """
inline float sigmoid_(float v) { return 0.5f * (1.0f + tanh(0.5f * v)); }

inline float lstm_cell(__local const float* gate, __local float* cs, __local float* hs,
                       const int j) {
  const float i_ = sigmoid_(gate[j]), o = sigmoid_(gate[H + j]);
  const float f = sigmoid_(gate[2 * H + j]);
  const float c = f * cs[j] + i_ * tanh(gate[3 * H + j]);
  const float h = o * tanh(c);
  cs[j] = c; hs[j] = h;
  return h;
}
"""


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _checked(call: KernelCall) -> dict:
    """The op's operands by role (None when absent) and its sizes, after the checks of
    what runs on the device; Unsupported otherwise."""
    config = call.config
    given = [_text(n) for n in config.get("optional_ins") or []]
    if len(call.ins) != 3 + len(given):
        raise Unsupported("operands")
    ins = dict(zip(["X", "W", "R"] + given, call.ins))
    direction = _text(config.get("direction", "forward"))
    dirs = 2 if direction == "bidirectional" else 1
    names = [_text(n) for n in config.get("activations") or []]
    if names not in ([], list(_DEFAULT_ACTIVATIONS) * dirs):
        raise Unsupported(f"activations {names}")
    if config.get("clip") is not None or int(config.get("input_forget", 0) or 0) \
            or int(config.get("layout", 0) or 0):
        raise Unsupported("clip, input_forget or layout 1")
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
    gates = 4 * hidden
    want_r = (dirs, 4, hidden, hidden) if packed else (dirs, gates, hidden)
    if not hidden or w.shape != (dirs, gates, size) or r.shape != want_r:
        raise Unsupported(f"W {list(w.shape)}, R {list(r.shape)}")
    if "B" in ins and ins["B"].shape != (dirs, 2 * gates):
        raise Unsupported(f"B {list(ins['B'].shape)}")
    for name in ("initial_h", "initial_c"):
        if name in ins and ins[name].shape != (dirs, batch, hidden):
            raise Unsupported(f"{name} {list(ins[name].shape)}")
    outs = list(call.outs)
    if not 1 <= len(outs) <= 3 or outs[0].shape != (steps, dirs, batch, hidden) \
            or any(o.shape != (dirs, batch, hidden) for o in outs[1:]) \
            or any(o.dtype != np.float32 for o in outs):
        raise Unsupported("outs")
    if not steps or not batch:
        raise Unsupported("no steps or no batch")
    return dict(ins=ins, dirs=dirs, reverse_all=direction == "reverse", steps=steps,
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


def _widths(hidden: int, limit: int) -> tuple:
    """(V, U, items): the packed product's vectors of V gate columns (V divides H: a
    vector stays in one gate's contiguous row of R^T), U of them a work-item (more
    independent sums; PoCL runs a group's work-items as loops), the group's items."""
    width = next(v for v in (16, 8, 4, 2, 1) if hidden % v == 0)
    vectors = 4 * hidden // width
    per = next(u for u in (4, 2, 1) if vectors % u == 0)
    return width, per, max(1, min(vectors // per, limit, 256))


@generator("kernel.lstm")
def lstm(call: KernelCall) -> list:
    op = _checked(call)
    ins = op["ins"]
    dirs, steps, batch, size, hidden, gates = (
        op[k] for k in ("dirs", "steps", "batch", "size", "hidden", "gates"))
    limit = min(call.device.max_work_group_size, call.device.max_work_item_sizes[0])
    width, per, items = _widths(hidden, limit)
    fixed = 4 * (2 * hidden + gates) + 64
    chunk = min(steps, (call.device.local_mem_size - fixed) // (4 * gates))
    if chunk < 1:
        raise Unsupported(f"{gates} gates past {call.device.local_mem_size} bytes of "
                          "local memory")
    vtype, load, store = _vector(width)
    present = [name for name in ("B", "initial_h", "initial_c") if name in ins]
    names = ["y", "yh", "yc"][:len(call.outs)]
    buffers = [("x", "float", False), ("w", "float", False), ("r", "float", False)] + [
        (name.lower(), "float", False) for name in present] + [
        (name, "float", True) for name in names]
    bias = "B" in ins
    if op["packed"]:
        product = f"""
    for (int gi = lid; gi < NV / U; gi += LS) {{
      {vtype} acc[U];
      __global const float* rows[U];
      for (int v = 0; v < U; ++v) {{
        const int col = (gi * U + v) * V;
        rows[v] = rd + (col / H) * H * H + col % H;
        acc[v] = {load.format(p="proj + cur * G + col")};
      }}
      for (int k = 0; k < H; ++k) {{
        const float hk = hs[k];
        for (int v = 0; v < U; ++v) acc[v] += hk * {load.format(p="rows[v] + k * H")};
      }}
      for (int v = 0; v < U; ++v) {store.format(v="acc[v]", p="gate + (gi * U + v) * V")};
    }}"""
    else:   # R as given: row g of R is gate column g's weights, a dot product with h
        product = """
    for (int g = lid; g < G; g += LS) {
      float sum[1];
      dot1_local(hs, rd + g * H, H, sum);
      gate[g] = sum[0] + proj[cur * G + g];
    }"""
    block = range(STEP_BLOCK)
    rows = " ".join(f"const int q{i} = min(p0 + {i}, end - 1);" for i in block)
    x_rows = ", ".join(
        f"x + ((reverse ? T - 1 - q{i} : q{i}) * NB + n) * I" for i in block)
    stores = " ".join(f"if (p0 + {i} < end) proj[(q{i} - s0) * G + g] = out[{i}] + b_g;"
                      for i in block)
    source = f"""
#define T {steps}
#define NB {batch}
#define I {size}
#define H {hidden}
#define G {gates}
#define D {dirs}
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
{LSTM_CELL}

__kernel __attribute__((reqd_work_group_size(LS, 1, 1)))
void lstm({params(*buffers)}) {{
{bind(*buffers)}
  const int d = get_group_id(0) / NB;
  const int n = get_group_id(0) % NB;
  const int lid = get_local_id(0);
  const int reverse = {1 if op["reverse_all"] else 0} || d == 1;
  __local float proj[S * G];
  __local float hs[H];
  __local float cs[H];
  __local float gate[G];
  __global const float* wd = w + d * G * I;
  __global const float* rd = r + d * G * H;
  for (int j = lid; j < H; j += LS) {{
    hs[j] = {"initial_h[(d * NB + n) * H + j]" if "initial_h" in ins else "0.0f"};
    cs[j] = {"initial_c[(d * NB + n) * H + j]" if "initial_c" in ins else "0.0f"};
  }}
  for (int s0 = 0; s0 < T; s0 += S) {{
    // X W^T + Wb + Rb of the chunk's steps (in the order they run), a gate column at a time
    const int end = min(s0 + S, T);
    for (int g = lid; g < G; g += LS) {{
      __global const float* wr = wd + g * I;
      const float b_g = {"b[d * 2 * G + g] + b[d * 2 * G + G + g]" if bias else "0.0f"};
      for (int p0 = s0; p0 < end; p0 += {STEP_BLOCK}) {{
        {rows}
        float out[{STEP_BLOCK}];
        dot{STEP_BLOCK}_global({x_rows}, wr, I, out);
        {stores}
      }}
    }}
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = s0; s < end; ++s) {{
      const int t = reverse ? T - 1 - s : s;
      const int cur = s - s0;
{product}
      barrier(CLK_LOCAL_MEM_FENCE);
      for (int j = lid; j < H; j += LS) {{
        const float h = lstm_cell(gate, cs, hs, j);
        {"y[((t * D + d) * NB + n) * H + j] = h;" if "y" in names else ""}
      }}
      barrier(CLK_LOCAL_MEM_FENCE);
    }}
  }}
  for (int j = lid; j < H; j += LS) {{
    {"yh[(d * NB + n) * H + j] = hs[j];" if "yh" in names else ""}
    {"yc[(d * NB + n) * H + j] = cs[j];" if "yc" in names else ""}
  }}
}}
"""
    slot = {role: index for index, role in enumerate(ins)}   # (X, W, R, optional_ins)
    args = [ref("in", slot[role]) for role in ["X", "W", "R"] + present] + [
        ref("out", index) for index in range(len(names))]
    return [Launch(source, "lstm", (dirs * batch * items,), (items,), args)]
