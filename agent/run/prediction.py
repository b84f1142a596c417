"""One prediction graded: a patch another harness produced, checked as perfagent checks its own runs.

    workspace at the task's base -> the prediction's patch applied -> the full evaluation
    -> the change emitted if it passes, else kept in rejected.diff

No model runs, so nothing is metered: what producing the patch cost is unknown to us and the
report says so (its cost is null, not $0). An empty patch (or null) is `no-change` and text git cannot
read as a diff (prose, a header alone, a diff cut short) is `rejected`, both at once: no base check, no
workspace. A patch that does not apply to the base is `rejected` too. Each says git's reason; none is an
error of the harness.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Unpack

from agent.agents import PREDICTION
from agent.checks.patchinfo import changes_anything, unreadable
from agent.checks.grade import nothing_to_grade
from agent.checks.verdicts import Verdict
from agent.env.workspace import PatchError
from agent.interchange.predictions import Prediction
from agent.results.report import AgentRun, HarnessRun
from agent.run.exits import RunEnded
from agent.run.graded import Contestant, Emission, GradedRun, RunResult, Where, final_emission, graded_run
from agent.task import Task
from agent.util.text import first_line


class Graded(RunEnded):
    subtype = "success"


@dataclass
class PredictionContestant(Contestant):
    """A patch another harness produced, applied to the task's base and graded once."""

    prediction: Prediction

    @property
    def name(self) -> str:
        return self.prediction.model_name_or_path

    def prepare(self, run: GradedRun) -> None:
        run.outcome.cost_by_model = {self.name: None}  # what the patch cost to make is not ours to know

    def ungraded(self, run: GradedRun) -> Emission | None:
        patch = self.prediction.model_patch
        why = unreadable(patch)
        if why:
            why = f"the patch is not a diff git can read: {first_line(why)}"
            run.outcome.end(Graded(why))
            return Emission("", patch, nothing_to_grade(Verdict.REJECTED, why))
        if changes_anything(patch):
            return None
        run.outcome.end(Graded(f"graded the patch {self.name} predicted"))
        what = "is empty" if not patch.strip() else "changes only blank lines and trailing spaces"
        return Emission("", "", nothing_to_grade(Verdict.NO_CHANGE, f"the prediction's patch {what}"))

    def play(self, run: GradedRun) -> Emission:
        patch, ws = self.prediction.model_patch, run.ws
        assert ws is not None
        try:
            ws.apply_patch(patch)
            emission = final_emission(ws, run.candidates, run.outcome)
        except PatchError as e:
            why = f"the patch does not apply to the task's base: {first_line(str(e).removeprefix('error: '))}"
            run.outcome.end(Graded(why))
            return Emission("", patch, nothing_to_grade(Verdict.REJECTED, why))
        run.outcome.end(Graded(f"graded the patch {self.name} predicted"))
        return emission

    def salvage(self, run: GradedRun, signal_name: str) -> Emission:
        return Emission("", "", nothing_to_grade(Verdict.NO_CHANGE, run.outcome.result))

    def settle(self, run: GradedRun) -> dict[str, Any]:
        return {"agent": agent_run(self.prediction)}


def agent_run(prediction: Prediction) -> AgentRun:
    """Who made the patch, and what it said of it: an ISO-Bench run folder keeps the agent's own result (its last
    message as the claim, its cost as it reported it, never metered here)."""
    own = (prediction.model_extra or {}).get("agent_result") or {}
    run = AgentRun(name=PREDICTION, model=prediction.model_name_or_path, harness=_harness(prediction))
    if not isinstance(own, dict) or not own:
        return run
    cost = own.get("cost_usd")
    return run.model_copy(update={
        "claim": str(own.get("claim") or ""),
        "own_cost_usd": float(cost) if isinstance(cost, (int, float)) else None,
        "cost_note": f"self-reported by the agent ({own.get('file') or 'its result'}): not metered by perfagent"})


def _harness(prediction: Prediction) -> HarnessRun | None:
    """An ISO-Bench prediction's origin (its agent, model and item) and ISO-Bench's own hard metrics of it."""
    iso = (prediction.model_extra or {}).get("iso_bench")
    if not isinstance(iso, dict):
        return None
    hard = iso.get("hard") if isinstance(iso.get("hard"), dict) else {}
    return HarnessRun(name="iso-bench", agent=str(iso.get("agent") or ""), model=str(iso.get("model") or ""),
                      item=str(iso.get("item") or ""), metrics=hard)


def grade_prediction(task: Task, prediction: Prediction, **where: Unpack[Where]) -> RunResult:
    """Grade `prediction`'s patch on `task`; write report.json, checks.json and the diff as a run does
    (`where`: graded_run's, the grader seam included)."""
    return graded_run(task, PredictionContestant(prediction), **where)
