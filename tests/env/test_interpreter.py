"""A task's own Python: a named interpreter, or a venv built once from `[setup] venv` and reused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.checks import Checker
from agent.env.interpreter import READY, InterpreterError, prepare
from agent.task import TaskError, load_task
from tests.helpers import make_repo

# The venv's commands put a module into it that only the venv has; the test and the bench import it.
MARK = ("python -c \"import site, pathlib; "
        "pathlib.Path(site.getsitepackages()[0], 'only_in_venv.py').write_text('WHO = 7')\"")
FILES = {
    "lib.py": "def value():\n    return 1\n",
    "tests/check.py": "import only_in_venv, sys\nassert only_in_venv.WHO == 7\nprint(sys.prefix)\n",
    "bench/run.py": ("import json, only_in_venv\n"
                     "print(json.dumps({'metric': 'ms', 'value': 1.0 + only_in_venv.WHO}))\n"),
}
PATCH = "--- a/lib.py\n+++ b/lib.py\n@@ -1,2 +1,2 @@\n def value():\n-    return 1\n+    return 2\n"


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("PERFAGENT_CACHE_DIR", str(cache))
    return cache


def write_task(tmp_path: Path, setup: str) -> Path:
    if not (tmp_path / "repo").exists():
        make_repo(tmp_path / "repo", FILES)
    task = tmp_path / "task.toml"
    task.write_text('id = "venv"\nrepo = "repo"\nprompt = "p"\nprotected = ["tests/**", "bench/**"]\n'
                    f'[setup]\n{setup}\n[correctness]\ncommand = "python tests/check.py"\npoison = false\n'
                    '[perf]\ncommand = "python bench/run.py"\nmetric = "ms"\n')
    return task


@pytest.mark.slow
def test_venv_is_built_once_and_used_by_tests_and_bench(tmp_path: Path, own_cache: Path) -> None:
    task = load_task(write_task(tmp_path, f"venv = [{json.dumps(MARK)}]"))
    said: list[str] = []
    with Checker(task, tmp_path / "work", log=said.append) as checker:
        ev = checker.evaluate(PATCH, quick=True)
        venv = checker.sides.interpreter().venv
    assert venv is not None and venv.parent == own_cache / "venvs" and (venv / READY).is_file()
    assert ev.correctness.plain.passed, ev.correctness.plain.output_tail
    assert str(venv) in ev.correctness.plain.output_tail, "the test ran with the venv's python"
    assert ev.perf.baseline_median == 8.0, "the bench ran with the venv's python"
    assert any("building the task's venv" in m for m in said)

    said.clear()
    again = prepare(task, log=said.append)
    assert again.venv == venv and not said, "the second run reuses the venv without a word"

    changed = load_task(write_task(tmp_path, f"venv = [{json.dumps(MARK + ' # v2')}]"))
    assert prepare(changed).venv != venv, "another command is another venv"


@pytest.mark.slow
def test_a_failing_venv_command_is_one_line_and_leaves_nothing(tmp_path: Path, own_cache: Path) -> None:
    task = load_task(write_task(tmp_path, 'venv = ["echo fetching; echo no such package >&2; exit 3"]'))
    with pytest.raises(InterpreterError) as e:
        prepare(task)
    msg = str(e.value)
    assert "\n" not in msg and "exit 3" in msg and "no such package" in msg
    assert not any(p.is_dir() for p in (own_cache / "venvs").iterdir()), "no half-built venv stays"

    (tmp_path / "p.diff").write_text(PATCH)
    res = subprocess.run([sys.executable, "-m", "agent", "check", str(task.file), "--patch", "p.diff"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode != 0 and "Traceback" not in res.stderr + res.stdout
    assert "exit 3" in res.stdout + res.stderr


def test_a_named_interpreter_is_what_python_means(tmp_path: Path) -> None:
    """`python = ...` without a venv: the task's commands get that interpreter as `python`."""
    make_repo(tmp_path / "repo", {**FILES, "tests/check.py": "import sys\nprint('PREFIX', sys.base_prefix)\n"})
    base = subprocess.run([sys.executable, "-c", "import sys; print(sys.base_prefix)"], capture_output=True,
                          text=True).stdout.strip()
    python = Path(base) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    task = load_task(write_task(tmp_path, f'python = "{python}"'))
    interp = prepare(task)
    assert interp.bin_dir is not None and Path(interp.python).resolve() == python.resolve()
    with Checker(task, tmp_path / "work") as checker:
        ev = checker.evaluate(PATCH, perf=False)
    assert f"PREFIX {base}" in ev.correctness.plain.output_tail


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="perfagent runs in no virtual environment here")
def test_python3_by_name_is_never_perfagents_own_venv(tmp_path: Path, monkeypatch) -> None:
    """With perfagent's venv active (first on PATH), `python = "python3"` is the machine's python3, said so."""
    own = Path(sys.prefix) / "bin"
    monkeypatch.setenv("PATH", f"{own}{os.pathsep}{os.environ.get('PATH', '')}")
    if shutil.which("python3", path=os.environ["PATH"].split(os.pathsep, 1)[1]) is None:
        pytest.skip("no python3 on PATH outside perfagent's venv")
    said: list[str] = []
    interp = prepare(load_task(write_task(tmp_path, 'python = "python3"')), log=said.append)
    chosen = Path(interp.python)
    assert own not in chosen.parents and own not in chosen.resolve().parents, chosen
    assert any(line.startswith("the task's python: python3 is /") for line in said), said


@pytest.mark.parametrize("setup, problem", [
    ('python = "no-such-python-9"', "interpreter not found: no-such-python-9"),
    ('python = "/bin/sh"', "does not run as a Python interpreter"),
])
def test_a_bad_interpreter_is_named(tmp_path: Path, setup: str, problem: str) -> None:
    task = load_task(write_task(tmp_path, setup))
    with pytest.raises(InterpreterError, match=problem):
        prepare(task)


def test_setup_needs_something(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="setup.*at least one of python, venv, command"):
        load_task(write_task(tmp_path, "timeout_s = 5"))


@pytest.mark.slow
def test_a_candidate_cannot_plant_code_in_the_shared_venv(tmp_path: Path) -> None:
    """Red team: the venv is cached and shared by every later run, so a hostile candidate's code tries
    to drop a .pth file (run at every interpreter start) into it while the tests run. The sandbox
    mounts the venv read-only: the write fails, and nothing lands there."""
    task = load_task(write_task(tmp_path, f"venv = [{json.dumps(MARK)}]"))
    venv = prepare(task).venv
    site = next(venv.glob("lib/python3*/site-packages"))
    planted = site / "zz_planted.pth"
    attack = (f"--- a/lib.py\n+++ b/lib.py\n@@ -1,2 +1,6 @@\n+try:\n"
              f"+    open({str(planted)!r}, 'w').write('import os')\n+except OSError as e:\n+    print('BLOCKED', e)\n"
              " def value():\n     return 1\n")
    make_repo(tmp_path / "repo2", {**FILES, "tests/check.py": "import lib, only_in_venv\n"})
    (tmp_path / "task.toml").write_text((tmp_path / "task.toml").read_text().replace('repo = "repo"', 'repo = "repo2"'))
    with Checker(load_task(tmp_path / "task.toml"), tmp_path / "work") as checker:
        ev = checker.evaluate(attack, perf=False)
    assert "BLOCKED" in ev.correctness.plain.output_tail, ev.correctness.plain.output_tail
    assert not planted.exists()


def test_a_long_build_step_says_how_it_goes(tmp_path: Path) -> None:
    """A first SGLang build is minutes of pip: the step's time and last line are told as it runs, and a
    step past its time limit is stopped."""
    from agent.env.interpreter import _step

    said: list[str] = []
    logfile = tmp_path / "build.log"
    with open(logfile, "w") as out:
        code = _step("echo Collecting torch; sleep 0.6; echo Installing; sleep 0.6", cwd=tmp_path, env=dict(os.environ),
                     out=out, logfile=logfile, timeout_s=30, log=said.append, tick_s=0.25)
    assert code == 0
    assert any(m.endswith(": Collecting torch") for m in said) and any(m.endswith(": Installing") for m in said)
    assert all(m.startswith("venv: ") and "s: " in m for m in said), said
    with open(logfile, "w") as out:
        start = time.monotonic()
        code = _step("sleep 30", cwd=tmp_path, env=dict(os.environ), out=out, logfile=logfile, timeout_s=0.5,
                     log=said.append, tick_s=0.25)
    assert code is None and time.monotonic() - start < 10
