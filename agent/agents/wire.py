"""The providers' wire formats, as the relay reads and answers them: Anthropic's Messages API, OpenAI's chat
completions and Responses API.

What a request names (its model, output limit, web search tools), what an answer bills (its usage, JSON or
server-sent events), and an error in each provider's own shape, so an agent's SDK reads the relay's refusal as
the API's. Pure functions of bytes and JSON: the relay (agent.agents.relay) moves the bytes, the meter
(agent.agents.metering) prices them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Literal

from agent.models.anthropic import usage_from_api as anthropic_usage
from agent.models.base import Usage
from agent.models.openai import usage_from_api as openai_chat_usage

Provider = Literal["anthropic", "openai"]
# Paths the relay forwards, as the agent's client asks for them (the sandbox's base URL of an
# OpenAI client ends in /v1, like the real one); the ones that bill tokens are metered.
METERED = {"anthropic": ("/v1/messages",), "openai": ("/v1/chat/completions", "/v1/responses")}
FORWARDED = {"anthropic": METERED["anthropic"] + ("/v1/messages/count_tokens", "/v1/models"),
             "openai": METERED["openai"] + ("/v1/models",)}
# The event that ends a stream, per wire format: a client may stop reading at it, so it is sent on only
# once the answer is metered (chat completions, Messages, Responses).
LAST_EVENTS = (b"data: [DONE]", b"event: message_stop", b"event: response.completed", b"event: response.incomplete",
               b"event: response.failed")
# How each provider says it lacks a model: (status, code, param).
NO_SUCH_MODEL: dict[str, tuple[int, str | None, str | None]] = {"anthropic": (400, None, None),
                                                                "openai": (404, "model_not_found", "model")}


def json_or_text(raw: bytes) -> Any:
    """A body as JSON, else its first 4 KiB as text (None when empty)."""
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw[:4096].decode("utf-8", "replace")


def json_objects(pieces: Iterable[str | bytes]) -> list[dict[str, Any]]:
    """The pieces that are JSON objects, in order (the others skipped)."""
    out = []
    for piece in pieces:
        try:
            value = json.loads(piece)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def auth_header(provider: Provider, api_key: str) -> dict[str, str]:
    """The header that carries the real key, as each provider reads it."""
    return {"x-api-key": api_key} if provider == "anthropic" else {"authorization": f"Bearer {api_key}"}


def error_body(provider: Provider, status: int, message: str, code: str | None = None,
               param: str | None = None) -> bytes:
    """An error in the provider's own shape, so the agent's SDK reads it as the API's."""
    kind = "permission_error" if status == 403 else "invalid_request_error"
    if provider == "anthropic":
        doc: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        doc = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return json.dumps(doc).encode()


# -- requests -----------------------------------------------------------------------------------
def request_model(body: Any) -> str:
    """The model a request names ('' for none)."""
    model = body.get("model") if isinstance(body, dict) else None
    return model.strip() if isinstance(model, str) else ""


def output_limits(provider: Provider, route: str, body: dict[str, Any]) -> list[int]:
    """The output limits a request names (OpenAI's are optional, chat completions has two names for one)."""
    names = ("max_tokens",) if provider == "anthropic" else (
        ("max_output_tokens",) if route.endswith("/responses") else ("max_completion_tokens", "max_tokens"))
    return [v for v in (body.get(n) for n in names) if isinstance(v, int) and not isinstance(v, bool) and v > 0]


def web_search_caps(provider: Provider, body: dict[str, Any]) -> list[Any]:
    """One cap per web search tool of a request, as it names it (Anthropic's `max_uses`, the Responses API's
    `max_tool_calls`; None or junk where it names none); [] without one."""
    tools = [t for t in body.get("tools") or []
             if isinstance(t, dict) and str(t.get("type", "")).startswith("web_search")]
    if not tools:
        return []
    return [t.get("max_uses") for t in tools] if provider == "anthropic" else [body.get("max_tool_calls")]


def with_stream_usage(provider: Provider, route: str, body: Any) -> bytes | None:
    """A streamed chat completion asks for its usage at the end (`stream_options.include_usage`), so the stream
    ends with what it is metered by: `body` so changed, re-encoded; None when it needs no change."""
    if not (provider == "openai" and route.endswith("/chat/completions") and isinstance(body, dict)
            and body.get("stream") and not (body.get("stream_options") or {}).get("include_usage")):
        return None
    body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    return json.dumps(body).encode()


# -- answers ------------------------------------------------------------------------------------
def sse_events(raw: bytes) -> list[dict[str, Any]]:
    """The JSON `data:` payloads of a server-sent event stream, in order (others skipped)."""
    blocks = raw.replace(b"\r\n", b"\n").split(b"\n\n")  # chat completions' last, `[DONE]`, is no JSON
    return json_objects(b"\n".join(line[5:].strip() for line in block.split(b"\n") if line.startswith(b"data:"))
                        for block in blocks)


def metered_usage(provider: Provider, path: str, body: Any, events: list[dict[str, Any]]) -> tuple[str, Usage] | None:
    """(model, usage) of one response, from its JSON body or its events; None when it carries none."""
    if provider == "anthropic":
        return _messages_answer(body, events)
    if path.endswith("/responses"):
        return _responses_answer(body, events)
    chunks = events or ([body] if isinstance(body, dict) else [])
    with_usage = [c for c in chunks if isinstance(c.get("usage"), dict)]
    if not with_usage:
        return None
    return with_usage[-1].get("model") or "", openai_chat_usage(with_usage[-1]["usage"])


def _messages_answer(body: Any, events: list[dict[str, Any]]) -> tuple[str, Usage] | None:
    """A Messages answer's usage: a stream's `message_start`, updated by its `message_delta`s, else the body's."""
    if events:
        usage: dict[str, Any] = {}
        model = ""
        for e in events:
            if e.get("type") == "message_start":
                msg = e.get("message") or {}
                model, usage = msg.get("model") or model, dict(msg.get("usage") or {})
            elif e.get("type") == "message_delta":  # cumulative counts; later ones win
                usage.update({k: v for k, v in (e.get("usage") or {}).items() if v is not None})
        return (model, messages_usage(usage)) if usage else None
    if isinstance(body, dict) and isinstance(body.get("usage"), dict):
        return body.get("model") or "", messages_usage(body["usage"])
    return None


def _responses_answer(body: Any, events: list[dict[str, Any]]) -> tuple[str, Usage] | None:
    """A Responses answer's usage: its `response.completed` event's response, else the body."""
    response = next((e.get("response") for e in reversed(events) if e.get("type") == "response.completed"),
                    body if isinstance(body, dict) else None)
    if isinstance(response, dict) and isinstance(response.get("usage"), dict):
        searches = sum(1 for item in response.get("output") or []
                       if isinstance(item, dict) and item.get("type") == "web_search_call")
        return response.get("model") or "", responses_usage(response["usage"], searches)
    return None


def messages_usage(usage: dict[str, Any]) -> Usage:
    """Anthropic's usage, with the server-side web searches it bills per search (`server_tool_use`)."""
    searches = (usage.get("server_tool_use") or {}).get("web_search_requests")
    tokens = anthropic_usage(usage)
    tokens.web_search_requests = searches if isinstance(searches, int) and searches > 0 else 0
    return tokens


def responses_usage(usage: dict[str, Any], searches: int = 0) -> Usage:
    """OpenAI's Responses API counts cached input inside input_tokens; its searches are the answer's
    `web_search_call` items, billed per call."""
    cached = (usage.get("input_tokens_details") or {}).get("cached_tokens") or 0
    return Usage(input_tokens=max(0, (usage.get("input_tokens") or 0) - cached),
                 output_tokens=usage.get("output_tokens") or 0, cache_read=cached, web_search_requests=searches)
