"""Linux process plumbing for batch jobs: die with the parent, adopt orphans, kill what is left.

Shared by the fork server and the job process, which must not import each other.
"""

from __future__ import annotations

import ctypes
import os
import signal
from pathlib import Path

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36


def die_with_parent(parent: int, sig: int = signal.SIGKILL) -> None:
    """Linux: send `sig` to this process when its parent dies; exit now if it already has."""
    try:
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, int(sig))
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(1)


def adopt_orphans() -> None:
    """Linux: orphaned descendants of this process become its children instead of init's."""
    try:
        ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1)
    except (OSError, AttributeError):
        pass


def child_pids() -> set[int]:
    """This process's children (zombies included), from /proc."""
    me, pids = os.getpid(), set()
    listed = list(Path(f"/proc/{me}/task").glob("*/children"))
    for f in listed:
        try:
            pids.update(int(p) for p in f.read_text().split())
        except (OSError, ValueError):
            pass
    if listed:
        return pids
    for stat in Path("/proc").glob("[0-9]*/stat"):  # a kernel without /proc/<pid>/task/<tid>/children
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == me:
                pids.add(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            pass
    return pids


def kill_tree(pid: int) -> None:
    """SIGKILL a child and, if it leads a process group (a command's own session), that whole group."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
