"""Read a results folder (one run, one job, or a batch) into the records every view shows.

Every headline number (verdict, speedup, cost, turns, the per-model and per-task tables)
comes from the one loader (`agent.results.load`) and the summary that writes summary.json, so
the views and summary.json cannot disagree. report.json is read through the one reader
(`read_report`): a job whose report is missing or unusable is shown as such, never a crash.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from agent.checks.evaluation import Evaluation, PerfResult
from agent.results.layout import (ARTIFACTS, EMITTED, LEDGER, REJECTED, REPORT, job_folders, job_paths, job_running,
                                  locate, out_dir_of)
from agent.results.load import job_identity, load_run, trajectory_model
from agent.results.record import JobRecord
from agent.results.report import AgentRun, Report, ReportError, read_report
from agent.results.summary import BatchSummary
from agent.errors import BadInput

__all__ = ["ARTIFACTS", "PatchFile", "Results", "ReviewError", "RunView", "load_results"]

# Of a diff file, at most this much is read and shown: a view never loads a huge diff whole.
SHOWN_BYTES = 256 * 1024
SHOWN_LINES = 4000  # highlighting is per line: many short lines cost as much as a few long ones


class ReviewError(BadInput):
    """A results folder that cannot be reviewed at all (absent, or holding no runs)."""


@dataclass(frozen=True)
class PatchFile:
    """A diff the run left: the emitted patch, or the failing final state that was not emitted. Only its first
    SHOWN_BYTES are read, and of those at most SHOWN_LINES lines kept; `size` is the whole file's."""

    path: Path
    text: str
    rejected: bool = False
    size: int = 0  # bytes, the whole file
    shown: int = 0  # bytes of it in `text`

    @property
    def cut(self) -> bool:
        return self.shown < self.size

    @classmethod
    def read(cls, path: Path, rejected: bool = False) -> PatchFile:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(SHOWN_BYTES)
        lines = head.splitlines(keepends=True)
        if len(lines) > SHOWN_LINES:
            head = b"".join(lines[:SHOWN_LINES])
        elif len(head) < size and len(lines) > 1:
            head = b"".join(lines[:-1])  # no half line
        return cls(path, head.decode("utf-8", errors="replace"), rejected, size, len(head))


@dataclass
class RunView:
    """One job as the views show it: the summary's record (numbers) plus the files behind it."""

    key: str  # "<task>/<model-slug>/s<k>" in a batch, the task id for a single run
    task: str
    model: str
    sample: int
    dir: Path
    record: JobRecord | None  # None when the summary does not know the job (no report.json)
    report: Report | None
    problem: str | None = None  # ReportError's line: "report.json missing" / "report.json corrupt: ..."
    pending: bool = False  # planned in batch.json, not started: nothing to show yet
    running: bool = False  # no report yet, and a live process is writing the job's folder
    patches: list[PatchFile] = field(default_factory=list)  # the emitted patch first, then a rejected one

    @property
    def verdict(self) -> str:
        if self.pending:
            return "pending"
        if self.running:
            return "running"
        if self.problem:
            return "missing report" if "missing" in self.problem else "corrupt report"
        if self.record is not None and self.record.status != "done":
            return self.record.status  # failed / skipped: the batch says why in `reason`
        return (self.record.verdict if self.record else None) or "-"

    # The numbers are the summary's record, exactly as summary.json has them (for a corrupt
    # report.json that is what the batch ledger last saw).
    @property
    def speedup(self) -> float | None:
        return self.record.speedup if self.record else None

    @property
    def cost_usd(self) -> float | None:
        return self.record.cost_usd if self.record else None

    @property
    def turns(self) -> int | None:
        return self.record.num_turns if self.record else None

    @property
    def evaluation(self) -> Evaluation | None:
        return self.report.evaluation if self.report else None

    @property
    def agent(self) -> AgentRun | None:
        """The external agent that ran the job (its claims, costs, kept outputs); None for our own loop."""
        return self.report.agent if self.report else None

    @property
    def perf(self) -> PerfResult | None:
        return self.evaluation.perf if self.evaluation else None

    @property
    def interval(self) -> tuple[float, float] | None:
        """The speedup's confidence interval (>1 is better), turned from the ratio's interval."""
        p = self.perf
        return None if p is None else _as_speedup(p.ci_low, p.ci_high, p.direction)

    @property
    def rerun(self) -> tuple[float, float] | None:
        """Where another run's speedup is expected (agent.checks.stats.rerun_interval); None in older reports."""
        p = self.perf
        return None if p is None else _as_speedup(p.rerun_low, p.rerun_high, p.direction)


def _as_speedup(low: float | None, high: float | None, direction: str) -> tuple[float, float] | None:
    """A ratio's interval in speedup terms (>1 is better)."""
    if low is None or high is None or low <= 0 or high <= 0:
        return None
    return (1 / high, 1 / low) if direction == "lower" else (low, high)


@dataclass
class Results:
    run_dir: Path
    run_id: str
    summary: BatchSummary
    runs: list[RunView] = field(default_factory=list)

    @property
    def is_batch(self) -> bool:
        return (self.run_dir / LEDGER).is_file() or any("/" in r.key for r in self.runs)


def load_results(path: str | Path, *, pooled: bool = False) -> Results:
    """A run folder `results/<run-id>`, or one job folder inside it (then only that job). A folder holding
    several runs (results/ itself) is refused, naming them, unless `pooled`: its jobs would read as one batch."""
    path = Path(path)
    if not path.is_dir():
        raise ReviewError(f"{path}: no such results folder")
    run_dir, only = locate(path)
    runs = several_runs(path) if only is None and not pooled else []
    if runs:
        names = [r.relative_to(path).as_posix() for r in runs]
        raise ReviewError(f"{path}: holds {len(runs)} runs ({', '.join(names[:6])}{', ...' if len(runs) > 6 else ''})"
                          f": name one, e.g. {path / names[0]}, or pass --all to pool them into one view")
    folder = load_run(run_dir)
    summary = folder.summary()
    records = {r.key: r for r in summary.jobs}
    planned = {j.key: j.model for j in folder.plan.jobs}
    keys = set(records) | set(job_folders(run_dir)) | set(planned)
    if only is not None:
        keys = {k for k in keys if k == only}
    if not keys:
        raise ReviewError(f"{path}: no runs found (expected <job>/report.json under a results/<run-id> folder)")
    slugs = {r.key.split("/")[1]: r.model for r in summary.jobs if r.key.count("/") == 2}
    slugs.update({k.split("/")[1]: m for k, m in planned.items() if k.count("/") == 2})
    runs = [_run_view(run_dir, k, records.get(k), slugs) for k in sorted(keys)]
    return Results(run_dir=run_dir, run_id=run_dir.name, summary=summary, runs=runs)


def several_runs(path: Path) -> list[Path]:
    """The runs `path` holds when it is no one run but a folder of several (results/), else []."""
    from agent.review.runs import find_runs

    runs = find_runs(path)
    return runs if len(runs) > 1 else []


def _read(path: Path) -> tuple[Report | None, str | None]:
    """(report, problem): a missing or unusable report.json is a line to show, not an exception."""
    try:
        return read_report(path), None
    except ReportError as e:
        return None, str(e)


def _patch(candidates: list[Path], rejected: bool) -> PatchFile | None:
    path = next((p for p in candidates if p.is_file()), None)
    return PatchFile.read(path, rejected) if path else None


def _patches(out_dir: Path, run_dir: Path, key: str, record: JobRecord | None) -> list[PatchFile]:
    """The emitted patch, and the rejected final state beside it (left when no candidate passed)."""
    dirs = [job_paths(out_dir, run_dir.name, key)[1], run_dir / key]
    emitted = _patch(([out_dir / record.patch] if record and record.patch else []) + [d / EMITTED for d in dirs],
                     rejected=False)
    rejected = _patch(([emitted.path.parent / REJECTED] if emitted else []) + [d / REJECTED for d in dirs],
                      rejected=True)
    return [p for p in (emitted, rejected) if p is not None]


def _run_view(run_dir: Path, key: str, record: JobRecord | None, slugs: dict[str, str]) -> RunView:
    out_dir = out_dir_of(run_dir)
    report_path = out_dir / record.report if record and record.report else run_dir / key / REPORT
    report, problem = _read(report_path)
    pending = record is None and not (run_dir / key).is_dir()
    running = report is None and job_running(run_dir / key)
    if problem == "report.json missing" and (pending or running or (record is not None and record.status != "done")):
        problem = None  # a pending, running, skipped or failed job has no report; the ledger says why
    task, model, sample = (record.task, record.model, record.sample) if record else job_identity(key, report)
    if model == "unknown":
        model = trajectory_model(run_dir / key) or model
    model = slugs.get(model, model) if record is None else model  # the batch's name for a model slug
    return RunView(key=key, task=task, model=model, sample=sample, dir=run_dir / key, record=record, report=report,
                   problem=problem, pending=pending, running=running, patches=_patches(out_dir, run_dir, key, record))
