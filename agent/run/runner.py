"""Our loop as a contestant: a task, a model, one sample. Workspace -> loop -> final checks -> the outputs.

The agent is told of the files left out of each grading (`Workspace.candidate`); what it ended with is
emitted only if it passes (run/graded.py owns the emission, the salvage on interrupt and report.json).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agent.checks import Checker, Evaluation, summarize
from agent.checks.verdicts import Verdict
from agent.env.candidate import LeftOut, with_left_out
from agent.env.sandbox import SandboxSpec, base_env
from agent.models.base import Model
from agent.models.pricing import PriceTable
from agent.options import Limits
from agent.results.report import PermissionDenial, PolicyRecord
from agent.run.graded import Contestant, Emission, GradedRun, RunResult, final_emission, graded_run
from agent.run.loop import run_loop
from agent.run.model_spec import make_model
from agent.run.tools import Toolbox, ToolResult
from agent.task import Task


@runtime_checkable
class OfflinePolicy(Protocol):
    """A scripted policy (agent.policies): its decisions as a record, and told what the run's full check of
    its change decided (its summary anew, or None)."""

    record: PolicyRecord | None

    def judged(self, final: Evaluation) -> str | None: ...


@dataclass
class OurLoop(Contestant):
    """The model at our tools: it grades with `run_checks` (quick) and `submit` (full) as it goes."""

    model: Model
    limits: Limits
    prices: PriceTable
    tools: Toolbox | None = None

    def play(self, run: GradedRun) -> Emission | None:
        ws, task = run.ws, run.task
        assert ws is not None

        def grade(full: bool, perf: bool = True) -> tuple[Evaluation, list[LeftOut]]:
            cand = ws.candidate()
            return run.candidates.grade(cand, full=full, perf=perf), cand.left_out

        def run_checks_tool(perf: bool) -> ToolResult:
            ev, left_out = grade(full=False, perf=perf)
            return ToolResult(with_left_out(summarize(ev), left_out),
                              data={"evaluation": ev.model_dump(mode="json"),
                                    "evidence": run.candidates.evidence[-1].model_dump(mode="json")})

        def grade_submission() -> tuple[bool, str]:
            try:
                ev, left_out = grade(full=True)
            except Exception as e:  # noqa: BLE001 — reported to the model, never fatal
                return False, f"the checks could not run: {type(e).__name__}: {e}"
            # submitting no change is an answer too ("nothing here is worth changing"), not a failed submission
            return ev.verdict in (Verdict.PASS, Verdict.NO_CHANGE), with_left_out(summarize(ev), left_out)

        self.tools = Toolbox(ws, protected=list(task.spec.protected), run_checks=run_checks_tool,
                             command_timeout_s=min(600.0, self.limits.timeout_s),
                             env=base_env(bin_dir=run.checker.bin_dir()), sandbox=SandboxSpec.for_task(task))
        run.outcome = run_loop(task, self.model, self.tools, limits=self.limits, prices=self.prices,
                               grade_submission=grade_submission, trajectory=run.trajectory, on_event=run.on_event)
        if run.outcome.interrupted is not None:
            return None
        emission = final_emission(ws, run.candidates, run.outcome)
        if not isinstance(self.model, OfflinePolicy):
            return emission
        # an offline policy emits only what its full evaluation finds faster; it tells what that decided
        told = self.model.judged(emission.evaluation)
        if told is not None:
            run.outcome.result = told
        return emission.judged_on_speed(task.file)

    def interrupted(self, run: GradedRun) -> None:
        run.trajectory.add("interrupted", turn=run.outcome.num_turns, signal=run.outcome.interrupted)

    def settle(self, run: GradedRun) -> dict[str, Any]:
        return {"permission_denials": [PermissionDenial.model_validate(d) for d in self.tools.denials]
                if self.tools else [], "policy": policy_record(self.model)}


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
    return graded_run(task, OurLoop(model, limits or Limits.of(task), prices), out_dir=out_dir, run_id=run_id,
                      job=job, lock_dir=lock_dir, keep_workspace=keep_workspace, on_event=on_event, checker=checker)


def policy_record(model: Model) -> PolicyRecord | None:
    """An offline policy's decisions as it left them (the rules policy's `record`); None for a chat model."""
    return model.record if isinstance(model, OfflinePolicy) else None
