"""What every palimpsest command shares: reading input, reporting errors without a
traceback, and the exit codes (0 ok, 1 user error, 2 usage, 3 internal error)."""

from __future__ import annotations

import gc
import os
import sys
import traceback

from palimpsest.ir.diagnostics import DiagnosticError, SourceManager


def read_text(path: str) -> tuple[str, str]:
    """(text, display name) of a file or '-' (stdin)."""
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read(), path
    except FileNotFoundError:
        raise UserError(f"cannot open '{path}': no such file") from None
    except IsADirectoryError:
        raise UserError(f"cannot open '{path}': it is a directory") from None
    except UnicodeDecodeError as error:
        raise UserError(f"cannot read '{path}': not UTF-8 text ({error.reason} at byte "
                        f"{error.start})") from None
    except OSError as error:
        raise UserError(f"cannot open '{path}': {error.strerror}") from None


def write_text(path: str, text: str) -> None:
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as error:
        raise UserError(f"cannot write '{path}': {error.strerror}") from None


def output_dir(path: str) -> str:
    return os.getcwd() if path == "-" else os.path.dirname(os.path.abspath(path))


def console_entry(main):
    """The console-script entry for `main`: run it, flush, and leave without tearing
    down the interpreter — freeing a large IR object by object took longer than
    printing it (benchmarks/README.md). Cyclic GC stays off: a tool run is short and
    its garbage is not worth the collector's passes over the IR."""

    def entry() -> None:
        gc.disable()
        try:
            code = main()
        except SystemExit as exit_:  # argparse errors and --help
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)
            if not isinstance(exit_.code, int) and exit_.code is not None:
                print(exit_.code, file=sys.stderr)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BrokenPipeError:
            code = code or 1
        os._exit(code or 0)

    return entry


class UserError(Exception):
    """A one-line error about the command line or the environment."""


def run_main(tool: str, body, sources: SourceManager | None = None) -> int:
    """Run `body()` and turn every failure into a one-line report and an exit code."""
    try:
        return body() or 0
    except DiagnosticError as error:
        print(error.render(sources), file=sys.stderr)
        return 1
    except UserError as error:
        print(f"{tool}: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{tool}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
    except Exception as error:  # a bug in palimpsest, not in the user's input
        if os.environ.get("PALIMPSEST_DEBUG"):
            traceback.print_exc()
        print(f"{tool}: internal error: {type(error).__name__}: {error} (set "
              f"PALIMPSEST_DEBUG=1 for a traceback, and please report it)", file=sys.stderr)
        return 3
