"""What the OpenCL tests share: the skip marker (no pyopencl or no platform: the tests
say why and skip) and a comparison of the OpenCL backend with the numpy backend."""

from __future__ import annotations

import os

import numpy as np
import pytest

from palimpsest.backends.opencl.runtime import availability

UNAVAILABLE = availability()
if UNAVAILABLE is not None and os.environ.get("PALIMPSEST_REQUIRE_OPENCL"):
    # CI installs PoCL (.ci/run): a missing device there is a failure, not a skip
    raise RuntimeError(f"PALIMPSEST_REQUIRE_OPENCL is set but: {UNAVAILABLE}")
requires_opencl = pytest.mark.skipif(UNAVAILABLE is not None,
                                     reason=f"OpenCL tests need a device: {UNAVAILABLE}")


def compare_backends(module_or_path, inputs: dict, *, rtol: float = 1e-4, atol: float = 1e-5,
                     host_ops_allowed=(), **session_options):
    """Run `module_or_path` (graph-level IR text, module or path) through a numpy and an
    OpenCL session; assert the results agree and that only `host_ops_allowed` ran on
    the host. Returns (numpy results, OpenCL results, the OpenCL run's stats)."""
    from palimpsest.backends.numpy.session import Session

    if isinstance(module_or_path, str) and not module_or_path.endswith((".pal", ".onnx")):
        from palimpsest.dialects import load_all
        from palimpsest.ir.parser import parse

        load_all()
        module_or_path = parse(module_or_path, "<test>")
    expected = Session(module_or_path, **session_options).run(inputs)
    session = Session(module_or_path, backend="opencl", **session_options)
    actual = session.run(inputs)
    assert set(actual) == set(expected)
    for name in expected:
        want, got = np.asarray(expected[name]), np.asarray(actual[name])
        assert got.dtype == want.dtype and got.shape == want.shape, name
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True,
                                       err_msg=name)
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)
    stats = session.last_stats.run_stats
    unexpected = {op: n for op, n in stats.host_ops.items() if op not in host_ops_allowed}
    assert not unexpected, f"ran on the host: {unexpected}"
    return expected, actual, stats


def record_calls(monkeypatch, module, name: str) -> list:
    """Wrap `module.name` (a generator's form) so that each call's arguments are appended
    to the list returned: which form a launch took."""
    calls = []
    original = getattr(module, name)

    def recorded(*args):
        calls.append(args)
        return original(*args)

    monkeypatch.setattr(module, name, recorded)
    return calls
