"""The relay's meter: what an external agent's requests may cost, and what their answers did.

Each metered request reserves its worst case (its body's size in input tokens, its output limit, its web
searches) before it is forwarded, with at most MAX_IN_FLIGHT out at once; one whose worst case does not fit
beside those in flight waits for them to be metered, one that does not fit in what is left of the budget
(`agent.models.budget`) even alone is refused and stops the run. The reservation is settled to the cost of what
the answer billed, read off the wire (agent.agents.wire) and priced with our table; a model the table lacks is
charged at its dearest prices (`Meter.unpriced` counts those), so the run's cost is never unknown. An answer cut
or hung before its final usage is metered from what it announced, else charged its worst case (`Meter.partial`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from agent.agents.wire import (Provider, json_or_text, metered_usage, output_limits, request_model, sse_events,
                               web_search_caps)
from agent.models.base import Usage
from agent.models.budget import Spend, fits_budget
from agent.models.pricing import PriceTable, normalize_model_id

# Metered requests forwarded at once. Each holds a worst-case reservation of the budget while it
# is out, so a burst from the agent (or a hostile one firing dozens of threads) queues here instead
# of all passing the budget check together; a few at once is all an agent's parallel tool calls need.
MAX_IN_FLIGHT = 4
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


def allowed_model(model: str, models: frozenset[str] | None) -> bool:
    """Whether `model` is one of the run's (None: any), compared as the price table looks ids up, so
    `anthropic/claude-sonnet-4-6` (litellm) or a dated snapshot is the model it names."""
    return models is None or (bool(model) and normalize_model_id(model) in models)


def request_searches(provider: Provider, body: dict[str, Any]) -> int:
    """The most server-side web searches a request can make: each web search tool's cap, else
    `DEFAULT_MAX_SEARCHES` (0 without one)."""
    caps = web_search_caps(provider, body)
    return sum(c if isinstance(c, int) and not isinstance(c, bool) and c >= 0 else DEFAULT_MAX_SEARCHES for c in caps)


def request_worst_case(meter: Meter, provider: Provider, route: str, body: Any, size: int) -> Ticket:
    """A ticket for one metered request, reserving the most it can cost: its body's size in input tokens
    (`BYTES_PER_TOKEN`) and its output limit (`DEFAULT_MAX_OUTPUT` when it names none)."""
    body = body if isinstance(body, dict) else {}
    model = request_model(body)
    limits = output_limits(provider, route, body)
    worst, cost = meter.worst_case(model, -(-size // BYTES_PER_TOKEN), max(limits) if limits else DEFAULT_MAX_OUTPUT,
                                   request_searches(provider, body))
    return Ticket(route, model, worst, cost)


def answer_usage(provider: Provider, ticket: Ticket, why: str) -> tuple[str, Usage | None, str]:
    """(model, usage, note) to settle `ticket` with, from what of its answer was read; the note is empty for an
    answer metered from its final usage, else says how it was metered (`why`: how the answer ended)."""
    raw = bytes(ticket.kept)
    events = sse_events(raw) if ticket.sse else []
    body = None if ticket.sse else json_or_text(raw)
    got = metered_usage(provider, ticket.route, body, events)
    if got is not None:
        model, usage = got
        cut = provider == "anthropic" and ticket.sse and not any(e.get("type") == "message_delta" for e in events)
        return model, usage, f"metered from its message_start ({why})" if cut else ""
    if ticket.status is None or 200 <= ticket.status < 300:  # it may have been answered (and billed) in full
        return "", ticket.worst, f"no usage read ({why}); charged its worst case"
    return "", None, ""  # an error answer: nothing billed
