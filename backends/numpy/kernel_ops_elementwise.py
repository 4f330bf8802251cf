"""Fused elementwise chains on numpy: `kernel.elementwise`, and the fused epilogues of
the conv, matmul and gemm kernels (`epilogue_calls`), run step by step; the steps are
kernel_ops_steps.py's. Registered in `KERNEL_IMPLS` (kernel_ops.py, which imports this
module)."""

from __future__ import annotations

import numpy as np

from palimpsest.backends.numpy.kernel_ops import (
    STEP_IMPLS, impl, prepared, record, recorded, replay)
from palimpsest.backends.numpy.kernel_ops_steps import step_calls
from palimpsest.backends.numpy.kernels import _same_view


def _chain(op, config) -> tuple:
    """A chain's steps as (step function, name, refs, props), and the ins read after the
    first step."""
    steps, wiring = config["steps"], config["wiring"]
    props = config["step_props"] or [{}] * len(steps)
    n = len(op.ins)
    later = frozenset(r for refs in wiring[1:] for r in refs if r < n)
    return [(STEP_IMPLS[name], name, tuple(refs), step_props)
            for name, refs, step_props in zip(steps, wiring, props)], later


@impl("kernel.elementwise")
def elementwise(op, inputs, outputs, workspaces):
    arrays = (*inputs, *outputs, *workspaces)
    calls = recorded(op, arrays)
    if calls is not None:   # the steps with their args, as the last call on these arrays
        replay(calls)
        return
    steps, later = prepared(op, _chain)
    y = outputs[0]
    scratch = workspaces[0] if workspaces else None
    n = len(inputs)
    copied = False
    # an in that overlaps Y must be Y itself and read only by the first step
    for index, array in enumerate(inputs):
        if np.may_share_memory(array, y) and (index in later or not _same_view(array, y)):
            inputs = list(inputs)
            inputs[index] = array.copy()
            copied = True
    if y.size <= CHAIN_WHOLE:
        calls = [call for run, name, refs, step_props in steps
                 for call in step_calls(run, name, [y if r >= n else inputs[r] for r in refs],
                                        y, step_props, scratch)]
        if not copied:   # (a copy is made anew each call)
            record(op, arrays, calls)
        replay(calls)
    else:
        run_blocked(steps, inputs, y, scratch, CHAIN_BLOCK)


# A chain over more than CHAIN_WHOLE elements (4 MiB of f32, past L2) runs a block of
# CHAIN_BLOCK elements of Y at a time, so each step after the first finds its operand in
# L2 rather than memory (a hard-swish, 4 numpy passes, on 1x16x320x320: 1.67 -> 0.93 ms;
# blocks of 16-128 Ki elements within 10% of this). Below, the out stays cached between
# steps anyway and blocks only add calls (ppocr_v6_tiny_det's GELUs on 1x96x40x40:
# 6-7% slower in blocks).
CHAIN_WHOLE = 1 << 20
CHAIN_BLOCK = 1 << 16


def epilogue_calls(config: dict, inputs: list, y: np.ndarray, scratch) -> list:
    """A kernel's fused epilogue (dialects/kernel_elementwise.py, `Epilogue`) on its
    result `y`, in place, as calls (for its recorded calls; `run_epilogue` makes them):
    every step computed into Y, as `kernel.elementwise` does, each step's own numpy calls
    (`step_calls`) where Y is run whole, else one call of `run_blocked`, a block of Y at
    a time, where Y is larger than CHAIN_WHOLE or than the 1-D `scratch` a step needs
    (the `epilogue` workspace holds at most EPILOGUE_CHUNK elements)."""
    kept = _EPILOGUES.get(id(config))
    if kept is None or kept[0] is not config:
        kept = _epilogue_steps(config)
    steps, uses_scratch = kept[1], kept[2]
    if steps is None or not y.size:
        return []
    if not uses_scratch:
        scratch = None
    if y.size > CHAIN_WHOLE or (scratch is not None and y.size > scratch.size):
        block = CHAIN_BLOCK if scratch is None else min(CHAIN_BLOCK, scratch.size)
        return [(run_blocked, (steps, inputs, y, scratch, block), {})]
    shaped = scratch.reshape(-1)[:y.size].reshape(y.shape) if scratch is not None else None
    n = len(inputs)
    return [call for run, name, refs, step_props in steps
            for call in step_calls(run, name, [y if r >= n else inputs[r] for r in refs], y,
                                   step_props, shaped)]


def run_epilogue(config: dict, inputs: list, y: np.ndarray, scratch) -> None:
    """A kernel's fused epilogue on `y`, now (`epilogue_calls`)."""
    replay(epilogue_calls(config, inputs, y, scratch))


# config id -> (config, steps or None, whether a step uses scratch): an epilogue's calls
# are made for each kernel's recording, and making its steps anew took ~3 us a call (as long
# as a hard-swish on 1280 elements)
_EPILOGUES: dict = {}


def _epilogue_steps(config: dict) -> tuple:
    from palimpsest.dialects.kernel_elementwise import STEPS

    names = config.get("epilogue")
    if not names:
        kept = (config, None, False)
    else:
        props = config["epilogue_props"] or [{}] * len(names)
        steps = [(STEP_IMPLS[name], name, refs, step_props)
                 for name, refs, step_props in zip(names, config["epilogue_wiring"], props)]
        kept = (config, steps, any(STEPS[name][2] for name in names))
    if len(_EPILOGUES) >= 4096:
        _EPILOGUES.clear()
    _EPILOGUES[id(config)] = kept
    return kept


def run_blocked(steps: list, inputs: list, y: np.ndarray, scratch, limit: int) -> None:
    """`steps` ((run, name, refs, props) each) on Y in place, a block of at most `limit`
    elements at a time: the trailing dims whole, a range of the axis before them, each
    in read at the block of its broadcast to Y's shape (a batch_norm step's per-channel
    ins at the block's channels, a clip's scalar bounds as they are); a step's scratch is
    the block's size of the flat `scratch`."""
    n = len(inputs)
    shape = y.shape
    axis, inner = len(shape), 1   # blocks: a range of `axis`, the dims after it whole
    while axis > 0 and inner * shape[axis - 1] <= limit:
        axis -= 1
        inner *= shape[axis]
    axis -= 1                     # (>= 0: Y is larger than the limit)
    rows = max(1, limit // inner)
    # (a clip's bounds are scalars, a batch_norm's ins per channel: read as they are)
    whole = {"graph.clip", "graph.batch_norm"}
    wide = {r: np.broadcast_to(inputs[r], shape) for _, name, refs, _ in steps
            for position, r in enumerate(refs) if r < n and not (position and name in whole)}
    flat = None if scratch is None else scratch.reshape(-1)
    for outer in np.ndindex(*shape[:axis]):
        for start in range(0, shape[axis], rows):
            # (every dim kept, so a step sees the rank and channel axis of Y)
            at = tuple(slice(i, i + 1) for i in outer) + (
                slice(start, min(start + rows, shape[axis])),)
            block = y[at]
            room = None if flat is None else flat[:block.size].reshape(block.shape)
            for run, name, refs, step_props in steps:
                if name == "graph.batch_norm":
                    channels = at[1] if len(at) > 1 else slice(None)
                    args = [block if r >= n else wide[r][at] if not position
                            else inputs[r][channels] for position, r in enumerate(refs)]
                elif name == "graph.clip":
                    args = [block if r >= n else inputs[r] if position else wide[r][at]
                            for position, r in enumerate(refs)]
                else:
                    args = [block if r >= n else wide[r][at] for r in refs]
                run(name, args, block, step_props, room)


def epilogue_scratch(by_role: dict):
    """The scratch of a kernel's epilogue: its `epilogue` workspace, else (the dialect
    declares none when one suffices) the largest of the kernel's own, flat."""
    if "epilogue" in by_role:
        return by_role["epilogue"]
    if not by_role:
        return None
    return max(by_role.values(), key=lambda a: a.size).reshape(-1)


def core_inputs(config: dict, inputs: list) -> list:
    """The kernel's own ins (without the epilogue's)."""
    k = config.get("epilogue_ins") or 0
    return inputs[:len(inputs) - k] if k else inputs
