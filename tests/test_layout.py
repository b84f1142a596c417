"""The layout's promises, checked on the source: data flows one way, so no import cycle between
modules of agent/ (imports inside functions included), only entry points import the CLI, and
the "never" arrows hold (review reads results, never run or batch; results is below them all).
A `_private` name stays in its module: what another module needs is public in its home.
Test modules share code through helpers.py and fixtures, never by importing each other.

    python -m pytest -q tests/test_layout.py      # prints every cycle it finds
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENTRY_POINTS = {"agent.__main__"}  # `python -m agent`; the console script names agent.cli:main itself
NEVER = {  # package -> the packages none of its modules may import
    "agent.review": ("agent.run", "agent.batch"),
    "agent.results": ("agent.run", "agent.batch", "agent.review", "agent.cli"),
}


def module_name(path: Path, top: Path) -> str:
    parts = list(path.relative_to(top.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(top: Path) -> dict[str, Path]:
    return {module_name(p, top): p for p in top.rglob("*.py")}


def imported_from(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute name of the module a `from ... import` in module `name` (file `path`) reads."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    base = node.module or ""
    if node.level:
        anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    return base


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module of `known` that `path` imports, at any depth (functions, TYPE_CHECKING blocks)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = imported_from(name, path, node)
            subs = {f"{base}.{a.name}" for a in node.names} & known  # `from pkg import submodule`
            found |= subs if len(subs) == len(node.names) else subs | {base}
    return {m for m in found if m in known and m != name}


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(top: Path) -> list[str]:
    """Each `_private` name (or private module) a module of `top` imports from another of its modules."""
    mods = modules(top)
    found = []
    for name, path in sorted(mods.items()):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found += [f"{name} imports {a.name}" for a in node.names
                          if a.name.partition(".")[0] == top.name and any(map(is_private, a.name.split(".")))]
            elif isinstance(node, ast.ImportFrom):
                base = imported_from(name, path, node)
                if base.partition(".")[0] != top.name or base == name:
                    continue
                found += [f"{name} imports {a.name} from {base}" for a in node.names
                          if is_private(a.name) or any(map(is_private, base.split(".")))]
    return found


def graph(top: Path) -> dict[str, set[str]]:
    mods = modules(top)
    return {name: imports_of(name, path, set(mods)) for name, path in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_in_agent_function_level_imports_included():
    found = cycles(graph(ROOT / "agent"))
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_finds_a_function_level_cycle(tmp_path):
    pkg = tmp_path / "agent"
    (pkg / "batch").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "batch" / "__init__.py").write_text("")
    (pkg / "cli.py").write_text("from agent.batch import driver\n")
    (pkg / "batch" / "driver.py").write_text("def run():\n    from ..cli import main\n")
    assert cycles(graph(pkg)) == [["agent.batch.driver", "agent.cli"]]


def test_only_entry_points_import_the_cli():
    importers = sorted(m for m, deps in graph(ROOT / "agent").items() if "agent.cli" in deps and m not in ENTRY_POINTS)
    assert importers == []


def inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def forbidden(g: dict[str, set[str]], never: dict[str, tuple[str, ...]]) -> list[str]:
    """Every "never" arrow the graph has, as "importer -> imported"."""
    return sorted(f"{m} -> {d}" for m, deps in g.items() for pkg, banned in never.items() if inside(m, pkg)
                  for d in deps if any(inside(d, b) for b in banned))


def test_review_never_imports_run_or_batch_and_results_imports_none_above_it():
    found = forbidden(graph(ROOT / "agent"), NEVER)
    assert found == [], "forbidden imports:\n" + "\n".join(found)


def test_the_never_check_finds_a_function_level_import(tmp_path):
    pkg = tmp_path / "agent"
    for sub in ("review", "batch"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "batch" / "ledger.py").write_text("")
    (pkg / "review" / "load.py").write_text("def f():\n    from agent.batch import ledger\n")
    assert forbidden(graph(pkg), NEVER) == ["agent.review.load -> agent.batch.ledger"]


def test_test_modules_do_not_import_each_other():
    tests = ROOT / "tests"
    test_modules = {p.stem for p in tests.rglob("test_*.py")}
    offenders = []
    for p in tests.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{p.relative_to(ROOT)} imports {n}" for n in names if n.rpartition(".")[2] in test_modules]
    assert offenders == []


def test_no_module_imports_another_modules_private_names():
    found = private_imports(ROOT / "agent")
    assert not found, "make these public in their home module:\n" + "\n".join(found)


def test_the_private_import_finder_finds_relative_and_absolute_ones(tmp_path):
    pkg = tmp_path / "agent"
    (pkg / "env").mkdir(parents=True)
    for init in (pkg / "__init__.py", pkg / "env" / "__init__.py"):
        init.write_text("")
    (pkg / "env" / "sandbox.py").write_text("from __future__ import annotations\n_x = 1\n__all__ = []\n")
    (pkg / "env" / "warm.py").write_text("from agent.env.sandbox import __all__, _x\n"
                                         "def f():\n    from .sandbox import _x as y\n")
    (pkg / "cli.py").write_text("import agent.env._hidden\nfrom agent.env import sandbox\n")
    assert private_imports(pkg) == ["agent.cli imports agent.env._hidden",
                                    "agent.env.warm imports _x from agent.env.sandbox",
                                    "agent.env.warm imports _x from agent.env.sandbox"]
