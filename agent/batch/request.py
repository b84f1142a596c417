"""A run over a task set as the command asks for it (`batch`, `check SET --predictions`), made into a batch:
the contestants checked, the free baseline beside them, and a resumed batch's own choices kept (its plan's
subset, options, baseline and predictions: `--resume` continues the run it names, never a different one)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agent.agents import OWN_AGENT, PREDICTION, join_spec, make_agent, split_spec
from agent.errors import BadInput
from agent.interchange.predictions import Prediction, read_predictions
from agent.options import RunOptions
from agent.results.layout import graded_predictions, run_folder
from agent.results.plan import Plan, Subset, read_plan

if TYPE_CHECKING:
    from agent.batch.driver import BatchOutcome

BASELINE = "rules"  # the free contestant a batch adds beside the others: what a $0 search finds


@dataclass(frozen=True)
class SetRequest:
    """The flags of a run over a task set (each named as its flag)."""

    out: str = "."
    run_id: str | None = None
    resume: bool = False
    workers: int = 2
    gpus: str | None = None  # local executor: "0,1"
    executor: str = "local"
    job_timeout: float | None = None
    quiet: bool = False
    no_baseline: bool = False
    filter: str | None = None
    tasks: str | None = None  # "ID,ID"
    shuffle: bool = False
    seed: int | None = None
    slice: str | None = None
    options: RunOptions = RunOptions()


def started(req: SetRequest) -> tuple[str, Plan]:
    """(run id, its plan so far: empty unless --resume)."""
    from agent.run.names import check_run_id, new_run_id

    if req.resume and not req.run_id:
        raise BadInput("--resume needs the --run-id of the batch to continue")
    run_id = check_run_id(req.run_id) if req.run_id is not None else new_run_id()
    return run_id, read_plan(run_folder(Path(req.out).resolve(), run_id)) if req.resume else Plan()


def contestants(models: str | None, pairs: list[list[str]]) -> list[str]:
    """The specs `--models` and the `--agent A --model M` pairs name, each checked before anything is planned:
    a typo in the last is found now."""
    from agent.run.model_spec import check_spec

    given = [m.strip() for m in models.split(",") if m.strip()] if models is not None else []
    if models is not None and not given:
        raise BadInput(f"--models {models!r} names no model: give comma-separated specs, or leave it out")
    given += [contestant_spec(agent, model) for agent, model in pairs]
    for spec in given:
        agent, model = split_spec(spec)
        if agent == PREDICTION:
            raise BadInput(f"{spec}: predictions are graded with perfagent check SET --predictions FILE")
        if agent == OWN_AGENT:
            check_spec(model)  # an external agent's name is known (split_spec) and takes any model
    return given


def contestant_spec(agent: str, model: str) -> str:
    """One batch spec for `--agent A [--model M]`: an agent with no model gets its default one."""
    if agent == OWN_AGENT:
        return model or "rules"
    return join_spec(agent, model or make_agent(agent).model)


def subset(req: SetRequest, plan: Plan) -> Subset | None:
    """The subset the flags ask for; a resumed batch keeps the one it chose."""
    tasks = [t.strip() for t in req.tasks.split(",") if t.strip()] if req.tasks is not None else None
    asked = Subset(filter=req.filter, tasks=tasks, shuffle=req.shuffle, seed=req.seed, slice=req.slice)
    if req.resume:
        if asked != Subset(seed=req.seed):
            raise BadInput("--resume runs the tasks the batch chose when it started: drop --filter, --tasks, "
                           "--shuffle and --slice")
        return plan.subset
    return asked if asked != Subset(seed=req.seed) else None


def run_set(req: SetRequest, run_id: str, plan: Plan, *, source: str | None, models: list[str], samples: int,
            predictions: list[Prediction] | None = None, prediction_files: list[str] | None = None) -> BatchOutcome:
    """The batch over the chosen tasks of a set, with the free baseline beside the contestants unless
    --no-baseline (a resumed one keeps its own); its outcome (`failed`: the jobs that count against it)."""
    from agent.batch.driver import BatchConfig, load_tasks, run_batch
    from agent.batch.subset import choose
    from agent.run.entry import require_sandbox

    if not source:
        raise BadInput("name a task set: a task-set file or a directory of tasks")
    baseline = plan.baseline if req.resume else None if req.no_baseline else BASELINE
    models = list(dict.fromkeys([*models, *([baseline] if baseline and not req.resume else [])]))
    if predictions is None and plan.predictions:  # a resumed `check --predictions`: the patches it read then
        predictions = read_predictions([graded_predictions(run_folder(Path(req.out).resolve(), run_id))])
    opts = plan.options if req.options == RunOptions() else req.options  # no run flag given: a resumed batch's own
    require_sandbox(models, opts.allow_unsandboxed)
    every = load_tasks(source)
    chosen = subset(req, plan)
    tasks, chosen = choose(every, chosen) if chosen is not None else (every, None)
    cfg = BatchConfig(run_id=run_id, out_dir=Path(req.out), workers=req.workers, executor=req.executor,
                      gpus=[g.strip() for g in req.gpus.split(",") if g.strip()] if req.gpus else None,
                      resume=req.resume, job_timeout_s=req.job_timeout, quiet=req.quiet,
                      source=str(Path(source).resolve()), options=opts, subset=chosen, baseline=baseline,
                      predictions=predictions or [], prediction_files=prediction_files or plan.predictions,
                      left_out=frozenset(t.id for t in every) - {t.id for t in tasks})
    return run_batch(tasks, models, samples, cfg)
