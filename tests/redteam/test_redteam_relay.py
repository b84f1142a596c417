"""Red team, the relay's budget: a hostile agent inside the sandbox trying to spend more than the run's budget.

The relay holds the real key and the budget; the agent only holds a socket to it. These drive the relay over
real HTTP (its Unix socket, which the sandbox's bridge reaches) in front of the scripted provider.

| attack                                                               | must hold                                  |
|----------------------------------------------------------------------|--------------------------------------------|
| 24 requests of $1.20 each at once against a $0.50 (or $5) budget      | the spend stays within the budget plus at  |
|                                                                      |   most one request; the relay's total is   |
|                                                                      |   what the provider billed, answers that   |
|                                                                      |   end after the stop included              |
| a stream that hangs after its `message_start`                        | metered from that announcement, marked     |
|                                                                      |   partial, in the report too               |
"""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest
from fakeserver import hang, reply

import agent.agents.relay as relay_module
from agent.agents.metering import Meter
from agent.agents.relay import Relay, Upstream
from agent.models.base import Usage
from agent.models.pricing import cost_usd, load_prices
from agent.results.report import AgentRun
from agent.run.external import _account
from agent.run.loop import Outcome

KEY = "sk-redteam-relay-key"
MODEL = "claude-sonnet-4-6"
# $1.20 at the table's $3/M input and $15/M output: 1,000 input tokens ($0.003) and 79,800 output ($1.197).
DEAR = {"input_tokens": 1000, "output_tokens": 79_800}
PROMPT = "Optimize this. " * 267  # ~4,000 characters: the 1,000 input tokens the answer bills
PARALLEL = 24


def _slow(turn, seconds: float):
    """A reply the provider takes `seconds` to finish: answers still out when the run is stopped."""
    def answer(_req):
        time.sleep(seconds)
        return turn
    return answer


@pytest.mark.parametrize("budget", [0.50, 5.00])
def test_parallel_requests_cannot_overspend_the_budget(tmp_path, fake_server, budget):
    prices = load_prices()
    price = cost_usd(MODEL, Usage(**DEAR), prices)
    assert price == pytest.approx(1.20)
    fake_server.script([_slow(reply("ok", usage=DEAR), 0.5)] * PARALLEL)
    meter = Meter(prices, max_cost_usd=budget)
    relay = Relay(Upstream("anthropic", fake_server.url, KEY), meter, tmp_path / "relay.sock").__enter__()
    statuses: list[int | None] = []
    go = threading.Barrier(PARALLEL)

    def hostile() -> None:
        body = {"model": MODEL, "max_tokens": 80_000, "messages": [{"role": "user", "content": PROMPT}]}
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(relay.socket_path)), timeout=30) as http:
            go.wait()
            try:
                statuses.append(http.post("http://relay/v1/messages", json=body).status_code)
            except httpx.HTTPError:
                statuses.append(None)

    threads = [threading.Thread(target=hostile, daemon=True) for _ in range(PARALLEL)]
    for t in threads:
        t.start()
    try:
        # The runner: once the relay says stop, it ends the agent and closes the relay (as run_external does).
        assert meter.stopped.wait(30), "the relay never stopped the run"
    finally:
        relay.__exit__(None, None, None)
    for t in threads:
        t.join(30)
    time.sleep(0.6)  # every answer the provider began is finished (and billed) by now

    billed = len(fake_server.requests) * price  # every request that reached the provider was answered in full
    spent = meter.total_cost_usd
    print(f"budget ${budget:.2f}: {len(fake_server.requests)} of {PARALLEL} reached the provider, "
          f"billed ${billed:.2f}, relay metered ${spent:.2f}")
    assert spent is not None and spent <= budget + price, f"spent ${spent:.2f} of a ${budget:.2f} budget"
    assert spent == pytest.approx(billed), f"the relay metered ${spent:.2f}, the provider billed ${billed:.2f}"
    assert meter.stop_reason == "budget"
    assert statuses.count(200) == len(fake_server.requests)
    # The others were refused with an API error, or found the relay closed once the run was stopped.
    assert all(s in (400, None) for s in statuses if s != 200) and 400 in statuses
    assert all(r.headers["x-api-key"] == KEY for r in fake_server.requests)


def test_a_stream_that_hangs_after_message_start_is_metered_from_it(tmp_path, fake_server, monkeypatch):
    monkeypatch.setattr(relay_module, "DRAIN_S", 0.5, raising=False)  # how long the closing relay waits
    prices = load_prices()
    announced = {"input_tokens": 4000, "cache_read": 6000}  # $0.0138 of input, announced in message_start
    fake_server.script([hang(started=reply("never sent", usage=announced))])
    meter = Meter(prices, max_cost_usd=5.0)
    relay = Relay(Upstream("anthropic", fake_server.url, KEY), meter, tmp_path / "relay.sock").__enter__()
    body = json.dumps({"model": MODEL, "max_tokens": 1000, "stream": True,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    seen = b""
    try:
        with socket.socket(socket.AF_UNIX) as raw:
            raw.connect(str(relay.socket_path))
            raw.settimeout(10)
            raw.sendall(b"POST /v1/messages HTTP/1.1\r\nhost: relay\r\ncontent-type: application/json\r\n"
                        b"content-length: %d\r\n\r\n%s" % (len(body), body))
            while b"message_start" not in seen:
                chunk = raw.recv(65536)
                assert chunk, seen
                seen += chunk
            time.sleep(0.2)
            # The stream hangs; the run ends (its deadline, the agent killed) and the relay closes.
            relay.__exit__(None, None, None)
    finally:
        relay.__exit__(None, None, None)

    start_usage = Usage(input_tokens=4000, cache_read=6000, output_tokens=1)  # message_start says output 1
    expected = cost_usd(MODEL, start_usage, prices)
    assert expected == pytest.approx(0.0138, abs=1e-4)
    assert meter.total_cost_usd == pytest.approx(expected), f"metered ${meter.total_cost_usd}"
    assert meter.usage_by_model == {MODEL: start_usage}
    assert len(meter.partial) == 1 and "message_start" in meter.partial[0]

    # And the report says so: the run's cost includes it, the agent's record lists it, a warning names it.
    outcome, run = Outcome(), AgentRun(name="hostile", model=MODEL)
    _account(outcome, meter, run, time.monotonic())
    assert outcome.total_cost_usd == pytest.approx(expected)
    assert run.partial == meter.partial and any("without their final usage" in w for w in outcome.warnings)
