"""`perfagent compare`: what changed between two batch runs, per model and task by task.

A change of speed is claimed only when the evidence says so: each side's best correct run
carries its speedup's rerun interval (where another run of it is expected:
agent.checks.stats.rerun_interval), and "faster" or "slower" needs each side's figure outside the
other's; otherwise it is "no clear difference". Two runs of one patch were called apart so 0.8% of
the time, where disjoint 95% intervals, which leave out the other run's noise, called 2.4%
(252 pairs, tests/bench/bench_reproducibility.py). Reports from before the rerun interval compare
by their 95% intervals, disjoint. A side without an interval (or measured inconclusively) makes it
"inconclusive". How each
run ended (its report's subtype) is shown on both sides, and a change in failures is named.

Two figures measured under different conditions (either on a busy machine, or at CPU or GPU clocks
apart: agent.checks.conditions) are never called different: a run's interval describes its own
noise, not how far its figure moves when the machine is shared. Such a change of speed, or of a
task's Opt decision, is "not comparable", with why beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Console
from rich.text import Text

from agent.checks.conditions import comparable
from agent.checks.verdicts import PerfVerdict, Verdict
from agent.results.summary import ModelSummary, TaskRow
from agent.review.load import Results, RunView
from agent.review.rows import fmt_speedup, run_outcome
from agent.util.fit import Column, FitTable
from agent.util.text import markup_safe, strip_controls

CHANGE_STYLE = {"new": "cyan", "gone": "magenta", "more correct": "green", "faster": "green",
                "fewer correct": "red", "slower": "red", "same": "dim", "not comparable": "yellow",
                "fewer failures": "green", "more failures": "red", "no clear difference": "dim",
                "inconclusive": "yellow"}


def conditions_apart(a: RunView | None, b: RunView | None) -> str | None:
    """Why the figures of runs `a` and `b` cannot be compared (agent.checks.conditions); None when they can."""
    if a is None or b is None or a.perf is None or b.perf is None:
        return None
    ok, why = comparable(a.perf.conditions, b.perf.conditions, ("a", "b"))
    return None if ok else why


def _runs_apart(runs_a: list[RunView], runs_b: list[RunView]) -> str | None:
    """The first reason any measured run of one side cannot be compared with one of the other."""
    return next((why for ra in runs_a for rb in runs_b if (why := conditions_apart(ra, rb))), None)


def speed_change(a: RunView | None, b: RunView | None) -> str | None:
    """faster | slower (each figure outside the other's rerun interval, or older reports' 95% intervals
    disjoint, under like conditions) | not comparable (so, but measured under different conditions) |
    no clear difference | inconclusive; None when a side has no speedup to compare."""
    if a is None or b is None or a.speedup is None or b.speedup is None:
        return None
    ia, ib = a.interval, b.interval
    if ia is None or ib is None:
        return "inconclusive"
    ra, rb = a.rerun, b.rerun
    if ra is not None and rb is not None:
        up, down = b.speedup > ra[1] and a.speedup < rb[0], b.speedup < ra[0] and a.speedup > rb[1]
    else:
        up, down = ib[0] > ia[1], ib[1] < ia[0]
    if (up or down) and conditions_apart(a, b):
        return "not comparable"
    if up:
        return "faster"
    if down:
        return "slower"
    if PerfVerdict.INCONCLUSIVE in (a.perf.verdict if a.perf else None, b.perf.verdict if b.perf else None):
        return "inconclusive"
    return "no clear difference"


@dataclass
class CompareRow:
    """One (task, model) across two runs; a side is None when that run lacks it."""

    task: str
    model: str
    a: TaskRow | None
    b: TaskRow | None
    verdicts_a: list[str]
    verdicts_b: list[str]
    runs_a: list[RunView] = field(default_factory=list)  # by sample
    runs_b: list[RunView] = field(default_factory=list)

    @property
    def outcomes_a(self) -> list[str]:
        return [run_outcome(r) for r in self.runs_a]

    @property
    def outcomes_b(self) -> list[str]:
        return [run_outcome(r) for r in self.runs_b]

    @property
    def subtypes_a(self) -> list[str]:
        return [_subtype(r) for r in self.runs_a]

    @property
    def subtypes_b(self) -> list[str]:
        return [_subtype(r) for r in self.runs_b]

    @property
    def best_a(self) -> RunView | None:
        return _best(self.runs_a)

    @property
    def best_b(self) -> RunView | None:
        return _best(self.runs_b)

    @property
    def speed(self) -> str | None:
        return speed_change(self.best_a, self.best_b)

    @property
    def speed_why(self) -> str | None:
        """Why the best speedups are not compared, when they are not."""
        return conditions_apart(self.best_a, self.best_b) if self.speed == "not comparable" else None

    @property
    def opt_apart(self) -> str | None:
        """Why a change of the task's Opt decision is no difference: its runs were measured under different
        conditions. None when it did not change, or the runs compare."""
        if self.a is None or self.b is None or self.a.opt is None or self.b.opt is None or self.a.opt == self.b.opt:
            return None
        return _runs_apart(self.runs_a, self.runs_b)

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
        fa, fb = _failures(self.runs_a), _failures(self.runs_b)
        if fa != fb:
            return "more failures" if fb > fa else "fewer failures"
        speed = self.speed
        if speed is not None:
            return speed
        return "same"


def _subtype(run: RunView) -> str:
    """How the run ended (its report's subtype), or what stands in for it."""
    if run.report is not None:
        return run.report.subtype
    return run.verdict  # failed, skipped, pending, missing / corrupt report


def _best(runs: list[RunView]) -> RunView | None:
    """The correct run with the best speedup: the one the task row's "best speedup" is."""
    ok = [r for r in runs if run_outcome(r) == Verdict.PASS and r.speedup is not None]
    return max(ok, key=lambda r: r.speedup or 0.0, default=None)


def _failures(runs: list[RunView]) -> int:
    return sum(1 for r in runs if r.record is not None and r.record.failure)


def compare_results(a: Results, b: Results) -> list[CompareRow]:
    rows_a = {(t.task, t.model): t for t in a.summary.tasks}
    rows_b = {(t.task, t.model): t for t in b.summary.tasks}

    def runs(res: Results, task: str, model: str) -> list[RunView]:
        return [r for r in sorted(res.runs, key=lambda r: r.sample) if (r.task, r.model) == (task, model)]

    keys = set(rows_a) | set(rows_b) | {(r.task, r.model) for r in a.runs + b.runs}
    return [CompareRow(t, m, rows_a.get((t, m)), rows_b.get((t, m)), [r.verdict for r in runs(a, t, m)],
                       [r.verdict for r in runs(b, t, m)], runs(a, t, m), runs(b, t, m))
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


def _pair(x: list[str], y: list[str], *, collapse: bool = False) -> str:
    """"pass, fail -> pass, pass", sample by sample; `collapse`: a side of one repeated word is written once."""
    def side(v: list[str]) -> str:
        if not v:
            return "-"
        return f"{v[0]} (all {len(v)})" if collapse and len(v) > 1 and len(set(v)) == 1 else ", ".join(v)

    return f"{side(x)} -> {side(y)}"


def _speedups(r: CompareRow) -> str:
    """Each side's best correct speedup with its 95% interval: the evidence behind faster / slower."""
    def side(run: RunView | None) -> str:
        return "-" if run is None else fmt_speedup(run)

    return f"{side(r.best_a)} -> {side(r.best_b)}"


def _opt(r: CompareRow) -> str:
    """"yes -> no", and when the runs were measured under different conditions, that it is no difference."""
    def side(t: TaskRow | None) -> str:
        return "-" if t is None or t.opt is None else "yes" if t.opt else "no"

    why = r.opt_apart
    return f"{side(r.a)} -> {side(r.b)}" + (f" (not comparable: {why})" if why else "")


def _change(r: CompareRow) -> str:
    why = r.speed_why if r.change == "not comparable" else None
    return r.change + (f": {why}" if why else "")


CAPTION = ("faster / slower: each run's speedup lies outside where a rerun of the other is expected (older reports: "
           "the two 95% intervals do not overlap); otherwise no clear difference (or "
           "inconclusive, when a side's measurement could not tell); not comparable: measured under different "
           "conditions (a busy machine, clocks apart), named beside it")
# what a narrow terminal leaves out first (higher `drop`); the task, the speedups and the change stay
TASK_COLUMNS = [Column("task", long_words=True), Column("model", long_words=True, drop=1), Column("outcomes", drop=3),
                Column("ended", drop=4), Column("correct", drop=2), Column("best speedup [95% CI]"),
                Column("Opt", drop=2), Column("cost", drop=3), Column("change", long_words=True)]


def compare_table(a: Results, b: Results, rows: list[CompareRow]) -> FitTable:
    t = FitTable(TASK_COLUMNS, title=markup_safe(f"{a.run_id} -> {b.run_id}"))
    for r in rows:
        # names and outcomes from two ledgers made elsewhere: markup escaped, control sequences stripped
        t.add_row(markup_safe(r.task), markup_safe(r.model), markup_safe(_pair(r.outcomes_a, r.outcomes_b)),
                  Text(strip_controls(_pair(r.subtypes_a, r.subtypes_b, collapse=True)),
                       style="" if r.subtypes_a == r.subtypes_b else "yellow"),
                  _correct(r.a, r.b), _speedups(r), _opt(r),
                  _arrow(r.a.cost_usd if r.a else None, r.b.cost_usd if r.b else None, ".4f", "$"),
                  Text(_change(r), style=CHANGE_STYLE.get(r.change, "")))
    return t


def opt_at_k_change(model: str, x: ModelSummary | None, y: ModelSummary | None, rows: list[CompareRow]) -> str:
    """"50% -> 100%"; when tasks whose Opt decision changed were measured under different conditions, how
    many: those changes are no difference (`CompareRow.opt_apart`)."""
    def side(m: ModelSummary | None) -> str:
        return "-" if m is None or m.opt_at_k is None else f"{m.opt_at_k:.0%} ({m.opt_solved}/{m.opt_tasks})"

    apart = sum(1 for r in rows if r.model == model and r.opt_apart)
    tasks = "1 task's" if apart == 1 else f"{apart} tasks'"
    return f"{side(x)} -> {side(y)}" + (f"; {tasks} Opt changed under different conditions: not comparable"
                                        if apart else "")


def model_compare_table(a: Results, b: Results, rows: list[CompareRow] | None = None) -> FitTable:
    ma = {m.model: m for m in a.summary.models}
    mb = {m.model: m for m in b.summary.models}
    rows = compare_results(a, b) if rows is None else rows
    t = FitTable([Column("model", long_words=True), Column("correct", drop=1), Column("failed", drop=2),
                  Column("geomean speedup (no interval: see the tasks)"), Column("Opt@K", long_words=True),
                  Column("cost", drop=3)], title="per model")
    for model in sorted(set(ma) | set(mb)):
        x, y = ma.get(model), mb.get(model)
        t.add_row(markup_safe(model), _correct(x, y), _failed(x, y),
                  f"{_x(x.geomean_speedup if x else None)} -> {_x(y.geomean_speedup if y else None)}",
                  opt_at_k_change(model, x, y, rows),
                  _arrow(x.cost_usd if x else None, y.cost_usd if y else None, ".4f", "$"))
    return t


def _failed(x: ModelSummary | None, y: ModelSummary | None) -> str:
    """Jobs that failed or ended in an error subtype, on each side."""
    def side(m: ModelSummary | None) -> str:
        return "-" if m is None else f"{m.failed + m.errored}/{m.jobs}"

    return f"{side(x)} -> {side(y)}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}x"


def render_compare(console: Console, a: Results, b: Results) -> list[CompareRow]:
    rows = compare_results(a, b)
    console.print(model_compare_table(a, b, rows))
    console.print(compare_table(a, b, rows))
    console.print(CAPTION, highlight=False, style="dim")
    for res in (a, b):
        for r in res.runs:
            if r.problem:
                console.print(f"[red]{markup_safe(f'{res.run_id}/{r.key}: {r.problem}')}[/]", highlight=False)
    return rows
