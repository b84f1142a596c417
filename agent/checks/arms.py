"""What "ran in full" means for a changed line: its statements and the arms of its conditionals.

A line executed is not a line run in full: `def f(): return x` executes at import while `f` is never
called, `if cond: body` executes its test and maybe never its body, `a if c else b` evaluates one arm.
For such lines ("fine" lines: several statements on the line, or a conditional on it) the check hook
records, where the interpreter has column positions (3.11+), the source span of every instruction that
ran and the spans at both ends of every conditional jump it took; this module reads those against the
line's syntax (the harness's own `ast`, with the same byte columns the compiler uses). Pure functions.

- a statement ran when an instruction ran whose innermost enclosing statement it is (a `def`'s body
  statements run only inside the call, a one-line `if`'s body only when the body ran);
- an arm was taken when an instruction inside it ran (`if` body, `else` body, either side of a
  conditional expression, a right operand of `and`/`or`, what a comprehension filter lets through, a
  lambda's body), or, for the arms no instruction of their own marks (an `if` without `else` skipped,
  a short-circuit), when a conditional jump from the test landed outside it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Iterable

from agent.util import pyast

Pos = tuple[int, int, int, int]  # line, column, end line, end column (columns in UTF-8 bytes, as co_positions)


def span(node: ast.AST) -> Pos:
    return (node.lineno, node.col_offset, node.end_lineno or node.lineno,  # type: ignore[attr-defined]
            node.end_col_offset if node.end_col_offset is not None else 1 << 30)  # type: ignore[attr-defined]


def within(inner: Pos, outer: Pos) -> bool:
    return (outer[0], outer[1]) <= (inner[0], inner[1]) and (inner[2], inner[3]) <= (outer[2], outer[3])


def overlaps(a: Pos, b: Pos) -> bool:
    return (a[0], a[1]) < (b[2], b[3]) and (b[0], b[1]) < (a[2], a[3])


@dataclass(frozen=True)
class Arm:
    """One way through a conditional. Taken when an instruction ran inside one of `inside`, or a
    conditional jump from `jump_from` (its span overlapping, not inside `not_from`) landed outside
    `away_not_into` (or on its own span: an exit block that borrowed the jump's location)."""

    line: int
    name: str
    inside: tuple[Pos, ...] = ()
    jump_from: Pos | None = None
    not_from: tuple[Pos, ...] = ()
    away_not_into: tuple[Pos, ...] = ()
    own_span_away: bool = True  # a landing on the jump's own span counts as away (not for `and`/`or`)

    def taken(self, ran: set[Pos], edges: set[tuple[Pos, Pos]]) -> bool:
        if any(within(p, s) for p in ran for s in self.inside):
            return True
        if self.jump_from is None:
            return False
        for src, dst in edges:
            if not overlaps(src, self.jump_from) or any(within(src, s) for s in self.not_from):
                continue
            if (dst == src and self.own_span_away) or not any(within(dst, s) for s in self.away_not_into):
                return True
        return False


@dataclass
class Shape:
    """The statements (spans) a fine changed line holds and the arms of its conditionals."""

    line: int
    units: list[Pos] = field(default_factory=list)
    arms: list[Arm] = field(default_factory=list)


@dataclass
class FileShape:
    """A changed file's fine lines, the lines whose instructions the hook must record, and every
    statement's span (to find the innermost statement of an instruction)."""

    lines: dict[int, Shape] = field(default_factory=dict)
    record: set[int] = field(default_factory=set)
    statements: list[Pos] = field(default_factory=list)

    def innermost(self, p: Pos) -> Pos | None:
        best = None
        for s in self.statements:
            if within(p, s) and (best is None or within(s, best)):
                best = s
        return best

    def statements_ran(self, ran: set[Pos]) -> set[Pos]:
        return {s for p in ran if (s := self.innermost(p)) is not None}


def _header_end(stmt: ast.stmt) -> int:
    """The last line of a compound statement's own part (up to its colon); a simple one's last line."""
    body = getattr(stmt, "body", None)
    if not isinstance(body, list) or not body or not isinstance(body[0], ast.stmt):
        return stmt.end_lineno or stmt.lineno
    header = [getattr(n, "end_lineno", None) for n in ast.iter_child_nodes(stmt) if not isinstance(n, ast.stmt)]
    last = max([stmt.lineno, *[h for h in header if isinstance(h, int) and h <= body[0].lineno]])
    return body[0].lineno if body[0].lineno <= last else body[0].lineno - 1


def _own(stmt: ast.stmt) -> range:
    return range(stmt.lineno, _header_end(stmt) + 1)


def _lines(p: Pos) -> range:
    return range(p[0], p[2] + 1)


def _first(stmts: list[ast.stmt]) -> tuple[Pos, range]:
    """The span of a block's first statement and the lines of its own part (where it starts running)."""
    return span(stmts[0]), _own(stmts[0])


def _if_arms(node: ast.If, line: int) -> tuple[list[Arm], set[int]]:
    body, body_lines = _first(node.body)
    block = (span(node.body[0])[0], span(node.body[0])[1], *span(node.body[-1])[2:])
    test = span(node.test)
    record = set(body_lines) | set(_lines(test)) | {node.lineno}
    arms = [Arm(line, "the if arm", inside=(body,))]
    if node.orelse:
        other, other_lines = _first(node.orelse)
        record |= set(other_lines)
        arms.append(Arm(line, "the elif arm" if isinstance(node.orelse[0], ast.If) and len(node.orelse) == 1
                        else "the else arm", inside=(other,)))
    else:
        header = (node.lineno, node.col_offset, test[2], test[3])
        arms.append(Arm(line, "the if's test false (body skipped)", jump_from=header, not_from=(block,),
                        away_not_into=(block, test)))
    return arms, record


def _expr_arms(node: ast.expr, line: int) -> tuple[list[Arm], set[int]]:
    whole = span(node)
    record = set(_lines(whole))
    if isinstance(node, ast.IfExp):
        return [Arm(line, "the conditional expression's if arm", inside=(span(node.body),)),
                Arm(line, "the conditional expression's else arm", inside=(span(node.orelse),))], record
    if isinstance(node, ast.BoolOp):
        op = "and" if isinstance(node.op, ast.And) else "or"
        values = [span(v) for v in node.values]
        arms = [Arm(line, f"the `{op}`'s right operand" if len(values) == 2 else f"the `{op}`'s operand {i + 1}",
                    inside=(v,)) for i, v in enumerate(values) if i]
        arms.append(Arm(line, f"the `{op}` short-circuiting", jump_from=whole, not_from=(values[-1],),
                        away_not_into=(whole,), own_span_away=False))
        return arms, record
    if isinstance(node, ast.Lambda):
        return [Arm(line, "the lambda's body (never called)", inside=(span(node.body),))], record
    arms = []
    assert isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp))
    result = [span(node.key), span(node.value)] if isinstance(node, ast.DictComp) else [span(node.elt)]
    for g, gen in enumerate(node.generators):
        after = [span(node.generators[g + 1].iter)] if g + 1 < len(node.generators) else result
        for k, cond in enumerate(gen.ifs):
            passed = (span(gen.ifs[k + 1]),) if k + 1 < len(gen.ifs) else tuple(after)
            # its rejecting arm is not asked for: 3.13 places the rejecting jump on the element's span
            arms.append(Arm(line, "the comprehension filter passing", inside=passed))
    return arms, record


_CONDITIONAL = (ast.IfExp, ast.BoolOp, ast.Lambda, ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def shape(source: str, changed: Iterable[int]) -> FileShape:
    """The fine lines among `changed` (statement lines, as coverage's parser names them) and what the
    hook must record for them. Raises SyntaxError for source the harness cannot parse."""
    tree = pyast.parse(source)
    wanted = set(changed)
    out = FileShape()
    stmts = [n for n in ast.walk(tree) if isinstance(n, ast.stmt)]
    out.statements = [span(s) for s in stmts]
    units: dict[int, list[ast.stmt]] = {}
    for s in stmts:
        for n in _own(s):
            if n in wanted:
                units.setdefault(n, []).append(s)
    arms: dict[int, list[Arm]] = {}
    record: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            touched = sorted(wanted & set(_lines(span(node.test))))
            if touched:
                got, rec = _if_arms(node, touched[0])
        elif isinstance(node, _CONDITIONAL):
            touched = sorted(wanted & set(_lines(span(node))))
            if touched:
                got, rec = _expr_arms(node, touched[0])
        else:
            continue
        if touched:
            arms.setdefault(touched[0], []).extend(got)
            record |= rec
    for n in sorted(wanted):
        here = units.get(n, [])
        if len(here) > 1 or n in arms:
            out.lines[n] = Shape(n, [span(s) for s in here], arms.get(n, []))
            record |= {m for s in here for m in _own(s)}
    out.record = record if out.lines else set()
    return out


def untaken(fs: FileShape, line: int, ran: set[Pos], edges: set[tuple[Pos, Pos]]) -> tuple[bool, list[str], list[str]]:
    """Whether every statement on `line` ran, and the names of the arms taken and not taken there."""
    sh = fs.lines[line]
    done = fs.statements_ran(ran)
    full = all(u in done for u in sh.units)
    flags = [a.taken(ran, edges) for a in sh.arms]
    return full, [a.name for a, t in zip(sh.arms, flags) if t], [a.name for a, t in zip(sh.arms, flags) if not t]
