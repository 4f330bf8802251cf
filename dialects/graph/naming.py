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
}

GRAPH_TO_ONNX: dict[str, str] = {graph: onnx for onnx, graph in ONNX_TO_GRAPH.items()}

assert len(GRAPH_TO_ONNX) == len(ONNX_TO_GRAPH), "graph op names must be unique"
