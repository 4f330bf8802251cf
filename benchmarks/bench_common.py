"""What the benchmark scripts share: pinning numpy's BLAS threads (before numpy is
imported, so this module imports no numpy), loading examples/onnx_models.py, and
printing a report (and writing it with --markdown PATH).

The scripts run as `python benchmarks/bench_*.py`, so this directory is on sys.path and
they `import bench_common`."""

from __future__ import annotations

import datetime
import importlib.util
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def limit_threads(argv) -> None:
    """Pin numpy's BLAS to `--numpy-threads N` of `argv` (default 1; 0 leaves it alone).
    Call it before numpy is imported: BLAS reads the variables once, at load."""
    threads = "1"
    for index, arg in enumerate(argv):
        if arg == "--numpy-threads" and index + 1 < len(argv):
            threads = argv[index + 1]
        elif arg.startswith("--numpy-threads="):
            threads = arg.split("=", 1)[1]
    if threads != "0":
        for name in THREAD_VARS:
            os.environ[name] = threads


def models_module(name: str = "palimpsest_onnx_models"):
    """examples/onnx_models.py as a module (the models built in code)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / "onnx_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def report_header(info: dict, quick: bool, threads_line: str,
                  load_label: str = "Load average (1/5/15 min)") -> list[str]:
    """A report's first lines: when, on which machine (bench_graph.machine_info's `info`),
    with which threads, under what load."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return [f"### Run of {now}{' (--quick)' if quick else ''}", "",
            f"- Machine: {info['cpu']}, {info['cpus']} usable CPUs, {info['platform']}",
            f"- Python {info['python']}; {info['versions']}",
            threads_line,
            f"- {load_label} at start / end: {info['load']} / {info.get('load_end', '?')}",
            ""]


def emit_report(report: str, markdown: str | None) -> None:
    """Print the report; with --markdown PATH, write it there too."""
    print(report)
    if markdown:
        Path(markdown).write_text(report)
