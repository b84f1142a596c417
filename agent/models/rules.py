"""`rules`: the offline policy. Real work with no API key, through the same tools as an LLM.

It reads the focus files, proposes the analyzers' zeros -> empty rewrites, and lets the
checks decide: a batch that fails the (poisoned) tests is split until every rejected edit
is isolated with the failure it caused. What survives is kept only if it is measurably
faster. The policy is written as a generator: each `yield` is one tool call, i.e. one turn,
and receives that tool's result, so the trajectory reads like any other agent's.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Generator

from agent.analyzers import Finding, analyze_source, apply_rewrites
from agent.analyzers.model import ZERO_INIT
from agent.task import Task
from agent.workspace import matches_any

from .base import Reply, ToolCall, Usage

RULES_MODEL_ID = "rules"
CHUNK_LINES = 150
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


Script = Generator[ToolCall, ToolOutput, str]


class RulesPolicy:
    """A deterministic policy behind the Model protocol; costs nothing."""

    def __init__(self, task: Task):
        self.task = task
        self.name = "rules"
        self._ids = itertools.count(1)
        self._script = self._run()
        self._pending: ToolCall | None = None
        self._final_text = ""

    # -- the Model protocol ---------------------------------------------------------------
    def complete(self, system: str, messages: list[dict], tools: list[dict]) -> Reply:
        try:
            call = next(self._script) if self._pending is None else self._script.send(_last_result(messages))
        except StopIteration as stop:  # the script is over: nothing more to do
            return Reply(stop.value or self._final_text, [], Usage(), 0.0, RULES_MODEL_ID, "end_turn", {})
        self._pending = call
        return Reply("", [call], Usage(), 0.0, RULES_MODEL_ID, "tool_use", {"policy": "rules"})

    def _call(self, name: str, **args) -> ToolCall:
        return ToolCall(f"rules_{next(self._ids)}", name, args)

    # -- the script -----------------------------------------------------------------------
    def _run(self) -> Script:
        listing = yield self._call("list_files", path=".")
        sources: dict[str, str] = {}
        for path in self._files(listing.content):
            text = yield from self._read(path)
            if text is not None:
                sources[path] = text
        findings = [f for path, src in sources.items() for f in analyze_source(src, path)]
        candidates = [f for f in findings if f.rule == ZERO_INIT and f.fixable]
        others = [f for f in findings if f.rule != ZERO_INIT]
        if not candidates:
            summary = _summary([], others, "no rewrite the analyzers can propose safely here; no change made")
            yield self._call("submit", summary=summary)
            return summary

        decisions: list[Decision] = []
        state = dict(sources)  # what the workspace holds now, per file

        def apply(subset: list[Finding]) -> Script:
            for path, original in sources.items():
                new = apply_rewrites(original, [f for f in subset if f.path == path])
                if new != state[path]:
                    yield self._call("write_file", path=path, content=new)
                    state[path] = new
            out = yield self._call("run_checks", perf=False)
            return parse_checks(out.content)

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
            yield from apply([])
            summary = _summary(decisions, others, "every candidate failed the checks; no change made")
        else:
            yield from apply(kept)
            out = yield self._call("run_checks")
            verdict = parse_checks(out.content)
            if verdict.passed and verdict.faster:
                summary = _summary(decisions, others, f"kept {len(kept)} rewrite(s): {verdict.perf_line}")
            else:
                yield from apply([])
                why = verdict.perf_line or verdict.failure
                summary = _summary(decisions, others, f"reverted: the kept rewrites were not measurably faster ({why})")
        yield self._call("submit", summary=summary)
        return summary

    def _files(self, listing: str) -> list[str]:
        """The focus files; without any, every Python file that is not protected or a test."""
        if self.task.spec.focus:
            return list(self.task.spec.focus)
        return [p for p in listing.splitlines() if p.endswith(".py") and not matches_any(p, self.task.spec.protected)
                and not re.search(r"(^|/)(tests?/|test_|conftest\.py)", p)]

    def _read(self, path: str) -> Generator[ToolCall, ToolOutput, str | None]:
        """The file's text, read in numbered chunks (tool output is capped)."""
        lines: list[str] = []
        while True:
            start = len(lines) + 1
            out = yield self._call("read_file", path=path, start=start, end=start + CHUNK_LINES - 1)
            if out.is_error:
                return "\n".join(lines) + "\n" if lines else None
            chunk = [m.group(2) for m in map(_NUMBERED.match, out.content.splitlines()) if m]
            lines += chunk
            if len(chunk) < CHUNK_LINES:
                return "\n".join(lines) + "\n"


def _last_result(messages: list[dict]) -> ToolOutput:
    for block in reversed(messages[-1]["content"] if messages else []):
        if block.get("type") == "tool_result":
            return ToolOutput(str(block.get("content", "")), bool(block.get("is_error")))
    return ToolOutput("", True)


def _summary(decisions: list[Decision], others: list[Finding], headline: str) -> str:
    lines = [f"rules policy: {headline}"]
    for d in sorted(decisions, key=lambda d: (not d.kept, d.finding.path, d.finding.line)):
        mark = "kept" if d.kept else "rejected"
        lines.append(f"- {mark} {d.finding.location} {d.finding.key.split('::')[-1]}: {d.reason}")
    if others:
        lines.append("findings without an automatic rewrite (left for a human or an LLM):")
        lines += [f"- {f.location} [{f.rule}] {f.message}" for f in others]
    return "\n".join(lines)
