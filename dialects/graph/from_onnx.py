"""ONNX → graph dialect. One function per ONNX graph, one `graph.*` op per node.

- Initializers and Constant nodes become `graph.constant`; weights larger than
  `inline_limit` bytes become `dense_resource<...>` blobs (written to a side file by
  `palimpsest-import`), so the IR text stays small.
- Graph inputs become function arguments; symbolic or unknown dims become `?`. The
  ONNX names of inputs and outputs are kept as `palimpsest.name` argument/result
  attributes, which `palimpsest-run` uses to bind `--input NAME=file.npy`.
- Attributes follow CONVENTIONS.md; an attribute that older opsets use where the graph
  op takes an operand (Squeeze's `axes`, Split's `split`, Pad's `pads`, Clip's min/max,
  ReduceMean's `axes`) becomes a constant operand.
- Anything unsupported is one DiagnosticError naming the op, the node and the model.
"""

from __future__ import annotations

import os
import re

from palimpsest.dialects.builtin import ModuleOp
from palimpsest.dialects.func import FuncOp, ReturnOp
from palimpsest.dialects.graph.naming import CONTRIB_TO_GRAPH, ONNX_TO_GRAPH
from palimpsest.dialects.graph.onnx_opsets import OpsetError, adapt
from palimpsest.dialects.graph.onnx_rewrites import REWRITTEN_CONTRIB, rewrite_model
from palimpsest.dialects.graph.ops_base import (
    ONNX_DTYPES, Args, _ConstantOperands, refine_type,
)
from palimpsest.dialects.graph.shapes import ShapeError
from palimpsest.ir import attributes as A
from palimpsest.ir.diagnostics import DiagnosticError, NameLoc
from palimpsest.ir.resources import unique_name
from palimpsest.ir.opdef import SINGLE, VARIADIC, lookup_op, property_problem
from palimpsest.ir.core import Block, Region
from palimpsest.ir.types import FloatType, TensorType, i1, i32, i64

INLINE_LIMIT = 64  # bytes; larger constants become resources
REGION_OPS = ("If", "Loop", "Scan")


def _names_read(graph) -> set:
    """Every value name the graph's nodes read, their subgraphs' included (a subgraph
    reads outer initializers by name), and its outputs."""
    names = {o.name for o in graph.output}
    for node in graph.node:
        names.update(node.input)
        for attr in node.attribute:
            if attr.g.node:
                names |= _names_read(attr.g)
            for sub in attr.graphs:
                names |= _names_read(sub)
    return names


def _yield_types(region) -> list:
    return [v.type for v in region.blocks[0].terminator.operands]


def _join(a, b):
    """The type of a result that is `a` on one branch and `b` on the other."""
    if not isinstance(a, TensorType) or not isinstance(b, TensorType) or a == b:
        return a
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return TensorType(None, a.element_type)
    return TensorType(tuple(x if x == y else None for x, y in zip(a.shape, b.shape)),
                      a.element_type)
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_$.\-]")


def _output_names(node) -> list:
    """The node's outputs less its trailing omitted ones. An omitted output before a used
    one (LSTM's Y when only Y_h is wanted) is still a result of the op, unused, under a made
    up name: the planner gives it a slot only while the op runs."""
    outputs = list(node.output)
    while outputs and not outputs[-1]:
        outputs.pop()
    return [o or f"{node.name or node.op_type}_unused_{i}" for i, o in enumerate(outputs)]


def _ssa_name(onnx_name: str) -> str | None:
    name = _NAME_CHARS.sub("_", onnx_name).strip("_")
    if not name or name[0].isdigit():
        name = "v_" + name if name else None
    return name


class OnnxImportError(DiagnosticError):
    pass


class _Importer:
    def __init__(self, model, model_name: str, inline_limit: int):
        import onnx

        self.onnx = onnx
        self.model = model
        self.model_name = model_name
        self.inline_limit = inline_limit
        self.opsets = {o.domain or "": o.version for o in model.opset_import}
        self.opset = self.opsets.get("", self.opsets.get("ai.onnx", 13))
        self.values: dict = {}
        self.types: dict = {}
        self.blob_keys: set[str] = set()

    def fail(self, message: str, node=None) -> OnnxImportError:
        where = ""
        if node is not None:
            domain = "" if node.domain in ("", "ai.onnx") else node.domain
            version = self.opsets.get(domain, "?") if domain else self.opset
            where = (f"node '{node.name or '(unnamed)'}' ({domain + '.' if domain else ''}"
                     f"{node.op_type}, opset {version}): ")
        return OnnxImportError(f"{where}{message}", NameLoc(self.model_name))

    # -- types -------------------------------------------------------------------------
    def element_type(self, code: int, what: str):
        element = ONNX_DTYPES.get(code)
        if element is None:
            try:
                name = self.onnx.TensorProto.DataType.Name(code) if code else "UNDEFINED"
            except ValueError:  # a code no ONNX version defines
                name = f"{code} (no such type)"
            raise self.fail(f"{what} has element type {name}, which is not supported")
        return element

    def tensor_type(self, type_proto, what: str) -> TensorType | None:
        if not type_proto.HasField("tensor_type"):
            return None
        tensor = type_proto.tensor_type
        if not tensor.elem_type:
            return None
        element = self.element_type(tensor.elem_type, what)
        if not tensor.HasField("shape"):
            return TensorType(None, element)
        # (Paddle2ONNX writes -1 for a dynamic dim)
        dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None
                     for d in tensor.shape.dim)
        return TensorType(dims, element)

    # -- constants ---------------------------------------------------------------------
    def tensor_attr(self, array, type_: TensorType, hint: str):
        import numpy as np

        data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False)
        if data.size <= 16 and data.dtype.kind in "biuf" and data.dtype != np.float16:
            return A.DenseElementsAttr(type_, tuple(data.reshape(-1).tolist()))  # readable
        if data.nbytes <= self.inline_limit:
            return A.DenseElementsAttr.from_numpy(data, type_)
        key = unique_name((_ssa_name(hint) or "blob").replace("-", "_"), self.blob_keys)
        return A.DenseResourceAttr(type_, A.ResourceBlob(key, data=data.tobytes(), alignment=64))

    def array(self, tensor, what: str, node=None):
        """A TensorProto's data as numpy; its data not matching its dims and type (too
        few bytes, an unknown type) is a diagnostic."""
        from onnx import numpy_helper

        self.element_type(tensor.data_type, what)   # a type no ONNX defines: one line
        try:
            return numpy_helper.to_array(tensor)
        except (ValueError, TypeError) as error:
            raise self.fail(f"{what}: its data does not match its dims {list(tensor.dims)} "
                            f"and type ({error})", node) from None

    def array_type(self, array, what: str) -> TensorType:
        import numpy as np

        code = self.onnx.helper.np_dtype_to_tensor_dtype(array.dtype) if array.dtype != np.bool_ \
            else self.onnx.TensorProto.BOOL
        return TensorType(tuple(int(d) for d in array.shape), self.element_type(code, what))

    def constant(self, block, array, name: str, location=None):
        type_ = self.array_type(array, f"constant '{name}'")
        cls = lookup_op("graph.constant")
        op = cls([], [type_], {"value": self.tensor_attr(array, type_, name)},
                 result_names=[_ssa_name(name)], location=location)
        block.append(op)
        return op.results[0]

    # -- attributes ---------------------------------------------------------------------
    def attribute(self, attr, node):
        kind = self.onnx.AttributeProto
        if attr.type == kind.FLOAT:
            return A.FloatAttr(attr.f, FloatType("f32"))
        if attr.type == kind.INT:
            return A.IntegerAttr(attr.i, i64)
        if attr.type == kind.STRING:
            return A.StringAttr(attr.s.decode("utf-8", errors="replace"))
        if attr.type == kind.INTS:
            return A.DenseArrayAttr(i64, tuple(int(v) for v in attr.ints))
        if attr.type == kind.FLOATS:
            return A.DenseArrayAttr(FloatType("f32"), tuple(
                A.round_to_type(float(v), FloatType("f32")) for v in attr.floats))
        if attr.type == kind.STRINGS:
            return A.ArrayAttr(tuple(A.StringAttr(s.decode("utf-8", errors="replace"))
                                     for s in attr.strings))
        if attr.type == kind.TENSOR:
            array = self.array(attr.t, f"attribute '{attr.name}'", node)
            return self.tensor_attr(array, self.array_type(array, f"attribute '{attr.name}'"),
                                    node.output[0] if node.output else attr.name)
        raise self.fail(f"attribute '{attr.name}' of kind "
                        f"{kind.AttributeType.Name(attr.type)} is not supported", node)

    # -- nodes ---------------------------------------------------------------------------
    def constant_node(self, node, block):
        import numpy as np

        attr = node.attribute[0] if len(node.attribute) == 1 else None
        if attr is None:
            raise self.fail("expects exactly one value attribute", node)
        if attr.name == "value":
            array = self.array(attr.t, "attribute 'value'", node)
        elif attr.name == "value_float":
            array = np.array(attr.f, dtype=np.float32)
        elif attr.name == "value_floats":
            array = np.array(list(attr.floats), dtype=np.float32)
        elif attr.name == "value_int":
            array = np.array(attr.i, dtype=np.int64)
        elif attr.name == "value_ints":
            array = np.array(list(attr.ints), dtype=np.int64)
        else:
            raise self.fail(f"constant attribute '{attr.name}' is not supported", node)
        self.values[node.output[0]] = self.constant(block, array, node.output[0],
                                                    self.location(node))

    def location(self, node):
        return NameLoc(node.name) if node.name else None

    def node(self, node, block):
        if node.domain not in ("", "ai.onnx"):
            name = CONTRIB_TO_GRAPH.get((node.domain, node.op_type))
            if name is None:
                known = [op for domain, op in CONTRIB_TO_GRAPH if domain == node.domain] + [
                    what for (domain, _), what in REWRITTEN_CONTRIB.items()
                    if domain == node.domain]
                verb = "is" if len(known) == 1 else "are"
                raise self.fail(f"this operator is not supported: of domain '{node.domain}' "
                                f"only {', '.join(known)} {verb}" if known else
                                f"operator domain '{node.domain}' is not supported", node)
        elif node.op_type == "Constant":
            return self.constant_node(node, block)
        else:
            try:
                node = adapt(node, self.opset)   # into the latest opset's form (onnx_opsets.py)
            except OpsetError as error:
                raise self.fail(str(error), node) from None
            name = ONNX_TO_GRAPH.get(node.op_type)
        cls = lookup_op(name) if name else None
        if cls is None:
            raise self.fail("this operator is not supported (the README lists the supported "
                            "operators)", node)
        if node.op_type in REGION_OPS:
            return self.region_node(node, block, cls)
        groups = self.operand_groups(node, cls)
        properties = {}
        operand_names = {d.field_name for d in cls.operand_defs}
        for attr in node.attribute:
            if attr.name in cls.prop_defs:
                properties[attr.name] = self.attribute(attr, node)
            elif attr.name in operand_names:
                groups[attr.name] = [self.attribute_operand(attr, node, block)]
            else:
                raise self.fail(f"attribute '{attr.name}' is not supported", node)
        operands, sizes = self.flat_operands(cls, groups, node)
        if sum(d.kind != SINGLE for d in cls.operand_defs) > 1:
            properties["operandSegmentSizes"] = A.DenseArrayAttr(i32, tuple(sizes))
        self.check_properties(cls, properties, node)
        outputs = _output_names(node)
        result_types = self.result_types(cls, operands, properties, outputs, node)
        op = cls(operands, result_types, properties, None, (), (), self.location(node),
                 [_ssa_name(o) for o in outputs])
        block.append(op)
        for output, result in zip(outputs, op.results):
            self.values[output] = result

    def flat_operands(self, cls, groups, node) -> tuple[list, list]:
        """The operands in declaration order, from their groups by name, and each group's
        size; a missing single operand is refused."""
        operands, sizes = [], []
        for definition in cls.operand_defs:
            group = groups.get(definition.field_name, [])
            if definition.kind == SINGLE and len(group) != 1:
                raise self.fail(f"missing input '{definition.field_name}'", node)
            operands.extend(group)
            sizes.append(len(group))
        return operands, sizes

    def check_properties(self, cls, properties, node) -> None:
        """An attribute of the wrong kind or value (floats where ints are declared) is
        refused here, as the verifier would: the op's shape rule reads it first; so is a
        required attribute the node lacks (Concat without `axis`)."""
        for name, definition in cls.prop_defs.items():
            value = properties.get(name)
            if value is None:
                if not definition.optional and name != "operandSegmentSizes":
                    raise self.fail(f"missing required attribute '{name}'", node)
                continue
            problem = property_problem(definition, value)
            if problem:
                raise self.fail(f"attribute '{name}' {problem}", node)

    # -- control flow: ONNX subgraphs become regions ----------------------------------------
    def region_node(self, node, block, cls):
        """If, Loop and Scan: their GRAPH attributes become the op's regions (names of
        outer values resolve to the enclosing blocks' SSA values), the others properties."""
        if node.op_type == "Scan" and self.opset < 9:
            node = self.scan_8(node)
        groups = self.operand_groups(node, cls)
        operands, sizes = self.flat_operands(cls, groups, node)
        properties = {}
        if "operandSegmentSizes" in cls.prop_defs:
            properties["operandSegmentSizes"] = A.DenseArrayAttr(i32, tuple(sizes))
        graphs = {}
        for attr in node.attribute:
            if attr.type == self.onnx.AttributeProto.GRAPH:
                graphs[attr.name] = attr.g
            elif attr.name in cls.prop_defs:
                properties[attr.name] = self.attribute(attr, node)
            else:
                raise self.fail(f"attribute '{attr.name}' is not supported", node)
        self.check_properties(cls, properties, node)
        for needed in (("then_branch", "else_branch") if node.op_type == "If" else ("body",)):
            if needed not in graphs:
                raise self.fail(f"missing subgraph attribute '{needed}'", node)
        outputs = _output_names(node)
        if node.op_type == "If":
            regions = [self.subgraph(graphs["then_branch"], [], node),
                       self.subgraph(graphs["else_branch"], [], node)]
            yields = [_yield_types(r) for r in regions]
            derived = [_join(a, b) for a, b in zip(*yields)]
        elif node.op_type == "Loop":
            body = graphs["body"]
            carried = [v.type for v in groups.get("v_initial", [])]
            arg_types = [TensorType((), i64), TensorType((), i1)] + [
                self.tensor_type(v.type, f"loop input '{v.name}'") or carried[i]
                for i, v in enumerate(body.input[2:])]
            regions = [self.subgraph(body, arg_types, node)]
            yielded = _yield_types(regions[0])[1:]
            derived = yielded[:len(carried)] + [
                TensorType((None,) + tuple(t.shape), t.element_type) if t.shape is not None
                else t for t in yielded[len(carried):]]
        else:
            body = graphs["body"]
            scanned = properties.get("num_scan_inputs")
            count = scanned.value if scanned is not None else 0
            states = len(operands) - count
            arg_types = [self.tensor_type(v.type, f"scan input '{v.name}'") or
                         (operands[i].type if i < states else TensorType(None, operands[
                             i].type.element_type)) for i, v in enumerate(body.input)]
            regions = [self.subgraph(body, arg_types, node)]
            yielded = _yield_types(regions[0])
            derived = yielded[:states] + [
                TensorType(None, t.element_type) for t in yielded[states:]]
            if "batched" in properties:   # Scan-8: a batch dim in front of each
                derived = [TensorType(None, t.element_type) for t in derived]
        if len(derived) != len(outputs):
            raise self.fail(f"its subgraphs yield {len(derived)} values for "
                            f"{len(outputs)} outputs", node)
        types = [self.types.get(o) or t for o, t in zip(outputs, derived)]
        op = cls(operands, types, properties, None, regions, (), self.location(node),
                 [_ssa_name(o) for o in outputs])
        block.append(op)
        for output, result in zip(outputs, op.results):
            self.values[output] = result

    def scan_8(self, node):
        """Scan-8 scans axis 1 of batched inputs (one scan per batch entry); its first
        input, sequence_lens, must be omitted (all entries full length)."""
        if node.input and node.input[0]:
            raise self.fail("Scan-8 with sequence_lens is not supported", node)
        copy = self.onnx.NodeProto()
        copy.CopyFrom(node)
        del copy.input[:]
        copy.input.extend(node.input[1:])
        for attr in copy.attribute:
            if attr.name == "directions":
                attr.name = "scan_input_directions"
        copy.attribute.append(self.onnx.helper.make_attribute("batched", 1))
        return copy

    def subgraph(self, graph, arg_types, node) -> Region:
        """An ONNX subgraph as a one-block region ending in graph.yield; outer names stay
        visible, the subgraph's own are scoped to it."""
        from palimpsest.dialects.graph.ops_control import YieldOp

        if len(arg_types) != len(graph.input):
            raise self.fail(f"subgraph '{graph.name}' takes {len(graph.input)} inputs, "
                            f"expected {len(arg_types)}", node)
        region = Region([Block(arg_types)])
        inner = region.blocks[0]
        outer, outer_types = self.values, self.types
        self.values, self.types = dict(outer), dict(outer_types)
        try:
            for value, arg in zip(graph.input, inner.args):
                arg.name_hint = _ssa_name(value.name)
                self.values[value.name] = arg
            for value in list(graph.value_info) + list(graph.output):
                type_ = self.tensor_type(value.type, f"value '{value.name}'")
                if type_ is not None:
                    self.types[value.name] = type_
            for tensor in graph.initializer:
                self.values[tensor.name] = self.constant(
                    inner, self.array(tensor, f"initializer '{tensor.name}'", node), tensor.name)
            for inner_node in graph.node:
                self.node(inner_node, inner)
            inner.append(YieldOp([self.lookup(o.name, node) for o in graph.output], []))
        finally:
            self.values, self.types = outer, outer_types
        return region

    def result_types(self, cls, operands, properties, outputs, node) -> list:
        """Each output's type: the op's shape rule refined by what ONNX's shape inference
        knows; where the two contradict each other the rule wins (it is what the kernels
        compute: e.g. a ceil_mode pooling window starting in the end padding is dropped,
        as onnxruntime does, though ONNX's inference counts it)."""
        try:
            args = Args(cls, [v.type for v in operands], properties,
                        _ConstantOperands(operands), len(outputs))
            inferred = cls.rule(args)
        except ShapeError as error:
            raise self.fail(str(error), node) from None
        if inferred is None:
            inferred = [None] * len(outputs)
        if len(inferred) != len(outputs):
            raise self.fail(f"has {len(outputs)} outputs, the op has {len(inferred)}", node)
        types = []
        for output, rule_type in zip(outputs, inferred):
            known = self.types.get(output)
            if known is None or rule_type is None:
                chosen = known if rule_type is None else rule_type
            else:
                try:
                    chosen = refine_type(known, rule_type)
                except ShapeError:
                    chosen = rule_type
            if chosen is None:
                raise self.fail(f"cannot infer the type of output '{output}'", node)
            types.append(chosen)
        return types

    def operand_groups(self, node, cls) -> dict:
        inputs = list(node.input)
        groups: dict = {}
        position = 0
        for definition in cls.operand_defs:
            if definition.kind == VARIADIC:
                taken = [i for i in inputs[position:] if i]
                position = len(inputs)
            elif position < len(inputs):
                taken = [inputs[position]] if inputs[position] else []
                position += 1
            else:
                taken = []
            groups[definition.field_name] = [self.lookup(name, node) for name in taken]
        if position < len(inputs) and any(inputs[position:]):
            raise self.fail(f"has {len(inputs)} inputs, more than the op takes", node)
        return groups

    def attribute_operand(self, attr, node, block):
        import numpy as np

        kind = self.onnx.AttributeProto
        if attr.type == kind.INTS:
            array = np.array(list(attr.ints), dtype=np.int64)
        elif attr.type == kind.INT:
            array = np.array(attr.i, dtype=np.int64)
        elif attr.type == kind.FLOAT:
            array = np.array(attr.f, dtype=np.float32)
        elif attr.type == kind.FLOATS:
            array = np.array(list(attr.floats), dtype=np.float32)
        else:
            raise self.fail(f"attribute '{attr.name}' cannot become an operand", node)
        return self.constant(block, array, f"{node.name or node.op_type}_{attr.name}")

    def lookup(self, name, node):
        value = self.values.get(name)
        if value is None:
            raise self.fail(f"input '{name}' is not produced by any earlier node, initializer "
                            f"or graph input", node)
        return value

    # -- the graph ---------------------------------------------------------------------
    def run(self, function_name: str) -> ModuleOp:
        graph = self.model.graph
        initializers = {t.name: t for t in graph.initializer}
        inputs = [i for i in graph.input if i.name not in initializers]
        arg_types = []
        for value in inputs:
            type_ = self.tensor_type(value.type, f"input '{value.name}'")
            if type_ is None:
                raise self.fail(f"input '{value.name}' is not a tensor")
            arg_types.append(type_)
        for value in list(graph.value_info) + list(graph.output):
            type_ = self.tensor_type(value.type, f"value '{value.name}'")
            if type_ is not None:
                self.types[value.name] = type_
        output_types = []
        for value in graph.output:
            type_ = self.types.get(value.name)
            output_types.append(type_)
        func = FuncOp.build(function_name, arg_types, [])
        block = func.entry_block
        for value, arg in zip(inputs, block.args):
            arg.name_hint = _ssa_name(value.name)
            self.values[value.name] = arg
        used = _names_read(graph)
        for name, tensor in initializers.items():
            if name in used:
                self.values[name] = self.constant(
                    block, self.array(tensor, f"initializer '{name}'"), name)
        for node in graph.node:
            self.node(node, block)
        results = [self.lookup(o.name, None) for o in graph.output]
        block.append(ReturnOp(results, []))
        fn_type = func.type.__class__(tuple(arg_types), tuple(v.type for v in results))
        func.properties["function_type"] = A.TypeAttr(fn_type)
        func.properties["arg_attrs"] = A.ArrayAttr(tuple(
            A.DictionaryAttr.of({"palimpsest.name": A.StringAttr(v.name)}) for v in inputs))
        func.properties["res_attrs"] = A.ArrayAttr(tuple(
            A.DictionaryAttr.of({"palimpsest.name": A.StringAttr(v.name)}) for v in graph.output))
        module = ModuleOp.build([func])
        return module


# ONNX's data propagation materializes a shape-like input's values: a declared dim past
# this (2**62 in a fuzzed model) made it allocate gigabytes before failing
DATA_PROP_MAX_DIM = 1 << 24


def _huge_input_dims(graph) -> bool:
    """Whether a graph input declares a dim ONNX's data propagation should not meet."""
    return any(d.dim_value > DATA_PROP_MAX_DIM for value in graph.input
               if value.type.HasField("tensor_type")
               for d in value.type.tensor_type.shape.dim)


def import_onnx(source, *, function_name: str = "main", inline_limit: int = INLINE_LIMIT,
                shape_inference: bool = True) -> ModuleOp:
    """Import an ONNX model (a path or a ModelProto) into a module with one function."""
    import onnx

    from palimpsest.dialects import load_all
    from palimpsest.ir.verifier import verify

    load_all()
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        try:
            model = onnx.load(path)
        except FileNotFoundError:
            raise OnnxImportError(f"cannot open '{path}': no such file", None) from None
        except Exception as error:  # protobuf decode errors and missing external data
            raise OnnxImportError(f"cannot load '{path}' as an ONNX model: {error}",
                                  NameLoc(path)) from None
        name = path
    else:
        model, name = source, source.graph.name or "<model>"
    model = rewrite_model(model)   # contrib and sequence forms with ONNX equivalents
    if shape_inference:
        try:
            model = onnx.shape_inference.infer_shapes(
                model, data_prop=not _huge_input_dims(model.graph))
        except Exception:  # noqa: BLE001 - our own rules fill in what ONNX's cannot
            pass
    importer = _Importer(model, name, inline_limit)
    module = importer.run(function_name)
    try:
        verify(module)
    except DiagnosticError as error:  # nodes that make IR the verifier refuses: name them
        node = error.location.name if isinstance(error.location, NameLoc) else None
        raise OnnxImportError((f"node '{node}': " if node else "") + error.message,
                              NameLoc(name)) from None
    return module
