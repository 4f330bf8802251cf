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


# ---------------------------------------------------------------- --value

VALUE_HELP = ("give input NAME of @main (or the only function) this value: a scalar or "
              "comma-separated elements (e.g. sr=16000, mask=1,0,1), typed by its element "
              "type; it becomes a constant, and the graph.ifs it decides go inline "
              "(repeatable)")


def add_value_argument(parser, help_: str = VALUE_HELP) -> None:
    """`--value NAME=V[,V...]`, as every tool spells it."""
    parser.add_argument("--value", action="append", default=[], metavar="NAME=V[,V...]",
                        help=help_)


def parse_values(items) -> dict:
    """`--value sr=16000 --value m=1,0` -> {"sr": ["16000"], "m": ["1", "0"]}."""
    return {name: [part.strip() for part in text.split(",")]
            for name, text in parse_assignments(items, "--value").items()}


def value_array(name: str, type_, texts: list):
    """Input `name`'s value (`--value NAME=...`'s elements) as an array of its argument
    type `type_`: UserError, one line naming the input, the type and what was given."""
    import numpy as np

    from palimpsest.ir.attributes import numpy_dtype_name
    from palimpsest.ir.types import TensorType

    given = f"--value {name}={','.join(texts)}: input '{name}'"
    if not isinstance(type_, TensorType) or not type_.has_static_shape:
        raise UserError(f"{given}: a value needs a tensor of static shape, not '{type_}' "
                        f"(give its shape with --shape)")
    try:
        dtype = np.dtype(numpy_dtype_name(type_.element_type))
    except ValueError:
        dtype = None
    if dtype is None or dtype.kind not in "biuf":
        raise UserError(f"{given}: values of {type_} are not supported (integer, float or "
                        f"i1 elements only)")
    count = type_.num_elements()
    if len(texts) != count:
        raise UserError(f"{given}: {type_} takes {count} value{'s' if count != 1 else ''}, "
                        f"got {len(texts)}")
    elements = []
    for text in texts:
        element = _element(text, dtype)
        if element is None:
            what = {"b": "true, false, 1 or 0", "f": "a number"}.get(dtype.kind, "an integer")
            raise UserError(f"{given}: expected {what} ({type_}), got '{text}'")
        if dtype.kind in "iu" and not np.iinfo(dtype).min <= element <= np.iinfo(dtype).max:
            raise UserError(f"{given}: {element} is out of the range of {type_} "
                            f"[{np.iinfo(dtype).min}, {np.iinfo(dtype).max}]")
        elements.append(element)
    return np.array(elements, dtype).reshape(type_.shape)


def _element(text: str, dtype):
    """`text` as a Python value of numpy `dtype`'s kind, else None."""
    try:
        if dtype.kind == "b":
            return {"true": True, "false": False, "1": True, "0": False}.get(text.lower())
        if dtype.kind == "f":
            return float(text)
        return int(text)
    except ValueError:
        return None


def inline_values(module, function: str | None, values: dict, required: bool) -> None:
    """Give inputs of `function` (default: main, or the only one) of `module` the parsed
    `--value`s, as constants, and inline the graph.ifs of its body that they and the
    shapes decide: passes/inline_branches.py's functions, as a Session calls them at run
    time with its guards' values. With `required` (a plan of one function), a graph.if
    left that an input's value decides is a one-line error naming the input(s) and the
    --value that gives them."""
    if not values and not required:
        return
    from palimpsest.backends.binding import BindingError, find_function, input_names
    from palimpsest.passes.inline_branches import branch_guards, inline_static_branches

    try:
        func = find_function(module, function)
    except BindingError as error:
        if not values:
            return  # no function to give values to: the tool reports it its own way
        raise UserError(f"--value: {error}") from None
    names = input_names(func)
    args = func.entry_block.args
    known = {}
    for name, texts in values.items():
        if name not in names:
            raise UserError(f"--value {name}={','.join(texts)}: unknown input '{name}' (the "
                            f"function takes: {', '.join(names) or 'no inputs'})")
        index = names.index(name)
        known[args[index]] = value_array(name, func.type.inputs[index], texts)
    if known or any(op.name == "graph.if" for op in func.entry_block.ops):
        inline_static_branches(func, known)
    if required:
        missing = branch_guards(func)
        if missing:
            raise UserError(guard_message(func, missing, names))
        left = next((op for op in func.entry_block.ops if op.name == "graph.if"), None)
        if left is not None:  # (bufferize would stop at an op of its branches, less clearly)
            dynamic = [f"'{n}' ({t})" for n, t in zip(names, func.type.inputs)
                       if getattr(t, "shape", ()) is None or None in getattr(t, "shape", ())]
            reason = (f"the shapes of input{'s' if len(dynamic) > 1 else ''} "
                      f"{', '.join(dynamic)} (give them with --shape) or on "
                      f"data" if dynamic else "data")
            raise left.error(f"is not decided before planning: its condition depends on "
                             f"{reason}; a plan is of one function, without control flow")


def branch_error_explainer(module, function: str | None):
    """A function that maps an error of the verifier or the passes (a DiagnosticError) at
    an op inside a graph.if of `function`'s body that inputs' values decide — a branch a
    run may not take, e.g. Silero VAD's 8 kHz branch at 16 kHz shapes — to an error at
    that If naming those inputs and the --value that gives them; others as they are.
    Made from verified IR before the passes run (they may leave it half rewritten)."""
    messages = _guarded_branch_messages(module, function) if any(
        op.name == "graph.if" for func in module.regions[0].block.ops
        if func.name == "func.func" and func.regions and func.regions[0].blocks
        for op in func.regions[0].blocks[0].ops) else {}

    def explain(error):
        return messages.get(getattr(error, "location", None), error)

    return explain


def _guarded_branch_messages(module, function: str | None) -> dict:
    """{location of an op inside a graph.if of `function`'s body that inputs' values
    decide: the error at that If naming them}."""
    from palimpsest.backends.binding import BindingError, find_function, input_names
    from palimpsest.ir.diagnostics import UnknownLoc
    from palimpsest.passes.inline_branches import branch_guards

    try:
        func = find_function(module, function)
    except BindingError:
        return {}
    messages, inside, names = {}, set(), None
    for op in func.entry_block.ops:
        guards = branch_guards(func, [op]) if op.name == "graph.if" else None
        if guards:
            names = names or input_names(func)
            message = DiagnosticError(guard_message(func, guards, names, op), op.loc)
            for inner in op.walk(include_self=False):
                inside.add(inner)
                if inner.loc is not None and not isinstance(inner.loc, UnknownLoc):
                    messages[inner.loc] = message
    if messages:  # a location an op elsewhere has too does not tell where the error is
        for op in func.walk(include_self=False):
            if op not in inside:
                messages.pop(op.loc, None)
    return messages


def guard_message(func, guards: list, names: list, if_op=None) -> str:
    """The error for `func`'s graph.ifs that inputs `guards` (indices) decide; with
    `if_op`, for a diagnostic at that If."""
    which = [f"'{names[i]}' ({func.type.inputs[i]})" for i in guards]
    inputs = (f"input {which[0]}" if len(which) == 1 else
              f"inputs {', '.join(which[:-1])} and {which[-1]}")
    flags = " ".join(f"--value {names[i]}=VALUE" for i in guards)
    if if_op is not None:
        return (f"'{if_op.name}' op is decided by the value of {inputs}: give "
                f"{'it' if len(which) == 1 else 'them'} with {flags}")
    give = f"give {'its value' if len(which) == 1 else 'their values'} with {flags}"
    verb = "decides" if len(which) == 1 else "decide"
    return f"{inputs} {verb} a graph.if of @{func.properties['sym_name'].value}: {give}"


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
