from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agent.env.workspace import PatchError, Workspace, WorkspaceError, patch_paths
from helpers import make_repo


def status(path) -> str:
    return subprocess.run(["git", "status", "--porcelain"], cwd=path, capture_output=True, text=True).stdout


def test_clone_of_local_repo_is_shared_and_leaves_source_alone(tmp_path, small_repo):
    src = Path(small_repo.working_tree_dir)
    ws = Workspace.create(src, "HEAD", tmp_path / "ws")
    assert (ws.root / "pkg/mod.py").read_text() == (src / "pkg/mod.py").read_text()
    assert (ws.root / ".git/objects/info/alternates").exists()  # objects borrowed, not copied
    (ws.root / "pkg/mod.py").write_text("changed\n")
    (ws.root / "new.py").write_text("x = 1\n")
    ws.snapshot("c1")
    assert status(src) == "" and small_repo.head.commit.message == "init"
    assert "perfagent/run" not in [h.name for h in small_repo.heads]


def test_diff_changed_files_and_patch_roundtrip(tmp_path, small_repo):
    ws = Workspace.create(small_repo.working_tree_dir, dest=tmp_path / "ws")
    (ws.root / "pkg/mod.py").write_text((ws.root / "pkg/mod.py").read_text().replace("zeros", "empty"))
    (ws.root / "pkg/new.py").write_text("y = 2\n")
    assert ws.changed_files() == ["pkg/mod.py", "pkg/new.py"]
    diff = ws.diff()
    assert "-    return torch.zeros(4)" in diff and "+    return torch.empty(4)" in diff and "+y = 2" in diff
    # the diff applies to a fresh checkout of base
    other = Workspace.create(small_repo.working_tree_dir, dest=tmp_path / "ws2")
    other.apply_patch(diff)
    assert other.changed_files() == ["pkg/mod.py", "pkg/new.py"]
    assert other.diff() == diff


def test_reset_and_snapshot(tmp_path, small_repo):
    ws = Workspace.create(small_repo.working_tree_dir, dest=tmp_path / "ws")
    (ws.root / "README.md").write_text("v1\n")
    sha = ws.snapshot("candidate 1")
    (ws.root / "README.md").write_text("v2\n")
    (ws.root / "junk.txt").write_text("junk\n")
    ws.reset(sha)
    assert (ws.root / "README.md").read_text() == "v1\n" and not (ws.root / "junk.txt").exists()
    assert ws.changed_files() == ["README.md"]  # snapshots do not move the base
    ws.reset()
    assert ws.changed_files() == [] and ws.diff() == ""


def test_plain_folder_becomes_baseline_commit_without_touching_it(tmp_path):
    src = tmp_path / "plain"
    (src / "a").mkdir(parents=True)
    (src / "a/x.py").write_text("x = 1\n")
    (src / "a/__pycache__").mkdir()
    (src / "a/__pycache__/x.pyc").write_bytes(b"\0")
    ws = Workspace.create(src, dest=tmp_path / "ws")
    assert (ws.root / "a/x.py").read_text() == "x = 1\n"
    assert not (ws.root / "a/__pycache__").exists()
    assert not (src / ".git").exists()
    assert sorted(p.name for p in src.rglob("*")) == ["__pycache__", "a", "x.py", "x.pyc"]


def test_folder_inside_another_repo_is_treated_as_plain(tmp_path):
    outer = make_repo(tmp_path / "outer", {"sub/m.py": "m = 1\n", "top.py": "t = 1\n"})
    ws = Workspace.create(Path(outer.working_tree_dir) / "sub", dest=tmp_path / "ws")
    assert sorted(p.name for p in ws.root.iterdir() if p.name != ".git") == ["m.py"]


def test_base_commit_and_protected_restore(tmp_path, small_repo):
    first = small_repo.head.commit.hexsha
    (Path(small_repo.working_tree_dir) / "README.md").write_text("second\n")
    small_repo.index.add(["README.md"])
    small_repo.index.commit("second")
    ws = Workspace.create(small_repo.working_tree_dir, first, tmp_path / "ws")
    assert ws.base_commit == first and (ws.root / "README.md").read_text() == "hello\n"
    (ws.root / "tests/test_mod.py").write_text("def test_f():\n    pass\n")
    (ws.root / "tests/test_new.py").write_text("def test_g():\n    pass\n")
    (ws.root / "pkg/mod.py").write_text("# edited\n")
    assert ws.protected_changes(["tests/**"]) == ["tests/test_mod.py", "tests/test_new.py"]
    assert ws.restore_paths(["tests/**"]) == ["tests/test_mod.py", "tests/test_new.py"]
    assert ws.changed_files() == ["pkg/mod.py"]
    assert "assert f().sum() == 0" in (ws.root / "tests/test_mod.py").read_text()


def test_errors(tmp_path, small_repo):
    with pytest.raises(WorkspaceError, match="repo not found"):
        Workspace.create(tmp_path / "missing", dest=tmp_path / "ws")
    with pytest.raises(WorkspaceError, match="unknown base commit"):
        Workspace.create(small_repo.working_tree_dir, "nope", tmp_path / "ws2")
    assert not (tmp_path / "ws2").exists()
    ws = Workspace.create(small_repo.working_tree_dir, dest=tmp_path / "ws3")
    bad = "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1,1 +1,1 @@\n-not there\n+x\n"
    with pytest.raises(PatchError):
        ws.apply_patch(bad)
    assert ws.changed_files() == []


def test_clone_from_git_url(tmp_path, small_repo):
    ws = Workspace.create(f"file://{small_repo.working_tree_dir}", dest=tmp_path / "ws")
    assert (ws.root / "pkg/mod.py").exists()


def test_the_harness_git_runs_no_program_anyone_planted(tmp_path, small_repo, monkeypatch):
    """Hooks, fsmonitor, filters, textconv, external diff, a global config: none runs from our git,
    even with the workspace's .git writable (as it is when no sandbox is available)."""
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.sh"
    evil.write_text(f"#!/bin/sh\necho \"$0 $*\" >> {marker}\ncat\n")
    evil.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(f"[core]\n\thooksPath = {tmp_path}/hooks\n\tfsmonitor = {evil}\n"
                                     f"[diff]\n\texternal = {evil}\n")
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "hooks").mkdir()
    for hook in ("pre-commit", "post-commit", "post-checkout", "reference-transaction"):
        (tmp_path / "hooks" / hook).write_text(evil.read_text())
        (tmp_path / "hooks" / hook).chmod(0o755)
    ws = Workspace.create(small_repo.working_tree_dir, dest=tmp_path / "ws")
    git_dir = ws.root / ".git"
    with open(git_dir / "config", "a") as f:
        f.write(f"[core]\n\tfsmonitor = {evil}\n\thooksPath = {tmp_path}/hooks\n"
                f"[filter \"evil\"]\n\tclean = {evil}\n\tsmudge = {evil}\n\trequired = true\n"
                f"[diff \"evil\"]\n\ttextconv = {evil}\n\tcommand = {evil}\n")
    (git_dir / "hooks").mkdir(exist_ok=True)
    (git_dir / "hooks" / "pre-commit").write_text(evil.read_text())
    (git_dir / "hooks" / "pre-commit").chmod(0o755)
    (ws.root / ".gitattributes").write_text("* filter=evil diff=evil\n")
    (ws.root / "pkg/mod.py").write_text("changed\n")

    assert "+changed" in ws.diff()
    ws.changed_files()
    sha = ws.snapshot("c")
    ws.restore_paths(["pkg/**"])
    ws.reset(sha)
    assert not marker.exists(), marker.read_text()


# -- what a candidate holds: source changes only ------------------------------------------------------
def junk(root: Path) -> None:
    """What an agent leaves beside its change: a 2 MB log, a small binary, our outputs' names."""
    (root / "logs").mkdir()
    (root / "logs/run.log").write_text("step\n" * 400_000)  # 2,000,000 bytes
    (root / "cache.bin").write_bytes(b"\x00\x01\x02 not text")
    (root / "model_patch.diff").write_text("")  # `git diff HEAD~1 > model_patch.diff` after a failed commit
    (root / "sub").mkdir()
    (root / "sub/rejected.diff").write_text("diff --git a/x b/x\n")


def test_the_candidate_holds_the_source_edit_alone_and_lists_what_it_left_out(tmp_path, small_repo):
    ws = Workspace.create(small_repo.working_tree_dir, dest=tmp_path / "ws")
    (ws.root / "pkg/mod.py").write_text((ws.root / "pkg/mod.py").read_text().replace("zeros", "empty"))
    junk(ws.root)

    cand = ws.candidate()
    assert [(x.path, x.size, x.reason) for x in cand.left_out] == [
        ("cache.bin", 12, "binary"),
        ("logs/run.log", 2_000_000, "new file over 1 MB"),
        ("model_patch.diff", 0, "named like perfagent's output"),
        ("sub/rejected.diff", 19, "named like perfagent's output"),
    ]
    assert patch_paths(cand.diff) == ["pkg/mod.py"] and "+    return torch.empty(4)" in cand.diff
    assert ws.diff() == cand.diff  # the graded diff, byte for byte what is emitted
    assert (ws.root / "logs/run.log").stat().st_size == 2_000_000 and (ws.root / "cache.bin").exists()  # still there
    # the diff reproduces the source edit on a fresh checkout, and nothing else
    other = Workspace.create(small_repo.working_tree_dir, dest=tmp_path / "ws2")
    other.apply_patch(cand.diff)
    assert other.changed_files() == ["pkg/mod.py"] and other.diff() == cand.diff


def test_a_binary_change_to_a_tracked_file_and_a_new_file_that_grew_are_left_out(tmp_path, small_repo):
    ws = Workspace.create(small_repo.working_tree_dir, dest=tmp_path / "ws")
    (ws.root / "README.md").write_bytes(b"hello\x00\xff\n")  # tracked, now binary
    (ws.root / "pkg/new.py").write_text("y = 2\n")
    (ws.root / "notes.txt").write_text("small\n")
    assert patch_paths(ws.diff()) == ["notes.txt", "pkg/new.py"]  # notes.txt staged while small...
    (ws.root / "notes.txt").write_text("x" * 1_500_000)  # ...then grew past the limit
    cand = ws.candidate()
    assert [(x.path, x.reason) for x in cand.left_out] == [("README.md", "binary"), ("notes.txt", "new file over 1 MB")]
    assert patch_paths(cand.diff) == ["pkg/new.py"] and "GIT binary patch" not in cand.diff
    assert (ws.root / "README.md").read_bytes() == b"hello\x00\xff\n"  # the working tree keeps it
    (ws.root / "README.md").write_text("hello again\n")  # text again: part of the candidate again
    assert patch_paths(ws.diff()) == ["README.md", "pkg/new.py"]


def test_only_our_outputs_names_are_left_out_not_files_like_them(tmp_path, small_repo):
    ws = Workspace.create(small_repo.working_tree_dir, dest=tmp_path / "ws")
    for name in ("model_patch.diff.py", "my_rejected.diff", "a b*[x].txt"):
        (ws.root / name).write_text("ok\n")
    (ws.root / "deep/er").mkdir(parents=True)
    (ws.root / "deep/er/model_patch.diff").write_text("x\n")
    cand = ws.candidate()
    assert [x.path for x in cand.left_out] == ["deep/er/model_patch.diff"]
    assert patch_paths(cand.diff) == ["a b*[x].txt", "model_patch.diff.py", "my_rejected.diff"]
