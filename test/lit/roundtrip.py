"""The lit suite's %roundtrip: check docs/design.md's round-trip invariant on one file.

    %roundtrip FILE [--allow-unregistered-dialect] [--split-input-file] [--print-op-generic]

For the file (or each `// -----` chunk): parse and verify it, print it (P1), then check
  1. P1 parses to the same IR (ir.compare) and prints as P1 again (printing is idempotent);
  2. the generic form of the same IR parses to the same IR and prints as P1.
On success, writes P1 (or the generic form with --print-op-generic) to stdout, chunks
separated by `// -----` as palimpsest-opt does, so a RUN line can pipe it into filecheck.
Diagnostics in the input are reported like palimpsest-opt's (exit 1); a round-trip
failure says which step differs and shows a diff (exit 1).
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys


class RoundTripError(Exception):
    pass


def _diff(expected: str, actual: str, labels) -> str:
    return "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                        *labels))


def round_trip(text: str, filename: str, line_offset: int, allow_unregistered: bool,
               generic_output: bool) -> str:
    from palimpsest.ir.compare import first_difference
    from palimpsest.ir.parser import parse
    from palimpsest.ir.printer import print_ir
    from palimpsest.ir.verifier import verify

    module = parse(text, filename, allow_unregistered=allow_unregistered,
                   line_offset=line_offset)
    verify(module)
    pretty = print_ir(module)
    generic = print_ir(module, generic=True)
    # Printed side-file paths are relative to the current directory (output to stdout).
    here = os.getcwd()
    for label, printed in (("pretty", pretty), ("generic", generic)):
        try:
            again = parse(printed, f"<{label} form>", allow_unregistered=allow_unregistered,
                          base_dir=here)
            verify(again)
        except Exception as error:  # noqa: BLE001 - reported with the text that failed
            raise RoundTripError(f"the {label} form does not parse back: {error}\n"
                                 f"--- {label} form ---\n{printed}") from None
        difference = first_difference(module, again)
        if difference is not None:
            raise RoundTripError(f"the {label} form parses to different IR: {difference}\n"
                                 f"--- {label} form ---\n{printed}")
        reprinted = print_ir(again)
        if reprinted != pretty:
            raise RoundTripError(
                f"printing the re-parsed {label} form gives different text:\n"
                + _diff(pretty, reprinted, ("first print", f"after parsing the {label} form")))
    return generic if generic_output else pretty


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="roundtrip", description=__doc__.split("\n")[0])
    parser.add_argument("input")
    parser.add_argument("--allow-unregistered-dialect", action="store_true")
    parser.add_argument("--split-input-file", action="store_true")
    parser.add_argument("--print-op-generic", action="store_true")
    args = parser.parse_args(argv)

    from palimpsest.dialects import load_all
    from palimpsest.ir.diagnostics import SourceManager, split_source
    from palimpsest.tools.cli import read_text, run_main

    load_all()
    sources = SourceManager()

    def body() -> int:
        text, filename = read_text(args.input)
        chunks = split_source(text) if args.split_input_file else [(text, 0)]
        outputs = []
        for chunk, offset in chunks:
            sources.add(filename, chunk, offset)
            try:
                outputs.append(round_trip(chunk, filename, offset,
                                          args.allow_unregistered_dialect,
                                          args.print_op_generic))
            except RoundTripError as error:
                where = f"{filename}:{offset + 1}" if args.split_input_file else filename
                print(f"{where}: error: round trip failed: {error}", file=sys.stderr)
                return 1
        sys.stdout.write("// -----\n".join(outputs))
        return 0

    return run_main("roundtrip", body, sources)


if __name__ == "__main__":
    sys.exit(main())
