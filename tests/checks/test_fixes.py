"""`lint --fix --task`: zeros -> empty rewrites are written only when the task's checks pass them
(agent.checks.fixes), protected paths never, and the repo's tests still pass afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.analyzers import analyze_paths
from agent.checks import CheckError, Checker
from agent.checks.fixes import unified_diff, verify_rewrites
from agent.env.workspace import Workspace
from agent.task import load_task
from helpers import CONTRACT, FIXTURE, REPO, contract_task, make_repo, make_task

PREP = "import torch\n\n\ndef prep():\n    b = torch.zeros(3)\n    b.fill_(1.0)\n    return b\n"


def test_unified_diff_applies_to_base_even_without_a_final_newline(tmp_path):
    src = tmp_path / "src"
    make_repo(src, {"a.py": "x = 1\ny = 2", "b.py": "z = 3\n"})
    old = {"a.py": "x = 1\ny = 2", "b.py": "z = 3\n"}
    new = {"a.py": "x = 1\ny = 5", "b.py": "z = 3\n"}
    ws = Workspace.create(src, "HEAD", tmp_path / "ws")
    ws.apply_patch(unified_diff(old, new))
    assert (ws.root / "a.py").read_text() == "x = 1\ny = 5"


@pytest.mark.slow
def test_only_rewrites_the_checks_pass_are_kept_and_protected_paths_never(tmp_path):
    task, src = make_task(tmp_path, files={**FIXTURE, "bench/prep.py": PREP})
    findings = analyze_paths([src], root=src, exclude=())
    plan = verify_rewrites(task, findings, tmp_path / "work")
    decisions = {(d.finding.path, d.finding.function): d for d in plan.decisions}
    assert decisions["pkg/buffers.py", "staged"].kept
    half = decisions["pkg/buffers.py", "half_ones"]
    # named by the sanitizer's record of the read (half the elements never written), no one-by-one search
    assert not half.kept and half.reason.startswith("read before written: read by aten.sum.default")
    assert "tests/test_pkg.py::test_half_ones" in half.reason and "1000000 of 2000000 elements unwritten" in half.reason
    assert decisions["bench/prep.py", "prep"].reason == "protected path"
    assert list(plan.files) == ["pkg/buffers.py"] and plan.evaluations == 2
    new = plan.files["pkg/buffers.py"]
    assert "buf = torch.empty(src.shape" in new and "buf = torch.zeros(N)" in new


@pytest.mark.slow
def test_every_buffer_read_uninitialised_is_named_by_one_check_even_where_the_first_read_stops_the_test(tmp_path):
    """Both rewrites break the kernel stub's contract, and the stub raises at the first: the search's checks
    zero-fill a buffer once its read is recorded, so the first check names both (it took 2: one per buffer)."""
    task, src = contract_task(tmp_path)
    plan = verify_rewrites(task, analyze_paths([src / "pkg"], root=src), tmp_path / "work")
    assert [(d.finding.line, d.kept) for d in plan.decisions] == [(6, False), (7, False)]
    assert all(d.reason.startswith("read before written: read by Tensor.tolist") for d in plan.decisions)
    assert plan.evaluations == 1 and plan.files == {"pkg/contract.py": CONTRACT["pkg/contract.py"]}  # unchanged


def test_a_file_that_differs_from_the_base_is_refused(tmp_path):
    task, src = make_task(tmp_path)
    (src / "pkg/buffers.py").write_text((src / "pkg/buffers.py").read_text() + "\n# local edit\n")
    findings = analyze_paths([src / "pkg"], root=src)
    with pytest.raises(CheckError, match="pkg/buffers.py differs from the task's base"):
        verify_rewrites(task, findings, tmp_path / "work")


@pytest.mark.slow(seconds=60)
def test_lint_fix_task_on_target_repo_keeps_its_tests_passing_and_bench_untouched(tmp_path):
    files = {str(p.relative_to(REPO / "target_repo")): p.read_text()
             for p in (REPO / "target_repo").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    repo = tmp_path / "repo"
    make_repo(repo, files)
    (tmp_path / "task.toml").write_text(f'''id = "lint-fix"
repo = "{repo}"
prompt = "p"
protected = ["tests/**", "bench/**"]
[correctness]
command = "python -m pytest -q -x tests"
poison = true
''')
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "COLUMNS": "200"}
    res = subprocess.run([sys.executable, "-m", "agent.cli", "lint", str(repo / "miniattn/flashattention_backend.py"),
                          "--fix", "--task", str(tmp_path / "task.toml"), "--rule", "zero-init-buffer"],
                         cwd=tmp_path, capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    rejected = [line for line in res.stderr.splitlines() if line.startswith("rejected")]
    assert any(line.startswith("rejected miniattn/flashattention_backend.py:234:") and "draft_topk2-bs1" in line
               for line in rejected), res.stderr
    changed = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout
    assert changed and [line[3:] for line in changed.splitlines()] == ["miniattn/flashattention_backend.py"]
    diff = subprocess.run(["git", "diff"], cwd=repo, capture_output=True, text=True).stdout
    assert "torch.empty" in diff
    with Checker(load_task(tmp_path / "task.toml"), tmp_path / "grade") as checker:
        ev = checker.evaluate(diff, perf=False)
    assert ev.verdict == "pass", ev.reasons
