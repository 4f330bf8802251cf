"""The pattern rewriter and greedy driver (passes/rewrite.py, ir/patterns.py), and the
two passes built on it: canonicalize (graph patterns in dialects/graph/canonicalize.py)
and fold-constants, checked against the reference executor on small ONNX models."""

from __future__ import annotations

import pytest

from palimpsest.dialects.test import EffectOp, PureOp
from palimpsest.ir import attributes as A
from palimpsest.ir.parser import parse
from palimpsest.ir.patterns import M, PatternRewriter, RewritePattern, Rule, V, pattern, rules
from palimpsest.ir.printer import print_ir
from palimpsest.ir.verifier import verify
from palimpsest.passes.pass_manager import PassManager, parse_pipeline
from palimpsest.passes.rewrite import GreedyRewriteDriver, apply_patterns_greedily

# ---------------------------------------------------------------------------
# Driver semantics, on the test dialect


def _module(body: str, args: str = "%x: i32"):
    text = f"func.func @f({args}) {{\n{body}\n  func.return\n}}"
    module = parse(text, "<test>")
    verify(module)
    return module


def _ops(module, name=None):
    return [op for op in module.walk() if name is None or op.name == name]


def _kind(op):
    attr = op.attributes.get("kind")
    return attr.value if attr is not None else None


def _kind_is(*kinds):
    return lambda op: _kind(op) in kinds


class SetKind(RewritePattern):
    """test.pure {kind = a} → {kind = b}, in place."""

    root = "test.pure"

    def __init__(self, old, new):
        self.old, self.new = old, new

    def match_and_rewrite(self, op, rewriter):
        if _kind(op) != self.old:
            return False
        rewriter.notify_modified(op)
        op.attributes["kind"] = A.StringAttr(self.new)
        return True


def test_fixpoint_is_reached_and_reported():
    module = _module('  %a = test.pure %x {kind = "a"} : (i32) -> i32\n'
                     '  test.effect %a : (i32) -> ()')
    driver = GreedyRewriteDriver([SetKind("a", "b"), SetKind("b", "c")])
    assert driver.run(module) is True
    stats = driver.stats
    assert stats.converged and stats.stop_reason == "fixpoint"
    # a→b and b→c in the first iteration (the modified op is revisited), then one
    # iteration that changes nothing
    assert stats.iterations == 2
    assert stats.rewrites == 2 and stats.by_pattern == {"SetKind": 2}
    assert [_kind(op) for op in _ops(module, "test.pure")] == ["c"]


def test_no_patterns_converge_at_once():
    module = _module('  %a = test.pure %x : (i32) -> i32\n  test.effect %a : (i32) -> ()')
    driver = GreedyRewriteDriver([])
    assert driver.run(module)
    assert driver.stats.iterations == 1 and not driver.stats.changed


class Sneaky(RewritePattern):
    """Changes the op behind the rewriter's back (so the driver does not revisit it in
    the same iteration) and always says it changed something: never a fixpoint."""

    root = "test.pure"

    def match_and_rewrite(self, op, rewriter):
        count = op.attributes.get("n", A.IntegerAttr(0)).value
        op.attributes["n"] = A.IntegerAttr(count + 1)
        return True


def test_iteration_cap_stops_and_reports():
    module = _module('  %a = test.pure %x : (i32) -> i32\n  test.effect %a : (i32) -> ()')
    driver = GreedyRewriteDriver([Sneaky()], max_iterations=3)
    assert driver.run(module) is False
    assert driver.stats.stop_reason == "iteration limit"
    assert driver.stats.iterations == 3
    assert _ops(module, "test.pure")[0].attributes["n"].value == 3
    assert apply_patterns_greedily(module, [Sneaky()], max_iterations=1) is False


def test_patterns_that_undo_each_other_hit_the_rewrite_limit():
    module = _module('  %a = test.pure %x {kind = "a"} : (i32) -> i32\n'
                     '  test.effect %a : (i32) -> ()')
    driver = GreedyRewriteDriver([SetKind("a", "b"), SetKind("b", "a")], max_rewrites=50)
    assert driver.run(module) is False
    assert driver.stats.stop_reason == "rewrite limit"
    assert driver.stats.rewrites == 50 and driver.stats.iterations == 1


def test_max_iterations_must_be_positive():
    with pytest.raises(ValueError):
        GreedyRewriteDriver([], max_iterations=0)


def _replace_x_by_z(rewriter, op):
    return rewriter.create(PureOp, list(op.operands), [r.type for r in op.results],
                           attributes={"kind": A.StringAttr("z")})


def _mark_done(rewriter, op):
    rewriter.set_property(op, "done", A.UnitAttr())  # any in-place change
    return True


WORKLIST_RULES = rules(
    (M("test.pure", where=_kind_is("x")), _replace_x_by_z),
    (M("test.pure", M("test.pure", where=_kind_is("z")), where=lambda op: "done" not in
       op.properties), _mark_done),
)


@pytest.mark.parametrize("top_down", [True, False])
def test_worklist_revisits_users_of_replaced_ops(top_down):
    """Bottom-up, the user is visited before its operand is replaced: it matches only
    because the replacement puts it back on the worklist, in the same iteration."""
    module = _module('  %a = test.pure %x {kind = "x"} : (i32) -> i32\n'
                     '  %b = test.pure %a {kind = "y"} : (i32) -> i32\n'
                     '  test.effect %b : (i32) -> ()')
    driver = GreedyRewriteDriver(WORKLIST_RULES, top_down=top_down)
    assert driver.run(module)
    assert driver.stats.iterations == 2
    assert driver.stats.by_pattern == {"_replace_x_by_z": 1, "_mark_done": 1}
    kinds = [(_kind(op), "done" in op.properties) for op in _ops(module, "test.pure")]
    assert kinds == [("z", False), ("y", True)]


def test_dead_ops_are_erased_transitively_but_effects_stay():
    module = _module('  %a = test.pure %x : (i32) -> i32\n'
                     '  %b = test.pure %a : (i32) -> i32\n'
                     '  %c = test.pure %b : (i32) -> i32\n'
                     '  %d = test.pure %x : (i32) -> i32\n'
                     '  test.effect %d : (i32) -> ()\n'
                     '  %u = test.op %x : (i32) -> i32')
    driver = GreedyRewriteDriver([])
    assert driver.run(module)
    # c dies first (top-down order visits a, b before c is gone: they are revisited
    # when c drops its use), all in one iteration
    assert driver.stats.erased == 3
    assert driver.stats.iterations == 2
    assert [op.name for op in _ops(module)][2:] == ["test.pure", "test.effect", "test.op",
                                                     "func.return"]


def test_erase_dead_can_be_turned_off():
    module = _module('  %a = test.pure %x : (i32) -> i32')
    assert apply_patterns_greedily(module, [], erase_dead=False)
    assert len(_ops(module, "test.pure")) == 1


def test_replacement_leaves_the_old_producer_dead_and_erased():
    module = _module('  %a = test.pure %x {kind = "x"} : (i32) -> i32\n'
                     '  %b = test.pure %a {kind = "drop"} : (i32) -> i32\n'
                     '  test.effect %b : (i32) -> ()')
    forward = Rule(M("test.pure", V("v"), where=_kind_is("drop")), lambda rewriter, op, v: v)
    driver = GreedyRewriteDriver([forward])
    assert driver.run(module)
    assert driver.stats.rewrites == 1 and driver.stats.erased == 0
    effect = _ops(module, "test.effect")[0]
    assert _kind(effect.operands[0].op) == "x"
    # a replacement takes over the printed name of what it replaces when it has none
    assert "%a = test.pure" in print_ir(module)


# ---------------------------------------------------------------------------
# Matchers and rules


def test_matcher_binds_ops_values_and_checks_operand_counts():
    module = _module('  %a = test.pure %x {kind = "p"} : (i32) -> i32\n'
                     '  %b = test.pure %a, %x {kind = "q"} : (i32, i32) -> i32\n'
                     '  test.effect %b : (i32) -> ()')
    b = _ops(module, "test.pure")[1]
    bindings = {}
    assert M("test.pure", M("test.pure", V("x"), bind="inner"), V("y"), bind="outer").match_op(
        b, bindings)
    assert bindings["outer"] is b and bindings["inner"].results[0] is b.operands[0]
    assert bindings["x"] is bindings["y"]  # both are %x
    # the same name bound twice must be the same value
    assert M("test.pure", M("test.pure", V("x")), V("x")).match_op(b, {})
    assert not M("test.pure", V("x"), V("x")).match_op(b, {})
    assert not M("test.pure", V()).match_op(b, {})            # two operands, not one
    assert M("test.pure", V(), ...).match_op(b, {})            # ... allows more
    assert M(("test.op", "test.pure")).match_op(b, {})
    assert not M("test.pure", where=_kind_is("p")).match_op(b, {})
    assert M("test.pure", M("test.pure", one_use=True), V()).match_op(b, {})
    # an operand that is a block argument does not match an op matcher
    assert not M("test.pure", M(), V()).match_op(_ops(module, "test.pure")[0], {})


def test_one_use():
    module = _module('  %a = test.pure %x : (i32) -> i32\n'
                     '  test.effect %a : (i32) -> ()\n'
                     '  test.effect %a : (i32) -> ()')
    a = _ops(module, "test.pure")[0]
    assert not M("test.pure", one_use=True).match_op(a, {})
    assert M("test.pure").match_op(a, {})


def test_function_pattern_and_type_checked_replacement():
    module = _module('  %a = test.pure %x : (i32) -> i64\n  test.effect %a : (i64) -> ()')

    @pattern("test.pure")
    def bad(op, rewriter):
        rewriter.replace_op(op, [op.operands[0]])  # i32 for an i64
        return True

    with pytest.raises(ValueError, match="of type i64 by a value of type i32"):
        apply_patterns_greedily(module, [bad])


def test_benefit_orders_patterns():
    module = _module('  %a = test.pure %x {kind = "a"} : (i32) -> i32\n'
                     '  test.effect %a : (i32) -> ()')
    low = SetKind("a", "low")
    high = SetKind("a", "high")
    high.benefit = 5
    driver = GreedyRewriteDriver([low, high])
    driver.run(module)
    assert _kind(_ops(module, "test.pure")[0]) == "high"


def test_unique_resource_keys():
    module = parse('func.func @f() -> tensor<2xf32> {\n'
                   '  %w = graph.constant {value = dense_resource<w> : tensor<2xf32>} : '
                   'tensor<2xf32>\n  func.return %w : tensor<2xf32>\n}\n'
                   '{-#\n  dialect_resources: {\n    builtin: {\n'
                   '      w: "0x040000000000803F00000040"\n    }\n  }\n#-}\n', "<test>")
    rewriter = PatternRewriter()
    rewriter.set_root(_ops(module, "graph.constant")[0])
    assert rewriter.unique_resource_key("w") == "w_1"
    assert rewriter.unique_resource_key("w") == "w_2"
    assert rewriter.unique_resource_key("a-b") == "a_b"


# ---------------------------------------------------------------------------
# The passes on ONNX models, against the reference executor

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from palimpsest.backends.reference.executor import run  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402
from palimpsest.passes.canonicalize import canonicalize, collect_canonicalization_patterns  # noqa: E402,E501
from palimpsest.passes.fold_constants import fold_constants  # noqa: E402

RNG = np.random.default_rng(7)


def _model(nodes, inputs, initializers, outputs=("y",), opset=17):
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
         for name, shape in inputs],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs],
        [numpy_helper.from_array(np.asarray(a), name) for name, a in initializers.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _func(module):
    return next(op for op in module.walk() if op.name == "func.func")


def _feeds(inputs):
    return {name: RNG.standard_normal(shape).astype(np.float32) for name, shape in inputs}


def _check(model_inputs, nodes, initializers, transform, outputs=("y",), exact=True,
           opset=17):
    """Run the model before and after `transform(module)`; returns the module."""
    module = import_onnx(_model(nodes, model_inputs, initializers, outputs, opset))
    feeds = _feeds(model_inputs)
    before = run(_func(module), feeds)
    transform(module)
    verify(module)
    after = run(_func(module), feeds)
    # the printed IR parses back and computes the same
    reparsed = parse(print_ir(module), "<printed>")
    again = run(_func(reparsed), feeds)
    for name in outputs:
        assert after[name].dtype == before[name].dtype
        assert after[name].shape == before[name].shape
        if exact:
            np.testing.assert_array_equal(after[name], before[name])
        else:
            np.testing.assert_allclose(after[name], before[name], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(again[name], after[name])
    return module


def _names(module):
    return [op.name for op in _func(module).entry_block.ops]


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _bn_params(channels):
    return {"s": _f32(channels), "bb": _f32(channels), "m": _f32(channels),
            "v": (RNG.random(channels) + 0.5).astype(np.float32)}


@pytest.mark.parametrize("bias,group,epsilon", [(True, 1, 1e-5), (False, 1, 1e-3),
                                                (True, 2, 1e-5)])
def test_batch_norm_folds_into_conv(bias, group, epsilon):
    conv_inputs = ["x", "w", "b"] if bias else ["x", "w"]
    nodes = [helper.make_node("Conv", conv_inputs, ["c"], pads=[1, 1, 1, 1], group=group,
                              strides=[2, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["y"],
                              epsilon=epsilon)]
    initializers = {"w": _f32(6, 4 // group, 3, 3), **_bn_params(6)}
    if bias:
        initializers["b"] = _f32(6)
    module = _check([("x", (2, 4, 9, 8))], nodes, initializers, canonicalize, exact=False)
    names = _names(module)
    assert "graph.batch_norm" not in names and names.count("graph.conv") == 1
    assert names.count("graph.constant") == 2


def test_batch_norm_fold_exact_to_1e_5_on_a_deeper_model():
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["n1"]),
             helper.make_node("Relu", ["n1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"]),
             helper.make_node("BatchNormalization", ["c2", "s", "bb", "m", "v"], ["y"])]
    initializers = {"w1": _f32(8, 3, 3, 3), "w2": _f32(8, 8, 1, 1), "b2": _f32(8),
                    **_bn_params(8)}
    module = _check([("x", (1, 3, 16, 16))], nodes, initializers, canonicalize, exact=False)
    assert "graph.batch_norm" not in _names(module)


def test_batch_norm_not_folded_when_conv_result_is_shared():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["y"]),
             helper.make_node("Relu", ["c"], ["z"])]
    module = _check([("x", (1, 2, 4, 4))], nodes, {"w": _f32(3, 2, 1, 1), **_bn_params(3)},
                    canonicalize, outputs=("y", "z"))
    assert "graph.batch_norm" in _names(module)


def test_data_movement_patterns_are_exact():
    shape = np.array([4, 6], dtype=np.int64)
    flat = np.array([24], dtype=np.int64)
    axes = np.array([1], dtype=np.int64)
    nodes = [
        helper.make_node("Identity", ["x"], ["i"]),
        helper.make_node("Dropout", ["i"], ["d"]),
        helper.make_node("Cast", ["d"], ["c"], to=TensorProto.FLOAT),
        helper.make_node("Transpose", ["c"], ["t1"], perm=[0, 2, 1]),
        helper.make_node("Transpose", ["t1"], ["t2"], perm=[2, 0, 1]),
        helper.make_node("Transpose", ["t2"], ["t3"], perm=[1, 0, 2]),
        helper.make_node("Reshape", ["t3", "flat"], ["r1"]),
        helper.make_node("Reshape", ["r1", "shape"], ["r2"]),
        helper.make_node("Unsqueeze", ["r2", "axes"], ["u"]),
        helper.make_node("Squeeze", ["u", "axes"], ["q"]),
        helper.make_node("Flatten", ["q"], ["y"]),
    ]
    module = _check([("x", (2, 3, 4))], nodes, {"shape": shape, "flat": flat, "axes": axes},
                    canonicalize)
    names = _names(module)
    assert names.count("graph.reshape") == 1
    for gone in ("graph.identity", "graph.dropout", "graph.cast", "graph.transpose",
                 "graph.squeeze", "graph.unsqueeze", "graph.flatten"):
        assert gone not in names, names


def test_transposes_that_cancel_disappear():
    nodes = [helper.make_node("Transpose", ["x"], ["a"], perm=[1, 2, 0]),
             helper.make_node("Transpose", ["a"], ["b"], perm=[2, 0, 1]),
             helper.make_node("Relu", ["b"], ["y"])]
    module = _check([("x", (2, 3, 4))], nodes, {}, canonicalize)
    assert _names(module) == ["graph.relu", "func.return"]


@pytest.mark.parametrize("outer", [[0, 3, 1, 2], [0, 3, 2, 1], [2, 0, 3, 1]])
def test_transposes_through_a_concat_are_exact(outer):
    """An NHWC export's skip join (keras2onnx's U-Nets): both inputs transposed alike,
    concatenated, transposed again: the concat moves before the transposes."""
    nodes = [helper.make_node("Transpose", ["a"], ["ta"], perm=[0, 2, 3, 1]),
             helper.make_node("Transpose", ["b"], ["tb"], perm=[0, 2, 3, 1]),
             helper.make_node("Concat", ["ta", "tb"], ["c"], axis=-1),
             helper.make_node("Transpose", ["c"], ["y"], perm=outer)]
    module = _check([("a", (1, 2, 4, 5)), ("b", (1, 3, 4, 5))], nodes, {}, canonicalize)
    expected = ["graph.concat", "func.return"] if outer == [0, 3, 1, 2] else \
        ["graph.concat", "graph.transpose", "func.return"]
    assert _names(module) == expected


@pytest.mark.parametrize("equation, a, b, left", [
    ("btgi,gih->btgh", (1, 2, 4, 8), (4, 8, 5), False),   # DeepFilterNet's grouped linear
    ("fi,fij->j", (3, 4), (3, 4, 6), False),              # its inverse DFT
    ("bhqd,bhkd->bhqk", (2, 3, 4, 8), (2, 3, 5, 8), False),
    ("ij,jk->ki", (3, 4), (4, 5), False),
    ("ij,kl->ijkl", (2, 3), (4, 5), False),
    ("i,i->", (5,), (5,), False),
    ("ii,i->i", (3, 3), (3,), True),                      # a diagonal: stays
    ("ij,j->", (3, 4), (4,), True),                       # i summed in one operand
])
def test_two_operand_einsum_becomes_a_matmul(equation, a, b, left):
    nodes = [helper.make_node("Einsum", ["a", "b"], ["y"], equation=equation)]
    module = _check([("a", a), ("b", b)], nodes, {}, canonicalize, exact=False)
    names = _names(module)
    assert ("graph.einsum" in names) == left, names
    assert left or "graph.matmul" in names


def test_fold_constants_matches_the_reference():
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]),
             helper.make_node("Transpose", ["s"], ["t"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "t"], ["y"])]
    module = _check([("x", (3, 5))], nodes, {"a": _f32(4, 5), "b": _f32(4, 5)},
                    fold_constants)
    assert _names(module) == ["graph.constant", "graph.matmul", "func.return"]


def test_fold_constants_large_results_become_resources():
    nodes = [helper.make_node("Mul", ["a", "b"], ["p"]),
             helper.make_node("Add", ["x", "p"], ["y"])]
    module = _check([("x", (64, 64))], nodes, {"a": _f32(64, 64), "b": _f32(64, 64)},
                    fold_constants)
    constant = next(op for op in module.walk() if op.name == "graph.constant")
    attr = constant.properties["value"]
    assert isinstance(attr, A.DenseResourceAttr) and attr.blob.data is not None
    assert attr.blob.key not in ("a", "b")


def test_fold_constants_respects_max_elements():
    nodes = [helper.make_node("Mul", ["a", "b"], ["p"]),
             helper.make_node("Add", ["x", "p"], ["y"])]
    module = _check([("x", (8, 8))], nodes, {"a": _f32(8, 8), "b": _f32(8, 8)},
                    lambda m: fold_constants(m, max_elements=63))
    assert "graph.mul" in _names(module)


def test_fold_then_canonicalize_pipeline_with_options():
    passes = parse_pipeline("fold-constants{max-elements=100},canonicalize{max-iterations=3}")
    assert [p.spelling() for p in passes] == ["fold-constants{max-elements=100}",
                                              "canonicalize{max-iterations=3}"]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Mul", ["s0", "two"], ["s"]),
             helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["y"])]
    params = _bn_params(4)
    initializers = {"w": _f32(4, 2, 3, 3), "s0": params.pop("s"),
                    "two": np.full(4, 2, np.float32), **params}
    module = _check([("x", (1, 2, 6, 6))], nodes, initializers,
                    lambda m: PassManager(passes).run(m), exact=False)
    assert _names(module) == ["graph.constant", "graph.constant", "graph.conv", "func.return"]


def test_canonicalize_collects_patterns_once_per_op():
    patterns = collect_canonicalization_patterns()
    assert len(patterns) == len({id(p) for p in patterns})
    roots = {p.root for p in patterns}
    assert {"graph.identity", "graph.batch_norm", "graph.transpose", "graph.reshape"} <= roots


def test_test_convergence_option():
    from palimpsest.ir.diagnostics import DiagnosticError
    from palimpsest.passes.canonicalize import Canonicalize

    module = _module('  %a = test.pure %x : (i32) -> i32\n  test.effect %a : (i32) -> ()')
    EffectOp.canonicalization_patterns = [Sneaky()]  # any op class can contribute
    Sneaky.root = "test.effect"
    try:
        with pytest.raises(DiagnosticError, match="did not converge"):
            Canonicalize(max_iterations=2, test_convergence=True).apply(module)
        Canonicalize(max_iterations=2).apply(module)  # not an error without the option
    finally:
        del EffectOp.canonicalization_patterns
        Sneaky.root = "test.pure"


def test_canonicalize_keeps_numpy_out_of_startup():
    import subprocess
    import sys

    code = ("import sys; from palimpsest.passes import load_all; load_all(); "
            "import palimpsest.dialects.graph.canonicalize; "
            "print('numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def _gather_model(data_nodes, initializers, index_shape, axis):
    """Gather(`data` (made by data_nodes from the initializers), ids) with ids an int64
    input."""
    nodes = data_nodes + [helper.make_node("Gather", ["data", "ids"], ["y"], axis=axis)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, index_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(a), name) for name, a in initializers.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("axis,scale_shape,index_shape", [
    (0, (5, 1), (2, 3)),      # per-row scales (an embedding table), negative ids
    (1, (1, 4), (3,)),        # per-column scales, gathered along the columns
    (0, (4,), (2,)),          # scales broadcast from the right: used as they are
    (-1, (5, 4), (2, 2)),     # full-shape operand, negative axis
])
def test_gather_moves_before_dequantization(axis, scale_shape, index_shape):
    """gather(cast(q) * s + z, ids) → gather picks first, the dequantization runs on the
    picked rows: bit-identical to the table dequantized whole."""
    q = RNG.integers(-128, 128, (5, 4)).astype(np.int8)
    initializers = {"q": q, "s": _f32(*scale_shape), "z": _f32(4)}
    nodes = [helper.make_node("Cast", ["q"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["f", "s"], ["w"]),
             helper.make_node("Add", ["w", "z"], ["data"])]
    module = import_onnx(_gather_model(nodes, initializers, index_shape, axis))
    extent = q.shape[axis]
    ids = RNG.integers(-extent, extent, index_shape).astype(np.int64)
    before = run(_func(module), {"ids": ids})
    canonicalize(module)
    verify(module)
    after = run(_func(module), {"ids": ids})
    np.testing.assert_array_equal(after["y"], before["y"])
    names = _names(module)
    assert names.index("graph.gather") < names.index("graph.cast"), names
    assert names[-2] == "graph.add"      # the last op before the return


def test_gather_of_elementwise_kept_when_not_of_constants_or_shared():
    nodes = [helper.make_node("Cast", ["q"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["f", "f"], ["data"]),
             helper.make_node("Gather", ["data", "ids"], ["y"]),
             helper.make_node("ReduceSum", ["data"], ["z"])]
    q = RNG.integers(-128, 128, (5, 4)).astype(np.int8)
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, (2,))],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "z")],
        [numpy_helper.from_array(q, "q")])
    module = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    canonicalize(module)
    names = _names(module)
    assert names.index("graph.mul") < names.index("graph.gather")   # data is shared
    # data computed from a function input: gathering first would not save a table pass
    module = import_onnx(_model([helper.make_node("Relu", ["x"], ["data"]),
                                 helper.make_node("Gather", ["data", "i"], ["y"])],
                                [("x", (5, 4))], {"i": np.array([1, 0])}))
    canonicalize(module)
    names = _names(module)
    assert names.index("graph.relu") < names.index("graph.gather")


def _box_indices(box, data_shape):
    """ScatterND indices spelling out every coordinate of `box` ([(start, size)] per
    indexed axis), as PyTorch exports a slice assignment."""
    grid = np.stack(np.meshgrid(*(np.arange(s, s + n) for s, n in box), indexing="ij"), -1)
    return grid.astype(np.int64)


@pytest.mark.parametrize("data, box, negative, left", [
    ((1, 4, 6, 3), [(0, 1), (0, 4), (2, 3), (0, 3)], False, False),  # the middle of axis 2
    ((3, 2, 4), [(0, 1)], False, False),                            # the head of axis 0
    ((3, 2, 4), [(2, 1)], True, False),                             # the tail, counted back
    ((2, 5), [(0, 2), (0, 5)], False, False),                       # all of it: the updates
    ((4, 4), [(1, 2), (1, 2)], False, True),                        # two partial axes: stays
])
def test_scatter_nd_of_a_box_becomes_slices_and_a_concat(data, box, negative, left):
    indices = _box_indices(box, data)
    if negative:
        indices = indices - np.array(data[:len(box)])
    updates = indices.shape[:-1] + data[len(box):]
    nodes = [helper.make_node("ScatterND", ["x", "i", "u"], ["y"])]
    module = _check([("x", data), ("u", updates)], nodes, {"i": indices}, canonicalize)
    names = _names(module)
    assert ("graph.scatter_nd" in names) == left, names
    assert left or "graph.slice" in names or names == ["func.return"]


def test_scatter_nd_not_a_box_or_reducing_stays():
    """Indices out of row-major order, or a reduction: the scatter is kept."""
    shuffled = [helper.make_node("ScatterND", ["x", "i", "u"], ["y"])]
    module = _check([("x", (4, 3)), ("u", (2, 3))], shuffled,
                    {"i": np.array([[2], [1]], np.int64)}, canonicalize)
    assert "graph.scatter_nd" in _names(module)
    adding = [helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction="add")]
    module = _check([("x", (4, 3)), ("u", (1, 3))], adding,
                    {"i": np.array([[1]], np.int64)}, canonicalize, opset=16)
    assert "graph.scatter_nd" in _names(module)


def _layer_norm_parts(axes, square="pow", eps_first=False, gamma=True, beta=True,
                      exponent=2.0):
    """A layer norm written out op by op, as PyTorch exports nn.LayerNorm before opset
    17 (ReduceMean's axes an attribute, opset 13)."""
    h = helper.make_node
    nodes = [h("ReduceMean", ["x"], ["mean"], axes=axes),
             h("Sub", ["x", "mean"], ["d"]),
             h("Pow", ["d", "two"], ["sq"]) if square == "pow" else h("Mul", ["d", "d"], ["sq"]),
             h("ReduceMean", ["sq"], ["var"], axes=axes),
             h("Add", ["eps", "var"] if eps_first else ["var", "eps"], ["ve"]),
             h("Sqrt", ["ve"], ["std"]),
             h("Div", ["d", "std"], ["n" if gamma or beta else "y"])]
    if gamma:
        nodes.append(h("Mul", ["g", "n"], ["gn" if beta else "y"]))
    if beta:
        nodes.append(h("Add", ["gn" if gamma else "n", "b"], ["y"]))
    return nodes


@pytest.mark.parametrize("shape, axes, kwargs, fused", [
    ((2, 5, 16), [-1], {}, True),
    ((2, 3, 4, 5), [2, 3], {"square": "mul", "eps_first": True}, True),   # two trailing dims
    ((3, 8), [-1], {"gamma": False}, True),
    ((3, 8), [-1], {"gamma": False, "beta": False}, True),
    ((2, 4, 6), [1], {}, False),                  # not the trailing dims
    ((2, 4, 6), [-1], {"exponent": 3.0}, False),  # not a square
])
def test_written_out_layer_norm_becomes_one_op(shape, axes, kwargs, fused):
    exponent = kwargs.pop("exponent", 2.0)
    first = min(a % len(shape) for a in axes)
    normalized = tuple(shape[a] if a % len(shape) in [b % len(shape) for b in axes] else 1
                       for a in range(first, len(shape)))
    initializers = {"two": np.array(exponent, np.float32), "eps": np.array(1e-5, np.float32),
                    "g": _f32(*normalized), "b": _f32(*normalized)}
    nodes = _layer_norm_parts(axes, exponent=exponent, **kwargs)
    used = {i for n in nodes for i in n.input}
    initializers = {k: v for k, v in initializers.items() if k in used}
    module = _check([("x", shape)], nodes, initializers, canonicalize, exact=False, opset=13)
    names = _names(module)
    assert ("graph.layer_norm" in names) == fused, names
    if fused:   # the whole chain, scale and bias included, is one op
        assert not {"graph.div", "graph.mul", "graph.add", "graph.reduce_mean"} & set(names)
