"""The metering relay: an external agent's only way out of its sandbox.

The agent's sandbox has no network. Inside it, a small bridge (agent.agents.bridge) listens on
127.0.0.1:BRIDGE_PORT (its own loopback) and passes every connection to a Unix socket bound in from
the host, where this relay answers. The relay
- forwards only the provider's API paths to the real endpoint, adding the real API key (the
  agent only ever holds a placeholder), and reads every answer decoded so it can count it;
- forwards a metered request only when it names one of the run's models (the run's own and the
  side models its agent is known to use, `Relay.models`), and answers any other with the
  provider's own error, naming the allowed ones: the agent cannot pick a model of its own;
- refuses everything else, a proxied CONNECT to another host included, and records it;
- meters every answer off the wire (agent.agents.wire: tokens and server-side web searches, JSON or
  server-sent events) with our prices, so the cost comes from the wire and not from what the agent
  says about itself, and holds each metered request's worst case reserved while it is out
  (agent.agents.metering: a model the table lacks charged at its dearest prices, a request that
  cannot fit in the budget refused, never forwarded);
- refuses further requests once the run is over its budget or the deadline passed, and sets
  `stopped` so the runner ends the agent; it keeps reading and metering what it already
  forwarded (an answer whose agent hung up, an answer still out when the run ends), and an
  answer cut or hung before its final usage is metered from what it announced (Anthropic's
  `message_start`), else charged its worst case, and listed in `Meter.partial`;
- appends every request and response to trajectory.jsonl (never the key).
"""

from __future__ import annotations

import os
import shlex
import socketserver
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import httpx

from agent.agents.metering import Meter, Ticket, allowed_model, answer_usage, request_worst_case
from agent.agents.wire import (FORWARDED, LAST_EVENTS, METERED, NO_SUCH_MODEL, Provider, auth_header, error_body,
                               json_or_text, request_model, sse_events, with_stream_usage)
from agent.models.base import Usage
from agent.models.pricing import normalize_model_id
from agent.errors import PerfagentError

if TYPE_CHECKING:
    from email.message import Message

    from typing_extensions import Self

BRIDGE_PORT = 8787  # inside the sandbox's own network namespace, where nothing else listens
BRIDGE = Path(__file__).with_name("bridge.py")
PLACEHOLDER_KEY = "sk-perfagent-relay-placeholder"
DEFAULT_BASE_URLS = {"anthropic": "https://api.anthropic.com", "openai": "https://api.openai.com/v1"}
KEY_VARS = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
BASE_URL_VARS = {"anthropic": "ANTHROPIC_BASE_URL", "openai": "OPENAI_BASE_URL"}
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
              "transfer-encoding", "upgrade", "host", "content-length"}
# A request body goes on as sent (its content-encoding with it); a response is read decoded, so
# its usage can be counted, and sent on decoded.
NOT_FORWARDED = {"request": HOP_BY_HOP | {"accept-encoding"}, "response": HOP_BY_HOP | {"content-encoding"}}
SECRET_HEADERS = {"authorization", "x-api-key", "api-key"}
CLOSED = {"budget": "the run's budget is spent", "time": "the run's time is up", "closing": "the run is over"}
MAX_BODY = 64 << 20
MAX_PARSED = 32 << 20  # a response longer than this is forwarded whole but not read for usage
# When the relay closes (the run is over), how long the answers still coming are waited for, so
# they are metered; whatever is still out after that is metered from what it announced.
DRAIN_S = 30.0


class RelayError(PerfagentError, RuntimeError):
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

    def headers(self, sent: Iterable[tuple[str, str]]) -> dict[str, str]:
        """The agent's headers as forwarded: no hop-by-hop or secret one, the answer asked for undecoded (it is
        read for its usage), and the real key in place of the agent's placeholder."""
        headers = {k: v for k, v in sent if k.lower() not in NOT_FORWARDED["request"] | SECRET_HEADERS}
        headers["accept-encoding"] = "identity"
        return {**headers, **(auth_header(self.provider, self.api_key) if self.api_key else {})}


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
            self._server = _UnixHTTPServer(str(self.socket_path), type("Handler", (_Handler,), {"relay": self}))
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

    def send(self, method: str, path: str, headers: Message, body: bytes) -> AbstractContextManager[httpx.Response]:
        """The agent's request sent on to the provider, keyed; its answer streamed."""
        return self._client.stream(method, self.upstream.url_for(path), headers=self.upstream.headers(headers.items()),
                                   content=body if body else None)


class _BadBody(ValueError):
    """A request body the relay will not read (its message is the agent's answer)."""


def _read_body(rfile: IO[bytes], headers: Message) -> bytes:
    """A request's body, as its content-length or chunked encoding says; _BadBody past MAX_BODY."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return _read_chunked(rfile)
    try:
        length = int(headers.get("content-length") or 0)
    except ValueError:
        length = -1
    if not 0 <= length <= MAX_BODY:
        raise _BadBody("perfagent relay: bad or too large request body")
    return rfile.read(length) if length else b""


def _read_chunked(rfile: IO[bytes]) -> bytes:
    out = bytearray()
    while True:
        size = int(rfile.readline().split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            return bytes(out)
        out += rfile.read(size)
        rfile.readline()
        if len(out) > MAX_BODY:
            raise _BadBody("perfagent relay: request body too large")


class _Handler(BaseHTTPRequestHandler):
    """The agent's side of one connection: what is not the provider's API is refused here, the rest goes on as
    an `_Exchange`; every refusal in the provider's own error shape."""

    protocol_version = "HTTP/1.1"
    relay: Relay  # set per relay, on a subclass (`Relay.__enter__`)
    agent_gone = False  # the agent hung up on the answer being sent

    def log_message(self, *args: object) -> None:
        pass

    def address_string(self) -> str:  # a Unix socket has no client address
        return "sandbox"

    def do_CONNECT(self) -> None:
        self.refuse(f"CONNECT {self.path}", 403, "perfagent relay: no network but the API")

    def do_POST(self) -> None:
        try:
            self._forward()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # noqa: BLE001 — the agent gets an answer, the trajectory the reason
            self.relay.record({"event": "relay_error", "error": f"{type(e).__name__}: {e}"})
            self.close_connection = True

    do_GET = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_POST

    def _forward(self) -> None:
        if not self.path.startswith("/"):  # an absolute URI: a plain-HTTP proxy request to another host
            return self.refuse(f"{self.command} {self.path}", 403, "perfagent relay: no network but the API")
        route = self.path.split("?", 1)[0]
        if route not in FORWARDED[self.relay.upstream.provider]:
            return self.refuse(f"{self.command} {route}", 404, f"perfagent relay: {route} is not forwarded")
        try:
            body = _read_body(self.rfile, self.headers)
        except _BadBody as e:
            return self.error(413, str(e), close=True)
        closed = self.relay.meter.closed()
        if closed:
            return self.error(400, f"perfagent relay: {CLOSED[closed]}; no more requests")
        _Exchange(self, route, body).run()

    def refuse(self, what: str, status: int, message: str) -> None:
        """Refused before its body was read: the connection cannot carry another request."""
        self.relay.meter.refuse(what)
        self.relay.record({"event": "refused", "what": what})
        self.error(status, message, close=True)

    def error(self, status: int, message: str, close: bool = False, code: str | None = None,
              param: str | None = None) -> None:
        data = error_body(self.relay.upstream.provider, status, message, code, param)
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        if close:
            self.send_header("connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def start_answer(self, resp: httpx.Response) -> None:
        """The answer's status and headers; its body follows chunked, as it arrives."""
        self.send_response(resp.status_code)
        for k, v in resp.headers.multi_items():
            if k.lower() not in NOT_FORWARDED["response"]:
                self.send_header(k, v)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.agent_gone = False

    def send_chunk(self, data: bytes, end: bool = False) -> None:
        """One chunk of the answer (with `end`, the chunked body's end); nothing once the agent has gone."""
        if self.agent_gone or not (data or end):
            return
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if data else b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.agent_gone = self.close_connection = True


class _Exchange:
    """One request of the agent's to the provider's API, from its admission to its metered answer."""

    def __init__(self, http: _Handler, route: str, body: bytes):
        self.http, self.relay, self.route = http, http.relay, route
        self.provider = self.relay.upstream.provider
        self.metered = route in METERED[self.provider]
        self.rid = uuid.uuid4().hex[:12]
        self.parsed = json_or_text(body)
        self.body = with_stream_usage(self.provider, route, self.parsed) or body

    def run(self) -> None:
        """Admit, forward and meter the request; the answer's last event goes to the agent only once metered."""
        ticket = self._admit() if self.metered else Ticket(self.route, "", Usage(), None)  # unmetered: no reservation
        if ticket is None:
            return
        self.relay.record({"event": "request", "id": self.rid, "method": self.http.command, "path": self.route,
                           "body": self.parsed, **({"worst_usd": ticket.reserved_usd} if self.metered else {})})
        start = time.monotonic()
        ended, held = "it ended without its final usage", b""
        try:
            with self.relay.send(self.http.command, self.http.path, self.http.headers, self.body) as resp:
                ticket.sse = "text/event-stream" in resp.headers.get("content-type", "")
                ticket.status = resp.status_code
                broke, held = self._pass_on(resp, ticket.kept, hold_last=ticket.sse)
                ended = f"the answer broke off: {broke}" if broke else ended
        except httpx.HTTPError as e:
            if ticket.status is None:  # no answer began
                return self._unanswered(ticket, e, time.monotonic() - start)
            ended = f"the answer broke off: {type(e).__name__}: {e}"
        self._meter(ticket, time.monotonic() - start, ended)
        # only now: an agent that exits on its last answer (or SDK on its last event) must find it metered
        self.http.send_chunk(held)
        if ended.startswith("the answer broke off"):
            self.http.close_connection = True  # the agent sees the answer cut, as it was
        else:
            self.http.send_chunk(b"", end=True)

    def _admit(self) -> Ticket | None:
        """The request's reservation, or None when it is refused (and answered so): a model not the run's, the
        budget or time spent, or a worst case that does not fit in what is left."""
        model, meter = request_model(self.parsed), self.relay.meter
        if not allowed_model(model, self.relay.models):
            return self._wrong_model(model)
        ticket = request_worst_case(meter, self.provider, self.route, self.parsed, len(self.body))
        why = meter.admit(self.rid, ticket)  # waits for one of the MAX_IN_FLIGHT slots
        if not why:
            return ticket
        self.relay.record({"event": "refused", "id": self.rid, "what": f"{self.http.command} {self.route}",
                           "reason": why, "worst_usd": ticket.reserved_usd, "body": self.parsed})
        if why == "reservation":
            self.http.error(400, f"perfagent relay: the run's budget is spent: this request could cost up to "
                                 f"${ticket.reserved_usd:.4f}, more than is left of the ${meter.max_cost_usd:g} "
                                 f"budget; no more requests")
        else:
            self.http.error(400, f"perfagent relay: {CLOSED[why]}; no more requests")
        return None

    def _wrong_model(self, model: str) -> None:
        """A model that is not the run's: refused as the provider refuses a model it lacks, naming the allowed."""
        self.relay.meter.refuse(f"model {model or '(none)'}")
        self.relay.record({"event": "refused", "what": f"model {model!r}", "reason": "model", "body": self.parsed})
        status, code, param = NO_SUCH_MODEL[self.provider]
        self.http.error(status, f"perfagent relay: model {model!r} is not available in this run; "
                                f"use {' or '.join(repr(m) for m in self.relay.allowed or ())}", code=code, param=param)

    def _pass_on(self, resp: httpx.Response, kept: bytearray, hold_last: bool) -> tuple[str, bytes]:
        """Send the upstream answer on as it arrives (chunked, unterminated), keeping what is read for metering;
        read it to its end even when the agent has hung up, since it is billed. Why it broke off ('' if not),
        and with `hold_last` what came from the stream's last event on, unsent: a client may stop reading
        there (the openai SDK at `[DONE]`) without awaiting the stream's end."""
        self.http.start_answer(resp)
        held = b""
        try:
            for chunk in resp.iter_bytes():
                if len(kept) < MAX_PARSED:
                    kept += chunk
                if held or (hold_last and any(event in chunk for event in LAST_EVENTS)):
                    held += chunk  # the stream's last event, and anything after it, wait for the metering
                else:
                    self.http.send_chunk(chunk)  # once the agent has hung up, the rest is still read and metered
        except httpx.HTTPError as e:
            return f"{type(e).__name__}: {e}", held
        return "", held

    def _unanswered(self, ticket: Ticket, e: httpx.HTTPError, duration_s: float) -> None:
        """No answer began: settled at nothing when the request never reached the provider, else as it may
        have been billed; the agent gets a 502."""
        error = f"{type(e).__name__}: {e}"
        self.relay.record({"event": "response", "id": self.rid, "error": error})
        unsent = isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout))  # never reached the provider
        if self.metered:
            self._settle(ticket, duration_s, f"no answer: {error}", unsent)
        self.http.error(502, f"perfagent relay: upstream unreachable: {type(e).__name__}")

    def _settle(self, ticket: Ticket, duration_s: float, why: str, unsent: bool = False) -> dict[str, Any]:
        """Settle the reservation to what the answer billed; the metering, for the trajectory."""
        model, usage, note = ("", None, "") if unsent else answer_usage(self.provider, ticket, why)
        cost = self.relay.meter.settle(self.rid, model, usage, duration_s, note)
        if usage is None:
            return {}
        return {"model": model or ticket.model, "usage": usage.to_dict(), "cost_usd": cost,
                **({"partial": note} if note else {})}

    def _meter(self, ticket: Ticket, duration_s: float, ended: str) -> None:
        raw = bytes(ticket.kept)
        record: dict[str, Any] = {"event": "response", "id": self.rid, "status": ticket.status,
                                  "duration_ms": round(duration_s * 1000)}
        if self.metered:
            record.update(self._settle(ticket, duration_s, ended))
        record.update({"events": sse_events(raw)} if ticket.sse else {"body": json_or_text(raw)})
        self.relay.record(record)


def bridge_command(python: str, socket_path: Path, port: int = BRIDGE_PORT) -> str:
    """A shell line that starts the bridge in the background and waits until it listens. The bridge goes in
    as text (`-I -c`): nothing of the harness's own folders is bound into the agent's sandbox for it."""
    code = shlex.quote(BRIDGE.read_text(encoding="utf-8"))
    return (f"{shlex.quote(python)} -I -c {code} {port} {shlex.quote(str(socket_path))} > /tmp/.relay-bridge 2>&1 &\n"
            f"for _ in $(seq 100); do grep -q ready /tmp/.relay-bridge 2>/dev/null && break; sleep 0.05; done\n")
