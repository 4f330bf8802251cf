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


# ---------------------------------------------------------------- --shape and --bound

SHAPE_HELP = ("give input NAME this shape, its '?' dims made static, before anything "
              "else runs (repeatable)")
BOUND_HELP = ("bound dynamic dims of an input, e.g. x=0:8,2:1280 (x's dim 0 <= 8, dim 2 "
              "<= 1280; repeatable): bounded buffers are planned statically at their bounds")


def add_shape_arguments(parser, shape_help: str = SHAPE_HELP,
                        bound_help: str = BOUND_HELP) -> None:
    """`--shape NAME=1x3x224x224` and `--bound NAME=DIM:BOUND,...`, as every tool spells them."""
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=1x3x224x224",
                        help=shape_help)
    parser.add_argument("--bound", action="append", default=[], metavar="NAME=DIM:BOUND,...",
                        help=bound_help)


def parse_assignments(items, what: str) -> dict:
    """`NAME=VALUE` options (repeatable) -> {NAME: VALUE}."""
    result = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name or not value:
            raise UserError(f"{what} '{item}' must look like NAME=VALUE")
        result[name] = value
    return result


def parse_shapes(items) -> dict:
    """`--shape x=1x3x224x224` (repeatable) -> {"x": (1, 3, 224, 224)}."""
    shapes = {}
    for item in items:
        name, eq, text = item.partition("=")
        if not eq or not name or not text:
            raise UserError(f"--shape '{item}' must look like NAME=DIMS (e.g. x=1x3x224x224)")
        dims = []
        for part in text.lower().split("x"):
            try:
                dims.append(int(part))
            except ValueError:
                raise UserError(f"--shape {item}: input '{name}': expected integer dims like "
                                f"1x3x224x224, got '{part}'") from None
            if dims[-1] < 0:
                raise UserError(f"--shape {item}: input '{name}': expected dims >= 0, got "
                                f"{dims[-1]}")
        shapes[name] = tuple(dims)
    return shapes


def parse_bounds(items) -> dict:
    """`--bound x=0:8,2:1280` (repeatable) -> {"x": {0: 8, 2: 1280}}."""
    bounds: dict = {}
    for item in items:
        name, eq, text = item.partition("=")
        dims = {}
        try:
            if not eq or not name:
                raise ValueError
            for pair in text.split(","):
                dim, colon, bound = pair.partition(":")
                if not colon:
                    raise ValueError
                dims[int(dim)] = int(bound)
        except ValueError:
            raise UserError(f"--bound '{item}' must look like NAME=DIM:BOUND[,DIM:BOUND...] "
                            f"(e.g. x=0:8,2:1280)") from None
        bounds.setdefault(name, {}).update(dims)
    return bounds


def specialize_module(module, function: str | None, shapes: dict, bounds: dict) -> None:
    """Give the inputs of `function` (default: main, or the only one) of `module` the
    parsed `--shape`s and `--bound`s (backends.binding.specialize_inputs)."""
    from palimpsest.backends.binding import BindingError, find_function, specialize_inputs

    if not shapes and not bounds:
        return
    try:
        func = find_function(module, function)
    except BindingError as error:
        flags = "/".join(f for f, given in (("--shape", shapes), ("--bound", bounds)) if given)
        raise UserError(f"{flags}: {error}") from None
    for name, dims in bounds.items():
        try:
            specialize_inputs(func, bounds={name: dims})
        except BindingError as error:
            raise UserError(f"--bound: {error}") from None
    for name, shape in shapes.items():
        try:
            specialize_inputs(func, shapes={name: shape})
        except BindingError as error:
            raise UserError(f"--shape {name}={'x'.join(map(str, shape))}: {error}") from None


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
