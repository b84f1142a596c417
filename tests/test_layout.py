"""The layout's promises, checked on the source: data flows one way, so no import cycle between
modules of agent/ (imports inside functions included), only entry points import the CLI (whose
command modules stay thin: their rules live in their domains), and
the "never" arrows hold (review reads results, never run or batch; results is below them all).
A `_private` name stays in its module: what another module needs is public in its home.
Test modules share code through helpers.py and fixtures, never by importing each other.

    python -m pytest -q tests/test_layout.py      # prints every cycle it finds
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENTRY_POINTS = {"agent.__main__"}  # `python -m agent`; the console script names agent.cli:main itself
CLI = "agent.cli"  # a package: one module per command, each flags, one call and the printing
CLI_MODULE_LINES = 150  # a command module longer than this holds rules that belong in their domain
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


def cli_importers(g: dict[str, set[str]]) -> list[str]:
    """Every module outside the CLI package and the entry points that imports any module of it."""
    return sorted(m for m, deps in g.items() if not inside(m, CLI) and m not in ENTRY_POINTS
                  and any(inside(d, CLI) for d in deps))


def test_only_entry_points_import_the_cli():
    assert cli_importers(graph(ROOT / "agent")) == []


def test_the_cli_importer_finder_finds_an_import_of_a_command_module(tmp_path):
    pkg = tmp_path / "agent"
    for sub in ("cli", "batch"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text("from agent.cli import main\n")
    (pkg / "cli" / "check.py").write_text("from agent.batch import driver\nfrom agent.cli import batch\n")
    (pkg / "cli" / "batch.py").write_text("")
    (pkg / "batch" / "driver.py").write_text("def f():\n    from agent.cli.check import add\n")
    assert cli_importers(graph(pkg)) == ["agent.batch.driver"]


def long_cli_modules(top: Path, limit: int) -> list[str]:
    """Each module of the CLI (the package, or a lone cli.py) longer than `limit` lines, with its length."""
    found = []
    for path in sorted([*top.glob("cli.py"), *(top / "cli").glob("*.py")]):
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit:
            found.append(f"{path.relative_to(top.parent).as_posix()}: {n} lines")
    return found


def test_every_cli_module_is_thin():
    found = long_cli_modules(ROOT / "agent", CLI_MODULE_LINES)
    assert found == [], ("a command's module is its flags, one call and the printing; move its rules to their "
                         "domain:\n" + "\n".join(found))


def test_the_thin_cli_check_finds_a_long_command_module(tmp_path):
    (tmp_path / "agent" / "cli").mkdir(parents=True)
    (tmp_path / "agent" / "cli" / "run.py").write_text("x = 1\n" * 10)
    (tmp_path / "agent" / "cli" / "batch.py").write_text("x = 1\n" * 11)
    (tmp_path / "agent" / "task.py").write_text("x = 1\n" * 50)  # outside the CLI: not its business
    assert long_cli_modules(tmp_path / "agent", 10) == ["agent/cli/batch.py: 11 lines"]
    (tmp_path / "agent" / "cli.py").write_text("x = 1\n" * 12)  # the CLI as one module, as it was
    assert long_cli_modules(tmp_path / "agent", 10) == ["agent/cli/batch.py: 11 lines", "agent/cli.py: 12 lines"]


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


def readme_modules(readme: Path) -> set[str]:
    """The modules a folder's README names: the `name.py` that opens each list item."""
    return set(re.findall(r"^- `(\w+\.py)`", readme.read_text(encoding="utf-8"), re.M))


def unnamed_modules(top: Path) -> list[str]:
    """Every module of a folder of `top` that its README.md does not name (`__init__.py` may go unnamed), and
    every module a README names that is not in its folder: the layout a newcomer reads cannot drift from the code."""
    found = []
    for folder in sorted({p.parent for p in top.rglob("*.py")}):
        rel, readme = folder.relative_to(top.parent), folder / "README.md"
        if not readme.exists():
            found.append(f"{rel}/README.md is missing")
            continue
        here, named = {p.name for p in folder.glob("*.py")}, readme_modules(readme)
        found += [f"{rel}/README.md does not name {m}" for m in sorted(here - named - {"__init__.py"})]
        found += [f"{rel}/README.md names {m}, which is not there" for m in sorted(named - here)]
    return found


def test_every_module_is_named_in_its_folders_readme():
    found = unnamed_modules(ROOT / "agent")
    assert found == [], "a line `- `module.py`: what it is for` per module:\n" + "\n".join(found)


def test_the_readme_check_finds_a_missing_readme_an_unnamed_module_and_a_stale_name(tmp_path):
    pkg = tmp_path / "agent"
    (pkg / "run").mkdir(parents=True)
    (pkg / "batch").mkdir()
    for path in ("__init__.py", "cli.py", "run/__init__.py", "run/loop.py", "run/tools.py", "batch/driver.py"):
        (pkg / path).write_text("")
    (pkg / "README.md").write_text("- `cli.py`: the command\n")
    (pkg / "run" / "README.md").write_text("- `loop.py`: the loop; tools.py is only mentioned here\n- `gone.py`: old\n")
    assert unnamed_modules(pkg) == ["agent/batch/README.md is missing", "agent/run/README.md does not name tools.py",
                                    "agent/run/README.md names gone.py, which is not there"]


# -- the grading's vocabulary: names, never strings ------------------------------------------------------------
VOCABULARY_HOME = {"agent/checks/verdicts.py", "agent/checks/grade.py"}  # the vocabulary, and the grading
ABOUT_A_VERDICT = re.compile(r"verdict|outcome", re.IGNORECASE)


def vocabulary() -> set[str]:
    from agent.checks.verdicts import PerfVerdict, Verdict

    return {v.value for v in Verdict} | {v.value for v in PerfVerdict}


def _spelled(node: ast.AST | None, words: set[str]) -> list[str]:
    """The vocabulary's words `node` spells as string constants (inside tuples, lists, conditionals...)."""
    if node is None:
        return []
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and n.value in words]


def verdict_literals(top: Path, home: set[str], words: set[str]) -> list[str]:
    """Where a module outside `home` compares, assigns, passes (`verdict=`) or returns (from a function named
    for a verdict or an outcome) a verdict as a string: "file:line: word"."""
    found = []
    for path in sorted(top.rglob("*.py")):
        rel = path.relative_to(top.parent).as_posix()
        if rel in home:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            if ABOUT_A_VERDICT.search(fn.name):
                found += [f"{rel}:{r.lineno}: {w}" for r in ast.walk(fn) if isinstance(r, ast.Return)
                          for w in _spelled(r.value, words)]
        for node in ast.walk(tree):
            said: list[str] = []
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                for i, side in enumerate(sides):
                    if any(ABOUT_A_VERDICT.search(ast.unparse(o)) for j, o in enumerate(sides) if j != i):
                        said += _spelled(side, words) if isinstance(side, (ast.Constant, ast.Tuple, ast.List,
                                                                            ast.Set)) else []
            elif isinstance(node, ast.keyword) and node.arg and ABOUT_A_VERDICT.search(node.arg):
                said = _spelled(node.value, words)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(ABOUT_A_VERDICT.search(ast.unparse(t)) for t in targets):
                    said = _spelled(node.value, words)
            found += [f"{rel}:{getattr(node, 'lineno', '?')}: {w}" for w in said]
    return sorted(set(found))


def test_no_verdict_literal_outside_the_grading():
    found = verdict_literals(ROOT / "agent", VOCABULARY_HOME, vocabulary())
    assert found == [], "name it (agent.checks.verdicts: Verdict.PASS, PerfVerdict.FASTER):\n" + "\n".join(found)


def test_the_verdict_literal_finder_finds_comparisons_assignments_keywords_and_returns(tmp_path):
    pkg = tmp_path / "agent"
    (pkg / "checks").mkdir(parents=True)
    (pkg / "checks" / "grade.py").write_text('def grade(ev):\n    ev.verdict = "pass"\n')
    (pkg / "m.py").write_text(
        'def f(ev, e, r):\n'
        '    if ev.verdict == "pass" or "inconclusive" in (ev.perf.verdict, None):\n'
        '        return Evaluation(verdict="error")\n'
        '    ok = run_outcome(r) != "fail"\n'
        '    r.verdict, r.note = "no-change", "nothing"\n'
        '    return e.get("type") == "error" or {"pass": 1}\n'  # another word's "error"; a dict: not a verdict here
        '\n\ndef perf_verdict(ev):\n    return "faster" if ev else None\n')
    assert verdict_literals(pkg, {"agent/checks/grade.py"}, vocabulary()) == [
        "agent/m.py:10: faster", "agent/m.py:2: inconclusive", "agent/m.py:2: pass", "agent/m.py:3: error",
        "agent/m.py:4: fail", "agent/m.py:5: no-change"]


def _copied(value: ast.expr) -> bool:
    return isinstance(value, ast.Attribute) and value.attr == "verdict"


def verdict_writers(top: Path, home: set[str]) -> list[str]:
    """`Evaluation(verdict=...)` outside `home`, save one that copies another evaluation's verdict: a verdict
    is written by `grade`, or by `nothing_to_grade` for a run that leaves nothing to grade."""
    found = []
    for path in sorted(top.rglob("*.py")):
        rel = path.relative_to(top.parent).as_posix()
        if rel in home:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == "Evaluation"
                    and any(k.arg == "verdict" and not _copied(k.value) for k in node.keywords)):
                found.append(f"{rel}:{node.lineno}")
    return found


def test_only_the_grading_writes_a_verdict():
    found = verdict_writers(ROOT / "agent", VOCABULARY_HOME)
    assert found == [], "grade(evidence, spec), or nothing_to_grade(Verdict.X, why):\n" + "\n".join(found)


def test_the_verdict_writer_finder_finds_a_constructed_evaluation(tmp_path):
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "m.py").write_text("a = Evaluation(verdict=Verdict.ERROR, error='x')\n"
                                             "b = checks.Evaluation(verdict=v)\nc = Evaluation(verdict=ev.verdict)\n")
    assert verdict_writers(tmp_path / "agent", set()) == ["agent/m.py:1", "agent/m.py:2"]


# -- where a run's files are: results/layout.py names them, nothing else spells "results" or "patches" ------------
LAYOUT = "agent/results/layout.py"
OUTPUT_TOPS = {"results", "patches"}


def hand_built_paths(top: Path) -> list[str]:
    """Each `x / "results"` or `"patches" / y` (any path joined with an output folder's name spelled out) in a
    module of `top` other than the layout: a path the layout should have named."""
    found = []
    for path in sorted(top.rglob("*.py")):
        where = path.relative_to(top.parent).as_posix()
        if where == LAYOUT:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and any(
                    isinstance(side, ast.Constant) and isinstance(side.value, str)
                    and side.value.strip("/").partition("/")[0] in OUTPUT_TOPS for side in (node.left, node.right)):
                found.append((where, node.lineno))
    return [f"{where}:{line}" for where, line in sorted(found)]


def test_the_hand_built_path_finder_finds_either_side_and_spares_the_layout(tmp_path):
    pkg = tmp_path / "agent"
    (pkg / "results").mkdir(parents=True)
    (pkg / "results" / "layout.py").write_text('def f(out):\n    return out / "results"\n')
    (pkg / "m.py").write_text('a = out / "results" / run_id\nb = "patches/r" / key\nc = out / "result"\n'
                              'help = "results/<run-id>"\n')
    assert hand_built_paths(pkg) == ["agent/m.py:1", "agent/m.py:2"]


def test_result_paths_come_only_from_the_layout():
    found = hand_built_paths(ROOT / "agent")
    assert found == [], "name these through agent/results/layout.py (run_folder, job_paths):\n" + "\n".join(found)


# -- checks.json: one module reads and writes it (agent/results/checks_log.py), nothing else names it -------------
CHECKS_HOMES = {LAYOUT, "agent/results/checks_log.py"}  # its name, and its one schema, reader and writer


def checks_json_namers(top: Path, homes: set[str]) -> list[str]:
    """Each place outside `homes` that names checks.json: the layout's `CHECKS` (imported or used), or a path
    spelled out ("checks.json", "x/checks.json"; prose that mentions the file is not a path)."""
    found = []
    for path in sorted(top.rglob("*.py")):
        where = path.relative_to(top.parent).as_posix()
        if where in homes:
            continue
        found += [(where, n.lineno) for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if _names_checks(n)]
    return [f"{where}:{line}" for where, line in sorted(set(found))]


NAME_FIELD = {ast.alias: "name", ast.Name: "id", ast.Attribute: "attr"}  # where a node keeps the name it says


def _names_checks(node: ast.AST) -> bool:
    field = NAME_FIELD.get(type(node))
    if field is not None:
        return getattr(node, field) == "CHECKS"
    return (isinstance(node, ast.Constant) and isinstance(node.value, str) and not any(c.isspace() for c in node.value)
            and node.value.rstrip("/").rpartition("/")[2] == "checks.json")


def test_only_the_checks_log_names_checks_json():
    found = checks_json_namers(ROOT / "agent", CHECKS_HOMES)
    assert found == [], "read and write it through agent/results/checks_log.py:\n" + "\n".join(found)


def test_the_checks_json_finder_finds_the_name_and_a_spelled_path_and_spares_its_homes(tmp_path):
    pkg = tmp_path / "agent"
    (pkg / "results").mkdir(parents=True)
    (pkg / "results" / "layout.py").write_text('CHECKS = "checks.json"\n')
    (pkg / "results" / "checks_log.py").write_text('from agent.results.layout import CHECKS\np = d / CHECKS\n')
    (pkg / "m.py").write_text('from agent.results.layout import CHECKS\n'
                              'a = job / CHECKS\nb = read_json(run.dir / "checks.json")\nc = layout.CHECKS\n'
                              'd = "results/r/checks.json"\nhelp = "a job folder (its checks.json)"\n'
                              'e = "checks.jsonl"\n')
    assert checks_json_namers(pkg, {"agent/results/layout.py", "agent/results/checks_log.py"}) == [
        "agent/m.py:1", "agent/m.py:2", "agent/m.py:3", "agent/m.py:4", "agent/m.py:5"]


# -- one error hierarchy: agent/errors.py draws it, every error perfagent raises for the user derives from it -----
ERRORS = "agent/errors.py"
HIERARCHY = {"PerfagentError", "BadInput"}
BUILTIN_ERRORS = {"BaseException", "Exception", "ValueError", "RuntimeError", "OSError", "TypeError", "LookupError",
                  "KeyError", "KeyboardInterrupt"}
# Control flow that never reaches the user as an error, and util's own (util imports nothing of agent); each is
# named in agent/errors.py's docstring all the same.
OUTSIDE_THE_HIERARCHY = {"RunEnded", "Interrupted", "RoundLost", "ToolFailure", "Refused", "_BatchGone", "_BadBody",
                         "SealError"}


def error_classes(top: Path) -> list[tuple[str, str, set[str]]]:
    """(file, class, its bases' names) for each class of `top` that derives from a builtin exception or from the
    hierarchy directly."""
    found = []
    for path in sorted(top.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(b).rpartition(".")[2] for b in node.bases}
                if bases & (BUILTIN_ERRORS | HIERARCHY):
                    found.append((path.relative_to(top.parent).as_posix(), node.name, bases))
    return found


def stray_errors(top: Path, outside: set[str]) -> list[str]:
    """Each error class outside the hierarchy that is not one of `outside`, and each class the errors module's
    docstring does not name (the drawing stays whole): "file: Class: why"."""
    errors = top / "errors.py"
    drawing = ast.get_docstring(ast.parse(errors.read_text(encoding="utf-8"))) or "" if errors.exists() else ""
    found = []
    for where, name, bases in error_classes(top):
        if where == ERRORS:
            continue
        if not bases & HIERARCHY and name not in outside:
            found.append(f"{where}: {name}: derives from {', '.join(sorted(bases))}, not PerfagentError")
        if not re.search(rf"\b{re.escape(name)}\b", drawing):
            found.append(f"{where}: {name}: not in {ERRORS}'s drawing")
    return found


def test_every_error_is_in_the_one_hierarchy():
    found = stray_errors(ROOT / "agent", OUTSIDE_THE_HIERARCHY)
    assert found == [], ("derive it from agent.errors.BadInput (exit 2) or PerfagentError (exit 1) and draw it in "
                         "agent/errors.py's docstring:\n" + "\n".join(found))


def test_the_stray_error_finder_finds_a_loose_error_and_an_undrawn_one(tmp_path):
    pkg = tmp_path / "agent"
    (pkg / "run").mkdir(parents=True)
    (pkg / "errors.py").write_text('"""PerfagentError\n    BadInput\n        TaskError\nLoop"""\n'
                                   "class PerfagentError(Exception):\n    pass\n")
    (pkg / "task.py").write_text("class TaskError(errors.BadInput):\n    pass\n")
    (pkg / "run" / "m.py").write_text("class Loose(ValueError):\n    pass\nclass Loop(Exception):\n    pass\n"
                                      "class Fine(PerfagentError, RuntimeError):\n    pass\n"
                                      "class Sub(TaskError):\n    pass\n")
    assert stray_errors(pkg, {"Loop"}) == [
        "agent/run/m.py: Loose: derives from ValueError, not PerfagentError",
        "agent/run/m.py: Loose: not in agent/errors.py's drawing",
        "agent/run/m.py: Fine: not in agent/errors.py's drawing"]


# -- the command line imports package faces: `agent.<package>` (its __init__) or a top-level module, never deeper ----
def faces(top: Path) -> set[str]:
    """What the CLI may import: `top` itself, each package in it (its __init__.py, the face) and each top-level
    module."""
    return ({top.name} | {f"{top.name}.{p.stem}" for p in top.glob("*.py") if p.stem != "__init__"}
            | {f"{top.name}.{d.name}" for d in top.iterdir() if (d / "__init__.py").is_file()})


def deep_cli_imports(top: Path) -> list[str]:
    """Each import in a module of the CLI (at any depth: functions too) that names a module of `top` other than a
    face, as "file:line: module"; `from agent.review import load` names agent.review.load. The CLI's own modules
    import each other freely."""
    mods, allowed, cli = modules(top), faces(top), f"{top.name}.cli"
    found = []
    for path in sorted((top / "cli").rglob("*.py")):
        name, where = module_name(path, top), path.relative_to(top.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                named = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = imported_from(name, path, node)
                named = [base, *(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods)]
            else:
                continue
            found += [(where, node.lineno, m) for m in named
                      if inside(m, top.name) and m not in allowed and not inside(m, cli)]
    return [f"{where}:{line}: {m}" for where, line, m in sorted(found)]


def test_the_cli_imports_only_package_faces():
    found = deep_cli_imports(ROOT / "agent")
    assert found == [], ("import it from its package's face (`from agent.review import load_results`), re-exported "
                         "by that package's __init__.py (lazily, agent.util.lazy_names, if heavy):\n"
                         + "\n".join(found))


def test_the_face_finder_finds_a_deep_import_at_module_and_function_level(tmp_path):
    pkg = tmp_path / "agent"
    for sub in ("cli", "review", "batch"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    for path in ("__init__.py", "options.py", "review/load.py", "cli/batch.py"):
        (pkg / path).write_text("")
    (pkg / "cli" / "check.py").write_text(
        "import json\nfrom agent import __version__, options\nfrom agent.options import at_least\n"
        "from agent.review import load_results\nfrom agent.cli.batch import add\nfrom . import batch\n"
        "from agent.review.load import load_results\n"                         # line 7: deep, at module level
        "def f():\n    from agent.review import load\n"                      # line 9: a submodule through the face
        "    import agent.review.load\n    from ..review.load import x\n")  # lines 10, 11: absolute and relative
    (pkg / "batch" / "driver.py").write_text("from agent.review.load import load_results\n")  # not the CLI
    assert deep_cli_imports(pkg) == [f"agent/cli/check.py:{line}: agent.review.load" for line in (7, 9, 10, 11)]


def test_every_name_a_face_exports_is_there():
    """A lazy face's names (agent.util.lazy_names) are strings until used: each must resolve in its home."""
    import importlib

    missing = [f"{face}.{n}" for face in sorted(faces(ROOT / "agent") - {"agent.__main__", "agent.cli"})
               for n in getattr(importlib.import_module(face), "__all__", []) if not hasattr(sys.modules[face], n)]
    assert missing == []


def test_importing_the_cli_loads_none_of_the_faces_lazy_names():
    """The CLI's start-up: its faces load their heavy modules only when a command uses them."""
    heavy = ("agent.checks", "agent.review.load", "agent.results.tables", "agent.interchange.export",
             "agent.interchange.task_import", "agent.env.workspace", "agent.analyzers")
    code = f"import sys, agent.cli; print(*[m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.split() == []
