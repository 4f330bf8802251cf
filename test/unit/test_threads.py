"""Thread control (backends/threads.py): Session(threads=N) and palimpsest-run --threads N
set the BLAS's threads, read back from the library (one where oneDNN runs the float
products, which then take the N), and PoCL's (read back from the OpenCL device, in a
fresh process: PoCL reads its count once per process); the default is the physical
cores, and a count set in the environment is kept."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from opencl_support import requires_opencl
from palimpsest.backends import onednn
from palimpsest.backends.numpy.session import Session
from palimpsest.backends.threads import (
    BLAS_ENV, blas_count, blas_threads, physical_cores, set_blas_threads, set_threads,
)

TEXT = """
func.func @main(%a: tensor<4x8xf32>, %b: tensor<8x3xf32>) -> tensor<4x3xf32> {
  %y = graph.matmul %a, %b : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  func.return %y : tensor<4x3xf32>
}
"""

pytestmark = pytest.mark.skipif(blas_threads() is None,
                                reason="numpy's BLAS cannot be set here (not OpenBLAS, "
                                       "no threadpoolctl)")


@pytest.fixture(autouse=True)
def keep_blas_threads(monkeypatch):
    before = blas_threads()
    for name in BLAS_ENV:
        monkeypatch.delenv(name, raising=False)
    yield
    set_blas_threads(before)


def _module(parse_text):
    return parse_text(TEXT)


def _blas_for(count: int) -> int:
    """The BLAS's threads for `count` (one beside oneDNN where OpenBLAS spins long)."""
    return blas_count(count)


def test_physical_cores_is_a_count_of_this_machine():
    assert 1 <= physical_cores() <= (os.cpu_count() or 1)


def test_set_threads_is_read_back_from_the_blas():
    assert set_threads(1).blas == 1 and blas_threads() == 1
    most = min(2, os.cpu_count() or 1)
    settings = set_threads(most)
    assert settings.blas == _blas_for(most) and blas_threads() == _blas_for(most)
    if onednn.float_gemm_available():
        assert settings.onednn == most
        assert f"oneDNN {most}, BLAS {_blas_for(most)}" in settings.summary()
    with pytest.raises(ValueError, match="at least 1"):
        set_threads(0)


@pytest.mark.parametrize("numpy_first", [False, True])
def test_openblas_thread_timeout_set_before_numpy_loads(numpy_first):
    """Imported before numpy, the package shortens OpenBLAS's worker spin (read when
    numpy loads OpenBLAS) and numpy's BLAS takes the session's threads beside oneDNN;
    imported after, the BLAS keeps one thread where oneDNN runs the float products."""
    code = ("import os, sys\n" + ("import numpy\n" if numpy_first else "") +
            "import palimpsest\n"
            "from palimpsest.backends import onednn\n"
            "from palimpsest.backends.threads import blas_count\n"
            "print(os.environ['OPENBLAS_THREAD_TIMEOUT'], palimpsest.BLAS_TIMEOUT_SET,"
            " blas_count(2), onednn.float_gemm_available())\n")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env)
    assert done.returncode == 0, done.stderr
    timeout, early, count, onednn_in_use = done.stdout.split()
    assert timeout == "16" and early == str(not numpy_first)
    assert count == ("1" if numpy_first and onednn_in_use == "True" else "2")


def test_session_threads_takes_effect(parse_text):
    import numpy as np

    set_blas_threads(min(2, os.cpu_count() or 1))
    session = Session(_module(parse_text), threads=1)
    assert blas_threads() == 1 and session.threads.blas == 1
    a = np.ones((4, 8), np.float32)
    b = np.ones((8, 3), np.float32)
    np.testing.assert_array_equal(session.run({"a": a, "b": b})["result0"], a @ b)
    assert "BLAS 1" in session.threads.summary()


def test_session_default_is_the_physical_cores(parse_text):
    set_blas_threads(1)
    session = Session(_module(parse_text))
    assert blas_threads() == _blas_for(physical_cores()) == session.threads.blas


def test_a_count_set_in_the_environment_is_kept(parse_text, monkeypatch):
    set_blas_threads(1)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    session = Session(_module(parse_text))
    assert blas_threads() == 1 and session.threads.blas == 1
    Session(_module(parse_text), threads=min(2, os.cpu_count() or 1))  # explicit wins
    assert blas_threads() == _blas_for(min(2, os.cpu_count() or 1))


@requires_opencl
def test_opencl_threads_are_set_before_pocl_opens():
    """A fresh process: Session(threads=1) on OpenCL gives PoCL one worker thread (the
    device's compute units read it back)."""
    code = ("from palimpsest.backends.numpy.session import Session\n"
            "from palimpsest.backends.threads import blas_threads\n"
            "import sys\n"
            "s = Session(sys.argv[1], backend='opencl', threads=1)\n"
            "print(s._target.device.device.max_compute_units, blas_threads(),"
            " s.threads.opencl)\n")
    env = {k: v for k, v in os.environ.items() if k != "POCL_MAX_PTHREAD_COUNT"}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", code,
                           os.path.join(root, "examples", "tiny_cnn.onnx")],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1", "1"]


def test_palimpsest_run_threads(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    model = os.path.join(root, "examples", "tiny_cnn.onnx")
    done = subprocess.run([sys.executable, "-m", "palimpsest.tools.run", model,
                           "--random-inputs", "--threads", "1", "--profile"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "BLAS 1, OpenCL (PoCL CPU) 1" in done.stdout
    done = subprocess.run([sys.executable, "-m", "palimpsest.tools.run", model,
                           "--random-inputs", "--threads", "0"], capture_output=True, text=True)
    assert done.returncode == 1 and "--threads 0: expected a count of at least 1" in done.stderr
