"""The buffer dialect: memory made explicit.

`buffer<4x?xf32>` is a row-major contiguous buffer (a view may carry element strides:
`buffer<4x4xf32, [8, 1]>`; a `?` dim may carry an upper bound, as tensors do:
`buffer<4x?xf32, #bounds<?, 1280>>`, which plan-memory places at its bound's size). Ops say what they do to memory through declared effects —
allocate, free, read, write, alias — so analyses never guess:

    %b = buffer.alloc {kind = "activation"} : buffer<1x64x56x56xf32>
    buffer.compute %x, %w, %b {op = "graph.conv", operandSegmentSizes = array<i32: 2, 1>, ...}
    %r = buffer.reshape %b : (buffer<1x64x56x56xf32>) -> buffer<1x200704xf32>
    buffer.dealloc %b : buffer<1x64x56x56xf32>

`buffer.compute` is a graph op in destination-passing style: it reads its `ins`, writes
its `outs`, and carries the graph op's name and properties.
"""

from __future__ import annotations

from typing import ClassVar

from palimpsest.ir import attributes as A
from palimpsest.ir.core import Operation
from palimpsest.ir.opdef import (
    ALIAS, ALLOCATE, FREE, READ, WRITE, MemoryEffect, Pure, aliases, operand, prop,
    register_op, result_def, type_is, variadic_operand,
)
from palimpsest.ir.types import (
    IndexType, IntegerType, ShapedType, TensorType, TypeParamError, check_bounds, format_dims,
    register_type,
)

BUFFER_KINDS = ("input", "output", "activation", "workspace", "constant")


@register_type
class BufferType(ShapedType):
    keyword: ClassVar[str] = "buffer"
    shape: tuple
    element_type: object
    strides: tuple | None = None  # in elements; None: contiguous row-major
    encoding: object = None       # A.BoundsAttr: bounds of `?` dims (ShapedType.bounds)

    def __str__(self) -> str:
        extra = (A.ArrayAttr(tuple(A.IntegerAttr(s) for s in self.strides)),) if self.strides else ()
        return self._body(extra + (self.encoding,))

    @classmethod
    def from_params(cls, dims, params):
        if dims is None:
            raise TypeParamError("buffers must be ranked")
        element, extra = cls._split_params(cls.keyword, dims, params, 2)
        strides = encoding = None
        if extra and isinstance(extra[-1], A.BoundsAttr):
            encoding = extra[-1]
            problem = check_bounds(dims, encoding.bounds)
            if problem:
                raise TypeParamError(problem)
            extra = extra[:-1]
        if len(extra) > 1:
            raise TypeParamError("too many parameters in 'buffer<...>' (strides, then "
                                 "#bounds<...>)")
        if extra:
            layout = extra[0]
            if not isinstance(layout, A.ArrayAttr) or len(layout) != len(dims) or not all(
                    isinstance(s, A.IntegerAttr) and s.value >= 0 for s in layout):
                raise TypeParamError(f"buffer strides must be [{len(dims)} non-negative "
                                     f"integers], got {layout}")
            strides = tuple(s.value for s in layout)
        return cls(tuple(dims), element, strides, encoding)

    @property
    def is_contiguous(self) -> bool:
        return self.strides is None or self.strides == contiguous_strides(self.shape)

    def nbytes(self) -> int | None:
        """Bytes this buffer spans; None when a dimension is dynamic."""
        count = self.num_elements()
        if count is None:
            return None
        return count * element_bytes(self.element_type)

    def upper_nbytes(self) -> int | None:
        """Bytes at its bounds (`nbytes` when static); None when a `?` dim is unbounded."""
        count = self.upper_num_elements()
        if count is None:
            return None
        return count * element_bytes(self.element_type)


def contiguous_strides(shape) -> tuple:
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim if dim is not None else 0
    return tuple(reversed(strides))


def element_bytes(element_type) -> int:
    width = element_type.width if hasattr(element_type, "width") else 64
    return max(1, (width + 7) // 8) if not isinstance(element_type, IndexType) else 8


def buffer_of(tensor: TensorType) -> BufferType:
    """The contiguous buffer holding `tensor` (its bounds kept)."""
    return BufferType(tuple(tensor.shape), tensor.element_type, None, _bounds_encoding(tensor))


def tensor_of(buffer: BufferType) -> TensorType:
    return TensorType(tuple(buffer.shape), buffer.element_type, _bounds_encoding(buffer))


def _bounds_encoding(type_):
    encoding = type_.encoding
    return encoding if isinstance(encoding, A.BoundsAttr) else None


AnyBuffer = type_is(BufferType)
Index = type_is(IndexType)
ByteBuffer = type_is(BufferType)


def _kind(attr):
    if attr.value not in BUFFER_KINDS:
        return f"must be one of {', '.join(BUFFER_KINDS)}, got '{attr.value}'"
    return None


@register_op
class AllocOp(Operation):
    """A new buffer. Dynamic dims take their sizes from `sizes` (one index per `?`),
    or, when none are given, from the op that first writes the buffer at run time."""

    name = "buffer.alloc"
    sizes = variadic_operand(Index)
    result = result_def(AnyBuffer)
    kind = prop(A.StringAttr, default=A.StringAttr("activation"), check=_kind)
    alignment = prop(A.IntegerAttr, optional=True)
    effects = (MemoryEffect(ALLOCATE, "result"),)

    def verify_(self):
        type_ = self.result.type
        dynamic = sum(d is None for d in type_.shape)
        if self.operands and len(self.operands) != dynamic:
            raise self.error(f"has {len(self.operands)} size operands for {dynamic} dynamic dims")
        if not type_.is_contiguous:
            raise self.error("allocates contiguous buffers only; use buffer.view for strides")


@register_op
class DeallocOp(Operation):
    name = "buffer.dealloc"
    source = operand(AnyBuffer)
    effects = (MemoryEffect(FREE, "source"),)


@register_op
class ConstantOp(Operation):
    """A read-only buffer holding a constant (weights)."""

    name = "buffer.constant"
    result = result_def(AnyBuffer)
    value = prop(A.Attribute)
    traits = (Pure(),)

    def verify_(self):
        value = self.properties["value"]
        if not isinstance(value, (A.DenseElementsAttr, A.DenseResourceAttr)):
            raise self.error(f"value must be dense<...> or dense_resource<...>, got {value}")
        if tensor_of(self.result.type) != value.type:
            raise self.error(f"result '{self.result.type}' does not match the value's type "
                             f"'{value.type}'")


@register_op
class ViewOp(Operation):
    """A typed view at a byte offset of a byte buffer (a pool's arena, or any buffer
    of i8/ui8): static `offset`, or a dynamic one as operand."""

    name = "buffer.view"
    source = operand(AnyBuffer)
    dynamic_offset = variadic_operand(Index)
    result = result_def(AnyBuffer)
    offset = prop(A.IntegerAttr, optional=True)
    effects = aliases("result", "source")

    def verify_(self):
        if bool(self.dynamic_offset) == ("offset" in self.properties):
            raise self.error("needs exactly one of a static 'offset' or a dynamic offset operand")
        source = self.source.type
        if not (isinstance(source.element_type, IntegerType) and source.element_type.width == 8):
            raise self.error(f"views a byte buffer (i8 or ui8 elements), got '{source}'")
        offset = self.properties.get("offset")
        size = self.result.type.upper_nbytes()  # a bounded view spans its bound's bytes
        total = source.nbytes()
        if offset is not None and size is not None and total is not None:
            if offset.value < 0 or offset.value + size > total:
                raise self.error(f"bytes [{offset.value}, {offset.value + size}) lie outside "
                                 f"the {total}-byte source")


@register_op
class ReshapeOp(Operation):
    """The same contiguous memory seen with another shape: no copy."""

    name = "buffer.reshape"
    source = operand(AnyBuffer)
    result = result_def(AnyBuffer)
    effects = aliases("result", "source")

    def verify_(self):
        source, result = self.source.type, self.result.type
        if source.element_type != result.element_type:
            raise self.error(f"changes the element type from {source.element_type} to "
                             f"{result.element_type}")
        if not source.is_contiguous:
            raise self.error("reshapes contiguous buffers only")
        a, b = source.num_elements(), result.num_elements()
        if a is not None and b is not None and a != b:
            raise self.error(f"changes the element count from {a} to {b}")


@register_op
class CopyOp(Operation):
    name = "buffer.copy"
    source = operand(AnyBuffer)
    target = operand(AnyBuffer)
    effects = (MemoryEffect(READ, "source"), MemoryEffect(WRITE, "target"))

    def verify_(self):
        source, target = self.source.type, self.target.type
        if source.element_type != target.element_type or (
                source.shape != target.shape and None not in source.shape + target.shape):
            raise self.error(f"copies '{source}' into '{target}'")


@register_op
class DimOp(Operation):
    """The size of dimension `index` of a buffer."""

    name = "buffer.dim"
    source = operand(AnyBuffer)
    result = result_def(Index)
    index = prop(A.IntegerAttr)
    traits = (Pure(),)

    def verify_(self):
        if not 0 <= self.properties["index"].value < len(self.source.type.shape):
            raise self.error(f"index {self.properties['index'].value} is out of range for "
                             f"'{self.source.type}'")


@register_op
class ComputeOp(Operation):
    """Graph op `op` in destination-passing style: reads `ins`, writes `outs`. The
    graph op's properties ride along; its own operandSegmentSizes, if any, is kept as
    `graphSegmentSizes`."""

    name = "buffer.compute"
    # the graph op's properties ride along undeclared: in the pretty form every
    # attribute without a dialect prefix is one of them
    open_properties = True
    ins = variadic_operand(AnyBuffer)
    outs = variadic_operand(AnyBuffer)
    op = prop(A.StringAttr)
    effects = (MemoryEffect(READ, "ins"), MemoryEffect(WRITE, "outs"))

    def graph_properties(self) -> dict:
        props = {k: v for k, v in self.properties.items()
                 if k not in ("op", "operandSegmentSizes", "graphSegmentSizes")}
        if "graphSegmentSizes" in self.properties:
            props["operandSegmentSizes"] = self.properties["graphSegmentSizes"]
        return props

    def verify_(self):
        from palimpsest.ir.opdef import lookup_op

        graph_op = lookup_op(self.properties["op"].value)
        if graph_op is None:
            raise self.error(f"computes unknown op '{self.properties['op'].value}'")
        infer = getattr(graph_op, "infer_result_types", None)
        if infer is None:
            return
        inferred = infer([tensor_of(v.type) for v in self.ins], self.graph_properties(),
                         None, len(self.outs))
        if inferred is None:
            return
        for index, (value, expected) in enumerate(zip(self.outs, inferred)):
            if expected is None:
                continue
            actual = value.type
            ok = actual.element_type == expected.element_type and (
                expected.shape is None or (len(expected.shape) == len(actual.shape) and all(
                    e is None or a is None or e == a for e, a in zip(expected.shape, actual.shape))))
            if not ok:
                raise self.error(f"out #{index} is '{actual}' but "
                                 f"'{self.properties['op'].value}' produces "
                                 f"{format_dims(expected.shape or ())}{expected.element_type}")


def shaped_bytes(type_: ShapedType) -> int | None:
    count = type_.num_elements()
    return None if count is None else count * element_bytes(type_.element_type)


__all__ = [n for n in dir() if not n.startswith("_")] + ["ALIAS"]
