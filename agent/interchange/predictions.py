"""A predictions file: patches an agent produced, in the form SWE-bench's and GSO's harnesses read.

One record per attempt: `instance_id` (a task id), `model_name_or_path` (the contestant) and
`model_patch` (a unified diff; empty or null when the agent produced none). Read in each published
form: JSON lines, one JSON list of records, or the `{instance_id: {...}}` dict that sb-cli and
mini-swe-agent write (preds.json). Fields beside those three are kept as they were. Several records
for one (instance, contestant), in one file or across files, are its samples, in order: GSO's
`opt_at_k.py --prediction_paths A B --k 2` reads K files the same way.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from agent.task import Task, TaskError, load_task_set
from agent.util.files import atomic_write
from agent.errors import BadInput

__all__ = ["GOLD", "Prediction", "PredictionsError", "by_attempt", "gold_predictions", "read_predictions",
           "write_predictions"]

GOLD = "gold"  # `--predictions gold`, as SWE-bench's `--predictions_path gold`: every task's reference patch


class PredictionsError(BadInput):
    """A predictions file that cannot be read: one line naming the file and the record."""


class Prediction(BaseModel):
    model_config = ConfigDict(extra="allow")

    instance_id: str
    model_name_or_path: str
    model_patch: str = ""

    @field_validator("model_patch", mode="before")
    @classmethod
    def _no_patch(cls, value: object) -> object:
        return "" if value is None else value  # SWE-bench's reader takes null for "no patch"

    @field_validator("instance_id", "model_name_or_path")
    @classmethod
    def _named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("is empty")
        return value.strip()


def read_predictions(paths: Sequence[Path | str]) -> list[Prediction]:
    """Every record of every file, in order; PredictionsError for a file or record that is not one."""
    out: list[Prediction] = []
    for path in map(Path, paths):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise PredictionsError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
        out += [_record(path, where, obj) for where, obj in _objects(path, text)]
    return out


def _objects(path: Path, text: str) -> Iterable[tuple[str, object]]:
    """(where, record) for each record of one file's text, whichever form it has."""
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, list):
        return ((f"item {n}", obj) for n, obj in enumerate(whole, 1))
    if isinstance(whole, dict) and "instance_id" not in whole:
        return ((f"key {key!r}", {"instance_id": key, **obj} if isinstance(obj, dict) else obj)
                for key, obj in whole.items())
    records = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append((f"line {n}", json.loads(line)))
        except ValueError as e:
            raise PredictionsError(f"{path}: line {n} is not JSON ({e})") from None
    if not records:
        raise PredictionsError(f"{path}: no predictions in it")
    return records


def _record(path: Path, where: str, obj: object) -> Prediction:
    if not isinstance(obj, dict):
        raise PredictionsError(f"{path}: {where} is not a JSON object")
    try:
        return Prediction.model_validate(obj)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "record"
        raise PredictionsError(f"{path}: {where}: {field}: {err['msg'].lower()}") from None


def gold_predictions(task_set: Path | str) -> tuple[list[Prediction], list[str]]:
    """Every valid task's reference patch in the set as the prediction of a contestant named "gold" (the check
    of a task set before anything else is graded on it), and the ids of the tasks that have none. An invalid
    task is the batch's to name, as it loads the set."""
    try:
        tasks = [t for t in load_task_set(task_set) if isinstance(t, Task)]
    except TaskError as e:
        raise PredictionsError(str(e)) from None
    out, missing = [], []
    for task in tasks:
        if task.reference_patch is None:
            missing.append(task.id)
            continue
        try:
            patch = task.reference_patch.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise PredictionsError(f"{task.reference_patch}: cannot read the reference patch of {task.id}: "
                                   f"{getattr(e, 'strerror', None) or e}") from None
        out.append(Prediction(instance_id=task.id, model_name_or_path=GOLD, model_patch=patch))
    if not out:
        raise PredictionsError("--predictions gold: no task of the set has a reference patch")
    return out, missing


def by_attempt(predictions: Iterable[Prediction]) -> dict[tuple[str, str], list[Prediction]]:
    """(instance_id, model_name_or_path) -> its records in order: record k is sample k."""
    out: dict[tuple[str, str], list[Prediction]] = defaultdict(list)
    for p in predictions:
        out[(p.instance_id, p.model_name_or_path)].append(p)
    return dict(out)


def write_predictions(path: Path, predictions: Iterable[Prediction]) -> None:
    """JSON lines, one record each, every field kept."""
    atomic_write(Path(path), "".join(p.model_dump_json() + "\n" for p in predictions))
