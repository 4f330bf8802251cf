#!/usr/bin/env python3
"""Seeded ONNX models built with `onnx.helper`, in the op patterns PyTorch's exporter emits
(opset 17): node names like `/layer1/layer1.0/conv1/Conv`, values like
`/layer1/layer1.0/conv1/Conv_output_0`, weights named like a `state_dict`.

Every builder returns an `onnx.ModelProto` and takes size knobs, so tests use small
variants and benchmarks the full size:

- `resnet(...)`        ResNet-18-style CNN: conv + BatchNormalization + Relu stem, MaxPool,
                       basic residual blocks with Add, strided downsampling with a 1x1
                       projection, GlobalAveragePool, Flatten, Gemm. 1x3x224x224 at full size.
- `mobilenet_v2(...)`  MobileNetV2: inverted residuals, depthwise convs (group = channels),
                       ReLU6 as Clip with min/max inputs, linear bottlenecks, residual Add.
- `minilm(...)`        MiniLM/BERT-style encoder (all-MiniLM-L6 sizes at full size):
                       int64 token ids and attention mask, word/position/token-type
                       embedding Gathers, LayerNormalization, multi-head self-attention
                       with the Shape→Gather→Unsqueeze→Concat→Reshape head split, scale
                       Div, mask Add, Softmax, erf-GELU FFN, residuals. Batch and sequence
                       are dynamic (`batch`, `sequence`) unless `dynamic=False`.
- `ocr_crnn(...)`      OCR-style conv stack over 1xCx32xW with W dynamic (`width`), pooled
                       to height 1, Squeeze/Transpose to a width-major sequence, MatMul
                       classifier, Softmax.
- `deep_mlp(...)`      A deep generated model with about `nodes` nodes (residual MLP blocks
                       with LayerNormalization, erf-GELU and reshape idioms), for timing
                       import + infer-shapes.
- `tiny_cnn(...)`      A few-KB CNN (`examples/tiny_cnn.onnx`): input `x` 1x3x8x8.

`python examples/onnx_models.py OUTDIR [--small]` writes them all as OUTDIR/NAME.onnx.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
PRODUCER = ("pytorch", "2.1.0")  # what the op patterns imitate


class _Graph:
    """Collects nodes, initializers and exporter-style names."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.initializers: list = []
        self.inputs: list = []
        self.outputs: list = []
        self._used: dict[str, int] = {}
        self._constants: dict = {}

    # -- names --------------------------------------------------------------------------
    def _unique(self, name: str) -> str:
        count = self._used.get(name, 0)
        self._used[name] = count + 1
        return name if count == 0 else f"{name}_{count}"

    def node(self, op_type: str, inputs, scope: str = "", n_outputs: int = 1, **attrs):
        """One node named `{scope}/{op_type}`, outputs `{name}_output_{i}`; returns the
        output name (or the list of them when n_outputs > 1)."""
        name = self._unique(f"{scope}/{op_type}")
        outputs = [f"{name}_output_{i}" for i in range(n_outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outputs, name=name, **attrs))
        return outputs[0] if n_outputs == 1 else outputs

    def constant(self, array, scope: str = "") -> str:
        """A Constant node (what the exporter emits for literals), shared per scope."""
        array = np.asarray(array)
        key = (scope, array.dtype.str, array.shape, array.tobytes())
        if key in self._constants:
            return self._constants[key]
        name = self._unique(f"{scope}/Constant")
        output = f"{name}_output_0"
        self.nodes.append(helper.make_node(
            "Constant", [], [output], name=name,
            value=numpy_helper.from_array(array, name="")))
        self._constants[key] = output
        return output

    def weight(self, name: str, array) -> str:
        self.initializers.append(numpy_helper.from_array(
            np.ascontiguousarray(array), name=name))
        return name

    # -- random weights ------------------------------------------------------------------
    def normal(self, shape, std: float) -> np.ndarray:
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def uniform(self, shape, low: float, high: float) -> np.ndarray:
        return self.rng.uniform(low, high, shape).astype(np.float32)

    # -- model ---------------------------------------------------------------------------
    def input(self, name: str, elem_type: int, shape) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        return name

    def output(self, value: str, name: str, elem_type: int, shape) -> None:
        """Expose `value` as a graph output called `name` (the exporter names the
        producing node's output after the output name)."""
        if value != name:
            for node in self.nodes:
                for field in (node.output, node.input):
                    for i, item in enumerate(field):
                        if item == value:
                            field[i] = name
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))

    def model(self, graph_name: str, doc: str = "") -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, graph_name, self.inputs, self.outputs,
                                  self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name=PRODUCER[0], producer_version=PRODUCER[1],
                                  doc_string=doc)
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


# -- building blocks shared by the CNNs ---------------------------------------------------------

def _conv(g: _Graph, x: str, cin: int, cout: int, k: int, scope: str, param: str, *,
          stride: int = 1, group: int = 1, bias: bool = False) -> str:
    fan_in = (cin // group) * k * k
    w = g.weight(f"{param}.weight", g.normal((cout, cin // group, k, k), math.sqrt(2.0 / fan_in)))
    inputs = [x, w]
    if bias:
        inputs.append(g.weight(f"{param}.bias", g.normal((cout,), 0.05)))
    pad = k // 2
    return g.node("Conv", inputs, scope, dilations=[1, 1], group=group, kernel_shape=[k, k],
                  pads=[pad, pad, pad, pad], strides=[stride, stride])


def _batch_norm(g: _Graph, x: str, c: int, scope: str, param: str, gain: float = 1.0) -> str:
    scale = g.weight(f"{param}.weight", g.uniform((c,), 0.5 * gain, 1.0 * gain))
    bias = g.weight(f"{param}.bias", g.normal((c,), 0.05))
    mean = g.weight(f"{param}.running_mean", g.normal((c,), 0.05))
    var = g.weight(f"{param}.running_var", g.uniform((c,), 0.8, 1.2))
    return g.node("BatchNormalization", [x, scale, bias, mean, var], scope,
                  epsilon=1e-5, momentum=0.9)


def _conv_bn(g, x, cin, cout, k, scope, conv_param, bn_param, *, stride=1, group=1,
             gain=1.0) -> str:
    y = _conv(g, x, cin, cout, k, f"{scope}/{conv_param.rsplit('.', 1)[-1]}", conv_param,
              stride=stride, group=group)
    return _batch_norm(g, y, cout, f"{scope}/{bn_param.rsplit('.', 1)[-1]}", bn_param, gain)


def _classifier(g: _Graph, x: str, c: int, classes: int, param: str) -> str:
    """GlobalAveragePool → Flatten → Gemm(transB=1), torchvision's head."""
    pooled = g.node("GlobalAveragePool", [x], "/avgpool")
    flat = g.node("Flatten", [pooled], "", axis=1)
    w = g.weight(f"{param}.weight", g.normal((classes, c), 1.0 / math.sqrt(c)))
    b = g.weight(f"{param}.bias", g.normal((classes,), 0.01))
    return g.node("Gemm", [flat, w, b], f"/{param}", alpha=1.0, beta=1.0, transB=1)


def _batch_dim(batch):
    return "batch" if batch is None else batch


# -- 1. ResNet ------------------------------------------------------------------------------------

def resnet(image: int = 224, width: int = 64, blocks=(2, 2, 2, 2), classes: int = 1000,
           batch: int | None = 1, seed: int = 0) -> onnx.ModelProto:
    """ResNet-18 at the defaults (11.7 M parameters). `image` is the input's height and
    width, `width` the stem's channels (doubling per stage), `blocks` the basic blocks per
    stage; `batch=None` makes the batch dimension dynamic (`batch`)."""
    g = _Graph(seed)
    x = g.input("input", TensorProto.FLOAT, [_batch_dim(batch), 3, image, image])
    y = _conv_bn(g, x, 3, width, 7, "", "conv1", "bn1", stride=2)
    y = g.node("Relu", [y], "/relu")
    y = g.node("MaxPool", [y], "/maxpool", ceil_mode=0, dilations=[1, 1], kernel_shape=[3, 3],
               pads=[1, 1, 1, 1], strides=[2, 2])
    cin = width
    for stage, count in enumerate(blocks):
        cout = width * 2 ** stage
        for index in range(count):
            stride = 2 if stage > 0 and index == 0 else 1
            layer = f"layer{stage + 1}.{index}"
            scope = f"/layer{stage + 1}/{layer}"
            out = _conv_bn(g, y, cin, cout, 3, scope, f"{layer}.conv1", f"{layer}.bn1",
                           stride=stride)
            out = g.node("Relu", [out], f"{scope}/relu")
            # a small gain on the last BN of a block keeps a deep random net's activations
            # bounded (what zero-init-residual does in training recipes)
            out = _conv_bn(g, out, cout, cout, 3, scope, f"{layer}.conv2", f"{layer}.bn2",
                           gain=0.5)
            identity = y
            if stride != 1 or cin != cout:
                identity = _conv_bn(g, y, cin, cout, 1, f"{scope}/downsample",
                                    f"{layer}.downsample.0", f"{layer}.downsample.1",
                                    stride=stride)
            out = g.node("Add", [out, identity], scope)
            y = g.node("Relu", [out], f"{scope}/relu_1")
            cin = cout
    logits = _classifier(g, y, cin, classes, "fc")
    g.output(logits, "output", TensorProto.FLOAT, [_batch_dim(batch), classes])
    return g.model("resnet", f"ResNet-style CNN, image {image}, width {width}, blocks {blocks}")


# -- 2. MobileNetV2 -------------------------------------------------------------------------------

MOBILENET_V2_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                         (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def mobilenet_v2(image: int = 224, width_mult: float = 1.0, settings=MOBILENET_V2_SETTINGS,
                 last_channel: int = 1280, classes: int = 1000, batch: int | None = 1,
                 seed: int = 0) -> onnx.ModelProto:
    """torchvision's MobileNetV2 at the defaults (3.5 M parameters). `settings` are the
    (expansion t, channels c, repeats n, stride s) rows."""
    g = _Graph(seed)
    x = g.input("input", TensorProto.FLOAT, [_batch_dim(batch), 3, image, image])

    def relu6(value, scope):
        low = g.constant(np.array(0.0, np.float32), scope)
        high = g.constant(np.array(6.0, np.float32), scope)
        return g.node("Clip", [value, low, high], scope)

    cin = _make_divisible(32 * width_mult)
    y = _conv_bn(g, x, 3, cin, 3, "/features/features.0", "features.0.0", "features.0.1",
                 stride=2)
    y = relu6(y, "/features/features.0/features.0.2")
    index = 1
    for t, c, n, s in settings:
        cout = _make_divisible(c * width_mult)
        for repeat in range(n):
            stride = s if repeat == 0 else 1
            hidden = cin * t
            scope = f"/features/features.{index}/conv"
            param = f"features.{index}.conv"
            out, layer = y, 0
            if t != 1:
                out = _conv_bn(g, out, cin, hidden, 1, f"{scope}/conv.0", f"{param}.0.0",
                               f"{param}.0.1")
                out = relu6(out, f"{scope}/conv.0/conv.0.2")
                layer = 1
            out = _conv_bn(g, out, hidden, hidden, 3, f"{scope}/conv.{layer}",
                           f"{param}.{layer}.0", f"{param}.{layer}.1", stride=stride,
                           group=hidden)
            out = relu6(out, f"{scope}/conv.{layer}/conv.{layer}.2")
            out = _conv(g, out, hidden, cout, 1, f"{scope}/conv.{layer + 1}",
                        f"{param}.{layer + 1}")
            use_residual = stride == 1 and cin == cout
            out = _batch_norm(g, out, cout, f"{scope}/conv.{layer + 2}", f"{param}.{layer + 2}",
                              0.5 if use_residual else 1.0)
            if use_residual:
                out = g.node("Add", [y, out], f"/features/features.{index}")
            y, cin = out, cout
            index += 1
    last = _make_divisible(last_channel * max(1.0, width_mult))
    y = _conv_bn(g, y, cin, last, 1, f"/features/features.{index}", f"features.{index}.0",
                 f"features.{index}.1")
    y = relu6(y, f"/features/features.{index}/features.{index}.2")
    logits = _classifier(g, y, last, classes, "classifier.1")
    g.output(logits, "output", TensorProto.FLOAT, [_batch_dim(batch), classes])
    return g.model("mobilenet_v2", f"MobileNetV2-style CNN, image {image}, width x{width_mult}")


# -- 3. MiniLM / BERT encoder --------------------------------------------------------------------

def _linear(g: _Graph, x: str, cin: int, cout: int, scope: str, param: str) -> str:
    """torch.nn.Linear on a 3-D input as exported: MatMul by the transposed weight, Add bias."""
    w = g.weight(f"onnx::MatMul_{param}", g.normal((cin, cout), 1.0 / math.sqrt(cin)))
    b = g.weight(f"{param}.bias", g.normal((cout,), 0.02))
    y = g.node("MatMul", [x, w], scope)
    return g.node("Add", [b, y], scope)


def _layer_norm(g: _Graph, x: str, c: int, scope: str, param: str) -> str:
    scale = g.weight(f"{param}.weight", g.uniform((c,), 0.8, 1.2))
    bias = g.weight(f"{param}.bias", g.normal((c,), 0.02))
    return g.node("LayerNormalization", [x, scale, bias], scope, axis=-1, epsilon=1e-12)


def _gelu(g: _Graph, x: str, scope: str) -> str:
    """erf-GELU as exported: x * 0.5 * (1 + erf(x / sqrt(2)))."""
    d = g.node("Div", [x, g.constant(np.array(math.sqrt(2.0), np.float32), scope)], scope)
    e = g.node("Erf", [d], scope)
    a = g.node("Add", [e, g.constant(np.array(1.0, np.float32), scope)], scope)
    m = g.node("Mul", [x, a], scope)
    return g.node("Mul", [m, g.constant(np.array(0.5, np.float32), scope)], scope)


def _dim(g: _Graph, x: str, axis: int, scope: str) -> str:
    """x.size(axis) as a 1-element vector: Shape → Gather(scalar index) → Unsqueeze."""
    shape = g.node("Shape", [x], scope)
    size = g.node("Gather", [shape, g.constant(np.array(axis, np.int64), scope)], scope, axis=0)
    return g.node("Unsqueeze", [size, g.constant(np.array([0], np.int64), scope)], scope)


def _split_heads(g: _Graph, x: str, heads: int, head_dim: int, scope: str) -> str:
    """x.view(x.size()[:-1] + (heads, head_dim)).permute(0, 2, 1, 3), as exported."""
    b = _dim(g, x, 0, scope)
    s = _dim(g, x, 1, scope)
    shape = g.node("Concat", [b, s, g.constant(np.array([heads], np.int64), scope),
                              g.constant(np.array([head_dim], np.int64), scope)], scope, axis=0)
    return g.node("Reshape", [x, shape], scope, allowzero=0)


def minilm(seq: int | None = 128, hidden: int = 384, heads: int = 12, layers: int = 6,
           ffn: int = 1536, vocab: int = 30522, max_positions: int = 512,
           batch: int | None = 1, dynamic: bool = True, seed: int = 0) -> onnx.ModelProto:
    """An all-MiniLM-L6-v2-sized BERT encoder (22.7 M parameters) at the defaults. Inputs
    `input_ids` and `attention_mask` (int64, [batch, sequence]); output
    `last_hidden_state` [batch, sequence, hidden]. With `dynamic` (the default) both dims
    are dim_params, as exported with dynamic_axes; `seq`/`batch` only matter otherwise."""
    assert hidden % heads == 0
    head_dim = hidden // heads
    g = _Graph(seed)
    dims = ["batch", "sequence"] if dynamic else [batch, seq]
    ids = g.input("input_ids", TensorProto.INT64, dims)
    mask = g.input("attention_mask", TensorProto.INT64, dims)

    # embeddings: word + token type (zeros) + position (sliced from the registered buffer)
    scope = "/embeddings"
    length = _dim(g, ids, 1, scope)
    position_ids = g.weight("embeddings.position_ids",
                            np.arange(max_positions, dtype=np.int64)[None, :])
    positions = g.node("Slice", [position_ids, g.constant(np.array([0], np.int64), scope),
                                 length, g.constant(np.array([1], np.int64), scope),
                                 g.constant(np.array([1], np.int64), scope)], scope)
    token_types = g.node("ConstantOfShape", [g.node("Shape", [ids], scope)], scope,
                         value=numpy_helper.from_array(np.array([0], np.int64), name=""))
    word = g.node("Gather", [g.weight("embeddings.word_embeddings.weight",
                                      g.normal((vocab, hidden), 0.5)), ids],
                  f"{scope}/word_embeddings")
    types = g.node("Gather", [g.weight("embeddings.token_type_embeddings.weight",
                                       g.normal((2, hidden), 0.5)), token_types],
                   f"{scope}/token_type_embeddings")
    e = g.node("Add", [word, types], scope)
    pos = g.node("Gather", [g.weight("embeddings.position_embeddings.weight",
                                     g.normal((max_positions, hidden), 0.5)), positions],
                 f"{scope}/position_embeddings")
    e = g.node("Add", [e, pos], scope)
    h = _layer_norm(g, e, hidden, f"{scope}/LayerNorm", "embeddings.LayerNorm")

    # extended attention mask: (1 - mask[:, None, None, :]) * float32 min
    m = g.node("Unsqueeze", [mask, g.constant(np.array([1], np.int64), "")], "")
    m = g.node("Unsqueeze", [m, g.constant(np.array([2], np.int64), "")], "")
    m = g.node("Cast", [m], "", to=TensorProto.FLOAT)
    m = g.node("Sub", [g.constant(np.array(1.0, np.float32), ""), m], "")
    additive_mask = g.node("Mul", [m, g.constant(np.array(np.finfo(np.float32).min,
                                                          np.float32), "")], "")

    for layer in range(layers):
        base = f"encoder.layer.{layer}"
        scope = f"/encoder/layer.{layer}"
        att = f"{scope}/attention/self"
        q = _linear(g, h, hidden, hidden, f"{att}/query", f"{base}.attention.self.query")
        k = _linear(g, h, hidden, hidden, f"{att}/key", f"{base}.attention.self.key")
        v = _linear(g, h, hidden, hidden, f"{att}/value", f"{base}.attention.self.value")
        q = g.node("Transpose", [_split_heads(g, q, heads, head_dim, att)], att,
                   perm=[0, 2, 1, 3])
        k = g.node("Transpose", [_split_heads(g, k, heads, head_dim, att)], att,
                   perm=[0, 2, 3, 1])
        v = g.node("Transpose", [_split_heads(g, v, heads, head_dim, att)], att,
                   perm=[0, 2, 1, 3])
        scores = g.node("MatMul", [q, k], att)
        scores = g.node("Div", [scores, g.constant(np.array(math.sqrt(head_dim), np.float32),
                                                   att)], att)
        scores = g.node("Add", [scores, additive_mask], att)
        probs = g.node("Softmax", [scores], att, axis=-1)
        context = g.node("MatMul", [probs, v], att)
        context = g.node("Transpose", [context], att, perm=[0, 2, 1, 3])
        merged = g.node("Concat", [_dim(g, context, 0, att), _dim(g, context, 1, att),
                                   g.constant(np.array([hidden], np.int64), att)], att, axis=0)
        context = g.node("Reshape", [context, merged], att, allowzero=0)
        out = f"{scope}/attention/output"
        a = _linear(g, context, hidden, hidden, f"{out}/dense", f"{base}.attention.output.dense")
        a = g.node("Add", [a, h], out)
        h = _layer_norm(g, a, hidden, f"{out}/LayerNorm", f"{base}.attention.output.LayerNorm")
        inter = _linear(g, h, hidden, ffn, f"{scope}/intermediate/dense",
                        f"{base}.intermediate.dense")
        inter = _gelu(g, inter, f"{scope}/intermediate/intermediate_act_fn")
        o = _linear(g, inter, ffn, hidden, f"{scope}/output/dense", f"{base}.output.dense")
        o = g.node("Add", [o, h], f"{scope}/output")
        h = _layer_norm(g, o, hidden, f"{scope}/output/LayerNorm", f"{base}.output.LayerNorm")
    g.output(h, "last_hidden_state", TensorProto.FLOAT, dims + [hidden])
    return g.model("minilm", f"MiniLM-style encoder, hidden {hidden}, {layers} layers")


def minilm_inputs(batch: int, seq: int, vocab: int = 30522, seed: int = 0,
                  padded: int = 0) -> dict:
    """Token ids and an attention mask (the last `padded` positions of each row masked)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, (batch, seq)).astype(np.int64)
    mask = np.ones((batch, seq), np.int64)
    if padded:
        mask[:, seq - padded:] = 0
    return {"input_ids": ids, "attention_mask": mask}


# -- 5. OCR: conv stack over a dynamic-width text line ---------------------------------------------

def ocr_crnn(height: int = 32, width: int | None = None, channels=(32, 64, 128, 128),
             in_channels: int = 1, classes: int = 97, seed: int = 0) -> onnx.ModelProto:
    """A CRNN-style recognizer without the RNN: Conv+BN+Relu stages pooled 2x2 while the
    height allows (then 2x1, keeping the width), a final MaxPool over the remaining
    height, Squeeze, Transpose to [W', N, C], MatMul + Add classifier and Softmax.
    Input `image` [1, in_channels, height, width] with width dynamic (`width`) by default."""
    g = _Graph(seed)
    x = g.input("image", TensorProto.FLOAT, [1, in_channels, height, width or "width"])
    y, cin, h = x, in_channels, height
    for stage, cout in enumerate(channels):
        scope = f"/cnn/stage{stage}"
        y = _conv_bn(g, y, cin, cout, 3, scope, f"cnn.{stage}.conv", f"cnn.{stage}.bn")
        y = g.node("Relu", [y], scope)
        if stage < 2:
            y = g.node("MaxPool", [y], scope, kernel_shape=[2, 2], strides=[2, 2],
                       pads=[0, 0, 0, 0])
            h //= 2
        else:
            y = g.node("MaxPool", [y], scope, kernel_shape=[2, 1], strides=[2, 1],
                       pads=[0, 0, 0, 0])
            h //= 2
        cin = cout
    y = g.node("MaxPool", [y], "/cnn/collapse", kernel_shape=[h, 1], strides=[1, 1])
    y = g.node("Squeeze", [y, g.constant(np.array([2], np.int64), "/squeeze")], "/squeeze")
    y = g.node("Transpose", [y], "/transpose", perm=[2, 0, 1])
    w = g.weight("head.weight", g.normal((cin, classes), 1.0 / math.sqrt(cin)))
    b = g.weight("head.bias", g.normal((classes,), 0.01))
    y = g.node("Add", [g.node("MatMul", [y, w], "/head"), b], "/head")
    y = g.node("Softmax", [y], "", axis=2)
    g.output(y, "probabilities", TensorProto.FLOAT,
             ["steps" if width is None else width // 4, 1, classes])
    return g.model("ocr_crnn", f"OCR conv stack, height {height}, channels {channels}")


# -- deep generated model (for timing import + infer-shapes) --------------------------------------

def deep_mlp(nodes: int = 1000, hidden: int = 64, tokens: int = 16, seed: int = 0,
             dynamic: bool = True) -> onnx.ModelProto:
    """A residual MLP of about `nodes` nodes on input `x` [batch, tokens, hidden] (batch
    dynamic unless `dynamic=False`); whole blocks are added until there are `nodes`
    nodes. Each 24-node block: LayerNormalization, MatMul + Add,
    erf-GELU, MatMul + Add, residual Add, and a Shape→Gather→Unsqueeze→Concat→Reshape
    round trip through [batch*tokens, hidden] that infer-shapes has to fold."""
    g = _Graph(seed)
    x = g.input("x", TensorProto.FLOAT, ["batch" if dynamic else 1, tokens, hidden])
    h, block = x, 0
    while len(g.nodes) < nodes:
        scope = f"/blocks.{block}"
        param = f"blocks.{block}"
        y = _layer_norm(g, h, hidden, f"{scope}/norm", f"{param}.norm")
        y = _linear(g, y, hidden, 2 * hidden, f"{scope}/fc1", f"{param}.fc1")
        y = _gelu(g, y, f"{scope}/act")
        y = _linear(g, y, 2 * hidden, hidden, f"{scope}/fc2", f"{param}.fc2")
        y = g.node("Add", [h, y], scope)
        flat = g.node("Reshape", [y, g.constant(np.array([-1, hidden], np.int64), scope)],
                      scope, allowzero=0)
        shape = g.node("Concat", [_dim(g, y, 0, scope),
                                  g.constant(np.array([tokens, hidden], np.int64), scope)],
                       scope, axis=0)
        h = g.node("Reshape", [flat, shape], scope, allowzero=0)
        block += 1
    g.output(h, "y", TensorProto.FLOAT, ["batch" if dynamic else 1, tokens, hidden])
    return g.model("deep_mlp", f"deep residual MLP, {block} blocks")


# -- the bundled example --------------------------------------------------------------------------

def tiny_cnn(image: int = 8, channels: int = 8, classes: int = 4, seed: int = 0) -> onnx.ModelProto:
    """Conv+BN+Relu, MaxPool, a residual Conv+Relu+Add, GlobalAveragePool, Flatten, Gemm.
    Input `x` [1, 3, image, image], output `logits` [1, classes]. About 4 KB."""
    g = _Graph(seed)
    x = g.input("x", TensorProto.FLOAT, [1, 3, image, image])
    y = _conv_bn(g, x, 3, channels, 3, "", "conv1", "bn1")
    y = g.node("Relu", [y], "/relu")
    y = g.node("MaxPool", [y], "/maxpool", kernel_shape=[2, 2], strides=[2, 2],
               pads=[0, 0, 0, 0])
    r = _conv(g, y, channels, channels, 3, "/block/conv", "block.conv", bias=True)
    r = g.node("Relu", [r], "/block")
    y = g.node("Add", [y, r], "/block")
    logits = _classifier(g, y, channels, classes, "fc")
    g.output(logits, "logits", TensorProto.FLOAT, [1, classes])
    return g.model("tiny_cnn", "tiny CNN example")


# -- variants used by the tests and the benchmark ----------------------------------------------------

def full_size() -> dict:
    """The full-size models (the benchmark's)."""
    return {
        "resnet": lambda: resnet(),
        "mobilenet_v2": lambda: mobilenet_v2(),
        "minilm": lambda: minilm(),
        "ocr_crnn": lambda: ocr_crnn(),
        "deep_mlp": lambda: deep_mlp(),
        "tiny_cnn": lambda: tiny_cnn(),
    }


def small() -> dict:
    """Small variants (the tests')."""
    return {
        "resnet": lambda: resnet(image=32, width=8, blocks=(1, 1, 1, 1), classes=10),
        "mobilenet_v2": lambda: mobilenet_v2(image=32, width_mult=0.25, last_channel=64,
                                             classes=10),
        "minilm": lambda: minilm(hidden=32, heads=4, layers=2, ffn=64, vocab=100,
                                 max_positions=64),
        "ocr_crnn": lambda: ocr_crnn(channels=(8, 16, 16, 16), classes=12),
        "deep_mlp": lambda: deep_mlp(nodes=100, hidden=16, tokens=4),
        "tiny_cnn": lambda: tiny_cnn(),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("outdir", help="directory to write NAME.onnx files into")
    parser.add_argument("--small", action="store_true", help="the small variants (tests')")
    parser.add_argument("--only", action="append", help="write only this model (repeatable)")
    args = parser.parse_args(argv)
    os.makedirs(args.outdir, exist_ok=True)
    builders = small() if args.small else full_size()
    for name, build in builders.items():
        if args.only and name not in args.only:
            continue
        model = build()
        path = os.path.join(args.outdir, f"{name}.onnx")
        onnx.save(model, path)
        print(f"{path}: {len(model.graph.node)} nodes, {os.path.getsize(path):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
