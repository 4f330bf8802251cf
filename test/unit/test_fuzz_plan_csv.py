"""Fuzz palimpsest-plan's CSV input with seeded mutations of real allocation traces
(benchmarks/data: Glow's 79 models and MiniMalloc's example) and with hand cases:
missing, renamed, extra and shuffled columns, negative sizes, lower > upper, duplicate ids,
non-integers (NaN, 1.5, 0x10, 1_000, other scripts' digits), 2^70 and 5000-digit numbers,
empty files, a header alone, another delimiter, a byte-order mark, CRLF, stray quotes,
bytes that are not UTF-8, thousands of rows.

Each case runs `palimpsest-plan FILE -o OUT` as a user runs it (its `main`, streams
captured; fuzz_mutations.py) with a random algorithm, alignment and sometimes a capacity.
Oracle: exit 0 and OUT holds every input row, as the input spells its numbers, with an
offset that the independent checker (passes/planners/checker.py) accepts; or exit 1 and
one line, `palimpsest-plan: error: FILE:LINE: ...` with LINE a line of the file (a
capacity refusal names no line); never exit 3, a traceback, an escaping exception or a hang.
A few cases also go through standard input of a process of its own, under two locales.
"""

from __future__ import annotations

import csv
import io
import os
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from fuzz_mutations import case_rng, parametrize_case_ranges, run_tool
from palimpsest.passes.planners import ALGORITHMS, check_plan, read_csv_offsets
from palimpsest.tools import plan

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
DEFAULT_CASES = 300
BATCH = 50
MAX_ROWS = 40  # rows of a trace a case starts from: enough to plan, quick to plan

TWO_TO_THE_70 = str(2**70)
HOSTILE_CELLS = ("-1", "-4096", "0", "-0", "+4", " 7 ", "", " ", TWO_TO_THE_70,
                 "-" + TWO_TO_THE_70, "18446744073709551616", "9" * 5000, "nan", "NaN", "inf",
                 "1.5", "4.0", "1e3", "0x10", "1_000", "\u0663", "\uff14", "4 4", "four",
                 '"4"', "4\x00")


def pytest_generate_tests(metafunc):
    parametrize_case_ranges(metafunc, DEFAULT_CASES, BATCH)


@lru_cache(maxsize=None)
def seeds() -> dict[str, list[list[str]]]:
    """name -> rows (header first) of every trace in benchmarks/data."""
    paths = sorted((DATA / "glow-traces").glob("*.csv")) + [DATA / "input.12.csv"]
    found = {}
    for path in paths:
        if path.exists():
            with open(path, newline="", encoding="utf-8") as f:
                found[path.name] = [row for row in csv.reader(f) if row]
    return found


# ------------------------------------------------------------------ mutations


def _numeric_columns(header):
    return [i for i, col in enumerate(header) if col.strip().lower() != "id"] or [0]


def _set(row, k, value):
    """row[k] = value where the row has a column k (an earlier mutation may have cut it)."""
    if k < len(row):
        row[k] = value


class _RowMutations:
    """Each takes (header, rows, rng) and edits them in place; False: it did not apply."""

    @staticmethod
    def hostile_cell(header, rows, rng):
        if not rows:
            return False
        _set(rng.choice(rows), rng.choice(_numeric_columns(header)), rng.choice(HOSTILE_CELLS))

    @staticmethod
    def negative_size(header, rows, rng):
        if not rows or "size" not in header:
            return False
        _set(rng.choice(rows), header.index("size"), str(-rng.choice((1, 4, 64, 2**70))))

    @staticmethod
    def bad_lifetime(header, rows, rng):
        """lower > upper (the two swapped), or lower == upper (an empty lifetime)."""
        if not rows or "lower" not in header or "upper" not in header:
            return False
        row = rng.choice(rows)
        lo, hi = header.index("lower"), header.index("upper")
        if max(lo, hi) >= len(row):
            return False
        if rng.random() < 0.7:
            row[lo], row[hi] = row[hi], row[lo]
        else:
            row[hi] = row[lo]

    @staticmethod
    def duplicate_id(header, rows, rng):
        if len(rows) < 2:
            return False
        a, b = rng.sample(range(len(rows)), 2)
        _set(rows[b], 0, rows[a][0] if rows[a] else "")

    @staticmethod
    def empty_id(header, rows, rng):
        if not rows:
            return False
        _set(rng.choice(rows), 0, rng.choice(("", "  ")))

    @staticmethod
    def drop_column(header, rows, rng):
        k = rng.randrange(len(header))
        for row in [header, *rows]:
            if k < len(row):
                del row[k]

    @staticmethod
    def rename_column(header, rows, rng):
        k = rng.randrange(len(header))
        header[k] = rng.choice((" ID ", "Size", "start", "end", "lower ", "sizes", "", "offset",
                                header[(k + 1) % len(header)]))

    @staticmethod
    def shuffle_columns(header, rows, rng):
        order = list(range(len(header)))
        rng.shuffle(order)
        for row in [header, *rows]:
            row[:] = [row[k] for k in order if k < len(row)] + row[len(order):]

    @staticmethod
    def drop_cell(header, rows, rng):
        if not rows:
            return False
        row = rng.choice(rows)
        if not row:
            return False
        del row[rng.randrange(len(row))]

    @staticmethod
    def extra_cell(header, rows, rng):
        if not rows:
            return False
        rng.choice(rows).append(rng.choice(("1", "", "x")))

    @staticmethod
    def extra_column(header, rows, rng):
        header.append(rng.choice(("note", "alignment", "offset", "Alignment")))
        values = ("1", "2", "3", "64", "0", "-1", TWO_TO_THE_70, "", "x")
        for row in rows:
            row.append(rng.choice(values) if rng.random() < 0.3 else rng.choice(("1", "64")))

    @staticmethod
    def duplicate_row(header, rows, rng):
        if not rows:
            return False
        rows.insert(rng.randrange(len(rows) + 1), list(rng.choice(rows)))

    @staticmethod
    def drop_rows(header, rows, rng):
        del rows[rng.randrange(len(rows) + 1):]

    @staticmethod
    def huge_count(header, rows, rng):
        """Thousands of rows: the trace repeated after itself in time, with fresh ids."""
        if not rows or "lower" not in header or "upper" not in header:
            return False
        lo, hi = header.index("lower"), header.index("upper")
        span = max((int(row[hi]) for row in rows
                    if len(row) > hi and row[hi].isdigit() and len(row[hi]) < 30), default=1)
        copies = []
        while len(copies) < rng.choice((2000, 5000)):
            shift = span * (len(copies) // len(rows))
            for row in rows:
                row = list(row) or [""]
                row[0] = f"{row[0]}.{len(copies)}"
                for k in (lo, hi):
                    if len(row) > k and row[k].isdigit() and len(row[k]) < 30:
                        row[k] = str(int(row[k]) + shift)
                copies.append(row)
        rows[:] = copies


_ROW_MUTATIONS = [name for name in vars(_RowMutations) if not name.startswith("_")]


def _text_mutation(text: str, rng) -> tuple[bytes, str | None]:
    """Whole-file mutations: encoding, line ends, delimiters, truncation."""
    choice = rng.choice(("none",) * 8 + ("bom", "crlf", "delimiter", "truncate",
                         "blank_lines", "latin1", "nul", "quote", "whitespace"))
    if choice == "bom":
        text = "\ufeff" + text
    elif choice == "crlf":
        text = text.replace("\n", "\r\n")
    elif choice == "delimiter":
        text = text.replace(",", rng.choice((";", "\t", "|", ", ")))
    elif choice == "truncate" and text:
        text = text[:rng.randrange(len(text))]
    elif choice == "blank_lines":
        lines = text.split("\n")
        for _ in range(3):
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(("", " ", ",,,")))
        text = "\n".join(lines)
    elif choice == "latin1":  # a byte that is not UTF-8, as a Latin-1 editor writes 'é'
        data = text.encode("utf-8")
        at = rng.randrange(len(data) + 1)
        return data[:at] + b"\xe9" + data[at:], choice
    elif choice == "nul":
        text = text.replace(",", "\x00", 1)
    elif choice == "quote":
        at = rng.randrange(len(text) + 1)
        text = text[:at] + '"' + text[at:]
    elif choice == "whitespace":
        text = re.sub(r",", lambda m: rng.choice((",", " ,", ", ")), text)
    else:
        return text.encode("utf-8"), None
    return text.encode("utf-8"), choice


def mutate_trace(rows: list[list[str]], rng) -> tuple[bytes, list[str]]:
    header, body = list(rows[0]), [list(row) for row in rows[1:]]
    if len(body) > MAX_ROWS:
        start = rng.randrange(len(body) - MAX_ROWS + 1)
        body = body[start:start + MAX_ROWS]
    applied = []
    for _ in range(rng.choice((0, 1, 1, 1, 2, 3))):
        name = rng.choice(_ROW_MUTATIONS)
        if getattr(_RowMutations, name)(header, body, rng) is not False:
            applied.append(name)
        if not header:
            break
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([header, *body] if header else body)
    data, text_change = _text_mutation(out.getvalue(), rng)
    return data, applied + ([text_change] if text_change else [])


# ------------------------------------------------------------------ the oracle


def _expected_rows(data: bytes) -> list[tuple]:
    """The rows an accepted file must come back with, read by the CSV format's own rules
    (not the tool's reader): UTF-8 with an optional BOM, a header naming the columns, one
    buffer a non-blank row, integers of ASCII digits with an optional sign."""
    text = data.decode("utf-8").removeprefix("\ufeff")
    rows = [row for row in csv.reader(io.StringIO(text, newline=""))
            if any(cell.strip() for cell in row)]
    header = [cell.strip().lower() for cell in rows[0]]

    def number(row, col, default=None):
        if col not in header:
            return default
        cell = row[header.index(col)].strip()
        assert re.fullmatch(r"[+-]?[0-9]+", cell), f"accepted a non-integer {col}: {cell!r}"
        return int(cell)

    return [(row[header.index("id")].strip(), number(row, "lower"), number(row, "upper"),
             number(row, "size"), number(row, "alignment", 1)) for row in rows[1:]]


def run_case(data: bytes, argv: list[str], workdir: Path, name: str, what: str) -> str:
    path = workdir / f"{name}.csv"
    path.write_bytes(data)
    out = workdir / f"{name}.out.csv"
    out.unlink(missing_ok=True)
    outcome = run_tool(plan.main, [str(path), "-o", str(out), *argv])
    what = f"{what}; input {path}, options {argv}"
    assert outcome.code in (0, 1), f"{what}: exit {outcome.code}\n{outcome.stderr}"
    assert "Traceback" not in outcome.stderr, f"{what}: a traceback\n{outcome.stderr}"
    if outcome.code == 1:
        lines = outcome.stderr.splitlines()
        assert len(lines) == 1, f"{what}: not one error line\n{outcome.stderr}"
        located = re.match(re.escape(f"palimpsest-plan: error: {path}:") + r"(\d+): \S",
                           lines[0])
        if located:
            last_line = data.count(b"\n") + 1
            assert 1 <= int(located.group(1)) <= last_line, f"{what}: no such line\n{lines[0]}"
        else:
            assert "--capacity" in argv and re.match(
                r"palimpsest-plan: error: plan needs \d+ bytes, capacity is \d+", lines[0]), (
                f"{what}: an error line that names no line of the file\n{lines[0]}")
        return "refused"
    intervals, offsets = read_csv_offsets(out)
    got = [(iv.id, iv.start, iv.end, iv.size, iv.alignment) for iv in intervals]
    assert got == _expected_rows(data), f"{what}: the plan's rows are not the input's"
    capacity = int(argv[argv.index("--capacity") + 1]) if "--capacity" in argv else None
    alignment = int(argv[argv.index("--alignment") + 1]) if "--alignment" in argv else 1
    problems = check_plan(intervals, offsets, capacity=capacity, alignment=alignment)
    assert problems == [], f"{what}: an invalid plan: {problems[:3]}"
    return "accepted"


def _options(rng) -> list[str]:
    argv = ["--algorithm", rng.choice(ALGORITHMS), "--time-budget", "0.02"]
    if rng.random() < 0.3:
        argv += ["--alignment", str(rng.choice((1, 3, 64, 2**70)))]
    if rng.random() < 0.2:
        argv += ["--capacity", str(rng.choice((0, 1, 4096, 10**7, 2**70)))]
    if rng.random() < 0.2:
        argv.append("--check")
    return argv


def test_fuzz_plan_csv(case_range, tmp_path):
    counts = {"accepted": 0, "refused": 0}
    traces = seeds()
    for index in range(*case_range):
        rng = case_rng("plan-csv", index)
        name = rng.choice(sorted(traces))
        data, applied = mutate_trace(traces[name], rng)
        counts[run_case(data, _options(rng), tmp_path, f"case{index}",
                        f"case {index} ({name}, {', '.join(applied) or 'unchanged'})")] += 1
    assert sum(counts.values()) == case_range[1] - case_range[0]


def test_seeds_are_the_benchmark_traces():
    assert len(seeds()) == 80 and "input.12.csv" in seeds()


# ------------------------------------------------------------------ hand cases

H = "id,lower,upper,size\n"

# (name, file contents, None if accepted or (line, what the message says))
HAND_CASES = [
    ("empty file", b"", (1, "empty file")),
    ("blank lines only", b"\n \n\n", (1, "empty file")),
    ("header only", H.encode(), None),
    ("missing size column", b"id,lower,upper\na,0,1\n", (1, "missing column 'size'")),
    ("missing id column", b"lower,upper,size\n0,1,4\n", (1, "missing column 'id'")),
    ("column twice", b"id,lower,upper,size,size\na,0,1,4,4\n", (1, "appears twice")),
    ("negative size", (H + "a,0,1,-4\n").encode(), (2, "negative size -4")),
    ("negative lower", (H + "a,-2,1,4\n").encode(), (2, "negative lower -2")),
    ("lower above upper", (H + "a,0,1,4\nb,5,2,4\n").encode(), (3, "lower 5 must be below")),
    ("empty lifetime", (H + "a,3,3,4\n").encode(), (2, "lower 3 must be below upper 3")),
    ("duplicate id", (H + "a,0,1,4\nb,0,1,4\na,1,2,4\n").encode(),
     (4, "duplicate id 'a' (first on line 2)")),
    ("empty id", (H + " ,0,1,4\n").encode(), (2, "empty id")),
    ("float", (H + "a,0,1,4.5\n").encode(), (2, "size of 'a' is not an integer: '4.5'")),
    ("NaN", (H + "a,0,nan,4\n").encode(), (2, "upper of 'a' is not an integer: 'nan'")),
    ("hex", (H + "a,0,1,0x10\n").encode(), (2, "not an integer: '0x10'")),
    ("underscores", (H + "a,0,1,1_000\n").encode(), (2, "not an integer: '1_000'")),
    ("Arabic-Indic digit", (H + "a,0,1,\u0663\n").encode(), (2, "not an integer")),
    ("fullwidth digit", (H + "a,0,\uff14,4\n").encode(), (2, "not an integer")),
    ("empty cell", (H + "a,0,,4\n").encode(), (2, "upper of 'a' is not an integer: ''")),
    ("5000 digits", (H + "a,0,1," + "9" * 5000 + "\n").encode(), (2, "5000 digits")),
    ("2^70 size", (H + f"a,0,2,{2**70}\nb,1,3,{2**70}\n").encode(), None),
    ("2^70 lifetime", (H + f"a,0,{2**70},4\nb,{2**69},{2**70},4\n").encode(), None),
    ("2^70 alignment", f"id,lower,upper,size,alignment\na,0,2,4,1\nb,1,3,4,{2**70}\n".encode(),
     None),
    ("zero alignment", b"id,lower,upper,size,alignment\na,0,2,4,0\n", (2, "alignment 0")),
    ("too few fields", (H + "a,0,1\n").encode(), (2, "expected 4 fields")),
    ("too many fields", (H + "a,0,1,4,5\n").encode(), (2, "expected 4 fields")),
    ("semicolons", b"id;lower;upper;size\na;0;1;4\n", (1, "not comma-separated (it has ';')")),
    ("tabs", b"id\tlower\tupper\tsize\na\t0\t1\t4\n", (1, "not comma-separated (it has '\\t')")),
    ("BOM", ("\ufeff" + H + "a,0,1,4\n").encode(), None),
    ("CRLF", (H + "a,0,1,4\nb,0,1,4\n").replace("\n", "\r\n").encode(), None),
    ("spaces around cells", b" size , id ,upper,lower\n 4 , a ,3,0\n", None),
    ("plus sign", (H + "a,0,1,+4\n").encode(), None),
    ("not UTF-8", (H + "a,0,1,4\nb\xe9,0,1,4\n").encode("latin-1"),
     (3, "not UTF-8 text (byte 0xe9 at column 2)")),
    ("unclosed quote", (H + 'a,0,1,4\n"b,0,1,4\n').encode(), (3, "expected 4 fields")),
    ("id over the csv module's limit", (H + "a" * 200_000 + ",0,1,4\n").encode(),
     (2, "malformed CSV: field larger than field limit")),
    ("NUL byte", (H + "a,0,1,4\x00\n").encode(), (2, "not an integer")),
    ("huge count", (H + "".join(f"b{i},{i},{i + 3},{64 + i % 7}\n" for i in range(20_000))
                    ).encode(), None),
]


@pytest.mark.parametrize("name, data, expected", HAND_CASES, ids=[c[0] for c in HAND_CASES])
def test_hand_case(name, data, expected, tmp_path):
    result = run_case(data, ["--time-budget", "0.02"], tmp_path, "hand", name)
    if expected is None:
        assert result == "accepted"
        return
    assert result == "refused"
    line, message = expected
    outcome = run_tool(plan.main, [str(tmp_path / "hand.csv")])
    prefix = f"palimpsest-plan: error: {tmp_path / 'hand.csv'}:{line}: "
    assert outcome.stderr.startswith(prefix) and message in outcome.stderr, outcome.stderr


# ------------------------------------------------------------------ as a user runs it

STDIN_CASES = [
    (H.encode() + b"a,0,1,4\nb,3,1,4\n", 1, "palimpsest-plan: error: <stdin>:3: 'b': lower 3"),
    (H.encode() + b"a,0,1,4\n\xe9,0,1,4\n", 1,
     "palimpsest-plan: error: <stdin>:3: not UTF-8 text (byte 0xe9 at column 1)"),
    (b"\xef\xbb\xbf" + H.replace("\n", "\r\n").encode() + b"a,0,1,4\r\n", 0, "peak:"),
    (b"", 1, "palimpsest-plan: error: <stdin>:1: empty file"),
]


@pytest.mark.parametrize("locale", ["C.UTF-8", "C"])
def test_stdin_through_a_process(locale):
    """`palimpsest-plan -` in a process of its own, whatever the locale's encoding: stdin
    is read as bytes, so a byte that is not UTF-8 is a line's error, not exit 3."""
    env = {**os.environ, "LC_ALL": locale, "PYTHONIOENCODING": ""}
    for data, code, first in STDIN_CASES:
        proc = subprocess.run([sys.executable, "-m", "palimpsest.tools.plan", "-"], input=data,
                              capture_output=True, timeout=120, env=env)
        err = proc.stderr.decode("utf-8", "replace")
        assert proc.returncode == code, (data[:40], err)
        assert first in err and "Traceback" not in err, (data[:40], err)
        if code:
            assert err.count("\n") == 1 and proc.stdout == b"", err
