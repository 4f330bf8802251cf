"""A profiler of runs, as a hook of the executor loop (backends/loop.py): where a model's
time goes, per kernel op and per op kind.

    session = Session("model.onnx", profile=True)      # palimpsest-run --profile
    session.run(inputs)
    print(session.profiler.table())
    session.profiler.write_chrome_trace("trace.json")  # palimpsest-run --profile-json

The loop hands each kernel op, `buffer.compute` and `buffer.copy` to `measure`. On a
backend without device events (numpy) it waits for the backend's queued work (`sync()`),
runs the op, waits again and records the host time. On OpenCL the op's time is the
device's: the sum of end - start of the events of the kernels and copies it enqueued
(on a queue with profiling enabled; the executor's `collect_events` / `take_events`),
plus the host time of a host fallback with its transfers; nothing waits between ops,
and the events are read when the (outermost) run ends, so each op costs the run no
host round trip and a small kernel is not charged one. Time an op spends building
programs (OpenCL, first calls: the executor's `setup_seconds()`) is left out of its
time and of the run's, and said apart. The other ops (views, allocations, constants)
only bind memory; their time, with binding inputs and reading outputs (and on OpenCL
the device's idle time between kernels), is the run's time not in any op.

Python's garbage collector is off from a run's start to its end (and as it was after):
a collection, which the profiler's own records trigger, would land inside some op's
window and be charged to it (gtcrn: a 528-element Add showed 0.6 ms, 6% of the run).

Per op and per kind: calls, total and mean time, share of the runs' time, and the
achieved rate: GFLOP/s for conv2d and matmul (gemm lowers to it): 2 FLOPs per
multiply-add, 2 * out elements * reduction length; GB/s for the others: bytes read
from the ins plus written to the outs (workspaces not counted), which is what an
elementwise or data-movement op must move at least.

`chrome_trace()` is the Chrome trace event format (chrome://tracing, Perfetto,
onnxruntime's profiler writes the same): one complete event ("ph": "X", times in µs)
per op executed, its args the op, its shapes, FLOPs and bytes, and its buffers with
where the plan put them: pool, byte offset and size ("pool": null for a buffer the plan
did not place: an argument, a constant, a run-time allocation). An event lasts the op's
time. On numpy it starts when the op did; on OpenCL (device clocks are not the host's)
a run's first op starts when it was enqueued, and each later one where the one before
ended, plus the device's idle time between them when both ran on the device (from the
events' timestamps): the device's timeline, host fallbacks laid in end to end.
"""

from __future__ import annotations

import gc
import json
import time
from dataclasses import dataclass

FLOP_OPS = frozenset({"kernel.conv2d", "kernel.matmul"})


@dataclass
class Row:
    """One line of the table: an op or a kind, summed over its calls."""

    name: str
    kind: str
    calls: int = 0
    seconds: float = 0.0
    flops: int = 0
    bytes: int = 0

    @property
    def mean(self) -> float:
        return self.seconds / self.calls if self.calls else 0.0

    @property
    def gflops(self) -> float | None:
        return self.flops / self.seconds / 1e9 if self.flops and self.seconds > 0 else None

    @property
    def gbytes(self) -> float | None:
        if self.flops or not self.bytes or self.seconds <= 0:
            return None
        return self.bytes / self.seconds / 1e9


class _OpRecord:
    __slots__ = ("row", "buffers", "loc")

    def __init__(self, op):
        self.row = Row(op_label(op), op_kind(op))
        self.buffers = buffer_places(op)
        self.loc = op.loc.describe() if op.loc is not None else ""


class Profiler:
    """Collects the times of the ops runs execute (see the module doc); runs add up."""

    def __init__(self):
        self.origin = time.perf_counter()
        self.records: dict = {}     # op -> _OpRecord, in the order ops first ran
        self.events: list = []      # (record, start, seconds, flops, bytes, shapes) per call
        self.runs = 0
        self.run_seconds = 0.0      # the runs' time, less setup_seconds
        self.setup_seconds = 0.0    # building programs (OpenCL) inside ops: left out
        self._run_start = None
        self._depth = 0
        self._gc_was_enabled = False
        self._pending: list = []    # indices into `events` whose times are the device's
        self._trace_end = self.origin   # where the last device-timed call ended (trace)

    # -- the loop's hooks ------------------------------------------------------------------------
    def begin_run(self) -> None:
        """A run starts; nested calls (a session's executor inside its plan's run, a
        model's segments inside the model's run) count in the outermost run only."""
        self._depth += 1
        if self._depth == 1:
            # collections (gen 0 fills with the records made here) happen between runs,
            # not inside an op's timed window
            self._gc_was_enabled = gc.isenabled()
            gc.disable()
            self._run_start = time.perf_counter()
            self._setup_at_start = self.setup_seconds

    def end_run(self) -> None:
        self._depth -= 1
        if self._depth == 0 and self._run_start is not None:
            self.run_seconds += time.perf_counter() - self._run_start - self.setup_seconds \
                + self._setup_at_start
            self.runs += 1
            self._run_start = None
            try:
                self._resolve()
            finally:
                if self._gc_was_enabled:
                    gc.enable()

    def measure(self, executor, op, values: dict, depth: int) -> None:
        """Run `op` with `executor`; its time from the device's events where the backend
        has them (read at the run's end), else between two syncs of its queue."""
        if executor.collect_events():
            built = executor.setup_seconds()
            start = time.perf_counter()
            try:
                executor._execute(op, values, depth)
            finally:
                times = executor.take_events()
            self.setup_seconds += executor.setup_seconds() - built
            self._pending.append(len(self.events))
            self._count(op, values, start, times, 0.0)
            return
        executor.sync()
        built = executor.setup_seconds()
        start = time.perf_counter()
        executor._execute(op, values, depth)
        executor.sync()
        seconds = time.perf_counter() - start
        built = executor.setup_seconds() - built  # building programs, on a first call
        if built > 0:
            seconds = max(0.0, seconds - built)
            self.setup_seconds += built
        self._count(op, values, start, seconds, seconds)

    def _count(self, op, values: dict, start: float, seconds, row_seconds: float) -> None:
        """One call of `op`: its row counts it, its event (`seconds`: a float, or the
        events' times until `_resolve`) is recorded."""
        record = self.records.get(op)
        if record is None:
            record = self.records[op] = _OpRecord(op)
        flops, nbytes, shapes = op_cost(op, values)
        row = record.row
        row.calls += 1
        row.seconds += row_seconds
        row.flops += flops
        row.bytes += nbytes
        self.events.append((record, start, seconds, flops, nbytes, shapes))

    def _resolve(self) -> None:
        """The device-timed calls of the run that ended: their seconds from their events,
        added to their rows, and their place in the trace (the module doc)."""
        at = None           # where the previous call ended, on the trace's clock
        device_end = None   # its last event's end (device ns), when it ran on the device
        for index in self._pending:
            record, start, times, flops, nbytes, shapes = self.events[index]
            seconds, span = times.resolve()
            if at is None:
                at = max(start, self._trace_end)
            elif span is not None and device_end is not None:
                at += max(0, span[0] - device_end) * 1e-9
            device_end = span[1] if span is not None else None
            record.row.seconds += seconds
            self.events[index] = (record, at, seconds, flops, nbytes, shapes)
            at += seconds
        if at is not None:
            self._trace_end = at
        self._pending = []

    # -- results ----------------------------------------------------------------------------------
    @property
    def calls(self) -> int:
        return len(self.events)

    def by_op(self) -> list[Row]:
        return sorted((r.row for r in self.records.values()), key=lambda r: -r.seconds)

    def by_kind(self) -> list[Row]:
        kinds: dict = {}
        for record in self.records.values():
            row = record.row
            total = kinds.get(row.kind)
            if total is None:
                total = kinds[row.kind] = Row(row.kind, row.kind)
            total.calls += row.calls
            total.seconds += row.seconds
            total.flops += row.flops
            total.bytes += row.bytes
        return sorted(kinds.values(), key=lambda r: -r.seconds)

    def table(self, top: int | None = 20) -> str:
        """The per-kind table, then the per-op one (the `top` slowest ops; None: all)."""
        in_ops = sum(r.row.seconds for r in self.records.values())
        run = self.run_seconds or in_ops
        share = (f"{100 * in_ops / run:.1f}%" if run else "-")
        lines = [f"profile: {self.runs} run{'s' if self.runs != 1 else ''}, "
                 f"{self.calls} op calls; {1e3 * in_ops:.3f} ms in ops of "
                 f"{1e3 * run:.3f} ms run time ({share}; the rest: binding, I/O, views)"]
        if self.setup_seconds:
            lines.append(f"left out: {1e3 * self.setup_seconds:.3f} ms building programs "
                         f"(first calls)")
        kinds = self.by_kind()
        lines.append("")
        lines.extend(_format(kinds, run, "kind", with_kind=False))
        ops = self.by_op()
        shown = ops if top is None else ops[:top]
        lines.append("")
        title = "op" if len(shown) == len(ops) else f"op (top {len(shown)} of {len(ops)})"
        lines.extend(_format(shown, run, title, with_kind=True))
        return "\n".join(lines)

    def chrome_trace(self) -> dict:
        events = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 1,
                   "args": {"name": "palimpsest"}}]
        for record, start, seconds, flops, nbytes, shapes in self.events:
            row = record.row
            args = {"op": row.kind, "loc": record.loc, "shapes": shapes,
                    "buffers": record.buffers}
            if flops:
                args["flops"] = flops
            if nbytes:
                args["bytes"] = nbytes
            events.append({"name": row.name, "cat": row.kind, "ph": "X", "pid": 1, "tid": 1,
                           "ts": round((start - self.origin) * 1e6, 3),
                           "dur": round(seconds * 1e6, 3), "args": args})
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def write_chrome_trace(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as file:
            json.dump(self.chrome_trace(), file)


def _format(rows: list[Row], run: float, title: str, with_kind: bool) -> list[str]:
    width = max([len(title)] + [len(r.name) for r in rows])
    width = min(width, 48)
    kind_width = max([4] + [len(r.kind) for r in rows]) if with_kind else 0
    head = f"{title:<{width}}"
    if with_kind:
        head += f"  {'kind':<{kind_width}}"
    head += f"  {'calls':>6}  {'total ms':>10}  {'mean ms':>9}  {'share':>6}  {'GFLOP/s':>8}  {'GB/s':>7}"
    lines = [head, "-" * len(head)]
    for r in rows:
        name = r.name if len(r.name) <= width else "…" + r.name[-(width - 1):]
        line = f"{name:<{width}}"
        if with_kind:
            line += f"  {r.kind:<{kind_width}}"
        share = f"{100 * r.seconds / run:.1f}%" if run else "-"
        gflops = f"{r.gflops:.2f}" if r.gflops is not None else "-"
        gbytes = f"{r.gbytes:.2f}" if r.gbytes is not None else "-"
        line += (f"  {r.calls:>6}  {1e3 * r.seconds:>10.3f}  {1e3 * r.mean:>9.4f}  "
                 f"{share:>6}  {gflops:>8}  {gbytes:>7}")
        lines.append(line)
    return lines


# -- what an op is, costs and touches ----------------------------------------------------------

def op_kind(op) -> str:
    """The op's name; a graph op run as `kernel.generic` / `buffer.compute` is named with
    it: `kernel.generic(graph.cast)`."""
    if op.name in ("kernel.generic", "buffer.compute") and "op" in op.properties:
        return f"{op.name}({op.properties['op'].value})"
    return op.name


def op_label(op) -> str:
    """The op in a table: its location's name (an ONNX node's), else its first result
    buffer's name, else its kind."""
    loc = op.loc
    name = getattr(loc, "name", None)
    if name:
        return name
    if loc is not None and loc.describe() not in ("<unknown>", ""):
        return loc.describe()
    outs = list(getattr(op, "outs", ())) or op.operands[-1:]
    for value in outs:
        if value.name_hint:
            return "%" + value.name_hint
    return op_kind(op)


def _operands(op) -> tuple[list, list, list]:
    if op.name == "buffer.copy":
        return [op.operands[0]], [op.operands[1]], []
    return list(op.ins), list(op.outs), list(getattr(op, "workspaces", ()))


def op_cost(op, values: dict) -> tuple[int, int, list]:
    """(FLOPs, bytes of ins and outs, [in shapes] + [out shapes]) of one call of `op`, at
    the shapes its buffers have now."""
    ins, outs, _ = _operands(op)
    in_arrays = [values.get(v) for v in ins]
    out_arrays = [values.get(v) for v in outs]
    nbytes = 0
    shapes = []
    for array in in_arrays + out_arrays:
        nbytes += int(getattr(array, "nbytes", 0) or 0)
        shapes.append(list(getattr(array, "shape", ())))
    flops = 0
    if op.name in FLOP_OPS and out_arrays and len(in_arrays) >= 2:
        out, a, b = out_arrays[0], in_arrays[0], in_arrays[1]
        out_size = _size(getattr(out, "shape", ()))
        if op.name == "kernel.conv2d":
            # W holds (C_out x C_in/group x kh x kw) values in any layout (prepacked too):
            # each output element reads C_in/group * kh * kw of them
            out_shape = getattr(out, "shape", ())
            channels = out_shape[1] if len(out_shape) > 1 else 0
            if channels:
                flops = 2 * out_size * (_size(getattr(b, "shape", ())) // channels)
        else:
            shape = tuple(getattr(a, "shape", ()))
            trans = op.properties.get("transA")
            trans = bool(getattr(trans, "value", 0)) if trans is not None else False
            if len(shape) == 1:
                k = shape[0]
            elif len(shape) >= 2:
                k = shape[-2] if trans else shape[-1]
            else:
                k = 0
            flops = 2 * out_size * k
    return flops, nbytes, shapes


def _size(shape) -> int:
    count = 1
    for d in shape:
        count *= int(d)
    return count


def buffer_places(op) -> list[dict]:
    """Per operand buffer of `op`: its role (in/out/workspace), name, and where the plan put
    it: pool, byte offset (through views and reshapes) and bytes; pool None otherwise,
    with `source` saying what it is."""
    ins, outs, workspaces = _operands(op)
    places = []
    for role, group in (("in", ins), ("out", outs), ("workspace", workspaces)):
        for index, value in enumerate(group):
            place = {"role": f"{role}{index}", "name": value.name_hint or ""}
            place.update(_place(value))
            nbytes = value.type.nbytes() if hasattr(value.type, "nbytes") else None
            place["bytes"] = nbytes
            places.append(place)
    return places


def _place(value) -> dict:
    offset = 0
    while True:
        owner = getattr(value, "op", None)
        if owner is None:
            return {"pool": None, "source": "argument"}
        if owner.name == "buffer.reshape":
            value = owner.operands[0]
        elif owner.name == "buffer.view":
            if "offset" not in owner.properties:
                return {"pool": None, "source": "view at a run-time offset"}
            offset += owner.properties["offset"].value
            value = owner.operands[0]
        elif owner.name == "memory.arena":
            return {"pool": owner.properties["pool"].root, "offset": offset}
        elif owner.name == "buffer.constant":
            return {"pool": None, "source": "constant"}
        elif owner.name == "buffer.alloc":
            return {"pool": None, "source": "run-time allocation"}
        else:
            return {"pool": None, "source": owner.name}


__all__ = ["Profiler", "Row", "buffer_places", "op_cost", "op_kind", "op_label"]
