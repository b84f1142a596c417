"""A scripted fake of the Anthropic Messages, OpenAI chat-completions and OpenAI Responses HTTP APIs.

A real HTTP server on 127.0.0.1 (random port), so tests drive the real SDK clients
through their real HTTP stack, never the network and never a patched client. It speaks
both wire formats, plain JSON and SSE streaming, exactly as the providers send them.

    with FakeServer() as server:            # or the `fake_server` fixture below
        server.script([
            reply(tool_call("read_file", path="a.py")),
            overloaded(),                     # a 529; the SDK retries it
            reply("done", tool_call("submit", summary="ok")),
        ])
        model = make_model("anthropic:m", base_url=server.url)          # agent.run.model_spec; or
        model = make_model("openai:m", base_url=server.openai_url)
        # Codex (Responses API, POST /v1/responses): the shell tool is tool_call("exec_command", cmd="ls")
        ...
        server.requests[0].body["messages"]  # what the client sent

Each POST takes the next scripted item, whichever endpoint it hits. An item is a
`Turn` (text, tool calls, usage), a `Fail` (an injected error status), a `Hang` (no answer
at all), or a callable that gets the `Recorded` request and returns one of those (for
replies that depend on what the agent sent). An exhausted script answers 400, which
clients do not retry.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterable, Iterator, Union

import pytest

# ---- script items -----------------------------------------------------------------


@dataclass
class ToolUse:
    """A tool call in a scripted reply; `input` as a str is sent verbatim (may be malformed)."""

    name: str
    input: Union[dict, str] = field(default_factory=dict)
    id: str | None = None


@dataclass
class Turn:
    """A successful reply. Usage keys: input_tokens, output_tokens, cache_read,
    cache_write_5m, cache_write_1h (input_tokens excludes cached tokens)."""

    text: str = ""
    tool_calls: list[ToolUse] = field(default_factory=list)
    usage: dict = field(default_factory=dict)
    stop_reason: str | None = None  # default: from tool_calls, in the endpoint's vocabulary
    model: str | None = None  # default: echo the requested model
    linger_s: float = 0.0  # streamed: pause after the last event before ending the stream, as a slow close does


@dataclass
class Fail:
    """An injected error. `mid_stream`: for a streaming Anthropic request, answer 200
    and send the error as an SSE `event: error` after message_start (for a streaming
    Responses request, as a `response.failed` event after response.in_progress)."""

    status: int
    type: str = "api_error"
    message: str = "Internal server error"
    headers: dict[str, str] = field(default_factory=dict)
    mid_stream: bool = False


@dataclass
class Hang:
    """Never answer: hold the request open until the server stops (or `seconds` pass), then hang up.
    `started`: for a streaming request, first answer 200 and send that turn's first event (an Anthropic
    `message_start`, with its usage), then hang: a stream that never ends."""

    seconds: float | None = None
    started: Turn | None = None


Item = Union[Turn, Fail, Hang, Callable[["Recorded"], Union[Turn, Fail, Hang]]]


def tool_call(name: str, input: Union[dict, str, None] = None, /, **kwargs) -> ToolUse:
    """`tool_call("edit_file", path="a.py", old="x", new="y")` or `tool_call("run", "{bad json")`."""
    return ToolUse(name=name, input=input if input is not None else kwargs)


def reply(text: str = "", *tool_calls: ToolUse, usage: dict | None = None, **kw) -> Turn:
    return Turn(text=text, tool_calls=list(tool_calls), usage=usage or {}, **kw)


def overloaded(mid_stream: bool = False) -> Fail:
    return Fail(529, "overloaded_error", "Overloaded", mid_stream=mid_stream)


def rate_limited(retry_after: float = 1) -> Fail:
    value = str(int(retry_after)) if float(retry_after).is_integer() else str(retry_after)
    return Fail(429, "rate_limit_error", "Number of requests has exceeded your rate limit",
                headers={"retry-after": value})


def hang(seconds: float | None = None, started: Turn | None = None) -> Hang:
    return Hang(seconds, started)


def auth_error() -> Fail:
    return Fail(401, "authentication_error", "invalid x-api-key")


def bad_request(message: str) -> Fail:
    return Fail(400, "invalid_request_error", message)


def not_found(model: str) -> Fail:
    return Fail(404, "not_found_error", f"model: {model}")


# ---- recording --------------------------------------------------------------------


@dataclass
class Recorded:
    """One request as the server saw it; `at` is time.monotonic() on arrival."""

    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: dict
    at: float

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))


# ---- wire formats -----------------------------------------------------------------

DEFAULT_USAGE = {"input_tokens": 10, "output_tokens": 5}


def _usage(turn: Turn) -> dict:
    u = {**DEFAULT_USAGE, **turn.usage}
    return {k: int(u.get(k, 0)) for k in
            ("input_tokens", "output_tokens", "cache_read", "cache_write_5m", "cache_write_1h")}


def _pieces(s: str, n: int = 3) -> list[str]:
    """Split a string into up to n chunks, as a server streams it."""
    if not s:
        return []
    step = max(1, -(-len(s) // n))
    return [s[i:i + step] for i in range(0, len(s), step)]


def _sse(event: str | None, data: object) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data)
    return ((f"event: {event}\n" if event else "") + f"data: {payload}\n\n").encode()


class Anthropic:
    """POST /v1/messages."""

    @staticmethod
    def usage(turn: Turn, output_tokens: int | None = None) -> dict:
        u = _usage(turn)
        return {
            "input_tokens": u["input_tokens"],
            "cache_creation_input_tokens": u["cache_write_5m"] + u["cache_write_1h"],
            "cache_read_input_tokens": u["cache_read"],
            "cache_creation": {
                "ephemeral_5m_input_tokens": u["cache_write_5m"],
                "ephemeral_1h_input_tokens": u["cache_write_1h"],
            },
            "output_tokens": u["output_tokens"] if output_tokens is None else output_tokens,
            "service_tier": "standard",
        }

    @staticmethod
    def blocks(turn: Turn, n: int) -> list[dict]:
        out: list[dict] = [{"type": "text", "text": turn.text}] if turn.text else []
        for i, call in enumerate(turn.tool_calls):
            args = json.loads(call.input) if isinstance(call.input, str) else call.input
            out.append({"type": "tool_use", "id": call.id or f"toolu_{n:03d}_{i}", "name": call.name,
                        "input": args})
        return out

    @staticmethod
    def message(turn: Turn, req: Recorded, n: int) -> dict:
        return {
            "id": f"msg_fake_{n:04d}",
            "type": "message",
            "role": "assistant",
            "model": turn.model or req.body.get("model", ""),
            "content": Anthropic.blocks(turn, n),
            "stop_reason": turn.stop_reason or ("tool_use" if turn.tool_calls else "end_turn"),
            "stop_sequence": None,
            "usage": Anthropic.usage(turn),
        }

    @staticmethod
    def events(turn: Turn, req: Recorded, n: int, fail: Fail | None = None) -> Iterator[bytes]:
        msg = Anthropic.message(turn, req, n)
        start = {**msg, "content": [], "stop_reason": None, "usage": Anthropic.usage(turn, output_tokens=1)}
        yield _sse("message_start", {"type": "message_start", "message": start})
        if fail is not None:
            yield _sse("error", {"type": "error", "error": {"type": fail.type, "message": fail.message}})
            return
        yield _sse("ping", {"type": "ping"})
        for index, block in enumerate(msg["content"]):
            if block["type"] == "text":
                head, deltas = {"type": "text", "text": ""}, [
                    {"type": "text_delta", "text": p} for p in _pieces(block["text"])]
            else:
                raw = json.dumps(block["input"])
                head = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                deltas = [{"type": "input_json_delta", "partial_json": p} for p in [""] + _pieces(raw)]
            yield _sse("content_block_start", {"type": "content_block_start", "index": index,
                                                "content_block": head})
            for delta in deltas:
                yield _sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                                    "delta": delta})
            yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
        usage = {k: v for k, v in msg["usage"].items() if k not in ("cache_creation", "service_tier")}
        yield _sse("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
                                     "usage": usage})
        yield _sse("message_stop", {"type": "message_stop"})

    @staticmethod
    def error(fail: Fail) -> dict:
        return {"type": "error", "error": {"type": fail.type, "message": fail.message},
                "request_id": "req_fake"}


class OpenAI:
    """POST /v1/chat/completions."""

    @staticmethod
    def usage(turn: Turn) -> dict:
        u = _usage(turn)
        prompt = u["input_tokens"] + u["cache_read"]
        return {
            "prompt_tokens": prompt,
            "completion_tokens": u["output_tokens"],
            "total_tokens": prompt + u["output_tokens"],
            "prompt_tokens_details": {"cached_tokens": u["cache_read"]},
        }

    @staticmethod
    def calls(turn: Turn, n: int) -> list[dict]:
        return [
            {"id": c.id or f"call_{n:03d}_{i}", "type": "function",
             "function": {"name": c.name,
                          "arguments": c.input if isinstance(c.input, str) else json.dumps(c.input)}}
            for i, c in enumerate(turn.tool_calls)
        ]

    @staticmethod
    def finish(turn: Turn) -> str:
        return turn.stop_reason or ("tool_calls" if turn.tool_calls else "stop")

    @staticmethod
    def completion(turn: Turn, req: Recorded, n: int) -> dict:
        message: dict = {"role": "assistant", "content": turn.text or None}
        if turn.tool_calls:
            message["tool_calls"] = OpenAI.calls(turn, n)
        return {
            "id": f"chatcmpl-fake{n:04d}", "object": "chat.completion", "created": 1700000000,
            "model": turn.model or req.body.get("model", ""),
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": OpenAI.finish(turn)}],
            "usage": OpenAI.usage(turn),
        }

    @staticmethod
    def events(turn: Turn, req: Recorded, n: int) -> Iterator[bytes]:
        include_usage = bool((req.body.get("stream_options") or {}).get("include_usage"))
        base = {"id": f"chatcmpl-fake{n:04d}", "object": "chat.completion.chunk", "created": 1700000000,
                "model": turn.model or req.body.get("model", "")}

        def chunk(delta: dict, finish: str | None = None) -> bytes:
            data = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
            if include_usage:
                data["usage"] = None
            return _sse(None, data)

        yield chunk({"role": "assistant", "content": ""})
        for piece in _pieces(turn.text):
            yield chunk({"content": piece})
        for i, call in enumerate(OpenAI.calls(turn, n)):
            fn = call["function"]
            yield chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                         "function": {"name": fn["name"], "arguments": ""}}]})
            for piece in _pieces(fn["arguments"]):
                yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
        yield chunk({}, OpenAI.finish(turn))
        if include_usage:
            yield _sse(None, {**base, "choices": [], "usage": OpenAI.usage(turn)})
        yield _sse(None, "[DONE]")

    @staticmethod
    def error(fail: Fail) -> dict:
        return {"error": {"message": fail.message, "type": fail.type, "param": None, "code": None}}


class Responses:
    """POST /v1/responses (OpenAI's Responses API, what Codex speaks): a tool call is an output item
    of type function_call, and the usage (cached input counted inside input_tokens) comes in the
    final `response.completed` event, or the body when not streamed. A `stop_reason` makes the
    response `incomplete` for that reason."""

    @staticmethod
    def usage(turn: Turn) -> dict:
        u = _usage(turn)
        prompt = u["input_tokens"] + u["cache_read"]
        return {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": u["cache_read"]},
            "output_tokens": u["output_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + u["output_tokens"],
        }

    @staticmethod
    def items(turn: Turn, n: int) -> list[dict]:
        out: list[dict] = []
        if turn.text:
            out.append({"type": "message", "id": f"msg_fake_{n:04d}", "status": "completed", "role": "assistant",
                        "content": [{"type": "output_text", "text": turn.text, "annotations": []}]})
        for i, c in enumerate(turn.tool_calls):
            out.append({"type": "function_call", "id": f"fc_fake_{n:04d}_{i}", "status": "completed",
                        "call_id": c.id or f"call_{n:03d}_{i}", "name": c.name,
                        "arguments": c.input if isinstance(c.input, str) else json.dumps(c.input)})
        return out

    @staticmethod
    def response(turn: Turn, req: Recorded, n: int) -> dict:
        done = turn.stop_reason is None
        return {
            "id": f"resp_fake_{n:04d}", "object": "response", "created_at": 1700000000,
            "status": "completed" if done else "incomplete",
            "incomplete_details": None if done else {"reason": turn.stop_reason},
            "error": None, "model": turn.model or req.body.get("model", ""),
            "output": Responses.items(turn, n), "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "usage": Responses.usage(turn),
        }

    @staticmethod
    def events(turn: Turn, req: Recorded, n: int, fail: Fail | None = None) -> Iterator[bytes]:
        final = Responses.response(turn, req, n)
        seq = iter(range(1_000_000))

        def event(kind: str, **data: object) -> bytes:
            return _sse(kind, {"type": kind, "sequence_number": next(seq), **data})

        start = {**final, "status": "in_progress", "incomplete_details": None, "output": [], "usage": None}
        yield event("response.created", response=start)
        yield event("response.in_progress", response=start)
        if fail is not None:
            error = {"code": fail.type, "message": fail.message}
            yield event("response.failed", response={**start, "status": "failed", "error": error})
            return
        for index, item in enumerate(final["output"]):
            yield from Responses.item_events(event, index, item)
        kind = "response.completed" if final["status"] == "completed" else "response.incomplete"
        yield event(kind, response=final)

    @staticmethod
    def item_events(event: Callable[..., bytes], index: int, item: dict) -> Iterator[bytes]:
        at = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            text = item["content"][0]["text"]
            yield event("response.output_item.added", output_index=index, item={**item, "status": "in_progress",
                                                                                  "content": []})
            yield event("response.content_part.added", **at, content_index=0,
                        part={"type": "output_text", "text": "", "annotations": []})
            for piece in _pieces(text):
                yield event("response.output_text.delta", **at, content_index=0, delta=piece)
            yield event("response.output_text.done", **at, content_index=0, text=text)
            yield event("response.content_part.done", **at, content_index=0, part=item["content"][0])
        else:
            yield event("response.output_item.added", output_index=index, item={**item, "status": "in_progress",
                                                                                  "arguments": ""})
            for piece in _pieces(item["arguments"]):
                yield event("response.function_call_arguments.delta", **at, delta=piece)
            yield event("response.function_call_arguments.done", **at, arguments=item["arguments"])
        yield event("response.output_item.done", output_index=index, item=item)

    @staticmethod
    def error(fail: Fail) -> dict:
        return OpenAI.error(fail)


# ---- the server -------------------------------------------------------------------


class _HTTPServer(ThreadingHTTPServer):
    """Quiet about clients hanging up (keep-alive sockets closed by the SDK); keeps other
    handler exceptions in `errors` so a test can assert the fake itself did not break."""

    daemon_threads = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.errors: list[str] = []

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            self.errors.append(traceback.format_exc())


class FakeServer:
    """Scripted provider APIs on 127.0.0.1; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque[Item] = deque()
        self._requests: list[Recorded] = []
        self._count = 0
        self._httpd = _HTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()  # releases requests held by a `Hang`

    @property
    def url(self) -> str:
        """Base URL for the Anthropic SDK (it appends /v1/messages)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def openai_url(self) -> str:
        """Base URL for the OpenAI SDK (it appends /chat/completions)."""
        return self.url + "/v1"

    @property
    def requests(self) -> list[Recorded]:
        with self._lock:
            return list(self._requests)

    @property
    def errors(self) -> list[str]:
        """Tracebacks of exceptions inside the fake server (should stay empty)."""
        return list(self._httpd.errors)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._queue)

    def script(self, items: Iterable[Item]) -> "FakeServer":
        """Append replies/errors to the queue, served in order."""
        with self._lock:
            self._queue.extend(items)
        return self

    def start(self) -> "FakeServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="fakeserver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "FakeServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next(self, req: Recorded) -> tuple[Turn | Fail | Hang, int]:
        with self._lock:
            self._requests.append(req)
            self._count += 1
            n = self._count
            item = self._queue.popleft() if self._queue else Fail(
                400, "invalid_request_error", "fakeserver: no scripted response left")
        return (item(req) if callable(item) else item), n


def _handler_for(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # keep test output clean
            pass

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else {}
            except json.JSONDecodeError:
                body = {"_unparsed": raw.decode("utf-8", "replace")}
            path = self.path.split("?")[0]
            req = Recorded("POST", path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic())
            if path.endswith("/v1/messages"):
                api = Anthropic
            elif path.endswith("/chat/completions"):
                api = OpenAI
            elif path.endswith("/responses"):
                api = Responses
            else:
                self._send(404, {"error": {"message": f"fakeserver: no route {path}"}})
                return
            item, n = server._next(req)
            if isinstance(item, Hang):
                if item.started is not None and req.stream:
                    self._send_events(api.events(item.started, req, n), first=1)  # type: ignore[union-attr]
                server._stopping.wait(item.seconds)
                self.close_connection = True
                return
            if isinstance(item, Fail) and not (item.mid_stream and req.stream and api in (Anthropic, Responses)):
                self._send(item.status, api.error(item), item.headers)
            elif isinstance(item, Fail):
                self._send_events(api.events(Turn(), req, n, fail=item))  # type: ignore[union-attr]
            elif req.stream:
                self._send_events(api.events(item, req, n), linger_s=item.linger_s)
            elif api is Anthropic:
                self._send(200, Anthropic.message(item, req, n))
            elif api is Responses:
                self._send(200, Responses.response(item, req, n))
            else:
                self._send(200, OpenAI.completion(item, req, n))

        def _send(self, status: int, body: dict, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.send_header("request-id", "req_fake")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _send_events(self, events: Iterable[bytes], first: int | None = None, linger_s: float = 0.0) -> None:
            """SSE over chunked transfer encoding, one chunk per event, as a live server does (`first`: only
            that many events, the stream left open; `linger_s`: the pause before the stream's end)."""
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for i, event in enumerate(events):
                if first is not None and i >= first:
                    return
                self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                self.wfile.flush()
            if first is not None:
                return
            time.sleep(linger_s)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    """A started FakeServer, stopped after the test. Import it into a test module to use it."""
    with FakeServer() as server:
        yield server
    assert not server.errors, server.errors[0]
