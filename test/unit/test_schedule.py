"""Memory-aware scheduling (issue 15): the plain algorithms on random seeded DAGs (valid,
never worse than file order, exact = brute force on small ones) and the
schedule-for-memory pass on IR (valid orders, effects kept, outputs unchanged with
poisoning on)."""

from __future__ import annotations

import random

import pytest

from example_models import assert_session_matches_onnxruntime, benchmark_module, corpus_model
from palimpsest.passes.planners.schedule import (
    SCHEDULERS, ScheduleProblem, cut_points, exact_schedule, is_valid_order, lower_bound,
    peak_of, schedule,
)


def random_problem(n, seed, effects=0.0):
    """A random DAG: each node makes one storage, reads one to three earlier ones, maybe
    in place of one of them, maybe with a workspace; a fraction of nodes have side
    effects and are chained in file order."""
    rng = random.Random(seed)
    preds, allocs, uses, sizes, inplace, workspace = [], [], [], {}, [], []
    last_effect = None
    for v in range(n):
        k = rng.randint(0, min(3, v))
        reads = set(rng.sample(range(max(0, v - 6), v), min(k, v - max(0, v - 6)))) if v else set()
        deps = set(reads)
        if rng.random() < effects:
            if last_effect is not None:
                deps.add(last_effect)
            last_effect = v
        preds.append(deps)
        allocs.append([v])
        sizes[v] = rng.choice((1, 2, 4, 8, 16, 32))
        uses.append(set(reads))
        entry = []
        if reads and rng.random() < 0.3:
            c = rng.choice(sorted(reads))
            sizes[v] = sizes[c]
            entry = [(sizes[v], (c,))]
        inplace.append(entry)
        workspace.append(rng.choice((0, 0, 0, 4)))
    return ScheduleProblem(preds, allocs, uses, sizes, inplace, workspace)


def brute_force(problem):
    best = None

    def visit(order, done):
        nonlocal best
        if len(order) == problem.n:
            peak = peak_of(problem, order)
            best = peak if best is None else min(best, peak)
            return
        for v in range(problem.n):
            if v not in done and problem.preds[v] <= done:
                done.add(v)
                order.append(v)
                visit(order, done)
                order.pop()
                done.discard(v)

    visit([], set())
    return best


@pytest.mark.parametrize("seed", range(60))
def test_exact_matches_brute_force_on_small_dags(seed):
    problem = random_problem(random.Random(seed).randint(1, 8), seed, effects=0.2)
    found = schedule(problem, "auto", time_budget=30)
    assert is_valid_order(problem, found.order)
    assert found.peak == peak_of(problem, found.order)
    assert found.proven
    assert found.peak == brute_force(problem)
    assert lower_bound(problem) <= found.peak


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("algorithm", ["auto", "list", "dfs", "post-order", "exact"])
def test_orders_are_valid_and_never_worse_than_file_order(seed, algorithm):
    problem = random_problem(40 + 10 * seed, seed, effects=0.15)
    found = schedule(problem, algorithm, time_budget=0.05)
    assert is_valid_order(problem, found.order)
    assert found.peak == peak_of(problem, found.order)
    assert found.peak <= peak_of(problem, range(problem.n))
    # the raw heuristics are valid orders too (schedule() may fall back to file order)
    if algorithm in SCHEDULERS:
        assert is_valid_order(problem, SCHEDULERS[algorithm](problem).order)


def test_chain_is_cut_everywhere_and_proven():
    n = 400
    problem = ScheduleProblem([{v - 1} if v else set() for v in range(n)],
                              [[v] for v in range(n)], [{v - 1} if v else set() for v in range(n)],
                              {v: 8 for v in range(n)})
    assert cut_points(problem) == list(range(n))
    found = exact_schedule(problem, time_budget=5)
    assert found.proven and found.peak == 16 and found.order == list(range(n))


def test_a_chain_is_answered_without_searching():
    # the only valid order: schedule() returns it, proven, without running the others
    n = 1000
    chain = ScheduleProblem([{v - 1} if v else set() for v in range(n)],
                            [[v] for v in range(n)], [{v - 1} if v else set() for v in range(n)],
                            {v: 8 for v in range(n)})
    found = schedule(chain)
    assert found.order == list(range(n)) and found.proven and found.peak == 16
    assert found.candidates == {"file-order": 16}
    # one node off the chain: the heuristics and the search run
    preds = [set(p) for p in chain.preds]
    uses = [set(u) for u in chain.uses]
    preds[5], uses[5] = {3}, {3}
    branched = ScheduleProblem(preds, chain.allocs, uses, chain.sizes)
    assert set(schedule(branched).candidates) == {"file-order", "list", "dfs", "post-order",
                                                  "exact"}


def test_exact_beats_file_order_on_two_branches():
    # 0 -> (1 -> 3), (2 -> 4): 1 and 2 are big, 3 and 4 small
    problem = ScheduleProblem([set(), {0}, {0}, {1}, {2}], [[0], [1], [2], [3], [4]],
                              [set(), {0}, {0}, {1}, {2}],
                              {0: 1, 1: 100, 2: 100, 3: 1, 4: 1}, pinned={3, 4})
    assert peak_of(problem, range(5)) == 201
    found = schedule(problem)
    assert found.peak == 102 and found.proven and found.order[:3] in ([0, 1, 3], [0, 2, 4])


def downset_dp(problem):
    """The least peak by dynamic programming over scheduled sets, written apart from the
    module: the best peak of a set is the least, over its nodes that nothing in it
    needs, of the best peak of the set without it and that node's live bytes then."""
    p = problem
    users = {}
    for v, used in enumerate(p.uses):
        for s in used:
            users.setdefault(s, set()).add(v)
    made = {s: v for v in range(p.n) for s in p.allocs[v]}

    def live_after(done):
        total = 0
        for s, size in p.sizes.items():
            born = s in p.initial or (s in made and made[s] in done)
            # (an initial storage nobody uses stays: nothing frees it)
            if born and (s in p.pinned or (users.get(s, set()) - done)
                         or (s in p.initial and s not in users)):
                total += size
        return total

    def during(v, done):
        cost = live_after(done) + p.workspace[v] + sum(p.sizes[s] for s in p.allocs[v])
        for nbytes, candidates in p.inplace[v]:
            if any(c not in p.pinned and users.get(c, set()) - done == {v}
                   for c in candidates):
                cost -= nbytes
        return cost

    best = {frozenset(): live_after(frozenset())}
    layer = {frozenset()}
    for _ in range(p.n):
        following = set()
        for done in layer:
            for v in range(p.n):
                if v not in done and p.preds[v] <= done:
                    new = done | {v}
                    peak = max(best[done], during(v, done))
                    if new not in best or peak < best[new]:
                        best[new] = peak
                    following.add(new)
        layer = following
    return best[frozenset(range(p.n))]


def mixed_problem(seed):
    """A small DAG with what `random_problem` lacks: nodes making zero or two storages,
    reads from any earlier storage, order-only edges, in-place candidates among several
    operands, pinned storages and storages live from the start."""
    rng = random.Random(seed)
    sizes, made, owner, count = {}, [], {}, 0
    initial = [f"in{k}" for k in range(rng.randint(0, 2))]
    for s in initial:
        sizes[s] = rng.choice((1, 4, 9))
        made.append(s)
    preds, allocs, uses, inplace, workspace = [], [], [], [], []
    for v in range(rng.randint(5, 13)):
        reads = set(rng.sample(made, min(len(made), rng.randint(0, 3))))
        deps = {owner[s] for s in reads if s in owner}
        if v and rng.random() < 0.2:
            deps.add(rng.randrange(v))
        out = []
        for _ in range(rng.choice((0, 1, 1, 1, 2))):
            sizes[count] = rng.choice((1, 2, 3, 5, 8, 13, 21))
            out.append(count)
            owner[count] = v
            made.append(count)
            count += 1
        entry = []
        if out and reads and rng.random() < 0.4:
            entry = [(sizes[out[0]], tuple(rng.sample(sorted(reads, key=str),
                                                      min(2, len(reads)))))]
        preds.append(deps)
        allocs.append(out)
        uses.append(reads)
        inplace.append(entry)
        workspace.append(rng.choice((0, 0, 2, 7)))
    pinned = set(rng.sample(range(count), min(count, rng.randint(0, 2))))
    return ScheduleProblem(preds, allocs, uses, sizes, inplace, workspace, pinned,
                           tuple(initial))


@pytest.mark.parametrize("seed", range(40))
def test_exact_matches_a_dynamic_program_on_medium_dags(seed):
    problem = random_problem(12 + seed % 6, 100 + seed, effects=0.1) if seed % 2 \
        else mixed_problem(seed)
    found = exact_schedule(problem, time_budget=30)
    assert is_valid_order(problem, found.order)
    assert found.proven
    assert found.peak == peak_of(problem, found.order) == downset_dp(problem)


@pytest.mark.parametrize("seed", range(3))
def test_long_parts_improved_by_windows_stay_valid(seed):
    # one part of 400 nodes (no cut point): windows, then the threshold search, both cut
    # short by the budget: the order is valid and no worse than the order it started from
    problem = random_problem(400, seed)
    problem.preds[0] = set()
    upper = min((SCHEDULERS[name](problem) for name in SCHEDULERS), key=lambda s: s.peak)
    found = exact_schedule(problem, time_budget=0.3, upper=upper)
    assert is_valid_order(problem, found.order)
    assert found.peak == peak_of(problem, found.order) <= upper.peak


# ---------------------------------------------------------------------------- the pass

def _bench():
    return benchmark_module("bench_scheduling")


def _topological(func) -> bool:
    seen = set(func.entry_block.args)
    for op in func.entry_block.ops:
        for inner in op.walk():
            for value in inner.operands:
                owner = value.owner
                if getattr(value, "op", None) is not None and owner.parent is func.entry_block \
                        and value not in seen:
                    return False
        seen.update(op.results)
    return True


@pytest.mark.parametrize("seed", range(4))
def test_pass_reorders_random_graphs_validly(seed):
    from palimpsest.ir.verifier import verify
    from palimpsest.passes.liveness import functions_of
    from palimpsest.passes.schedule_for_memory import build_problem, schedule_for_memory

    bench = _bench()
    module = bench._text_module(bench.random_dag(40, seed))
    func = functions_of(module)[0]
    before = peak_of(build_problem(func)[0], range(build_problem(func)[0].n))
    (result,) = schedule_for_memory(module, time_budget=0.2)
    verify(module)
    assert _topological(func)
    assert result.file_peak == before and result.peak <= before
    after = build_problem(func)[0]
    assert peak_of(after, range(after.n)) == result.peak


def test_effects_keep_their_order():
    from palimpsest.ir.parser import parse
    from palimpsest.passes.liveness import functions_of
    from palimpsest.passes.schedule_for_memory import schedule_for_memory

    text = """
func.func @f(%x: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %a = graph.relu %x : tensor<4x64xf32>
  "test.effect"() {n = 1} : () -> ()
  %p1 = graph.exp %a : tensor<4x64xf32>
  %p2 = graph.neg %a : tensor<4x64xf32>
  "test.effect"() {n = 2} : () -> ()
  %q1 = graph.tanh %p1 : tensor<4x64xf32>
  %q2 = graph.sigmoid %p2 : tensor<4x64xf32>
  %s = graph.add %q1, %q2 : tensor<4x64xf32>
  func.return %s : tensor<4x64xf32>
}
"""
    module = parse(text, "<t>", allow_unregistered=True)
    schedule_for_memory(module)
    ops = list(functions_of(module)[0].entry_block.ops)
    effects = [op.attributes["n"].value for op in ops if op.name == "test.effect"]
    assert effects == [1, 2]


def _run_both(module, feeds):
    from palimpsest.backends.binding import find_function
    from palimpsest.backends.numpy.session import Session
    from palimpsest.backends.reference.executor import run

    reference = run(find_function(module, None), feeds)
    session = Session(module.clone(), poison=True)
    return reference, session.run(feeds), session


@pytest.mark.parametrize("make", ["inception", "random"])
def test_reordered_models_match_the_reference_with_poison(make):
    np = pytest.importorskip("numpy")
    from palimpsest.passes.pass_manager import PassManager, parse_pipeline
    from palimpsest.passes.liveness import functions_of
    from palimpsest.passes.schedule_for_memory import schedules_of

    bench = _bench()
    text = bench.inception(2) if make == "inception" else bench.random_dag(60, 1)
    module = bench._text_module(text)
    probe = module.clone()
    PassManager(parse_pipeline("default"), verify_each=False).run(probe)
    assert any(r.reordered for r in schedules_of(functions_of(probe)[0])), \
        "the test needs a model the pass reorders"
    rng = np.random.default_rng(0)
    arg = functions_of(module)[0].entry_block.args[0]
    feeds = {"x": rng.standard_normal(arg.type.shape).astype(np.float32)}
    reference, got, _ = _run_both(module, feeds)
    for name, want in reference.items():
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5)


def test_reordered_corpus_model_matches_onnxruntime_with_poison():
    # a real model (Silero VAD, OpenVINO export, from the corpus of benchmarks/models.toml)
    # whose graph-level order the default pipeline changes: run with poisoning on (every
    # arena byte not yet written is NaN), twice (the second run reuses the plan), against
    # onnxruntime
    pytest.importorskip("numpy")
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from palimpsest.passes.schedule_for_memory import schedules_of

    name = "silero_vad_openvino"
    path, feeds = corpus_model(name)
    session = assert_session_matches_onnxruntime(path, feeds, name)
    (plan,) = session._cache.values()
    graph_level = schedules_of(plan.func)[0]
    assert graph_level.level == "graph" and graph_level.reordered, \
        "the test needs a corpus model the pass reorders"
    assert graph_level.peak < graph_level.file_peak


def test_session_replans_reuse_the_first_order():
    np = pytest.importorskip("numpy")
    from palimpsest.backends.binding import find_function
    from palimpsest.backends.numpy.session import Session
    from palimpsest.passes.schedule_for_memory import build_problem, schedules_of

    bench = _bench()
    module = bench._text_module(bench.random_dag(60, 1))
    session = Session(module, poison=True)
    arg = find_function(module, None).entry_block.args[0]
    feeds = {"x": np.random.default_rng(0).standard_normal(arg.type.shape).astype(np.float32)}
    first = {k: np.array(v) for k, v in session.run(feeds).items()}
    (plan,) = session._cache.values()
    graph_level = schedules_of(plan.func)[0]
    assert graph_level.level == "graph" and graph_level.reordered
    # the session's own graph-level function now has that order: its file order is the
    # scheduled one
    problem = build_problem(find_function(session._module, None))[0]
    assert peak_of(problem, range(problem.n)) == graph_level.peak
    # a re-plan searches nothing and computes the same outputs
    again = session._compile(plan.signature)
    assert schedules_of(again.func) == []
    second, _ = again.run(feeds, None)
    for name, want in first.items():
        np.testing.assert_allclose(second[name], want, rtol=1e-5, atol=1e-6)



def test_replans_cap_plan_memory_search():
    """The first compile plans with plan-memory's own budget; re-plans skip scheduling and
    cap the search at REPLAN_BUDGET (the greedy planners still run)."""
    from types import SimpleNamespace

    from palimpsest.passes.pass_manager import parse_pipeline
    from palimpsest.passes.schedule_for_memory import REPLAN_BUDGET, reuse_order

    bench = _bench()
    module = bench._text_module(bench.random_dag(20, 0))
    owner = SimpleNamespace()
    first, keep = reuse_order(owner, module, module.clone(), None, parse_pipeline("default"))
    assert keep is not None and [p.time_budget for p in first if p.name == "plan-memory"] \
        == [1.0]
    again, keep = reuse_order(owner, module, module.clone(), None, parse_pipeline("default"))
    assert keep is None and not any(p.name == "schedule-for-memory" for p in again)
    assert [p.time_budget for p in again if p.name == "plan-memory"] == [REPLAN_BUDGET]
    tight = parse_pipeline("default,plan-memory{time-budget=0.001}")
    again, _ = reuse_order(owner, module, module.clone(), None, tight)
    assert [p.time_budget for p in again if p.name == "plan-memory"] == [REPLAN_BUDGET, 0.001]


BRANCHES = """
func.func @main(%x: tensor<4x64xf32>) -> tensor<4x1xf32> {
  %a = graph.relu %x : tensor<4x64xf32>
  %w1 = graph.constant {value = dense<0.5> : tensor<64x256xf32>} : tensor<64x256xf32>
  %w2 = graph.constant {value = dense<0.25> : tensor<64x256xf32>} : tensor<64x256xf32>
  %v = graph.constant {value = dense<0.125> : tensor<256x1xf32>} : tensor<256x1xf32>
  %p1 = graph.matmul %a, %w1 : (tensor<4x64xf32>, tensor<64x256xf32>) -> tensor<4x256xf32>
  %p2 = graph.matmul %a, %w2 : (tensor<4x64xf32>, tensor<64x256xf32>) -> tensor<4x256xf32>
  %q1 = graph.matmul %p1, %v : (tensor<4x256xf32>, tensor<256x1xf32>) -> tensor<4x1xf32>
  %q2 = graph.matmul %p2, %v : (tensor<4x256xf32>, tensor<256x1xf32>) -> tensor<4x1xf32>
  %s = graph.add %q1, %q2 : tensor<4x1xf32>
  func.return %s : tensor<4x1xf32>
}
"""


def test_plan_tool_draws_both_orders(tmp_path):
    import xml.dom.minidom

    from palimpsest.tools import plan

    source = tmp_path / "branches.pal"
    source.write_text(BRANCHES)
    out = tmp_path / "orders.svg"
    assert plan.main([str(source), "--export", "svg", "--compare-schedule", "-o", str(out)]) == 0
    document = xml.dom.minidom.parse(str(out))
    orders = [s for s in document.getElementsByTagName("svg") if s.getAttribute("data-order")]
    assert [s.getAttribute("data-order") for s in orders] == ["file order", "scheduled order"]
    titles = [s.getElementsByTagName("title")[0].firstChild.data for s in orders]
    assert "@activations bound 9216 bytes" in titles[0]
    assert "@activations bound 5120 bytes" in titles[1]
    assert plan.main([str(source), "--export", "json", "--compare-schedule"]) == 1
