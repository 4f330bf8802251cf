"""Every case of ONNX's node suite (all ops, all opsets; tensor-valued) either passes
through a Session at the default planned level, or is refused with a one-line diagnostic:
never a crash, never a wrong answer. The same runner as benchmarks/bench_conformance.py,
without onnxruntime; the pass count may only grow (PASS_FLOOR)."""

from __future__ import annotations

import functools

import pytest

from example_models import benchmark_module

pytest.importorskip("numpy")
pytest.importorskip("onnx")

bench = benchmark_module("bench_conformance")

# Cases that pass today (benchmarks/README.md records the run); raise it as coverage grows.
PASS_FLOOR = 1370


def _tensor_cases() -> list[str]:
    index = bench.cases.load_index()
    return sorted(n for n, e in index.items() if not e.get("non_tensor") and not e.get("error"))


CASES = _tensor_cases()


@functools.lru_cache(maxsize=None)
def outcome(name: str) -> tuple[str, str]:
    import numpy as np

    model, feeds, expected = bench._load(name)
    with np.errstate(all="ignore"):
        return bench.classify(bench.run_palimpsest, model, feeds, expected, bench._is_refusal)


@pytest.mark.parametrize("name", CASES)
def test_node_case_passes_or_is_refused_cleanly(name):
    status, detail = outcome(name)
    assert status in ("pass", "refused"), f"{name}: {status}: {detail}"
    assert "\n" not in detail


def test_pass_count_does_not_shrink():
    passed = sum(outcome(name)[0] == "pass" for name in CASES)
    assert passed >= PASS_FLOOR
