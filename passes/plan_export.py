"""Exports of a memory plan: JSON, a C header of offsets, and a picture (SVG or PNG).

    report = plan_for_export(module)          # plans it if needed (graph or buffer level)
    text = to_json(report)                    # or to_c_header / to_svg; to_png(report, path)

The plan comes either from running `plan-memory` (:class:`PlanReport`, with the
lifetimes the planner used: inputs and outputs live for the whole run unless planned as
activations) or, for IR that is already planned, from the IR itself
(:func:`report_from_ir`: every view of a pool's arena, with the lifetime liveness gives
it). The JSON file is the plan as data; the C header is what firmware embeds as an
offline plan (TFLite Micro's use case): one `#define` per pool size and per buffer
offset, and a const array of structs; the picture is time × address, one band per pool,
one rectangle per buffer.

PNG needs matplotlib (`pip install 'palimpsest[plot]'`); nothing else here does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from palimpsest.dialects.buffer import AllocOp
from palimpsest.dialects.memory import PoolOp
from palimpsest.ir.core import Operation
from palimpsest.passes.liveness import compute_liveness, functions_of, value_names
from palimpsest.passes.plan_memory import (
    FunctionPlan, PlacedBuffer, PlanReport, PoolPlan, plan_memory,
)
from palimpsest.passes.planners import Interval, lower_bound

__all__ = [
    "EXPORT_FORMATS", "ExportError", "PoolUsage", "plan_for_export", "pool_usage",
    "report_from_ir", "to_json",
    "to_c_header", "to_svg", "to_png", "export",
]

EXPORT_FORMATS = ("json", "c-header", "svg", "png")
# the default pipeline up to plan-memory (passes/pass_manager.py PIPELINES["default"]):
# the plan firmware embeds is the one the kernels, with their workspaces, run in
GRAPH_PIPELINE = ("infer-shapes,canonicalize,{schedule}bufferize{{inputs-as-activations={iaa}}},"
                  "lower-to-kernels,{schedule}insert-deallocs")
SCHEDULE = "schedule-for-memory{{inputs-as-activations={iaa}}},"

CLASS_COLORS = {
    "activation": "#4e79a7", "workspace": "#f28e2b", "input": "#59a14f",
    "output": "#e15759", "constant": "#bab0ac",
}


class ExportError(Exception):
    """An export that cannot be made (e.g. PNG without matplotlib): a one-line message."""


# ---------------------------------------------------------------------------- getting a plan

def plan_for_export(module: Operation, algorithm: str = "auto", time_budget: float = 1.0,
                    inputs_as_activations: bool = False, default_alignment: int = 64,
                    verify_each: bool = True, schedule: bool = True) -> PlanReport:
    """Bring `module` to planned IR and return its plan.

    Graph-level input runs the default pipeline up to plan-memory first (without
    `schedule-for-memory` when `schedule` is false: file order); buffer-level input with
    static allocs is planned with `plan-memory`; planned input is read back.
    """
    from palimpsest.passes.pass_manager import PassManager, parse_pipeline
    from palimpsest.ir.verifier import verify

    if any(op.name.startswith("graph.") for op in module.walk(include_self=False)):
        iaa = "true" if inputs_as_activations else "false"
        scheduling = SCHEDULE.format(iaa=iaa) if schedule else ""
        PassManager(parse_pipeline(GRAPH_PIPELINE.format(iaa=iaa, schedule=scheduling)),
                    verify_each=verify_each).run(module)
    report = plan_memory(module, algorithm, time_budget, inputs_as_activations,
                         default_alignment)
    if verify_each:
        verify(module)
    from_ir = report_from_ir(module)
    planned = {fn.function for fn in report.functions}
    report.functions.extend(fn for fn in from_ir.functions if fn.function not in planned)
    report.pools = from_ir.pools
    return report


def report_from_ir(module: Operation) -> PlanReport:
    """The plan written in planned IR: pools and the views of their arenas."""
    report = PlanReport()
    pools = {}
    for op in module.walk(include_self=False):
        if isinstance(op, PoolOp):
            size = op.properties.get("size")
            pools[op.pool_name] = {"size": size.value if size is not None else 0,
                                   "capacity": op.capacity_bytes,
                                   "alignment": op.alignment_bytes}
    report.pools = pools
    for func in functions_of(module):
        liveness = compute_liveness(func)
        names = value_names(func)
        fn = FunctionPlan(liveness.name, len(liveness.ops))
        members: dict = {}
        copied = set()
        for record in liveness.buffers:
            op = record.op
            if op is None or isinstance(op, AllocOp) or "offset" not in op.properties:
                continue
            pool = op.operands[0].owner.properties["pool"].root
            offset = op.properties["offset"].value
            loc = op.loc
            fn.buffers.append(PlacedBuffer(names.get(record.value, "%?"), record.kind, pool,
                                           offset, record.size or 0, record.start, record.end,
                                           loc.describe() if loc is not None else ""))
            members.setdefault(pool, []).append(fn.buffers[-1])
            for user in record.value.users():  # an input copied into the arena
                if user.name == "buffer.copy" and user.operands[1] is record.value:
                    copied.add(user.operands[0])
        for name in pools:
            group = members.get(name)
            if not group:
                continue
            intervals = [Interval(f"{b.name}#{i}", b.start, b.end + 1, b.size)
                         for i, b in enumerate(group)]
            fn.pools.append(PoolPlan(name, max(b.offset + b.size for b in group),
                                     lower_bound(intervals), pools[name]["capacity"],
                                     pools[name]["alignment"], "from IR", len(group)))
        fn.lower_bound = lower_bound([Interval(f"{b.name}#{i}", b.start, b.end + 1, b.size)
                                      for i, b in enumerate(fn.buffers)])
        fn.dynamic = [names.get(r.value, "%?") for r in liveness.buffers
                      if (r.is_alloc or r.external) and r.dynamic]
        fn.external = sum(r.size for r in liveness.buffers if r.external and not r.dynamic
                          and r.value not in copied)
        report.functions.append(fn)
    return report


@dataclass
class PoolUsage:
    """One pool of one function of planned IR, beside what it would cost unplanned."""

    function: str
    pool: str
    planned: int        # bytes the plan uses: the highest byte any buffer reaches
    lower_bound: int    # the most bytes live at one moment: no plan does better
    separate: int       # every buffer in an allocation of its own: the sum of their sizes
    buffers: int

    @property
    def saving(self) -> int:
        return self.separate - self.planned


def pool_usage(module: Operation) -> list:
    """Per function and pool of planned IR: planned bytes, lower bound and the sum of
    its buffers' sizes (`PoolUsage`); empty when nothing is planned."""
    usage = []
    for fn in report_from_ir(module).functions:
        for pool in fn.pools:
            sizes = [b.size for b in fn.buffers if b.pool == pool.pool]
            usage.append(PoolUsage(fn.function, pool.pool, pool.size, pool.lower_bound,
                                   sum(sizes), len(sizes)))
    return usage


# ---------------------------------------------------------------------------- JSON

def to_json(report: PlanReport, source: str | None = None) -> str:
    data = {"format": "palimpsest-memory-plan", "version": 1}
    if source is not None:
        data["source"] = source
    body = report.to_dict()
    for fn_data, fn in zip(body["functions"], report.functions):
        fn_data["external_bytes"] = fn.external
        for item, buffer in zip(fn_data["buffers"], fn.buffers):
            if buffer.location:
                item["location"] = buffer.location
    data.update(body)
    return json.dumps(data, indent=2) + "\n"


# ---------------------------------------------------------------------------- C header

def _c_ident(text: str) -> str:
    ident = re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").upper()
    if not ident or ident[0].isdigit():
        ident = "B" + ident if ident else "B"
    return ident


def _unique(ident: str, used: set) -> str:
    from palimpsest.ir.resources import unique_name

    return unique_name(ident, used, first_suffix=2)


def to_c_header(report: PlanReport, source: str | None = None, prefix: str = "PAL") -> str:
    """A C header: pool sizes, per-buffer offsets (#defines) and a const struct array per
    function. Valid C89 and C++; include it where the arenas are defined."""
    prefix = _c_ident(prefix)
    lower = prefix.lower()
    guard = f"{prefix}_MEMORY_PLAN_H"
    big = any(b.offset + b.size >= 2 ** 32 for fn in report.functions for b in fn.buffers) \
        or any((p.get("size") or 0) >= 2 ** 32 for p in report.pools.values())
    int_type = "uint64_t" if big else "uint32_t"
    suffix = "ull" if big else "u"
    lines = [
        "/* Offline memory plan generated by palimpsest-plan"
        + (f" from {_comment(source)}" if source else "") + ".",
        " * Offsets are bytes from the start of each pool's arena; first_op/last_op are the",
        " * positions (pre-order) of the ops between which a buffer is live, inclusive.",
        " * Define each arena with its pool's size and alignment, e.g.",
    ]
    pool_names = list(report.pools)
    pool_ids = {}
    used: set = set()
    for name in pool_names:
        pool_ids[name] = _unique(f"{prefix}_POOL_{_c_ident(name)}", used)
    if pool_names:
        first = pool_names[0]
        lines.append(f" *   static uint8_t {lower}_arena_{_c_ident(first).lower()}"
                     f"[{pool_ids[first]}_SIZE] __attribute__((aligned("
                     f"{pool_ids[first]}_ALIGNMENT)));")
    lines += [" */", f"#ifndef {guard}", f"#define {guard}", "", "#include <stdint.h>", ""]
    for index, name in enumerate(pool_names):
        info = report.pools[name]
        ident = pool_ids[name]
        lines.append(f"/* pool @{_comment(name)} */")
        lines.append(f"#define {ident} {index}")
        lines.append(f"#define {ident}_SIZE {info.get('size') or 0}{suffix}")
        lines.append(f"#define {ident}_ALIGNMENT {info.get('alignment') or 1}u")
        if info.get("capacity") is not None:
            lines.append(f"#define {ident}_CAPACITY {info['capacity']}{suffix}")
    lines.append(f"#define {prefix}_POOL_COUNT {len(pool_names)}")
    lines += [
        "",
        f"typedef struct {lower}_buffer_plan {{",
        "  const char *name;",
        "  uint32_t pool;",
        f"  {int_type} offset;",
        f"  {int_type} size;",
        "  uint32_t first_op;",
        "  uint32_t last_op;",
        f"}} {lower}_buffer_plan_t;",
        "",
    ]
    for fn in report.functions:
        fn_ident = _unique(f"{prefix}_{_c_ident(fn.function)}", used)
        lines.append(f"/* function @{_comment(fn.function)}: {len(fn.buffers)} planned buffers */")
        rows = []
        for buffer in fn.buffers:
            ident = _unique(f"{fn_ident}_{_c_ident(buffer.name)}", used)
            pool = pool_ids.get(buffer.pool, "0")
            lines.append(f"#define {ident}_OFFSET {buffer.offset}{suffix}  "
                         f"/* {buffer.kind}, {buffer.size} bytes in @{_comment(buffer.pool)} */")
            lines.append(f"#define {ident}_SIZE {buffer.size}{suffix}")
            lines.append(f"#define {ident}_POOL {pool}")
            rows.append(f"  {{{_c_string(buffer.name)}, {pool}, {buffer.offset}{suffix}, "
                        f"{buffer.size}{suffix}, {buffer.start}u, {buffer.end}u}}")
        lines.append(f"#define {fn_ident}_BUFFER_COUNT {len(rows)}")
        if rows:
            lines.append(f"static const {lower}_buffer_plan_t {fn_ident.lower()}_plan[] = {{")
            lines.append(",\n".join(rows))
            lines.append("};")
        lines.append("")
    lines.append(f"#endif /* {guard} */")
    return "\n".join(lines) + "\n"


def _comment(text: str) -> str:
    return text.replace("*/", "* /")


def _c_string(text: str) -> str:
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            out.extend(f"\\{b:03o}" for b in ch.encode("utf-8"))
    out.append('"')
    return "".join(out)


# ---------------------------------------------------------------------------- pictures

def _bands(report: PlanReport):
    for fn in report.functions:
        for pool in fn.pools:
            yield fn, pool, [b for b in fn.buffers if b.pool == pool.pool]


def _time_range(fn: FunctionPlan) -> tuple[int, int]:
    """The op positions worth drawing: from the first buffer that is not an input or
    output held for the whole run (the constants before it are not planned) to exit."""
    starts = [b.start for b in fn.buffers if b.start > 0 or b.kind not in ("input", "output")]
    return (min(starts) if starts else 0), max(fn.ops, 1)


def to_svg(report: PlanReport, title: str | None = None) -> str:
    """Time (op positions) across, addresses up; one band per function and pool, one
    rectangle per buffer (hover for its name, bytes and lifetime). Plain SVG, no
    dependencies."""
    left, right, top, width, height, gap = 100, 30, 60, 900, 220, 70
    bands = list(_bands(report))
    total_height = top + max(len(bands), 1) * (height + gap) + 10
    total_width = left + width + right
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_width}" '
        f'height="{total_height}" viewBox="0 0 {total_width} {total_height}" '
        'font-family="sans-serif" font-size="12">',
        f"<title>{escape(title or 'memory plan')}</title>",
        f'<text x="{left}" y="22" font-size="16">{escape(title or "memory plan")}</text>',
    ]
    x = left
    for kind, color in CLASS_COLORS.items():
        out.append(f'<rect x="{x}" y="32" width="12" height="12" fill="{color}"/>')
        out.append(f'<text x="{x + 16}" y="43">{kind}</text>')
        x += 110
    if not bands:
        out.append(f'<text x="{left}" y="{top + 20}">no planned buffers</text>')
    for index, (fn, pool, buffers) in enumerate(bands):
        y0 = top + index * (height + gap) + 20
        span = max(pool.size, 1)
        lo, hi = _time_range(fn)
        steps = max(hi - lo, 1)
        xs, ys = width / steps, height / span
        label = (f"@{fn.function} pool @{pool.pool}: {pool.size} bytes, lower bound "
                 f"{pool.lower_bound}, ratio {pool.ratio:.4f}")
        out.append(f'<g class="band" data-pool={quoteattr(pool.pool)} '
                   f'data-function={quoteattr(fn.function)}>')
        out.append(f'<text x="{left}" y="{y0 - 6}">{escape(label)}</text>')
        out.append(f'<rect x="{left}" y="{y0}" width="{width}" height="{height}" '
                   'fill="#f7f7f7" stroke="#888"/>')
        for buffer in buffers:
            start = max(buffer.start, lo)
            bx = left + (start - lo) * xs
            bw = max((buffer.end - start + 1) * xs, 0.5)
            bh = max(buffer.size * ys, 0.5)
            by = y0 + height - (buffer.offset + buffer.size) * ys
            color = CLASS_COLORS.get(buffer.kind, "#999999")
            tip = (f"{buffer.name} ({buffer.kind}): {buffer.size} bytes at "
                   f"[{buffer.offset}, {buffer.offset + buffer.size}), live "
                   f"[{buffer.start}, {buffer.end}]")
            out.append(f'<rect x="{bx:.2f}" y="{by:.2f}" width="{bw:.2f}" height="{bh:.2f}" '
                       f'fill="{color}" stroke="#ffffff" stroke-width="0.5">'
                       f"<title>{escape(tip)}</title></rect>")
        if pool.lower_bound and pool.lower_bound <= span:
            ly = y0 + height - pool.lower_bound * ys
            out.append(f'<line x1="{left}" y1="{ly:.2f}" x2="{left + width}" y2="{ly:.2f}" '
                       'stroke="#333" stroke-dasharray="4 3"><title>lower bound</title></line>')
        out.append(f'<text x="{left - 6}" y="{y0 + 10}" text-anchor="end">{pool.size}</text>')
        out.append(f'<text x="{left - 6}" y="{y0 + height}" text-anchor="end">0</text>')
        for k in range(5):
            step = round(k * (steps - 1) / 4) if steps > 1 else 0
            tx = left + (step + 0.5) * xs
            out.append(f'<text x="{tx:.2f}" y="{y0 + height + 14}" '
                       f'text-anchor="middle">{lo + step}</text>')
        out.append(f'<text x="{left + width / 2}" y="{y0 + height + 30}" '
                   'text-anchor="middle">op position</text>')
        out.append(f'<text x="{left - 40}" y="{y0 + height / 2}" text-anchor="middle" '
                   f'transform="rotate(-90 {left - 40} {y0 + height / 2})">bytes</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def to_png(report: PlanReport, path: str, title: str | None = None) -> None:
    """The same picture as :func:`to_svg`, drawn by matplotlib into a PNG file."""
    try:
        import matplotlib
    except ImportError:
        raise ExportError("PNG export needs matplotlib, which is not installed: install it "
                          "with pip install 'palimpsest[plot]', or export svg") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    bands = list(_bands(report))
    fig, axes = plt.subplots(max(len(bands), 1), 1, figsize=(10, 2.8 * max(len(bands), 1)),
                             squeeze=False)
    for ax, (fn, pool, buffers) in zip(axes[:, 0], bands):
        for buffer in buffers:
            ax.add_patch(Rectangle((buffer.start, buffer.offset), buffer.end - buffer.start + 1,
                                   buffer.size, facecolor=CLASS_COLORS.get(buffer.kind, "#999"),
                                   edgecolor="white", linewidth=0.3))
        ax.set_xlim(*_time_range(fn))
        ax.set_ylim(0, max(pool.size, 1))
        if pool.lower_bound:
            ax.axhline(pool.lower_bound, color="#333", linestyle="--", linewidth=0.8)
        ax.set_title(f"@{fn.function} pool @{pool.pool}: {pool.size} bytes, lower bound "
                     f"{pool.lower_bound}, ratio {pool.ratio:.4f}", fontsize=9)
        ax.set_xlabel("op position")
        ax.set_ylabel("bytes")
    if not bands:
        axes[0, 0].text(0.5, 0.5, "no planned buffers", ha="center")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(path, format="png", dpi=120)
    except OSError as error:
        raise ExportError(f"cannot write '{path}': {error.strerror or error}") from None
    finally:
        plt.close(fig)


def export(report: PlanReport, fmt: str, source: str | None = None) -> str:
    """The text of a text export (json, c-header, svg)."""
    if fmt == "json":
        return to_json(report, source)
    if fmt == "c-header":
        return to_c_header(report, source)
    if fmt == "svg":
        return to_svg(report, f"memory plan of {source}" if source else None)
    raise ExportError(f"'{fmt}' is not a text export (one of json, c-header, svg)")
