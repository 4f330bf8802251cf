"""Binding user arrays to a function's arguments, and checking them: one clear line
per problem, naming the input, the expected type and what was given."""

from __future__ import annotations

from palimpsest.ir.attributes import ArrayAttr, DictionaryAttr, StringAttr, numpy_dtype_name
from palimpsest.ir.types import ShapedType, TensorType, format_dims


class BindingError(ValueError):
    """A run-time input that does not match the function's signature."""


def _names(func, attr_name: str, count: int, fallback) -> list[str]:
    attrs = func.properties.get(attr_name)
    names = []
    for index in range(count):
        name = None
        if isinstance(attrs, ArrayAttr) and index < len(attrs.value):
            entry = attrs.value[index]
            if isinstance(entry, DictionaryAttr):
                value = entry.as_dict().get("palimpsest.name")
                if isinstance(value, StringAttr):
                    name = value.value
        names.append(name or fallback(index))
    return names


def input_names(func) -> list[str]:
    """The names users bind inputs by: the ONNX names kept by the importer, else the
    argument's SSA name, else `arg<i>`."""
    args = func.entry_block.args if not func.is_declaration else []

    def fallback(index):
        hint = args[index].name_hint if index < len(args) else None
        return hint or f"arg{index}"

    return _names(func, "arg_attrs", len(func.type.inputs), fallback)


def output_names(func) -> list[str]:
    return _names(func, "res_attrs", len(func.type.results), lambda i: f"result{i}")


def describe_array(array) -> str:
    return f"{array.dtype} array of shape {tuple(array.shape)}"


def check_input(name: str, type_: TensorType, array, shape_override=None):
    """The array as the function needs it (a numpy array of the right dtype and shape)."""
    import numpy as np

    if not isinstance(type_, TensorType):
        raise BindingError(f"input '{name}': arguments of type '{type_}' are not supported")
    if not isinstance(array, np.ndarray):
        array = np.asarray(array)
    expected_dtype = np.dtype(numpy_dtype_name(type_.element_type))
    if array.dtype != expected_dtype:
        raise BindingError(f"input '{name}': expected {type_} ({expected_dtype}), got "
                           f"{describe_array(array)}")
    if type_.shape is not None:
        ok = len(array.shape) == len(type_.shape) and all(
            d is None or d == actual for d, actual in zip(type_.shape, array.shape))
        if not ok:
            raise BindingError(f"input '{name}': expected shape {format_dims(type_.shape)[:-1] or '[]'}"
                               f" ({type_}), got {describe_array(array)}")
        check_bounds(name, type_, array.shape)
    return array


def check_bounds(name: str, type_, shape) -> None:
    """BindingError when a dim of `shape` exceeds its bound in `type_` (`#bounds<...>`)."""
    for dim, (bound, actual) in enumerate(zip(type_.bounds or (), shape)):
        if bound is not None and actual > bound:
            raise BindingError(f"input '{name}': dim {dim} is {actual}, beyond its bound "
                               f"{bound} ({type_})")


def bound_input_type(name: str, type_, dims: dict):
    """`type_` (input `name`'s) with `dims` ({dim: bound}) bounded; BindingError, one
    line, for a dim out of range or static, or a bound below 1."""
    if not isinstance(type_, TensorType) or type_.shape is None:
        raise BindingError(f"input '{name}': only the dims of a ranked tensor take bounds, "
                           f"not '{type_}'")
    bounds = list(type_.bounds or (None,) * len(type_.shape))
    for dim, bound in dims.items():
        if not 0 <= dim < len(type_.shape):
            raise BindingError(f"input '{name}': no dim {dim} to bound ('{type_}' has "
                               f"{len(type_.shape)} dims)")
        if type_.shape[dim] is not None:
            raise BindingError(f"input '{name}': dim {dim} is static ({type_.shape[dim]}) in "
                               f"'{type_}': only a '?' dim takes a bound")
        if bound < 1:
            raise BindingError(f"input '{name}': the bound of dim {dim} must be at least 1, "
                               f"got {bound}")
        bounds[dim] = bound
    return type_.with_bounds(bounds)


def shaped_input_type(name: str, type_, shape):
    """`type_` (input `name`'s) at the concrete `shape` (its `?` dims made static);
    BindingError, one line naming the input, the expected type and the shape given, for
    a rank that differs, a static dim contradicted, a negative dim or one beyond a bound."""
    from dataclasses import replace

    shape = tuple(int(d) for d in shape)
    if not isinstance(type_, ShapedType):
        raise BindingError(f"input '{name}': only a shaped argument takes a shape, not "
                           f"'{type_}'")
    declared = type_.shape
    if declared is not None:
        if len(declared) != len(shape):
            raise BindingError(f"input '{name}': shape {list(shape)} does not fit {type_}: "
                               f"expected {len(declared)} dims, got {len(shape)}")
        for dim, (want, got) in enumerate(zip(declared, shape)):
            if want is not None and want != got:
                raise BindingError(f"input '{name}': shape {list(shape)} does not fit "
                                   f"{type_}: dim {dim} is {want}, got {got}")
    for dim, got in enumerate(shape):
        if got < 0:
            raise BindingError(f"input '{name}': shape {list(shape)} has a negative dim "
                               f"({got} at dim {dim}; expected {type_})")
    check_bounds(name, type_, shape)
    return replace(type_.with_bounds(None), shape=shape)


def specialize_inputs(func, shapes: dict | None = None, bounds: dict | None = None) -> None:
    """Retype `func`'s inputs, named as users bind them: `bounds` ({name: {dim: bound}})
    bound `?` dims, then `shapes` ({name: dims}) make them static. What the types of
    the body become is `infer-shapes`' work. BindingError, one line, for an unknown
    input or a shape or bound that does not fit."""
    names = input_names(func)
    types = list(func.type.inputs)
    for name, type_ in zip(names, types):
        if (name in (shapes or {}) or name in (bounds or {})) and not isinstance(
                type_, TensorType):
            raise BindingError(f"input '{name}': shapes and bounds apply to graph-level IR "
                               f"(tensor arguments), not to '{type_}'")
    for table, retype in ((bounds, bound_input_type), (shapes, shaped_input_type)):
        for name, value in (table or {}).items():
            if name not in names:
                raise BindingError(f"unknown input '{name}' (the function takes: "
                                   f"{', '.join(names) or 'no inputs'})")
            index = names.index(name)
            types[index] = retype(name, types[index], value)
    retype_inputs(func, types)


def retype_inputs(func, types) -> None:
    """Give `func`'s arguments `types` (its function type too)."""
    from palimpsest.ir.attributes import TypeAttr
    from palimpsest.ir.types import FunctionType

    for arg, type_ in zip(func.entry_block.args, types):
        arg.type = type_
    func.properties["function_type"] = TypeAttr(FunctionType(tuple(types), func.type.results))


def bind_inputs(func, inputs: dict) -> list:
    """Arrays in argument order; BindingError for missing, extra or mismatched ones."""
    names = input_names(func)
    unknown = [n for n in inputs if n not in names]
    if unknown:
        raise BindingError(f"unknown input '{unknown[0]}' (the function takes: "
                           f"{', '.join(names) or 'no inputs'})")
    arrays = []
    for name, type_ in zip(names, func.type.inputs):
        # a buffer argument holds the tensor users think in: check and name it as one
        if isinstance(type_, ShapedType) and not isinstance(type_, TensorType):
            type_ = TensorType(tuple(type_.shape), type_.element_type).with_bounds(type_.bounds)
        if name not in inputs:
            raise BindingError(f"missing input '{name}' (expected {type_})")
        arrays.append(check_input(name, type_, inputs[name]))
    return arrays


def find_function(module, name: str | None):
    """The function to run: `name`, else `main`, else the only public one."""
    funcs = [op for op in module.regions[0].block.ops if op.name == "func.func"
             and not op.is_declaration]
    if name is not None:
        for func in funcs:
            if func.properties["sym_name"].value == name:
                return func
        raise BindingError(f"no function @{name} (functions: "
                           f"{', '.join('@' + f.properties['sym_name'].value for f in funcs)})")
    for func in funcs:
        if func.properties["sym_name"].value == "main":
            return func
    if len(funcs) == 1:
        return funcs[0]
    raise BindingError("the module has " + (f"{len(funcs)} functions; choose one with --function"
                                            if funcs else "no function to run"))
