"""blas_summary names numpy's BLAS and the kernel set it runs, pinned or chosen."""

import os
import platform
import subprocess
import sys

import pytest

from palimpsest.backends.numpy.blas import blas_summary

SCRIPT = "from palimpsest.backends.numpy.blas import blas_summary; print(blas_summary())"


def test_summary_is_one_line_naming_the_library():
    line = blas_summary()
    assert line.startswith("BLAS: ") and "\n" not in line


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                    reason="Prescott is an x86-64 kernel set")
def test_pinned_kernel_set_is_reported_as_pinned():
    if "not OpenBLAS" in blas_summary():
        pytest.skip("numpy is not built on OpenBLAS here")
    # Prescott (SSE3) runs on every x86-64 CPU, so pinning it is always safe.
    env = dict(os.environ, OPENBLAS_CORETYPE="Prescott")
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, check=True)
    # (OpenBLAS reports the set it mapped the name to: Prescott runs as "Katmai")
    assert "(pinned by OPENBLAS_CORETYPE=Prescott)" in done.stdout
    assert "kernels ?" not in done.stdout
    env.pop("OPENBLAS_CORETYPE")
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, check=True)
    assert "(chosen by OpenBLAS)" in done.stdout and "kernels ?" not in done.stdout
