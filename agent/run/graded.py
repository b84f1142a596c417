"""One graded run: the skeleton every contestant shares. Our loop, an external agent and a prediction
differ only in how the candidate is made; what is checked, what is emitted and what report.json says
is decided here, once.

    work folder + grader -> the task's base checked -> workspace -> the contestant plays (grading as it goes)
    -> the emission (an interrupted run salvages, grading nothing new) -> patch, report -> closed

What the contestant ended with is what gets emitted, if it passes its full evaluation: the patch, the
contestant's own account and the verdict tell one story. model_patch.diff only ever holds a change that
passed the checks; one that did not goes to rejected.diff beside it, for reading. Either is exactly a
diff that was graded: the workspace's candidate (`Workspace.candidate`), whose left-out files (logs,
binaries, our outputs' names) report.json lists. An interrupted run (SIGINT, SIGTERM) has no final
change: it writes its report and the best candidate that passed so far, and grades nothing new.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Required, TypedDict

from agent.checks import Checker, Evaluation, Evidence, TaskBroken, grade
from agent.checks.patchinfo import changes_anything, diff_summary
from agent.checks.render import perf_line, verdict_line
from agent.checks.grade import nothing_to_grade
from agent.checks.verdicts import PerfVerdict, Verdict
from agent.env.candidate import Candidate, LeftOut
from agent.env.sandbox import isolation
from agent.env.workspace import Workspace
from agent.models.base import Usage
from agent.results.checks_log import ChecksLog, Grading, checks_file
from agent.results.layout import ASIDE, EMITTED, REJECTED, REPORT, TRAJECTORY, job_paths
from agent.results.report import ModelUsage, PermissionDenial, PolicyRecord, Report, TokenUsage, new_report
from agent.run.exits import RunEnded, TaskUncheckable, as_interrupted
from agent.run.loop import Outcome, Trajectory
from agent.run.names import check_job, check_run_id
from agent.task import Task
from agent.util.files import atomic_write

OnEvent = Callable[[str, dict], None]


@dataclass
class RunPaths:
    report: Path
    trajectory: Path
    checks: Path
    patch: Path
    rejected: Path  # the change that did not pass, when nothing was emitted
    aside: Path  # a change proven safe whose speed was not established, when nothing was emitted

    @classmethod
    def of(cls, out_dir: Path, run_id: str, job: str) -> RunPaths:
        """The outputs of a job (named by results/layout.py); BadName for a run id or job that could lead
        outside `out_dir`."""
        res, patches = job_paths(out_dir, check_run_id(run_id), check_job(job))
        return cls(res / REPORT, res / TRAJECTORY, checks_file(res), patches / EMITTED, patches / REJECTED,
                   patches / ASIDE)


@dataclass
class Candidates:
    """Every graded state of the workspace, written to checks.json as each lands (its evidence beside
    its evaluation, so it can be re-graded), and told to the progress display (`checks` as a check
    starts, `checked` with its verdict as it ends)."""

    checker: Checker
    checks_file: Path
    on_event: OnEvent = lambda kind, data: None
    seen: list[tuple[Candidate, Evaluation, bool]] = field(default_factory=list)  # (candidate, evaluation, full?)
    evidence: list[Evidence] = field(default_factory=list)  # what each of `seen` was graded from
    log: ChecksLog = field(init=False)  # checks.json, one entry per `seen`, in order

    def __post_init__(self) -> None:
        self.log = ChecksLog(self.checks_file)

    def grade(self, cand: Candidate, *, full: bool, perf: bool = True) -> Evaluation:
        diff = cand.diff
        self.on_event("checks", {"full": full, "n": len(self.seen) + 1, "diff": diff_summary(diff)})
        evidence = self.checker.collect(diff, quick=not full, perf=perf, reference=full)
        ev = grade(evidence, self.checker.task.spec)
        self.seen.append((cand, ev, full))
        self.evidence.append(evidence)
        self.log.append(Grading(time=time.time(), full=full, evaluation=ev, evidence=evidence,
                                left_out=cand.left_out))
        self.on_event("checked", {"full": full, "n": len(self.seen), "verdict": ev.verdict, "line": verdict_line(ev),
                                  "duration_s": ev.duration_s})
        return ev

    def best_passing(self) -> tuple[Candidate, Evaluation, bool] | None:
        passing = [c for c in self.seen if c[1].verdict == Verdict.PASS and c[0].diff.strip()]
        return max(passing, key=lambda c: (c[1].speedup or 0.0, c[2]), default=None)

    def full_for(self, diff: str) -> Evaluation | None:
        return next((ev for c, ev, full in reversed(self.seen) if full and c.diff == diff), None)

    def entry_of(self, ev: Evaluation) -> int | None:
        """The checks.json entry that holds `ev` (this very evaluation); None: it is no grading of this run."""
        return next((n for n, (_, seen, _) in enumerate(self.seen) if seen is ev), None)


@dataclass
class Emission:
    """What a run leaves: the patch it emits, the change it rejected, the change it kept aside (at most
    one of the three is non-empty), the evaluation report.json carries, and the files left out of that change."""

    patch: str
    rejected: str
    evaluation: Evaluation
    left_out: list[LeftOut] = field(default_factory=list)
    aside: str = ""
    entry: int | None = None  # the checks.json entry `evaluation` is (report.json's checks_entry); None: no grading

    def write(self, paths: RunPaths) -> None:
        atomic_write(paths.patch, self.patch)
        for path, text in ((paths.rejected, self.rejected), (paths.aside, self.aside)):
            if text:
                atomic_write(path, text)
            else:
                path.unlink(missing_ok=True)  # a stale one from an earlier attempt of the job

    def judged_on_speed(self, task_file: str) -> Emission:
        """This emission as an offline policy leaves it: a passing change only if its full evaluation found it
        faster. One whose speed the noise left open is moved aside (never emitted as a finding, never lost;
        `check` finishes it later); one found no faster is reverted."""
        ev = self.evaluation
        faster = ev.perf is not None and ev.perf.verdict == PerfVerdict.FASTER
        if not self.patch or ev.verdict != Verdict.PASS or faster:
            return self
        if ev.perf is not None and ev.perf.unestablished:
            note = (f"speed not established ({perf_line(ev.perf)}): the change, proven safe, is kept aside as {ASIDE}; "
                    f"`perfagent check {task_file} --patch {ASIDE}` on a quieter machine can finish the judgement")
            return Emission("", "", nothing_to_grade(Verdict.NO_CHANGE, note), self.left_out, aside=self.patch)
        why = perf_line(ev.perf) if ev.perf is not None else "the task has no bench"
        return Emission("", "", nothing_to_grade(Verdict.NO_CHANGE, f"reverted: the change passed but was not "
                                                                     f"measurably faster ({why})"), self.left_out)


@dataclass
class RunResult:
    report: Report
    paths: RunPaths
    outcome: Outcome


class Contestant(Protocol):
    """What makes the candidate: our loop, an external agent, a prediction. The graded run owns the rest;
    each hook but `play` has a default, taken by subclassing this protocol."""

    def prepare(self, run: GradedRun) -> None:
        """Before the base check: what can fail without spending anything (an agent's executable)."""

    def ungraded(self, run: GradedRun) -> Emission | None:
        """What the run emits when the contestant brings nothing to grade (an empty prediction, text that is no
        diff): then no base check runs and no workspace is made, since nothing could fail them. None: play."""
        return None

    def play(self, run: GradedRun) -> Emission | None:
        """Make the candidate in `run.ws`, grading through `run.candidates`; what the run emits (None: it
        was interrupted, as `run.outcome` says). A RunEnded raised ends the run with nothing emitted."""
        ...

    def interrupted(self, run: GradedRun) -> None:
        """An interrupt struck outside the contestant's own handling: where, for its trajectory."""

    def salvage(self, run: GradedRun, signal_name: str) -> Emission:
        """What an interrupted run emits, grading nothing new."""
        return salvage_emission(run.candidates, signal_name)

    def settle(self, run: GradedRun) -> dict[str, Any]:
        """After the emission, before the report: the contestant's spend and warnings into `run.outcome`;
        report.json's fields of its own (its agent record, the denials, the policy)."""
        return {}

    def close(self) -> None:
        """Free what `prepare` or `play` holds (after the grader closes, before the work folder goes)."""


@dataclass
class GradedRun:
    """One run's state, as the contestant sees it while it plays."""

    task: Task
    paths: RunPaths
    work: Path
    checker: Checker
    candidates: Candidates
    on_event: OnEvent
    start: float = field(default_factory=time.monotonic)
    outcome: Outcome = field(default_factory=Outcome)
    ws: Workspace | None = None
    _trajectory: Trajectory | None = None

    @property
    def trajectory(self) -> Trajectory:
        """trajectory.jsonl, started (emptied) on first use: a contestant that keeps none leaves no file."""
        if self._trajectory is None:
            self._trajectory = Trajectory(self.paths.trajectory)
        return self._trajectory

    def play(self, contestant: Contestant) -> Emission:
        """Base check first; the contestant's play; what the run emits, however it ended."""
        emission: Emission | None = None
        try:
            contestant.prepare(self)
            emission = contestant.ungraded(self)
            if emission is None:
                self.checker.check_base()  # a task that cannot pass on its own base gets no agent (nor spends)
                self.ws = Workspace.create(self.task.repo, self.task.spec.base, self.work / "workspace")
                emission = contestant.play(self)
        except TaskBroken as e:
            self.outcome.end(TaskUncheckable(str(e)))
        except RunEnded as e:  # the contestant could not go on (an agent missing, crashing)
            self.outcome.end(e)
        except KeyboardInterrupt as e:  # outside the contestant's own handling, or during the final evaluation
            self.outcome.end(as_interrupted(e))
            contestant.interrupted(self)
        if self.outcome.interrupted is not None:
            emission = contestant.salvage(self, self.outcome.interrupted)
        if emission is None:
            emission = Emission("", "", nothing_to_grade(Verdict.ERROR, self.outcome.result))
        self.outcome.duration_s = time.monotonic() - self.start  # the final evaluation is part of the run
        return emission

    def report(self, emission: Emission, contestant: Contestant) -> Report:
        """report.json's content: the outcome settled, the sandbox's gaps and the contestant's account in it."""
        self.outcome.warnings += isolation_warnings()
        own = contestant.settle(self)
        emission.evaluation = emission.evaluation.model_copy(update={"warnings": self.outcome.warnings})
        report = report_of(self.outcome, session_id=str(uuid.uuid4()), evaluation=emission.evaluation,
                           permission_denials=[], left_out=emission.left_out)
        return report.model_copy(update={**own, "checks_entry": emission.entry})


class Where(TypedDict, total=False):
    """graded_run's keywords, which a contestant's entry point (grade_prediction) passes on as they are."""

    out_dir: Required[Path]
    run_id: Required[str]
    job: str | None
    lock_dir: Path | None
    keep_workspace: bool
    on_event: OnEvent
    checker: Checker | None


def graded_run(
    task: Task,
    contestant: Contestant,
    *,
    out_dir: Path,
    run_id: str,
    job: str | None = None,
    lock_dir: Path | None = None,
    keep_workspace: bool = False,
    on_event: OnEvent = lambda kind, data: None,
    checker: Checker | None = None,
) -> RunResult:
    """`contestant` on `task`: report.json, checks.json and the diff written, the work folder gone.
    `checker`: the grader seam (default: a real Checker of the task, closed with the run)."""
    paths = RunPaths.of(out_dir, run_id, job or task.id)
    work = Path(tempfile.mkdtemp(prefix=f"perfagent-{task.id}-"))
    checker = checker or Checker(task, work / "checks", lock_dir=lock_dir,
                                 log=lambda m: on_event("log", {"message": m}))
    run = GradedRun(task, paths, work, checker, Candidates(checker, paths.checks, on_event), on_event)
    try:
        emission = run.play(contestant)
        report = run.report(emission, contestant)
        emission.write(paths)
        report.write(paths.report)
    finally:
        try:
            checker.close()
        finally:
            try:
                contestant.close()
            finally:
                if not keep_workspace:
                    shutil.rmtree(work, ignore_errors=True)
    return RunResult(report, paths, run.outcome)


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
        return Emission("", "", nothing_to_grade(Verdict.NO_CHANGE,
                                                 f"interrupted by {signal_name} before any candidate passed"))
    cand, ev, full = best
    how = f"{'full' if full else 'quick'} evaluation; interrupted by {signal_name}"
    return Emission(cand.diff, "", ev.model_copy(update={"emitted": f"best passing candidate ({how})"}),
                    cand.left_out, entry=candidates.entry_of(ev))


def final_emission(ws: Workspace, candidates: Candidates, outcome: Outcome) -> Emission:
    """What the contestant ended with, when it passes its full evaluation; nothing when it ended with no
    change; otherwise the change goes to rejected.diff. An earlier candidate it moved away from is
    never emitted in its place: the patch, its account and the verdict tell one story."""
    cand = ws.candidate()
    diff = cand.diff
    if not changes_anything(diff):
        tried = any(changes_anything(c.diff) for c, _, _ in candidates.seen)
        return Emission("", "", nothing_to_grade(Verdict.NO_CHANGE, "the agent took back every change it made"
                                                 if tried else "the agent made no change"), cand.left_out)
    ev = candidates.full_for(diff)
    if ev is None:
        try:
            ev = candidates.grade(cand, full=True)
        except Exception as e:  # noqa: BLE001 — the report says why; nothing unchecked is emitted
            outcome.warnings.append(f"final evaluation failed: {type(e).__name__}: {e}")
            ev = nothing_to_grade(Verdict.ERROR, f"{type(e).__name__}: {e}")
    if ev.verdict == Verdict.PASS:
        return Emission(diff, "", ev.model_copy(update={"emitted": "the agent's final change"}), cand.left_out,
                        entry=candidates.entry_of(ev))
    passed_before = candidates.best_passing() is not None
    why = "the agent's final change did not pass" + (" (an earlier state did; the agent moved on from it)"
                                                     if passed_before else "")
    return Emission("", diff, ev.model_copy(update={"emitted": f"nothing: {why}; the change is in rejected.diff"}),
                    cand.left_out, entry=candidates.entry_of(ev))
