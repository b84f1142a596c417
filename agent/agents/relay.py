"""The metering relay: an external agent's only way out of its sandbox.

The agent's sandbox has no network. Inside it, a small bridge listens on 127.0.0.1:BRIDGE_PORT
(its own loopback) and passes every connection to a Unix socket bound in from the host, where
this relay answers. The relay
- forwards only the provider's API paths to the real endpoint, adding the real API key (the
  agent only ever holds a placeholder), and reads every answer decoded so it can count it;
- forwards a metered request only when it names one of the run's models (the run's own and the
  side models its agent is known to use, `Relay.models`), and answers any other with the
  provider's own error, naming the allowed ones: the agent cannot pick a model of its own;
- refuses everything else, a proxied CONNECT to another host included, and records it;
- counts the tokens (and server-side web searches) of every response, JSON or server-sent events,
  and prices them with our table, so the cost comes from the wire and not from what the agent says
  about itself; a model the table lacks is charged at its dearest prices (`Meter.unpriced` counts
  those answers), so the run's cost is never unknown and the budget always holds;
- reserves each metered request's worst case (its body's size in input tokens, its output limit)
  before forwarding it, with at most MAX_IN_FLIGHT out at once; a request whose worst case does
  not fit beside those in flight waits for them to be metered, one that does not fit in what is
  left of the budget (`agent.models.budget`) even alone is refused, never forwarded, and the
  reservation is settled to the metered cost when the answer is counted;
- refuses further requests once the run is over its budget or the deadline passed, and sets
  `stopped` so the runner ends the agent; it keeps reading and metering what it already
  forwarded (an answer whose agent hung up, an answer still out when the run ends), and an
  answer cut or hung before its final usage is metered from what it announced (Anthropic's
  `message_start`), else charged its worst case, and listed in `Meter.partial`;
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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx

from agent.models.anthropic import usage_from_api as anthropic_usage
from agent.models.base import Usage
from agent.models.budget import Spend, fits_budget
from agent.models.openai import usage_from_api as openai_chat_usage
from agent.models.pricing import PriceTable, normalize_model_id

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
CLOSED = {"budget": "the run's budget is spent", "time": "the run's time is up", "closing": "the run is over"}
MAX_BODY = 64 << 20
MAX_PARSED = 32 << 20  # a response longer than this is forwarded whole but not read for usage
# The event that ends a stream, per wire format: a client may stop reading at it, so it is sent on only
# once the answer is metered (chat completions, Messages, Responses).
LAST_EVENTS = (b"data: [DONE]", b"event: message_stop", b"event: response.completed", b"event: response.incomplete",
               b"event: response.failed")


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


# Metered requests forwarded at once. Each holds a worst-case reservation of the budget while it
# is out, so a burst from the agent (or a hostile one firing dozens of threads) queues here instead
# of all passing the budget check together; a few at once is all an agent's parallel tool calls need.
MAX_IN_FLIGHT = 4
# When the relay closes (the run is over), how long the answers still coming are waited for, so
# they are metered; whatever is still out after that is metered from what it announced.
DRAIN_S = 30.0
# A request that names no output limit (OpenAI's are optional) is reserved as if it asked for this:
# the largest output of any model we price.
DEFAULT_MAX_OUTPUT = 128_000
# Input tokens are estimated from the request body's size: a token is 3 to 4 characters of English
# or code, more for JSON's escapes and markup, so one per 3 bytes reads high, which a reservation should.
BYTES_PER_TOKEN = 3
# Server-side web searches a request may make when its tool names no cap (Anthropic's `max_uses`, the Responses
# API's `max_tool_calls`): reserved at the search price. Claude Code's WebSearch caps each request at 8.
DEFAULT_MAX_SEARCHES = 20


@dataclass
class Ticket:
    """One forwarded request: its reservation, and what of its answer has been read so far."""

    route: str
    model: str  # as requested; the answer's own name wins when it has one
    worst: Usage  # the most it can cost, in tokens
    reserved_usd: float | None
    start: float = field(default_factory=time.monotonic)
    status: int | None = None  # None: no answer yet
    sse: bool = False
    kept: bytearray = field(default_factory=bytearray)


@dataclass
class Meter(Spend):
    """Tokens, cost, reservations and refusals so far; shared by the relay's threads, read by the runner."""

    prices: PriceTable
    max_cost_usd: float | None = None  # None or 0: no budget
    deadline: float | None = None  # time.monotonic()
    requests: int = 0  # metered responses
    refused: list[str] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)  # answers metered from less than their final usage
    stop_reason: str | None = None  # "budget" | "time"
    refused_worst_usd: float | None = None  # the reservation that did not fit, when that stopped the run
    stopped: threading.Event = field(default_factory=threading.Event)
    closing: threading.Event = field(default_factory=threading.Event)  # the relay is shutting: admit nothing
    lock: threading.Lock = field(default_factory=threading.Lock)
    in_flight: dict[str, Ticket] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._changed = threading.Condition(self.lock)
        self.charge_unpriced = True  # an agent's request must never make the run's cost unknown

    @property
    def reserved_usd(self) -> float:
        return sum(t.reserved_usd or 0.0 for t in self.in_flight.values())

    def worst_case(self, model: str, input_tokens: int, max_output: int, searches: int = 0) -> tuple[Usage, float]:
        """The most a request can cost: its input at the dearest input-side price (a cache write; a long-context
        tier's once the input passes it), its output limit at the output price, and its searches; a model the
        table lacks at the table's dearest prices."""
        candidates = [Usage(input_tokens=input_tokens, output_tokens=max_output, web_search_requests=searches),
                      Usage(cache_write_5m=input_tokens, output_tokens=max_output, web_search_requests=searches),
                      Usage(cache_write_1h=input_tokens, output_tokens=max_output, web_search_requests=searches)]
        priced = [(float(self.charge(model, u, self.prices)[0] or 0), u) for u in candidates]
        cost, usage = max(priced, key=lambda p: p[0])
        return usage, cost

    def admit(self, rid: str, ticket: Ticket) -> str | None:
        """Reserve `ticket`'s worst case, waiting for a free slot, and while it does not fit beside the
        reservations of requests in flight, for those to settle (mostly far below their worst case);
        why it may not go (None: it is reserved). Only a request that does not fit alone stops the run."""
        with self._changed:
            while True:
                why = self.closed()
                if why:
                    return why
                if len(self.in_flight) < MAX_IN_FLIGHT:
                    spent = self.total_cost_usd or 0.0
                    if fits_budget(spent + self.reserved_usd, ticket.reserved_usd, self.max_cost_usd):
                        self.in_flight[rid] = ticket
                        return None
                    if not self.in_flight:
                        self.refused_worst_usd = ticket.reserved_usd
                        self.stop("budget")
                        return "reservation"
                self._changed.wait(0.25)

    def settle(self, rid: str, model: str, usage: Usage | None, duration_s: float, partial: str = "") -> float | None:
        """Count the answer to `rid` in place of its reservation (usage None: nothing to bill); its cost.
        Only the first settlement counts: a request given up on at close is not counted again when it ends."""
        with self._changed:
            ticket = self.in_flight.pop(rid, None)
            self._changed.notify_all()
            if ticket is None or usage is None:
                return None
            cost = self.count(model or ticket.model, usage, self.prices, duration_s)
            self.requests += 1
            if partial:
                self.partial.append(f"{rid} ({model or ticket.model}): {partial}")
            if self.over(self.max_cost_usd):
                self.stop("budget")
        return cost

    def add(self, model: str, usage: Usage, duration_s: float) -> float | None:
        """Count one response that held no reservation; the cost of it (None: no known price)."""
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
        if self.stop_reason is None and self.closing.is_set():
            return "closing"
        return self.stop_reason

    def drain(self, provider: Provider, wait_s: float) -> None:
        """At close: admit nothing more, wait up to `wait_s` for the answers still out, and meter the rest from
        what they had sent so far (an announcement, else their worst case), marked partial."""
        self.closing.set()
        end = time.monotonic() + wait_s
        with self._changed:
            while self.in_flight and time.monotonic() < end:
                self._changed.wait(min(0.1, max(0.0, end - time.monotonic())))
            left = dict(self.in_flight)
        for rid, ticket in left.items():
            model, usage, note = answer_usage(provider, ticket, "still unanswered when the relay closed")
            self.settle(rid, model, usage, time.monotonic() - ticket.start, note)


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
            return (model, messages_usage(usage)) if usage else None
        if isinstance(body, dict) and isinstance(body.get("usage"), dict):
            return body.get("model") or "", messages_usage(body["usage"])
        return None
    if path.endswith("/responses"):
        response = next((e.get("response") for e in reversed(events) if e.get("type") == "response.completed"),
                        body if isinstance(body, dict) else None)
        if isinstance(response, dict) and isinstance(response.get("usage"), dict):
            searches = sum(1 for item in response.get("output") or []
                           if isinstance(item, dict) and item.get("type") == "web_search_call")
            return response.get("model") or "", responses_usage(response["usage"], searches)
        return None
    chunks = events or ([body] if isinstance(body, dict) else [])
    with_usage = [c for c in chunks if isinstance(c.get("usage"), dict)]
    if not with_usage:
        return None
    return with_usage[-1].get("model") or "", openai_chat_usage(with_usage[-1]["usage"])


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


def request_model(body: Any) -> str:
    """The model a request names ('' for none)."""
    model = body.get("model") if isinstance(body, dict) else None
    return model.strip() if isinstance(model, str) else ""


def allowed_model(model: str, models: frozenset[str] | None) -> bool:
    """Whether `model` is one of the run's (None: any), compared as the price table looks ids up, so
    `anthropic/claude-sonnet-4-6` (litellm) or a dated snapshot is the model it names."""
    return models is None or (bool(model) and normalize_model_id(model) in models)


def request_searches(provider: Provider, body: dict[str, Any]) -> int:
    """The most server-side web searches a request can make: each web search tool's cap, else
    `DEFAULT_MAX_SEARCHES` (0 without one)."""
    tools = [t for t in body.get("tools") or []
             if isinstance(t, dict) and str(t.get("type", "")).startswith("web_search")]
    if not tools:
        return 0
    caps = [t.get("max_uses") for t in tools] if provider == "anthropic" else [body.get("max_tool_calls")]
    return sum(c if isinstance(c, int) and not isinstance(c, bool) and c >= 0 else DEFAULT_MAX_SEARCHES for c in caps)


def request_worst_case(meter: Meter, provider: Provider, route: str, body: Any, size: int) -> Ticket:
    """A ticket for one metered request, reserving the most it can cost: its body's size in input tokens
    (`BYTES_PER_TOKEN`) and its output limit (`DEFAULT_MAX_OUTPUT` when it names none)."""
    body = body if isinstance(body, dict) else {}
    model = request_model(body)
    names = ("max_tokens",) if provider == "anthropic" else (
        ("max_output_tokens",) if route.endswith("/responses") else ("max_completion_tokens", "max_tokens"))
    limits = [v for v in (body.get(n) for n in names) if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    worst, cost = meter.worst_case(model, -(-size // BYTES_PER_TOKEN), max(limits) if limits else DEFAULT_MAX_OUTPUT,
                                   request_searches(provider, body))
    return Ticket(route, model, worst, cost)


def answer_usage(provider: Provider, ticket: Ticket, why: str) -> tuple[str, Usage | None, str]:
    """(model, usage, note) to settle `ticket` with, from what of its answer was read; the note is empty for an
    answer metered from its final usage, else says how it was metered (`why`: how the answer ended)."""
    raw = bytes(ticket.kept)
    events = sse_events(raw) if ticket.sse else []
    body = None if ticket.sse else _json_or_text(raw)
    got = metered_usage(provider, ticket.route, body, events)
    if got is not None:
        model, usage = got
        cut = provider == "anthropic" and ticket.sse and not any(e.get("type") == "message_delta" for e in events)
        return model, usage, f"metered from its message_start ({why})" if cut else ""
    if ticket.status is None or 200 <= ticket.status < 300:  # it may have been answered (and billed) in full
        return "", ticket.worst, f"no usage read ({why}); charged its worst case"
    return "", None, ""  # an error answer: nothing billed


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
                 log: Callable[[dict[str, Any]], None] = lambda record: None, drain_s: float | None = None,
                 models: Iterable[str] | None = None):
        """`models`: the only models a metered request may name (the run's and its agent's side models);
        None lets any through (each still charged, at the dearest price when the table lacks it)."""
        self.upstream, self.meter, self.socket_path, self.log = upstream, meter, Path(socket_path), log
        self.allowed = None if models is None else tuple(dict.fromkeys(m for m in models if m))
        self.models = None if self.allowed is None else frozenset(normalize_model_id(m) for m in self.allowed)
        self.drain_s = DRAIN_S if drain_s is None else drain_s
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
        """Admit nothing more, meter what is still out (see `Meter.drain`), then close."""
        self.meter.closing.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self.meter.drain(self.upstream.provider, self.drain_s)
        self._client.close()
        self.socket_path.unlink(missing_ok=True)

    def record(self, record: dict[str, Any]) -> None:
        with self._log_lock:
            self.log({"time": time.time(), **record})


def _handler_for(relay: Relay) -> type[BaseHTTPRequestHandler]:
    upstream, meter = relay.upstream, relay.meter

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        agent_gone = False  # the agent hung up on the answer being sent

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
                return self._error(400, f"perfagent relay: {CLOSED[closed]}; no more requests")
            rid = uuid.uuid4().hex[:12]
            parsed = _json_or_text(body)
            if (upstream.provider == "openai" and route.endswith("/chat/completions") and isinstance(parsed, dict)
                    and parsed.get("stream") and not (parsed.get("stream_options") or {}).get("include_usage")):
                parsed["stream_options"] = {**(parsed.get("stream_options") or {}), "include_usage": True}
                body = json.dumps(parsed).encode()  # so the stream ends with the usage it is metered by
            ticket = None
            if route in METERED[upstream.provider] and not allowed_model(request_model(parsed), relay.models):
                return self._wrong_model(request_model(parsed), parsed)
            if route in METERED[upstream.provider]:
                ticket = request_worst_case(meter, upstream.provider, route, parsed, len(body))
                why = meter.admit(rid, ticket)  # waits for one of the MAX_IN_FLIGHT slots
                if why:
                    relay.record({"event": "refused", "id": rid, "what": f"{self.command} {route}", "reason": why,
                                  "worst_usd": ticket.reserved_usd, "body": parsed})
                    if why == "reservation":
                        return self._error(400, f"perfagent relay: the run's budget is spent: this request could "
                                                f"cost up to ${ticket.reserved_usd:.4f}, more than is left of the "
                                                f"${meter.max_cost_usd:g} budget; no more requests")
                    return self._error(400, f"perfagent relay: {CLOSED[why]}; no more requests")
            relay.record({"event": "request", "id": rid, "method": self.command, "path": route, "body": parsed,
                          **({"worst_usd": ticket.reserved_usd} if ticket else {})})
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in NOT_FORWARDED["request"] | SECRET_HEADERS}
            headers["accept-encoding"] = "identity"
            if upstream.api_key:
                if upstream.provider == "anthropic":
                    headers["x-api-key"] = upstream.api_key
                else:
                    headers["authorization"] = f"Bearer {upstream.api_key}"
            ticket = ticket or Ticket(route, "", Usage(), None)  # an unmetered path holds no reservation
            start = time.monotonic()
            ended, held = "it ended without its final usage", b""
            try:
                with relay._client.stream(self.command, upstream.url_for(path), headers=headers,
                                          content=body if body else None) as resp:
                    ticket.sse = "text/event-stream" in resp.headers.get("content-type", "")
                    ticket.status = resp.status_code
                    broke, held = self._relay_response(resp, ticket.kept, hold_last=ticket.sse)
                    ended = f"the answer broke off: {broke}" if broke else ended
            except httpx.HTTPError as e:
                error = f"{type(e).__name__}: {e}"
                if ticket.status is None:  # no answer began
                    relay.record({"event": "response", "id": rid, "error": error})
                    unsent = isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout))  # never reached the provider
                    if route in METERED[upstream.provider]:
                        self._settle(rid, ticket, time.monotonic() - start, f"no answer: {error}", unsent)
                    return self._error(502, f"perfagent relay: upstream unreachable: {type(e).__name__}")
                ended = f"the answer broke off: {error}"
            self._meter(rid, route, ticket, time.monotonic() - start, ended)
            # only now: an agent that exits on its last answer (or SDK on its last event) must find it metered
            self._send_chunk(held)
            if ended.startswith("the answer broke off"):
                self.close_connection = True  # the agent sees the answer cut, as it was
            else:
                self._send_chunk(b"", end=True)

        def _relay_response(self, resp: httpx.Response, kept: bytearray, hold_last: bool) -> tuple[str, bytes]:
            """Send the upstream answer on as it arrives (chunked, unterminated), keeping what is read for metering;
            read it to its end even when the agent has hung up, since it is billed. Why it broke off ('' if not),
            and with `hold_last` what came from the stream's last event on, unsent: a client may stop reading
            there (the openai SDK at `[DONE]`) without awaiting the stream's end."""
            self.send_response(resp.status_code)
            for k, v in resp.headers.multi_items():
                if k.lower() not in NOT_FORWARDED["response"]:
                    self.send_header(k, v)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            self.agent_gone, held = False, b""
            try:
                for chunk in resp.iter_bytes():
                    if len(kept) < MAX_PARSED:
                        kept += chunk
                    if held or (hold_last and any(event in chunk for event in LAST_EVENTS)):
                        held += chunk  # the stream's last event, and anything after it, wait for the metering
                    else:
                        self._send_chunk(chunk)  # once the agent has hung up, the rest is still read and metered
            except httpx.HTTPError as e:
                return f"{type(e).__name__}: {e}", held
            return "", held

        def _send_chunk(self, data: bytes, end: bool = False) -> None:
            """One chunk of the answer (with `end`, the chunked body's end); nothing once the agent has gone."""
            if self.agent_gone or not (data or end):
                return
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if data else b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                self.agent_gone = self.close_connection = True

        def _settle(self, rid: str, ticket: Ticket, duration_s: float, why: str, unsent: bool = False) -> dict:
            model, usage, note = ("", None, "") if unsent else answer_usage(upstream.provider, ticket, why)
            cost = meter.settle(rid, model, usage, duration_s, note)
            if usage is None:
                return {}
            return {"model": model or ticket.model, "usage": usage.to_dict(), "cost_usd": cost,
                    **({"partial": note} if note else {})}

        def _meter(self, rid: str, route: str, ticket: Ticket, duration_s: float, ended: str) -> None:
            raw = bytes(ticket.kept)
            events = sse_events(raw) if ticket.sse else []
            record: dict[str, Any] = {"event": "response", "id": rid, "status": ticket.status,
                                      "duration_ms": round(duration_s * 1000)}
            if route in METERED[upstream.provider]:
                record.update(self._settle(rid, ticket, duration_s, ended))
            record.update({"events": events} if ticket.sse else {"body": _json_or_text(raw)})
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

        def _wrong_model(self, model: str, body: Any) -> None:
            """A model that is not the run's: refused as the provider refuses a model it lacks, naming the allowed."""
            meter.refuse(f"model {model or '(none)'}")
            relay.record({"event": "refused", "what": f"model {model!r}", "reason": "model", "body": body})
            message = (f"perfagent relay: model {model!r} is not available in this run; "
                       f"use {' or '.join(repr(m) for m in relay.allowed or ())}")
            if upstream.provider == "anthropic":
                return self._error(400, message)
            return self._error(404, message, code="model_not_found", param="model")

        def _error(self, status: int, message: str, close: bool = False, code: str | None = None,
                   param: str | None = None) -> None:
            """An error in the provider's own shape, so the agent's SDK reads it as the API's."""
            kind = "permission_error" if status == 403 else "invalid_request_error"
            if upstream.provider == "anthropic":
                doc: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
            else:
                doc = {"error": {"message": message, "type": kind, "param": param, "code": code}}
            data = json.dumps(doc).encode()
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
