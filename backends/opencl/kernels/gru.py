"""The float GRU (`kernel.gru`, dialects/kernel_recurrent.py) in OpenCL: the whole
sequence in one launch, one work-group per direction and batch entry, as lstm.py runs
the float LSTM, sharing its pieces (the checks, the projection, the product by R).

Before, the op ran on the host: every run read X, W, R and the states back and wrote
the outs to the device. Here the weights never leave the device, and a GRU is one launch.

A work-group runs its direction's steps in order, its state in local memory:

1. X W^T plus the biases for a chunk of steps into local memory (lstm.py's
   `projection`): Wb + Rb for z and r; for h Wbh + Rbh, or Wbh alone with
   linear_before_reset (Rbh is added to H Rh^T before r multiplies it);
2. a step, in the numpy kernel's order (backends/numpy/kernel_ops_recurrent.py):
   linear_before_reset 0: H Rz^T, H Rr^T, then z, r (sigmoid as 0.5 (1 + tanh(x / 2)))
   and r ⊙ H, then (r ⊙ H) Rh^T: two products, a barrier between;
   linear_before_reset 1: H R^T for all three gates, then h~ = tanh((H Rh^T + Rbh) ⊙ r
   + xWh + Wbh); then H' = (H - h~) ⊙ z + h~, written to Y.

What it leaves to the host (Unsupported): sequence_lens, clip, layout 1, activations
other than the defaults, other than float32, a gate vector that does not fit local
memory.
"""

from __future__ import annotations

from palimpsest.backends.opencl.kernels.base import KernelCall, Launch, generator
from palimpsest.backends.opencl.kernels.lstm import (
    SIGMOID, checked, chunk_steps, kernel_head, operands, prelude, projection, recurrence,
    widths)


@generator("kernel.gru")
def gru(call: KernelCall) -> list:
    op = checked(call, 3, ("Sigmoid", "Tanh"), ("initial_h",))
    ins = op["ins"]
    dirs, batch, hidden = (op[k] for k in ("dirs", "batch", "hidden"))
    after = bool(int(call.config.get("linear_before_reset", 0) or 0))
    limit = min(call.device.max_work_group_size, call.device.max_work_item_sizes[0])
    # linear_before_reset 0: products of 2H and H columns, U dividing both
    width, per, items = widths(hidden, limit, 3 if after else 1, call.device.host_cpu)
    chunk = chunk_steps(call, op, 2 * hidden + op["gates"])
    names, buffers, args = operands(op, ("B", "initial_h"), ["y", "yh"], len(call.outs))
    bias = "B" in ins
    if not bias:
        project_bias = "0.0f"
    elif after:   # Rbh apart: added to H Rh^T in the step
        project_bias = "b[d * 2 * G + g] + (g < 2 * H ? b[d * 2 * G + G + g] : 0.0f)"
    else:
        project_bias = "b[d * 2 * G + g] + b[d * 2 * G + G + g]"
    packed = op["packed"]
    if after:
        rbh = " + b[d * 2 * G + G + 2 * H + j]" if bias else ""
        step = f"""{recurrence(packed, width, "hs", "0", "G", None)}
      barrier(CLK_LOCAL_MEM_FENCE);
      for (int j = lid; j < H; j += LS) {{
        const float z = sigmoid_(gate[j] + p[j]);
        const float rj = sigmoid_(gate[H + j] + p[H + j]);
        const float c = tanh((gate[2 * H + j]{rbh}) * rj + p[2 * H + j]);"""
    else:
        step = f"""{recurrence(packed, width, "hs", "0", "2 * H", None)}
      barrier(CLK_LOCAL_MEM_FENCE);
      for (int j = lid; j < H; j += LS) {{
        gate[j] = sigmoid_(gate[j] + p[j]);
        rh[j] = sigmoid_(gate[H + j] + p[H + j]) * hs[j];
      }}
      barrier(CLK_LOCAL_MEM_FENCE);
{recurrence(packed, width, "rh", "2 * H", "H", None)}
      barrier(CLK_LOCAL_MEM_FENCE);
      for (int j = lid; j < H; j += LS) {{
        const float z = gate[j];
        const float c = tanh(gate[2 * H + j] + p[2 * H + j]);"""
    source = f"""{prelude(op, chunk, width, per, items)}
{SIGMOID}

{kernel_head("gru", buffers, op, ("hs", "rh"))}
  for (int j = lid; j < H; j += LS)
    hs[j] = {"initial_h[(d * NB + n) * H + j]" if "initial_h" in ins else "0.0f"};
  for (int s0 = 0; s0 < T; s0 += S) {{
    const int end = min(s0 + S, T);
{projection(project_bias)}
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = s0; s < end; ++s) {{
      const int t = reverse ? T - 1 - s : s;
      __local const float* p = proj + (s - s0) * G;
{step}
        const float h = (hs[j] - c) * z + c;
        hs[j] = h;
        {"y[((t * D + d) * NB + n) * H + j] = h;" if "y" in names else ""}
      }}
      barrier(CLK_LOCAL_MEM_FENCE);
    }}
  }}
  for (int j = lid; j < H; j += LS) {{
    {"yh[(d * NB + n) * H + j] = hs[j];" if "yh" in names else ""}
  }}
}}
"""
    return [Launch(source, "gru", (dirs * batch * items,), (items,), args)]


__all__ = ["gru"]
