"""The OpenCL generators of kernels/linalg.py against the numpy backend: matmul (2-D,
batched with broadcast batch dims, 1-D operands, every transA/transB, alpha/beta with C
broadcast, sizes that are not multiples of the register block, f64, integers on the
host), conv2d (strides, dilations, asymmetric pads, groups, bias, 1x1 with and without
im2col, depthwise 3x3 stride 1 and 2 with a channel multiplier, batch > 1); then the ONNX
Conv / MatMul / Gemm node cases on the device, checked to run there."""

from __future__ import annotations

import sys

import pytest

np = pytest.importorskip("numpy")

from opencl_support import compare_backends, requires_opencl  # noqa: E402

pytestmark = requires_opencl

RNG = np.random.default_rng(11)


def _tensor(shape, dtype="f32") -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + dtype + ">"


def _data(shape, dtype=np.float32):
    if np.dtype(dtype).kind == "f":
        return RNG.standard_normal(shape).astype(dtype)
    return RNG.integers(-20, 20, shape).astype(dtype)


def _ints(values) -> str:
    return "array<i64: " + ", ".join(str(v) for v in values) + ">"


def _graph(op: str, operands: dict, out_shape, attrs: str = "", dtype="f32") -> str:
    """A function of `operands` (name -> shape) returning one `op`."""
    args = ", ".join(f"%{name}: {_tensor(shape, dtype)}" for name, shape in operands.items())
    names = ", ".join(f"%{name}" for name in operands)
    types = ", ".join(_tensor(shape, dtype) for shape in operands.values())
    out = _tensor(out_shape, dtype)
    attrs = f" {{{attrs}}}" if attrs else ""
    return (f"func.func @f({args}) -> {out} {{\n"
            f"  %y = graph.{op} {names}{attrs} : ({types}) -> {out}\n"
            f"  func.return %y : {out}\n}}\n")


def _run(op, operands, out_shape, attrs="", dtype=np.float32, host_ops_allowed=()):
    name = {np.float32: "f32", np.float64: "f64", np.int32: "i32"}[dtype]
    inputs = {key: _data(shape, dtype) for key, shape in operands.items()}
    _, _, stats = compare_backends(_graph(op, operands, out_shape, attrs, name), inputs,
                                   host_ops_allowed=host_ops_allowed)
    return stats


# -- matmul -------------------------------------------------------------------------------------

MATMULS = [
    ("2-D", (32, 48), (48, 64)),
    ("not multiples of the block", (33, 127), (127, 7)),
    ("one row", (1, 33), (33, 127)),
    ("one column", (127, 33), (33, 1)),
    ("1x1x1", (1, 1), (1, 1)),
    ("batched", (3, 17, 9), (3, 9, 40)),
    ("broadcast batch dims", (2, 1, 7, 5), (3, 5, 33)),
    ("broadcast 2-D B", (4, 20, 31), (31, 18)),
    ("broadcast 2-D A", (20, 31), (2, 3, 31, 18)),
    ("1-D A", (33,), (2, 33, 19)),
    ("1-D B", (2, 19, 33), (33,)),
    ("1-D A and B", (127,), (127,)),
    ("attention scores", (2, 4, 24, 8), (2, 4, 8, 24)),
]


@pytest.mark.parametrize("name, a, b", MATMULS, ids=[m[0] for m in MATMULS])
def test_matmul(name, a, b):
    out = np.matmul(np.zeros(a), np.zeros(b)).shape
    stats = _run("matmul", {"a": a, "b": b}, out)
    assert stats.device_launches >= 1


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("m, k, n", [(7, 33, 127), (33, 7, 1), (1, 127, 33), (40, 24, 17)])
def test_gemm_transposes(trans_a, trans_b, m, k, n):
    a = (k, m) if trans_a else (m, k)
    b = (n, k) if trans_b else (k, n)
    attrs = ", ".join(f"{key} = 1" for key, flag in (("transA", trans_a), ("transB", trans_b))
                      if flag)
    _run("gemm", {"a": a, "b": b}, (m, n), attrs)


GEMM_C = [("scalar C", (1,)), ("row C", (17,)), ("column C", (40, 1)), ("full C", (40, 17)),
          ("one-element C", (1, 1))]


# vectors along n, along m (the block written transposed) and along k (dot products)
@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (1, 1), (0, 1)])
@pytest.mark.parametrize("name, c", GEMM_C, ids=[g[0] for g in GEMM_C])
@pytest.mark.parametrize("alpha, beta", [(1.0, 1.0), (0.5, 2.0), (-1.5, 0.0)])
def test_gemm_alpha_beta_c(name, c, alpha, beta, trans_a, trans_b):
    a = (24, 40) if trans_a else (40, 24)
    b = (17, 24) if trans_b else (24, 17)
    attrs = f"alpha = {alpha} : f32, beta = {beta} : f32, transA = {trans_a}, transB = {trans_b}"
    _run("gemm", {"a": a, "b": b, "c": c}, (40, 17), attrs)


@pytest.mark.parametrize("rows, columns", [(6, 37), (37, 6), (20, 20)])
def test_dot_form_either_grid_order(rows, columns):
    """The dot form (A @ B^T) runs its blocks of the smaller operand fastest: with fewer
    rows than columns the row blocks, else the column blocks; both edges ragged."""
    _run("gemm", {"a": (rows, 48), "b": (columns, 48), "c": (columns,)}, (rows, columns),
         "transB = 1")


def test_matmul_f64_runs_on_the_device():
    stats = _run("matmul", {"a": (2, 19, 37), "b": (37, 21)}, (2, 19, 21), dtype=np.float64)
    assert stats.device_launches >= 1


def test_gemm_f64_with_c():
    _run("gemm", {"a": (9, 30), "b": (30, 20), "c": (20,)}, (9, 20),
         "alpha = 0.25 : f32, beta = 3.0 : f32", dtype=np.float64)


def test_integer_matmul_runs_on_the_host():
    stats = _run("matmul", {"a": (5, 7), "b": (7, 3)}, (5, 3), dtype=np.int32,
                 host_ops_allowed=("kernel.matmul",))
    assert stats.host_ops == {"kernel.matmul": 1}


# -- conv2d ---------------------------------------------------------------------------------------

def _conv(x, w, bias=False, dtype=np.float32, **props):
    from palimpsest.dialects.graph import shapes as S

    group = props.get("group", 1)
    out = S.conv(tuple(x), tuple(w), None, props.get("strides", [1, 1]),
                 props.get("pads", [0, 0, 0, 0]), props.get("dilations", [1, 1]), group)
    attrs = ", ".join(f"{key} = {_ints(value)}" if isinstance(value, list) else
                      f"{key} = {value}" for key, value in sorted(props.items()))
    operands = {"x": x, "w": w}
    if bias:
        operands["b"] = (w[0],)
    return _run("conv", operands, out, attrs, dtype)


CONVS = [
    ("3x3", (1, 3, 8, 8), (4, 3, 3, 3), False, {}),
    ("3x3 pads bias", (1, 5, 13, 11), (7, 5, 3, 3), True, {"pads": [1, 1, 1, 1]}),
    ("strides", (1, 4, 17, 15), (6, 4, 3, 3), True, {"strides": [2, 3], "pads": [1, 0, 1, 2]}),
    ("dilations", (1, 3, 16, 19), (5, 3, 3, 2), False,
     {"dilations": [2, 3], "pads": [2, 1, 0, 3]}),
    ("asymmetric pads", (2, 2, 9, 9), (3, 2, 2, 4), True, {"pads": [0, 3, 2, 1]}),
    ("groups", (2, 6, 10, 10), (9, 2, 3, 3), True, {"group": 3, "pads": [1, 1, 1, 1]}),
    ("7x7 stride 2 stem", (1, 3, 40, 40), (16, 3, 7, 7), True,
     {"strides": [2, 2], "pads": [3, 3, 3, 3]}),
    ("1x1", (1, 16, 12, 12), (24, 16, 1, 1), True, {}),
    ("1x1 batch 3", (3, 10, 7, 9), (33, 10, 1, 1), False, {}),
    ("1x1 groups batch 2", (2, 8, 5, 7), (12, 8 // 4, 1, 1), True, {"group": 4}),
    ("1x1 stride 2 (im2col)", (1, 8, 15, 15), (16, 8, 1, 1), False, {"strides": [2, 2]}),
    ("1x1 padded (im2col)", (1, 4, 6, 6), (5, 4, 1, 1), True, {"pads": [1, 0, 0, 1]}),
    ("batch 2 3x3", (2, 8, 20, 20), (16, 8, 3, 3), True, {"pads": [1, 1, 1, 1]}),
    ("one input channel", (2, 1, 12, 33), (8, 1, 3, 3), True, {"pads": [1, 1, 1, 1]}),
    ("wide output rows", (1, 3, 6, 70), (4, 3, 3, 3), True, {"pads": [1, 1, 1, 1]}),
    ("1x1 output", (1, 4, 3, 3), (7, 4, 3, 3), True, {}),
]


@pytest.mark.parametrize("name, x, w, bias, props", CONVS, ids=[c[0] for c in CONVS])
def test_conv(name, x, w, bias, props):
    stats = _conv(x, w, bias, **props)
    assert stats.device_launches >= 1


DEPTHWISE = [
    ("3x3 stride 1", (1, 16, 20, 20), (16, 1, 3, 3), True, {"pads": [1, 1, 1, 1]}),
    ("3x3 stride 2", (1, 16, 21, 21), (16, 1, 3, 3), True,
     {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("3x3 stride 2 even size", (2, 24, 28, 28), (24, 1, 3, 3), False,
     {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("7x7 feature map", (1, 32, 7, 7), (32, 1, 3, 3), True, {"pads": [1, 1, 1, 1]}),
    ("batch 3", (3, 8, 9, 33), (8, 1, 3, 3), True, {"pads": [1, 1, 1, 1]}),
    ("channel multiplier 2", (1, 6, 11, 11), (12, 1, 3, 3), True, {"pads": [1, 1, 1, 1]}),
    ("5x5 dilations, uneven pads", (1, 8, 19, 17), (8, 1, 5, 5), False,
     {"dilations": [2, 1], "pads": [3, 2, 1, 0]}),
    ("stride 3, no pads", (1, 4, 23, 40), (4, 1, 3, 3), True, {"strides": [3, 3]}),
    ("1x1", (2, 5, 6, 6), (5, 1, 1, 1), True, {}),
    ("one output column", (1, 4, 9, 3), (4, 1, 3, 3), True, {}),
]


@pytest.mark.parametrize("name, x, w, bias, props", DEPTHWISE, ids=[d[0] for d in DEPTHWISE])
def test_depthwise_conv(name, x, w, bias, props):
    _conv(x, w, bias, group=x[1], **props)


def test_conv_f64_runs_on_the_device():
    for x, w, props in [((1, 3, 9, 9), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
                        ((1, 6, 10, 10), (6, 1, 3, 3), {"group": 6, "strides": [2, 2]})]:
        stats = _conv(x, w, True, np.float64, **props)
        assert stats.device_launches >= 1


def test_generated_programs_are_reused_per_shape():
    """Two convs of one shape signature share their programs: one build per kernel (a
    padded conv pads each image and multiplies in place, strided too: its padded rows
    split by column phase; an unpadded strided one fills im2col)."""
    from palimpsest.backends.opencl.kernels import GENERATORS
    from palimpsest.backends.opencl.kernels.base import Arg, KernelCall

    f32 = np.dtype(np.float32)
    for stride, pads, size, kernels in [(1, (1, 1, 1, 1), 8, ["pad_image", "gemm"]),
                                        (2, (1, 1, 1, 1), 4, ["pad_image", "gemm"]),
                                        (2, (0, 0, 0, 0), 3, ["im2col", "gemm"])]:
        workspaces = {"im2col": Arg((27, size * size), f32)}
        if any(pads):
            workspaces["padded"] = Arg((3, 10, 10), f32)
        call = KernelCall("kernel.conv2d", {"group": 1, "strides": (stride, stride),
                                            "dilations": (1, 1), "pads": pads},
                          [Arg((2, 3, 8, 8), f32), Arg((4, 3, 3, 3), f32)],
                          [Arg((2, 4, size, size), f32)], workspaces)
        launches = GENERATORS["kernel.conv2d"](call)
        names = [launch.kernel for launch in launches]
        half = len(names) // 2   # per image (im2col: a GEMM per panel width)
        assert names[:half] == names[half:] and names[0] == kernels[0]
        assert set(names) == set(kernels)
        assert len({launch.source for launch in launches}) == half


def test_weight_heavy_float_products_run_on_the_host_of_a_cpu_device(monkeypatch):
    """On a CPU device (PoCL) a float matmul whose B has HOST_WEIGHTS elements or more is
    the host's (oneDNN's GEMM streams them faster) unless it takes the dot form (B as
    n x k, a Gemm's transB: captcha_ocr's 20 x 1024 x 8210), whose grid streams B once;
    a GPU runs it, and a CPU device runs smaller ones and batched ones."""
    from palimpsest.backends.opencl.kernels import linalg
    from palimpsest.backends.opencl.kernels.base import Arg, DeviceLimits, KernelCall, Unsupported

    monkeypatch.setattr(linalg, "_host_gemm", lambda: True)
    f32 = np.dtype(np.float32)

    def call(host_cpu, columns=8210, batch=(), trans_b=0):
        config = {"transA": 0, "transB": trans_b, "alpha": 1.0, "beta": 1.0}
        b = (columns, 1024) if trans_b else (1024, columns)
        ins = [Arg(batch + (40, 1024), f32), Arg(batch + b, f32)]
        return linalg.matmul(KernelCall("kernel.matmul", config, ins,
                                        [Arg(batch + (40, columns), f32)], {},
                                        DeviceLimits(host_cpu=host_cpu)))

    assert call(False)
    with pytest.raises(Unsupported, match="CPU device"):
        call(True)
    (dot,) = call(True, trans_b=1)            # the dot form: the device's
    assert dot.kernel == "gemm_dot"
    assert call(True, columns=2048)           # 2 M weights
    assert call(True, batch=(2,))             # batched: the device's
    monkeypatch.setattr(linalg, "_host_gemm", lambda: False)   # no oneDNN
    assert call(True)


# -- ONNX node cases ------------------------------------------------------------------------------

def _node_cases():
    import onnx_node_cases  # test/unit, on sys.path: conftest.py

    return onnx_node_cases


def _case_names():
    try:
        pytest.importorskip("onnx")
        return _node_cases().case_names({"Conv", "MatMul", "Gemm"})
    except Exception:  # no onnx, or no cached cases: the test below skips
        return []


@pytest.mark.parametrize("name", _case_names())
def test_onnx_node_case_runs_on_the_device(name):
    """ONNX's expected outputs, with the conv / matmul kernel on the device (not the host)."""
    import onnx

    from palimpsest.backends.binding import find_function
    from palimpsest.backends.numpy.arena import RunStats
    from palimpsest.backends.opencl.executor import run
    from palimpsest.dialects.graph.from_onnx import import_onnx
    from palimpsest.passes.pass_manager import PassManager, parse_pipeline

    nc = _node_cases()
    case = nc.load_case(name)
    policy = nc.load_policy()
    reason = nc.skip_reason(case, policy)
    if reason is not None:
        pytest.skip(reason)
    module = import_onnx(onnx.load(str(nc.ensure_cache() / case.name / "model.onnx")))
    PassManager(parse_pipeline("infer-shapes")).run(module)
    PassManager(parse_pipeline("default")).run(module)
    stats = RunStats()
    outputs = run(find_function(module, None), case.feeds, stats=stats)
    got = outputs[case.node.output[0]]
    want = case.expected[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, equal_nan=True, **nc.FLOAT_TOLERANCE)
    assert not stats.host_ops, f"ran on the host: {stats.host_ops}"
    assert stats.device_launches >= 1
