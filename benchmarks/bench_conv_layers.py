"""Per conv layer of corpus models: the numpy backend's `kernel.conv2d` against
onnxruntime's Conv on the same shape, both at one thread.

For each model (models.toml, fetched by fetch_models.py), the model runs once through a
numpy `Session` with the profiler on; every `kernel.conv2d` it ran gives a layer: X's and
W's shapes, bias or not, group, strides, dilations and pads (as the kernel sees them,
after import rewrites such as folded BatchNorms). Layers of the same shape are measured
once and counted. Each layer becomes a one-node ONNX Conv model, run
- by onnxruntime (one intra-op thread, all graph optimizations), the session's time;
- by a numpy `Session` of that model with the profiler on, the conv op's own time (the
  session's binding and I/O left out; a fused epilogue does not arise: one node);
taking turns run by run after a warm-up, medians. The table lists the layers by the time
they lose to onnxruntime per model run (our ms - ort ms, times their count), worst first,
with a one-word class (1x1, depthwise, strided, first layer...) and the totals.

    python benchmarks/bench_conv_layers.py [--models a,b] [--runs 15] [--top 15]

BLAS threads are pinned to one before numpy loads.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import fetch_models  # noqa: E402

DEFAULT_MODELS = "text_orientation,ppocr_mobile_cls,blazeface_back"


def conv_layers(path, feeds) -> list[dict]:
    """The model's `kernel.conv2d` ops as layer descriptions, in the order they ran."""
    from palimpsest.backends.numpy.kernel_ops import config_of
    from palimpsest.backends.numpy.kernel_ops_elementwise import core_inputs
    from palimpsest.backends.numpy.session import Session

    session = Session(str(path), profile=True, threads=1)
    session.run(feeds)
    layers = []
    for op in session.profiler.records:
        if op.name != "kernel.conv2d":
            continue
        config = config_of(op)
        core = core_inputs(config, list(op.ins))
        layers.append({
            "x": tuple(core[0].type.shape), "w": tuple(core[1].type.shape),
            "bias": len(core) > 2, "group": config["group"],
            "strides": tuple(config["strides"]), "dilations": tuple(config["dilations"]),
            "pads": tuple(config["pads"]), "dtype": core[0].type.element_type})
    return layers


def layer_key(layer) -> tuple:
    return (layer["x"], layer["w"], layer["bias"], layer["group"], layer["strides"],
            layer["dilations"], layer["pads"])


def layer_class(layer) -> str:
    (_, c, _, _), (m, cg, kh, kw) = layer["x"], layer["w"]
    kind = f"{kh}x{kw}"
    if cg == 1 and layer["group"] > 1:
        kind = f"dw{kh}x{kw}"
    elif layer["group"] > 1:
        kind = f"g{layer['group']} {kh}x{kw}"
    if layer["strides"] != (1, 1):
        kind += f"/s{layer['strides'][0]}"
    if layer["dilations"] != (1, 1):
        kind += f" d{layer['dilations'][0]}"
    if c <= 4:
        kind += " first"
    return kind


def one_node_model(layer, rng):
    from onnx import TensorProto, helper, numpy_helper

    dtype = np.float32 if str(layer["dtype"]) == "f32" else np.float64
    onnx_type = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    (kh, kw) = layer["w"][2:]
    top, left, bottom, right = layer["pads"]
    inits = [numpy_helper.from_array(
        (rng.standard_normal(layer["w"]) * 0.1).astype(dtype), "w")]
    ins = ["x", "w"]
    if layer["bias"]:
        inits.append(numpy_helper.from_array(
            rng.standard_normal(layer["w"][0]).astype(dtype), "b"))
        ins.append("b")
    conv = helper.make_node("Conv", ins, ["y"], group=layer["group"],
                            kernel_shape=[kh, kw], strides=list(layer["strides"]),
                            dilations=list(layer["dilations"]),
                            pads=[top, left, bottom, right])
    graph = helper.make_graph(
        [conv], "conv", [helper.make_tensor_value_info("x", onnx_type, list(layer["x"]))],
        [helper.make_tensor_value_info("y", onnx_type, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal(layer["x"]).astype(dtype)}
    return model, feeds


def time_layer(layer, runs: int) -> tuple[float, float, float]:
    """(our conv op's median seconds, onnxruntime's, the outputs' max relative diff)."""
    import onnxruntime as ort

    from palimpsest.backends.numpy.session import Session
    from palimpsest.dialects.graph.from_onnx import import_onnx

    model, feeds = one_node_model(layer, np.random.default_rng(0))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 4
    ort_session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
    session = Session(import_onnx(model), profile=True, threads=1)
    profiler = session.profiler

    def ours() -> float:
        before = len(profiler.events)
        session.run(feeds)
        return sum(event[2] for event in profiler.events[before:]
                   if event[0].row.kind == "kernel.conv2d")

    def theirs() -> float:
        start = time.perf_counter()
        ort_session.run(None, feeds)
        return time.perf_counter() - start

    want = ort_session.run(None, feeds)[0]
    got = session.run(feeds)["y"]
    scale = float(np.max(np.abs(want))) or 1.0
    diff = float(np.max(np.abs(got.astype(np.float64) - want))) / scale
    ours(), theirs()
    mine, other = [], []
    for index in range(runs):
        if index % 2:
            other.append(theirs())
            mine.append(ours())
        else:
            mine.append(ours())
            other.append(theirs())
        del profiler.events[:]
    return statistics.median(mine), statistics.median(other), diff


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    from palimpsest.backends.numpy.blas import blas_summary

    entries = fetch_models.corpus()
    everything = []
    for name in args.models.split(","):
        entry = entries[name]
        path = fetch_models.model_path(name, entry)
        layers = conv_layers(path, fetch_models.inputs_for(entry))
        counts: dict = {}
        for layer in layers:
            key = layer_key(layer)
            if key in counts:
                counts[key][1] += 1
            else:
                counts[key] = [layer, 1]
        rows = []
        for layer, count in counts.values():
            mine, other, diff = time_layer(layer, args.runs)
            rows.append((name, layer, count, mine, other, diff))
        mine_total = sum(r[3] * r[2] for r in rows)
        other_total = sum(r[4] * r[2] for r in rows)
        print(f"{name}: {len(layers)} convs, {len(rows)} shapes; conv ours "
              f"{1e3 * mine_total:.2f} ms, onnxruntime {1e3 * other_total:.2f} ms "
              f"({mine_total / other_total:.2f}x)", flush=True)
        everything.extend(rows)
    everything.sort(key=lambda r: -(r[3] - r[4]) * r[2])
    print()
    head = (f"{'model':<18} {'class':<14} {'x':<18} {'w':<16} {'pads':<12} {'n':>3} "
            f"{'ours ms':>8} {'ort ms':>7} {'ratio':>6} {'lost ms':>8} {'diff':>8}")
    print(head)
    print("-" * len(head))
    for name, layer, count, mine, other, diff in everything[:args.top]:
        print(f"{name:<18} {layer_class(layer):<14} {'x'.join(map(str, layer['x'])):<18} "
              f"{'x'.join(map(str, layer['w'])):<16} {','.join(map(str, layer['pads'])):<12} "
              f"{count:>3} {1e3 * mine:>8.3f} {1e3 * other:>7.3f} {mine / other:>6.2f} "
              f"{1e3 * (mine - other) * count:>8.3f} {diff:>8.1e}")
    by_class: dict = {}
    for name, layer, count, mine, other, diff in everything:
        kind = layer_class(layer).replace(" first", "")
        total = by_class.setdefault(kind, [0.0, 0.0, 0])
        total[0] += mine * count
        total[1] += other * count
        total[2] += count
    print()
    print(f"{'class':<14} {'n':>4} {'ours ms':>8} {'ort ms':>8} {'ratio':>6}")
    for kind, (mine, other, count) in sorted(by_class.items(), key=lambda kv: kv[1][1] - kv[1][0]):
        print(f"{kind:<14} {count:>4} {1e3 * mine:>8.3f} {1e3 * other:>8.3f} {mine / other:>6.2f}")
    print()
    print(blas_summary(), f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
