"""Where `check SET --predictions ...` finds the patches it grades: predictions files (any published form),
ISO-Bench run folders (each agent's own claims and cost kept beside), and the word gold (every task's own
reference patch, as SWE-bench's `--predictions_path gold`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agent.interchange.iso_bench import read_run_folder
from agent.interchange.predictions import GOLD, Prediction, gold_predictions, read_predictions
from agent.task import Task, TaskError, load_task_set


@dataclass(frozen=True)
class Sources:
    predictions: list[Prediction]
    files: list[str]  # what was read, resolved (gold by its word): the run records them to resume from
    no_reference: list[str]  # with gold: the tasks that have no reference patch, so are not graded


def read_sources(given: Sequence[str], task_set: str) -> Sources:
    """Every prediction `given` names, for the tasks of `task_set`; PredictionsError for one that cannot be read."""
    files = [str(Path(f).resolve()) for f in given if f != GOLD]
    predictions = read_predictions([f for f in files if not Path(f).is_dir()])
    predictions += iso_runs([Path(f) for f in files if Path(f).is_dir()], task_set)
    missing: list[str] = []
    if GOLD in given:
        gold, missing = gold_predictions(task_set)
        predictions, files = predictions + gold, files + [GOLD]
    return Sources(predictions, files, missing)


def iso_runs(folders: list[Path], task_set: str) -> list[Prediction]:
    """ISO-Bench run folders: each item folder's patch, agent and model, and its claims, named for the set's
    tasks (a shipped task answers for the ISO-Bench instance it covers)."""
    if not folders:
        return []
    try:
        ids: set[str] | None = {t.id for t in load_task_set(task_set) if isinstance(t, Task)}
    except (TaskError, OSError):
        ids = None  # the set's own error is said where the batch loads it
    return [p for folder in folders for p in read_run_folder(folder, ids)]
