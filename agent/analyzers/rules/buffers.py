"""zero-init-buffer and buffer-prefix-zero: which zero-filled buffers could be `torch.empty`.

Every zero-filled allocation bound inside a function is reported (flow.py finds them). It is
`safe_to_rewrite` only with a proof (dominance.py): a full overwrite straight after the
allocation, in the same function, before any use. Without one it keeps its finding with a
`hazard` naming what is unknown, a candidate for the poison-memory check. A write that relies
on the initial contents (skipped prefix, accumulation, sparse write) is also reported as
buffer-prefix-zero, and called a likely bug when the buffer it reaches is uninitialised.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from ..context import ModuleContext, shorten
from ..dominance import covering_write, unknown
from ..flow import Alloc, BufferFacts, FlowVisitor, Write, collect
from ..findings import PREFIX_ZERO, ZERO_INIT, Finding

_REASONS = {
    "prefix": "never writes {skipped}",
    "accumulate": "accumulates into it, reading its initial values",
    "sparse": "writes only selected elements; the rest keep their initial values",
}


def zero_init_sites(ctx: ModuleContext, facts: BufferFacts | None = None) -> list[tuple[Finding, Alloc]]:
    """zero-init-buffer findings (keys made unique in source order) with the call each one rewrites."""
    facts = facts or collect(ctx)
    hazards: dict[int, list[str]] = defaultdict(list)
    uses: dict[int, list[Write]] = defaultdict(list)
    for i, alloc_indices in facts.links.items():
        for j in alloc_indices:
            uses[j].append(facts.writes[i])
            if facts.writes[i].kind in _REASONS:
                hazards[j].append(_hazard_text(ctx, facts.writes[i]))
    out: list[tuple[Finding, Alloc]] = []
    seen: dict[str, int] = defaultdict(int)
    for j, a in enumerate(facts.allocs):
        if not a.factory.zero or a.function is None:
            continue  # module-level allocations run once; only buffers inside functions are reported
        found = list(hazards[j])
        if a.factory.grad:
            found.append("requires_grad=True: a leaf tensor whose initial zeros are its value")
        proof = None if found else covering_write(ctx, a, uses[j])
        if not found and proof is None:
            found.append(unknown(ctx, a, uses[j]))
        empty = f"{a.factory.name.rsplit('.', 1)[0]}.{a.factory.new_attr}" if a.factory.new_attr else "torch.empty"
        message = (f"`{a.factory.name}` zero-fills `{a.target}`; if every element is written before it is "
                   f"read, `{empty}` skips the memset")
        if proof is not None:
            message += (f" (it is: `{shorten(ctx.code(proof.node), 80)}` on line {ctx.start(proof.node)[0]} "
                        "overwrites it first)")
        f = ctx.finding(ZERO_INIT, a.call, message, a.function, a.target, fixable=a.factory.fixable, safe=True,
                        hazard="; ".join(found) or None)
        seen[f.key] += 1
        if seen[f.key] > 1:
            f = replace(f, key=f"{f.key}#{seen[f.key]}")
        out.append((f, a))
    return out


def visitor(ctx: ModuleContext, rules: set[str]) -> "BufferRule | None":
    return BufferRule(ctx, rules) if rules & {ZERO_INIT, PREFIX_ZERO} else None


class BufferRule(FlowVisitor):
    def __init__(self, ctx: ModuleContext, rules: set[str]) -> None:
        super().__init__(ctx)
        self.rules = rules

    def findings(self) -> list[Finding]:
        facts = self.buffer_facts()
        found: list[Finding] = []
        if ZERO_INIT in self.rules:
            found += [f for f, _ in zero_init_sites(self.ctx, facts)]
        if PREFIX_ZERO in self.rules:
            for i, w in enumerate(facts.writes):
                linked = [facts.allocs[j] for j in facts.links.get(i, [])]
                if w.kind in _REASONS and (linked or w.kind == "prefix"):
                    found.append(_write_finding(self.ctx, w, linked))
        return found


def _write_finding(ctx: ModuleContext, w: Write, linked: list[Alloc]) -> Finding:
    code = shorten(ctx.code(w.node))
    reason = _REASONS[w.kind].format(skipped=_skipped(w.skips))
    if not linked:
        message = f"`{code}` {reason}: whatever allocates this buffer must zero those elements"
    else:
        parts = []
        for a in linked:
            line = ctx.start(a.call)[0]
            if a.factory.zero:
                parts.append(f"relies on the zeros from `{a.factory.name}` for `{a.target}` (line {line}): "
                             "keep it zero-filled")
            else:
                parts.append(f"but `{a.target}` is uninitialised `{a.factory.name}` (line {line}): it reads garbage")
        message = f"`{code}` {reason}; " + "; ".join(parts)
    return ctx.finding(PREFIX_ZERO, w.node, message, w.function, w.target)


def _hazard_text(ctx: ModuleContext, w: Write) -> str:
    line = ctx.start(w.node)[0]
    reason = _REASONS[w.kind].format(skipped=_skipped(w.skips))
    return f"{reason}: `{shorten(ctx.code(w.node))}` at {ctx.path}:{line} ({w.function or '<module>'})"


def _skipped(skips: tuple[str, ...]) -> str:
    return " and ".join("element 0" if s == "1" else f"the elements before index {s}" for s in skips) or "its start"
