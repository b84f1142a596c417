"""The scripts perfagent runs in another interpreter (the task's, or its own isolated: by path, or from their text
with -c) are real modules, read by ruff: each imports only the standard library, since none of ours is there,
and does nothing when merely imported."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from agent.agents.relay import BRIDGE
from agent.checks.environment import PROBE
from agent.checks.integrity import LIST_MODULES
from agent.env.sandbox import REAPER
from agent.env.warm import ZYGOTE

SCRIPTS = (BRIDGE, PROBE, LIST_MODULES, REAPER, ZYGOTE)
QUIET = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)


def _is_main_guard(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in ("__name__ == '__main__'", '__name__ == "__main__"')


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def test_layout_check_sees_a_script_that_imports_ours(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import json\nfrom agent.env import sandbox\nmain()\n")
    assert _outside_stdlib(bad) == {"agent"} and _loud_statements(bad) == ["main()"]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_script_imports_only_the_standard_library_and_runs_only_as_main(script: Path):
    assert script.is_file()
    assert _outside_stdlib(script) == set()
    assert _loud_statements(script) == []


def _outside_stdlib(script: Path) -> set[str]:
    tree = ast.parse(script.read_text(encoding="utf-8"))
    names = {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    names |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    return {n.split(".")[0] for n in names} - set(sys.stdlib_module_names)


def _loud_statements(script: Path) -> list[str]:
    """Top-level statements that would run something on import: anything but the docstring, imports,
    definitions, assignments without a call, and the `__main__` guard."""
    tree = ast.parse(script.read_text(encoding="utf-8"))
    return [ast.unparse(node) for node in tree.body
            if not (_is_docstring(node) or _is_main_guard(node)
                    or (isinstance(node, QUIET) and not (isinstance(node, (ast.Assign, ast.AnnAssign))
                                                          and any(isinstance(n, ast.Call) for n in ast.walk(node)))))]
