"""Tests of the interval memory planners, the plan checker and palimpsest-plan."""

from __future__ import annotations

import csv
import io
import itertools
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palimpsest.passes.planners import (
    ALGORITHMS,
    Interval,
    IntervalError,
    Plan,
    PlanError,
    check_plan,
    lower_bound,
    peak_live,
    plan_intervals,
    read_csv,
    read_csv_offsets,
    write_csv,
)
from palimpsest.passes.planners.exact import decide, granule, improve
from palimpsest.passes.planners.hill_climb import hill_climb
from palimpsest.passes.planners.problem import Problem
from palimpsest.passes.planners.search import Search
from palimpsest.passes.planners.synthetic import perfect_packing, random_program
from palimpsest.tools import plan as plan_tool

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "benchmarks" / "data"
GLOW = DATA / "glow-traces"


def glow_summary() -> dict[str, dict[str, str]]:
    with open(DATA / "glow-traces-summary.csv", newline="") as f:
        return {row["model"]: row for row in csv.DictReader(f)}


def glow(model: str) -> list[Interval]:
    return read_csv(GLOW / f"{model}.csv")


# Models on which greedy-by-size misses the bound (and Glow's own allocator on the
# three resnet*_v2.onnx), plus a few it solves.
GLOW_HARD = [
    "resnet50_v2.onnx",
    "resnet101_v2.onnx",
    "resnet50_v2.tflite",
    "mobilenet_v2_0.50_128.tflite",
]
GLOW_EASY = ["kws.onnx", "lenet_quant.tflite", "xception.tflite", "inception_v4.onnx"]


def small_instances(seed, count, sizes, n=(2, 6), latest_start=4, longest=3):
    """`count` seeded instances of a few short intervals, small enough for
    :func:`brute_force_peak`: n intervals, each starting by `latest_start`, living 1 to
    `longest` steps, its size one of `sizes`."""
    rng = random.Random(seed)
    for _ in range(count):
        ivs = []
        for i in range(rng.randint(*n)):
            s = rng.randint(0, latest_start)
            ivs.append(Interval(f"b{i}", s, s + rng.randint(1, longest), rng.choice(sizes)))
        yield ivs


def brute_force_peak(intervals: list[Interval]) -> int:
    """The optimal peak, by trying every order with first-fit placement.

    Independent of the planners' code. Exact because the optimal plan with the smallest
    sum of offsets, placed in offset order, is reproduced by first fit."""
    live = [iv for iv in intervals if iv.size > 0 and iv.end > iv.start]
    best = None
    for order in itertools.permutations(range(len(live))):
        placed: list[tuple[int, int, Interval]] = []
        peak = 0
        for k in order:
            iv = live[k]
            busy = sorted(
                (o, t) for o, t, other in placed if other.start < iv.end and iv.start < other.end
            )
            off = 0
            for o, t in busy:
                if off + iv.size <= o:
                    break
                off = max(off, t)
            placed.append((off, off + iv.size, iv))
            peak = max(peak, off + iv.size)
            if best is not None and peak >= best:
                break
        if best is None or peak < best:
            best = peak
    return best or 0


def naive_overlaps(intervals, offsets) -> set[frozenset[str]]:
    pairs = set()
    for a, b in itertools.combinations(intervals, 2):
        if a.size == 0 or b.size == 0:
            continue
        if a.start < b.end and b.start < a.end:
            oa, ob = offsets[a.id], offsets[b.id]
            if oa < ob + b.size and ob < oa + a.size:
                pairs.add(frozenset((a.id, b.id)))
    return pairs


# ----------------------------------------------------------------- lower bound


def test_lower_bound_is_peak_live_bytes_with_half_open_lifetimes():
    ivs = [Interval("a", 0, 3, 10), Interval("b", 3, 5, 7), Interval("c", 2, 4, 5)]
    # a and b never overlap (a ends at 3 when b starts); c overlaps both.
    assert lower_bound(ivs) == 15
    assert peak_live(ivs) == (15, 2)
    assert lower_bound([]) == 0
    assert lower_bound([Interval("z", 0, 5, 0), Interval("e", 4, 4, 100)]) == 0


def test_lower_bound_matches_glow_summary_for_all_79_models():
    summary = glow_summary()
    assert len(summary) == 79
    for model, row in summary.items():
        ivs = glow(model)
        assert len(ivs) == int(row["num_buffers"])
        assert lower_bound(ivs) == int(row["peak_live_lb_aligned"]), model


# ----------------------------------------------------------------- glow traces


def test_greedy_by_size_reaches_the_bound_on_70_of_79_glow_models():
    # TFLite's greedy-by-size reaches the bound on 70 of the 79 (data README).
    summary = glow_summary()
    hits = 0
    for model, row in summary.items():
        ivs = glow(model)
        plan = plan_intervals(ivs, "greedy-by-size")
        assert check_plan(ivs, plan.offsets) == []
        hits += plan.peak == int(row["peak_live_lb_aligned"])
    assert hits == 70


def test_auto_reaches_the_bound_on_all_79_glow_models():
    summary = glow_summary()
    for model, row in summary.items():
        ivs = glow(model)
        plan = plan_intervals(ivs, "auto", time_budget=5.0)
        assert check_plan(ivs, plan.offsets) == [], model
        assert plan.peak == int(row["peak_live_lb_aligned"]), model
        assert plan.optimal and plan.ratio == 1.0
        assert plan.algorithm.startswith("auto:")


@pytest.mark.parametrize("algorithm", ["hill-climb", "exact"])
@pytest.mark.parametrize("model", GLOW_HARD + GLOW_EASY)
def test_search_algorithms_reach_the_bound_on_glow_sample(algorithm, model):
    ivs = glow(model)
    lb = int(glow_summary()[model]["peak_live_lb_aligned"])
    plan = plan_intervals(ivs, algorithm, time_budget=5.0)
    assert check_plan(ivs, plan.offsets) == []
    assert plan.peak == lb
    assert plan.algorithm == algorithm


@pytest.mark.parametrize("model", GLOW_HARD)
def test_greedy_by_size_misses_the_bound_on_hard_glow_models(model):
    ivs = glow(model)
    row = glow_summary()[model]
    plan = plan_intervals(ivs, "greedy-by-size")
    assert check_plan(ivs, plan.offsets) == []
    assert plan.peak > plan.lower_bound == int(row["peak_live_lb_aligned"])
    assert plan.ratio > 1.0 and not plan.optimal
    plan = plan_intervals(ivs, "greedy-by-conflicts")
    assert check_plan(ivs, plan.offsets) == []
    assert plan.peak >= plan.lower_bound


def test_glow_allocator_misses_three_models_we_solve():
    summary = glow_summary()
    missed = [
        m
        for m, r in summary.items()
        if int(r["glow_allocateAll_mem"]) > int(r["peak_live_lb_aligned"])
    ]
    assert sorted(missed) == ["resnet101_v2.onnx", "resnet152_v2.onnx", "resnet50_v2.onnx"]
    for model in missed:
        plan = plan_intervals(glow(model), "auto", time_budget=5.0)
        assert plan.peak == int(summary[model]["peak_live_lb_aligned"])


# ----------------------------------------------------------------- random instances

interval_lists = st.lists(
    st.tuples(
        st.integers(0, 20),
        st.integers(0, 8),
        st.integers(0, 64),
        st.sampled_from([1, 1, 2, 4, 16]),
    ),
    max_size=14,
).map(
    lambda rows: [Interval(f"b{i}", s, s + d, z, a) for i, (s, d, z, a) in enumerate(rows)]
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ivs=interval_lists, alignment=st.sampled_from([1, 8]))
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_gives_valid_plans_on_random_instances(algorithm, ivs, alignment):
    plan = plan_intervals(ivs, algorithm, alignment=alignment, time_budget=0.05)
    assert set(plan.offsets) == {iv.id for iv in ivs}
    assert check_plan(ivs, plan.offsets, alignment=alignment) == []
    assert plan.lower_bound == lower_bound(ivs)
    assert plan.peak >= plan.lower_bound
    live = [iv for iv in ivs if iv.size and iv.end > iv.start]
    assert plan.peak == max((plan.offsets[iv.id] + iv.size for iv in live), default=0)
    for iv in ivs:
        assert plan.offsets[iv.id] % max(alignment, iv.alignment) == 0
    if plan.optimal:
        assert plan.peak == plan.lower_bound or algorithm in ("exact", "auto")


def test_exact_is_optimal_on_small_random_instances():
    for ivs in small_instances(7, 60, [1, 2, 3, 5, 8], n=(1, 6), longest=4):
        best = brute_force_peak(ivs)
        plan = plan_intervals(ivs, "exact", time_budget=10.0)
        assert check_plan(ivs, plan.offsets) == []
        assert plan.peak == best, ivs
        assert plan.optimal


@pytest.mark.parametrize("strategies", [("holes",), ("canonical",)])
def test_each_search_strategy_alone_decides_correctly(strategies):
    # equal sizes and lifetimes are common here, to exercise symmetry pruning
    for ivs in small_instances(11, 60, [2, 2, 3, 4], latest_start=3):
        best = brute_force_peak(ivs)
        problem = Problem(ivs)
        deadline = time.perf_counter() + 30
        below, status = decide(problem, best - 1, deadline, strategies=strategies)
        assert (below, status) == (None, "infeasible"), ivs
        offsets, status = decide(problem, best, deadline, strategies=strategies)
        assert status == "feasible"
        assert check_plan(ivs, problem.offsets_dict(offsets), capacity=best) == []


@pytest.mark.parametrize("skyline", [True, False])
def test_hole_search_decides_correctly_with_either_candidate_order(skyline):
    for ivs in small_instances(5 + skyline, 40, [2, 3, 3, 5]):
        assert_hole_search_decides(ivs, skyline=skyline)


def assert_hole_search_decides(ivs, **run_options):
    """One hole search finds no plan one byte below the brute-force optimum and a valid
    plan at it."""
    best = brute_force_peak(ivs)
    problem = Problem(ivs)
    far = time.perf_counter() + 30
    for capacity, fits in ((best - 1, False), (best, True)):
        search = Search(problem, capacity, far)
        local = search.run(search.ranks[0], 10**6, True, **run_options)
        assert (local is not None) == fits, ivs
        if fits:
            offsets = [0] * problem.n
            for k, g in enumerate(search.glob):
                offsets[g] = local[k]
            assert check_plan(ivs, problem.offsets_dict(offsets), capacity=best) == []


@pytest.mark.parametrize("energy", [True, False])
def test_hole_search_decides_correctly_with_and_without_energy_check(energy, monkeypatch):
    monkeypatch.setattr(Search, "energy", energy)
    for ivs in small_instances(11 + energy, 40, [1, 2, 3, 5], n=(3, 7)):
        assert_hole_search_decides(ivs)


def test_energy_check_prunes_on_tight_instances(monkeypatch):
    # Same answer, fewer nodes: the check only cuts branches that cannot succeed.
    ivs, _ = perfect_packing(120, capacity=256, horizon=30, seed=1, granule=8)
    problem = Problem(ivs)
    nodes = {}
    for energy in (False, True):
        monkeypatch.setattr(Search, "energy", energy)
        search = Search(problem, 256, time.perf_counter() + 60)
        assert search.run(search.ranks[0], 10**6, True) is not None
        nodes[energy] = search.nodes_total
    assert nodes[True] < nodes[False]


def test_granule_is_the_size_gcd_when_alignments_divide_it():
    ivs = [Interval("a", 0, 2, 24), Interval("b", 1, 3, 16), Interval("c", 0, 1, 0)]
    assert granule(Problem(ivs)) == 8
    assert granule(Problem(ivs, alignment=4)) == 8
    assert granule(Problem(ivs, alignment=16)) == 1  # 16 does not divide 8
    assert granule(Problem([Interval("a", 0, 2, 24), Interval("b", 1, 3, 25)])) == 1
    assert granule(Problem([])) == 1


@pytest.mark.parametrize("alignment", [1, 2, 4])
def test_exact_is_optimal_on_coarse_sizes(alignment):
    # sizes with a common factor: the search rounds capacities to it; proofs must hold
    for ivs in small_instances(alignment, 25, [6, 12, 18, 24], latest_start=3):
        plan = plan_intervals(ivs, "exact", alignment=alignment, time_budget=10.0)
        assert check_plan(ivs, plan.offsets, alignment=alignment) == []
        if alignment == 1 or 6 % alignment == 0:
            assert plan.peak == brute_force_peak(ivs), ivs
        assert plan.optimal


# ----------------------------------------------------------------- tight synthetic


@pytest.mark.parametrize("seed", range(6))
def test_perfect_packing_generator_is_tight(seed):
    ivs, offsets = perfect_packing(40, capacity=512, horizon=50, seed=seed, granule=8)
    assert len(ivs) == 40
    assert lower_bound(ivs) == 512
    assert check_plan(ivs, offsets, capacity=512, alignment=8) == []


@pytest.mark.parametrize("seed", range(6))
def test_auto_and_exact_solve_tight_synthetic_instances(seed):
    ivs, _ = perfect_packing(40, capacity=512, horizon=50, seed=seed, granule=8)
    for algorithm in ("exact", "auto"):
        plan = plan_intervals(ivs, algorithm, capacity=512, time_budget=10.0)
        assert check_plan(ivs, plan.offsets, capacity=512) == []
        assert plan.peak == 512 and plan.optimal


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_is_valid_and_bounded_on_tight_synthetic(algorithm):
    ivs, _ = perfect_packing(60, capacity=1024, horizon=80, seed=3, granule=8)
    plan = plan_intervals(ivs, algorithm, time_budget=0.3)
    assert check_plan(ivs, plan.offsets) == []
    assert 1024 <= plan.peak <= sum(iv.size for iv in ivs)


def test_hill_climb_improves_on_greedy_and_is_reproducible():
    ivs, _ = perfect_packing(50, capacity=1024, horizon=80, seed=5, granule=8)
    problem = Problem(ivs)
    greedy = plan_intervals(ivs, "greedy-by-size").peak
    far = time.perf_counter() + 60
    a = hill_climb(problem, far, seed=3, max_steps=150)
    b = hill_climb(problem, far, seed=3, max_steps=150)
    assert a == b
    assert problem.peak_of(a) <= greedy
    assert check_plan(ivs, problem.offsets_dict(a)) == []


def test_large_neighbourhood_search_keeps_plans_valid_and_never_worse():
    ivs, _ = perfect_packing(120, capacity=1024, horizon=100, seed=1, granule=8)
    problem = Problem(ivs)
    start = plan_intervals(ivs, "greedy-by-size")
    assert start.peak > 1024
    offsets = [start.offsets[iv.id] for iv in ivs]
    stats: dict = {}
    out = improve(problem, offsets, time.perf_counter() + 0.3, random.Random(1), stats)
    assert problem.peak_of(out) <= start.peak
    assert check_plan(ivs, problem.offsets_dict(out)) == []
    assert stats.get("lns_tries", 0) >= 1


def test_large_neighbourhood_search_raises_the_recursion_limit_it_needs():
    """The hole search recurses once per buffer placed: improve() raises Python's
    recursion limit as decide() does, and puts it back (GTCRN's ~600 buffers ran past
    the default 1000 frames in improve(): RecursionError out of plan-memory)."""
    import inspect

    ivs, _ = perfect_packing(120, capacity=1024, horizon=100, seed=1, granule=8)
    problem = Problem(ivs)
    start = plan_intervals(ivs, "greedy-by-size")
    offsets = [start.offsets[iv.id] for iv in ivs]
    old = sys.getrecursionlimit()
    tight = len(inspect.stack()) + 40  # too few frames for the search of 120 buffers
    sys.setrecursionlimit(tight)
    try:
        out = improve(problem, offsets, time.perf_counter() + 0.3, random.Random(1), {})
        assert sys.getrecursionlimit() == tight
    finally:
        sys.setrecursionlimit(old)
    assert problem.peak_of(out) <= start.peak
    assert check_plan(ivs, problem.offsets_dict(out)) == []


def test_greedy_scales_to_thousands_of_intervals():
    ivs = random_program(3000, seed=2)
    for algorithm in ("greedy-by-size", "greedy-by-conflicts"):
        plan = plan_intervals(ivs, algorithm)
        assert check_plan(ivs, plan.offsets) == []
        assert plan.ratio < 1.25
    # conflicts are found by a sweep, pairs only among overlapping lifetimes
    problem = Problem(ivs)
    pairs = sum(len(c) for c in problem.conflicts) // 2
    naive = sum(
        1 for a, b in itertools.combinations(ivs[:400], 2) if a.start < b.end and b.start < a.end
    )
    assert naive > 0 and pairs < len(ivs) * 200


# ----------------------------------------------------------------- alignment, capacity


def test_alignment_from_pool_and_from_intervals():
    ivs = [
        Interval("a", 0, 4, 10),
        Interval("b", 1, 5, 7, alignment=64),
        Interval("c", 2, 6, 30),
        Interval("d", 5, 9, 3),
    ]
    for algorithm in ALGORITHMS:
        plan = plan_intervals(ivs, algorithm, alignment=16, time_budget=0.2)
        assert check_plan(ivs, plan.offsets, alignment=16) == []
        assert plan.offsets["b"] % 64 == 0
        assert all(off % 16 == 0 for off in plan.offsets.values())
        assert plan.peak >= plan.lower_bound == 47


def test_capacity_too_small_for_the_lower_bound():
    ivs = [Interval("a", 0, 2, 600), Interval("b", 1, 3, 600)]
    with pytest.raises(PlanError) as err:
        plan_intervals(ivs, capacity=1024)
    assert "needs 1200 bytes, capacity is 1024" in str(err.value)
    assert not isinstance(err.value, ValueError)
    assert plan_intervals(ivs, capacity=1200).peak == 1200


def test_capacity_between_bound_and_greedy_result():
    ivs = glow("resnet50_v2.onnx")
    lb = lower_bound(ivs)
    with pytest.raises(PlanError, match=rf"needs {lb * 10 // 9} bytes, capacity is {lb}"):
        plan_intervals(ivs, "greedy-by-size", capacity=lb)
    plan = plan_intervals(ivs, "auto", capacity=lb, time_budget=5.0)
    assert check_plan(ivs, plan.offsets, capacity=lb) == []


def test_alignment_can_make_the_bound_unreachable():
    ivs = [Interval("a", 0, 2, 3), Interval("b", 1, 3, 3)]
    plan = plan_intervals(ivs, "exact", alignment=4, time_budget=2.0)
    assert plan.lower_bound == 6 and plan.peak == 7 and plan.optimal
    with pytest.raises(PlanError, match="needs 7 bytes, capacity is 6"):
        plan_intervals(ivs, alignment=4, capacity=6)


# ----------------------------------------------------------------- API edges


def test_empty_zero_size_and_empty_lifetime_buffers():
    plan = plan_intervals([])
    assert (plan.offsets, plan.peak, plan.lower_bound) == ({}, 0, 0)
    assert plan.ratio == 1.0 and plan.optimal
    ivs = [Interval("z", 0, 3, 0), Interval("e", 2, 2, 50), Interval("a", 0, 3, 8)]
    plan = plan_intervals(ivs)
    assert plan.offsets == {"z": 0, "e": 0, "a": 0}
    assert plan.peak == 8 and check_plan(ivs, plan.offsets) == []


@pytest.mark.parametrize(
    "ivs, message",
    [
        ([Interval("a", 0, 1, 4), Interval("a", 1, 2, 4)], "duplicate interval id 'a'"),
        ([Interval("a", 0, 1, -4)], "negative size -4"),
        ([Interval("a", 3, 1, 4)], "end 1 is before start 3"),
        ([Interval("a", 0, 1, 4, alignment=0)], "alignment 0 is below 1"),
        ([Interval("a", 0, 1.5, 4)], "end must be an integer"),
    ],
)
def test_malformed_intervals(ivs, message):
    with pytest.raises(IntervalError, match=message) as err:
        plan_intervals(ivs)
    assert isinstance(err.value, ValueError) and isinstance(err.value, PlanError)


def test_bad_arguments():
    ivs = [Interval("a", 0, 1, 4)]
    with pytest.raises(ValueError, match="unknown algorithm 'best'"):
        plan_intervals(ivs, "best")
    with pytest.raises(ValueError, match="alignment"):
        plan_intervals(ivs, alignment=0)
    with pytest.raises(ValueError, match="time_budget"):
        plan_intervals(ivs, time_budget=-1)


def test_plan_ratio():
    assert Plan({}, 150, 100, "x", 0.0, False).ratio == 1.5
    assert Plan({}, 0, 0, "x", 0.0, True).ratio == 1.0


def test_minimalloc_example_packs_into_12_bytes():
    ivs = read_csv(DATA / "input.12.csv")
    for algorithm in ALGORITHMS:
        plan = plan_intervals(ivs, algorithm, capacity=12)
        assert plan.peak == 12
        assert check_plan(ivs, plan.offsets, capacity=12) == []


# ----------------------------------------------------------------- checker


def test_checker_accepts_touching_buffers():
    ivs = [Interval("a", 0, 3, 4), Interval("b", 3, 6, 4), Interval("c", 0, 6, 4)]
    assert check_plan(ivs, {"a": 0, "b": 0, "c": 4}, capacity=8) == []


def test_checker_reports_overlap_with_both_ids_and_ranges():
    ivs = [Interval("x", 0, 4, 64), Interval("y", 2, 6, 64)]
    problems = check_plan(ivs, {"x": 0, "y": 32})
    assert len(problems) == 1
    msg = problems[0]
    assert "'x'" in msg and "'y'" in msg
    assert "[0, 4)" in msg and "[2, 6)" in msg  # lifetimes
    assert "[0, 64)" in msg and "[32, 96)" in msg  # byte ranges
    assert "bytes [32, 64)" in msg and "[2, 4)" in msg  # what they share


def test_checker_reports_misalignment_negative_capacity_missing_extra():
    ivs = [
        Interval("a", 0, 2, 8, alignment=8),
        Interval("b", 0, 2, 8),
        Interval("c", 5, 6, 8),
        Interval("d", 5, 6, 8),
    ]
    problems = check_plan(ivs, {"a": 12, "b": -8, "c": 100, "e": 0}, capacity=64, alignment=4)
    text = "\n".join(problems)
    assert "'a' at offset 12 is misaligned: offset must be a multiple of 8" in text
    assert "'b' has a negative offset -8" in text
    assert "'c' ends at byte 108, beyond capacity 64" in text
    assert "'d' has no offset" in text
    assert "unknown buffer 'e'" in text
    assert len(problems) == 5
    assert "misaligned" in check_plan([Interval("p", 0, 1, 4)], {"p": 2}, alignment=4)[0]
    assert "non-integer" in check_plan([Interval("p", 0, 1, 4)], {"p": 2.0})[0]


def test_checker_finds_every_overlap_among_many():
    # one big buffer over many small ones: the sweep must not stop at the first
    ivs = [Interval("big", 0, 10, 100)] + [Interval(f"s{i}", i, i + 1, 10) for i in range(5)]
    offsets = {"big": 0, **{f"s{i}": 10 * i for i in range(5)}}
    assert len(check_plan(ivs, offsets)) == 5


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 10), st.integers(1, 5), st.integers(0, 12), st.integers(0, 40)),
        max_size=12,
    )
)
def test_checker_matches_pairwise_check_on_random_plans(rows):
    ivs = [Interval(f"b{i}", s, s + d, z) for i, (s, d, z, _) in enumerate(rows)]
    offsets = {f"b{i}": o for i, (_, _, _, o) in enumerate(rows)}
    expected = naive_overlaps(ivs, offsets)
    problems = check_plan(ivs, offsets, max_problems=1000)
    found = set()
    for p in problems:
        ids = [iv.id for iv in ivs if f"'{iv.id}'" in p.split(":")[0]]
        found.add(frozenset(ids))
    assert found == expected


def test_checker_catches_a_corrupted_real_plan():
    ivs = glow("resnet18_v1.onnx")
    plan = plan_intervals(ivs)
    assert check_plan(ivs, plan.offsets) == []
    # move the largest buffer onto another one live at the same time
    big = max(ivs, key=lambda iv: iv.size)
    other = next(iv for iv in ivs if iv.id != big.id and iv.start < big.end and big.start < iv.end)
    bad = dict(plan.offsets, **{big.id: plan.offsets[other.id]})
    problems = check_plan(ivs, bad)
    assert problems and any(f"'{big.id}'" in p and f"'{other.id}'" in p for p in problems)


# ----------------------------------------------------------------- CSV


def test_csv_round_trip(tmp_path):
    ivs = [Interval("a", 0, 3, 100, 16), Interval("b", 2, 5, 7), Interval("c x", 5, 9, 40)]
    plan = plan_intervals(ivs, alignment=4)
    path = tmp_path / "out.csv"
    write_csv(path, ivs, plan.offsets)
    text = path.read_text()
    assert text.splitlines()[0] == "id,lower,upper,size,alignment,offset"
    assert read_csv(path) == ivs
    again, offsets = read_csv_offsets(path)
    assert again == ivs and offsets == plan.offsets
    buf = io.StringIO()
    write_csv(buf, ivs[1:], plan.offsets)
    assert buf.getvalue().splitlines()[0] == "id,lower,upper,size,offset"
    buf.seek(0)
    assert read_csv(buf) == ivs[1:]


def test_csv_columns_in_any_order_and_blank_lines(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("size, id ,upper,lower\n\n4,a,3,0\n8,b,5,1\n")
    assert read_csv(path) == [Interval("a", 0, 3, 4), Interval("b", 1, 5, 8)]


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("id,lower,upper\na,0,1\n", 1, "missing column 'size'"),
        ("id,lower,upper,size\na,0,1,4\nb,0,x,4\n", 3, "upper of 'b' is not an integer: 'x'"),
        ("id,lower,upper,size\na,3,3,4\n", 2, "lower 3 must be below upper 3"),
        ("id,lower,upper,size\na,0,3,-4\n", 2, "negative size -4"),
        ("id,lower,upper,size\na,0,3,4\na,1,2,4\n", 3, "duplicate id 'a' (first on line 2)"),
        ("id,lower,upper,size\na,0,3\n", 2, "expected 4 fields"),
        ("id,lower,upper,size,alignment\na,0,3,4,0\n", 2, "alignment 0 is below 1"),
        ("", 1, "empty file"),
    ],
)
def test_bad_csv_names_file_line_and_problem(tmp_path, text, line, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(IntervalError) as err:
        read_csv(path)
    assert isinstance(err.value, ValueError)
    assert str(err.value).startswith(f"{path}:{line}: ")
    assert message in str(err.value)
    assert (err.value.path, err.value.line) == (str(path), line)


# ----------------------------------------------------------------- CLI


def run_cli(capsys, *argv):
    rc = plan_tool.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_writes_csv_to_stdout_and_summary_to_stderr(capsys):
    rc, out, err = run_cli(capsys, str(DATA / "input.12.csv"), "--check")
    assert rc == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["id"] for r in rows] == ["b1", "b2", "b3", "b4", "b5"]
    ivs = read_csv(DATA / "input.12.csv")
    assert check_plan(ivs, {r["id"]: int(r["offset"]) for r in rows}, capacity=12) == []
    assert "buffers:     5" in err and "peak:        12 bytes" in err
    assert "lower bound: 12 bytes" in err and "ratio:       1.0000" in err
    assert "algorithm:   auto:" in err and "check:       ok" in err and "time:" in err


def test_cli_output_file_puts_summary_on_stdout(tmp_path, capsys):
    out_path = tmp_path / "plan.csv"
    model = GLOW / "resnet50_v2.onnx.csv"
    rc, out, err = run_cli(
        capsys, str(model), "-o", str(out_path), "--alignment", "64", "--time-budget", "5"
    )
    assert rc == 0 and err == ""
    assert "ratio:       1.0000" in out
    ivs, offsets = read_csv_offsets(out_path)
    assert check_plan(ivs, offsets, alignment=64) == []
    assert max(offsets[iv.id] + iv.size for iv in ivs) == lower_bound(ivs)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_cli_each_algorithm(tmp_path, capsys, algorithm):
    rc, out, err = run_cli(
        capsys,
        str(GLOW / "kws.onnx.csv"),
        "--algorithm",
        algorithm,
        "--time-budget",
        "0.2",
        "-o",
        "-",
    )
    assert rc == 0
    assert len(out.splitlines()) == 1 + 18
    assert f"algorithm:   {algorithm}" in err


def test_cli_capacity_error(capsys):
    rc, out, err = run_cli(capsys, str(DATA / "input.12.csv"), "--capacity", "11")
    assert rc == 1 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("palimpsest-plan: error: plan needs 12 bytes, capacity is 11")


def test_cli_bad_csv_error(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("id,lower,upper,size\na,0,3,4\nb,5,2,4\n")
    rc, out, err = run_cli(capsys, str(bad))
    assert rc == 1 and out == ""
    assert err == (
        f"palimpsest-plan: error: {bad}:3: 'b': lower 5 must be below upper 2 "
        "(lifetimes are half-open [lower, upper))\n"
    )


def test_cli_missing_file(tmp_path, capsys):
    rc, out, err = run_cli(capsys, str(tmp_path / "none.csv"))
    assert rc == 1 and "Traceback" not in err
    assert err.startswith("palimpsest-plan: error: ") and "none.csv" in err


def test_cli_argument_errors_exit_2(capsys):
    for argv in (["x.csv", "--capacity", "-1"], ["x.csv", "--algorithm", "best"], []):
        with pytest.raises(SystemExit) as exc:
            plan_tool.main(argv)
        assert exc.value.code == 2
    assert "usage: palimpsest-plan" in capsys.readouterr().err


def test_cli_subprocess_reads_stdin():
    text = (DATA / "input.12.csv").read_text()
    cmd = [sys.executable, "-m", "palimpsest.tools.plan", "-", "--capacity", "12", "--check"]
    proc = subprocess.run(cmd, input=text, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "id,lower,upper,size,offset"
    assert "check:       ok" in proc.stderr
    bad = subprocess.run(
        cmd[:-1] + ["--capacity", "4"], input=text, capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert "needs 12 bytes, capacity is 4" in bad.stderr


@pytest.mark.skipif(shutil.which("palimpsest-plan") is None, reason="console script not installed")
def test_console_script():
    proc = subprocess.run(
        ["palimpsest-plan", str(DATA / "input.12.csv")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "peak:        12 bytes" in proc.stderr
