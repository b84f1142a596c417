"""What one run's records add up to for the page: where its time went (over every grading in
checks.json) and the offline policy's edits (report.json's `policy` records). Numbers and rows
only; charts.py draws them."""

from __future__ import annotations

from dataclasses import dataclass

from agent.checks.evaluation import Evaluation
from agent.review.load import RunView
from agent.review.rows import printable
from agent.results.checks_log import every_grading, read_checks
from agent.results.report import EditDecision

TIME_PARTS = (("model", "model (API calls)"), ("tests", "tests (plain + poisoned)"), ("perf", "perf sampling"),
              ("lock", "perf lock waits"), ("checks", "other check work (setup, coverage, patching)"),
              ("other", "other (agent loop, tools, start-up)"))


@dataclass
class TimePart:
    key: str
    label: str
    seconds: float


@dataclass
class Timeline:
    parts: list[TimePart]
    total_s: float
    reported_s: float  # report.json's duration_ms
    gradings: int
    full: int


def graded(run: RunView) -> list[tuple[bool, Evaluation]]:
    """Every grading of the run, (full?, evaluation): checks.json's readable ones, and the report's when an older
    runner made it after the loop (agent.results.checks_log's rule)."""
    return [(g.full, g.evaluation) for g in every_grading(read_checks(run.dir), run.report) if g.evaluation]


def timeline(run: RunView) -> Timeline | None:
    """Where the run's time went: model calls, tests, perf sampling, lock waits, other checks, the rest."""
    rep = run.report
    if rep is None or run.problem:
        return None
    gradings = graded(run)
    secs = dict.fromkeys((k for k, _ in TIME_PARTS), 0.0)
    secs["model"] = rep.duration_api_ms / 1000
    for _, ev in gradings:
        c = ev.correctness
        runs = [r.duration_s for r in (c.plain, c.poison) if r is not None] if c is not None else []
        tests = (max(runs) if not ev.environment.gpu else sum(runs)) if runs else 0.0  # in parallel on a CPU
        perf = ev.perf.duration_s if ev.perf is not None else 0.0
        lock = ev.perf.lock_wait_s if ev.perf is not None else 0.0
        secs["tests"] += tests
        secs["perf"] += perf
        secs["lock"] += lock
        secs["checks"] += max(0.0, ev.duration_s - tests - perf - lock)
    reported = rep.duration_ms / 1000
    counted = sum(secs.values())
    secs["other"] = max(0.0, reported - counted)
    total = max(reported, counted)
    if total <= 0:
        return None
    return Timeline([TimePart(k, label, secs[k]) for k, label in TIME_PARTS], total, reported, len(gradings),
                    sum(1 for f, _ in gradings if f))


@dataclass
class EditTable:
    """The offline policy's edits as it recorded them, in file order."""

    policy: str  # its name, e.g. "rules"
    outcome: str  # its headline, its words
    reverted: bool  # it took its kept edits back (nothing emitted)
    rows: list[EditDecision]

    @property
    def kept(self) -> int:
        return sum(r.kept for r in self.rows)

    @property
    def rejected(self) -> int:
        return len(self.rows) - self.kept


def edit_table(run: RunView) -> EditTable | None:
    """report.json's `policy` records; None for a chat model's run, or a report older than the records."""
    policy = run.report.policy if run.report is not None else None
    if policy is None:
        return None
    clean = {"path", "rewrite", "evidence", "test", "hazard", "reason"}  # the policy's words, shown as text
    rows = [d.model_copy(update={k: printable(getattr(d, k)) for k in clean}) for d in policy.decisions]
    rows.sort(key=lambda r: (r.path, r.line))
    return EditTable(printable(policy.name), printable(policy.outcome), policy.reverted, rows)
