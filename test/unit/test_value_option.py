"""`--value NAME=V` on palimpsest-plan and palimpsest-opt: a graph.if that an input's
value decides (Silero VAD's `sr`) is inlined before the pipeline with the functions a
Session uses at run time (passes/inline_branches.py), and the function is planned as one;
without the value, one line names the input and the --value to give. The parser and the
typing of values here, the real Silero VAD of the corpus (benchmarks/models.toml; skipped
only when it cannot be fetched) below; the CLI output is checked in
test/lit/tools/plan-value.pal."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from example_models import corpus_model
from palimpsest.ir.parser import parse
from palimpsest.tools import onnx_import, opt, plan
from palimpsest.tools.cli import UserError, parse_values, value_array


def _type(text: str):
    from palimpsest.dialects import load_all

    load_all()
    module = parse(f"func.func @f(%a: {text}) -> {text} {{\n  func.return %a : {text}\n}}\n")
    return next(iter(module.regions[0].block.ops)).type.inputs[0]


def test_parse_values():
    assert parse_values(["sr=16000", "m=1, 0,1"]) == {"sr": ["16000"], "m": ["1", "0", "1"]}
    with pytest.raises(UserError, match=re.escape("--value 'sr' must look like NAME=VALUE")):
        parse_values(["sr"])


def test_value_array_types_the_elements_by_the_argument():
    sr = value_array("sr", _type("tensor<i64>"), ["16000"])
    assert sr.dtype == np.int64 and sr.shape == () and sr == 16000
    mask = value_array("m", _type("tensor<3xi1>"), ["true", "0", "1"])
    assert mask.dtype == np.bool_ and mask.tolist() == [True, False, True]
    gain = value_array("g", _type("tensor<1x2xf32>"), ["0.5", "-1e3"])
    assert gain.dtype == np.float32 and gain.tolist() == [[0.5, -1000.0]]
    cases = [("tensor<i64>", ["1", "2"], "--value sr=1,2: input 'sr': tensor<i64> takes 1 "
                                         "value, got 2"),
             ("tensor<i64>", ["1.5"], "--value sr=1.5: input 'sr': expected an integer "
                                      "(tensor<i64>), got '1.5'"),
             ("tensor<i1>", ["yes"], "expected true, false, 1 or 0 (tensor<i1>), got 'yes'"),
             ("tensor<f32>", ["x"], "expected a number (tensor<f32>), got 'x'"),
             ("tensor<i8>", ["300"], "300 is out of the range of tensor<i8> [-128, 127]"),
             ("tensor<?xi64>", ["1"], "a value needs a tensor of static shape, not "
                                      "'tensor<?xi64>' (give its shape with --shape)")]
    for type_, texts, message in cases:
        with pytest.raises(UserError, match=re.escape(message)):
            value_array("sr", _type(type_), texts)


# -- Silero VAD: one If on `sr`, whose 8 kHz branch does not fit 16 kHz shapes --------------

GUARD = ("input 'sr' (tensor<i64>) decides a graph.if of @main: give its value with "
         "--value sr=VALUE")


@pytest.fixture(scope="module")
def silero(tmp_path_factory):
    pytest.importorskip("onnx")
    path, _ = corpus_model("silero_vad")
    pal = tmp_path_factory.mktemp("silero") / "silero_vad.pal"
    assert onnx_import.main([str(path), "-o", str(pal)]) == 0
    return pal


def _plan_json(argv, out, capsys) -> dict:
    assert plan.main(argv + ["--export", "json", "-o", str(out)]) == 0, \
        capsys.readouterr().err
    capsys.readouterr()
    return json.loads(out.read_text())


def test_silero_vad_plans_with_its_sample_rate(silero, tmp_path, capsys):
    shapes = ["--shape", "state=2x1x128"]
    for rate, window, branch in (("16000", 512, "then"), ("8000", 256, "else")):
        data = _plan_json([str(silero), "--shape", f"input=1x{window}", *shapes,
                           "--value", f"sr={rate}"], tmp_path / f"{rate}.json", capsys)
        fn = data["functions"][0]
        pools = {p["name"]: p["size"] for p in data["pools"]}
        assert fn["dynamic"] == [] and pools["activations"] > 0
        # one function, the branch the rate takes: its outputs (the probability, f32,
        # and the state, 2x1x128xf32) are the branch's values
        outputs = sorted((b["size"], b["name"]) for b in fn["buffers"]
                         if b["class"] == "output")
        assert [size for size, _ in outputs] == [4, 2 * 128 * 4]
        assert all(f"If_0_{branch}_branch" in name for _, name in outputs), outputs


def test_silero_vad_without_its_sample_rate_names_it(silero, capsys):
    # (without the value the plan stopped in infer-shapes on the 8 kHz branch)
    assert plan.main([str(silero), "--shape", "input=1x512", "-o", "-"]) == 1
    assert capsys.readouterr().err == f"palimpsest-plan: error: {GUARD}\n"
    assert plan.main([str(silero), "--value", "rate=16000"]) == 1
    assert capsys.readouterr().err == (
        "palimpsest-plan: error: --value rate=16000: unknown input 'rate' (the function "
        "takes: input, state, sr)\n")
    # palimpsest-opt: at the If, in place of infer-shapes' error in the 8 kHz branch
    assert opt.main([str(silero), "--shape", "input=1x512", "-p", "default"]) == 1
    assert capsys.readouterr().err.splitlines()[0] == (
        f"{silero}:5:5: error: 'graph.if' op is decided by the value of input 'sr' "
        f"(tensor<i64>): give it with --value sr=VALUE")


BY_SHAPE = """
func.func @main(%x: tensor<1x?xf32>) -> tensor<*xf32> {
  %s = graph.shape %x : (tensor<1x?xf32>) -> tensor<2xi64>
  %i = graph.constant {value = dense<1> : tensor<i64>} : tensor<i64>
  %d = graph.gather %s, %i : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %two = graph.constant {value = dense<2> : tensor<i64>} : tensor<i64>
  %c = graph.equal %d, %two : (tensor<i64>, tensor<i64>) -> tensor<i1>
  %r = graph.if %c ({
    %t = graph.tanh %x : tensor<1x?xf32>
    graph.yield %t : tensor<1x?xf32>
  }, {
    %q = graph.sigmoid %x : tensor<1x?xf32>
    graph.yield %q : tensor<1x?xf32>
  }) : (tensor<i1>) -> tensor<*xf32>
  func.return %r : tensor<*xf32>
}
"""


def test_an_if_the_shapes_decide_plans_once_they_are_given(tmp_path, capsys):
    pal = tmp_path / "by_shape.pal"
    pal.write_text(BY_SHAPE)
    assert plan.main([str(pal), "-o", str(tmp_path / "p.json")]) == 1
    assert capsys.readouterr().err.splitlines()[0] == (
        f"{pal}:8:3: error: 'graph.if' op is not decided before planning: its condition "
        f"depends on the shapes of input 'x' (tensor<1x?xf32>) (give them with --shape) or "
        f"on data; a plan is of one function, without control flow")
    data = _plan_json([str(pal), "--shape", "x=1x2"], tmp_path / "p.json", capsys)
    assert [b["location"] for b in data["functions"][0]["buffers"]] == [f"{pal}:9:5"]
