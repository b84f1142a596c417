"""Run ids and job names are plain folder names: nothing a user (or a script) passes as one can make
perfagent write, or delete, anything outside --out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.batch.driver import BatchConfig, BatchError, load_tasks, run_batch
from agent.results.layout import model_slug
from agent.batch.executors import clear_job
from agent.run.names import NAME, BadName, check_job, check_run_id
from agent.run.graded import RunPaths
from helpers import make_repo

TASK = '''id = "t"
repo = "src"
prompt = "Make f cheaper."
[correctness]
command = "python -c 'import mod; assert mod.f() > 0'"
poison = false
[budget]
max_turns = 2
'''
BAD_RUN_IDS = ["..", ".", "../x", "../../x", "/abs", "a/b", "", ".hidden", "-x", "a b", "x\n", "a" * 129]
BAD_JOBS = ["..", "../escape", "a/../../b", "/abs/job", "a//b", "a/", "/", "", "a/./b", "t/.m/s0", "a\\b", "x\n"]


def test_names_are_checked_in_one_place():
    for ok in ("r1", "20250101-120000-abc123", "A.b_c-d", "a" * 128):
        assert check_run_id(ok) == ok and NAME.fullmatch(ok)
    for ok in ("tiny", "t1/anthropic-claude-sonnet-4-6/s0", "a/b"):
        assert check_job(ok) == ok
    for bad in BAD_RUN_IDS:
        with pytest.raises(BadName, match="invalid run id"):
            check_run_id(bad)
    for bad in BAD_JOBS:
        with pytest.raises(BadName, match="invalid job name"):
            check_job(bad)
    with pytest.raises(BadName):
        RunPaths.of(Path("out"), "../x", "t")
    with pytest.raises(BadName):
        RunPaths.of(Path("out"), "r", "../../t")


def test_model_slugs_are_valid_job_segments():
    for spec in ("_private:model", "-x", "...", "replay:../../t.jsonl", "anthropic:claude-sonnet-4-6"):
        assert NAME.fullmatch(model_slug(spec)), spec


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "home"  # everything perfagent may touch is under here; tmp_path/* outside it is "outside"
    make_repo(root / "src", {"mod.py": "COST = 10.0\n\n\ndef f():\n    return COST\n"})
    (root / "t.toml").write_text(TASK)
    (root / "replay.jsonl").write_text(json.dumps({"type": "response", "tool_calls": [
        {"id": "s", "name": "submit", "input": {"summary": "nothing"}}]}) + "\n")
    return root


def snapshot(tmp_path: Path) -> set[str]:
    return {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if ".git" not in p.parts}


def perfagent(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "HOME": str(root), "COLUMNS": "1000"}
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("flags", [["--run-id", "../../x"], ["--run-id", "../x"], ["--run-id", "/tmp/abs"],
                                   ["--job", "../escape"], ["--job", "../../../escape"], ["--job", "a//b"],
                                   ["--job", "/abs/job"]], ids=lambda f: " ".join(f))
@pytest.mark.slow
def test_run_refuses_a_name_that_leads_outside_out(tmp_path, project, flags):
    before = snapshot(tmp_path)
    res = perfagent(project, "run", "t.toml", "--model", f"replay:{project / 'replay.jsonl'}", "--out", "out", *flags)
    assert res.returncode == 2 and res.stderr.startswith("error: invalid ") and res.stderr.count("\n") == 1, res.stderr
    assert snapshot(tmp_path) == before  # nothing written, inside --out or outside it


@pytest.mark.parametrize("run_id", ["../x", "../../x", ".."])
def test_batch_refuses_a_run_id_that_leads_outside_out(tmp_path, project, run_id):
    before = snapshot(tmp_path)
    for extra in (["--resume"], []):
        res = perfagent(project, "batch", "t.toml", "--models", f"replay:{project / 'replay.jsonl'}",
                        "--run-id", run_id, "--out", "out", "--quiet", *extra)
        assert res.returncode == 2 and res.stderr.startswith("error: invalid run id"), res.stderr
        assert res.stderr.count("\n") == 1
    assert snapshot(tmp_path) == before
    with pytest.raises(BatchError, match="invalid run id"):
        run_batch(load_tasks(project / "t.toml"), ["rules"], 1, BatchConfig(run_id=run_id, out_dir=project / "out"))
    assert snapshot(tmp_path) == before


def test_clearing_a_job_never_deletes_outside_out(tmp_path):
    """A resume clears each job it re-runs; a results/<run-id> that is a symlink elsewhere must not lead it there."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    (elsewhere / "t/m/s0").mkdir(parents=True)
    (elsewhere / "t/m/s0/precious.txt").write_text("keep me")
    (out / "results").mkdir(parents=True)
    (out / "results/r").symlink_to(elsewhere, target_is_directory=True)
    (out / "patches/r/t/m/s0").mkdir(parents=True)
    clear_job(out, "r", "t/m/s0")
    assert (elsewhere / "t/m/s0/precious.txt").read_text() == "keep me"
    assert not (out / "patches/r/t/m/s0").exists()  # what is inside --out is still cleared
    for key in ("..", "../..", "t/../../.."):
        clear_job(out, "r", key)
        assert (elsewhere / "t/m/s0/precious.txt").is_file() and (out / "patches").is_dir()
