"""palimpsest-opt: parse IR, run a pass pipeline, print IR."""

from __future__ import annotations

import argparse
import sys
import time

from palimpsest.ir.diagnostics import DiagnosticError, SourceManager, split_source
from palimpsest.tools.cli import (
    add_shape_arguments, add_value_argument, branch_error_explainer, console_entry,
    inline_values, output_dir, parse_bounds, parse_shapes, parse_values, read_text, run_main,
    specialize_module, UserError, write_text,
)


# the on/off options, as mlir-opt spells them, in --help's order
_FLAGS = (
    ("--split-input-file", "process each '// -----' separated chunk on its own"),
    ("--verify-diagnostics", "check the diagnostics against 'expected-error {{...}}' comments"),
    ("--print-op-generic", "print every op in the generic form"),
    ("--print-debuginfo", "print each op's location, loc(...)"),
    ("--allow-unregistered-dialect", "accept ops, types and attributes of unknown dialects"),
    ("--print-ir-after-all", "print the IR to stderr after every pass"),
    ("--time-passes", "report the time spent in parsing, each pass, verifying and printing"),
    ("--no-verify", "do not verify the IR after parsing and after each pass"),
    ("--list-passes", "list the passes and exit"),
)


def build_argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="palimpsest-opt",
        description="Parse Palimpsest IR, run a pass pipeline over it, and print the result.")
    parser.add_argument("input", nargs="?", default="-", help="input .pal file, or - for stdin")
    parser.add_argument("-p", "--pass-pipeline", default="",
                        help="passes to run, e.g. 'cse,dce' or 'pass{option=value}'")
    parser.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    for flag, help_ in _FLAGS:
        parser.add_argument(flag, action="store_true", help=help_)
    add_shape_arguments(parser, shape_help=(
        "give input NAME of @main (or the only function) this shape, its '?' dims made "
        "static, before the passes run; infer-shapes carries it through (repeatable)"))
    add_value_argument(parser, help_=(
        "give input NAME of @main (or the only function) this value, a scalar or "
        "comma-separated elements typed by its element type (e.g. sr=16000), before the "
        "passes run: it becomes a constant, and the graph.ifs it and the shapes decide are "
        "inlined (repeatable)"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_argument_parser().parse_args(argv)
    sources = SourceManager()
    return run_main("palimpsest-opt", lambda: _run(args, sources), sources)


def _run(args, sources: SourceManager) -> int:
    from palimpsest.dialects import load_all
    from palimpsest.passes.pass_manager import (
        PIPELINES, PipelineError, parse_pipeline, registered_passes,
    )

    load_all()
    if args.list_passes:
        for name, cls in sorted(registered_passes().items()):
            print(f"  {name:28} {cls.summary}")
        print("pipelines:")
        for name, passes in PIPELINES.items():
            print(f"  {name:28} {passes}")
        return 0
    try:
        passes = parse_pipeline(args.pass_pipeline)
    except PipelineError as error:
        raise UserError(str(error)) from None
    args.shapes, args.bounds = parse_shapes(args.shape), parse_bounds(args.bound)
    args.values = parse_values(args.value)
    text, filename = read_text(args.input)
    chunks = split_source(text) if args.split_input_file else [(text, 0)]
    timings: list[tuple[str, float]] = []
    outputs, failed = [], False
    for chunk, offset in chunks:
        sources.add(filename, chunk, offset)
        if args.verify_diagnostics:
            failed |= _verify_chunk(args, passes, chunk, offset, filename, sources, outputs,
                                    timings)
        elif args.split_input_file:  # as mlir-opt: report each chunk's error, go on
            try:
                outputs.append(_process(args, passes, chunk, offset, filename, timings))
            except DiagnosticError as error:
                print(error.render(sources), file=sys.stderr)
                failed = True
        else:
            outputs.append(_process(args, passes, chunk, offset, filename, timings))
    if args.verify_diagnostics:
        if not failed and outputs:
            write_text(args.output, "// -----\n".join(o for o in outputs if o is not None))
    else:
        write_text(args.output, "// -----\n".join(outputs))
    if args.time_passes:
        _report_times(timings)
    return 1 if failed else 0


def _process(args, passes, chunk, offset, filename, timings) -> str:
    from palimpsest.ir.parser import parse
    from palimpsest.ir.printer import print_ir
    from palimpsest.ir.verifier import verify
    from palimpsest.passes.pass_manager import PassManager

    start = time.perf_counter()
    module = parse(chunk, filename, allow_unregistered=args.allow_unregistered_dialect,
                   line_offset=offset)
    timings.append(("(parse)", time.perf_counter() - start))
    if not args.no_verify:  # as written: a branch not taken may not fit the shapes given
        start = time.perf_counter()
        verify(module)
        timings.append(("(verifier)", time.perf_counter() - start))
    specialize_module(module, None, args.shapes, args.bounds)
    inline_values(module, None, args.values, required=False)
    # an error inside a branch that inputs' values decide names them and --value (not
    # under --verify-diagnostics: expected-error comments match the error as it is)
    explain = (lambda error: error) if args.no_verify or args.verify_diagnostics else \
        branch_error_explainer(module, None)
    after = None
    if args.print_ir_after_all:
        def after(pass_, op):
            sys.stderr.write(f"// -----// IR Dump After {pass_.spelling()} //----- //\n")
            sys.stderr.write(print_ir(op, generic=args.print_op_generic))
    manager = PassManager(passes, verify_each=not args.no_verify, after_pass=after)
    try:
        if not args.no_verify and (args.shapes or args.bounds or args.values):
            start = time.perf_counter()
            verify(module)  # the inputs retyped, the values inlined
            timings.append(("(verifier)", time.perf_counter() - start))
        manager.run(module)
    except DiagnosticError as error:
        raise explain(error) from None
    timings.extend(manager.timings)
    start = time.perf_counter()
    text = print_ir(module, generic=args.print_op_generic, print_locations=args.print_debuginfo,
                    resource_base=output_dir(args.output))
    timings.append(("(print)", time.perf_counter() - start))
    return text


def _verify_chunk(args, passes, chunk, offset, filename, sources, outputs, timings) -> bool:
    from palimpsest.ir.expectations import check_diagnostics, collect_expectations

    expectations = collect_expectations(chunk, offset)
    produced = []
    try:
        outputs.append(_process(args, passes, chunk, offset, filename, timings))
    except DiagnosticError as error:
        produced.append(error)
        outputs.append(None)
    problems = check_diagnostics(expectations, produced, filename)
    for problem in problems:
        print(problem, file=sys.stderr)
    return bool(problems)


def _report_times(timings) -> None:
    totals: dict[str, float] = {}
    for name, seconds in timings:
        totals[name] = totals.get(name, 0.0) + seconds
    total = sum(totals.values())
    rule = "===" + "-" * 73 + "==="
    lines = [rule, "Execution time report".center(79), rule,
             f"  Total Execution Time: {total:.4f} seconds", "",
             "  ----Wall Time----  ----Name----"]
    for name, seconds in totals.items():
        share = 100.0 * seconds / total if total else 0.0
        lines.append(f"  {seconds:8.4f} ({share:5.1f}%)  {name}")
    lines.append(f"  {total:8.4f} (100.0%)  Total")
    print("\n".join(lines), file=sys.stderr)


entry = console_entry(main)

if __name__ == "__main__":
    sys.exit(main())
