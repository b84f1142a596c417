"""What a batch achieved, per model and per task: `summarize`, pure, over job records.

`agent.results.load.summarize_run(run_dir)` reads a run's files and hands them here, for the
batch (summary.json) and for `perfagent review` / `report` / `compare` alike.

Definitions (the ones the tables print):
- jobs: jobs that ran (done + failed); skipped and pending jobs are counted apart.
- correct, faster, failed, no change and each job's outcome: JobRecord's properties
  (agent/results/record.py), the one definition of each. failed: did not run to a report, ended
  in an error subtype, or could not be graded; any of them makes `perfagent batch` exit 1. An
  errored job is never correct. no change: the agent submitted nothing, neither correct nor failed.
- geomean speedup: over correct jobs that have a perf measurement.
- Opt@K: GSO's, see agent/results/metrics.py.
- fraction of reference ("of ref. gain"): mean of the checker's (s - 1) / (s_ref - 1) over
  faster jobs whose reference was significantly faster too (the checker gives the fraction
  only then); never recomputed here from point estimates.
- wall: the real time from the first job's start to the last job's end; "job time" is the
  sum of the jobs' times (with N workers, up to N times the wall).
- outcome ids (`outcome_ids`): one SWE-bench run report per (contestant, sample), as SWE-bench lists a
  predictions file's instances: resolved (correct), error (`JobRecord.failure`), empty patch (no change),
  unresolved (any other graded job), incomplete (skipped, or planned and not yet run).
- margin over the baseline (the free `rules` contestant a batch adds): per task, a contestant's
  best correct speedup over the baseline's (a contestant with no correct change counts 1x: the
  code as it was), and its Opt minus the baseline's; per model, the geometric mean of the task
  ratios and the difference of the Opt@K rates over the tasks both ran.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agent.models.base import Usage
from agent.results.metrics import (OPT_MIN_SPEEDUP, OPT_THRESHOLD, geometric_mean, opt_at_k, opt_undecided, rate,
                                   reaches_reference, wall_span)
from agent.results.layout import split_key
from agent.results.record import JobRecord

SCHEMA = "perfagent.batch-summary/4"  # 2: tokens are Usage's fields; 3: wall_s is real time, job_s the sum;
# 4: outcome_ids


# -- the summary's shape ----------------------------------------------------------------------
class ModelSummary(BaseModel):
    model: str
    jobs: int  # done + failed
    done: int
    failed: int  # status "failed": no report, interrupted, the provider's API failed
    skipped: int
    pending: int
    errored: int = 0  # done, but the run ended in an error subtype (or its patch could not be graded)
    errors: dict[str, int] = {}  # those by subtype (or verdict "error")
    no_change: int = 0  # the agent submitted nothing: verdict no-change
    correct: int
    correct_rate: float | None
    faster: int
    faster_rate: float | None
    geomean_speedup: float | None  # over correct jobs with a perf measurement
    speedup_jobs: int  # how many jobs that mean is over
    opt_k: int
    opt_solved: int
    opt_tasks: int  # tasks with a reference patch
    opt_at_k: float | None
    opt_within_noise: int = 0  # of those tasks, where a correct sample's and the reference's intervals overlap
    fraction_of_reference: float | None  # over `fraction_jobs` significant results only
    fraction_jobs: int = 0
    cost_usd: float  # known costs only
    cost_unknown_jobs: int  # jobs whose model has no price
    cost_per_job: float | None
    tokens: Usage
    wall_s: float | None  # real time: the first job's start to the last one's end
    job_s: float = 0.0  # the jobs' times summed
    model_s: float
    commands_s: float
    overhead_s: float
    overhead_per_job_s: float | None
    vs_baseline: float | None = None  # geometric mean over tasks of the best speedup over the baseline's
    opt_vs_baseline: float | None = None  # Opt@K minus the baseline's, over the tasks both ran


class TaskRow(BaseModel):
    task: str
    model: str
    jobs: int
    correct: int
    faster: int
    best_speedup: float | None  # over correct samples
    reference_speedup: float | None  # median over the samples that measured it
    opt: bool | None  # None: the task has no reference
    cost_usd: float
    statuses: dict[str, int]
    outcomes: dict[str, int] = {}  # `outcome` of each job: pass, fail, no change, error_max_turns, failed, ...
    vs_baseline: float | None = None  # best speedup over the baseline's on this task (both 1x without a change)
    opt_vs_baseline: int | None = None  # Opt (0/1) minus the baseline's: -1, 0 or 1


class OutcomeIds(BaseModel):
    """One contestant's sample as SWE-bench's run report lists it: its task (instance) ids per outcome."""

    model: str
    sample: int
    resolved_ids: list[str] = []
    unresolved_ids: list[str] = []
    empty_patch_ids: list[str] = []
    error_ids: list[str] = []
    incomplete_ids: list[str] = []


class BatchSummary(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    schema_: str = Field(default=SCHEMA, alias="schema")
    run_id: str
    generated_at: float
    samples: int  # K
    opt_threshold: float = OPT_THRESHOLD
    opt_min_speedup: float = OPT_MIN_SPEEDUP
    baseline: str | None = None  # the contestant the margins are taken over
    models: list[ModelSummary]
    tasks: list[TaskRow]
    jobs: list[JobRecord]
    wall_s: float | None = None  # real time over every job: the first one's start to the last one's end
    job_s: float = 0.0  # the jobs' times summed
    failed: int = 0  # jobs that count against the batch (`JobRecord.failure`): its exit code is 1 when any does
    elapsed_s: float | None = None  # this batch session's wall time (the driver's clock), when a batch wrote it
    jobs_run: int | None = None  # jobs that ran in that session
    jobs_per_minute: float | None = None
    outcome_ids: list[OutcomeIds] = []  # per (contestant, sample), in that order

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2) + "\n"


def summarize(records: Sequence[JobRecord], *, run_id: str, samples: int | None = None,
              planned: Sequence[tuple[str, str]] = (), baseline: str | None = None) -> BatchSummary:
    """The summary of a run from its job records (last state per job). `planned`: (key, model) of every job;
    `baseline`: the contestant the others' margins are taken over."""
    k = samples or max((r.sample + 1 for r in records), default=1)
    by_model: dict[str, list[JobRecord]] = defaultdict(list)
    for r in records:
        by_model[r.model].append(r)
    seen = {r.key for r in records}
    pending: dict[str, int] = defaultdict(int)
    for key, model in planned:
        if key not in seen:
            pending[model] += 1
            by_model.setdefault(model, [])
    models = [_model_summary(m, rs, k, pending[m]) for m, rs in by_model.items()]
    tasks = [_task_row(t, m, rs) for (t, m), rs in _group(records, lambda r: (r.task, r.model)).items()]
    if baseline is not None and baseline in by_model:
        models, tasks = _margins(baseline, models, tasks, by_model)
    ran = [r for r in records if r.status != "skipped"]
    return BatchSummary(run_id=run_id, generated_at=time.time(), samples=k, models=models, baseline=baseline,
                        tasks=sorted(tasks, key=lambda t: (t.task, t.model)),
                        jobs=sorted(records, key=lambda r: r.key), wall_s=wall_span(ran),
                        job_s=sum(r.wall_s for r in ran), failed=sum(r.failure for r in records),
                        outcome_ids=outcome_ids(records, [(key, m) for key, m in planned if key not in seen]))


def outcome_ids(records: Iterable[JobRecord], pending: Iterable[tuple[str, str]] = ()) -> list[OutcomeIds]:
    """SWE-bench's id lists, one report per (contestant, sample); `pending`: (key, model) of jobs not yet run."""
    lists: dict[tuple[str, int], dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        lists[(r.model, r.sample)][_id_list(r)].append(r.task)
    for key, model in pending:
        k = split_key(key)
        lists[(model, k.sample)]["incomplete_ids"].append(k.task)
    return [OutcomeIds(model=m, sample=k, **{name: sorted(ids) for name, ids in got.items()})
            for (m, k), got in sorted(lists.items())]


def _id_list(r: JobRecord) -> str:
    """Which of SWE-bench's lists a job is in: an error wins over the rest, as it does in `outcome`."""
    if r.status == "skipped":
        return "incomplete_ids"
    if r.failure:
        return "error_ids"
    if r.correct:
        return "resolved_ids"
    return "empty_patch_ids" if r.no_change else "unresolved_ids"


def _margins(baseline: str, models: list[ModelSummary], tasks: list[TaskRow],
             by_model: dict[str, list[JobRecord]]) -> tuple[list[ModelSummary], list[TaskRow]]:
    """Every contestant's margin over `baseline`, per task and per model (see the module's definitions)."""
    base = {t.task: t for t in tasks if t.model == baseline}
    rows = []
    for t in tasks:
        b = base.get(t.task)
        if b is None or t.model == baseline or not t.jobs or not b.jobs:
            rows.append(t)
            continue
        measured = t.best_speedup is not None or b.best_speedup is not None or _measured(by_model, t, b)
        ratio = (t.best_speedup or 1.0) / (b.best_speedup or 1.0) if measured else None
        opt = int(t.opt) - int(b.opt) if t.opt is not None and b.opt is not None else None
        rows.append(t.model_copy(update={"vs_baseline": ratio, "opt_vs_baseline": opt}))
    out = []
    for m in models:
        mine = [r for r in rows if r.model == m.model and r.task in base and m.model != baseline]
        ratios = [r.vs_baseline for r in mine if r.vs_baseline is not None]
        opts = [r.opt_vs_baseline for r in mine if r.opt_vs_baseline is not None]
        out.append(m.model_copy(update={"vs_baseline": geometric_mean(ratios),
                                        "opt_vs_baseline": sum(opts) / len(opts) if opts else None}))
    return out, rows


def _measured(by_model: dict[str, list[JobRecord]], *rows: TaskRow) -> bool:
    """Whether any job of these (task, model) rows had its speed measured (a perf verdict)."""
    return any(r.perf_verdict is not None for t in rows for r in by_model.get(t.model, []) if r.task == t.task)


def _group(records: Iterable[JobRecord], key) -> dict[Any, list[JobRecord]]:
    out: dict[Any, list[JobRecord]] = defaultdict(list)
    for r in records:
        out[key(r)].append(r)
    return out


def _model_summary(model: str, rs: list[JobRecord], k: int, pending: int) -> ModelSummary:
    ran = [r for r in rs if r.status != "skipped"]
    correct = [r for r in ran if r.correct]
    speedups = [r.speedup for r in correct if r.speedup is not None]
    # the checker gives a fraction only when both speedups are significant; a job must be faster too
    fractions = [r.fraction_of_reference for r in ran if r.faster and r.fraction_of_reference is not None]
    errors: dict[str, int] = defaultdict(int)
    for r in ran:
        if r.status == "done" and r.failure:
            errors[r.outcome if r.errored else "verdict error"] += 1
    solved, counted = opt_at_k(_group(ran, lambda r: r.task))
    known = [r.cost_usd for r in ran if r.cost_usd is not None]
    overhead = sum(r.overhead_s for r in ran)
    return ModelSummary(
        model=model, jobs=len(ran), done=sum(r.status == "done" for r in rs),
        failed=sum(r.status == "failed" for r in rs), skipped=sum(r.status == "skipped" for r in rs),
        pending=pending, errored=sum(errors.values()), errors=dict(errors),
        no_change=sum(r.no_change and not r.failure for r in ran),
        correct=len(correct), correct_rate=rate(len(correct), len(ran)),
        faster=sum(r.faster for r in ran), faster_rate=rate(sum(r.faster for r in ran), len(ran)),
        geomean_speedup=geometric_mean(speedups), speedup_jobs=len(speedups),
        opt_k=k, opt_solved=solved, opt_tasks=counted, opt_at_k=rate(solved, counted),
        opt_within_noise=opt_undecided(_group(ran, lambda r: r.task)),
        fraction_of_reference=sum(fractions) / len(fractions) if fractions else None, fraction_jobs=len(fractions),
        cost_usd=sum(known), cost_unknown_jobs=len(ran) - len(known),
        cost_per_job=sum(known) / len(known) if known else None,
        tokens=sum((r.tokens for r in ran), Usage()),
        wall_s=wall_span(ran), job_s=sum(r.wall_s for r in ran), model_s=sum(r.model_s for r in ran),
        commands_s=sum(r.commands_s for r in ran), overhead_s=overhead,
        overhead_per_job_s=overhead / len(ran) if ran else None)


def _task_row(task: str, model: str, rs: list[JobRecord]) -> TaskRow:
    ran = [r for r in rs if r.status != "skipped"]
    refs = sorted(r.reference_speedup for r in ran if r.reference_speedup is not None)
    has_ref = any(r.has_reference for r in rs)
    statuses: dict[str, int] = defaultdict(int)
    outcomes: dict[str, int] = defaultdict(int)
    for r in rs:
        statuses[r.status] += 1
        outcomes[r.outcome] += 1
    return TaskRow(task=task, model=model, jobs=len(ran), correct=sum(r.correct for r in ran),
                   faster=sum(r.faster for r in ran), outcomes=dict(outcomes),
                   best_speedup=max((r.speedup for r in ran if r.correct and r.speedup is not None), default=None),
                   reference_speedup=refs[len(refs) // 2] if refs else None,
                   opt=any(reaches_reference(r) for r in ran) if has_ref else None,
                   cost_usd=sum(r.cost_usd or 0.0 for r in ran), statuses=dict(statuses))
