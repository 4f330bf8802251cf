"""The buffer level on the numpy backend: bufferize → insert-deallocs → numpy arenas.

1. Same answers: every real model (small variants of examples/onnx_models.py; dynamic ones
   at two sizes) and every ONNX node case give the graph level's outputs at the buffer
   level, with poisoning on, the buffer IR printed and parsed back on the way.
2. Stats: peak ≤ bytes allocated; in-place reuse lowers the bytes allocated; a relu/add
   chain runs with zero hidden copies inside one buffer.
3. Poisoning catches planted lifetime bugs (a dealloc too early; a pooled view read after
   its liveness), which give the right numbers without it.
4. Binding, errors and palimpsest-run's --level/--stats/--poison.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")

from palimpsest.backends.binding import BindingError, find_function  # noqa: E402
from palimpsest.backends.numpy import RunStats, run, run_with_stats  # noqa: E402
from palimpsest.backends.numpy.arena import POISON_BYTE  # noqa: E402
from palimpsest.backends.reference.executor import run as run_graph  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402
from palimpsest.dialects.graph.naming import ONNX_TO_GRAPH  # noqa: E402
from palimpsest.ir.diagnostics import DiagnosticError  # noqa: E402
from palimpsest.ir.parser import parse  # noqa: E402
from palimpsest.ir.printer import print_ir  # noqa: E402
from palimpsest.ir.verifier import verify  # noqa: E402
from palimpsest.passes.bufferize import bufferize  # noqa: E402
from palimpsest.passes.pass_manager import PassManager, parse_pipeline  # noqa: E402

import example_models  # noqa: E402  (test/unit, on sys.path: conftest.py)
from ir_checks import reparsed  # noqa: E402
import onnx_node_cases as nc  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
M = example_models.load()


def lower(module, pipeline="bufferize,insert-deallocs"):
    """Run `pipeline`, then print and parse the result back (checking the round trip)."""
    PassManager(parse_pipeline(pipeline)).run(module)
    return reparsed(module, "buffer.pal")


def graph_module(model):
    module = import_onnx(model)
    verify(module)
    PassManager(parse_pipeline("infer-shapes")).run(module)
    return module


def assert_same(got: dict, want: dict, what: str) -> None:
    assert list(got) == list(want), what
    for name, expected in want.items():
        actual = got[name]
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, (what, name)
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6, err_msg=f"{what}: {name}")


image = example_models.image
MODELS = {
    **example_models.small_model_cases(),
    "deep_mlp": lambda: (M.deep_mlp(nodes=60, hidden=16, tokens=4),
                         [image((b, 4, 16), s, "x") for s, b in ((6, 1), (7, 3))]),
    "tiny_cnn": lambda: (M.tiny_cnn(), [image((1, 3, 8, 8), 8, "x")]),
}


@pytest.fixture(scope="module")
def model_runs():
    """{model: (graph outputs per feed, buffer outputs and stats per feed, the same with
    in-place off)}, computed once."""
    results = {}
    for name, build in MODELS.items():
        model, feeds = build()
        graph = graph_module(model)
        expected = [run_graph(find_function(graph, None), f) for f in feeds]
        runs = {}
        for in_place in (True, False):
            module = lower(graph_module(model),
                           f"bufferize{{in-place={str(in_place).lower()}}},insert-deallocs")
            func = find_function(module, None)
            runs[in_place] = [run_with_stats(func, f, poison=True) for f in feeds]
        results[name] = (feeds, expected, runs)
    return results


# -- 1. same answers ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(MODELS))
def test_model_same_outputs_at_graph_and_buffer_level(name, model_runs):
    feeds, expected, runs = model_runs[name]
    for in_place, results in runs.items():
        for index, ((outputs, stats), want) in enumerate(zip(results, expected)):
            what = f"{name} run {index} (in-place={in_place})"
            assert_same(outputs, want, what)
            assert not any(np.isnan(a).any() for a in outputs.values()), what
            assert 0 < stats.peak_bytes <= stats.bytes_allocated, what


@pytest.mark.parametrize("name", list(MODELS))
def test_model_in_place_allocates_less(name, model_runs):
    _, _, runs = model_runs[name]
    for (_, with_reuse), (_, without) in zip(runs[True], runs[False]):
        assert with_reuse.bytes_allocated < without.bytes_allocated
        assert with_reuse.allocations < without.allocations
        assert with_reuse.peak_bytes <= without.peak_bytes


def test_models_free_what_they_allocate(model_runs):
    """After a run only the outputs are live: every activation was deallocated."""
    for name, (_, _, runs) in model_runs.items():
        for outputs, stats in runs[True]:
            out_bytes = sum(a.nbytes for a in outputs.values())
            assert stats.live_bytes == out_bytes, name


POLICY = nc.load_policy()
CASES = nc.case_names(set(ONNX_TO_GRAPH))


@pytest.mark.parametrize("name", CASES)
def test_node_case_through_the_buffer_level(name):
    case = nc.load_case(name)
    reason = nc.skip_reason(case, POLICY)
    if reason is not None:
        pytest.skip(reason)
    nc.check_case(case, POLICY, through_ir="buffer")


# -- 2. stats ----------------------------------------------------------------------------------

CHAIN = """
func.func @chain(%x: tensor<64x64xf32>, %b: tensor<64xf32>) -> tensor<64x64xf32> {
  %w = graph.constant {value = dense<0.5> : tensor<64x64xf32>} : tensor<64x64xf32>
  %m = graph.matmul %x, %w : tensor<64x64xf32>
  %r = graph.relu %m : tensor<64x64xf32>
  %a = graph.add %r, %b : (tensor<64x64xf32>, tensor<64xf32>) -> tensor<64x64xf32>
  %r2 = graph.relu %a : tensor<64x64xf32>
  %a2 = graph.add %r2, %x : tensor<64x64xf32>
  %s = graph.sub %a2, %b : (tensor<64x64xf32>, tensor<64xf32>) -> tensor<64x64xf32>
  %y = graph.mul %s, %s : tensor<64x64xf32>
  func.return %y : tensor<64x64xf32>
}
"""


def chain_inputs():
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((64, 64)).astype(np.float32),
            "b": rng.standard_normal(64).astype(np.float32)}


def test_chain_runs_in_one_buffer_with_no_hidden_copies():
    expected = run_graph(find_function(parse(CHAIN, "chain.pal"), None), chain_inputs())
    module = parse(CHAIN, "chain.pal")
    result = bufferize(module)
    assert result.in_place == 6 and result.allocs == 1
    module = lower(module, "insert-deallocs")
    outputs, stats = run_with_stats(find_function(module, None), chain_inputs(), poison=True)
    assert_same(outputs, expected, "chain")
    one = 64 * 64 * 4
    assert (stats.allocations, stats.bytes_allocated, stats.peak_bytes) == (1, one, one)
    assert stats.temporary_bytes == 0 and stats.view_copy_bytes == 0 and stats.copy_op_bytes == 0
    assert stats.io_bytes == one  # the output copied out; inputs bound without a copy
    assert stats.bytes_copied == one

    module = lower(parse(CHAIN, "chain.pal"), "bufferize{in-place=false},insert-deallocs")
    outputs, without = run_with_stats(find_function(module, None), chain_inputs(), poison=True)
    assert_same(outputs, expected, "chain without in-place")
    assert without.bytes_allocated == 7 * one and without.peak_bytes == 2 * one
    assert without.temporary_bytes == 0


def test_fallback_copies_are_counted():
    text = """
    func.func @f(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
      %s = graph.sigmoid %x : tensor<1x8xf32>
      func.return %s : tensor<1x8xf32>
    }"""
    module = lower(parse(text, "f.pal"))
    _, stats = run_with_stats(find_function(module, None), {"x": np.ones((1, 8), np.float32)})
    assert stats.temporary_bytes == 32 and stats.temporary_ops == {"graph.sigmoid": 1}
    assert stats.bytes_copied == 32 + 32


def test_inputs_are_never_changed():
    """inputs-as-activations lets the IR write an input: the backend copies it in first."""
    text = """
    func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
      %e = graph.exp %x : tensor<4xf32>
      %n = graph.neg %e : tensor<4xf32>
      func.return %n : tensor<4xf32>
    }"""
    x = np.arange(4, dtype=np.float32)
    for option, copied in (("", False), ("{inputs-as-activations}", True)):
        module = lower(parse(text, "f.pal"), f"bufferize{option},insert-deallocs")
        writes_input = "buffer.compute %x, %x" in print_ir(module)
        assert writes_input == copied
        outputs, stats = run_with_stats(find_function(module, None), {"x": x}, poison=True)
        np.testing.assert_allclose(outputs["result0"], -np.exp(np.arange(4, dtype=np.float32)))
        np.testing.assert_array_equal(x, np.arange(4, dtype=np.float32))
        assert stats.io_bytes == (32 if copied else 16)


# -- 3. poisoning ------------------------------------------------------------------------------

EARLY_DEALLOC = """
func.func @f(%x: buffer<8xf32>) -> buffer<8xf32> {
  %a = buffer.alloc {kind = "activation"} : buffer<8xf32>
  buffer.compute %x, %a {op = "graph.exp", operandSegmentSizes = array<i32: 1, 1>} : buffer<8xf32>, buffer<8xf32>
  buffer.dealloc %a : buffer<8xf32>
  %y = buffer.alloc {kind = "output"} : buffer<8xf32>
  buffer.compute %a, %x, %y {op = "graph.add", operandSegmentSizes = array<i32: 2, 1>} : buffer<8xf32>, buffer<8xf32>, buffer<8xf32>
  func.return %y : buffer<8xf32>
}
"""


def test_poison_catches_a_dealloc_too_early():
    func = find_function(parse(EARLY_DEALLOC, "early.pal"), None)
    x = np.linspace(-1, 1, 8).astype(np.float32)
    lucky = run(func, {"x": x})["result0"]
    np.testing.assert_allclose(lucky, np.exp(x) + x, rtol=1e-6)  # stale memory, right answer
    poisoned = run(func, {"x": x}, poison=True)["result0"]
    assert np.isnan(poisoned).all()


def test_poison_integers_with_a_byte_pattern():
    text = EARLY_DEALLOC.replace("f32", "i32").replace('"graph.exp"', '"graph.neg"')
    func = find_function(parse(text, "early.pal"), None)
    x = np.arange(8, dtype=np.int32)
    np.testing.assert_array_equal(run(func, {"x": x})["result0"], np.zeros(8, np.int32))
    pattern = np.frombuffer(bytes([POISON_BYTE]) * 4, np.int32)[0]
    np.testing.assert_array_equal(run(func, {"x": x}, poison=True)["result0"], pattern + x)


POOLED = """
memory.pool @sram {alignment = 64, size = 128}
func.func @f(%x: buffer<2x4xf32>) -> (buffer<2x4xf32>, buffer<2x4xf32>) {
  %arena = memory.arena @sram : buffer<128xi8>
  %a = buffer.view %arena {offset = 0} : (buffer<128xi8>) -> buffer<2x4xf32>
  %b = buffer.view %arena {offset = 0} : (buffer<128xi8>) -> buffer<2x4xf32>
  %t = buffer.view %arena {offset = 64} : (buffer<128xi8>) -> buffer<4x2xf32, [1, 4]>
  buffer.compute %x, %a {op = "graph.exp", operandSegmentSizes = array<i32: 1, 1>} : buffer<2x4xf32>, buffer<2x4xf32>
  %y = buffer.alloc {kind = "output"} : buffer<2x4xf32>
  buffer.compute %a, %y {op = "graph.neg", operandSegmentSizes = array<i32: 1, 1>} : buffer<2x4xf32>, buffer<2x4xf32>
  %z = buffer.alloc {kind = "output"} : buffer<2x4xf32>
  buffer.compute %b, %x, %z {op = "graph.add", operandSegmentSizes = array<i32: 2, 1>} : buffer<2x4xf32>, buffer<2x4xf32>, buffer<2x4xf32>
  func.return %y, %z : buffer<2x4xf32>, buffer<2x4xf32>
}
"""


def test_pooled_view_poisoned_at_the_end_of_its_liveness():
    """%b shares %a's bytes and is read without being written (a planted plan bug): it
    sees %a's stale values without poisoning, NaN with it (poisoned after %a's last use)."""
    module = parse(POOLED, "pooled.pal")
    verify(module)
    func = find_function(module, None)
    x = np.linspace(-1, 1, 8).astype(np.float32).reshape(2, 4)
    outputs, stats = run_with_stats(func, {"x": x})
    np.testing.assert_allclose(outputs["result0"], -np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(outputs["result1"], np.exp(x) + x, rtol=1e-6)
    assert stats.allocations == 3 and stats.bytes_allocated == 128 + 2 * 32
    poisoned = run(func, {"x": x}, poison=True)
    np.testing.assert_allclose(poisoned["result0"], -np.exp(x), rtol=1e-6)
    assert np.isnan(poisoned["result1"]).all()


def test_strided_view_of_a_pool():
    text = """
    memory.pool @p {size = 64}
    func.func @f(%x: buffer<2x4xf32>) -> buffer<4x2xf32> {
      %arena = memory.arena @p : buffer<64xi8>
      %a = buffer.view %arena {offset = 0} : (buffer<64xi8>) -> buffer<2x4xf32>
      %t = buffer.view %arena {offset = 0} : (buffer<64xi8>) -> buffer<4x2xf32, [1, 4]>
      buffer.compute %x, %a {op = "graph.exp", operandSegmentSizes = array<i32: 1, 1>} : buffer<2x4xf32>, buffer<2x4xf32>
      %y = buffer.alloc {kind = "output"} : buffer<4x2xf32>
      buffer.copy %t, %y : buffer<4x2xf32, [1, 4]>, buffer<4x2xf32>
      func.return %y : buffer<4x2xf32>
    }"""
    module = parse(text, "strided.pal")
    verify(module)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    # no poison: %t reads bytes %a wrote, and views of a pool are distinct buffers (an
    # alias is a buffer.reshape of one view), so %a's end would poison them
    outputs, stats = run_with_stats(find_function(module, None), {"x": x})
    np.testing.assert_allclose(outputs["result0"], np.exp(x).T, rtol=1e-6)
    assert stats.copy_op_bytes == 32


# -- 4. binding, errors, the tool ----------------------------------------------------------------

def test_binding_errors_match_the_reference_executor():
    graph = parse(CHAIN, "chain.pal")
    buffers = lower(parse(CHAIN, "chain.pal"))
    good = chain_inputs()
    cases = [{"x": good["x"]}, {**good, "z": good["b"]}, {**good, "x": good["x"].astype(np.float64)},
             {**good, "b": good["b"][:3]}]
    for inputs in cases:
        with pytest.raises(BindingError) as at_graph:
            run_graph(find_function(graph, None), inputs)
        with pytest.raises(BindingError) as at_buffer:
            run(find_function(buffers, None), inputs)
        assert str(at_buffer.value) == str(at_graph.value)


def test_non_contiguous_input_is_copied_once():
    module = lower(parse(CHAIN, "chain.pal"))
    inputs = chain_inputs()
    inputs["x"] = np.asfortranarray(inputs["x"])
    outputs, stats = run_with_stats(find_function(module, None), inputs)
    assert stats.io_bytes == 2 * 64 * 64 * 4
    expected = run_graph(find_function(parse(CHAIN, "c.pal"), None), inputs)
    assert_same(outputs, expected, "fortran input")


@pytest.mark.parametrize("text, message", [
    ("""func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
          %y = graph.exp %x : tensor<4xf32>
          func.return %y : tensor<4xf32>
        }""", "cannot run 'graph.exp'"),
    ("""func.func @f(%x: buffer<4xf32>) {
          %a = buffer.alloc : buffer<4xf32>
          buffer.dealloc %a : buffer<4xf32>
          buffer.dealloc %a : buffer<4xf32>
          func.return
        }""", "frees a buffer twice"),
    ("""func.func @f(%x: buffer<4xf32>) -> buffer<?xf32> {
          %a = buffer.alloc {kind = "output"} : buffer<?xf32>
          func.return %a : buffer<?xf32>
        }""", "never written"),
    ("""func.func @f(%x: buffer<4xf32>) -> buffer<3xf32> {
          %s = buffer.constant {value = dense<[3]> : tensor<1xi64>} : buffer<1xi64>
          %a = buffer.alloc {kind = "output"} : buffer<3xf32>
          buffer.compute %x, %s, %a {op = "graph.reshape", operandSegmentSizes = array<i32: 2, 1>} : buffer<4xf32>, buffer<1xi64>, buffer<3xf32>
          func.return %a : buffer<3xf32>
        }""", "failed at run time"),
])
def test_run_time_errors_are_diagnostics(text, message):
    func = find_function(parse(text, "bad.pal"), None)
    with pytest.raises(DiagnosticError) as error:
        run(func, {"x": np.ones(4, np.float32)})
    assert message in str(error.value)


def test_an_op_without_a_kernel_is_a_diagnostic(monkeypatch):
    # every graph op has a reference kernel (test_graph_reference.py checks it): take one away
    from palimpsest.dialects.graph.reference import KERNELS

    monkeypatch.delitem(KERNELS, "graph.softsign")
    func = find_function(parse("""func.func @f(%x: buffer<4xf32>) -> buffer<4xf32> {
          %a = buffer.alloc {kind = "output"} : buffer<4xf32>
          buffer.compute %x, %a {op = "graph.softsign", operandSegmentSizes = array<i32: 1, 1>} : buffer<4xf32>, buffer<4xf32>
          func.return %a : buffer<4xf32>
        }""", "bad.pal"), None)
    with pytest.raises(DiagnosticError) as error:
        run(func, {"x": np.ones(4, np.float32)})
    assert "no reference implementation" in str(error.value)


def test_bufferize_rejects_unranked_tensors():
    text = """func.func @f(%x: tensor<*xf32>) -> tensor<*xf32> {
      %y = graph.exp %x : tensor<*xf32>
      func.return %y : tensor<*xf32>
    }"""
    with pytest.raises(DiagnosticError, match="unranked"):
        bufferize(parse(text, "u.pal"))


def test_palimpsest_run_levels_stats_and_poison(tmp_path, capsys):
    from palimpsest.tools import run as run_tool

    x = np.random.default_rng(9).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    model = str(ROOT / "examples" / "tiny_cnn.onnx")
    outs = {}
    for level in ("graph", "buffer", "kernel", "planned"):
        out_dir = tmp_path / level
        argv = [model, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", str(out_dir),
                "--level", level]
        if level != "graph":
            argv += ["--stats", "--poison"]
        assert run_tool.main(argv) == 0
        outs[level] = np.load(out_dir / "logits.npy")
        printed = capsys.readouterr().out.splitlines()
        assert printed[0] == "logits: float32 [1, 4]"
        if level != "graph":  # the output's values, the pools (tools/run.py), the counts
            assert printed[1].startswith("  min ")
            assert printed[2].startswith("pool " if level == "planned" else "memory: no planned")
            keys = [line.split(":")[0] for line in printed[-4:]]
            assert keys == ["allocations", "bytes allocated", "peak bytes", "bytes copied"]
            numbers = {k: int(line.split(":")[1].split()[0]) for k, line in zip(keys, printed[-4:])}
            assert 0 < numbers["peak bytes"] <= numbers["bytes allocated"]
    for level in ("buffer", "kernel", "planned"):
        np.testing.assert_allclose(outs[level], outs["graph"], rtol=1e-5, atol=1e-6)
    assert run_tool.main([model, "--random-inputs", "--level", "graph", "--stats"]) == 1
    assert "need a lowered level" in capsys.readouterr().err


def test_run_stats_summary():
    stats = RunStats(allocations=2, bytes_allocated=10, peak_bytes=8, copy_op_bytes=1,
                     temporary_bytes=2, view_copy_bytes=3, io_bytes=4)
    assert stats.bytes_copied == 10
    assert stats.summary().splitlines()[3].startswith("bytes copied: 10 (buffer.copy 1")
