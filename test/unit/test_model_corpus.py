"""The smallest models of the real-model corpus (benchmarks/models.toml), fetched from the
PyPI packages that ship them, imported, planned and run through a Session, matching
onnxruntime: an LSTM voice-activity detector (PyTorch), Silero VAD's If at the top
(spox), a Paddle2ONNX OCR classifier, a tf2onnx classifier, openWakeWord's
mel-spectrogram front end (STFT as Conv, PyTorch), the GTCRN denoiser (GRUs; enough
buffers to take the exact memory planner's search past Python's default recursion
limit) and DTLN's second stage (Keras via OnnxMLTools). Skipped, saying why, only when a
package cannot be fetched (no network)."""

from __future__ import annotations

import pytest

pytest.importorskip("numpy")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from example_models import (  # noqa: E402
    assert_session_matches_onnxruntime, benchmark_module, corpus_model,
)

fetch = benchmark_module("fetch_models")

SMALL = ["silero_vad_v6_faster_whisper", "silero_vad", "ppocr_mobile_cls", "magika",
         "oww_melspectrogram", "gtcrn", "dtln_stage2"]


@pytest.mark.parametrize("name", SMALL)
def test_small_corpus_model_matches_onnxruntime(name):
    path, feeds = corpus_model(name)
    assert_session_matches_onnxruntime(path, feeds, name)


def test_corpus_records_package_path_hash_and_licence():
    entries = fetch.corpus()
    assert len(entries) >= 20
    for name, entry in entries.items():
        for key in ("package", "version", "path", "sha256", "bytes", "licence", "exporter",
                    "task", "inputs"):
            assert key in entry, f"{name} has no {key}"
        assert len(entry["sha256"]) == 64


def test_benchmark_plans_bind_feeds_by_name(monkeypatch):
    """bench_models' planned-bytes column binds the feeds to the model's arguments by
    name: the same pools whatever the feeds' order (gtcrn's four inputs differ in
    shape), and an unknown name is refused, not planned at a wrong shape. The scheduler
    and the planner search within a time budget (gtcrn's 394-op schedule takes all of
    its second: a loaded machine ends it elsewhere), so here both take a deterministic
    algorithm: the feeds' binding is what is compared."""
    from palimpsest.backends.binding import BindingError
    from palimpsest.dialects.graph.from_onnx import import_onnx
    from palimpsest.passes import plan_memory, schedule_for_memory

    scheduled, planned_by = schedule_for_memory.schedule, plan_memory.plan_memory
    monkeypatch.setattr(schedule_for_memory, "schedule",
                        lambda problem, algorithm, budget: scheduled(problem, "list", budget))
    monkeypatch.setattr(plan_memory, "plan_memory",
                        lambda module, *args, **kwargs: planned_by(module, "greedy-by-size"))

    bench = benchmark_module("bench_models")
    path, feeds = corpus_model("gtcrn")
    reordered = dict(reversed(list(feeds.items())))
    assert list(reordered) != list(feeds)
    planned = bench._planned(import_onnx(str(path)), feeds)
    assert bench._planned(import_onnx(str(path)), reordered) == planned
    with pytest.raises(BindingError, match="unknown input 'mixture'"):
        bench._planned(import_onnx(str(path)), {"mixture": next(iter(feeds.values()))})
