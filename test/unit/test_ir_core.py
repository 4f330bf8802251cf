"""Unit tests of the core IR API: types, attributes, use lists, blocks, builder,
verifier, printer naming, resources, diagnostics."""

import math

import pytest

from palimpsest.dialects.builtin import ModuleOp
from palimpsest.dialects.func import CallOp, FuncOp, ReturnOp
from palimpsest.dialects.test import AnyOp, EffectOp, PureOp
from palimpsest.ir import attributes as A
from palimpsest.ir import types as T
from palimpsest.ir.builder import Builder
from palimpsest.ir.compare import first_difference, structurally_equal
from palimpsest.ir.core import Block, Region
from palimpsest.ir.diagnostics import DiagnosticError, SourceManager, split_source
from palimpsest.ir.parser import parse, parse_type
from palimpsest.ir.printer import print_ir
from palimpsest.ir.verifier import verify


# -- types -------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "i1", "i32", "si8", "ui16", "f16", "bf16", "f32", "f64", "index", "none",
    "tensor<1x?x64xf32>", "tensor<f32>", "tensor<*xi8>", "tensor<0xf32>", "memref<4x?xf32>",
    "vector<4x4xf32>", "complex<f64>", "tuple<i32, tensor<2xf32>>", "(i32, f32) -> i64",
    "() -> ()", "(i32) -> ((i32) -> i32)", "!foo.bar<\"x\", 3>",
])
def test_type_text_round_trips(text):
    assert str(parse_type(text)) == text


def test_tensor_type_properties():
    t = parse_type("tensor<2x?x3xf32>")
    assert t.shape == (2, None, 3) and t.element_type == T.f32
    assert t.rank == 3 and not t.has_static_shape and t.num_elements() is None
    assert parse_type("tensor<2x3xi64>").num_elements() == 6
    with pytest.raises(ValueError):
        parse_type("tensor<*xf32>").rank


def test_types_are_values():
    assert parse_type("tensor<2xf32>") == T.tensor(2)
    assert hash(parse_type("i32")) == hash(T.i32)
    assert T.IntegerType(8, "unsigned") != T.i8


# -- attributes --------------------------------------------------------------

def _attr(text, parse_text):
    module = parse_text(f'"x.y"() {{a = {text}}} : () -> ()', allow_unregistered=True)
    return module.regions[0].block.first.attributes["a"]


@pytest.mark.parametrize("text", [
    "5", "-3 : i32", "7 : index", "1.5", "2.5 : f32", "-0.0", "1.0e+20", "true", "false", "unit",
    '"a\\"b\\\\c\\n"', "[1, [2, 3], \"s\"]", "{x = 1, y}", "@sym", "@a::@b::@c", "tensor<2xf32>",
    "array<i64: 1, 2, 3>", "array<f32: 1.5>", "array<i32>",
    "dense<1.0> : tensor<2x2xf32>", "dense<[[1, 2], [3, 4]]> : tensor<2x2xi32>",
    "dense<\"0x0000803F\"> : tensor<1xf32>", "dense<[true, false]> : tensor<2xi1>",
    "0x7FC00000 : f32", "0x7FF0000000000000 : f64",
])
def test_attribute_text_round_trips(text, parse_text):
    attr = _attr(text, parse_text)
    again = _attr(str(attr), parse_text)
    assert again == attr
    assert str(again) == str(attr)


def test_float_attribute_special_values(parse_text):
    assert math.isnan(_attr("0x7FC00000 : f32", parse_text).value)
    assert _attr("0x7F800000 : f32", parse_text).value == math.inf
    half = _attr("-1.5e-3 : f16", parse_text)
    assert half.value == A.round_to_type(-1.5e-3, T.f16) != -1.5e-3  # rounded to f16
    assert str(half) == "-0.0015 : f16"  # the shortest text that reads back the same


def test_dense_elements_to_numpy(parse_text):
    np = pytest.importorskip("numpy")
    attr = _attr("dense<[[1, 2], [3, 4]]> : tensor<2x2xi32>", parse_text)
    assert attr.to_numpy().tolist() == [[1, 2], [3, 4]]
    assert attr.to_numpy().dtype == np.int32
    splat = _attr("dense<2.5> : tensor<3xf32>", parse_text)
    assert splat.is_splat and splat.to_numpy().tolist() == [2.5, 2.5, 2.5]
    raw = A.DenseElementsAttr.from_numpy(np.arange(6, dtype=np.float32), T.tensor(2, 3))
    assert raw.to_numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    assert _attr(str(raw), parse_text) == raw


def test_string_escapes():
    text = "tab\tquote\"back\\slash\nbell\x07é"
    assert A.quote_string(text) == '"tab\\tquote\\"back\\\\slash\\nbell\\07é"'


# -- use lists and blocks ----------------------------------------------------

def _pure(operands, result_type=T.i32):
    return PureOp(operands, [result_type] if result_type else [])


def test_use_lists_follow_operand_changes():
    block = Block([T.i32, T.i32])
    a, b = block.args
    op = block.append(_pure([a, a]))
    assert set(a.uses) == {(op, 0), (op, 1)} and not b.uses
    op.set_operand(1, b)
    assert set(a.uses) == {(op, 0)} and set(b.uses) == {(op, 1)}
    a.replace_all_uses_with(b)
    assert not a.uses and len(b.uses) == 2 and op.operands == [b, b]
    user = block.append(_pure([op.result]))
    with pytest.raises(ValueError):
        op.erase()
    user.erase()
    op.erase()
    assert not b.uses and len(block) == 0


def test_block_linked_list_operations():
    block = Block()
    first = block.append(_pure([], T.i32))
    last = block.append(_pure([], T.i32))
    middle = block.insert_before(last, _pure([], T.i32))
    head = block.insert_before(first, _pure([], T.i32))
    tail = block.insert_after(last, _pure([], T.i32))
    assert list(block.ops) == [head, first, middle, last, tail] and len(block) == 5
    middle.detach()
    assert list(block.ops) == [head, first, last, tail] and middle.parent is None
    block.insert_after(head, middle)
    assert list(block.ops) == [head, middle, first, last, tail]
    for op in list(block.ops):
        op.erase()
    assert block.first is None and block.last is None and len(block) == 0


def test_erasing_while_iterating_is_safe():
    block = Block()
    ops = [block.append(_pure([], T.i32)) for _ in range(10)]
    for op in block.ops:
        if ops.index(op) % 2:
            op.erase()
    assert list(block.ops) == ops[::2]


# -- builder and verifier ----------------------------------------------------

def _function_with_body():
    func = FuncOp.build("f", [T.i32], [T.i32])
    builder = Builder.at_end(func.entry_block)
    x = func.entry_block.args[0]
    total = builder.create(PureOp, [x, x], [T.i32]).result
    builder.create(ReturnOp, [total])
    return ModuleOp.build([func]), func


def test_builder_creates_verifiable_ir():
    module, func = _function_with_body()
    verify(module)
    text = print_ir(module)
    assert "func.func @f(%arg0: i32) -> i32 {" in text
    assert "%0 = test.pure %arg0, %arg0 : i32" in text
    reparsed = parse(text)
    assert structurally_equal(module, reparsed)


def test_builder_before_op_inserts_in_place():
    module, func = _function_with_body()
    ret = func.entry_block.last
    Builder.before_op(ret).create(PureOp, [], [T.f32])
    assert [op.name for op in func.entry_block.ops] == ["test.pure", "test.pure", "func.return"]


def test_verifier_reports_dominance(parse_text):
    module = parse_text("""
func.func @f(%a: i32) -> i32 {
  %0 = test.pure %1 : (i32) -> i32
  %1 = test.pure %a : i32
  func.return %0 : i32
}""")
    with pytest.raises(DiagnosticError, match="operand #0 does not dominate this use") as info:
        verify(module)
    assert info.value.location.line == 3


def test_verifier_reports_isolation_and_symbols(parse_text):
    isolated = parse_text("""
func.func @f(%a: i32) {
  test.isolated ({
    %0 = test.pure %a : i32
  })
  func.return
}""")
    with pytest.raises(DiagnosticError, match="outside an isolated-from-above region"):
        verify(isolated)
    duplicate = parse_text("func.func private @g()\nfunc.func private @g()")
    with pytest.raises(DiagnosticError, match="redefinition of symbol 'g'") as info:
        verify(duplicate)
    assert info.value.notes and info.value.notes[0][1].line == 1


def test_verifier_checks_calls_and_returns(parse_text):
    bad_call = parse_text("""
func.func @f(%a: i32) -> i32 {
  %0 = func.call @missing(%a) : (i32) -> i32
  func.return %0 : i32
}""")
    with pytest.raises(DiagnosticError, match="'@missing' does not reference a valid function"):
        verify(bad_call)
    bad_return = parse_text("func.func @f(%a: i32) -> f32 {\n  func.return %a : i32\n}")
    with pytest.raises(DiagnosticError, match=r"returns \(i32\) but the enclosing function @f"):
        verify(bad_return)


def _diamond(entry: str, used: str) -> str:
    """A CFG diamond: ^entry (after `entry`) branches to ^left and ^right, which join;
    ^right defines %y, ^join uses `used`."""
    return f"""
"test.op"() ({{
^entry(%c: i1):{entry}
  "test.terminator"()[^left, ^right] : () -> ()
^left:
  "test.terminator"()[^join] : () -> ()
^right:
  %y = "test.pure"() : () -> i32
  "test.terminator"()[^join] : () -> ()
^join:
  "test.terminator"({used}) : (i32) -> ()
}}) : () -> ()"""


def test_cfg_dominance_uses_dominator_tree(parse_text):
    # %x, defined in ^entry, dominates ^join; %y, defined in ^right, does not
    verify(parse_text(_diamond('\n  %x = "test.pure"() : () -> i32', "%x")))
    with pytest.raises(DiagnosticError, match="does not dominate"):
        verify(parse_text(_diamond("", "%y")))


# -- printer naming --------------------------------------------------------------

def test_printer_keeps_names_and_numbers_the_rest(parse_text):
    module = parse_text("""
func.func @f(%input: i32, %1: i32) -> i32 {
  %7 = test.pure %input, %1 : i32
  %sum = test.pure %7 : i32
  %sum_2 = test.pure %sum : i32
  func.return %sum_2 : i32
}""")
    text = print_ir(module)
    assert "func.func @f(%input: i32, %arg0: i32)" in text
    assert "%0 = test.pure %input, %arg0 : i32" in text
    assert "%sum = test.pure %0 : i32" in text


def test_printer_uniquifies_clashing_hints():
    func = FuncOp.build("f", [], [])
    builder = Builder.at_end(func.entry_block)
    first = builder.create(PureOp, [], [T.i32], result_names=["x"]).result
    builder.create(PureOp, [first], [T.i32], result_names=["x"])
    builder.create(ReturnOp, [])
    text = print_ir(ModuleOp.build([func]))
    assert "%x = test.pure : i32" in text and "%x_1 = test.pure %x : i32" in text


def test_generic_and_pretty_forms_agree(parse_text):
    module = parse_text("""
func.func @f(%a: i32) -> i32 {
  %0 = func.call @f(%a) : (i32) -> i32
  %1 = "test.op"(%0) <{p = 1}> : (i32) -> i32
  func.return %1 : i32
}""")
    generic = print_ir(module, generic=True)
    assert '"func.call"(%a) <{callee = @f}>' in generic
    assert structurally_equal(parse(generic), module)
    assert structurally_equal(parse(print_ir(module)), module)


def test_compare_reports_differences(parse_text):
    a = parse_text("%0 = \"x.a\"() {v = 1} : () -> i32", allow_unregistered=True)
    b = parse_text("%0 = \"x.a\"() {v = 2} : () -> i32", allow_unregistered=True)
    assert "attributes" in first_difference(a, b)


# -- resources ---------------------------------------------------------------------

def test_inline_resource_round_trip(parse_text):
    text = """
%0 = "x.const"() {value = dense_resource<w> : tensor<2xf32>} : () -> tensor<2xf32>
{-#
  dialect_resources: { builtin: { w: "0x040000000000803F00000040" } }
#-}"""
    module = parse_text(text, allow_unregistered=True)
    attr = module.regions[0].block.first.attributes["value"]
    assert attr.blob.read() == bytes.fromhex("0000803F00000040")
    printed = print_ir(module)
    assert 'w: "0x040000000000803F00000040"' in printed
    assert structurally_equal(parse(printed, allow_unregistered=True), module)


def test_external_resource_reads_lazily(tmp_path, monkeypatch):
    np = pytest.importorskip("numpy")
    weights = tmp_path / "model.weights.bin"
    weights.write_bytes(b"\0" * 8 + np.array([1.5, -2.0], dtype=np.float32).tobytes())
    source = tmp_path / "model.pal"
    source.write_text("""
%0 = "x.const"() {value = dense_resource<w> : tensor<2xf32>} : () -> tensor<2xf32>
{-#
  external_resources: { "model.weights.bin": { w: [8, 8] } }
#-}""")
    module = parse(source.read_text(), str(source), allow_unregistered=True)
    attr = module.regions[0].block.first.attributes["value"]
    assert attr.blob._loaded is None  # nothing read yet
    assert attr.to_numpy().tolist() == [1.5, -2.0]
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    printed = print_ir(module, resource_base=str(out_dir))
    assert '"../model.weights.bin": {' in printed and "w: [8, 8]" in printed
    (out_dir / "copy.pal").write_text(printed)
    again = parse(printed, str(out_dir / "copy.pal"), allow_unregistered=True)
    assert again.regions[0].block.first.attributes["value"].to_numpy().tolist() == [1.5, -2.0]


def test_undefined_resource_is_an_error(parse_text):
    with pytest.raises(DiagnosticError, match="resource 'w' is used but not defined"):
        parse_text('"x.c"() {v = dense_resource<w> : tensor<2xf32>} : () -> ()',
                   allow_unregistered=True)


# -- diagnostics -------------------------------------------------------------------

def test_diagnostic_render_shows_line_and_caret():
    text = "func.func @f() {\n  %0 = test.pure %nope : i32\n  func.return\n}"
    sources = SourceManager()
    sources.add("f.pal", text)
    with pytest.raises(DiagnosticError) as info:
        parse(text, "f.pal")
    rendered = info.value.render(sources)
    assert rendered.splitlines() == [
        "f.pal:2:18: error: use of undeclared SSA value '%nope' (its type cannot be inferred "
        "here; give the op a type signature)",
        "  %0 = test.pure %nope : i32",
        "                 ^",
    ] or rendered.startswith("f.pal:2:")


def test_syntax_error_names_what_was_expected():
    with pytest.raises(DiagnosticError) as info:
        parse('%0 = "x.y"(%a : () -> i32', "s.pal", allow_unregistered=True)
    assert info.value.location.describe() == "s.pal:1:15"
    assert "unexpected ':'" in info.value.message and "')'" in info.value.message


def test_split_source_keeps_line_numbers():
    chunks = split_source("a\nb\n// -----\nc\n// -----\nd")
    assert chunks == [("a\nb", 0), ("c", 3), ("d", 5)]
    with pytest.raises(DiagnosticError) as info:
        parse("module {\n  %x = \n}", "f.pal", line_offset=3)
    assert info.value.location.line == 6


# -- effects -----------------------------------------------------------------------------

def test_memory_effects_are_declared():
    from palimpsest.ir.opdef import has_no_effects

    assert has_no_effects(PureOp([], [T.i32]))
    assert not has_no_effects(EffectOp([], []))
    assert not has_no_effects(AnyOp([], [T.i32]))  # unknown effects: assume the worst
    assert EffectOp([], []).memory_effects() == [("write", None)]
    assert AnyOp([], []).memory_effects() is None


def test_call_op_accessors():
    call = CallOp([], [T.i32], {"callee": A.SymbolRefAttr("g")})
    assert call.callee == A.SymbolRefAttr("g")
    assert call.arguments == [] and call.results_ == call.results
    region = Region([Block()])
    assert region.block.is_empty


def test_pass_table_names_every_registered_pass():
    from palimpsest.passes import PASSES, load_all
    from palimpsest.passes.pass_manager import registered_passes

    load_all()
    assert set(registered_passes()) == set(PASSES)


def test_dialects_load_on_first_use(parse_text):
    import sys

    module = parse_text("\"memory.pool\"() <{sym_name = \"p\"}> : () -> ()")
    assert "palimpsest.dialects.memory" in sys.modules
    assert module.regions[0].block.first.is_registered
