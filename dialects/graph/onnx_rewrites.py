"""ONNX-level rewrites done before import: nodes that real files carry and that have an
exact standard-domain equivalent become those nodes, so the graph dialect declares no
op for them and everything after import (shape rules, fusion into epilogues, planning)
sees ONNX's own ops.

- `com.microsoft.FusedConv`: what onnxruntime's optimizer writes for Conv + activation
  (+ a summed input Z) when a model is saved with `optimized_model_filepath`:
  `act(Conv(X, W, B) + Z)` with act one of Relu, Tanh, Sigmoid, LeakyRelu (alpha),
  Clip (min, max), HardSigmoid (alpha, beta), its parameters in `activation_params`
  (onnxruntime's contrib_ops/cpu/fused_activation.cc).
- `com.microsoft.FusedMatMul`: `alpha · op(A) @ op(B)`, op the swap of the last two axes
  under transA/transB (transBatchA/B, which move the batch axes, stay refused).
- `SplitToSequence` whose sequence only `SequenceAt` reads, each at a constant position
  (how PyTorch exports `torch.split` of a state tensor): each `SequenceAt` becomes the
  `Slice` of that chunk (and `Squeeze` where `keepdims = 0`); the sequence never exists.

Nodes that do not fit (an unknown activation, a sequence read another way) are left as
they are, and the importer refuses them in its one-line form. Nested graphs (If, Loop,
Scan bodies) are rewritten too. The model is copied, never changed in place.
"""

from __future__ import annotations

MS_DOMAIN = "com.microsoft"

# FusedConv's `activation` -> (ONNX op, the names of its float attributes, in the order
# of `activation_params`); Clip takes its bounds as inputs instead (opset 11 on)
FUSED_ACTIVATIONS = {
    "Relu": ("Relu", ()),
    "Tanh": ("Tanh", ()),
    "Sigmoid": ("Sigmoid", ()),
    "LeakyRelu": ("LeakyRelu", ("alpha",)),
    "HardSigmoid": ("HardSigmoid", ("alpha", "beta")),
    "Clip": ("Clip", ("min", "max")),
}


# what of each rewritten contrib op is taken, for the importer's refusals of the rest
REWRITTEN_CONTRIB = {
    (MS_DOMAIN, "FusedConv"): f"FusedConv (activation {', '.join(FUSED_ACTIVATIONS)})",
    (MS_DOMAIN, "FusedMatMul"): "FusedMatMul (without transBatchA/transBatchB; transA/transB "
                                "where the operand's rank is known)",
}


def rewrite_model(model):
    """A copy of `model` with the rewrites above applied (the same object when none
    applies)."""
    if not _needs_rewrite(model.graph):
        return model
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    opset = next((o.version for o in copy.opset_import if o.domain in ("", "ai.onnx")), 1)
    # twice at most: a transposed FusedMatMul needs its operand's rank, which ONNX's shape
    # inference can tell only once the contrib ops before it are ONNX ops
    for _ in range(2):
        try:
            copy = onnx.shape_inference.infer_shapes(copy)
        except Exception:  # noqa: BLE001 - a rank left unknown leaves that node as it is
            pass
        if not _Rewriter(copy, opset).graph(copy.graph) or not _needs_rewrite(copy.graph):
            break
    return copy


def _needs_rewrite(graph) -> bool:
    for node in graph.node:
        if (node.domain == MS_DOMAIN and node.op_type in ("FusedConv", "FusedMatMul")) \
                or node.op_type == "SplitToSequence":
            return True
        if any(_needs_rewrite(attr.g) for attr in node.attribute if attr.type == attr.GRAPH):
            return True
    return False


class _Rewriter:
    def __init__(self, model, opset: int):
        self.opset = opset
        self.taken = _all_names(model.graph)

    def fresh(self, hint: str) -> str:
        from palimpsest.ir.resources import unique_name

        return unique_name(hint, self.taken)

    def graph(self, graph) -> int:
        """Rewrite `graph` and its subgraphs in place; how many nodes were rewritten."""
        constants = _constants(graph)
        ranks = _ranks(graph)
        nodes = []
        splits = {n.output[0]: n for n in graph.node
                  if n.op_type == "SplitToSequence" and n.domain in ("", "ai.onnx")
                  and len(n.output) == 1 and n.input}
        readers = {}
        for node in graph.node:
            for name in node.input:
                if name in splits:
                    readers.setdefault(name, []).append(node)
        sliced = {name for name, split in splits.items()
                  if self.sequence_reads_fit(split, readers.get(name, []), constants, graph)}
        rewritten = sum(self.graph(attr.g) for node in graph.node for attr in node.attribute
                        if attr.type == attr.GRAPH)
        self.new_initializers = []   # this graph's (a subgraph's go in the subgraph)
        for node in graph.node:
            replacement = None
            if node.domain == MS_DOMAIN and node.op_type == "FusedConv":
                replacement = self.fused_conv(node)
            elif node.domain == MS_DOMAIN and node.op_type == "FusedMatMul":
                replacement = self.fused_matmul(node, ranks)
            elif node.op_type == "SplitToSequence" and node.output[0] in sliced:
                replacement = []
            elif node.op_type == "SequenceAt" and node.input and node.input[0] in sliced:
                replacement = self.sequence_at(splits[node.input[0]], node, constants)
            rewritten += replacement is not None
            nodes.extend([node] if replacement is None else replacement)
        graph.initializer.extend(self.new_initializers)
        del graph.node[:]
        graph.node.extend(nodes)
        return rewritten

    # -- helpers --------------------------------------------------------------------------------
    def constant(self, hint: str, array) -> str:
        from onnx import numpy_helper

        name = self.fresh(hint)
        self.new_initializers.append(numpy_helper.from_array(array, name))
        return name

    def node(self, op_type: str, inputs, outputs, name: str, **attrs):
        from onnx import helper

        return helper.make_node(op_type, list(inputs), list(outputs), name=name, **attrs)

    # -- FusedConv ------------------------------------------------------------------------------
    def fused_conv(self, node):
        import numpy as np

        if len(node.output) != 1 or len(node.input) < 2:
            return None   # (the importer refuses it, naming the node)
        attrs = _attrs(node)
        activation = attrs.pop("activation", None)
        params = attrs.pop("activation_params", [])
        if isinstance(activation, bytes):
            activation = activation.decode("utf-8", errors="replace")
        if not isinstance(params, list) or not all(isinstance(p, float) for p in params) \
                or not (activation is None or isinstance(activation, str)):
            return None   # (attributes of the wrong kind: refused, naming the node)
        if activation is not None and activation not in FUSED_ACTIVATIONS:
            return None
        if activation is not None:
            op_type, names = FUSED_ACTIVATIONS[activation]
            if len(params) != len(names) and not (activation == "LeakyRelu" and not params):
                return None
        base = node.name or node.output[0]
        out = node.output[0]
        result = []
        summand = node.input[3] if len(node.input) > 3 else ""
        conv_out = self.fresh(f"{out}/conv") if activation or summand else out
        conv_inputs = list(node.input[:3])
        conv = self.node("Conv", conv_inputs, [conv_out], base)
        conv.attribute.extend(a for a in node.attribute   # as given: the importer checks them
                              if a.name not in ("activation", "activation_params"))
        result.append(conv)
        value = conv_out
        if summand:
            summed = self.fresh(f"{out}/sum") if activation else out
            result.append(self.node("Add", [value, summand], [summed], f"{base}/sum"))
            value = summed
        if activation:
            name = f"{base}/{activation}"
            if op_type == "Clip":
                bounds = [self.constant(f"{base}/{bound}", np.array(v, np.float32))
                          for bound, v in zip(names, params)]
                result.append(self.node("Clip", [value] + bounds, [out], name))
            else:
                act_attrs = dict(zip(names, params))
                result.append(self.node(op_type, [value], [out], name, **act_attrs))
        return result

    # -- FusedMatMul ----------------------------------------------------------------------------
    def fused_matmul(self, node, ranks):
        import numpy as np

        if len(node.output) != 1 or len(node.input) != 2:
            return None
        attrs = _attrs(node)
        if attrs.get("transBatchA", 0) or attrs.get("transBatchB", 0):
            return None
        if any(not isinstance(attrs.get(flag, 0), int) for flag in ("transA", "transB")) \
                or not isinstance(attrs.get("alpha", 1.0), float):
            return None
        base = node.name or node.output[0]
        out = node.output[0]
        inputs, result = [], []
        for index, flag in ((0, "transA"), (1, "transB")):
            name = node.input[index]
            if attrs.get(flag, 0):
                rank = ranks.get(name)
                if rank is None or rank < 2:
                    return None
                perm = list(range(rank - 2)) + [rank - 1, rank - 2]
                swapped = self.fresh(f"{name}/{flag}")
                result.append(self.node("Transpose", [name], [swapped], f"{base}/{flag}",
                                        perm=perm))
                name = swapped
            inputs.append(name)
        alpha = float(attrs.get("alpha", 1.0))
        product = out if alpha == 1.0 else self.fresh(f"{out}/product")
        result.append(self.node("MatMul", inputs, [product], base))
        if alpha != 1.0:
            scale = self.constant(f"{base}/alpha", np.array(alpha, np.float32))
            result.append(self.node("Mul", [product, scale], [out], f"{base}/alpha"))
        return result

    # -- SplitToSequence read by SequenceAt -----------------------------------------------------
    def sequence_reads_fit(self, split, readers, constants, graph) -> bool:
        if not readers or any(r.op_type != "SequenceAt" or len(r.input) != 2
                              or r.input[0] != split.output[0] or len(r.output) != 1
                              or r.input[1] not in constants for r in readers):
            return False
        if split.output[0] in {o.name for o in graph.output}:
            return False
        fitting = self.chunks(split, constants)
        if fitting is None:
            return False
        sizes = fitting[0]
        positions = [constants[r.input[1]] for r in readers]
        if any(p.ndim != 0 or p.dtype.kind not in "iu" for p in positions):
            return False
        # chunks of one element: a position past the end would be an empty slice, not
        # the error ONNX defines, so only non-negative ones and -1 are taken
        return all(-len(sizes) <= int(p) < len(sizes) if sizes is not None else int(p) >= -1
                   for p in positions)

    def chunks(self, split, constants):
        """(sizes or None, keepdims) of the sequence's chunks: sizes from a constant
        `split` (1-D: as given; a scalar needs the dim's length, so only 1-D is taken),
        None for chunks of one element."""
        attrs = _attrs(split)
        keepdims = attrs.get("keepdims", 1)
        if not isinstance(keepdims, int) or not isinstance(attrs.get("axis", 0), int):
            return None
        if len(split.input) > 1 and split.input[1]:
            sizes = constants.get(split.input[1])
            if sizes is None or sizes.ndim != 1 or sizes.dtype.kind not in "iu" \
                    or (sizes < 0).any():
                return None
            return [int(s) for s in sizes], 1
        return None, keepdims

    def sequence_at(self, split, node, constants):
        import numpy as np

        axis = _attrs(split).get("axis", 0)
        sizes, keepdims = self.chunks(split, constants)
        position = int(constants[node.input[1]])
        base = node.name or node.output[0]
        if sizes is not None:
            position %= len(sizes)   # in range: sequence_reads_fit checked it
            start = sum(sizes[:position])
            end = start + sizes[position]
        else:
            start, end = position, (position + 1 if position != -1 else np.iinfo(np.int64).max)
        out = node.output[0]
        squeeze = sizes is None and not keepdims
        sliced = self.fresh(f"{out}/chunk") if squeeze else out
        names = [self.constant(f"{base}/{what}", np.array([v], np.int64))
                 for what, v in (("start", start), ("end", end), ("axis", axis))]
        result = [self.node("Slice", [split.input[0]] + names, [sliced], base)]
        if squeeze:
            if self.opset >= 13:
                result.append(self.node("Squeeze", [sliced, names[2]], [out], f"{base}/squeeze"))
            else:
                result.append(self.node("Squeeze", [sliced], [out], f"{base}/squeeze",
                                        axes=[axis]))
        return result


def _attrs(node) -> dict:
    """A node's attributes as Python values, by name."""
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _all_names(graph) -> set:
    names = {v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info)}
    names |= {t.name for t in graph.initializer}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
        if node.name:
            names.add(node.name)
        for attr in node.attribute:
            if attr.type == attr.GRAPH:
                names |= _all_names(attr.g)
    return names


def _constants(graph) -> dict:
    """Name -> numpy array of the graph's initializers and Constant nodes' values."""
    from onnx import numpy_helper

    values = {}
    for tensor in graph.initializer:
        try:
            values[tensor.name] = numpy_helper.to_array(tensor)
        except (ValueError, TypeError, KeyError):  # (unreadable: not a constant here)
            continue
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output \
                and len(node.attribute) == 1 and node.attribute[0].name == "value":
            try:
                values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
            except (ValueError, TypeError, KeyError):  # (unreadable: not a constant here)
                continue
    return values


def _ranks(graph) -> dict:
    """Name -> rank, where the graph's declared types or ONNX's shape inference say it."""
    ranks = {}
    for value in list(graph.input) + list(graph.output) + list(graph.value_info):
        tensor = value.type.tensor_type
        if value.type.HasField("tensor_type") and tensor.HasField("shape"):
            ranks[value.name] = len(tensor.shape.dim)
    for tensor in graph.initializer:
        ranks[tensor.name] = len(tensor.dims)
    return ranks
