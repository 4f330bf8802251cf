"""Bounded `?` dims (issue #6): `#bounds<...>` on tensor and buffer types, bounds carried
by infer-shapes, buffers planned statically at their bounds, run at any shape within them,
`Session(bounds=...)` and `palimpsest-run --bound`."""

from __future__ import annotations

from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")

from palimpsest.backends.binding import BindingError, find_function  # noqa: E402
from palimpsest.backends.numpy.session import Session  # noqa: E402
from palimpsest.backends.reference.executor import run as reference_run  # noqa: E402
from palimpsest.dialects.graph import bound_rules as B  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402
from palimpsest.ir.diagnostics import DiagnosticError  # noqa: E402
from palimpsest.ir.parser import parse  # noqa: E402
from palimpsest.ir.printer import print_ir  # noqa: E402
from palimpsest.ir.types import TensorType, f32  # noqa: E402
from palimpsest.passes.pass_manager import PassManager, parse_pipeline  # noqa: E402

import example_models  # noqa: E402  (test/unit, on sys.path: conftest.py)

ROOT = Path(__file__).resolve().parents[2]
RTOL, ATOL = 1e-4, 1e-5

M = example_models.load()


@pytest.fixture(scope="module")
def ocr():
    return import_onnx(M.ocr_crnn(channels=(8, 16, 16, 16), classes=12))


@pytest.fixture(scope="module")
def minilm():
    return import_onnx(M.minilm(hidden=32, heads=4, layers=2, ffn=64, vocab=100,
                                max_positions=64))


def line(width: int) -> dict:
    rng = np.random.default_rng(width)
    return {"image": rng.standard_normal((1, 1, 32, width)).astype(np.float32)}


def check(module, actual: dict, feeds: dict, what: str) -> None:
    expected = reference_run(find_function(module, None), feeds)
    assert list(actual) == list(expected)
    for name, want in expected.items():
        got = np.asarray(actual[name])
        assert got.shape == want.shape, f"{what}: {name} {got.shape} vs {want.shape}"
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"{what}: {name}")


def lowered(text: str, pipeline: str = "default"):
    module = parse(text, "<test>")
    PassManager(parse_pipeline(pipeline)).run(module)
    return module


# -- the type -------------------------------------------------------------------------------------

def test_types_carry_bounds():
    t = TensorType((1, None, None), f32).with_bounds((None, 8, None))
    assert str(t) == "tensor<1x?x?xf32, #bounds<?, 8, ?>>"
    assert t.bounds == (None, 8, None) and t.upper_shape == (1, 8, None)
    assert not t.is_bounded and t.upper_num_elements() is None
    both = t.with_bounds((None, 8, 3))
    assert both.is_bounded and both.upper_num_elements() == 24
    assert t.with_bounds(None) == TensorType((1, None, None), f32)
    with pytest.raises(ValueError, match="dim 0 is static"):
        t.with_bounds((2, None, None))
    with pytest.raises(ValueError, match="at least 1"):
        t.with_bounds((None, 0, None))


def test_bounds_round_trip_and_stay_on_buffers():
    text = ("func.func @f(%x: tensor<?x4xf32, #bounds<16, ?>>) -> tensor<?x4xf32> {\n"
            "  %y = graph.relu %x : tensor<?x4xf32, #bounds<16, ?>>\n"
            "  func.return %y : tensor<?x4xf32, #bounds<16, ?>>\n}\n")
    module = parse(text, "<test>")
    printed = print_ir(module)
    assert print_ir(parse(printed, "<again>")) == printed
    assert print_ir(parse(print_ir(module, generic=True), "<generic>")) == printed
    PassManager(parse_pipeline("to-buffers")).run(module)
    assert "buffer<?x4xf32, #bounds<16, ?>>" in print_ir(module)


def test_a_bad_bound_is_a_located_error():
    with pytest.raises(DiagnosticError) as error:
        parse("func.func @f(%x: tensor<4x?xf32, #bounds<2, ?>>) {\n  func.return\n}\n", "b.pal")
    assert str(error.value).startswith("b.pal:1:18: error: dim 0 is static (4)")


# -- bound rules ----------------------------------------------------------------------------------

def test_broadcast_against_an_unbounded_dim_is_unbounded():
    # `?`<=8 may be 1 and then the result is the other, unbounded `?`
    assert B.broadcast_upper((8,), (None,)) == (None,)
    assert B.broadcast_upper((8, 1), (4, 64)) == (8, 64)
    assert B.broadcast_upper((3,), (2, 1)) == (2, 3)


def infer(text: str) -> list:
    module = lowered(text, "infer-shapes")
    func = find_function(module, None)
    return [str(t) for t in func.type.results]


def test_infer_shapes_carries_bounds():
    results = infer("""
func.func @main(%x: tensor<1x3x?x?xf32, #bounds<?, ?, 64, 640>>, %w: tensor<8x3x3x3xf32>,
                %m: tensor<?x16xf32, #bounds<32, ?>>, %k: tensor<16x4xf32>,
                %u: tensor<?x4xf32>) -> (tensor<*xf32>, tensor<*xf32>, tensor<*xf32>,
                                         tensor<*xf32>, tensor<*xf32>, tensor<*xf32>) {
  %c = graph.conv %x, %w {pads = array<i64: 1, 1, 1, 1>} : (tensor<1x3x?x?xf32, #bounds<?, ?, 64, 640>>, tensor<8x3x3x3xf32>) -> tensor<*xf32>
  %p = graph.average_pool %c {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<*xf32>) -> tensor<*xf32>
  %t = graph.transpose %p {perm = array<i64: 0, 1, 3, 2>} : (tensor<*xf32>) -> tensor<*xf32>
  %mm = graph.matmul %m, %k : (tensor<?x16xf32, #bounds<32, ?>>, tensor<16x4xf32>) -> tensor<*xf32>
  %a = graph.add %mm, %u : (tensor<*xf32>, tensor<?x4xf32>) -> tensor<*xf32>
  %s = graph.sigmoid %mm : (tensor<*xf32>) -> tensor<*xf32>
  %cat = graph.concat %mm, %s {axis = 0} : (tensor<*xf32>, tensor<*xf32>) -> tensor<*xf32>
  %shape = graph.constant {value = dense<[2, -1]> : tensor<2xi64>} : tensor<2xi64>
  %r = graph.reshape %cat, %shape : (tensor<*xf32>, tensor<2xi64>) -> tensor<*xf32>
  func.return %p, %t, %mm, %a, %cat, %r : tensor<*xf32>, tensor<*xf32>, tensor<*xf32>, tensor<*xf32>, tensor<*xf32>, tensor<*xf32>
}""")
    assert results == [
        "tensor<1x8x?x?xf32, #bounds<?, ?, 32, 320>>",   # conv keeps, pool halves
        "tensor<1x8x?x?xf32, #bounds<?, ?, 320, 32>>",   # transpose permutes
        "tensor<?x4xf32, #bounds<32, ?>>",               # matmul keeps the rows' bound
        "tensor<?x4xf32>",                               # broadcast with an unbounded `?`
        "tensor<?x4xf32, #bounds<64, ?>>",               # concat adds
        "tensor<2x?xf32, #bounds<?, 128>>",              # reshape: 64 * 4 elements / 2
    ]


def test_shape_arithmetic_carries_bounds(minilm):
    """Shape → Gather → Concat → Reshape and the Slice of position ids to the sequence
    length keep the sequence's bound: every activation of the encoder is bounded."""
    session = Session(minilm, specialize=False,
                      bounds={"input_ids": {0: 1, 1: 48}, "attention_mask": {0: 1, 1: 48}})
    session.prepare()
    func = session._dynamic.func
    allocs = [op for op in func.walk() if op.name == "buffer.alloc"]
    assert not allocs, [str(op.results[0].type) for op in allocs]
    assert str(func.type.results[0]) == "buffer<?x?x32xf32, #bounds<1, 48, ?>>"


# -- planning and running -------------------------------------------------------------------------

PLAN_TEXT = """
func.func @main(%x: tensor<?x64xf32, #bounds<128, ?>>, %w: tensor<64x32xf32>) -> tensor<*xf32> {
  %a = graph.relu %x : tensor<?x64xf32, #bounds<128, ?>>
  %m = graph.matmul %a, %w : (tensor<?x64xf32, #bounds<128, ?>>, tensor<64x32xf32>) -> tensor<*xf32>
  %s = graph.softmax %m : (tensor<*xf32>) -> tensor<*xf32>
  func.return %s : tensor<*xf32>
}"""


def test_plan_memory_places_bounded_buffers_at_their_bounds():
    from palimpsest.passes.plan_memory import plan_memory

    module = lowered(PLAN_TEXT, "infer-shapes,bufferize{in-place=false},lower-to-kernels,"
                                "insert-deallocs")
    report = plan_memory(module)
    fn = report.function("main")
    assert fn.dynamic == [] and fn.bounded
    ops = list(find_function(module, None).walk())
    assert not [op for op in ops if op.name in ("buffer.alloc", "buffer.dealloc")]
    views = {op.results[0].name_hint: op for op in ops if op.name == "buffer.view"}
    sizes = {b.name: b.size for b in fn.buffers}
    assert sizes["%a"] == 128 * 64 * 4 and sizes["%s"] == 128 * 32 * 4
    assert str(views["a"].results[0].type) == "buffer<?x64xf32, #bounds<128, ?>>"


@pytest.mark.parametrize("rows", [1, 37, 128])
def test_a_bounded_plan_runs_every_shape_within_its_bounds(rows):
    module = parse(PLAN_TEXT, "<test>")
    session = Session(module, specialize=False, poison=True)
    rng = np.random.default_rng(rows)
    feeds = {"x": rng.standard_normal((rows, 64)).astype(np.float32),
             "w": rng.standard_normal((64, 32)).astype(np.float32)}
    check(module, session.run(feeds), feeds, f"{rows} rows")
    report = session.last_stats
    assert report.plan == "dynamic"  # bounds written in the IR: no session bounds set
    assert report.dynamic_bytes == 0 and report.allocations == 0 and report.frees == 0
    assert report.static_bytes == sum(session.last_plan.pool_sizes.values()) > 128 * 64 * 4


@pytest.mark.parametrize("widths", [(8, 160, 333, 400)])
def test_ocr_bounded_plan_matches_the_reference(ocr, widths):
    session = Session(ocr, specialize=False, bounds={"image": {3: 400}}, poison=True)
    static = set()
    for width in widths:
        feeds = line(width)
        check(ocr, session.run(feeds), feeds, f"width {width}")
        report = session.last_stats
        assert report.plan == "bounded"
        assert report.dynamic_bytes == 0 and report.allocations == 0
        static.add(report.static_bytes)
    assert len(static) == 1 and session.stats.compiles == 1  # one plan, at the bound
    specialized = Session(ocr)
    specialized.run(line(widths[-1]))
    assert specialized.last_stats.static_bytes <= static.pop()


def test_minilm_bounded_plan_matches_the_reference(minilm):
    bounds = {"input_ids": {0: 1, 1: 48}, "attention_mask": {0: 1, 1: 48}}
    session = Session(minilm, specialize=False, bounds=bounds)
    for seq in (1, 13, 48):
        feeds = M.minilm_inputs(1, seq, vocab=100, padded=seq // 3)
        check(minilm, session.run(feeds), feeds, f"sequence {seq}")
        assert session.last_stats.dynamic_bytes == 0 and session.last_stats.allocations == 0
    assert session.stats.compiles == 1


def test_kernel_views_smaller_than_their_slots(ocr):
    """Workspaces (conv padding and im2col, softmax statistics) are bounded too, and the
    kernels run on views of a slot's first bytes."""
    session = Session(ocr, specialize=False, bounds={"image": {3: 64}}, poison=True)
    check(ocr, session.run(line(12)), line(12), "width 12 of 64")
    func = session.last_plan.func
    workspaces = [op for op in func.walk() if op.name == "buffer.view"
                  and op.attributes["kind"].value == "workspace"]
    assert workspaces and all(op.results[0].type.bounds is not None
                              or op.results[0].type.has_static_shape for op in workspaces)


DEPTHWISE_TEXT = """
func.func @main(%x: tensor<1x48x?x?xf32>, %w: tensor<48x1x3x3xf32>, %b: tensor<48xf32>) -> tensor<*xf32> {
  %y = graph.conv %x, %w, %b {group = 48, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: %s, %s>} : (tensor<1x48x?x?xf32>, tensor<48x1x3x3xf32>, tensor<48xf32>) -> tensor<*xf32>
  func.return %y : tensor<*xf32>
}"""


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_band_within_its_bound(stride):
    """The depthwise im2col band (a channel count that shrinks as the image grows) is
    sized at the bounds; every smaller image runs in that slot, in one or several bands."""
    module = parse(DEPTHWISE_TEXT.replace("%s", str(stride)), "<test>")
    session = Session(module, specialize=False, bounds={"x": {2: 96, 3: 96}}, poison=True)
    rng = np.random.default_rng(stride)
    w = rng.standard_normal((48, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(48).astype(np.float32)
    for h, wd in [(96, 96), (5, 7), (40, 33), (95, 90), (64, 1)]:
        feeds = {"x": rng.standard_normal((1, 48, h, wd)).astype(np.float32), "w": w, "b": b}
        check(module, session.run(feeds), feeds, f"{h}x{wd}")
    assert session.stats.compiles == 1


def test_inputs_as_activations_with_bounds():
    module = parse(PLAN_TEXT, "<test>")
    pipeline = ("infer-shapes,canonicalize,bufferize{inputs-as-activations=true},"
                "lower-to-kernels,insert-deallocs,plan-memory{inputs-as-activations=true}")
    session = Session(module, specialize=False, pipeline=pipeline)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((100, 64)).astype(np.float32),
             "w": rng.standard_normal((64, 32)).astype(np.float32)}
    check(module, session.run(feeds), feeds, "inputs as activations")
    assert session.last_stats.allocations == 0


# -- errors ---------------------------------------------------------------------------------------

def test_an_input_beyond_its_bound_is_an_error(ocr):
    session = Session(ocr, specialize=False, bounds={"image": {3: 64}})
    with pytest.raises(BindingError, match=r"input 'image': dim 3 is 65, beyond its bound 64"):
        session.run(line(65))
    specialized = Session(ocr, bounds={"image": {3: 64}})  # a specialized plan checks too
    with pytest.raises(BindingError, match="beyond its bound 64"):
        specialized.run(line(65))
    with pytest.raises(BindingError, match="beyond its bound 64"):
        specialized.set_input_shape("image", (1, 1, 32, 100))


def test_a_buffer_beyond_its_bound_is_an_error_naming_it():
    # a bound written in the IR that the data breaks: caught where the buffer is viewed
    module = parse("""
func.func @main(%x: tensor<?xf32>) -> tensor<?xf32> {
  %y = graph.relu %x : (tensor<?xf32>) -> tensor<?xf32, #bounds<4>>
  %z = graph.exp %y : (tensor<?xf32, #bounds<4>>) -> tensor<?xf32>
  func.return %z : tensor<?xf32>
}""", "over.pal")
    session = Session(module, specialize=False)
    session.run({"x": np.ones(4, np.float32)})
    with pytest.raises(DiagnosticError, match=r"%y has shape \[5\] at run time, beyond its "
                                              r"bounds \[4\]"):
        session.run({"x": np.ones(5, np.float32)})


@pytest.mark.parametrize("name, dims, message", [
    ("nope", {0: 1}, "unknown input 'nope'"),
    ("image", {4: 8}, "no dim 4 to bound"),
    ("image", {2: 8}, "dim 2 is static (32)"),
    ("image", {3: 0}, "the bound of dim 3 must be at least 1, got 0"),
])
def test_set_input_bound_errors(ocr, name, dims, message):
    session = Session(ocr)
    with pytest.raises(BindingError, match=message.replace("(", r"\(").replace(")", r"\)")):
        session.set_input_bound(name, dims)


def test_setting_a_bound_drops_the_dynamic_plan(ocr):
    session = Session(ocr, specialize=False)
    session.run(line(20))
    assert session.last_stats.plan == "dynamic" and session.last_stats.allocations > 0
    session.set_input_bound("image", {3: 32})
    session.run(line(20))
    assert session.last_stats.plan == "bounded" and session.last_stats.allocations == 0
    assert session.stats.compiles == 2


# -- palimpsest-run --bound -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def ocr_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("bounds") / "ocr.onnx"
    onnx.save(M.ocr_crnn(channels=(8, 16, 16, 16), classes=12), path)
    return str(path)


def test_palimpsest_run_bound(ocr_path, capsys):
    from palimpsest.tools import run as run_tool

    argv = [ocr_path, "--random-inputs", "--shape", "image=1x1x32x40", "--bound",
            "image=3:128", "--stats"]
    assert run_tool.main(argv) == 0
    printed = capsys.readouterr().out
    assert "probabilities: float32 [10, 1, 12]" in printed
    assert "plan: bounded" in printed
    assert "dynamic bytes: 0 (0 allocations, 0 frees)" in printed
    assert run_tool.main(argv + ["--level", "kernel"]) == 0


@pytest.mark.parametrize("bound, message", [
    ("image=3", "--bound 'image=3' must look like NAME=DIM:BOUND[,DIM:BOUND...]"),
    ("image=3:x", "must look like NAME=DIM:BOUND"),
    ("img=3:8", "--bound: unknown input 'img' (the function takes: image)"),
    ("image=9:8", "--bound: input 'image': no dim 9 to bound"),
    ("image=0:8", "--bound: input 'image': dim 0 is static (1)"),
    ("image=3:0", "--bound: input 'image': the bound of dim 3 must be at least 1, got 0"),
    ("image=3:16", "input 'image': dim 3 is 40, beyond its bound 16"),
])
def test_palimpsest_run_bound_errors(ocr_path, capsys, bound, message):
    from palimpsest.tools import run as run_tool

    argv = [ocr_path, "--random-inputs", "--shape", "image=1x1x32x40", "--bound", bound]
    assert run_tool.main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
