"""results/<run-id>/batch.json: what a batch was asked to run, so `--resume` runs the rest the same way.

The task set, the models, K, every planned job's key and the RunOptions every job gets. A
session that resumes with more samples or models extends it; nothing planned is ever dropped.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

from pydantic import BaseModel, ConfigDict, ValidationError

from agent.options import RunOptions
from agent.util.files import read_json, write_json

PLAN = "batch.json"


class PlannedJob(BaseModel):
    key: str  # "<task>/<model-slug>/s<k>"
    task: str
    model: str  # the spec as the user wrote it
    sample: int


class Plan(BaseModel):
    model_config = ConfigDict(extra="ignore")

    run_id: str = ""
    source: str | None = None  # the task-set file or folder, absolute
    models: list[str] = []
    samples: int = 0
    options: RunOptions = RunOptions()
    created: float = 0.0
    jobs: list[PlannedJob] = []

    @classmethod
    def read(cls, path: Path) -> "Plan":
        """The plan at `path`; an empty one when it is missing or unreadable (runs made one by one)."""
        try:
            return cls.model_validate(read_json(path) or {})
        except ValidationError:
            return cls()

    def extended(self, *, run_id: str, source: str | None, models: Sequence[str], samples: int,
                 options: RunOptions, jobs: Sequence[PlannedJob]) -> "Plan":
        """This plan with one batch session's request added: models, samples and jobs only grow."""
        entries = {j.key: j for j in self.jobs} | {j.key: j for j in jobs}
        return Plan(run_id=run_id, source=source or self.source, models=list(dict.fromkeys([*self.models, *models])),
                    samples=max(samples, self.samples), options=options, created=self.created or time.time(),
                    jobs=sorted(entries.values(), key=lambda j: j.key))

    def write(self, path: Path) -> None:
        write_json(path, self.model_dump(mode="json"))
