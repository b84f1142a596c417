"""A cgroup per sandbox: memory (tmpfs and shared memory included) and the number of processes
bounded for root too.

setrlimit cannot do either for the commands we run: the kernel exempts root from RLIMIT_NPROC,
and RLIMIT_DATA does not count pages a command parks in /dev/shm or a tmpfs. A cgroup counts
both, for every process of the sandbox together. We make one under our own cgroup, in cgroup v1's
`pids` and `memory` hierarchies or in v2's unified one, and the sandbox's first process moves
itself in before it starts bubblewrap, so no process of the command is ever outside it. Where no
cgroup can be made (no delegation, read-only /sys), `create` returns None and
`agent.env.sandbox.isolation()` says the limits are per process only.
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
    """Where new groups go, per controller ("pids", "memory"): under this process's own cgroup."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    v1 = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(","):
            if name in ("pids", "memory") and (ROOT / name).is_dir():
                v1[name] = ROOT / name / path.lstrip("/")
        if controllers == "" and not v1:
            unified = ROOT / path.lstrip("/")
            wanted = {"pids", "memory"}
            try:
                if wanted <= set((unified / "cgroup.subtree_control").read_text().split()):
                    return {"unified": unified}
            except OSError:
                pass
    return v1 if set(v1) == {"pids", "memory"} else None


@dataclass
class Cgroup:
    """One sandbox's groups (one per v1 hierarchy, or one unified), made by `create`."""

    dirs: tuple[Path, ...]

    @classmethod
    def create(cls, memory_bytes: int, processes: int) -> Cgroup | None:
        """New groups with these caps, or None where this machine lets us make none."""
        parents = _own_groups()
        if not parents:
            return None
        name = f"perfagent-{os.getpid()}-{next(_names)}"
        made: list[Path] = []
        try:
            for kind, parent in parents.items():
                group = parent / name
                group.mkdir()
                made.append(group)
                if kind in ("pids", "unified"):
                    (group / "pids.max").write_text(str(processes))
                if kind == "memory":
                    (group / "memory.limit_in_bytes").write_text(str(memory_bytes))
                if kind == "unified":
                    (group / "memory.max").write_text(str(memory_bytes))
                    (group / "memory.swap.max").write_text("0")
        except OSError:
            cls(tuple(made)).remove()
            return None
        return cls(tuple(made))

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` started by a shell that first moves itself into every group (then execs), so
        everything the command starts is inside from its first instruction."""
        joins = " && ".join(f'echo $$ > "{group}/cgroup.procs"' for group in self.dirs)
        return ["/bin/sh", "-c", f'{joins} && exec "$@"', "perfagent-cgroup", *argv]

    def remove(self) -> None:
        """Kill whatever is still inside, then remove the groups (a group empties when its last
        process has been reaped, a moment after the kill)."""
        deadline = time.monotonic() + 5
        for group in self.dirs:
            while True:
                for pid in _members(group):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
                try:
                    group.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break  # left behind empty-to-be: the kernel frees it when its last process goes
                    time.sleep(0.01)


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
