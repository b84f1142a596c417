"""`perfagent batch`: a task set x models x samples, run in parallel, resumable, summarised.

A batch is a plan (results/<run-id>/batch.json: every job's key), a ledger (batch.jsonl:
one line per finished job) and the jobs' own folders. Resuming = running the planned jobs
that have no `done` line. Failed jobs (no report, or a provider's API failed mid-run) are
retried on resume, since their cause is usually transient; a done job (any job that wrote a
report, whatever the agent achieved) is never run twice, and a skipped one gets no second
line unless it can now run.

Job processes: executors.py (local pool, Ray), forkserver.py (warm forks) and job.py (one
job); how a session grows the plan: plan.py. What the batch leaves (layout, ledger, plan
schema, records, summary, tables) and how it is read back: agent/results/.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from rich.console import Console

from agent.agents import PREDICTION
from agent.batch.executors import Executor, ExecutorError, JobSpec, LaunchConfig, LocalExecutor, clear_job
from agent.batch.plan import extended
from agent.batch.progress import BatchProgress
from agent.env.workspace import checked_bases
from agent.options import RunOptions
from agent.results.layout import PLAN, PREDICTIONS, job_key, job_paths, model_slug, run_folder
from agent.interchange.export import write_run_predictions
from agent.results.ledger import Ledger
from agent.results.load import summarize_run
from agent.results.plan import PlannedJob, Subset, read_plan
from agent.interchange.predictions import Prediction, by_attempt, write_predictions
from agent.results.record import JobRecord
from agent.results.summary import BatchSummary
from agent.results.tables import write_summary
from agent.run.names import BadName, check_job, check_run_id
from agent.task import Task, TaskError, load_task_set
from agent.util.seal import WHY, load_key, read_mac, seal_of
from agent.errors import BadInput

__all__ = ["BatchConfig", "BatchError", "BatchOutcome", "BatchSummary", "JobRecord", "JobSpec", "expand_jobs",
           "model_slug", "run_batch", "summarize_run"]

class BatchError(BadInput):
    """A batch that cannot start (bad models, a run id in use, no Ray): one line for the user."""


def model_arg(spec: str, cwd: Path) -> str:
    """The spec a job process gets: a replay file made absolute, so any worker's cwd finds it."""
    provider, sep, name = spec.strip().partition(":")
    if provider == "replay" and sep and name:
        return f"replay:{(cwd / Path(name).expanduser()).resolve()}"
    return spec.strip()


def expand_jobs(tasks: Sequence[Task], models: Sequence[str], samples: int, *, cwd: Path,
                job_timeout_s: float | None = None) -> list[JobSpec]:
    """Every (task, model, sample), sample-major so an early stop still covers every task and model."""
    if samples < 1:
        raise BatchError("--samples must be at least 1")
    if not models:
        raise BatchError("no models given: use --models rules,replay:<file>,...")
    _distinct_folders(models)
    ids: dict[str, Path] = {}
    for t in tasks:
        if ids.setdefault(t.id, t.file) != t.file:
            raise BatchError(f"two tasks have the id {t.id!r}: {ids[t.id]} and {t.file}")
        try:
            check_job(t.id)  # the first segment of its jobs' names (a task id may be longer than a name)
        except BadName as e:
            raise BatchError(f"{t.file}: {e}") from None
    return [JobSpec(key=job_key(t.id, m, k), task=t.id, task_file=str(t.file), model=m,
                    model_arg=model_arg(m, cwd), sample=k, requires_gpu=t.spec.requires_gpu,
                    has_reference=t.reference_patch is not None,
                    timeout_s=job_timeout_s or 2 * t.spec.budget.timeout_s + 1800)
            for k in range(samples) for t in tasks for m in dict.fromkeys(models)]


def _distinct_folders(models: Sequence[str]) -> None:
    slugs: dict[str, str] = {}
    for m in models:
        other = slugs.setdefault(model_slug(m), m)
        if other != m:
            raise BatchError(f"models {other!r} and {m!r} would share the folder {model_slug(m)!r}")


def prediction_jobs(tasks: Sequence[Task], predictions: Sequence[Prediction], *, left_out: frozenset[str] = frozenset(),
                    job_timeout_s: float | None = None) -> list[JobSpec]:
    """A job per prediction (record k of an (instance, contestant) is its sample k) on the task whose id is
    its instance_id; one with no such task is planned as skipped; one for a task `left_out` of the subset,
    not at all."""
    by_id = {t.id: t for t in tasks}
    attempts = by_attempt(predictions)
    _distinct_folders(list(dict.fromkeys(f"{PREDICTION}:{name}" for _, name in attempts)))
    jobs = []
    for (instance, name), records in attempts.items():
        spec, task = f"{PREDICTION}:{name}", by_id.get(instance)
        if task is None and instance in left_out:
            continue
        for k in range(len(records)):
            if task is None:
                jobs.append(JobSpec(key=job_key(model_slug(instance), spec, k), task=instance, task_file="",
                                    model=spec, model_arg=spec, sample=k,
                                    skip_reason=f"no task has the id {instance!r} in the set"))
            else:
                jobs.append(JobSpec(key=job_key(task.id, spec, k), task=task.id, task_file=str(task.file),
                                    model=spec, model_arg=spec, sample=k, requires_gpu=task.spec.requires_gpu,
                                    has_reference=task.reference_patch is not None,
                                    timeout_s=job_timeout_s or 2 * task.spec.budget.timeout_s + 1800))
    return sorted(jobs, key=lambda j: j.sample)


@dataclass
class BatchConfig:
    run_id: str
    out_dir: Path
    workers: int = 2
    gpus: list[str] | None = None  # local executor: the devices jobs are spread over
    executor: str = "local"  # local | ray
    resume: bool = False
    options: RunOptions = field(default_factory=RunOptions)  # every job's run options
    job_timeout_s: float | None = None
    quiet: bool = False
    source: str | None = None  # the task set, recorded in the plan
    subset: Subset | None = None  # which of the set's tasks were chosen, recorded in the plan
    baseline: str | None = None  # the free contestant among the models, recorded for the summary's margins
    # `check --predictions`: the patches to grade, the files they came from, and the set's tasks the subset left out
    predictions: list[Prediction] = field(default_factory=list)
    prediction_files: list[str] = field(default_factory=list)
    left_out: frozenset[str] = frozenset()


@dataclass
class BatchOutcome:
    summary: BatchSummary
    run_dir: Path
    ran: int  # jobs that ran in this session
    failed: int  # jobs of the run that count against it (`JobRecord.failure`): failed, errored; exit 1 if any
    skipped: int
    elapsed_s: float
    summary_json: Path
    summary_md: Path


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """One batch process per run at a time; the kernel drops the lock if we are killed.

    The descriptor is close-on-exec and no child is forked from this process (jobs fork from
    the fork server), so no job or command can hold the lock after the batch is gone.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / ".batch.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BatchError(f"run {run_dir.name} is in use by another batch process") from None
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _write_plan(run_dir: Path, jobs: Sequence[JobSpec], models: Sequence[str], cfg: BatchConfig, samples: int) -> None:
    planned = [PlannedJob(key=j.key, task=j.task, model=j.model, sample=j.sample) for j in jobs]
    plan = extended(read_plan(run_dir), run_id=cfg.run_id, source=cfg.source, models=models, samples=samples,
                    options=cfg.options, jobs=planned)
    plan.subset, plan.baseline = cfg.subset, cfg.baseline
    if cfg.predictions:
        write_predictions(run_dir / PREDICTIONS, cfg.predictions)
        plan.predictions = list(cfg.prediction_files)
    plan.write(run_dir / PLAN)


def make_executor(cfg: BatchConfig, launch: LaunchConfig) -> Executor:
    if cfg.executor == "local":
        return LocalExecutor(launch, cfg.workers, cfg.gpus)
    if cfg.executor == "ray":
        if cfg.gpus:
            raise BatchError("--gpus is for the local executor: under Ray a GPU task's job leases a whole GPU")
        from agent.batch.ray_executor import RayExecutor

        try:
            return RayExecutor(launch, cfg.workers)
        except ExecutorError as e:
            raise BatchError(str(e)) from None
    raise BatchError(f"unknown executor {cfg.executor!r}: use local or ray")


def run_batch(tasks: Sequence[Task], models: Sequence[str], samples: int, cfg: BatchConfig, *,
              console: Console | None = None, executor: Executor | None = None) -> BatchOutcome:
    """Run every job the ledger does not already hold as done; write summary.json, summary.md and (SWE-bench's
    form) predictions.jsonl."""
    console = console or Console(stderr=True, emoji=False)
    try:
        check_run_id(cfg.run_id)
    except BadName as e:
        raise BatchError(str(e)) from None
    out_dir = Path(cfg.out_dir).resolve()
    run_dir = run_folder(out_dir, cfg.run_id)
    ours = [m for m in models if not m.startswith(f"{PREDICTION}:")]
    sampled = [m for m in ours if m != cfg.baseline]  # the baseline (rules) is deterministic: one sample is enough
    jobs = expand_jobs(tasks, sampled, samples, cwd=Path.cwd(), job_timeout_s=cfg.job_timeout_s) if sampled else []
    if cfg.baseline in ours:
        jobs += expand_jobs(tasks, [cfg.baseline], 1, cwd=Path.cwd(), job_timeout_s=cfg.job_timeout_s)
    _distinct_folders(ours)
    if cfg.predictions:
        jobs += prediction_jobs(tasks, cfg.predictions, left_out=cfg.left_out, job_timeout_s=cfg.job_timeout_s)
        models = list(dict.fromkeys([*ours, *(j.model for j in jobs)]))
    if not jobs:
        raise BatchError("nothing to run: no models given, and no prediction matches a chosen task")
    with run_lock(run_dir):
        ledger = Ledger(run_dir)
        latest = ledger.latest()
        if latest and not cfg.resume:
            raise BatchError(f"run {cfg.run_id} already has {len(latest)} finished jobs: "
                             "pass --resume to continue it, or choose another --run-id")
        for key, why in unverified(out_dir, latest, {j.key for j in jobs}).items():
            console.print(f"{key}: {why}: running the job again", highlight=False, markup=False, soft_wrap=True)
            del latest[key]  # never finished, as far as this machine can tell
        _write_plan(run_dir, jobs, models, cfg, max(samples, *(j.sample + 1 for j in jobs)))
        launch = LaunchConfig(run_id=cfg.run_id, out_dir=str(out_dir), cwd=str(Path.cwd()), options=cfg.options)
        executor = executor or make_executor(cfg, launch)
        todo, skips = _plan(jobs, latest, executor)
        for job in todo:
            clear_job(out_dir, cfg.run_id, job.key)

        counts = {"ran": 0, "failed": 0}
        rerun = {j.key for j in todo} | {r.key for r in skips}
        planned = {j.key for j in jobs}
        earlier = [r for k, r in latest.items() if k in planned and k not in rerun]
        start = time.monotonic()
        progress = BatchProgress(console, total=len(jobs), workers=cfg.workers, quiet=cfg.quiet, earlier=earlier,
                                 log_of=lambda key: job_paths(cfg.out_dir, cfg.run_id, key)[0] / "batch.log")

        def finished(rec: JobRecord) -> None:
            ledger.append(rec)
            counts["ran"] += rec.status != "skipped"
            counts["failed"] += rec.status == "failed"
            progress.finished(rec)

        try:
            with progress:
                for rec in skips:
                    finished(rec)
                executor.run(todo, progress.started, finished)
        finally:
            elapsed = time.monotonic() - start
            summary = summarize_run(run_dir).model_copy(update={
                "elapsed_s": round(elapsed, 2), "jobs_run": counts["ran"],
                "jobs_per_minute": round(counts["ran"] / elapsed * 60, 3) if counts["ran"] and elapsed > 0 else None})
            js, md = write_summary(run_dir, summary)
            write_run_predictions(run_dir, summary.jobs)
    return BatchOutcome(summary=summary, run_dir=run_dir, ran=counts["ran"], failed=summary.failed,
                        skipped=len(skips), elapsed_s=elapsed,
                        summary_json=js, summary_md=md)


def unverified(out_dir: Path, latest: dict[str, JobRecord], planned: set[str]) -> dict[str, str]:
    """The planned jobs the ledger calls done whose report.json does not verify under this machine's key
    (agent.util.seal), each with why: a resume re-runs them rather than take an edited or foreign record
    as a finished job."""
    done = {k: r for k, r in latest.items() if r.status == "done" and k in planned}
    if not done:
        return {}
    key = load_key()
    out = {}
    for k, rec in done.items():
        path = out_dir / (rec.report or "")
        try:
            state = seal_of(path.read_bytes(), read_mac(path), key) if rec.report else "unsealed"
        except OSError as e:
            out[k] = f"its report.json cannot be read ({e.strerror or e})"
            continue
        if state != "sealed":
            out[k] = f"its report.json {WHY[state]}"
    return out


def _plan(jobs: Sequence[JobSpec], latest: dict[str, JobRecord],
          executor: Executor) -> tuple[list[JobSpec], list[JobRecord]]:
    """(jobs to run, new `skipped` records): done jobs are left alone; GPU tasks without a GPU are skipped."""
    need_gpu = any(j.requires_gpu for j in jobs)
    gpus = executor.gpu_count() if need_gpu else 0
    where = "the Ray cluster" if executor.name == "ray" else "this machine"
    todo, skips = [], []
    for job in jobs:
        prev = latest.get(job.key)
        if prev is not None and prev.status == "done":
            continue
        if job.skip_reason is not None:
            if prev is None or prev.status != "skipped":
                skips.append(job.record("skipped", reason=job.skip_reason))
            continue
        if job.requires_gpu and gpus == 0:
            if prev is None or prev.status != "skipped":
                skips.append(job.record("skipped", reason=f"the task requires a GPU and {where} has none"))
            continue
        todo.append(job)
    return todo, skips


def load_tasks(source: str | Path) -> list[Task]:
    """The valid tasks of a set; any invalid one stops the batch before it starts, with every error listed."""
    try:
        entries = checked_bases(load_task_set(source))
    except TaskError as e:
        raise BatchError(str(e)) from None
    bad = [str(e) for e in entries if not isinstance(e, Task)]
    if bad:
        raise BatchError(f"{len(bad)} invalid task(s): " + "; ".join(bad))
    if not entries:
        raise BatchError(f"{source}: no task files found")
    return [e for e in entries if isinstance(e, Task)]
