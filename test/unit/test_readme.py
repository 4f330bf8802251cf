"""The README's two commands stay true: CI runs exactly its test command, and its
main command works on the bundled example."""

import re
import subprocess
import sys
from pathlib import Path

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
