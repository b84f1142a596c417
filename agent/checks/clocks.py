"""The clock guard, harness side: its file beside the bench's hook, and what its rows say.

Every bench process (agent.checks.perf) runs our hook with a key of its own and PERFAGENT_CLOCKS=1,
so the guard (clock_guard.py, copied beside the hook) checks that the timing functions the bench
reads are the interpreter's own, and ends the process's output with a signed `end` row naming every
replacement it saw. A process without that row was not checked: where the baseline's processes
have it, a candidate's process that lacks it counts as unchecked, never as clean (grade's
`clocks_replaced`).
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

from pydantic import BaseModel

from agent.checks.correctness import install_hook
from agent.checks.records import rows_in

ENV = {"PERFAGENT_CLOCKS": "1"}
_ROW = "#clocks\t"


def install(folder: Path) -> Path:
    """The check hook in `folder` (agent.checks.correctness.install_hook) and the clock guard beside it,
    under a name no code under test can guess (the hook loads it by path)."""
    install_hook(folder)
    for old in folder.glob("_c*.py"):
        old.unlink()
    shutil.copyfile(Path(__file__).with_name("clock_guard.py"), folder / f"_c{secrets.token_hex(8)}.py")
    return folder


class ProcessClocks(BaseModel):
    """What one bench process's guard said: `ended` false when it wrote no valid end row."""

    started: bool = False
    ended: bool = False
    replaced: list[str] = []
    forged: int = 0  # guard-like rows whose tag does not verify


def read(output: str, key: str) -> ProcessClocks:
    """The guard's rows in one process's output, under that process's key; the first process that
    started (the bench itself, not one it forked) is the one that counts."""
    text = "\n".join(line for line in output.splitlines() if line.startswith(_ROW))
    rows = rows_in(text, key)
    out = ProcessClocks(forged=rows.forged)
    pid = None
    for row in rows.rows:
        parts = row.split("\t", 3)
        if len(parts) < 3:
            continue
        event, who = parts[1], parts[2]
        if event == "start" and pid is None:
            pid, out.started = who, True
        elif event == "end" and who == pid:
            out.ended = True
            detail = parts[3] if len(parts) > 3 else ""
            out.replaced += [r for r in detail.split("\x1f") if r and r not in out.replaced]
    return out


class ClockCheck(BaseModel):
    """Per side, the bench processes whose timing functions were checked from start to end, those
    that were not (no guard rows, or no end row), and every replacement seen."""

    checked: dict[str, int] = {}
    unchecked: dict[str, int] = {}
    replaced: dict[str, list[str]] = {}
    forged: int = 0

    def add(self, side: str, p: ProcessClocks) -> None:
        bucket = self.checked if p.ended else self.unchecked
        bucket[side] = bucket.get(side, 0) + 1
        seen = self.replaced.setdefault(side, []) if p.replaced else []
        seen += [r for r in p.replaced if r not in seen]
        self.forged += p.forged

    def merge(self, other: ClockCheck) -> None:
        for side, n in other.checked.items():
            self.checked[side] = self.checked.get(side, 0) + n
        for side, n in other.unchecked.items():
            self.unchecked[side] = self.unchecked.get(side, 0) + n
        for side, found in other.replaced.items():
            seen = self.replaced.setdefault(side, [])
            seen += [r for r in found if r not in seen]
        self.forged += other.forged


def findings(c: ClockCheck, side: str = "candidate") -> list[str]:
    """Why `side`'s timings cannot be taken as the interpreter's clock: what replaced a timing
    function, or processes the guard could not vouch for where the baseline's it could."""
    out = [f"the {side} bench's timing functions were replaced: {r}" for r in c.replaced.get(side, [])]
    missing = c.unchecked.get(side, 0)
    if missing and c.checked.get("baseline") and not c.unchecked.get("baseline"):
        total = missing + c.checked.get(side, 0)
        out.append(f"the timing functions were not checked to the end in {missing} of {total} {side} bench "
                   "processes (no clock-guard record: it ended in a way the guard could not see, or hid its "
                   "record), as they were in every baseline process: not measured")
    return out


class KeyFile:
    """`with KeyFile(key) as k:` a descriptor holding `key` for the hook of a cold bench process
    (PERFAGENT_KEY_FD, read and closed by the hook before any code under test); `k.env` names it and
    turns the guard on, `k.fds` is what the process must inherit."""

    def __init__(self, key: str):
        self.key = key
        self.fds: tuple[int, ...] = ()
        self.env: dict[str, str] = {}

    def __enter__(self) -> KeyFile:
        fd = os.memfd_create("perfagent-key", 0)  # inheritable: the bench's interpreter reads it at offset 0
        os.write(fd, self.key.encode())
        self.fds, self.env = (fd,), {**ENV, "PERFAGENT_KEY_FD": str(fd)}
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self.fds:
            os.close(fd)
