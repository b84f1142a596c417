"""The relay's meter: worst-case reservations, waiting for a slot, refusing what cannot fit."""

from __future__ import annotations

import threading

import pytest

from agent.agents.metering import Meter, Ticket, request_worst_case
from agent.models.base import Usage
from agent.models.pricing import load_prices


def test_a_request_that_fits_only_alone_waits_for_the_one_in_flight():
    """Two requests of an agent, each of which could cost $1.30, under a $2 budget: the second waits until
    the first is metered (at $0.0063) and then goes; neither stops the run. One that cannot fit even
    alone is refused and stops it."""
    meter = Meter(load_prices(), max_cost_usd=2.0)
    worst = Usage(input_tokens=1000, output_tokens=80_000)
    assert meter.admit("a", Ticket("anthropic", "claude-sonnet-4-6", worst, 1.30)) is None
    second: list[str | None] = []
    waiting = threading.Thread(target=lambda: second.append(
        meter.admit("b", Ticket("anthropic", "claude-sonnet-4-6", worst, 1.30))))
    waiting.start()
    waiting.join(0.5)
    assert waiting.is_alive() and not meter.stopped.is_set(), "the second request did not wait"
    meter.settle("a", "claude-sonnet-4-6", Usage(input_tokens=1000, output_tokens=200), 0.1)
    waiting.join(5)
    assert second == [None] and not meter.stopped.is_set()
    meter.settle("b", "claude-sonnet-4-6", Usage(input_tokens=1000, output_tokens=200), 0.1)
    assert meter.admit("c", Ticket("anthropic", "claude-sonnet-4-6", worst, 2.5)) == "reservation"
    assert meter.stop_reason == "budget" and meter.refused_worst_usd == 2.5


def test_web_searches_are_reserved():
    meter = Meter(load_prices())
    body = {"model": "claude-sonnet-4-6", "max_tokens": 100, "tools": [
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]}
    ticket = request_worst_case(meter, "anthropic", "/v1/messages", body, 300)
    plain = request_worst_case(meter, "anthropic", "/v1/messages", {**body, "tools": []}, 300)
    assert ticket.worst.web_search_requests == 5 and ticket.reserved_usd == pytest.approx(plain.reserved_usd + 0.05)
