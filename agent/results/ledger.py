"""results/<run-id>/batch.jsonl: one line per finished batch job, the batch's memory.

Each line is written with a single `write` on an O_APPEND descriptor and fsynced, after the
job's report.json exists, so a `kill -9` can lose the jobs in flight but never a finished one,
and never leaves half a line that a reader would trust (a torn last line is ignored).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from agent.results.layout import LEDGER
from agent.results.record import JobRecord
from agent.util.files import iter_jsonl


class Ledger:
    """results/<run-id>/batch.jsonl: append-only; for a key, the last line is its state."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LEDGER

    def append(self, record: JobRecord) -> None:
        if not record.finished_at:
            record = record.model_copy(update={"finished_at": time.time()})
        line = (record.model_dump_json() + "\n").encode("utf-8")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if os.write(fd, line) != len(line):  # one write: the line is whole or absent
                raise OSError(f"{self.path}: short write (disk full?)")
            os.fsync(fd)
        finally:
            os.close(fd)

    def lines(self) -> list[JobRecord]:
        out = []
        for obj in iter_jsonl(self.path):
            try:
                out.append(JobRecord.model_validate(obj))
            except ValueError:
                continue
        return out

    def latest(self) -> dict[str, JobRecord]:
        """The current state of every job that has a line."""
        return {r.key: r for r in self.lines()}
