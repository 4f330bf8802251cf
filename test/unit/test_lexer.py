"""The fast path (our LALR loop + FastLexer) against Lark's own loop with its
contextual lexer, on every .pal file of the lit suite and on generated text: the same
IR, or the same error at the same place."""

from pathlib import Path

import pytest

from palimpsest.ir.compare import first_difference
from palimpsest.ir.diagnostics import DiagnosticError, split_source
from palimpsest.ir.parser import parse
from palimpsest.ir.printer import print_ir

ROOT = Path(__file__).resolve().parents[1] / "lit"
CHUNKS = [(path, index, chunk) for path in sorted(ROOT.rglob("*.pal")) if "Output" not in path.parts
          for index, (chunk, _) in enumerate(split_source(
              path.read_text(encoding="utf-8", errors="replace")))]


def _outcome(text, reference):
    try:
        return parse(text, "<x>", allow_unregistered=True, reference=reference)
    except DiagnosticError as error:
        location = error.location.describe() if error.location else None
        # the "expected ..." list may differ: Lark's contextual lexer reports the
        # terminals of its lexer state, our loop those of the parser state
        return (location, error.message.split(", expected")[0])


@pytest.mark.parametrize("path,index,chunk", CHUNKS,
                         ids=[f"{p.relative_to(ROOT)}#{i}" for p, i, _ in CHUNKS])
def test_fast_parser_agrees_with_lark_reference(path, index, chunk):
    fast = _outcome(chunk, reference=False)
    slow = _outcome(chunk, reference=True)
    if isinstance(slow, tuple) or isinstance(fast, tuple):
        assert fast == slow
    else:
        assert first_difference(fast, slow) is None
        assert print_ir(fast) == print_ir(slow)


def test_agreement_on_a_generated_module():
    lines = ['func.func @f(%a: tensor<4x?xf32>, %b: i32) -> tensor<4x?xf32> {']
    previous = "%a"
    for i in range(300):
        lines.append(f'  %v{i} = "test.pure"({previous}, %a) <{{axis = {i % 3} : i32}}> '
                     f'{{name = "n{i}", scale = 1.5 : f32, perm = [1, 0], t = tensor<2xindex>}} '
                     f': (tensor<4x?xf32>, tensor<4x?xf32>) -> tensor<4x?xf32> loc("g.pal":{i}:1)')
        previous = f"%v{i}"
    lines.append(f"  func.return {previous} : tensor<4x?xf32>\n}}")
    text = "\n".join(lines)
    fast, slow = parse(text), parse(text, reference=True)
    assert first_difference(fast, slow) is None
