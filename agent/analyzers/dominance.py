"""When may a zero-filled buffer honestly be called safe to allocate with `torch.empty`?

Only when the analyzer sees the proof: in the function that allocates it, a later statement of
the same block (straight-line code: no branch, loop or early exit between) writes every
element (`Write.full`: `buf.copy_(x)`, `buf.fill_(v)`, `buf[:] = v`, `out=buf`), and nothing
between the allocation and that write uses the buffer or calls one of this module's functions
(which may read it through `self`). Every later read is then dominated by that write.

A full write somewhere else in the module is not a proof: the buffer escapes the allocating
function, and capture, warm-up or another method may read it before that write runs. For those
buffers `unknown` says what is missing, so the finding stays a candidate for a dynamic check.
"""

from __future__ import annotations

import libcst as cst

from .context import ModuleContext, shorten
from .facts import reachable
from .flow import Alloc, Write

Position = tuple[int, int]
_EXITS = (cst.Return, cst.Raise, cst.Break, cst.Continue)


def covering_write(ctx: ModuleContext, alloc: Alloc, uses: list[Write]) -> Write | None:
    """The full write that provably precedes every use of `alloc`'s buffer, or None."""
    suite = _block_of(ctx, alloc.call)
    if suite is None:
        return None
    start = _end(ctx, alloc.call)
    for w in sorted(uses, key=lambda w: ctx.start(w.node)):
        at = ctx.start(w.node)
        if at <= start:
            continue  # inside the allocating statement itself (`x = torch.zeros(n).to(d)`)
        if not (w.kind == "write" and w.full and w.ref == alloc.ref and w.function == alloc.function):
            return None  # the first use after the allocation is not a full overwrite
        if _straight_line(ctx, suite, alloc, start, w):
            return w
        return None
    return None


def unknown(ctx: ModuleContext, alloc: Alloc, uses: list[Write]) -> str:
    """Why no proof was found: what may read the buffer's zeros before a write, as far as the code shows."""
    writes = [w for w in uses if w.kind != "read"]
    if not writes:
        return "no write to it was found in this module: whoever reads it may rely on its zeros"
    chain = reachable(ctx.facts.calls, [alloc.function]) if alloc.function else frozenset()
    if not any(w.function in chain for w in writes):
        early = [w for w in uses if w.kind == "read" and w.function in chain and w.function != alloc.function]
        if early:
            w = early[0]
            return (f"read by `{w.function}`, which `{alloc.function}` calls, before anything in that call chain "
                    f"writes it: {_at(ctx, w)}")
    reasons = [f"read in `{r.function}` before any write seen there: {_at(ctx, r)}"
               for r in _unguarded_reads(ctx, uses)]
    full = [w for w in writes if w.full]
    here = [w for w in full if w.function == alloc.function]
    if here:
        reasons.append(f"written in full in `{alloc.function}` ({_at(ctx, here[0])}) but not straight after the "
                       "allocation: a branch, a loop, a call or an earlier use comes first")
    elif full:
        fns = ", ".join(sorted({f"`{w.function or '<module>'}`" for w in full}))
        reasons.append(f"written in full only in {fns} ({_at(ctx, full[0])}), not where it is allocated: "
                       "capture, warm-up or another method may read it before that runs")
    else:
        w = writes[0]
        reasons.append(f"only partial or opaque writes seen ({_at(ctx, w)} in `{w.function or '<module>'}`): "
                       "elements they do not cover keep their zeros")
    return "; ".join(reasons[:2])


def _unguarded_reads(ctx: ModuleContext, uses: list[Write]) -> list[Write]:
    """The first read in each function that no write in that function precedes."""
    out: dict[str | None, Write] = {}
    for r in sorted((w for w in uses if w.kind == "read"), key=lambda w: ctx.start(w.node)):
        before = [w for w in uses if w.kind != "read" and w.function == r.function
                  and ctx.start(w.node) < ctx.start(r.node)]
        if not before and r.function not in out:
            out[r.function] = r
    return list(out.values())[:1]


def _at(ctx: ModuleContext, w: Write) -> str:
    return f"`{shorten(ctx.code(w.node), 80)}` at {ctx.path}:{ctx.start(w.node)[0]}"


def _end(ctx: ModuleContext, node: cst.CSTNode) -> Position:
    pos = ctx.positions[node].end
    return pos.line, pos.column + 1


def _contains(ctx: ModuleContext, node: cst.CSTNode, at: Position) -> bool:
    return ctx.start(node) <= at <= _end(ctx, node)


def _block_of(ctx: ModuleContext, call: cst.Call) -> list[cst.BaseStatement] | None:
    """The statements of the innermost block whose simple statement holds `call` (inside a function)."""
    at = ctx.start(call)
    function = _innermost_function(ctx, ctx.module.body, at)
    if function is None or not isinstance(function.body, cst.IndentedBlock):
        return None
    body: list[cst.BaseStatement] = list(function.body.body)
    while True:
        holder = next((s for s in body if _contains(ctx, s, at)), None)
        if holder is None or isinstance(holder, cst.SimpleStatementLine):
            return body if holder is not None else None
        inner = next((b for b in _blocks(holder) if any(_contains(ctx, s, at) for s in b)), None)
        if inner is None:
            return None  # in a condition or header, not in a block's statements
        body = inner


def _innermost_function(ctx: ModuleContext, body, at: Position) -> cst.FunctionDef | None:
    found = None
    for stmt in body:
        if isinstance(stmt, cst.SimpleStatementLine) or not _contains(ctx, stmt, at):
            continue
        if isinstance(stmt, cst.FunctionDef):
            found = stmt
        for block in _blocks(stmt):
            found = _innermost_function(ctx, block, at) or found
    return found


def _blocks(stmt: cst.CSTNode) -> list[list[cst.BaseStatement]]:
    """The statement lists directly inside a compound statement (body, elif/else, handlers, finally)."""
    out = []
    body = getattr(stmt, "body", None)
    if isinstance(body, cst.IndentedBlock):
        out.append(list(body.body))
    for part in (*getattr(stmt, "handlers", ()), getattr(stmt, "orelse", None), getattr(stmt, "finalbody", None)):
        if part is not None:
            out += _blocks(part)
    return out


def _straight_line(ctx: ModuleContext, suite: list[cst.BaseStatement], alloc: Alloc, start: Position,
                   write: Write) -> bool:
    """Between the allocation and the write (its arguments included) the block runs only simple
    statements that neither mention the buffer nor call this module's functions."""
    at = ctx.start(write.node)
    between = [s for s in suite if _end(ctx, s) > start and ctx.start(s) <= at]
    if not between or not _contains(ctx, between[-1], at) or not all(
            isinstance(s, cst.SimpleStatementLine) for s in between):
        return False
    seen = _Between(ctx, alloc.target, start, at, _end(ctx, write.node))
    for s in between:
        if any(isinstance(small, _EXITS) for small in s.body):
            return False
        s.visit(seen)
    return not seen.found


class _Between(cst.CSTVisitor):
    """Mentions of the buffer (or of the object holding it) and calls to this module's own
    functions (they may read it through `self`) after the allocation, up to the end of the write;
    the write's own receiver, which starts where the write does, does not count."""

    def __init__(self, ctx: ModuleContext, target: str, start: Position, at: Position, end: Position) -> None:
        super().__init__()
        self.ctx, self.start, self.at, self.end, self.found = ctx, start, at, end, False
        self.names = {target} | {target[:i] for i, ch in enumerate(target)
                                 if ch in ".[" and target[:i] not in ("self", "cls")}

    def _inside(self, node: cst.CSTNode) -> bool:
        pos = self.ctx.start(node)
        return self.start < pos < self.end and pos != self.at

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        name = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else ""
        if name in self.ctx.facts.defs and self._inside(node):
            self.found = True

    def _mention(self, node: cst.BaseExpression) -> None:
        if self._inside(node) and self.ctx.render(node) in self.names:
            self.found = True

    def visit_Name(self, node: cst.Name) -> None:
        self._mention(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._mention(node)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        self._mention(node)
