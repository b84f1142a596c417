"""Red team, file tools: escaping the workspace through links the agent makes with `run`.

The file tools (read_file, write_file, edit_file, grep) run in the harness, outside the
sandbox, so a link the agent plants in its workspace must not carry them outside. Played
in-process through the real Toolbox on a real workspace; `run` is the real sandboxed tool.

| attack                                                             | must hold                                 |
|--------------------------------------------------------------------|-------------------------------------------|
| `run`: `ln /outside/secret ws/hl.txt`; then read/grep/edit/write it | `ln` fails, or the tools refuse a file    |
|                                                                    |   with more than one link: the secret is  |
|                                                                    |   never read, the outside file unchanged  |
| `run`: symlinks to an outside file and folder; then `grep .`       | grep does not follow them                 |
| `run` detaches a loop swapping `d/` with a symlink to outside      | no write lands outside                    |
|   (renameat2 RENAME_EXCHANGE) while write_file writes `d/x.txt`     |                                           |
"""

from __future__ import annotations

import time

import pytest

from agent.run.tools import Toolbox
from agent.env.workspace import Workspace
from redteam.lab import OUTSIDE_SECRET, kill_pids, make_lab, pids_with, visible_root


@pytest.fixture
def box(tmp_path):
    """A Toolbox on a fresh workspace; the lab's outside folder is one the sandbox shows (read-only)."""
    with visible_root(tmp_path / "lab") as root:
        lab = make_lab(root, perf=False)
        ws = Workspace.create(lab.src, dest=tmp_path / "ws")
        yield lab, Toolbox(ws, protected=["tests/test_*.py"], command_timeout_s=30)


def test_hardlink_to_an_outside_file_is_neither_read_nor_written(box):
    """Attack: `run` hardlinks an outside file into the workspace; the file tools then read and write it."""
    lab, tools = box
    secret = lab.outside / "secret.txt"
    made = tools.call("run", {"command": f"ln {secret} hl.txt; echo \"ln exit=$?\""}).content
    link = tools.workspace.root / "hl.txt"
    if link.exists() and link.stat().st_nlink > 1:  # `ln` worked: the tools must refuse the file
        read = tools.call("read_file", {"path": "hl.txt"})
        assert OUTSIDE_SECRET not in read.content, f"read_file read an outside file through a hardlink ({made})"
        grep = tools.call("grep", {"pattern": "REDTEAM", "path": "."})
        assert OUTSIDE_SECRET not in grep.content, "grep read an outside file through a hardlink"
        tools.call("edit_file", {"path": "hl.txt", "old": OUTSIDE_SECRET, "new": "pwned"})
        tools.call("write_file", {"path": "hl.txt", "content": "pwned\n"})
    assert secret.read_text() == OUTSIDE_SECRET + "\n", "a file tool wrote an outside file through a hardlink"


def test_grep_does_not_follow_symlinks_out_of_the_workspace(box):
    """Attack: `run` plants symlinks to an outside file and folder; `grep .` follows them."""
    lab, tools = box
    tools.call("run", {"command": f"ln -s {lab.outside / 'secret.txt'} leak.txt; mkdir -p sub; "
                                  f"ln -s {lab.outside} sub/escape; ln -s {lab.outside} escape"})
    for path in (".", "sub"):
        res = tools.call("grep", {"pattern": "REDTEAM", "path": path})
        assert OUTSIDE_SECRET not in res.content, \
            f"grep {path!r} followed a symlink out of the workspace:\n{res.content}"


RACE = '''import ctypes, os, sys, time
# argv[1]: a token naming this process; argv[2]: the outside folder
libc = ctypes.CDLL(None, use_errno=True)
os.makedirs("d", exist_ok=True)
if not os.path.lexists("swap"):
    os.symlink(sys.argv[2], "swap")
end = time.time() + 8
while time.time() < end:
    libc.renameat2(-100, b"d", -100, b"swap", 2)  # RENAME_EXCHANGE: d is a folder, then a symlink, ...
'''


@pytest.mark.slow
def test_symlink_swap_race_lands_no_write_outside(box, tmp_path):
    """Attack: a detached loop swaps a workspace folder for a symlink to outside while write_file writes into it."""
    lab, tools = box
    target = tmp_path / "race-target"
    target.mkdir()
    token = f"redteam-race-{time.monotonic_ns()}"
    tools.call("write_file", {"path": "race.py", "content": RACE})
    tools.call("run", {"command": f"setsid -f python race.py {token} {target} </dev/null >/dev/null 2>&1; sleep 0.5"})
    writes, end = 0, time.monotonic() + 3
    try:
        while time.monotonic() < end and not (target / "x.txt").exists():
            tools.call("write_file", {"path": "d/x.txt", "content": f"raced {writes}\n"})
            writes += 1
    finally:
        kill_pids(pids_with(token))
    landed = sorted(p.name for p in target.iterdir())
    assert not landed, f"write_file landed outside the workspace ({landed}) within {writes} writes"
