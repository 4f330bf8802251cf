"""Structural comparison of IR, ignoring SSA names and source positions (TVMScript's
idea): two ops are equal when names, types, properties, attributes and the shape of
their use-def graph match."""

from __future__ import annotations

from palimpsest.ir.core import Operation


def first_difference(a: Operation, b: Operation) -> str | None:
    """None when `a` and `b` are structurally equal, else a description of the first
    difference found."""
    return _ops(a, b, {}, {}, "")


def structurally_equal(a: Operation, b: Operation) -> bool:
    return first_difference(a, b) is None


def _ops(a, b, values, blocks, path) -> str | None:
    where = f"{path}/{a.name}"
    if a.name != b.name:
        return f"{where}: op name {a.name} vs {b.name}"
    if [r.type for r in a.results] != [r.type for r in b.results]:
        return f"{where}: result types differ"
    if len(a.operands) != len(b.operands):
        return f"{where}: {len(a.operands)} vs {len(b.operands)} operands"
    for index, (x, y) in enumerate(zip(a.operands, b.operands)):
        if values.get(x) is not y:
            return f"{where}: operand #{index} refers to different values"
    if a.properties != b.properties:
        return f"{where}: properties {a.properties} vs {b.properties}"
    if a.attributes != b.attributes:
        return f"{where}: attributes {a.attributes} vs {b.attributes}"
    if a.location != b.location:
        return f"{where}: location {a.location} vs {b.location}"
    if len(a.successors) != len(b.successors) or any(
            blocks.get(x) is not y for x, y in zip(a.successors, b.successors)):
        return f"{where}: successors differ"
    for x, y in zip(a.results, b.results):
        values[x] = y
    if len(a.regions) != len(b.regions):
        return f"{where}: {len(a.regions)} vs {len(b.regions)} regions"
    for ra, rb in zip(a.regions, b.regions):
        if len(ra.blocks) != len(rb.blocks):
            return f"{where}: region with {len(ra.blocks)} vs {len(rb.blocks)} blocks"
        # blocks and values first (successors and graph regions may refer forward)
        for ba, bb in zip(ra.blocks, rb.blocks):
            blocks[ba] = bb
            if [x.type for x in ba.args] != [y.type for y in bb.args]:
                return f"{where}: block argument types differ"
            for x, y in zip(ba.args, bb.args):
                values[x] = y
            for oa, ob in zip(ba.ops, bb.ops):
                for x, y in zip(oa.results, ob.results):
                    values[x] = y
        for ba, bb in zip(ra.blocks, rb.blocks):
            if len(ba) != len(bb):
                return f"{where}: block with {len(ba)} vs {len(bb)} ops"
            for oa, ob in zip(ba.ops, bb.ops):
                problem = _ops(oa, ob, values, blocks, where)
                if problem:
                    return problem
    return None
