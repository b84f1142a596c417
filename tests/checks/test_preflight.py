"""The task on its unchanged base: a task whose own commands cannot pass is named as broken, never a change."""

from __future__ import annotations

import json
import os
import sys

import pytest
from helpers import make_patch, make_task

from agent.checks import Checker, TaskBroken
from agent.checks.preflight import _cache_file
from agent.cli import main
from agent.env.sandbox import isolation

IMPORT_ONLY = 'python -c \\"import pkg.work\\"'
SAFE = {"pkg/work.py": ("ITERS = 60_000", "ITERS = 59_999")}  # a line the import-only tests run


def tmp_python(tmp_path):
    """An interpreter under /tmp, as a venv made there has: the checks' sandbox has a /tmp of its own."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(os.path.realpath(sys.executable))
    return bin_dir / "python"


@pytest.mark.skipif(isolation().mode != "bwrap", reason="needs bubblewrap (a sandbox with a /tmp of its own)")
def test_an_interpreter_the_sandbox_hides_is_the_task_named_broken_not_the_change(tmp_path, capsys):
    python = tmp_python(tmp_path)
    task, src = make_task(tmp_path, correctness=f'{python} -c \\"import pkg.work\\"', poison=False)
    patch = tmp_path / "safe.diff"
    patch.write_text(make_patch(src, tmp_path, SAFE))
    code = main(["check", str(tmp_path / "task.toml"), "--patch", str(patch), "--no-perf"])
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress lines
    assert code == 1, err
    assert err.startswith("error: the task cannot be checked: its tests fail on the unchanged base"), err
    assert f"`{python} -c" in err and "exit 127 (command not found)" in err and f"names {python}" in err, err
    assert "[setup] python" in err

    # named as the task's interpreter, it is shown to the checks: the safe change passes
    fixed = tmp_path / "task.toml"
    fixed.write_text(fixed.read_text().replace(f'{python} -c', "python -c")
                     + f'\n[setup]\npython = "{python}"\n')
    code = main(["check", str(fixed), "--patch", str(patch), "--no-perf", "--json"])
    ev = json.loads(capsys.readouterr().out)
    assert code == 0 and ev["verdict"] == "pass", ev


def test_a_change_that_breaks_the_tests_is_still_its_own_fault(tmp_path):
    task, src = make_task(tmp_path, correctness=IMPORT_ONLY, poison=False)
    broken = make_patch(src, tmp_path, {"pkg/work.py": ("ITERS = 60_000", "ITERS = 60_000 +")})
    with Checker(task, tmp_path / "work", lock_dir=tmp_path / "locks") as c:
        ev = c.evaluate(broken, perf=False)
    assert ev.verdict == "fail" and "tests fail" in ev.reasons[0], ev.reasons


def test_tests_that_fail_on_the_base_fail_no_change_and_a_passing_base_is_remembered(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFAGENT_CACHE_DIR", str(tmp_path / "cache"))
    task, src = make_task(tmp_path, correctness='python -c \\"import pkg.missing\\"', poison=False)
    with Checker(task, tmp_path / "work", lock_dir=tmp_path / "locks") as c, pytest.raises(TaskBroken) as e:
        c.evaluate(make_patch(src, tmp_path, SAFE), perf=False)
    assert str(e.value).startswith("the task cannot be checked: its tests fail on the unchanged base (")
    assert "exit 1" in str(e.value) and "No module named 'pkg.missing'" in str(e.value)
    assert not list((tmp_path / "cache").glob("bases/*.json")), "a failing base is not remembered"

    good, src = make_task(tmp_path / "good", correctness=IMPORT_ONLY, poison=False)
    with Checker(good, tmp_path / "work2", lock_dir=tmp_path / "locks") as c:
        c.check_base()
        runs = c.sides.check_base()
    assert runs.plain.passed and runs.bench is not None and runs.bench.passed and runs.metric is not None
    assert _cache_file(runs.key).is_file()
    with Checker(good, tmp_path / "work3", lock_dir=tmp_path / "locks") as c:
        again = c.sides.check_base()
    assert again == runs  # read back, not run again


@pytest.mark.skipif(isolation().mode != "bwrap", reason="needs bubblewrap (a sandbox with a /tmp of its own)")
def test_a_run_on_a_broken_task_ends_before_the_agent_starts(tmp_path, capsys):
    """`rules` used to spend its turns bisecting edits that all "failed" with exit 127."""
    python = tmp_python(tmp_path)
    make_task(tmp_path, correctness=f'{python} -c \\"import pkg.work\\"', poison=False)
    code = main(["run", str(tmp_path / "task.toml"), "--model", "rules", "--out", str(tmp_path / "out"),
                 "--run-id", "r1", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["subtype"] == "error_during_execution" and report["num_turns"] == 0, report
    assert report["result"].startswith("the task cannot be checked: its tests fail on the unchanged base")
    assert "exit 127" in report["result"] and str(python) in report["result"]
    assert report["evaluation"]["verdict"] == "error"
    assert (tmp_path / "out" / "patches" / "r1" / "fixture" / "model_patch.diff").read_text() == ""
    assert not (tmp_path / "out" / "results" / "r1" / "fixture" / "trajectory.jsonl").exists()  # no turn taken


@pytest.mark.slow
def test_a_task_that_cannot_run_shows_the_error_that_explains_it(tmp_path, capsys):
    """Two test files import a module the task's Python lacks: pytest ends on "2 errors in 0.36s", which
    names no cause. The first error (the ModuleNotFoundError, and the file being collected) is what
    the run says, in its output and in report.json, and it is kept as a fact of the base's run."""
    from helpers import FIXTURE

    missing = "import torch\nimport only_in_a_venv\n\n\ndef test_x():\n    assert only_in_a_venv\n"
    files = {**FIXTURE, "tests/test_a.py": missing, "tests/test_b.py": missing}
    make_task(tmp_path, poison=False, files=files)
    code = main(["run", str(tmp_path / "task.toml"), "--model", "rules", "--out", str(tmp_path / "out"),
                 "--run-id", "r1", "--json"])
    out = capsys.readouterr()
    report = json.loads(out.out)
    why = "ModuleNotFoundError: No module named 'only_in_a_venv' (collecting tests/test_a.py)"
    assert code == 1 and report["evaluation"]["verdict"] == "error", report
    assert why in report["result"] and why in report["evaluation"]["error"], report["result"]
    assert "2 errors in" in report["result"], "the last line is still told, after the cause"
    assert report["result"].startswith("the task cannot be checked: its tests fail on the unchanged base")
    saved = json.loads((tmp_path / "out" / "results" / "r1" / "fixture" / "report.json").read_text())
    assert why in saved["evaluation"]["error"]

    patch = tmp_path / "safe.diff"
    patch.write_text(make_patch(tmp_path / "src", tmp_path, SAFE))
    code = main(["check", str(tmp_path / "task.toml"), "--patch", str(patch), "--no-perf"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 1 and err.startswith("error: the task cannot be checked") and why in err, err


def test_the_first_error_is_the_cause_and_the_summary_follows_it(tmp_path):
    """pytest's collection errors: the first exception line (pytest's `E   ` one), with the file it was
    collecting; a traceback of a script: its exception line. A run with none keeps its last line only."""
    from agent.checks.correctness import first_error
    from agent.checks.evaluation import CommandRun
    from agent.checks.preflight import failure

    out = ("==== ERRORS ====\n____ ERROR collecting tests/test_a.py ____\nImportError while importing test module "
           "'/w/tests/test_a.py'.\nTraceback:\n    import only_in_venv\nE   ModuleNotFoundError: No module named "
           "'only_in_venv'\n____ ERROR collecting tests/test_b.py ____\nE   ModuleNotFoundError: No module named 'x'\n"
           "ERROR tests/test_a.py\nERROR tests/test_b.py\n2 errors in 0.36s\n")
    assert first_error(out) == "ModuleNotFoundError: No module named 'only_in_venv' (collecting tests/test_a.py)"
    script = "Traceback (most recent call last):\n  File \"t.py\", line 1\n    raise ValueError('bad size: 3')\n" \
             "ValueError: bad size: 3\n"
    assert first_error(script) == "ValueError: bad size: 3"
    assert first_error("1 failed in 0.1s\n") is None
    run = CommandRun(name="plain", command="pytest", exit_code=2, passed=False, duration_s=0.4,
                     output_tail=out, first_error=first_error(out))
    said = failure(run, tmp_path, {})
    assert said.startswith("`pytest` exit 2: ModuleNotFoundError: No module named 'only_in_venv'"), said
    assert said.endswith("(last line: 2 errors in 0.36s)"), said
