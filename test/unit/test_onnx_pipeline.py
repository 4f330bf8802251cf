"""ONNX's node test cases through the whole graph level: import → verify → infer-shapes
→ print/parse → reference executor, compared with ONNX's expected outputs. The same
skip policy as the kernel-level conformance (test_graph_reference.POLICY)."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")

from palimpsest.dialects.graph.naming import ONNX_TO_GRAPH  # noqa: E402

import onnx_node_cases as nc  # noqa: E402  (test/unit, on sys.path: conftest.py)
POLICY = nc.load_policy()
CASES = nc.case_names(set(ONNX_TO_GRAPH))


@pytest.mark.parametrize("name", CASES)
def test_node_case_through_the_graph_level(name):
    case = nc.load_case(name)
    reason = nc.skip_reason(case, POLICY)
    if reason is not None:
        pytest.skip(reason)
    nc.check_case(case, POLICY, through_ir=True)
