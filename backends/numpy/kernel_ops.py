"""Kernel-level ops on numpy: `KERNEL_IMPLS[op.name](op, inputs, outputs, workspaces)`.

Each implementation writes its results into the given output views (`out=`) and uses
only the given workspace views for scratch, so the memory a kernel touches is the memory
the IR (and the memory plan) gives it. `execute_kernel` is the executor's hook: it binds
the op's buffers, sizes outs and workspaces that have `?` dims from the actual operand
shapes (the kernel dialect's rules), and calls the implementation; `kernel.generic` runs
as `buffer.compute` does (executor.py).

| op | how |
|---|---|
| conv2d | per image: the padded workspace gets zero borders and the image copied in; the im2col workspace is filled with one `np.copyto` from an `as_strided` (C, kh, kw, Ho, Wo) view; one grouped `np.matmul(W, cols, out=Y[n])`; depthwise: per kernel offset, window * weight into the product workspace, added to Y; bias with `np.add(..., out=)` |
| matmul | `np.matmul(op(A), op(B), out=Y)` (transposes are strided views); alpha, beta*C in Y: `Y *= alpha/beta; Y += C; Y *= beta` |
| pool2d | per image: borders of the padded workspace filled (-inf / the integer minimum / 0), image copied in; one `np.maximum` / `np.add` with `out=` per kernel offset over strided window views; avg divides by kh*kw or by the divisor workspace |
| softmax | max into the stats workspace, subtract and exp into Y, sum into stats, divide |
| layer_norm | mean into the mean workspace, Y = X - mean, `np.einsum` sum of squares into var, Y *= 1/sqrt(var + eps), *= scale, += B |
| reduce | `np.mean` / `np.sum` / `np.max` with `out=` (the acc workspace when accumulating in another type) |
| elementwise | every step computed into Y (steps after the first read Y) with ufuncs and `out=`; leaky_relu, hard_swish, softsign, elu and selu use the scratch workspace; relu and two-bound clip are one `np.clip` (SIMD, 2-8x faster than maximum/minimum); f32/f16 erf is a rational approximation evaluated in float64 chunks |
| transpose, concat, gather | `np.copyto` of a transposed view, `np.concatenate(out=)`, `np.take(out=, mode="wrap")` |
| pad | interior copied, then borders: constant fills, or edge/reflect/wrap slab copies within Y |
| resize | per axis, `np.take(out=)` into the next stage (a workspace, or Y for the last), linear/cubic taps weighted in place and summed through the taps workspace |

Temporaries numpy still makes (documented, all small or rare):

- O(size of one axis) index and weight vectors: pooling divisors (Ho + Wo values before
  the divisor workspace is filled), resize coordinates and tap weights, the per-channel
  `sqrt(var + eps)` of a batch_norm step, i32 gather indices converted to intp.
- `np.reshape` of an operand that is not contiguous (only strided views a user writes;
  lowered IR passes contiguous buffers): conv weights and inputs, layer_norm input.
- `np.matmul` copies operands it cannot hand to BLAS as they are (e.g. a transposed
  operand in some layouts) and outs that overlap an operand.
- erf steps: four float64 vectors of 16384 elements (512 KiB) per step; a non-contiguous
  or non-float erf without scipy: the reference kernel's result, copied into Y.
- an elementwise in that overlaps Y but is not Y itself (never in lowered IR) is copied
  first.
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from palimpsest.dialects import kernel as K

KERNEL_IMPLS: dict = {}

_CONFIGS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def impl(name: str):
    def register(fn):
        KERNEL_IMPLS[name] = fn
        return fn
    return register


class _Info:
    """An op's properties as Python values and its workspace roles, computed once (and
    again if a pass changes the op's properties or operand types)."""

    __slots__ = ("config", "roles", "key")

    def __init__(self, op, key):
        self.key = key
        self.config = op.config()
        self.roles = type(op).workspace_roles([v.type for v in op.ins], self.config)


def _info(op) -> _Info:
    key = (tuple(op.properties.items()), tuple(v.type for v in op.ins))
    info = _CONFIGS.get(op)
    if info is None or info.key != key:
        info = _CONFIGS[op] = _Info(op, key)
    return info


def config_of(op) -> dict:
    return _info(op).config


def workspaces_by_role(op, workspaces: list) -> dict:
    return dict(zip(_info(op).roles, workspaces))


# -- the executor's hook ---------------------------------------------------------------------

def execute_kernel(executor, op, values: dict) -> None:
    """Run kernel op `op` with the executor's buffers (`values`)."""
    if op.name == "kernel.generic":
        executor._compute(op, values)  # the same operands and properties as buffer.compute
        return
    fn = KERNEL_IMPLS.get(op.name)
    if fn is None:
        raise op.error(f"the numpy backend has no implementation of '{op.name}'")
    cls = type(op)
    info = _info(op)
    inputs = [executor._materialized(op, values, v) for v in op.ins]
    shapes = [a.shape for a in inputs]
    outputs = [values[v] for v in op.outs]
    workspaces = [values[v] for v in op.workspaces]
    try:
        if not all(isinstance(a, np.ndarray) for a in outputs):
            sizes = cls.result_shapes(shapes, info.config)
            outputs = [a if isinstance(a, np.ndarray) else
                       executor._materialize(a, _concrete(op, shape), values)
                       for a, shape in zip(outputs, sizes)]
        if not all(isinstance(a, np.ndarray) for a in workspaces):
            workspaces = [a if isinstance(a, np.ndarray) else executor._materialize(
                a, _concrete(op, cls.workspace_shape(role, shapes, info.config)), values)
                for a, role in zip(workspaces, info.roles)]
        with np.errstate(all="ignore"):
            fn(op, inputs, outputs, workspaces)
    except (ValueError, TypeError, IndexError, KeyError, AttributeError) as error:
        raise op.error(f"failed at run time: {error}") from None


def _concrete(op, shape) -> tuple:
    if shape is None or None in shape:
        raise ValueError(f"cannot size a buffer of '{op.name}' from the operand shapes")
    return tuple(shape)


def _view_as(array: np.ndarray, shape) -> np.ndarray:
    """`array` seen with `shape`, never a copy (ValueError when that needs one)."""
    view = array.view()
    try:
        view.shape = tuple(shape)
    except AttributeError:
        raise ValueError(f"cannot view a {array.shape} buffer with strides {array.strides} "
                         f"as {tuple(shape)} without a copy") from None
    return view


def _scalar(value, dtype) -> np.ndarray:
    return np.asarray(value, dtype=dtype)


def _window(src, p, q, dh, dw, sh, sw, ho, wo):
    """The (C, ho, wo) strided view of `src` (C, H, W) read by kernel offset (p, q)."""
    return src[:, p * dh:p * dh + (ho - 1) * sh + 1:sh, q * dw:q * dw + (wo - 1) * sw + 1:sw]


def _im2col_view(src, kh, kw, dh, dw, sh, sw, ho, wo):
    """The read-only (C, kh, kw, ho, wo) view of `src` (C, H, W): [c, p, q] is the window
    of kernel offset (p, q) (what `_window` gives), without a copy."""
    from numpy.lib.stride_tricks import as_strided

    c = src.shape[0]
    s0, s1, s2 = src.strides
    return as_strided(src, (c, kh, kw, ho, wo), (s0, s1 * dh, s2 * dw, s1 * sh, s2 * sw),
                      writeable=False)


def _fill_border(canvas, top, left, height, width, value) -> None:
    """Fill everything of `canvas` (C, Eh, Ew) outside [top, top+height) x [left,
    left+width) with `value`."""
    canvas[:, :top] = value
    canvas[:, top + height:] = value
    canvas[:, top:top + height, :left] = value
    canvas[:, top:top + height, left + width:] = value


# -- conv2d -----------------------------------------------------------------------------------

@impl("kernel.conv2d")
def conv2d(op, inputs, outputs, workspaces):
    config = config_of(op)
    ws = workspaces_by_role(op, workspaces)
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    y = outputs[0]
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    group = config["group"]
    sh, sw = config["strides"]
    dh, dw = config["dilations"]
    top, left = config["pads"][0], config["pads"][1]
    ho, wo = y.shape[2], y.shape[3]
    mg = m // group
    weights = w.reshape(group, mg, cg * kh * kw)
    padded, cols = ws.get("padded"), ws.get("im2col")
    if padded is not None:
        _fill_border(padded, top, left, h, wd, 0)
    if K.Conv2dOp.is_depthwise(w.shape, config):
        _depthwise(x, w, y, padded, ws.get("product"), top, left, (sh, sw), (dh, dw))
        if bias is not None:
            np.add(y, bias.reshape(1, m, 1, 1), out=y)
        return
    if cols is not None:
        cols5 = _view_as(cols, (c, kh, kw, ho, wo))
        matrix = _view_as(cols, (group, cg * kh * kw, ho * wo))
    for image in range(n):
        src = x[image]
        if padded is not None:
            np.copyto(padded[:, top:top + h, left:left + wd], src)
            src = padded
        if cols is not None:  # all kernel offsets in one strided copy
            np.copyto(cols5, _im2col_view(src, kh, kw, dh, dw, sh, sw, ho, wo))
            mat = matrix
        else:  # 1x1, stride 1, no pads: the image is the matrix
            mat = src.reshape(group, cg, h * wd)
        np.matmul(weights, mat, out=_view_as(y[image], (group, mg, ho * wo)))
    if bias is not None:
        np.add(y, bias.reshape(1, m, 1, 1), out=y)


def _depthwise(x, w, y, padded, product, top, left, strides, dilations):
    """One input channel per group: y[n, c*mg + j] = sum over kernel offsets of
    w[c*mg + j, 0, p, q] * window(p, q)[c], accumulated in Y through `product`."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    mg = m // c
    ho, wo = y.shape[2], y.shape[3]
    (sh, sw), (dh, dw) = strides, dilations
    weights = w.reshape(c, mg, kh, kw)
    if product is not None:
        product4 = _view_as(product, (c, mg, ho, wo))
    for image in range(n):
        src = x[image]
        if padded is not None:
            np.copyto(padded[:, top:top + h, left:left + wd], src)
            src = padded
        target = _view_as(y[image], (c, mg, ho, wo))
        for p in range(kh):
            for q in range(kw):
                window = _window(src, p, q, dh, dw, sh, sw, ho, wo)[:, None]
                scale = weights[:, :, p, q][:, :, None, None]
                if p == 0 and q == 0:
                    np.multiply(window, scale, out=target)
                else:
                    np.multiply(window, scale, out=product4)
                    np.add(target, product4, out=target)


# -- matmul -------------------------------------------------------------------------------------

@impl("kernel.matmul")
def matmul(op, inputs, outputs, workspaces):
    config = config_of(op)
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    y = outputs[0]
    if config["transA"]:
        a = np.swapaxes(a, -1, -2)
    if config["transB"]:
        b = np.swapaxes(b, -1, -2)
    np.matmul(a, b, out=y)
    alpha, beta = config["alpha"], config["beta"]
    if c is None or beta == 0.0:
        if alpha != 1.0:
            np.multiply(y, _scalar(alpha, y.dtype), out=y)
        return
    if beta == 1.0:
        if alpha != 1.0:
            np.multiply(y, _scalar(alpha, y.dtype), out=y)
        np.add(y, c, out=y)
        return
    # alpha*AB + beta*C = beta * (alpha/beta * AB + C): no C-sized temporary
    np.multiply(y, _scalar(alpha / beta, y.dtype), out=y)
    np.add(y, c, out=y)
    np.multiply(y, _scalar(beta, y.dtype), out=y)


# -- pool2d -------------------------------------------------------------------------------------

def _window_counts(size, k, s, d, begin, end, out, include_pad) -> list:
    """How many cells of each window along one axis count toward an average."""
    lo, hi = (-begin, size + end) if include_pad else (0, size)
    counts = []
    for j in range(out):
        start = j * s - begin
        counts.append(sum(1 for t in range(k) if lo <= start + t * d < hi))
    return counts


@impl("kernel.pool2d")
def pool2d(op, inputs, outputs, workspaces):
    config = config_of(op)
    ws = workspaces_by_role(op, workspaces)
    x, y = inputs[0], outputs[0]
    n, c, h, wd = x.shape
    kh, kw = config["kernel_shape"]
    sh, sw = config["strides"]
    dh, dw = config["dilations"]
    top, left = config["pads"][0], config["pads"][1]
    ho, wo = y.shape[2], y.shape[3]
    is_max = config["mode"] == "max"
    padded = ws.get("padded")
    if padded is not None:
        if not is_max:
            fill = 0
        elif x.dtype.kind == "f":
            fill = -np.inf
        else:
            fill = np.iinfo(x.dtype).min
        eh, ew = padded.shape[1], padded.shape[2]
        rows, cols = max(0, min(h, eh - top)), max(0, min(wd, ew - left))
        _fill_border(padded, top, left, rows, cols, fill)
    for image in range(n):
        src = x[image]
        if padded is not None:
            np.copyto(padded[:, top:top + rows, left:left + cols], src[:, :rows, :cols])
            src = padded
        target = y[image]
        for index, (p, q) in enumerate((p, q) for p in range(kh) for q in range(kw)):
            window = _window(src, p, q, dh, dw, sh, sw, ho, wo)
            if index == 0:
                np.copyto(target, window)
            elif is_max:
                np.maximum(target, window, out=target)
            else:
                np.add(target, window, out=target)
    if is_max:
        return
    divisor = ws.get("divisor")
    if divisor is None:
        np.divide(y, _scalar(kh * kw, y.dtype), out=y)
        return
    include = config["count_include_pad"]
    pads = config["pads"]
    rows_count = _window_counts(h, kh, sh, dh, pads[0], pads[2], ho, include)
    cols_count = _window_counts(wd, kw, sw, dw, pads[1], pads[3], wo, include)
    np.multiply.outer(np.asarray(rows_count, y.dtype), np.asarray(cols_count, y.dtype),
                      out=divisor)
    np.divide(y, divisor, out=y)


# -- normalization ------------------------------------------------------------------------------

@impl("kernel.softmax")
def softmax(op, inputs, outputs, workspaces):
    axis = config_of(op)["axis"]
    x, y = inputs[0], outputs[0]
    stats = workspaces[0]
    np.max(x, axis=axis, keepdims=True, out=stats)
    np.subtract(x, stats, out=y)
    np.exp(y, out=y)
    np.sum(y, axis=axis, keepdims=True, out=stats)
    np.divide(y, stats, out=y)


@impl("kernel.layer_norm")
def layer_norm(op, inputs, outputs, workspaces):
    config = config_of(op)
    ws = workspaces_by_role(op, workspaces)
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    y = outputs[0]
    axis = config["axis"]
    rows = math.prod(x.shape[:axis])
    width = math.prod(x.shape[axis:])
    x2 = x.reshape(rows, width)
    y2 = _view_as(y, (rows, width))
    mean = _view_as(ws["mean"], (rows,))
    var = _view_as(ws["var"], (rows,))
    np.mean(x2, axis=1, out=mean)
    np.subtract(x2, mean[:, None], out=y2)
    np.einsum("ij,ij->i", y2, y2, out=var)
    np.divide(var, _scalar(width, y.dtype), out=var)
    np.add(var, _scalar(config["epsilon"], y.dtype), out=var)
    np.sqrt(var, out=var)
    np.reciprocal(var, out=var)
    np.multiply(y2, var[:, None], out=y2)
    np.multiply(y, scale, out=y)
    if bias is not None:
        np.add(y, bias, out=y)


# -- reduce ---------------------------------------------------------------------------------------

@impl("kernel.reduce")
def reduce(op, inputs, outputs, workspaces):
    config = config_of(op)
    x, y = inputs[0], outputs[0]
    axes = tuple(config["axes"])
    keep = bool(config["keepdims"])
    acc = workspaces[0] if workspaces else None
    target = acc if acc is not None else y
    mode = config["mode"]
    if mode == "mean":
        np.mean(x, axis=axes, keepdims=keep, dtype=target.dtype, out=target)
        if acc is not None and y.dtype.kind in "iu":
            np.trunc(acc, out=acc)
    elif mode == "sum":
        np.sum(x, axis=axes, keepdims=keep, dtype=target.dtype, out=target)
    else:
        if x.dtype.kind == "f":
            initial = -np.inf
        else:
            initial = np.iinfo(x.dtype).min
        np.max(x, axis=axes, keepdims=keep, out=target, initial=initial)
    if acc is not None:
        np.copyto(y, acc, casting="unsafe")


# -- fused elementwise chains ---------------------------------------------------------------------
# A step writes `out` from `args` (numpy arrays; the chain value is `out` itself); it must
# be right when an arg is `out` (the same view): every ufunc reads element i before
# writing it, and multi-ufunc steps read their operand before overwriting `out`.

STEP_IMPLS: dict = {}


def step(*names):
    def register(fn):
        for name in names:
            STEP_IMPLS[name] = fn
        return fn
    return register


_UNARY = {"graph.neg": np.negative, "graph.abs": np.abs, "graph.exp": np.exp,
          "graph.log": np.log, "graph.sqrt": np.sqrt, "graph.tanh": np.tanh,
          "graph.sign": np.sign, "graph.floor": np.floor, "graph.ceil": np.ceil,
          "graph.round": np.round, "graph.sin": np.sin, "graph.cos": np.cos,
          "graph.reciprocal": np.reciprocal}


@step(*_UNARY)
def _unary(name, args, out, props, scratch):
    _UNARY[name](args[0], out=out)


@step("graph.relu")
def _relu(name, args, out, props, scratch):
    if out.dtype.kind == "f":  # np.clip is 2x faster than np.maximum (NaN propagates alike)
        np.clip(args[0], _scalar(0, out.dtype), _scalar(np.inf, out.dtype), out=out)
    else:
        np.maximum(args[0], _scalar(0, out.dtype), out=out)


@step("graph.sigmoid")
def _sigmoid(name, args, out, props, scratch):
    np.negative(args[0], out=out)
    np.exp(out, out=out)
    np.add(out, _scalar(1, out.dtype), out=out)
    np.reciprocal(out, out=out)


@step("graph.erf")
def _erf(name, args, out, props, scratch):
    x = args[0]
    if (out.dtype in (np.float32, np.float16) and x.dtype == out.dtype and x.shape == out.shape
            and x.flags.c_contiguous and out.flags.c_contiguous):
        _erf_rational(x.reshape(-1), out.reshape(-1))
        return
    try:
        from scipy.special import erf
    except ImportError:  # the reference kernel (a temporary), copied in
        from palimpsest.dialects.graph.reference import KERNELS

        np.copyto(out, KERNELS["graph.erf"]([args[0]], {})[0])
        return
    erf(args[0], out=out)


# erf(x) = x * P(x^2) / Q(x^2) on x clamped to [-4, 4] (Eigen's float erf), evaluated in
# float64 in chunks of 16384 elements: max abs error 9.5e-8 after rounding to f32, 2-4x
# faster than scipy's erf on f32. Temporaries: four chunk-sized float64 vectors (512 KiB).
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
          -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
          -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
          -7.37332916720468e-03, -1.42647390514189e-02)
_ERF_CHUNK = 16384


def _erf_rational(x: np.ndarray, out: np.ndarray) -> None:
    """erf of flat `x` into flat `out` (may be the same memory)."""
    size = x.shape[0]
    chunk = min(size, _ERF_CHUNK)
    v = np.empty(chunk, np.float64)
    x2 = np.empty(chunk, np.float64)
    p = np.empty(chunk, np.float64)
    q = np.empty(chunk, np.float64)
    p0, q0 = _ERF_P[0], _ERF_Q[0]
    for start in range(0, size, chunk):
        stop = min(start + chunk, size)
        n = stop - start
        if n != v.shape[0]:
            v, x2, p, q = v[:n], x2[:n], p[:n], q[:n]
        np.clip(x[start:stop], -4.0, 4.0, out=v)
        np.multiply(v, v, out=x2)
        np.multiply(x2, p0, out=p)
        np.add(p, _ERF_P[1], out=p)
        for c in _ERF_P[2:]:
            np.multiply(p, x2, out=p)
            np.add(p, c, out=p)
        np.multiply(x2, q0, out=q)
        np.add(q, _ERF_Q[1], out=q)
        for c in _ERF_Q[2:]:
            np.multiply(q, x2, out=q)
            np.add(q, c, out=q)
        np.divide(p, q, out=p)
        np.multiply(p, v, out=p)
        np.copyto(out[start:stop], p, casting="same_kind")


@step("graph.softplus")
def _softplus(name, args, out, props, scratch):
    np.logaddexp(_scalar(0, out.dtype), args[0], out=out)


@step("graph.softsign")
def _softsign(name, args, out, props, scratch):
    x = args[0]
    np.abs(x, out=scratch)
    np.add(scratch, _scalar(1, out.dtype), out=scratch)
    np.divide(x, scratch, out=out)


@step("graph.elu", "graph.selu")
def _elu(name, args, out, props, scratch):
    # elu: where(x < 0, alpha * expm1(x), x) == max(x, 0) + alpha * expm1(min(x, 0));
    # selu: gamma times that (its alpha and gamma defaults are SELU's constants)
    x = args[0]
    zero = _scalar(0, out.dtype)
    selu = name == "graph.selu"
    alpha = props.get("alpha", 1.67326319217681884765625 if selu else 1.0)
    np.minimum(x, zero, out=scratch)
    np.expm1(scratch, out=scratch)
    np.multiply(scratch, _scalar(alpha, out.dtype), out=scratch)
    np.maximum(x, zero, out=out)
    np.add(out, scratch, out=out)
    if selu:
        np.multiply(out, _scalar(props.get("gamma", 1.05070102214813232421875), out.dtype),
                    out=out)


@step("graph.hard_sigmoid")
def _hard_sigmoid(name, args, out, props, scratch):
    np.multiply(args[0], _scalar(props.get("alpha", 0.2), out.dtype), out=out)
    np.add(out, _scalar(props.get("beta", 0.5), out.dtype), out=out)
    np.clip(out, _scalar(0, out.dtype), _scalar(1, out.dtype), out=out)


@step("graph.hard_swish")
def _hard_swish(name, args, out, props, scratch):
    x = args[0]
    np.multiply(x, _scalar(1 / 6, out.dtype), out=scratch)
    np.add(scratch, _scalar(0.5, out.dtype), out=scratch)
    np.clip(scratch, _scalar(0, out.dtype), _scalar(1, out.dtype), out=scratch)
    np.multiply(x, scratch, out=out)


@step("graph.leaky_relu")
def _leaky_relu(name, args, out, props, scratch):
    # where(x < 0, alpha * x, x) == max(x, 0) + alpha * min(x, 0)
    x = args[0]
    zero = _scalar(0, out.dtype)
    np.minimum(x, zero, out=scratch)
    np.multiply(scratch, _scalar(props.get("alpha", 0.01), out.dtype), out=scratch)
    np.maximum(x, zero, out=out)
    np.add(out, scratch, out=out)


_BINARY = {"graph.add": np.add, "graph.sub": np.subtract, "graph.mul": np.multiply,
           "graph.div": np.true_divide, "graph.pow": np.power}


@step(*_BINARY)
def _binary(name, args, out, props, scratch):
    _BINARY[name](args[0], args[1], out=out)


_VARIADIC = {"graph.max": np.maximum, "graph.min": np.minimum}


@step(*_VARIADIC)
def _variadic(name, args, out, props, scratch):
    ufunc = _VARIADIC[name]
    # the chain value (out) first: the others never overwrite it before it is read
    ordered = [a for a in args if a is out] + [a for a in args if a is not out]
    if len(ordered) == 1:
        if ordered[0] is not out:
            np.copyto(out, ordered[0])
        return
    ufunc(ordered[0], ordered[1], out=out)
    for a in ordered[2:]:
        ufunc(out, a, out=out)


@step("graph.clip")
def _clip(name, args, out, props, scratch):
    segments = props.get("operandSegmentSizes")
    bounds = list(args[1:])
    if segments is not None and list(segments)[1:] == [0, 1]:
        lo, hi = None, bounds[0]
    else:
        lo = bounds[0] if bounds else None
        hi = bounds[1] if len(bounds) > 1 else None
    source = args[0]
    if lo is not None and hi is not None and out.dtype.kind == "f":
        np.clip(source, lo.reshape(()), hi.reshape(()), out=out)  # one pass, SIMD
        return
    if lo is not None:
        np.maximum(source, lo.reshape(()), out=out)
        source = out
    if hi is not None:
        np.minimum(source, hi.reshape(()), out=out)
        source = out
    if source is not out:
        np.copyto(out, source)


@step("graph.batch_norm")
def _batch_norm(name, args, out, props, scratch):
    x, scale, bias, mean, var = args
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    eps = _scalar(props.get("epsilon", 1e-5), out.dtype)
    np.subtract(x, mean.reshape(shape), out=out)
    np.divide(out, np.sqrt(var.reshape(shape) + eps), out=out)  # a per-channel temporary
    np.multiply(out, scale.reshape(shape), out=out)
    np.add(out, bias.reshape(shape), out=out)


def _same_view(a: np.ndarray, b: np.ndarray) -> bool:
    return (a.shape == b.shape and a.strides == b.strides and a.dtype == b.dtype
            and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


@impl("kernel.elementwise")
def elementwise(op, inputs, outputs, workspaces):
    config = config_of(op)
    y = outputs[0]
    scratch = workspaces[0] if workspaces else None
    n = len(inputs)
    steps, wiring = config["steps"], config["wiring"]
    props = config["step_props"] or [{}] * len(steps)
    # an in that overlaps Y must be Y itself and read only by the first step
    later = {r for refs in wiring[1:] for r in refs if r < n}
    inputs = list(inputs)
    for index, array in enumerate(inputs):
        if np.may_share_memory(array, y) and (index in later or not _same_view(array, y)):
            inputs[index] = array.copy()
    for name, refs, step_props in zip(steps, wiring, props):
        args = [y if r >= n else inputs[r] for r in refs]
        STEP_IMPLS[name](name, args, y, step_props, scratch)


# -- data movement --------------------------------------------------------------------------------

@impl("kernel.transpose")
def transpose(op, inputs, outputs, workspaces):
    np.copyto(outputs[0], inputs[0].transpose(config_of(op)["perm"]))


@impl("kernel.concat")
def concat(op, inputs, outputs, workspaces):
    np.concatenate(inputs, axis=config_of(op)["axis"], out=outputs[0])


@impl("kernel.gather")
def gather(op, inputs, outputs, workspaces):
    axis = config_of(op)["axis"]
    x, indices = inputs
    dim = x.shape[axis]
    if indices.size and (dim == 0 or indices.min() < -dim or indices.max() >= dim):
        raise ValueError(f"gather indices out of range [-{dim}, {dim - 1}]")
    np.take(x, indices.astype(np.intp, copy=False), axis=axis, out=outputs[0], mode="wrap")


@impl("kernel.pad")
def pad(op, inputs, outputs, workspaces):
    config = config_of(op)
    x, y = inputs[0], outputs[0]
    rank = x.ndim
    pads = config["pads"]
    begins, ends = pads[:rank], pads[rank:]
    crop = tuple(slice(-min(b, 0), x.shape[a] + min(e, 0))
                 for a, (b, e) in enumerate(zip(begins, ends)))
    src = x[crop]
    lead = [max(b, 0) for b in begins]
    interior = tuple(slice(b, b + n) for b, n in zip(lead, src.shape))
    np.copyto(y[interior], src)
    mode = config["mode"]
    if mode == "constant":
        value = inputs[1].reshape(-1)[0] if len(inputs) > 1 else 0
        for a in range(rank):
            before = (slice(None),) * a + (slice(0, lead[a]),)
            after = (slice(None),) * a + (slice(lead[a] + src.shape[a], None),)
            y[before] = value
            y[after] = value
        return
    for a in range(rank):  # axis by axis, over the already padded extent of earlier axes
        size = src.shape[a]
        b = lead[a]
        region = [slice(None)] * a + [None] + list(interior[a + 1:])

        def copy(target, source, _region=region, _a=a):
            _region[_a] = target
            dst = tuple(_region)
            _region[_a] = source
            np.copyto(y[dst], y[tuple(_region)])

        for j in range(b):
            offset = b - j  # distance before the first interior cell
            source = {"edge": b, "reflect": b + offset, "wrap": b + size - offset}[mode]
            copy(slice(j, j + 1), slice(source, source + 1))
        for j in range(b + size, y.shape[a]):
            offset = j - (b + size - 1)  # distance after the last interior cell
            source = {"edge": b + size - 1, "reflect": b + size - 1 - offset,
                      "wrap": b + offset - 1}[mode]
            copy(slice(j, j + 1), slice(source, source + 1))


@impl("kernel.resize")
def resize(op, inputs, outputs, workspaces):
    from palimpsest.dialects.graph.reference.resize import _source_coords, _taps

    config = config_of(op)
    ws = workspaces_by_role(op, workspaces)
    x, y = inputs[0], outputs[0]
    mode = config["mode"]
    ctm = config["coordinate_transformation_mode"]
    axes, sizes, scales = config["axes"], config["sizes"], config["scales"]
    roi = config["roi"]
    count = len(axes)
    data = x
    for i, (axis, size, scale) in enumerate(zip(axes, sizes, scales)):
        target = y if i == count - 1 else ws[f"stage{i}"]
        in_len = data.shape[axis]
        if size == 0:
            data = target
            continue
        axis_roi = (roi[i], roi[i + count]) if roi is not None else None
        coords, outside = _source_coords(ctm, size, scale, in_len, axis_roi)
        shape = (1,) * axis + (size,) + (1,) * (data.ndim - axis - 1)
        if mode == "nearest":
            floor = np.floor(coords)
            frac = coords - floor
            nearest = config["nearest_mode"]
            if nearest == "round_prefer_floor":
                up = frac > 0.5
            elif nearest == "round_prefer_ceil":
                up = frac >= 0.5
            elif nearest == "floor":
                up = np.zeros_like(frac, dtype=bool)
            else:
                up = frac > 0
            index = np.clip(floor + up, 0, in_len - 1).astype(np.intp)
            np.take(data, index, axis=axis, out=target, mode="clip")
        else:
            base = np.ceil(coords) - 1
            start, weights = _taps(mode, coords - base, scale, bool(config["antialias"]),
                                   config["cubic_coeff_a"])
            taps = weights.shape[1]
            neighbours = base[:, None].astype(np.int64) + start + np.arange(taps)[None, :]
            if config["exclude_outside"]:
                weights = np.where((neighbours < 0) | (neighbours >= in_len), 0.0, weights)
                total = weights.sum(axis=1, keepdims=True)
                weights = weights / np.where(total == 0, 1.0, total)
            index = np.clip(neighbours, 0, in_len - 1).astype(np.intp)
            weights = weights.astype(y.dtype)
            tap = _view_as(ws["taps"][:target.size], target.shape)
            for j in range(taps):
                term = target if j == 0 else tap
                np.take(data, index[:, j], axis=axis, out=term, mode="clip")
                np.multiply(term, weights[:, j].reshape(shape), out=term)
                if j:
                    np.add(target, tap, out=target)
        if outside is not None and outside.any():
            np.copyto(target, _scalar(config["extrapolation_value"], target.dtype),
                      where=outside.reshape(shape))
        data = target


__all__ = ["KERNEL_IMPLS", "STEP_IMPLS", "config_of", "execute_kernel", "workspaces_by_role"]
