"""Model adapters driven through the real SDKs against a local fake API server."""

from __future__ import annotations

import copy
import json
import os
import socket
import time

import pytest

from agent.models.pricing import load_prices
from agent.models import DEFAULT_ANTHROPIC_MODEL, Model, ModelError, Usage
from agent.run.model_spec import make_model
from agent.models.anthropic import MAX_CACHE_BREAKPOINTS, usage_from_api, with_cache_breakpoints
from agent.models.openai import TOOL_ERROR_PREFIX, parse_arguments, to_openai_messages
from fakeserver import Fail, auth_error, not_found, overloaded, rate_limited, reply, tool_call


SYSTEM = "You optimize code."
TOOLS = [
    {"name": "read_file", "description": "Read a file.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"name": "submit", "description": "Finish.",
     "input_schema": {"type": "object", "properties": {"summary": {"type": "string"}}}},
]
FIRST = [{"role": "user", "content": [{"type": "text", "text": "Make it faster."}]}]
CONVERSATION = FIRST + [
    {"role": "assistant", "content": [
        {"type": "text", "text": "Reading."},
        {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.py"}},
    ]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x = 1", "is_error": False},
    ]},
    {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {"path": "missing.py"}},
    ]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no such file", "is_error": True},
        {"type": "text", "text": "3 turns left."},
    ]},
]
CACHED = {"input_tokens": 12, "output_tokens": 34, "cache_read": 5000, "cache_write_5m": 700, "cache_write_1h": 30}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """Known credentials, no proxies, no user config: only the fake server is ever reached."""
    for var in list(os.environ):
        if var.startswith(("ANTHROPIC_", "OPENAI_")) or var.lower().endswith("_proxy"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.config/anthropic profile
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def claude(server, stream=False, **kw) -> Model:
    return make_model("anthropic:claude-test", base_url=server.url, stream=stream, **kw)


def local(server, stream=False, **kw) -> Model:
    return make_model("openai:qwen-test", base_url=server.openai_url, stream=stream, **kw)


def from_openai_messages(messages: list[dict]) -> tuple[str, list[dict]]:
    """Chat-completions messages -> (system, neutral messages): the inverse of to_openai_messages, to test it."""
    system: list[str] = []
    out: list[dict] = []

    def user_blocks() -> list[dict]:
        if not out or out[-1]["role"] != "user":
            out.append({"role": "user", "content": []})
        return out[-1]["content"]

    for msg in messages:
        role, content = msg.get("role"), msg.get("content")
        if role in ("system", "developer"):
            system.append(content or "")
        elif role == "tool":
            text = content or ""
            is_error = text.startswith(TOOL_ERROR_PREFIX)
            user_blocks().append({
                "type": "tool_result",
                "tool_use_id": msg.get("tool_call_id", ""),
                "content": text[len(TOOL_ERROR_PREFIX):] if is_error else text,
                "is_error": is_error,
            })
        elif role == "user":
            if isinstance(content, list):  # multi-part content: keep the text parts
                content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
            user_blocks().append({"type": "text", "text": content or ""})
        elif role == "assistant":
            blocks: list[dict] = [{"type": "text", "text": content}] if content else []
            for call in msg.get("tool_calls") or []:
                fn = call.get("function") or {}
                args, _ = parse_arguments(fn.get("name", ""), fn.get("arguments"))
                blocks.append({"type": "tool_use", "id": call.get("id", ""), "name": fn.get("name", ""), "input": args})
            out.append({"role": "assistant", "content": blocks})
    return "\n\n".join(system), out


def breakpoints(body: dict) -> list[str]:
    """Where a request body carries cache_control markers."""
    found = [f"tool:{t['name']}" for t in body.get("tools", []) if "cache_control" in t]
    found += ["system" for b in body.get("system", []) if "cache_control" in b]
    for i, m in enumerate(body["messages"]):
        if isinstance(m["content"], list):
            found += [f"message:{i}:{j}" for j, b in enumerate(m["content"]) if "cache_control" in b]
    return found


# ---- make_model -------------------------------------------------------------------


def test_make_model_specs(fake_server):
    assert make_model("anthropic", base_url=fake_server.url).name == f"anthropic:{DEFAULT_ANTHROPIC_MODEL}"
    m = claude(fake_server)
    assert m.name == "anthropic:claude-test" and isinstance(m, Model)
    assert local(fake_server).name == "openai:qwen-test"
    with pytest.raises(ModelError, match="unknown model spec 'gemini:x'"):
        make_model("gemini:x")
    with pytest.raises(ModelError, match="names no model"):
        make_model("openai:", base_url=fake_server.openai_url)


def test_missing_keys_are_one_line_errors(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(ModelError) as err:
        make_model("anthropic:claude-test")
    assert "ANTHROPIC_API_KEY" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ModelError, match="OPENAI_API_KEY"):
        make_model("openai:gpt-4o")


def test_default_model_is_a_current_sonnet():
    from anthropic._data.deprecated_models import DEPRECATED_MODELS

    assert "sonnet" in DEFAULT_ANTHROPIC_MODEL and DEFAULT_ANTHROPIC_MODEL not in DEPRECATED_MODELS
    assert load_prices().lookup(DEFAULT_ANTHROPIC_MODEL) is not None  # a default run has a known cost


# ---- anthropic ----------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_anthropic_tool_call_round_trip(fake_server, stream):
    fake_server.script([
        reply("Let me look.", tool_call("read_file", path="a.py"), usage=CACHED),
        reply("All done.", usage={"input_tokens": 3, "output_tokens": 4}),
    ])
    model = claude(fake_server, stream=stream)
    r = model.complete(SYSTEM, FIRST, TOOLS)
    assert r.text == "Let me look."
    assert [(c.name, c.input, c.error) for c in r.tool_calls] == [("read_file", {"path": "a.py"}, None)]
    assert r.stop_reason == "tool_use" and r.model == "claude-test"
    assert r.usage == Usage(input_tokens=12, output_tokens=34, cache_write_5m=700, cache_write_1h=30,
                            cache_read=5000)
    assert r.api_duration_s > 0
    json.dumps(r.raw)  # serialisable for the trajectory

    turn2 = FIRST + [
        {"role": "assistant", "content": [{"type": "text", "text": r.text}] + [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in r.tool_calls]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": r.tool_calls[0].id, "content": "x = 1", "is_error": False}]},
    ]
    r2 = model.complete(SYSTEM, turn2, TOOLS)
    assert (r2.text, r2.tool_calls, r2.stop_reason) == ("All done.", [], "end_turn")

    first, second = fake_server.requests
    assert first.path == "/v1/messages" and first.stream is stream
    assert "test-key" in first.headers.get("authorization", "") + first.headers.get("x-api-key", "")
    assert first.body["model"] == "claude-test" and first.body["max_tokens"] > 0
    assert [t["name"] for t in first.body["tools"]] == ["read_file", "submit"]
    assert second.body["messages"][1]["content"][1]["id"] == r.tool_calls[0].id


def test_cache_breakpoints_on_tools_system_and_latest_turns(fake_server):
    fake_server.script([reply("ok"), reply("ok")])
    before = copy.deepcopy(CONVERSATION)
    tools_before = copy.deepcopy(TOOLS)
    claude(fake_server).complete(SYSTEM, CONVERSATION, TOOLS)
    assert CONVERSATION == before and TOOLS == tools_before  # caller's objects untouched

    body = fake_server.requests[0].body
    marks = breakpoints(body)
    assert marks == ["tool:submit", "system", "message:2:0", "message:4:1"]
    assert len(marks) <= MAX_CACHE_BREAKPOINTS
    assert body["system"][0]["text"] == SYSTEM
    # apart from the markers, the messages are sent exactly as given
    stripped = [{**m, "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]]}
                for m in body["messages"]]
    assert stripped == CONVERSATION

    # Next turn: the previous latest turn keeps its marker, so its prefix is read from cache.
    longer = CONVERSATION + [{"role": "assistant", "content": [{"type": "text", "text": "hm"}]},
                             {"role": "user", "content": [{"type": "text", "text": "go on"}]}]
    claude(fake_server).complete(SYSTEM, longer, TOOLS)
    assert breakpoints(fake_server.requests[1].body) == ["tool:submit", "system", "message:4:1", "message:6:0"]


def test_cache_breakpoints_never_exceed_four():
    marked = copy.deepcopy(CONVERSATION)
    marked[0]["content"][0]["cache_control"] = {"type": "ephemeral"}
    marked[2]["content"][0]["cache_control"] = {"type": "ephemeral"}
    req = with_cache_breakpoints(SYSTEM, marked, TOOLS)
    total = breakpoints(req.params("m", 1))
    assert len(total) == MAX_CACHE_BREAKPOINTS
    # a string system prompt and string content are fine too; no empty system block is sent
    req = with_cache_breakpoints("", [{"role": "user", "content": "hi"}], [])
    assert req.params("m", 1) == {"model": "m", "max_tokens": 1, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}]}


@pytest.mark.parametrize("make", [claude, local], ids=["anthropic", "openai"])
def test_a_tool_results_local_data_is_never_sent(fake_server, make):
    """run_checks' evaluation rides in the tool_result block for the rules policy; no API sees it."""
    fake_server.script([reply("ok")])
    with_data = copy.deepcopy(CONVERSATION)
    with_data[2]["content"][0]["data"] = {"evaluation": {"verdict": "pass", "secret_marker": 1}}
    before = copy.deepcopy(with_data)
    make(fake_server).complete(SYSTEM, with_data, TOOLS)
    body = json.dumps(fake_server.requests[0].body)
    assert "secret_marker" not in body and '"data"' not in body and "x = 1" in body
    assert with_data == before  # the caller's conversation keeps its data


def test_usage_mapping_falls_back_to_5m_writes():
    assert usage_from_api({"input_tokens": 1, "output_tokens": 2, "cache_creation_input_tokens": 50,
                           "cache_read_input_tokens": 7}) == Usage(1, 2, 50, 0, 7)
    assert usage_from_api({"input_tokens": 1, "output_tokens": 2, "cache_creation_input_tokens": 50,
                           "cache_creation": {"ephemeral_5m_input_tokens": 20,
                                              "ephemeral_1h_input_tokens": 30}}) == Usage(1, 2, 20, 30, 0)
    assert Usage(1, 2, 3, 4, 5) + Usage(10, 20, 30, 40, 50) == Usage(11, 22, 33, 44, 55)
    assert Usage(1, 2).to_dict() == {"input_tokens": 1, "output_tokens": 2, "cache_write_5m": 0,
                                     "cache_write_1h": 0, "cache_read": 0}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_anthropic_survives_529_overloaded(fake_server, stream):
    fake_server.script([overloaded(), reply("ok")])
    r = claude(fake_server, stream=stream).complete(SYSTEM, FIRST, TOOLS)
    assert r.text == "ok"
    assert [q.headers["x-stainless-retry-count"] for q in fake_server.requests] == ["0", "1"]


def test_anthropic_survives_overload_inside_a_stream(fake_server):
    fake_server.script([overloaded(mid_stream=True), reply("ok")])
    r = claude(fake_server, stream=True).complete(SYSTEM, FIRST, TOOLS)
    assert r.text == "ok" and len(fake_server.requests) == 2


def test_anthropic_429_honours_retry_after(fake_server):
    fake_server.script([rate_limited(retry_after=1), reply("ok")])
    r = claude(fake_server).complete(SYSTEM, FIRST, TOOLS)
    first, second = fake_server.requests
    assert r.text == "ok"
    assert 0.95 <= second.at - first.at < 3  # waited what the server asked, not the 0.5 s default
    assert r.api_duration_s >= 0.95  # retries count as API time


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("make", [claude, local], ids=["anthropic", "openai"])
def test_retry_after_beyond_the_runs_deadline_is_not_slept_out(fake_server, make, stream):
    """A 429 asking for an hour, with 5 s left: an error now that says why, not an hour's sleep."""
    fake_server.script([rate_limited(retry_after=3600), reply("too late")])
    model = make(fake_server, stream=stream)
    model.deadline.at = time.monotonic() + 5
    start = time.monotonic()
    with pytest.raises(ModelError, match=r"429 .*the server asked to retry after 3600s, longer than the [0-9.]+s left"):
        model.complete(SYSTEM, FIRST, TOOLS)
    assert time.monotonic() - start < 3 and len(fake_server.requests) == 1


def test_retry_after_within_the_deadline_is_still_honoured(fake_server):
    fake_server.script([rate_limited(retry_after=1), reply("ok")])
    model = claude(fake_server)
    model.deadline.at = time.monotonic() + 30
    assert model.complete(SYSTEM, FIRST, TOOLS).text == "ok"
    gap = fake_server.requests[1].at - fake_server.requests[0].at
    assert len(fake_server.requests) == 2 and gap >= 0.9


def test_anthropic_401_is_one_line_and_not_retried(fake_server):
    fake_server.script([auth_error(), reply("never")])
    with pytest.raises(ModelError) as err:
        claude(fake_server).complete(SYSTEM, FIRST, TOOLS)
    assert str(err.value) == "anthropic API: 401 authentication_error: invalid x-api-key"
    assert len(fake_server.requests) == 1


def test_anthropic_unknown_model_and_exhausted_retries(fake_server):
    fake_server.script([not_found("claude-nope")])
    with pytest.raises(ModelError, match="^anthropic API: 404 not_found_error: model: claude-nope$"):
        claude(fake_server).complete(SYSTEM, FIRST, TOOLS)
    fake_server.script([overloaded(), overloaded()])
    with pytest.raises(ModelError) as err:
        claude(fake_server, max_retries=1).complete(SYSTEM, FIRST, TOOLS)
    assert str(err.value) == "anthropic API: 529 overloaded_error: Overloaded (after 1 retries)"
    fake_server.script([overloaded(mid_stream=True), overloaded(mid_stream=True)])
    with pytest.raises(ModelError) as err:
        claude(fake_server, stream=True, max_retries=1).complete(SYSTEM, FIRST, TOOLS)
    assert str(err.value) == "anthropic API: stream error overloaded_error: Overloaded (after 1 retries)"


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("spec,suffix", [("anthropic:claude-test", ""), ("openai:qwen", "/v1")])
def test_connection_refused_is_one_line(spec, suffix):
    model = make_model(spec, base_url=f"http://127.0.0.1:{unused_port()}{suffix}", max_retries=0)
    with pytest.raises(ModelError) as err:
        model.complete(SYSTEM, FIRST, TOOLS)
    message = str(err.value)
    assert "cannot connect to http://127.0.0.1:" in message and "\n" not in message


# ---- openai -------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_openai_tool_call_round_trip(fake_server, stream):
    fake_server.script([
        reply("Reading.", tool_call("read_file", path="a.py"), tool_call("submit", summary="s"), usage=CACHED),
        reply("Done."),
    ])
    model = local(fake_server, stream=stream)
    r = model.complete(SYSTEM, FIRST, TOOLS)
    assert r.text == "Reading." and r.stop_reason == "tool_use" and r.model == "qwen-test"
    assert [(c.name, c.input, c.error) for c in r.tool_calls] == [
        ("read_file", {"path": "a.py"}, None), ("submit", {"summary": "s"}, None)]
    assert len({c.id for c in r.tool_calls}) == 2
    # prompt_tokens (5012) includes the cached 5000; OpenAI has no cache-write figures
    assert r.usage == Usage(input_tokens=12, output_tokens=34, cache_read=5000)
    assert r.api_duration_s > 0
    json.dumps(r.raw)

    r2 = model.complete(SYSTEM, CONVERSATION, TOOLS)
    assert (r2.text, r2.tool_calls, r2.stop_reason) == ("Done.", [], "end_turn")

    first, second = fake_server.requests
    assert first.path == "/v1/chat/completions" and first.stream is stream
    assert first.headers["authorization"] == "Bearer not-needed"  # local server: placeholder key
    if stream:
        assert first.body["stream_options"] == {"include_usage": True}
    assert first.body["tools"][0] == {"type": "function", "function": {
        "name": "read_file", "description": "Read a file.", "parameters": TOOLS[0]["input_schema"]}}
    assert first.body["messages"] == [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": "Make it faster."}]
    assert [m["role"] for m in second.body["messages"]] == [
        "system", "user", "assistant", "tool", "assistant", "tool", "user"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_openai_malformed_tool_arguments(fake_server, stream):
    fake_server.script([reply("", tool_call("read_file", '{"path": "a.py"'), tool_call("submit", "[1, 2]"))])
    r = local(fake_server, stream=stream).complete(SYSTEM, FIRST, TOOLS)
    bad_json, not_object = r.tool_calls
    assert bad_json.input == {} and "not valid JSON" in bad_json.error and "read_file" in bad_json.error
    assert not_object.input == {} and "must be a JSON object" in not_object.error


def test_openai_message_conversion_round_trip():
    converted = to_openai_messages(SYSTEM, CONVERSATION)
    assert converted == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Make it faster."},
        {"role": "assistant", "content": "Reading.", "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "x = 1"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "toolu_2", "type": "function",
             "function": {"name": "read_file", "arguments": '{"path": "missing.py"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "[tool error] no such file"},
        {"role": "user", "content": "3 turns left."},
    ]
    assert from_openai_messages(converted) == (SYSTEM, CONVERSATION)


def test_openai_key_and_errors(fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    fake_server.script([rate_limited(retry_after=0.2), reply("ok"), auth_error()])
    model = local(fake_server)
    r = model.complete(SYSTEM, FIRST, [])
    first, second = fake_server.requests
    assert r.text == "ok" and 0.18 <= second.at - first.at < 2
    assert first.headers["authorization"] == "Bearer sk-test" and "tools" not in first.body
    with pytest.raises(ModelError) as err:
        model.complete(SYSTEM, FIRST, [])
    assert str(err.value) == "openai API: 401 authentication_error: invalid x-api-key"


def test_openai_base_url_from_env(fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.openai_url)
    fake_server.script([Fail(503, "server_error", "busy"), reply("ok")])
    assert make_model("openai:qwen-test").complete(SYSTEM, FIRST, TOOLS).text == "ok"
    assert len(fake_server.requests) == 2
