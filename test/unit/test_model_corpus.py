"""The smallest models of the real-model corpus (benchmarks/models.toml), fetched from the
PyPI packages that ship them, imported, planned and run through a Session, matching
onnxruntime: an LSTM voice-activity detector (PyTorch), Silero VAD's If at the top
(spox), a Paddle2ONNX OCR classifier and a tf2onnx classifier. Skipped, saying why,
only when a package cannot be fetched (no network)."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from example_models import benchmark_module  # noqa: E402
from palimpsest.backends.numpy.session import Session  # noqa: E402

fetch = benchmark_module("fetch_models")

SMALL = ["silero_vad_v6_faster_whisper", "silero_vad", "ppocr_mobile_cls", "magika"]


@pytest.mark.parametrize("name", SMALL)
def test_small_corpus_model_matches_onnxruntime(name):
    entry = fetch.corpus()[name]
    try:
        path = fetch.model_path(name, entry)
    except (fetch.FetchError, OSError) as error:
        pytest.skip(f"cannot fetch {entry['package']}=={entry['version']}: {error}")
    feeds = fetch.inputs_for(entry)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    reference = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in reference.get_outputs()]
    want = reference.run(names, feeds)
    session = Session(str(path), poison=True)
    for _ in range(2):   # the second run reuses the cached plan
        got = session.run(feeds)
        for output, expected in zip(names, want):
            scale = max(float(np.max(np.abs(expected))), 1e-12)
            worst = float(np.max(np.abs(got[output].astype(np.float64) - expected))) / scale
            assert worst <= 1e-4, f"{name}: output {output} differs by {worst:.2e} (relative)"


def test_corpus_records_package_path_hash_and_licence():
    entries = fetch.corpus()
    assert len(entries) >= 20
    for name, entry in entries.items():
        for key in ("package", "version", "path", "sha256", "bytes", "licence", "exporter",
                    "task", "inputs"):
            assert key in entry, f"{name} has no {key}"
        assert len(entry["sha256"]) == 64
