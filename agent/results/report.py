"""report.json: one schema, written by the runner, and its one reader (`read_report`), which the
batch, the loader, review, HTML and retry logic all go through.

Its top level is exactly Claude Code's headless JSON result (`type`, `subtype`, `is_error`,
`duration_ms`, `duration_api_ms`, `num_turns`, `result`, `session_id`, `total_cost_usd`,
`usage`, `modelUsage`, `permission_denials`, `uuid`), so tooling that reads agent results
reads ours; perfagent adds one `evaluation` (agent.checks.evaluation.Evaluation), `checks_entry` (which
grading of checks.json that is), and `left_out` when files of the agent's working tree were left out of the
change it graded (agent.env.candidate).

Reading is lenient about absent fields (an older or foreign report still loads) and strict
about types: a value no reader could use makes the whole file corrupt, said in one line.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from agent.checks.evaluation import Evaluation
from agent.checks.verdicts import Verdict
from agent.env.candidate import LeftOut
from agent.models.base import Usage
from agent.util.seal import write_sealed
from agent.errors import PerfagentError

CONTEXT_WINDOW = 200_000


class ReportError(PerfagentError, ValueError):
    """report.json is missing or corrupt; the message is the one line a view shows."""


class ServerToolUse(BaseModel):
    web_search_requests: int = 0
    web_fetch_requests: int = 0


class CacheCreation(BaseModel):
    ephemeral_1h_input_tokens: int = 0
    ephemeral_5m_input_tokens: int = 0


class TokenUsage(BaseModel):
    """`usage`: every model's tokens together, as the Messages API counts them."""

    model_config = ConfigDict(extra="allow")

    input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    output_tokens: int = 0
    server_tool_use: ServerToolUse = ServerToolUse()
    service_tier: str = "standard"
    cache_creation: CacheCreation = CacheCreation()

    @classmethod
    def of(cls, u: Usage) -> "TokenUsage":
        return cls(input_tokens=u.input_tokens, cache_creation_input_tokens=u.cache_write_5m + u.cache_write_1h,
                   cache_read_input_tokens=u.cache_read, output_tokens=u.output_tokens,
                   server_tool_use=ServerToolUse(web_search_requests=u.web_search_requests),
                   cache_creation=CacheCreation(ephemeral_1h_input_tokens=u.cache_write_1h,
                                                ephemeral_5m_input_tokens=u.cache_write_5m))

    def to_usage(self) -> Usage:
        """Back to priced token kinds; cache writes without a 5m/1h split count as 5-minute writes."""
        w1h = min(self.cache_creation.ephemeral_1h_input_tokens, self.cache_creation_input_tokens)
        return Usage(input_tokens=self.input_tokens, output_tokens=self.output_tokens,
                     cache_read=self.cache_read_input_tokens, cache_write_5m=self.cache_creation_input_tokens - w1h,
                     cache_write_1h=w1h)


class ModelUsage(BaseModel):
    """One `modelUsage` entry: a model's tokens and what they cost (None: no known price)."""

    inputTokens: int = 0
    outputTokens: int = 0
    cacheReadInputTokens: int = 0
    cacheCreationInputTokens: int = 0
    webSearchRequests: int = 0
    costUSD: float | None = None
    contextWindow: int = CONTEXT_WINDOW

    @classmethod
    def of(cls, u: Usage, cost: float | None) -> "ModelUsage":
        return cls(inputTokens=u.input_tokens, outputTokens=u.output_tokens, cacheReadInputTokens=u.cache_read,
                   cacheCreationInputTokens=u.cache_write_5m + u.cache_write_1h,
                   webSearchRequests=u.web_search_requests, costUSD=cost)


class PermissionDenial(BaseModel):
    """A tool call refused because it would have written a protected path."""

    model_config = ConfigDict(extra="allow")

    tool_name: str
    tool_use_id: str = ""
    tool_input: dict[str, Any] = {}
    reason: str = ""


class AgentRound(BaseModel):
    """One session of an external agent: what it said when it exited, and what our checks measured."""

    round: int
    exit_code: int | None = None
    duration_ms: int = 0
    claim: str = ""  # the agent's final message, its own words
    own_cost_usd: float | None = None  # what the agent said this session cost
    verdict: str = ""  # our grading of its diff after this session
    evidence: str = ""  # the checks' summary of that grading
    claim_notes: list[str] = []  # what the evidence says of things the claim names (a commit, a file)
    note: str = ""  # why the session ended, when not by itself (budget, time, crash)


class HarnessRun(BaseModel):
    """Where a graded patch came from, as that harness's files said it: its name ("iso-bench"), the agent and
    model it names, the item, and its own hard metrics (ISO-Bench: status, baseline_ms, patched_ms, speedup,
    improvement, error; validated by the reader, agent.interchange.iso_bench.hard_metrics)."""

    name: str
    agent: str = ""
    model: str = ""
    item: str = ""
    metrics: dict[str, float | bool | str] = {}


class AgentRun(BaseModel):
    """An external agent (Claude Code, Codex, mini-swe-agent) run sealed: its claims beside our evidence.

    Cost and tokens at the top of the report come from the metering relay; `own_cost_usd` is the
    agent's own figure, kept for comparison, and `cost_note` says when the two disagree.
    """

    name: str
    model: str
    version: str = ""
    claim: str = ""  # its last final message
    own_cost_usd: float | None = None
    cost_note: str = ""
    rounds: list[AgentRound] = []
    refused: list[str] = []  # what the relay refused: other hosts, other paths
    # Answers the relay metered from less than their final usage (a stream cut or hung after its announcement,
    # an answer still out when the run ended): "<id> (<model>): how it was metered"; their cost is in the total.
    partial: list[str] = []
    files: dict[str, str] = {}  # kept outputs (stdout, result JSON, final diff), relative to the report
    # A patch another harness made (`check --predictions` of an ISO-Bench run folder): that harness, and what it
    # says of the patch itself. Never checked here; shown beside our evidence as theirs.
    harness: HarnessRun | None = None


class EditDecision(BaseModel):
    """One edit an offline policy tried and the check that decided it: views draw from this, not from its text."""

    path: str
    line: int
    rewrite: str  # what was rewritten, e.g. 'self.bufs["mask"]' (the analyzers' finding key, last part)
    kept: bool
    # Which check decided: for a rejected edit the one that caught it ("tests", "poisoned tests", "sanitizer",
    # "read site not run", "coverage", ...), for a kept one the strongest that passed it.
    evidence: str
    test: str = ""  # the failing test's id, when a test caught it
    hazard: str = ""  # the analyzers' static hazard, when they saw one
    reason: str = ""  # the policy's words


class PolicyRecord(BaseModel):
    """An offline policy's decisions, beside its summary text in `result`."""

    name: str  # "rules"
    outcome: str  # its headline, in its words
    reverted: bool = False  # it took its kept edits back: none of them was emitted
    # its edits passed but their speed was not established: emitted only if the full check finds them
    # faster, else kept aside (results/layout.py ASIDE), never as model_patch.diff
    speed_unknown: bool = False
    decisions: list[EditDecision] = []


class Report(BaseModel):
    model_config = ConfigDict(extra="allow")  # what a newer writer adds survives a read and a rewrite

    type: Literal["result"] = "result"
    subtype: str = "success"  # success | error_max_turns | error_max_budget | error_during_execution
    is_error: bool = False
    duration_ms: int = 0
    duration_api_ms: int = 0
    num_turns: int = 0
    result: str = ""
    session_id: str = ""
    total_cost_usd: float | None = None
    # Answers of a model the price table lacks, charged at its dearest prices (the relay's): `total_cost_usd`
    # includes them, as an upper bound. Written only when there is one.
    unpriced: int = 0
    usage: TokenUsage = TokenUsage()
    modelUsage: dict[str, ModelUsage] = {}
    permission_denials: list[PermissionDenial] = []
    uuid: str = ""
    # Which checks.json entry `evaluation` is (its index in the list; agent.results.checks_log), so a reader
    # matches the two without comparing them; null: it is no grading (nothing was graded). Absent from a
    # report older than it: checks_log.carried matches those by content.
    checks_entry: int | None = None
    evaluation: Evaluation | None = None
    agent: AgentRun | None = None  # set for an external agent's run
    policy: PolicyRecord | None = None  # set for an offline policy's run (rules)
    # Files of the working tree left out of the graded and emitted change (binary, new and large, named like
    # our outputs): each with its size and why. Written only when there is one.
    left_out: list[LeftOut] = []

    @classmethod
    def parse(cls, data: Any) -> "Report":
        """A report from parsed JSON; ReportError (one line) when no reader could use it."""
        if not isinstance(data, dict) or data.get("type") != "result":
            raise ReportError('report.json corrupt: not a result object (no "type": "result")')
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "report"
            raise ReportError(f"report.json corrupt: {where}: {first['msg']}") from None

    def write(self, path: Path) -> None:
        """Sealed (agent.util.seal): `batch --resume` skips a finished job only when its report verifies."""
        write_sealed(Path(path), self.to_json())

    def to_json(self) -> str:
        return self.model_dump_json(indent=2, exclude=self._absent()) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude=self._absent())

    def _absent(self) -> set[str] | None:
        """Our loop's reports keep Claude Code's keys, `evaluation` and `checks_entry` only: no `"agent": null`, no
        `"policy": null`, no `"left_out": []`; an older report rewritten stays without `checks_entry` (null would
        say it carries no grading)."""
        absent = {k for k in ("agent", "policy") if getattr(self, k) is None}
        absent |= {"checks_entry"} if "checks_entry" not in self.model_fields_set else set()
        return (absent | ({"left_out"} if not self.left_out else set())
                | ({"unpriced"} if not self.unpriced else set())) or None

    @property
    def models(self) -> list[str]:
        return list(self.modelUsage)

    @property
    def verdict(self) -> str:
        """The evaluation's verdict; a report without an evaluation graded nothing: "error"."""
        return self.evaluation.verdict if self.evaluation is not None else Verdict.ERROR


def read_report(path: Path) -> Report:
    """The report at `path`; ReportError, whose message is the one line a view shows, when it is
    missing or corrupt. Callers that go on without a report catch that, and only that."""
    path = Path(path)
    if not path.is_file():
        raise ReportError("report.json missing")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:  # RecursionError: nested past json's reach
        raise ReportError(f"report.json corrupt: {type(e).__name__}: {e}") from None
    return Report.parse(data)


def new_report(**fields: Any) -> Report:
    """A report with a fresh uuid; the runner fills the rest from its outcome."""
    return Report(uuid=str(uuid.uuid4()), **fields)
