"""results/<run-id>/batch.json: what a batch was asked to run, so `--resume` runs the rest the same way
and a view knows the jobs that have not started yet.

The task set, the models, K, every planned job's key and the RunOptions every job gets. The
batch (agent/batch/plan.py) extends and writes it; review reads it. Both go through this schema.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from agent.options import RunOptions
from agent.results.layout import PLAN
from agent.util.files import read_json, write_json

__all__ = ["PLAN", "Plan", "PlannedJob", "Subset", "read_plan"]


class PlannedJob(BaseModel):
    key: str  # "<task>/<model-slug>/s<k>"
    task: str
    model: str  # the spec as the user wrote it
    sample: int


class Subset(BaseModel):
    """Which tasks of the set a batch runs (`--filter`, `--tasks`, `--shuffle --seed`, `--slice`, applied
    in that order) and the ids they chose: `--resume` runs these, even if the set has changed since."""

    filter: str | None = None  # a regular expression a task id must contain a match of
    tasks: list[str] | None = None
    shuffle: bool = False
    seed: int | None = None
    slice: str | None = None  # "START:STOP", Python's slice of the (shuffled) list
    chosen: list[str] = []


class Plan(BaseModel):
    model_config = ConfigDict(extra="ignore")

    run_id: str = ""
    source: str | None = None  # the task-set file or folder, absolute
    models: list[str] = []
    samples: int = 0
    options: RunOptions = RunOptions()
    created: float = 0.0
    jobs: list[PlannedJob] = []
    subset: Subset | None = None  # None: every task of the set
    baseline: str | None = None  # the free contestant every other is measured against (rules), if any
    predictions: list[str] = []  # `check --predictions`: the files read, absolute; their records are in PREDICTIONS

    @classmethod
    def read(cls, path: Path) -> "Plan":
        """The plan at `path`; an empty one when it is missing or unreadable (runs made one by one)."""
        try:
            return cls.model_validate(read_json(path) or {})
        except ValidationError:
            return cls()

    def write(self, path: Path) -> None:
        write_json(path, self.model_dump(mode="json"))


def read_plan(run_dir: Path) -> Plan:
    """The plan of `results/<run-id>`; empty when there is none."""
    return Plan.read(Path(run_dir) / PLAN)
