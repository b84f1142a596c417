"""What of a working tree is a candidate: its source changes, never what an agent merely left lying there.

An agent's working tree holds more than its change: a log it wrote, a cache or a build it made, the
`git diff > model_patch.diff` it did not need. Such a file is left out of the candidate (not staged,
so never graded and never emitted; it stays in the tree, for the agent to use) and listed with its
size and why, so the diff that is graded is the diff that is emitted, and both stay the size of a
source change. The limits on a candidate are here, in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath

from pydantic import BaseModel

from agent.results.layout import ASIDE, EMITTED, REJECTED

MAX_NEW_FILE_BYTES = 1_000_000  # a new file over this is no source change: left out
MAX_DIFF_BYTES = 5_000_000  # a whole diff over this is refused (`patchinfo.hygiene_problems`), never graded
OUTPUT_NAMES = frozenset({EMITTED, REJECTED, ASIDE})  # perfagent's own outputs, at any depth: never part of a change
NOTE_FILES = 20  # at most this many left-out files are named to an agent; report.json lists them all


def megabytes(n: int) -> str:
    """A byte limit as people say it: 5000000 -> "5 MB"."""
    return f"{n / 1e6:g} MB"


BINARY = "binary"
TOO_LARGE = f"new file over {megabytes(MAX_NEW_FILE_BYTES)}"
OUTPUT_NAME = "named like perfagent's output"


class LeftOut(BaseModel):
    """A file of the working tree that is not part of the candidate, and why."""

    path: str  # relative to the repo root
    size: int  # bytes: the working tree's file (base's, for a deleted one)
    reason: str  # BINARY | TOO_LARGE | OUTPUT_NAME

    def line(self) -> str:
        return f"{self.path} ({self.size:,} bytes): {self.reason}"


@dataclass(frozen=True)
class Candidate:
    """A working tree as graded and emitted: its diff against base, and the files left out of it."""

    diff: str
    left_out: list[LeftOut] = field(default_factory=list)


def untracked_reason(path: str, size: int) -> str | None:
    """Why an untracked file is never staged (cheap: its name and size), or None."""
    if PurePosixPath(path).name in OUTPUT_NAMES:
        return OUTPUT_NAME
    return TOO_LARGE if size > MAX_NEW_FILE_BYTES else None


def staged_reason(path: str, *, binary: bool, new: bool, size: int) -> str | None:
    """Why a staged change is taken back out of the candidate, or None: git's own binary detection, a new
    file over the limit (staged while it was small), or one of our outputs' names."""
    if PurePosixPath(path).name in OUTPUT_NAMES:
        return OUTPUT_NAME
    if binary:
        return BINARY
    return TOO_LARGE if new and size > MAX_NEW_FILE_BYTES else None


def left_out_note(left_out: list[LeftOut]) -> str:
    """What an agent reads beside a grading: the files of its tree that were not graded, and why ('' if none)."""
    if not left_out:
        return ""
    lines = [f"  {x.line()}" for x in left_out[:NOTE_FILES]]
    if len(left_out) > NOTE_FILES:
        lines.append(f"  ... and {len(left_out) - NOTE_FILES} more")
    return ("left out of your change (not graded, never emitted; they stay in the working tree): binary files, "
            f"new files over {megabytes(MAX_NEW_FILE_BYTES)}, files named {' or '.join(sorted(OUTPUT_NAMES))}\n"
            + "\n".join(lines))


def with_left_out(summary: str, left_out: list[LeftOut]) -> str:
    """A grading's summary, followed by what was left out of the change it graded."""
    note = left_out_note(left_out)
    return f"{summary}\n{note}" if note else summary
