"""Grade one patch against a task: `collect` the evidence in the task's checkouts, then `grade` it.

A Checker holds what outlives one evaluation (the checkouts, the task's interpreter, the warm
test processes), so an agent's many checks of one task pay for them once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from agent.checks.collect import Measuring, collect
from agent.checks.evaluation import Evaluation
from agent.checks.evidence import Evidence
from agent.checks.grade import grade
from agent.checks.perf import FULL, QUICK, SamplingPolicy
from agent.checks.sides import Sides
from agent.task import Task


class Checker:
    def __init__(self, task: Task, workdir: Path, *, lock_dir: Path | None = None,
                 log: Callable[[str], None] | None = None, seed: int | None = None,
                 full: SamplingPolicy = FULL, quick: SamplingPolicy = QUICK, warm: bool = True):
        self.task = task
        self.sides = Sides(task, Path(workdir), log=log or (lambda _: None), warm=warm)
        self.measuring = Measuring(lock_dir, seed, full, quick)

    def collect(self, patch: str, *, quick: bool = False, perf: bool = True, reference: bool = False,
                heal: bool = False) -> Evidence:
        """What the checks find on `patch` (a unified diff against base). Raises PatchError if it does not apply,
        TaskBroken if its tests fail and so do the task's on the unchanged base."""
        return collect(self.sides, patch, quick=quick, perf=perf, reference=reference, heal=heal,
                       measuring=self.measuring)

    def evaluate(self, patch: str, *, quick: bool = False, perf: bool = True, reference: bool = False) -> Evaluation:
        """Grade `patch`. Raises PatchError if it does not apply."""
        return grade(self.collect(patch, quick=quick, perf=perf, reference=reference), self.task.spec)

    def check_base(self) -> None:
        """Raises TaskBroken when the task's own tests or bench fail on its unchanged base."""
        self.sides.check_base()

    def bin_dir(self) -> Path | None:
        """The folder of the task's interpreter, first on the PATH of every command run for the task."""
        return self.sides.interpreter().bin_dir

    def close(self) -> None:
        """Stop the warm interpreters and remove every workspace this checker made."""
        self.sides.close()

    def __enter__(self) -> "Checker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
