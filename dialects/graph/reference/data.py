"""Reference kernels of ops_data.py: indexing, scatter, cumulative ops, sorting, counting
and the ops with data-dependent result sizes."""

from __future__ import annotations

import numpy as np

from ._common import (
    ONNX_DTYPES, float_compute_dtype, i_attr, ints_attr, ints_of, kernel, kernels, norm_axis,
    op_error, opt, req, s_attr,
)


@kernel("Trilu")
def trilu(inputs, attrs):
    x = req("Trilu", inputs, 0, "input")
    k = opt(inputs, 1)
    k = int(np.asarray(k).reshape(-1)[0]) if k is not None else 0
    fn = np.triu if i_attr(attrs, "upper", 1) else np.tril
    return [fn(x, k).astype(x.dtype, copy=False)]


_REDUCE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _reduction(onnx_op, attrs):
    name = s_attr(attrs, "reduction", "none")
    if name != "none" and name not in _REDUCE:
        raise op_error(onnx_op, f"unsupported reduction {name!r}")
    return _REDUCE.get(name)


def _scatter_elements(onnx_op, inputs, attrs):
    data = req(onnx_op, inputs, 0, "data")
    indices = req(onnx_op, inputs, 1, "indices").astype(np.int64)
    updates = req(onnx_op, inputs, 2, "updates")
    axis = norm_axis(onnx_op, i_attr(attrs, "axis", 0), data.ndim)
    if indices.shape != updates.shape:
        raise op_error(onnx_op, f"indices {indices.shape} and updates {updates.shape} differ")
    size = data.shape[axis]
    if np.any((indices < -size) | (indices >= size)):
        raise op_error(onnx_op, f"an index is out of range for axis {axis} of size {size}")
    indices = np.where(indices < 0, indices + size, indices)
    out = data.copy()
    grid = list(np.indices(indices.shape, sparse=True))
    grid[axis] = indices
    reduce = _reduction(onnx_op, attrs)
    if reduce is None:
        out[tuple(grid)] = updates
    else:
        reduce.at(out, tuple(grid), updates)   # duplicates accumulate, in order
    return [out]


@kernel("ScatterElements")
def scatter_elements(inputs, attrs):
    return _scatter_elements("ScatterElements", inputs, attrs)


@kernel("Scatter")
def scatter(inputs, attrs):
    return _scatter_elements("Scatter", inputs, {"axis": attrs.get("axis", 0)})


@kernel("ScatterND")
def scatter_nd(inputs, attrs):
    data = req("ScatterND", inputs, 0, "data")
    indices = req("ScatterND", inputs, 1, "indices").astype(np.int64)
    updates = req("ScatterND", inputs, 2, "updates")
    depth = indices.shape[-1]
    out = data.copy()
    flat = indices.reshape(-1, depth)
    rows = updates.reshape((flat.shape[0],) + data.shape[depth:])
    reduce = _reduction("ScatterND", attrs)
    for index, row in zip(flat, rows):
        at = tuple(int(i) for i in index)
        out[at] = row if reduce is None else reduce(out[at], row)
    return [out]


@kernel("GatherND")
def gather_nd(inputs, attrs):
    data = req("GatherND", inputs, 0, "data")
    indices = req("GatherND", inputs, 1, "indices").astype(np.int64)
    batch = i_attr(attrs, "batch_dims", 0)
    batch_shape = data.shape[:batch]
    depth = indices.shape[-1]
    count = int(np.prod(batch_shape, dtype=np.int64))
    data_b = data.reshape((count,) + data.shape[batch:])
    index_b = indices.reshape((count, -1, depth))
    limits = np.array(data.shape[batch:batch + depth])
    index_b = np.where(index_b < 0, index_b + limits, index_b)
    parts = [d[tuple(ix.T)] for d, ix in zip(data_b, index_b)]
    out = np.stack(parts) if parts else np.empty((0,), data.dtype)
    return [out.reshape(indices.shape[:-1] + data.shape[batch + depth:])]


def _cumulative(onnx_op, ufunc, identity):
    def fn(inputs, attrs):
        x = req(onnx_op, inputs, 0, "x")
        axis = norm_axis(onnx_op, int(np.asarray(req(onnx_op, inputs, 1, "axis")).reshape(-1)[0]),
                         x.ndim)
        y = np.flip(x, axis) if i_attr(attrs, "reverse", 0) else x
        out = ufunc.accumulate(y, axis=axis, dtype=x.dtype)
        if i_attr(attrs, "exclusive", 0):
            shifted = np.full_like(out, identity)
            source = [slice(None)] * x.ndim
            target = [slice(None)] * x.ndim
            source[axis], target[axis] = slice(0, -1), slice(1, None)
            shifted[tuple(target)] = out[tuple(source)]
            out = shifted
        if i_attr(attrs, "reverse", 0):
            out = np.flip(out, axis)
        return [np.ascontiguousarray(out)]

    return fn


kernels(_cumulative, {"CumSum": (np.add, 0), "CumProd": (np.multiply, 1)})


@kernel("TopK")
def top_k(inputs, attrs):
    """The k largest (smallest) along `axis`; equal values keep their index order."""
    x = req("TopK", inputs, 0, "X")
    k = opt(inputs, 1)
    k = int(np.asarray(k).reshape(-1)[0]) if k is not None else i_attr(attrs, "k", 1)
    axis = norm_axis("TopK", i_attr(attrs, "axis", -1), x.ndim)
    if not 0 <= k <= x.shape[axis]:
        raise op_error("TopK", f"k = {k} is out of range for axis {axis} of size "
                               f"{x.shape[axis]}")
    keys = x
    if i_attr(attrs, "largest", 1):
        keys = -x.astype(np.float64) if x.dtype.kind in "ub" else -x
    order = np.argsort(keys, axis=axis, kind="stable")
    order = np.take(order, np.arange(k), axis=axis)
    return [np.take_along_axis(x, order, axis), order.astype(np.int64)]


@kernel("Unique", multi=True)
def unique(inputs, attrs, num_results=None):
    x = req("Unique", inputs, 0, "X")
    axis = attrs.get("axis")
    if axis is not None:
        axis = norm_axis("Unique", int(axis), x.ndim)
    values, first, inverse, counts = np.unique(
        x if axis is not None else x.reshape(-1), return_index=True, return_inverse=True,
        return_counts=True, axis=axis if axis is not None else 0)
    inverse = inverse.reshape(-1)
    if not i_attr(attrs, "sorted", 1):   # in order of first occurrence
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        values = np.take(values, order, axis=axis if axis is not None else 0)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    results = [values.astype(x.dtype, copy=False), first.astype(np.int64),
               inverse.astype(np.int64), counts.astype(np.int64)]
    return results[:num_results or 1]


@kernel("NonZero")
def non_zero(inputs, attrs):
    x = req("NonZero", inputs, 0, "X")
    if x.ndim == 0:
        return [np.zeros((0, int(bool(x))), np.int64)]
    return [np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)]


@kernel("Compress")
def compress(inputs, attrs):
    x = req("Compress", inputs, 0, "input")
    condition = req("Compress", inputs, 1, "condition").astype(bool).reshape(-1)
    axis = attrs.get("axis")
    if axis is None:
        return [np.compress(condition, x.reshape(-1))]
    return [np.compress(condition, x, axis=norm_axis("Compress", int(axis), x.ndim))]


@kernel("OneHot")
def one_hot(inputs, attrs):
    indices = req("OneHot", inputs, 0, "indices")
    depth = int(np.asarray(req("OneHot", inputs, 1, "depth")).reshape(-1)[0])
    values = req("OneHot", inputs, 2, "values").reshape(-1)
    axis = norm_axis("OneHot", i_attr(attrs, "axis", -1), indices.ndim + 1)
    index = indices.astype(np.int64)
    index = np.where(index < 0, index + depth, index)
    hot = np.expand_dims(index, axis) == np.arange(depth).reshape(
        (1,) * axis + (depth,) + (1,) * (indices.ndim - axis))
    return [np.where(hot, values[1], values[0]).astype(values.dtype)]


@kernel("EyeLike")
def eye_like(inputs, attrs):
    x = req("EyeLike", inputs, 0, "input")
    dtype = ONNX_DTYPES[int(attrs["dtype"])] if attrs.get("dtype") is not None else x.dtype
    return [np.eye(x.shape[0], x.shape[1], k=i_attr(attrs, "k", 0), dtype=dtype)]


@kernel("ReverseSequence")
def reverse_sequence(inputs, attrs):
    x = req("ReverseSequence", inputs, 0, "input")
    lengths = ints_of(req("ReverseSequence", inputs, 1, "sequence_lens"))
    batch_axis, time_axis = i_attr(attrs, "batch_axis", 1), i_attr(attrs, "time_axis", 0)
    out = x.copy()
    for b, length in enumerate(lengths):
        at = [slice(None)] * x.ndim
        at[batch_axis] = b
        at[time_axis] = slice(0, length)
        source = x[tuple(at)]
        out[tuple(at)] = np.flip(source, axis=time_axis if time_axis < batch_axis
                                 else time_axis - 1)
    return [out]


@kernel("Einsum")
def einsum(inputs, attrs):
    operands = [np.asarray(x) for x in inputs]
    dtype = operands[0].dtype
    compute = float_compute_dtype(dtype) if dtype.isbuiltin != 1 else dtype  # bf16: in f32
    out = np.einsum(s_attr(attrs, "equation", "").replace(" ", ""),
                    *[x.astype(compute, copy=False) for x in operands])
    return [np.asarray(out).astype(dtype)]


@kernel("Det")
def det(inputs, attrs):
    x = req("Det", inputs, 0, "X")
    return [np.asarray(np.linalg.det(x), dtype=x.dtype)]


def _corners(boxes, center_point_box):
    """(y1, x1, y2, x2) with y1 <= y2 and x1 <= x2."""
    if center_point_box:
        xc, yc, w, h = boxes.T
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=1)
    y1, x1, y2, x2 = boxes.T
    return np.stack([np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2),
                     np.maximum(x1, x2)], axis=1)


def _iou(box, others):
    y1 = np.maximum(box[0], others[:, 0])
    x1 = np.maximum(box[1], others[:, 1])
    y2 = np.minimum(box[2], others[:, 2])
    x2 = np.minimum(box[3], others[:, 3])
    inter = np.clip(y2 - y1, 0, None) * np.clip(x2 - x1, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    union = area + areas - inter
    with np.errstate(all="ignore"):
        return np.where((inter > 0) & (area > 0) & (areas > 0) & (union > 0),
                        inter / union, 0.0)


@kernel("NonMaxSuppression")
def non_max_suppression(inputs, attrs):
    """Per batch and class: boxes scoring above score_threshold, best first (equal scores:
    lower index first), each dropping the later ones overlapping it by IoU >
    iou_threshold, up to max_output_boxes_per_class."""
    boxes = req("NonMaxSuppression", inputs, 0, "boxes").astype(np.float64)
    scores = req("NonMaxSuppression", inputs, 1, "scores").astype(np.float64)

    def scalar(i, default):
        value = opt(inputs, i)
        return default if value is None or np.size(value) == 0 else np.asarray(
            value).reshape(-1)[0]

    limit = max(int(scalar(2, 0)), 0)
    iou_threshold = float(scalar(3, 0.0))
    score_threshold = scalar(4, None)
    center = i_attr(attrs, "center_point_box", 0)
    selected = []
    for b in range(scores.shape[0]):
        corners = _corners(boxes[b], center)
        for c in range(scores.shape[1]):
            s = scores[b, c]
            candidates = np.arange(s.size)
            if score_threshold is not None:
                candidates = candidates[s > float(score_threshold)]
            order = candidates[np.lexsort((candidates, -s[candidates]))]
            kept: list = []
            while order.size and len(kept) < limit:
                best = order[0]
                kept.append(best)
                rest = order[1:]
                order = rest[_iou(corners[best], corners[rest]) <= iou_threshold]
            selected += [(b, c, int(i)) for i in kept]
    return [np.array(selected, dtype=np.int64).reshape(-1, 3)]


@kernel("TfIdfVectorizer")
def tfidf_vectorizer(inputs, attrs):
    """Counts of the pool's n-grams (min..max_gram_length, items up to max_skip_count
    apart) in each row, weighted by mode (TF counts, IDF weights where present, TFIDF
    counts times weights)."""
    x = req("TfIdfVectorizer", inputs, 0, "X")
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    counts = ints_attr(attrs, "ngram_counts")
    indexes = ints_attr(attrs, "ngram_indexes")
    pool = ints_attr(attrs, "pool_int64s", [])
    weights = attrs.get("weights")
    weights = list(weights) if weights is not None else None
    min_n, max_n = i_attr(attrs, "min_gram_length", 1), i_attr(attrs, "max_gram_length", 1)
    max_skip = i_attr(attrs, "max_skip_count", 0)
    mode = s_attr(attrs, "mode", "TF")
    bounds = counts + [len(pool)]
    # the output column of the i-th n-gram of the pool is ngram_indexes[i]
    order = []
    for n in range(1, len(counts) + 1):
        start, stop = bounds[n - 1], bounds[n]
        order += [tuple(pool[at:at + n]) for at in range(start, stop, n)]
    column = {gram: indexes[i] for i, gram in enumerate(order)}
    weight = {gram: (weights[i] if weights else 1.0) for i, gram in enumerate(order)}
    width = max(indexes) + 1
    out = np.zeros((rows.shape[0], width), np.float32)
    for r, row in enumerate(rows):
        row = [int(v) for v in row]
        for n in range(min_n, max_n + 1):
            for skip in range(0, max_skip + 1 if n > 1 else 1):
                step = skip + 1
                for start in range(len(row) - (n - 1) * step):
                    gram = tuple(row[start + i * step] for i in range(n))
                    if gram in column:
                        out[r, column[gram]] += 1
    if mode in ("IDF", "TFIDF"):
        for gram, col in column.items():
            present = out[:, col] > 0
            if mode == "IDF":
                out[:, col] = np.where(present, weight[gram], 0)
            else:
                out[:, col] *= weight[gram]
    return [out.reshape(-1) if x.ndim == 1 else out]

