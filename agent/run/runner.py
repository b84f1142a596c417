"""One run: a task, a model, one sample. Workspace -> loop -> final checks -> the three outputs.

The best passing candidate is what gets emitted, not merely the last state: a model that
breaks a good change after checking it should not lose that change. An interrupted run
(SIGINT, SIGTERM) still writes its report and that best candidate, and grades nothing new.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from agent.checks import Checker, Evaluation, summarize
from agent.run.loop import Limits, Outcome, Trajectory, interrupted_by, run_loop
from agent.models import make_model
from agent.models.base import Model, Usage
from agent.models.pricing import PriceTable
from agent.run.names import check_job, check_run_id
from agent.run.result import ModelUsage, PermissionDenial, Report, TokenUsage, new_report
from agent.env.sandbox import isolation
from agent.task import Task
from agent.run.tools import Toolbox
from agent.env.workspace import Workspace
from agent.util.files import atomic_write, write_json


@dataclass
class RunPaths:
    report: Path
    trajectory: Path
    checks: Path
    patch: Path

    @classmethod
    def of(cls, out_dir: Path, run_id: str, job: str) -> "RunPaths":
        """The outputs of a job; BadName for a run id or job that could lead outside `out_dir`."""
        res = out_dir / "results" / check_run_id(run_id) / check_job(job)
        return cls(res / "report.json", res / "trajectory.jsonl", res / "checks.json",
                   out_dir / "patches" / run_id / job / "model_patch.diff")


@dataclass
class Candidates:
    """Every graded state of the workspace; picks the best one that passed."""

    seen: list[tuple[str, Evaluation, bool]] = field(default_factory=list)  # (diff, evaluation, full?)

    def add(self, diff: str, ev: Evaluation, full: bool) -> None:
        self.seen.append((diff, ev, full))

    def best_passing(self) -> tuple[str, Evaluation, bool] | None:
        passing = [c for c in self.seen if c[1].verdict == "pass" and c[0].strip()]
        return max(passing, key=lambda c: (c[1].speedup or 0.0, c[2]), default=None)

    def full_for(self, diff: str) -> Evaluation | None:
        return next((ev for d, ev, full in reversed(self.seen) if full and d == diff), None)


@dataclass
class RunResult:
    report: Report
    paths: RunPaths
    outcome: Outcome


def run_task(
    task: Task,
    model: Model | str,
    *,
    out_dir: Path,
    run_id: str,
    job: str | None = None,
    prices: PriceTable,
    limits: Limits | None = None,
    base_url: str | None = None,
    stream: bool = False,
    lock_dir: Path | None = None,
    keep_workspace: bool = False,
    on_event: Callable[[str, dict], None] = lambda kind, data: None,
) -> RunResult:
    """Run the agent on `task` and write report.json, trajectory.jsonl, checks.json and the diff."""
    if isinstance(model, str):
        model = make_model(model, base_url=base_url, stream=stream, task=task)
    limits = limits or Limits.of(task)
    paths = RunPaths.of(out_dir, run_id, job or task.id)
    session_id = str(uuid.uuid4())
    work = Path(tempfile.mkdtemp(prefix=f"perfagent-{task.id}-"))
    checker = Checker(task, work / "checks", lock_dir=lock_dir, log=lambda m: on_event("log", {"message": m}))
    candidates = Candidates()
    checks_log: list[dict[str, Any]] = []
    start = time.monotonic()
    ws: Workspace | None = None
    tools: Toolbox | None = None
    outcome = Outcome()
    trajectory: Trajectory | None = None
    unsealed: list[str] = []

    def grade(full: bool, perf: bool = True) -> Evaluation:
        diff = ws.diff()
        on_event("checks", {"full": full})
        ev = checker.evaluate(diff, quick=not full, perf=perf, reference=full)
        candidates.add(diff, ev, full)
        checks_log.append({"time": time.time(), "full": full, "evaluation": ev.model_dump(mode="json")})
        write_json(paths.checks, checks_log)
        return ev

    def run_checks_tool(perf: bool) -> str:
        return summarize(grade(full=False, perf=perf))

    def grade_submission() -> tuple[bool, str]:
        try:
            ev = grade(full=True)
        except Exception as e:  # noqa: BLE001 — reported to the model, never fatal
            return False, f"the checks could not run: {type(e).__name__}: {e}"
        return ev.verdict == "pass", summarize(ev)

    try:
        try:
            unsealed = isolation_warnings()
            ws = Workspace.create(task.repo, task.spec.base, work / "workspace")
            tools = Toolbox(ws, protected=list(task.spec.protected), run_checks=run_checks_tool,
                            command_timeout_s=min(600.0, limits.timeout_s))
            trajectory = Trajectory(paths.trajectory)
            outcome = run_loop(task, model, tools, limits=limits, prices=prices,
                               grade_submission=grade_submission, trajectory=trajectory, on_event=on_event)
            if outcome.interrupted is None:
                final_diff, evaluation = _final(ws, candidates, checker, outcome, on_event)
        except KeyboardInterrupt as e:  # before the loop, or during the final evaluation
            outcome.interrupt(interrupted_by(e))
            outcome.duration_s = time.monotonic() - start
            (trajectory or Trajectory(paths.trajectory)).add("interrupted", turn=outcome.num_turns,
                                                             signal=outcome.interrupted)
        if outcome.interrupted is not None:
            final_diff, evaluation = _salvage(candidates, outcome.interrupted)
        outcome.warnings += unsealed
        if evaluation is not None:
            evaluation["warnings"] = outcome.warnings
        report = report_of(outcome, session_id=session_id, evaluation=evaluation,
                           permission_denials=tools.denials if tools else [])
        atomic_write(paths.patch, final_diff)
        report.write(paths.report)
    finally:
        try:
            checker.close()
        finally:
            if not keep_workspace:
                shutil.rmtree(work, ignore_errors=True)
    return RunResult(report, paths, outcome)


def report_of(outcome: Outcome, *, session_id: str, evaluation: dict[str, Any] | None,
              permission_denials: list[dict[str, Any]]) -> Report:
    """report.json's content for what the loop produced."""
    return new_report(
        subtype=outcome.subtype, is_error=outcome.is_error, duration_ms=round(outcome.duration_s * 1000),
        duration_api_ms=round(outcome.api_duration_s * 1000), num_turns=outcome.num_turns, result=outcome.result,
        session_id=session_id, total_cost_usd=outcome.total_cost_usd,
        usage=TokenUsage.of(sum(outcome.usage_by_model.values(), Usage())),
        modelUsage={m: ModelUsage.of(u, outcome.cost_by_model.get(m)) for m, u in outcome.usage_by_model.items()},
        permission_denials=[PermissionDenial.model_validate(d) for d in permission_denials],
        evaluation=Evaluation.model_validate(evaluation) if evaluation is not None else None)


def isolation_warnings() -> list[str]:
    """One report warning per aspect of the sandbox that is missing on this machine."""
    iso = isolation()
    return [f"not isolated ({iso.mode} sandbox): {aspect}" for aspect in iso.missing]


def _salvage(candidates: Candidates, signal_name: str) -> tuple[str, dict[str, Any]]:
    """What an interrupted run emits, grading nothing new: the best passing candidate with the
    evaluation it already has, else nothing (an unchecked change is never emitted)."""
    best = candidates.best_passing()
    if best is None:
        return "", {"verdict": "no-change", "note": f"interrupted by {signal_name} before any candidate passed"}
    diff, ev, full = best
    data = ev.model_dump(mode="json")
    data["emitted"] = f"best passing candidate ({'full' if full else 'quick'} evaluation; interrupted by {signal_name})"
    return diff, data


def _final(ws: Workspace, candidates: Candidates, checker: Checker, outcome: Outcome,
           on_event: Callable[[str, dict], None]) -> tuple[str, dict[str, Any] | None]:
    """The emitted patch and its full evaluation: the best passing candidate, else the last state."""
    best = candidates.best_passing()
    diff = best[0] if best else ws.diff()
    if not diff.strip():
        return "", {"verdict": "no-change", "note": "the agent made no change"}
    ev = candidates.full_for(diff)
    if ev is None:
        on_event("checks", {"full": True})
        try:
            ev = checker.evaluate(diff, quick=False, reference=True)
        except Exception as e:  # noqa: BLE001 — the patch is still written; the report says why
            outcome.warnings.append(f"final evaluation failed: {type(e).__name__}: {e}")
            return diff, {"verdict": "error", "error": f"{type(e).__name__}: {e}"}
    data = ev.model_dump(mode="json")
    data["emitted"] = "best passing candidate" if best else "final state (no candidate passed)"
    return diff, data
