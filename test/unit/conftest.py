import sys
from pathlib import Path

import pytest

from palimpsest.dialects import load_all

# the shared test helpers (onnx_node_cases, opencl_support) import by name
sys.path.insert(0, str(Path(__file__).resolve().parent))

load_all()


def pytest_addoption(parser):
    parser.addoption("--fuzz-cases", type=int, default=None, metavar="N",
                     help="cases per fuzzer (test_fuzz_*.py; PALIMPSEST_FUZZ_CASES too)")


@pytest.fixture
def parse_text():
    from palimpsest.ir.parser import parse

    def _parse(text, **kwargs):
        return parse(text, "<test>", **kwargs)

    return _parse


@pytest.fixture(scope="session")
def onnx_models():
    """examples/onnx_models.py, loaded once (example_models.py; `load()` where a module
    needs it at collection time)."""
    import example_models

    return example_models.load()
