"""Where zero-filled buffers go and which writes depend on their initial contents.

One pass over a module, in source order, records:

* allocations (`classify`) bound to a name, attribute, subscript, dict entry, list element,
  constructor keyword (`Meta(x=torch.zeros(...))`) or `register_buffer`;
* alias edges between storage names (`cu = self.meta["cu"]`, `md.cu = bufs["cu"][:bs+1]`,
  `self.graphs[bs] = md`);
* writes: plain ones (`copy_`, `fill_`, stores, `out=`, and buffers handed to code it
  cannot see, such as a kernel launch) and those that read or keep the initial contents:
  slices skipping leading elements (`buf[1:n+1].copy_(...)`, `out=buf[1:]`), accumulation
  (`+=`, `add_`, ...) and sparse writes (`index_put_`, `masked_fill_`, `buf[idx_tensor] = v`).
  A plain write is `full` only when it visibly covers every element (`buf.copy_(x)`,
  `buf[:] = v`, `out=buf`); `buf[:bs].copy_(x)`, `buf[i] = v` and kernel launches are not.
  A slice that skips a head some earlier write in an enclosing block already wrote
  (`buf[0] = 0` then `buf[1:n+1] = x`) is a plain write, not a prefix one.

Aliases rooted at locals are flow-sensitive (the latest assignment in source order wins),
so `md.cu_seqlens_k` means whichever buffer it was last bound to, even when one local is
rebound in several branches. Aliases rooted at `self` are object state shared by every
method and are kept as a union. When a local object is stored into `self...`, a snapshot of
its current fields is stored (fields added later in that function are appended at its end).
Calls to functions of the same module (`self.helper(md, buf)`, `helper(buf)`) bind the
callee's parameters to the arguments the same way, so a write through a parameter reaches
the caller's buffers.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import libcst as cst

from .context import ModuleContext, is_literal_true, kwarg, method_name, positional, run_visitors, string_key
from .factories import Factory, classify
from .facts import returns_tensor
from .refs import VIEW_METHODS, Ref, key_element, literal_int, overlaps, path_of, resolve, write_target
from .tensors import TENSOR_METHODS, TensorVisitor

# Methods whose result holds the same values as the receiver: `torch.zeros(n).to(dev)` is still zeros.
_CONVERSIONS = frozenset({"to", "cuda", "int", "long", "float", "half", "bfloat16", "bool", "double",
                          "contiguous", "pin_memory", "clone"})
# In-place methods whose result depends on the old contents.
ACCUMULATES = frozenset({"add_", "sub_", "mul_", "div_", "true_divide_", "floor_divide_", "addcmul_",
                         "addcdiv_", "addmm_", "addmv_", "addbmm_", "baddbmm_", "addr_", "index_add_",
                         "scatter_add_", "scatter_reduce_", "index_reduce_", "lerp_", "clamp_", "clamp_min_",
                         "clamp_max_", "pow_", "neg_", "abs_", "exp_", "log_", "sqrt_", "rsqrt_", "cumsum_",
                         "cumprod_", "relu_", "sigmoid_", "tanh_", "sign_", "logical_or_", "logical_and_",
                         "bitwise_or_", "bitwise_and_", "bitwise_xor_", "maximum_", "minimum_", "fmax_", "fmin_"})
# In-place methods whose result does not depend on the old contents.
_OVERWRITES = frozenset({"copy_", "fill_", "zero_", "normal_", "uniform_", "random_", "bernoulli_", "exponential_",
                         "geometric_", "cauchy_", "log_normal_"})
_SPARSE_WRITES = frozenset({"index_put_", "masked_fill_", "masked_scatter_", "index_fill_", "index_copy_", "scatter_"})
# Calls that tag a tensor for the compiler or the allocator: they read no element and write none.
TAGGING_CALLS = frozenset({
    "torch._dynamo.mark_static_address", "torch._dynamo.mark_dynamic", "torch._dynamo.maybe_mark_dynamic",
    "torch._dynamo.mark_static", "torch._dynamo.mark_unbacked", "torch._dynamo.decorators.mark_static_address",
    "torch._dynamo.decorators.mark_dynamic", "torch._dynamo.decorators.maybe_mark_dynamic",
    "torch._dynamo.decorators.mark_static", "torch.compiler.mark_static_address"})
_READ_ONLY_BUILTINS = frozenset({"len", "int", "float", "bool", "str", "repr", "print", "max", "min", "sum", "abs",
                                 "round", "isinstance", "type", "id", "list", "tuple", "dict", "set", "range",
                                 "enumerate", "zip", "sorted", "reversed", "any", "all", "getattr", "hasattr",
                                 "super", "iter", "next", "hash", "format"})


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
    """A use of some storage: a read (as a call argument), a plain write, or a write that
    depends on what the buffer held before ("prefix", "accumulate", "sparse")."""

    kind: str            # "read", "write" (plain), or relying on old contents: "prefix" | "accumulate" | "sparse"
    node: cst.CSTNode    # the statement or call that writes
    target: str          # canonical text of what it writes into, used in keys
    ref: Ref | None
    function: str | None
    skips: tuple[str, ...] = ()
    full: bool = False   # a plain write that visibly covers every element of the buffer


@dataclass(frozen=True)
class BufferFacts:
    allocs: list[Alloc]
    writes: list[Write]
    links: dict[int, list[int]]   # index into writes -> indices of the allocations it reaches


def collect(ctx: ModuleContext) -> BufferFacts:
    """Run the flow analysis alone (the rule runner batches `FlowVisitor` with the others)."""
    visitor = FlowVisitor(ctx)
    run_visitors(ctx, [visitor])
    return visitor.buffer_facts()


@dataclass
class _Scope:
    id: str
    params: frozenset[str]
    names: dict[str, Ref] = field(default_factory=dict)
    snapshots: list[tuple[Ref, Ref, set[Ref]]] = field(default_factory=list)  # (object, snapshot root, fields)
    heads: dict[Ref, list[tuple[int, tuple[int, ...]]]] = field(default_factory=dict)  # written head length, blocks
    views: set[str] = field(default_factory=set)  # local names now bound to part of a buffer (`cu = buf[:n]`)


class FlowVisitor(TensorVisitor):
    """Collects allocations, aliases and writes; `buffer_facts()` links them once the traversal is done."""

    def __init__(self, ctx: ModuleContext) -> None:
        super().__init__(ctx)
        self.scopes = [_Scope("<module>", frozenset())]
        self.allocs: list[Alloc] = []
        self.writes: list[Write] = []
        self.local: dict[Ref, Ref] = {}                              # latest binding of a local-rooted path
        self.shared: dict[Ref, list[Ref]] = defaultdict(list)        # self-rooted, snapshot and parameter aliases
        self._counter = 0
        self._blocks: list[int] = []                                 # ids of the enclosing indented blocks
        self._view_paths: set[Ref] = set()                           # attributes bound to part of a buffer

    def buffer_facts(self) -> BufferFacts:
        self._finish(self.scopes[0])
        alloc_ids = [resolve(a.ref, self.shared) if a.ref else frozenset() for a in self.allocs]
        links: dict[int, list[int]] = {}
        for i, w in enumerate(self.writes):
            if w.ref is None:
                continue
            w_ids = resolve(w.ref, self.shared)
            hit = [j for j, ids in enumerate(alloc_ids) if ids and overlaps(ids, w_ids)]
            if hit:
                links[i] = hit
        return BufferFacts(self.allocs, self.writes, links)

    # scopes and names ------------------------------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        super().visit_FunctionDef(node)
        p = node.params
        names = [x.name.value for x in (*p.posonly_params, *p.params, *p.kwonly_params)]
        names += [x.name.value for x in (p.star_arg, p.star_kwarg) if isinstance(x, cst.Param)]
        self.scopes.append(_Scope(f"{node.name.value}:{self.ctx.start(node)[0]}", frozenset(names)))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        super().leave_FunctionDef(original_node)
        self._finish(self.scopes.pop())

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._blocks.append(id(node))

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock) -> None:
        self._blocks.pop()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.scopes.append(_Scope(f"class {node.name.value}:{self.ctx.start(node)[0]}", frozenset()))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._finish(self.scopes.pop())

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
        self._counter += 1
        scope = self.scopes[-1]
        ref = (f"{scope.id}#{name}@{self._counter}",)
        scope.names[name] = ref
        scope.views.discard(name)
        return ref

    def path(self, expr: cst.BaseExpression) -> Ref | None:
        ref = path_of(expr, self.root_of, self.likely_tensor)
        return None if ref is None else self._latest(ref)

    def bound_path(self, target: cst.BaseExpression) -> Ref | None:
        """The path an assignment rebinds: its owner resolved, its last element kept.

        `md.cu = x` rebinds `md.cu` itself, not whatever `md.cu` was bound to before.
        """
        if isinstance(target, cst.Attribute):
            owner = self.path(target.value)
            return None if owner is None else owner + (f".{target.attr.value}",)
        if isinstance(target, cst.Subscript) and len(target.slice) == 1 and (
                key := string_key(target.slice[0].slice)) is not None:
            owner = self.path(target.value)
            return None if owner is None else owner + (key_element(key),)
        return self.path(target)

    def target(self, expr: cst.BaseExpression) -> tuple[Ref | None, list[str]]:
        ref, skips = write_target(expr, self.root_of, self.likely_tensor)
        return (None if ref is None else self._latest(ref)), skips

    def _latest(self, ref: Ref) -> Ref:
        """Follow local (flow-sensitive) bindings: `md.cu` -> the buffer last assigned to it."""
        for _ in range(16):
            for cut in range(len(ref), 0, -1):
                bound = self.local.get(ref[:cut])
                if bound is not None:
                    ref = bound + ref[cut:]
                    break
            else:
                return ref
        return ref

    def rebind(self, target: cst.BaseExpression) -> None:
        if isinstance(target, cst.Name):
            self.fresh(target.value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for el in target.elements:
                self.rebind(el.value)

    # aliases ---------------------------------------------------------------------------
    def alias(self, target: Ref, value: Ref) -> None:
        """Record `target` = `value`: flow-sensitive for this function's locals, shared otherwise."""
        if target[0].split("#")[0] in {scope.id for scope in self.scopes}:
            self.local[target] = value
            return
        if value[0] != "self":
            value = self._snapshot(value)
        if value not in self.shared[target]:
            self.shared[target].append(value)

    def _bind_arguments(self, call: cst.Call) -> None:
        """`self.helper(md, out=buf)`: the helper's parameters alias the caller's values."""
        func = call.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value in ("self", "cls"):
            name, skip = func.attr.value, 1
        elif isinstance(func, cst.Name):
            name, skip = func.value, 0
        else:
            return
        for scope_id, params in self.ctx.facts.defs.get(name, ()):
            positional_params = params[skip:]
            i = 0
            for arg in call.args:
                if arg.star:
                    break
                param = arg.keyword.value if arg.keyword is not None else (
                    positional_params[i] if i < len(positional_params) else None)
                if arg.keyword is None:
                    i += 1
                if param is None or param not in params:
                    continue
                root = (f"{scope_id}#{param}",)
                value = self.path(arg.value)
                if value is not None:
                    self.alias(root, value)
                elif isinstance(arg.value, cst.Call) and (element := entry_style(arg.value, self.ctx)) is not None:
                    for field_arg in arg.value.args:  # helper(Meta(cu=buf)): the parameter's fields alias
                        field_ref = self.path(field_arg.value)
                        if field_arg.keyword is not None and field_ref is not None:
                            self.alias(root + (element(field_arg.keyword.value),), field_ref)

    def _snapshot(self, obj: Ref) -> Ref:
        """Freeze a local object's current fields before it becomes shared state."""
        self._counter += 1
        snap = (f"snapshot#{self._counter}",)
        fields: set[Ref] = set()
        for path, bound in self.local.items():
            if len(path) > len(obj) and path[: len(obj)] == obj:
                fields.add(path[len(obj):])
                self.shared[snap + path[len(obj):]].append(bound)
        self.shared[snap].append(obj)  # allocations bound directly under the object
        self.scopes[-1].snapshots.append((obj, snap, fields))
        return snap

    def _finish(self, scope: _Scope) -> None:
        """Fields set on a stored object later in the same function join its snapshot."""
        for obj, snap, fields in scope.snapshots:
            for path, bound in self.local.items():
                rest = path[len(obj):]
                if len(path) > len(obj) and path[: len(obj)] == obj and rest not in fields:
                    self.shared[snap + rest].append(bound)

    # bindings --------------------------------------------------------------------------
    def visit_Assign(self, node: cst.Assign) -> None:
        super().visit_Assign(node)
        first = node.targets[0].target
        self.bind(first, node.value)
        first_ref = self.path(first)
        for extra in node.targets[1:]:
            if isinstance(extra.target, cst.Name) and first_ref is not None:
                self.scopes[-1].names[extra.target.value] = first_ref
            elif (ref := self.bound_path(extra.target)) is not None and first_ref is not None:
                self.alias(ref, first_ref)

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
        text = self.ctx.render(target)
        value_ref = self.path(value)
        if isinstance(target, cst.Name):
            if value_ref is not None:
                self.scopes[-1].names[target.value] = value_ref
                if covers_all(value) and not self._is_view(value):
                    self.scopes[-1].views.discard(target.value)
                else:
                    self.scopes[-1].views.add(target.value)
            else:
                self.bind_value(self.fresh(target.value), text, value)
            return
        if isinstance(target, cst.Subscript) and not (len(target.slice) == 1 and string_key(target.slice[0].slice)):
            ref, skips = self.target(target)
            tensor_store = (any(isinstance(el.slice, cst.Slice) for el in target.slice)
                            or self._is_buffer(target.value) or self.likely_tensor(target.value))
            if skips and not self._head_written(target, skips):
                self._record("prefix", target, target, ref, skips)
            elif any(isinstance(el.slice, cst.Index) and self.likely_tensor(el.slice.value) for el in target.slice):
                self._record("sparse", target, target, ref, [])  # buf[idx] = v: a scatter through an index tensor
            elif tensor_store or skips:
                self._record("write", target, target, ref, [], full=covers_all(target) and not self._is_view(target))
            self._note_head(target)
            if tensor_store:
                return  # a store into a tensor copies the value: a zeros temporary here is read
        target_ref = self.bound_path(target)
        if value_ref is not None:
            if target_ref is not None:
                self.alias(target_ref, value_ref)
                if covers_all(value) and not self._is_view(value):
                    self._view_paths.discard(target_ref)
                else:
                    self._view_paths.add(target_ref)
            return
        self.bind_value(target_ref, text, value)

    def bind_value(self, ref: Ref | None, text: str, value: cst.BaseExpression) -> None:
        """Record what `value` puts under `ref`: an allocation, or entries of a container."""
        inner = _strip_conversions(value)
        if isinstance(inner, cst.Call) and (factory := classify(inner, self.ctx)) is not None:
            self.allocs.append(Alloc(inner, factory, text, ref, self.function))
            return
        if isinstance(value, cst.ListComp):  # [torch.zeros(...) for _ in range(n)]: one buffer per element
            self.bind_value(ref + ("[*]",) if ref is not None else None, text + "[*]", value.elt)
        elif isinstance(value, (cst.List, cst.Tuple)):
            for i, el in enumerate(value.elements):
                if isinstance(el, cst.Element):
                    self._bind_entry(ref, text, "[*]", el.value, shown=f"[{i}]")
        elif isinstance(value, cst.Dict):
            for el in value.elements:
                if isinstance(el, cst.DictElement) and isinstance(el.key, cst.SimpleString):
                    self._bind_entry(ref, text, key_element(string_key(cst.Index(el.key)) or ""), el.value)
        elif isinstance(value, cst.Call) and (element := entry_style(value, self.ctx)) is not None:
            for arg in value.args:
                if arg.keyword is not None:
                    self._bind_entry(ref, text, element(arg.keyword.value), arg.value)

    def _bind_entry(self, ref: Ref | None, text: str, element: str, value: cst.BaseExpression,
                    shown: str | None = None) -> None:
        sub = ref + (element,) if ref is not None else None
        value_ref = self.path(value)
        if value_ref is not None:
            if sub is not None:
                self.alias(sub, value_ref)
            return
        self.bind_value(sub, text + (shown or element), value)

    def _is_view(self, expr: cst.BaseExpression) -> bool:
        """A name bound to part of a buffer: a write covering the name does not cover the buffer."""
        while isinstance(expr, (cst.Subscript, cst.Call)) and covers_all(expr):
            expr = expr.value if isinstance(expr, cst.Subscript) else expr.func.value  # type: ignore[union-attr]
        if isinstance(expr, cst.Attribute):
            return self.bound_path(expr) in self._view_paths
        return isinstance(expr, cst.Name) and expr.value in self.scopes[-1].views

    def _is_buffer(self, expr: cst.BaseExpression) -> bool:
        ref = self.path(expr)
        if ref is None:
            return False
        ids = resolve(ref, self.shared)
        return any(a.ref is not None and overlaps(resolve(a.ref, self.shared), ids) for a in self.allocs)

    # writes ----------------------------------------------------------------------------
    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        ref, skips = self.target(node.target)
        self._record("accumulate", node, node.target, ref, skips)

    def visit_Call(self, node: cst.Call) -> None:
        self._bind_arguments(node)
        method = method_name(node)
        if method is not None:
            receiver = node.func.value  # type: ignore[attr-defined]
            if method == "register_buffer":
                self._register_buffer(node, receiver)
            elif method in ACCUMULATES or (method == "index_put_" and _accumulate_kw(node)):
                self._write(node, receiver, "accumulate")
            elif method in _SPARSE_WRITES:
                self._write(node, receiver, "sparse")
            elif method.endswith("_") and not method.startswith("_"):  # copy_, fill_, zero_, normal_, ...
                self._write(node, receiver, full=method in _OVERWRITES)
        out = kwarg(node, "out")
        if out is not None:
            self._write(node, out.value, full=True)
        self._argument_uses(node)

    def _write(self, node: cst.CSTNode, target: cst.BaseExpression, kind: str | None = None,
               full: bool = False) -> None:
        """Record a write; a plain one is a "prefix" write when it skips a head not written before."""
        ref, skips = self.target(target)
        if kind is None and skips and self._head_written(target, skips):
            skips = []
        if kind is None and not skips:
            self._record("write", node, target, ref, [], full=full and covers_all(target) and not self._is_view(target))
            self._note_head(target)
        else:
            self._record(kind or "prefix", node, target, ref, skips)

    # heads written before a slice that skips them -------------------------------------
    def _note_head(self, target: cst.BaseExpression) -> None:
        """Remember how many leading elements a plain write covers (`buf[0]`, `buf[:2]`, `buf`)."""
        base, length = _head(target)
        ref = self.path(base)
        if ref is not None and length:
            self.scopes[-1].heads.setdefault(ref, []).append((length, tuple(self._blocks)))

    def _head_written(self, target: cst.BaseExpression, skips: list[str]) -> bool:
        """An earlier write in a block enclosing this one covers every element this slice skips."""
        base = target
        while isinstance(base, cst.Subscript) or (
                isinstance(base, cst.Call) and isinstance(base.func, cst.Attribute)
                and base.func.attr.value in VIEW_METHODS):
            base = base.value if isinstance(base, cst.Subscript) else base.func.value  # type: ignore[union-attr]
        ref = self.path(base)
        blocks = tuple(self._blocks)
        need = max(int(s) for s in skips)
        return ref is not None and any(length >= need and blocks[: len(where)] == where
                                       for length, where in self.scopes[-1].heads.get(ref, ()))

    def _argument_uses(self, call: cst.Call) -> None:
        """Buffers passed to a call: read by torch ops, tensor methods, builtins and constructors;
        possibly written by code we cannot see (a kernel launch, a custom op). Calls to this
        module's own functions are followed through their parameters instead (`_bind_arguments`).
        """
        func = call.func
        name = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else ""
        if name in self.ctx.facts.defs and (isinstance(func, cst.Name) or (
                isinstance(func.value, cst.Name) and func.value.value in ("self", "cls"))):  # type: ignore[union-attr]
            return
        if self.ctx.qualified(func) in TAGGING_CALLS:
            return
        reads = (name in _READ_ONLY_BUILTINS or name[:1].isupper() or returns_tensor(self.ctx.qualified(func))
                 or (isinstance(func, cst.Attribute) and (name.endswith("_") or name in TENSOR_METHODS
                                                          or self.likely_tensor(func.value))))
        for arg in call.args:
            if arg.keyword is None or arg.keyword.value != "out":
                ref, skips = self.target(arg.value)
                if ref is not None and (reads or not skips):
                    self._record("read" if reads else "write", call, arg.value, ref, [])

    def _record(self, kind: str, node: cst.CSTNode, target: cst.BaseExpression, ref: Ref | None,
                skips: list[str], full: bool = False) -> None:
        text = self.ctx.render(target)
        self.writes.append(Write(kind, node, text, ref, self.function, tuple(skips), full))

    def _register_buffer(self, node: cst.Call, receiver: cst.BaseExpression) -> None:
        name = positional(node, 0) or kwarg(node, "name")
        value = positional(node, 1) or kwarg(node, "tensor")
        if name is None or value is None or not isinstance(name.value, cst.SimpleString):
            return
        attr = f".{string_key(cst.Index(name.value))}"
        base = self.path(receiver)
        self.bind_value(base + (attr,) if base else None, self.ctx.render(receiver) + attr, value.value)


def covers_all(target: cst.BaseExpression) -> bool:
    """The expression names a whole buffer: no index, no bounded slice (`buf`, `buf[:]`, `buf[...]`, `buf.view(-1)`)."""
    while True:
        if (isinstance(target, cst.Subscript) and len(target.slice) == 1
                and string_key(target.slice[0].slice) is not None):
            return True  # self.meta["cu"]: a named entry, the buffer itself
        if isinstance(target, cst.Subscript):
            if not all(_whole(el.slice) for el in target.slice):
                return False
            target = target.value
        elif isinstance(target, cst.Call) and isinstance(target.func, cst.Attribute) and \
                target.func.attr.value in VIEW_METHODS:
            target = target.func.value
        else:
            return isinstance(target, (cst.Name, cst.Attribute))


def _whole(sub: cst.BaseSlice) -> bool:
    if isinstance(sub, cst.Slice):
        return sub.lower is None and sub.upper is None and sub.step is None
    return isinstance(sub, cst.Index) and isinstance(sub.value, cst.Ellipsis)


def _head(target: cst.BaseExpression) -> tuple[cst.BaseExpression, int]:
    """(buffer, leading elements written): `buf[0]` -> 1, `buf[:2]`/`buf[0:2]` -> 2, a whole buffer -> a lot."""
    if covers_all(target):
        return target, 1 << 30
    if isinstance(target, cst.Subscript) and target.slice:
        first = target.slice[0].slice
        if isinstance(first, cst.Index) and literal_int(first.value) == 0:
            return target.value, 1
        if isinstance(first, cst.Slice) and literal_int(first.lower) in (None, 0) and first.step is None:
            upper = literal_int(first.upper)
            if upper is not None and upper > 0:
                return target.value, upper
    return target, 0


def _strip_conversions(expr: cst.BaseExpression) -> cst.BaseExpression:
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _CONVERSIONS:
        expr = expr.func.value
    return expr


def entry_style(call: cst.Call, ctx: ModuleContext):
    """How keyword arguments become entries: `dict(k=v)` -> ["k"], `Meta(k=v)` -> .k, else None."""
    qual = ctx.qualified(call.func) or ""
    if qual == "dict":
        return key_element
    if qual.rsplit(".", 1)[-1][:1].isupper():
        return lambda name: f".{name}"
    return None


def _accumulate_kw(call: cst.Call) -> bool:
    arg = kwarg(call, "accumulate")
    return arg is not None and is_literal_true(arg.value)
