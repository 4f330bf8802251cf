"""ONNX's node test cases through the whole graph level: import → verify → infer-shapes
→ print/parse → reference executor, compared with ONNX's expected outputs. The same
skip policy as the kernel-level conformance (test_graph_reference.POLICY)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnx")

from palimpsest.dialects.graph.naming import ONNX_TO_GRAPH  # noqa: E402


def _load(name, file):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().with_name(file))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


nc = _load("palimpsest_test_onnx_node_cases", "onnx_node_cases.py")
POLICY = nc.load_policy()
CASES = nc.case_names(set(ONNX_TO_GRAPH))


@pytest.mark.parametrize("name", CASES)
def test_node_case_through_the_graph_level(name):
    case = nc.load_case(name)
    reason = nc.skip_reason(case, POLICY)
    if reason is not None:
        pytest.skip(reason)
    nc.check_case(case, POLICY, through_ir=True)
