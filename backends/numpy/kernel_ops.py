"""Kernel-level ops on numpy: `KERNEL_IMPLS[op.name](op, inputs, outputs, workspaces)`.

Each implementation writes its results into the given output views (`out=`) and uses
only the given workspace views for scratch, so the memory a kernel touches is the memory
the IR (and the memory plan) gives it. `execute_kernel` is the executor's hook: it binds
the op's buffers, sizes outs and workspaces that have `?` dims from the actual operand
shapes (the kernel dialect's rules), and calls the implementation; `kernel.generic` runs
as `buffer.compute` does (executor.py).

This module holds the dispatch tables (`KERNEL_IMPLS`, and `STEP_IMPLS` for the steps of
a fused elementwise chain), `execute_kernel` and the helpers the implementations share;
the implementations live beside it and register themselves when this module is imported:

- `kernel_ops_conv.py`: conv2d (im2col; without one, by kernel row or output row), its
  depthwise paths in `kernel_ops_depthwise.py` (by kernel column, banded weights).
- `kernel_ops_pool.py`: pool2d (separable, or over strided window views).
- `kernel_ops_reduce.py`: kernels that reduce along an axis: matmul, softmax,
  layer_norm, reduce.
- `kernel_ops_elementwise.py`: fused elementwise chains and the kernels' fused
  epilogues, run step by step; `kernel_ops_steps.py`: the steps, one function each (the
  f32/f16 erf approximation among them).
- `kernel_ops_movement.py`: data movement: transpose, concat, gather, pad, resize.
- `kernel_ops_recurrent.py`: lstm, gru, rnn (one GEMM for X·Wᵀ, a step loop in workspaces).
- `kernel_ops_attention.py`: attention (scores and softmax rows in planned workspaces).
- `kernel_ops_slicing.py`: split and slice (one `np.copyto` per out from a view).
- `kernel_ops_spatial.py`: conv_transpose (a GEMM into the `cols` workspace, col2im by
  strided slices of Y).

| op | how |
|---|---|
| conv2d | per image (but see the two paths without an im2col at the end): im2col into its workspace, then one grouped `np.matmul(W, cols, out=Y[n])` (BLAS). The im2col copy, stride 1 along the height: rows first, in two copies with long inner loops: T = the image's rows per kernel column (zeros for the pads, no padded copy), then each (p, q) block as one run of T (T past the im2col rows in use; or, with no room, at the start of the workspace, read in place by channel blocks from the last down, channel 0's T through the padded workspace). A strided conv whose windows overlap a lot (kh*kw >= 4*sh*sw, e.g. a 7x7/2 stem): the padded workspace holds the image's stride phases, each offset reads one phase at unit stride. Otherwise: the padded workspace gets zero borders and the image, and one `np.copyto` from an `as_strided` (C, kh, kw, Ho, Wo) view. An im2col matrix over 4 MiB is filled and multiplied in bands of output rows (~768 KiB, they stay in L2). 1x1 stride 1 without pads: the image is the matrix. Dense, stride 1 along the height, 32x32 outputs or more: no im2col; T (the image's rows per kernel column) and one GEMM per kernel row (its C*kw rows of T are a BLAS matrix as they lie), summed into Y. Depthwise, kh*kw*Ho*Wo >= 2500: per band of channels (L2-sized) T by kernel column and row stride phase, one batched `np.matmul` per phase of each channel's kernel rows by its runs of T, the kh products summed into Y; smaller depthwise convs: each channel's kh*kw rows copied into the im2col workspace as long unit-stride runs (stride 1: of the padded image; strided: of its stride phases), one batched `np.matmul` of each channel's weights by its rows, bias added as the results are copied out. Bias with `np.add(..., out=)` |
| matmul | `np.matmul(op(A), op(B), out=Y)` (transposes are strided views); alpha, beta*C in Y: `Y *= alpha/beta; Y += C; Y *= beta` |
| pool2d | with a padded workspace and every output reading the image through some tap: separable, rows then columns (`np.maximum` / `np.add` per tap over the range of outputs whose tap is inside the image; no padding cells are read or written), the row pass in the padded workspace; otherwise per image: borders of the padded workspace filled (-inf / the integer minimum / 0), image copied in, one ufunc per kernel offset over strided window views. avg divides by kh*kw or by the divisor workspace |
| softmax | `np.fmax.reduce` into the stats workspace, subtract and exp into Y, row sums into stats (`np.einsum` for contiguous rows up to 1024 long, else `np.sum`), divide |
| layer_norm | mean into the mean workspace (row sums as softmax's, / width), Y = X - mean, `np.einsum` sum of squares into var, Y *= 1/sqrt(var + eps), *= scale, += B |
| reduce | `np.mean` / `np.sum` / `np.max` with `out=` (the acc workspace when accumulating in another type) |
| elementwise | every step computed into Y (steps after the first read Y) with ufuncs and `out=`; leaky_relu, hard_swish, softsign, elu and selu use the scratch workspace; relu and two-bound clip are one `np.clip` (SIMD, 2-8x faster than maximum/minimum); f32/f16 erf is a rational approximation evaluated in float32 chunks |
| lstm, gru, rnn | per direction: X·Wᵀ of every step in one `np.matmul` into `projected`, biases added once; per step a batched `np.matmul(H, Rᵀ, out=gates)` and in-place ufuncs on contiguous gates; LSTM/GRU with default activations and full-length sequences write each hidden state straight into its row of Y (the fast loop), the others swap state halves (kernel_ops_recurrent.py); nothing allocated |
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
- erf steps: three float32 vectors of 32768 elements (384 KiB) per step, a fourth for
  f16; a non-contiguous or non-float erf without scipy: the reference kernel's result,
  copied into Y.
- an elementwise in that overlaps Y but is not Y itself (never in lowered IR) is copied
  first.
- the ufunc iterator's own buffers (at most 8192 elements per operand) on views it cannot
  loop over directly: strided pooling windows, broadcast bias adds.
"""

from __future__ import annotations

import bisect
import weakref

import numpy as np

KERNEL_IMPLS: dict = {}

_CONFIGS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def impl(name: str):
    def register(fn):
        KERNEL_IMPLS[name] = fn
        return fn
    return register


class _Info:
    """An op's properties as Python values, its workspace roles and where its ins, outs
    and workspaces lie among its operands, computed once (and again if a pass changes
    the op's properties or operand types)."""

    __slots__ = ("config", "roles", "properties", "types", "split", "prepared")

    def __init__(self, op):
        # kept to compare with: unchanged attributes and types compare by identity (fast)
        self.properties = dict(op.properties)
        self.types = [v.type for v in op.operands]
        self.config = op.config()
        ins, outs, workspaces = list(op.ins), list(op.outs), list(op.workspaces)
        self.roles = type(op).workspace_roles([v.type for v in ins], self.config)
        self.split = None
        self.prepared = None   # what an implementation derives from the config (`prepared`)
        grouped = ins + outs + workspaces
        if len(grouped) == len(op.operands) and all(
                a is b for a, b in zip(grouped, op.operands)):
            self.split = (len(ins), len(ins) + len(outs))


# (op, info, _Bound, executor) of the kernel `execute_kernel` is running, validated on
# entry: the implementation's own `config_of` / `workspaces_by_role` calls skip the check
# (a few us per kernel), and `recorded` / `record` find the op's calls there. One tuple,
# read once: another thread's kernel can only miss it.
_RUNNING: tuple = (None, None, None, None)


def _info(op) -> _Info:
    running = _RUNNING
    if running[0] is op:
        return running[1]
    info = _CONFIGS.get(op)
    if info is None or info.properties != op.properties or \
            info.types != [v.type for v in op.operands]:
        info = _CONFIGS[op] = _Info(op)
    return info


def kernel_info(op) -> _Info:
    """The op's properties as Python values (`.config`) and workspace roles (`.roles`),
    computed once per op (the OpenCL backend shares them)."""
    return _info(op)


def config_of(op) -> dict:
    return _info(op).config


def workspaces_by_role(op, workspaces: list) -> dict:
    return dict(zip(_info(op).roles, workspaces))


def recorded(op, arrays: tuple):
    """The numpy calls `record`ed for `op` on these very arrays (its ins, outs and
    workspaces, each the same object) on this executor, or None. Calls made on views of
    the same arrays do the same work again: a kernel whose steps depend only on shapes
    and its config replays them, its decisions and views made once."""
    running = _RUNNING
    if running[0] is op:
        memo = running[2].memo
        if memo and len(memo[0]) == len(arrays) and all(
                a is b for a, b in zip(memo[0], arrays)):
            return memo[1]
    return None


def record(op, arrays: tuple, calls: list) -> None:
    """Keep `calls` ([(fn, args, kwargs)]) for `recorded`, with the arrays they are for
    (their views hold the arrays' memory: as the executor's kept views do, until the
    arrays change). An op whose arrays changed RECORDS times (it reads a function's
    arguments, or a control-flow segment's: new views each run) records no more."""
    running = _RUNNING
    if running[0] is op:
        bound = running[2]
        if bound.memo is not None:
            bound.records += 1
            if bound.records > RECORDS:
                bound.memo = False
                return
        bound.memo = (arrays, calls)


RECORDS = 3


def recording(op) -> bool:
    """False once `record` gave up on `op` (its calls are then best made as they come)."""
    running = _RUNNING
    return running[0] is not op or running[2].memo is not False


def running_executor(op):
    """The executor running kernel op `op` now (in its implementation), else None."""
    running = _RUNNING
    return running[3] if running[0] is op else None


def replay(calls: list) -> None:
    for fn, args, kwargs in calls:
        fn(*args, **kwargs)


def replayed(op, arrays: tuple, make) -> None:
    """Run the calls `make()` gives ([(fn, args, kwargs)], from shapes and the config
    only), recorded for `op` on `arrays` and replayed while they stay the same objects
    (and, in a captured program, with no dispatch at all: `capture`)."""
    calls = recorded(op, arrays)
    if calls is None:
        calls = make()
        record(op, arrays, calls)
    replay(calls)


class _Calls(list):
    """[(fn, args, kwargs)] for `record`, with `views`: (view, array) pairs of operands
    reshaped for the calls, which must share memory (a reshape that copied would replay
    stale data)."""

    def __init__(self, *calls):
        super().__init__(*calls)
        self.views: list = []


def is_constant_value(value) -> bool:
    """Whether IR value `value` is a constant (`buffer.constant`: the same every run)."""
    return getattr(getattr(value, "op", None), "name", None) == "buffer.constant" \
        and value.type.has_static_shape


def prepared(op, make):
    """What an implementation derives from the op's config once, `make(op, config)`,
    kept with the config (made again when the config is)."""
    info = _info(op)
    value = info.prepared
    if value is None:
        value = info.prepared = make(op, info.config)
    return value


# -- the executor's hooks --------------------------------------------------------------------

class _Replay:
    """Captured kernel ops (`capture`): their recorded calls, run as one handler of the
    program (a run of consecutive ones merged: one call of it, not one per op, which is
    what a model of hundreds of small ops spends); an error names the op whose call
    failed, as `execute_kernel`'s do. `ops`: the ops, `ends[i]` the end of op i's calls."""

    __slots__ = ("calls", "ops", "ends")
    READS_VALUES = False   # (backends/loop.py: its arrays are bound in its calls)

    def __init__(self, calls, ops: list, ends: list):
        self.calls, self.ops, self.ends = calls, ops, ends

    def __call__(self, executor, op, values, depth) -> None:
        fn = args = None
        try:
            for fn, args, kwargs in self.calls:
                if kwargs:
                    fn(*args, **kwargs)
                else:
                    fn(*args)
        except (ValueError, TypeError, IndexError, KeyError, AttributeError) as error:
            raise self._owner(fn, args).error(f"failed at run time: {error}") from None

    def _owner(self, fn, args):
        for index, call in enumerate(self.calls):
            if call[0] is fn and call[1] is args:
                return self.ops[bisect.bisect_right(self.ends, index)]
        return self.ops[0]


def _positional(calls: list) -> list:
    """`calls` with a ufunc's `out=` array given by position (numpy parses a keyword
    ~90 ns a call, which a replay of a thousand small calls feels)."""
    result = []
    for fn, args, kwargs in calls:
        if kwargs and type(fn) is np.ufunc and len(kwargs) == 1 and len(args) == fn.nin \
                and type(kwargs.get("out")) is np.ndarray:
            args, kwargs = (*args, kwargs["out"]), {}
        result.append((fn, args, kwargs))
    return result


def replay_of(op, calls: list) -> _Replay:
    """A captured program's handler of `op`: its recorded `calls` replayed."""
    return _Replay(_positional(calls), [op], [len(calls)])


def _merged(captured: list) -> list:
    """`captured` with each run of consecutive `_Replay` entries made one."""
    merged, run = [], []
    for entry in captured + [None]:
        if entry is not None and type(entry[0]) is _Replay:
            run.append(entry)
            continue
        if len(run) > 1:
            calls, ops, ends = [], [], []
            for handler, op, _ in run:
                calls.extend(handler.calls)
                ops.extend(handler.ops)
                ends.extend(len(calls) - len(handler.calls) + end for end in handler.ends)
            merged.append((_Replay(calls, ops, ends), run[0][1], run[0][2]))
        else:
            merged.extend(run)
        run = []
        if entry is not None:
            merged.append(entry)
    return merged


_COMPUTE_OPS = frozenset({"kernel.generic", "buffer.compute"})


def capture(executor, program: list, values: dict):
    """`program` (the loop's lean one, its fixed views bound in `values`) with each kernel
    op that recorded its calls on the very arrays it has now replaced by a `_Replay` of
    them, or None when none has. Such an op's buffers are the run's fixed views (pool
    views, constants: the same objects every lean run), so its calls do the same work
    each run; an op reading a run's input (a new view each run) never recorded them. The
    replay runs in the executor's run, whose floating-point error state is set. A
    reshape of an argument bound again (the same view, `Executor.reshape`) is known here
    by the view it will give, so the ops reading it are captured too."""
    captured, replays = [], 0
    entries = executor.kernel_entries
    reshapes = executor.input_reshapes
    copied = False
    for entry in program:
        if entry[1].name == "buffer.reshape":
            last = reshapes.get(entry[1])
            if last is not None and values.get(entry[1].operands[0]) is last[0]:
                if not copied:   # (the run's own dict fills in as it goes)
                    values, copied = dict(values), True
                values[entry[1].results[0]] = last[1]
        if entry[0] is not None and entry[1].name in _COMPUTE_OPS:
            replay = executor.generic_replay(entry[1], values)
            if replay is not None:
                captured.append((replay, entry[1], entry[2]))
                replays += 1
                continue
        bound = entries.get(entry[1]) if entry[0] is None else None
        memo = bound.memo if bound is not None and not bound.dynamic else None
        if memo:
            arrays = [values.get(v) for group in (bound.ins, bound.outs, bound.workspaces)
                      for v in group]
            if len(arrays) == len(memo[0]) and all(a is b for a, b in zip(arrays, memo[0])):
                captured.append((replay_of(entry[1], memo[1]), entry[1], entry[2]))
                replays += 1
                continue
        captured.append(entry)
    return _merged(captured) if replays else None



def execute_kernel(executor, op, values: dict) -> None:
    """Run kernel op `op` with the executor's buffers (`values`). Per call: the op's
    entry (`_Bound`, made at its first call on this executor), its buffers, the pending
    ones sized (only an op with a `?`-dim operand can have one); the floating-point
    error state set to ignore unless the executor's run set it already
    (`errors_ignored`: the numpy executor sets it once per run, not once per kernel)."""
    global _RUNNING
    bound = executor.kernel_entries.get(op)
    if bound is None:
        if op.name == "kernel.generic":
            executor._compute(op, values)  # the same operands and properties as buffer.compute
            return
        bound = executor.kernel_entries[op] = _Bound(op)
    info = bound.info
    inputs = [values[v] for v in bound.ins]
    outputs = [values[v] for v in bound.outs]
    workspaces = [values[v] for v in bound.workspaces]
    try:
        if bound.dynamic:
            inputs, outputs, workspaces = _materialize(executor, op, info, values, inputs,
                                                       outputs, workspaces, bound)
        _RUNNING = (op, info, bound, executor)
        try:
            if executor.errors_ignored:
                bound.fn(op, inputs, outputs, workspaces)
            else:
                with np.errstate(all="ignore"):
                    bound.fn(op, inputs, outputs, workspaces)
        finally:
            _RUNNING = (None, None, None, None)
    except (ValueError, TypeError, IndexError, KeyError, AttributeError) as error:
        raise op.error(f"failed at run time: {error}") from None


class _Bound:
    """What `execute_kernel` needs of one kernel op on one executor, found once: its
    implementation, info (`_Info`), ins, outs and workspaces, and whether any operand
    has a `?` dim (a pending buffer then may need its memory). The executor's program
    is the op's for its life, as the loop's is (backends/loop.py)."""

    __slots__ = ("fn", "info", "ins", "outs", "workspaces", "dynamic", "memo", "records")

    def __init__(self, op):
        self.fn = KERNEL_IMPLS.get(op.name)
        if self.fn is None:
            raise op.error(f"the numpy backend has no implementation of '{op.name}'")
        info = self.info = _info(op)
        if info.split is None:
            self.ins, self.outs, self.workspaces = tuple(op.ins), tuple(op.outs), \
                tuple(op.workspaces)
        else:
            a, b = info.split
            operands = tuple(op.operands)
            self.ins, self.outs, self.workspaces = operands[:a], operands[a:b], operands[b:]
        self.dynamic = any(getattr(v.type, "shape", None) is None or None in v.type.shape
                           for v in op.operands)
        self.memo = None   # (arrays, calls), or False: `record`
        self.records = 0


def _materialize(executor, op, info, values, inputs, outputs, workspaces, bound):
    """The op's ins read (an unwritten one is an error), its pending outs and
    workspaces given memory at the shapes the kernel dialect's rules give."""
    for array in inputs:
        if type(array) is not _NDARRAY and not isinstance(array, _NDARRAY):
            inputs = [executor._materialized(op, values, v) for v in bound.ins]
            break
    for array in outputs:
        if type(array) is not _NDARRAY and not isinstance(array, _NDARRAY):
            cls = type(op)
            sizes = cls.result_shapes([a.shape for a in inputs], info.config)
            outputs = [a if isinstance(a, np.ndarray) else
                       executor._materialize(a, _concrete(op, shape), values)
                       for a, shape in zip(outputs, sizes)]
            break
    for array in workspaces:
        if type(array) is not _NDARRAY and not isinstance(array, _NDARRAY):
            cls = type(op)
            shapes = [a.shape for a in inputs]
            workspaces = [a if isinstance(a, np.ndarray) else executor._materialize(
                a, _concrete(op, cls.workspace_shape(role, shapes, info.config)), values)
                for a, role in zip(workspaces, info.roles)]
            break
    return inputs, outputs, workspaces


_NDARRAY = np.ndarray


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


# np.clip's ufunc itself: np.clip reaches it through two Python layers (~1 us a call,
# three times the ufunc's own time on a small array)
try:
    from numpy._core.umath import clip as CLIP   # numpy 2
except ImportError:   # pragma: no cover - numpy 1
    try:
        from numpy.core.umath import clip as CLIP
    except ImportError:
        CLIP = np.clip


# -- fused elementwise chains: the step table ------------------------------------------------
# `STEP_IMPLS[name](name, args, out, props, scratch)`; the steps and their contract are in
# kernel_ops_steps.py.

STEP_IMPLS: dict = {}


def step(*names):
    def register(fn):
        for name in names:
            STEP_IMPLS[name] = fn
        return fn
    return register


# -- the implementations (each module registers its ops on import) -----------------------------

from palimpsest.backends.numpy import (  # noqa: E402,F401  (registration)
    kernel_ops_attention, kernel_ops_conv, kernel_ops_elementwise, kernel_ops_movement,
    kernel_ops_steps,
    kernel_ops_pool, kernel_ops_recurrent,
    kernel_ops_reduce, kernel_ops_slicing, kernel_ops_spatial)

__all__ = ["KERNEL_IMPLS", "STEP_IMPLS", "config_of", "kernel_info", "execute_kernel", "workspaces_by_role"]
