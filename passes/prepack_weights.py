"""`prepack-weights`: constants reordered once, at compile time, into the layout the
kernel that reads them wants, as onnxruntime prepacks its GEMM weights.

`kernel.matmul` with `transB = 1` (Gemm's usual form, every fully-connected layer that
PyTorch exports) whose B is a `buffer.constant`: B is replaced by a new constant holding
Bᵀ, contiguous, and `transB` becomes 0 (likewise A with `transA`). Every run then hands
the kernel a row-major (k, n) B: the numpy backend's `np.matmul` gets a plain C-ordered
operand (no per-call layout decision, no copy for a batched product), and the OpenCL
backend's register-blocked GEMM loads B's rows as vectors instead of gathering its
columns or falling back to the dot-product form. A constant read by several such
matmuls is packed once; the original constant goes when nothing else reads it.

Only where the product has at least `MIN_ROWS` rows (all batches together; a dynamic
count counts as many): with fewer, OpenCL's dot-product form, which reads the
transposed B as it is, beats the vector form on the packed B (PoCL, median CPU time of
a session run: 26 x 512 by 512ᵀ 0.31 ms transposed, 0.34 ms packed; wall time 0.37 /
0.51 ms), and on numpy it makes no difference that matters (1 x 1280 by 1000ᵀ: 0.25 ms
either way). With more rows packing wins on both (80 x 96 by 6625ᵀ: numpy 1.38 -> 1.24
ms, OpenCL 3.34 -> 2.77 ms; 128 x 384 by 1536ᵀ: numpy 1.54 -> 1.50 ms, OpenCL 3.49 ->
2.40 ms, wall 18.3 -> 4.0 ms).

`kernel.lstm`, `kernel.gru` and `kernel.rnn` whose R is a constant: R (dirs x G·H x H)
is stored as Rᵀ per direction and gate (dirs x G x H x H), `packed_r = 1`, and the
`recurrence` workspace that held that copy each run leaves the plan (captcha_ocr's
arena 5063 -> 3543 KiB, silero_vad_sequence's 277 -> 39 KiB).

Conv weights need no packing here: `kernel.conv2d`'s W (M x C/group x kh x kw) is, as
stored, the row-major (group, M/group, C/group*kh*kw) matrix both backends' im2col GEMM
multiplies by (numpy: a reshape, a view; OpenCL: read in place)."""

from __future__ import annotations

from dataclasses import dataclass

from palimpsest.dialects.buffer import BufferType, ConstantOp, tensor_of
from palimpsest.ir import attributes as A
from palimpsest.ir.core import Operation
from palimpsest.passes.pass_manager import ModulePass, register_pass


def _unique_key(module: Operation):
    """A function giving blob keys that no blob under `module` (nor an earlier call) uses."""
    from palimpsest.ir.resources import blob_key_base, collect_blobs, unique_name

    taken = set(collect_blobs(module).keys())
    return lambda hint: unique_name(blob_key_base(hint), taken)


MIN_ROWS = 32


def _rows(op) -> int | None:
    """The rows of a matmul's product, all batches together (None when dynamic)."""
    shape = op.outs[0].type.shape
    if any(d is None for d in shape):
        return None
    rows = 1
    for d in shape[:-1]:
        rows *= d
    return rows


def prepack_weights(module: Operation) -> int:
    """Pack the constant operands of transposed matmuls (see the module doc); returns
    how many operands now read a packed constant."""
    import numpy as np

    from palimpsest.dialects.graph.evaluate import dense_attr

    top = module
    while top.parent_op is not None:
        top = top.parent_op
    key = None
    packed: dict = {}       # (constant op) -> packed value
    count = 0
    for op in list(module.walk()):
        if op.name != "kernel.matmul":
            continue
        config = op.config()
        rows = _rows(op)
        if rows is not None and rows < MIN_ROWS:
            continue
        k = config.get("epilogue_ins") or 0
        core = len(op.ins) - k
        for flag, index in (("transB", 1), ("transA", 0)):
            if not config[flag] or index >= core:
                continue
            value = op.ins[index]
            owner = getattr(value, "op", None)
            if not isinstance(owner, ConstantOp) or len(value.type.shape) < 2 \
                    or not value.type.has_static_shape:
                continue
            if any(value is v for i, v in enumerate(op.ins) if i != index):
                continue  # (the same constant as another operand: leave it)
            new = packed.get(owner)
            if new is None:
                try:
                    array = owner.properties["value"].to_numpy()
                except (ValueError, OSError):
                    continue   # (unreadable, a side file gone: the run reports it)
                flipped = np.ascontiguousarray(np.swapaxes(array, -1, -2))
                shape = tuple(value.type.shape)
                type_ = BufferType(shape[:-2] + (shape[-1], shape[-2]),
                                   value.type.element_type)
                if key is None:
                    key = _unique_key(top)
                hint = f"{value.name_hint or 'weights'}_packed"
                attr = dense_attr(flipped, tensor_of(type_), key, hint)
                constant = ConstantOp([], [type_], {"value": attr}, result_names=[hint])
                constant.location, constant.source_loc = owner.location, owner.source_loc
                owner.parent.insert_after(owner, constant)
                new = packed[owner] = constant.results[0]
            op.set_operand(index, new)  # (the ins come first among the operands)
            op.properties[flag] = A.IntegerAttr(0)
            count += 1
    recurrences: dict = {}  # (R's constant op) -> its packed value
    for op in list(module.walk()):
        if op.name in RECURRENT and _pack_recurrence(op, top, recurrences):
            count += 1
    for owner in list(packed) + list(recurrences):
        if not owner.results[0].users():
            owner.erase()
    return count


RECURRENT = ("kernel.lstm", "kernel.gru", "kernel.rnn")


def _pack_recurrence(op: Operation, top: Operation, packed: dict) -> bool:
    """A recurrent kernel whose R is a constant reads Rᵀ per gate from a packed constant
    (dirs x G x H x H, `packed_r = 1`), and its `recurrence` workspace, which held that
    copy each run, goes (its alloc and dealloc with it)."""
    import numpy as np

    from palimpsest.dialects.graph.evaluate import dense_attr
    from palimpsest.dialects.kernel_base import segment_sizes_attr

    config = op.config()
    value = op.ins[2]
    owner = getattr(value, "op", None)
    if config["packed_r"] or not isinstance(owner, ConstantOp) \
            or not value.type.has_static_shape or any(v is value for v in op.ins[:2]):
        return False
    roles = type(op).workspace_roles([v.type for v in op.ins], config)
    workspaces = list(op.operands[len(op.ins) + len(op.outs):])
    if "recurrence" not in roles or len(workspaces) != len(roles):
        return False
    dirs, rows, hidden = value.type.shape
    gates = type(op).gates
    new = packed.get(owner)
    if new is None:
        try:
            array = owner.properties["value"].to_numpy()
        except (ValueError, OSError):
            return False   # (unreadable, a side file gone: the run reports it)
        flipped = np.ascontiguousarray(
            array.reshape(dirs, gates, hidden, hidden).transpose(0, 1, 3, 2))
        type_ = BufferType((dirs, gates, hidden, hidden), value.type.element_type)
        hint = f"{value.name_hint or 'R'}_packed"
        attr = dense_attr(flipped, tensor_of(type_), _unique_key(top), hint)
        constant = ConstantOp([], [type_], {"value": attr}, result_names=[hint])
        constant.location, constant.source_loc = owner.location, owner.source_loc
        owner.parent.insert_after(owner, constant)
        new = packed[owner] = constant.results[0]
    scratch = workspaces.pop(roles.index("recurrence"))
    properties = dict(op.properties)
    properties["packed_r"] = A.IntegerAttr(1)
    properties["operandSegmentSizes"] = segment_sizes_attr(len(op.ins), len(op.outs),
                                                           len(workspaces))
    ins = list(op.ins)
    ins[2] = new
    kernel = type(op)(ins + list(op.outs) + workspaces, [], properties)
    kernel.location, kernel.source_loc = op.location, op.source_loc
    op.parent.insert_before(op, kernel)
    op.erase()
    alloc = scratch.op
    for user in list(scratch.users()):
        user.erase()
    alloc.erase()
    return True


@register_pass
@dataclass(frozen=True)
class PrepackWeights(ModulePass):
    name = "prepack-weights"
    summary = ("constants reordered at compile time into the layout their kernel reads "
               "(a transposed matmul's constant B stored transposed, transB = 0)")

    def apply(self, module: Operation) -> None:
        prepack_weights(module)


__all__ = ["PrepackWeights", "prepack_weights"]
