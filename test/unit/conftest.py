import pytest

from palimpsest.dialects import load_all

load_all()


@pytest.fixture
def parse_text():
    from palimpsest.ir.parser import parse

    def _parse(text, **kwargs):
        return parse(text, "<test>", **kwargs)

    return _parse
