"""Apply chosen zero-init-buffer rewrites (zeros -> empty) to source, one finding at a time.

Findings are matched by key (path-independent part), so a policy can analyse once and
apply or revert any subset later; formatting and comments outside the rewritten call
are left byte-for-byte as they were.
"""

from __future__ import annotations

from typing import Iterable

import libcst as cst

from .rules.buffers import zero_init_sites
from .flow import Alloc
from .context import ModuleContext
from .factories import to_empty
from .findings import ZERO_INIT, AnalyzerConfig, Finding
from agent.errors import PerfagentError


class RewriteError(PerfagentError, ValueError):
    """A requested rewrite does not match an allocation in the given source."""


def apply_rewrites(source: str, findings: Iterable[Finding]) -> str:
    """`source` with exactly the given fixable zero-init-buffer findings (of this one file) rewritten.

    Other findings are ignored. A finding that no longer matches the source raises
    RewriteError rather than silently doing nothing.
    """
    wanted = [f for f in findings if f.rule == ZERO_INIT and f.fixable]
    if not wanted:
        return source
    if len({f.path for f in wanted}) > 1:
        raise RewriteError("apply_rewrites takes the findings of one file; group them by path "
                           "(as the rules policy and lint --fix do)")
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as e:
        raise RewriteError(f"{wanted[0].path}: does not parse: {e.message}") from None
    ctx = ModuleContext.build(module, wanted[0].path, AnalyzerConfig(), source)
    sites = zero_init_sites(ctx)
    by_key = {_local(f.key): a for f, a in sites}
    by_pos = {(f.line, f.col): (f, a) for f, a in sites}
    chosen: dict[int, Alloc] = {}
    for w in wanted:
        alloc = by_key.get(_local(w.key))
        if alloc is None and (w.line, w.col) in by_pos:  # numbering (#2) shifted, same target at the same place
            f, a = by_pos[(w.line, w.col)]
            alloc = a if _unnumbered(_local(f.key)) == _unnumbered(_local(w.key)) else None
        if alloc is None or not alloc.factory.fixable:
            raise RewriteError(f"{w.key}: no matching rewritable allocation in this source")
        chosen[id(alloc.call)] = alloc
    return module.visit(_ToEmpty(chosen)).code


def _local(key: str) -> str:
    """`path::function::target` without the path, so copies of a file match."""
    return key.split("::", 1)[1] if "::" in key else key


def _unnumbered(key: str) -> str:
    head, sep, tail = key.rpartition("#")
    return head if sep and tail.isdigit() else key


class _ToEmpty(cst.CSTTransformer):
    def __init__(self, chosen: dict[int, Alloc]) -> None:
        super().__init__()
        self.chosen = chosen

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        alloc = self.chosen.get(id(original_node))
        return to_empty(updated_node, alloc.factory) if alloc else updated_node
