"""oneDNN's primitives that the numpy backend runs where they beat numpy: the direct
convolution in channels-last layout, the 8-bit matrix product on packed weights,
elementwise functions (GELU) and float16 <-> float32 conversions.

Convolutions (for the convs kernel_ops_channels_last.py picks): one image's conv as three
primitives, the image reordered from the caller's NCHW into NHWC, the conv (bias and
post-ops included) NHWC to NHWC, the result reordered back into the caller's NCHW out;
a conv next to another one skips the reorder on that side.

Why: oneDNN's direct convolutions (brgconv, and brdgmm for depthwise ones) run on
channels-last data at close to the FMA rate, where an im2col GEMM copies kh*kw times the
image first and a depthwise conv has no GEMM at all. Here, one thread: a depthwise 5x5
on 256 x 14 x 14 0.05 ms against the numpy kernels' 0.46; a 3x3 128 -> 128 on 40 x 40
3.1 ms against 4.5 (im2col and oneDNN's own GEMM). On NCHW data (oneDNN's "gemm:jit"
route) it is slower than the numpy kernels, hence the reorders, whose NHWC copies live
in the conv's own planned workspaces (the caller finds room there or keeps its route).

The caller packs constant weights once into the layout the primitive asks for, others
at every call. oneDNN keeps a small scratchpad of its own per primitive (outside the
plan). Bound through ctypes on the same library as the GEMMs (backends/onednn.py); the
enum values are oneDNN 3.2's (dnnl_types.h).
"""

from __future__ import annotations

import ctypes
import functools

from palimpsest.backends import onednn

# oneDNN's data types (dnnl_data_type_t) by numpy dtype name
_DATA_TYPES = {"float16": 1, "float32": 3, "int32": 4, "int8": 5, "uint8": 6}
_TAG_ANY, _TAG_A, _TAG_NHWC = 1, 2, 22
_FORWARD_INFERENCE, _CONVOLUTION_DIRECT = 96, 1
_QUERY_IMPL_INFO, _QUERY_WEIGHTS_MD = 8, 131
_ARG_SRC, _ARG_DST, _ARG_WEIGHTS, _ARG_BIAS = 1, 17, 33, 41
_ARG_SCALES, _ARG_ZERO_POINTS = 4096, 8192     # (or-ed with the argument they qualify)
_Dims = ctypes.c_int64 * 12
# oneDNN's elementwise functions (dnnl_alg_kind_t), for Eltwise and a conv's post-op;
# alpha and beta as oneDNN defines them for each (relu: the slope below 0; swish:
# x * sigmoid(alpha x); hardswish: x * clip(alpha x + beta, 0, 1); hardsigmoid:
# clip(alpha x + beta, 0, 1); elu: alpha (e^x - 1) below 0; linear: alpha x + beta)
ELTWISE = {"relu": 32, "tanh": 33, "elu": 34, "linear": 38, "hardsigmoid": 40,
           "logistic": 41, "gelu_tanh": 43, "swish": 44, "gelu_erf": 49, "hardswish": 52}
_handle = ctypes.c_void_p


class _Arg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", _handle)]


class OneDnnError(RuntimeError):
    pass


def _check(status: int, what: str) -> None:
    if status != 0:
        raise OneDnnError(f"oneDNN: {what} failed (status {status})")


@functools.lru_cache(maxsize=None)
def _runtime():
    """(library, engine, stream) or None where oneDNN is not in use."""
    library = onednn._library()
    if library is None:
        return None
    library.dnnl_primitive_desc_query_md.restype = _handle
    library.dnnl_primitive_desc_query_md.argtypes = [_handle, ctypes.c_int, ctypes.c_int]
    library.dnnl_memory_desc_get_size.restype = ctypes.c_size_t
    library.dnnl_memory_desc_get_size.argtypes = [_handle]
    library.dnnl_memory_set_data_handle.argtypes = [_handle, _handle]
    library.dnnl_primitive_execute.argtypes = [_handle, _handle, ctypes.c_int, _handle]
    library.dnnl_stream_wait.argtypes = [_handle]
    engine, stream = _handle(), _handle()
    try:
        _check(library.dnnl_engine_create(ctypes.byref(engine), 1, 0), "engine")
        _check(library.dnnl_stream_create(ctypes.byref(stream), engine, 1), "stream")
    except OneDnnError:
        return None
    return library, engine, stream


def available() -> bool:
    return _runtime() is not None


def _desc(dims, tag=None, strides=None, dtype="float32"):
    """A memory descriptor of `dims` laid out by format `tag`, else by element `strides`."""
    library = _runtime()[0]
    desc = _handle()
    data_type = _DATA_TYPES[dtype]
    if strides is None:
        _check(library.dnnl_memory_desc_create_with_tag(
            ctypes.byref(desc), len(dims), _Dims(*dims), data_type, tag), "memory desc")
    else:
        _check(library.dnnl_memory_desc_create_with_strides(
            ctypes.byref(desc), len(dims), _Dims(*dims), data_type, _Dims(*strides)),
            "memory desc")
    return desc


def _destroy(*descs) -> None:
    """Memory descriptors (None among them skipped) destroyed: the primitives and memory
    objects made from them keep their own copies."""
    library = _runtime()[0]
    for desc in descs:
        if desc is not None:
            library.dnnl_memory_desc_destroy(desc)


class _Primitives:
    """oneDNN primitives with the memory objects their arguments name (addresses set at
    each call), destroyed with their owner."""

    def __init__(self):
        self._primitives, self._memories = {}, {}

    def _primitive(self, step, desc, args) -> None:
        library, engine, _ = _runtime()
        primitive = _handle()
        _check(library.dnnl_primitive_create(ctypes.byref(primitive), desc), "primitive")
        library.dnnl_primitive_desc_destroy(desc)
        packed = (_Arg * len(args))()
        for slot, (arg, name, memory_desc) in enumerate(args):
            memory = self._memories.get(name)
            if memory is None:
                memory = _handle()
                _check(library.dnnl_memory_create(ctypes.byref(memory), memory_desc, engine,
                                                  None), "memory")
                self._memories[name] = memory
            packed[slot] = _Arg(arg, memory)
        self._primitives[step] = (primitive, len(args), packed)

    def _reorder(self, source, source_desc, dest, dest_desc) -> None:
        """A step named `source`: its memory reordered (or converted) into `dest`'s."""
        library, engine, _ = _runtime()
        reorder = _handle()
        _check(library.dnnl_reorder_primitive_desc_create(
            ctypes.byref(reorder), source_desc, engine, dest_desc, engine, None), "reorder")
        self._primitive(source, reorder, [(_ARG_SRC, source, source_desc),
                                          (_ARG_DST, dest, dest_desc)])

    def __del__(self):
        try:
            runtime = _runtime()
            for primitive, _, _ in getattr(self, "_primitives", {}).values():
                runtime[0].dnnl_primitive_destroy(primitive)
            for memory in getattr(self, "_memories", {}).values():
                runtime[0].dnnl_memory_destroy(memory)
        except (TypeError, AttributeError):   # (at exit: the library already unloaded)
            pass

    def _bound(self, steps: list, address: dict, kept: tuple, what: str):
        """Steps [(step, the names of its memories)] run in order, each memory at its
        `address` (name -> int; a name without one left out), as a call of no arguments
        on `self.work` multiply-adds' threads (the caller's arrays, `kept`, alive with
        it)."""
        library, _, stream = _runtime()
        set_handle = library.dnnl_memory_set_data_handle
        execute, wait = library.dnnl_primitive_execute, library.dnnl_stream_wait
        plan = []
        for step, names in steps:
            primitive, count, args = self._primitives[step]
            plan.append(([(self._memories[name], address[name]) for name in names
                          if name in address], primitive, count, args))
        work = self.work

        def call(_kept=kept):
            onednn._threads_for(work)
            for handles, primitive, count, args in plan:
                for memory, at in handles:
                    set_handle(memory, at)
                status = execute(primitive, stream, count, args)
                if status != 0:
                    raise OneDnnError(f"oneDNN: {what} failed (status {status})")
                wait(stream)
        return call

    def _run(self, step: str, handles: dict) -> None:
        library, _, stream = _runtime()
        primitive, count, args = self._primitives[step]
        for name, address in handles.items():
            library.dnnl_memory_set_data_handle(self._memories[name], address)
        _check(library.dnnl_primitive_execute(primitive, stream, count, args), "execute")
        library.dnnl_stream_wait(stream)


class ChannelsLastConv(_Primitives):
    """One image's conv (C x H x W in, M x Ho x Wo out, float32) on oneDNN through NHWC.
    `x_strides`/`y_strides`: the caller's image and out strides in elements. `bias`:
    whether it has one. `post_ops`: ((ELTWISE name, alpha, beta), ...) applied in order
    to the result as oneDNN writes it ("linear": alpha x + beta), or None.
    `reads_last`/`writes_last`: the image is already NHWC / the result stays NHWC (no
    reorder on that side: a conv next to another one). Raises OneDnnError where oneDNN
    has no such conv."""

    def __init__(self, image, out, kernel, group, strides, dilations, pads, bias,
                 x_strides, y_strides, post_ops=None, reads_last=False, writes_last=False):
        super().__init__()
        library, engine, _ = _runtime()
        (c, h, w), (m, ho, wo), (kh, kw) = image, out, kernel
        top, left, bottom, right = pads
        self.x_elements, self.y_elements = c * h * w, m * ho * wo
        self.work = m * ho * wo * (c // group) * kh * kw   # multiply-adds
        plain_x = _desc((1, c, h, w), strides=(c * h * w,) + tuple(x_strides))
        plain_y = _desc((1, m, ho, wo), strides=(m * ho * wo,) + tuple(y_strides))
        last_x = _desc((1, c, h, w), _TAG_NHWC)
        last_y = _desc((1, m, ho, wo), _TAG_NHWC)
        grouped = group > 1
        w_dims = (group, m // group, c // group, kh, kw) if grouped else (m, c, kh, kw)
        plain_w = _desc(w_dims, 6 if grouped else 5)   # goihw / oihw
        any_w = _desc(w_dims, _TAG_ANY)
        bias_desc = _desc((m,), _TAG_A) if bias else None
        attr = None
        if post_ops:
            attr, chain = _handle(), _handle()
            _check(library.dnnl_primitive_attr_create(ctypes.byref(attr)), "attributes")
            _check(library.dnnl_post_ops_create(ctypes.byref(chain)), "post-ops")
            for function, alpha, beta in post_ops:
                _check(library.dnnl_post_ops_append_eltwise(
                    chain, ELTWISE[function], ctypes.c_float(alpha), ctypes.c_float(beta)),
                    function)
            _check(library.dnnl_primitive_attr_set_post_ops(attr, chain), "post-ops")
            library.dnnl_post_ops_destroy(chain)
        conv = _handle()
        try:
            _check(library.dnnl_convolution_forward_primitive_desc_create(
                ctypes.byref(conv), engine, _FORWARD_INFERENCE, _CONVOLUTION_DIRECT,
                last_x, any_w, bias_desc, last_y, _Dims(*strides),
                _Dims(*(d - 1 for d in dilations)), _Dims(top, left), _Dims(bottom, right),
                attr), "convolution")
        finally:
            if attr is not None:
                library.dnnl_primitive_attr_destroy(attr)
        info = ctypes.c_char_p()
        library.dnnl_primitive_desc_query(conv, _QUERY_IMPL_INFO, 0, ctypes.byref(info))
        self.impl = (info.value or b"?").decode()
        packed_w = _handle(library.dnnl_primitive_desc_query_md(conv, _QUERY_WEIGHTS_MD, 0))
        self.weight_elements = -(-library.dnnl_memory_desc_get_size(packed_w) // 4)
        self.reads_last, self.writes_last = reads_last, writes_last
        steps = [("w_plain", plain_w, "w_packed", packed_w)]
        if not reads_last:
            steps.append(("x_in", plain_x, "x_last", last_x))
        if not writes_last:
            steps.append(("y_last", last_y, "y_out", plain_y))
        for step in steps:
            self._reorder(*step)
        conv_args = [(_ARG_SRC, "x_last", last_x), (_ARG_WEIGHTS, "w_packed", packed_w),
                     (_ARG_DST, "y_last", last_y)]
        if bias:
            conv_args.append((_ARG_BIAS, "bias", bias_desc))
        self._primitive("conv", conv, conv_args)
        _destroy(plain_x, plain_y, last_x, last_y, plain_w, any_w, bias_desc)

    def pack_weights(self, w, packed) -> None:
        """The weights (M x C/group x kh x kw, contiguous) into `packed` (at least
        weight_elements float32), in the primitive's layout."""
        self._run("w_plain", {"w_plain": w.ctypes.data, "w_packed": packed.ctypes.data})

    def bind(self, x, x_last, packed, bias, y_last, y):
        """y (one image's out, NCHW, or NHWC where it `writes_last`) = conv(x) (NCHW, or
        NHWC where it `reads_last`) through x_last and y_last (flat float32 scratch of
        x_elements and y_elements, None on a side without a reorder), with `packed`
        weights, as a call of no arguments, the addresses read once (the caller keeps
        the arrays alive)."""
        if self.reads_last:
            x, x_last = None, x
        if self.writes_last:
            y, y_last = None, y
        address = {"x_in": x, "x_last": x_last, "w_packed": packed, "y_last": y_last,
                   "y_out": y, "bias": bias}
        address = {name: array.ctypes.data for name, array in address.items()
                   if array is not None}
        steps = [("x_in", ("x_in", "x_last")),
                 ("conv", ("x_last", "w_packed", "y_last", "bias")),
                 ("y_last", ("y_last", "y_out"))]
        steps = [(step, names) for step, names in steps if step in self._primitives]
        return self._bound(steps, address, (x, x_last, packed, bias, y_last, y),
                           "convolution")


# -- 8-bit matrix products -----------------------------------------------------------------


class Int8MatMul(_Primitives):
    """(a - zero) @ b on oneDNN's matmul primitive (brgemm: AMX or VNNI), with b's int8
    weights packed once into the layout the primitive asks for, as onnxruntime prepacks
    them: oneDNN's plain GEMM packs b again at every call (t5's 64 x 512 x 1024: 40
    against 90 us). a: rows x depth uint8, rows contiguous; zero: a's zero point (one,
    given at each call). The out: rows x columns int32, or float32 where `scales`
    ("common": one, "columns": one per column) multiply the exact product (rounded once)
    and `bias` (one per column) is added after, each a float32 operation as numpy's:
    oneDNN's epilogue does not fuse them into one rounding. Raises OneDnnError where
    oneDNN has no such product."""

    def __init__(self, rows, depth, columns, scales=None, bias=False):
        super().__init__()
        library, engine, _ = _runtime()
        self.work = rows * depth * columns
        a = _desc((rows, depth), strides=(depth, 1), dtype="uint8")
        plain_b = _desc((depth, columns), strides=(1, depth), dtype="int8")  # b's rows
        any_b = _desc((depth, columns), _TAG_ANY, dtype="int8")
        out = _desc((rows, columns), strides=(columns, 1),
                    dtype="int32" if scales is None else "float32")
        bias_desc = _desc((1, columns), strides=(columns, 1)) if bias else None
        zero_desc = _desc((1,), _TAG_A, dtype="int32")
        scale_desc = None if scales is None else _desc(
            (columns if scales == "columns" else 1,), _TAG_A)
        attr = _handle()
        _check(library.dnnl_primitive_attr_create(ctypes.byref(attr)), "attributes")
        made = _handle()
        try:
            _check(library.dnnl_primitive_attr_set_zero_points_mask(attr, _ARG_SRC, 0),
                   "zero point")
            if scales is not None:
                _check(library.dnnl_primitive_attr_set_scales_mask(
                    attr, _ARG_WEIGHTS, 2 if scales == "columns" else 0), "scales")
            _check(library.dnnl_matmul_primitive_desc_create(
                ctypes.byref(made), engine, a, any_b, bias_desc, out, attr), "matmul")
        finally:
            library.dnnl_primitive_attr_destroy(attr)
        packed_b = _handle(library.dnnl_primitive_desc_query_md(made, _QUERY_WEIGHTS_MD, 0))
        self.weight_bytes = library.dnnl_memory_desc_get_size(packed_b)
        self._reorder("b_rows", plain_b, "b_packed", packed_b)
        args = [(_ARG_SRC, "a", a), (_ARG_WEIGHTS, "b_packed", packed_b), (_ARG_DST, "out", out),
                (_ARG_ZERO_POINTS | _ARG_SRC, "zero", zero_desc)]
        if scales is not None:
            args.append((_ARG_SCALES | _ARG_WEIGHTS, "scales", scale_desc))
        if bias:
            args.append((_ARG_BIAS, "bias", bias_desc))
        self._primitive("matmul", made, args)
        _destroy(a, plain_b, any_b, out, bias_desc, zero_desc, scale_desc)
        self._bound = None    # the `bound` call whose addresses the memory objects hold

    def pack(self, b_rows, packed) -> None:
        """b (given as its rows: columns x depth int8, contiguous) into `packed` (at least
        weight_bytes, uint8), in the primitive's layout."""
        self._run("b_rows", {"b_rows": b_rows.ctypes.data, "b_packed": packed.ctypes.data})

    def __call__(self, a, zero, packed, out, scales=None, bias=None) -> None:
        """out = ((a - zero) @ b) [* scales] [+ bias] (float32 scales and bias
        contiguous); `zero` an int32 array of one element."""
        onednn._threads_for(self.work)
        self._run("matmul", self._handles(a, zero, packed, out, scales, bias))
        self._bound = None

    def bound(self, a, zero, packed, out, scales=None, bias=None):
        """`self(a, zero, packed, out, scales, bias)` as a call of no arguments on those
        very arrays (the caller keeps them alive): their addresses read once, set on the
        memory objects only when another binding (or a plain call) set them since."""
        library, _, stream = _runtime()
        primitive, count, args = self._primitives["matmul"]
        handles = [(self._memories[name], address) for name, address in
                   self._handles(a, zero, packed, out, scales, bias).items()]
        set_handle, execute, wait = (library.dnnl_memory_set_data_handle,
                                     library.dnnl_primitive_execute, library.dnnl_stream_wait)
        token, work = object(), self.work

        def run():
            if self._bound is not token:
                for memory, address in handles:
                    set_handle(memory, address)
                self._bound = token
            onednn._threads_for(work)
            _check(execute(primitive, stream, count, args), "execute")
            wait(stream)
        return run

    @staticmethod
    def _handles(a, zero, packed, out, scales, bias) -> dict:
        handles = {"a": a.ctypes.data, "b_packed": packed.ctypes.data,
                   "out": out.ctypes.data, "zero": zero.ctypes.data}
        if scales is not None:
            handles["scales"] = scales.ctypes.data
        if bias is not None:
            handles["bias"] = bias.ctypes.data
        return handles


# -- elementwise -------------------------------------------------------------------------------


class Eltwise(_Primitives):
    """A float32 elementwise function (ELTWISE's) of `size` contiguous elements on oneDNN
    (the backend takes it where numpy needs many passes and oneDNN's JIT one).
    Raises OneDnnError where oneDNN has no such primitive."""

    def __init__(self, function: str, size: int, alpha: float = 0.0, beta: float = 0.0):
        super().__init__()
        library, engine, _ = _runtime()
        desc = _desc((size,), _TAG_A)
        made = _handle()
        try:
            _check(library.dnnl_eltwise_forward_primitive_desc_create(
                ctypes.byref(made), engine, _FORWARD_INFERENCE, ELTWISE[function], desc,
                desc, ctypes.c_float(alpha), ctypes.c_float(beta), None), function)
            self._primitive("eltwise", made, [(_ARG_SRC, "src", desc),
                                              (_ARG_DST, "dst", desc)])
        finally:
            library.dnnl_memory_desc_destroy(desc)

    def __call__(self, x, out) -> None:
        """out = f(x), both contiguous float32 of `size` elements (may be one array)."""
        self._run("eltwise", {"src": x.ctypes.data, "dst": out.ctypes.data})


@functools.lru_cache(maxsize=64)
def eltwise(function: str, size: int, alpha: float = 0.0, beta: float = 0.0) -> Eltwise | None:
    """The Eltwise of `function` (with ELTWISE's `alpha` and `beta`) over `size`
    elements (made once), or None."""
    if not available():
        return None
    try:
        return Eltwise(function, size, alpha, beta)
    except OneDnnError:
        return None


# -- conversions -------------------------------------------------------------------------------

class Convert(_Primitives):
    """`size` contiguous elements converted from one float type to another (float16 and
    float32: oneDNN's reorder, F16C's instructions: 4M elements f32 -> f16 1.0 ms against
    numpy's 11.5, the same values, round to nearest even). Raises OneDnnError where
    oneDNN has no such reorder."""

    def __init__(self, source: str, dest: str, size: int):
        super().__init__()
        descs = [_desc((size,), _TAG_A, dtype=name) for name in (source, dest)]
        try:
            self._reorder("src", descs[0], "dst", descs[1])
        finally:
            _destroy(*descs)

    def __call__(self, x, out) -> None:
        self._run("src", {"src": x.ctypes.data, "dst": out.ctypes.data})


@functools.lru_cache(maxsize=64)
def convert(source: str, dest: str, size: int) -> Convert | None:
    """The Convert of `size` elements from dtype name `source` to `dest` (made once),
    or None (no oneDNN, or another pair of types)."""
    if not available() or source not in _DATA_TYPES or dest not in _DATA_TYPES:
        return None
    try:
        return Convert(source, dest, size)
    except OneDnnError:
        return None


__all__ = ["ELTWISE", "ChannelsLastConv", "Convert", "Eltwise", "Int8MatMul", "OneDnnError",
           "available", "convert", "eltwise"]
