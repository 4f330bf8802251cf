#!/usr/bin/env python3
"""Parser benchmark: Palimpsest against xDSL on the same generic-form file.

What it measures (issue targets in brackets):

1. A seeded generator writes a realistic N-op (default 20,000) module in MLIR's generic
   form: one `func.func` whose body is tensor-typed unregistered `bench.*` ops with 1-3
   operands, `<{...}>` properties and `{...}` attribute dicts (int, float, string, bool,
   unit, type, symbol, array, nested array, dict, `array<i64: ...>` and a few `dense<>`
   constants), some two-result ops (`%n:2`, `%n#1`), and some ops spread over several
   lines. Both tools accept it with `--allow-unregistered-dialect`.
2. Palimpsest in-process: parse, verify and print timed separately (`time.perf_counter`,
   best and median of --repeat runs) [parse+verify+print >= 10,000 ops/s].
3. Whole process, same file: `palimpsest-opt FILE --allow-unregistered-dialect -o
   /dev/null` against `xdsl-opt FILE --allow-unregistered-dialect -o /dev/null`, runs
   interleaved, medians [palimpsest-opt >= 5x faster than xdsl-opt].
4. Start-up: both tools on a 5-line file, --startup-runs runs each, interleaved, medians
   [palimpsest-opt <= 0.2 s].

Every measured thing is checked first: the file parses and verifies, Palimpsest's output
(pretty and generic) re-parses to the same text and op count, each tool exits 0 on the
file and on its validation run prints a module with the expected op count (xDSL's generic
output is re-parsed by Palimpsest). A benchmark that times an error exits 1 instead.

Usage:
    python benchmarks/bench_parser.py [--ops 20000] [--repeat 3] [--runs 3]
                                      [--startup-runs 15] [--markdown PATH] [--quick]
                                      [--no-xdsl] [--profile [N]]
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib.metadata
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET_OPS_PER_S = 10_000
TARGET_RATIO = 5.0
TARGET_STARTUP_S = 0.2

TINY_FILE = """\
"builtin.module"() ({
  %0 = "bench.const"() <{value = dense<1.000000e+00> : tensor<4xf32>}> : () -> tensor<4xf32>
  %1 = "bench.add"(%0, %0) {name = "sum"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  "bench.sink"(%1) : (tensor<4xf32>) -> ()
}) : () -> ()
"""
TINY_OPS = 4


# ----------------------------------------------------------------------------- generator

_TYPES = [  # (spelling, element kind, static shape or None)
    ("tensor<64x64xf32>", "f", (64, 64)),
    ("tensor<1x128xf32>", "f", (1, 128)),
    ("tensor<8x16x32xf32>", "f", (8, 16, 32)),
    ("tensor<?x64xf32>", "f", None),
    ("tensor<4x4xf16>", "f", (4, 4)),
    ("tensor<128xi32>", "i", (128,)),
    ("tensor<16xi64>", "i", (16,)),
]
_TYPE_WEIGHTS = [30, 15, 15, 10, 10, 12, 8]

_UNARY = ["relu", "exp", "neg", "tanh", "sqrt", "rsqrt", "abs", "cast", "transpose"]
_BINARY = ["add", "sub", "mul", "div", "max", "min", "pow", "cmp"]
_TERNARY = ["fma", "select", "clamp"]
_NAMES = ["encoder", "decoder", "attn", "mlp", "proj", "norm", "embed", "head"]


class _Gen:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.next_id = 0
        self.pool: dict[str, list[str]] = {t: [] for t, _, _ in _TYPES}
        self.lines: list[str] = []

    # -- values -----------------------------------------------------------------
    def fresh(self, count: int = 1) -> tuple[str, list[str]]:
        """The result list spelling (`%7` or `%7:2`) and the use spellings."""
        name = f"%{self.next_id}"
        self.next_id += 1
        if count == 1:
            return name, [name]
        return f"{name}:{count}", [f"{name}#{i}" for i in range(count)]

    def define(self, type_: str, use: str) -> None:
        pool = self.pool.setdefault(type_, [])
        pool.append(use)
        if len(pool) > 48:  # operands come from a recent window, like real programs
            del pool[: len(pool) - 48]

    def operands(self, type_: str, count: int) -> list[str]:
        pool = self.pool[type_]
        recent = pool[-12:]
        return [self.rng.choice(recent if self.rng.random() < 0.8 else pool)
                for _ in range(count)]

    # -- attributes --------------------------------------------------------------
    def int_attr(self) -> str:
        rng = self.rng
        value = rng.choice([0, 1, 2, 3, 4, 8, 16, 32, 64, 128, -1, rng.randint(-1000, 100000)])
        return rng.choice([f"{value}", f"{value} : i64", f"{value} : i32", f"{value} : index"])

    def float_attr(self) -> str:
        rng = self.rng
        value = rng.choice([0.0, 1.0, 0.5, 0.25, 1e-5, 1e-6, -2.0, rng.uniform(-10, 10)])
        spelled = f"{value:.6e}" if rng.random() < 0.6 else repr(value)
        if "." not in spelled:  # MLIR float literals need the dot: 1.0e-05, not 1e-05
            mantissa, _, exponent = spelled.partition("e")
            spelled = mantissa + ".0" + ("e" + exponent if exponent else "")
        return rng.choice([spelled, f"{spelled} : f32", f"{spelled} : f64"])

    def string_attr(self) -> str:
        rng = self.rng
        return (f'"{rng.choice(_NAMES)}.{rng.randint(0, 47)}/'
                f'{rng.choice(["w", "b", "scale", "bias", "out"])}"')

    def int_array(self, lo: int = 1, hi: int = 4) -> str:
        return "[" + ", ".join(str(self.rng.randint(0, 8)) for _ in range(self.rng.randint(lo, hi))) + "]"

    def dense_array(self) -> str:
        n = self.rng.randint(1, 4)
        return "array<i64: " + ", ".join(str(self.rng.randint(1, 3)) for _ in range(n)) + ">"

    def misc_attr(self) -> tuple[str, str]:
        rng = self.rng
        kind = rng.randrange(10)
        if kind == 0:
            return "fastmath", rng.choice(['"none"', '"fast"', '"contract"'])
        if kind == 1:
            return "alpha", self.float_attr()
        if kind == 2:
            return "group", self.int_attr()
        if kind == 3:
            return "name", self.string_attr()
        if kind == 4:
            return "tags", "[" + ", ".join(self.string_attr() for _ in range(rng.randint(1, 3))) + "]"
        if kind == 5:
            return "inplace", ""  # unit attribute
        if kind == 6:
            return "trainable", rng.choice(["true", "false"])
        if kind == 7:
            return "elem_type", rng.choice(["f32", "f16", "i32", "tensor<4xf32>"])
        if kind == 8:
            return "meta", (f"{{id = {rng.randint(0, 99999)} : i64, "
                            f"origin = {self.string_attr()}}}")
        return "shape", self.int_array(1, 3)

    def attr_dict(self, count: int) -> list[tuple[str, str]]:
        entries: dict[str, str] = {}
        for _ in range(count):
            key, value = self.misc_attr()
            entries.setdefault(key, value)
        return list(entries.items())

    def dense(self, type_: str, kind: str, shape) -> str:
        rng = self.rng
        if shape is None:  # dynamic shape: give the constant a static type
            type_, shape = "tensor<2x64xf32>", (2, 64)
        size = 1
        for dim in shape:
            size *= dim
        if size > 16 or rng.random() < 0.3:  # splat
            value = f"{rng.uniform(-1, 1):.6e}" if kind == "f" else str(rng.randint(-9, 9))
            return f"dense<{value}> : {type_}", type_

        def elem():
            return f"{rng.uniform(-4, 4):.6e}" if kind == "f" else str(rng.randint(-99, 99))

        def nest(dims):
            if len(dims) == 1:
                return "[" + ", ".join(elem() for _ in range(dims[0])) + "]"
            return "[" + ", ".join(nest(dims[1:]) for _ in range(dims[0])) + "]"

        return f"dense<{nest(list(shape))}> : {type_}", type_

    # -- ops ---------------------------------------------------------------------
    def emit(self, results: str, name: str, operands: list[str], operand_types: list[str],
             result_types: list[str], props: list[tuple[str, str]],
             attrs: list[tuple[str, str]], multiline: bool) -> None:
        def entry(key, value):
            return key if value == "" else f"{key} = {value}"

        head = f"    {results} = " if results else "    "
        head += f'"{name}"(' + ", ".join(operands) + ")"
        results_sig = (result_types[0] if len(result_types) == 1
                       else "(" + ", ".join(result_types) + ")")
        sig = "(" + ", ".join(operand_types) + ") -> " + results_sig
        if not multiline:
            text = head
            if props:
                text += " <{" + ", ".join(entry(k, v) for k, v in props) + "}>"
            if attrs:
                text += " {" + ", ".join(entry(k, v) for k, v in attrs) + "}"
            self.lines.append(f"{text} : {sig}")
            return
        # Spread over several lines, the way hand-written or reformatted IR looks.
        if props:
            pad = " " * (len(head) + 3)
            body = f",\n{pad}".join(entry(k, v) for k, v in props)
            head += f" <{{{body}}}>"
        if attrs:
            self.lines.append(head + " {")
            self.lines.append(",\n".join(f"      {entry(k, v)}" for k, v in attrs))
            self.lines.append(f"    }} : {sig}")
        else:
            self.lines.append(f"{head}\n      : {sig}")

    def op(self) -> int:
        """Emit one op; return how many ops it emitted (always 1)."""
        rng = self.rng
        type_, kind, shape = rng.choices(_TYPES, _TYPE_WEIGHTS)[0]
        roll = rng.random()
        multiline = rng.random() < 0.05
        if roll < 0.02 or not self.pool[type_]:  # a constant
            value, ctype = self.dense(type_, kind, shape)
            results, uses = self.fresh()
            self.emit(results, "bench.constant", [], [], [ctype], [("value", value)], [], False)
            self.define(ctype, uses[0])
            return 1
        if roll < 0.30:
            name, count = "bench." + rng.choice(_UNARY), 1
            props = [("axis", self.int_attr())] if rng.random() < 0.3 else []
        elif roll < 0.70:
            name, count = "bench." + rng.choice(_BINARY), 2
            props = [("broadcast", rng.choice(["true", "false"]))] if rng.random() < 0.4 else []
        elif roll < 0.80:
            name, count = "bench." + rng.choice(_TERNARY), 3
            props = []
        elif roll < 0.88:
            name, count = "bench.matmul", 2
            props = [("precision", rng.choice(['"default"', '"highest"'])),
                     ("transpose_a", rng.choice(["true", "false"])),
                     ("transpose_b", rng.choice(["true", "false"]))]
        elif roll < 0.93:
            name, count = "bench.conv2d", rng.choice([2, 3])
            props = [("dilations", self.dense_array()),
                     ("padding", "[[0, 0], [1, 1], [1, 1], [0, 0]]"),
                     ("strides", self.dense_array())]
        elif roll < 0.97:
            name, count = "bench.reduce", 1
            props = [("axes", self.int_array()), ("keep_dims", rng.choice(["true", "false"])),
                     ("kind", rng.choice(['"sum"', '"max"', '"mean"']))]
        else:  # two results
            operands = self.operands(type_, 1)
            results, uses = self.fresh(2)
            self.emit(results, "bench.split", operands, [type_], [type_, type_],
                      [("axis", self.int_attr()), ("sections", "2 : i64")],
                      self.attr_dict(rng.randint(0, 2)), multiline)
            for use in uses:
                self.define(type_, use)
            return 1
        operands = self.operands(type_, count)
        attrs = self.attr_dict(rng.choice([0, 0, 1, 1, 2, 3]))
        results, uses = self.fresh()
        self.emit(results, name, operands, [type_] * count, [type_], props, attrs, multiline)
        self.define(type_, uses[0])
        return 1


def generate_module(n_ops: int, seed: int = 0) -> str:
    """A generic-form module of exactly `n_ops` operations, counting `builtin.module`,
    `func.func` and `func.return`. Same seed, same text."""
    if n_ops < 4:
        raise ValueError("need at least 4 ops (module, func, one op, return)")
    gen = _Gen(seed)
    args = []
    for index, (type_, _, _) in enumerate(_TYPES):
        args.append(f"%arg{index}: {type_}")
        gen.define(type_, f"%arg{index}")
    arg_types = ", ".join(t for t, _, _ in _TYPES)
    out_type = _TYPES[0][0]
    emitted = 0
    while emitted < n_ops - 3:
        emitted += gen.op()
    last = gen.pool[out_type][-1]
    header = [
        '"builtin.module"() ({',
        f'  "func.func"() <{{function_type = ({arg_types}) -> {out_type}, '
        f'sym_name = "bench_main"}}> ({{',
        "  ^bb0(" + ", ".join(args) + "):",
    ]
    footer = [
        f'    "func.return"({last}) : ({out_type}) -> ()',
        "  }) : () -> ()",
        "}) : () -> ()",
    ]
    return "\n".join(header + gen.lines + footer) + "\n"


# ----------------------------------------------------------------------------- helpers

class BenchError(Exception):
    """The benchmark would measure something broken."""


def _count_ops(module) -> int:
    return sum(1 for _ in module.walk())


def _stats(times: list[tuple[float, float]]) -> dict:
    """`times`: (wall, cpu) pairs. CPU time (user + sys) is the figure that other jobs on
    a busy machine disturb least; wall time is what a user waits."""
    wall = [w for w, _ in times]
    cpu = [c for _, c in times]
    return {"best": min(wall), "median": statistics.median(wall),
            "cpu_best": min(cpu), "cpu_median": statistics.median(cpu),
            "runs": len(times), "all": wall, "all_cpu": cpu}


class _Clock:
    """Wall and CPU time of this process, or of waited-for children."""

    def __init__(self, children: bool = False):
        self.children = children

    def now(self) -> tuple[float, float]:
        if self.children:
            import resource

            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            return time.perf_counter(), usage.ru_utime + usage.ru_stime
        return time.perf_counter(), time.process_time()

    @staticmethod
    def since(start: tuple[float, float], end: tuple[float, float]) -> tuple[float, float]:
        return end[0] - start[0], end[1] - start[1]


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "cpu": _cpu_model(),
        "nproc": usable,
        "platform": platform.platform(),
        "python": platform.python_version() + f" ({platform.python_implementation()})",
        "lark": _version("lark"),
        "xdsl": _version("xdsl"),
        "palimpsest": _version("palimpsest"),
        "loadavg": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }


def _find_tool(name: str, override: str | None) -> list[str] | None:
    """The console script itself, not a pyenv shim in front of it (a shim is a shell
    script that adds ~0.1 s to every start)."""
    if override:
        return [override]
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    found = shutil.which(name)
    if found:
        return [found]
    if name == "palimpsest-opt":
        return [sys.executable, "-m", "palimpsest.tools.opt"]
    return None


def _run(cmd: list[str]) -> tuple[float, float]:
    clock = _Clock(children=True)
    start = clock.now()
    try:
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    except OSError as error:
        raise BenchError(f"cannot run {cmd[0]}: {error.strerror}") from None
    elapsed = clock.since(start, clock.now())
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-5:]
        raise BenchError(f"{' '.join(cmd)} exited {proc.returncode}:\n  " + "\n  ".join(tail))
    return elapsed


def time_processes(commands: dict[str, list[str]], runs: int, warmup: int = 1) -> dict:
    """Run each command `runs` times, interleaved so that load drifts hit all alike."""
    for cmd in commands.values():
        for _ in range(warmup):
            _run(cmd)
    times = {name: [] for name in commands}
    for _ in range(runs):
        for name, cmd in commands.items():
            times[name].append(_run(cmd))
    return {name: _stats(t) for name, t in times.items()}


# ----------------------------------------------------------------------------- measuring

def check_palimpsest(text: str, filename: str, n_ops: int) -> None:
    from palimpsest.ir.parser import parse
    from palimpsest.ir.printer import print_ir
    from palimpsest.ir.verifier import verify

    module = parse(text, filename, allow_unregistered=True)
    verify(module)
    if _count_ops(module) != n_ops:
        raise BenchError(f"Palimpsest parsed {_count_ops(module)} ops, expected {n_ops}")
    for generic in (False, True):
        first = print_ir(module, generic=generic)
        again = parse(first, "<round-trip>", allow_unregistered=True)
        verify(again)
        if _count_ops(again) != n_ops:
            raise BenchError(f"round trip (generic={generic}) lost ops: {_count_ops(again)}")
        if print_ir(again, generic=generic) != first:
            raise BenchError(f"round trip (generic={generic}) is not a fixpoint")


def measure_palimpsest(text: str, filename: str, repeat: int) -> dict:
    from palimpsest.ir.parser import parse
    from palimpsest.ir.printer import print_ir
    from palimpsest.ir.verifier import verify

    parse(TINY_FILE, "<warm-up>", allow_unregistered=True)  # builds/loads the Lark tables
    phases = {"parse": [], "verify": [], "print": [], "print (generic)": [], "total": []}
    clock, since = _Clock(), _Clock.since
    for _ in range(repeat):
        gc.collect()
        t0 = clock.now()
        module = parse(text, filename, allow_unregistered=True)
        t1 = clock.now()
        verify(module)
        t2 = clock.now()
        out = print_ir(module)
        t3 = clock.now()
        print_ir(module, generic=True)
        t4 = clock.now()
        phases["parse"].append(since(t0, t1))
        phases["verify"].append(since(t1, t2))
        phases["print"].append(since(t2, t3))
        phases["print (generic)"].append(since(t3, t4))
        phases["total"].append(since(t0, t3))
        del module, out
    return {name: _stats(times) for name, times in phases.items()}


def check_tool_output(name: str, cmd: list[str], path: Path, out_path: Path, n_ops: int,
                      generic_flag: str) -> str | None:
    """Run the tool once writing real output and check that output holds n_ops ops.
    Returns a warning, or None. Raises BenchError if the tool fails."""
    from palimpsest.ir.parser import parse

    _run(cmd + [str(path), "--allow-unregistered-dialect", generic_flag, "-o", str(out_path)])
    printed = out_path.read_text()
    if not printed.strip():
        raise BenchError(f"{name} printed nothing for {path}")
    try:
        module = parse(printed, str(out_path), allow_unregistered=True)
    except Exception as error:  # a Palimpsest limitation, not a broken measurement
        first = str(error).splitlines()[0]
        return f"Palimpsest could not re-parse {name}'s output ({first}); op count unchecked"
    if _count_ops(module) != n_ops:
        raise BenchError(f"{name}'s output holds {_count_ops(module)} ops, expected {n_ops}")
    return None


def profile_parse(text: str, filename: str, top: int) -> str:
    import cProfile
    import io
    import pstats

    from palimpsest.ir.parser import parse

    parse(TINY_FILE, "<warm-up>", allow_unregistered=True)
    profiler = cProfile.Profile()
    profiler.enable()
    parse(text, filename, allow_unregistered=True)
    profiler.disable()
    stream = io.StringIO()
    pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(top)
    return stream.getvalue()


# ----------------------------------------------------------------------------- reporting

def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms" if seconds >= 0.1 else f"{seconds * 1000:,.1f} ms"


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f}"


def _mark(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def build_report(r: dict) -> str:
    """Markdown, readable as plain text too. Targets are judged on wall-clock medians;
    CPU-time (user + sys) columns are there because other jobs on a small shared machine
    inflate wall time, and CPU time much less."""
    m, n, lines = r["machine"], r["ops"], r["lines"]
    out = [
        f"### Run of {m['date']}",
        "",
        f"- Machine: {m['cpu']}, {m['nproc']} usable CPUs, {m['platform']}",
        f"- Python {m['python']}, lark {m['lark']}, xdsl {m['xdsl']}, palimpsest {m['palimpsest']}",
        f"- Load average (1/5/15 min) at start / end: {_load(m['loadavg'])} / "
        f"{_load(r['loadavg_end'])}",
        f"- Input: {n:,} ops, {lines:,} lines, {r['bytes'] / 1024:,.0f} KiB "
        f"(seed {r['seed']}, `{r['file']}`)" if r["inproc"] else "- Input: the tiny file only",
        f"- Checks: {r['checks']}",
        "",
    ]
    if r["inproc"]:
        out += _big_sections(r)
    out += _startup_section(r)
    return "\n".join(out) + "\n"


def _big_sections(r: dict) -> list[str]:
    n, lines = r["ops"], r["lines"]
    out = [
        f"#### Palimpsest in-process, {n:,}-op file ({r['repeat']} repetitions)",
        "",
        "| phase | best | median | CPU median | ops/s (median) | ops/s (CPU) | lines/s (median) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for phase, s in r["inproc"].items():
        label = "**parse + verify + print**" if phase == "total" else phase
        out.append(f"| {label} | {_ms(s['best'])} | {_ms(s['median'])} | {_ms(s['cpu_median'])} | "
                   f"{_rate(n, s['median'])} | {_rate(n, s['cpu_median'])} | "
                   f"{_rate(lines, s['median'])} |")
    total = r["inproc"]["total"]
    out += ["", "(`total` is parse + verify + print in the default form; the generic print is "
                "timed on its own.)", "",
            f"Target parse + verify + print >= {TARGET_OPS_PER_S:,} ops/s: "
            f"{_rate(n, total['median'])} ops/s (median wall) -> "
            f"**{_mark(n / total['median'] >= TARGET_OPS_PER_S)}**; "
            f"{_rate(n, total['cpu_median'])} ops/s by CPU time", ""]

    big = r.get("whole")
    out += [f"#### Whole process on the {n:,}-op file ({r['runs']} runs each, interleaved)", ""]
    out += ["| tool | best | median | CPU median | ops/s (median) | lines/s (median) |",
            "|---|---:|---:|---:|---:|---:|"]
    for name, s in big.items():
        out.append(f"| {name} | {s['best']:.2f} s | {s['median']:.2f} s | "
                   f"{s['cpu_median']:.2f} s | {_rate(n, s['median'])} | "
                   f"{_rate(lines, s['median'])} |")
    out.append("")
    out += [f"- `{command}`" for command in r["commands"].values()]
    if "xdsl-opt" in big:
        ratio = big["xdsl-opt"]["median"] / big["palimpsest-opt"]["median"]
        cpu_ratio = big["xdsl-opt"]["cpu_median"] / big["palimpsest-opt"]["cpu_median"]
        out += ["", f"xdsl-opt / palimpsest-opt: **{ratio:.1f}x** on wall medians "
                    f"(target >= {TARGET_RATIO:.0f}x: **{_mark(ratio >= TARGET_RATIO)}**), "
                    f"{cpu_ratio:.1f}x on CPU medians"]
    else:
        out += ["", f"xDSL part skipped: {r['xdsl_skip']}"]
    out.append("")
    return out


def _startup_section(r: dict) -> list[str]:
    small = r["startup"]
    out = []
    out += [f"#### Start-up: {TINY_OPS}-op, 5-line file, whole process "
            f"({r['startup_runs']} runs each, interleaved, after 1 warm-up run)", "",
            "| tool | best | median | CPU median |", "|---|---:|---:|---:|"]
    for name, s in small.items():
        out.append(f"| {name} | {s['best']:.3f} s | {s['median']:.3f} s | "
                   f"{s['cpu_median']:.3f} s |")
    pal = small["palimpsest-opt"]
    verdict = (f"Target palimpsest-opt <= {TARGET_STARTUP_S} s: {pal['median']:.3f} s median "
               f"-> **{_mark(pal['median'] <= TARGET_STARTUP_S)}**")
    if "xdsl-opt" in small:
        verdict += (f"; xdsl-opt / palimpsest-opt: "
                    f"{small['xdsl-opt']['median'] / pal['median']:.2f}x")
    out += ["", verdict]
    for warning in r["warnings"]:
        out += ["", f"Note: {warning}"]
    return out


def _shown_path(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def _load(load) -> str:
    return "n/a" if load is None else " ".join(f"{x:.2f}" for x in load)


# ----------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, help="ops in the generated module (default 20,000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, help="in-process repetitions (default 3)")
    ap.add_argument("--runs", type=int, help="whole-process runs on the big file (default 3)")
    ap.add_argument("--startup-runs", type=int, help="runs on the tiny file (default 15)")
    ap.add_argument("--markdown", metavar="PATH", help="also write the report here")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: defaults become 2,000 ops, 1 repetition, 1 run, "
                         "3 start-up runs")
    ap.add_argument("--no-xdsl", action="store_true", help="skip xdsl-opt")
    ap.add_argument("--startup-only", action="store_true",
                    help="only the start-up measurement (the tiny file)")
    ap.add_argument("--profile", type=int, nargs="?", const=15, metavar="N",
                    help="also cProfile one parse and print the top N functions by tottime")
    ap.add_argument("--out-dir", default=str(HERE / "out"),
                    help="where the generated files go (default benchmarks/out, git-ignored)")
    ap.add_argument("--palimpsest-opt", metavar="PATH", help="palimpsest-opt to run")
    ap.add_argument("--xdsl-opt", metavar="PATH", help="xdsl-opt to run")
    args = ap.parse_args(argv)
    defaults = (2_000, 1, 1, 3) if args.quick else (20_000, 3, 3, 15)
    for name, default in zip(("ops", "repeat", "runs", "startup_runs"), defaults):
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.ops < 4 or min(args.repeat, args.runs, args.startup_runs) < 1:
        ap.error("--ops must be >= 4 and the run counts >= 1")

    from palimpsest.dialects import load_all

    load_all()
    machine = machine_info()
    try:
        out_dir = Path(args.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError:
        out_dir = Path(tempfile.mkdtemp(prefix="bench-parser-"))
    big_path = out_dir / f"bench-{args.ops}.mlir"
    tiny_path = out_dir / "bench-tiny.mlir"
    text = generate_module(args.ops, args.seed)
    big_path.write_text(text)
    tiny_path.write_text(TINY_FILE)
    lines = text.count("\n")

    pal_cmd = _find_tool("palimpsest-opt", args.palimpsest_opt)
    xdsl_cmd = None if args.no_xdsl else _find_tool("xdsl-opt", args.xdsl_opt)
    xdsl_skip = ("--no-xdsl given" if args.no_xdsl
                 else None if xdsl_cmd else "xdsl-opt not found (pip install xdsl)")
    if xdsl_skip:
        print(f"note: skipping the xDSL comparison: {xdsl_skip}", file=sys.stderr)

    def say(message):
        print(f"[bench_parser] {message}", file=sys.stderr, flush=True)

    warnings: list[str] = []
    try:
        files = [(tiny_path, TINY_FILE, TINY_OPS)]
        if not args.startup_only:
            say(f"generated {args.ops:,} ops, {lines:,} lines -> {big_path}")
            files.insert(0, (big_path, text, args.ops))
        for path, source, count in files:
            check_palimpsest(source, str(path), count)
        which = "both files" if len(files) == 2 else "the tiny file"
        checks = [f"Palimpsest parses, verifies and round-trips (pretty and generic) {which}"]
        tools = {"palimpsest-opt": pal_cmd}
        if xdsl_cmd:
            tools["xdsl-opt"] = xdsl_cmd
        for name, cmd in tools.items():
            for path, _, count in files:
                warning = check_tool_output(name, cmd, path,
                                            out_dir / f"check-{name}-{path.stem}.mlir", count,
                                            "--print-op-generic")
                if warning:
                    warnings.append(warning)
            checks.append(f"{name} exits 0 on {which}" + ("" if warnings else
                                                          " and prints every op"))
        opts = ["--allow-unregistered-dialect", "-o", os.devnull]
        inproc = whole = None
        if not args.startup_only:
            say("in-process Palimpsest ...")
            inproc = measure_palimpsest(text, str(big_path), args.repeat)
            say(f"whole process on the big file, {args.runs} run(s) each ...")
            whole = time_processes({name: cmd + [str(big_path)] + opts
                                    for name, cmd in tools.items()}, args.runs, warmup=0)
        say(f"start-up, {args.startup_runs} runs each ...")
        startup = time_processes({name: cmd + [str(tiny_path)] + opts
                                  for name, cmd in tools.items()}, args.startup_runs, warmup=1)
        profile = profile_parse(text, str(big_path), args.profile) if args.profile else None
    except BenchError as error:
        print(f"bench_parser: error: {error}", file=sys.stderr)
        return 1

    result = {
        "machine": machine, "ops": args.ops, "lines": lines, "bytes": len(text.encode()),
        "seed": args.seed, "file": _shown_path(big_path), "repeat": args.repeat, "runs": args.runs,
        "startup_runs": args.startup_runs, "inproc": inproc, "whole": whole,
        "startup": startup, "xdsl_skip": xdsl_skip, "warnings": warnings,
        "checks": "; ".join(checks),
        "commands": {name: " ".join([Path(cmd[0]).name] + cmd[1:] + ["FILE"] + opts)
                     for name, cmd in tools.items()},
        "loadavg_end": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }
    report = build_report(result)
    print(report)
    if profile:
        print(profile)
    if args.markdown:
        Path(args.markdown).write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
