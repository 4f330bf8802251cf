"""benchmarks/models_table.py: the README's per-model table and geometric means from
bench_models' JSON rows."""

from __future__ import annotations

import json

from example_models import benchmark_module

tables = benchmark_module("models_table")


def _write(path, rows):
    path.write_text(json.dumps(rows))
    return str(path)


def test_table_ratios_faster_backend_and_before(tmp_path, capsys):
    numpy_run = [{"model": "a", "numpy_ms": 4.0, "ort_ms": 2.0, "pool_bytes": 2048,
                  "top": "conv2d 90%"},
                 {"model": "b", "numpy_ms": 9.0, "ort_ms": 1.0}]
    opencl_run = [{"model": "a", "numpy_ms": 4.4, "ort_ms": 2.2, "opencl_ms": 1.1},
                  {"model": "b", "numpy_ms": 9.0, "ort_ms": 1.0, "opencl_ms": 12.0}]
    before = [{"model": "a", "numpy_ms": 8.0, "ort_ms": 2.0, "opencl_ms": 3.0}]
    paths = [_write(tmp_path / f"{n}.json", rows) for n, rows in
             (("numpy", numpy_run), ("opencl", opencl_run), ("before", before))]
    assert tables.main([paths[0], paths[1], "--before", paths[2]]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[2].startswith("| a | 4.0 | 2.0 | **2.00×** | 8.0, 4.00× | **1.1** (4.4, 2.2) "
                               "| 3.0 | - | 2 | conv2d 90% |")
    assert lines[3].startswith("| b | 9.0 | 1.0 | **9.00×** | - | 12.0 (9.0, 1.0) |")
    # numpy: sqrt(2 * 9) = 4.24; faster: a 1.1 / 2.2 = 0.5, b 9 / 1 = 9 -> 2.12
    assert "numpy 4.24× over 2 (1 above 2.5×, 1 above 2×)" in err
    assert "faster 2.12× (1 above 2×)" in err


def test_merge_opencl_for_a_later_before(tmp_path):
    numpy_path = _write(tmp_path / "n.json", [{"model": "a", "numpy_ms": 4.0, "ort_ms": 2.0}])
    opencl_path = _write(tmp_path / "o.json", [{"model": "a", "opencl_ms": 1.5}])
    merged = tmp_path / "m.json"
    assert tables.main([numpy_path, opencl_path, "--merge-opencl", str(merged)]) == 0
    assert json.loads(merged.read_text()) == [{"model": "a", "numpy_ms": 4.0, "ort_ms": 2.0,
                                               "opencl_ms": 1.5}]
