"""Module-wide facts computed once per file, before the rules run.

Import aliases, which functions run per step (call graph), each function's parameters,
attributes the module assigns torch tensors to, and parameters each function uses like
tensors. One traversal collects the raw material; the rest is plain dictionary work.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping

import libcst as cst
from libcst.metadata import CodeRange

# Conventional names assumed when a snippet uses them without importing them.
_DEFAULT_ALIASES = {"torch": "torch", "F": "torch.nn.functional", "nn": "torch.nn"}

# torch.* callables that return host values (or are not tensor ops at all).
_HOST_TORCH_PREFIXES = ("torch.cuda.", "torch.backends.", "torch.is_", "torch.get_", "torch.set_", "torch.compiler.",
                        "torch.distributed.", "torch.jit.", "torch._dynamo.", "torch.utils.", "torch.testing.",
                        "torch.version.", "torch.nn.", "torch.autograd.", "torch.profiler.", "torch.fx.",
                        "torch.library.", "torch.ops.")
_HOST_TORCH = frozenset({"torch.numel", "torch.finfo", "torch.iinfo", "torch.Size", "torch.device", "torch.dtype",
                         "torch.manual_seed", "torch.no_grad", "torch.inference_mode", "torch.enable_grad",
                         "torch.Generator", "torch.Stream", "torch.Event", "torch.equal", "torch.allclose"})
# Used on a parameter, these say "this is a tensor" (numpy arrays have .shape/.dtype, not these).
TENSOR_ONLY_ATTRS = frozenset({"device", "is_cuda", "item", "tolist", "numel", "copy_", "cuda", "int", "long",
                               "half", "bfloat16", "masked_fill", "masked_fill_", "index_select", "clamp"})


@dataclass(frozen=True)
class ModuleFacts:
    imports: Mapping[str, str]                        # local name -> dotted module path
    per_step: frozenset[str]                          # names of per-step functions
    calls: Mapping[str, frozenset[str]]               # function name -> this module's functions it calls
    defs: Mapping[str, list[tuple[str, list[str]]]]   # function name -> (scope id, parameter names)
    tensor_attrs: frozenset[str]                      # `self.page_table`, `self.meta["k"]`: assigned torch calls
    tensor_params: Mapping[int, frozenset[str]]       # id(FunctionDef) -> parameters used like tensors


def qualify(expr: cst.BaseExpression, imports: Mapping[str, str]) -> str | None:
    """Dotted name with import aliases expanded: `F.pad` -> `torch.nn.functional.pad`."""
    if isinstance(expr, cst.Name):
        return imports.get(expr.value, expr.value)
    if isinstance(expr, cst.Attribute):
        base = qualify(expr.value, imports)
        return f"{base}.{expr.attr.value}" if base else None
    return None


def returns_tensor(qualname: str | None) -> bool:
    """A `torch.*` callable that produces a tensor (not `torch.cuda.*`, `torch.numel`, ...)."""
    q = qualname or ""
    return q.startswith("torch.") and q not in _HOST_TORCH and not q.startswith(_HOST_TORCH_PREFIXES)


def collect_facts(module: cst.Module, positions: Mapping[cst.CSTNode, CodeRange], per_step_re: re.Pattern[str],
                  render) -> ModuleFacts:
    raw = _Raw(positions, render)
    module.visit(raw)
    imports = {**_DEFAULT_ALIASES, **raw.imports}
    is_tensor_call = lambda call: returns_tensor(qualify(call.func, imports))  # noqa: E731
    tensor_attrs = frozenset(text for text, call in raw.attr_calls if is_tensor_call(call))
    tensor_params = {
        fn: frozenset(name for name, call in uses if call is None or is_tensor_call(call)) & raw.params[fn]
        for fn, uses in raw.uses.items()
    }
    calls = {name: frozenset(c for c in callees if c in raw.calls) for name, callees in raw.calls.items()}
    return ModuleFacts(imports=imports, per_step=reachable(calls, [n for n in calls if per_step_re.search(n)]),
                       calls=calls, defs=dict(raw.defs),
                       tensor_attrs=tensor_attrs, tensor_params=tensor_params)


def reachable(calls: Mapping[str, frozenset[str]], start: list[str]) -> frozenset[str]:
    """`start` plus every module function they call, transitively."""
    todo = list(start)
    found = set(todo)
    while todo:
        for callee in calls.get(todo.pop(), ()):
            if callee not in found:
                found.add(callee)
                todo.append(callee)
    return frozenset(found)


class _Raw(cst.CSTVisitor):
    def __init__(self, positions: Mapping[cst.CSTNode, CodeRange], render) -> None:
        super().__init__()
        self.positions = positions
        self.render = render
        self.imports: dict[str, str] = {}
        self.calls: dict[str, set[str]] = {}
        self.defs: dict[str, list[tuple[str, list[str]]]] = defaultdict(list)
        self.attr_calls: list[tuple[str, cst.Call]] = []
        self.params: dict[int, frozenset[str]] = {}
        self.uses: dict[int, list[tuple[str, cst.Call | None]]] = {}
        self.stack: list[cst.FunctionDef] = []

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = _dotted(alias.name)
            if alias.asname is not None:
                self.imports[_dotted(alias.asname.name)] = full
            else:
                self.imports[full.split(".")[0]] = full.split(".")[0]

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        base = _dotted(node.module)
        for alias in node.names:
            name = _dotted(alias.name)
            local = _dotted(alias.asname.name) if alias.asname is not None else name
            self.imports[local] = f"{base}.{name}"

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        name = node.name.value
        p = node.params
        params = [x.name.value for x in (*p.posonly_params, *p.params, *p.kwonly_params)]
        self.defs[name].append((f"{name}:{self.positions[node].start.line}", params))
        self.calls.setdefault(name, set())
        self.params[id(node)] = frozenset(params)
        self.uses[id(node)] = [(x.name.value, None) for x in (*p.posonly_params, *p.params, *p.kwonly_params)
                               if x.annotation is not None and "Tensor" in self.render(x.annotation.annotation)]
        self.stack.append(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.stack.pop()

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if self.stack and isinstance(node.value, cst.Name) and node.attr.value in TENSOR_ONLY_ATTRS:
            self.uses[id(self.stack[-1])].append((node.value.value, None))

    def visit_Call(self, node: cst.Call) -> None:
        if not self.stack:
            return
        fn = self.stack[-1]
        func = node.func
        if isinstance(func, cst.Name):
            self.calls[fn.name.value].add(func.value)
        elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value in ("self", "cls"):
            self.calls[fn.name.value].add(func.attr.value)
        first = node.args[0].value if node.args and node.args[0].keyword is None else None
        if isinstance(first, cst.Name):
            self.uses[id(fn)].append((first.value, node))  # torch.f(p, ...) if f turns out to be a torch op

    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.Call):
            for t in node.targets:
                if isinstance(t.target, (cst.Attribute, cst.Subscript)):
                    self.attr_calls.append((self.render(t.target), node.value))


def _dotted(expr: cst.BaseExpression) -> str:
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        return f"{_dotted(expr.value)}.{expr.attr.value}"
    return ""
