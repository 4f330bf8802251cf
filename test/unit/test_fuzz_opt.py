"""Fuzz palimpsest-opt with seeded mutations of the lit files (fuzz_mutations.py): token
deletion, duplication and swaps, truncation, type swaps, hostile integers and dimensions,
renamed ops, moved lines. Each mutant goes through `palimpsest-opt` and
`palimpsest-opt -p default`. Oracle: exit 0, or exit 1 with `file:line:col: error:`;
never exit 3, an escaping exception or a hang; an accepted input's output round-trips
(printed → parsed → printed is the same text)."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import pytest

from fuzz_mutations import (
    case_rng, check_refusal, mutate_text, parametrize_case_ranges, run_tool,
)
from palimpsest.tools import opt

LIT_DIR = Path(__file__).resolve().parent.parent / "lit"
DEFAULT_CASES = 160
BATCH = 40  # cases per test, so a failure names a small range of seeds


@lru_cache(maxsize=None)
def seeds() -> list[tuple[str, str, bool]]:
    """(name, text, needs --allow-unregistered-dialect) of every lit chunk, comment
    lines removed (mutating RUN and CHECK lines tests nothing)."""
    found = []
    for path in sorted(LIT_DIR.rglob("*.pal")):
        if "Output" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        unregistered = "--allow-unregistered-dialect" in text
        for index, chunk in enumerate(re.split(r"^// -----.*$", text, flags=re.M)):
            kept = "\n".join(line for line in chunk.split("\n")
                             if not line.lstrip().startswith("//"))
            if kept.strip():
                found.append((f"{path.relative_to(LIT_DIR)}#{index}", kept, unregistered))
    return found


@lru_cache(maxsize=None)
def seeds_by_file() -> dict[str, list]:
    grouped: dict[str, list] = {}
    for seed in seeds():
        grouped.setdefault(seed[0].split("#")[0], []).append(seed)
    return grouped


def _run_case(index: int, workdir: Path) -> str:
    rng = case_rng("opt", index)
    by_file = seeds_by_file()  # a file, then one of its chunks: invalid.pal files have dozens
    name, seed, unregistered = rng.choice(by_file[rng.choice(sorted(by_file))])
    text, applied = mutate_text(seed, rng)
    path = workdir / f"case{index}.pal"
    path.write_text(text, encoding="utf-8")
    flags = ["--allow-unregistered-dialect"] if unregistered else []
    what = f"case {index} ({name}, {', '.join(applied)}; input {path})"
    location = re.escape(str(path)) + r":\d+:\d+: error: "
    outcomes = []
    for pipeline in ([], ["-p", "default"]):
        # printed beside the input: side-file paths are relative to the output's directory
        out = workdir / f"case{index}.out.pal"
        outcome = run_tool(opt.main, [str(path), *flags, *pipeline, "-o", str(out)])
        check_refusal(outcome, location, f"{what} {pipeline}")
        if outcome.code == 0:
            _check_round_trip(out, flags, f"{what} {pipeline}")
        outcomes.append(outcome.code)
    return "accepted" if outcomes[0] == 0 else "refused"


def _check_round_trip(printed: Path, flags, what: str) -> None:
    again = printed.with_suffix(".again.pal")
    outcome = run_tool(opt.main, [str(printed), *flags, "-o", str(again)])
    assert outcome.code == 0, f"{what}: the output does not parse back\n{outcome.stderr}"
    assert again.read_text(encoding="utf-8") == printed.read_text(encoding="utf-8"), (
        f"{what}: printing is not idempotent")


def pytest_generate_tests(metafunc):
    parametrize_case_ranges(metafunc, DEFAULT_CASES, BATCH)


def test_fuzz_opt(case_range, tmp_path):
    counts: dict[str, int] = {}
    for index in range(*case_range):
        kind = _run_case(index, tmp_path)
        counts[kind] = counts.get(kind, 0) + 1
    assert sum(counts.values()) == case_range[1] - case_range[0]


def test_seeds_cover_the_lit_suite():
    names = {name.split("#")[0] for name, _, _ in seeds()}
    assert len(names) >= 40, names


def test_default_pipeline_on_buffer_level_alloc_without_kind(tmp_path):
    """Issue 14: `-p default` on buffer-level IR whose alloc omits `kind` (it defaults to
    "activation") died in bufferize with KeyError 'kind'."""
    path = tmp_path / "buffers.pal"
    path.write_text("func.func @main(%x: buffer<4xf32>) -> buffer<4xf32> {\n"
                    "  %a = buffer.alloc : buffer<4xf32>\n"
                    "  buffer.copy %x, %a : buffer<4xf32>, buffer<4xf32>\n"
                    "  func.return %x : buffer<4xf32>\n"
                    "}\n", encoding="utf-8")
    for pipeline in ("bufferize", "default", "insert-deallocs", "lower-to-kernels"):
        outcome = run_tool(opt.main, [str(path), "-p", pipeline])
        assert outcome.code == 0, (pipeline, outcome.stderr)
