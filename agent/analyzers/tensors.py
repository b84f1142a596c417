"""Cheap guesses about which expressions are tensors, for the rules that need it.

No type inference: a name is a tensor when it was last assigned a `torch.*` call or a
tensor-method result, or is a parameter annotated `Tensor` or used like one in its function
(`p.device`, `p.dtype`, `p.item()`, `p.tolist()`, `p.copy_(...)`, `torch.f(p, ...)`) until it
is reassigned; an attribute is one when the module assigns it a `torch.*` call anywhere. Guesses err towards "not a tensor" so the
host-sync rule stays quiet on ints and lists.
"""

from __future__ import annotations

import libcst as cst

from .context import ModuleContext, ScopedVisitor, method_name, render

_HOST_TORCH_PREFIXES = ("torch.cuda.", "torch.backends.", "torch.is_", "torch.get_", "torch.set_", "torch.compiler.",
                        "torch.distributed.", "torch.jit.", "torch._dynamo.", "torch.utils.", "torch.testing.",
                        "torch.version.", "torch.nn.", "torch.autograd.", "torch.profiler.", "torch.fx.",
                        "torch.library.", "torch.ops.")
_HOST_TORCH = frozenset({"torch.numel", "torch.finfo", "torch.iinfo", "torch.Size", "torch.device", "torch.dtype",
                         "torch.manual_seed", "torch.no_grad", "torch.inference_mode", "torch.enable_grad",
                         "torch.Generator", "torch.Stream", "torch.Event", "torch.equal", "torch.allclose"})
TENSOR_METHODS = frozenset({
    "sum", "max", "min", "any", "all", "argmax", "argmin", "mean", "prod", "norm", "amax", "amin", "count_nonzero",
    "eq", "ne", "gt", "lt", "ge", "le", "abs", "float", "int", "long", "half", "bool", "to", "cuda", "cumsum",
    "clone", "contiguous", "view", "reshape", "squeeze", "unsqueeze", "nonzero", "masked_select", "isnan",
    "isinf", "isfinite", "logical_and", "logical_or", "logical_not", "diff", "sort", "topk", "gather",
})
_HOST_SUFFIXES = ("_host", "_np", "_list", "_py")
_TENSOR_ONLY_ATTRS = frozenset({"device", "dtype", "is_cuda"})
_TENSOR_ONLY_METHODS = frozenset({"item", "tolist", "numel", "copy_", "cuda", "int", "long", "float", "half",
                                  "bfloat16", "masked_fill", "masked_fill_", "index_select", "cumsum", "clamp"})


def host_named(expr: cst.BaseExpression, module: cst.Module) -> bool:
    """`seq_lens_cpu`, `x.cpu()`, `lens_host`: data the code already keeps on the host."""
    text = render(expr, module).lower()
    head = text.split("(")[0]
    return "cpu" in text or head.endswith(_HOST_SUFFIXES)


def torch_tensor_call(call: cst.Call, ctx: ModuleContext) -> bool:
    qual = ctx.qualified(call.func) or ""
    return qual.startswith("torch.") and qual not in _HOST_TORCH and not qual.startswith(_HOST_TORCH_PREFIXES)


def module_tensor_attrs(ctx: ModuleContext) -> frozenset[str]:
    """Attribute/entry texts (`self.page_table`, `self.meta["k"]`) assigned a torch.* call anywhere."""
    found: set[str] = set()

    class _Attrs(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            if isinstance(node.value, cst.Call) and torch_tensor_call(node.value, ctx):
                for t in node.targets:
                    if isinstance(t.target, (cst.Attribute, cst.Subscript)):
                        found.add(render(t.target, ctx.module))

    ctx.module.visit(_Attrs())
    return frozenset(found)


class TensorVisitor(ScopedVisitor):
    """ScopedVisitor that also tracks, per function and in source order, tensor and list names."""

    def __init__(self, ctx: ModuleContext) -> None:
        super().__init__(ctx)
        self.tensor_attrs = module_tensor_attrs(ctx)
        self._tensors: list[set[str]] = [set()]
        self._lists: list[set[str]] = [set()]

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        super().visit_FunctionDef(node)
        p = node.params
        params = [x for x in (*p.posonly_params, *p.params, *p.kwonly_params)]
        annotated = {x.name.value for x in params if x.annotation is not None
                     and "Tensor" in self.ctx.code(x.annotation.annotation)}
        used = _used_as_tensor(node.body, self.ctx) & {x.name.value for x in params}
        self._tensors.append(annotated | used)
        self._lists.append(set())

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        super().leave_FunctionDef(original_node)
        self._tensors.pop()
        self._lists.pop()

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            self._note(t.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._note(node.target, node.value)

    def _note(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        if not isinstance(target, cst.Name):
            return
        name = target.value
        self._tensors[-1].discard(name)
        self._lists[-1].discard(name)
        if self.likely_tensor(value):
            self._tensors[-1].add(name)
        elif self.is_list(value):
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

    def likely_tensor(self, expr: cst.BaseExpression) -> bool:
        if isinstance(expr, cst.Call):
            if torch_tensor_call(expr, self.ctx):
                return True
            method = method_name(expr)
            return method in TENSOR_METHODS and not host_named(expr.func.value, self.ctx.module)  # type: ignore[attr-defined]
        if isinstance(expr, cst.Name):
            return expr.value in self._tensors[-1]
        if isinstance(expr, cst.Attribute):
            return render(expr, self.ctx.module) in self.tensor_attrs
        if isinstance(expr, cst.Subscript):
            return self.likely_tensor(expr.value) or render(expr, self.ctx.module) in self.tensor_attrs
        if isinstance(expr, cst.BinaryOperation):
            return self.likely_tensor(expr.left) or self.likely_tensor(expr.right)
        if isinstance(expr, cst.UnaryOperation):
            return self.likely_tensor(expr.expression)
        if isinstance(expr, cst.Comparison):
            if any(isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for c in expr.comparisons):
                return False
            return self.likely_tensor(expr.left) or any(self.likely_tensor(c.comparator) for c in expr.comparisons)
        return False


def _used_as_tensor(body: cst.CSTNode, ctx: ModuleContext) -> set[str]:
    """Names the code treats as tensors: `n.device`, `n.item()`, `torch.cumsum(n, ...)`."""
    found: set[str] = set()

    class _Uses(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> None:
            if isinstance(node.value, cst.Name) and node.attr.value in _TENSOR_ONLY_ATTRS | _TENSOR_ONLY_METHODS:
                found.add(node.value.value)

        def visit_Call(self, node: cst.Call) -> None:
            first = node.args[0].value if node.args and node.args[0].keyword is None else None
            if isinstance(first, cst.Name) and torch_tensor_call(node, ctx):
                found.add(first.value)

    body.visit(_Uses())
    return found
