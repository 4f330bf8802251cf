"""File order and scheduled order side by side: two memory-plan pictures in one SVG.

`palimpsest-plan model.pal --export svg --compare-schedule` plans the model twice, once
in its file order (the default pipeline without `schedule-for-memory`) and once as the
default pipeline orders it, and draws each plan as `to_svg` does (time across, addresses
up, one rectangle per buffer, the dashed line at the lower bound: the most bytes live at
one moment), file order on the left. Each picture is scaled to its own pools' sizes;
the headings give the bounds in bytes. Plain SVG, no dependencies.
"""

from __future__ import annotations

import re
from xml.sax.saxutils import escape

from palimpsest.passes.plan_export import to_svg
from palimpsest.passes.plan_memory import PlanReport

__all__ = ["compare_orders_svg", "plan_both_orders"]


def plan_both_orders(module, algorithm: str = "auto", time_budget: float = 1.0,
                     inputs_as_activations: bool = False, default_alignment: int = 64):
    """(plan in file order, plan in scheduled order) of a graph-level `module` (which is
    left planned in the scheduled order)."""
    from palimpsest.passes.plan_export import plan_for_export

    file_order = plan_for_export(module.clone(), algorithm, time_budget,
                                 inputs_as_activations, default_alignment, schedule=False)
    scheduled = plan_for_export(module, algorithm, time_budget, inputs_as_activations,
                                default_alignment, schedule=True)
    return file_order, scheduled


def compare_orders_svg(file_order: PlanReport, scheduled: PlanReport,
                       title: str | None = None) -> str:
    """Two `to_svg` pictures side by side, each under its own heading with its bounds."""
    parts = [("file order", file_order), ("scheduled order", scheduled)]
    pictures = []
    for heading, report in parts:
        bounds = ", ".join(f"@{p.pool} bound {p.lower_bound} bytes"
                           for fn in report.functions for p in fn.pools)
        svg = to_svg(report, f"{heading}: {bounds}" if bounds else heading)
        body = svg.split("\n", 1)[1]  # drop the XML declaration
        width = int(re.search(r'width="(\d+)"', body).group(1))
        height = int(re.search(r'height="(\d+)"', body).group(1))
        pictures.append((body, width, height))
    total_width = sum(w for _, w, _ in pictures)
    total_height = max(h for _, _, h in pictures) + 30
    text = title or "file order and scheduled order"
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_width}" '
           f'height="{total_height}" viewBox="0 0 {total_width} {total_height}" '
           'font-family="sans-serif" font-size="12">',
           f"<title>{escape(text)}</title>",
           f'<text x="20" y="20" font-size="16">{escape(text)}</text>']
    x = 0
    for (body, width, height), (heading, _) in zip(pictures, parts):
        # nest each picture as an <svg> placed at its x: its own coordinates stay valid
        nested = body.replace("<svg ", f'<svg x="{x}" y="30" class="order" '
                                       f'data-order="{heading}" ', 1)
        out.append(nested.rstrip())
        x += width
    out.append("</svg>")
    return "\n".join(out) + "\n"
