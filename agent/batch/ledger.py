"""One line per finished batch job: the record, how it is read out of a report, and the ledger.

`results/<run-id>/batch.jsonl` is the batch's memory. Each line is written with a single
`write` on an O_APPEND descriptor and fsynced, after the job's report.json exists, so a
`kill -9` can lose the jobs in flight but never a finished one, and never leaves half a line
that a reader would trust (a torn last line is ignored).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.checks.evaluation import Evaluation
from agent.models.base import OFFLINE_MODELS, Usage
from agent.run.result import Report, ReportError
from agent.util.files import iter_jsonl, read_json

Status = Literal["done", "failed", "skipped"]
LEDGER = "batch.jsonl"


class JobRecord(BaseModel):
    """A finished job: who, what happened, where the files are, and its headline figures.

    The figures are copied from report.json for convenience (progress, quick reads); the
    summary re-reads report.json, which stays the source of truth.
    """

    model_config = ConfigDict(extra="ignore")

    key: str  # "<task>/<model-slug>/s<k>", also the job folder under results/<run-id>/
    task: str
    model: str  # the spec as the user wrote it
    sample: int
    status: Status
    reason: str | None = None  # why failed / skipped
    has_reference: bool = False  # the task has a reference patch (Opt@K counts it)
    report: str | None = None  # paths relative to the batch's out dir
    patch: str | None = None
    device: str | None = None  # CUDA_VISIBLE_DEVICES the job saw, if set
    exit_code: int | None = None
    # headline figures from report.json
    subtype: str | None = None
    verdict: str | None = None  # evaluation.verdict: pass | fail | unverified | rejected | error | no-change
    perf_verdict: str | None = None  # faster | slower | no significant change | inconclusive | suspicious
    speedup: float | None = None  # >1 is better, whichever way the metric points
    reference_speedup: float | None = None
    fraction_of_reference: float | None = None
    cost_usd: float | None = None
    tokens: Usage = Field(default_factory=Usage)
    num_turns: int = 0
    # where the time went
    wall_s: float = 0.0  # the job process, start to exit, as the batch saw it
    model_s: float = 0.0  # waiting for the model's API
    commands_s: float = 0.0  # the target's commands: checks and the agent's `run` calls
    finished_at: float = 0.0

    @property
    def correct(self) -> bool:
        return self.status == "done" and self.verdict == "pass"

    @property
    def faster(self) -> bool:
        return self.correct and self.perf_verdict == "faster"

    @property
    def overhead_s(self) -> float:
        """The harness's own time: everything that is neither a model call nor a target command."""
        return max(0.0, self.wall_s - self.model_s - self.commands_s)


def load_report(path: Path) -> Report | None:
    """A job's report.json, or None when it is missing or corrupt (the job then has no report)."""
    try:
        return Report.read(path)
    except ReportError:
        return None


def figures_from_report(report: Report) -> dict[str, Any]:
    """The headline figures of one report, as JobRecord fields. Pure."""
    ev = report.evaluation
    perf = ev.perf if ev is not None else None
    ref = ev.reference if ev is not None else None
    return {
        "subtype": report.subtype,
        "verdict": report.verdict,
        "perf_verdict": perf.verdict if perf is not None else None,
        "speedup": ev.speedup if ev is not None else None,
        "reference_speedup": ref.speedup if ref is not None else None,
        "fraction_of_reference": ref.fraction_of_reference if ref is not None else None,
        "cost_usd": report.total_cost_usd,
        "tokens": report.usage.to_usage(),
        "num_turns": report.num_turns,
        "model_s": report.duration_api_ms / 1000,
    }


def is_retryable(report: Report) -> str | None:
    """Why a written report still counts as a failed job, else None: the run was interrupted (SIGINT,
    SIGTERM), or a provider's API failed mid-run, which a retry may not meet again. Offline models
    (OFFLINE_MODELS) are deterministic, so their errors are results, not failures."""
    if report.subtype != "error_during_execution":
        return None
    if report.result.startswith("interrupted"):
        return report.result
    if not report.result.startswith("model error"):
        return None
    used = set(report.modelUsage)
    return None if used and used <= OFFLINE_MODELS else report.result


def commands_seconds(job_dir: Path) -> float:
    """Time spent in the target's commands: every grading (checks.json, plus the final one when
    the runner made it after the loop) and the agent's `run` calls."""
    entries = read_json(job_dir / "checks.json")
    graded = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
    total = sum(_seconds(e.get("evaluation")) for e in graded)
    report = load_report(job_dir / "report.json")
    final = report.evaluation if report is not None else None
    if final is not None:
        bare = final.model_copy(update={"emitted": None, "warnings": []}).model_dump()
        if not any(e.get("full") and _dump(e.get("evaluation")) == bare for e in graded):
            total += final.duration_s
    for rec in iter_jsonl(job_dir / "trajectory.jsonl"):
        if rec.get("type") == "tool_result" and rec.get("name") == "run":
            total += float(rec.get("duration_s") or 0)
    return total


def _dump(evaluation: Any) -> dict[str, Any] | None:
    """A logged evaluation in the shape the report's has, to compare the two; None if it is not one."""
    try:
        return Evaluation.model_validate(evaluation).model_dump()
    except ValidationError:
        return None


def _seconds(evaluation: Any) -> float:
    try:
        return float((evaluation or {}).get("duration_s") or 0)
    except (TypeError, ValueError, AttributeError):
        return 0.0


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
