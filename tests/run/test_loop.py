"""The agent loop driven by the real SDKs against a local fake provider server."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from fakeserver import reply, tool_call

from agent.env.workspace import Workspace
from agent.models.pricing import load_prices
from agent.models.replay import ReplayModel
from agent.options import Limits
from agent.run.loop import Trajectory, run_loop
from agent.run.model_spec import make_model
from agent.run.tools import Toolbox, ToolResult
from agent.task import load_task

TASK = '''
id = "demo"
repo = "src"
prompt = "Use torch.empty where zeros are not needed."
focus = ["pkg/mod.py"]
protected = ["tests/**"]
[correctness]
command = "true"
[budget]
max_turns = 10
max_cost_usd = 1.0
'''
USAGE = {"input_tokens": 1000, "output_tokens": 200, "cache_read": 5000, "cache_write_5m": 800}


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")


@pytest.fixture
def setup(tmp_path, small_repo):
    (tmp_path / "demo.toml").write_text(TASK)
    task = load_task(tmp_path / "demo.toml")
    ws = Workspace.create(task.repo, dest=tmp_path / "ws")
    return task, ws, tmp_path


def grader(ws):
    """A real, tiny grader: passes once the zeros are gone."""
    def grade():
        ok = "torch.zeros" not in (ws.root / "pkg/mod.py").read_text()
        return ok, "correctness: pass" if ok else "correctness: FAIL (zeros still there)"
    return grade


def session_script():
    return [
        reply("Let me look.", tool_call("read_file", path="pkg/mod.py"), usage=USAGE),
        reply("", tool_call("edit_file", path="pkg/mod.py", old="torch.zeros(4)", new="torch.empty(4)"), usage=USAGE),
        reply("", tool_call("run_checks"), usage=USAGE),
        reply("Done.", tool_call("submit", summary="zeros -> empty in f()"), usage=USAGE),
    ]


@pytest.mark.parametrize("provider, stream",
                         [("anthropic", False), ("anthropic", True), ("openai", False), ("openai", True)])
def test_session_to_submit_with_costs(setup, fake_server, provider, stream):
    task, ws, tmp = setup
    fake_server.script(session_script())
    url = fake_server.url if provider == "anthropic" else fake_server.openai_url
    model = make_model(f"{provider}:claude-sonnet-4-6" if provider == "anthropic" else "openai:gpt-4o", base_url=url,
                       stream=stream)
    tools = Toolbox(ws, protected=task.spec.protected, run_checks=lambda perf: ToolResult("checks: pass"))
    traj = Trajectory(tmp / "trajectory.jsonl")
    out = run_loop(task, model, tools, limits=Limits.of(task), prices=load_prices(),
                   grade_submission=grader(ws), trajectory=traj)
    assert out.subtype == "success" and out.submitted and out.num_turns == 4
    assert out.result == "zeros -> empty in f()"
    assert "torch.empty(4)" in (ws.root / "pkg/mod.py").read_text()
    ((_, usage),) = out.usage_by_model.items()
    if provider == "anthropic":
        assert usage.input_tokens == 4000 and usage.cache_read == 20000 and usage.cache_write_5m == 3200
        expected = (Decimal(4000) * 3 + 800 * 15 + 20000 * Decimal("0.30") + 3200 * Decimal("3.75")) / 10**6
        assert out.total_cost_usd == float(expected)
    records = [json.loads(line) for line in traj.path.read_text().splitlines()]
    kinds = [r["type"] for r in records]
    assert kinds[0] == "start" and kinds[-1] == "end" and kinds.count("response") == 4
    assert [r["name"] for r in records if r["type"] == "tool_result"] == ["read_file", "edit_file", "run_checks",
                                                                          "submit"]
    # the model saw its tool results: the 2nd request carries the numbered file
    second = fake_server.requests[1].body["messages"]
    assert "return torch.zeros(4)" in json.dumps(second)


def test_failed_submit_continues_then_passes(setup, fake_server):
    task, ws, _ = setup
    fake_server.script([
        reply("", tool_call("submit", summary="nothing changed")),
        reply("", tool_call("edit_file", path="pkg/mod.py", old="zeros", new="empty")),
        reply("", tool_call("submit", summary="fixed")),
    ])
    model = make_model("anthropic:claude-sonnet-4-6", base_url=fake_server.url)
    out = run_loop(task, model, Toolbox(ws), limits=Limits.of(task), prices=load_prices(),
                   grade_submission=grader(ws), trajectory=Trajectory(None))
    assert out.subtype == "success" and out.num_turns == 3 and out.result == "fixed"
    first_result = fake_server.requests[1].body["messages"][-1]["content"][0]
    assert first_result["is_error"] and "did not pass" in first_result["content"]


def test_max_turns_stop(setup, fake_server):
    task, ws, _ = setup
    fake_server.script([reply("", tool_call("list_files"))] * 3)
    model = make_model("anthropic:claude-sonnet-4-6", base_url=fake_server.url)
    out = run_loop(task, model, Toolbox(ws), limits=Limits.of(task, max_turns=3), prices=load_prices(),
                   grade_submission=grader(ws), trajectory=Trajectory(None))
    assert out.subtype == "error_max_turns" and out.is_error and out.num_turns == 3


def test_budget_stop(setup, fake_server):
    task, ws, _ = setup
    big = {"input_tokens": 200_000, "output_tokens": 10_000}  # $0.75 a turn at Sonnet prices
    fake_server.script([reply("", tool_call("list_files"), usage=big)] * 5)
    model = make_model("anthropic:claude-sonnet-4-6", base_url=fake_server.url)
    out = run_loop(task, model, Toolbox(ws), limits=Limits.of(task), prices=load_prices(),
                   grade_submission=grader(ws), trajectory=Trajectory(None))
    assert out.subtype == "error_max_budget" and out.num_turns == 2
    assert out.total_cost_usd == pytest.approx(1.5)


def test_a_budget_of_zero_is_no_budget(setup, fake_server):
    """`--max-cost 0` (or a task's max_cost_usd = 0): never stopped for its cost, as in the relay."""
    task, ws, _ = setup
    big = {"input_tokens": 200_000, "output_tokens": 10_000}  # $0.75 a turn at Sonnet prices
    fake_server.script([reply("", tool_call("list_files"), usage=big)] * 3
                       + [reply("", tool_call("edit_file", path="pkg/mod.py", old="zeros", new="empty"), usage=big),
                          reply("", tool_call("submit", summary="fixed"), usage=big)])
    model = make_model("anthropic:claude-sonnet-4-6", base_url=fake_server.url)
    out = run_loop(task, model, Toolbox(ws), limits=Limits.of(task, max_cost_usd=0), prices=load_prices(),
                   grade_submission=grader(ws), trajectory=Trajectory(None))
    assert out.subtype == "success" and out.num_turns == 5
    assert out.total_cost_usd == pytest.approx(3.75)


def test_malformed_and_unknown_tools_go_back_to_the_model(setup, fake_server):
    task, ws, _ = setup
    fake_server.script([
        reply("", tool_call("edit_file", "{not json")),
        reply("", tool_call("format_disk", device="/dev/sda")),
        reply("", tool_call("edit_file", path="pkg/mod.py", old="zeros", new="empty")),
        reply("", tool_call("submit", summary="ok")),
    ])
    model = make_model("openai:gpt-4o", base_url=fake_server.openai_url)
    out = run_loop(task, model, Toolbox(ws), limits=Limits.of(task), prices=load_prices(),
                   grade_submission=grader(ws), trajectory=Trajectory(None))
    assert out.subtype == "success" and out.num_turns == 4
    msgs = fake_server.requests[2].body["messages"]
    tool_msgs = [m for m in msgs if m["role"] == "tool"]
    assert "could not parse" in tool_msgs[0]["content"] and "unknown tool" in tool_msgs[1]["content"]


def test_unknown_model_price_is_null_with_warning(setup, fake_server):
    task, ws, _ = setup
    fake_server.script([reply("", tool_call("edit_file", path="pkg/mod.py", old="zeros", new="empty")),
                        reply("", tool_call("submit", summary="ok"))])
    model = make_model("openai:my-local-llama", base_url=fake_server.openai_url)
    out = run_loop(task, model, Toolbox(ws), limits=Limits.of(task), prices=load_prices(),
                   grade_submission=grader(ws), trajectory=Trajectory(None))
    assert out.total_cost_usd is None and out.cost_by_model == {"my-local-llama": None}
    assert any("my-local-llama" in w for w in out.warnings)


def test_replay_reapplies_the_edits(setup, fake_server, tmp_path):
    task, ws, tmp = setup
    fake_server.script(session_script())
    model = make_model("anthropic:claude-sonnet-4-6", base_url=fake_server.url)
    traj = Trajectory(tmp / "recorded.jsonl")
    run_loop(task, model, Toolbox(ws, run_checks=lambda perf: ToolResult("ok")), limits=Limits.of(task),
             prices=load_prices(), grade_submission=grader(ws), trajectory=traj)
    fresh = Workspace.create(task.repo, dest=tmp / "ws2")
    out = run_loop(task, ReplayModel(traj.path), Toolbox(fresh, run_checks=lambda perf: ToolResult("ok")),
                   limits=Limits.of(task), prices=load_prices(), grade_submission=grader(fresh),
                   trajectory=Trajectory(None))
    assert out.subtype == "success" and out.num_turns == 4
    assert fresh.diff() == ws.diff() != ""
    assert out.total_cost_usd == 0.0


def test_a_model_that_stops_calling_tools_is_nudged_once_then_the_run_ends(setup, fake_server):
    task, ws, _ = setup
    fake_server.script([reply("I think we are done."), reply("Really done.")])
    model = make_model("anthropic:claude-sonnet-4-6", base_url=fake_server.url)
    out = run_loop(task, model, Toolbox(ws), limits=Limits.of(task), prices=load_prices(),
                   grade_submission=grader(ws), trajectory=Trajectory(None))
    assert out.num_turns == 2 and out.result == "stopped without submitting: Really done." and not out.submitted
    assert "call `submit`" in json.dumps(fake_server.requests[1].body["messages"][-1])
    # stopping is not succeeding: only a passing submit is
    assert out.subtype == "error_during_execution" and out.is_error


def test_no_tool_call_runs_after_a_passing_submit(setup, fake_server):
    task, ws, tmp = setup
    fake_server.script([reply("", tool_call("edit_file", path="pkg/mod.py", old="zeros", new="empty"),
                              tool_call("submit", summary="done"),
                              tool_call("write_file", path="pkg/mod.py", content="broken\n"),
                              tool_call("run", command="touch ran"))])
    model = make_model("anthropic:claude-sonnet-4-6", base_url=fake_server.url)
    traj = Trajectory(tmp / "trajectory.jsonl")
    out = run_loop(task, model, Toolbox(ws), limits=Limits.of(task), prices=load_prices(),
                   grade_submission=grader(ws), trajectory=traj)
    assert out.subtype == "success" and out.result == "done" and out.num_turns == 1
    assert "torch.empty(4)" in (ws.root / "pkg/mod.py").read_text() and not (ws.root / "ran").exists()
    results = [r for r in map(json.loads, traj.path.read_text().splitlines()) if r["type"] == "tool_result"]
    assert [(r["name"], r.get("not_run", False)) for r in results] == [
        ("edit_file", False), ("submit", False), ("write_file", True), ("run", True)]
    assert all(r["content"].startswith("not run") and r["is_error"] for r in results[2:])


def test_run_checks_data_reaches_the_conversation_but_not_the_api(setup, fake_server):
    task, ws, _ = setup
    seen: list[dict] = []

    def second_turn(request):
        seen.append(request.body)
        return reply("", tool_call("submit", summary="ok"))

    fake_server.script([reply("", tool_call("edit_file", path="pkg/mod.py", old="zeros", new="empty"),
                              tool_call("run_checks")), second_turn])
    model = make_model("anthropic:claude-sonnet-4-6", base_url=fake_server.url)
    checks = ToolResult("verdict: pass", data={"evaluation": {"verdict": "pass", "task_id": "marker-123"}})
    out = run_loop(task, model, Toolbox(ws, run_checks=lambda perf: checks), limits=Limits.of(task),
                   prices=load_prices(), grade_submission=grader(ws), trajectory=Trajectory(None))
    assert out.subtype == "success"
    body = json.dumps(seen[0])
    assert "verdict: pass" in body and "marker-123" not in body and '"data"' not in body
