"""A cgroup per sandbox: memory (tmpfs and shared memory included) and the number of processes
bounded for root too.

setrlimit cannot do either for the commands we run: the kernel exempts root from RLIMIT_NPROC,
and RLIMIT_DATA does not count pages a command parks in /dev/shm or a tmpfs. A cgroup counts
both, for every process of the sandbox together. We make one under our own cgroup, in cgroup v1's
`pids` and `memory` hierarchies or in v2's unified one, and the sandbox's first process moves
itself in before it starts bubblewrap, so no process of the command is ever outside it. Where no
cgroup can be made (no delegation, read-only /sys), `create` returns None and
`agent.env.sandbox.isolation()` says the limits are per process only.

The group is also how a command's processes are ended (`end`): a process that forks and exits
every few milliseconds never keeps one pid long enough for a kill by pid, so the group is frozen
first (v1's `freezer`, v2's `cgroup.freeze`: nothing inside runs, so nothing forks), every member
is killed, then it is thawed so the kills land; v2's `cgroup.kill` does all of that in one write
where the kernel has it (5.14+). `end` says whether the group emptied: a sweep that could not
empty it is the caller's to report, never to pass over.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
_names = itertools.count()


@cache
def _own_groups() -> dict[str, Path] | None:
    """Where new groups go, per controller ("pids", "memory", and "freezer" where v1 has it mounted), or
    "unified" for v2: under this process's own cgroup."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    v1 = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(","):
            if name in ("pids", "memory", "freezer") and (ROOT / name).is_dir():
                v1[name] = ROOT / name / path.lstrip("/")
        if controllers == "" and not v1:
            unified = ROOT / path.lstrip("/")
            wanted = {"pids", "memory"}
            try:
                if wanted <= set((unified / "cgroup.subtree_control").read_text().split()):
                    return {"unified": unified}
            except OSError:
                pass
    return v1 if {"pids", "memory"} <= set(v1) else None


@dataclass
class Cgroup:
    """One sandbox's groups (one per v1 hierarchy, or one unified), made by `create`."""

    groups: dict[str, Path]  # "pids", "memory", "freezer" (v1) or "unified" (v2) -> its folder

    @property
    def dirs(self) -> tuple[Path, ...]:
        return tuple(self.groups.values())

    @classmethod
    def create(cls, memory_bytes: int, processes: int) -> Cgroup | None:
        """New groups with these caps, or None where this machine lets us make none."""
        parents = _own_groups()
        if not parents:
            return None
        name = f"perfagent-{os.getpid()}-{next(_names)}"
        made: dict[str, Path] = {}
        try:
            for kind, parent in parents.items():
                group = parent / name
                group.mkdir()
                made[kind] = group
                if kind in ("pids", "unified"):
                    (group / "pids.max").write_text(str(processes))
                if kind == "memory":
                    (group / "memory.limit_in_bytes").write_text(str(memory_bytes))
                if kind == "unified":
                    (group / "memory.max").write_text(str(memory_bytes))
                    (group / "memory.swap.max").write_text("0")
        except OSError:
            cls(made).remove()
            return None
        return cls(made)

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` started by a shell that first moves itself into every group (then execs), so
        everything the command starts is inside from its first instruction."""
        joins = " && ".join(f'echo $$ > "{group}/cgroup.procs"' for group in self.dirs)
        return ["/bin/sh", "-c", f'{joins} && exec "$@"', "perfagent-cgroup", *argv]

    def end(self, timeout_s: float = 5.0) -> bool:
        """Kill every process inside until no group lists a member or `timeout_s` has passed;
        whether they emptied. A round kills by pid; once a round finds a process the earlier ones
        did not (something forks), each round freezes the group first and thaws it after the kills.
        (A killed process leaves the list when it exits; its zombie is its parent's to reap, which
        the caller's own wait does for the first.) Freezing a group of exiting processes takes
        milliseconds, so a command that simply ended is not made to pay for it."""
        deadline = time.monotonic() + timeout_s
        seen: set[int] = set()
        while True:
            members = {pid for group in self.dirs for pid in _members(group)}
            if not members:
                return True
            if time.monotonic() > deadline:
                return False
            self._kill_all(freeze=bool(seen) and not members <= seen)
            seen |= members
            time.sleep(0.001)

    def _kill_all(self, freeze: bool) -> None:
        unified = self.groups.get("unified")
        if unified is not None and _write(unified / "cgroup.kill", "1"):
            return  # the kernel kills every member, and every process forked meanwhile
        frozen = freeze and self._freeze(True)
        for group in self.dirs:
            for pid in _members(group):
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if frozen:
            self._freeze(False)  # a frozen process dies of its SIGKILL only once thawed

    def _freeze(self, on: bool, wait_s: float = 1.0) -> bool:
        """Freeze (or thaw) the group, waiting up to `wait_s` for every member to stop; whether it has a freezer."""
        freezer, unified = self.groups.get("freezer"), self.groups.get("unified")
        if freezer is not None:
            state, wanted = freezer / "freezer.state", "FROZEN" if on else "THAWED"
            if not _write(state, wanted):
                return False
            until = time.monotonic() + wait_s
            while on and _read(state) != wanted and time.monotonic() < until:
                time.sleep(0.001)
            return True
        if unified is not None and _write(unified / "cgroup.freeze", "1" if on else "0"):
            until = time.monotonic() + wait_s
            while on and "frozen 1" not in _read(unified / "cgroup.events") and time.monotonic() < until:
                time.sleep(0.001)
            return True
        return False

    def remove(self) -> bool:
        """End every process inside (`end`), then remove the groups; whether they emptied. A group
        that did not is left behind: the kernel frees it when its last process goes."""
        emptied = self.end()
        for group in self.dirs:
            for _ in range(100):  # a group lists no member a moment before rmdir may take it
                try:
                    group.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if not emptied:
                        break
                    time.sleep(0.01)
        return emptied


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _write(path: Path, text: str) -> bool:
    try:
        path.write_text(text)
        return True
    except OSError:
        return False


def _members(group: Path) -> list[int]:
    try:
        return [int(pid) for pid in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


@cache
def available() -> bool:
    """Whether this machine lets us make the groups (probed once)."""
    group = Cgroup.create(1 << 30, 64)
    if group is None:
        return False
    group.remove()
    return True
