"""Numpy reference semantics of the graph dialect (see ../CONVENTIONS.md).

`KERNELS[graph_op_name](inputs, attrs, num_results=None) -> list[np.ndarray]`:

- `inputs`: numpy arrays in ONNX operand order; None (or a shorter list) for an absent
  optional operand.
- `attrs`: ONNX attribute names -> Python values (int, float, str, list[int], list[float],
  numpy array for tensor attributes). An absent attribute takes its ONNX default.
- `num_results` (optional; callers that only know the two-argument contract may omit it): how
  many results the op instance has. It matters only for ops with optional or variadic results:
  Dropout (mask), LayerNormalization (Mean, InvStdDev), MaxPool (Indices),
  BatchNormalization (training_mode running stats), and Split without `split`/`num_outputs`
  (opset < 18: equal parts, one per result). Omitted, those kernels return the required
  results only (Split: one per part).

Semantics follow the latest ONNX opset of each op (Softmax: along one axis, opset 13; Resize:
X, roi, scales, sizes); inputs that older opsets had as attributes (Reduce* axes, Split's split,
Slice's starts/ends/axes, Pad's pads/value, Squeeze/Unsqueeze axes, Clip's min/max) are also
accepted from `attrs`. Semantics that changed between opsets are NOT guessed: Softmax and
LogSoftmax below opset 13 (coerce to 2-D at `axis`, default 1) and Resize-10 (operands X,
scales; no roi) must be rewritten by an importer. Results keep ONNX's element types (int64
shapes, indices and sizes, bool comparisons and logical ops).
Unsupported attribute values raise ValueError naming the op and the attribute.

Pure numpy; importing this module imports numpy (palimpsest-opt must not import it at startup).
"""

from __future__ import annotations

# importing the modules registers their kernels
from . import (  # noqa: F401
    attention, control, data, elementwise, loss, math, nn, normalization, quant, recurrent, reduce, resize,
    signal, spatial, tensor,
)
from ._common import KERNELS, ONNX_DTYPES

__all__ = ["KERNELS", "ONNX_DTYPES", "evaluate"]


def evaluate(graph_op: str, inputs, attrs=None, num_results=None):
    """Run one graph-dialect op: `KERNELS[graph_op](inputs, attrs or {}, num_results)`."""
    try:
        fn = KERNELS[graph_op]
    except KeyError:
        raise ValueError(f"no reference kernel for '{graph_op}'") from None
    return fn(list(inputs), dict(attrs or {}), num_results)
