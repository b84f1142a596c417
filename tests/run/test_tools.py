from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from agent.env.workspace import Workspace
from agent.run.tools import MAX_TOOL_OUTPUT, TOOL_NAMES, TOOL_SCHEMAS, Toolbox, ToolResult

BACKEND = Path(__file__).resolve().parents[2] / "target_repo/miniattn/flashattention_backend.py"


@pytest.fixture
def box(tmp_path, small_repo):
    ws = Workspace.create(small_repo.working_tree_dir, dest=tmp_path / "ws")
    (tmp_path / "secret.txt").write_text("top secret\n")
    os.symlink(tmp_path / "secret.txt", ws.root / "link.txt")
    os.symlink(tmp_path, ws.root / "linkdir")
    return Toolbox(ws, protected=["tests/**"], command_timeout_s=5)


def test_tool_names_and_schemas_are_stable():
    assert TOOL_NAMES == ["list_files", "read_file", "grep", "edit_file", "write_file", "run", "run_checks", "submit"]
    for t in TOOL_SCHEMAS:
        assert t["input_schema"]["type"] == "object" and t["description"]
        assert set(t["input_schema"]["required"]) <= set(t["input_schema"]["properties"])


@pytest.mark.parametrize("escape",
                         ["../../etc/passwd", "/etc/passwd", "link.txt", "linkdir/secret.txt", "~/x", ".git/config"])
def test_every_file_tool_refuses_escapes(box, escape):
    calls = {
        "list_files": {"path": escape},
        "read_file": {"path": escape},
        "grep": {"pattern": "secret", "path": escape},
        "edit_file": {"path": escape, "old": "top", "new": "x"},
        "write_file": {"path": escape, "content": "pwned"},
    }
    for name, args in calls.items():
        res = box.call(name, args)
        assert res.is_error, (name, escape, res.content)
        assert "top secret" not in res.content  # nothing read from outside
    assert (box.workspace.root.parent / "secret.txt").read_text() == "top secret\n"


def test_read_file_numbers_lines_and_ranges(box):
    res = box.call("read_file", {"path": "pkg/mod.py", "start": 4, "end": 5})
    assert not res.is_error
    assert res.content.splitlines() == ["4  def f():", "5      return torch.zeros(4)"]
    assert box.call("read_file", {"path": "pkg/mod.py", "start": "2", "end": 2}).content == "2  "
    assert box.call("read_file", {"path": "pkg/mod.py", "start": 99}).is_error
    assert box.call("read_file", {"path": "nope.py"}).is_error


def test_read_file_pages_by_whole_lines_and_says_where_to_go_on(box):
    """Nothing is cut from the middle: page after page reaches every line of a long file."""
    shutil.copy(BACKEND, box.workspace.root / "backend.py")
    lines = BACKEND.read_text().splitlines()
    seen: list[str] = []
    start, pages = 1, 0
    while True:
        page = box.call("read_file", {"path": "backend.py", "start": start}).content
        pages += 1
        assert len(page) <= MAX_TOOL_OUTPUT + 200
        body, _, last = page.rpartition("\n")
        more = re.fullmatch(rf"\[backend.py has {len(lines)} lines; shown {start}-(\d+): "
                            r"call read_file with start=(\d+) to continue\]", last)
        seen += (body if more else page).splitlines()
        if not more:
            break
        assert int(more.group(2)) == int(more.group(1)) + 1
        start = int(more.group(2))
    assert pages >= 2
    assert [re.fullmatch(r" *\d+  (.*)", ln).group(1) for ln in seen] == lines  # every line, whole, in order
    assert any("def init_cuda_graph_state" in ln for ln in seen)
    ranged = box.call("read_file", {"path": "backend.py", "start": 200, "end": 215}).content
    assert "def init_cuda_graph_state" in ranged and "continue" not in ranged


def test_list_and_grep(box):
    listing = box.call("list_files", {}).content.splitlines()
    assert "pkg/mod.py" in listing and "tests/test_mod.py" in listing
    assert not any(p.startswith(".git/") for p in listing)
    assert box.call("grep", {"pattern": r"torch\.zeros"}).content == "pkg/mod.py:5: return torch.zeros(4)"
    assert box.call("grep", {"pattern": "("}).is_error


def test_edit_file_needs_exact_unique_match(box):
    (box.workspace.root / "pkg/two.py").write_text("a = 1\na = 1\n")
    res = box.call("edit_file", {"path": "pkg/two.py", "old": "a = 1", "new": "b"})
    assert res.is_error and "matches 2 times" in res.content
    res = box.call("edit_file", {"path": "pkg/mod.py", "old": "torch.ones", "new": "x"})
    assert res.is_error and "matches 0 times" in res.content
    res = box.call("edit_file", {"path": "pkg/mod.py", "old": "torch.zeros(4)", "new": "torch.empty(4)"})
    assert not res.is_error and "torch.empty(4)" in (box.workspace.root / "pkg/mod.py").read_text()


def test_protected_paths_are_read_only_and_denials_recorded(box):
    assert not box.call("read_file", {"path": "tests/test_mod.py"}).is_error
    res = box.call("write_file", {"path": "tests/test_mod.py", "content": "def test_f(): pass\n"}, call_id="tu_1")
    assert res.is_error and "protected" in res.content
    res = box.call("edit_file", {"path": "tests/test_mod.py", "old": "assert", "new": "pass #"}, call_id="tu_2")
    assert res.is_error
    assert [d["tool_use_id"] for d in box.denials] == ["tu_1", "tu_2"]
    assert box.denials[0]["tool_name"] == "write_file"
    assert "assert f().sum() == 0" in (box.workspace.root / "tests/test_mod.py").read_text()


def test_write_file_creates_dirs(box):
    assert not box.call("write_file", {"path": "pkg/sub/new.py", "content": "x = 1\n"}).is_error
    assert (box.workspace.root / "pkg/sub/new.py").read_text() == "x = 1\n"


@pytest.mark.slow
def test_run_is_sandboxed_and_timed(box):
    res = box.call("run", {"command": "echo hi; exit 4"})
    assert "exit code 4" in res.content and "hi" in res.content
    res = box.call("run", {"command": "sleep 30", "timeout_s": 60})  # capped by the toolbox's limit
    assert "timed out" in res.content


def test_malformed_calls_become_tool_errors(box):
    assert "unknown tool" in box.call("rm_rf", {}).content
    assert box.call("read_file", "pkg/mod.py").is_error
    assert "missing required argument 'path'" in box.call("read_file", {}).content
    assert "unknown argument" in box.call("read_file", {"path": "x", "bogus": 1}).content
    assert "must be a string" in box.call("write_file", {"path": "x", "content": 5}).content
    assert box.call("run_checks", {}).is_error  # no checks wired in


def test_run_checks_and_submit(box):
    box.run_checks = lambda perf: ToolResult(f"all good (perf={perf})", data={"evaluation": {"verdict": "pass"}})
    assert box.call("run_checks", {}).content == "all good (perf=True)"
    assert box.call("run_checks", {"perf": False}).content == "all good (perf=False)"
    assert box.call("run_checks", {}).data == {"evaluation": {"verdict": "pass"}}
    assert box.call("run_checks", {"perf": "no"}).is_error
    assert box.call("submit", {"summary": "done"}).content == "submitted"
    assert box.submitted == "done"
