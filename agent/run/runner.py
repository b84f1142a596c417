"""One run: a task, a model, one sample. Workspace -> loop -> final checks -> the outputs.

What the agent ended with is what gets emitted, if it passes its full evaluation: the patch, the
agent's own account and the verdict tell one story. model_patch.diff only ever holds a change that
passed the checks; one that did not goes to rejected.diff beside it, for reading. Either is exactly a
diff that was graded: the workspace's candidate (`Workspace.candidate`), whose left-out files (logs,
binaries, our outputs' names) report.json lists and the agent is told of beside each grading. An interrupted
run (SIGINT, SIGTERM) has no final change: it writes its report and the best candidate that
passed so far, and grades nothing new.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.checks import Checker, Evaluation, Evidence, TaskBroken, grade, summarize
from agent.checks.patchinfo import changes_anything, diff_summary
from agent.checks.render import verdict_line
from agent.env.candidate import Candidate, LeftOut, with_left_out
from agent.env.sandbox import base_env, isolation
from agent.env.workspace import Workspace
from agent.models.base import Model, Usage
from agent.models.pricing import PriceTable
from agent.options import Limits
from agent.results.report import ModelUsage, PermissionDenial, PolicyRecord, Report, TokenUsage, new_report
from agent.run.exits import TaskUncheckable, as_interrupted
from agent.run.loop import Outcome, Trajectory, run_loop
from agent.run.model_spec import make_model
from agent.run.names import check_job, check_run_id
from agent.run.tools import Toolbox, ToolResult
from agent.task import Task
from agent.util.files import atomic_write
from agent.util.seal import write_sealed_json


@dataclass
class RunPaths:
    report: Path
    trajectory: Path
    checks: Path
    patch: Path
    rejected: Path  # the change that did not pass, when nothing was emitted

    @classmethod
    def of(cls, out_dir: Path, run_id: str, job: str) -> RunPaths:
        """The outputs of a job; BadName for a run id or job that could lead outside `out_dir`."""
        res = out_dir / "results" / check_run_id(run_id) / check_job(job)
        patches = out_dir / "patches" / run_id / job
        return cls(res / "report.json", res / "trajectory.jsonl", res / "checks.json",
                   patches / "model_patch.diff", patches / "rejected.diff")


@dataclass
class Candidates:
    """Every graded state of the workspace, written to checks.json as each lands (its evidence beside
    its evaluation, so it can be re-graded), and told to the progress display (`checks` as a check
    starts, `checked` with its verdict as it ends)."""

    checker: Checker
    checks_file: Path
    on_event: Callable[[str, dict], None] = lambda kind, data: None
    seen: list[tuple[Candidate, Evaluation, bool]] = field(default_factory=list)  # (candidate, evaluation, full?)
    evidence: list[Evidence] = field(default_factory=list)  # what each of `seen` was graded from
    log: list[dict[str, Any]] = field(default_factory=list)

    def grade(self, cand: Candidate, *, full: bool, perf: bool = True) -> Evaluation:
        diff = cand.diff
        self.on_event("checks", {"full": full, "n": len(self.seen) + 1, "diff": diff_summary(diff)})
        evidence = self.checker.collect(diff, quick=not full, perf=perf, reference=full)
        ev = grade(evidence, self.checker.task.spec)
        self.seen.append((cand, ev, full))
        self.evidence.append(evidence)
        self.log.append({"time": time.time(), "full": full, "evaluation": ev.model_dump(mode="json"),
                         "evidence": evidence.model_dump(mode="json"),
                         **({"left_out": [x.model_dump() for x in cand.left_out]} if cand.left_out else {})})
        write_sealed_json(self.checks_file, self.log)  # the whole list, sealed anew: `--regrade` verifies it
        self.on_event("checked", {"full": full, "n": len(self.seen), "verdict": ev.verdict, "line": verdict_line(ev),
                                  "duration_s": ev.duration_s})
        return ev

    def best_passing(self) -> tuple[Candidate, Evaluation, bool] | None:
        passing = [c for c in self.seen if c[1].verdict == "pass" and c[0].diff.strip()]
        return max(passing, key=lambda c: (c[1].speedup or 0.0, c[2]), default=None)

    def full_for(self, diff: str) -> Evaluation | None:
        return next((ev for c, ev, full in reversed(self.seen) if full and c.diff == diff), None)


@dataclass
class Emission:
    """What a run leaves: the patch it emits, the change it rejected (at most one is non-empty), the
    evaluation report.json carries, and the files left out of that change."""

    patch: str
    rejected: str
    evaluation: Evaluation
    left_out: list[LeftOut] = field(default_factory=list)

    def write(self, paths: RunPaths) -> None:
        atomic_write(paths.patch, self.patch)
        if self.rejected:
            atomic_write(paths.rejected, self.rejected)
        else:
            paths.rejected.unlink(missing_ok=True)  # a stale one from an earlier attempt of the job


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
    checker: Checker | None = None,
) -> RunResult:
    """Run the agent on `task` and write report.json, trajectory.jsonl, checks.json and the diff.
    `checker`: the grader seam (default: a real Checker of the task, closed with the run)."""
    if isinstance(model, str):
        model = make_model(model, base_url=base_url, stream=stream, task=task)
    limits = limits or Limits.of(task)
    paths = RunPaths.of(out_dir, run_id, job or task.id)
    session_id = str(uuid.uuid4())
    work = Path(tempfile.mkdtemp(prefix=f"perfagent-{task.id}-"))
    checker = checker or Checker(task, work / "checks", lock_dir=lock_dir,
                                 log=lambda m: on_event("log", {"message": m}))
    candidates = Candidates(checker, paths.checks, on_event)
    start = time.monotonic()
    ws: Workspace | None = None
    tools: Toolbox | None = None
    outcome = Outcome()
    trajectory: Trajectory | None = None
    unsealed: list[str] = []

    def grade(full: bool, perf: bool = True) -> tuple[Evaluation, list[LeftOut]]:
        cand = ws.candidate()
        return candidates.grade(cand, full=full, perf=perf), cand.left_out

    def run_checks_tool(perf: bool) -> ToolResult:
        ev, left_out = grade(full=False, perf=perf)
        return ToolResult(with_left_out(summarize(ev), left_out),
                          data={"evaluation": ev.model_dump(mode="json"),
                                "evidence": candidates.evidence[-1].model_dump(mode="json")})

    def grade_submission() -> tuple[bool, str]:
        try:
            ev, left_out = grade(full=True)
        except Exception as e:  # noqa: BLE001 — reported to the model, never fatal
            return False, f"the checks could not run: {type(e).__name__}: {e}"
        # submitting no change is an answer too ("nothing here is worth changing"), not a failed submission
        return ev.verdict in ("pass", "no-change"), with_left_out(summarize(ev), left_out)

    try:
        try:
            unsealed = isolation_warnings()
            checker.check_base()  # a task that cannot pass on its own base gets no agent (and spends nothing)
            ws = Workspace.create(task.repo, task.spec.base, work / "workspace")
            tools = Toolbox(ws, protected=list(task.spec.protected), run_checks=run_checks_tool,
                            command_timeout_s=min(600.0, limits.timeout_s),
                            env=base_env(bin_dir=checker.bin_dir(), read=task.read))
            trajectory = Trajectory(paths.trajectory)
            outcome = run_loop(task, model, tools, limits=limits, prices=prices,
                               grade_submission=grade_submission, trajectory=trajectory, on_event=on_event)
            if outcome.interrupted is None:
                emission = final_emission(ws, candidates, outcome)
                outcome.duration_s = time.monotonic() - start  # the final evaluation is part of the run
        except TaskBroken as e:
            outcome.end(TaskUncheckable(str(e)))
            outcome.duration_s = time.monotonic() - start
            emission = Emission("", "", Evaluation(verdict="error", error=str(e)))
        except KeyboardInterrupt as e:  # before the loop, or during the final evaluation
            outcome.end(as_interrupted(e))
            outcome.duration_s = time.monotonic() - start
            (trajectory or Trajectory(paths.trajectory)).add("interrupted", turn=outcome.num_turns,
                                                             signal=outcome.interrupted)
        if outcome.interrupted is not None:
            emission = salvage_emission(candidates, outcome.interrupted)
        outcome.warnings += unsealed
        emission.evaluation = emission.evaluation.model_copy(update={"warnings": outcome.warnings})
        report = report_of(outcome, session_id=session_id, evaluation=emission.evaluation,
                           permission_denials=tools.denials if tools else [], policy=policy_record(model),
                           left_out=emission.left_out)
        emission.write(paths)
        report.write(paths.report)
    finally:
        try:
            checker.close()
        finally:
            if not keep_workspace:
                shutil.rmtree(work, ignore_errors=True)
    return RunResult(report, paths, outcome)


def policy_record(model: Model) -> PolicyRecord | None:
    """An offline policy's decisions as it left them (the rules policy's `record`); None for a chat model."""
    record = getattr(model, "record", None)
    return record if isinstance(record, PolicyRecord) else None


def report_of(outcome: Outcome, *, session_id: str, evaluation: Evaluation | dict[str, Any] | None,
              permission_denials: list[dict[str, Any]], policy: PolicyRecord | None = None,
              left_out: list[LeftOut] | None = None) -> Report:
    """report.json's content for what the loop produced (an evaluation as a dict is validated)."""
    return new_report(
        subtype=outcome.subtype, is_error=outcome.is_error, duration_ms=round(outcome.duration_s * 1000),
        duration_api_ms=round(outcome.api_duration_s * 1000), num_turns=outcome.num_turns, result=outcome.result,
        session_id=session_id, total_cost_usd=outcome.total_cost_usd, unpriced=outcome.unpriced,
        usage=TokenUsage.of(sum(outcome.usage_by_model.values(), Usage())),
        modelUsage={m: ModelUsage.of(u, outcome.cost_by_model.get(m)) for m, u in outcome.usage_by_model.items()},
        permission_denials=[PermissionDenial.model_validate(d) for d in permission_denials],
        evaluation=Evaluation.model_validate(evaluation) if evaluation is not None else None, policy=policy,
        left_out=list(left_out or []))


def isolation_warnings() -> list[str]:
    """One report warning per aspect of the sandbox that is missing on this machine."""
    iso = isolation()
    return [f"not isolated ({iso.mode} sandbox): {aspect}" for aspect in iso.missing]


def salvage_emission(candidates: Candidates, signal_name: str) -> Emission:
    """What an interrupted run emits, grading nothing new: the best passing candidate with the
    evaluation it already has, else nothing (an unchecked change is never emitted)."""
    best = candidates.best_passing()
    if best is None:
        return Emission("", "", Evaluation(verdict="no-change",
                                           note=f"interrupted by {signal_name} before any candidate passed"))
    cand, ev, full = best
    how = f"{'full' if full else 'quick'} evaluation; interrupted by {signal_name}"
    return Emission(cand.diff, "", ev.model_copy(update={"emitted": f"best passing candidate ({how})"}),
                    cand.left_out)


def final_emission(ws: Workspace, candidates: Candidates, outcome: Outcome) -> Emission:
    """What the agent ended with, when it passes its full evaluation; nothing when it ended with no
    change; otherwise the change goes to rejected.diff. An earlier candidate the agent moved away
    from is never emitted in its place: the patch, the agent's account and the verdict tell one story."""
    cand = ws.candidate()
    diff = cand.diff
    if not changes_anything(diff):
        tried = any(changes_anything(c.diff) for c, _, _ in candidates.seen)
        return Emission("", "", Evaluation(verdict="no-change", note="the agent took back every change it made"
                                           if tried else "the agent made no change"), cand.left_out)
    ev = candidates.full_for(diff)
    if ev is None:
        try:
            ev = candidates.grade(cand, full=True)
        except Exception as e:  # noqa: BLE001 — the report says why; nothing unchecked is emitted
            outcome.warnings.append(f"final evaluation failed: {type(e).__name__}: {e}")
            ev = Evaluation(verdict="error", error=f"{type(e).__name__}: {e}")
    if ev.verdict == "pass":
        return Emission(diff, "", ev.model_copy(update={"emitted": "the agent's final change"}), cand.left_out)
    passed_before = candidates.best_passing() is not None
    why = "the agent's final change did not pass" + (" (an earlier state did; the agent moved on from it)"
                                                     if passed_before else "")
    return Emission("", diff, ev.model_copy(update={"emitted": f"nothing: {why}; the change is in rejected.diff"}),
                    cand.left_out)
