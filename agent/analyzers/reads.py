"""Where a preallocated buffer's contents are read, for the checks' read-site coverage.

A zeros -> empty rewrite is safe only if every read of the buffer happens after a write, and
the poisoned tests can show that only for the reads they execute. So, for each allocation a
patch touches, this module lists the expressions that read the buffer's contents through any
alias (`flow.FlowVisitor` binds buffers to storage names, follows aliases, metadata objects
and same-module helpers' parameters); the checks then require the tests to run each one.

A read: an argument of a call that is not a pure write of it (a kernel or any unknown function
counts), the receiver of a method that is not a write, a view or a shape query (`buf.max()`,
`.item()`, `.to()`, `add_` ...), an operand of arithmetic, comparison or a truth test, an index
(`x[buf]`), indexing into it on the right of an assignment (`x = buf[i]`, `x = buf[idx_tensor]`),
in-place accumulation (`buf += x`) and iteration. Not reads: binding an alias or a view
(`md.cu = buf[:n]`, `x = buf`), writes (`copy_`, `fill_`, stores, `out=`), shape queries
(`.shape`, `.size()`, `len()`, `torch.empty_like(buf)`) and same-module helpers' arguments
(the helper's own reads are reported, inside it).

The read visitor refines the flow analysis for reads: after an `if`, a local bound differently
in its branches names either binding (not just the last in source order); a field given a
computed value (`md.cu = torch.cumsum(...)`) no longer names the buffer bound before; a
helper that sets fields of its parameter sets them on the caller's object; `getattr(o, "f")`
is `o.f`; and an assignment binds after its right-hand side is read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import libcst as cst

from .context import ModuleContext, kwarg, method_name, shorten, string_key
from .facts import returns_tensor
from .findings import AnalyzerConfig
from .factories import classify
from .flow import ACCUMULATES, TAGGING_CALLS, Alloc, FlowVisitor, entry_style
from .refs import VIEW_METHODS, Ref, resolve

# Methods that look at a tensor's metadata, make a view of it or allocate from its options: not reads.
_NOT_READ_METHODS = VIEW_METHODS | frozenset({
    "size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset", "element_size", "data_ptr",
    "is_contiguous", "get_device", "is_pinned", "untyped_storage", "narrow", "new_empty", "new_empty_strided",
    "new_zeros", "new_ones", "new_full", "new_tensor", "register_buffer", "record_stream"})
# Calls that only look at their arguments' metadata (or bind them): not reads.
_NOT_READ_CALLS = frozenset({
    "len", "isinstance", "type", "id", "hasattr", "getattr", "setattr", "super", "callable",
    "torch.empty_like", "torch.zeros_like", "torch.ones_like", "torch.full_like", "torch.rand_like",
    "torch.randn_like", "torch.randint_like", "torch.is_tensor", "torch.numel"})
_READING_BUILTINS = frozenset({"int", "float", "bool", "str", "repr", "print", "max", "min", "sum", "abs", "round",
                               "list", "tuple", "sorted", "any", "all", "format", "iter", "next", "hash"})
_VIEW_ATTRIBUTES = frozenset({"T", "mT", "H", "mH", "data", "real", "imag"})
# Calls whose result holds (some of) their data arguments' elements, or is a view of them: reading the
# result reads the buffer. The copy itself stays a read site too (nothing after it runs if it does not).
_COPY_FUNCTIONS = frozenset({"torch.cat", "torch.concat", "torch.concatenate", "torch.stack", "torch.hstack",
                             "torch.vstack", "torch.clone", "torch.roll", "torch.flip", "torch.fliplr", "torch.flipud",
                             "torch.rot90", "torch.gather", "torch.index_select", "torch.take",
                             "torch.take_along_dim", "torch.permute", "torch.permute_copy", "torch.transpose",
                             "torch.movedim", "torch.repeat_interleave", "torch.tile", "torch.nn.functional.pad",
                             "torch.where", "torch.from_numpy", "torch.as_tensor", "torch.asarray",
                             "torch.frombuffer"})
_COPY_METHODS = frozenset({"clone", "to", "cuda", "cpu", "float", "half", "bfloat16", "int", "long", "double",
                           "bool", "roll", "flip", "fliplr", "flipud", "rot90", "gather", "index_select", "take",
                           "repeat", "tile", "repeat_interleave", "permute", "transpose", "t", "movedim", "swapaxes",
                           "expand", "expand_as", "select", "unfold", "as_strided"})


@dataclass(frozen=True)
class ReadSite:
    """One expression that reads a buffer's contents."""

    line: int               # 1-based line of the reading expression
    function: str | None    # enclosing function, qualified by its classes: "Backend.forward_decode"
    how: str                # "passed to flash_attn_with_kvcache (cu_seqlens_k_new=)", "read by torch.cumsum", ...
    guard: str | None       # enclosing if/elif/else conditions in its function, outermost first, " and "-joined
    col: int = 1            # 1-based column of the reading expression
    statement: int = 0      # first line of the statement it belongs to (what line coverage records)


def read_sites(source: str, lines: Iterable[int], path: str = "<string>") -> dict[int, list[ReadSite]]:
    """For each of `lines` that allocates a tensor bound to some storage (torch.zeros/empty/full/...,
    as `factories.classify` sees it), every place in the module that reads the buffer's contents
    through any alias; lines that allocate nothing are left out of the result. A line anywhere in a
    multi-line factory call counts. Raises libcst.ParserSyntaxError on a source that does not parse."""
    wanted = set(lines)
    module = cst.parse_module(source)
    ctx = ModuleContext.build(module, path, AnalyzerConfig(), source)
    visitor = _ReadVisitor(ctx)
    cst.visit_batched(ctx.module, [visitor])
    visitor.buffer_facts()  # closes the module scope: fields set after a snapshot join it
    aliases = visitor.read_aliases()
    resolvers: dict[str | None, Callable[[Ref], frozenset[Ref]]] = {}
    live = [c for c in visitor.candidates if not _dominated(c, visitor.full_writes)]
    out: dict[int, list[ReadSite]] = {}
    for alloc in [*visitor.allocs, *visitor.copied_allocs]:
        span = ctx.positions[alloc.call]
        hit = wanted.intersection(range(span.start.line, span.end.line + 1))
        if not hit or alloc.ref is None:
            continue
        home = visitor.class_at(span.start.line)
        if home not in resolvers:
            resolvers[home] = _resolver(aliases, visitor.related(home))
        sites = _sites(resolvers[home], alloc.ref, live, visitor.copies)
        for line in hit:
            out[line] = sorted(set(out.get(line, ())) | sites, key=lambda s: (s.line, s.col, s.how))
    return out


def _resolver(aliases: dict[Ref, list[Ref]], tags: frozenset[str]) -> Callable[[Ref], frozenset[Ref]]:
    """Storage names as seen from an allocation in a class: `self` of that class, of its ancestors and
    descendants (one object may be all of them) is one `self`; another class's stays its own."""
    def norm(ref: Ref) -> Ref:
        return ("self", *ref[2:]) if len(ref) > 1 and ref[0] == "self" and ref[1] in tags else ref

    edges: dict[Ref, list[Ref]] = {}
    for key, values in aliases.items():
        edges.setdefault(norm(key), []).extend(norm(v) for v in values)
    memo: dict[Ref, frozenset[Ref]] = {}

    def ids(ref: Ref) -> frozenset[Ref]:
        if ref not in memo:
            memo[ref] = resolve(norm(ref), edges)
        return memo[ref]
    return ids


def _sites(ids: Callable[[Ref], frozenset[Ref]], buffer: Ref, candidates: list[_Candidate],
           copies: list[tuple[Ref, Ref, str]]) -> set[ReadSite]:
    """The candidates that read the buffer, or a copy of it (`y = torch.cat([buf, x])`: a read of `y`
    reads what came from `buf`), copies of copies included."""
    reached: list[tuple[frozenset[Ref], str | None]] = [(ids(buffer), None)]
    pending = list(copies)
    while True:
        new = [(t, note) for t, s, note in pending if any(_reaches(ids(s), r, False) for r, _ in reached)]
        if not new:
            break
        reached += [(ids(t), note) for t, note in new]
        pending = [c for c in pending if (c[0], c[2]) not in new]
    sites: set[ReadSite] = set()
    for c in candidates:
        read = ids(c.ref)
        for target, note in reached:
            if _reaches(read, target, c.strict and note is None):
                sites.add(c.site if note is None else replace(c.site, how=f"{c.site.how} (a copy of it, {note})"))
                break
    return sites


def _dominated(c: _Candidate, writes: list[tuple[Ref, tuple[int, ...], tuple[int, int]]]) -> bool:
    """A write of every element of the same storage runs before the read on every path to it: a
    statement of its own, earlier in a block that encloses the read (straight-line, in the function)."""
    return any(c.blocks[: len(blocks)] == blocks and c.at > end and c.ref[: len(ref)] == ref
               and all(el == "[*]" for el in c.ref[len(ref):]) for ref, blocks, end in writes)


def _reaches(read_ids: frozenset[Ref], buffer_ids: frozenset[Ref], strict: bool) -> bool:
    """The read lands in the buffer or in rows of it; `strict`: only in rows (`x = buf[i]`)."""
    for r in read_ids:
        for b in buffer_ids:
            if r[: len(b)] == b and all(el == "[*]" for el in r[len(b):]) and (len(r) > len(b) or not strict):
                return True
    return False


@dataclass(frozen=True)
class _Candidate:
    ref: Ref
    strict: bool
    site: ReadSite
    blocks: tuple[int, ...] = ()   # the enclosing blocks (ids), outermost first
    at: tuple[int, int] = (0, 0)   # line, column


class _ReadVisitor(FlowVisitor):
    """FlowVisitor that also records every expression read in a reading position, with the
    storage name it had at that point, its enclosing function and its guards."""

    def __init__(self, ctx: ModuleContext) -> None:
        super().__init__(ctx)
        self.candidates: list[_Candidate] = []
        self.param_values: list[tuple[Ref, Ref]] = []   # (helper parameter, the caller's value)
        self._qualname: list[str] = []
        self._guards: list[list[cst.BaseExpression]] = [[]]  # per function: the conditions on the way here
        self._pushed: list[bool] = []                  # per If: whether its orelse pushed a negation
        self._statements: list[int] = []
        self._binding_args = False
        self._branches: list[tuple[tuple[dict, dict], list[tuple[dict, dict]]]] = []  # per If: base, branch ends
        self._phis = 0
        self._classes: list[str] = []
        self.bases: dict[str, list[str]] = {}
        self.class_spans: list[tuple[int, int, str]] = []
        self._lines: list[cst.SimpleStatementLine] = []
        self.full_writes: list[tuple[Ref, tuple[int, ...], tuple[int, int]]] = []  # ref, blocks, statement end
        self.copies: list[tuple[Ref, Ref, str]] = []   # (the copy, its source, how it was made)
        self.copied_allocs: list[Alloc] = []            # allocations made straight into a copy

    # classes: `self` is the object of the class the method belongs to --------------------------------
    def root_of(self, name: cst.Name) -> Ref:
        if name.value in ("self", "cls") and self._classes:
            return ("self", f"<{self._classes[-1]}>")
        return super().root_of(name)

    def class_at(self, line: int) -> str | None:
        inside = [(start, name) for start, end, name in self.class_spans if start <= line <= end]
        return max(inside)[1] if inside else None

    def related(self, home: str | None) -> frozenset[str]:
        """Tags of the classes whose `self` may be the same object as `home`'s: itself, its ancestors,
        its descendants and their ancestors (classes of this module)."""
        if home is None:
            return frozenset()

        def up(cls: str) -> set[str]:
            out, todo = set(), [cls]
            while todo:
                for base in self.bases.get(todo.pop(), ()):
                    if base not in out:
                        out.add(base)
                        todo.append(base)
            return out

        down = {c for c in self.bases if home in up(c)} | {home}
        related = set(down) | up(home)
        for c in down:
            related |= up(c)
        return frozenset(f"<{c}>" for c in related)

    # writes that dominate reads, and copies ---------------------------------------------------------------
    def _record(self, kind: str, node: cst.CSTNode, target: cst.BaseExpression, ref: Ref | None,
                skips: list[str], full: bool = False) -> None:
        super()._record(kind, node, target, ref, skips, full)
        if kind == "write" and full and ref is not None and self._lines and _whole_statement(self._lines[-1], node):
            end = self.ctx.positions[self._lines[-1]].end
            self.full_writes.append((ref, tuple(self._blocks), (end.line, end.column + 1)))

    def visit_SimpleStatementSuite(self, node: cst.SimpleStatementSuite) -> None:
        self._blocks.append(id(node))  # `if c: buf.copy_(x)`: the write is conditional

    def leave_SimpleStatementSuite(self, original_node: cst.SimpleStatementSuite) -> None:
        self._blocks.pop()

    def _factory(self, expr: cst.BaseExpression) -> cst.Call | None:
        """The allocating call `expr` is (conversions aside), or None."""
        inner = _stripped(expr)
        return inner if isinstance(inner, cst.Call) and classify(inner, self.ctx) is not None else None

    def _copy_sources(self, value: cst.BaseExpression) -> tuple[list[Ref], list[cst.Call], str | None]:
        """What `value` copies: the storage names of its data arguments, the allocations made inside it,
        and how (None when it is no copy)."""
        data: list[cst.BaseExpression] = []
        how = None
        if isinstance(value, cst.Call):
            if self._factory(value) is not None:
                return [], [], None  # an allocation (with conversions), not a copy
            qual = self.ctx.qualified(value.func) or ""
            method = method_name(value)
            positional = [a.value for a in value.args if a.keyword is None and not a.star]
            if qual in _COPY_FUNCTIONS:
                how = qual
                data = positional[1:3] if qual == "torch.where" else positional[:1]
                data += [a.value for a in value.args if a.keyword is not None and a.keyword.value in
                         ("input", "tensors", "self", "other")]
            elif method in _COPY_METHODS:
                how = f".{method}()"
                data = [value.func.value]  # type: ignore[attr-defined]
        elif isinstance(value, cst.Subscript) and any(
                isinstance(el.slice, cst.Index) and self.likely_tensor(el.slice.value) for el in value.slice):
            how, data = "indexing with a tensor", [value.value]
        if how is None:
            return [], [], None
        refs: list[Ref] = []
        allocs: list[cst.Call] = []
        for expr in data:
            for item in expr.elements if isinstance(expr, (cst.List, cst.Tuple)) else [expr]:
                item = item.value if isinstance(item, cst.BaseElement) else item
                if (call := self._factory(item)) is not None:
                    allocs.append(call)
                    continue
                inner_refs, inner_allocs, inner = self._copy_sources(item)
                if inner is not None:
                    refs += inner_refs
                    allocs += inner_allocs
                elif (ref := self.target(item)[0]) is not None:
                    refs.append(ref)
        return refs, allocs, f"made by {how} at line {self.ctx.start(value)[0]}"

    # names: getattr(obj, "field", default) is obj.field -----------------------------------------
    def path(self, expr: cst.BaseExpression) -> Ref | None:
        if (isinstance(expr, cst.Call) and self.ctx.qualified(expr.func) == "getattr" and len(expr.args) >= 2
                and isinstance(expr.args[1].value, cst.SimpleString)):
            owner = self.path(expr.args[0].value)
            key = string_key(cst.Index(expr.args[1].value))
            return None if owner is None or key is None else owner + (f".{key}",)
        return super().path(expr)

    def bind_value(self, ref: Ref | None, text: str, value: cst.BaseExpression) -> None:
        """`md.cu = torch.cumsum(...)`: a local object's field now holds a new value, not the buffer
        bound to it before (nor, after a branch, the one another branch bound)."""
        allocs = len(self.allocs)
        if ref is None or len(ref) < 2 or not self._is_local(ref):
            super().bind_value(ref, text, value)
            return
        for path in [p for p in self.local if p[: len(ref)] == ref]:
            del self.local[path]
        super().bind_value(ref, text, value)
        if len(self.allocs) == allocs and not any(p[: len(ref)] == ref for p in self.local):
            self._phis += 1
            self.local[ref] = (f"{self.scopes[-1].id}#value@{self._phis}",)

    def _is_local(self, ref: Ref) -> bool:
        """Rooted at a local of a function being visited (as `alias` decides)."""
        return ref[0].split("#")[0] in {scope.id for scope in self.scopes}

    # a helper that sets fields of its parameter sets them on the caller's object ----------------
    def _bind_arguments(self, call: cst.Call) -> None:
        self._binding_args = True
        try:
            super()._bind_arguments(call)
        finally:
            self._binding_args = False

    def alias(self, target: Ref, value: Ref) -> None:
        if self._binding_args and len(target) == 1:
            self.param_values.append((target, value))
        super().alias(target, value)

    def read_aliases(self) -> dict[Ref, list[Ref]]:
        """The shared alias edges, plus the fields a helper binds on its parameter carried over to
        each caller's object (with the fields of the local objects those bindings name)."""
        edges: dict[Ref, list[Ref]] = {k: list(v) for k, v in self.shared.items()}
        roots: list[str] = []
        for param, value in self.param_values:
            for path, bound in self.local.items():
                if len(path) > 1 and path[0] == param[0]:
                    edges.setdefault(value + path[1:], []).append(bound)
                    roots.append(bound[0])
        seen: set[str] = set()
        while roots:
            root = roots.pop()
            if root in seen:
                continue
            seen.add(root)
            for path, bound in self.local.items():
                if path[0] == root:
                    edges.setdefault(path, []).append(bound)
                    roots.append(bound[0])
        return edges

    # branches: after an if, a local bound differently in its branches may be either --------------
    def visit_If(self, node: cst.If) -> None:
        self._statements.append(self.ctx.start(node)[0])
        self._read(node.test, "truth value")
        self._branches.append((self._state(), []))

    def leave_If(self, original_node: cst.If) -> None:
        self._statements.pop()
        base, ends = self._branches.pop()
        if original_node.orelse is None:
            ends.append(base)
        if not ends:  # every branch returns or raises: what follows runs only when none was taken
            ends.append(base)
        names = self._join([e[0] for e in ends])
        local = self._join([e[1] for e in ends])
        self._restore((names, local))

    def _end_branch(self, block: cst.BaseSuite) -> None:
        """A branch is over: keep its bindings (unless it leaves the function) and start the next from the base."""
        base, ends = self._branches[-1]
        if not _leaves(block):
            ends.append(self._state())
        self._restore(base)

    def _state(self) -> tuple[dict, dict]:
        return dict(self.scopes[-1].names), dict(self.local)

    def _restore(self, state: tuple[dict, dict]) -> None:
        names, local = state
        self.scopes[-1].names.clear()
        self.scopes[-1].names.update(names)
        self.local.clear()
        self.local.update(local)

    def _join(self, states: list[dict]) -> dict:
        """One binding per key: the common one, or a new name that aliases every branch's binding."""
        out = {}
        for key in dict.fromkeys(k for state in states for k in state):
            values = list(dict.fromkeys(state[key] for state in states if key in state))
            if len(values) == 1:
                out[key] = values[0]
                continue
            self._phis += 1
            scope = self.scopes[-1].id
            phi: Ref = (f"{scope}#{key if isinstance(key, str) else 'field'}@join{self._phis}",)
            self.shared[phi].extend(values)
            out[key] = phi
        return out

    # where we are: function, guards, statement ---------------------------------------------------
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        super().visit_ClassDef(node)
        self._qualname.append(node.name.value)
        self._classes.append(node.name.value)
        self.bases[node.name.value] = [b for b in (_last_name(a.value) for a in node.bases) if b]
        span = self.ctx.positions[node]
        self.class_spans.append((span.start.line, span.end.line, node.name.value))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        super().leave_ClassDef(original_node)
        self._qualname.pop()
        self._classes.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        super().visit_FunctionDef(node)
        self._qualname.append(node.name.value)
        self._guards.append([])

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        super().leave_FunctionDef(original_node)
        self._qualname.pop()
        self._guards.pop()

    def visit_If_body(self, node: cst.If) -> None:
        self._guards[-1].append(node.test)

    def leave_If_body(self, node: cst.If) -> None:
        self._guards[-1].pop()
        self._end_branch(node.body)

    def visit_If_orelse(self, node: cst.If) -> None:
        negate = isinstance(node.orelse, cst.Else)  # an elif states its own condition
        if negate:
            self._guards[-1].append(_negated(node.test))
        self._pushed.append(negate)

    def leave_If_orelse(self, node: cst.If) -> None:
        if self._pushed.pop():
            self._guards[-1].pop()
        if isinstance(node.orelse, cst.Else):
            self._end_branch(node.orelse.body)
        elif node.orelse is not None:  # an elif: its own leave_If joined its branches
            self._end_branch(cst.IndentedBlock([node.orelse]))

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self._statements.append(self.ctx.start(node)[0])
        self._lines.append(node)

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine) -> None:
        self._statements.pop()
        self._lines.pop()

    def visit_While(self, node: cst.While) -> None:
        super().visit_While(node)
        self._statements.append(self.ctx.start(node)[0])
        self._read(node.test, "truth value")

    def leave_While(self, original_node: cst.While) -> None:
        super().leave_While(original_node)
        self._statements.pop()

    def visit_For(self, node: cst.For) -> None:
        self._statements.append(self.ctx.start(node)[0])
        self._read(node.iter, "iterated")  # before the loop variable is bound
        super().visit_For(node)

    def leave_For(self, original_node: cst.For) -> None:
        self._statements.pop()

    # reads ---------------------------------------------------------------------------------------
    def visit_Assign(self, node: cst.Assign) -> None:
        self._assigned(node.value)  # binding waits for leave_Assign: Python evaluates the right side first

    def leave_Assign(self, original_node: cst.Assign) -> None:
        refs, allocs, how = self._copy_sources(original_node.value)  # named as the right-hand side sees them
        super().visit_Assign(original_node)
        if how is None or len(original_node.targets) != 1:
            return
        target = original_node.targets[0].target
        ref = self.path(target)
        if ref is None:
            return
        self.copies += [(ref, source, how) for source in refs]
        text = self.ctx.render(target)
        self.copied_allocs += [Alloc(call, factory, text, ref, self.function) for call in allocs
                               if (factory := classify(call, self.ctx)) is not None]

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._assigned(node.value)

    def leave_AnnAssign(self, original_node: cst.AnnAssign) -> None:
        super().visit_AnnAssign(original_node)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        super().visit_AugAssign(node)
        self._read(node.target, f"accumulated: {shorten(self.ctx.code(node), 60)}")
        self._read(node.value, f"operand of {self._op(node.operator)}")

    def visit_Call(self, node: cst.Call) -> None:
        super().visit_Call(node)
        method = method_name(node)
        if method is not None and self._reads_receiver(node, method):
            verb = "accumulated in place by" if method in ACCUMULATES else "read by"
            self._read(node.func.value, f"{verb} .{method}()")  # type: ignore[attr-defined]
        callee = self._callee(node)
        if callee is None:
            return
        for i, arg in enumerate(node.args):
            if arg.star or (arg.keyword is not None and arg.keyword.value == "out"):
                continue
            how = callee + (f" ({arg.keyword.value}=)" if arg.keyword is not None else f" (argument {i + 1})")
            values = arg.value.elements if isinstance(arg.value, (cst.List, cst.Tuple)) else [arg.value]
            for value in values:
                self._read(value.value if isinstance(value, cst.BaseElement) else value, how)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        how = f"operand of {self._op(node.operator)}"
        self._read(node.left, how)
        self._read(node.right, how)

    def visit_UnaryOperation(self, node: cst.UnaryOperation) -> None:
        self._read(node.expression, "truth value" if isinstance(node.operator, cst.Not)
                   else f"operand of {self._op(node.operator)}")

    def visit_BooleanOperation(self, node: cst.BooleanOperation) -> None:
        self._read(node.left, "truth value")
        self._read(node.right, "truth value")

    def visit_Comparison(self, node: cst.Comparison) -> None:
        ops = [c.operator for c in node.comparisons]
        if any(isinstance(op, (cst.Is, cst.IsNot)) for op in ops):
            return  # `buf is None` looks at the object, not its contents
        if not any(isinstance(op, (cst.In, cst.NotIn)) for op in ops):
            self._read(node.left, f"compared ({self._op(ops[0])})")
        for c in node.comparisons:
            self._read(c.comparator, f"compared ({self._op(c.operator)})")

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._read(node.test, "truth value")

    def visit_Assert(self, node: cst.Assert) -> None:
        self._read(node.test, "truth value")

    def visit_Subscript(self, node: cst.Subscript) -> None:
        how = f"used as an index: {shorten(self.ctx.code(node), 60)}"
        for el in node.slice:
            if isinstance(el.slice, cst.Index):
                self._read(el.slice.value, how)
            else:
                for bound in (el.slice.lower, el.slice.upper, el.slice.step):
                    if bound is not None:
                        self._read(bound, how)

    def _assigned(self, value: cst.BaseExpression) -> None:
        """`x = buf[i]` and `x = buf[idx_tensor]` read; `x = buf`, `x = buf[:n]`, `x = d["k"]` bind."""
        if not isinstance(value, cst.Subscript):
            return
        gathers = any(isinstance(el.slice, cst.Index) and self.likely_tensor(el.slice.value) for el in value.slice)
        indexes = any(isinstance(el.slice, cst.Index) and string_key(el.slice) is None for el in value.slice)
        if gathers or indexes:
            self._read(value, f"indexed: {shorten(self.ctx.code(value), 60)}", strict=not gathers)

    def _reads_receiver(self, call: cst.Call, method: str) -> bool:
        if method in ACCUMULATES or (method == "index_put_" and kwarg(call, "accumulate") is not None):
            return True
        return not (method in _NOT_READ_METHODS or (method.endswith("_") and not method.startswith("_")))

    def _callee(self, call: cst.Call) -> str | None:
        """How a call's arguments are read ("read by torch.cumsum", "passed to kernel"), or None when
        they are not: metadata queries, constructors that bind fields, and this module's own
        functions (their parameters alias the arguments; their reads are found inside them)."""
        func = call.func
        qual = self.ctx.qualified(func) or ""
        name = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else ""
        if qual in _NOT_READ_CALLS or qual in TAGGING_CALLS or entry_style(call, self.ctx) is not None:
            return None
        if name in self.ctx.facts.defs and (isinstance(func, cst.Name) or (
                isinstance(func.value, cst.Name) and func.value.value in ("self", "cls"))):  # type: ignore[union-attr]
            return None
        shown = shorten(self.ctx.code(func), 60)
        if qual in _READING_BUILTINS or returns_tensor(qual) or qual.startswith("torch."):
            return f"read by {qual or shown}"
        return f"passed to {shown}"

    def _read(self, expr: cst.BaseExpression, how: str, *, strict: bool = False) -> None:
        """Note `expr` as read here, under the storage name it has now (locals are flow-sensitive)."""
        while isinstance(expr, cst.Attribute) and expr.attr.value in _VIEW_ATTRIBUTES:
            expr = expr.value
        if isinstance(expr, cst.IfExp):  # `f(cu if cond else None)`: either value is passed
            self._read(expr.body, how, strict=strict)
            self._read(expr.orelse, how, strict=strict)
            return
        ref, _ = self.target(expr)
        if ref is None:
            return
        line, col = self.ctx.start(expr)
        guards = self._guards[-1]
        guard = " and ".join(_condition(g, joined=len(guards) > 1) for g in guards) or None
        site = ReadSite(line=line, function=".".join(self._qualname) if self.functions else None, how=how,
                        guard=guard, col=col, statement=self._statements[-1] if self._statements else line)
        self.candidates.append(_Candidate(ref, strict, site, tuple(self._blocks), (line, col)))

    def _op(self, operator: cst.CSTNode) -> str:
        return self.ctx.module.code_for_node(operator).strip()


def _whole_statement(line: cst.SimpleStatementLine, node: cst.CSTNode) -> bool:
    """`node` is what one of the line's statements does (not a part that may not run: `a and b.copy_(x)`)."""
    for small in line.body:
        if isinstance(small, cst.Expr) and small.value is node:
            return True
        if isinstance(small, cst.Assign) and (small.value is node or any(t.target is node for t in small.targets)):
            return True
        if isinstance(small, cst.AnnAssign) and (small.value is node or small.target is node):
            return True
    return False


def _stripped(call: cst.BaseExpression) -> cst.BaseExpression:
    """`torch.empty(n).to(dev)` -> `torch.empty(n)`."""
    while isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value in (
            "to", "cuda", "int", "long", "float", "half", "bfloat16", "bool", "double", "contiguous", "pin_memory"):
        call = call.func.value
    return call


def _last_name(expr: cst.BaseExpression) -> str | None:
    return expr.value if isinstance(expr, cst.Name) else expr.attr.value if isinstance(expr, cst.Attribute) else None


def _leaves(block: cst.BaseSuite) -> bool:
    """The block ends in return, raise, continue or break: nothing after it in the block's
    statement runs from this branch."""
    last = block.body[-1] if block.body else None
    if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
        last = last.body[-1]
    return isinstance(last, (cst.Return, cst.Raise, cst.Continue, cst.Break))


def _condition(test: cst.BaseExpression, *, joined: bool = False) -> str:
    """A condition's source on one line, without the parentheses that only wrapped it; an `or`
    (or a conditional expression) keeps parentheses when it is `and`-joined with others."""
    bare = test.with_changes(lpar=[], rpar=[]) if getattr(test, "lpar", None) else test
    text = " ".join(cst.Module([]).code_for_node(bare).split())
    loose = isinstance(test, (cst.IfExp, cst.Lambda, cst.NamedExpr)) or (
        isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or))
    return f"({text})" if joined and loose else text


def _negated(test: cst.BaseExpression) -> cst.BaseExpression:
    """`not test`, with `not not x` read as `x`."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return test.expression
    if isinstance(test, (cst.BooleanOperation, cst.IfExp, cst.Lambda, cst.NamedExpr)):
        test = test.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.UnaryOperation(operator=cst.Not(), expression=test)
