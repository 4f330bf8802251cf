#!/usr/bin/env python3
"""The OpenCL conv2d and matmul kernels (backends/opencl/kernels/conv.py, depthwise.py,
linalg.py) against the numpy backend's implementations, on the conv and matmul ops of
the real models.

The ResNet-18-style and MobileNetV2-style CNNs (1x3x224x224) and the MiniLM-L6-style
encoder (batch 1, sequence 128, static) from examples/onnx_models.py are lowered to
kernels (`infer-shapes,canonicalize,bufferize,lower-to-kernels`); every distinct
`kernel.conv2d` / `kernel.matmul` (operand shapes and properties) is timed alone:

- numpy: `KERNEL_IMPLS[op](op, ins, outs, workspaces)` on host arrays (what the numpy
  backend runs: OpenBLAS im2col GEMMs, numpy depthwise), BLAS with its default threads
  unless --blas-threads is given;
- OpenCL: the generator's launches on device buffers, enqueued and waited for (no
  transfers, no program builds: a warm-up run builds them first).

Each is timed --runs times after --warmup warm-up runs, interleaved (numpy, then OpenCL,
per run) so a load spike on a shared machine hits both. Reported per op: the count in its
model, the median and the best ms of each, GFLOP/s and the OpenCL/numpy ratio (< 1:
OpenCL faster) of the medians and of the bests (the best is what the kernel does when the
machine lets it: on a loaded machine OpenBLAS's threads in particular lose whole time
slices); per model and kind, the sums of count x time. Usage:

    python benchmarks/bench_opencl_kernels.py [--runs N] [--warmup N] [--quick]
        [--only resnet,mobilenet_v2,minilm] [--blas-threads N] [--markdown PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PIPELINE = "infer-shapes,canonicalize,bufferize,lower-to-kernels"
MODELS = ("resnet", "mobilenet_v2", "minilm")


def _models():
    sys.path.insert(0, str(HERE))
    from bench_backend import _models_module

    return _models_module()


def build_model(name: str, quick: bool):
    M = _models()
    if name == "resnet":
        return M.resnet(image=64, width=32) if quick else M.resnet()
    if name == "mobilenet_v2":
        return M.mobilenet_v2(image=64, width_mult=0.5) if quick else M.mobilenet_v2()
    if quick:
        return M.minilm(seq=32, hidden=64, heads=4, layers=2, ffn=256, vocab=1000,
                        max_positions=64, dynamic=False)
    return M.minilm(seq=128, dynamic=False)


def kernel_ops(name: str, quick: bool) -> list:
    """(op, count) for each distinct conv2d / matmul of the lowered model, in order."""
    from palimpsest.dialects import load_all
    from palimpsest.dialects.graph.from_onnx import import_onnx
    from palimpsest.passes.pass_manager import PassManager, parse_pipeline

    load_all()
    module = import_onnx(build_model(name, quick))
    PassManager(parse_pipeline(PIPELINE)).run(module)
    found: dict = {}
    for op in module.walk():
        if op.name in ("kernel.conv2d", "kernel.matmul"):
            key = (op.name, tuple(str(v.type) for v in op.ins),
                   tuple(sorted((k, str(v)) for k, v in op.properties.items())))
            if key in found:
                found[key][1] += 1
            else:
                found[key] = [op, 1]
    return list(found.values())


def describe(op, config) -> tuple:
    """(kind, shape text, flops)."""
    shapes = [tuple(v.type.shape) for v in op.ins]
    out = tuple(op.outs[0].type.shape)
    if op.name == "kernel.matmul":
        a, b = shapes[0], shapes[1]
        k = a[-2] if config["transA"] else a[-1]
        flops = 2 * k
        for d in out:
            flops *= d
        trans = "".join(t for t, f in (("ᵀA", config["transA"]), ("ᵀB", config["transB"])) if f)
        text = f"{'x'.join(map(str, a))} @ {'x'.join(map(str, b))}{' ' + trans if trans else ''}"
        return "matmul", text, flops
    x, w = shapes[0], shapes[1]
    group = config["group"]
    flops = 2 * w[1] * w[2] * w[3]
    for d in out:
        flops *= d
    kind = "depthwise" if w[1] == 1 and group > 1 else (
        "conv 1x1" if w[2:] == (1, 1) else f"conv {w[2]}x{w[3]}")
    text = (f"{x[1]}x{x[2]}x{x[3]} -> {out[1]}x{out[2]}x{out[3]}, k{w[2]} "
            f"s{config['strides'][0]}" + (f" g{group}" if group > 1 else ""))
    return kind, text, flops


def time_op(op, dev, runs: int, warmup: int) -> tuple:
    """(numpy seconds, OpenCL seconds, max relative error) with the seconds as (median,
    best) of interleaved runs."""
    import numpy as np

    from palimpsest.backends.numpy.kernel_ops import KERNEL_IMPLS, kernel_info
    from palimpsest.backends.opencl.kernels import GENERATORS
    from palimpsest.backends.opencl.kernels.base import Arg, KernelCall

    rng = np.random.default_rng(0)
    info = kernel_info(op)

    def host(value):
        shape = tuple(value.type.shape)
        return rng.standard_normal(shape).astype(np.float32)

    ins = [host(v) for v in op.ins]
    outs = [np.empty(tuple(v.type.shape), np.float32) for v in op.outs]
    workspaces = [np.empty(tuple(v.type.shape), np.float32) for v in op.workspaces]
    call = KernelCall(op.name, info.config, [Arg(a.shape, a.dtype) for a in ins],
                      [Arg(a.shape, a.dtype) for a in outs],
                      {role: Arg(a.shape, a.dtype) for role, a in zip(info.roles, workspaces)},
                      dev.limits)
    launches = GENERATORS[op.name](call)
    memories = {"in": [dev.upload(a) for a in ins], "out": [dev.buffer(a.nbytes) for a in outs],
                "ws": {role: dev.buffer(a.nbytes) for role, a in zip(info.roles, workspaces)}}

    def numpy_run():
        KERNEL_IMPLS[op.name](op, ins, outs, workspaces)

    def opencl_run():
        for launch in launches:
            dev.launch(launch, lambda r: (memories[r.group][r.key], 0))
        dev.queue.finish()

    for _ in range(max(1, warmup)):
        numpy_run()
        opencl_run()
    host_times, device_times = [], []
    for _ in range(runs):
        start = time.perf_counter()
        numpy_run()
        host_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        opencl_run()
        device_times.append(time.perf_counter() - start)
    # the device result against numpy's, so a fast wrong kernel cannot pass unnoticed
    result = np.empty_like(outs[0])
    dev.cl.enqueue_copy(dev.queue, result, memories["out"][0])
    scale = max(float(np.abs(outs[0]).max()), 1e-30)
    error = float(np.abs(result - outs[0]).max()) / scale
    return ((statistics.median(host_times), min(host_times)),
            (statistics.median(device_times), min(device_times)), error)


def _pair(values, scale, spec) -> str:
    return " / ".join(format(v * scale, spec) for v in values)


def _ratio(device_s, host_s) -> str:
    return " / ".join(f"{d / h:.2f}" for d, h in zip(device_s, host_s))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small model variants")
    parser.add_argument("--only", default=",".join(MODELS))
    parser.add_argument("--blas-threads", type=int, default=None)
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.blas_threads is not None:  # before numpy loads OpenBLAS
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(args.blas_threads)
    from bench_graph import machine_info  # noqa: E402  (after the thread variables)

    from palimpsest.backends.opencl.runtime import device

    dev = device()
    info = machine_info()
    lines = [f"device: {dev.name}; CPU {info['cpu']} x{info['cpus']}; BLAS threads "
             f"{info['blas_threads']}; load at start {info['load']}; median of {args.runs}",
             "",
             "| model | kind | shape | count | OpenCL ms median / best | numpy ms median / best "
             "| ratio median / best | OpenCL GFLOP/s best | numpy GFLOP/s best | max rel err |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    totals = []
    for name in args.only.split(","):
        sums: dict = {}
        for op, count in kernel_ops(name, args.quick):
            from palimpsest.backends.numpy.kernel_ops import kernel_info

            kind, text, flops = describe(op, kernel_info(op).config)
            host_s, device_s, error = time_op(op, dev, args.runs, args.warmup)
            line = (f"| {name} | {kind} | {text} | {count} | {_pair(device_s, 1e3, '.3f')} | "
                    f"{_pair(host_s, 1e3, '.3f')} | {_ratio(device_s, host_s)} | "
                    f"{flops / device_s[1] / 1e9:.1f} | {flops / host_s[1] / 1e9:.1f} | "
                    f"{error:.1e} |")
            print(line, flush=True)
            lines.append(line)
            for key in (kind, "all"):
                total = sums.setdefault(key, [[0.0, 0.0], [0.0, 0.0]])
                for i in range(2):
                    total[0][i] += count * device_s[i]
                    total[1][i] += count * host_s[i]
        for kind, (device_s, host_s) in sorted(sums.items(), key=lambda kv: kv[0] == "all"):
            totals.append(f"| {name} | {kind} | {_pair(device_s, 1e3, '.2f')} | "
                          f"{_pair(host_s, 1e3, '.2f')} | {_ratio(device_s, host_s)} |")
    summary = ["", f"Sums of count x time per model and kind (load at end "
                   f"{machine_info()['load']}):", "",
               "| model | kind | OpenCL ms median / best | numpy ms median / best "
               "| ratio median / best |", "|---|---|---|---|---|"] + totals
    print("\n".join(summary))
    if args.markdown:
        args.markdown.write_text("\n".join(lines + summary) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
