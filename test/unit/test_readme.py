"""The README's two commands stay true: CI runs exactly its test command, and its
main command works on the bundled example."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _readme_commands():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)\n```", text, re.S)
    main = next(b for b in blocks if "pip install" in b and "pytest" not in b)
    tests = next(b for b in blocks if "pytest" in b)
    return main.strip(), tests.strip()


def test_ci_runs_the_readme_test_command():
    _, tests = _readme_commands()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci, f"{tests!r} is not a line of .ci/run"


def test_readme_main_command_runs_on_the_bundled_example():
    main, _ = _readme_commands()
    install, _, job = main.partition("&&")
    assert "pip install" in install
    bin_dir = Path(sys.executable).parent
    result = subprocess.run(job.strip(), shell=True, cwd=ROOT, capture_output=True, text=True,
                            env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), "the main command printed nothing"
    _matches_shown_output(result.stdout)


def _numbers(line: str) -> list:
    return [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", line)]


def _matches_shown_output(printed: str) -> None:
    """The README shows what the main command prints (the ```text block after it): every
    line as printed, the output's values to 3 digits (BLAS may round the last one)."""
    text = (ROOT / "README.md").read_text()
    shown = re.search(r"--random-inputs --stats\n```\n.*?```text\n(.*?)\n```", text, re.S)
    assert shown, "the README does not show the main command's output"
    want, got = shown.group(1).splitlines(), printed.rstrip("\n").splitlines()
    assert len(want) == len(got), f"README shows {len(want)} lines, it prints:\n{printed}"
    for shown_line, line in zip(want, got):
        if shown_line.lstrip().startswith("min "):   # the output's values
            assert _numbers(shown_line) == pytest.approx(_numbers(line), rel=1e-3, abs=1e-3), \
                f"README shows {shown_line!r}, it prints {line!r}"
        else:
            assert shown_line == line, f"README shows {shown_line!r}, it prints {line!r}"
