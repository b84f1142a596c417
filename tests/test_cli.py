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
