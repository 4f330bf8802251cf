"""Signal-processing graph ops: the window functions, MelWeightMatrix, DFT and STFT.
Complex values are real tensors with a last dim of 2 (real, imaginary), as in ONNX."""

from __future__ import annotations

from palimpsest.dialects.graph import shapes as S
from palimpsest.dialects.graph.ops_base import (
    ONNX_DTYPES, AnyTensor, FloatTensor, GraphOp, IndexTensor, NumericTensor, ShapeError,
    flag_prop, int_prop, tensor,
)
from palimpsest.ir.opdef import operand, optional_operand, register_op, result_def


def _scalar(args, name):
    values = args.value(name)
    return int(values[0]) if values is not None and len(values) == 1 else None


def _output_type(args, default=1):
    code = args["output_datatype"] if args["output_datatype"] is not None else default
    element = ONNX_DTYPES.get(code)
    if element is None:
        raise ShapeError(f"output_datatype {code} is not a supported element type")
    return element


class _WindowOp(GraphOp):
    size = operand(IndexTensor)
    output = result_def(AnyTensor)
    output_datatype = int_prop(1)
    periodic = flag_prop(1)

    @classmethod
    def rule(cls, args):
        return [tensor((_scalar(args, "size"),), _output_type(args))]


@register_op
class BlackmanWindowOp(_WindowOp):
    name = "graph.blackman_window"


@register_op
class HammingWindowOp(_WindowOp):
    name = "graph.hamming_window"


@register_op
class HannWindowOp(_WindowOp):
    name = "graph.hann_window"


@register_op
class MelWeightMatrixOp(GraphOp):
    name = "graph.mel_weight_matrix"
    num_mel_bins = operand(IndexTensor)
    dft_length = operand(IndexTensor)
    sample_rate = operand(IndexTensor)
    lower_edge_hertz = operand(FloatTensor)
    upper_edge_hertz = operand(FloatTensor)
    output = result_def(AnyTensor)
    output_datatype = int_prop(1)

    @classmethod
    def rule(cls, args):
        length, bins = _scalar(args, "dft_length"), _scalar(args, "num_mel_bins")
        return [tensor((length // 2 + 1 if length is not None else None, bins),
                       _output_type(args))]


@register_op
class DFTOp(GraphOp):
    """input: [batch, ..., 1 or 2]; `axis` an operand (opset 20; DFT-17's attribute is
    imported as one, default 1)."""

    name = "graph.dft"
    input = operand(FloatTensor)
    dft_length = optional_operand(IndexTensor)
    axis = optional_operand(IndexTensor)
    output = result_def(AnyTensor)
    inverse = flag_prop(0)
    onesided = flag_prop(0)

    @classmethod
    def rule(cls, args):
        x = args.shape("input")
        if x is None:
            return [tensor(None, args.element("input"))]
        if len(x) < 2 or x[-1] not in (None, 1, 2):
            raise ShapeError(f"input must end in a dim of 1 (real) or 2 (complex), got "
                             f"{S.fmt(x)}")
        last = 1 if args["inverse"] and args["onesided"] else 2
        axis = _scalar(args, "axis") if args.has("axis") else -2
        if axis is None:
            return [tensor(tuple([None] * (len(x) - 1)) + (last,), args.element("input"))]
        axis = S.normalize_axis(axis, len(x))
        if axis == len(x) - 1:
            raise ShapeError("axis must not be the last (complex) dim")
        length = _scalar(args, "dft_length") if args.has("dft_length") else None
        if length is None and not args.has("dft_length"):
            length = x[axis]
            if args["inverse"] and args["onesided"] and length is not None:
                length = 2 * (length - 1)
        size = length
        if args["onesided"] and length is not None:
            size = length if args["inverse"] else length // 2 + 1
        shape = tuple(size if i == axis else d for i, d in enumerate(x[:-1])) + (last,)
        return [tensor(shape, args.element("input"))]


@register_op
class STFTOp(GraphOp):
    """signal: [batch, length, 1 or 2] -> [batch, frames, bins, 2]."""

    name = "graph.stft"
    signal = operand(FloatTensor)
    frame_step = operand(IndexTensor)
    window = optional_operand(NumericTensor)
    frame_length = optional_operand(IndexTensor)
    output = result_def(AnyTensor)
    onesided = flag_prop(1)

    @classmethod
    def rule(cls, args):
        x = args.shape("signal")
        if x is None:
            return [tensor(None, args.element("signal"))]
        if len(x) != 3:
            raise ShapeError(f"signal must be [batch, length, 1 or 2], got {S.fmt(x)}")
        length = _scalar(args, "frame_length") if args.has("frame_length") else None
        window = args.shape("window")
        if length is None and window is not None:
            length = window[0]
        step = _scalar(args, "frame_step")
        frames = None
        if None not in (length, step, x[1]):
            frames = 1 + (x[1] - length) // step
        bins = length // 2 + 1 if length is not None and args["onesided"] else length
        return [tensor((x[0], frames, bins, 2), args.element("signal"))]
