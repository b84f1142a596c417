"""Module-wide facts computed once per file, before the rules run.

Import aliases, which functions run per step (call graph), each function's parameters,
attributes the module assigns torch tensors to (and those it only assigns host values: CPU
tensors, NumPy arrays), and parameters each function uses like tensors. One traversal collects the raw
material; the rest is plain dictionary work.
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
_TENSOR_ANNOTATION = re.compile(r"\bTensor\b")  # `torch.Tensor`, `Optional[Tensor]`; not `PPProxyTensors`
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
    host_attrs: frozenset[str]                        # attributes only ever assigned host values (`host_call`)
    tensor_params: Mapping[int, frozenset[str]]       # id(FunctionDef) -> parameters used like tensors


def qualify(expr: cst.BaseExpression, imports: Mapping[str, str]) -> str | None:
    """Dotted name with import aliases expanded: `F.pad` -> `torch.nn.functional.pad`."""
    if isinstance(expr, cst.Name):
        return imports.get(expr.value, expr.value)
    if isinstance(expr, cst.Attribute):
        base = qualify(expr.value, imports)
        return f"{base}.{expr.attr.value}" if base else None
    return None


# torch factories: on the host when `device="cpu"` is named, or, for those built from Python
# data, when no device is (a bare `torch.zeros(n)` may follow `with torch.device("cuda"):`).
_FACTORIES = frozenset({"torch.zeros", "torch.ones", "torch.empty", "torch.full", "torch.arange", "torch.tensor",
                        "torch.as_tensor", "torch.rand", "torch.randn", "torch.randint", "torch.linspace"})
_FROM_PYTHON = frozenset({"torch.tensor", "torch.as_tensor"})
_HOST_METHODS = frozenset({"cpu", "numpy", "tolist", "item", "numel", "size", "dim", "pin_memory"})


def is_cpu_device(expr: cst.BaseExpression) -> bool:
    """`"cpu"` or `torch.device("cpu")`."""
    if isinstance(expr, cst.Call) and expr.args:
        expr = expr.args[0].value
    return isinstance(expr, cst.SimpleString) and expr.evaluated_value in ("cpu", b"cpu")


def host_call(call: cst.Call, imports: Mapping[str, str]) -> bool:
    """A call whose result is on the host: a CPU tensor made from Python (`torch.zeros(n)`,
    `torch.tensor(xs, device="cpu")`, `torch.from_numpy(a)`), `.cpu()`/`.numpy()`/`.tolist()`/
    `.item()`, `.to("cpu")`, or anything from NumPy."""
    qual = qualify(call.func, imports) or ""
    if qual.split(".")[0] == "numpy" or qual == "torch.from_numpy":
        return True
    method = call.func.attr.value if isinstance(call.func, cst.Attribute) else None
    device = next((a for a in call.args if a.keyword is not None and a.keyword.value == "device"), None)
    if method == "to":
        first = call.args[0] if call.args and call.args[0].keyword is None else None
        target = device or first
        return target is not None and is_cpu_device(target.value)
    if method in _HOST_METHODS:
        return True
    if device is None:
        return qual in _FROM_PYTHON
    return qual in _FACTORIES and is_cpu_device(device.value)


def returns_tensor(qualname: str | None) -> bool:
    """A `torch.*` callable that produces a tensor (not `torch.cuda.*`, `torch.numel`, ...)."""
    q = qualname or ""
    return q.startswith("torch.") and q not in _HOST_TORCH and not q.startswith(_HOST_TORCH_PREFIXES)


def collect_facts(module: cst.Module, positions: Mapping[cst.CSTNode, CodeRange], per_step_re: re.Pattern[str],
                  render, one_time_re: re.Pattern[str] | None = None) -> ModuleFacts:
    raw = _Raw(positions, render)
    module.visit(raw)
    imports = {**_DEFAULT_ALIASES, **raw.imports}
    is_tensor_call = lambda call: returns_tensor(qualify(call.func, imports))  # noqa: E731
    tensor_attrs = frozenset(text for text, call in raw.attr_calls if is_tensor_call(call))
    tensor_params = {
        fn: frozenset(name for name, call in uses if call is None or is_tensor_call(call)) & raw.params[fn]
        for fn, uses in raw.uses.items()
    }
    host = {text for text, call in raw.attr_calls if host_call(call, imports)}
    host_attrs = frozenset(host - {text for text, call in raw.attr_calls if not host_call(call, imports)})
    calls = {name: frozenset(c for c in callees if c in raw.calls) for name, callees in raw.calls.items()}
    one_time = {n for n in calls if one_time_re is not None and one_time_re.search(n)}
    step_calls = {name: callees - one_time for name, callees in calls.items()}
    per_step = reachable(step_calls, [n for n in calls if per_step_re.search(n) and n not in one_time])
    return ModuleFacts(imports=imports, per_step=per_step, calls=calls, defs=dict(raw.defs),
                       tensor_attrs=tensor_attrs, host_attrs=host_attrs, tensor_params=tensor_params)


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
                               if x.annotation is not None
                               and _TENSOR_ANNOTATION.search(self.render(x.annotation.annotation))]
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
        elif (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)
              and func.value.value in ("self", "cls")):
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
