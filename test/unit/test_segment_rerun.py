"""The lean run of a control-flow segment whose plan is made (`Session.run_again`,
backends/numpy/segments.py): later runs on new inputs, with earlier results still held
(and fed back in, as a VAD's state is), give onnxruntime's outputs with poisoning on; a
change of branch or of shape goes back through the full path and still matches."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from example_models import assert_relative_match, corpus_model, onnxruntime_run  # noqa: E402
from test_ops_control import _if_model, rate_feed  # noqa: E402

from palimpsest.backends.numpy.session import Session  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402


@pytest.fixture
def lean_runs(monkeypatch):
    """How many segment runs took the lean path (a list: [count])."""
    count = [0]
    run_again = Session.run_again

    def counted(self, arrays):
        results = run_again(self, arrays)
        count[0] += results is not None
        return results

    monkeypatch.setattr(Session, "run_again", counted)
    return count


def _close(got, want, what):
    for name, expected in want.items():
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-6,
                                   err_msg=f"{what}: {name}")


def test_reruns_on_new_inputs_and_branches_match(lean_runs):
    model = _if_model()
    session = Session(import_onnx(model), poison=True)
    rng = np.random.default_rng(7)
    kept = []   # every run's results and what they should be, all held to the end
    for index, rate in enumerate([16000, 16000, 16000, 8000, 8000, 16000, 8000, 16000]):
        feeds = {"x": rng.standard_normal((2, 8)).astype(np.float32),
                 "sr": rate_feed(rate)}
        want = onnxruntime_run(model, feeds)
        got = session.run(feeds)
        _close(got, want, f"run {index} at {rate}")
        kept.append((got, want))
    assert lean_runs[0] > 0
    for index, (got, want) in enumerate(kept):   # no later run wrote a held result
        _close(got, want, f"run {index}, held")


def test_reruns_at_new_shapes_match(lean_runs):
    model = _if_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    session = Session(import_onnx(model), poison=True)
    rng = np.random.default_rng(8)
    for index, batch in enumerate([2, 2, 3, 3, 1, 2, 3]):
        feeds = {"x": rng.standard_normal((batch, 8)).astype(np.float32),
                 "sr": rate_feed(16000)}
        _close(session.run(feeds), onnxruntime_run(model, feeds), f"run {index} ({batch})")
    assert lean_runs[0] > 0


def test_silero_vad_state_fed_back_matches():
    """Silero VAD's seven Ifs are decided by its `sr` and the shapes: inlined, the model
    runs as one planned function (no segments), its state fed back as a caller's is."""
    from palimpsest.backends.numpy.session import has_control_flow

    path, feeds = corpus_model("silero_vad")
    session = Session(str(path), poison=True)
    rng = np.random.default_rng(9)
    feeds = dict(feeds)
    for index in range(5):
        feeds["input"] = (rng.standard_normal(feeds["input"].shape) * 0.1).astype(
            feeds["input"].dtype)
        got = session.run(feeds)
        assert_relative_match(got, onnxruntime_run(path, feeds), f"run {index}")
        feeds["state"] = got["stateN"]   # held by the next run, as a caller's is
    assert not has_control_flow(session.last_plan.module)
    assert session.stats.compiles == 1


def test_deepfilternet_if_on_a_float_setting_is_inlined():
    """DeepFilterNet's streaming export branches on |atten_lim_db| > threshold, a float
    scalar input (a user's setting): a guard, so the branch is inlined and the model runs
    as one planned function, matching onnxruntime; another setting gets its own plan."""
    from palimpsest.backends.numpy.session import has_control_flow

    path, feeds = corpus_model("deepfilternet_stream")
    session = Session(str(path), poison=True)
    for limit in (float(feeds["atten_lim_db"]), float(feeds["atten_lim_db"]) + 30.0):
        feeds = dict(feeds, atten_lim_db=np.array(limit, np.float32))
        assert_relative_match(session.run(feeds), onnxruntime_run(path, feeds),
                              f"limit {limit}")
        assert not has_control_flow(session.last_plan.module)
    assert session.stats.compiles == 2
