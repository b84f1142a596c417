"""python-loop-tensor: a Python `for` loop that builds a tensor one element or row at a time.

Two shapes: a store into a tensor indexed by the loop variable (`t[i] = ...`,
`t[i, :n] = ...`, `t[i, :n].copy_(...)`), and a list grown with `.append`/`.extend` in a
loop and then handed to `torch.tensor`/`torch.as_tensor`. Reported in per-step code inside
functions (not in module-level code or one-time setup such as `__init__`, nor, for the
list form, in functions that are not per-step). "Tensor" is a guess (see tensors.py): a
multi-dimensional index with a slice, a name or attribute assigned a torch call, or a
parameter annotated Tensor. No rewrite: vectorising is a design change.
"""

from __future__ import annotations

import libcst as cst

from ..context import ModuleContext, kwarg, method_name, positional, shorten, string_key
from ..findings import LOOP_TENSOR
from ..tensors import TensorVisitor

_ELEMENT_WRITES = frozenset({"copy_", "fill_", "zero_"})
_GROW = frozenset({"append", "extend"})


def visitor(ctx: ModuleContext, rules: set[str]) -> "LoopRule | None":
    return LoopRule(ctx) if LOOP_TENSOR in rules else None


class LoopRule(TensorVisitor):
    def __init__(self, ctx: ModuleContext) -> None:
        super().__init__(ctx)
        self._for_stack: list[list[tuple[frozenset[str], int]]] = [[]]  # per function: (loop vars, line) of open loops
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

    def _loop_line(self, index: tuple[cst.CSTNode, ...]) -> int | None:
        """Line of the innermost enclosing for loop whose variable the index uses."""
        used = set(_names(index))
        for names, line in reversed(self._for_stack[-1]):
            if names & used:
                return line
        return None

    def _store(self, node: cst.CSTNode, target: cst.BaseExpression) -> None:
        if self.function is None or not self.per_step or not isinstance(target, cst.Subscript):
            return
        if len(target.slice) == 1 and string_key(target.slice[0].slice) is not None:
            return  # a dict entry
        loop = self._loop_line(tuple(target.slice))
        if loop is None or not self._tensor_store(target):
            return
        base = self.ctx.render(target.value)
        message = (f"`{shorten(self.ctx.render(target))}` is written once per iteration of the Python loop at "
                   f"line {loop}: one small op (a kernel launch on GPU) per element; build `{base}` with "
                   "vectorised ops or one copy_")
        self._found.append(self.ctx.finding(LOOP_TENSOR, node, message, self.function,
                                              shorten(self.ctx.render(target))))

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
        elif self.ctx.qualified(node.func) in ("torch.tensor", "torch.as_tensor") and self.function and self.per_step:
            data = positional(node, 0) or kwarg(node, "data")
            if data is not None and isinstance(data.value, cst.Name) and data.value.value in self._grown[-1]:
                name, loop = data.value.value, self._grown[-1][data.value.value]
                message = (f"`{name}` is built element by element with .append in the Python loop at line {loop} "
                           "and then converted: build the tensor with vectorised ops instead")
                self._found.append(self.ctx.finding(LOOP_TENSOR, node, message, self.function,
                                                      shorten(self.ctx.code(node))))


def _names(node: cst.CSTNode | tuple[cst.CSTNode, ...]) -> list[str]:
    """Every Name used inside a node (or a tuple of nodes, such as a subscript's elements)."""
    collector = _NameCollector()
    for item in node if isinstance(node, tuple) else (node,):
        item.visit(collector)
    return collector.names


class _NameCollector(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def visit_Name(self, node: cst.Name) -> None:
        self.names.append(node.value)
