"""`perfagent compare`: what changed between two batch runs, per model and task by task."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.table import Table
from rich.text import Text

from agent.batch.summary import ModelSummary, TaskRow
from agent.review.load import Results

CHANGE_STYLE = {"new": "cyan", "gone": "magenta", "more correct": "green", "faster": "green",
                "fewer correct": "red", "slower": "red", "same": "dim", "not comparable": "yellow"}


@dataclass
class CompareRow:
    """One (task, model) across two runs; a side is None when that run lacks it."""

    task: str
    model: str
    a: TaskRow | None
    b: TaskRow | None
    verdicts_a: list[str]
    verdicts_b: list[str]

    @property
    def change(self) -> str:
        if not self.verdicts_a:
            return "new"
        if not self.verdicts_b:
            return "gone"
        if self.a is None or self.b is None:
            return "not comparable"  # one side has runs but no readable report
        ra, rb = self.a.correct / max(self.a.jobs, 1), self.b.correct / max(self.b.jobs, 1)
        if rb != ra:
            return "more correct" if rb > ra else "fewer correct"
        sa, sb = self.a.best_speedup, self.b.best_speedup
        if sa is not None and sb is not None and sa != sb:
            return "faster" if sb > sa else "slower"
        return "same"


def compare_results(a: Results, b: Results) -> list[CompareRow]:
    rows_a = {(t.task, t.model): t for t in a.summary.tasks}
    rows_b = {(t.task, t.model): t for t in b.summary.tasks}

    def verdicts(res: Results, task: str, model: str) -> list[str]:
        return [r.verdict for r in sorted(res.runs, key=lambda r: r.sample) if (r.task, r.model) == (task, model)]

    keys = set(rows_a) | set(rows_b) | {(r.task, r.model) for r in a.runs + b.runs}
    return [CompareRow(t, m, rows_a.get((t, m)), rows_b.get((t, m)), verdicts(a, t, m), verdicts(b, t, m))
            for t, m in sorted(keys)]


def _arrow(x: float | None, y: float | None, fmt: str, unit: str = "") -> str:
    """"a -> b (+delta)": the change of one number between two runs."""
    def f(v: float | None) -> str:
        return "-" if v is None else f"{unit}{v:{fmt}}"

    delta = "" if x is None or y is None or x == y else f" ({'+' if y > x else '-'}{unit}{abs(y - x):{fmt}})"
    return f"{f(x)} -> {f(y)}{delta}"


def _correct(x: TaskRow | ModelSummary | None, y: TaskRow | ModelSummary | None) -> str:
    """"correct/jobs -> correct/jobs"."""
    return f"{f'{x.correct}/{x.jobs}' if x else '-'} -> {f'{y.correct}/{y.jobs}' if y else '-'}"


def compare_table(a: Results, b: Results, rows: list[CompareRow]) -> Table:
    t = Table(title=f"{a.run_id} -> {b.run_id}", title_justify="left")
    for col in ("task", "model", "verdicts", "correct", "best speedup", "cost", "change"):
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(r.task, r.model, f"{', '.join(r.verdicts_a) or '-'} -> {', '.join(r.verdicts_b) or '-'}",
                  _correct(r.a, r.b),
                  _arrow(r.a.best_speedup if r.a else None, r.b.best_speedup if r.b else None, ".3f"),
                  _arrow(r.a.cost_usd if r.a else None, r.b.cost_usd if r.b else None, ".4f", "$"),
                  Text(r.change, style=CHANGE_STYLE.get(r.change, "")))
    return t


def model_compare_table(a: Results, b: Results) -> Table:
    ma = {m.model: m for m in a.summary.models}
    mb = {m.model: m for m in b.summary.models}
    t = Table(title="per model", title_justify="left")
    for col in ("model", "correct", "geomean speedup", "cost"):
        t.add_column(col)
    for model in sorted(set(ma) | set(mb)):
        x, y = ma.get(model), mb.get(model)
        t.add_row(model, _correct(x, y),
                  _arrow(x.geomean_speedup if x else None, y.geomean_speedup if y else None, ".3f"),
                  _arrow(x.cost_usd if x else None, y.cost_usd if y else None, ".4f", "$"))
    return t


def render_compare(console: Console, a: Results, b: Results) -> list[CompareRow]:
    rows = compare_results(a, b)
    console.print(model_compare_table(a, b))
    console.print(compare_table(a, b, rows))
    for res in (a, b):
        for r in res.runs:
            if r.problem:
                console.print(f"[red]{res.run_id}/{r.key}: {r.problem}[/]", highlight=False)
    return rows
