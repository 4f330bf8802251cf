"""palimpsest-run: execute IR (or an ONNX model) on inputs and report the outputs."""

from __future__ import annotations

import argparse
import os
import sys

from palimpsest.tools.cli import (
    add_shape_arguments, console_entry, parse_assignments, parse_bounds, parse_shapes,
    read_text, run_main, specialize_module, UserError,
)


# --level -> the named pipeline (passes/pass_manager.py PIPELINES) that lowers to it
LEVELS = {"graph": None, "buffer": "to-buffers", "kernel": "to-kernels", "planned": "default"}


def build_argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="palimpsest-run",
        description="Run a function of a .pal module (or an .onnx model) and print its outputs.")
    parser.add_argument("model", help=".pal file, or an .onnx model (imported on the fly)")
    parser.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE.npy",
                        help="bind an input to a .npy file (repeatable)")
    parser.add_argument("--random-inputs", action="store_true",
                        help="fill unbound inputs with seeded random data")
    parser.add_argument("--seed", type=int, default=0, help="seed for --random-inputs")
    add_shape_arguments(
        parser, shape_help="shape for a random input with dynamic dims (repeatable)",
        bound_help="bound dynamic dims of an input, e.g. x=0:8,2:1280 (x's dim 0 <= 8, dim 2 "
                   "<= 1280; repeatable): bounded buffers are planned statically at their "
                   "bounds, in one plan for every shape within them")
    parser.add_argument("--output-dir", help="write each output as NAME.npy into this directory")
    parser.add_argument("--function", help="function to run (default: main, or the only one)")
    parser.add_argument("--level", choices=list(LEVELS), default="planned",
                        help="the level to execute at: graph (the numpy reference), buffer "
                             "(pipeline to-buffers), kernel (to-kernels), or planned (the default "
                             "pipeline: kernels with every static buffer in a planned pool; "
                             "default)")
    parser.add_argument("--backend", choices=["numpy", "opencl"], default="numpy",
                        help="numpy (default), or opencl: generated OpenCL C kernels over "
                             "the planned pools (--level kernel or planned)")
    parser.add_argument("--device", type=int, metavar="N",
                        help="with --backend opencl: the OpenCL device to run on (default 0)")
    parser.add_argument("--dump-kernels", metavar="DIR",
                        help="with --backend opencl: write the generated OpenCL C, one file "
                             "per program, into DIR")
    parser.add_argument("--poison", action="store_true",
                        help="poison buffers when their lifetime ends (NaN / 0x5A bytes)")
    parser.add_argument("--stats", action="store_true",
                        help="print allocations, bytes allocated, peak bytes and bytes copied")
    parser.add_argument("--repeat", type=int, metavar="N",
                        help="run N times (through one session at the planned level: plans "
                             "specialized to the input shapes are cached); --stats then "
                             "reports the last run, with the plan cache's hits and misses")
    parser.add_argument("--profile", action="store_true",
                        help="time every kernel op (a lowered level): print per op kind and "
                             "per op calls, total and mean time, share of the run and "
                             "GFLOP/s or GB/s (backends/profile.py)")
    parser.add_argument("--profile-json", metavar="FILE",
                        help="write the profile as a Chrome trace (chrome://tracing, "
                             "Perfetto): one event per kernel, with its buffers' pool offsets")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="threads for the BLAS (numpy's GEMMs) and PoCL's CPU device "
                             "(default: the physical cores, as onnxruntime; an "
                             "OPENBLAS_NUM_THREADS / OMP_NUM_THREADS already set is kept)")
    parser.add_argument("--allow-unregistered-dialect", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_argument_parser().parse_args(argv)
    from palimpsest.ir.diagnostics import SourceManager

    sources = SourceManager()
    return run_main("palimpsest-run", lambda: _run(args, sources), sources)


def _load_module(args, sources):
    from palimpsest.dialects import load_all
    from palimpsest.ir.parser import parse
    from palimpsest.ir.verifier import verify

    load_all()
    if args.model.endswith(".onnx"):
        from palimpsest.dialects.graph.from_onnx import import_onnx

        if not os.path.exists(args.model):
            raise UserError(f"cannot open '{args.model}': no such file")
        module = import_onnx(args.model)
    else:
        text, name = read_text(args.model)
        sources.add(name, text)
        module = parse(text, name, allow_unregistered=args.allow_unregistered_dialect)
    verify(module)
    return module


def _random_array(rng, name, type_, shape):
    import numpy as np

    from palimpsest.ir.attributes import numpy_dtype_name

    shape = type_.shape if shape is None else shape
    if shape is None or any(d is None for d in shape):
        raise UserError(f"input '{name}' has dynamic dims ({type_}); give its shape with "
                        f"--shape {name}=DIMS")
    dtype = np.dtype(numpy_dtype_name(type_.element_type))
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(dtype)
    return rng.integers(0, 10, shape).astype(dtype)


def _run_session(session, func, inputs):
    return session.run(inputs)


def _run(args, sources) -> int:
    import functools

    import numpy as np

    from palimpsest.backends.binding import (
        BindingError, find_function, input_names, shaped_input_type,
    )
    from palimpsest.backends.reference.executor import run

    files = parse_assignments(args.input, "--input")
    shapes = parse_shapes(args.shape)
    bounds = parse_bounds(args.bound)
    module = _load_module(args, sources)
    specialize_module(module, args.function, {}, bounds)
    if args.repeat is not None and args.repeat < 1:
        raise UserError(f"--repeat {args.repeat}: expected a count of at least 1")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads {args.threads}: expected a count of at least 1")
    from palimpsest.backends.threads import set_threads

    threads = set_threads(args.threads)  # before OpenCL opens: PoCL reads its count once
    stats = session = None
    if args.backend == "opencl":
        if args.level not in ("kernel", "planned"):
            raise UserError(f"--backend opencl runs kernel-level IR: use --level kernel or "
                            f"planned, not {args.level}")
        from palimpsest.backends.opencl.runtime import OpenCLUnavailable, device

        try:
            device(args.device)
        except OpenCLUnavailable as error:
            raise UserError(str(error)) from None
    elif args.device is not None or args.dump_kernels:
        raise UserError("--device and --dump-kernels need --backend opencl")
    profiler = None
    if args.profile or args.profile_json:
        if LEVELS[args.level] is None:
            raise UserError("--profile and --profile-json need a lowered level (buffer, "
                            "kernel or planned)")
        from palimpsest.backends.profile import Profiler

        profiler = Profiler()
    if args.level == "planned":
        pass  # through a Session (backends/numpy/session.py), made once the function is found
    elif LEVELS[args.level] is not None:
        run, stats = _lower(module, args.poison, LEVELS[args.level], args.backend,
                            args.device, profiler)
    elif args.stats or args.poison:
        raise UserError("--stats and --poison need a lowered level (buffer, kernel or planned)")
    try:
        func = find_function(module, args.function)
        if args.level == "planned":
            from palimpsest.backends.numpy.session import Session

            # with bounds: one plan at the bounds (the session's dynamic plan)
            session = Session(module, function=args.function, poison=args.poison,
                              backend=args.backend, device=args.device,
                              bounds=bounds, specialize=not bounds, threads=args.threads)
            session.profiler = profiler
            run = functools.partial(_run_session, session)
        names = input_names(func)
        for name in list(files) + list(shapes):
            if name not in names:
                raise BindingError(f"unknown input '{name}' (the function takes: "
                                   f"{', '.join(names) or 'no inputs'})")
        for name, shape in shapes.items():
            try:
                shaped_input_type(name, func.type.inputs[names.index(name)], shape)
            except BindingError as error:
                raise UserError(f"--shape {name}={'x'.join(map(str, shape))}: {error}") from None
        inputs = {}
        for name, path in files.items():
            try:
                inputs[name] = np.load(path, allow_pickle=False)
            except FileNotFoundError:
                raise UserError(f"--input {name}: cannot open '{path}'") from None
            except (ValueError, OSError) as error:
                raise UserError(f"--input {name}: '{path}' is not a .npy file ({error})") from None
        if args.random_inputs:
            rng = np.random.default_rng(args.seed)
            for name, type_ in zip(names, func.type.inputs):
                if name not in inputs:
                    inputs[name] = _random_array(rng, name, type_, shapes.get(name))
        if session is not None:
            for name, shape in shapes.items():
                session.set_input_shape(name, shape)
            session.prepare()
        for _ in range(args.repeat or 1):
            if stats is not None:
                stats.__init__()  # report the last run
            outputs = run(func, inputs)
    except BindingError as error:
        raise UserError(str(error)) from None
    executors = [session.last_plan.executor] if session is not None else [
        getattr(run, "executor", None)]
    if args.dump_kernels:
        from palimpsest.backends.opencl.executor import dump_kernels

        count = dump_kernels(executors, args.dump_kernels)
        print(f"wrote {count} OpenCL programs to {args.dump_kernels}", file=sys.stderr)
    if args.output_dir:
        os.makedirs(args.output_dir, exist_ok=True)
    for name, array in outputs.items():
        array = np.asarray(array)
        print(f"{name}: {array.dtype} {list(array.shape)}")
        if args.stats:
            print(f"  {_value_summary(array)}")
        if args.output_dir:
            safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
            np.save(os.path.join(args.output_dir, safe + ".npy"), array)
    if args.stats:
        print("\n".join(_memory_table(*_planned_modules(session, module), args.level)))
    if session is not None and args.stats:
        print(session.last_stats.run_stats.summary())
        if args.repeat is not None or shapes:
            print(session.last_stats.summary())
    elif stats is not None and args.stats:
        print(stats.summary())
    if args.stats and args.backend == "opencl":
        from palimpsest.backends.opencl.executor import device_summary

        run_stats = session.last_stats.run_stats if session is not None else stats
        print(device_summary(executors[0], run_stats))
    if profiler is not None:
        if args.profile:
            print(threads.summary())
            print(profiler.table())
        if args.profile_json:
            try:
                profiler.write_chrome_trace(args.profile_json)
            except OSError as error:
                raise UserError(f"--profile-json: cannot write '{args.profile_json}': "
                                f"{error.strerror or error}") from None
            print(f"wrote a Chrome trace of {profiler.calls} kernel calls to "
                  f"{args.profile_json}", file=sys.stderr)
    return 0


def _value_summary(array, count: int = 5) -> str:
    """min/max/mean and the first values of an output, as users check a run."""
    import numpy as np

    if array.size == 0:
        return "no values (empty)"
    try:
        values = array.astype(np.float64)
    except (TypeError, ValueError):
        return f"first {min(count, array.size)}: {array.reshape(-1)[:count].tolist()}"
    flat = values.reshape(-1)
    first = ", ".join(f"{v:.4g}" for v in flat[:count])
    more = ", ..." if flat.size > count else ""
    return (f"min {flat.min():.4g}, max {flat.max():.4g}, mean {flat.mean():.4g}; "
            f"first {min(count, flat.size)}: [{first}{more}]")


def _planned_modules(session, module) -> tuple:
    """The planned IR the last run used, and whether it is a model's segments: the
    session's plan, or for a model with control flow (backends/numpy/segments.py) each
    segment's last plan; without a session, the lowered `module`."""
    if session is None:
        return [module], False
    plan = session.last_plan
    blocks = getattr(plan.executor, "plan", None)
    if blocks is None or not hasattr(blocks, "segments"):
        return [plan.module], False
    return [s.session.last_plan.module for s in blocks.segments()
            if s.session is not None and s.session.last_plan is not None], True


def _memory_table(modules: list, segments: bool, level: str) -> list:
    """Per pool of the executed plan: planned bytes, the lower bound, one allocation per
    buffer (their sum) and the saving (passes.plan_export.pool_usage); a model's
    segments, each planned in an arena of its own, summed per pool."""
    from palimpsest.passes.plan_export import pool_usage

    usage = [u for m in modules for u in pool_usage(m)]
    if not usage:
        return [f"memory: no planned pools (--level {level} runs without a plan)"]
    rows: dict = {}
    for u in usage:
        key = f"@{u.pool}" if segments or len({x.function for x in usage}) == 1 else \
            f"@{u.function} @{u.pool}"
        total = rows.setdefault(key, [0, 0, 0, 0])
        for i, value in enumerate((u.planned, u.lower_bound, u.separate, u.buffers)):
            total[i] += value
    if len(rows) > 1:
        rows["total"] = [sum(r[i] for r in rows.values()) for i in range(4)]
    lines = [("pool", "planned", "lower bound", "one alloc per buffer", "saving")]
    for key, (planned, lower, separate, buffers) in rows.items():
        share = 100.0 * (separate - planned) / separate if separate else 0.0
        lines.append((key, str(planned), str(lower),
                      f"{separate} ({buffers} buffer{'' if buffers == 1 else 's'})",
                      f"{separate - planned} ({share:.1f}%)"))
    widths = [max(len(line[i]) for line in lines) for i in range(5)]
    table = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(line, widths))).rstrip()
             for line in lines]
    if segments:
        table.insert(0, f"memory: {len(modules)} planned segments around the control flow, "
                        f"each in arenas of its own; per pool, their sum")
    return table


def _lower(module, poison: bool, pipeline: str, backend: str = "numpy", device=None,
           profiler=None):
    """Lower `module` with the named pipeline (IR already at that level passes through
    unchanged); the backend's `run` (bound to a RunStats it fills) and that RunStats."""
    import functools

    from palimpsest.backends.numpy import RunStats
    from palimpsest.backends.numpy import run as run_numpy
    from palimpsest.passes.pass_manager import PassManager, parse_pipeline

    PassManager(parse_pipeline(pipeline)).run(module)
    stats = RunStats()
    if backend == "opencl":
        from palimpsest.backends.opencl.executor import OpenCLExecutor
        from palimpsest.backends.opencl.runtime import device as open_device

        executor = OpenCLExecutor(open_device(device), poison, stats)
        executor.profiler = profiler

        def run_opencl(func, inputs):
            executor.begin_run(stats)
            return executor.run(func, inputs)
        run_opencl.executor = executor
        return run_opencl, stats
    return functools.partial(run_numpy, poison=poison, stats=stats, profiler=profiler), stats


entry = console_entry(main)

if __name__ == "__main__":
    sys.exit(main())
