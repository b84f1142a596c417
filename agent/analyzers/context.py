"""What every rule needs about one module: positions, module facts, scopes, finding builder.

Rules are visitors over a `ModuleContext`; this module owns the libcst plumbing so the
rule modules read like the patterns they match. All rule visitors share one traversal
(`run_visitors`), which matters: each libcst pass over a file costs as much as the rest of
the analysis.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from .facts import ModuleFacts, collect_facts, qualify
from .findings import AnalyzerConfig, Finding


@dataclass(frozen=True)
class ModuleContext:
    """One parsed module and the facts every rule shares."""

    path: str
    module: cst.Module
    positions: Mapping[cst.CSTNode, CodeRange] = field(repr=False)
    facts: ModuleFacts = field(repr=False)
    config: AnalyzerConfig
    lines: tuple[str, ...] = field(repr=False)
    setup_re: re.Pattern[str] = field(repr=False)
    one_time_re: re.Pattern[str] = field(repr=False)
    _code: dict[int, str] = field(default_factory=dict, repr=False, compare=False)  # memo: code generation is slow

    @classmethod
    def build(cls, module: cst.Module, path: str, config: AnalyzerConfig, source: str | None = None) -> "ModuleContext":
        """`source`, when given, must be the text `module` was parsed from (saves a code generation pass)."""
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        positions = wrapper.resolve(PositionProvider)
        code: dict[int, str] = {}
        one_time_re = re.compile(config.one_time_pattern, re.IGNORECASE)
        facts = collect_facts(wrapper.module, positions, re.compile(config.per_step_pattern, re.IGNORECASE),
                              lambda node: _render(node, wrapper.module, code), one_time_re)
        return cls(path=path, module=wrapper.module, positions=positions, facts=facts, config=config,
                   lines=tuple((wrapper.module.code if source is None else source).splitlines()),
                   setup_re=re.compile(config.setup_pattern), one_time_re=one_time_re, _code=code)

    @property
    def imports(self) -> Mapping[str, str]:
        return self.facts.imports

    def start(self, node: cst.CSTNode) -> tuple[int, int]:
        """1-based (line, col) of a node's first character."""
        pos = self.positions[node].start
        return pos.line, pos.column + 1

    def code(self, node: cst.CSTNode) -> str:
        """The node's source on one line (whitespace runs collapsed)."""
        key = id(node)
        if key not in self._code:
            self._code[key] = " ".join(self.module.code_for_node(node).split())
        return self._code[key]

    def render(self, expr: cst.BaseExpression) -> str:
        """Canonical text of a target expression, used in keys: string subscripts in double quotes."""
        return _render(expr, self.module, self._code)

    def qualified(self, expr: cst.BaseExpression) -> str | None:
        """Dotted name with import aliases expanded: `F.pad` -> `torch.nn.functional.pad`."""
        return qualify(expr, self.facts.imports)

    def finding(self, rule: str, node: cst.CSTNode, message: str, function: str | None, target: str,
                *, fixable: bool = False, safe: bool = False, hazard: str | None = None) -> Finding:
        line, col = self.start(node)
        snippet = self.lines[line - 1].strip() if line <= len(self.lines) else ""
        return Finding(rule=rule, path=self.path, line=line, col=col, message=message, function=function,
                       key=f"{self.path}::{function or '<module>'}::{target}", snippet=snippet,
                       fixable=fixable, safe_to_rewrite=fixable and safe and hazard is None, hazard=hazard)


def _render(expr: cst.CSTNode, module: cst.Module, memo: dict[int, str]) -> str:
    if isinstance(expr, cst.Attribute):
        return f"{_render(expr.value, module, memo)}.{expr.attr.value}"
    if isinstance(expr, cst.Subscript):
        parts = []
        for el in expr.slice:
            key = string_key(el.slice)
            parts.append(quoted(key) if key is not None else _render(el.slice, module, memo))
        return f"{_render(expr.value, module, memo)}[{', '.join(parts)}]"
    if id(expr) not in memo:
        memo[id(expr)] = " ".join(module.code_for_node(expr).split())
    return memo[id(expr)]


def quoted(key: str) -> str:
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


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


def shorten(code: str, limit: int = 100) -> str:
    """Keep keys and messages readable: long expressions end in `...`."""
    return code if len(code) <= limit else code[: limit - 3] + "..."


class ScopedVisitor(cst.BatchableCSTVisitor):
    """Tracks the enclosing function and whether the current code runs once per step.

    Per-step code: the body of a per-step function (`ModuleFacts.per_step`: matching the
    configured pattern or called from one) and everything nested in it, plus loop bodies,
    while loops and comprehension bodies outside one-time setup functions (`__init__`,
    `init_cuda_graph_state`, capture, warm-up, cache growth, ...). Subclasses that override a hook call super().
    """

    def __init__(self, ctx: ModuleContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.functions: list[cst.FunctionDef] = []
        self._per_step_fn: list[bool] = []
        self._setup_fn: list[bool] = []
        self._loops = 0
        self._saved_loops: list[int] = []
        self._found: list[Finding] = []

    def findings(self) -> list[Finding]:
        """What this visitor flagged; rules that derive findings after the walk override it."""
        return self._found

    @property
    def function(self) -> str | None:
        return self.functions[-1].name.value if self.functions else None

    @property
    def in_loop(self) -> bool:
        return self._loops > 0

    @property
    def per_step(self) -> bool:
        return any(self._per_step_fn) or (self._loops > 0 and not any(self._setup_fn))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        name = node.name.value
        per_step = name in self.ctx.facts.per_step
        self.functions.append(node)
        self._per_step_fn.append(per_step)
        self._setup_fn.append(not per_step and bool(self.ctx.setup_re.search(name)
                                                    or self.ctx.one_time_re.search(name)))
        self._saved_loops.append(self._loops)
        self._loops = 0  # a def inside a loop body does not run per iteration by itself

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.functions.pop()
        self._per_step_fn.pop()
        self._setup_fn.pop()
        self._loops = self._saved_loops.pop()

    # Loop bodies. Written out one by one: libcst's batched traversal finds hooks by their
    # function names, so aliases (`visit_For_body = _enter`) would be silently skipped.
    def visit_For_body(self, node: cst.For) -> None:
        self._loops += 1

    def leave_For_body(self, node: cst.For) -> None:
        self._loops -= 1

    def visit_While(self, node: cst.While) -> None:
        self._loops += 1

    def leave_While(self, original_node: cst.While) -> None:
        self._loops -= 1

    def visit_ListComp_elt(self, node: cst.ListComp) -> None:
        self._loops += 1

    def leave_ListComp_elt(self, node: cst.ListComp) -> None:
        self._loops -= 1

    def visit_SetComp_elt(self, node: cst.SetComp) -> None:
        self._loops += 1

    def leave_SetComp_elt(self, node: cst.SetComp) -> None:
        self._loops -= 1

    def visit_GeneratorExp_elt(self, node: cst.GeneratorExp) -> None:
        self._loops += 1

    def leave_GeneratorExp_elt(self, node: cst.GeneratorExp) -> None:
        self._loops -= 1

    def visit_DictComp_key(self, node: cst.DictComp) -> None:
        self._loops += 1

    def leave_DictComp_key(self, node: cst.DictComp) -> None:
        self._loops -= 1

    def visit_DictComp_value(self, node: cst.DictComp) -> None:
        self._loops += 1

    def leave_DictComp_value(self, node: cst.DictComp) -> None:
        self._loops -= 1

    def visit_CompFor_ifs(self, node: cst.CompFor) -> None:
        self._loops += 1

    def leave_CompFor_ifs(self, node: cst.CompFor) -> None:
        self._loops -= 1

    def visit_CompFor_inner_for_in(self, node: cst.CompFor) -> None:
        self._loops += 1

    def leave_CompFor_inner_for_in(self, node: cst.CompFor) -> None:
        self._loops -= 1


def run_visitors(ctx: ModuleContext, visitors: Iterable[ScopedVisitor]) -> None:
    """One traversal of the module feeding every visitor, in order, at every node."""
    visitors = list(visitors)
    if visitors:
        cst.visit_batched(ctx.module, visitors)


def dedupe_keys(findings: list[Finding]) -> list[Finding]:
    """Make keys unique per rule in one file, in source order: repeats get `#2`, `#3`, ..."""
    seen: dict[tuple[str, str], int] = {}
    out = []
    for f in sorted(findings, key=lambda f: (f.line, f.col, f.rule)):
        n = seen.get((f.rule, f.key), 0) + 1
        seen[(f.rule, f.key)] = n
        out.append(f if n == 1 else replace(f, key=f"{f.key}#{n}"))
    return out
