"""The data-movement kernels on OpenCL (backends/opencl/kernels/movement.py and
resize.py) give the numpy backend's results, on the device: transpose, concat, gather,
pad and resize at the graph level (lowered to kernel.*), over element types, modes and
shapes, and the ONNX node cases of those ops."""

from __future__ import annotations

import importlib.util
import itertools
import sys

import pytest

np = pytest.importorskip("numpy")

from opencl_support import compare_backends, requires_opencl  # noqa: E402

pytestmark = requires_opencl

ELEMENT = {np.float32: "f32", np.float64: "f64", np.float16: "f16", np.int32: "i32",
           np.int64: "i64", np.int8: "i8", np.uint8: "ui8", np.bool_: "i1"}


def ttype(shape, dtype) -> str:
    return f"tensor<{'x'.join(str(d) for d in shape)}{'x' if shape else ''}{ELEMENT[dtype]}>"


def data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def only(results: dict):
    (value,) = results.values()
    return value


def dense(values, dtype_name) -> str:
    return f"dense<[{', '.join(str(v) for v in values)}]> : tensor<{len(values)}x{dtype_name}>"


def graph(args: list, body: list, result: tuple) -> str:
    """A function of `args` ((name, type)) running `body` and returning `result`."""
    signature = ", ".join(f"%{name}: {type_}" for name, type_ in args)
    lines = "".join(f"  {line}\n" for line in body)
    return (f"func.func @f({signature}) -> {result[1]} {{\n{lines}"
            f"  func.return %{result[0]} : {result[1]}\n}}\n")


def run_op(name: str, x, operands: str, props: str, out_shape, extra_args=(), inputs=None):
    """One graph op on input %x (and `extra_args`), compared on both backends."""
    args = [("x", ttype(x.shape, x.dtype.type))] + list(extra_args)
    operand_types = ", ".join(t for _, t in args)
    out_type = ttype(out_shape, x.dtype.type)
    body = [f"%y = {name} {operands} {props} : ({operand_types}) -> {out_type}"]
    text = graph(args, body, ("y", out_type))
    feeds = {"x": x, **(inputs or {})}
    return compare_backends(text, feeds, poison=True)


# -- transpose ---------------------------------------------------------------------------------

def transposed(x, perm, note=""):
    out_shape = tuple(x.shape[p] for p in perm)
    _, actual, _ = run_op("graph.transpose", x, "%x",
                                     f"{{perm = array<i64: {', '.join(map(str, perm))}>}}",
                                     out_shape)
    np.testing.assert_array_equal(only(actual), x.transpose(perm), err_msg=note)


@pytest.mark.parametrize("shape,perm", [
    ((33, 65), (1, 0)), ((64, 128), (1, 0)), ((1, 7), (1, 0)),
    ((3, 40, 70), (0, 2, 1)), ((2, 5, 33, 34), (0, 2, 3, 1)), ((2, 3, 4, 5), (0, 3, 1, 2)),
    ((2, 3, 4, 5, 6), (0, 3, 1, 4, 2)), ((2, 3, 4, 5, 6), (4, 3, 2, 1, 0)),
    ((2, 1, 40, 3, 1), (4, 2, 0, 3, 1)), ((4, 6, 8), (0, 1, 2)),
])
def test_transpose_ranks(shape, perm):
    transposed(data(shape, np.float32), perm)


@pytest.mark.parametrize("shape", [(5, 7, 9), (3, 37, 35), (2, 3, 4, 5)],
                         ids=["small3", "tiled3", "rank4"])
def test_transpose_every_permutation(shape):
    x = data(shape, np.float32)
    for perm in itertools.permutations(range(len(shape))):
        transposed(x, perm, note=f"perm {perm}")


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8, np.bool_, np.float16,
                                   np.float64])
def test_transpose_element_types(dtype):
    transposed(data((3, 34, 33), dtype), (2, 0, 1))
    transposed(data((4, 5, 6), dtype), (1, 0, 2))


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.float16, np.int64])
@pytest.mark.parametrize("shape, perm", [
    ((1, 64, 64, 3), (0, 3, 1, 2)),     # NHWC image -> NCHW: 3 channels deinterleaved
    ((2, 3, 17, 5), (0, 2, 3, 1)),      # NCHW -> NHWC: interleaved, a tail of 5
    ((37, 8), (1, 0)),                  # 8 wide, a tail
    ((2, 40, 2), (0, 2, 1)),            # 2 wide, batch 2
    ((5, 33), (1, 0)),                  # 5 rows interleaved, a tail of 1
    ((1, 7, 16), (0, 2, 1)),            # one whole vector
], ids=["nhwc to nchw", "nchw to nhwc", "8 wide", "2 wide", "5 rows", "one vector"])
def test_narrow_transpose(shape, perm, dtype):
    """A transpose whose short side is at most 8: vectors of 16 positions of the long
    side, lanes moved by constant selection, and the tail element by element."""
    from palimpsest.backends.opencl.kernels import movement
    from palimpsest.backends.opencl.kernels.base import Arg, KernelCall

    transposed(data(shape, dtype), perm)
    out = tuple(shape[p] for p in perm)
    call = KernelCall("kernel.transpose", {"perm": list(perm)}, [Arg(shape, np.dtype(dtype))],
                      [Arg(out, np.dtype(dtype))])
    assert [launch.kernel for launch in movement.transpose(call)] == ["transpose_narrow"]


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.int64])
@pytest.mark.parametrize("shape, perm, kernel", [
    ((16, 24), (1, 0), "transpose_blocks"),
    ((3, 32, 40), (0, 2, 1), "transpose_blocks"),
    ((2, 16, 8, 8), (0, 2, 3, 1), "transpose_blocks"),   # NCHW -> NHWC, 16 channels
    ((1, 512, 256, 1), (0, 2, 1, 3), "transpose_blocks"),  # magika's
    ((24, 20), (1, 0), "transpose_tiled"),               # 20: not a multiple of 8
])
def test_block_transpose(shape, perm, kernel, dtype):
    """Sides that are multiples of 8: 8 x 8 blocks moved in registers; others tiled."""
    from palimpsest.backends.opencl.kernels import movement
    from palimpsest.backends.opencl.kernels.base import Arg, KernelCall

    transposed(data(shape, dtype), perm)
    out = tuple(shape[p] for p in perm)
    call = KernelCall("kernel.transpose", {"perm": list(perm)}, [Arg(shape, np.dtype(dtype))],
                      [Arg(out, np.dtype(dtype))])
    assert [launch.kernel for launch in movement.transpose(call)] == [kernel]


# -- concat ------------------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("count", [1, 2, 3, 4])
def test_concat(axis, count):
    base = [3, 4, 5]
    parts = []
    for k in range(count):
        shape = list(base)
        shape[axis] = k + 1
        parts.append(data(tuple(shape), np.float32, seed=k))
    out_shape = list(base)
    out_shape[axis] = sum(p.shape[axis] for p in parts)
    x, rest = parts[0], parts[1:]
    extra = [(f"x{k}", ttype(p.shape, np.float32)) for k, p in enumerate(rest, 1)]
    operands = ", ".join(["%x"] + [f"%x{k}" for k in range(1, count)])
    _, actual, _ = run_op("graph.concat", x, operands, f"{{axis = {axis}}}", out_shape,
                          extra, inputs={f"x{k}": p for k, p in enumerate(rest, 1)})
    np.testing.assert_array_equal(only(actual), np.concatenate(parts, axis))


@pytest.mark.parametrize("dtype", [np.int64, np.int8, np.bool_, np.float16])
def test_concat_element_types(dtype):
    a, b = data((2, 3, 4), dtype), data((2, 5, 4), dtype, seed=1)
    run_op("graph.concat", a, "%x, %b", "{axis = 1}", (2, 8, 4),
           [("b", ttype(b.shape, dtype))], inputs={"b": b})


def test_concat_with_an_empty_in():
    a, b = data((2, 0, 4), np.float32), data((2, 5, 4), np.float32, seed=1)
    run_op("graph.concat", a, "%x, %b", "{axis = 1}", (2, 5, 4),
           [("b", ttype(b.shape, np.float32))], inputs={"b": b})


# -- gather ------------------------------------------------------------------------------------

def gathered(x, indices, axis):
    out_shape = x.shape[:axis] + indices.shape + x.shape[axis + 1:]
    _, actual, _ = run_op("graph.gather", x, "%x, %i", f"{{axis = {axis}}}", out_shape,
                          [("i", ttype(indices.shape, indices.dtype.type))],
                          inputs={"i": indices})
    np.testing.assert_array_equal(only(actual), np.take(x, indices, axis=axis))


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("index_type", [np.int32, np.int64])
def test_gather_negative_indices(axis, index_type):
    x = data((4, 5, 6), np.float32)
    dim = x.shape[axis]
    gathered(x, np.array([0, -1, dim - 1, -dim, 2], index_type), axis)
    gathered(x, np.array([[1, -2], [0, -dim]], index_type), axis)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_gather_scalar_index(axis):
    x = data((4, 5, 6), np.float32)
    gathered(x, np.array(-1, np.int64), axis)
    gathered(x, np.array(2, np.int32), axis)


@pytest.mark.parametrize("dtype", [np.int64, np.int8, np.bool_, np.float16, np.float64])
def test_gather_element_types(dtype):
    gathered(data((6, 7), dtype), np.array([5, -6, 0, 3], np.int64), 0)
    gathered(data((6, 7), dtype), np.array([[-1], [2]], np.int32), 1)


# -- pad ---------------------------------------------------------------------------------------

def padded(x, pads, mode, value=None):
    rank = x.ndim
    out_shape = tuple(x.shape[a] + pads[a] + pads[a + rank] for a in range(rank))
    consts = [("pads", dense(pads, "i64"), f"tensor<{2 * rank}xi64>")]
    operands = "%x, %pads"
    props = f'mode = "{mode}"'
    inputs = {}
    extra = []
    if value is not None:
        extra = [("v", ttype((), x.dtype.type))]
        inputs = {"v": np.asarray(value, x.dtype)}
        # the operand order is data, pads, constant_value: %v is an arg, pads a constant
        operands = "%x, %pads, %v"
        props += ", operandSegmentSizes = array<i32: 1, 1, 1, 0>"
    args = [("x", ttype(x.shape, x.dtype.type))] + extra
    body = [f"%pads = graph.constant {{value = {consts[0][1]}}} : {consts[0][2]}"]
    operand_types = [ttype(x.shape, x.dtype.type), consts[0][2]] + [t for _, t in extra]
    out_type = ttype(out_shape, x.dtype.type)
    body.append(f"%y = graph.pad {operands} {{{props}}} : ({', '.join(operand_types)}) "
                f"-> {out_type}")
    return compare_backends(graph(args, body, ("y", out_type)), {"x": x, **inputs},
                            poison=True)


PADS = [
    [1, 2, 0, 3, 1, 1, 0, 2],        # pads on three axes
    [0, -1, 1, 0, 0, 1, -2, 1],      # crops mixed with pads
    [0, 0, -1, -2, 0, 0, -1, 0],     # crops only
    [0, 0, 3, 3, 0, 0, 3, 3],        # up to the reflect limit (size 4 - 1)
]


# rows of 5: a work-item per element; of 19 and more: a work-item per row (PAD_ROW_FROM)
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
@pytest.mark.parametrize("pads", PADS, ids=["pad", "pad-crop", "crop", "wide"])
@pytest.mark.parametrize("width", [5, 21])
def test_pad_modes(mode, pads, width):
    padded(data((2, 3, 4, width), np.float32), pads, mode)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, np.int8, np.float16])
@pytest.mark.parametrize("width", [5, 21])
def test_pad_constant_value(dtype, width):
    value = True if dtype == np.bool_ else 3
    padded(data((2, 3, 4, width), dtype), [0, 1, 1, 0, 1, 0, 2, -1], "constant", value)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_])
@pytest.mark.parametrize("width", [6, 20])
def test_pad_integer_modes(dtype, width):
    for mode in ("edge", "reflect", "wrap"):
        padded(data((3, width), dtype), [2, 1, 1, -2], mode)


# -- resize ------------------------------------------------------------------------------------

COORDINATE_MODES = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                    "align_corners", "asymmetric", "tf_crop_and_resize"]


def resized(x, *, scales=None, sizes=None, roi=None, axes=None, **attrs):
    """graph.resize of `x` by `scales` or to `sizes` (of `axes`, default all) and `attrs`."""
    axes_list = list(range(x.ndim)) if axes is None else list(axes)
    out_shape = list(x.shape)
    for k, a in enumerate(axes_list):
        out_shape[a] = sizes[k] if sizes is not None else int(np.floor(scales[k] * x.shape[a]))
    consts, segments = [], [1, 0, 0, 0]
    if roi is not None:
        consts.append(("roi", dense([float(v) for v in roi], "f32"), f"tensor<{len(roi)}xf32>"))
        segments[1] = 1
    if scales is not None:
        consts.append(("scales", dense([float(v) for v in scales], "f32"),
                       f"tensor<{len(scales)}xf32>"))
        segments[2] = 1
    else:
        consts.append(("sizes", dense(sizes, "i64"), f"tensor<{len(sizes)}xi64>"))
        segments[3] = 1
    props = [f"operandSegmentSizes = array<i32: {', '.join(map(str, segments))}>"]
    if axes is not None:
        props.append(f"axes = array<i64: {', '.join(map(str, axes))}>")
    for key, value in attrs.items():
        if isinstance(value, str):
            props.append(f'{key} = "{value}"')
        else:
            props.append(f"{key} = {value} : f32" if isinstance(value, float) else
                         f"{key} = {value}")
    x_type, out_type = ttype(x.shape, x.dtype.type), ttype(out_shape, x.dtype.type)
    body = [f"%{c} = graph.constant {{value = {v}}} : {t}" for c, v, t in consts]
    operands = ", ".join(["%x"] + [f"%{c}" for c, _, _ in consts])
    types = ", ".join([x_type] + [t for _, _, t in consts])
    body.append(f"%y = graph.resize {operands} {{{', '.join(props)}}} : ({types}) -> "
                f"{out_type}")
    _, actual, stats = compare_backends(graph([("x", x_type)], body, ("y", out_type)),
                                        {"x": x}, poison=True)
    assert only(actual).shape == tuple(out_shape)
    return stats


def crop_roi(ctm):
    # a crop box reaching outside the image, so tf_crop_and_resize extrapolates
    return [0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3] if ctm == "tf_crop_and_resize" else None


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("ctm", COORDINATE_MODES)
@pytest.mark.parametrize("scales", [[1, 1, 2, 1.5], [1, 1, 0.5, 0.6]], ids=["up", "down"])
def test_resize_modes(mode, ctm, scales):
    x = data((2, 3, 10, 12), np.float32)
    stats = resized(x, scales=scales, roi=crop_roi(ctm), mode=mode,
                    coordinate_transformation_mode=ctm, extrapolation_value=-7.5)
    assert stats.device_launches >= 1


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor",
                                          "ceil"])
@pytest.mark.parametrize("ctm", ["half_pixel", "asymmetric", "align_corners"])
def test_resize_nearest_modes(nearest_mode, ctm):
    x = data((1, 2, 9, 7), np.float32)
    resized(x, sizes=[1, 2, 20, 3], nearest_mode=nearest_mode, coordinate_transformation_mode=ctm)
    resized(x, scales=[1, 1, 3, 2], nearest_mode=nearest_mode, coordinate_transformation_mode=ctm)


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.float16, np.int64])
@pytest.mark.parametrize("shape, scales, axes", [
    ((1, 3, 10, 40), [2, 2], [2, 3]),       # x2 along W: 16-lane vectors of 8, whole
    ((2, 3, 5, 10), [2, 2], [2, 3]),        # x2: a vector of 16 and a tail of 4
    ((1, 2, 6, 9), [4, 4], [2, 3]),         # x4, a tail only past 32
    ((1, 2, 3, 5), [8, 8], [2, 3]),         # x8
    ((1, 4, 7, 37), [3], [2]),              # along H only: rows copied, a tail of 5
    ((1, 2, 6, 11), [1, 1.5], [2, 3]),      # a table of indices along W
    ((3, 50), [2, 2], [0, 1]),              # 2-D
    ((40,), [2], [0]),                      # 1-D: one row
], ids=["x2", "x2 tail", "x4", "x8", "along H", "x1.5 table", "2-D", "1-D"])
def test_resize_nearest_rows(dtype, shape, scales, axes):
    """The row-wise nearest resize (no extrapolation): copied rows, integer upsamples of
    repeated lanes with tails, index tables, every element size."""
    resized(data(shape, dtype), scales=scales, axes=axes, mode="nearest",
            coordinate_transformation_mode="asymmetric", nearest_mode="floor")


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scales", [[0.5, 0.4], [0.25, 0.3], [2.0, 1.7]],
                         ids=["half", "quarter", "up"])
def test_resize_antialias(mode, scales):
    resized(data((1, 3, 16, 20), np.float32), scales=scales, axes=[2, 3], mode=mode,
            antialias=1)


@pytest.mark.parametrize("scales", [[1, 1, 0.6, 1.8], [1, 1, 3, 0.5]])
def test_resize_cubic_exclude_outside(scales):
    resized(data((1, 2, 8, 9), np.float32), scales=scales, mode="cubic", exclude_outside=1,
            cubic_coeff_a=-0.5)


def test_resize_to_sizes_on_some_axes():
    x = data((2, 3, 11, 13), np.float32)
    resized(x, sizes=[5, 26], axes=[3, 2], mode="linear")
    resized(x, sizes=[7, 4], axes=[2, 3], mode="cubic",
            coordinate_transformation_mode="align_corners")


def test_resize_float64():
    resized(data((1, 2, 6, 7), np.float64), scales=[1, 1, 1.5, 0.7], mode="cubic")


@pytest.mark.parametrize("dtype", [np.uint8, np.int64, np.bool_, np.float16, np.int32])
def test_resize_nearest_element_types(dtype):
    x = data((1, 3, 6, 5), dtype)
    resized(x, scales=[1, 1, 2, 0.6])
    resized(x, scales=[1, 1, 1.5, 2], roi=crop_roi("tf_crop_and_resize"),
            coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=9.0)


# -- together -------------------------------------------------------------------------------------

CHAIN = """
func.func @f(%x: tensor<2x3x9x10xf32>, %i: tensor<4xi64>) -> (tensor<2x12x18x3xf32>, tensor<2x3x9x10xf32>) {
  %pads = graph.constant {value = dense<[0, 0, 1, 2, 0, 0, 2, 1]> : tensor<8xi64>} : tensor<8xi64>
  %scales = graph.constant {value = dense<[1.0, 1.0, 1.5, 0.5]> : tensor<4xf32>} : tensor<4xf32>
  %p = graph.pad %x, %pads {mode = "reflect"} : (tensor<2x3x9x10xf32>, tensor<8xi64>) -> tensor<2x3x12x13xf32>
  %r = graph.resize %p, %scales {operandSegmentSizes = array<i32: 1, 0, 1, 0>, mode = "cubic"} : (tensor<2x3x12x13xf32>, tensor<4xf32>) -> tensor<2x3x18x6xf32>
  %c = graph.concat %r, %r {axis = 1} : (tensor<2x3x18x6xf32>, tensor<2x3x18x6xf32>) -> tensor<2x6x18x6xf32>
  %g = graph.gather %c, %i {axis = 3} : (tensor<2x6x18x6xf32>, tensor<4xi64>) -> tensor<2x6x18x4xf32>
  %t = graph.transpose %g {perm = array<i64: 0, 3, 2, 1>} : (tensor<2x6x18x4xf32>) -> tensor<2x4x18x6xf32>
  %u = graph.transpose %t {perm = array<i64: 0, 3, 2, 1>} : (tensor<2x4x18x6xf32>) -> tensor<2x6x18x4xf32>
  %w = graph.concat %u, %u {axis = 1} : (tensor<2x6x18x4xf32>, tensor<2x6x18x4xf32>) -> tensor<2x12x18x4xf32>
  %v = graph.gather %w, %i {axis = 3} : (tensor<2x12x18x4xf32>, tensor<4xi64>) -> tensor<2x12x18x4xf32>
  %pads2 = graph.constant {value = dense<[0, 0, 0, 0, 0, 0, 0, -1]> : tensor<8xi64>} : tensor<8xi64>
  %s = graph.pad %v, %pads2 {mode = "constant"} : (tensor<2x12x18x4xf32>, tensor<8xi64>) -> tensor<2x12x18x3xf32>
  func.return %s, %x : tensor<2x12x18x3xf32>, tensor<2x3x9x10xf32>
}
"""


def test_a_chain_of_movements_in_planned_pools():
    """Every kernel here between planned neighbours in one pool: a write outside its out
    (or a read before a write, with poisoning) changes the results."""
    _, _, stats = compare_backends(
        CHAIN, {"x": data((2, 3, 9, 10), np.float32), "i": np.array([-1, 0, 3, -2], np.int64)},
        poison=True)
    assert stats.device_launches >= 9


# -- ONNX node cases -------------------------------------------------------------------------

def _load_node_cases():
    import onnx_node_cases  # test/unit, on sys.path: conftest.py

    return onnx_node_cases


MOVEMENT_OPS = {"Transpose", "Concat", "Gather", "Pad", "Resize"}
KERNEL_OPS = ("kernel.transpose", "kernel.concat", "kernel.gather", "kernel.pad",
              "kernel.resize")

if importlib.util.find_spec("onnx") is None:  # the node-case tests get no parameters
    nc = POLICY = None
    NODE_CASES = []
else:
    nc = _load_node_cases()
    POLICY = nc.load_policy()
    NODE_CASES = nc.case_names(MOVEMENT_OPS)


def _runnable(name):
    case = nc.load_case(name)
    reason = nc.skip_reason(case, POLICY)
    if reason is not None:
        pytest.skip(reason)
    return case


@pytest.mark.parametrize("name", NODE_CASES)
def test_onnx_node_case(name):
    nc.check_case(_runnable(name), POLICY, through_ir="opencl")


@pytest.mark.parametrize("name", [n for n in NODE_CASES if not n.startswith(
    ("test_concat", "test_gather", "test_transpose"))])
def test_onnx_node_case_with_constant_operands(name):
    """Pads, scales, sizes and roi are graph inputs in ONNX's cases, so the lowering
    cannot read them and the op runs on the host as kernel.generic: as initializers
    (constants), the same cases lower to kernel.pad / kernel.resize and run on the device."""
    import onnx
    from onnx import numpy_helper

    from palimpsest.backends.binding import find_function
    from palimpsest.backends.numpy.arena import RunStats
    from palimpsest.backends.opencl.executor import run
    from palimpsest.dialects.graph.from_onnx import import_onnx
    from palimpsest.passes.pass_manager import PassManager, parse_pipeline

    case = _runnable(name)
    model = onnx.load(str(nc.ensure_cache() / name / "model.onnx"))
    data_input = case.node.input[0]
    for graph_input in list(model.graph.input):
        if graph_input.name != data_input:
            model.graph.initializer.append(
                numpy_helper.from_array(case.feeds[graph_input.name], graph_input.name))
            model.graph.input.remove(graph_input)
    module = import_onnx(model)
    PassManager(parse_pipeline("infer-shapes,default")).run(module)
    stats = RunStats()
    results = run(find_function(module, None), {data_input: case.feeds[data_input]},
                  stats=stats)
    assert not stats.host_ops, f"ran on the host: {stats.host_ops}"
    (got,) = results.values()
    expected = case.expected[0]
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if expected.dtype.kind != "f":
        np.testing.assert_array_equal(got, expected)
        return
    tolerance = POLICY.tolerances.get(name)
    rtol, atol = tolerance if tolerance else (1e-4, 1e-5)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


def test_pad_everything_cropped_then_padded():
    padded(data((3, 4), np.float32), [-3, 0, 2, 1], "constant", 2.5)


def test_resize_tables_beyond_constant_memory_run_on_the_host():
    """Cubic taps for 4000 positions need more than the 64 KiB of __constant memory an
    OpenCL device is sure to have: the op runs on the host, counted."""
    x = data((1, 1, 2, 1000), np.float32)
    text = graph([("x", ttype(x.shape, np.float32))], [
        "%s = graph.constant {value = dense<[1.0, 1.0, 1.0, 4.0]> : tensor<4xf32>} : "
        "tensor<4xf32>",
        "%y = graph.resize %x, %s {operandSegmentSizes = array<i32: 1, 0, 1, 0>, "
        'mode = "cubic"} : (tensor<1x1x2x1000xf32>, tensor<4xf32>) -> tensor<1x1x2x4000xf32>'],
        ("y", "tensor<1x1x2x4000xf32>"))
    _, _, stats = compare_backends(text, {"x": x}, host_ops_allowed=("kernel.resize",))
    assert stats.host_ops == {"kernel.resize": 1}
