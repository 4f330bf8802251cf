"""onnx ConvInteger (`graph.conv_integer`) in OpenCL, on a CPU device with the 8-bit dot
product (base.py `VNNI`): elsewhere the host runs it (oneDNN's, numpy's).

A quantized CNN from onnxruntime's quantizer (ddddocr's captcha reader: 21 of them) is
ConvInteger between device ops; on the host each one waited for the queue and read data
another CPU had just written. Here the whole block stays on the device.

One work-group, its work-items in turn over the output tiles of each image:

1. X packed into local memory as 4-channel words (the instruction's operand: four
   channels' bytes of one pixel), rows padded with the zero point (the reference's zero
   padding of the centred X) and, for a stride S, each row split into its S phases so
   that 16 outputs in a row read 16 consecutive words at every tap;
2. a tile: 16 outputs of a row by U output channels, one vpdpbusd a tap and channel
   (the 16 outputs' X words by the channel's weight word, read straight from memory)
   and one against ones (the window's sum of X bytes, for W's zero point);
3. y = sum - x_zero * (the channel's sum of W) - w_zero * (the window's sum) + K x_zero
   w_zero, K the taps times the channels rounded up to 4 (the extra channels: X the zero
   point, W 0), exact in int32.

W is packed once per constant (`vnni_conv_w`: a uint8 W less 128, as int8, with its
zero point less 128). Leaves to the host (Unsupported): no VNNI, group > 1, auto_pad
other than NOTSET / VALID, an int8 X, anything but 2-D, an X that does not fit local
memory.
"""

from __future__ import annotations

import numpy as np

from palimpsest.backends.opencl.kernels.base import (
    VNNI, Launch, Unsupported, bind, derived, generator, params, ref)

# output channels a work-item sums at once (each X word read once for them)
U = 8
# work-items of the one work-group (at most)
GROUP = 256
# whether a device with the 8-bit dot product takes ConvInteger (tests turn it off)
USE_VNNI = True


@derived("vnni_conv_w")
def vnni_conv_w(w):
    """W (M x C x KH x KW, 8-bit) as int8 words [m][c4][ky][kx] (four channels' bytes of
    one tap, the first the low byte; a uint8 W less 128; channels past C 0), then each
    channel's sum: int32 M x (C4 KH KW + 1)."""
    m, c, kh, kw = w.shape
    signed = (w.view(np.uint8) ^ np.uint8(0x80)).view(np.int8) if w.dtype == np.uint8 else w
    c4 = -(-c // 4)
    padded = np.zeros((m, c4 * 4, kh, kw), np.int8)
    padded[:, :c] = signed
    words = np.ascontiguousarray(padded.reshape(m, c4, 4, kh, kw).transpose(0, 1, 3, 4, 2))
    words = words.view(np.int32).reshape(m, -1)
    return np.concatenate([words, signed.reshape(m, -1).sum(axis=1, dtype=np.int32)[:, None]],
                          axis=1)


def _ints(attrs: dict, name: str, default: list) -> list:
    value = attrs.get(name)
    return default if value is None else [int(v) for v in value]


def _geometry(call) -> dict:
    """The conv's sizes, after the checks of what runs here; Unsupported otherwise."""
    x, w = call.ins[0], call.ins[1]
    (y,) = call.outs
    attrs = call.config
    if x.dtype != np.uint8 or w.dtype not in (np.int8, np.uint8) or len(x.shape) != 4 \
            or len(w.shape) != 4 or y.dtype != np.int32 or len(y.shape) != 4:
        raise Unsupported(f"X {x.dtype} {list(x.shape)}, W {w.dtype} {list(w.shape)} "
                          f"(uint8 X, 8-bit W, 2-D)")
    auto_pad = attrs.get("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    if int(attrs.get("group", 1)) != 1 or auto_pad not in ("NOTSET", "VALID", "0"):
        raise Unsupported(f"group {attrs.get('group', 1)}, auto_pad {auto_pad}")
    n, c, h, width = x.shape
    m, cw, kh, kw = w.shape
    sh, sw = _ints(attrs, "strides", [1, 1])
    dh, dw = _ints(attrs, "dilations", [1, 1])
    pt, pl, pb, pr = _ints(attrs, "pads", [0, 0, 0, 0]) if auto_pad != "VALID" else [0] * 4
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (width + pl + pr - dw * (kw - 1) - 1) // sw + 1
    if cw != c or tuple(y.shape) != (n, m, oh, ow) or oh < 1 or ow < 1:
        raise Unsupported(f"Y {list(y.shape)} for X {list(x.shape)}, W {list(w.shape)}")
    for name, zero, size in (("x", call.ins[2] if len(call.ins) > 2 else None, (1,)),
                             ("w", call.ins[3] if len(call.ins) > 3 else None, (1, m))):
        if zero is not None and (zero.size not in size or zero.dtype != call.ins[
                0 if name == "x" else 1].dtype):
            raise Unsupported(f"{name}'s zero point {zero.dtype} {list(zero.shape)}")
    c4, blocks = -(-c // 4), -(-ow // 16)
    # a phase row's words: the last tile's 16 reads at the last tap stay inside
    row = max(blocks * 16 + (kw - 1) * dw // sw, -(-(width + pl + pr) // sw))
    geometry = dict(N=n, C=c, H=h, W=width, M=m, KH=kh, KW=kw, SH=sh, SW=sw, DH=dh, DW=dw,
                    PT=pt, PL=pl, OH=oh, OW=ow, C4=c4, IY=h + pt + pb, JW=row,
                    BLOCKS=blocks, MB=-(-m // U), U=U)
    if 4 * c4 * geometry["IY"] * sw * row > call.device.local_mem_size - 4096:
        raise Unsupported(f"X packed past {call.device.local_mem_size} bytes of local memory")
    return geometry


@generator("graph.conv_integer")
def conv_integer(call) -> list:
    g = _geometry(call)
    if not (USE_VNNI and call.device.vnni):   # (after the checks: the device's probe)
        raise Unsupported("no 8-bit dot product on the device (the host's oneDNN)")
    x_zero = len(call.ins) > 2 and call.ins[2] is not None
    w_zero = len(call.ins) > 3 and call.ins[3] is not None
    tiles = g["OH"] * g["BLOCKS"] * g["MB"]
    items = max(1, min(GROUP, tiles, call.device.max_work_group_size,
                       call.device.max_work_item_sizes[0]))
    buffers = [("x", "uchar", False), ("wp", "int", False)] + (
        [("x_zero", "uchar", False)] if x_zero else []) + (
        [("w_zero", "uchar" if call.ins[1].dtype == np.uint8 else "char", False)]
        if w_zero else []) + [("y", "int", True)]
    taps = g["C4"] * g["KH"] * g["KW"]
    vectors = range(U)
    shift = 128 if call.ins[1].dtype == np.uint8 else 0
    # W's zero point less the shift (a uint8 W's without one: -128)
    w_zero_of = (f"((int)w_zero[{'m' if call.ins[3].size > 1 else '0'}] - {shift})"
                 if w_zero else str(-shift))
    defines = "\n".join(f"#define {k} {v}" for k, v in g.items())
    source = VNNI + f"""
{defines}
#define LS {items}
#define TAPS {taps}
// a tile's sums: out[u] over the taps of 16 outputs (row oy, from column ox0) by output
// channel m0 + u's weights, *window the window's sums of X bytes
PAL_VNNI void tile_vnni(__local const uint* xp, __global const int* wp, const int oy,
                        const int ox0, const int m0, int16* out, int16* window) {{
  pal_v16si sum = PAL_SPLAT(0);
  {" ".join(f"pal_v16si acc{u} = PAL_SPLAT(0);" for u in vectors)}
  {" ".join(f"__global const int* w{u} = wp + min(m0 + {u}, M - 1) * (TAPS + 1);"
            for u in vectors)}
  int tap = 0;
  for (int c4 = 0; c4 < C4; ++c4)
    for (int ky = 0; ky < KH; ++ky) {{
      __local const uint* line = xp + ((c4 * IY + oy * SH + ky * DH) * SW) * JW;
      for (int kx = 0; kx < KW; ++kx, ++tap) {{
        const int q = kx * DW;
        const pal_v16si xv = *(__local const pal_v16si_u*)(line + (q % SW) * JW + ox0 + q / SW);
        sum = __builtin_ia32_vpdpbusd512(sum, xv, PAL_SPLAT(0x01010101));
        {" ".join(f"acc{u} = __builtin_ia32_vpdpbusd512(acc{u}, xv, PAL_SPLAT(w{u}[tap]));"
                  for u in vectors)}
      }}
    }}
  *window = *(const int16*)&sum;
  {" ".join(f"out[{u}] = *(const int16*)&acc{u};" for u in vectors)}
}}

__kernel __attribute__((reqd_work_group_size(LS, 1, 1)))
void conv_integer({params(*buffers)}) {{
{bind(*buffers)}
  const int lid = get_local_id(0);
  __local uint xp[C4 * IY * SW * JW];
  const int xz = {"(int)x_zero[0]" if x_zero else "0"};
  const uint fill = (uint)xz * 0x01010101u;
  for (int n = 0; n < N; ++n) {{
    barrier(CLK_LOCAL_MEM_FENCE);
    // X as 4-channel words, padded with the zero point, each row in its SW phases
    for (int e = lid; e < C4 * IY * SW * JW; e += LS) {{
      const int j = e % JW, r = (e / JW) % SW, iy = (e / (JW * SW)) % IY, c4 = e / (JW * SW * IY);
      const int sy = iy - PT, sx = j * SW + r - PL;
      uint word = fill;
      if (sy >= 0 && sy < H && sx >= 0 && sx < W) {{
        __global const uchar* p = x + ((n * C + 4 * c4) * H + sy) * W + sx;
        word = 0;
        for (int k = 3; k >= 0; --k)
          word = (word << 8) | (4 * c4 + k < C ? (uint)p[k * H * W] : (uint)xz);
      }}
      xp[e] = word;
    }}
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int tile = lid; tile < OH * BLOCKS * MB; tile += LS) {{
      const int mb = tile % MB, block = (tile / MB) % BLOCKS, oy = tile / (MB * BLOCKS);
      const int ox0 = block * 16, m0 = mb * U;
      int16 sums[U], window;
      tile_vnni(xp, wp, oy, ox0, m0, sums, &window);
      for (int u = 0; u < U && m0 + u < M; ++u) {{
        const int m = m0 + u, wz = {w_zero_of};
        const int16 p = sums[u] - xz * wp[m * (TAPS + 1) + TAPS] - wz * window
                        + 4 * TAPS * xz * wz;
        __global int* out = y + ((n * M + m) * OH + oy) * OW + ox0;
        if (ox0 + 16 <= OW) vstore16(p, 0, out);
        else for (int i = 0; i < OW - ox0; ++i) out[i] = ((const int*)&p)[i];
      }}
    }}
  }}
}}
"""
    args = [ref("in", 0), ref("derived", ("vnni_conv_w", 1))] + (
        [ref("in", 2)] if x_zero else []) + ([ref("in", 3)] if w_zero else []) + [
        ref("out", 0)]
    return [Launch(source, "conv_integer", (items,), (items,), args)]
