"""zero-init-buffer and buffer-prefix-zero: which zero-filled buffers could be `torch.empty`.

One pass over the module records (a) allocations bound to a name, attribute, subscript,
dict entry, constructor keyword or `register_buffer`, (b) alias edges between storage
names, and (c) writes that rely on the buffer's initial contents: slices that skip leading
elements (`buf[1:n+1].copy_(...)`, `out=buf[1:]`), accumulation (`+=`, `add_`, ...) and
sparse writes (`index_put_`, `masked_fill_`, ...). A zero buffer reached by such a write
keeps its finding but gets a `hazard` and `safe_to_rewrite=False`; the write itself is
reported as buffer-prefix-zero (a likely bug when the buffer is already `torch.empty`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace

import libcst as cst

from .context import (ModuleContext, is_literal_true, kwarg, method_name, positional, render,
                      shorten, string_key)
from .factories import Factory, classify
from .model import PREFIX_ZERO, ZERO_INIT, Finding
from .refs import Ref, key_element, overlaps, path_of, resolve, write_target
from .tensors import TensorVisitor

# Methods whose result holds the same values as the receiver: `torch.zeros(n).to(dev)` is still zeros.
_CONVERSIONS = frozenset({"to", "cuda", "int", "long", "float", "half", "bfloat16", "bool", "double",
                          "contiguous", "pin_memory", "clone"})
_PURE_WRITES = frozenset({"copy_", "fill_", "zero_", "uniform_", "normal_", "random_", "bernoulli_",
                          "exponential_", "geometric_", "log_normal_", "cauchy_"})
_ACCUMULATES = frozenset({"add_", "sub_", "mul_", "div_", "true_divide_", "floor_divide_", "addcmul_",
                          "addcdiv_", "addmm_", "addmv_", "addbmm_", "baddbmm_", "addr_", "index_add_",
                          "scatter_add_", "scatter_reduce_", "index_reduce_", "lerp_", "clamp_", "clamp_min_",
                          "clamp_max_", "pow_", "neg_", "abs_", "exp_", "log_", "sqrt_", "rsqrt_", "cumsum_",
                          "cumprod_", "relu_", "sigmoid_", "tanh_", "sign_", "logical_or_", "logical_and_",
                          "bitwise_or_", "bitwise_and_", "bitwise_xor_", "maximum_", "minimum_", "fmax_", "fmin_"})
_SPARSE_WRITES = frozenset({"index_put_", "masked_fill_", "masked_scatter_", "index_fill_", "index_copy_", "scatter_"})

_REASONS = {
    "prefix": "never writes {skipped}",
    "accumulate": "accumulates into it, reading its initial values",
    "sparse": "writes only selected elements; the rest keep their initial values",
}


@dataclass(frozen=True)
class Alloc:
    """A factory call bound to some storage name."""

    call: cst.Call
    factory: Factory
    target: str          # canonical text of the bound expression, used in keys
    ref: Ref | None
    function: str | None


@dataclass(frozen=True)
class Write:
    """A write that depends on what the buffer held before it."""

    kind: str            # "prefix" | "accumulate" | "sparse"
    node: cst.CSTNode    # the statement or call that writes
    target: str          # canonical text of what it writes into, used in keys
    ref: Ref | None
    function: str | None
    skips: tuple[str, ...] = ()


@dataclass
class _Scope:
    id: str
    params: frozenset[str]
    names: dict[str, Ref] = field(default_factory=dict)


@dataclass(frozen=True)
class BufferFacts:
    allocs: list[Alloc]
    writes: list[Write]
    links: dict[int, list[int]]   # index into writes -> indices of the allocations it reaches


def collect(ctx: ModuleContext) -> BufferFacts:
    visitor = _BufferVisitor(ctx)
    ctx.module.visit(visitor)
    aliases = dict(visitor.aliases)
    alloc_ids = [resolve(a.ref, aliases) if a.ref else frozenset() for a in visitor.allocs]
    links: dict[int, list[int]] = {}
    for i, w in enumerate(visitor.writes):
        if w.ref is None:
            continue
        w_ids = resolve(w.ref, aliases)
        hit = [j for j, ids in enumerate(alloc_ids) if ids and overlaps(ids, w_ids)]
        if hit:
            links[i] = hit
    return BufferFacts(visitor.allocs, visitor.writes, links)


def zero_init_sites(ctx: ModuleContext, facts: BufferFacts | None = None) -> list[tuple[Finding, Alloc]]:
    """zero-init-buffer findings (keys made unique in source order) with the call each one rewrites."""
    facts = facts or collect(ctx)
    hazards: dict[int, list[str]] = defaultdict(list)
    for i, alloc_indices in facts.links.items():
        for j in alloc_indices:
            hazards[j].append(_hazard_text(ctx, facts.writes[i]))
    out: list[tuple[Finding, Alloc]] = []
    seen: dict[str, int] = defaultdict(int)
    for j, a in enumerate(facts.allocs):
        if not a.factory.zero or a.function is None:
            continue  # module-level allocations run once; only buffers inside functions are reported
        found = list(hazards[j])
        if a.factory.grad:
            found.append("requires_grad=True: a leaf tensor whose initial zeros are its value")
        empty = f"{a.factory.name.rsplit('.', 1)[0]}.{a.factory.new_attr}" if a.factory.new_attr else "torch.empty"
        message = (f"`{a.factory.name}` zero-fills `{a.target}`; if every element is written before it is "
                   f"read, `{empty}` skips the memset")
        f = ctx.finding(ZERO_INIT, a.call, message, a.function, a.target, fixable=a.factory.fixable, safe=True,
                        hazard="; ".join(found) or None)
        seen[f.key] += 1
        if seen[f.key] > 1:
            f = replace(f, key=f"{f.key}#{seen[f.key]}")
        out.append((f, a))
    return out


def check(ctx: ModuleContext, rules: set[str]) -> list[Finding]:
    facts = collect(ctx)
    findings: list[Finding] = []
    if ZERO_INIT in rules:
        findings += [f for f, _ in zero_init_sites(ctx, facts)]
    if PREFIX_ZERO in rules:
        for i, w in enumerate(facts.writes):
            linked = [facts.allocs[j] for j in facts.links.get(i, [])]
            if linked or w.kind == "prefix":
                findings.append(_write_finding(ctx, w, linked))
    return findings


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
                parts.append(f"relies on the zeros from `{a.factory.name}` for `{a.target}` (line {line}): keep it zero-filled")
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



class _BufferVisitor(TensorVisitor):
    """Records allocations, alias edges and initial-value-dependent writes in source order."""

    def __init__(self, ctx: ModuleContext) -> None:
        super().__init__(ctx)
        self.scopes = [_Scope("<module>", frozenset())]
        self.allocs: list[Alloc] = []
        self.writes: list[Write] = []
        self.aliases: dict[Ref, list[Ref]] = defaultdict(list)
        self._versions: dict[str, int] = defaultdict(int)

    # scopes and names ------------------------------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        super().visit_FunctionDef(node)
        p = node.params
        names = [x.name.value for x in (*p.posonly_params, *p.params, *p.kwonly_params)]
        names += [x.name.value for x in (p.star_arg, p.star_kwarg) if isinstance(x, cst.Param)]
        self.scopes.append(_Scope(f"{node.name.value}:{self.ctx.start(node)[0]}", frozenset(names)))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        super().leave_FunctionDef(original_node)
        self.scopes.pop()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.scopes.append(_Scope(f"class {node.name.value}:{self.ctx.start(node)[0]}", frozenset()))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.scopes.pop()

    def root_of(self, name: cst.Name) -> Ref:
        if name.value in ("self", "cls"):
            return ("self",)
        for scope in reversed(self.scopes):
            if name.value in scope.names:
                return scope.names[name.value]
            if name.value in scope.params:
                return (f"{scope.id}#{name.value}",)
        return (f"<module>#{name.value}",)

    def fresh(self, name: str) -> Ref:
        """A new value bound to a local name: later uses resolve to it, earlier ones do not."""
        scope = self.scopes[-1]
        self._versions[f"{scope.id}#{name}"] += 1
        ref = (f"{scope.id}#{name}@{self._versions[f'{scope.id}#{name}']}",)
        scope.names[name] = ref
        return ref

    def path(self, expr: cst.BaseExpression) -> Ref | None:
        return path_of(expr, self.root_of)

    def rebind(self, target: cst.BaseExpression) -> None:
        if isinstance(target, cst.Name):
            self.fresh(target.value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for el in target.elements:
                self.rebind(el.value)

    # bindings --------------------------------------------------------------------------
    def visit_Assign(self, node: cst.Assign) -> None:
        super().visit_Assign(node)
        first = node.targets[0].target
        self.bind(first, node.value)
        first_ref = self.path(first)
        for extra in node.targets[1:]:
            if isinstance(extra.target, cst.Name) and first_ref is not None:
                self.scopes[-1].names[extra.target.value] = first_ref
            elif (ref := self.path(extra.target)) is not None and first_ref is not None:
                self.aliases[ref].append(first_ref)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        super().visit_AnnAssign(node)
        if node.value is not None:
            self.bind(node.target, node.value)

    def visit_For(self, node: cst.For) -> None:
        self.rebind(node.target)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self.rebind(node.asname.name)

    def bind(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            values = value.elements if isinstance(value, (cst.Tuple, cst.List)) else None
            if values is not None and len(values) == len(target.elements) and not any(
                    isinstance(e, cst.StarredElement) for e in (*values, *target.elements)):
                for t, v in zip(target.elements, values):
                    self.bind(t.value, v.value)
            else:
                self.rebind(target)
            return
        text = render(target, self.ctx.module)
        value_ref = self.path(value)
        if isinstance(target, cst.Name):
            if value_ref is not None:
                self.scopes[-1].names[target.value] = value_ref
            else:
                self.bind_value(self.fresh(target.value), text, value)
            return
        if isinstance(target, cst.Subscript) and not (len(target.slice) == 1 and string_key(target.slice[0].slice)):
            ref, skips = write_target(target, self.root_of)
            if skips:
                self._record("prefix", target, target, ref, skips)
            elif any(isinstance(el.slice, cst.Index) and self.likely_tensor(el.slice.value) for el in target.slice):
                self._record("sparse", target, target, ref, [])  # buf[idx] = v: a scatter through an index tensor
            if any(isinstance(el.slice, cst.Slice) for el in target.slice) or self._is_buffer(target.value):
                return  # a store into a tensor copies the value: a zeros temporary here is read
        target_ref = self.path(target)
        if value_ref is not None:
            if target_ref is not None:
                self.aliases[target_ref].append(value_ref)
            return
        self.bind_value(target_ref, text, value)

    def bind_value(self, ref: Ref | None, text: str, value: cst.BaseExpression) -> None:
        """Record what `value` puts under `ref`: an allocation, or entries of a dict/constructor."""
        inner = _strip_conversions(value)
        if isinstance(inner, cst.Call) and (factory := classify(inner, self.ctx)) is not None:
            self.allocs.append(Alloc(inner, factory, text, ref, self.function))
            return
        if isinstance(value, cst.ListComp):  # [torch.zeros(...) for _ in range(n)]: one buffer per element
            self.bind_value(ref + ("[*]",) if ref is not None else None, text + "[*]", value.elt)
            return
        if isinstance(value, (cst.List, cst.Tuple)):
            for i, el in enumerate(value.elements):
                if isinstance(el, cst.Element):
                    self._bind_entry(ref, text, "[*]", el.value, shown=f"[{i}]")
            return
        if isinstance(value, cst.Dict):
            for el in value.elements:
                if isinstance(el, cst.DictElement) and isinstance(el.key, cst.SimpleString):
                    self._bind_entry(ref, text, key_element(string_key(cst.Index(el.key)) or ""), el.value)
            return
        if isinstance(value, cst.Call):
            element = _entry_style(value, self.ctx)
            for arg in value.args if element else ():
                if arg.keyword is not None:
                    self._bind_entry(ref, text, element(arg.keyword.value), arg.value)

    def _bind_entry(self, ref: Ref | None, text: str, element: str, value: cst.BaseExpression,
                    shown: str | None = None) -> None:
        sub = ref + (element,) if ref is not None else None
        value_ref = self.path(value)
        if value_ref is not None:
            if sub is not None:
                self.aliases[sub].append(value_ref)
            return
        self.bind_value(sub, text + (shown or element), value)

    def _is_buffer(self, expr: cst.BaseExpression) -> bool:
        ref = self.path(expr)
        if ref is None:
            return False
        ids = resolve(ref, self.aliases)
        return any(a.ref is not None and overlaps(resolve(a.ref, self.aliases), ids) for a in self.allocs)

    # writes ----------------------------------------------------------------------------
    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        ref, skips = write_target(node.target, self.root_of)
        self._record("accumulate", node, node.target, ref, skips)

    def visit_Call(self, node: cst.Call) -> None:
        method = method_name(node)
        if method is not None:
            receiver = node.func.value  # type: ignore[attr-defined]
            if method == "register_buffer":
                self._register_buffer(node, receiver)
            elif method in _ACCUMULATES or (method == "index_put_" and _accumulate_kw(node)):
                self._write("accumulate", node, receiver)
            elif method in _SPARSE_WRITES:
                self._write("sparse", node, receiver)
            elif method in _PURE_WRITES:
                self._write("prefix", node, receiver, only_if_skips=True)
        out = kwarg(node, "out")
        if out is not None:
            self._write("prefix", node, out.value, only_if_skips=True)

    def _write(self, kind: str, node: cst.CSTNode, target: cst.BaseExpression, only_if_skips: bool = False) -> None:
        ref, skips = write_target(target, self.root_of)
        if skips or not only_if_skips:
            self._record(kind, node, target, ref, skips)

    def _record(self, kind: str, node: cst.CSTNode, target: cst.BaseExpression, ref: Ref | None,
                skips: list[str]) -> None:
        text = render(target, self.ctx.module)
        self.writes.append(Write(kind, node, text, ref, self.function, tuple(skips)))

    def _register_buffer(self, node: cst.Call, receiver: cst.BaseExpression) -> None:
        name = positional(node, 0) or kwarg(node, "name")
        value = positional(node, 1) or kwarg(node, "tensor")
        if name is None or value is None or not isinstance(name.value, cst.SimpleString):
            return
        attr = f".{string_key(cst.Index(name.value))}"
        base = self.path(receiver)
        self.bind_value(base + (attr,) if base else None, render(receiver, self.ctx.module) + attr, value.value)


def _strip_conversions(expr: cst.BaseExpression) -> cst.BaseExpression:
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _CONVERSIONS:
        expr = expr.func.value
    return expr


def _entry_style(call: cst.Call, ctx: ModuleContext):
    """How keyword arguments become entries: `dict(k=v)` -> ["k"], `Meta(k=v)` -> .k, else None."""
    qual = ctx.qualified(call.func) or ""
    if qual == "dict":
        return key_element
    last = qual.rsplit(".", 1)[-1]
    if last[:1].isupper():
        return lambda name: f".{name}"
    return None


def _accumulate_kw(call: cst.Call) -> bool:
    arg = kwarg(call, "accumulate")
    return arg is not None and is_literal_true(arg.value)
