"""The Codex adapter, end to end: the real `codex` CLI, sealed, talking to a scripted Responses API.

perfagent's own CLI runs the task; the relay forwards Codex's /v1/responses to the fake server and
meters them; the shell commands the script has Codex run really edit the workspace, and the checks
grade the result. Nothing here needs the network or a key.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from agent.agents import make_agent
from agent.agents.base import Session
from agent.agents.codex import Codex
from agent.agents.relay import PLACEHOLDER_KEY
from fakeserver import Fail, FakeServer, Recorded, Turn, bad_request, reply, tool_call
from helpers import make_tiny_task

needs_codex = pytest.mark.skipif(shutil.which("codex") is None,
                                 reason="the Codex CLI is not on PATH (npm install -g @openai/codex)")

MODEL = "gpt-5"  # priced in agent/models/pricing.json: 1.25 input, 0.125 cached input, 10 output per million
REAL_KEY = "sk-upstream-test-key"
U1 = {"input_tokens": 4000, "output_tokens": 120, "cache_read": 1000}
U2 = {"input_tokens": 300, "output_tokens": 45, "cache_read": 4800}
CLAIM = "buf in f is fully written by copy_ before it is read, so torch.empty is safe there."
SAFE_SED = "sed -i '5s/torch.zeros(n)/torch.empty(n)/' pkg/mod.py && grep -c torch.empty pkg/mod.py"


@pytest.fixture
def task_file(tmp_path: Path) -> Path:
    return make_tiny_task(tmp_path)


def perfagent(task_file: Path, server: FakeServer, run_id: str, *extra: str) -> subprocess.CompletedProcess:
    """`perfagent run --agent codex` as a user types it, the fake server as the OpenAI endpoint."""
    tmp = task_file.parent
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp), "COLUMNS": "200", "OPENAI_API_KEY": REAL_KEY}
    args = ["run", str(task_file), "--agent", "codex", "--model", MODEL, "--base-url", server.openai_url,
            "--run-id", run_id, "--out", str(tmp), "--quiet", "--allow-unsandboxed", *extra]
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=tmp, capture_output=True, text=True,
                          env=env, timeout=300)


def cost(*usages: dict) -> float:
    """What the relay must charge for these responses at gpt-5's prices, to the last digit."""
    per_m = sum(Decimal(u["input_tokens"]) * Decimal("1.25") + Decimal(u["cache_read"]) * Decimal("0.125")
                + Decimal(u["output_tokens"]) * 10 for u in usages)
    return float(per_m / 10**6)


def results(task_file: Path, run_id: str) -> tuple[dict, str]:
    tmp = task_file.parent
    report = json.loads((tmp / f"results/{run_id}/tiny/report.json").read_text())
    return report, (tmp / f"patches/{run_id}/tiny/model_patch.diff").read_text()


def tool_output(req: Recorded) -> str:
    """The output Codex sent back for the shell command of the previous reply."""
    return next(i["output"] for i in reversed(req.body["input"]) if i.get("type") == "function_call_output")


@pytest.mark.slow
@needs_codex
def test_codex_edits_the_workspace_and_its_cost_is_metered(task_file, fake_server):
    fake_server.script([
        reply("Switching f to torch.empty.", tool_call("exec_command", cmd=SAFE_SED), usage=U1),
        reply(CLAIM, usage=U2),
    ])
    res = perfagent(task_file, fake_server, "c1")
    assert res.returncode == 0, res.stderr
    report, patch = results(task_file, "c1")
    assert "+    buf = torch.empty(n)" in patch and patch.count("torch.empty") == 1

    agent = report["agent"]
    assert agent["name"] == "codex" and agent["model"] == MODEL and re.fullmatch(r"\d+\.\d+\.\d+", agent["version"])
    assert agent["claim"] == CLAIM and report["result"] == CLAIM
    assert agent["own_cost_usd"] is None and agent["refused"] == []  # nothing tried to leave but the API
    assert [(r["round"], r["exit_code"], r["verdict"]) for r in agent["rounds"]] == [(1, 0, "pass")]
    assert report["subtype"] == "success" and report["evaluation"]["verdict"] == "pass"

    # the cost is the scripted usage at our prices, metered on the wire by the relay
    assert report["total_cost_usd"] == cost(U1, U2) and report["num_turns"] == 2
    mu = report["modelUsage"][MODEL]
    assert mu["costUSD"] == cost(U1, U2)
    assert mu["inputTokens"] == 4300 and mu["cacheReadInputTokens"] == 5800 and mu["outputTokens"] == 165

    # Codex reached the fake only through the relay (which swapped its placeholder for the real key),
    # over the Responses API, and ran the command the script gave it in the workspace
    reqs = fake_server.requests
    assert [r.path for r in reqs] == ["/v1/responses"] * 2 and all(r.stream for r in reqs)
    assert {r.headers["authorization"] for r in reqs} == {f"Bearer {REAL_KEY}"}
    assert all(r.body["model"] == MODEL for r in reqs)
    assert not any(t.get("type") == "web_search" for t in reqs[0].body["tools"])
    out = tool_output(reqs[1])
    assert "Process exited with code 0" in out and out.rstrip().endswith("1")

    kept = task_file.parent / "results/c1/tiny/agent"
    assert json.loads((kept / "round-1.result.json").read_text())["type"] == "turn.completed"
    assert '"type":"thread.started"' in (kept / "round-1.stdout.txt").read_text()


@needs_codex
@pytest.mark.slow
def test_a_failing_change_is_fixed_in_a_resumed_session(task_file, fake_server):
    """Round 1 makes every zeros empty (g breaks under poisoned memory); round 2 resumes the same thread
    with our checks' findings and reverts g."""
    seen: dict[str, object] = {}

    def resumed(req: Recorded) -> Turn:
        kinds = [i.get("type") for i in req.body["input"]]
        last_user = next(i for i in reversed(req.body["input"]) if i.get("role") == "user")
        seen.update(history=kinds.count("function_call"), feedback=last_user["content"][0]["text"])
        return reply("", tool_call("exec_command", cmd="sed -i '11s/torch.empty(n)/torch.zeros(n)/' pkg/mod.py"),
                     usage=U1)

    fake_server.script([
        reply("", tool_call("exec_command", cmd="sed -i 's/torch.zeros(n)/torch.empty(n)/' pkg/mod.py"), usage=U1),
        reply("Both buffers now use torch.empty.", usage=U2),
        resumed,
        reply(CLAIM, usage=U2),
    ])
    res = perfagent(task_file, fake_server, "c2", "--rounds", "2")
    assert res.returncode == 0, res.stderr
    report, patch = results(task_file, "c2")
    rounds = report["agent"]["rounds"]
    assert [(r["round"], r["verdict"]) for r in rounds] == [(1, "fail"), (2, "pass")]
    assert rounds[0]["claim"] == "Both buffers now use torch.empty." and rounds[1]["claim"] == CLAIM
    assert report["agent"]["claim"] == CLAIM and report["evaluation"]["verdict"] == "pass"
    assert "+    buf = torch.empty(n)" in patch and patch.count("torch.empty") == 1  # only f's change is kept

    # round 2 resumed Codex's own thread: its request carries round 1's tool call and then our feedback
    assert seen["history"] == 1
    assert "test_g" in rounds[0]["evidence"] and "poisoned" in rounds[0]["evidence"]
    assert "did not pass" in str(seen["feedback"]) and rounds[0]["evidence"] in str(seen["feedback"])
    assert report["total_cost_usd"] == cost(U1, U2, U1, U2) and report["num_turns"] == 4


@pytest.mark.slow
@needs_codex
def test_a_failed_turn_is_the_agents_error(task_file, fake_server):
    """An API error ends Codex's turn; the run says so in one line, from the API's own message."""
    fake_server.script([bad_request("the model does not exist")])
    res = perfagent(task_file, fake_server, "c3", "--rounds", "1")
    assert res.returncode == 1
    report, patch = results(task_file, "c3")
    assert report["is_error"] and "the model does not exist" in report["result"] and patch == ""
    assert report["agent"]["rounds"][0]["verdict"] == "no-change"


# -- the adapter's own pieces, without a session ------------------------------------------------------
@needs_codex
def test_config_points_codex_at_the_relay_and_codex_accepts_every_key(tmp_path):
    """`--strict-config` makes Codex refuse a key it does not know: a renamed setting fails here, not silently."""
    agent = make_agent("codex", MODEL)
    assert isinstance(agent, Codex) and agent.provider == "openai"
    session = Session("hi", 1, home=tmp_path / "home", out=tmp_path)
    agent.prepare(session)
    config = (tmp_path / "home/.codex/config.toml").read_text()
    assert 'base_url = "http://127.0.0.1:8787/v1"' in config and 'wire_api = "responses"' in config
    assert agent.env(session)["CODEX_HOME"] == str(tmp_path / "home/.codex")
    assert agent.relay_env()["OPENAI_API_KEY"] == PLACEHOLDER_KEY

    with FakeServer() as server:
        server.script([reply("", tool_call("exec_command", cmd="command -v python"), usage=U1), reply("ok")])
        argv = agent.command(session, Path(shutil.which("codex") or "codex"))
        argv[argv.index("--"):argv.index("--")] = ["--strict-config", "-c",
                                                     f'model_providers.perfagent.base_url="{server.openai_url}"']
        env = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HOME": str(session.home),
               **agent.relay_env(), **agent.env(session)}
        for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
            env.pop(proxy)
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, proc.stderr[-2000:]
        said = agent.read_result(proc.stdout, session)
        assert said.claim == "ok" and said.error is None and said.session_id
        assert said.extra["usage"]["input_tokens"] == U1["input_tokens"] + U1["cache_read"] + 10
        # no login shell: /etc/profile would reset PATH and hide the task's Python from the agent
        assert tool_output(server.requests[1]).rstrip().endswith(str(Path(sys.executable).parent / "python"))
    assert not server.errors, server.errors[0]

    resumed = agent.command(Session("-fix it", 2, resume_id="abc", home=session.home), Path("codex"))
    assert resumed[:3] == ["codex", "exec", "resume"] and resumed[-3:] == ["--", "abc", "-fix it"]


def test_read_result_takes_the_last_message_and_a_failed_turn():
    agent = Codex(MODEL)
    ok = "\n".join(json.dumps(e) for e in [
        {"type": "thread.started", "thread_id": "t-1"},
        {"type": "item.completed", "item": {"type": "error", "message": "Model metadata not found"}},
        {"type": "item.completed", "item": {"type": "agent_message", "text": "first"}},
        {"type": "item.completed", "item": {"type": "agent_message", "text": "last"}},
        {"type": "turn.completed", "usage": {"input_tokens": 7, "output_tokens": 2}},
    ])
    said = agent.read_result("noise\n" + ok, Session("p", 1))
    assert (said.claim, said.session_id, said.error, said.own_cost_usd) == ("last", "t-1", None, None)
    assert said.extra == {"usage": {"input_tokens": 7, "output_tokens": 2}}
    failed = agent.read_result(json.dumps({"type": "thread.started", "thread_id": "t-2"}) + "\n" + json.dumps(
        {"type": "turn.failed", "error": {"message": '{"error":{"message":"budget spent"}}'}}), Session("p", 1))
    assert failed.error == "budget spent" and failed.session_id == "t-2" and failed.claim == ""
    assert agent.read_result("", Session("p", 1)).error == "printed no JSON events"


@pytest.mark.parametrize("stream", [False, True])
def test_fake_responses_api_reads_as_the_openai_sdk_reads_it(stream):
    """The fake's Responses API, as the real OpenAI SDK parses it (no Codex needed)."""
    import openai

    with FakeServer() as server:
        server.script([reply("Running it.", tool_call("exec_command", cmd="ls"), usage=U1),
                       Fail(500, "server_error", "boom", mid_stream=True)])
        client = openai.OpenAI(base_url=server.openai_url, api_key="x", max_retries=0)
        if stream:
            with client.responses.stream(model=MODEL, input="hi") as events:
                kinds = [e.type for e in events]
                response = events.get_final_response()
            assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
            assert "response.function_call_arguments.done" in kinds and "response.output_text.delta" in kinds
            with client.responses.stream(model=MODEL, input="hi") as events:
                failed = [e for e in events if e.type == "response.failed"]
            assert failed and failed[0].response.error.message == "boom"
        else:
            response = client.responses.create(model=MODEL, input="hi")
            with pytest.raises(openai.InternalServerError, match="boom"):
                client.responses.create(model=MODEL, input="hi")
        assert response.output_text == "Running it." and response.status == "completed"
        call = response.output[1]
        assert (call.type, call.name, json.loads(call.arguments)) == ("function_call", "exec_command", {"cmd": "ls"})
        usage = response.usage
        assert (usage.input_tokens, usage.input_tokens_details.cached_tokens, usage.output_tokens) == (5000, 1000, 120)
        assert [r.path for r in server.requests] == ["/v1/responses"] * 2
    assert not server.errors, server.errors[0]
