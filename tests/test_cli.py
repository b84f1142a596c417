"""The CLI as a user meets it: real subprocesses, one-line errors, exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def perfagent(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "COLUMNS": "200", "HOME": str(cwd)}, check=False)


def test_bundled_tasks_validate():
    res = perfagent("tasks", "tasks")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "cuda-graph-buffers" in res.stdout and "invalid" not in res.stdout


def test_broken_task_file_is_one_line_exit_2(tmp_path):
    (tmp_path / "bad.toml").write_text('id = "x"\nrepo = "."\nprompt = "p"\n'
                                       '[correctness]\ncommand = "true"\nturbo = 1\n')
    res = perfagent("tasks", str(tmp_path / "bad.toml"), cwd=tmp_path)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr + res.stdout
    assert res.stderr.count("\n") == 1
    assert "bad.toml" in res.stderr and "turbo" in res.stderr and "unknown key" in res.stderr


def test_missing_path_is_one_line_exit_2(tmp_path):
    res = perfagent("tasks", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().count("\n") == 0 and "nowhere" in res.stderr


def test_every_option_of_every_command_has_help():
    import argparse

    from agent.cli import build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    missing = [f"{name} {a.option_strings[0] if a.option_strings else a.dest}"
               for name, cmd in sub.choices.items() for a in cmd._actions
               if not isinstance(a, argparse._HelpAction) and not (a.help or "").strip()]
    assert not missing, f"no help text: {', '.join(missing)}"
    assert set(sub.choices) >= {"run", "batch", "check", "review", "report", "compare", "tasks", "lint"}


def test_run_help_names_the_default_models():
    from agent.agents import EXTERNAL_AGENTS, make_agent
    from agent.models.base import DEFAULT_ANTHROPIC_MODEL

    res = perfagent("run", "--help")
    assert res.returncode == 0
    text = " ".join(res.stdout.split())
    assert "rules (the default" in text and f"default model {DEFAULT_ANTHROPIC_MODEL}" in text
    for agent in EXTERNAL_AGENTS:
        assert f"{agent} {make_agent(agent).model}" in text


def _copy_target_repo(dest: Path) -> Path:
    import shutil

    shutil.copytree(REPO / "target_repo", dest, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    return dest


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_lint_fix_without_a_task_writes_nothing_and_says_what_verifies_it(tmp_path):
    repo = _copy_target_repo(tmp_path / "repo")
    before = _snapshot(repo)
    res = perfagent("lint", str(repo), "--fix", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert _snapshot(repo) == before  # bench/ and tests/ included: byte-identical
    (line,) = [x for x in res.stderr.splitlines() if "skipped" in x]
    assert "zero-init rewrite(s)" in line and "--task" in line and "protected" in line


@pytest.mark.slow
def test_lint_task_errors_are_one_line(tmp_path):
    repo = _copy_target_repo(tmp_path / "repo")
    task = tmp_path / "task.toml"
    task.write_text(f'id = "t"\nrepo = "{repo}"\nprompt = "p"\n[correctness]\ncommand = "true"\n')
    elsewhere = tmp_path / "elsewhere.py"
    elsewhere.write_text("import torch\nx = torch.zeros(3)\n")
    for args, words in [((str(repo), "--task", str(task)), "--fix"),
                        ((str(elsewhere), "--fix", "--task", str(task)), "not inside the task's repo"),
                        ((str(repo), "--fix", "--task", str(tmp_path / "none.toml")), "none.toml")]:
        res = perfagent("lint", *args, cwd=tmp_path)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert res.stderr.strip().count("\n") == 0 and words in res.stderr, res.stderr


@pytest.mark.slow
def test_unknown_base_is_one_line_exit_2_wherever_the_task_is_used(tmp_path):
    """A task file is data; the base commit is checked by each command that uses the task, before it does anything."""
    (tmp_path / "plain").mkdir()
    task = tmp_path / "t.toml"
    task.write_text('id = "t"\nrepo = "plain"\nbase = "v1"\nprompt = "p"\n[correctness]\ncommand = "true"\n')
    (tmp_path / "p.diff").write_text("")
    for args in [("tasks", str(task)), ("run", str(task)), ("check", str(task), "--patch", "p.diff"),
                 ("batch", str(task)), ("lint", "plain", "--fix", "--task", str(task))]:
        res = perfagent(*args, cwd=tmp_path)
        assert res.returncode == 2 and "Traceback" not in res.stderr, (args, res.stderr)
        assert res.stderr.strip().count("\n") == 0, (args, res.stderr)
        assert "t.toml: base:" in res.stderr and "not a git repository" in res.stderr, (args, res.stderr)
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("args, flag", [
    (("batch", "tasks", "--workers", "0"), "--workers"),
    (("batch", "tasks", "--samples", "0"), "--samples"),
    (("batch", "tasks", "--job-timeout", "0"), "--job-timeout"),
    (("run", "tasks/cuda-graph-buffers.toml", "--max-turns", "-1"), "--max-turns"),
    (("run", "tasks/cuda-graph-buffers.toml", "--max-cost", "-0.5"), "--max-cost"),
    (("run", "tasks/cuda-graph-buffers.toml", "--rounds", "two"), "--rounds"),
])
def test_a_number_out_of_range_is_refused_before_anything_runs(args, flag):
    res = perfagent(*args)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert f"argument {flag}:" in res.stderr.strip().splitlines()[-1], res.stderr


def test_version():
    res = perfagent("--version")
    assert res.returncode == 0 and res.stdout.strip() == "perfagent 0.1.0"


def test_a_patch_that_is_no_diff_is_bad_input_not_no_change(tmp_path):
    (tmp_path / "notes.txt").write_text("Switched page tables to torch.empty; see the PR.\n")
    res = perfagent("check", "tasks/cuda-graph-buffers.toml", "--patch", str(tmp_path / "notes.txt"))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().count("\n") == 0 and "not a unified diff" in res.stderr, res.stderr


@pytest.mark.parametrize("models", ["rules,gtp-5", "rules,claude-codex:sonnet", "rules,openai"])
def test_every_model_of_a_batch_is_checked_before_anything_is_planned(tmp_path, models):
    res = perfagent("batch", "tasks", "--models", models, "--out", str(tmp_path))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().count("\n") == 0 and models.split(",")[1].split(":")[0] in res.stderr, res.stderr
    assert not (tmp_path / "results").exists(), "nothing is planned"


def test_names_from_the_command_line_are_printed_as_typed_never_as_emoji():
    """rich would print `prediction:x:` as "prediction❌"; an error must quote what the user typed."""
    res = perfagent("batch", "tasks/all.toml", "--models", "prediction:x")
    assert res.returncode == 2 and "prediction:x:" in res.stderr and "\u274c" not in res.stderr, res.stderr
