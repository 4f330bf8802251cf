"""Passes, their registry, the pipeline syntax, and the pass manager.

A pass is a frozen dataclass (`register_pass` makes it one) with a kebab-case `name`;
its fields are its options and `apply(module)` calls a plain function that does the work:

    @register_pass
    class DeadCodeElimination(ModulePass):
        name = "dce"
        def apply(self, module): eliminate_dead_code(module)

Pipelines are written `a,b{opt=1 other=x},c` (options separated by spaces or commas).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, ClassVar

from palimpsest.ir.core import Operation
from palimpsest.ir.diagnostics import DiagnosticError
from palimpsest.ir.verifier import verify


class PipelineError(ValueError):
    """A pipeline string that names an unknown pass or option, or is malformed."""


@dataclasses.dataclass(frozen=True)
class ModulePass:
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    def apply(self, module: Operation) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def __post_init__(self):
        for f in dataclasses.fields(self):
            minimum = f.metadata.get("minimum")
            value = getattr(self, f.name)
            if minimum is not None and value < minimum:
                raise PipelineError(f"option '{f.name.replace('_', '-')}' of pass "
                                    f"'{self.name}' must be at least {minimum}, got {value}")

    def spelling(self) -> str:
        """The pipeline text that recreates this pass with its options."""
        options = [f"{f.name.replace('_', '-')}={_format_option(getattr(self, f.name))}"
                   for f in dataclasses.fields(self)
                   if getattr(self, f.name) != f.default]
        return self.name + ("{" + " ".join(options) + "}" if options else "")


def option(default, minimum=None):
    """A pass option with a lower bound, checked when the pass is made (from a pipeline
    or in code): `max_iterations: int = option(10, minimum=1)`."""
    return dataclasses.field(default=default, metadata={"minimum": minimum})


@dataclasses.dataclass(frozen=True)
class MemorySearchPass(ModulePass):
    """The options a pass that searches for fewer live bytes shares (schedule-for-memory
    orders ops, plan-memory places buffers): which search, how long it may take, and
    whether the function's inputs count as activations (live in the planned memory)."""

    algorithm: str = "auto"
    time_budget: float = option(1.0, minimum=0)
    inputs_as_activations: bool = False


def _format_option(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_PASSES: dict[str, type] = {}


def register_pass(cls):
    """Class decorator of every pass: make `cls` a frozen dataclass (its fields are its
    options) and let pipelines name it."""
    cls = dataclasses.dataclass(frozen=True)(cls)
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no pass name")
    _PASSES[cls.name] = cls
    return cls


def registered_passes() -> dict[str, type]:
    from palimpsest.passes import load_all

    load_all()
    return dict(_PASSES)


def _convert(pass_name: str, option: str, text: str, kind):
    try:
        if kind in (bool, "bool"):
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if kind in (int, "int"):
            return int(text, 0)
        if kind in (float, "float"):
            return float(text)
        return text
    except ValueError:
        kind_name = getattr(kind, "__name__", kind)
        raise PipelineError(f"option '{option}' of pass '{pass_name}' expects {kind_name}, "
                            f"got '{text}'") from None


# Named pipelines: a name in a pipeline expands to these passes.
PIPELINES = {
    "default": "infer-shapes,canonicalize,schedule-for-memory,bufferize,lower-to-kernels,"
               "schedule-for-memory,insert-deallocs,plan-memory",
    "to-buffers": "infer-shapes,bufferize,insert-deallocs",
    "to-kernels": "infer-shapes,bufferize,lower-to-kernels,insert-deallocs",
}


# Options of named pipelines: `default{schedule=false}` leaves out schedule-for-memory.
PIPELINE_SWITCHES = {"schedule": "schedule-for-memory"}


def _switched_off(name: str, options_text: str) -> set:
    """The passes a named pipeline's options turn off (`NAME=false`)."""
    off = set()
    for item in options_text.replace(",", " ").split():
        key, eq, value = item.partition("=")
        target = PIPELINE_SWITCHES.get(key)
        if target is None or target not in PIPELINES[name]:
            raise PipelineError(f"pipeline '{name}' has no option '{key}'; spell out its "
                                f"passes: {PIPELINES[name]}")
        if not _convert(name, key, value if eq else "true", bool):
            off.add(target)
    return off


def parse_pipeline(text: str) -> list[ModulePass]:
    """Parse `a,b{opt=1},c` into pass instances; a named pipeline (`default`) expands
    to its passes (`default{schedule=false}`: without schedule-for-memory)."""
    from palimpsest.passes import load_pass

    result = []
    for name, options_text in _split_pipeline(text):
        if name in PIPELINES:
            off = _switched_off(name, options_text)
            result.extend(p for p in parse_pipeline(PIPELINES[name]) if p.name not in off)
            continue
        load_pass(name)
        cls = _PASSES.get(name)
        if cls is None:
            known = ", ".join(sorted(registered_passes()))
            raise PipelineError(f"unknown pass '{name}' (known passes: {known})")
        fields = {f.name.replace("_", "-"): f for f in dataclasses.fields(cls)}
        options = {}
        for item in options_text.replace(",", " ").split():
            key, eq, value = item.partition("=")
            field = fields.get(key) or fields.get(key.replace("_", "-"))
            if field is None:
                available = ", ".join(sorted(fields)) or "none"
                raise PipelineError(f"pass '{name}' has no option '{key}' "
                                    f"(its options: {available})")
            kind = field.type if not isinstance(field.type, str) else field.type
            options[field.name] = _convert(name, key, value if eq else "true", kind)
        result.append(cls(**options))
    return result


def _split_pipeline(text: str):
    items, depth, current = [], 0, []
    for ch in text:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth < 0:
                raise PipelineError(f"unbalanced '}}' in pipeline '{text}'")
        if ch == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth:
        raise PipelineError(f"unbalanced '{{' in pipeline '{text}'")
    items.append("".join(current))
    parsed = []
    if len(items) == 1 and not items[0].strip():
        return parsed  # the empty pipeline
    for item in items:
        item = item.strip()
        if not item:
            raise PipelineError(f"empty pass name in pipeline '{text}'")
        name, brace, rest = item.partition("{")
        if brace and not rest.endswith("}"):
            raise PipelineError(f"malformed options in '{item}'")
        parsed.append((name.strip(), rest[:-1] if brace else ""))
    return parsed


class PassManager:
    """Runs passes in order, verifying after each (unless told not to)."""

    def __init__(self, passes: list[ModulePass], verify_each: bool = True,
                 after_pass: Callable[[ModulePass, Operation], None] | None = None):
        self.passes = passes
        self.verify_each = verify_each
        self.after_pass = after_pass
        self.timings: list[tuple[str, float]] = []

    def run(self, module: Operation) -> None:
        for pass_ in self.passes:
            start = time.perf_counter()
            pass_.apply(module)
            self.timings.append((pass_.spelling(), time.perf_counter() - start))
            if self.verify_each:
                start = time.perf_counter()
                try:
                    verify(module)
                except DiagnosticError as error:
                    error.message = f"{error.message} (after pass '{pass_.name}')"
                    raise
                self.timings.append(("(verifier)", time.perf_counter() - start))
            if self.after_pass is not None:
                self.after_pass(pass_, module)
