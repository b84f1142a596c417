"""`anthropic:<model>`: the Messages API with tool use and prompt caching.

Retries: the SDK itself retries 408/409/429/5xx (529 "overloaded" included, it is
>= 500) with exponential backoff that honours `retry-after` / `retry-after-ms`.
What it cannot retry is an `overloaded_error` that arrives *inside* a 200 streaming
response (the HTTP request already succeeded); `_stream` adds a small loop for that.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import anthropic

from .base import (DEFAULT_ANTHROPIC_MODEL, DEFAULT_MAX_RETRIES, Deadline, ModelError, Reply, ToolCall, Usage, for_api,
                   one_line)


MAX_CACHE_BREAKPOINTS = 4  # the API rejects requests with more
USER_TURN_BREAKPOINTS = 2  # latest user turn writes the cache, the one before reads it
EPHEMERAL = {"type": "ephemeral"}
# Stream errors worth another try: the server's fault, not the request's.
RETRYABLE_STREAM_ERRORS = {"overloaded_error", "api_error", "rate_limit_error"}


@dataclass
class Request:
    """The cache-annotated copies sent to the API; the caller's objects stay untouched."""

    system: list[dict]
    messages: list[dict]
    tools: list[dict]

    def params(self, model: str, max_tokens: int) -> dict:
        params: dict = {"model": model, "max_tokens": max_tokens, "messages": self.messages}
        if self.system:
            params["system"] = self.system
        if self.tools:
            params["tools"] = self.tools
        return params


def count_breakpoints(blocks: list[dict]) -> int:
    return sum(1 for b in blocks if isinstance(b, dict) and "cache_control" in b)


def with_cache_breakpoints(system: str, messages: list[dict], tools: list[dict]) -> Request:
    """Mark the last tool, the system prompt and the latest user turns as cache breakpoints.

    Tools and system are the same every turn, and the conversation only grows, so a
    breakpoint at the end of the newest user turn lets the next request read everything
    before it from cache. Only the dicts that get a marker are copied.
    """
    budget = MAX_CACHE_BREAKPOINTS - count_breakpoints(tools) - sum(
        count_breakpoints(m["content"]) for m in messages if isinstance(m.get("content"), list)
    )

    out_tools = list(tools)
    if out_tools and budget > 0 and "cache_control" not in out_tools[-1]:
        out_tools[-1] = {**out_tools[-1], "cache_control": EPHEMERAL}
        budget -= 1

    out_system: list[dict] = []
    if system:
        out_system = [{"type": "text", "text": system}]
        if budget > 0:
            out_system[0]["cache_control"] = EPHEMERAL
            budget -= 1

    out_messages = list(messages)
    marked = 0
    for i in range(len(out_messages) - 1, -1, -1):
        if budget <= 0 or marked >= USER_TURN_BREAKPOINTS:
            break
        msg = out_messages[i]
        if msg.get("role") != "user":
            continue
        content = msg.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}] if content else []
        if not content or not isinstance(content[-1], dict) or "cache_control" in content[-1]:
            continue
        content = list(content)
        content[-1] = {**content[-1], "cache_control": EPHEMERAL}
        out_messages[i] = {**msg, "content": content}
        marked += 1
        budget -= 1
    return Request(system=out_system, messages=out_messages, tools=out_tools)


def usage_from_api(usage: dict | None) -> Usage:
    """Map the API's usage object; without the TTL breakdown, cache writes count as 5m."""
    usage = usage or {}
    total_write = usage.get("cache_creation_input_tokens") or 0
    breakdown = usage.get("cache_creation") or {}
    write_1h = breakdown.get("ephemeral_1h_input_tokens") or 0
    write_5m = max(breakdown.get("ephemeral_5m_input_tokens") or 0, total_write - write_1h)
    return Usage(
        input_tokens=usage.get("input_tokens") or 0,
        output_tokens=usage.get("output_tokens") or 0,
        cache_write_5m=write_5m,
        cache_write_1h=write_1h,
        cache_read=usage.get("cache_read_input_tokens") or 0,
    )


def reply_from_message(raw: dict, api_duration_s: float) -> Reply:
    """Turn a Messages API response (as a JSON dict) into a neutral Reply."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in raw.get("content") or []:
        if block.get("type") == "text":
            texts.append(block.get("text", ""))
        elif block.get("type") == "tool_use":
            args = block.get("input")
            ok = isinstance(args, dict)
            calls.append(ToolCall(
                id=block.get("id", ""),
                name=block.get("name", ""),
                input=args if ok else {},
                error=None if ok else f"tool input is not a JSON object: {one_line(json.dumps(args))}",
            ))
    return Reply(
        text="\n\n".join(t for t in texts if t),
        tool_calls=calls,
        usage=usage_from_api(raw.get("usage")),
        api_duration_s=api_duration_s,
        model=raw.get("model") or "",
        stop_reason=raw.get("stop_reason") or "",
        raw=raw,
    )


def describe_error(err: Exception, base_url: str) -> str:
    """One line a user can act on, e.g. 'anthropic API: 401 authentication_error: invalid x-api-key'."""
    if isinstance(err, anthropic.APIStatusError):
        kind = err.type or "error"
        message = err.api_message or err.message
        retries = int(err.response.request.headers.get("x-stainless-retry-count", "0") or 0)
        if err.status_code == 200:  # an `event: error` inside a streaming response
            text = f"anthropic API: stream error {kind}: {message}"
        else:
            text = f"anthropic API: {err.status_code} {kind}: {message}"
        if retries:
            text += f" (after {retries} retries)"
        return one_line(text)
    if isinstance(err, anthropic.APITimeoutError):
        return f"anthropic API: request to {base_url} timed out"
    if isinstance(err, anthropic.APIConnectionError):
        cause = err.__cause__ or err.__context__
        return one_line(f"anthropic API: cannot connect to {base_url}: {cause or err.message}")
    return one_line(f"anthropic: {type(err).__name__}: {err}")


class AnthropicModel:
    """A Claude model behind the Messages API; one instance per run, safe to reuse."""

    def __init__(
        self,
        model: str = DEFAULT_ANTHROPIC_MODEL,
        *,
        base_url: str | None = None,
        stream: bool = False,
        max_retries: int = DEFAULT_MAX_RETRIES,
        max_tokens: int = 16_000,
    ) -> None:
        self.name = f"anthropic:{model}"
        self.model = model
        self.stream = stream
        self.max_retries = max_retries
        self.max_tokens = max_tokens
        self.deadline = Deadline()  # set by the loop: bounds every request and every retry-after wait
        try:
            hooks = {"response": [self.deadline.on_response]}
            self._client = anthropic.Anthropic(base_url=base_url, max_retries=max_retries,
                                               http_client=anthropic.DefaultHttpxClient(event_hooks=hooks))
        except (anthropic.AnthropicError, ValueError, TypeError) as err:
            raise ModelError(f"anthropic: cannot create client: {one_line(err)}") from err
        c = self._client
        if c.api_key is None and c.auth_token is None and getattr(c, "credentials", None) is None:
            raise ModelError("anthropic: no API key: set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN)")

    @property
    def base_url(self) -> str:
        return str(self._client.base_url)

    def _api(self) -> anthropic.Anthropic:
        """The client, with each request bounded by the time the run has left."""
        timeout = self.deadline.timeout()
        return self._client if timeout is None else self._client.with_options(timeout=timeout)

    def complete(self, system: str, messages: list[dict], tools: list[dict]) -> Reply:
        params = with_cache_breakpoints(system, for_api(messages), tools).params(self.model, self.max_tokens)
        start = time.perf_counter()
        self.deadline.refused = None
        try:
            message = self._stream(params) if self.stream else self._api().messages.create(**params)
        except (anthropic.AnthropicError, ValueError) as err:
            raise ModelError(self.deadline.explain(describe_error(err, self.base_url))) from err
        return reply_from_message(message.to_dict(mode="json"), time.perf_counter() - start)

    def _stream(self, params: dict):
        """Stream and assemble the final message; retry errors that arrive mid-stream."""
        for attempt in range(self.max_retries + 1):
            try:
                with self._api().messages.stream(**params) as stream:
                    return stream.get_final_message()
            except anthropic.APIStatusError as err:
                if err.status_code != 200 or err.type not in RETRYABLE_STREAM_ERRORS:
                    raise  # HTTP-level errors were already retried by the SDK
                if attempt == self.max_retries:
                    suffix = f" (after {attempt} retries)" if attempt else ""
                    raise ModelError(describe_error(err, self.base_url) + suffix) from err
                time.sleep(min(0.5 * 2**attempt, 8.0))  # the SDK's own backoff schedule
        raise AssertionError("unreachable")
