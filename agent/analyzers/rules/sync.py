"""host-device-sync: per-step code that makes the host wait for the device.

Flags `.item()`, `.tolist()`, `.numpy()`, `.cpu()`, `.to("cpu")`, `bool/int/float(t)` on a
likely tensor (tensors.py), and `if`/`while`/`assert` tests that call bool() on a tensor,
but only in per-step code (context.ScopedVisitor: per-step functions and their callees in
the module, loop and comprehension bodies outside one-time setup).
Receivers named like host data (`seq_lens_cpu`, `x_host`) or known to be on the host
(`TensorVisitor.is_host`: CPU tensors made from Python, NumPy arrays, Python numbers) are
skipped. No rewrite: the fix is a design change (keep a host copy, or keep the value on the
device).
"""

from __future__ import annotations

import libcst as cst

from ..context import ModuleContext, kwarg, method_name, positional, shorten
from ..facts import is_cpu_device
from ..findings import HOST_SYNC
from ..tensors import TensorVisitor, host_named

_SYNC_METHODS = {
    "item": "copies a device scalar to the host",
    "tolist": "copies the tensor to a Python list on the host",
    "numpy": "needs the data on the host",
    "cpu": "copies the tensor to the host",
}
_CONVERTERS = frozenset({"bool", "int", "float"})


def visitor(ctx: ModuleContext, rules: set[str]) -> "SyncRule | None":
    return SyncRule(ctx) if HOST_SYNC in rules else None


class SyncRule(TensorVisitor):
    def _flag(self, node: cst.CSTNode, what: str) -> None:
        code = self.ctx.code(node)
        where = "in a loop" if self.in_loop else f"in per-step `{self.function}`"
        message = f"`{shorten(code)}` {what} and blocks until the device catches up ({where})"
        self._found.append(self.ctx.finding(HOST_SYNC, node, message, self.function, shorten(code)))

    def visit_Call(self, node: cst.Call) -> None:
        if not self.per_step:
            return
        method = method_name(node)
        receiver = node.func.value if isinstance(node.func, cst.Attribute) else None
        on_host = receiver is not None and (host_named(receiver, self.ctx) or self.is_host(receiver))
        if method in _SYNC_METHODS and not on_host:
            self._flag(node, _SYNC_METHODS[method])
        elif method == "to" and _to_cpu(node) and not on_host:
            self._flag(node, "copies the tensor to the host")
        elif isinstance(node.func, cst.Name) and node.func.value in _CONVERTERS and len(node.args) == 1:
            arg = positional(node, 0)
            if arg is not None and self.on_device(arg.value) and not host_named(arg.value, self.ctx):
                self._flag(node, f"`{node.func.value}()` of a tensor reads it on the host")

    def _test(self, test: cst.BaseExpression) -> None:
        if self.per_step and self._bool_of_tensor(test):
            self._flag(test, "calls bool() on a tensor")

    def _bool_of_tensor(self, test: cst.BaseExpression) -> bool:
        if isinstance(test, cst.BooleanOperation):
            return self._bool_of_tensor(test.left) or self._bool_of_tensor(test.right)
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            return self._bool_of_tensor(test.expression)
        if isinstance(test, cst.Call) and method_name(test) in _SYNC_METHODS:
            return False  # already reported as a call
        return self.on_device(test) and not host_named(test, self.ctx)

    def visit_If(self, node: cst.If) -> None:
        self._test(node.test)

    def visit_While(self, node: cst.While) -> None:
        super().visit_While(node)
        self._test(node.test)

    def visit_Assert(self, node: cst.Assert) -> None:
        self._test(node.test)

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._test(node.test)


def _to_cpu(call: cst.Call) -> bool:
    target = kwarg(call, "device") or positional(call, 0)
    return target is not None and is_cpu_device(target.value)
