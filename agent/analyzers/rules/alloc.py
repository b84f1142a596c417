"""per-step-alloc and tensor-from-list: new tensors built on every step.

per-step-alloc flags `torch.arange/tensor/zeros/ones/empty/full` and
`F.pad(torch.cumsum(...))` in per-step code. No rewrite is proposed: every fix needs a
buffer that outlives the call (where it is allocated, its maximum size, a stable address
under CUDA graphs), which is a design decision, not a local edit.

tensor-from-list flags `torch.tensor/as_tensor(<python list>, device=<not cpu>)` without
`pin_memory=True`, and `torch.tensor(<list>).to(device)` / `.cuda()` without
`non_blocking=True`: a synchronous copy from pageable memory every step. When both rules
are on, such a call is reported once, as tensor-from-list.
"""

from __future__ import annotations

import libcst as cst

from ..context import ModuleContext, is_literal_true, kwarg, method_name, positional, shorten
from ..facts import is_cpu_device
from ..findings import PER_STEP_ALLOC, TENSOR_FROM_LIST
from ..tensors import TensorVisitor

_FACTORIES = {
    "torch.arange": "slice a preallocated arange buffer (`self.arange_buf[:n]`) instead",
    "torch.tensor": "copy_ into a preallocated buffer instead",
    "torch.zeros": "reuse a preallocated buffer (a slice of it) instead",
    "torch.ones": "reuse a preallocated buffer (a slice of it) instead",
    "torch.empty": "reuse a preallocated buffer (a slice of it) instead",
    "torch.full": "reuse a preallocated buffer (a slice of it) instead",
}
_PADS = frozenset({"torch.nn.functional.pad"})
_DTYPES = frozenset({"float", "float16", "float32", "float64", "half", "double", "bfloat16", "int", "int8", "int16",
                     "int32", "int64", "long", "short", "uint8", "bool"})


def visitor(ctx: ModuleContext, rules: set[str]) -> "AllocRule | None":
    return AllocRule(ctx, rules) if rules & {PER_STEP_ALLOC, TENSOR_FROM_LIST} else None


class AllocRule(TensorVisitor):
    def __init__(self, ctx: ModuleContext, rules: set[str]) -> None:
        super().__init__(ctx)
        self.rules = rules
        self._from_list: set[int] = set()  # ids of torch.tensor calls already reported as tensor-from-list

    def _flag(self, rule: str, node: cst.Call, message: str) -> None:
        code = shorten(self.ctx.code(node))
        self._found.append(self.ctx.finding(rule, node, message, self.function, code))

    def visit_Call(self, node: cst.Call) -> None:
        if not self.per_step or id(node) in self._from_list:
            return
        qual = self.ctx.qualified(node.func)
        where = "in a loop" if self.in_loop else f"in per-step `{self.function}`"
        if qual in _PADS and _pads_cumsum(node, self.ctx):
            if PER_STEP_ALLOC in self.rules:
                self._flag(PER_STEP_ALLOC, node, f"`F.pad(torch.cumsum(...))` allocates twice {where}; keep a "
                           "preallocated buffer whose element 0 stays zero and write "
                           "`torch.cumsum(x, 0, out=buf[1:n + 1])` into it")
            return
        if _moves_to_device(node, self.ctx) and not _non_blocking(node):
            inner = node.func.value  # type: ignore[attr-defined]
            if isinstance(inner, cst.Call) and self._list_to_tensor(inner) and kwarg(inner, "device") is None:
                if TENSOR_FROM_LIST in self.rules:
                    self._from_list.add(id(inner))
                    self._flag(TENSOR_FROM_LIST, inner,
                               _from_list_message(where, "`.to(device)` without non_blocking=True"))
                return
        if qual in ("torch.tensor", "torch.as_tensor") and self._list_to_tensor(node) and _to_device(node):
            if TENSOR_FROM_LIST in self.rules:
                self._flag(TENSOR_FROM_LIST, node, _from_list_message(where, "`device=` without pin_memory=True"))
                return
        if qual in _FACTORIES and PER_STEP_ALLOC in self.rules:
            self._flag(PER_STEP_ALLOC, node, f"`{qual}` allocates a new tensor {where}; {_FACTORIES[qual]}")

    def _list_to_tensor(self, call: cst.Call) -> bool:
        if self.ctx.qualified(call.func) not in ("torch.tensor", "torch.as_tensor"):
            return False
        data = positional(call, 0) or kwarg(call, "data")
        pinned = kwarg(call, "pin_memory")
        return data is not None and self.is_list(data.value) and not (pinned and is_literal_true(pinned.value))


def _from_list_message(where: str, how: str) -> str:
    return (f"builds a tensor from a Python list {where} and copies it to the device from pageable memory ({how}), "
            "synchronously; build it with pin_memory=True and `.to(device, non_blocking=True)`, or copy_ into a "
            "preallocated device buffer")


def _pads_cumsum(call: cst.Call, ctx: ModuleContext) -> bool:
    data = positional(call, 0) or kwarg(call, "input")
    if data is None or not isinstance(data.value, cst.Call):
        return False
    inner = data.value
    return ctx.qualified(inner.func) == "torch.cumsum" or method_name(inner) == "cumsum"


def _moves_to_device(call: cst.Call, ctx: ModuleContext) -> bool:
    """`.cuda()`, or `.to(...)` naming a device other than the CPU (not just a dtype)."""
    method = method_name(call)
    if method == "cuda":
        return True
    if method != "to":
        return False
    target = kwarg(call, "device") or positional(call, 0)
    if target is None:
        return False
    qual = ctx.qualified(target.value) or ""
    if qual.startswith("torch.") and qual.split(".", 1)[1] in _DTYPES:
        return False
    return not is_cpu_device(target.value)


def _to_device(call: cst.Call) -> bool:
    device = kwarg(call, "device")
    return device is not None and not is_cpu_device(device.value)


def _non_blocking(call: cst.Call) -> bool:
    arg = kwarg(call, "non_blocking")
    return arg is not None and is_literal_true(arg.value)
