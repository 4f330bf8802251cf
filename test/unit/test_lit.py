"""Run the lit + FileCheck suite (test/lit) as one pytest test, so `python -m pytest`
runs everything. On failure the assertion message is lit's report: the failing tests
with the commands they ran and their output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

LIT_DIR = Path(__file__).resolve().parent.parent / "lit"

# `python -m lit` does not work with every lit release (lit 23 has no __main__), so call
# lit's entry point through the interpreter running pytest: palimpsest is installed in
# it, and lit.cfg.py puts its bin directory (palimpsest-opt, filecheck) on PATH.
_RUN_LIT = "import sys; from lit.main import main; sys.argv[0] = 'lit'; main()"


def test_lit_suite():
    pytest.importorskip("lit")
    pytest.importorskip("filecheck")
    env = dict(os.environ)
    env.pop("LIT_OPTS", None)  # a caller's lit options must not change what runs
    result = subprocess.run(
        [sys.executable, "-c", _RUN_LIT, "-v", str(LIT_DIR)],
        capture_output=True, text=True, env=env, cwd=LIT_DIR, timeout=900)
    report = result.stdout + result.stderr
    assert result.returncode == 0, f"lit suite failed (exit {result.returncode}):\n{report}"
    assert "Total Discovered Tests" in report, f"lit found no tests:\n{report}"
