"""Evaluating one graph op with the numpy reference kernels, and turning arrays back
into `graph.constant` attributes.

Shared by the reference executor (backends/reference) and by the passes that compute
at compile time (fold-constants, the batch-norm fold of canonicalize). numpy is imported
inside the functions that need it, never when this module is imported.
"""

from __future__ import annotations

from palimpsest.ir import attributes as A
from palimpsest.ir.opdef import OPTIONAL, VARIADIC, segment_sizes
from palimpsest.ir.types import TensorType

# Arrays of at most this many elements are printed as readable `dense<[...]>` literals;
# up to INLINE_LIMIT bytes as `dense<"0x...">`; larger ones become `dense_resource<key>`
# blobs (the rule of dialects/graph/from_onnx.py).
READABLE_ELEMENTS = 16
INLINE_LIMIT = 64


def attribute_value(attr):
    """A property as the reference kernels take it."""
    if isinstance(attr, (A.DenseElementsAttr, A.DenseResourceAttr)):
        return attr.to_numpy()
    return A.to_python(attr)


def kernel_inputs(op, values: dict) -> list:
    """Operand arrays in ONNX order, with None for an absent optional operand."""
    cls = type(op)
    sizes = segment_sizes(op, op.operands, cls.operand_defs, "operandSegmentSizes")
    inputs, position = [], 0
    for definition, size in zip(cls.operand_defs, sizes):
        group = [values[v] for v in op.operands[position:position + size]]
        position += size
        if definition.kind == VARIADIC:
            inputs.extend(group)
        elif definition.kind == OPTIONAL and not group:
            inputs.append(None)
        else:
            inputs.extend(group)
    while inputs and inputs[-1] is None:
        inputs.pop()
    return inputs


def kernel_attributes(op) -> dict:
    """The op's properties as ONNX attribute values (raises OSError/ValueError when a
    resource blob cannot be read)."""
    return {k: attribute_value(v) for k, v in op.properties.items()
            if k != "operandSegmentSizes"}


def has_kernel(op_name: str) -> bool:
    from palimpsest.dialects.graph.reference import KERNELS

    return op_name in KERNELS


def evaluate_op(op, input_arrays) -> list:
    """Run `op` on `input_arrays` (numpy arrays aligned with `op.operands`) with its
    reference kernel; one array per result. Raises the op's DiagnosticError when it has
    no kernel, its data cannot be read, or the kernel rejects the inputs."""
    from palimpsest.dialects.graph.reference import KERNELS

    kernel = KERNELS.get(op.name)
    if kernel is None:
        raise op.error("has no reference implementation")
    try:
        attrs = kernel_attributes(op)
    except OSError as error:  # a side file of weights that is missing or unreadable
        raise op.error(f"cannot read its data: {error.strerror or error}: "
                       f"'{error.filename}'") from None
    except ValueError as error:  # e.g. a truncated side file
        raise op.error(f"cannot read its data: {error}") from None
    values = dict(zip(op.operands, input_arrays, strict=True))
    try:
        return kernel(kernel_inputs(op, values), attrs, len(op.results))
    except (ValueError, IndexError, TypeError) as error:
        raise op.error(f"failed at run time: {error}") from None


def numpy_dtype(type_: TensorType):
    """The numpy dtype of a tensor type's elements; None when numpy has none (bf16)."""
    import numpy as np

    try:
        return np.dtype(A.numpy_dtype_name(type_.element_type))
    except ValueError:
        return None


def dense_attr(array, type_: TensorType, resource_key=None, hint: str = "folded"):
    """A `graph.constant` value holding `array` (converted to `type_`'s elements):
    readable `dense<[...]>` when small, hex `dense<"0x...">` up to INLINE_LIMIT bytes,
    otherwise `dense_resource<key>` with inline blob data. `resource_key(hint)` returns
    a key not used elsewhere in the module; without it large arrays stay hex."""
    import numpy as np

    dtype = numpy_dtype(type_)
    data = np.ascontiguousarray(np.asarray(array, dtype=dtype)).astype(
        dtype.newbyteorder("<"), copy=False)
    flat = data.reshape(-1)
    if flat.size > 1 and flat.tobytes() == flat[:1].tobytes() * flat.size:
        # a splat (bitwise, so -0.0 and 0.0 stay apart): one element stands for all
        if data.dtype.kind in "biuf" and data.dtype != np.float16:
            return A.DenseElementsAttr(type_, tuple(flat[:1].tolist()))
        return A.DenseElementsAttr.from_numpy(flat[:1], type_)
    if 0 < data.size <= READABLE_ELEMENTS and data.dtype.kind in "biuf" \
            and data.dtype != np.float16:  # empty: "0x", which parses back for any shape
        return A.DenseElementsAttr(type_, tuple(data.reshape(-1).tolist()))
    if data.nbytes <= INLINE_LIMIT or resource_key is None:
        return A.DenseElementsAttr.from_numpy(data, type_)
    key = resource_key(hint)
    return A.DenseResourceAttr(type_, A.ResourceBlob(key, data=data.tobytes(), alignment=64))


__all__ = ["INLINE_LIMIT", "READABLE_ELEMENTS", "attribute_value", "dense_attr",
           "evaluate_op", "has_kernel", "kernel_attributes", "kernel_inputs", "numpy_dtype"]
