"""One prediction graded: a patch another harness produced, checked as perfagent checks its own runs.

    workspace at the task's base -> the prediction's patch applied -> the full evaluation
    -> the change emitted if it passes, else kept in rejected.diff

No model runs, so nothing is metered: what producing the patch cost is unknown to us and the
report says so (its cost is null, not $0). An empty patch is `no-change`; a patch that does not
apply to the base is `rejected`, with git's reason; neither is an error of the harness.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from agent.agents import PREDICTION
from agent.checks import Checker, Evaluation, TaskBroken
from agent.checks.patchinfo import changes_anything
from agent.env.workspace import PatchError, Workspace
from agent.results.predictions import Prediction
from agent.results.report import AgentRun
from agent.run.exits import RunEnded, TaskUncheckable, as_interrupted
from agent.run.loop import Outcome
from agent.run.runner import Candidates, Emission, RunPaths, RunResult, final_emission, isolation_warnings, report_of
from agent.task import Task
from agent.util.text import first_line

class Graded(RunEnded):
    subtype = "success"


def grade_prediction(
    task: Task,
    prediction: Prediction,
    *,
    out_dir: Path,
    run_id: str,
    job: str | None = None,
    lock_dir: Path | None = None,
    keep_workspace: bool = False,
    on_event: Callable[[str, dict], None] = lambda kind, data: None,
) -> RunResult:
    """Grade `prediction`'s patch on `task`; write report.json, checks.json and the diff as a run does."""
    paths = RunPaths.of(out_dir, run_id, job or task.id)
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f"perfagent-{task.id}-"))
    checker = Checker(task, work / "checks", lock_dir=lock_dir, log=lambda m: on_event("log", {"message": m}))
    candidates = Candidates(checker, paths.checks, on_event)
    name = prediction.model_name_or_path
    outcome = Outcome(cost_by_model={name: None})  # what the patch cost to make is not ours to know
    patch = prediction.model_patch
    try:
        try:
            checker.check_base()
            ws = Workspace.create(task.repo, task.spec.base, work / "workspace")
            if not changes_anything(patch):
                emission = Emission("", "", Evaluation(verdict="no-change", note="the prediction's patch is empty"))
            else:
                ws.apply_patch(patch)
                emission = final_emission(ws, candidates, outcome)
            outcome.end(Graded(f"graded the patch {name} predicted"))
        except PatchError as e:
            why = f"the patch does not apply to the task's base: {first_line(str(e).removeprefix('error: '))}"
            outcome.end(Graded(why))
            emission = Emission("", patch, Evaluation(verdict="rejected", note=why))
        except TaskBroken as e:
            outcome.end(TaskUncheckable(str(e)))
            emission = Emission("", "", Evaluation(verdict="error", error=str(e)))
        except KeyboardInterrupt as e:
            outcome.end(as_interrupted(e))
            emission = Emission("", "", Evaluation(verdict="no-change", note=outcome.result))
        outcome.duration_s = time.monotonic() - start
        outcome.warnings += isolation_warnings()
        emission.evaluation = emission.evaluation.model_copy(update={"warnings": outcome.warnings})
        report = report_of(outcome, session_id=str(uuid.uuid4()), evaluation=emission.evaluation,
                           permission_denials=[], left_out=emission.left_out)
        report = report.model_copy(update={"agent": AgentRun(name=PREDICTION, model=name)})
        emission.write(paths)
        report.write(paths.report)
    finally:
        try:
            checker.close()
        finally:
            if not keep_workspace:
                shutil.rmtree(work, ignore_errors=True)
    return RunResult(report, paths, outcome)
