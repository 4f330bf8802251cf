"""palimpsest-run --stats (issue 14, item 4): each output's values, and per pool the
planned bytes, the lower bound, one allocation per buffer (the sum) and the saving,
computed by passes.plan_export.pool_usage from the plan that ran. The exact lines are
in test/lit/tools/run-stats.pal; here the numbers are checked against the plan and the
arrays."""

from __future__ import annotations

from pathlib import Path

import pytest

np = pytest.importorskip("numpy")

from palimpsest.backends.numpy.session import Session  # noqa: E402
from palimpsest.passes.plan_export import plan_for_export, pool_usage  # noqa: E402
from palimpsest.tools import run as run_tool  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _table(lines: list) -> dict:
    """The pool table printed by --stats: {pool: [planned, lower bound, sum, buffers,
    saving]}."""
    start = next(i for i, line in enumerate(lines) if line.startswith("pool "))
    rows = {}
    for line in lines[start + 1:]:
        if not (line.startswith("@") or line.startswith("total")):
            break
        cells = line.replace("(", " ").replace(")", " ").split()
        rows[cells[0]] = [int(cells[1]), int(cells[2]), int(cells[3]), int(cells[4]),
                          int(cells[6])]
    return rows


def test_stats_on_the_bundled_example(tmp_path, capsys):
    model = str(ROOT / "examples" / "tiny_cnn.onnx")
    assert run_tool.main([model, "--random-inputs", "--stats", "--output-dir",
                          str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    logits = np.load(tmp_path / "logits.npy")
    assert lines[0] == "logits: float32 [1, 4]"
    first = ", ".join(f"{v:.4g}" for v in logits.reshape(-1))
    assert lines[1] == (f"  min {logits.min():.4g}, max {logits.max():.4g}, mean "
                        f"{logits.astype(np.float64).mean():.4g}; first 4: [{first}]")

    # the same plan, in a session: pool_usage agrees with the printed table and the plan
    session = Session(model)
    session.run({"x": np.zeros((1, 3, 8, 8), np.float32)})
    usage = {f"@{u.pool}": u for u in pool_usage(session.last_plan.module)}
    table = _table(lines)
    assert set(table) == set(usage) | {"total"}
    for name, u in usage.items():
        assert table[name] == [u.planned, u.lower_bound, u.separate, u.buffers, u.saving]
        assert u.lower_bound <= u.planned <= u.separate
        assert u.saving == u.separate - u.planned
    assert usage["@activations"].saving > 0          # the planner shares memory
    assert table["total"][0] == sum(u.planned for u in usage.values())
    assert table["total"][0] == session.last_stats.static_bytes


def test_pool_usage_sums_the_planned_buffers(parse_text):
    module = parse_text((ROOT / "test" / "lit" / "tools" / "run-stats.pal").read_text())
    from palimpsest.tools.cli import specialize_module

    specialize_module(module, None, {"x": (1, 3, 16, 16)}, {})
    report = plan_for_export(module)
    sizes: dict = {}
    for buffer in report.functions[0].buffers:
        sizes.setdefault(buffer.pool, []).append(buffer.size)
    usage = {u.pool: u for u in pool_usage(module)}
    assert {p: (u.separate, u.buffers) for p, u in usage.items()} == {
        p: (sum(s), len(s)) for p, s in sizes.items()}
    # conv output, its padded input and im2col matrix live at once; the rest reuse them
    assert usage["activations"].lower_bound == 4096 + 3888 + 27648
    assert usage["activations"].separate == 4096 + 3888 + 27648 + 1024 + 1024


def test_pool_usage_of_unplanned_ir_is_empty(parse_text):
    module = parse_text((ROOT / "test" / "lit" / "tools" / "run-stats.pal").read_text())
    assert pool_usage(module) == []


@pytest.mark.parametrize("array,expected", [
    (np.arange(12, dtype=np.int64).reshape(3, 4),
     "min 0, max 11, mean 5.5; first 5: [0, 1, 2, 3, 4, ...]"),
    (np.array([True, False, True]), "min 0, max 1, mean 0.6667; first 3: [1, 0, 1]"),
    (np.zeros((0, 3), np.float32), "no values (empty)"),
    (np.array(2.5, np.float16), "min 2.5, max 2.5, mean 2.5; first 1: [2.5]"),
    (np.array([np.nan, 1.0], np.float32), "min nan, max nan, mean nan; first 2: [nan, 1]"),
])
def test_value_summary(array, expected):
    assert run_tool._value_summary(array) == expected


def test_value_summary_of_small_float_types():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    array = np.array([0.5, -1.5, 3.0], dtype=ml_dtypes.bfloat16)
    assert run_tool._value_summary(array) == "min -1.5, max 3, mean 0.6667; first 3: [0.5, -1.5, 3]"
