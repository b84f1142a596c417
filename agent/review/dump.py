"""`review --json` and `compare --json`: what the terminal views show, as JSON for scripts.

Built from the models the views already read (BatchSummary, ModelSummary, TaskRow, JobRecord, Report), so
the numbers are summary.json's. Each object carries a `schema` name; a field's meaning changes only with it.
"""

from __future__ import annotations

from typing import Any

from agent.results.summary import TaskRow
from agent.review.compare import CompareRow, compare_results
from agent.review.load import ReviewError, Results, RunView
from agent.review.rejections import rejections
from agent.review.rows import SortKey, run_outcome, sort_runs
from agent.review.terminal import select

__all__ = ["COMPARE_SCHEMA", "REVIEW_SCHEMA", "compare_json", "review_json", "run_json"]

REVIEW_SCHEMA = "perfagent.review/1"
COMPARE_SCHEMA = "perfagent.compare/1"


def review_json(results: Results, *, task: str | None = None, sort: SortKey = "job") -> dict[str, Any]:
    """The run list (and the batch's summary); a run's whole report.json when the terminal would show it in
    detail (`task` given, or a single run), null otherwise."""
    runs = sort_runs(select(results.runs, task), sort)
    if not runs:
        raise ReviewError(f"no run of task {task!r} in {results.run_dir}; tasks: "
                          + ", ".join(sorted({r.task for r in results.runs})))
    detail = task is not None or len(runs) == 1
    summary = results.summary.model_dump(mode="json", by_alias=True, exclude={"jobs"})
    return {"schema": REVIEW_SCHEMA, "run_id": results.run_id, "run_dir": str(results.run_dir),
            "is_batch": results.is_batch, "summary": summary, "runs": [run_json(r, detail=detail) for r in runs],
            "rejections": [r.to_json() for r in rejections(runs)]}


def run_json(run: RunView, *, detail: bool = False) -> dict[str, Any]:
    """One run: who, how it came out, the summary's record of it, its diffs, and (detail) its report."""
    return {"key": run.key, "task": run.task, "model": run.model, "sample": run.sample,
            "outcome": run_outcome(run), "verdict": run.verdict, "problem": run.problem,
            "pending": run.pending, "running": run.running,
            "speedup": run.speedup, "interval": list(run.interval) if run.interval else None,
            "cost_usd": run.cost_usd, "turns": run.turns,
            "record": run.record.model_dump(mode="json") if run.record else None,
            "patches": [{"path": str(p.path), "rejected": p.rejected, "size": p.size} for p in run.patches],
            "report": run.report.model_dump(mode="json") if detail and run.report else None}


def compare_json(a: Results, b: Results) -> dict[str, Any]:
    """Per model and per (task, model): each side's figures (a: the earlier run, b: the later) and the change."""
    ma = {m.model: m for m in a.summary.models}
    mb = {m.model: m for m in b.summary.models}
    models = [{"model": m,
               "a": ma[m].model_dump(mode="json") if m in ma else None,
               "b": mb[m].model_dump(mode="json") if m in mb else None} for m in sorted(set(ma) | set(mb))]
    problems = [{"run_id": res.run_id, "key": r.key, "problem": r.problem}
                for res in (a, b) for r in res.runs if r.problem]
    return {"schema": COMPARE_SCHEMA, "run_a": a.run_id, "run_b": b.run_id, "models": models,
            "tasks": [_row_json(r) for r in compare_results(a, b)], "problems": problems}


def _row_json(r: CompareRow) -> dict[str, Any]:
    return {"task": r.task, "model": r.model, "change": r.change, "speed": r.speed,
            "not_comparable": r.speed_why or r.opt_apart,  # why a change is no difference (the machine's conditions)
            "a": _side(r.a, r.runs_a, r.outcomes_a, r.subtypes_a, r.best_a),
            "b": _side(r.b, r.runs_b, r.outcomes_b, r.subtypes_b, r.best_b)}


def _side(row: TaskRow | None, runs: list[RunView], outcomes: list[str], subtypes: list[str],
          best: RunView | None) -> dict[str, Any]:
    """One run's side of a (task, model): its task row, each sample's outcome and ending, its best correct run."""
    return {"row": row.model_dump(mode="json") if row is not None else None,
            "jobs": [r.key for r in runs], "outcomes": outcomes, "subtypes": subtypes,
            "best": None if best is None else {"key": best.key, "speedup": best.speedup,
                                               "interval": list(best.interval) if best.interval else None}}
