"""One run: a task, a model, one sample. Workspace -> loop -> final checks -> the three outputs.

The best passing candidate is what gets emitted, not merely the last state: a model that
breaks a good change after checking it should not lose that change.
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
from agent.loop import Limits, Outcome, Trajectory, run_loop
from agent.models import make_model
from agent.models.base import Model
from agent.models.pricing import PriceTable
from agent.report import atomic_write, build_report, write_json
from agent.sandbox import isolation_mode, isolation_warning
from agent.task import Task
from agent.tools import Toolbox
from agent.workspace import Workspace


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


@dataclass
class RunPaths:
    report: Path
    trajectory: Path
    checks: Path
    patch: Path

    @classmethod
    def of(cls, out_dir: Path, run_id: str, job: str) -> "RunPaths":
        res = out_dir / "results" / run_id / job
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
    report: dict[str, Any]
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
        ws = Workspace.create(task.repo, task.spec.base, work / "workspace")
        tools = Toolbox(ws, protected=list(task.spec.protected), run_checks=run_checks_tool,
                        command_timeout_s=min(600.0, limits.timeout_s))
        outcome = run_loop(task, model, tools, limits=limits, prices=prices,
                           grade_submission=grade_submission, trajectory=Trajectory(paths.trajectory),
                           on_event=on_event)
        warning = isolation_warning(isolation_mode())
        if warning:
            outcome.warnings.append(warning)
        final_diff, evaluation = _final(ws, candidates, checker, outcome, on_event)
        atomic_write(paths.patch, final_diff)
        denials = tools.denials
    finally:
        checker.close()
        if not keep_workspace:
            shutil.rmtree(work, ignore_errors=True)

    if evaluation is not None:
        evaluation["warnings"] = outcome.warnings
    report = build_report(outcome, session_id=session_id, evaluation=evaluation, permission_denials=denials)
    write_json(paths.report, report)
    return RunResult(report, paths, outcome)


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
