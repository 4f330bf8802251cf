"""`kernel.elementwise`: one kernel for a fused chain of elementwise graph ops, and
`STEPS`, the graph ops it can run as steps (see dialects/kernel.py)."""

from __future__ import annotations

from palimpsest.dialects.graph import shapes as S
from palimpsest.dialects.graph.bound_rules import broadcast_upper
from palimpsest.dialects.kernel_base import KernelOp, _int, _times, is_float, is_numeric
from palimpsest.ir import attributes as A
from palimpsest.ir.opdef import PropDef, register_op

# -- fused elementwise chains ----------------------------------------------------------------------

# graph op -> (operand form, element kinds, needs scratch). Forms: "unary" (x),
# "binary" (a, b: broadcast), "variadic" (broadcast), "clip" (x, optional scalar min and
# max), "batch_norm" (x, scale, b, mean, var: per channel, axis 1). Kinds: "float"
# (f32/f64) or "numeric" (also integers). The chain value may only be the data operand
# (x) of unary, clip and batch_norm steps.
STEPS = {
    "graph.relu": ("unary", "numeric", False),
    "graph.neg": ("unary", "numeric", False),
    "graph.abs": ("unary", "numeric", False),
    "graph.exp": ("unary", "float", False),
    "graph.log": ("unary", "float", False),
    "graph.sqrt": ("unary", "float", False),
    "graph.tanh": ("unary", "float", False),
    "graph.sigmoid": ("unary", "float", False),
    "graph.erf": ("unary", "float", False),
    "graph.hard_sigmoid": ("unary", "float", False),
    "graph.sign": ("unary", "numeric", False),
    "graph.floor": ("unary", "float", False),
    "graph.ceil": ("unary", "float", False),
    "graph.round": ("unary", "float", False),
    "graph.sin": ("unary", "float", False),
    "graph.cos": ("unary", "float", False),
    "graph.reciprocal": ("unary", "float", False),
    "graph.softplus": ("unary", "float", False),
    "graph.softsign": ("unary", "float", True),
    "graph.elu": ("unary", "float", True),
    "graph.selu": ("unary", "float", True),
    "graph.hard_swish": ("unary", "float", True),
    "graph.gelu": ("unary", "float", True),
    "graph.leaky_relu": ("unary", "float", True),
    "graph.acos": ("unary", "float", False),
    "graph.acosh": ("unary", "float", False),
    "graph.asin": ("unary", "float", False),
    "graph.asinh": ("unary", "float", False),
    "graph.atan": ("unary", "float", False),
    "graph.atanh": ("unary", "float", False),
    "graph.cosh": ("unary", "float", False),
    "graph.sinh": ("unary", "float", False),
    "graph.tan": ("unary", "float", False),
    "graph.celu": ("unary", "float", True),
    "graph.mish": ("unary", "float", True),
    "graph.swish": ("unary", "float", True),
    "graph.thresholded_relu": ("unary", "float", False),
    "graph.shrink": ("unary", "float", False),
    "graph.bitwise_not": ("unary", "numeric", False),
    "graph.prelu": ("binary", "numeric", True),
    "graph.bitwise_and": ("binary", "numeric", False),
    "graph.bitwise_or": ("binary", "numeric", False),
    "graph.bitwise_xor": ("binary", "numeric", False),
    "graph.add": ("binary", "numeric", False),
    "graph.sub": ("binary", "numeric", False),
    "graph.mul": ("binary", "numeric", False),
    "graph.div": ("binary", "float", False),
    "graph.pow": ("binary", "float", False),
    "graph.max": ("variadic", "numeric", False),
    "graph.min": ("variadic", "numeric", False),
    "graph.clip": ("clip", "numeric", False),
    "graph.batch_norm": ("batch_norm", "float", False),
}
STEP_ARITY = {"unary": (1, 1), "binary": (2, 2), "variadic": (1, None), "clip": (1, 3),
              "batch_norm": (5, 5)}


def clip_bounds(props: dict, bounds: list) -> tuple:
    """(min, max) among a clip step's bound operands (None where absent): an
    `operandSegmentSizes` of [1, 0, 1] means the one bound given is the max."""
    segments = props.get("operandSegmentSizes")
    if segments is not None and list(segments)[1:] == [0, 1]:
        return None, bounds[0]
    return (bounds[0] if bounds else None), (bounds[1] if len(bounds) > 1 else None)


def step_shape(name: str, shapes: list):
    """The result shape of one step from its operand shapes."""
    form = STEPS[name][0]
    if form in ("binary", "variadic"):
        return S.broadcast(*shapes)
    return shapes[0]


@register_op
class ElementwiseOp(KernelOp):
    """A chain of elementwise graph ops computed into one out buffer (see the module
    doc for `steps`, `wiring` and `step_props`)."""

    name = "kernel.elementwise"
    arity = (1, None)
    steps = PropDef(A.ArrayAttr, description="an array of graph op names")
    wiring = PropDef(A.ArrayAttr, description="an array of arrays of value numbers")
    step_props = PropDef(A.ArrayAttr, optional=True,
                         description="an array of dictionaries (one per step)")

    @classmethod
    def check(cls, in_types, config):
        steps, wiring = config["steps"], config["wiring"]
        props = config["step_props"]
        n = len(in_types)
        if not steps or not all([isinstance(s, str) for s in steps]):
            return "steps must be a non-empty array of graph op names"
        if not isinstance(wiring, list) or len(wiring) != len(steps) or not all([
                isinstance(w, list) and all([isinstance(v, int) for v in w]) for w in wiring]):
            return f"wiring must hold one array of value numbers per step ({len(steps)})"
        if props is not None and (len(props) != len(steps)
                                  or not all(isinstance(p, dict) for p in props)):
            return f"step_props must hold one dictionary per step ({len(steps)})"
        element = in_types[0].element_type
        floats, numeric = is_float(element), is_numeric(element)  # (the same for every step)
        for index, (name, refs) in enumerate(zip(steps, wiring)):
            if name not in STEPS:
                return f"step {index}: '{name}' is not a fusable elementwise op"
            form, kind, _ = STEPS[name]
            low, high = STEP_ARITY[form]
            if len(refs) < low or (high is not None and len(refs) > high):
                return f"step {index} ('{name}') reads {len(refs)} values"
            previous = n + index - 1
            for position, ref in enumerate(refs):
                if not 0 <= ref < n and not (index and ref == previous):
                    return (f"step {index} reads value {ref}: steps read the ins (0..{n - 1}) "
                            f"and the result of the step before")
                if ref == previous and index and position and form not in ("binary",
                                                                              "variadic"):
                    return f"step {index} ('{name}') reads the chain value as operand {position}"
            if index and refs.count(previous) != 1:
                return f"step {index} must read the result of step {index - 1} exactly once"
            if (kind == "float" and not floats) or not numeric:
                return f"step {index} ('{name}') does not compute {element}"
        for t in in_types:
            if t.element_type is not element and t.element_type != element:
                return "every in must have the element type of the out"
        return None

    @classmethod
    def result_shapes(cls, in_shapes, config):
        values = list(in_shapes)
        for name, refs in zip(config["steps"], config["wiring"]):
            args = [values[r] for r in refs]
            if None in args:  # (shapes are tuples: only a missing one equals None)
                values.append(None)
            else:
                values.append(step_shape(name, args))
        return [values[-1]]

    @classmethod
    def workspace_roles(cls, in_types, config):
        return ["scratch"] if any(STEPS.get(s, (0, 0, False))[2] for s in config["steps"]) \
            else []

    @classmethod
    def workspace_shape(cls, role, in_shapes, config):
        return cls.result_shapes(in_shapes, config)[0]

    @classmethod
    def workspace_upper(cls, role, in_uppers, config):
        # every step broadcasts some of the ins: the out is within their joint broadcast
        return broadcast_upper(*in_uppers)


# -- fused epilogues ---------------------------------------------------------------------------------

def _epilogue_problem(in_types, config) -> str | None:
    """Why the epilogue properties do not fit the op's ins (None when they do)."""
    steps, wiring, props = config["epilogue"], config["epilogue_wiring"], \
        config["epilogue_props"]
    if steps is None:
        if wiring is not None or props is not None or config["epilogue_ins"]:
            return "epilogue_wiring, epilogue_props and epilogue_ins need an epilogue"
        return None
    n = len(in_types)
    if not steps or not all([isinstance(s, str) for s in steps]):
        return "epilogue must be a non-empty array of graph op names"
    if not isinstance(wiring, list) or len(wiring) != len(steps) or not all([
            isinstance(w, list) and all([isinstance(v, int) for v in w]) for w in wiring]):
        return f"epilogue_wiring must hold one array of value numbers per step ({len(steps)})"
    if props is not None and (len(props) != len(steps)
                              or not all(isinstance(p, dict) for p in props)):
        return f"epilogue_props must hold one dictionary per step ({len(steps)})"
    element = in_types[0].element_type
    floats, numeric = is_float(element), is_numeric(element)
    for index, (name, refs) in enumerate(zip(steps, wiring)):
        if name not in STEPS:
            return f"epilogue step {index}: '{name}' is not a fusable elementwise op"
        form, kind, _ = STEPS[name]
        low, high = STEP_ARITY[form]
        if len(refs) < low or (high is not None and len(refs) > high):
            return f"epilogue step {index} ('{name}') reads {len(refs)} values"
        previous = n + index  # the product (step 0) or the step before
        for position, ref in enumerate(refs):
            if not 0 <= ref < n and ref != previous:
                return (f"epilogue step {index} reads value {ref}: steps read the ins "
                        f"(0..{n - 1}) and value {previous} (the "
                        f"{'product' if not index else 'result of the step before'})")
            if ref == previous and position and form not in ("binary", "variadic"):
                return (f"epilogue step {index} ('{name}') reads the chain value as "
                        f"operand {position}")
        if refs.count(previous) != 1:
            return f"epilogue step {index} must read value {previous} exactly once"
        if (kind == "float" and not floats) or not numeric:
            return f"epilogue step {index} ('{name}') does not compute {element}"
    return None


# The most elements of an epilogue's scratch (f32: 256 KiB, within L2: a block of the out
# goes through every step while in cache)
EPILOGUE_CHUNK = 1 << 16


class Epilogue:
    """A fused epilogue, declared once for the kernels that have one (`kernel.conv2d`,
    `kernel.matmul`): elementwise steps (the `kernel.elementwise` step table, `STEPS`)
    applied to the kernel's result before it is stored, so the intermediate buffer
    between the kernel and the steps does not exist.

        kernel.conv2d %x, %w, %b, %res, %y {epilogue = ["graph.add", "graph.relu"],
            epilogue_ins = 1, epilogue_wiring = [[4, 3], [5]], ...}

    `epilogue_ins` trailing ins are read only by the epilogue (here %res); the kernel's own
    ins come first. In `epilogue_wiring`, values 0..n-1 are the op's ins, value n is the
    kernel's result (the product) and n+1+i the result of step i; step i reads value n+i
    exactly once (a linear chain, as in `kernel.elementwise`), the data operand for
    unary, clip and batch_norm steps. Every step keeps the product's shape (an epilogue
    never broadcasts the result wider). `epilogue_props` holds each step's graph
    properties. A step that needs scratch (leaky_relu, hard_swish, prelu, ...) uses the
    kernel's largest own workspace (a conv's im2col or padded image: dead once the
    product is made) when one holds the out's element count up to `EPILOGUE_CHUNK`, and
    otherwise gets an `epilogue` workspace of that many elements, 1-D (a backend that
    computes in place through whole-array steps, numpy, runs the chain a block of the
    out at a time through it; a scratch of its own, live beside the kernel's workspaces,
    grew the arena).

    A kernel class mixes this in first and declares its own rules as `core_check`,
    `core_result_shapes`, `core_workspace_roles`, `core_workspace_shape` and `core_arity`
    on its own ins."""

    epilogue = PropDef(A.ArrayAttr, optional=True, description="an array of graph op names")
    epilogue_wiring = PropDef(A.ArrayAttr, optional=True,
                              description="an array of arrays of value numbers")
    epilogue_props = PropDef(A.ArrayAttr, optional=True,
                             description="an array of dictionaries (one per step)")
    epilogue_ins = _int(0)
    arity = (1, None)
    core_arity = (1, 1)

    @staticmethod
    def core_count(n: int, config: dict) -> int:
        """How many of the op's n ins are the kernel's own (the rest: the epilogue's)."""
        return n - (config.get("epilogue_ins") or 0)

    @classmethod
    def check(cls, in_types, config):
        k = config["epilogue_ins"] or 0
        if not 0 <= k <= len(in_types):
            return f"epilogue_ins must be 0 to {len(in_types)}, got {k}"
        core = in_types[:len(in_types) - k]
        low, high = cls.core_arity
        if not low <= len(core) <= high:
            return f"takes {low} to {high} ins before the epilogue's, got {len(core)}"
        problem = cls.core_check(core, config)
        if problem:
            return problem
        if any(t.element_type != core[0].element_type for t in in_types[len(core):]):
            return "every epilogue in must have the element type of the out"
        return _epilogue_problem(in_types, config)

    @classmethod
    def result_shapes(cls, in_shapes, config):
        k = config.get("epilogue_ins") or 0
        shapes = cls.core_result_shapes(list(in_shapes[:len(in_shapes) - k]), config)
        steps = config.get("epilogue")
        product = shapes[0]
        if not steps or product is None:
            return shapes
        values = list(in_shapes) + [product]
        for index, (name, refs) in enumerate(zip(steps, config["epilogue_wiring"])):
            args = [values[r] for r in refs]
            shape = None if None in args else step_shape(name, args)
            if shape is not None and not _same_dims(shape, product):
                raise S.ShapeError(f"epilogue step {index} ('{name}') gives "
                                   f"{S.fmt(shape)}, not the product's {S.fmt(product)}")
            values.append(product)
        return shapes

    @classmethod
    def workspace_roles(cls, in_types, config):
        k = config["epilogue_ins"] or 0
        core = in_types[:len(in_types) - k]
        roles = list(cls.core_workspace_roles(core, config))
        if any(STEPS.get(s, (0, 0, False))[2] for s in config["epilogue"] or ()) \
                and not cls.scratch_in_core(roles, in_types, config):
            roles.append("epilogue")
        return roles

    @classmethod
    def scratch_in_core(cls, roles, in_types, config) -> bool:
        """Whether one of the kernel's own workspaces (dead once the product is made)
        holds the epilogue's scratch, so it needs none of its own: at static shapes, one
        of at least the `epilogue` workspace's elements."""
        shapes = [tuple(t.shape) for t in in_types]
        if any(d is None for shape in shapes for d in shape):
            return False
        need = cls.workspace_shape("epilogue", shapes, config)[0]
        k = config["epilogue_ins"] or 0
        for role in roles:
            shape = cls.core_workspace_shape(role, shapes[:len(shapes) - k], config)
            size = _times(*shape) if shape else 1
            if size is not None and size >= need:
                return True
        return False

    @classmethod
    def workspace_shape(cls, role, in_shapes, config):
        if role == "epilogue":
            out = cls.result_shapes(in_shapes, config)[0]
            size = None if out is None else _times(*out) if out else 1
            return (EPILOGUE_CHUNK if size is None else min(size, EPILOGUE_CHUNK),)
        k = config.get("epilogue_ins") or 0
        return cls.core_workspace_shape(role, list(in_shapes[:len(in_shapes) - k]), config)

    @classmethod
    def core_check(cls, in_types, config):
        return None

    @classmethod
    def core_workspace_roles(cls, in_types, config):
        return []

    @classmethod
    def core_workspace_shape(cls, role, in_shapes, config):
        raise KeyError(role)


def _same_dims(a, b) -> bool:
    return len(a) == len(b) and all(x is None or y is None or x == y for x, y in zip(a, b))
