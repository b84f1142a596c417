"""Names for storage: which buffer an expression such as `cu[1:bs+1]` writes into.

A `Ref` is a tuple: a root (`"self"`, or a scope-qualified, versioned local name) and then
path elements: `.attr`, `["key"]` (string keys), `[*]` (any other index). Zero-offset views
(`x[:n]`, `x.view(...)`) name the same storage as `x`; offset views (`x[1:]`) do not.
Alias edges go from the assigned Ref to the value's Ref (`self.x = cu` maps `self.x` to
`cu`; `self.meta = {"cu": cu}` maps `self.meta["cu"]` to `cu`); `resolve` follows them by
rewriting prefixes, so a buffer and a write are linked when their resolved sets meet.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import libcst as cst

from .context import quoted, string_key

Ref = tuple[str, ...]
RootOf = Callable[[cst.Name], Ref]
IsTensor = Callable[[cst.BaseExpression], bool]


VIEW_METHODS = frozenset({"view", "view_as", "reshape", "flatten", "unflatten", "unsqueeze", "squeeze",
                          "contiguous", "detach"})
_MAX_RESOLVED = 256


def _never(expr: cst.BaseExpression) -> bool:
    return False


def key_element(key: str) -> str:
    return f"[{quoted(key)}]"


def literal_int(expr: cst.BaseExpression | None) -> int | None:
    if isinstance(expr, cst.Integer):
        return int(expr.value.replace("_", ""), 0)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        inner = literal_int(expr.expression)
        return None if inner is None else -inner
    return None


def path_of(expr: cst.BaseExpression, root_of: RootOf, is_tensor: IsTensor = _never) -> Ref | None:
    """The storage an expression names, or None when it is a computed value, an offset view
    or a gather (`x[index_tensor]` copies)."""
    if isinstance(expr, cst.Name):
        return None if expr.value in ("None", "True", "False") else root_of(expr)
    if isinstance(expr, cst.Attribute):
        base = path_of(expr.value, root_of, is_tensor)
        return None if base is None else base + (f".{expr.attr.value}",)
    if isinstance(expr, cst.Subscript):
        base = path_of(expr.value, root_of, is_tensor)
        if base is None:
            return None
        if len(expr.slice) == 1 and (key := string_key(expr.slice[0].slice)) is not None:
            return base + (key_element(key),)
        kinds = [_element_kind(el.slice, is_tensor) for el in expr.slice]
        if "offset" in kinds or "gather" in kinds:
            return None
        return base + ("[*]",) if "index" in kinds else base
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
        method = expr.func.attr.value
        if method in VIEW_METHODS or (method == "narrow" and _narrow_start(expr) == 0):
            return path_of(expr.func.value, root_of, is_tensor)
    return None


def write_target(expr: cst.BaseExpression, root_of: RootOf,
                 is_tensor: IsTensor = _never) -> tuple[Ref | None, list[str]]:
    """The storage a write into `expr` lands in, and the literal slice starts it skips.

    `buf[1:n+1]` -> (buf, ["1"]): elements before index 1 are not written by it;
    `buf[idx] = v` with an index tensor scatters into `buf`.
    """
    skips: list[str] = []
    while True:
        if isinstance(expr, cst.Subscript) and any(
                isinstance(el.slice, cst.Slice) or _element_kind(el.slice, is_tensor) == "gather" for el in expr.slice):
            for el in expr.slice:
                if isinstance(el.slice, cst.Slice) and literal_int(el.slice.lower) not in (None, 0):
                    skips.append(str(literal_int(el.slice.lower)))
            expr = expr.value
        elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "narrow":
            start = _narrow_start(expr)
            if start not in (None, 0):
                skips.append(str(start))
            expr = expr.func.value
        elif (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute)
              and expr.func.attr.value in VIEW_METHODS):
            expr = expr.func.value
        else:
            return path_of(expr, root_of, is_tensor), skips


def resolve(ref: Ref, aliases: Mapping[Ref, Sequence[Ref]]) -> frozenset[Ref]:
    """Every Ref reachable from `ref` by replacing a prefix with one of its aliases."""
    seen = {ref}
    todo = [ref]
    while todo and len(seen) < _MAX_RESOLVED:
        current = todo.pop()
        for cut in range(len(current), 0, -1):
            for target in aliases.get(current[:cut], ()):
                new = target + current[cut:]
                if new not in seen:
                    seen.add(new)
                    todo.append(new)
    return frozenset(seen)


def overlaps(buffer_ids: frozenset[Ref], write_ids: frozenset[Ref]) -> bool:
    """True when a write lands in the buffer itself or in rows of it (`buf[i][1:]`)."""
    for w in write_ids:
        for b in buffer_ids:
            if w[: len(b)] == b and all(el == "[*]" for el in w[len(b):]):
                return True
    return False


def _element_kind(sub: cst.BaseSlice, is_tensor: IsTensor) -> str:
    if isinstance(sub, cst.Index):
        return "gather" if is_tensor(sub.value) else "index"
    assert isinstance(sub, cst.Slice)
    return "view" if sub.lower is None or literal_int(sub.lower) == 0 else "offset"


def _narrow_start(call: cst.Call) -> int | None:
    args = [a for a in call.args if a.keyword is None]
    start = next((a for a in call.args if a.keyword is not None and a.keyword.value == "start"), None)
    if start is not None:
        return literal_int(start.value)
    return literal_int(args[1].value) if len(args) >= 2 else None
