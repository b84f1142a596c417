"""`openai:<model>`: chat completions with tools, mostly for local vLLM / SGLang / Ollama.

The loop speaks Anthropic content blocks; this module converts them both ways:
assistant `tool_use` blocks <-> `tool_calls`, user `tool_result` blocks <-> `role: "tool"`
messages. The SDK retries 408/409/429/5xx with backoff that honours `retry-after`.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Iterable

import openai

from .base import DEFAULT_MAX_RETRIES, Deadline, ModelError, Reply, ToolCall, Usage, one_line

# Local servers ignore the key, but the SDK refuses to start without one.
PLACEHOLDER_API_KEY = "not-needed"
# OpenAI tool messages have no error flag; this prefix carries `is_error` through.
TOOL_ERROR_PREFIX = "[tool error] "
STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


# ---- neutral -> OpenAI ------------------------------------------------------------

def to_openai_tools(tools: list[dict]) -> list[dict]:
    return [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t.get("description", ""),
                "parameters": t.get("input_schema") or {"type": "object", "properties": {}},
            },
        }
        for t in tools
    ]


def _blocks(content: str | list[dict]) -> list[dict]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _result_text(block: dict) -> str:
    content = block.get("content", "")
    if isinstance(content, list):  # Anthropic also allows a list of text blocks here
        content = "\n".join(b.get("text", "") for b in content if isinstance(b, dict))
    text = str(content)
    return TOOL_ERROR_PREFIX + text if block.get("is_error") else text


def to_openai_messages(system: str, messages: list[dict]) -> list[dict]:
    """Neutral messages -> chat-completions messages (tool results first, as OpenAI requires).

    Of a tool result only its text is sent: its local `data` never is."""
    out: list[dict] = [{"role": "system", "content": system}] if system else []
    for msg in messages:
        blocks = _blocks(msg.get("content", []))
        text = "\n\n".join(b["text"] for b in blocks if b.get("type") == "text" and b.get("text"))
        if msg.get("role") == "assistant":
            calls = [
                {
                    "id": b["id"],
                    "type": "function",
                    "function": {"name": b["name"], "arguments": json.dumps(b.get("input") or {})},
                }
                for b in blocks
                if b.get("type") == "tool_use"
            ]
            item: dict = {"role": "assistant", "content": text or None}
            if calls:
                item["tool_calls"] = calls
            out.append(item)
            continue
        for b in blocks:
            if b.get("type") == "tool_result":
                out.append({"role": "tool", "tool_call_id": b["tool_use_id"], "content": _result_text(b)})
        if text:
            out.append({"role": "user", "content": text})
    return out


# ---- OpenAI -> neutral ------------------------------------------------------------

def parse_arguments(name: str, arguments: str | None) -> tuple[dict, str | None]:
    """Parse a tool call's JSON arguments; on failure return {} and a message for the model."""
    if not arguments or not arguments.strip():
        return {}, None
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError as err:
        return {}, f"arguments for tool {name!r} are not valid JSON ({err}): {one_line(arguments, 200)}"
    if not isinstance(value, dict):
        return {}, f"arguments for tool {name!r} must be a JSON object, got: {one_line(arguments, 200)}"
    return value, None


def usage_from_api(usage: dict | None) -> Usage:
    """prompt_tokens includes cached tokens; split them out so each is priced once."""
    usage = usage or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return Usage(
        input_tokens=max((usage.get("prompt_tokens") or 0) - cached, 0),
        output_tokens=usage.get("completion_tokens") or 0,
        cache_read=cached,
    )


def reply_from_completion(raw: dict, api_duration_s: float) -> Reply:
    choice = (raw.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    calls = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        args, error = parse_arguments(fn.get("name", ""), fn.get("arguments"))
        calls.append(ToolCall(
            id=call.get("id") or f"call_{uuid.uuid4().hex[:12]}",  # some local servers send none
            name=fn.get("name", ""),
            input=args,
            error=error,
        ))
    finish = choice.get("finish_reason") or ""
    return Reply(
        text=message.get("content") or "",
        tool_calls=calls,
        usage=usage_from_api(raw.get("usage")),
        api_duration_s=api_duration_s,
        model=raw.get("model") or "",
        # Some servers say "stop" even when they called tools.
        stop_reason="tool_use" if calls else STOP_REASONS.get(finish, finish),
        raw=raw,
    )


def assemble_stream(chunks: Iterable[dict]) -> dict:
    """Fold `chat.completion.chunk` dicts into one `chat.completion` dict."""
    raw: dict = {"object": "chat.completion", "choices": []}
    text: list[str] = []
    calls: dict[int, dict] = {}
    finish = None
    for chunk in chunks:
        for key in ("id", "model", "created", "system_fingerprint"):
            if chunk.get(key) is not None:
                raw.setdefault(key, chunk[key])
        if chunk.get("usage"):
            raw["usage"] = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                text.append(delta["content"])
            for tc in delta.get("tool_calls") or []:
                slot = calls.setdefault(tc.get("index", len(calls)), {
                    "id": "", "type": "function", "function": {"name": "", "arguments": ""},
                })
                if tc.get("id"):
                    slot["id"] = tc["id"]
                fn = tc.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                slot["function"]["arguments"] += fn.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    message: dict = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    raw["choices"] = [{"index": 0, "message": message, "finish_reason": finish}]
    return raw


# ---- the model ----------------------------------------------------------------------

def describe_error(err: Exception, base_url: str) -> str:
    """One line a user can act on, e.g. 'openai API: 404 NotFoundError: model not found'."""
    if isinstance(err, openai.APIStatusError):
        body = err.body if isinstance(err.body, dict) else {}
        kind = body.get("type") or body.get("code") or type(err).__name__
        message = body.get("message") or err.message
        text = f"openai API: {err.status_code} {kind}: {message}"
        retries = int(err.response.request.headers.get("x-stainless-retry-count", "0") or 0)
        if retries:
            text += f" (after {retries} retries)"
        return one_line(text)
    if isinstance(err, openai.APITimeoutError):
        return f"openai API: request to {base_url} timed out"
    if isinstance(err, openai.APIConnectionError):
        cause = err.__cause__ or err.__context__
        return one_line(f"openai API: cannot connect to {base_url}: {cause or err.message}")
    if isinstance(err, openai.APIError):
        return one_line(f"openai API: {err.message}")
    return one_line(f"openai: {type(err).__name__}: {err}")


class OpenAIModel:
    """A chat-completions model; the base URL points at a local server or at OpenAI."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        stream: bool = False,
        max_retries: int = DEFAULT_MAX_RETRIES,
        max_tokens: int | None = None,
    ) -> None:
        self.name = f"openai:{model}"
        self.model = model
        self.stream = stream
        self.max_tokens = max_tokens
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        api_key = os.environ.get("OPENAI_API_KEY") or None
        if api_key is None:
            if base_url is None:
                raise ModelError("openai: no API key: set OPENAI_API_KEY, or OPENAI_BASE_URL for a local server")
            api_key = PLACEHOLDER_API_KEY
        self.deadline = Deadline()  # set by the loop: bounds every request and every retry-after wait
        try:
            hooks = {"response": [self.deadline.on_response]}
            self._client = openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=max_retries,
                                         http_client=openai.DefaultHttpxClient(event_hooks=hooks))
        except (openai.OpenAIError, ValueError) as err:
            raise ModelError(f"openai: cannot create client: {one_line(err)}") from err

    @property
    def base_url(self) -> str:
        return str(self._client.base_url)

    def complete(self, system: str, messages: list[dict], tools: list[dict]) -> Reply:
        params: dict = {"model": self.model, "messages": to_openai_messages(system, messages)}
        if tools:
            params["tools"] = to_openai_tools(tools)
        if self.max_tokens is not None:
            params["max_tokens"] = self.max_tokens
        start = time.perf_counter()
        self.deadline.refused = None
        timeout = self.deadline.timeout()
        api = self._client if timeout is None else self._client.with_options(timeout=timeout)
        try:
            if self.stream:
                chunks = api.chat.completions.create(**params, stream=True, stream_options={"include_usage": True})
                raw = assemble_stream(c.to_dict(mode="json") for c in chunks)
            else:
                raw = api.chat.completions.create(**params).to_dict(mode="json")
        except (openai.OpenAIError, ValueError) as err:
            raise ModelError(self.deadline.explain(describe_error(err, self.base_url))) from err
        return reply_from_completion(raw, time.perf_counter() - start)
