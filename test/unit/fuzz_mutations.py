"""Seeded mutation fuzzing shared by test_fuzz_opt.py, test_fuzz_import.py and
test_fuzz_plan_csv.py.

Each fuzzer takes valid seeds (the lit files, ONNX models, interval CSVs), applies a few
seeded mutations, runs a tool's `main()` in this process and checks the tool's contract
(docs/design.md, invariant 2): the input is accepted, or refused with a one-line error and
exit 1 — never exit 3 (an internal error), never an exception escaping `main()`, never a
hang. A case is reproduced from its seed alone: `case_rng(kind, i)` is the same on every
machine.

How many cases: `--fuzz-cases N` (test/unit/conftest.py) or `PALIMPSEST_FUZZ_CASES=N`;
by default each fuzzer runs its DEFAULT count, a few hundred cases in all.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import re
import signal
from dataclasses import dataclass

# A hang guard, not a timing check: a case that needs this long is stuck in a loop.
HANG_SECONDS = 120


class Hang(BaseException):
    """Raised by the hang guard; a BaseException so that no `except Exception` in the
    tool under test turns it into an ordinary error report."""


@contextlib.contextmanager
def hang_guard(seconds: int = HANG_SECONDS):
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def _alarm(signum, frame):
        raise Hang(f"no result after {seconds} s")

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str


def run_tool(main, argv: list[str]) -> Outcome:
    """Run a tool's `main(argv)` here, capturing its output. An exception other than
    SystemExit (argparse) escapes: that is a failure of the case."""
    out, err = io.StringIO(), io.StringIO()
    with hang_guard(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 2
    return Outcome(code or 0, out.getvalue(), err.getvalue())


def case_count(config, default: int) -> int:
    """The number of cases a fuzzer runs: --fuzz-cases, PALIMPSEST_FUZZ_CASES, or default."""
    option = config.getoption("--fuzz-cases", default=None)
    if option is not None:
        return option
    env = os.environ.get("PALIMPSEST_FUZZ_CASES")
    return int(env) if env else default


def parametrize_case_ranges(metafunc, default: int, batch: int) -> None:
    """A fuzzer's `pytest_generate_tests`: its `case_range` argument takes
    `(start, stop)` batches of `batch` cases, `case_count` in all, so that a failure
    names a small range of seeds."""
    if "case_range" in metafunc.fixturenames:
        total = case_count(metafunc.config, default)
        metafunc.parametrize("case_range", [(start, min(start + batch, total))
                                            for start in range(0, total, batch)],
                             ids=lambda r: f"{r[0]}-{r[1]}")


def case_rng(kind: str, index: int) -> random.Random:
    return random.Random(f"palimpsest-fuzz/{kind}/{index}")


def check_refusal(outcome: Outcome, pattern: str, what: str) -> None:
    """Exit 1 with exactly one error line (then, for IR, the source line and a caret)
    whose first line matches `pattern`; anything else is a failure naming `what`."""
    assert outcome.code in (0, 1), (
        f"{what}: exit {outcome.code}\n--- stderr ---\n{outcome.stderr}")
    if outcome.code == 1:
        first = outcome.stderr.splitlines()[0] if outcome.stderr else ""
        assert re.match(pattern, first), (
            f"{what}: exit 1 without a proper error line\n--- stderr ---\n{outcome.stderr}")
        assert "Traceback" not in outcome.stderr, f"{what}: a traceback\n{outcome.stderr}"


# ---------------------------------------------------------------- text mutations (IR)

_TOKEN = re.compile(r"""
    "(?:[^"\\\n]|\\.)*"            # string
  | [%@^#!][\w.$#-]*               # SSA value, symbol, block, alias, dialect type
  | -?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?x?  # number (and a dimension's 'x')
  | [A-Za-z_][\w.$]*               # keyword, type, op name
  | ->|::|\S                       # punctuation
""", re.VERBOSE)

TYPE_WORDS = ("i1", "i8", "i32", "i64", "ui8", "si8", "f16", "bf16", "f32", "f64", "index",
              "none", "tensor", "buffer", "memref", "vector", "complex", "tuple")
HOSTILE_INTEGERS = ("0", "-1", "-7", "2147483648", "4294967296", "9223372036854775807",
                    "9223372036854775808", "-9223372036854775809", "18446744073709551616",
                    "1180591620717411303424", "99999999999999999999999999999")
OP_NAMES = ("graph.add", "graph.conv", "graph.reshape", "graph.constant", "buffer.alloc",
            "buffer.compute", "buffer.view", "buffer.dealloc", "buffer.reshape",
            "buffer.copy", "kernel.matmul", "kernel.conv2d", "memory.pool", "memory.arena",
            "func.return", "func.call", "func.func", "builtin.module", "graph.yield",
            "graph.if", "graph.loop", "test.op", "nosuch.op")


def tokens(text: str) -> list[tuple[int, int]]:
    """(start, end) of every token of `text`."""
    return [m.span() for m in _TOKEN.finditer(text)]


def _splice(text, span, new):
    return text[:span[0]] + new + text[span[1]:]


def _replace_one(text, rng, pattern, replacements, group=0):
    """`text` with one random match of `pattern` (its `group`) replaced by one of
    `replacements`; None when nothing matches."""
    found = list(re.finditer(pattern, text))
    if not found:
        return None
    return _splice(text, rng.choice(found).span(group), rng.choice(replacements))


def _replace_every(text, rng, before, token, after, replacements):
    """`text` with every occurrence of one word that matches `token` (between the
    lookarounds `before` and `after`) replaced by one of `replacements`; None when no
    word matches."""
    found = sorted(set(re.findall(before + "(" + token + ")" + after, text)))
    if not found:
        return None
    old = rng.choice(found)
    return re.sub(before + re.escape(old) + after, rng.choice(replacements), text)


def _pick(rng, spans, text, predicate):
    found = [s for s in spans if predicate(text[s[0]:s[1]])]
    return rng.choice(found) if found else None


def mutate_text(text: str, rng: random.Random) -> tuple[str, list[str]]:
    """`text` with one to three seeded mutations, and their names."""
    applied = []
    # half the cases only retype, redimension or rewire: they parse more often and so
    # reach the verifiers and the passes
    choices = _GENTLE if rng.random() < 0.5 else _TEXT_MUTATIONS
    for _ in range(rng.choice((1, 1, 2, 3))):
        spans = tokens(text)
        if not spans:
            break
        name = rng.choice(choices)
        mutated = getattr(_TextMutations, name)(text, spans, rng)
        if mutated is not None:
            text = mutated
            applied.append(name)
    return text, applied


class _TextMutations:
    @staticmethod
    def delete(text, spans, rng):
        return _splice(text, rng.choice(spans), "")

    @staticmethod
    def duplicate(text, spans, rng):
        span = rng.choice(spans)
        word = text[span[0]:span[1]]
        return _splice(text, span, word + " " + word)

    @staticmethod
    def swap(text, spans, rng):
        i = rng.randrange(len(spans))
        j = min(len(spans) - 1, i + 1) if rng.random() < 0.6 else rng.randrange(len(spans))
        (a, b), (c, d) = sorted((spans[i], spans[j]))
        if b > c or (a, b) == (c, d):
            return None
        return text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]

    @staticmethod
    def truncate(text, spans, rng):
        return text[:rng.randrange(len(text))]

    @staticmethod
    def type_swap(text, spans, rng):
        return _replace_one(text, rng, r"(?<![\w.%@])(" + "|".join(TYPE_WORDS) + r")(?![\w.])",
                            TYPE_WORDS, group=1)

    @staticmethod
    def integer(text, spans, rng):
        return _replace_one(text, rng, r"(?<![\w.%#@])\d+(?![\w.])", HOSTILE_INTEGERS)

    @staticmethod
    def dimension(text, spans, rng):
        return _replace_one(text, rng, r"(?<=[<x])(\d+|\?)(?=x)",
                            ("0", "?", "-1", "1", "65536", "4294967296"))

    @staticmethod
    def rename_op(text, spans, rng):
        span = _pick(rng, spans, text, lambda w: re.fullmatch(r"[a-z_]+\.[a-z_0-9]+", w))
        if span is None:
            return None
        word = text[span[0]:span[1]]
        new = rng.choice(OP_NAMES) if rng.random() < 0.7 else word + "x"
        return _splice(text, span, new)

    @staticmethod
    def move_line(text, spans, rng):
        lines = text.split("\n")
        if len(lines) < 3:
            return None
        line = lines.pop(rng.randrange(len(lines)))
        lines.insert(rng.randrange(len(lines)), line)
        return "\n".join(lines)

    @staticmethod
    def duplicate_line(text, spans, rng):
        lines = text.split("\n")
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
        return "\n".join(lines)

    # Gentler ones, so that more mutants parse and reach the verifiers and passes:

    @staticmethod
    def retype_all(text, spans, rng):
        """Every occurrence of one element type becomes another."""
        return _replace_every(text, rng, r"(?<=[x<(, :])", r"f16|f32|f64|i1|i8|i32|i64|index",
                              r"\b", ("f16", "f32", "f64", "i1", "i8", "i32", "i64", "index",
                                      "bf16"))

    @staticmethod
    def redim_all(text, spans, rng):
        """Every occurrence of one static dimension becomes another."""
        return _replace_every(text, rng, r"(?<=[<x])", r"\d+", r"(?=x)",
                              ("0", "1", "2", "3", "?", "7", "64"))

    @staticmethod
    def swap_value(text, spans, rng):
        """One use of an SSA value names another value of the file."""
        names = sorted(set(re.findall(r"%[\w.$]+(?:#\d+)?", text)))
        uses = list(re.finditer(r"(?<=[(, ])%[\w.$]+(?:#\d+)?", text))
        if len(names) < 2 or not uses:
            return None
        return _splice(text, rng.choice(uses).span(), rng.choice(names))

    @staticmethod
    def small_integer(text, spans, rng):
        return _replace_one(text, rng, r"(?<=[=\[, ])-?\d+(?= *[:,\]}])",
                            ("-2", "-1", "0", "1", "2", "3", "5"))

    @staticmethod
    def drop_line(text, spans, rng):
        lines = text.split("\n")
        lines.pop(rng.randrange(len(lines)))
        return "\n".join(lines)


_TEXT_MUTATIONS = [name for name in vars(_TextMutations) if not name.startswith("_")]
_GENTLE = ["retype_all", "redim_all", "swap_value", "small_integer", "drop_line", "integer",
           "dimension"]
