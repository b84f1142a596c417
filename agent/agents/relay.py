"""The metering relay: an external agent's only way out of its sandbox.

The agent's sandbox has no network. Inside it, a small bridge listens on 127.0.0.1:BRIDGE_PORT
(its own loopback) and passes every connection to a Unix socket bound in from the host, where
this relay answers. The relay
- forwards only the provider's API paths to the real endpoint, adding the real API key (the
  agent only ever holds a placeholder), and reads every answer decoded so it can count it;
- refuses everything else, a proxied CONNECT to another host included, and records it;
- counts the tokens of every response, JSON or server-sent events, and prices them with our
  table, so the cost comes from the wire and not from what the agent says about itself;
- refuses further requests once the run is over its budget (`agent.models.budget`: the rule
  our own loop keeps too) or the deadline passed, and sets `stopped` so the runner ends the agent;
- appends every request and response to trajectory.jsonl (never the key).
"""

from __future__ import annotations

import json
import os
import socketserver
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx

from agent.models.anthropic import usage_from_api as anthropic_usage
from agent.models.base import Usage
from agent.models.budget import Spend
from agent.models.openai import usage_from_api as openai_chat_usage
from agent.models.pricing import PriceTable

if TYPE_CHECKING:
    from typing_extensions import Self

Provider = Literal["anthropic", "openai"]
BRIDGE_PORT = 8787  # inside the sandbox's own network namespace, where nothing else listens
PLACEHOLDER_KEY = "sk-perfagent-relay-placeholder"
DEFAULT_BASE_URLS = {"anthropic": "https://api.anthropic.com", "openai": "https://api.openai.com/v1"}
KEY_VARS = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
BASE_URL_VARS = {"anthropic": "ANTHROPIC_BASE_URL", "openai": "OPENAI_BASE_URL"}
# Paths the relay forwards, as the agent's client asks for them (the sandbox's base URL of an
# OpenAI client ends in /v1, like the real one); the ones that bill tokens are metered.
METERED = {"anthropic": ("/v1/messages",), "openai": ("/v1/chat/completions", "/v1/responses")}
FORWARDED = {"anthropic": METERED["anthropic"] + ("/v1/messages/count_tokens", "/v1/models"),
             "openai": METERED["openai"] + ("/v1/models",)}
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
              "transfer-encoding", "upgrade", "host", "content-length"}
# A request body goes on as sent (its content-encoding with it); a response is read decoded, so
# its usage can be counted, and sent on decoded.
NOT_FORWARDED = {"request": HOP_BY_HOP | {"accept-encoding"}, "response": HOP_BY_HOP | {"content-encoding"}}
SECRET_HEADERS = {"authorization", "x-api-key", "api-key"}
MAX_BODY = 64 << 20
MAX_PARSED = 32 << 20  # a response longer than this is forwarded whole but not read for usage


class RelayError(RuntimeError):
    """The relay cannot start (no upstream URL it can use, a socket it cannot bind)."""


@dataclass(frozen=True)
class Upstream:
    """The real endpoint and key; read from the harness's environment, never the agent's."""

    provider: Provider
    base_url: str
    api_key: str | None

    @classmethod
    def of(cls, provider: Provider, base_url: str | None = None) -> Upstream:
        url = base_url or os.environ.get(BASE_URL_VARS[provider]) or DEFAULT_BASE_URLS[provider]
        if not url.startswith(("http://", "https://")):
            raise RelayError(f"{provider} base URL {url!r} is not an http(s) URL")
        return cls(provider, url.rstrip("/"), os.environ.get(KEY_VARS[provider]) or None)

    def url_for(self, path: str) -> str:
        """An OpenAI base URL already ends in /v1 (or the server's own prefix); the client's path has it too."""
        if self.provider == "openai" and path.startswith("/v1/"):
            path = path[3:]
        return self.base_url + path


@dataclass
class Meter(Spend):
    """Tokens, cost and refusals so far; shared by the relay's threads, read by the runner."""

    prices: PriceTable
    max_cost_usd: float | None = None  # None or 0: no budget
    deadline: float | None = None  # time.monotonic()
    requests: int = 0  # metered responses
    refused: list[str] = field(default_factory=list)
    stop_reason: str | None = None  # "budget" | "time"
    stopped: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, model: str, usage: Usage, duration_s: float) -> float | None:
        """Count one response; the cost of it (None: no known price). Stops the agent past the budget."""
        with self.lock:
            cost = self.count(model, usage, self.prices, duration_s)
            self.requests += 1
            if self.over(self.max_cost_usd):
                self.stop("budget")
        return cost

    def refuse(self, what: str) -> None:
        with self.lock:
            if what not in self.refused:
                self.refused.append(what)

    def stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        self.stopped.set()

    def closed(self) -> str | None:
        """Why no request may pass any more, or None."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.stop("time")
        return self.stop_reason


# -- reading usage off the wire ---------------------------------------------------------------
def sse_events(raw: bytes) -> list[dict[str, Any]]:
    """The JSON `data:` payloads of a server-sent event stream, in order (others skipped)."""
    out = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"\n".join(line[5:].strip() for line in block.split(b"\n") if line.startswith(b"data:"))
        if not data or data == b"[DONE]":
            continue
        try:
            value = json.loads(data)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def metered_usage(provider: Provider, path: str, body: Any, events: list[dict[str, Any]]) -> tuple[str, Usage] | None:
    """(model, usage) of one response, from its JSON body or its events; None when it carries none."""
    if provider == "anthropic":
        if events:
            usage: dict[str, Any] = {}
            model = ""
            for e in events:
                if e.get("type") == "message_start":
                    msg = e.get("message") or {}
                    model, usage = msg.get("model") or model, dict(msg.get("usage") or {})
                elif e.get("type") == "message_delta":  # cumulative counts; later ones win
                    usage.update({k: v for k, v in (e.get("usage") or {}).items() if v is not None})
            return (model, anthropic_usage(usage)) if usage else None
        if isinstance(body, dict) and isinstance(body.get("usage"), dict):
            return body.get("model") or "", anthropic_usage(body["usage"])
        return None
    if path.endswith("/responses"):
        response = next((e.get("response") for e in reversed(events) if e.get("type") == "response.completed"),
                        body if isinstance(body, dict) else None)
        if isinstance(response, dict) and isinstance(response.get("usage"), dict):
            return response.get("model") or "", responses_usage(response["usage"])
        return None
    chunks = events or ([body] if isinstance(body, dict) else [])
    with_usage = [c for c in chunks if isinstance(c.get("usage"), dict)]
    if not with_usage:
        return None
    return with_usage[-1].get("model") or "", openai_chat_usage(with_usage[-1]["usage"])


def responses_usage(usage: dict[str, Any]) -> Usage:
    """OpenAI's Responses API counts cached input inside input_tokens."""
    cached = (usage.get("input_tokens_details") or {}).get("cached_tokens") or 0
    return Usage(input_tokens=max(0, (usage.get("input_tokens") or 0) - cached),
                 output_tokens=usage.get("output_tokens") or 0, cache_read=cached)


# -- the server --------------------------------------------------------------------------------
class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """An agent dropping a kept-alive connection is routine, not a traceback on the user's terminal."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Relay:
    """The host side: a threaded HTTP server on a Unix socket the sandbox has bound in.

        with Relay(upstream, meter, socket_path, log=trajectory.add) as relay:
            ... run the agent with relay.sandbox_env() ...
    """

    def __init__(self, upstream: Upstream, meter: Meter, socket_path: Path,
                 log: Callable[[dict[str, Any]], None] = lambda record: None):
        self.upstream, self.meter, self.socket_path, self.log = upstream, meter, Path(socket_path), log
        self._log_lock = threading.Lock()
        self._client = httpx.Client(timeout=httpx.Timeout(600.0, connect=15.0), follow_redirects=False, trust_env=False)
        self._server: _UnixHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Self:
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        try:
            self._server = _UnixHTTPServer(str(self.socket_path), _handler_for(self))
        except OSError as e:
            raise RelayError(f"cannot listen on {self.socket_path}: {e}") from None
        self._thread = threading.Thread(target=self._server.serve_forever, name="relay", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self._client.close()
        self.socket_path.unlink(missing_ok=True)

    def record(self, record: dict[str, Any]) -> None:
        with self._log_lock:
            self.log({"time": time.time(), **record})


def _handler_for(relay: Relay) -> type[BaseHTTPRequestHandler]:
    upstream, meter = relay.upstream, relay.meter

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def address_string(self) -> str:  # a Unix socket has no client address
            return "sandbox"

        def do_CONNECT(self) -> None:
            self._refuse(f"CONNECT {self.path}", 403, "perfagent relay: no network but the API")

        def do_POST(self) -> None:
            try:
                self._forward()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
            except Exception as e:  # noqa: BLE001 — the agent gets an answer, the trajectory the reason
                relay.record({"event": "relay_error", "error": f"{type(e).__name__}: {e}"})
                self.close_connection = True

        do_GET = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_POST

        def _forward(self) -> None:
            path = self.path
            if not path.startswith("/"):  # an absolute URI: a plain-HTTP proxy request to another host
                return self._refuse(f"{self.command} {path}", 403, "perfagent relay: no network but the API")
            route = path.split("?", 1)[0]
            if route not in FORWARDED[upstream.provider]:
                return self._refuse(f"{self.command} {route}", 404, f"perfagent relay: {route} is not forwarded")
            body = self._body()
            if body is None:
                return
            closed = meter.closed()
            if closed:
                why = "the run's budget is spent" if closed == "budget" else "the run's time is up"
                return self._error(400, f"perfagent relay: {why}; no more requests")
            rid = uuid.uuid4().hex[:12]
            parsed = _json_or_text(body)
            if (upstream.provider == "openai" and route.endswith("/chat/completions") and isinstance(parsed, dict)
                    and parsed.get("stream") and not (parsed.get("stream_options") or {}).get("include_usage")):
                parsed["stream_options"] = {**(parsed.get("stream_options") or {}), "include_usage": True}
                body = json.dumps(parsed).encode()  # so the stream ends with the usage it is metered by
            relay.record({"event": "request", "id": rid, "method": self.command, "path": route, "body": parsed})
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in NOT_FORWARDED["request"] | SECRET_HEADERS}
            headers["accept-encoding"] = "identity"
            if upstream.api_key:
                if upstream.provider == "anthropic":
                    headers["x-api-key"] = upstream.api_key
                else:
                    headers["authorization"] = f"Bearer {upstream.api_key}"
            start = time.monotonic()
            try:
                with relay._client.stream(self.command, upstream.url_for(path), headers=headers,
                                          content=body if body else None) as resp:
                    raw = self._relay_response(resp)
            except httpx.HTTPError as e:
                relay.record({"event": "response", "id": rid, "error": f"{type(e).__name__}: {e}"})
                return self._error(502, f"perfagent relay: upstream unreachable: {type(e).__name__}")
            self._meter(rid, route, resp, raw, time.monotonic() - start)
            self._end_chunks()  # only now: an agent that exits on its last answer must find it metered

        def _relay_response(self, resp: httpx.Response) -> bytes:
            """Send the upstream answer on as it arrives (chunked, unterminated); keep what is read for metering."""
            self.send_response(resp.status_code)
            for k, v in resp.headers.multi_items():
                if k.lower() not in NOT_FORWARDED["response"]:
                    self.send_header(k, v)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            kept = bytearray()
            try:
                for chunk in resp.iter_bytes():
                    if len(kept) < MAX_PARSED:
                        kept += chunk
                    if chunk:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the agent hung up; what came is still metered
            return bytes(kept)

        def _end_chunks(self) -> None:
            try:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def _meter(self, rid: str, route: str, resp: httpx.Response, raw: bytes, duration_s: float) -> None:
            is_sse = "text/event-stream" in resp.headers.get("content-type", "")
            events = sse_events(raw) if is_sse else []
            body = None if is_sse else _json_or_text(raw)
            record: dict[str, Any] = {"event": "response", "id": rid, "status": resp.status_code,
                                      "duration_ms": round(duration_s * 1000)}
            if route in METERED[upstream.provider]:
                got = metered_usage(upstream.provider, route, body, events)
                if got is not None:
                    model, usage = got
                    record.update(model=model, usage=usage.to_dict(), cost_usd=meter.add(model, usage, duration_s))
            record.update({"events": events} if is_sse else {"body": body})
            relay.record(record)

        def _body(self) -> bytes | None:
            if "chunked" in self.headers.get("transfer-encoding", "").lower():
                return self._chunked_body()
            try:
                length = int(self.headers.get("content-length") or 0)
            except ValueError:
                length = -1
            if not 0 <= length <= MAX_BODY:
                self._error(413, "perfagent relay: bad or too large request body", close=True)
                return None
            return self.rfile.read(length) if length else b""

        def _chunked_body(self) -> bytes | None:
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
                if len(out) > MAX_BODY:
                    self._error(413, "perfagent relay: request body too large", close=True)
                    return None

        def _refuse(self, what: str, status: int, message: str) -> None:
            """Refused before its body was read: the connection cannot carry another request."""
            meter.refuse(what)
            relay.record({"event": "refused", "what": what})
            self._error(status, message, close=True)

        def _error(self, status: int, message: str, close: bool = False) -> None:
            kind = "permission_error" if status == 403 else "invalid_request_error"
            data = json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            if close:
                self.send_header("connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _json_or_text(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw[:4096].decode("utf-8", "replace")


# -- the bridge inside the sandbox -------------------------------------------------------------
# Run by the sandbox's Python with -I (no site, no environment); it only copies bytes between the
# sandbox's loopback and the relay's socket, so the agent killing or replacing it gains nothing.
BRIDGE = r"""
import socket, sys, threading
port, path = int(sys.argv[1]), sys.argv[2]
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port)); srv.listen(64)
def pipe(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d: break
            b.sendall(d)
    except OSError: pass
    finally:
        try: b.shutdown(socket.SHUT_WR)
        except OSError: pass
def serve(c):
    u = socket.socket(socket.AF_UNIX)
    try: u.connect(path)
    except OSError: c.close(); return
    threading.Thread(target=pipe, args=(u, c), daemon=True).start()
    pipe(c, u)
print("ready", flush=True)
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


def bridge_command(python: str, socket_path: Path, port: int = BRIDGE_PORT) -> str:
    """A shell line that starts the bridge in the background and waits until it listens."""
    import shlex

    code = shlex.quote(BRIDGE)
    return (f"{shlex.quote(python)} -I -c {code} {port} {shlex.quote(str(socket_path))} > /tmp/.relay-bridge 2>&1 &\n"
            f"for _ in $(seq 100); do grep -q ready /tmp/.relay-bridge 2>/dev/null && break; sleep 0.05; done\n")
