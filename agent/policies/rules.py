"""`rules`: the offline policy. Real work with no API key, through the same tools as an LLM.

It reads the focus files, proposes the analyzers' zeros -> empty rewrites, and lets the
checks decide: a batch that fails the (poisoned) tests is split until every rejected edit
is isolated with the failure it caused. What survives is kept only if it is measurably
faster. The policy is written as a generator: each `yield` is one turn (a list of tool calls,
as an LLM may make several at once) and receives their results, so the trajectory reads like
any other agent's.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Generator

from agent.analyzers import Finding, analyze_source, apply_rewrites
from agent.analyzers.findings import ZERO_INIT
from agent.task import Task
from agent.env.workspace import matches_any

from agent.models.base import Reply, ToolCall, Usage

RULES_MODEL_ID = "rules"
CHUNK_LINES = 150
CHUNKS_PER_TURN = 8
_NUMBERED = re.compile(r"^\s*(\d+)  ?(.*)$")


@dataclass(frozen=True)
class ToolOutput:
    content: str
    is_error: bool


@dataclass
class Decision:
    finding: Finding
    kept: bool
    reason: str


@dataclass
class CheckVerdict:
    passed: bool
    failure: str  # the first failing test, or the verdict line
    faster: bool = False
    perf_line: str = ""


def parse_checks(text: str) -> CheckVerdict:
    """Read the run_checks summary as a careful human would: the verdict, the first failing test, perf."""
    verdict = re.search(r"^verdict:\s*([\w-]+)", text, re.M)
    passed = bool(verdict) and verdict.group(1) == "pass"
    failing = re.search(r"failing: ([^,;)\s]+)", text) or re.search(r"^\s*FAILED (\S+)", text, re.M)
    failure = failing.group(1) if failing else (verdict.group(0) if verdict else text.strip()[:200])
    perf = re.search(r"^perf: (.*)$", text, re.M)
    faster = bool(perf) and perf.group(1).startswith("faster")
    return CheckVerdict(passed, failure, faster, perf.group(1).strip() if perf else "")


Script = Generator[list[ToolCall], list[ToolOutput], str]


class RulesPolicy:
    """A deterministic policy behind the Model protocol; costs nothing."""

    def __init__(self, task: Task):
        self.task = task
        self.name = "rules"
        self._ids = itertools.count(1)
        self._script = self._run()
        self._started = False

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
            summary = _summary([], others, "no rewrite the analyzers can propose safely here; no change made")
            yield [self._call("submit", summary=summary)]
            return summary

        decisions: list[Decision] = []
        state = dict(sources)  # what the workspace holds now, per file

        def apply(subset: list[Finding], perf: bool = False) -> Script:
            """One turn: write the files that change, then run the checks."""
            writes = []
            for path, original in sources.items():
                new = apply_rewrites(original, [f for f in subset if f.path == path])
                if new != state[path]:
                    writes.append(self._call("write_file", path=path, content=new))
                    state[path] = new
            results = yield [*writes, self._call("run_checks", perf=perf)]
            return parse_checks(results[-1].content)

        def search(edits: list[Finding], kept: list[Finding]) -> Script:
            """Largest passing subset of `edits` on top of `kept` (group testing by halving)."""
            if not edits:
                return []
            verdict = yield from apply(kept + edits)
            if verdict.passed:
                return edits
            if len(edits) == 1:
                decisions.append(Decision(edits[0], False, f"fails the checks: {verdict.failure}"))
                return []
            half = len(edits) // 2
            left = yield from search(edits[:half], kept)
            right = yield from search(edits[half:], kept + left)
            return left + right

        static_safe = [f for f in candidates if f.safe_to_rewrite]
        hazardous = [f for f in candidates if not f.safe_to_rewrite]
        kept = yield from search(static_safe, [])
        for f in hazardous:  # confirm each static hazard by the checks, naming what read it
            alone = yield from search([f], kept)
            if alone:
                kept += alone
            else:
                decisions[-1].reason += f" (static hazard: {f.hazard})"
        decisions += [Decision(f, True, "passes the poisoned tests") for f in kept]

        if not kept:
            summary = _summary(decisions, others, "every candidate failed the checks; no change made")
        else:
            verdict = yield from apply(kept, perf=True)
            if verdict.passed and verdict.faster:
                summary = _summary(decisions, others, f"kept {len(kept)} rewrite(s): {verdict.perf_line}")
            else:
                kept = []
                why = verdict.perf_line or verdict.failure
                summary = _summary(decisions, others, f"reverted: the kept rewrites were not measurably faster ({why})")
        reverts = [self._call("write_file", path=p, content=src) for p, src in sources.items()
                   if not kept and state[p] != src]
        yield [*reverts, self._call("submit", summary=summary)]
        return summary

    def _files(self, listing: str) -> list[str]:
        """The focus files; without any, every Python file that is not protected or a test."""
        if self.task.spec.focus:
            return list(self.task.spec.focus)
        return [p for p in listing.splitlines() if p.endswith(".py") and not matches_any(p, self.task.spec.protected)
                and not re.search(r"(^|/)(tests?/|test_|conftest\.py)", p)]

    def _read(self, paths: list[str]) -> Generator[list[ToolCall], list[ToolOutput], dict[str, str]]:
        """Each file's text, read in numbered chunks (tool output is capped), many chunks a turn."""
        lines: dict[str, list[str]] = {p: [] for p in paths}
        open_paths, failed = list(paths), set()
        while open_paths:
            calls, owners = [], []
            for p in open_paths:
                for k in range(CHUNKS_PER_TURN):
                    start = len(lines[p]) + k * CHUNK_LINES + 1
                    calls.append(self._call("read_file", path=p, start=start, end=start + CHUNK_LINES - 1))
                    owners.append(p)
            results = yield calls
            still_open = []
            for p in open_paths:
                chunks = [r for r, owner in zip(results, owners) if owner == p]
                if chunks[0].is_error and not lines[p]:
                    failed.add(p)
                    continue
                done = False
                for r in chunks:
                    got = [] if r.is_error else [m.group(2) for m in map(_NUMBERED.match, r.content.splitlines()) if m]
                    lines[p] += got
                    if len(got) < CHUNK_LINES:
                        done = True
                        break
                if not done:
                    still_open.append(p)
            open_paths = still_open
        return {p: "\n".join(ls) + "\n" for p, ls in lines.items() if p not in failed}


def _last_results(messages: list[dict]) -> list[ToolOutput]:
    """The results of the previous turn's tool calls, in order."""
    blocks = messages[-1]["content"] if messages else []
    return [ToolOutput(str(b.get("content", "")), bool(b.get("is_error"))) for b in blocks
            if isinstance(b, dict) and b.get("type") == "tool_result"]


def _summary(decisions: list[Decision], others: list[Finding], headline: str) -> str:
    lines = [f"rules policy: {headline}"]
    for d in sorted(decisions, key=lambda d: (not d.kept, d.finding.path, d.finding.line)):
        mark = "kept" if d.kept else "rejected"
        lines.append(f"- {mark} {d.finding.location} {d.finding.key.split('::')[-1]}: {d.reason}")
    if others:
        lines.append("findings without an automatic rewrite (left for a human or an LLM):")
        lines += [f"- {f.location} [{f.rule}] {f.message}" for f in others]
    return "\n".join(lines)
