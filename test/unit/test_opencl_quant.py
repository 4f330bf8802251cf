"""onnxruntime's dynamic quantization ops on the OpenCL device (backends/opencl/kernels/
quant.py: DynamicQuantizeLinear, MatMulIntegerToFloat; recurrent.py: DynamicQuantizeLSTM,
the whole sequence in one launch) against the numpy backend and onnxruntime, poisoning
on; what the kernels leave to the host still runs there."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from opencl_support import compare_backends, requires_opencl  # noqa: E402
from test_quant_fast import _dq_lstm, _onnxruntime  # noqa: E402

LSTM = "graph.dynamic_quantize_lstm"


@pytest.fixture(autouse=True)
def device_lstm_kernel(monkeypatch):
    """The device's DynamicQuantizeLSTM kernel under test even on a CPU device whose host
    has oneDNN (which takes the op there: `test_quantized_lstm_on_the_host_of_a_cpu_device`
    undoes this)."""
    from palimpsest.backends.opencl.kernels import recurrent

    monkeypatch.setattr(recurrent, "host_products", lambda r, batch: False)


def _saved(model, tmp_path):
    import onnx

    path = tmp_path / "lstm.onnx"
    onnx.save(model, str(path))
    return str(path)


def _vnni_device() -> bool:
    from palimpsest.backends.opencl.runtime import device

    return bool(device().limits.vnni)


@pytest.fixture(params=["float", "vnni"])
def int8_form(request, monkeypatch):
    """The 8-bit kernels' form under test (DynamicQuantizeLSTM's, MatMulIntegerToFloat's):
    their float sums of bytes, or (on a device with the 8-bit dot product,
    DeviceLimits.vnni) the VNNI form; the name."""
    from palimpsest.backends.opencl.kernels import quant, recurrent

    if request.param == "vnni" and not _vnni_device():
        pytest.skip("the device has no 8-bit dot product (DeviceLimits.vnni)")
    monkeypatch.setattr(recurrent, "USE_VNNI", request.param == "vnni")
    monkeypatch.setattr(quant, "USE_VNNI", request.param == "vnni")
    return request.param


@requires_opencl
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("case, size, hidden", [
    ("plain", 12, 16),          # 64 gate columns: one work-item of 4 vectors
    ("per_column", 12, 20),     # 80: five work-items of one vector
    ("no_optional", 300, 24),   # X rows past one 256-row exact float sum
    ("unsigned", 12, 16),       # uint8 weights with zero points
    ("plain", 12, 64),          # 256 gate columns: one work-item of 16 vectors (a CPU
    ("plain", 12, 128),         # device's), or two; the cell on 16-unit vectors
])
def test_quantized_lstm_runs_on_the_device(tmp_path, direction, case, size, hidden,
                                           int8_form):
    """Each form (uint8 weights: the float one) against the numpy backend and
    onnxruntime, poisoning on."""
    model, feeds = _dq_lstm(direction, 7, 1, size, hidden, 3,
                            per_column=case == "per_column", optional=case != "no_optional",
                            unsigned=case == "unsigned")
    path = _saved(model, tmp_path)
    # a hidden state a ulp apart can quantize a step apart: as onnxruntime's 2e-3
    _, got, stats = compare_backends(path, feeds, rtol=0, atol=2e-3, poison=True)
    assert LSTM not in stats.host_ops
    expected = _onnxruntime(model, feeds)
    for name in ("y", "y_h", "y_c"):
        np.testing.assert_allclose(got[name], expected[name], atol=2e-3, err_msg=name)


@requires_opencl
def test_quantized_lstm_vnni_weights_given_at_run_time(tmp_path, int8_form):
    """W and R graph inputs, not constants: the VNNI form packs them at every run (two
    runs with other weights give each its own results); the same results either form."""
    import onnx
    from onnx import helper, numpy_helper

    from palimpsest.backends.numpy.session import Session

    model, feeds = _dq_lstm("bidirectional", 5, 1, 8, 16, 6)
    graph = model.graph
    for name in ("W", "R"):
        (init,) = [t for t in graph.initializer if t.name == name]
        array = numpy_helper.to_array(init)
        graph.initializer.remove(init)
        graph.input.append(helper.make_tensor_value_info(
            name, onnx.TensorProto.INT8, list(array.shape)))
        feeds[name] = array
    path = _saved(model, tmp_path)
    session = Session(path, backend="opencl")
    for seed in (0, 1):
        rng = np.random.default_rng(seed)
        feeds = dict(feeds, R=rng.integers(-128, 128, feeds["R"].shape).astype(np.int8))
        got = session.run(feeds)
        assert LSTM not in session.last_stats.run_stats.host_ops
        expected = Session(path).run(feeds)
        for name in ("y", "y_h", "y_c"):
            np.testing.assert_allclose(got[name], expected[name], atol=2e-3, err_msg=name)


def test_vnni_packing_is_vpdpbusd_order():
    """A packed weight's word (k4, n) holds rows 4 k4 .. 4 k4 + 3 of column n, the first
    the low byte (plus 128 for the unsigned form), then the column sums."""
    from palimpsest.backends.opencl.kernels.recurrent import vnni_r, vnni_w

    weight = np.random.default_rng(2).integers(-128, 128, (2, 8, 5)).astype(np.int8)
    for packed, shift in ((vnni_r(weight), 0), (vnni_w(weight), 128)):
        assert packed.dtype == np.int32 and packed.shape == (2, 2 * 5 + 5)
        words = packed[:, :10].reshape(2, 2, 5).view(np.uint8).reshape(2, 2, 5, 4)
        for d, k4, n, j in np.ndindex(2, 2, 5, 4):
            assert words[d, k4, n, j] == (int(weight[d, 4 * k4 + j, n]) + shift) % 256
        np.testing.assert_array_equal(packed[:, 10:], weight.sum(axis=1))


@requires_opencl
@pytest.mark.parametrize("direction, size, hidden, steps", [
    ("forward", 12, 64, 7),          # 256 gate columns, one work-item: all 64 rows its own
    ("bidirectional", 300, 128, 5),  # two work-items of 64 rows a direction
    ("reverse", 12, 72, 4),          # 288 columns of 2 vectors a work-item: 9 of 8 rows
])
def test_quantized_lstm_row_split_product(tmp_path, monkeypatch, direction, size, hidden,
                                          steps):
    """On a CPU device whose L2 R outgrows (voicefilter's 768-unit embedder), a step's
    h R^T is summed by rows (each work-item its rows, whole rows in order, every column;
    the partial rows added as ints): here forced by a 64-byte L2. The same integers as
    the column form, so as onnxruntime."""
    import dataclasses

    from palimpsest.backends.opencl import runtime

    device = runtime.device()
    monkeypatch.setattr(device, "limits", dataclasses.replace(device.limits, host_cpu=True,
                                                              l2_bytes=64, vnni=False))
    model, feeds = _dq_lstm(direction, steps, 1, size, hidden, 8)
    _, got, stats = compare_backends(_saved(model, tmp_path), feeds, rtol=0, atol=2e-3,
                                     poison=True)
    assert LSTM not in stats.host_ops
    expected = _onnxruntime(model, feeds)
    for name in ("y", "y_h", "y_c"):
        np.testing.assert_allclose(got[name], expected[name], atol=2e-3, err_msg=name)


def _generated_lstm(hidden: int, host_cpu: bool, vnni: bool = False) -> list:
    """The launches the generator makes of a 20-step forward DynamicQuantizeLSTM of
    `hidden` units over 40 inputs, int8 weights, on a device with 2 MiB of local
    memory (a CPU one, of 2 MiB of L2, with the 8-bit dot product or not, or a GPU)."""
    from palimpsest.backends.opencl.kernels.base import Arg, DeviceLimits, KernelCall
    from palimpsest.backends.opencl.kernels.recurrent import dynamic_quantize_lstm

    arg = lambda shape, dtype: Arg(shape, np.dtype(dtype))  # noqa: E731
    ins = [arg((20, 1, 40), np.float32), arg((1, 40, 4 * hidden), np.int8),
           arg((1, hidden, 4 * hidden), np.int8), None, None, None, None, None,
           arg((1,), np.float32), arg((1,), np.int8), arg((1,), np.float32),
           arg((1,), np.int8)]
    outs = [arg((20, 1, 1, hidden), np.float32)]
    limits = DeviceLimits(max_work_group_size=4096, local_mem_size=2 << 20,
                          max_work_item_sizes=(4096, 4096, 4096), host_cpu=host_cpu,
                          l2_bytes=2 << 20 if host_cpu else 0, vnni=vnni)
    return dynamic_quantize_lstm(KernelCall(LSTM, {}, ins, outs, {}, limits))


def test_quantized_lstm_sums_by_rows_where_r_outgrows_l2():
    """The row-split product where R is more than half a CPU device's L2 (voicefilter's
    embedder: 768 x 3072 bytes against 2 MiB), the column form where it fits (voicefilter-
    lite: 512 x 2048) and on a GPU."""
    def source(hidden, host_cpu):
        (launch,) = _generated_lstm(hidden, host_cpu)
        return launch.source

    assert "product_rows(hq" in source(768, True)
    assert "product_r(hq" in source(512, True)
    assert "product_r(hq" in source(768, False)


@requires_opencl
def test_quantized_lstm_outputs_used_or_not(tmp_path):
    """Only Y_h read by the model (Y and Y_c not outputs): the kernel writes what the
    op's outs are."""
    model, feeds = _dq_lstm("bidirectional", 9, 1, 10, 16, 4)
    graph = model.graph
    keep = [o for o in graph.output if o.name == "y_h"]
    del graph.output[:]
    graph.output.extend(keep)
    _, got, stats = compare_backends(_saved(model, tmp_path), feeds, rtol=0, atol=2e-3,
                                     poison=True)
    assert LSTM not in stats.host_ops
    np.testing.assert_allclose(got["y_h"], _onnxruntime(model, feeds)["y_h"], atol=2e-3)


@requires_opencl
@pytest.mark.parametrize("case", ["batch_of_two", "peephole", "lengths"])
def test_quantized_lstm_the_kernel_leaves_to_the_host(tmp_path, case):
    """A batch of two (one h range spans the batch), peepholes, sequence_lens: on the
    host, counted there, with the numpy backend's results."""
    model, feeds = _dq_lstm("forward", 5, 2 if case == "batch_of_two" else 1, 8, 16, 5,
                            peephole=case == "peephole",
                            lengths=[5] if case == "lengths" else None)
    _, got, stats = compare_backends(_saved(model, tmp_path), feeds, rtol=0, atol=1e-6,
                                     host_ops_allowed=(LSTM,), poison=True)
    assert stats.host_ops.get(LSTM) == 1


def test_quantized_lstm_on_the_host_of_a_cpu_device(monkeypatch):
    """On a CPU device without the 8-bit dot product, where the host's steps multiply
    R's bytes on oneDNN (products of SMALLEST multiply-adds and more), the op is the
    host's; a GPU's device, or a smaller R, runs the float form; a CPU device with the
    dot product (DeviceLimits.vnni) runs the VNNI form, its weights packed once."""
    from palimpsest.backends import onednn
    from palimpsest.backends.opencl.kernels.base import Unsupported

    monkeypatch.undo()
    call = _generated_lstm

    assert "vpdpbusd" not in call(512, False)[0].source
    assert len(call(64, True)) == 1          # 64 x 256: below oneDNN's SMALLEST
    (vnni,) = call(512, True, vnni=True)
    assert "vpdpbusd" in vnni.source
    assert [a.key for a in vnni.args if getattr(a, "group", None) == "derived"] == [
        ("vnni_w", 1), ("vnni_r", 2)]
    if not onednn.available():
        assert len(call(512, True)) == 1
        return
    with pytest.raises(Unsupported, match="CPU device"):
        call(512, True)


@requires_opencl
def test_quantized_lstm_on_the_host_matches(tmp_path, monkeypatch):
    """The op on the host of a CPU device (its operands mapped, not copied) gives the
    numpy backend's results and onnxruntime's."""
    from palimpsest.backends.opencl.kernels import recurrent

    monkeypatch.setattr(recurrent, "host_products", lambda r, batch: True)
    monkeypatch.setattr(recurrent, "USE_VNNI", False)
    model, feeds = _dq_lstm("bidirectional", 6, 1, 12, 32, 3)
    _, got, stats = compare_backends(_saved(model, tmp_path), feeds, rtol=0, atol=1e-6,
                                     host_ops_allowed=(LSTM,), poison=True)
    assert stats.host_ops.get(LSTM) == (1 if _device_is_cpu() else None)
    expected = _onnxruntime(model, feeds)
    for name in ("y", "y_h", "y_c"):
        np.testing.assert_allclose(got[name], expected[name], atol=2e-3, err_msg=name)


def _device_is_cpu() -> bool:
    from palimpsest.backends.opencl.runtime import device

    return device().limits.host_cpu


def test_quantized_lstm_needs_its_steps_in_local_memory():
    """Every step's projection stays in local memory: voicefilter-lite's 50 steps of
    2048 gates fit PoCL's 2 MiB, not a GPU's 48 KiB (the host runs it there)."""
    from palimpsest.backends.opencl.kernels.base import Arg, DeviceLimits, KernelCall, Unsupported
    from palimpsest.backends.opencl.kernels.recurrent import dynamic_quantize_lstm

    def call(local_bytes):
        arg = lambda shape, dtype: Arg(shape, np.dtype(dtype))  # noqa: E731
        ins = [arg((50, 1, 512), np.float32), arg((1, 512, 2048), np.int8),
               arg((1, 512, 2048), np.int8), None, None, None, None, None,
               arg((1,), np.float32), arg((1,), np.int8), arg((1,), np.float32),
               arg((1,), np.int8)]
        outs = [arg((50, 1, 1, 512), np.float32)]
        limits = DeviceLimits(max_work_group_size=1024, local_mem_size=local_bytes,
                              max_work_item_sizes=(1024, 1024, 64))
        return dynamic_quantize_lstm(KernelCall(LSTM, {}, ins, outs, {}, limits))

    (launch,) = call(2 << 20)
    assert launch.global_size == launch.local_size == (32,)
    with pytest.raises(Unsupported, match="local memory"):
        call(48 << 10)


def _quantized_matmul(rows, depth, columns, seed, *, batch=None, per_column=False,
                      unsigned_b=False, bias=True, x_fill=None, b_zero=None):
    """onnxruntime's dynamically quantized MatMul as its quantizer writes it (and the
    importer folds it to graph.matmul_integer_to_float): DynamicQuantizeLinear of X,
    MatMulIntegerToFloat by an 8-bit constant B (per-tensor or per-column scale, B's
    zero points when it is uint8, or `b_zero`: an int8 B's, not 0), plus the bias."""
    b_zero = unsigned_b if b_zero is None else b_zero
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    shape = ([batch] if batch else []) + [rows, depth]
    x = rng.normal(0, 1, shape).astype(np.float32) if x_fill is None else \
        np.full(shape, x_fill, np.float32)
    kind, shift = (np.uint8, 128) if unsigned_b else (np.int8, 0)
    per = columns if per_column else 1
    consts = {"b": (rng.integers(-128, 128, (depth, columns)) + shift).astype(kind),
              "bs": rng.uniform(0.002, 0.01, per).astype(np.float32),
              "bz": (rng.integers(-5, 5, per) * bool(shift or b_zero) + shift).astype(kind),
              "bias": rng.normal(0, 0.1, columns).astype(np.float32)}
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulIntegerToFloat",
                              ["xq", "b", "xs", "bs", "xz", "bz" if b_zero else "",
                               "bias" if bias else ""], ["y"], domain="com.microsoft")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("xq", TensorProto.UINT8, None)],
        [numpy_helper.from_array(a, n) for n, a in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    return model, {"x": x}


@requires_opencl
@pytest.mark.parametrize("rows, depth, columns, kwargs", [
    (7, 12, 32, {}),                                    # rows past a block of four
    (5, 300, 16, {"per_column": True}),                 # K past one exact float sum
    (4, 20, 48, {"unsigned_b": True, "per_column": True, "bias": False}),
    (3, 8, 16, {"batch": 2}),                           # a 3-D A
    (6, 10, 16, {"x_fill": 0.0}),                       # X all zeros: scale 0
    (6, 10, 16, {"x_fill": -2.5}),                      # X all negative: zero point 255
    (9, 16, 32, {"b_zero": True, "per_column": True}),  # an int8 B's zero points
    (9, 16, 32, {"b_zero": True}),
])
def test_dynamic_quantize_linear_and_matmul_integer_to_float_on_the_device(
        tmp_path, rows, depth, columns, kwargs, int8_form):
    """X quantized and its 8-bit product on the device, exactly as the numpy backend
    (the same integers, scales applied in the same order) and onnxruntime, either form
    (K not a multiple of 4, or a uint8 B: the float one)."""
    model, feeds = _quantized_matmul(rows, depth, columns, 6, **kwargs)
    _, got, stats = compare_backends(_saved(model, tmp_path), feeds, rtol=1e-6, atol=1e-6,
                                     poison=True)
    assert not stats.host_ops
    expected = _onnxruntime(model, feeds)
    np.testing.assert_array_equal(got["xq"], expected["xq"])
    np.testing.assert_allclose(got["y"], expected["y"], rtol=1e-6, atol=1e-6)


@requires_opencl
@pytest.mark.parametrize("columns", [20, 15, 1, 8210 % 64 + 16])
def test_matmul_integer_to_float_columns_not_of_sixteen(tmp_path, columns, int8_form):
    """N not a multiple of 16 (a classifier's 15 classes, captcha_ocr's 8,210 symbols):
    the last N % 16 columns are a second launch, a work-item a column (of the float
    form, after either form's)."""
    for seed, kwargs in ((7, {}), (8, {"unsigned_b": True, "per_column": True})):
        model, feeds = _quantized_matmul(6, 9, columns, seed, **kwargs)
        _, got, stats = compare_backends(_saved(model, tmp_path), feeds, rtol=1e-6,
                                         atol=1e-6, poison=True)
        assert not stats.host_ops
        np.testing.assert_allclose(got["y"], _onnxruntime(model, feeds)["y"], rtol=1e-6,
                                   atol=1e-6)


def test_large_int8_products_run_on_the_host_of_a_cpu_device():
    """On a CPU device (PoCL) without the 8-bit dot product a product past HOST_PRODUCT
    multiply-adds is the host's (numpy's BLAS on its kept float copy of B is faster on
    the same cores); a GPU's device runs it, in two launches where N is not a multiple
    of 16; a CPU device with it runs the VNNI form of a smaller one."""
    from palimpsest.backends.opencl.kernels.base import Arg, DeviceLimits, KernelCall, Unsupported
    from palimpsest.backends.opencl.kernels.quant import matmul_integer_to_float

    def call(rows, host_cpu, columns=8210, vnni=False):
        arg = lambda shape, dtype: Arg(shape, np.dtype(dtype))  # noqa: E731
        ins = [arg((rows, 1024), np.uint8), arg((1024, columns), np.int8),
               arg((1,), np.float32), arg((1,), np.float32), arg((1,), np.uint8)]
        outs = [arg((rows, columns), np.float32)]
        return matmul_integer_to_float(KernelCall(
            "graph.matmul_integer_to_float", {}, ins, outs, {},
            DeviceLimits(host_cpu=host_cpu, vnni=vnni)))

    assert [launch.global_size for launch in call(40, False)] == [(10, 513), (10, 2)]
    with pytest.raises(Unsupported, match="CPU device"):
        call(40, True)
    assert [launch.global_size for launch in call(40, True, 15)] == [(10, 15)]  # 0.6 M
    # a CPU device with the 8-bit dot product: the host past HOST_PRODUCT still, below
    # it the VNNI form (eight rows of 16 columns a work-item, B packed once), the last
    # N % 16 columns as before
    with pytest.raises(Unsupported, match="CPU device"):
        call(40, True, vnni=True)
    vnni = call(20, True, 40, vnni=True)
    assert [launch.global_size for launch in vnni] == [(3, 2), (5, 8)]
    assert "vpdpbusd" in vnni[0].source and "vpdpbusd" not in vnni[1].source


def _conv_integer(tmp_path, c, h, w, m, k, stride, pad, w_type, dilation=1, batch=1,
                  per_channel=False, seed=0, zeros=True):
    """A one-node ConvInteger (uint8 X, an 8-bit W, both zero points or, without
    `zeros`, neither) saved; its feeds."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    shape = (m,) if per_channel else ()
    if w_type == np.uint8:
        weight = rng.integers(0, 256, (m, c, k, k)).astype(np.uint8)
        w_zero = rng.integers(120, 136, shape).astype(np.uint8)
    else:
        weight = rng.integers(-128, 128, (m, c, k, k)).astype(np.int8)
        w_zero = rng.integers(-3, 4, shape).astype(np.int8)
    node = helper.make_node("ConvInteger", ["x", "w"] + ["xz", "wz"] * zeros, ["y"],
                            strides=[stride] * 2,
                            pads=[pad] * 4, dilations=[dilation] * 2)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [batch, c, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [numpy_helper.from_array(weight, "w")] + [
            numpy_helper.from_array(np.array(rng.integers(0, 256), np.uint8), "xz"),
            numpy_helper.from_array(w_zero, "wz")] * zeros)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "conv_integer.onnx"
    onnx.save(model, str(path))
    return str(path), {"x": rng.integers(0, 256, (batch, c, h, w)).astype(np.uint8)}


@requires_opencl
@pytest.mark.parametrize("c, h, w, m, k, stride, pad, w_type, extra", [
    (1, 64, 160, 24, 3, 2, 1, np.uint8, {}),    # captcha_ocr_int8's first: one channel
    (24, 32, 80, 24, 3, 1, 1, np.uint8, {}),    # 3 x 3 and 1 x 1 as its others
    (24, 32, 80, 24, 1, 1, 0, np.uint8, {}),
    (5, 9, 13, 11, 3, 1, 1, np.int8, {"per_channel": True}),   # channels past a word,
    (6, 10, 21, 17, 3, 2, 0, np.int8, {}),      # outputs past a tile, stride 2
    (6, 10, 21, 17, 3, 1, 2, np.uint8, {"dilation": 2, "batch": 2, "per_channel": True}),
    (3, 7, 9, 5, 2, 1, 0, np.uint8, {"zeros": False}),   # a uint8 W without zero points:
    (3, 7, 9, 5, 2, 1, 0, np.int8, {"zeros": False}),    # 0, not 128
])
def test_conv_integer_on_a_device_with_vnni(tmp_path, c, h, w, m, k, stride, pad, w_type,
                                            extra):
    """ConvInteger on the device's 8-bit dot product, the numpy backend's int32 results
    exactly, poisoning on; without the instruction, the host's."""
    if not _vnni_device():
        pytest.skip("the device has no 8-bit dot product (DeviceLimits.vnni)")
    path, feeds = _conv_integer(tmp_path, c, h, w, m, k, stride, pad, w_type, **extra)
    _, got, stats = compare_backends(path, feeds, rtol=0, atol=0, poison=True)
    assert not stats.host_ops
    if w_type == np.uint8 and not extra.get("per_channel"):   # (what onnxruntime takes)
        import onnx

        np.testing.assert_array_equal(got["y"], _onnxruntime(onnx.load(path), feeds)["y"])


@requires_opencl
def test_conv_integer_without_vnni_is_the_hosts(tmp_path, monkeypatch):
    """Without the 8-bit dot product (or turned off) ConvInteger runs on the host."""
    from palimpsest.backends.opencl.kernels import quant_conv

    monkeypatch.setattr(quant_conv, "USE_VNNI", False)
    path, feeds = _conv_integer(tmp_path, 4, 6, 7, 8, 3, 1, 1, np.uint8)
    _, _, stats = compare_backends(path, feeds, rtol=0, atol=0,
                                   host_ops_allowed=("graph.conv_integer",))
    assert stats.host_ops == {"graph.conv_integer": 1}


@requires_opencl
def test_vnni_only_where_the_cpu_has_its_512_bit_form(monkeypatch):
    """The device probes the 8-bit dot product only where the host's CPU has AVX-512
    VNNI (a probe on a CPU with avx_vnni alone would fault, not fail), once, at its first
    use: other flags, or a device that is not the host's CPU, give DeviceLimits.vnni
    False."""
    from palimpsest.backends import onednn
    from palimpsest.backends.opencl import runtime

    cl_device = runtime.device().device
    monkeypatch.setattr(onednn, "cpu_flags", lambda: frozenset({"avx2", "avx_vnni"}))
    assert not runtime.Device(cl_device).limits.vnni
    probed = []
    monkeypatch.setattr(onednn, "cpu_flags",
                        lambda: frozenset({"avx512f", "avx512bw", "avx512_vnni"}))
    monkeypatch.setattr(runtime, "_vnni_works", lambda *args: probed.append(args) or True)
    limits = runtime.Device(cl_device).limits
    assert not probed   # (probed at its first use: an 8-bit op's generator asking)
    assert bool(limits.vnni) == runtime.device().limits.host_cpu
    assert bool(limits.vnni) == runtime.device().limits.host_cpu
    assert len(probed) == int(runtime.device().limits.host_cpu)   # (once)
