"""The CLI as a user meets it: real subprocesses, one-line errors, exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def perfagent(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "COLUMNS": "200", "HOME": str(cwd)})


def test_bundled_tasks_validate():
    res = perfagent("tasks", "tasks")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "cuda-graph-buffers" in res.stdout and "invalid" not in res.stdout


def test_broken_task_file_is_one_line_exit_2(tmp_path):
    (tmp_path / "bad.toml").write_text('id = "x"\nrepo = "."\nprompt = "p"\n[correctness]\ncommand = "true"\nturbo = 1\n')
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
