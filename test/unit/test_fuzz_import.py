"""Fuzz palimpsest-import with seeded mutations of ONNX models: examples/tiny_cnn.onnx and a
few cases of ONNX's node suite (onnx_node_cases.py's cache). Mutations: attributes of the
wrong type or with hostile values, missing initializers and nodes, initializers whose
data does not match their dims, zero/negative/huge input dims, odd element types,
cycles, empty graphs, duplicated outputs, unknown ops and opsets, truncated bytes.
Oracle: the model imports (and its IR parses back and prints the same), or the tool
exits 1 with one error line naming the model; never exit 3, an escaping exception or a
hang."""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")

from fuzz_mutations import case_rng, parametrize_case_ranges, run_tool  # noqa: E402
from palimpsest.tools import onnx_import, opt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CASES = 80
BATCH = 40
NODE_CASES = ("test_conv_with_strides_padding", "test_gemm_default_matrix_bias",
              "test_lstm_defaults", "test_if", "test_reshape_reduced_dims",
              "test_maxpool_2d_pads", "test_slice", "test_concat_2d_axis_0", "test_gather_0",
              "test_batchnorm_example", "test_loop11", "test_squeeze",
              "test_resize_upsample_scales_linear", "test_split_equal_parts_1d_opset18",
              "test_scan9_sum", "test_expand_dim_changed", "test_cast_FLOAT_to_FLOAT16")
A = onnx.AttributeProto
HOSTILE = (0, -1, -2, 3, 2**31, 2**62, -(2**63), 2**63 - 1)


def _rewritten_forms() -> bytes:
    """A model with the forms dialects/graph/onnx_rewrites.py rewrites before import:
    onnxruntime's FusedConv (with Z and a Clip) and FusedMatMul (transposed, scaled), and
    a SplitToSequence read by SequenceAt at constant positions."""
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper

    inits = [numpy_helper.from_array(a, n) for n, a in (
        ("w", np.ones((2, 2, 1, 1), np.float32)), ("m", np.ones((4, 5), np.float32)),
        ("split", np.array([1, 2], np.int64)), ("p", np.array(-1, np.int64)))]
    nodes = [h.make_node("FusedConv", ["x", "w", "", "z"], ["c"], domain="com.microsoft",
                         activation="Clip", activation_params=[0.0, 6.0], kernel_shape=[1, 1]),
             h.make_node("FusedMatMul", ["c", "m"], ["y"], domain="com.microsoft", transA=1,
                         alpha=0.5),
             h.make_node("SplitToSequence", ["x", "split"], ["s"], axis=1),
             h.make_node("SequenceAt", ["s", "p"], ["q"])]
    graph = h.make_graph(nodes, "rewrites", [
        h.make_tensor_value_info("x", T.FLOAT, [1, 2, 4, 3]),
        h.make_tensor_value_info("z", T.FLOAT, [1, 2, 4, 3])],
        [h.make_tensor_value_info("y", T.FLOAT, None),
         h.make_tensor_value_info("q", T.FLOAT, None)], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid(
        "com.microsoft", 1)]).SerializeToString()


@lru_cache(maxsize=None)
def seeds() -> dict[str, bytes]:
    """name -> serialized model."""
    found = {"tiny_cnn": (ROOT / "examples" / "tiny_cnn.onnx").read_bytes(),
             "rewritten_forms": _rewritten_forms()}
    try:
        import onnx_node_cases

        root = onnx_node_cases.ensure_cache()
    except Exception:  # noqa: BLE001 - without the node suite, tiny_cnn alone
        return found
    for name in NODE_CASES:
        path = root / name / "model.onnx"
        if path.is_file():
            found[name] = path.read_bytes()
    return found


# ------------------------------------------------------------------ model mutations

def _nodes(graph):
    """Every node, those of subgraphs included."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == A.GRAPH:
                yield from _nodes(attr.g)


def _retype_attribute(model, rng):
    attrs = [a for n in _nodes(model.graph) for a in n.attribute if a.type != A.GRAPH]
    if not attrs:
        return False
    attr = rng.choice(attrs)
    name = attr.name
    attr.Clear()
    attr.name = name
    kind = rng.choice(("int", "float", "string", "ints", "floats", "strings", "tensor", "none"))
    if kind == "int":
        attr.type, attr.i = A.INT, rng.choice(HOSTILE)
    elif kind == "float":
        attr.type, attr.f = A.FLOAT, rng.choice((0.0, -1.5, float("nan"), float("inf")))
    elif kind == "string":
        attr.type, attr.s = A.STRING, rng.choice((b"", b"NOTSET", b"\xff\xfe", b"SAME_UPPER"))
    elif kind == "ints":
        attr.type = A.INTS
        attr.ints.extend(rng.choice(HOSTILE) for _ in range(rng.randrange(6)))
    elif kind == "floats":
        attr.type = A.FLOATS
        attr.floats.extend(rng.uniform(-3, 3) for _ in range(rng.randrange(4)))
    elif kind == "strings":
        attr.type = A.STRINGS
        attr.strings.extend([b"a", b"relu"][:rng.randrange(3)])
    elif kind == "tensor":
        attr.type = A.TENSOR
        attr.t.CopyFrom(onnx.numpy_helper.from_array(
            __import__("numpy").zeros(rng.choice(((0,), (2, 3), ())), "float32")))
    return True


def _hostile_attribute_value(model, rng):
    attrs = [a for n in _nodes(model.graph) for a in n.attribute
             if a.type in (A.INT, A.INTS)]
    if not attrs:
        return False
    attr = rng.choice(attrs)
    if attr.type == A.INT:
        attr.i = rng.choice(HOSTILE)
    else:
        del attr.ints[:]
        attr.ints.extend(rng.choice(HOSTILE) for _ in range(rng.randrange(5)))
    return True


def _drop_initializer(model, rng):
    if not model.graph.initializer:
        return False
    del model.graph.initializer[rng.randrange(len(model.graph.initializer))]
    return True


def _drop_node(model, rng):
    if not model.graph.node:
        return False
    del model.graph.node[rng.randrange(len(model.graph.node))]
    return True


def _initializer_dims(model, rng):
    if not model.graph.initializer:
        return False
    init = rng.choice(model.graph.initializer)
    dims = list(init.dims) or [1]
    dims[rng.randrange(len(dims))] = rng.choice((0, -1, 1, 7, 2**40))
    if rng.random() < 0.3:
        dims.append(2)
    del init.dims[:]
    init.dims.extend(dims)
    return True


def _truncate_initializer(model, rng):
    inits = [i for i in model.graph.initializer if i.raw_data or i.float_data or i.int64_data]
    if not inits:
        return False
    init = rng.choice(inits)
    if init.raw_data:
        init.raw_data = init.raw_data[:rng.randrange(len(init.raw_data))]
    elif init.float_data:
        del init.float_data[rng.randrange(len(init.float_data)):]
    else:
        del init.int64_data[rng.randrange(len(init.int64_data)):]
    return True


def _value_infos(model):
    return [*model.graph.input, *model.graph.output, *model.graph.value_info]


def _dims(model, rng):
    infos = [v for v in _value_infos(model)
             if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")]
    if not infos:
        return False
    shape = rng.choice(infos).type.tensor_type.shape
    if not shape.dim or rng.random() < 0.2:
        shape.dim.add().dim_value = rng.choice((0, 3))
        return True
    dim = rng.choice(shape.dim)
    choice = rng.choice((0, -1, -5, 2**40, 2**62, "sym", "", 1))
    if isinstance(choice, str):
        dim.dim_param = choice
    else:
        dim.dim_value = choice
    return True


def _element_type(model, rng):
    infos = [v for v in _value_infos(model) if v.type.HasField("tensor_type")]
    inits = list(model.graph.initializer)
    if not infos and not inits:
        return False
    code = rng.choice((0, 8, 14, 15, 16, 99, -1, 11, 7, 9))
    if inits and rng.random() < 0.4:
        rng.choice(inits).data_type = code
    elif infos:
        rng.choice(infos).type.tensor_type.elem_type = code
    return True


def _cycle(model, rng):
    nodes = model.graph.node
    if not nodes or not nodes[-1].output:
        return False
    first, last = nodes[0], nodes[-1]
    if rng.random() < 0.5 and first.input:
        first.input[rng.randrange(len(first.input))] = last.output[0]
    else:
        node = rng.choice(nodes)
        if not node.input or not node.output:
            return False
        node.input[0] = node.output[0]
    return True


def _empty(model, rng):
    part = rng.choice(("node", "output", "input", "all"))
    if part in ("node", "all"):
        del model.graph.node[:]
    if part in ("output", "all"):
        del model.graph.output[:]
    if part in ("input", "all"):
        del model.graph.input[:]
    return True


def _duplicate_output(model, rng):
    nodes = [n for n in model.graph.node if n.output]
    if len(nodes) < 2:
        return False
    a, b = rng.sample(nodes, 2)
    b.output[0] = a.output[0]
    return True


def _any_node(model, rng):
    """A random node of the model, subgraphs' included; None in a model without nodes."""
    nodes = list(_nodes(model.graph))
    return rng.choice(nodes) if nodes else None


def _op_type(model, rng):
    node = _any_node(model, rng)
    if node is None:
        return False
    if rng.random() < 0.3:
        node.domain = rng.choice(("com.microsoft", "ai.onnx.ml", "nosuch"))
    else:
        node.op_type = rng.choice(("Add", "Relu", "Conv", "Reshape", "Gemm", "If", "Loop",
                                   "Concat", "NoSuchOp", "", "relu"))
    return True


def _opset(model, rng):
    if rng.random() < 0.3:
        del model.opset_import[:]
    else:
        for entry in model.opset_import:
            entry.version = rng.choice((0, 1, 5, 99, -1))
    return True


def _inputs_arity(model, rng):
    node = _any_node(model, rng)
    if node is None:
        return False
    if node.input and rng.random() < 0.5:
        del node.input[rng.randrange(len(node.input))]
    else:
        node.input.append(rng.choice(("", "nosuch", node.input[0] if node.input else "x")))
    return True


MODEL_MUTATIONS = (_retype_attribute, _hostile_attribute_value, _drop_initializer, _drop_node,
                   _initializer_dims, _truncate_initializer, _dims, _element_type, _cycle,
                   _empty, _duplicate_output, _op_type, _opset, _inputs_arity)


def mutate_model(data: bytes, rng) -> tuple[bytes, list[str]]:
    model = onnx.ModelProto()
    model.ParseFromString(data)
    model = copy.deepcopy(model)
    applied = []
    for _ in range(rng.choice((1, 1, 2))):
        mutation = rng.choice(MODEL_MUTATIONS)
        if mutation(model, rng):
            applied.append(mutation.__name__.lstrip("_"))
    data = model.SerializeToString()
    if rng.random() < 0.05:  # bytes that are not a model at all
        data = data[:rng.randrange(max(1, len(data)))]
        applied.append("truncate_bytes")
    return data, applied


# ------------------------------------------------------------------------ the oracle

def _run_case(index: int, workdir: Path) -> str:
    rng = case_rng("import", index)
    name = rng.choice(sorted(seeds()))
    data, applied = mutate_model(seeds()[name], rng)
    path = workdir / f"case{index}.onnx"
    path.write_bytes(data)
    out = workdir / f"case{index}.pal"
    what = f"case {index} ({name}, {', '.join(applied)}; model {path})"
    outcome = run_tool(onnx_import.main, [str(path), "-o", str(out)])
    assert outcome.code in (0, 1), f"{what}: exit {outcome.code}\n{outcome.stderr}"
    if outcome.code == 1:
        lines = outcome.stderr.splitlines()
        assert len(lines) == 1 and str(path) in lines[0] and "error: " in lines[0], (
            f"{what}: not one error line naming the model\n{outcome.stderr}")
        return "refused"
    again = workdir / f"case{index}.again.pal"
    reread = run_tool(opt.main, [str(out), "-o", str(again)])
    assert reread.code == 0, f"{what}: the imported IR does not parse back\n{reread.stderr}"
    assert again.read_text(encoding="utf-8") == out.read_text(encoding="utf-8"), (
        f"{what}: the imported IR does not print back the same")
    return "accepted"


def pytest_generate_tests(metafunc):
    parametrize_case_ranges(metafunc, DEFAULT_CASES, BATCH)


def test_fuzz_import(case_range, tmp_path):
    for index in range(*case_range):
        _run_case(index, tmp_path)


def test_seeds_include_node_cases():
    assert "tiny_cnn" in seeds()
    assert len(seeds()) > 1 or pytest.skip("the ONNX node-suite cache could not be built")
