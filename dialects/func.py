"""The func dialect: functions, calls and returns, as in MLIR."""

from __future__ import annotations

from palimpsest.ir.attributes import ArrayAttr, StringAttr, SymbolRefAttr, TypeAttr
from palimpsest.ir.core import Block, Operation, Region
from palimpsest.ir.opdef import (
    FunctionLike, HasParent, IsolatedFromAbove, IsTerminator, Pure, SymbolOp, prop,
    region_def, register_op, variadic_operand, variadic_result,
)
from palimpsest.ir.types import FunctionType


def _is_function_type(attr):
    if not isinstance(attr.value, FunctionType):
        return f"must be a function type, got {attr.value}"
    return None


def _visibility(attr):
    if attr.value not in ("public", "private", "nested"):
        return f"must be 'public', 'private' or 'nested', got '{attr.value}'"
    return None


@register_op
class FuncOp(Operation):
    name = "func.func"
    sym_name = prop(StringAttr)
    function_type = prop(TypeAttr, check=_is_function_type, description="a function type")
    sym_visibility = prop(StringAttr, optional=True, check=_visibility)
    arg_attrs = prop(ArrayAttr, optional=True)
    res_attrs = prop(ArrayAttr, optional=True)
    body = region_def()
    traits = (IsolatedFromAbove(), SymbolOp(), FunctionLike())

    @classmethod
    def build(cls, name: str, inputs, results, visibility: str | None = None) -> "FuncOp":
        """A function with an entry block whose arguments match `inputs`."""
        fn_type = FunctionType(tuple(inputs), tuple(results))
        props = {"sym_name": StringAttr(name), "function_type": TypeAttr(fn_type)}
        if visibility:
            props["sym_visibility"] = StringAttr(visibility)
        return cls(properties=props, regions=[Region([Block(fn_type.inputs)])])

    @property
    def type(self) -> FunctionType:
        return self.properties["function_type"].value

    @property
    def is_declaration(self) -> bool:
        return not self.regions[0].blocks

    @property
    def entry_block(self) -> Block:
        return self.regions[0].blocks[0]

    def verify_(self):
        fn_type = self.type
        if self.is_declaration:
            return
        entry = self.entry_block
        arg_types = tuple(a.type for a in entry.args)
        if arg_types != fn_type.inputs:
            raise self.error(
                f"entry block arguments ({', '.join(map(str, arg_types))}) do not match the "
                f"function type inputs ({', '.join(map(str, fn_type.inputs))})")
        for region in self.regions:
            for block in region.blocks:
                last = block.last
                # an unregistered op (e.g. MLIR's cf.br) may be a terminator, as in MLIR
                if last is None or (last.is_registered and not last.has_trait(IsTerminator)):
                    raise self.error("body blocks must end with a terminator such as "
                                     "'func.return'")


@register_op
class ReturnOp(Operation):
    name = "func.return"
    operands_ = variadic_operand()
    traits = (Pure(), IsTerminator(), HasParent("func.func"))

    def verify_(self):
        fn = self.parent_op
        expected = fn.type.results
        actual = tuple(v.type for v in self.operands)
        if actual != expected:
            raise self.error(
                f"returns ({', '.join(map(str, actual))}) but the enclosing function "
                f"@{fn.properties['sym_name'].value} returns ({', '.join(map(str, expected))})")


@register_op
class CallOp(Operation):
    name = "func.call"
    symbol_prop = "callee"
    callee = prop(SymbolRefAttr)
    arguments = variadic_operand()
    results_ = variadic_result()

    def memory_effects(self):
        return None  # whatever the callee does: passes must not drop or reorder calls

    def verify_(self):
        from palimpsest.ir.verifier import lookup_symbol

        target = lookup_symbol(self, self.callee)
        if target is None:
            raise self.error(f"'{self.callee}' does not reference a valid function")
        if target.name != "func.func":
            raise self.error(f"'{self.callee}' references a '{target.name}', not a function")
        fn_type = target.type
        ins = tuple(v.type for v in self.operands)
        outs = tuple(r.type for r in self.results)
        if ins != fn_type.inputs or outs != fn_type.results:
            raise self.error(f"call type ({', '.join(map(str, ins))}) -> "
                             f"({', '.join(map(str, outs))}) does not match callee type {fn_type}")
