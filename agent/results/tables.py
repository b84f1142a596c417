"""The summary as tables: rows for the terminal (rich), summary.md and the HTML report, from one
`sections`, so every view prints the same cells; and summary.json / summary.md written together."""

from __future__ import annotations

from pathlib import Path

from agent.results.summary import BatchSummary, ModelSummary, TaskRow
from agent.util.files import atomic_write
from agent.util.fit import Column, FitTable
from agent.util.text import markup_safe


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _x(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}x"


def _usd(x: float | None, unknown: int = 0, jobs: int | None = None) -> str:
    """A cost; one no job had a price for reads "unpriced", never $0.0000 beside the count of unpriced jobs."""
    if unknown and jobs is not None and unknown >= jobs:
        return "unpriced"
    s = "-" if x is None else f"${x:.4f}"
    return s + (f" (+{unknown} unpriced)" if unknown else "")


def _unpriced(s: BatchSummary, t: TaskRow) -> int:
    """The task's jobs for this model that ran with no known cost (a prediction, a model with no price)."""
    return sum(r.task == t.task and r.model == t.model and r.status != "skipped" and r.cost_usd is None for r in s.jobs)


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
             f"{_pct(m.opt_at_k)} ({m.opt_solved}/{m.opt_tasks}"
             + (f"; {m.opt_within_noise} within noise)" if m.opt_within_noise else ")") if m.opt_tasks else "-",
             _pct(m.fraction_of_reference) + (f" (n={m.fraction_jobs})" if m.fraction_jobs else ""))
            for m in s.models]


def spend_rows(s: BatchSummary) -> list[tuple[str, ...]]:
    return [(m.model, _usd(m.cost_usd, m.cost_unknown_jobs, m.jobs),
             "unpriced" if m.cost_per_job is None and m.cost_unknown_jobs else _usd(m.cost_per_job),
             _tok(m.tokens.total),
             _secs(m.wall_s), _secs(m.job_s), _secs(m.overhead_per_job_s), f"{m.skipped}/{m.pending}")
            for m in s.models]


def task_rows(s: BatchSummary) -> list[tuple[str, ...]]:
    return [(t.task, t.model, str(t.jobs), _outcomes_cell(t), str(t.correct), str(t.faster), _x(t.best_speedup),
             _x(t.reference_speedup), "-" if t.opt is None else ("yes" if t.opt else "no"),
             _usd(t.cost_usd, _unpriced(s, t), t.jobs))
            for t in s.tasks]


def _margin_cell(ratio: float | None, opt: float | None, baseline: bool) -> str:
    """"1.52x, Opt +1": the speedup ratio over the baseline and the Opt difference; "baseline" on its own row."""
    if baseline:
        return "baseline"
    parts = [] if ratio is None else [f"{ratio:.3g}x"]
    parts += [] if opt is None else [f"Opt {opt:+.2g}"]
    return ", ".join(parts) or "-"


def _with_margins(s: BatchSummary, cols: tuple[str, ...], rows: list[tuple[str, ...]],
                  of: list[ModelSummary] | list[TaskRow]) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The columns and rows with a "vs <baseline>" column, when the batch had a baseline."""
    if s.baseline is None:
        return cols, rows
    cells = [_margin_cell(x.vs_baseline, x.opt_vs_baseline, x.model == s.baseline) for x in of]
    return (*cols, f"vs {s.baseline}"), [(*row, cell) for row, cell in zip(rows, cells)]


def _outcomes_cell(t: TaskRow) -> str:
    """"1 pass, 1 error_max_turns": what each of the task's jobs came to (`outcome`)."""
    counts = t.outcomes or t.statuses  # a summary.json written before outcomes were kept
    return ", ".join(f"{n} {what}" for what, n in sorted(counts.items())) or "-"


def sections(s: BatchSummary) -> list[tuple[str, tuple[str, ...], list[tuple[str, ...]]]]:
    rate = f", {s.jobs_per_minute:.2f} jobs/min" if s.jobs_per_minute else ""
    times = f" (wall {_secs(s.wall_s)} from the first job's start to the last one's end; job time {_secs(s.job_s)})"
    return [(f"batch {s.run_id}: results per model (Opt@K with K={s.samples})",
             *_with_margins(s, QUALITY_COLUMNS, quality_rows(s), s.models)),
            (f"batch {s.run_id}: spend per model{times if s.wall_s is not None else ''}{rate}", SPEND_COLUMNS,
             spend_rows(s)),
            ("per task", *_with_margins(s, TASK_COLUMNS, task_rows(s), s.tasks))]


# In a terminal too narrow for a whole table, the columns left out first (higher sooner); the rest always show.
NARROW_DROP: dict[tuple[str, ...], dict[str, int]] = {
    QUALITY_COLUMNS: {"jobs": 6, "no change": 5, "of ref. gain": 4, "failed": 3, "geomean speedup": 2},
    SPEND_COLUMNS: {"skipped/pending": 7, "overhead/job": 6, "job time": 5, "tokens": 4, "cost/job": 3, "wall": 2},
    TASK_COLUMNS: {"jobs": 9, "correct": 8, "faster": 7, "ref. speedup": 6, "cost": 5, "opt": 4}}


def summary_tables(s: BatchSummary) -> list[FitTable]:
    """The summary as tables that fit the terminal (`agent.util.fit`): results per model, spend per model, one row
    per (task, model). A cell holds names from a ledger that may come from elsewhere: markup-escaped, its control
    sequences stripped."""
    tables = []
    for title, cols, rows in sections(s):
        drop = next(d for base, d in NARROW_DROP.items() if cols[:len(base)] == base)
        columns = [Column(markup_safe(c), drop=drop.get(c, 1 if c.startswith("vs ") else 0)) for c in cols]
        tables.append(FitTable(columns, [tuple(map(markup_safe, row)) for row in rows], title=markup_safe(title)))
    return tables


def summary_markdown(s: BatchSummary) -> str:
    lines = [f"# batch {s.run_id}", "",
             f"Opt@K (as GSO grades it): a task counts when one of its K={s.samples} samples is correct, at least "
             f"{s.opt_min_speedup:g}x faster than the baseline, and reaches {s.opt_threshold:.0%} of the reference "
             "patch's speedup; \"within noise\": tasks where a correct sample's speedup interval and "
             f"{s.opt_threshold:.0%} of the reference's overlap, so their Opt decision could go either way. "
             "\"failed\": jobs that did not finish, ended in an error subtype (max turns, budget, "
             "time, a crash) or could not be graded; an errored job is never correct. \"no change\": the agent "
             "submitted nothing. \"of ref. gain\": mean (s - 1) / (s_ref - 1) over jobs significantly faster whose "
             "reference was significantly faster too (n of them). \"wall\": first job start to last job end; "
             "\"job time\": the jobs' times summed. Overhead: job time outside model calls and the target's "
             "commands." + (f" \"vs {s.baseline}\": the best correct speedup over {s.baseline}'s (no correct change "
                            "counts 1x), per task and as a geometric mean over tasks, and the Opt difference."
                            if s.baseline else ""), ""]
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
