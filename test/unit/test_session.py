"""Sessions (backends/numpy/session.py): ONE's cases A-E on models with a dynamic width,
sequence or batch dim, checked against the graph-level reference and onnxruntime; stats
that show no tensor held both statically and dynamically; zero-copy inputs, outputs and
chaining; palimpsest-run --shape/--repeat through a session."""

from __future__ import annotations

from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from palimpsest.backends.binding import BindingError, find_function  # noqa: E402
from palimpsest.backends.numpy.session import Session  # noqa: E402
from palimpsest.backends.reference.executor import run as reference_run  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402
from palimpsest.ir.parser import parse  # noqa: E402

import example_models  # noqa: E402  (test/unit, on sys.path: conftest.py)

ROOT = Path(__file__).resolve().parents[2]
RTOL, ATOL = 1e-4, 1e-5

M = example_models.load()


class Model:
    """An ONNX model, its graph-level module and an onnxruntime session."""

    def __init__(self, proto):
        self.proto = proto
        self.module = import_onnx(proto)
        self.func = find_function(self.module, None)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.ort = ort.InferenceSession(proto.SerializeToString(), options,
                                        providers=["CPUExecutionProvider"])

    def check(self, actual: dict, feeds: dict, what: str = "") -> None:
        names = [o.name for o in self.ort.get_outputs()]
        expected = dict(zip(names, self.ort.run(None, feeds)))
        reference = reference_run(self.func, feeds)
        assert list(actual) == names, what
        for name in names:
            got = np.asarray(actual[name])
            for want, by in ((expected[name], "onnxruntime"), (reference[name], "reference")):
                assert got.shape == want.shape, f"{what} {name}: {got.shape} vs {by} {want.shape}"
                np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL,
                                           err_msg=f"{what}: {name} vs {by}")


@pytest.fixture(scope="module")
def ocr():
    return Model(M.ocr_crnn(channels=(8, 16, 16, 16), classes=12))


@pytest.fixture(scope="module")
def minilm():
    return Model(M.minilm(hidden=32, heads=4, layers=2, ffn=64, vocab=100, max_positions=64))


@pytest.fixture(scope="module")
def resnet():
    return Model(M.resnet(image=24, width=4, blocks=(1, 1), classes=5, batch=None))


def line(width: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"image": rng.standard_normal((1, 1, 32, width)).astype(np.float32)}


def assert_no_double_allocation(session: Session, in_place_outputs: int = 0) -> None:
    """Each tensor is either in a pool of the plan (static bytes, the pools' sizes) or
    allocated at run time (dynamic bytes), never both; outputs written in the caller's
    arrays are neither."""
    report, plan = session.last_stats, session.last_plan
    stats = report.run_stats
    func = plan.func
    ops = list(func.entry_block.ops)
    # a pool holding only outputs that all went to the caller's arrays is not allocated
    replaced = in_place_outputs and in_place_outputs == len(func.type.results)
    arenas = [op for op in ops if op.name == "memory.arena"]
    pools = {name: size for name, size in plan.pool_sizes.items() if not (replaced and all(
        user.attributes["kind"].value == "output" for arena in arenas
        if arena.properties["pool"].root == name for user in arena.results[0].users()))}
    assert report.static_bytes == sum(pools.values())
    pooled = [op for op in ops if op.name == "buffer.view"
              and getattr(op.operands[0], "op", None) is not None
              and op.operands[0].op.name == "memory.arena"]
    allocs = [op for op in ops if op.name == "buffer.alloc"]
    # a pooled buffer has a static size; a run-time one has not (else it would be planned)
    assert all(None not in op.results[0].type.shape for op in pooled)
    assert all(None in op.results[0].type.shape for op in allocs)
    if report.plan == "specialized":
        assert report.dynamic_bytes == 0 and report.allocations == 0 and report.frees == 0
        assert not allocs
    else:
        assert report.allocations == len(allocs) - in_place_outputs > 0
        assert report.frees == sum(op.name == "buffer.dealloc" for op in ops)
    copied_in = stats.allocations - len(pools) - report.allocations
    assert stats.bytes_allocated == report.static_bytes + report.dynamic_bytes + (
        stats.io_bytes if copied_in else 0)


def run_checked(session, model, feeds, what="", outputs=None):
    result = session.run(feeds, outputs)
    model.check(result, feeds, what)
    in_place = sum(result[n] is a for n, a in (outputs or {}).items()) \
        if session.last_stats.io_copy_bytes == 0 else 0
    assert_no_double_allocation(session, in_place)
    return result


# -- ONE's cases --------------------------------------------------------------------------------

def test_a_no_shape_ever_set(ocr):
    session = Session(ocr.module)
    for width, hit in ((40, False), (64, False), (40, True)):
        run_checked(session, ocr, line(width, width), f"A width {width}")
        report = session.last_stats
        assert report.plan == "specialized" and report.cache_hit is hit
        assert report.signature == ((1, 1, 32, width),)
        assert report.io_copy_bytes == 0 and report.dynamic_bytes == 0
        assert report.static_bytes > 0
    assert (session.stats.plan_cache_hits, session.stats.plan_cache_misses) == (1, 2)


def test_b_shape_set_before_prepare(ocr):
    session = Session(ocr.module)
    session.set_input_shape("image", (1, 1, 32, 48))
    session.prepare()
    assert session.stats.plan_cache_misses == 1 and session.cached_signatures == [((1, 1, 32, 48),)]
    run_checked(session, ocr, line(48), "B")
    assert session.last_stats.cache_hit is True and session.last_stats.compile_seconds == 0
    assert (session.stats.plan_cache_hits, session.stats.plan_cache_misses) == (1, 1)
    with pytest.raises(BindingError, match="set to"):
        session.run(line(56))
    with pytest.raises(BindingError, match="does not fit"):
        session.set_input_shape("image", (1, 3, 32, 48))


def test_c_shape_set_after_prepare(ocr):
    session = Session(ocr.module)
    session.prepare()            # shapes unknown: the dynamic plan
    assert session.stats.compiles == 1 and not session.cached_signatures
    session.set_input_shape("image", (1, 1, 32, 56))
    run_checked(session, ocr, line(56), "C")
    assert session.last_stats.plan == "specialized" and session.last_stats.cache_hit is False
    run_checked(session, ocr, line(56, 1), "C again")
    assert session.last_stats.cache_hit is True


def test_c_without_specialization_runs_the_dynamic_plan(ocr):
    session = Session(ocr.module, specialize=False)
    session.prepare()
    session.set_input_shape("image", (1, 1, 32, 56))
    for width in (56, 72):
        session.set_input_shape("image", (1, 1, 32, width))
        run_checked(session, ocr, line(width), f"dynamic width {width}")
        report = session.last_stats
        assert report.plan == "dynamic" and report.cache_hit is None
        assert report.dynamic_bytes > 0 and report.allocations > 0
        assert report.frees == report.allocations - 1   # the output is returned, not freed
    assert session.stats.compiles == 1


def test_d_shape_changes_before_every_run(ocr):
    session = Session(ocr.module, cache_size=2)
    session.prepare()
    widths = [40, 48, 40, 56, 48, 56]
    hits = [False, False, True, False, False, True]
    for width, hit in zip(widths, hits):
        session.set_input_shape("image", (1, 1, 32, width))
        run_checked(session, ocr, line(width, width), f"D width {width}")
        assert session.last_stats.cache_hit is hit, width
        assert session.last_stats.dynamic_bytes == 0
    # LRU of 2: 56 evicted 48, then 48 evicted 40
    assert session.cached_signatures == [((1, 1, 32, 48),), ((1, 1, 32, 56),)]
    stats = session.stats
    assert (stats.plan_cache_hits, stats.plan_cache_misses, stats.plan_cache_evictions) == (2, 4, 2)


def test_e_one_shape_before_prepare_another_after(ocr):
    session = Session(ocr.module)
    session.set_input_shape("image", (1, 1, 32, 40))
    session.prepare()
    session.set_input_shape("image", (1, 1, 32, 64))
    run_checked(session, ocr, line(64), "E")
    assert session.last_stats.cache_hit is False
    assert session.last_stats.signature == ((1, 1, 32, 64),)
    session.set_input_shape("image", (1, 1, 32, 40))
    run_checked(session, ocr, line(40), "E back")
    assert session.last_stats.cache_hit is True   # the plan prepare made
    assert (session.stats.plan_cache_hits, session.stats.plan_cache_misses) == (1, 2)


def test_transformer_at_several_sequence_lengths(minilm):
    session = Session(minilm.module, cache_size=3)
    sizes = [(1, 16), (2, 9), (1, 16), (2, 5), (2, 9)]
    for index, (batch, seq) in enumerate(sizes):
        feeds = M.minilm_inputs(batch, seq, vocab=100, seed=index, padded=min(3, seq - 1))
        run_checked(session, minilm, feeds, f"minilm {batch}x{seq}")
        assert session.last_stats.dynamic_bytes == 0
    assert (session.stats.plan_cache_hits, session.stats.plan_cache_misses) == (2, 3)
    dynamic = Session(minilm.module, specialize=False)
    for index, (batch, seq) in enumerate(sizes[:2]):
        feeds = M.minilm_inputs(batch, seq, vocab=100, seed=index)
        run_checked(dynamic, minilm, feeds, f"minilm dynamic {batch}x{seq}")
        assert dynamic.last_stats.plan == "dynamic"


def test_dynamic_batch_resnet(resnet):
    rng = np.random.default_rng(3)
    for specialize in (True, False):
        session = Session(resnet.module, specialize=specialize)
        for batch in (1, 3):
            feeds = {"input": rng.standard_normal((batch, 3, 24, 24)).astype(np.float32)}
            run_checked(session, resnet, feeds, f"resnet batch {batch} {specialize}")
            report = session.last_stats
            assert (report.dynamic_bytes == 0) is specialize
            assert report.io_copy_bytes == 0


def test_clone_prints_the_same_and_shares_weights(minilm):
    from palimpsest.backends.numpy.session import clone_op
    from palimpsest.ir.printer import print_ir

    copy = clone_op(minilm.module)
    assert print_ir(copy) == print_ir(minilm.module)
    old = [op for op in minilm.module.walk() if op.name == "graph.constant"]
    new = [op for op in copy.walk() if op.name == "graph.constant"]
    assert old and len(old) == len(new) and all(a is not b for a, b in zip(old, new))
    assert all(a.properties["value"] is b.properties["value"] for a, b in zip(old, new))


def test_session_from_onnx_and_pal_paths(ocr, tmp_path):
    from palimpsest.ir.printer import print_ir

    onnx.save(ocr.proto, tmp_path / "ocr.onnx")
    (tmp_path / "ocr.pal").write_text(print_ir(ocr.module))
    for path in (tmp_path / "ocr.onnx", str(tmp_path / "ocr.pal")):
        session = Session(path)
        run_checked(session, ocr, line(40), str(path))


# -- zero-copy I/O ---------------------------------------------------------------------------------

def test_inputs_and_outputs_in_place(ocr):
    session = Session(ocr.module)
    feeds = line(48, 7)
    before = feeds["image"].copy()
    expected = session.run(feeds)["probabilities"].copy()
    assert session.last_stats.io_copy_bytes == 0
    out = np.full(expected.shape, -1.0, np.float32)
    result = run_checked(session, ocr, feeds, "outputs in place", {"probabilities": out})
    assert result["probabilities"] is out
    np.testing.assert_array_equal(out, expected)
    assert session.last_stats.io_copy_bytes == 0 and session.last_stats.run_stats.io_bytes == 0
    np.testing.assert_array_equal(feeds["image"], before)   # never written
    assert feeds["image"].flags.writeable


def test_one_counted_copy_otherwise(ocr):
    session = Session(ocr.module)
    base = np.random.default_rng(5).standard_normal((1, 1, 32, 96)).astype(np.float32)
    strided = base[:, :, :, ::2]                       # non-contiguous: one copy in
    assert not strided.flags.c_contiguous
    run_checked(session, ocr, {"image": strided}, "non-contiguous input")
    assert session.last_stats.io_copy_bytes == strided.nbytes
    as_f64 = {"image": strided.astype(np.float64)}     # another dtype: an error, or
    with pytest.raises(BindingError, match="float64"):
        session.run(as_f64)
    session.cast_inputs = True                          # one counted conversion
    result = session.run(as_f64)
    session.cast_inputs = False
    ocr.check(result, {"image": np.ascontiguousarray(strided)}, "float64 input")
    assert session.last_stats.io_copy_bytes == strided.nbytes
    raw = np.zeros(strided.nbytes + 1, np.uint8)       # misaligned: one copy in
    misaligned = np.frombuffer(raw.data, np.float32, strided.size, 1).reshape(strided.shape)
    misaligned[...] = strided
    assert not misaligned.flags.aligned
    run_checked(session, ocr, {"image": misaligned}, "misaligned input")
    assert session.last_stats.io_copy_bytes == strided.nbytes
    shape = (12, 1, 12)                                # a strided output: one copy out
    holder = np.zeros(shape[:-1] + (24,), np.float32)
    out = holder[:, :, ::2]
    result = run_checked(session, ocr, {"image": np.ascontiguousarray(strided)}, "strided out",
                         {"probabilities": out})
    assert result["probabilities"] is out and out.any()
    assert session.last_stats.io_copy_bytes == out.nbytes


def test_outputs_in_place_on_the_dynamic_plan(ocr):
    session = Session(ocr.module, specialize=False)
    out = np.zeros((10, 1, 12), np.float32)
    result = run_checked(session, ocr, line(40, 2), "dynamic, in place", {"probabilities": out})
    assert result["probabilities"] is out
    assert session.last_stats.io_copy_bytes == 0


CHAIN = """
func.func @main(%x: tensor<?x16xf32>, %b: tensor<16xf32>) -> (tensor<?x16xf32> {palimpsest.name = "y"}) {
  %r = graph.relu %x : tensor<?x16xf32>
  %y = graph.add %r, %b : (tensor<?x16xf32>, tensor<16xf32>) -> tensor<?x16xf32>
  func.return %y : tensor<?x16xf32>
}
"""


def test_chaining_two_sessions_copies_nothing():
    first = Session(parse(CHAIN, "chain.pal"))
    second = Session(parse(CHAIN.replace("graph.relu", "graph.exp"), "chain2.pal"))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 16)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    y = first.run({"x": x, "b": b})["y"]
    z = second.run({"x": y, "b": b})["y"]
    np.testing.assert_allclose(z, np.exp(np.maximum(x, 0) + b) + b, rtol=1e-6)
    assert first.last_stats.io_copy_bytes == 0 and second.last_stats.io_copy_bytes == 0
    # through the caller's own buffers, too
    middle = np.empty((6, 16), np.float32)
    final = np.empty((6, 16), np.float32)
    first.run({"x": x, "b": b}, {"y": middle})
    second.run({"x": middle, "b": b}, {"y": final})
    np.testing.assert_allclose(final, z, rtol=1e-6)
    assert first.last_stats.io_copy_bytes == 0 and second.last_stats.io_copy_bytes == 0
    assert first.stats.io_copy_bytes == 0 and second.stats.io_copy_bytes == 0


BIG = """
func.func @main(%x: tensor<2560x1024xf32>) -> (tensor<2560x1024xf32> {palimpsest.name = "y"}) {
  %y = graph.relu %x : tensor<2560x1024xf32>
  func.return %y : tensor<2560x1024xf32>
}
"""


def test_a_callers_output_array_is_not_allocated_too():
    session = Session(parse(BIG, "big.pal"))
    x = np.random.default_rng(2).standard_normal((2560, 1024)).astype(np.float32)
    session.run({"x": x})                 # no array given: the result lives in the plan's pool
    alone = session.last_stats
    assert alone.static_bytes >= x.nbytes == 10 * 2**20
    y = np.full_like(x, -1.0)
    result = session.run({"x": x}, outputs={"y": y})
    report = session.last_stats
    assert result["y"] is y and report.io_copy_bytes == 0
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    # the output's 10 MiB are the caller's: its pool slot is not allocated as well
    assert report.static_bytes == alone.static_bytes - y.nbytes
    assert report.run_stats.bytes_allocated == alone.run_stats.bytes_allocated - y.nbytes
    assert report.run_stats.peak_bytes < y.nbytes


def test_output_aliasing_an_input_is_copied_not_bound():
    session = Session(parse(CHAIN, "chain.pal"))
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    b = np.ones(16, np.float32)
    expected = np.maximum(x, 0) + b
    session.run({"x": x, "b": b}, {"y": x})       # the caller asks to overwrite x
    np.testing.assert_allclose(x, expected, rtol=1e-6)
    assert session.last_stats.io_copy_bytes == x.nbytes


def test_errors(ocr):
    session = Session(ocr.module)
    with pytest.raises(BindingError, match="unknown input 'nope'"):
        session.set_input_shape("nope", (1,))
    with pytest.raises(BindingError, match="missing input 'image'"):
        session.run({})
    with pytest.raises(BindingError, match="unknown output 'nope'"):
        session.run(line(40), {"nope": np.zeros(1, np.float32)})


# -- palimpsest-run ----------------------------------------------------------------------------------

def test_palimpsest_run_shape_repeat_stats(ocr, tmp_path, capsys):
    from palimpsest.tools import run as run_tool

    onnx.save(ocr.proto, tmp_path / "ocr.onnx")
    argv = [str(tmp_path / "ocr.onnx"), "--random-inputs", "--shape", "image=1x1x32x40",
            "--repeat", "3", "--stats", "--output-dir", str(tmp_path / "out")]
    assert run_tool.main(argv) == 0
    printed = capsys.readouterr().out
    assert "probabilities: float32 [10, 1, 12]" in printed
    assert "plan cache: 3 hits, 1 misses" in printed  # prepare compiled, 3 runs hit
    assert "dynamic bytes: 0 (0 allocations, 0 frees)" in printed
    assert "I/O bytes copied: 0" in printed
    x = np.random.default_rng(0).standard_normal((1, 1, 32, 40)).astype(np.float32)
    ocr.check({"probabilities": np.load(tmp_path / "out" / "probabilities.npy")},
              {"image": x}, "palimpsest-run")


def test_planned_ir_runs_as_it_is():
    from palimpsest.passes.pass_manager import PassManager, parse_pipeline

    model = Model(onnx.load(ROOT / "examples" / "tiny_cnn.onnx"))
    planned = import_onnx(model.proto)
    PassManager(parse_pipeline("default")).run(planned)
    session = Session(planned)
    assert not session.specialize
    x = {"x": np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    out = np.empty((1, 4), np.float32)
    result = session.run(x, {"logits": out})
    model.check(result, x, "planned IR")
    assert result["logits"] is out and session.last_stats.io_copy_bytes == 0
    assert session.last_stats.dynamic_bytes == 0 and session.last_stats.static_bytes > 0
