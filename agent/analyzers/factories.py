"""Recognise tensor factory calls (zero-filled vs uninitialised) and rewrite zeros to empty.

Pure functions on one `cst.Call`: the buffer analysis decides *which* calls to rewrite,
this module only knows *how*, keeping every other argument and its formatting.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from .context import ModuleContext, is_literal_true, kwarg

# zero-filled factory -> its uninitialised twin (module functions and tensor methods)
_ZERO_FUNCS = {"torch.zeros": "empty", "torch.zeros_like": "empty_like", "torch.full": "empty",
               "torch.full_like": "empty_like"}
_ZERO_METHODS = {"new_zeros": "new_empty", "new_full": "new_empty"}
_EMPTY_FUNCS = {"torch.empty", "torch.empty_like", "torch.empty_strided"}
_EMPTY_METHODS = {"new_empty", "new_empty_strided"}
_FILL_FORMS = {"torch.full", "torch.full_like", "new_full"}  # fill value: positional 1 or fill_value=
# Memory that reaches a tensor without aten's allocators, unwritten: numpy's, a raw storage's, a grown one.
_HOST_EMPTY = {"numpy.empty", "numpy.empty_like"}
_WRAPS = {"torch.from_numpy", "torch.as_tensor", "torch.asarray", "torch.tensor", "torch.frombuffer"}


@dataclass(frozen=True)
class Factory:
    """A recognised allocation. `zero` says whether its contents are defined (zeros)."""

    name: str                 # as a reader would say it: "torch.zeros", ".new_zeros"
    zero: bool
    fixable: bool = False
    new_attr: str | None = None   # attribute name after rewriting ("empty", "new_empty")
    drop_arg: int | None = None   # index in call.args of the fill value to remove
    add_dtype: str | None = None  # dtype a dropped int/bool fill implied ("int64", "bool")
    grad: bool = False            # requires_grad=True: a leaf whose initial value is used


def classify(call: cst.Call, ctx: ModuleContext) -> Factory | None:
    """The factory this call is, or None (also None for `out=` calls: they allocate nothing)."""
    if kwarg(call, "out") is not None:
        return None
    qual = ctx.qualified(call.func)
    method = call.func.attr.value if isinstance(call.func, cst.Attribute) else None
    host = _host(call, qual, method, ctx)
    if host is not None:
        return Factory(name=host, zero=False)
    is_func = qual in _ZERO_FUNCS or qual in _EMPTY_FUNCS
    name = qual if is_func else f".{method}" if method in _ZERO_METHODS or method in _EMPTY_METHODS else None
    if name is None:
        return None
    grad_arg = kwarg(call, "requires_grad")
    grad = grad_arg is not None and is_literal_true(grad_arg.value)
    if qual in _EMPTY_FUNCS or (not is_func and method in _EMPTY_METHODS):
        return Factory(name=name, zero=False, grad=grad)
    key = qual if is_func else method
    attr_form = isinstance(call.func, cst.Attribute)
    new_attr = _ZERO_FUNCS[key] if is_func else _ZERO_METHODS[key]
    if key not in _FILL_FORMS:
        return Factory(name=name, zero=True, fixable=attr_form, new_attr=new_attr, grad=grad)
    drop = _fill_index(call)
    if drop is None or not is_zero_literal(call.args[drop].value):
        return None  # torch.full(..., 7) is not a zero buffer
    add_dtype = None
    dtype = kwarg(call, "dtype")
    if key == "torch.full" and (dtype is None or _is_none(dtype.value)):
        add_dtype = _implied_dtype(call.args[drop].value)
        if add_dtype is not None and dtype is not None:
            attr_form = False  # `dtype=None` beside an int fill: no single-argument edit keeps the dtype
    return Factory(name=name, zero=True, fixable=attr_form, new_attr=new_attr, drop_arg=drop,
                   add_dtype=add_dtype, grad=grad)


def _host(call: cst.Call, qual: str | None, method: str | None, ctx: ModuleContext) -> str | None:
    """The name of an allocation outside aten that leaves its memory unwritten, or None: `np.empty(...)`,
    `np.ndarray(shape)` (no buffer), `torch.UntypedStorage(n)`, `x.resize_(...)`, a tensor made over one
    of them (`torch.from_numpy(np.empty(...))`, `t.set_(torch.UntypedStorage(n))`)."""
    if qual in _HOST_EMPTY:
        return qual
    if qual == "numpy.ndarray" and kwarg(call, "buffer") is None and len(call.args) < 3:
        return qual
    if (qual in ("torch.UntypedStorage", "torch.TypedStorage") and len(call.args) == 1
            and call.args[0].keyword is None and not isinstance(call.args[0].value, (cst.List, cst.Tuple))):
        return qual
    if method == "resize_":
        return ".resize_"
    if (qual in _WRAPS or method == "set_") and call.args and isinstance(call.args[0].value, cst.Call):
        inner = classify(call.args[0].value, ctx)
        if inner is not None and not inner.zero:
            return f"{qual or '.' + str(method)}({inner.name})"
    return None


def to_empty(call: cst.Call, factory: Factory) -> cst.Call:
    """`torch.zeros(a, dtype=d)` -> `torch.empty(a, dtype=d)`; a zero fill value is dropped.

    When `torch.full(size, 0)` relied on the fill value for its dtype (int -> int64,
    bool -> bool), the fill argument is replaced in place by `dtype=<torch>.<that>` so the
    result's dtype does not change.
    """
    assert factory.fixable and factory.new_attr and isinstance(call.func, cst.Attribute)
    func = call.func.with_changes(attr=cst.Name(factory.new_attr))
    args = list(call.args)
    if factory.drop_arg is not None:
        i = factory.drop_arg
        if factory.add_dtype is not None:
            value = cst.Attribute(value=call.func.value, attr=cst.Name(factory.add_dtype))
            args[i] = args[i].with_changes(keyword=cst.Name("dtype"), value=value,
                                           equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                                                 whitespace_after=cst.SimpleWhitespace("")))
        else:
            removed = args.pop(i)
            if i == len(args) and args:  # removed the last one: the new last keeps its trailing-comma style
                args[-1] = args[-1].with_changes(comma=removed.comma)
    return call.with_changes(func=func, args=args)


def is_zero_literal(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.Integer | cst.Float):
        try:
            return float(expr.value.replace("_", "")) == 0.0
        except ValueError:
            return False
    return isinstance(expr, cst.Name) and expr.value == "False"


def _fill_index(call: cst.Call) -> int | None:
    """Index in call.args of the fill value: `fill_value=` or the second positional."""
    n_positional = 0
    for i, arg in enumerate(call.args):
        if arg.star:
            return None  # *args: the fill position is unknown
        if arg.keyword is not None:
            if arg.keyword.value == "fill_value":
                return i
            continue
        if n_positional == 1:
            return i
        n_positional += 1
    return None


def _implied_dtype(fill: cst.BaseExpression) -> str | None:
    if isinstance(fill, cst.Integer):
        return "int64"
    if isinstance(fill, cst.Name):  # False
        return "bool"
    return None  # a float fill gives the default dtype, as torch.empty does


def _is_none(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"
