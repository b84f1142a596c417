"""What a batch achieved, per model and per task: pure functions over job records.

`summarize_run(run_dir)` reads a run's files (the ledger if there is one, and every
report.json, which is the source of truth) and hands them to `summarize`, which is pure,
so `perfagent review` / `report` can reuse it on any run folder.

Definitions (the ones the tables print):
- jobs: jobs that ran (done + failed); skipped and pending jobs are counted apart.
- failed: jobs that failed to run (no report, an interrupt, a provider's API failing), that
  ended in an error subtype (error_max_turns, error_max_budget, error_during_execution: a
  timeout, a crash, stopping without submitting), or whose patch could not be graded
  (verdict "error"). Any of them makes `perfagent batch` exit 1.
- correct: the final evaluation's verdict is "pass" and the run ended in success (an error
  subtype is never correct, whatever its last graded patch scored); faster: correct and the
  perf verdict is "faster" (significant, and the interval excludes 1).
- no change: the agent submitted nothing (an empty model_patch.diff, verdict "no-change"):
  neither correct nor failed.
- geomean speedup: over correct jobs that have a perf measurement.
- Opt@K (GSO's grader, gso/harness/grading/metrics.py): a task counts when one of its K
  samples is correct, at least 1.2x faster than the baseline (GSO's MIN_PROB_SPEEDUP: a
  patch that changes nothing cannot "match" a reference that gains little), and reaches at
  least 95% of the reference patch's speedup measured in the same interleaved rounds. Only
  tasks with a reference patch are in the denominator.
- fraction of reference ("of ref. gain"): mean of the checker's (s - 1) / (s_ref - 1) over
  faster jobs whose reference was significantly faster too (the checker gives the fraction
  only then); never recomputed here from point estimates.
- wall: the real time from the first job's start to the last job's end; "job time" is the
  sum of the jobs' times (with N workers, up to N times the wall).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field
from rich.table import Table

from agent.agents import join_spec
from agent.batch.ledger import JobRecord, Ledger, commands_seconds, figures_from_report, load_report
from agent.batch.plan import PLAN, Plan
from agent.models.base import Usage
from agent.run.result import Report
from agent.util.files import atomic_write

SCHEMA = "perfagent.batch-summary/3"  # 2: tokens are Usage's fields; 3: wall_s is real time, job_s the sum
OPT_THRESHOLD = 0.95  # share of the reference's speedup a sample must reach
OPT_MIN_SPEEDUP = 1.2  # and its own speedup over the baseline


# -- what a job came to (pure) -----------------------------------------------------------------
def errored(r: JobRecord) -> bool:
    """The job wrote its report but the run ended in an error subtype (max turns, budget, time, a crash)."""
    return r.status == "done" and bool(r.subtype) and r.subtype != "success"


def is_failure(r: JobRecord) -> bool:
    """Counts against the batch: failed to run, ended in an error subtype, or its patch could not be graded."""
    return r.status == "failed" or errored(r) or (r.status == "done" and r.verdict == "error")


def is_correct(r: JobRecord) -> bool:
    """A pass from a run that ended in success; an errored run's last graded patch does not count."""
    return r.correct and not errored(r)


def is_faster(r: JobRecord) -> bool:
    return is_correct(r) and r.perf_verdict == "faster"


def is_no_change(r: JobRecord) -> bool:
    """The agent submitted nothing (reverted its edits, or none passed): an empty patch, verdict no-change."""
    return r.status == "done" and r.verdict == "no-change"


def outcome(r: JobRecord) -> str:
    """A job in one word, the way every table shows it: failed | skipped | <error subtype> | no change | <verdict>.

    An error subtype wins over the verdict: a run that hit max turns is "error_max_turns" even
    when the patch it last passed grades "pass".
    """
    if r.status != "done":
        return r.status
    if errored(r):
        return str(r.subtype)
    if r.verdict == "no-change":
        return "no change"
    return r.verdict or "-"


def wall_span(records: Iterable[JobRecord]) -> float | None:
    """Real time from the first job's start to the last one's end (None when no job says when it ended)."""
    spans = [(r.finished_at - r.wall_s, r.finished_at) for r in records
             if r.status != "skipped" and r.finished_at > 0]
    if not spans:
        return None
    return max(0.0, max(end for _, end in spans) - min(start for start, _ in spans))


# -- statistics (pure) ----------------------------------------------------------------------
def geometric_mean(values: Iterable[float]) -> float | None:
    """Geometric mean of positive values; None for none. Speedups multiply, so they average this way."""
    vals = [v for v in values if v is not None and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def rate(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def reaches_reference(r: JobRecord, threshold: float = OPT_THRESHOLD, min_speedup: float = OPT_MIN_SPEEDUP) -> bool:
    """GSO's Opt criterion for one sample: correct, >= `min_speedup` over the baseline, and
    >= `threshold` of the reference's speedup. A point estimate the perf check could not back
    (inconclusive, no significant change) solves nothing."""
    if not is_correct(r) or r.speedup is None or r.reference_speedup is None:
        return False
    if r.perf_verdict in ("inconclusive", "no significant change"):
        return False
    return r.speedup >= min_speedup and r.speedup >= threshold * r.reference_speedup


def opt_at_k(by_task: dict[str, Sequence[JobRecord]], threshold: float = OPT_THRESHOLD,
             min_speedup: float = OPT_MIN_SPEEDUP) -> tuple[int, int]:
    """(tasks solved, tasks counted): a task with a reference counts once, solved if any sample reaches it."""
    counted = solved = 0
    for records in by_task.values():
        if not any(r.has_reference for r in records):
            continue
        counted += 1
        solved += any(reaches_reference(r, threshold, min_speedup) for r in records)
    return solved, counted


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


class BatchSummary(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    schema_: str = Field(default=SCHEMA, alias="schema")
    run_id: str
    generated_at: float
    samples: int  # K
    opt_threshold: float = OPT_THRESHOLD
    opt_min_speedup: float = OPT_MIN_SPEEDUP
    models: list[ModelSummary]
    tasks: list[TaskRow]
    jobs: list[JobRecord]
    wall_s: float | None = None  # real time over every job: the first one's start to the last one's end
    job_s: float = 0.0  # the jobs' times summed
    failed: int = 0  # jobs that count against the batch (`is_failure`): its exit code is 1 when any does
    elapsed_s: float | None = None  # this batch session's wall time (the driver's clock), when a batch wrote it
    jobs_run: int | None = None  # jobs that ran in that session
    jobs_per_minute: float | None = None

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2) + "\n"


def summarize(records: Sequence[JobRecord], *, run_id: str, samples: int | None = None,
              planned: Sequence[tuple[str, str]] = ()) -> BatchSummary:
    """The summary of a run from its job records (last state per job). `planned`: (key, model) of every job."""
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
    ran = [r for r in records if r.status != "skipped"]
    return BatchSummary(run_id=run_id, generated_at=time.time(), samples=k, models=models,
                        tasks=sorted(tasks, key=lambda t: (t.task, t.model)),
                        jobs=sorted(records, key=lambda r: r.key), wall_s=wall_span(ran),
                        job_s=sum(r.wall_s for r in ran), failed=sum(is_failure(r) for r in records))


def _group(records: Iterable[JobRecord], key) -> dict[Any, list[JobRecord]]:
    out: dict[Any, list[JobRecord]] = defaultdict(list)
    for r in records:
        out[key(r)].append(r)
    return out


def _model_summary(model: str, rs: list[JobRecord], k: int, pending: int) -> ModelSummary:
    ran = [r for r in rs if r.status != "skipped"]
    correct = [r for r in ran if is_correct(r)]
    speedups = [r.speedup for r in correct if r.speedup is not None]
    # the checker gives a fraction only when both speedups are significant; a job must be faster too
    fractions = [r.fraction_of_reference for r in ran if is_faster(r) and r.fraction_of_reference is not None]
    errors: dict[str, int] = defaultdict(int)
    for r in ran:
        if r.status == "done" and is_failure(r):
            errors[outcome(r) if errored(r) else "verdict error"] += 1
    solved, counted = opt_at_k(_group(ran, lambda r: r.task))
    known = [r.cost_usd for r in ran if r.cost_usd is not None]
    overhead = sum(r.overhead_s for r in ran)
    return ModelSummary(
        model=model, jobs=len(ran), done=sum(r.status == "done" for r in rs),
        failed=sum(r.status == "failed" for r in rs), skipped=sum(r.status == "skipped" for r in rs),
        pending=pending, errored=sum(errors.values()), errors=dict(errors),
        no_change=sum(is_no_change(r) and not is_failure(r) for r in ran),
        correct=len(correct), correct_rate=rate(len(correct), len(ran)),
        faster=sum(is_faster(r) for r in ran), faster_rate=rate(sum(is_faster(r) for r in ran), len(ran)),
        geomean_speedup=geometric_mean(speedups), speedup_jobs=len(speedups),
        opt_k=k, opt_solved=solved, opt_tasks=counted, opt_at_k=rate(solved, counted),
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
        outcomes[outcome(r)] += 1
    return TaskRow(task=task, model=model, jobs=len(ran), correct=sum(is_correct(r) for r in ran),
                   faster=sum(is_faster(r) for r in ran), outcomes=dict(outcomes),
                   best_speedup=max((r.speedup for r in ran if is_correct(r) and r.speedup is not None), default=None),
                   reference_speedup=refs[len(refs) // 2] if refs else None,
                   opt=any(reaches_reference(r) for r in ran) if has_ref else None,
                   cost_usd=sum(r.cost_usd or 0.0 for r in ran), statuses=dict(statuses))


# -- reading a run folder -----------------------------------------------------------------------
def load_records(run_dir: Path) -> list[JobRecord]:
    """The last state of every job in `run_dir`, with figures re-read from each report.json.

    Without a ledger (runs made one by one with `perfagent run --job`), every report.json
    under the run is a job; its folder `<task>/<model-slug>/s<k>` names it.
    """
    run_dir = Path(run_dir)
    out_dir = run_dir.parent.parent
    ledger = Ledger(run_dir)
    if ledger.path.is_file():
        records = list(ledger.latest().values())
    else:
        records = [_record_from_folder(run_dir, f) for f in sorted(run_dir.rglob("report.json"))]
    fresh = []
    for r in records:
        report = load_report(out_dir / r.report) if r.report else None
        if report is not None:
            r = r.model_copy(update={**figures_from_report(report),
                                     "commands_s": commands_seconds((out_dir / r.report).parent)})
        fresh.append(r)
    return fresh


def _record_from_folder(run_dir: Path, report_file: Path) -> JobRecord:
    key = report_file.parent.relative_to(run_dir).as_posix()
    parts = key.split("/")
    report = load_report(report_file)  # corrupt: a done job that graded nothing ("error")
    sampled = len(parts) == 3 and parts[2][:1] == "s" and parts[2][1:].isdigit()
    task, sample = parts[0], int(parts[2][1:]) if sampled else 0
    model = report_model(report, parts[1] if sampled else None)
    figures = figures_from_report(report) if report is not None else {"verdict": "error"}
    ev = report.evaluation if report is not None else None
    try:
        written = report_file.stat().st_mtime  # when the run ended: its report is its last word
    except OSError:
        written = 0.0
    return JobRecord(key=key, task=task, model=model, sample=sample, status="done",
                     has_reference=ev is not None and ev.reference is not None,
                     report=report_file.relative_to(run_dir.parent.parent).as_posix(), finished_at=written,
                     wall_s=report.duration_ms / 1000 if report is not None else 0.0,
                     commands_s=commands_seconds(report_file.parent), **figures)


def report_model(report: Report | None, folder: str | None = None) -> str:
    """Who ran a job that no ledger names: an external agent by its spec ("claude-code:claude-sonnet-4-5",
    which a folder slug would flatten into a model name), else the folder's model, else the report's first."""
    if report is not None and report.agent is not None:
        return join_spec(report.agent.name, report.agent.model)
    return folder or next(iter(report.modelUsage if report else ()), "unknown")


def summarize_run(run_dir: Path) -> BatchSummary:
    """Summary of the run folder `results/<run-id>`: reads the files, then `summarize`."""
    run_dir = Path(run_dir)
    plan = Plan.read(run_dir / PLAN)
    planned = [(j.key, j.model) for j in plan.jobs]
    return summarize(load_records(run_dir), run_id=run_dir.name, samples=plan.samples or None, planned=planned)


# -- rendering ------------------------------------------------------------------------------------
def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _x(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}x"


def _usd(x: float | None, unknown: int = 0) -> str:
    s = "-" if x is None else f"${x:.4f}"
    return s + (f" (+{unknown} unpriced)" if unknown else "")


def _secs(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.1f}s" if x < 120 else f"{x / 60:.1f}m"


def _tok(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


QUALITY_COLUMNS = ("model", "jobs", "correct", "faster", "no change", "failed", "geomean speedup", "Opt@K",
                   "of ref. gain")
SPEND_COLUMNS = ("model", "cost", "cost/job", "tokens", "wall", "job time", "overhead/job", "skipped/pending")
TASK_COLUMNS = ("task", "model", "jobs", "outcomes", "correct", "faster", "best speedup", "ref. speedup", "opt", "cost")


def _failed_cell(m: ModelSummary) -> str:
    """"2 (1 error_max_turns, 1 failed to run)": every job that counts against the batch, by why."""
    why = {**({"failed to run": m.failed} if m.failed else {}), **m.errors}
    n = m.failed + m.errored
    return f"{n} ({', '.join(f'{c} {k}' for k, c in sorted(why.items()))})" if n else "0"


def quality_rows(s: BatchSummary) -> list[tuple[str, ...]]:
    return [(m.model, str(m.jobs), f"{m.correct} ({_pct(m.correct_rate)})", f"{m.faster} ({_pct(m.faster_rate)})",
             str(m.no_change), _failed_cell(m),
             _x(m.geomean_speedup) + (f" (n={m.speedup_jobs})" if m.speedup_jobs else ""),
             f"{_pct(m.opt_at_k)} ({m.opt_solved}/{m.opt_tasks})" if m.opt_tasks else "-",
             _pct(m.fraction_of_reference) + (f" (n={m.fraction_jobs})" if m.fraction_jobs else ""))
            for m in s.models]


def spend_rows(s: BatchSummary) -> list[tuple[str, ...]]:
    return [(m.model, _usd(m.cost_usd, m.cost_unknown_jobs), _usd(m.cost_per_job), _tok(m.tokens.total),
             _secs(m.wall_s), _secs(m.job_s), _secs(m.overhead_per_job_s), f"{m.skipped}/{m.pending}")
            for m in s.models]


def task_rows(s: BatchSummary) -> list[tuple[str, ...]]:
    return [(t.task, t.model, str(t.jobs), _outcomes_cell(t), str(t.correct), str(t.faster), _x(t.best_speedup),
             _x(t.reference_speedup), "-" if t.opt is None else ("yes" if t.opt else "no"), _usd(t.cost_usd))
            for t in s.tasks]


def _outcomes_cell(t: TaskRow) -> str:
    """"1 pass, 1 error_max_turns": what each of the task's jobs came to (`outcome`)."""
    counts = t.outcomes or t.statuses  # a summary.json written before outcomes were kept
    return ", ".join(f"{n} {what}" for what, n in sorted(counts.items())) or "-"


def sections(s: BatchSummary) -> list[tuple[str, tuple[str, ...], list[tuple[str, ...]]]]:
    rate = f", {s.jobs_per_minute:.2f} jobs/min" if s.jobs_per_minute else ""
    times = f" (wall {_secs(s.wall_s)} from the first job's start to the last one's end; job time {_secs(s.job_s)})"
    return [(f"batch {s.run_id}: results per model (Opt@K with K={s.samples})", QUALITY_COLUMNS, quality_rows(s)),
            (f"batch {s.run_id}: spend per model{times if s.wall_s is not None else ''}{rate}", SPEND_COLUMNS,
             spend_rows(s)),
            ("per task", TASK_COLUMNS, task_rows(s))]


def summary_tables(s: BatchSummary) -> list[Table]:
    """The summary as rich tables: results per model, spend per model, one row per (task, model)."""
    tables = []
    for title, cols, rows in sections(s):
        t = Table(title=title)
        for c in cols:
            t.add_column(c, overflow="fold")
        for row in rows:
            t.add_row(*row)
        tables.append(t)
    return tables


def summary_markdown(s: BatchSummary) -> str:
    lines = [f"# batch {s.run_id}", "",
             f"Opt@K (as GSO grades it): a task counts when one of its K={s.samples} samples is correct, at least "
             f"{s.opt_min_speedup:g}x faster than the baseline, and reaches {s.opt_threshold:.0%} of the reference "
             "patch's speedup. \"failed\": jobs that did not finish, ended in an error subtype (max turns, budget, "
             "time, a crash) or could not be graded; an errored job is never correct. \"no change\": the agent "
             "submitted nothing. \"of ref. gain\": mean (s - 1) / (s_ref - 1) over jobs significantly faster whose "
             "reference was significantly faster too (n of them). \"wall\": first job start to last job end; "
             "\"job time\": the jobs' times summed. Overhead: job time outside model calls and the target's "
             "commands.", ""]
    for title, cols, rows in sections(s):
        lines += [f"## {title}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
        lines.append("")
    return "\n".join(lines)


def write_summary(run_dir: Path, s: BatchSummary) -> tuple[Path, Path]:
    """summary.json and summary.md beside the ledger, each written atomically."""
    js, md = Path(run_dir) / "summary.json", Path(run_dir) / "summary.md"
    atomic_write(js, s.to_json())
    atomic_write(md, summary_markdown(s))
    return js, md
