"""Property tests: random valid IR round-trips through text (both forms) to the same
IR, printing is idempotent, and randomly mutated text never raises anything but a
DiagnosticError."""

import math
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palimpsest.dialects.builtin import ModuleOp
from palimpsest.dialects.test import AnyOp, PureOp
from palimpsest.ir import attributes as A
from palimpsest.ir import types as T
from palimpsest.ir.compare import first_difference
from palimpsest.ir.core import Block, Region, UnregisteredOp
from palimpsest.ir.diagnostics import DiagnosticError
from palimpsest.ir.parser import parse
from palimpsest.ir.printer import print_ir
from palimpsest.ir.verifier import verify

identifiers = st.from_regex(r"[A-Za-z_][A-Za-z0-9_$.]{0,8}", fullmatch=True)
texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)

scalar_types = st.sampled_from([
    T.i1, T.i8, T.i32, T.i64, T.IntegerType(16, "signed"), T.IntegerType(8, "unsigned"),
    T.f16, T.bf16, T.f32, T.f64, T.index, T.none,
])
numeric_types = st.sampled_from([T.i8, T.i32, T.i64, T.f16, T.f32, T.f64, T.index])
dims = st.one_of(st.integers(0, 9), st.none())


def _types(depth=2):
    shaped = st.one_of(
        st.builds(lambda s, e: T.TensorType(tuple(s), e), st.lists(dims, max_size=4), numeric_types),
        st.builds(lambda e: T.TensorType(None, e), numeric_types),
        st.builds(lambda s, e: T.MemRefType(tuple(s), e), st.lists(dims, max_size=3), numeric_types),
        st.builds(lambda s, e: T.VectorType(tuple(s), e), st.lists(st.integers(1, 8), min_size=1,
                                                                    max_size=3), numeric_types),
        st.builds(T.ComplexType, st.sampled_from([T.f32, T.f64])),
    )
    if depth == 0:
        return st.one_of(scalar_types, shaped)
    inner = _types(depth - 1)
    return st.one_of(
        scalar_types, shaped,
        st.builds(lambda xs: T.TupleType(tuple(xs)), st.lists(inner, max_size=3)),
        st.builds(lambda i, o: T.FunctionType(tuple(i), tuple(o)),
                  st.lists(inner, max_size=2), st.lists(inner, max_size=2)),
    )


types = _types()
finite_floats = st.floats(allow_nan=False, allow_infinity=False, width=64)
any_floats = st.floats(width=64)


def _dense():
    def build(shape, element, data):
        n = 1
        for d in shape:
            n *= d
        if element == T.f64:
            values = data.draw(st.lists(finite_floats, min_size=n, max_size=n))
        elif element == T.f32:
            values = data.draw(st.lists(st.floats(width=32, allow_nan=False,
                                                  allow_infinity=False), min_size=n, max_size=n))
        elif element == T.i1:
            values = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
        else:
            values = data.draw(st.lists(st.integers(-1000, 1000), min_size=n, max_size=n))
        return A.DenseElementsAttr(T.TensorType(tuple(shape), element), tuple(values))

    return st.builds(build, st.lists(st.integers(1, 3), max_size=3),
                     st.sampled_from([T.f32, T.f64, T.i32, T.i64, T.i1]), st.data())


leaf_attrs = st.one_of(
    st.sampled_from([T.i64, T.i32, T.i8, T.IntegerType(8, "unsigned"), T.index]).flatmap(
        lambda t: st.builds(A.IntegerAttr, st.integers(*(A.integer_range(t) or (-2**63, 2**63 - 1))),
                            st.just(t))),
    st.builds(A.FloatAttr, any_floats, st.just(T.f64)),
    st.builds(A.FloatAttr, st.floats(width=32), st.just(T.f32)),
    st.builds(A.BoolAttr, st.booleans()),
    st.just(A.UnitAttr()),
    st.builds(A.StringAttr, texts),
    st.builds(A.SymbolRefAttr, st.one_of(identifiers, texts.filter(bool)),
              st.lists(identifiers, max_size=2).map(tuple)),
    st.builds(A.TypeAttr, types),
    st.builds(lambda v: A.DenseArrayAttr(T.i64, tuple(v)), st.lists(st.integers(-50, 50), max_size=4)),
    st.builds(lambda v: A.DenseArrayAttr(T.f32, tuple(v)),
              st.lists(st.floats(width=32, allow_nan=False), max_size=3)),
    _dense(),
)
attrs = st.recursive(
    leaf_attrs,
    lambda children: st.one_of(
        st.builds(lambda xs: A.ArrayAttr(tuple(xs)), st.lists(children, max_size=3)),
        st.builds(lambda d: A.DictionaryAttr.of(d), st.dictionaries(st.one_of(identifiers, texts),
                                                                     children, max_size=3)),
    ),
    max_leaves=6,
)
attr_dicts = st.dictionaries(st.one_of(identifiers, texts), attrs, max_size=3)


def _build_block(data, block: Block, visible: list, depth: int) -> None:
    available = list(visible) + list(block.args)
    for _ in range(data.draw(st.integers(0, 4))):
        kind = data.draw(st.sampled_from(["unregistered", "pure", "any"]))
        operands = [data.draw(st.sampled_from(available))
                    for _ in range(data.draw(st.integers(0, 3)))] if available else []
        results = data.draw(st.lists(types, max_size=2))
        names = data.draw(st.lists(st.one_of(identifiers, st.none()), min_size=len(results),
                                   max_size=len(results)))
        regions = []
        if depth > 0 and data.draw(st.integers(0, 4)) == 0:
            for _ in range(data.draw(st.integers(1, 2))):
                region = Region()
                for _ in range(data.draw(st.integers(1, 2))):
                    inner = region.add_block(Block(data.draw(st.lists(types, max_size=2))))
                regions.append(region)
        if kind == "unregistered":
            op = UnregisteredOp(f"x.{data.draw(identifiers)}", operands, results,
                                data.draw(attr_dicts), data.draw(attr_dicts), regions,
                                result_names=names)
        else:
            cls = PureOp if kind == "pure" else AnyOp
            op = cls(operands, results, None, data.draw(attr_dicts), regions, result_names=names)
        block.append(op)
        for region in regions:
            for inner in region.blocks:
                _build_block(data, inner, available, depth - 1)
        available.extend(op.results)


@st.composite
def modules(draw):
    data = draw(st.data())
    top = Block()
    _build_block(data, top, [], depth=2)
    return ModuleOp(regions=[Region([top])])


def _round_trip(module, generic):
    text = print_ir(module, generic=generic)
    again = parse(text, "<roundtrip>", allow_unregistered=True)
    verify(again)
    problem = first_difference(module, again)
    assert problem is None, f"{problem}\n{text}"
    assert print_ir(again, generic=generic) == text
    return text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules(), st.booleans())
def test_random_ir_round_trips(module, generic):
    verify(module)
    _round_trip(module, generic)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(attrs)
def test_random_attributes_round_trip(attr):
    op = UnregisteredOp("x.holder", (), (), None, {"a": attr})
    module = ModuleOp(regions=[Region([Block()])])
    module.regions[0].block.append(op)
    text = print_ir(module)
    again = parse(text, allow_unregistered=True).regions[0].block.first.attributes["a"]
    assert again == attr, text
    if isinstance(attr, A.FloatAttr) and math.isnan(attr.value):
        assert math.isnan(again.value)


SEED_TEXTS = [
    """func.func @f(%a: i32, %b: tensor<1x?x64xf32>) -> i32 {
  %0 = "test.op"(%a) <{x = 1 : i32}> {y = dense<[1, 2]> : tensor<2xi32>, s = "hi\\n"} : (i32) -> i32
  %c:2 = "test.pure"(%0, %a) : (i32, i32) -> (i32, f32)
  %d = test.pure %c#0, %a {k = [1.5, @s, array<i64: 1>]} : i32
  %e = func.call @f(%d, %b) : (i32, tensor<1x?x64xf32>) -> i32
  func.return %e : i32 loc("x.pal":1:2)
}
func.func private @decl(i32) -> (i32, f32)
"test.op"() ({
^bb0(%x: i32):
  "test.terminator"()[^bb1] : () -> ()
^bb1:
  "test.terminator"(%x) : (i32) -> ()
}) : () -> ()
%r = "x.c"() {v = dense_resource<w> : tensor<2xf32>} : () -> tensor<2xf32>
{-#
  dialect_resources: { builtin: { w: "0x040000000000803F00000040" } }
#-}""",
    """module @m attributes {a = unit} {
  %0 = "x.y"() {t = tuple<i32, (f32) -> index>, m = memref<4x?xf32>} : () -> !x.t<"q">
  "x.z"(%0) {f = 0x7FC00000 : f32, g = #x.attr<1, "2">} : (!x.t<"q">) -> () loc(fused["a", "b.pal":3:4])
}""",
]
MUTATION_CHARS = string.punctuation + "%^@#:<>(){}[]x?019 \n\"\\"


@st.composite
def mutated_texts(draw):
    text = draw(st.sampled_from(SEED_TEXTS))
    for _ in range(draw(st.integers(1, 4))):
        if not text:
            break
        position = draw(st.integers(0, len(text) - 1))
        action = draw(st.sampled_from(["delete", "insert", "replace", "truncate", "duplicate"]))
        if action == "delete":
            end = position + draw(st.integers(1, 8))
            text = text[:position] + text[end:]
        elif action == "insert":
            text = text[:position] + draw(st.text(st.sampled_from(MUTATION_CHARS), min_size=1,
                                                  max_size=3)) + text[position:]
        elif action == "replace":
            text = text[:position] + draw(st.sampled_from(MUTATION_CHARS)) + text[position + 1:]
        elif action == "truncate":
            text = text[:position]
        else:
            end = position + draw(st.integers(1, 20))
            text = text[:end] + text[position:end] + text[end:]
    return text


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_texts(), st.booleans())
def test_mutated_text_never_raises_a_traceback(text, allow_unregistered):
    try:
        module = parse(text, "<mutated>", allow_unregistered=allow_unregistered)
        verify(module)
    except DiagnosticError as error:
        assert error.message
        return
    # what parses and verifies must print and parse back to the same IR
    printed = print_ir(module)
    again = parse(printed, "<reprinted>", allow_unregistered=True)
    assert first_difference(module, again) is None, printed


def test_seed_texts_are_valid():
    for text in SEED_TEXTS:
        module = parse(text, "<seed>", allow_unregistered=True)
        verify(module)
        _round_trip(module, generic=False)
        _round_trip(module, generic=True)
