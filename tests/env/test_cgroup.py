"""agent.env.cgroup: a sandbox's groups end every process inside, a fork loop included, and say
when they could not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agent.env import cgroup
from agent.env.sandbox import isolation, run_command

needs_cgroup = pytest.mark.skipif(not cgroup.available(), reason="no cgroup can be made on this machine")
# Double-forked away (setsid), a loop whose every generation forks its successor and exits every 2 ms:
# no pid of it lives long enough for a kill by pid.
LOOP = "import os, time\nwhile True:\n    time.sleep(0.002)\n    if os.fork():\n        os._exit(0)\n"
START = ("import os, sys\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
         f"        os.execv(sys.executable, [sys.executable, '-S', '-c', {LOOP!r}])\n    os._exit(0)\nos.wait()\n")


def _start_loop(group: cgroup.Cgroup) -> None:
    subprocess.run(group.wrap([sys.executable, "-S", "-c", START]), check=True, timeout=30)
    time.sleep(0.3)
    assert all(cgroup._members(d) for d in group.dirs), "the loop is not running inside"


def _own_groups(root: Path) -> list[Path]:
    """This process's command groups under root. os.walk, not glob: a group a sweep removes while we
    look is skipped, not an error."""
    prefix = f"perfagent-{os.getpid()}-"
    return [Path(top) / name for top, subs, _ in os.walk(root) for name in subs if name.startswith(prefix)]


def _v2_group() -> cgroup.Cgroup | None:
    """A bare cgroup v2 group under this process's own (no controller needed: cgroup.kill is in every one)."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    own = next((line.split(":", 2)[2] for line in lines if line.startswith("0::")), None)
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines() if line.split()[2] == "cgroup2"]
    if own is None or not mounts:
        return None
    group = Path(mounts[0]) / own.lstrip("/") / f"perfagent-test-{os.getpid()}"
    try:
        group.mkdir()
    except OSError:
        return None
    return cgroup.Cgroup({"unified": group})


@needs_cgroup
def test_one_frozen_round_ends_a_fork_loop():
    """Frozen, nothing inside forks between the listing and the kills: one round leaves no successor."""
    group = cgroup.Cgroup.create(1 << 30, 256)
    assert group is not None
    try:
        if "freezer" not in group.groups:
            pytest.skip("no v1 freezer here")
        _start_loop(group)
        group._kill_all(freeze=True)
        deadline = time.monotonic() + 2
        while any(cgroup._members(d) for d in group.dirs) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not any(cgroup._members(d) for d in group.dirs), "the loop's successor outlived the round"
    finally:
        group.remove()


@needs_cgroup
def test_a_fork_loop_is_ended_and_the_groups_removed():
    group = cgroup.Cgroup.create(1 << 30, 256)
    assert group is not None
    if (cgroup.ROOT / "freezer").is_dir() and "unified" not in group.groups:
        assert "freezer" in group.groups  # v1 with a freezer: the sandbox's groups include it
    _start_loop(group)
    assert group.remove() is True
    assert not any(d.exists() for d in group.dirs)


def test_a_fork_loop_is_ended_by_cgroup_kill_on_v2():
    group = _v2_group()
    if group is None:
        pytest.skip("no cgroup v2 group can be made here")
    assert (group.dirs[0] / "cgroup.kill").exists()
    _start_loop(group)
    assert group.remove() is True
    assert not group.dirs[0].exists()


def _stuck(group: cgroup.Cgroup, pid: int) -> Path:
    """Put `pid` in a frozen freezer group below `group`'s: the sweep's thaw does not reach a group
    frozen on its own, so a SIGKILL never lands and the group cannot empty (what a process stuck in
    the kernel looks like to the sweep)."""
    sub = group.groups["freezer"] / "stuck"
    sub.mkdir()
    (sub / "cgroup.procs").write_text(str(pid))
    (sub / "freezer.state").write_text("FROZEN")
    return sub


def _release(sub: Path) -> None:
    (sub / "freezer.state").write_text("THAWED")
    for _ in range(200):
        try:
            sub.rmdir()
            return
        except OSError:
            time.sleep(0.01)


@needs_cgroup
def test_a_group_that_cannot_empty_says_so():
    group = cgroup.Cgroup.create(1 << 30, 256)
    assert group is not None
    if "freezer" not in group.groups:
        group.remove()
        pytest.skip("no v1 freezer to hold a process here")
    proc = subprocess.Popen(group.wrap(["sleep", "60"]))
    time.sleep(0.2)
    sub = _stuck(group, proc.pid)
    try:
        assert group.end(timeout_s=0.5) is False
    finally:
        _release(sub)
    assert group.remove() is True
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL


@needs_cgroup
@pytest.mark.slow
@pytest.mark.skipif(isolation().mode != "bwrap", reason="needs bubblewrap")
def test_a_command_whose_group_cannot_empty_is_marked(tmp_path):
    """run_command's result says when its sweep could not end every process (the checks make it an error)."""
    if not (cgroup.ROOT / "freezer").is_dir():
        pytest.skip("no v1 freezer to hold a process here")
    held: list[Path] = []

    def hold() -> None:  # the command's `sleep`, once its group exists, into a frozen group below it
        for _ in range(500):
            for group in _own_groups(cgroup.ROOT / "freezer"):
                for pid in cgroup._members(group):
                    if Path(f"/proc/{pid}/comm").read_text().strip() == "sleep":
                        held.append(_stuck(cgroup.Cgroup({"freezer": group}), pid))
                        return
            time.sleep(0.01)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        res = run_command("sleep 60", tmp_path, timeout_s=2)
    finally:
        thread.join()
        for sub in held:
            _release(sub)
        for left in _own_groups(cgroup.ROOT):  # the marked command's, left behind
            cgroup.Cgroup({"left": left}).remove()
    assert held, "the command's process was never found in its group"
    assert res.timed_out and res.escaped and "did not empty" in res.escaped
    assert run_command("true", tmp_path, timeout_s=30).escaped is None
