"""Where a run's files are, and what a job's folder name means.

`results/<run-id>/<job>/` holds a job's artifacts and `patches/<run-id>/<job>/` its diffs; `<job>`
is the task id for `perfagent run`, and `<task>/<model-slug>/s<k>` in a batch. Every reader and
writer names these paths through this module, and parses a job key with `split_key` only.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from agent.errors import BadInput

RESULTS, PATCHES = "results", "patches"  # under --out: each holds a folder per run id
REPORT, TRAJECTORY, CHECKS, JOB_LOG = "report.json", "trajectory.jsonl", "checks.json", "batch.log"
ARTIFACTS = (REPORT, TRAJECTORY, CHECKS, JOB_LOG)  # any of them makes a folder a job's
EMITTED, REJECTED = "model_patch.diff", "rejected.diff"
ASIDE = "speed_unknown.diff"  # a change proven safe whose speed the machine's noise left unknown: `check` it later
LEDGER, PLAN = "batch.jsonl", "batch.json"  # a batch's memory and its request, beside its jobs
# `check --predictions`: the patches its jobs grade, as they were read (predictions.jsonl before issue 46)
PREDICTIONS = "predictions.in.jsonl"
RUN_PREDICTIONS = "predictions.jsonl"  # what a batch produced, SWE-bench's form, written with its summary
RUNNING = ".running"  # in a job's folder, locked by the live process writing it
MAX_SLUG = 60


def model_slug(spec: str) -> str:
    """A folder name for a model spec: anything but [A-Za-z0-9._-] becomes "-", it starts with a letter or
    digit (a valid job name segment); long ones end in a hash."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", spec.strip()).lstrip("-._").rstrip("-.") or "model"
    if len(slug) > MAX_SLUG:
        slug = slug[: MAX_SLUG - 9].rstrip("-.") + "-" + hashlib.sha1(spec.encode()).hexdigest()[:8]
    return slug


def job_key(task: str, model: str, sample: int) -> str:
    """A batch job's key, which is also its folder: "<task>/<model-slug>/s<k>"."""
    return f"{task}/{model_slug(model)}/s{sample}"


@dataclass(frozen=True)
class JobKey:
    """A job key taken apart: `slug` is None for a single run's key (the task id alone)."""

    task: str
    slug: str | None
    sample: int


def split_key(key: str) -> JobKey:
    """The one parse of a job key: "<task>/<slug>/s<k>" is a batch job, anything else a single run."""
    parts = key.split("/")
    if len(parts) == 3 and parts[2][:1] == "s" and parts[2][1:].isdigit():
        return JobKey(parts[0], parts[1], int(parts[2][1:]))
    return JobKey(parts[0], None, 0)


def out_dir_of(run_dir: Path) -> Path:
    """The --out folder of `results/<run-id>`: ledger and plan paths are relative to it."""
    return Path(run_dir).parent.parent


def run_folder(out_dir: Path | str, run_id: str) -> Path:
    """`results/<run-id>` under --out: the run's jobs, ledger and plan."""
    return Path(out_dir) / RESULTS / run_id


def graded_predictions(run_dir: Path | str) -> Path:
    """The copy of the predictions a `check --predictions` run grades; a run made before the copy had a name of
    its own kept it as predictions.jsonl (a resume reads it there, and the batch copies it to its new name)."""
    path, legacy = Path(run_dir) / PREDICTIONS, Path(run_dir) / RUN_PREDICTIONS
    return path if path.is_file() or not legacy.is_file() else legacy


def job_paths(out_dir: Path | str, run_id: str, key: str) -> tuple[Path, Path]:
    """(results folder, patch folder) of a job."""
    return run_folder(out_dir, run_id) / key, Path(out_dir) / PATCHES / run_id / key


class JobInUse(BadInput):
    """Another live process is writing this job's folder."""


@contextmanager
def claim_job(folder: Path) -> Iterator[None]:
    """Hold `folder` (a job's results folder) while this process writes it: two runs given one run id
    would interleave one trajectory. The kernel lets go of a dead process's hold, so a killed run's
    folder can be written again."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / RUNNING, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise JobInUse(f"{folder} is being written by a live run (pid {holder}): give this one "
                           "another --run-id") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)


def job_running(folder: Path) -> bool:
    """Whether a live process holds the job's folder (`claim_job`)."""
    try:
        fd = os.open(Path(folder) / RUNNING, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def job_folders(run_dir: Path) -> list[str]:
    """The key of every folder under the run holding any job artifact: finds jobs whose report.json is gone."""
    found = {p.parent for a in ARTIFACTS for p in Path(run_dir).rglob(a)}
    return [d.relative_to(run_dir).as_posix() for d in found if d != run_dir]


def locate(path: Path) -> tuple[Path, str | None]:
    """(run folder, job key or None) for a run folder or a job folder, recognised by its artifacts."""
    path = Path(path).resolve()
    if not any((path / a).exists() for a in ARTIFACTS):
        return path, None
    for up in (path.parent, path.parent.parent, path.parent.parent.parent):
        if (up / LEDGER).is_file() or up.parent.name == RESULTS:
            return up, path.relative_to(up).as_posix()
    return path.parent, path.name
