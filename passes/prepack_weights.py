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


from palimpsest.dialects.buffer import BufferType, ConstantOp, tensor_of
from palimpsest.ir import attributes as A
from palimpsest.ir.core import Operation
from palimpsest.passes.pass_manager import ModulePass, register_pass


class _Packer:
    """The packed constants of one module: each made once per (constant, layout), put
    right after the constant it packs, under a blob key no other blob uses."""

    def __init__(self, module: Operation):
        top = module
        while top.parent_op is not None:
            top = top.parent_op
        self.top = top
        self.made: dict = {}     # (constant op, layout) -> packed value
        self._taken = None       # blob keys in use (collected at the first packing)

    def packed(self, value, layout: str, pack, hint: str):
        """The packed form of constant `value`: `pack(array)` -> (array, buffer type), or
        None when the constant cannot be read (a side file gone: the run reports it)."""
        from palimpsest.dialects.graph.evaluate import dense_attr
        from palimpsest.ir.resources import blob_key_base, collect_blobs, unique_name

        owner = value.op
        found = self.made.get((owner, layout))
        if found is not None:
            return found
        try:
            array = owner.properties["value"].to_numpy()
        except (ValueError, OSError):
            return None
        array, type_ = pack(array)
        if self._taken is None:
            self._taken = set(collect_blobs(self.top).keys())
        attr = dense_attr(array, tensor_of(type_),
                          lambda h: unique_name(blob_key_base(h), self._taken), hint)
        constant = ConstantOp([], [type_], {"value": attr}, result_names=[hint])
        constant.location, constant.source_loc = owner.location, owner.source_loc
        owner.parent.insert_after(owner, constant)
        found = self.made[(owner, layout)] = constant.results[0]
        return found

    def erase_unread(self) -> None:
        """The constants that were packed and that nothing reads any more."""
        for owner in {owner for owner, _ in self.made}:
            if not owner.results[0].users():
                owner.erase()


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
    """Pack the constant operands of transposed matmuls and recurrent kernels (see the
    module doc); returns how many operands now read a packed constant."""
    packer = _Packer(module)
    count = 0
    for op in list(module.walk()):
        if op.name == "kernel.matmul":
            count += _pack_matmul(op, packer)
        elif op.name in RECURRENT:
            count += _pack_recurrence(op, packer)
    packer.erase_unread()
    return count


def _pack_matmul(op: Operation, packer: _Packer) -> int:
    """A transposed matmul's constant operand stored transposed (transX = 0 after);
    how many operands it packed."""
    import numpy as np

    config = op.config()
    rows = _rows(op)
    if rows is not None and rows < MIN_ROWS:
        return 0

    def transposed(array):
        shape = array.shape
        return (np.ascontiguousarray(np.swapaxes(array, -1, -2)),
                BufferType(shape[:-2] + (shape[-1], shape[-2]), value.type.element_type))

    count = 0
    core = len(op.ins) - (config.get("epilogue_ins") or 0)
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
        new = packer.packed(value, "transposed", transposed,
                            f"{value.name_hint or 'weights'}_packed")
        if new is None:
            continue
        op.set_operand(index, new)  # (the ins come first among the operands)
        op.properties[flag] = A.IntegerAttr(0)
        count += 1
    return count


RECURRENT = ("kernel.lstm", "kernel.gru", "kernel.rnn")


def _pack_recurrence(op: Operation, packer: _Packer) -> int:
    """A recurrent kernel whose R is a constant reads Rᵀ per gate from a packed constant
    (dirs x G x H x H, `packed_r = 1`), and its `recurrence` workspace, which held that
    copy each run, goes (its alloc and dealloc with it); 1 when it did."""
    import numpy as np

    from palimpsest.dialects.kernel_base import segment_sizes_attr

    config = op.config()
    value = op.ins[2]
    owner = getattr(value, "op", None)
    if config["packed_r"] or not isinstance(owner, ConstantOp) \
            or not value.type.has_static_shape or any(v is value for v in op.ins[:2]):
        return 0
    roles = type(op).workspace_roles([v.type for v in op.ins], config)
    workspaces = list(op.operands[len(op.ins) + len(op.outs):])
    if "recurrence" not in roles or len(workspaces) != len(roles):
        return 0
    dirs, _, hidden = value.type.shape
    gates = type(op).gates

    def per_gate(array):
        return (np.ascontiguousarray(
                    array.reshape(dirs, gates, hidden, hidden).transpose(0, 1, 3, 2)),
                BufferType((dirs, gates, hidden, hidden), value.type.element_type))

    new = packer.packed(value, "recurrence", per_gate, f"{value.name_hint or 'R'}_packed")
    if new is None:
        return 0
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
    return 1


@register_pass
class PrepackWeights(ModulePass):
    name = "prepack-weights"
    summary = ("constants reordered at compile time into the layout their kernel reads "
               "(a transposed matmul's constant B stored transposed, transB = 0)")

    def apply(self, module: Operation) -> None:
        prepack_weights(module)


__all__ = ["PrepackWeights", "prepack_weights"]
