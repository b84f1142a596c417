"""The metering relay, driven by the real anthropic and openai SDKs over its Unix socket, and from a sandbox."""

from __future__ import annotations

import json
import time

import anthropic
import httpx
import openai
import pytest
from fakeserver import reply, tool_call

from agent.agents.metering import Meter
from agent.agents.relay import PLACEHOLDER_KEY, Relay, Upstream, bridge_command
from agent.env.sandbox import SandboxSpec, base_env, isolation, run_command
from agent.models.base import Usage
from agent.models.pricing import cost_usd, dearest_price, load_prices

SECRET = "sk-real-key-held-by-the-relay"
USAGE = {"input_tokens": 1200, "output_tokens": 34, "cache_read": 100, "cache_write_5m": 50}


@pytest.fixture
def relay_for(tmp_path, fake_server, monkeypatch):
    """relay_for(provider, slow_log_s=0, models=None, **meter) -> (relay, records): a started relay in front of the
    fake server; `slow_log_s` delays each record, as a busy trajectory writer would; `models`: the run's models."""
    started = []

    def start(provider: str, slow_log_s: float = 0.0, models: tuple[str, ...] | None = None,
              **meter_args) -> tuple[Relay, list[dict]]:
        monkeypatch.setenv("ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY", SECRET)
        base = fake_server.url if provider == "anthropic" else fake_server.openai_url
        records: list[dict] = []

        def log(record: dict) -> None:
            time.sleep(slow_log_s)
            records.append(record)

        relay = Relay(Upstream.of(provider, base), Meter(load_prices(), **meter_args), tmp_path / "relay.sock",
                      log=log, models=models).__enter__()
        started.append(relay)
        return relay, records

    yield start
    for relay in started:
        relay.__exit__(None, None, None)


def client_over(relay: Relay, http=httpx):
    """An HTTP client whose every connection goes to the relay's socket (`http`: the SDK's own httpx)."""
    return http.Client(transport=http.HTTPTransport(uds=str(relay.socket_path)), timeout=30)


def anthropic_sdk(relay: Relay) -> anthropic.Anthropic:
    import httpx2  # what the anthropic SDK is built on

    return anthropic.Anthropic(api_key=PLACEHOLDER_KEY, base_url="http://relay", max_retries=0,
                               http_client=client_over(relay, httpx2))


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_sdk_through_the_relay_is_metered_and_keyed(relay_for, fake_server, stream):
    relay, records = relay_for("anthropic")
    fake_server.script([reply("hello", tool_call("run", command="ls"), usage=USAGE)])
    sdk = anthropic_sdk(relay)
    kw = {"model": "claude-sonnet-4-6", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
    if stream:
        with sdk.messages.stream(**kw) as s:
            message = s.get_final_message()
    else:
        message = sdk.messages.create(**kw)

    assert message.content[0].text == "hello" and message.content[1].name == "run"
    (req,) = fake_server.requests
    assert req.headers["x-api-key"] == SECRET and "authorization" not in req.headers
    usage = Usage(input_tokens=1200, output_tokens=34, cache_read=100, cache_write_5m=50)
    assert relay.meter.usage_by_model == {"claude-sonnet-4-6": usage}
    assert relay.meter.total_cost_usd == cost_usd("claude-sonnet-4-6", usage, load_prices())
    assert [r["event"] for r in records] == ["request", "response"]
    assert records[0]["body"]["messages"] == [{"role": "user", "content": "hi"}]
    assert SECRET not in json.dumps(records) and PLACEHOLDER_KEY not in json.dumps(records)


@pytest.mark.parametrize("stream", [False, True])
def test_openai_sdk_through_the_relay_counts_streamed_usage(relay_for, fake_server, stream):
    relay, _ = relay_for("openai")
    fake_server.script([reply("hi there", usage={"input_tokens": 700, "output_tokens": 20, "cache_read": 300})])
    sdk = openai.OpenAI(api_key=PLACEHOLDER_KEY, base_url="http://relay/v1", http_client=client_over(relay),
                        max_retries=0)
    kw = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in sdk.chat.completions.create(stream=True, **kw)
                       if c.choices)
        assert fake_server.requests[0].body["stream_options"] == {"include_usage": True}  # asked for by the relay
    else:
        text = sdk.chat.completions.create(**kw).choices[0].message.content
    assert text == "hi there"
    assert fake_server.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert relay.meter.usage_by_model["gpt-4o"] == Usage(input_tokens=700, output_tokens=20, cache_read=300)
    assert relay.meter.requests == 1


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_is_metered_and_logged_before_the_agent_has_all_of_it(relay_for, fake_server, stream):
    """An agent may exit on its last answer and the relay close at once: nothing may be counted after that."""
    relay, records = relay_for("openai", slow_log_s=0.3)
    fake_server.script([reply("done", usage={"input_tokens": 10, "output_tokens": 2})])
    with client_over(relay) as http:
        answer = http.post("http://relay/v1/chat/completions", json={"model": "gpt-4o", "stream": stream,
                                                                      "messages": [{"role": "user", "content": "hi"}]})
    assert answer.status_code == 200
    assert relay.meter.usage_by_model == {"gpt-4o": Usage(input_tokens=10, output_tokens=2)}
    assert [r["event"] for r in records] == ["request", "response"]


def test_an_sdk_that_stops_at_the_last_event_finds_the_answer_metered(relay_for, fake_server):
    """The openai SDK returns on `data: [DONE]` and hangs up without waiting for the stream's end; the provider
    may close it late. The relay holds the last event back until the answer is metered."""
    relay, _ = relay_for("openai")
    fake_server.script([reply("done", usage={"input_tokens": 10, "output_tokens": 2}, linger_s=0.5)])
    sdk = openai.OpenAI(api_key=PLACEHOLDER_KEY, base_url="http://relay/v1", http_client=client_over(relay),
                        max_retries=0)
    chunks = list(sdk.chat.completions.create(model="gpt-4o", stream=True,
                                              messages=[{"role": "user", "content": "hi"}]))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "done"
    assert relay.meter.usage_by_model == {"gpt-4o": Usage(input_tokens=10, output_tokens=2)}


def test_an_agent_resetting_its_connection_prints_no_traceback(relay_for, fake_server, capfd):
    import socket

    relay, _ = relay_for("openai")
    fake_server.script([reply("done")])
    body = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}).encode()
    with socket.socket(socket.AF_UNIX) as raw:  # closed with its answer unread: the relay's next read is reset
        raw.connect(str(relay.socket_path))
        raw.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: relay\r\ncontent-length: %d\r\n\r\n%s"
                    % (len(body), body))
        time.sleep(0.5)
    time.sleep(0.3)
    with client_over(relay) as http:  # and the relay still serves
        assert http.post("http://relay/v1/files", json={}).status_code == 404
    assert "Traceback" not in capfd.readouterr().err


def test_other_hosts_and_paths_are_refused_and_recorded(relay_for, fake_server):
    relay, _ = relay_for("anthropic")
    with client_over(relay) as http:
        connect = http.request("CONNECT", "http://relay/", headers={"host": "evil.example:443"})
        files = http.post("http://relay/v1/files", json={})
    assert connect.status_code == 403 and files.status_code == 404
    # A plain-HTTP proxy request names another host in its request line.
    import socket

    with socket.socket(socket.AF_UNIX) as raw:
        raw.connect(str(relay.socket_path))
        raw.sendall(b"GET http://evil.example/steal HTTP/1.1\r\nhost: evil.example\r\ncontent-length: 0\r\n\r\n")
        assert raw.recv(100).startswith(b"HTTP/1.1 403")
    assert relay.meter.refused == ["CONNECT /", "POST /v1/files", "GET http://evil.example/steal"]
    assert fake_server.requests == []


TOO_LARGE = (64 << 20) + 1


@pytest.mark.parametrize("framing", ["negative", "too long", "chunked too long"])
def test_a_bad_or_too_large_body_is_a_413_in_the_providers_shape(relay_for, fake_server, framing):
    import socket

    framing = {"negative": lambda: b"content-length: -5\r\n\r\n",
               "too long": lambda: b"content-length: %d\r\n\r\n" % TOO_LARGE,
               "chunked too long": lambda: b"transfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n" % (
                   TOO_LARGE, b"x" * TOO_LARGE)}[framing]()
    relay, _ = relay_for("anthropic")
    with socket.socket(socket.AF_UNIX) as raw:
        raw.connect(str(relay.socket_path))
        raw.sendall(b"POST /v1/messages HTTP/1.1\r\nhost: relay\r\n" + framing)
        answer = raw.makefile("rb").read()  # the relay closes the connection after it
    assert answer.startswith(b"HTTP/1.1 413") and b'"type": "invalid_request_error"' in answer
    assert fake_server.requests == []


def test_past_the_budget_nothing_more_reaches_the_provider(relay_for, fake_server):
    relay, _ = relay_for("anthropic", max_cost_usd=0.001)
    fake_server.script([reply("a", usage={"input_tokens": 1000, "output_tokens": 10})] * 2)
    sdk = anthropic_sdk(relay)
    kw = {"model": "claude-sonnet-4-6", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    sdk.messages.create(**kw)  # $0.00315: over the budget once it is counted
    assert relay.meter.stopped.is_set() and relay.meter.stop_reason == "budget"
    with pytest.raises(anthropic.BadRequestError, match="budget is spent"):
        sdk.messages.create(**kw)
    assert len(fake_server.requests) == 1


def test_a_budget_of_zero_is_no_budget(relay_for, fake_server):
    """`--max-cost 0` (or a task's max_cost_usd = 0): nothing is refused for its cost, as in our loop."""
    relay, _ = relay_for("anthropic", max_cost_usd=0)
    fake_server.script([reply("a", usage={"input_tokens": 1000, "output_tokens": 10})] * 3)
    sdk = anthropic_sdk(relay)
    for _ in range(3):
        sdk.messages.create(model="claude-sonnet-4-6", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert len(fake_server.requests) == 3 and relay.meter.requests == 3
    assert not relay.meter.stopped.is_set() and relay.meter.stop_reason is None
    assert relay.meter.total_cost_usd == pytest.approx(3 * 0.00315)


def test_an_unreachable_provider_is_a_502(tmp_path):
    meter = Meter(load_prices())
    with (Relay(Upstream("anthropic", "http://127.0.0.1:9", None), meter, tmp_path / "r.sock") as relay,
          client_over(relay) as http):
        resp = http.post("http://relay/v1/messages", json={"model": "m"})
    assert resp.status_code == 502 and "upstream unreachable" in resp.text


@pytest.mark.skipif(isolation().mode != "bwrap", reason="needs bubblewrap")
def test_from_inside_the_sandbox_only_the_relay_is_reachable(relay_for, fake_server, tmp_path):
    """The bridge reaches the relay from the sandbox's own loopback; the provider's own port does not exist there."""
    relay, _ = relay_for("anthropic")
    fake_server.script([reply("sealed hello")])
    port = fake_server.url.rsplit(":", 1)[1]
    probe = f"""
import json, urllib.request
def post(url):
    req = urllib.request.Request(url, data=json.dumps({{"model": "claude-sonnet-4-6", "max_tokens": 5,
        "messages": [{{"role": "user", "content": "hi"}}]}}).encode(), headers={{"content-type": "application/json"}})
    try:
        return urllib.request.urlopen(req, timeout=5).read().decode()
    except Exception as e:
        return "FAILED " + type(e).__name__
print("relay:", post("http://127.0.0.1:8787/v1/messages"))
print("direct:", post("http://127.0.0.1:{port}/v1/messages"))
"""
    work = tmp_path / "ws"
    work.mkdir()
    (work / "probe.py").write_text(probe)
    import sys

    result = run_command(bridge_command(sys.executable, relay.socket_path) + f"{sys.executable} -I probe.py", work,
                         timeout_s=60, env=base_env(), sandbox=SandboxSpec(readable=(relay.socket_path.parent,)))
    assert "relay: " in result.output and "sealed hello" in result.output, result.output
    assert "direct: FAILED" in result.output
    assert len(fake_server.requests) == 1


def test_upstream_url_keeps_an_openai_prefix():
    up = Upstream("openai", "http://127.0.0.1:5/proxy/v1", None)
    assert up.url_for("/v1/chat/completions") == "http://127.0.0.1:5/proxy/v1/chat/completions"
    assert Upstream("anthropic", "http://h:1", None).url_for("/v1/messages") == "http://h:1/v1/messages"


def test_a_model_not_the_runs_is_refused_in_the_anthropic_shape(relay_for, fake_server):
    """The run's model and its agent's side model pass (a dated snapshot of one too); any other gets the API's own
    invalid_request_error, naming the allowed ones, and never reaches the provider."""
    relay, records = relay_for("anthropic", models=("claude-sonnet-4-6", "claude-haiku-4-5"))
    fake_server.script([reply("ok"), reply("ok")])
    sdk = anthropic_sdk(relay)
    with pytest.raises(anthropic.BadRequestError) as refused:
        sdk.messages.create(model="claude-opus-9-9", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert refused.value.status_code == 400
    error = refused.value.body
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert "'claude-opus-9-9'" in error["error"]["message"] and "'claude-haiku-4-5'" in error["error"]["message"]
    assert fake_server.requests == [] and relay.meter.refused == ["model claude-opus-9-9"]
    for model in ("claude-sonnet-4-6", "claude-haiku-4-5-20251001"):
        sdk.messages.create(model=model, max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert [r.body["model"] for r in fake_server.requests] == ["claude-sonnet-4-6", "claude-haiku-4-5-20251001"]
    assert [r["event"] for r in records] == ["refused", "request", "response", "request", "response"]


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_a_model_not_the_runs_is_refused_in_the_openai_shape(relay_for, fake_server, api):
    relay, _ = relay_for("openai", models=("gpt-5",))
    sdk = openai.OpenAI(api_key=PLACEHOLDER_KEY, base_url="http://relay/v1", http_client=client_over(relay),
                        max_retries=0)
    with pytest.raises(openai.NotFoundError) as refused:
        if api == "responses":
            sdk.responses.create(model="gpt-4.5-preview", input="hi")
        else:
            sdk.chat.completions.create(model="gpt-4.5-preview", messages=[{"role": "user", "content": "hi"}])
    assert refused.value.status_code == 404 and refused.value.code == "model_not_found"
    error = refused.value.body
    assert error["type"] == "invalid_request_error" and "'gpt-5'" in error["message"]
    assert fake_server.requests == []


def test_an_unpriced_model_is_reserved_and_charged_at_the_dearest_price(relay_for, fake_server):
    """With no model list (any model passes), a model the table lacks still spends the budget: its worst case is
    reserved at the table's dearest prices, its answer charged at them and counted in `unpriced`."""
    relay, records = relay_for("anthropic", max_cost_usd=5.0)
    fake_server.script([reply("ok", usage={"input_tokens": 1000, "output_tokens": 1000})])
    with client_over(relay) as http:
        body = {"model": "claude-opus-9-9", "max_tokens": 10_000, "messages": [{"role": "user", "content": "hi"}]}
        assert http.post("http://relay/v1/messages", json=body).status_code == 200
        dear = dearest_price(load_prices())
        assert (dear.output, dear.cache_write_1h) == (75, 30)
        assert 0.75 < records[0]["worst_usd"] < 0.76  # its output limit at $75 / M, its ~35 tokens of input at $30
        assert relay.meter.unpriced == 1 and relay.meter.total_cost_usd == pytest.approx(0.015 + 0.075)
        # one whose worst case at those prices cannot fit in the $5 budget is refused, never forwarded
        body["max_tokens"] = 80_000  # $6 at $75 / M
        refused = http.post("http://relay/v1/messages", json=body)
    assert refused.status_code == 400 and "budget" in refused.json()["error"]["message"]
    assert len(fake_server.requests) == 1 and relay.meter.stop_reason == "budget"

    # report.json: the total a number, `unpriced` beside it, and a warning that says so
    from agent.results.report import AgentRun
    from agent.run.external import _account
    from agent.run.loop import Outcome
    from agent.run.graded import report_of

    outcome = Outcome()
    _account(outcome, relay.meter, AgentRun(name="hostile", model="claude-opus-9-9"), time.monotonic())
    doc = report_of(outcome, session_id="s", evaluation=None, permission_denials=[]).to_dict()
    assert doc["total_cost_usd"] == pytest.approx(0.09) and doc["unpriced"] == 1
    assert any("charged at the dearest" in w for w in outcome.warnings)
    assert "unpriced" not in report_of(Outcome(), session_id="s", evaluation=None, permission_denials=[]).to_dict()
