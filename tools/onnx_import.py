"""palimpsest-import: ONNX model → graph-level IR (`.pal`), weights in a side file."""

from __future__ import annotations

import argparse
import os
import sys

from palimpsest.tools.cli import (
    add_shape_arguments, console_entry, parse_bounds, parse_shapes, run_main,
    specialize_module, UserError, write_text,
)


def build_argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="palimpsest-import",
        description="Import an ONNX model as graph-level Palimpsest IR.")
    parser.add_argument("model", help="the .onnx file (external .onnx.data files are read too)")
    parser.add_argument("-o", "--output", default="-", help="output .pal file (default: stdout)")
    parser.add_argument("--weights", help="side file for large constants (default: OUTPUT.weights.bin)")
    parser.add_argument("--inline-limit", type=int, default=64, metavar="BYTES",
                        help="constants up to this size stay inline in the text (default 64)")
    parser.add_argument("--function", default="main", help="name of the imported function")
    parser.add_argument("--no-infer-shapes", action="store_true",
                        help="do not run infer-shapes after importing")
    parser.add_argument("--print-op-generic", action="store_true")
    add_shape_arguments(parser, shape_help=(
        "give input NAME (its ONNX name) this shape, its '?' dims made static, before "
        "infer-shapes runs (repeatable)"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_argument_parser().parse_args(argv)
    return run_main("palimpsest-import", lambda: _run(args))


def _run(args) -> int:
    from palimpsest.dialects.graph.from_onnx import import_onnx
    from palimpsest.ir.printer import print_ir
    from palimpsest.ir.resources import collect_blobs, externalize_resources
    from palimpsest.ir.verifier import verify
    from palimpsest.passes.pass_manager import PassManager, parse_pipeline

    shapes, bounds = parse_shapes(args.shape), parse_bounds(args.bound)
    if not os.path.exists(args.model):
        raise UserError(f"cannot open '{args.model}': no such file")
    module = import_onnx(args.model, function_name=args.function, inline_limit=args.inline_limit)
    specialize_module(module, args.function, shapes, bounds)
    verify(module)
    if not args.no_infer_shapes:
        PassManager(parse_pipeline("infer-shapes")).run(module)
    if any(b.data is not None for b in collect_blobs(module).values()):
        if args.output == "-" and not args.weights:
            raise UserError("the model has large weights: give -o model.pal (they go to "
                            "model.pal.weights.bin) or --weights FILE")
        weights = args.weights or args.output + ".weights.bin"
        externalize_resources(module, os.path.abspath(weights))
    base = os.getcwd() if args.output == "-" else os.path.dirname(os.path.abspath(args.output))
    write_text(args.output, print_ir(module, generic=args.print_op_generic, resource_base=base))
    return 0


entry = console_entry(main)

if __name__ == "__main__":
    sys.exit(main())
