"""The single table of graph-dialect op names (see CONVENTIONS.md).

`ONNX_TO_GRAPH` maps an ONNX op type (default domain) to its graph-dialect op name:
`graph.` + snake_case of the ONNX op type, with the three normalization abbreviations
BatchNormalization -> `graph.batch_norm`, LayerNormalization -> `graph.layer_norm` and
InstanceNormalization -> `graph.instance_norm`, and
MatMul -> `graph.matmul` (one word, as in MLIR's linalg). `GRAPH_TO_ONNX` is its inverse.

This module is import-light on purpose (no numpy): palimpsest-opt imports it at startup.
"""

from __future__ import annotations

ONNX_TO_GRAPH: dict[str, str] = {
    # elementwise arithmetic (binary ops broadcast numpy-style; Max/Min are variadic)
    "Add": "graph.add",
    "Sub": "graph.sub",
    "Mul": "graph.mul",
    "Div": "graph.div",
    "Pow": "graph.pow",
    "Max": "graph.max",
    "Min": "graph.min",
    "Sum": "graph.sum",
    "Mean": "graph.mean",
    "Mod": "graph.mod",
    # activations and unary math
    "Relu": "graph.relu",
    "LeakyRelu": "graph.leaky_relu",
    "Clip": "graph.clip",
    "Sigmoid": "graph.sigmoid",
    "HardSigmoid": "graph.hard_sigmoid",
    "HardSwish": "graph.hard_swish",
    "Tanh": "graph.tanh",
    "Erf": "graph.erf",
    "Exp": "graph.exp",
    "Log": "graph.log",
    "Sqrt": "graph.sqrt",
    "Neg": "graph.neg",
    "Abs": "graph.abs",
    "Sign": "graph.sign",
    "Reciprocal": "graph.reciprocal",
    "Floor": "graph.floor",
    "Ceil": "graph.ceil",
    "Round": "graph.round",
    "Sin": "graph.sin",
    "Cos": "graph.cos",
    "Softplus": "graph.softplus",
    "Softsign": "graph.softsign",
    "Elu": "graph.elu",
    "Selu": "graph.selu",
    "Gelu": "graph.gelu",
    # selection, conversion, comparison
    "Where": "graph.where",
    "Cast": "graph.cast",
    "Equal": "graph.equal",
    "Less": "graph.less",
    "Greater": "graph.greater",
    "LessOrEqual": "graph.less_or_equal",
    "GreaterOrEqual": "graph.greater_or_equal",
    # logical (bool operands)
    "Not": "graph.not",
    "And": "graph.and",
    "Or": "graph.or",
    "Xor": "graph.xor",
    # linear algebra
    "MatMul": "graph.matmul",
    "Gemm": "graph.gemm",
    # convolution and pooling
    "Conv": "graph.conv",
    "ConvTranspose": "graph.conv_transpose",
    "MaxPool": "graph.max_pool",
    "AveragePool": "graph.average_pool",
    "GlobalAveragePool": "graph.global_average_pool",
    "GlobalMaxPool": "graph.global_max_pool",
    # normalization
    "BatchNormalization": "graph.batch_norm",
    "LayerNormalization": "graph.layer_norm",
    "InstanceNormalization": "graph.instance_norm",
    "Softmax": "graph.softmax",
    "LogSoftmax": "graph.log_softmax",
    # reductions
    "ReduceMean": "graph.reduce_mean",
    "ReduceSum": "graph.reduce_sum",
    "ReduceMax": "graph.reduce_max",
    "ReduceMin": "graph.reduce_min",
    "ReduceProd": "graph.reduce_prod",
    "ReduceL1": "graph.reduce_l1",
    "ReduceL2": "graph.reduce_l2",
    "ReduceSumSquare": "graph.reduce_sum_square",
    "ReduceLogSumExp": "graph.reduce_log_sum_exp",
    "ArgMax": "graph.arg_max",
    "ArgMin": "graph.arg_min",
    # shape and data movement
    "Reshape": "graph.reshape",
    "Flatten": "graph.flatten",
    "Transpose": "graph.transpose",
    "Concat": "graph.concat",
    "Split": "graph.split",
    "Slice": "graph.slice",
    "Gather": "graph.gather",
    "GatherElements": "graph.gather_elements",
    "Pad": "graph.pad",
    "Resize": "graph.resize",
    "Squeeze": "graph.squeeze",
    "Unsqueeze": "graph.unsqueeze",
    "Expand": "graph.expand",
    "Tile": "graph.tile",
    # constants and shape computations
    "Constant": "graph.constant",
    "Shape": "graph.shape",
    "Size": "graph.size",
    "Range": "graph.range",
    "ConstantOfShape": "graph.constant_of_shape",
    "Identity": "graph.identity",
    "Dropout": "graph.dropout",
    # -- added for full node-suite coverage (issue 13); grouped by the module that declares them
    # elementwise (ops_elementwise.py)
    "Acos": "graph.acos",
    "Acosh": "graph.acosh",
    "Asin": "graph.asin",
    "Asinh": "graph.asinh",
    "Atan": "graph.atan",
    "Atanh": "graph.atanh",
    "Cosh": "graph.cosh",
    "Sinh": "graph.sinh",
    "Tan": "graph.tan",
    "Celu": "graph.celu",
    "Mish": "graph.mish",
    "Swish": "graph.swish",
    "Shrink": "graph.shrink",
    "ThresholdedRelu": "graph.thresholded_relu",
    "PRelu": "graph.prelu",
    "IsInf": "graph.is_inf",
    "IsNaN": "graph.is_nan",
    "BitShift": "graph.bit_shift",
    "BitwiseAnd": "graph.bitwise_and",
    "BitwiseOr": "graph.bitwise_or",
    "BitwiseXor": "graph.bitwise_xor",
    "BitwiseNot": "graph.bitwise_not",
    # element types and quantization (ops_quant.py)
    "CastLike": "graph.cast_like",
    "BitCast": "graph.bit_cast",
    "QuantizeLinear": "graph.quantize_linear",
    "DequantizeLinear": "graph.dequantize_linear",
    "DynamicQuantizeLinear": "graph.dynamic_quantize_linear",
    "QLinearMatMul": "graph.qlinear_matmul",
    "QLinearConv": "graph.qlinear_conv",
    "MatMulInteger": "graph.matmul_integer",
    "ConvInteger": "graph.conv_integer",
    # attention and transformer blocks (ops_attention.py)
    "Attention": "graph.attention",
    "RMSNormalization": "graph.rms_norm",
    "RotaryEmbedding": "graph.rotary_embedding",
    "LinearAttention": "graph.linear_attention",
    "CausalConvWithState": "graph.causal_conv_with_state",
    "TensorScatter": "graph.tensor_scatter",
    "SwiGLU": "graph.swiglu",
    # recurrent (ops_recurrent.py)
    "LSTM": "graph.lstm",
    "GRU": "graph.gru",
    "RNN": "graph.rnn",
    # normalization, losses and other nn ops (ops_nn.py)
    "Hardmax": "graph.hardmax",
    "LpNormalization": "graph.lp_norm",
    "LRN": "graph.lrn",
    "GroupNormalization": "graph.group_norm",
    "MeanVarianceNormalization": "graph.mean_variance_norm",
    "SoftmaxCrossEntropyLoss": "graph.softmax_cross_entropy_loss",
    "NegativeLogLikelihoodLoss": "graph.negative_log_likelihood_loss",
    "LpPool": "graph.lp_pool",
    # spatial and image ops (ops_spatial.py)
    "GridSample": "graph.grid_sample",
    "AffineGrid": "graph.affine_grid",
    "RoiAlign": "graph.roi_align",
    "Col2Im": "graph.col2im",
    "DeformConv": "graph.deform_conv",
    "MaxUnpool": "graph.max_unpool",
    "CenterCropPad": "graph.center_crop_pad",
    "SpaceToDepth": "graph.space_to_depth",
    "DepthToSpace": "graph.depth_to_space",
    "Upsample": "graph.upsample",
    # indexing, scatter/gather, sorting and data-dependent shapes (ops_data.py)
    "Trilu": "graph.trilu",
    "Scatter": "graph.scatter",
    "ScatterElements": "graph.scatter_elements",
    "ScatterND": "graph.scatter_nd",
    "GatherND": "graph.gather_nd",
    "CumSum": "graph.cum_sum",
    "CumProd": "graph.cum_prod",
    "TopK": "graph.top_k",
    "Unique": "graph.unique",
    "NonZero": "graph.non_zero",
    "Compress": "graph.compress",
    "OneHot": "graph.one_hot",
    "EyeLike": "graph.eye_like",
    "ReverseSequence": "graph.reverse_sequence",
    "Einsum": "graph.einsum",
    "Det": "graph.det",
    "NonMaxSuppression": "graph.non_max_suppression",
    "TfIdfVectorizer": "graph.tfidf_vectorizer",
    "ReduceLogSum": "graph.reduce_log_sum",
    # signal processing (ops_signal.py)
    "BlackmanWindow": "graph.blackman_window",
    "HammingWindow": "graph.hamming_window",
    "HannWindow": "graph.hann_window",
    "MelWeightMatrix": "graph.mel_weight_matrix",
    "DFT": "graph.dft",
    "STFT": "graph.stft",
    # control flow: ops with regions (ops_control.py)
    "If": "graph.if",
    "Loop": "graph.loop",
    "Scan": "graph.scan",
}

# Operators of other domains that real exports carry: onnxruntime's contrib ops its own
# quantization tool emits. (domain, op type) -> graph op name.
CONTRIB_TO_GRAPH: dict[tuple[str, str], str] = {
    ("com.microsoft", "DynamicQuantizeLSTM"): "graph.dynamic_quantize_lstm",
    ("com.microsoft", "MatMulIntegerToFloat"): "graph.matmul_integer_to_float",
}

# graph op -> the ONNX op type it imports from (a contrib op: `domain.OpType`)
GRAPH_TO_ONNX: dict[str, str] = {graph: onnx for onnx, graph in ONNX_TO_GRAPH.items()}
GRAPH_TO_ONNX.update({graph: f"{domain}.{op}" for (domain, op), graph in CONTRIB_TO_GRAPH.items()})

assert len(GRAPH_TO_ONNX) == len(ONNX_TO_GRAPH) + len(CONTRIB_TO_GRAPH), \
    "graph op names must be unique"
