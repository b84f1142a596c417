"""Per agent and model, what the checks made of the patches another harness produced (ISO-Bench's run folders,
graded by `check --predictions`): how many were graded, how many rejected with evidence and of which kind, beside
that harness's own figures (its hard metrics, the agent's self-reported cost), which are theirs, never checked.

A kind is read off the grading itself: the rules of `agent.checks.grade` that spoke (their words are among the
recorded reasons), each rule mapped to the kind of evidence it is. A patch counts once among the rejected and
once under each kind its grading shows, so the kinds may add up to more than the rejected.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum

from agent.checks.grade import (CARRIED, FINAL, RULES, Rule, allocated_only_in_bench, bench_fails_poisoned,
                                bench_reads_before_writes, changed_lines_unrun, device_reads, no_torch,
                                poisoned_tests_fail, proof_skipped_by_the_bench, proof_written_only_at_the_tests_sizes,
                                read_sites_unrun, reads_before_writes, setup_fails, tests_fail)
from agent.checks.evaluation import Evaluation
from agent.checks.evidence import Evidence
from agent.checks.verdicts import Verdict
from agent.results.report import HarnessRun
from agent.review.load import RunView
from agent.review.rows import fmt_usd
from agent.task import TaskSpec

__all__ = ["COLUMNS", "Kind", "Rejections", "kinds_of", "rejections", "table"]


class Kind(str, Enum):
    """The kind of evidence a patch was rejected with."""

    UNINITIALISED = "uninitialised read"  # poisoned tests or bench, the sanitizer, initcheck: a read before a write
    TESTS = "tests"  # the tests (or the setup they need) fail on the patch as it is
    DIVERGENCE = "bench vs tests"  # the bench runs what no test checks: coverage, read sites, the bench check
    OTHER = "other"  # refused before it ran, did not apply, a slower or refuted gain, unwatched memory, ...

    def __str__(self) -> str:
        return str(self.value)


KIND_OF_RULE: dict[Rule, Kind] = {
    setup_fails: Kind.TESTS,
    tests_fail: Kind.TESTS,
    poisoned_tests_fail: Kind.UNINITIALISED,
    reads_before_writes: Kind.UNINITIALISED,
    bench_reads_before_writes: Kind.UNINITIALISED,
    device_reads: Kind.UNINITIALISED,
    changed_lines_unrun: Kind.DIVERGENCE,
    allocated_only_in_bench: Kind.DIVERGENCE,
    read_sites_unrun: Kind.DIVERGENCE,
    proof_skipped_by_the_bench: Kind.DIVERGENCE,
    proof_written_only_at_the_tests_sizes: Kind.DIVERGENCE,
}


def _bench_check(e: Evidence) -> Kind | None:
    """The bench failing under the tests' instruments: a read of poisoned memory where poison could act; else the
    bench seeing what the tests did not, unless the tests failed too (then it adds no kind of its own)."""
    if not no_torch(e):
        return Kind.UNINITIALISED
    c = e.correctness
    return None if c is not None and not c.plain.passed else Kind.DIVERGENCE


# rules whose kind depends on what else the grading saw
KIND_BY_EVIDENCE: dict[Rule, Callable[[Evidence], Kind | None]] = {bench_fails_poisoned: _bench_check}
# a patch the checks turned down, each with the reasons that say why
REJECTED = frozenset({Verdict.FAIL, Verdict.UNVERIFIED, Verdict.REJECTED})
# nothing was graded: the task could not be checked, or the run never reached a grading
NOT_GRADED = frozenset({Verdict.ERROR})
# the rules mapped above read the evidence only, never the task
_NO_SPEC = TaskSpec.model_validate({"id": "any", "repo": ".", "prompt": "-", "correctness": {"command": "-"}})


def kinds_of(evaluation: Evaluation) -> list[Kind]:
    """The kinds of evidence a rejected patch's grading shows, in the rules' order; [Kind.OTHER] when none of the
    mapped rules spoke; [] for a patch not rejected."""
    if evaluation.verdict not in REJECTED:
        return []
    evidence = Evidence(**{name: getattr(evaluation, name) for name in CARRIED}, perf=evaluation.perf,
                        integrity=evaluation.integrity)
    reasons = set(evaluation.reasons)
    found = [kind for level, rule in RULES if (kind := _kind(rule, evidence)) is not None
             and (evaluation.verdict not in FINAL or level in FINAL)  # as grade: a failure is not argued further
             and reasons.intersection(rule(evidence, _NO_SPEC))]
    return list(dict.fromkeys(found)) or [Kind.OTHER]


def _kind(rule: Rule, evidence: Evidence) -> Kind | None:
    by_evidence = KIND_BY_EVIDENCE.get(rule)
    return by_evidence(evidence) if by_evidence is not None else KIND_OF_RULE.get(rule)


@dataclass
class HarnessFigures:
    """What the harness measured of the same patches itself (ISO-Bench's `evaluation`): as it said it."""

    items: int = 0  # patches it kept a measurement for
    statuses: dict[str, int] = field(default_factory=dict)  # "success": 3, "baseline_failed": 1
    speedups: list[float] = field(default_factory=list)
    improved: int = 0  # its own `improvement: true`
    errors: list[str] = field(default_factory=list)  # its errors, each once

    @property
    def speedup_geomean(self) -> float | None:
        return math.exp(sum(map(math.log, self.speedups)) / len(self.speedups)) if self.speedups else None

    def add(self, harness: HarnessRun) -> None:
        m = harness.metrics
        if not m:
            return
        self.items += 1
        status = m.get("status")
        if isinstance(status, str):
            self.statuses[status] = self.statuses.get(status, 0) + 1
        speedup = m.get("speedup")
        if isinstance(speedup, float) and speedup > 0:
            self.speedups.append(speedup)
        self.improved += m.get("improvement") is True
        error = m.get("error")
        if isinstance(error, str) and error not in self.errors:
            self.errors.append(error)

    def words(self) -> str:
        """One line: "baseline_failed 1 (No module named 'IPython')", "success 2, speedup 1.31x (geomean), ..."."""
        if not self.items:
            return "-"
        parts = [", ".join(f"{s} {n}" for s, n in sorted(self.statuses.items()))]
        if self.speedups:
            parts.append(f"speedup {self.speedup_geomean:.2f}x (geomean of {len(self.speedups)})")
            parts.append(f"improved {self.improved}")
        if self.errors:
            parts.append("; ".join(self.errors[:2]) + (f" and {len(self.errors) - 2} more" if len(self.errors) > 2
                                                          else ""))
        return ", ".join(p for p in parts if p)


@dataclass
class Rejections:
    """One agent and model: its patches, what the checks made of them, and its harness's own figures."""

    harness: str
    agent: str
    model: str
    patches: int = 0
    graded: int = 0
    passed: int = 0
    rejected: int = 0
    kinds: dict[Kind, int] = field(default_factory=lambda: dict.fromkeys(Kind, 0))
    not_graded: int = 0  # the task could not be checked, skipped (a GPU task on a CPU), or the job failed
    own_cost_usd: float | None = None  # the agents' own figures, summed: self-reported, not metered
    figures: HarnessFigures = field(default_factory=HarnessFigures)

    def to_json(self) -> dict:
        return {"harness": self.harness, "agent": self.agent, "model": self.model, "patches": self.patches,
                "graded": self.graded, "passed": self.passed, "rejected": self.rejected,
                "kinds": {str(k): n for k, n in self.kinds.items()}, "not_graded": self.not_graded,
                "own_cost_usd": self.own_cost_usd, "own_cost": "self-reported",
                "harness_metrics": {"items": self.figures.items, "statuses": self.figures.statuses,
                                    "speedup_geomean": self.figures.speedup_geomean,
                                    "speedups": self.figures.speedups, "improved": self.figures.improved,
                                    "errors": self.figures.errors}}


def rejections(runs: Iterable[RunView]) -> list[Rejections]:
    """Per (harness, agent, model), over the jobs that graded another harness's patch; [] when there is none."""
    rows: dict[tuple[str, str, str], Rejections] = {}
    for run in runs:
        agent = run.agent
        h = agent.harness if agent is not None else None
        if agent is None or h is None:
            continue
        who = h.agent or agent.model.partition(":")[0]
        model = h.model or agent.model.partition(":")[2] or agent.model
        row = rows.setdefault((h.name, who, model), Rejections(h.name, who, model))
        row.patches += 1
        row.figures.add(h)
        if agent.own_cost_usd is not None:
            row.own_cost_usd = (row.own_cost_usd or 0.0) + agent.own_cost_usd
        ev = run.evaluation
        status = run.record.status if run.record is not None else "done"
        if ev is None or status != "done" or ev.verdict in NOT_GRADED:
            row.not_graded += 1
            continue
        row.graded += 1
        row.passed += ev.verdict == Verdict.PASS
        kinds = kinds_of(ev)
        if kinds:
            row.rejected += 1
            for kind in kinds:
                row.kinds[kind] += 1
    return sorted(rows.values(), key=lambda r: (r.harness, r.agent, r.model))


COLUMNS = ("agent", "model", "graded", "rejected", *(str(k) for k in Kind), "not graded", "self-reported cost",
           "its own metrics")


def table(rows: list[Rejections]) -> tuple[str, tuple[str, ...], list[tuple[str, ...]]]:
    """(title, COLUMNS, one row of words per agent and model): the terminal's table and the page's, from one place.
    Every cell is plain text as the harness wrote it: the caller escapes it for where it goes."""
    title = f"patches rejected with evidence, per agent and model ({', '.join(sorted({r.harness for r in rows}))})"
    return title, COLUMNS, [
        (r.agent, r.model, str(r.graded), str(r.rejected), *(str(r.kinds[k]) for k in Kind), str(r.not_graded),
         "-" if r.own_cost_usd is None else f"{fmt_usd(r.own_cost_usd)} (self-reported)", r.figures.words())
        for r in rows]
