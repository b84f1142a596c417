"""What every rule needs about one module: positions, import aliases, scopes, finding builder.

Rules are plain functions of a `ModuleContext`; this module owns the libcst plumbing so the
rule modules read like the patterns they match.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Mapping

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from .model import AnalyzerConfig, Finding

# Conventional names assumed when a snippet uses them without importing them.
_DEFAULT_ALIASES = {"torch": "torch", "F": "torch.nn.functional", "nn": "torch.nn"}


@dataclass(frozen=True)
class ModuleContext:
    """One parsed module and the facts every rule shares."""

    path: str
    module: cst.Module
    positions: Mapping[cst.CSTNode, CodeRange]
    imports: Mapping[str, str]
    config: AnalyzerConfig
    lines: tuple[str, ...]
    per_step_re: re.Pattern[str] = field(repr=False)

    @classmethod
    def build(cls, module: cst.Module, path: str, config: AnalyzerConfig) -> "ModuleContext":
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        return cls(
            path=path,
            module=wrapper.module,
            positions=wrapper.resolve(PositionProvider),
            imports=import_aliases(wrapper.module),
            config=config,
            lines=tuple(wrapper.module.code.splitlines()),
            per_step_re=re.compile(config.per_step_pattern, re.IGNORECASE),
        )

    def start(self, node: cst.CSTNode) -> tuple[int, int]:
        """1-based (line, col) of a node's first character."""
        pos = self.positions[node].start
        return pos.line, pos.column + 1

    def code(self, node: cst.CSTNode) -> str:
        """The node's source on one line (whitespace runs collapsed)."""
        return " ".join(self.module.code_for_node(node).split())

    def qualified(self, expr: cst.BaseExpression) -> str | None:
        """Dotted name with import aliases expanded: `F.pad` -> `torch.nn.functional.pad`."""
        if isinstance(expr, cst.Name):
            return self.imports.get(expr.value, expr.value)
        if isinstance(expr, cst.Attribute):
            base = self.qualified(expr.value)
            return f"{base}.{expr.attr.value}" if base else None
        return None

    def finding(self, rule: str, node: cst.CSTNode, message: str, function: str | None, target: str,
                *, fixable: bool = False, safe: bool = False, hazard: str | None = None) -> Finding:
        line, col = self.start(node)
        snippet = self.lines[line - 1].strip() if line <= len(self.lines) else ""
        return Finding(rule=rule, path=self.path, line=line, col=col, message=message, function=function,
                       key=f"{self.path}::{function or '<module>'}::{target}", snippet=snippet,
                       fixable=fixable, safe_to_rewrite=fixable and safe and hazard is None, hazard=hazard)


def import_aliases(module: cst.Module) -> dict[str, str]:
    """Local name -> dotted module path for every absolute import anywhere in the module."""
    found: dict[str, str] = {}

    class _Imports(cst.CSTVisitor):
        def visit_Import(self, node: cst.Import) -> None:
            for alias in node.names:
                full = _dotted(alias.name)
                if alias.asname is not None:
                    found[_dotted(alias.asname.name)] = full
                else:
                    head = full.split(".")[0]
                    found[head] = head

        def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
            if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
                return
            base = _dotted(node.module)
            for alias in node.names:
                name = _dotted(alias.name)
                local = _dotted(alias.asname.name) if alias.asname is not None else name
                found[local] = f"{base}.{name}"

    module.visit(_Imports())
    return {**_DEFAULT_ALIASES, **found}


def _dotted(expr: cst.BaseExpression) -> str:
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        return f"{_dotted(expr.value)}.{expr.attr.value}"
    return ""


def render(expr: cst.BaseExpression, module: cst.Module) -> str:
    """Canonical text of a target expression, used in keys: string subscripts in double quotes."""
    if isinstance(expr, cst.Attribute):
        return f"{render(expr.value, module)}.{expr.attr.value}"
    if isinstance(expr, cst.Subscript):
        parts = []
        for el in expr.slice:
            sub = el.slice
            if isinstance(sub, cst.Index) and isinstance(sub.value, cst.SimpleString):
                parts.append(_quoted(sub.value))
            else:
                parts.append(" ".join(module.code_for_node(sub).split()))
        return f"{render(expr.value, module)}[{', '.join(parts)}]"
    return " ".join(module.code_for_node(expr).split())


def _quoted(s: cst.SimpleString) -> str:
    value = s.evaluated_value
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def string_key(sub: cst.BaseSlice) -> str | None:
    """The key of `x["key"]`, or None when the subscript is not a plain string constant."""
    if isinstance(sub, cst.Index) and isinstance(sub.value, cst.SimpleString):
        value = sub.value.evaluated_value
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return None


def kwarg(call: cst.Call, name: str) -> cst.Arg | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def positional(call: cst.Call, index: int) -> cst.Arg | None:
    """The index-th positional argument, or None (also None once a * or ** unpack precedes it)."""
    i = 0
    for arg in call.args:
        if arg.keyword is not None or arg.star:
            return None
        if i == index:
            return arg
        i += 1
    return None


def method_name(call: cst.Call) -> str | None:
    return call.func.attr.value if isinstance(call.func, cst.Attribute) else None


def is_literal_true(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "True"


class ScopedVisitor(cst.CSTVisitor):
    """Tracks the enclosing function and whether the current code runs once per step.

    Per-step code: any function whose name matches the configured pattern (and everything
    nested in it), plus loop bodies, while loops and comprehension bodies anywhere.
    """

    def __init__(self, ctx: ModuleContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.functions: list[cst.FunctionDef] = []
        self._per_step_fn: list[bool] = []
        self._loops = 0
        self._saved_loops: list[int] = []

    @property
    def function(self) -> str | None:
        return self.functions[-1].name.value if self.functions else None

    @property
    def in_loop(self) -> bool:
        return self._loops > 0

    @property
    def per_step(self) -> bool:
        return self._loops > 0 or any(self._per_step_fn)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions.append(node)
        self._per_step_fn.append(bool(self.ctx.per_step_re.search(node.name.value)))
        self._saved_loops.append(self._loops)
        self._loops = 0  # a def inside a loop body does not run per iteration by itself

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.functions.pop()
        self._per_step_fn.pop()
        self._loops = self._saved_loops.pop()

    def _enter_loop(self, node: cst.CSTNode) -> None:
        self._loops += 1

    def _leave_loop(self, node: cst.CSTNode) -> None:
        self._loops -= 1

    visit_For_body = _enter_loop
    leave_For_body = _leave_loop
    visit_While = _enter_loop

    def leave_While(self, original_node: cst.While) -> None:
        self._loops -= 1

    visit_ListComp_elt = _enter_loop
    leave_ListComp_elt = _leave_loop
    visit_SetComp_elt = _enter_loop
    leave_SetComp_elt = _leave_loop
    visit_GeneratorExp_elt = _enter_loop
    leave_GeneratorExp_elt = _leave_loop
    visit_DictComp_key = _enter_loop
    leave_DictComp_key = _leave_loop
    visit_DictComp_value = _enter_loop
    leave_DictComp_value = _leave_loop
    visit_CompFor_ifs = _enter_loop
    leave_CompFor_ifs = _leave_loop
    visit_CompFor_inner_for_in = _enter_loop
    leave_CompFor_inner_for_in = _leave_loop


def dedupe_keys(findings: list[Finding]) -> list[Finding]:
    """Make keys unique per rule in one file, in source order: repeats get `#2`, `#3`, ..."""
    seen: dict[tuple[str, str], int] = {}
    out = []
    for f in sorted(findings, key=lambda f: (f.line, f.col, f.rule)):
        n = seen.get((f.rule, f.key), 0) + 1
        seen[(f.rule, f.key)] = n
        out.append(f if n == 1 else replace(f, key=f"{f.key}#{n}"))
    return out


def shorten(code: str, limit: int = 100) -> str:
    """Keep keys and messages readable: long expressions end in `...`."""
    return code if len(code) <= limit else code[: limit - 3] + "..."
