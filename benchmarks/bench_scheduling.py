"""Memory-aware scheduling (issue 15): how far each order lowers the bound.

Per model: schedulable ops, the peak live bytes (the scheduling model's, at the graph
level) of file order, of XLA's three heuristics and of the exact search (proven minimal
or the best within the budget), the planned `@activations` arena of the default
pipeline with and without `schedule-for-memory`, and the scheduling time. Models:

- the real-model corpus (benchmarks/models.toml, fetched into the cache by
  fetch_models.py; a model that cannot be fetched is skipped and says so), at its
  recorded input shapes;
- generated branchy graphs (seeded): Inception-, DenseNet-, U-Net- and SSD-style, and
  random irregularly wired DAGs of 50-500 ops.

Then the default pipeline's compile time on a 1,000-op model with and without the pass,
and a session's re-plans (new batch sizes) of the session benchmark's ~500-op model and
of a ~500-op irregularly wired model whose first plan the pass reorders: re-plans reuse
the first plan's order and schedule nothing.

    python benchmarks/bench_scheduling.py [--budget 10] [--models a,b] [--no-corpus]
        [--no-generated] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

HEURISTICS = ("list", "dfs", "post-order")


# ---------------------------------------------------------------------------- models

def _text_module(text: str):
    from palimpsest.dialects import load_all
    from palimpsest.ir.parser import parse

    load_all()
    return parse(text, "<generated>")


def _act(c, hw):
    """The type of an activation: one image of `c` channels, `hw` x `hw`."""
    return f"tensor<1x{c}x{hw}x{hw}xf32>"


class _Graph:
    """A tiny builder of graph-level text: activations 1xCxHxW f32, from one input %x of
    `channels` x `hw` x `hw`; `x, c, hw = g.input` starts a network."""

    def __init__(self, channels: int, hw: int, seed: int = 0):
        self.input = ("%x", channels, hw)
        self.lines = []
        self.count = 0
        self.rng = random.Random(seed)

    def _name(self, hint="v"):
        self.count += 1
        return f"%{hint}{self.count}"

    def conv(self, x, cin, cout, hw, k=1, stride=1):
        w = self._name("w")
        self.lines.append(f"  {w} = graph.constant {{value = dense<0.01> : "
                          f"tensor<{cout}x{cin}x{k}x{k}xf32>}} : tensor<{cout}x{cin}x{k}x{k}xf32>")
        out = self._name("c")
        pad = k // 2
        ohw = (hw + 2 * pad - k) // stride + 1
        self.lines.append(
            f"  {out} = \"graph.conv\"({x}, {w}) <{{pads = array<i64: {pad}, {pad}, {pad}, "
            f"{pad}>, strides = array<i64: {stride}, {stride}>}}> : ({_act(cin, hw)}, "
            f"tensor<{cout}x{cin}x{k}x{k}xf32>) -> {_act(cout, ohw)}")
        return out, ohw

    def conv_relu(self, x, cin, cout, hw, k=1, stride=1):
        """A conv and the relu after it: (the relu's value, its spatial size)."""
        out, ohw = self.conv(x, cin, cout, hw, k, stride)
        return self.unary("relu", out, cout, ohw), ohw

    def unary(self, op, x, c, hw):
        out = self._name("u")
        self.lines.append(f"  {out} = graph.{op} {x} : {_act(c, hw)}")
        return out

    def add(self, a, b, c, hw):
        out = self._name("a")
        self.lines.append(f"  {out} = graph.add {a}, {b} : {_act(c, hw)}")
        return out

    def concat(self, parts, hw):
        out = self._name("cat")
        total = sum(c for _, c in parts)
        names = ", ".join(p for p, _ in parts)
        types = ", ".join(_act(c, hw) for _, c in parts)
        self.lines.append(f"  {out} = \"graph.concat\"({names}) <{{axis = 1 : i64}}> : "
                          f"({types}) -> {_act(total, hw)}")
        return out, total

    def pool(self, x, c, hw):
        out = self._name("p")
        self.lines.append(
            f"  {out} = \"graph.max_pool\"({x}) <{{kernel_shape = array<i64: 2, 2>, strides = "
            f"array<i64: 2, 2>}}> : ({_act(c, hw)}) -> {_act(c, hw // 2)}")
        return out, hw // 2

    def upsample(self, x, c, hw):
        scales = self._name("s")
        self.lines.append(f"  {scales} = graph.constant {{value = dense<[1.0, 1.0, 2.0, 2.0]> : "
                          f"tensor<4xf32>}} : tensor<4xf32>")
        out = self._name("up")
        self.lines.append(
            f"  {out} = graph.resize {x}, {scales} {{mode = \"nearest\", operandSegmentSizes = "
            f"array<i32: 1, 0, 1, 0>}} : ({_act(c, hw)}, tensor<4xf32>) -> "
            f"{_act(c, hw * 2)}")
        return out, hw * 2

    def text(self, results):
        """The function returning `results`, each (value, channels, hw)."""
        outs = ", ".join(r for r, _, _ in results)
        types = ", ".join(_act(c, hw) for _, c, hw in results)
        _, c, hw = self.input
        return (f"func.func @main(%x: {_act(c, hw)}) -> ({types}) {{\n"
                + "\n".join(self.lines) + f"\n  func.return {outs} : {types}\n}}\n")


def inception(blocks=4, seed=0):
    g = _Graph(16, 32, seed)
    x, c, hw = g.input
    for _ in range(blocks):
        b1, _ = g.conv(x, c, 16, hw, 1)
        b2, _ = g.conv(x, c, 24, hw, 1)
        b2, _ = g.conv(b2, 24, 32, hw, 3)
        b3, _ = g.conv(x, c, 8, hw, 1)
        b3, _ = g.conv(b3, 8, 16, hw, 3)
        b3, _ = g.conv(b3, 16, 16, hw, 3)
        b4 = g.unary("relu", x, c, hw)
        b4, _ = g.conv(b4, c, 16, hw, 1)
        x, c = g.concat([(b1, 16), (b2, 32), (b3, 16), (b4, 16)], hw)
    return g.text([(x, c, hw)])


def densenet(layers=8, growth=8, seed=0):
    g = _Graph(16, 16, seed)
    x, c, hw = g.input
    feats = [(x, c)]
    for _ in range(layers):
        cat, c = g.concat(feats, hw) if len(feats) > 1 else (feats[0][0], feats[0][1])
        h = g.unary("relu", cat, c, hw)
        h, _ = g.conv(h, c, 4 * growth, hw, 1)
        h = g.unary("relu", h, 4 * growth, hw)
        h, _ = g.conv(h, 4 * growth, growth, hw, 3)
        feats.append((h, growth))
    out, c = g.concat(feats, hw)
    return g.text([(out, c, hw)])


def unet(depth=3, seed=0):
    g = _Graph(8, 64, seed)
    x, c, hw = g.input
    skips = []
    for level in range(depth):
        x, _ = g.conv_relu(x, c, c * 2, hw, 3)
        c *= 2
        skips.append((x, c, hw))
        x, hw = g.pool(x, c, hw)
    x, _ = g.conv(x, c, c, hw, 3)
    for skip, sc, shw in reversed(skips):
        x, hw = g.upsample(x, c, hw)
        x, c = g.concat([(x, c), (skip, sc)], hw)
        x, _ = g.conv_relu(x, c, sc, hw, 3)
        c = sc
    return g.text([(x, c, hw)])


def ssd(levels=4, seed=0):
    g = _Graph(8, 64, seed)
    x, c, hw = g.input
    heads = []
    for _ in range(levels):
        x, hw = g.conv_relu(x, c, c * 2, hw, 3, stride=2)
        c *= 2
        cls, _ = g.conv(x, c, 12, hw, 3)
        box, _ = g.conv(x, c, 16, hw, 3)
        heads.append((g.unary("sigmoid", cls, 12, hw), 12, hw))
        heads.append((box, 16, hw))
    return g.text(heads)


def random_dag(n=100, seed=0):
    """A randomly wired network (Xie et al.'s irregular wiring, as Serenity measures):
    each node adds one to three earlier nodes (mostly recent ones) and applies a conv;
    channels vary per node, spatial size fixed."""
    rng = random.Random(seed)
    g = _Graph(16, 8, seed)
    x, c, hw = g.input
    nodes = [(x, c)]
    used = set()
    for i in range(n // 2):  # each node: an add (or one input) and a conv
        k = rng.choice((1, 1, 2, 2, 3))
        picks = sorted({rng.choice(range(max(0, len(nodes) - 12), len(nodes)))
                        for _ in range(k)} | ({rng.randrange(len(nodes))} if rng.random() < 0.3
                                              else set()))
        c_out = rng.choice((8, 16, 32, 64))
        convs = []
        for j in picks:
            name, c = nodes[j]
            used.add(j)
            out, _ = g.conv(name, c, c_out, hw, 1)
            convs.append(out)
        h = convs[0]
        for other in convs[1:]:
            h = g.add(h, other, c_out, hw)
        h = g.unary("relu", h, c_out, hw)
        nodes.append((h, c_out))
    return g.text([(*nodes[j], hw) for j in range(1, len(nodes)) if j not in used])


GENERATED = {
    "inception-4": lambda: inception(4),
    "densenet-12": lambda: densenet(12),
    "unet-3": lambda: unet(3),
    "ssd-4": lambda: ssd(4),
    **{f"random-{n}-s{seed}": (lambda n=n, seed=seed: random_dag(n, seed))
       for n in (50, 100, 200, 300, 500) for seed in (0, 1)},
}


def chain_model(ops=1000):
    """A 1,000-op model for compile time: residual blocks of conv, relu, add."""
    g = _Graph(16, 16)
    x, c, hw = g.input
    while len(g.lines) < ops:
        h, _ = g.conv_relu(x, c, c, hw, 3)
        h, _ = g.conv(h, c, c, hw, 3)
        x = g.add(h, x, c, hw)
        x = g.unary("relu", x, c, hw)
    return g.text([(x, c, hw)])


# ---------------------------------------------------------------------------- measuring

def corpus_modules(names=None):
    import fetch_models
    from palimpsest.dialects.graph.from_onnx import import_onnx
    from palimpsest.ir.attributes import TypeAttr
    from palimpsest.ir.types import FunctionType, TensorType

    for name, entry in fetch_models.corpus().items():
        if names and name not in names:
            continue
        try:
            path = fetch_models.model_path(name, entry)
        except Exception as error:  # noqa: BLE001 - a model we cannot fetch is skipped
            yield name, None, f"not fetched: {error}"
            continue
        try:
            module = import_onnx(str(path))
        except Exception as error:  # noqa: BLE001
            yield name, None, f"import: {str(error).splitlines()[0][:60]}"
            continue
        func = next(op for op in module.walk() if op.name == "func.func")
        shapes = {k: tuple(v["shape"]) for k, v in entry["inputs"].items()}
        args = func.entry_block.args
        types = []
        for arg, input_name in zip(args, _input_names(func, len(args))):
            shape = shapes.get(input_name)
            if shape is not None and isinstance(arg.type, TensorType):
                arg.type = TensorType(shape, arg.type.element_type)
            types.append(arg.type)
        func.properties["function_type"] = TypeAttr(FunctionType(tuple(types),
                                                                 func.type.results))
        yield name, module, ""


def _input_names(func, count):
    from palimpsest.backends.binding import input_names  # noqa: F401 (when present)

    return input_names(func)[:count]


def _clone(module):
    return module.clone()


def measure(name, module, budget):
    from palimpsest.passes.pass_manager import PassManager, parse_pipeline
    from palimpsest.passes.planners import schedule as S
    from palimpsest.passes.schedule_for_memory import build_problem
    from palimpsest.passes.liveness import functions_of

    if any(op.name in ("graph.if", "graph.loop", "graph.scan") for op in module.walk()):
        return {"name": name, "skip": "control flow (runs unplanned)"}
    work = _clone(module)
    PassManager(parse_pipeline("infer-shapes,canonicalize"), verify_each=False).run(work)
    func = functions_of(work)[0]
    built = build_problem(func)
    if built is None:
        return {"name": name, "skip": "nothing to schedule"}
    problem = built[0]
    row = {"name": name, "ops": problem.n}
    row["file"] = S.file_order(problem).peak
    for h in HEURISTICS:
        row[h] = S.SCHEDULERS[h](problem).peak
    started = time.perf_counter()
    upper = min((S.file_order(problem), *(S.SCHEDULERS[h](problem) for h in HEURISTICS)),
                key=lambda s: s.peak)
    exact = S.exact_schedule(problem, budget, upper)
    row["exact"], row["proven"] = exact.peak, exact.proven
    row["seconds"] = time.perf_counter() - started
    arenas = {}
    for label, pipeline in (("file", "default{schedule=false}"),
                            ("scheduled", f"infer-shapes,canonicalize,schedule-for-memory"
                                          f"{{time-budget={budget}}},bufferize,lower-to-kernels,"
                                          f"schedule-for-memory{{time-budget={budget}}},"
                                          f"insert-deallocs,plan-memory")):
        planned = _clone(module)
        try:
            PassManager(parse_pipeline(pipeline), verify_each=False).run(planned)
        except Exception as error:  # noqa: BLE001
            return {**row, "skip": f"plan: {str(error).splitlines()[0][:60]}"}
        arenas[label] = _arena(planned)
    row["arena_file"], row["arena"] = arenas["file"], arenas["scheduled"]
    return row


def _arena(module) -> int:
    """Bytes of the @activations pool (the pool the order changes)."""
    for op in module.walk():
        if op.name == "memory.pool" and op.properties["sym_name"].value == "activations":
            return op.properties["size"].value
    return 0


def compile_time(ops=1000, repeat=7):
    """Median seconds of the default pipeline on a ~`ops`-op model without and with the
    pass, the two taking turns (load drifts hit both alike)."""
    from palimpsest.passes.pass_manager import PassManager, parse_pipeline

    module = _text_module(chain_model(ops))
    count = sum(1 for _ in module.walk()) - 2
    runs = {"without": [], "with": []}
    for _ in range(repeat):
        for label, pipeline in (("without", "default{schedule=false}"), ("with", "default")):
            work = _clone(module)
            started = time.perf_counter()
            PassManager(parse_pipeline(pipeline), verify_each=False).run(work)
            runs[label].append(time.perf_counter() - started)
    return count, {label: statistics.median(values) for label, values in runs.items()}


def replan_time(shapes=15):
    """A session's re-plans (a new batch size each, every one a cache miss): medians in
    seconds, per model: {"ops", "with", "without", "plan_memory", "reordered"}.

    - `deep_mlp(nodes=400)`, the ~500-op model of the session benchmark's re-plan target,
      with the `default` pipeline (the pass in it) and `default{schedule=false}`;
    - a random DAG of ~500 ops with a dynamic batch, whose first plan the pass reorders
      (re-plans reuse that order and run no scheduling); `plan_memory`: plan-memory's own
      share of a re-plan with the pass."""
    import numpy as np

    import palimpsest.passes.pass_manager as pm
    from palimpsest.backends.numpy.session import Session
    from palimpsest.dialects.graph.from_onnx import import_onnx
    from palimpsest.passes.schedule_for_memory import schedules_of

    from bench_graph import M

    rng = np.random.default_rng(0)
    models = {
        "deep_mlp(nodes=400)": (import_onnx(M.deep_mlp(nodes=400)), (16, 64)),
        "random-170 (dynamic batch)": (
            _text_module(random_dag(170, 0).replace("tensor<1x", "tensor<?x")), (16, 8, 8)),
    }
    results = {}
    original_run = pm.PassManager.run
    labels = (("without", "default{schedule=false}"), ("with", "default"))
    for name, (module, tail) in models.items():
        row = {"ops": sum(1 for op in module.walk() if op.name.startswith("graph."))}
        sessions = {label: Session(module.clone(), pipeline=pipeline, cache_size=shapes + 2)
                    for label, pipeline in labels}
        for session in sessions.values():
            session.run({"x": rng.standard_normal((1, *tail)).astype(np.float32)})
        (plan,) = sessions["with"]._cache.values()
        row["reordered"] = any(r.reordered for r in schedules_of(plan.func))
        times = {label: [] for label, _ in labels}
        planning = []

        def run(self, target):
            done = original_run(self, target)
            planning.append(sum(s for n, s in self.timings if n.startswith("plan-memory")))
            return done

        for batch in range(2, 2 + shapes):  # interleaved, so load drifts hit both alike
            for label, session in sessions.items():
                pm.PassManager.run = run if label == "with" else original_run
                try:
                    session.run({"x": rng.standard_normal((batch, *tail)).astype(np.float32)})
                finally:
                    pm.PassManager.run = original_run
                assert session.last_stats.cache_hit is False
                times[label].append(session.last_stats.compile_seconds)
        for label, values in times.items():
            row[label] = statistics.median(values)
        row["plan_memory"] = statistics.median(planning) if planning else float("nan")
        results[name] = row
    return results


# ---------------------------------------------------------------------------- report

def _kb(value):
    return f"{value / 1024:,.1f}"


def table(rows) -> list[str]:
    out = ["| model | ops | file order | list | dfs | post-order | exact | proven | "
           "arena file order | arena scheduled | time (s) |",
           "|---|---:|---:|---:|---:|---:|---:|:-:|---:|---:|---:|"]
    for r in rows:
        if "skip" in r:
            out.append(f"| {r['name']} | {r.get('ops', '')} | {r['skip']} |||||||||")
            continue
        out.append(f"| {r['name']} | {r['ops']} | {_kb(r['file'])} | {_kb(r['list'])} | "
                   f"{_kb(r['dfs'])} | {_kb(r['post-order'])} | {_kb(r['exact'])} | "
                   f"{'yes' if r['proven'] else 'no'} | {_kb(r['arena_file'])} | "
                   f"{_kb(r['arena'])} | {r['seconds']:.2f} |")
    return out


def targets(rows, compile_times, replans=None) -> list[str]:
    done = [r for r in rows if "skip" not in r]
    worse = [r["name"] for r in done if r["arena"] > r["arena_file"]]
    over_heuristics = [r["name"] for r in done
                       if r["exact"] > min(r[h] for h in HEURISTICS)]
    randoms = [r for r in done if r["name"].startswith("random-")]
    geo = math.exp(statistics.mean(math.log(r["file"] / r["exact"]) for r in randoms)) \
        if randoms else float("nan")
    small = [r for r in done if r["ops"] <= 300]
    unproven = [r["name"] for r in small if not r["proven"] or r["seconds"] > 10]
    count, times = compile_times
    ratio = times["with"] / times["without"]
    return [
        f"- never a larger arena than file order: {'met' if not worse else 'NOT met: ' + ', '.join(worse)}",
        f"- scheduled bound <= the best of XLA's three heuristics on every model: "
        f"{'met' if not over_heuristics else 'NOT met: ' + ', '.join(over_heuristics)}",
        f"- irregularly wired graphs, geomean peak file order / scheduled: {geo:.2f}x "
        f"(target >= 1.5x: {'met' if geo >= 1.5 else 'not met'})",
        f"- exact (proven) on every model of <= 300 ops within 10 s: "
        f"{'met' if not unproven else 'not met on ' + ', '.join(unproven)}",
        f"- default pipeline on a {count}-op model: {times['without']:.2f} s without, "
        f"{times['with']:.2f} s with the pass ({ratio:.2f}x; target <= 1.5x: "
        f"{'met' if ratio <= 1.5 else 'not met'})",
    ] + [f"- a session's re-plan, {name} ({r['ops']} graph ops, first plan "
         f"{'reordered' if r['reordered'] else 'not reordered'}): median "
         f"{r['with'] * 1e3:.1f} ms with the pass in the pipeline, {r['without'] * 1e3:.1f} "
         f"ms without (plan-memory {r['plan_memory'] * 1e3:.1f} ms of it; target <= 20 ms: "
         f"{'met' if r['with'] <= 0.020 else 'not met'})"
         for name, r in (replans or {}).items()]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=10.0)
    parser.add_argument("--models", default="")
    parser.add_argument("--no-corpus", action="store_true")
    parser.add_argument("--no-generated", action="store_true")
    parser.add_argument("--markdown", default="")
    args = parser.parse_args(argv)
    names = set(filter(None, args.models.split(",")))
    rows = []
    if not args.no_corpus:
        for name, module, why in corpus_modules(names):
            if module is None:
                rows.append({"name": name, "skip": why})
            else:
                rows.append(measure(name, module, args.budget))
            print(table(rows[-1:])[-1], flush=True)
    if not args.no_generated:
        for name, make in GENERATED.items():
            if names and name not in names:
                continue
            rows.append(measure(name, _text_module(make()), args.budget))
            print(table(rows[-1:])[-1], flush=True)
    times = compile_time()
    replans = replan_time()
    lines = ["Bytes in KiB: peak live bytes of the scheduling model per order; arenas are "
             "the planned @activations pool of the default pipeline.", "", *table(rows), "",
             *targets(rows, times, replans)]
    print("\n".join(lines))
    if args.markdown:
        Path(args.markdown).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
