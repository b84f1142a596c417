"""python-loop-tensor: a Python `for` loop that builds a tensor one element or row at a time.

Two shapes: a store into a tensor indexed by the loop variable (`t[i] = ...`,
`t[i, :n] = ...`, `t[i, :n].copy_(...)`), and a list grown with `.append`/`.extend` in a
loop and then handed to `torch.tensor`/`torch.as_tensor`. Reported inside functions (a
loop in module-level setup code runs once). "Tensor" is a guess (see tensors.py): a
multi-dimensional index with a slice, a name or attribute assigned a torch call, or a
parameter annotated Tensor. No rewrite: vectorising is a design change.
"""

from __future__ import annotations

import libcst as cst

from .context import ModuleContext, kwarg, method_name, positional, render, shorten, string_key
from .model import LOOP_TENSOR, Finding
from .tensors import TensorVisitor

_ELEMENT_WRITES = frozenset({"copy_", "fill_", "zero_"})
_GROW = frozenset({"append", "extend"})


def check(ctx: ModuleContext, rules: set[str]) -> list[Finding]:
    if LOOP_TENSOR not in rules:
        return []
    visitor = _LoopVisitor(ctx)
    ctx.module.visit(visitor)
    return visitor.findings


class _LoopVisitor(TensorVisitor):
    def __init__(self, ctx: ModuleContext) -> None:
        super().__init__(ctx)
        self.findings: list[Finding] = []
        self._for_stack: list[list[tuple[frozenset[str], int]]] = [[]]  # per function: (loop vars, line) of open for loops
        self._grown: list[dict[str, int]] = [{}]  # per function: list name -> line of the loop that grows it

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        super().visit_FunctionDef(node)
        self._for_stack.append([])
        self._grown.append({})

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        super().leave_FunctionDef(original_node)
        self._for_stack.pop()
        self._grown.pop()

    def visit_For(self, node: cst.For) -> None:
        self._for_stack[-1].append((frozenset(_names(node.target)), self.ctx.start(node)[0]))

    def leave_For(self, original_node: cst.For) -> None:
        self._for_stack[-1].pop()

    def _loop_line(self, index: cst.CSTNode) -> int | None:
        """Line of the innermost enclosing for loop whose variable the index uses."""
        used = set(_names(index))
        for names, line in reversed(self._for_stack[-1]):
            if names & used:
                return line
        return None

    def _store(self, node: cst.CSTNode, target: cst.BaseExpression) -> None:
        if self.function is None or not isinstance(target, cst.Subscript):
            return
        if len(target.slice) == 1 and string_key(target.slice[0].slice) is not None:
            return  # a dict entry
        loop = self._loop_line(target.slice)  # type: ignore[arg-type]
        if loop is None or not self._tensor_store(target):
            return
        base = render(target.value, self.ctx.module)
        message = (f"`{shorten(render(target, self.ctx.module))}` is written once per iteration of the Python loop at "
                   f"line {loop}: one small op (a kernel launch on GPU) per element; build `{base}` with "
                   "vectorised ops or one copy_")
        self.findings.append(self.ctx.finding(LOOP_TENSOR, node, message, self.function,
                                              shorten(render(target, self.ctx.module))))

    def _tensor_store(self, target: cst.Subscript) -> bool:
        multi_dim_slice = len(target.slice) > 1 and any(isinstance(el.slice, cst.Slice) for el in target.slice)
        return multi_dim_slice or self.likely_tensor(target.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        super().visit_Assign(node)
        for t in node.targets:
            self._store(node, t.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._store(node, node.target)

    def visit_Call(self, node: cst.Call) -> None:
        method = method_name(node)
        receiver = node.func.value if isinstance(node.func, cst.Attribute) else None
        if method in _ELEMENT_WRITES and receiver is not None:
            self._store(node, receiver)
        elif method in _GROW and isinstance(receiver, cst.Name) and self._for_stack[-1] and self.is_list(receiver):
            self._grown[-1].setdefault(receiver.value, self._for_stack[-1][-1][1])
        elif self.ctx.qualified(node.func) in ("torch.tensor", "torch.as_tensor") and self.function is not None:
            data = positional(node, 0) or kwarg(node, "data")
            if data is not None and isinstance(data.value, cst.Name) and data.value.value in self._grown[-1]:
                name, loop = data.value.value, self._grown[-1][data.value.value]
                message = (f"`{name}` is built element by element with .append in the Python loop at line {loop} and then "
                           "converted: build the tensor with vectorised ops instead")
                self.findings.append(self.ctx.finding(LOOP_TENSOR, node, message, self.function,
                                                      shorten(self.ctx.code(node))))


def _names(node: cst.CSTNode | object) -> list[str]:
    """Every Name used inside a node (or a sequence of nodes)."""
    found: list[str] = []

    class _Collect(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            found.append(n.value)

    items = node if isinstance(node, (list, tuple)) else [node]
    for item in items:
        item.visit(_Collect())  # type: ignore[union-attr]
    return found
