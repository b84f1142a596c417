"""Cheap guesses about which expressions are tensors, for the rules that need it.

No type inference: a name is a tensor when it was last assigned a `torch.*` call or a
tensor-method result, or is a parameter annotated `Tensor` or used like one in its function
(`p.device`, `p.item()`, `p.tolist()`, `p.copy_(...)`, `torch.f(p, ...)`) until it is
reassigned; an attribute is one when the module assigns it a `torch.*` call anywhere.
Guesses err towards "not a tensor" so the host-sync rule stays quiet on ints and lists.
`is_host` knows the opposite: values that live on the host (Python numbers, NumPy arrays, CPU
tensors made from Python, `.cpu()`/`.item()` results, and names last bound to one), where
reading a value never waits for a device.
"""

from __future__ import annotations

import libcst as cst

from .context import ModuleContext, ScopedVisitor, method_name
from .facts import host_call, returns_tensor

TENSOR_METHODS = frozenset({
    "sum", "max", "min", "any", "all", "argmax", "argmin", "mean", "prod", "norm", "amax", "amin", "count_nonzero",
    "eq", "ne", "gt", "lt", "ge", "le", "abs", "float", "int", "long", "half", "bool", "to", "cuda", "cumsum",
    "clone", "contiguous", "view", "reshape", "squeeze", "unsqueeze", "nonzero", "masked_select", "isnan",
    "isinf", "isfinite", "logical_and", "logical_or", "logical_not", "diff", "sort", "topk", "gather",
})
_HOST_SUFFIXES = ("_host", "_np", "_list", "_py")


def host_named(expr: cst.BaseExpression, ctx: ModuleContext) -> bool:
    """`seq_lens_cpu`, `x.cpu()`, `lens_host`: data the code already keeps on the host."""
    text = ctx.render(expr).lower()
    return "cpu" in text or text.split("(")[0].endswith(_HOST_SUFFIXES)


class TensorVisitor(ScopedVisitor):
    """ScopedVisitor that also tracks, per function and in source order, tensor and list names."""

    def __init__(self, ctx: ModuleContext) -> None:
        super().__init__(ctx)
        self._tensors: list[set[str]] = [set()]
        self._lists: list[set[str]] = [set()]
        self._host: list[set[str]] = [set()]

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        super().visit_FunctionDef(node)
        self._tensors.append(set(self.ctx.facts.tensor_params.get(id(node), ())))
        self._lists.append(set())
        self._host.append(set())

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        super().leave_FunctionDef(original_node)
        self._tensors.pop()
        self._lists.pop()
        self._host.pop()

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            self._note(t.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._note(node.target, node.value)

    def _note(self, target: cst.BaseExpression, value: cst.BaseExpression | None) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            values = value.elements if isinstance(value, (cst.Tuple, cst.List)) else None
            paired = values is not None and len(values) == len(target.elements)
            for i, el in enumerate(target.elements):
                self._note(el.value, values[i].value if paired else None)  # type: ignore[index]
            return
        if not isinstance(target, cst.Name):
            return
        name = target.value
        self._tensors[-1].discard(name)
        self._lists[-1].discard(name)
        self._host[-1].discard(name)
        if value is not None and self.is_host(value):
            self._host[-1].add(name)
        if value is not None and self.likely_tensor(value):
            self._tensors[-1].add(name)
        elif value is not None and self.is_list(value):
            self._lists[-1].add(name)

    def is_list(self, expr: cst.BaseExpression) -> bool:
        """A Python list/tuple expression, or a name last bound to one."""
        if isinstance(expr, (cst.List, cst.ListComp, cst.Tuple, cst.GeneratorExp)):
            return True
        if isinstance(expr, cst.BinaryOperation):  # [0] * n, a + b
            return self.is_list(expr.left) or self.is_list(expr.right)
        if isinstance(expr, cst.Name):
            return expr.value in self._lists[-1]
        if isinstance(expr, cst.Call):
            return method_name(expr) == "tolist" or (isinstance(expr.func, cst.Name) and expr.func.value == "list")
        return False

    def is_host(self, expr: cst.BaseExpression) -> bool:
        """Known to live on the host: reading it needs no device synchronisation."""
        if isinstance(expr, (cst.Integer, cst.Float)):
            return True
        if isinstance(expr, cst.Name):
            return expr.value in self._host[-1]
        if isinstance(expr, cst.Call):
            func = expr.func
            if isinstance(func, cst.Name) and func.value in ("len", "int", "float"):
                return True
            return host_call(expr, self.ctx.imports) or (isinstance(func, cst.Attribute) and self.is_host(func.value))
        if isinstance(expr, cst.Attribute) and expr.attr.value in ("shape", "ndim"):
            return True
        if isinstance(expr, (cst.Attribute, cst.Subscript)):
            if isinstance(expr, cst.Subscript) and self.is_host(expr.value):
                return True
            return self.ctx.render(expr) in self.ctx.facts.host_attrs
        if isinstance(expr, cst.BinaryOperation):
            return self.is_host(expr.left) and self.is_host(expr.right)
        if isinstance(expr, cst.UnaryOperation):
            return self.is_host(expr.expression)
        return False

    def on_device(self, expr: cst.BaseExpression) -> bool:
        """Likely a tensor and not known to be on the host."""
        return self.likely_tensor(expr) and not self.is_host(expr)

    def likely_tensor(self, expr: cst.BaseExpression) -> bool:
        if isinstance(expr, cst.Call):
            if returns_tensor(self.ctx.qualified(expr.func)):
                return True
            return method_name(expr) in TENSOR_METHODS and not host_named(expr.func.value, self.ctx)  # type: ignore[attr-defined]
        if isinstance(expr, cst.Name):
            return expr.value in self._tensors[-1]
        if isinstance(expr, (cst.Attribute, cst.Subscript)):
            if isinstance(expr, cst.Subscript) and self.likely_tensor(expr.value):
                return True
            return self.ctx.render(expr) in self.ctx.facts.tensor_attrs
        if isinstance(expr, cst.BinaryOperation):
            return self.likely_tensor(expr.left) or self.likely_tensor(expr.right)
        if isinstance(expr, cst.UnaryOperation):
            return self.likely_tensor(expr.expression)
        if isinstance(expr, cst.Comparison):
            if any(isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for c in expr.comparisons):
                return False
            return self.likely_tensor(expr.left) or any(self.likely_tensor(c.comparator) for c in expr.comparisons)
        return False
