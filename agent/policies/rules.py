"""`rules`: the offline policy. Real work with no API key, through the same tools as an LLM.

It reads the focus files, proposes the analyzers' zeros -> empty rewrites, and lets the
checks decide. Evidence first: an edit whose buffer the sanitizer saw read before it was
written, whose read sites no test runs, or whose own line coverage saw no test run, is rejected by
name from the check that found it (never checked again on its own); a batch that fails without
naming its culprit is split until every rejected edit is isolated with the failure it caused.
What survives is submitted, and emitted only if the run's full check finds it faster. It reads the checks' structured
evaluation (run_checks' tool result `data`), never their text, and leaves its decisions as
records (`record`, report.json's `policy`) beside its summary text. The policy is written as a
generator: each `yield` is one turn (a list of tool calls, as an LLM may make several at once)
and receives their results, so the trajectory reads like any other agent's.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any, Generator

from agent.analyzers import Finding, analyze_source, apply_rewrites
from agent.analyzers.findings import ZERO_INIT
from agent.checks.evaluation import Evaluation
from agent.checks.evidence import Evidence
from agent.checks.render import blame, perf_line
from agent.checks.verdicts import PerfVerdict, Verdict
from agent.util.globs import matches_any
from agent.models.base import Reply, ToolCall, Usage
from agent.results.report import EditDecision, PolicyRecord
from agent.task import Task

RULES_MODEL_ID = "rules"
_NUMBERED = re.compile(r"^\s*(\d+)  ?(.*)$")
_READ_ON = re.compile(r"^\[.* call read_file with start=(\d+) to continue\]$", re.M)  # read_file's last line


@dataclass(frozen=True)
class ToolOutput:
    content: str
    is_error: bool
    data: dict[str, Any] | None = None  # the tool's structured result (run_checks: {"evaluation": ...})


@dataclass
class Decision:
    finding: Finding
    kept: bool
    reason: str
    evidence: str  # the check that decided (EditDecision.evidence)
    test: str = ""

    def record(self) -> EditDecision:
        f = self.finding
        return EditDecision(path=f.path, line=f.line, rewrite=f.key.split("::")[-1], kept=self.kept,
                            evidence=self.evidence, test=self.test, hazard=self.hazard, reason=self.reason)

    @property
    def hazard(self) -> str:
        """What the analyzers suspected, said beside what the checks found when they caught the edit."""
        return (self.finding.hazard or "") if not self.kept else ""


@dataclass
class Caught:
    """The evidence against one edit: which check, the test (if one), in words."""

    evidence: str
    reason: str
    test: str = ""


@dataclass
class CheckAnswer:
    passed: bool
    failure: str  # the first failing test, else the failing mode or the first reason
    # "path:line" of an allocation -> the evidence against making it uninitialised (a read before any
    # write, or a read site no test runs): names the culprit without splitting the group.
    blamed: dict[str, Caught] = field(default_factory=dict)
    sanitized: bool = False  # the sanitizer watched the poisoned run
    evidence: str = "other"  # the check that failed first
    test: str = ""  # its failing test, when a test failed
    # "path:line" of changed lines coverage recorded as never run by a test run that passed: an edit
    # there can never be verified, so it is dropped at once, not checked again on its own.
    unrun: frozenset[str] = frozenset()


def read_checks(result: ToolOutput) -> CheckAnswer:
    """What a run_checks result means to the policy: the verdict from its evaluation, the culprits from
    its evidence (never its text). Speed is not its to read: the run's full check measures what it keeps."""
    data = result.data or {}
    if data.get("evaluation") is None:  # the checks could not run at all
        return CheckAnswer(False, result.content.strip()[:200])
    ev = Evaluation.model_validate(data["evaluation"])
    evidence = Evidence.model_validate(data["evidence"]) if data.get("evidence") is not None else None
    first = _first_failure(ev)
    return CheckAnswer(ev.verdict == Verdict.PASS, first.reason, _blamed(evidence) if evidence else {},
                        ev.sanitizer is not None and ev.sanitizer.measured, first.evidence, first.test,
                        _unrun(ev))


def _unrun(ev: Evaluation) -> frozenset[str]:
    """The changed lines no test ran, where that is known: coverage measured on a plain run that passed
    (one that stopped early leaves lines unrun that a whole run would reach)."""
    c, cov = ev.correctness, ev.coverage
    if c is None or not c.plain.passed or cov is None or not cov.measured:
        return frozenset()
    return frozenset(cov.uncovered)


def _blamed(e: Evidence) -> dict[str, Caught]:
    """blame()'s culprits with the check that named each: the sanitizer's reads, else an unrun read site."""
    read = {r.buffer: r for r in e.sanitizer.reads} if e.sanitizer is not None else {}
    return {buf: Caught("sanitizer", why, (read[buf].tests or [""])[0]) if buf in read
            else Caught("read site not run", why) for buf, why in blame(e).items()}


def _first_failure(ev: Evaluation) -> Caught:
    """The first failing test, else the mode that failed (a test run, coverage, integrity, ...)."""
    c = ev.correctness
    runs = [(c.plain, "tests", "tests"), (c.poison, "poisoned tests", "tests with poisoned memory")] if c else []
    for run, evidence, mode in runs:
        if run is not None and not run.passed:
            test = run.failing_tests[0] if run.failing_tests else ""
            why = f": {run.first_error}" if run.first_error else ""
            return Caught(evidence, test or f"{mode} fail (exit {run.exit_code}{why})", test)
    return Caught(_failed_check(ev), ev.reasons[0] if ev.reasons else f"verdict: {ev.verdict}")


def _failed_check(ev: Evaluation) -> str:
    """The check behind the evaluation's first reason, in the order the checker gives its reasons."""
    cov, san = ev.coverage, ev.sanitizer
    for check, failed in (("integrity", ev.integrity.refused), ("protected paths", ev.protected_violations),
                          ("setup", ev.setup is not None and not ev.setup.passed),
                          ("sanitizer", san is not None and san.reads),
                          ("initcheck", ev.initcheck is not None and ev.initcheck.reads),
                          ("coverage", cov is not None and (cov.uncovered or not cov.measured)),
                          ("sanitizer", san is not None and not san.measured),
                          ("read site not run", any(not s.executed for s in ev.read_sites))):
        if failed:
            return check
    return "other"


Script = Generator[list[ToolCall], list[ToolOutput], str]


class RulesPolicy:
    """A deterministic policy behind the Model protocol; costs nothing. Its search ends by itself
    (at most a few checks per candidate), so the turn budget, meant for chat models, does not cut it."""

    scripted = True

    def __init__(self, task: Task):
        self.task = task
        self.name = "rules"
        self._ids = itertools.count(1)
        self._script = self._run()
        self._started = False
        self.record: PolicyRecord | None = None  # its decisions, once it has made them
        self._kept: tuple[list[Decision], list[Finding], int] | None = None  # what `judged` tells of, once kept

    # -- the Model protocol ---------------------------------------------------------------
    def complete(self, system: str, messages: list[dict], tools: list[dict]) -> Reply:
        try:
            calls = next(self._script) if not self._started else self._script.send(_last_results(messages))
        except StopIteration as stop:  # the script is over: nothing more to do
            return Reply(stop.value or "", [], Usage(), 0.0, RULES_MODEL_ID, "end_turn", {})
        self._started = True
        return Reply("", calls, Usage(), 0.0, RULES_MODEL_ID, "tool_use", {"policy": "rules"})

    def _call(self, name: str, **args) -> ToolCall:
        return ToolCall(f"rules_{next(self._ids)}", name, args)

    # -- the script -----------------------------------------------------------------------
    def _run(self) -> Script:
        (listing,) = yield [self._call("list_files", path=".")]
        sources = yield from self._read(self._files(listing.content))
        findings = [f for path, src in sources.items() for f in analyze_source(src, path)]
        candidates = [f for f in findings if f.rule == ZERO_INIT and f.fixable]
        others = [f for f in findings if f.rule != ZERO_INIT]
        if not candidates:
            summary = self._summary([], others, "no rewrite the analyzers can propose safely here; no change made")
            yield [self._call("submit", summary=summary)]
            return summary

        decisions: list[Decision] = []
        state = dict(sources)  # what the workspace holds now, per file
        lines: dict[str, frozenset[str]] = {}  # each edit's changed lines, worked out once a check names unrun ones

        def caught(e: Finding, verdict: CheckAnswer) -> Caught | None:
            """The evidence a check holds against one edit: a culprit it names, or a line of it no test ran."""
            named = verdict.blamed.get(f"{e.path}:{e.line}")
            if named is not None or not verdict.unrun:
                return named
            if not lines:  # a parse of each file (on a loaded machine, seconds): only when coverage needs it
                lines.update(_changed_at(sources, candidates))
            unrun = sorted(lines[e.key] & verdict.unrun)
            return Caught("coverage", f"never executed: no test runs {', '.join(unrun)}") if unrun else None

        def apply(subset: list[Finding]) -> Script:
            """One turn: write the files that change, then run the checks."""
            writes = []
            for path, original in sources.items():
                new = apply_rewrites(original, [f for f in subset if f.path == path])
                if new != state[path]:
                    writes.append(self._call("write_file", path=path, content=new))
                    state[path] = new
            results = yield [*writes, self._call("run_checks", perf=False)]
            verdict = read_checks(results[-1])
            if verdict.passed:
                sanitized["yes"] = sanitized["yes"] and verdict.sanitized
            return verdict

        tally = {"failed": 0, "settled": 0}  # edits rejected / edits decided so far
        sanitized = {"yes": True}  # every passing check so far was watched by the sanitizer

        def search(edits: list[Finding], kept: list[Finding], failed: CheckAnswer | None = None) -> Script:
            """Largest passing subset of `edits` on top of `kept`, by adaptive group testing: halve a
            failing group while failures are rare, test its edits one by one once they are common
            (then halving costs more checks than it saves). `failed`: this very set already failed."""
            if not edits:
                return []
            verdict = failed
            if verdict is None:
                verdict = yield from apply(kept + edits)
                if verdict.passed:
                    tally["settled"] += len(edits)
                    return edits
            blamed = {e.key: why for e in edits if (why := caught(e, verdict)) is not None}
            if blamed:  # the evidence names them (or never saw them run): reject those, test the rest again
                for e in edits:
                    if e.key in blamed:
                        why = blamed[e.key]
                        decisions.append(Decision(e, False, why.reason, why.evidence, why.test))
                tally["failed"] += len(blamed)
                tally["settled"] += len(blamed)
                return (yield from search([e for e in edits if e.key not in blamed], kept))
            if len(edits) == 1:
                tally["failed"] += 1
                tally["settled"] += 1
                decisions.append(Decision(edits[0], False, f"fails the checks: {verdict.failure}", verdict.evidence,
                                          verdict.test))
                return []
            if tally["settled"] >= 2 and tally["failed"] * 2 >= tally["settled"]:
                good: list[Finding] = []
                for e in edits:
                    good += yield from search([e], kept + good)
                return good
            half = len(edits) // 2
            left = yield from search(edits[:half], kept)
            # a failing group whose left half passed holds its culprit on the right: no need to test it whole
            right = yield from search(edits[half:], kept + left, failed=verdict if len(left) == half else None)
            return left + right

        kept = yield from search(candidates, [])
        evidence = ("no read before a write (sanitizer) and every read site run; passes the poisoned tests"
                    if sanitized["yes"] else "passes the poisoned tests")
        decisions += [Decision(f, True, evidence, "sanitizer" if sanitized["yes"] else "poisoned tests") for f in kept]

        if not kept:
            summary = self._summary(decisions, others, "every candidate failed the checks; no change made")
        else:
            # no quick check of their speed here: it would run every test again, and only the run's full check,
            # which measures them, decides what is emitted (see `judged`)
            summary = self._summary(decisions, others, f"kept {len(kept)} proven-safe rewrite(s); the full check "
                                                        "measures their speed")
            self._kept = (decisions, others, len(kept))
        yield [self._call("submit", summary=summary)]
        return summary

    def judged(self, final: Evaluation) -> str | None:
        """What the run's full check of the kept rewrites decided, into the record and the summary: emitted
        as faster, kept aside (speed not established) or reverted (not measurably faster). None: nothing
        was kept, nothing to tell."""
        if self._kept is None:
            return None
        decisions, others, n = self._kept
        perf = final.perf
        if final.verdict == Verdict.PASS and perf is not None and perf.verdict == PerfVerdict.FASTER:
            return self._summary(decisions, others, f"kept {n} rewrite(s), faster in the full check")
        if final.verdict == Verdict.PASS and perf is not None and perf.unestablished:
            headline = (f"speed not established in the full check ({perf_line(perf)}): {n} proven-safe "
                        "rewrite(s) kept aside, not emitted")
            return self._summary(decisions, others, headline, speed_unknown=True)
        if final.verdict == Verdict.PASS:
            why = perf_line(perf) if perf is not None else "the task has no bench to measure them"
            return self._summary(decisions, others, f"reverted: the kept rewrites were not measurably faster ({why})",
                                 reverted=True)
        return self._summary(decisions, others, f"the kept rewrites failed the full check: {final.verdict}")

    def _summary(self, decisions: list[Decision], others: list[Finding], headline: str, *,
                 reverted: bool = False, speed_unknown: bool = False) -> str:
        """The summary text submitted, and the same decisions as records (`self.record`) for report.json."""
        ordered = sorted(decisions, key=lambda d: (not d.kept, d.finding.path, d.finding.line))
        self.record = PolicyRecord(name=self.name, outcome=headline, reverted=reverted, speed_unknown=speed_unknown,
                                   decisions=[d.record() for d in ordered])
        return _summary(ordered, others, headline)

    def _files(self, listing: str) -> list[str]:
        """The focus files; without any, every Python file that is not protected or a test."""
        if self.task.spec.focus:
            return list(self.task.spec.focus)
        return [p for p in listing.splitlines() if p.endswith(".py") and not matches_any(p, self.task.spec.protected)
                and not re.search(r"(^|/)(tests?/|test_|conftest\.py)", p)]

    def _read(self, paths: list[str]) -> Generator[list[ToolCall], list[ToolOutput], dict[str, str]]:
        """Each file's text, page by page as read_file gives it (its output is capped), all files at once."""
        lines: dict[str, list[str]] = {p: [] for p in paths}
        failed: set[str] = set()
        next_start = {p: 1 for p in paths}
        while next_start:
            open_paths = list(next_start)
            results = yield [self._call("read_file", path=p, start=next_start[p]) for p in open_paths]
            for p, r in zip(open_paths, results):
                more = None if r.is_error else _READ_ON.search(r.content)
                if more is not None:
                    next_start[p] = int(more.group(1))
                else:
                    del next_start[p]
                if r.is_error:
                    failed.add(p)
                    continue
                lines[p] += [m.group(2) for m in map(_NUMBERED.match, r.content.splitlines()) if m]
        return {p: "\n".join(ls) + "\n" for p, ls in lines.items() if p not in failed}


def _changed_at(sources: dict[str, str], findings: list[Finding]) -> dict[str, frozenset[str]]:
    """Per edit (its key), the "path:line" of each line it changes: the lines all the rewrites change
    (one parse per file; a rewrite keeps the line count), each given to the nearest edit at or above it."""
    out: dict[str, set[str]] = {f.key: {f"{f.path}:{f.line}"} for f in findings}
    for path, source in sources.items():
        mine = sorted((f for f in findings if f.path == path), key=lambda f: f.line)
        if not mine:
            continue
        old, new = source.splitlines(), apply_rewrites(source, mine).splitlines()
        if len(old) != len(new):
            continue
        for n, (a, b) in enumerate(zip(old, new), 1):
            owner = next((f for f in reversed(mine) if f.line <= n), None)
            if a != b and owner is not None:
                out[owner.key].add(f"{path}:{n}")
    return {k: frozenset(v) for k, v in out.items()}


def _last_results(messages: list[dict]) -> list[ToolOutput]:
    """The results of the previous turn's tool calls, in order."""
    blocks = messages[-1]["content"] if messages else []
    return [ToolOutput(str(b.get("content", "")), bool(b.get("is_error")), b.get("data")) for b in blocks
            if isinstance(b, dict) and b.get("type") == "tool_result"]


def _summary(decisions: list[Decision], others: list[Finding], headline: str) -> str:
    lines = [f"rules policy: {headline}"]
    for d in decisions:
        mark = "kept" if d.kept else "rejected"
        hazard = f" (static hazard: {d.hazard})" if d.hazard else ""  # what the analyzers suspected, beside it
        lines.append(f"- {mark} {d.finding.location} {d.finding.key.split('::')[-1]}: {d.reason}{hazard}")
    if others:
        lines.append("findings without an automatic rewrite (left for a human or an LLM):")
        lines += [f"- {f.location} [{f.rule}] {f.message}" for f in others]
    return "\n".join(lines)
