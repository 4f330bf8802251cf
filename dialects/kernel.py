"""The kernel dialect: one op per compute kernel the backends implement, with every byte
of its intra-op scratch memory an explicit **workspace** buffer operand.

    %cols = buffer.alloc {kind = "workspace"} : buffer<27x1024xf32>
    kernel.conv2d %x, %w, %b, %y, %cols {dilations = array<i64: 1, 1>, group = 1,
        operandSegmentSizes = array<i32: 3, 1, 1>, pads = array<i64: 0, 0, 0, 0>,
        strides = array<i64: 1, 1>} : buffer<1x3x34x34xf32>, ...
    buffer.dealloc %cols : buffer<27x1024xf32>

Every kernel op has three operand groups, `ins` (read), `outs` (written) and `workspaces`
(written and read back, only during the op), and declares those memory effects; the
planner sees a workspace as a buffer that lives only inside its op (passes/liveness.py),
so it can share bytes with activations that are dead while the op runs.

A workspace's size is a function of the op's operand shapes and properties:
`workspace_types(in_types, config)` (per op class) gives the buffer types, in operand
order; `workspace_roles` names them. The roles depend only on the properties and the
static operand types (a `?` dim makes the rule conservative), so the IR, the verifier and
a backend agree on which workspace is which; at run time `workspace_shape(role, shapes,
config)` sizes a workspace whose type has `?` dims. The rules:

| op | workspaces |
|---|---|
| `kernel.conv2d` | `padded` C x (H+pt+pb) x (W+pl+pr) when a pad is non-zero; `im2col` (C*kh*kw) x (Ho*Wo) unless the kernel is 1x1 with stride 1 and no pads (then the input is the matrix); depthwise (one input channel per group, several groups; kernels larger than 1x1): `im2col` is a band of channels, flat: per channel its kh*kw rows and its M/C result rows, Ho x (W+pl+pr) each, for as many channels as fit 512Ki elements (one at least). Per image: a batch reuses them. `epilogue`, flat, the out's elements up to 65536, when a fused epilogue step needs scratch and none of the kernel's own workspaces holds that many (kernel_elementwise.py, `Epilogue`) |
| `kernel.conv_transpose` | `cols` (M*k1*..*kn) x (D1*..*Dn): one image's Wᵀ·X before col2im scatters it into Y (kernel_spatial.py) |
| `kernel.matmul` | none (transposes are strided views; bias/alpha/beta are applied in the out buffer); `epilogue` as for conv2d |
| `kernel.pool2d` | `padded` C x Eh x Ew (E = (O-1)*stride + dilated kernel) when windows reach into padding (pads, or a ceil_mode overhang); `divisor` Ho x Wo (avg) when windows count different numbers of cells |
| `kernel.softmax` | `stats`: the input's shape with the axis dim 1 (row max, then row sums) |
| `kernel.layer_norm` | `mean`, `var`: the input's leading dims, 1 for each normalized dim |
| `kernel.reduce` | `acc` (the out's shape) when the accumulation type differs from the element type: f16 sum/mean in f32, integer mean in f64 |
| `kernel.elementwise` | `scratch` (the out's shape and type) when a step needs one (leaky_relu, hard_swish, softsign, elu, selu) |
| `kernel.resize` | `stage<i>`: the result after each resized axis but the last; `taps` (linear/cubic): one tap, flat, sized for the largest stage |
| `kernel.attention` | `scores` B x Hq x Sq x Skv, `stats` B x Hq x Sq x 1, `context` (3-D) B x Hq x Sq x Dv (kernel_attention.py) |
| `kernel.lstm`, `kernel.gru`, `kernel.rnn` | `projected` G x seq x batch x H (X·Wᵀ for every step), `recurrence` G x H x H (Rᵀ; none when prepack-weights stored R so, `packed_r`), `state` rows x batch x H (gates, hidden and cell states, scratch, broadcast biases and peepholes), `valid` seq x batch i1 with sequence_lens (kernel_recurrent.py) |
| `kernel.transpose`, `kernel.concat`, `kernel.gather`, `kernel.pad` | none |
| `kernel.split`, `kernel.slice` | none (kernel_slicing.py) |
| `kernel.generic` | none: any other graph op, by name (`op`), run with its reference kernel |

`kernel.elementwise` is one kernel for a fused chain of elementwise graph ops:
`steps = ["graph.add", "graph.relu"]` lists them, `wiring = [[0, 1], [2]]` says what
each step reads: values 0..n-1 are the op's ins, value n+i is the result of step i.
Step i > 0 reads the result of step i-1 exactly once (a linear chain; the backend
computes every step into the out buffer, so the intermediates take no memory);
`step_props` (optional) holds each step's graph properties.
"""

from __future__ import annotations

# The ops live in sibling modules, imported here so that loading the dialect (importing
# this module) registers all of them, in this order; this module re-exports their names.
from palimpsest.dialects.kernel_base import (  # noqa: F401
    KernelOp, _compatible, _float, _floats, _int, _ints, _plus, _shape, _str, _times,
    f64_array, int_array, is_float, is_numeric, segment_sizes_attr,
)
from palimpsest.dialects.kernel_nn import (  # noqa: F401
    Conv2dOp, LayerNormOp, MatmulOp, Pool2dOp, ReduceOp, SoftmaxOp, _reduced_shape,
)
from palimpsest.dialects.kernel_elementwise import (  # noqa: F401
    STEP_ARITY, STEPS, ElementwiseOp, step_shape,
)
from palimpsest.dialects.kernel_data import (  # noqa: F401
    RESIZE_COORDINATE_MODES, ConcatOp, GatherOp, GenericOp, PadOp, ResizeOp, TransposeOp,
)
from palimpsest.dialects.kernel_recurrent import (  # noqa: F401
    RECURRENT_KERNELS, GruOp, LstmOp, RnnOp,
)
from palimpsest.dialects.kernel_attention import AttentionOp  # noqa: F401
from palimpsest.dialects.kernel_spatial import ConvTransposeOp  # noqa: F401
from palimpsest.dialects.kernel_slicing import SliceOp, SplitOp  # noqa: F401

KERNEL_OPS = {cls.name: cls for cls in (
    Conv2dOp, MatmulOp, Pool2dOp, SoftmaxOp, LayerNormOp, ReduceOp, ElementwiseOp,
    TransposeOp, ConcatOp, GatherOp, PadOp, ResizeOp, LstmOp, GruOp, RnnOp, AttentionOp,
    ConvTransposeOp, SplitOp, SliceOp)}

__all__ = [
    "KERNEL_OPS", "STEPS", "AttentionOp", "ConcatOp", "Conv2dOp", "ConvTransposeOp", "ElementwiseOp", "GatherOp", "GenericOp",
    "GruOp", "KernelOp", "LayerNormOp", "LstmOp", "MatmulOp", "PadOp", "Pool2dOp",
    "RECURRENT_KERNELS", "ReduceOp", "ResizeOp", "RnnOp", "SliceOp", "SoftmaxOp", "SplitOp",
    "TransposeOp",
    "f64_array", "int_array", "is_float", "is_numeric", "segment_sizes_attr", "step_shape",
]
