"""The one loader of a run folder `results/<run-id>`: its plan and the last state of every job.

The ledger (batch.jsonl) names the jobs when there is one; without it (runs made one by one
with `perfagent run --job`) every report.json under the run is a job, named by its folder. Each
job's report.json, the source of truth, is read once (through `read_report`) and so is its
checks.json (through `read_checks`); a missing or corrupt report is a job without fresh figures,
never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agent.agents import join_spec
from agent.results.checks_log import every_grading, read_checks
from agent.results.layout import REPORT, TRAJECTORY, out_dir_of, split_key
from agent.results.ledger import Ledger
from agent.results.plan import Plan, read_plan
from agent.results.record import JobRecord, figures_from_report
from agent.results.report import Report, ReportError, read_report
from agent.results.summary import BatchSummary, summarize
from agent.util.files import iter_jsonl


@dataclass(frozen=True)
class RunFolder:
    """A run folder as read: where it is, what was planned, and every job's latest record."""

    run_dir: Path
    plan: Plan
    records: list[JobRecord]

    def summary(self) -> BatchSummary:
        """The summary summary.json holds: the one every view shows."""
        return summarize(self.records, run_id=self.run_dir.name, samples=self.plan.samples or None,
                         planned=[(j.key, j.model) for j in self.plan.jobs], baseline=self.plan.baseline)


def load_run(run_dir: Path) -> RunFolder:
    run_dir = Path(run_dir)
    return RunFolder(run_dir=run_dir, plan=read_plan(run_dir), records=load_records(run_dir))


def summarize_run(run_dir: Path) -> BatchSummary:
    """Summary of the run folder `results/<run-id>`: reads the files, then `summarize`."""
    return load_run(run_dir).summary()


def load_records(run_dir: Path) -> list[JobRecord]:
    """The last state of every job in `run_dir`, with figures re-read from each report.json."""
    run_dir = Path(run_dir)
    ledger = Ledger(run_dir)
    if ledger.path.is_file():
        out_dir = out_dir_of(run_dir)
        return [_refreshed(r, out_dir / r.report) if r.report else r for r in ledger.latest().values()]
    return [_from_folder(run_dir, f) for f in sorted(run_dir.rglob(REPORT))]


def report_or_none(path: Path) -> Report | None:
    """The report at `path`, or None when it is missing or corrupt (the job then has no report)."""
    try:
        return read_report(path)
    except ReportError:
        return None


def _refreshed(record: JobRecord, report_file: Path) -> JobRecord:
    report = report_or_none(report_file)
    if report is None:
        return record  # what the ledger last saw
    return record.model_copy(update={**figures_from_report(report),
                                     "commands_s": commands_seconds(report_file.parent, report)})


def _from_folder(run_dir: Path, report_file: Path) -> JobRecord:
    """A job no ledger names: its folder (and its report, for who ran it) names it."""
    key = report_file.parent.relative_to(run_dir).as_posix()
    report = report_or_none(report_file)  # corrupt: a done job that graded nothing ("error")
    task, model, sample = job_identity(key, report)
    figures = figures_from_report(report) if report is not None else {"verdict": "error"}
    ev = report.evaluation if report is not None else None
    try:
        written = report_file.stat().st_mtime  # when the run ended: its report is its last word
    except OSError:
        written = 0.0
    return JobRecord(key=key, task=task, model=model, sample=sample, status="done",
                     has_reference=ev is not None and ev.reference is not None,
                     report=report_file.relative_to(out_dir_of(run_dir)).as_posix(), finished_at=written,
                     wall_s=report.duration_ms / 1000 if report is not None else 0.0,
                     commands_s=commands_seconds(report_file.parent, report), **figures)


def job_identity(key: str, report: Report | None) -> tuple[str, str, int]:
    """(task, model, sample) of a job no ledger names, from its key and its report."""
    k = split_key(key)
    return k.task, report_model(report, k.slug), k.sample


def report_model(report: Report | None, folder: str | None = None) -> str:
    """Who ran a job that no ledger names: an external agent by its spec ("claude-code:claude-sonnet-4-5",
    which a folder slug would flatten into a model name), else the folder's model, else the report's first."""
    if report is not None and report.agent is not None:
        return join_spec(report.agent.name, report.agent.model)
    return folder or next(iter(report.modelUsage if report else ()), "unknown")


def trajectory_model(job_dir: Path) -> str | None:
    """The model named by the trajectory's first record: who ran a job that left no report."""
    first = next(iter_jsonl(Path(job_dir) / TRAJECTORY), {})
    return str(first["model"]) if first.get("model") else None


def commands_seconds(job_dir: Path, report: Report | None) -> float:
    """Time spent in the target's commands: every grading (checks.json's, and the report's when an older
    runner made it after the loop: agent.results.checks_log) and the agent's `run` calls."""
    total = sum(g.evaluation.duration_s for g in every_grading(read_checks(job_dir), report) if g.evaluation)
    for rec in iter_jsonl(Path(job_dir) / TRAJECTORY):
        if rec.get("type") == "tool_result" and rec.get("name") == "run":
            total += float(rec.get("duration_s") or 0)
    return total
