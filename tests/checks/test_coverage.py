"""Changed-line coverage recorded by our hook in the target's own interpreter, with no package there."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.checks import Checker
from agent.task import load_task
from tests.helpers import make_repo

# A pure-Python target: its "test" is a script, run by whatever `python` the task names.
FILES = {
    "calc.py": "def add(a, b):\n    return a + b\n\n\ndef unused(a):\n    return -a\n",
    "tests/check.py": (
        "import sys\nsys.path.insert(0, '.')\nfrom calc import add\n"
        "assert add(2, 3) == 5\nprint('1 passed')\n"),
    "tests/check.sh": "#!/bin/sh\ntest 1 -eq 1\n",
}
BOTH_CHANGED = """--- a/calc.py
+++ b/calc.py
@@ -1,6 +1,6 @@
 def add(a, b):
-    return a + b
+    return b + a
\x20
\x20
 def unused(a):
-    return -a
+    return 0 - a
"""


def interpreters() -> list[str]:
    """CPython 3.9+ interpreters on this machine besides ours (pyenv's too), one per version."""
    found = {}
    roots = [Path.home() / ".pyenv" / "versions"]
    candidates = [shutil.which(f"python3.{m}") for m in range(9, 15)]
    candidates += [str(p) for r in roots if r.is_dir() for p in sorted(r.glob("3.*/bin/python3"))]
    for c in filter(None, candidates):
        try:
            v = subprocess.run([c, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True,
                               text=True, timeout=20).stdout.split()
        except (OSError, subprocess.SubprocessError):
            continue
        if len(v) == 2 and (int(v[0]), int(v[1])) >= (3, 9):
            found.setdefault(tuple(map(int, v)), c)
    return [found[k] for k in sorted(found)]


def write_task(tmp_path: Path, python: str, command: str = "python tests/check.py") -> Path:
    make_repo(tmp_path / "repo", FILES)
    task = tmp_path / "task.toml"
    task.write_text(f'id = "calc"\nrepo = "repo"\nprompt = "p"\nprotected = ["tests/**"]\n'
                    f'[setup]\npython = "{python}"\n[correctness]\ncommand = "{command}"\npoison = false\n')
    return task


@pytest.mark.parametrize("python", interpreters() or [sys.executable])
def test_lines_recorded_without_coverage_in_the_target(tmp_path: Path, python: str) -> None:
    """The changed line a test runs is covered, the one it never runs is "not executed" (unverified),
    in every interpreter: sys.monitoring on 3.12+, a tracer before that, and no coverage package."""
    probe = subprocess.run([python, "-c", "import coverage"], capture_output=True)
    ours = Path(python).resolve() == Path(sys.executable).resolve()
    assert probe.returncode != 0 or ours, "the target has no coverage package"
    task = load_task(write_task(tmp_path, python))
    with Checker(task, tmp_path / "work") as checker:
        ev = checker.evaluate(BOTH_CHANGED, perf=False)
        env = checker.sides.environment()
    assert ev.correctness.plain.passed, ev.correctness.plain.output_tail
    assert ev.coverage.measured
    assert ev.coverage.covered == ["calc.py:2"] and ev.coverage.uncovered == ["calc.py:6"]
    assert ev.verdict == "unverified" and "calc.py:6" in ev.reasons[0]
    version = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True).stdout.strip()
    assert env.python == version, "the task's interpreter ran the checks"


def test_not_measured_is_not_not_executed(tmp_path: Path) -> None:
    """A test command that starts no Python records nothing: the verdict says "not measured" and
    why, and no line is called unexecuted."""
    task = load_task(write_task(tmp_path, sys.executable, command="sh tests/check.sh"))
    with Checker(task, tmp_path / "work") as checker:
        ev = checker.evaluate(BOTH_CHANGED, perf=False)
    assert ev.correctness.plain.passed
    assert not ev.coverage.measured and ev.coverage.uncovered == [] and ev.coverage.covered == []
    assert ev.coverage.changed == ["calc.py:2", "calc.py:6"]
    assert ev.verdict == "unverified"
    assert ev.reasons == [f"changed-line coverage not measured: {ev.coverage.note.split(': ', 1)[1]}"]
    assert "no Python process" in ev.reasons[0] and "no test executed" not in ev.reasons[0]


def checked_with(tmp_path: Path, check_py: str):
    """BOTH_CHANGED's evaluation where the tests are the script `check_py`; its run must pass."""
    make_repo(tmp_path / "repo", {**FILES, "tests/check.py": check_py})
    task = tmp_path / "task.toml"
    task.write_text('id = "calc"\nrepo = "repo"\nprompt = "p"\nprotected = ["tests/**"]\n'
                    '[correctness]\ncommand = "python tests/check.py"\npoison = false\n')
    with Checker(load_task(task), tmp_path / "work") as checker:
        ev = checker.evaluate(BOTH_CHANGED, perf=False)
    assert ev.correctness.plain.passed, ev.correctness.plain.output_tail
    return ev


@pytest.mark.parametrize("how", ["spec_from_file_location", "SourceFileLoader"])
def test_a_changed_file_loaded_by_path_is_measured(tmp_path: Path, how: str) -> None:
    """Test harnesses load heavy packages' files by path; before 3.12 the tracer starts as such a file is
    executed too, so its lines are measured: the one run is covered, the other not executed."""
    load = {"spec_from_file_location": "import importlib.util\n"
            "spec = importlib.util.spec_from_file_location('calc', 'calc.py')\n"
            "m = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(m)\n",
            "SourceFileLoader": "import importlib.machinery\n"
            "m = importlib.machinery.SourceFileLoader('calc', 'calc.py').load_module()\n"}[how]
    ev = checked_with(tmp_path, load + "assert m.add(2, 3) == 5\n")
    assert ev.coverage.measured and ev.coverage.covered == ["calc.py:2"] and ev.coverage.uncovered == ["calc.py:6"]


def test_a_changed_file_run_before_recording_could_start_is_not_measured(tmp_path: Path) -> None:
    """Before 3.12 a changed file's source exec'd into a module by hand, around the import system, is
    "not measured" with the reason, never "not executed"."""
    ev = checked_with(tmp_path, "import sys, types\nm = types.ModuleType('calc')\nm.__file__ = 'calc.py'\n"
                      "exec(compile(open('calc.py').read(), 'calc.py', 'exec'), m.__dict__)\nsys.modules['calc'] = m\n"
                      "assert m.add(2, 3) == 5\n")
    if sys.version_info >= (3, 12):
        assert ev.coverage.measured  # sys.monitoring sees every code object, however it was loaded
    else:
        assert not ev.coverage.measured and ev.coverage.uncovered == []
        assert "calc.py ran outside the import system" in ev.reasons[0]


FORGE = (
    "import os, sys\nsys.path.insert(0, '.')\nfrom calc import add\nassert add(2, 3) == 5\n"
    "for value in list(os.environ.values()):  # the records folder, found without its variable's name\n"
    "    if os.path.isfile(os.path.join(value, 'targets.json')):\n"
    "        with open(os.path.join(value, 'lines.1.forged'), 'w') as f:\n"
    "            f.write('#started python 3.11\\n' + os.path.abspath('calc.py') + '\\t6\\n')\n"
    "print('1 passed')\n")


@pytest.mark.parametrize("command", ["python tests/check.py", "sh -c 'python tests/check.py'"],
                         ids=["warm", "cold"])
def test_a_row_the_code_under_test_writes_claims_nothing(tmp_path: Path, command: str) -> None:
    """The test finds the records folder and claims `unused` ran; only rows signed with the run's key
    count, and the key reaches the hook of a forked child and of a cold command alike."""
    make_repo(tmp_path / "repo", {**FILES, "tests/check.py": FORGE})
    task = tmp_path / "task.toml"
    task.write_text(f'id = "calc"\nrepo = "repo"\nprompt = "p"\nprotected = ["tests/**"]\n'
                    f'[correctness]\ncommand = "{command}"\npoison = false\n')
    with Checker(load_task(task), tmp_path / "work") as checker:
        ev = checker.evaluate(BOTH_CHANGED, perf=False)
    assert ev.correctness.plain.passed, ev.correctness.plain.output_tail
    assert ev.coverage.covered == ["calc.py:2"] and ev.coverage.uncovered == ["calc.py:6"]
    assert "record row(s) refused" in ev.coverage.note
    assert ev.verdict == "unverified"


IN_FULL_BASE = "def add(a, b):\n    return a + b\n\n\ndef unused(a):\n    return -a\n\n\ndef gate(a):\n    return a\n"
IN_FULL = ("def add(a, b):\n    return b + a if a >= 0 else a + b\n\n\ndef unused(a): return 0 - a\n\n\n"
           "def gate(a):\n    if a > 100: a = a - 1\n    return a or 1\n")
IN_FULL_CHECK = ("import sys\nsys.path.insert(0, '.')\nfrom calc import add, gate\n"
                 "assert add(2, 3) == 5 and gate(3) == 3\nprint('1 passed')\n")


@pytest.mark.parametrize("python", interpreters() or [sys.executable])
def test_a_line_counts_only_when_it_ran_in_full(tmp_path: Path, python: str) -> None:
    """A one-line `def` never called and a one-line `if` whose body never runs are not covered; a
    conditional expression's arm and an `or`'s right operand no test took are named, line and arm. Before
    3.11 (no column positions) those lines are "not measured", never covered."""
    import difflib

    make_repo(tmp_path / "repo", {**FILES, "calc.py": IN_FULL_BASE, "tests/check.py": IN_FULL_CHECK})
    task = tmp_path / "task.toml"
    task.write_text(f'id = "calc"\nrepo = "repo"\nprompt = "p"\nprotected = ["tests/**"]\n'
                    f'[setup]\npython = "{python}"\n[correctness]\ncommand = "python tests/check.py"\npoison = false\n')
    patch = "".join(difflib.unified_diff(IN_FULL_BASE.splitlines(True), IN_FULL.splitlines(True),
                                         "a/calc.py", "b/calc.py"))
    with Checker(load_task(task), tmp_path / "work") as checker:
        ev = checker.evaluate(patch, perf=False)
    assert ev.correctness.plain.passed, ev.correctness.plain.output_tail
    cov = ev.coverage
    assert cov.measured and cov.changed == ["calc.py:2", "calc.py:5", "calc.py:9", "calc.py:10"]
    version = tuple(map(int, subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"],
                                            capture_output=True, text=True).stdout.split()))
    assert ev.verdict == "unverified"
    if version < (3, 11):
        assert cov.covered == [] and cov.uncovered == [] and cov.untaken == []
        assert cov.not_measured == ["calc.py:2", "calc.py:5", "calc.py:9", "calc.py:10"]
        assert any("not measured" in r and "calc.py:2" in r for r in ev.reasons), ev.reasons
        return
    assert cov.uncovered == ["calc.py:5", "calc.py:9"] and cov.covered == ["calc.py:2", "calc.py:10"]
    assert cov.untaken == ["calc.py:2 (the conditional expression's else arm)", "calc.py:10 (the `or`'s right operand)"]
    assert "calc.py:2 (the conditional expression's if arm)" in cov.taken
    assert "calc.py:10 (the `or` short-circuiting)" in cov.taken
    assert ev.reasons[0] == "changed lines no test executed: calc.py:5,9"
    assert "calc.py:2 (the conditional expression's else arm)" in ev.reasons[1]
