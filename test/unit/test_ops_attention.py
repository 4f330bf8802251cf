"""Attention's common form as kernel.attention, its scores and softmax rows planned
workspaces, against onnxruntime: 3-D and 4-D, grouped-query heads, causal, bool and float
masks, dynamic sequence length; the rest stays kernel.generic and still matches."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402

from palimpsest.backends.binding import find_function  # noqa: E402
from palimpsest.backends.numpy.session import Session  # noqa: E402
from palimpsest.dialects.graph.from_onnx import import_onnx  # noqa: E402
from palimpsest.ir.attributes import TypeAttr  # noqa: E402
from palimpsest.ir.types import FunctionType  # noqa: E402
from palimpsest.passes.pass_manager import PassManager, parse_pipeline  # noqa: E402

RNG = np.random.default_rng(8)


def _model(q_shape, kv_shape, mask=None, dynamic=False, **attrs):
    names = ["q", "k", "v"] + (["m"] if mask is not None else [])
    seq = "s" if dynamic else None

    def info(name, shape, code=T.FLOAT):
        dims = [seq if dynamic and i == len(shape) - 2 and len(shape) == 4 else
                (seq if dynamic and i == 1 and len(shape) == 3 else d)
                for i, d in enumerate(shape)]
        return h.make_tensor_value_info(name, code, dims)

    inputs = [info("q", q_shape), info("k", kv_shape), info("v", kv_shape)]
    if mask is not None:
        inputs.append(h.make_tensor_value_info("m", mask, None))
    graph = h.make_graph([h.make_node("Attention", names, ["y"], **attrs)], "att", inputs,
                         [h.make_tensor_value_info("y", T.FLOAT, None)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 23)])
    model.ir_version = 10
    return model


def _check(model, feeds, kernel=True):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    want = ort.InferenceSession(model.SerializeToString(), options).run(None, feeds)[0]
    got = Session(import_onnx(model), poison=True).run(feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    module = import_onnx(model)
    func = find_function(module, None)
    for arg, array in zip(func.entry_block.args, feeds.values()):
        arg.type = arg.type.__class__(array.shape, arg.type.element_type)
    func.properties["function_type"] = TypeAttr(FunctionType(
        tuple(a.type for a in func.entry_block.args), func.type.results))
    PassManager(parse_pipeline("infer-shapes,bufferize,lower-to-kernels")).run(module)
    names = [op.name for op in module.walk()]
    assert ("kernel.attention" in names) == kernel
    if kernel:
        workspaces = [op for op in module.walk() if op.name == "buffer.alloc"
                      and op.properties["kind"].value == "workspace"]
        assert len(workspaces) >= 2   # scores and stats (and context when 3-D)


def _feeds(q_shape, kv_shape, mask=None):
    feeds = {"q": RNG.standard_normal(q_shape).astype(np.float32),
             "k": RNG.standard_normal(kv_shape).astype(np.float32),
             "v": RNG.standard_normal(kv_shape).astype(np.float32)}
    if mask is not None:
        feeds["m"] = mask
    return feeds


def test_4d_causal_grouped_query_heads():
    model = _model((2, 8, 5, 16), (2, 2, 5, 16), is_causal=1)
    _check(model, _feeds((2, 8, 5, 16), (2, 2, 5, 16)))


def test_3d_heads_with_a_bool_mask():
    mask = RNG.random((5, 7)) > 0.3
    mask[:, 0] = True
    model = _model((1, 5, 32), (1, 7, 16), mask=T.BOOL, q_num_heads=4, kv_num_heads=2)
    _check(model, _feeds((1, 5, 32), (1, 7, 16), mask))


def test_float_mask_and_scale():
    mask = RNG.standard_normal((1, 1, 4, 6)).astype(np.float32)
    model = _model((1, 2, 4, 8), (1, 2, 6, 8), mask=T.FLOAT, scale=0.3)
    _check(model, _feeds((1, 2, 4, 8), (1, 2, 6, 8), mask))


def test_softcap_stays_generic_and_matches():
    model = _model((1, 2, 4, 8), (1, 2, 4, 8), softcap=2.0)
    _check(model, _feeds((1, 2, 4, 8), (1, 2, 4, 8)), kernel=False)


def test_dynamic_sequence_length():
    model = _model((1, 4, 6, 8), (1, 4, 6, 8), dynamic=True, is_causal=1)
    session = Session(import_onnx(model), poison=True)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    reference = ort.InferenceSession(model.SerializeToString(), options)
    for seq in (3, 9):
        feeds = _feeds((1, 4, seq, 8), (1, 4, seq, 8))
        np.testing.assert_allclose(session.run(feeds)["y"], reference.run(None, feeds)[0],
                                   rtol=1e-5, atol=1e-5)
