"""A finished job as one record, and the one definition of what it came to.

correct / faster / failure / no change / outcome are defined here and nowhere else: the
summary's counts, the batch's exit code and live line, and every review view read these.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent.models.base import Usage
from agent.checks.conditions import Conditions
from agent.checks.verdicts import PerfVerdict, Verdict
from agent.results.report import Report

Status = Literal["done", "failed", "skipped"]


class JobRecord(BaseModel):
    """A finished job: who, what happened, where the files are, and its headline figures.

    The figures are copied from report.json for convenience (progress, quick reads); the
    loader re-reads report.json, which stays the source of truth.
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
    node: str | None = None  # the Ray node that ran the job (its id), under --executor ray
    exit_code: int | None = None
    # headline figures from report.json
    subtype: str | None = None
    verdict: str | None = None  # evaluation.verdict: pass | fail | unverified | rejected | error | no-change
    perf_verdict: str | None = None  # faster | slower | no significant change | inconclusive | not confirmed
    # (| suspicious, in reports from before the outside clock)
    speedup: float | None = None  # >1 is better, whichever way the metric points
    speedup_interval: tuple[float, float] | None = None  # its 95% interval, in speedup terms
    reference_speedup: float | None = None
    reference_interval: tuple[float, float] | None = None
    fraction_of_reference: float | None = None
    conditions: Conditions | None = None  # the machine while the speed was sampled (agent.checks.conditions)
    cost_usd: float | None = None
    tokens: Usage = Field(default_factory=Usage)
    num_turns: int = 0
    # where the time went
    wall_s: float = 0.0  # the job process, start to exit, as the batch saw it
    model_s: float = 0.0  # waiting for the model's API
    commands_s: float = 0.0  # the target's commands: checks and the agent's `run` calls
    finished_at: float = 0.0

    @property
    def errored(self) -> bool:
        """The job wrote its report but the run ended in an error subtype (max turns, budget, time, a crash)."""
        return self.status == "done" and bool(self.subtype) and self.subtype != "success"

    @property
    def failure(self) -> bool:
        """Counts against the batch: failed to run, ended in an error subtype, or its patch could not be graded."""
        return self.status == "failed" or self.errored or (self.status == "done" and self.verdict == Verdict.ERROR)

    @property
    def correct(self) -> bool:
        """A pass from a run that ended in success.

        A run that hit an error limit (error_max_turns, error_max_budget, error_during_execution)
        is never correct, whatever its last graded patch scored: the README counts such a job a
        failure, "shown by its subtype and never counted correct", so correct and failure never
        both hold, and the outcome it is shown by ("error_max_turns") is not "pass".
        """
        return self.status == "done" and self.verdict == Verdict.PASS and not self.errored

    @property
    def faster(self) -> bool:
        """Correct, and the perf verdict is "faster" (significant, and the interval excludes 1)."""
        return self.correct and self.perf_verdict == PerfVerdict.FASTER

    @property
    def no_change(self) -> bool:
        """The agent submitted nothing (reverted its edits, or none passed): an empty patch, verdict no-change."""
        return self.status == "done" and self.verdict == Verdict.NO_CHANGE

    @property
    def outcome(self) -> str:
        """The job in one word, the way every table shows it:
        failed | skipped | <error subtype> | no change | <verdict>.

        An error subtype wins over the verdict: a run that hit max turns is "error_max_turns" even
        when the patch it last passed grades "pass".
        """
        if self.status != "done":
            return self.status
        if self.errored:
            return str(self.subtype)
        if self.no_change:
            return "no change"
        return self.verdict or "-"

    @property
    def overhead_s(self) -> float:
        """The harness's own time: everything that is neither a model call nor a target command."""
        return max(0.0, self.wall_s - self.model_s - self.commands_s)


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
        "speedup_interval": _interval(perf.ci_low, perf.ci_high, perf.direction) if perf is not None else None,
        "reference_speedup": ref.speedup if ref is not None else None,
        "reference_interval": (_interval(ref.ci_low, ref.ci_high, perf.direction)
                               if ref is not None and perf is not None else None),
        "fraction_of_reference": ref.fraction_of_reference if ref is not None else None,
        "conditions": perf.conditions if perf is not None else None,
        "cost_usd": report.total_cost_usd,
        "tokens": report.usage.to_usage(),
        "num_turns": report.num_turns,
        "model_s": report.duration_api_ms / 1000,
    }


def _interval(low: float | None, high: float | None, direction: str) -> tuple[float, float] | None:
    """A ratio's interval (candidate / baseline) as a speedup's (>1 is better), low end first."""
    if low is None or high is None or low <= 0 or high <= 0:
        return None
    return (1 / high, 1 / low) if direction == "lower" else (low, high)
