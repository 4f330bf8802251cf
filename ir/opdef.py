"""Declaring an op, once: operands, results, properties, regions, traits, memory
effects, verifier. The declarations are class attributes; `@register_op` collects
them in order, installs accessors and registers the op under its name.

    @register_op
    class AddOp(Operation):
        name = "test.add"
        lhs = operand(AnyType)
        rhs = operand(AnyType)
        result = result_def()
        traits = (Pure(), SameOperandsAndResultType())

The text form is uniform (see ir.printer); an op only says which property, if any, is
printed as its leading `@symbol`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from palimpsest.ir.attributes import Attribute, DenseArrayAttr, StringAttr, SymbolRefAttr
from palimpsest.ir.core import Operation
from palimpsest.ir.types import Type

# ---------------------------------------------------------------------------
# Type constraints


class Constraint:
    """A predicate on a type with a description used in error messages."""

    def __init__(self, description: str, predicate: Callable[[Type], bool]):
        self.description = description
        self.predicate = predicate
        self.check = predicate  # `check(type) -> bool`, called directly (verifier hot path)

    def __or__(self, other: "Constraint") -> "Constraint":
        return Constraint(f"{self.description} or {other.description}",
                          lambda t: self.check(t) or other.check(t))


AnyType = Constraint("any type", lambda t: True)


def type_is(*classes) -> Constraint:
    names = " or ".join(getattr(c, "keyword", c.__name__) for c in classes)
    return Constraint(names, lambda t: isinstance(t, classes))


def exactly(type_: Type) -> Constraint:
    return Constraint(f"'{type_}'", lambda t: t == type_)


def _as_constraint(spec) -> Constraint:
    if spec is None:
        return AnyType
    if isinstance(spec, Constraint):
        return spec
    if isinstance(spec, type):
        return type_is(spec)
    if isinstance(spec, Type):
        return exactly(spec)
    raise TypeError(f"not a type constraint: {spec!r}")


# ---------------------------------------------------------------------------
# Field declarations (they are also the accessors)

SINGLE, OPTIONAL, VARIADIC = "single", "optional", "variadic"


class _Field:
    kind = SINGLE
    field_name = ""
    index = 0

    def __set_name__(self, owner, name):
        self.field_name = name


class _ValueDef(_Field):
    """An operand or result declaration; the subclass names the op's attributes it reads."""

    values = defs = direct = segments = ""

    def __init__(self, constraint=None, kind=SINGLE):
        self.constraint = _as_constraint(constraint)
        self.kind = kind

    def __get__(self, op, owner=None):
        if op is None:
            return self
        cls = type(op)
        values, defs = getattr(op, self.values), getattr(cls, self.defs)
        if getattr(cls, self.direct) and len(values) == len(defs):
            return values[self.index]  # one value per declaration (the common case)
        return _segment(op, values, defs, self.index, self.segments)


class OperandDef(_ValueDef):
    values, defs, direct, segments = (
        "operands", "operand_defs", "direct_operands", "operandSegmentSizes")


class ResultDef(_ValueDef):
    values, defs, direct, segments = (
        "results", "result_defs", "direct_results", "resultSegmentSizes")


class PropDef(_Field):
    """An inherent attribute (stored in `op.properties`)."""

    def __init__(self, attr_class=Attribute, optional=False, default=None, check=None,
                 description=None):
        self.attr_class = attr_class
        self.optional = optional or default is not None
        self.default = default
        self.check = check
        self.description = description or (
            attr_class.__name__ if isinstance(attr_class, type) else str(attr_class))

    def __get__(self, op, owner=None):
        if op is None:
            return self
        return op.properties.get(self.field_name, self.default)


class RegionDef(_Field):
    def __init__(self, single_block=False, kind=SINGLE):
        self.single_block = single_block
        self.kind = kind

    def __get__(self, op, owner=None):
        if op is None:
            return self
        return _segment(op, op.regions, type(op).region_defs, self.index, None)


def operand(constraint=None) -> OperandDef:
    return OperandDef(constraint)


def optional_operand(constraint=None) -> OperandDef:
    return OperandDef(constraint, OPTIONAL)


def variadic_operand(constraint=None) -> OperandDef:
    return OperandDef(constraint, VARIADIC)


def result_def(constraint=None) -> ResultDef:
    return ResultDef(constraint)


def variadic_result(constraint=None) -> ResultDef:
    return ResultDef(constraint, VARIADIC)


def prop(attr_class=Attribute, **kwargs) -> PropDef:
    return PropDef(attr_class, **kwargs)


def region_def(single_block=False) -> RegionDef:
    return RegionDef(single_block)


def variadic_region(single_block=False) -> RegionDef:
    return RegionDef(single_block, VARIADIC)


_FLEXIBLE: dict = {}  # id(defs) -> (defs, its optional and variadic groups)


def _flexible(defs) -> list:
    # Passes read op accessors thousands of times per module: compute a declaration
    # tuple's flexible groups once (the tuple is kept so an id is never reused).
    found = _FLEXIBLE.get(id(defs))
    if found is None or found[0] is not defs:
        found = _FLEXIBLE[id(defs)] = (defs, [d for d in defs if d.kind != SINGLE])
    return found[1]


def segment_sizes(op: Operation, items, defs, segment_prop) -> list[int] | str:
    """Sizes of each declared group, or an error message."""
    flexible = _flexible(defs)
    if not flexible:
        if len(items) != len(defs):
            return f"expected {len(defs)}, got {len(items)}"
        return [1] * len(defs)
    if len(flexible) == 1:
        fixed = len(defs) - 1
        extra = len(items) - fixed
        if extra < 0 or (flexible[0].kind == OPTIONAL and extra > 1):
            bound = "at most " + str(fixed + 1) if flexible[0].kind == OPTIONAL else f"at least {fixed}"
            return f"expected {bound}, got {len(items)}"
        return [extra if d.kind != SINGLE else 1 for d in defs]
    sizes = op.properties.get(segment_prop) if segment_prop else None
    if sizes is None and all(d.kind == OPTIONAL for d in flexible):
        # Without the property, optional groups fill in declaration order (ONNX's rule:
        # trailing optional inputs may be left out); any other pattern needs it.
        extra = len(items) - (len(defs) - len(flexible))
        if 0 <= extra <= len(flexible):
            result = []
            for d in defs:
                take = 1 if d.kind == SINGLE or extra > 0 else 0
                extra -= take if d.kind != SINGLE else 0
                result.append(take)
            return result
    if not isinstance(sizes, DenseArrayAttr) or len(sizes.values) != len(defs):
        return f"needs a '{segment_prop}' property with {len(defs)} entries"
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in sizes.values):
        return f"'{segment_prop}' must hold integers >= 0, got {sizes}"
    if sum(sizes.values) != len(items):
        return f"'{segment_prop}' sums to {sum(sizes.values)}, but there are {len(items)}"
    return list(sizes.values)


def _segment(op, items, defs, index, segment_prop):
    sizes = segment_sizes(op, items, defs, segment_prop)
    if isinstance(sizes, str):
        raise op.error(sizes)
    start = sum(sizes[:index])
    kind = defs[index].kind
    if kind == SINGLE:
        return items[start]
    group = items[start:start + sizes[index]]
    if kind == OPTIONAL:
        return group[0] if group else None
    return group


# ---------------------------------------------------------------------------
# Traits


class Trait:
    def verify(self, op: Operation) -> None:
        """Raise op.error(...) when the op breaks the trait."""

    def __eq__(self, other):
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self):
        return hash(type(self))


class Pure(Trait):
    """No memory effects and no side effects: removable when unused, CSE-able."""


class IsTerminator(Trait):
    def verify(self, op):
        if op.parent is not None and op.parent.last is not op:
            raise op.error("must be the last operation in its block")


class NoTerminator(Trait):
    """Blocks in this op's regions need not end with a terminator."""


class GraphRegion(Trait):
    """This op's regions are graph regions: no dominance, values may be used before
    they are defined (MLIR's RegionKind::Graph). A module is one."""


class IsolatedFromAbove(Trait):
    """Nested regions cannot use values defined outside the op."""


class SymbolTable(Trait):
    """The op's single region holds symbols whose names must be unique."""


class SymbolOp(Trait):
    """The op defines a symbol named by its `sym_name` property."""

    def verify(self, op):
        if not isinstance(op.properties.get("sym_name"), StringAttr):
            raise op.error("requires a 'sym_name' string property")


class FunctionLike(Trait):
    """Prints and parses in the function shape: `op @name(%a: T) -> T attributes {...} {...}`.
    The op has `sym_name`, `function_type` and optional `sym_visibility` properties and
    one region whose entry block arguments are the function's arguments."""


class HasParent(Trait):
    def __init__(self, *parent_names):
        self.parent_names = parent_names

    def verify(self, op):
        parent = op.parent_op
        if parent is None or parent.name not in self.parent_names:
            expected = ", ".join(f"'{n}'" for n in self.parent_names)
            raise op.error(f"expects parent op {expected}")


class SameOperandsAndResultType(Trait):
    def verify(self, op):
        types = [v.type for v in op.operands] + [r.type for r in op.results]
        if any(t != types[0] for t in types[1:]):
            raise op.error("requires the same type for all operands and results")


class SameOperandsAndResultShape(Trait):
    def verify(self, op):
        shapes = {getattr(v.type, "shape", None) for v in [*op.operands, *op.results]}
        if len(shapes) > 1:
            raise op.error("requires the same shape for all operands and results")


class InPlace(Trait):
    """Elementwise: result 0 may reuse the storage of an operand of the same type
    (a kernel reads element i of its operands before writing element i of its result).
    `operands`: the operand indices that may be reused; None: any same-typed operand.
    Bufferization decides whether it does (the operand must die at the op)."""

    def __init__(self, operands: tuple | None = None):
        self.operands = tuple(operands) if operands is not None else None

    def candidates(self, op: Operation) -> list[int]:
        """Operand indices whose storage result 0 may reuse."""
        indices = range(len(op.operands)) if self.operands is None else self.operands
        return [i for i in indices if i < len(op.operands)]


# ---------------------------------------------------------------------------
# Memory effects


READ, WRITE, ALLOCATE, FREE, ALIAS = "read", "write", "allocate", "free", "alias"


@dataclass(frozen=True)
class MemoryEffect:
    """`kind` on the operand/result called `on` (None: on some unnamed resource).
    ALIAS on a result names the operand it views through `source`."""

    kind: str
    on: str | None = None
    source: str | None = None


def reads(*names):
    return tuple(MemoryEffect(READ, n) for n in names)


def writes(*names):
    return tuple(MemoryEffect(WRITE, n) for n in names)


def allocates(*names):
    return tuple(MemoryEffect(ALLOCATE, n) for n in names)


def frees(*names):
    return tuple(MemoryEffect(FREE, n) for n in names)


def aliases(result: str, source: str):
    return (MemoryEffect(ALIAS, result, source),)


# ---------------------------------------------------------------------------
# Registration

_OPS: dict[str, type] = {}
_DIALECTS: set[str] = set()


def register_op(cls):
    """Collect the declarations of `cls`, install accessors, and register it."""
    if "." not in cls.name:
        raise ValueError(f"op name '{cls.name}' must be 'dialect.op'")
    operand_defs, result_defs, prop_defs, region_defs = [], [], {}, []
    def put(defs, name, value):  # a subclass redeclaring a field keeps its position
        found = [i for i, d in enumerate(defs) if d.field_name == name]
        if found:
            defs[found[0]] = value
        else:
            defs.append(value)

    for klass in reversed(cls.__mro__):
        for attr_name, value in vars(klass).items():
            if isinstance(value, OperandDef):
                put(operand_defs, attr_name, value)
            elif isinstance(value, ResultDef):
                put(result_defs, attr_name, value)
            elif isinstance(value, PropDef):
                prop_defs[attr_name] = value
            elif isinstance(value, RegionDef):
                put(region_defs, attr_name, value)
    for group in (operand_defs, result_defs, region_defs):
        for index, definition in enumerate(group):
            definition.index = index
    # ops with several optional/variadic groups carry MLIR's segment sizes as a property
    for segment_prop, defs in (("operandSegmentSizes", operand_defs),
                                ("resultSegmentSizes", result_defs)):
        if sum(d.kind != SINGLE for d in defs) > 1 and segment_prop not in prop_defs:
            prop_defs[segment_prop] = PropDef(DenseArrayAttr, description="an array<i32: ...>")
            prop_defs[segment_prop].field_name = segment_prop
    cls.operand_defs = tuple(operand_defs)
    cls.result_defs = tuple(result_defs)
    # No optional or variadic group: accessor i is item i (OperandDef.__get__'s fast path)
    cls.direct_operands = all(d.kind == SINGLE for d in operand_defs)
    cls.direct_results = all(d.kind == SINGLE for d in result_defs)
    cls.prop_defs = prop_defs
    cls.region_defs = tuple(region_defs)
    if not hasattr(cls, "effects"):
        cls.effects = ()
    if "memory_effects" not in vars(cls):
        cls.memory_effects = _declared_effects
    _OPS[cls.name] = cls
    _DIALECTS.add(cls.name.split(".", 1)[0])
    return cls


def _declared_effects(op):
    cls = type(op)
    # segment sizes once per op, not once per effect (liveness asks of every buffer use)
    groups = None if cls.direct_operands and cls.direct_results else operand_groups(op)
    result = []
    for effect in cls.effects:
        kind, on = effect.kind, effect.on
        if on is None:
            result.append((kind, None))
            continue
        target = groups[on] if groups is not None and on in groups else getattr(op, on)
        if isinstance(target, list):
            for value in target:
                result.append((kind, value))
        else:
            result.append((kind, target))
    return result


def operand_groups(op) -> dict:
    """The op's operand groups by declared name (a value, None or a list): every
    accessor at the cost of one (segment sizes are computed once)."""
    cls = type(op)
    defs = cls.operand_defs
    operands = op.operands
    if cls.direct_operands and len(operands) == len(defs):
        return {definition.field_name: value for definition, value in zip(defs, operands)}
    sizes = segment_sizes(op, operands, defs, "operandSegmentSizes")
    if isinstance(sizes, str):
        raise op.error(sizes)
    groups = {}
    position = 0
    for definition, size in zip(defs, sizes):
        kind = definition.kind
        if kind == VARIADIC:
            groups[definition.field_name] = operands[position:position + size]
        elif kind == SINGLE:
            groups[definition.field_name] = operands[position]
        else:
            groups[definition.field_name] = operands[position] if size else None
        position += size
    return groups


_DIALECT_LOADERS: dict[str, object] = {}


def register_dialect_loader(dialect: str, loader) -> None:
    """Make `dialect` known without importing it: `loader()` registers its ops (and
    types) the first time one of them is looked up, as MLIR's dialect registry does.
    Keeps tool start-up from importing dialects a file does not use."""
    if dialect not in _DIALECTS:
        _DIALECT_LOADERS[dialect] = loader


def load_dialect(dialect: str) -> None:
    loader = _DIALECT_LOADERS.pop(dialect, None)
    if loader is not None:
        loader()


def lookup_op(name: str):
    found = _OPS.get(name)
    if found is None and _DIALECT_LOADERS:
        load_dialect(name.split(".", 1)[0])
        found = _OPS.get(name)
    return found


def registered_ops() -> dict[str, type]:
    for dialect in list(_DIALECT_LOADERS):
        load_dialect(dialect)
    return dict(_OPS)


def is_dialect_registered(dialect: str) -> bool:
    return dialect in _DIALECTS or dialect in _DIALECT_LOADERS


def is_pure(op: Operation) -> bool:
    return op.is_registered and op.has_trait(Pure)


def has_no_effects(op: Operation) -> bool:
    """True when removing the op (if its results are unused) cannot change behaviour."""
    if not op.is_registered or op.has_trait(IsTerminator):
        return False
    if op.has_trait(Pure):
        return True
    effects = op.memory_effects()
    return effects is not None and all(kind in (READ, ALLOCATE, ALIAS) for kind, _ in effects)


_MAY_ALIAS: dict = {}  # op class -> whether its results may alias its operands


def may_alias(op: Operation) -> bool:
    """False when `op`'s results alias nothing: its effects are the declared ones and
    none is ALIAS. Alias analyses ask this of every use of every buffer; the answer is
    per class, so they skip building the effects of most ops."""
    cls = type(op)
    found = _MAY_ALIAS.get(cls)
    if found is None:
        declared = op.is_registered and cls.memory_effects is _declared_effects
        found = _MAY_ALIAS[cls] = not declared or any(e.kind == ALIAS for e in cls.effects)
    return found


def symbol_name(op: Operation) -> str | None:
    attr = op.properties.get("sym_name")
    return attr.value if isinstance(attr, StringAttr) else None


def symbol_ref(name: str) -> SymbolRefAttr:
    return SymbolRefAttr(name)


# ---------------------------------------------------------------------------
# Structural verification of one op against its declaration


def verify_declaration(op: Operation) -> None:
    cls = type(op)
    _verify_values(op, "operand", op.operands, cls.operand_defs, "operandSegmentSizes",
                   cls.direct_operands)
    _verify_values(op, "result", op.results, cls.result_defs, "resultSegmentSizes",
                   cls.direct_results)
    if not op.regions and not cls.region_defs:
        _verify_properties(op, cls)
        return
    region_sizes = segment_sizes(op, op.regions, cls.region_defs, None)
    if isinstance(region_sizes, str):
        raise op.error(f"regions: {region_sizes}")
    for definition in cls.region_defs:
        regions = getattr(op, definition.field_name)
        for region in (regions if isinstance(regions, list) else [regions]):
            if region is not None and definition.single_block and len(region.blocks) > 1:
                raise op.error(f"region '{definition.field_name}' must have at most one block")
    _verify_properties(op, cls)


def _verify_values(op: Operation, noun: str, items, defs, segment_prop, direct) -> None:
    """Operands or results against their declarations: group sizes and constraints."""
    sizes = None  # one item per declaration (checked here, no segment sizes to compute)
    if not (direct and len(items) == len(defs)):
        sizes = segment_sizes(op, items, defs, segment_prop)
        if isinstance(sizes, str):
            raise op.error(f"{noun}s: {sizes}")
    position = 0
    for index, definition in enumerate(defs):
        size = 1 if sizes is None else sizes[index]
        constraint = definition.constraint
        if constraint is AnyType:
            position += size
            continue
        for value in items[position:position + size]:
            if not constraint.check(value.type):
                raise op.error(
                    f"{noun} #{position} ('{definition.field_name}') must be "
                    f"{constraint.description}, but got '{value.type}'")
            position += 1


def property_problem(definition: PropDef, value) -> str | None:
    """Why the present property `value` does not fit `definition` (its attribute class,
    then its check), or None. (The verifier's and the ONNX importer's one test.)"""
    if isinstance(definition.attr_class, type) and not isinstance(value, definition.attr_class):
        return f"must be {definition.description}, got {value}"
    return definition.check(value) if definition.check is not None else None


def _verify_properties(op: Operation, cls) -> None:
    """Properties, traits and the op's own verifier (after operands, results, regions)."""
    for name, definition in cls.prop_defs.items():
        value = op.properties.get(name)
        if value is None:
            if not definition.optional:
                raise op.error(f"requires property '{name}'")
            continue
        problem = property_problem(definition, value)
        if problem:
            raise op.error(f"property '{name}' {problem}")
    for trait in cls.traits:
        trait.verify(op)
    op.verify_()
