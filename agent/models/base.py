"""The one small protocol every model provider implements, and the types it returns.

Messages use one neutral format, Anthropic Messages content blocks, so the loop and the
trajectory never depend on which provider answered:

    {"role": "user" | "assistant", "content": [block, ...]}
    {"type": "text", "text": ...}
    {"type": "tool_use", "id": ..., "name": ..., "input": {...}}
    {"type": "tool_result", "tool_use_id": ..., "content": str, "is_error": bool, "data"?: {...}}

A tool result's optional ``data`` (structured results, e.g. run_checks' evaluation) is for
readers in this process, such as the rules policy; an adapter never sends it (``for_api``).
Tools are Anthropic-style ``{"name", "description", "input_schema"}``.
``Reply.stop_reason`` uses the Anthropic vocabulary too ("end_turn", "tool_use",
"max_tokens", ...); each adapter maps its provider's reasons onto it.
"""

from __future__ import annotations

import email.utils
import time
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping, Protocol, runtime_checkable

from agent.errors import BadInput

# Retries after the first attempt, for 429 / 5xx / 529 overloaded. The SDKs' default (2)
# gives up within ~1.5 s; an agent run is long, so wait out a short overload instead.
DEFAULT_MAX_RETRIES = 5
# The SDKs' own default read timeout; a request is never given longer, whatever time is left.
REQUEST_TIMEOUT_S = 600.0

# Why this default: the installed SDK (2.12.0) lists its known models in
# `anthropic.types.model.Model`, newest first, and the ones past or near end of life in
# `anthropic._data.deprecated_models.DEPRECATED_MODELS`. Sonnets there: claude-sonnet-5-5,
# claude-sonnet-5, claude-sonnet-4-6, claude-sonnet-4-5 (deprecated: end of life
# 2026-11-30; claude-sonnet-4 retires 2026-06-15). We take claude-sonnet-4-6: current
# (not deprecated) and the newest Sonnet whose price our table knows, so a default run
# reports what it cost instead of null. Newer Sonnets work by name (--model anthropic:...).
DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-4-6"
# Models that make no API call: they cost nothing, and their errors are results, not transient failures.
OFFLINE_MODELS = frozenset({"rules", "replay"})


@dataclass
class ToolCall:
    """A tool the model asked for; ``error`` says why ``input`` could not be parsed."""

    id: str
    name: str
    input: dict  # parsed arguments; {} if malformed
    error: str | None = None  # set when the arguments were not valid JSON / not an object


@dataclass
class Usage:
    """Token counts of one or more calls, split the way prices are quoted.

    ``input_tokens`` excludes cached tokens (both writes and reads), as the Anthropic
    API reports it, so every token is priced exactly once.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_5m: int = 0
    cache_write_1h: int = 0
    cache_read: int = 0
    web_search_requests: int = 0  # server-side searches (Anthropic's web search tool, OpenAI's): billed per search

    def __add__(self, other: "Usage") -> "Usage":
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_write_5m + self.cache_write_1h + self.cache_read

    def to_dict(self) -> dict:
        """The counts; `web_search_requests` only where a search was made."""
        d = asdict(self)
        return d if self.web_search_requests else {k: v for k, v in d.items() if k != "web_search_requests"}


@dataclass
class Reply:
    """One model turn, provider-neutral."""

    text: str
    tool_calls: list[ToolCall]
    usage: Usage
    api_duration_s: float  # time spent in API calls incl. retries, measured apart from wall time
    model: str  # model id as the server reported it
    stop_reason: str
    raw: dict  # JSON-serialisable response, for the trajectory


class ModelError(BadInput):
    """one-line, user-facing: auth failure, unknown model, API error after retries"""


@runtime_checkable
class Model(Protocol):
    # Adapters that call an API over HTTP also have `deadline: Deadline` (below), which the loop sets.
    name: str  # the spec, e.g. "anthropic:claude-sonnet-4-5"

    def complete(self, system: str, messages: list[dict], tools: list[dict]) -> Reply: ...


LOCAL_KEYS = frozenset({"data"})  # block keys for in-process readers only, never sent to an API


def for_api(messages: list[dict]) -> list[dict]:
    """`messages` without the LOCAL_KEYS of their blocks; only the messages that had one are copied."""
    out = []
    for msg in messages:
        content = msg.get("content")
        if isinstance(content, list) and any(isinstance(b, dict) and LOCAL_KEYS & b.keys() for b in content):
            msg = {**msg, "content": [{k: v for k, v in b.items() if k not in LOCAL_KEYS} if isinstance(b, dict)
                                      else b for b in content]}
        out.append(msg)
    return out


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """The wait a response asks for, in seconds (`retry-after-ms`, or `retry-after` as seconds or a date)."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return float(value) / scale
        except ValueError:
            date = email.utils.parsedate_tz(value)
            if date is not None:
                return float(email.utils.mktime_tz(date) - time.time())
    return None


class Deadline:
    """When the run must end, for adapters that call an API over HTTP.

    The loop sets `at` (time.monotonic()); the adapter bounds each request by the time left
    and installs `on_response` as an httpx response hook. The SDKs sleep out any `retry-after`
    (3600 s included): a wait longer than the time left is turned into an immediate error
    instead (the SDKs obey `x-should-retry: false`), and `explain` says why.
    """

    def __init__(self) -> None:
        self.at: float | None = None
        self.refused: tuple[float, float] | None = None  # (wait asked for, time left) of the last refusal

    def left(self) -> float | None:
        return None if self.at is None else max(0.0, self.at - time.monotonic())

    def timeout(self, longest: float = REQUEST_TIMEOUT_S) -> float | None:
        """A per-request timeout: the time left (at least a moment), at most `longest`; None without a deadline."""
        left = self.left()
        return None if left is None else max(0.05, min(longest, left))

    def on_response(self, response: Any) -> None:
        wait, left = retry_after_s(response.headers), self.left()
        if response.status_code >= 400 and wait is not None and left is not None and wait > left:
            response.headers["x-should-retry"] = "false"
            self.refused = (wait, left)

    def explain(self, message: str) -> str:
        """`message`, plus why it was not retried when a `retry-after` outlasted the run."""
        if self.refused is None:
            return message
        (wait, left), self.refused = self.refused, None
        return one_line(f"{message}; the server asked to retry after {wait:.0f}s, longer than the {left:.1f}s "
                        "left before the run's timeout", limit=500)


def one_line(text: object, limit: int = 300) -> str:
    """Collapse whitespace so an error message fits one terminal line."""
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."
