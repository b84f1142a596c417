"""The mini-swe-agent adapter, end to end: the real `mini` CLI, sealed, talking through the relay to a scripted API.

Each test scripts what the model answers in mini's text protocol (prose, then one ```mswea_bash_command
block; `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` to finish) on a fake server on 127.0.0.1. mini runs
the commands in the task's workspace through litellm, perfagent's relay meters every response, and the
checks grade the change: the real ones in the first test and through the CLI; elsewhere, where the test is about
what happens above the checks, recorded evidence (tests/helpers.py: RecordedChecker). Nothing here needs the
network or a key.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest
from fakeserver import FakeServer, Recorded, Turn, auth_error, reply
from helpers import RecordedChecker, make_tiny_task, tiny_task_evidence

from agent.agents import make_agent
from agent.agents.base import Session
from agent.agents.mini_swe_agent import MiniSweAgent, trajectory_path
from agent.agents.relay import PLACEHOLDER_KEY
from agent.cli import main
from agent.env.workspace import patch_paths
from agent.models.base import Usage
from agent.models.pricing import cost_decimal, load_prices
from agent.options import Limits
from agent.results.report import Report
from agent.run.external import run_external
from agent.task import Task, load_task

pytestmark = pytest.mark.skipif(shutil.which("mini") is None,
                                reason="mini-swe-agent is not on PATH (pip install mini-swe-agent)")

SECRET = "sk-real-upstream-key-never-in-the-sandbox"
OPENAI_MODEL = "openai/gpt-4o"  # our table: 2.5 input, 1.25 cached input, 10 output per million
ANTHROPIC_MODEL = "anthropic/claude-sonnet-4-5"  # 3 input, 3.75 cache write, 0.30 cache read, 15 output
U1 = {"input_tokens": 4000, "output_tokens": 120, "cache_read": 1000}
U2 = {"input_tokens": 300, "output_tokens": 45, "cache_read": 4800}
UA1 = {"input_tokens": 3000, "output_tokens": 50, "cache_write_5m": 1000}
UA2 = {"input_tokens": 200, "output_tokens": 80, "cache_read": 3500, "cache_write_5m": 300}
SAFE_SED = "sed -i '5s/torch.zeros(n)/torch.empty(n)/' pkg/mod.py"
CLAIM = "f writes every element of buf with copy_ before it is read, so torch.empty is safe there."
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def turn(prose: str, command: str, usage: dict) -> Turn:
    """A reply in mini's text protocol: its reasoning, then exactly one command block."""
    return reply(f"THOUGHT: {prose}\n\n```mswea_bash_command\n{command}\n```", usage=usage)


def usage_of(*usages: dict) -> Usage:
    total = Usage()
    for u in usages:
        total = total + Usage(**u)
    return total


def cost(model: str, *usages: dict) -> float:
    """What the relay must charge for these responses at our table's prices, to the last digit."""
    expected = cost_decimal(model, usage_of(*usages), load_prices())
    assert expected is not None, f"{model} is not in agent/models/pricing.json"
    return float(expected)


@pytest.fixture
def task(tmp_path: Path) -> Task:
    return load_task(make_tiny_task(tmp_path))


@pytest.fixture
def keys(monkeypatch):
    """The harness's real keys: only the relay holds them."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)


def run_mini(task: Task, base_url: str, tmp_path: Path, *, model: str = OPENAI_MODEL, rounds: int = 1,
             events: list | None = None, recorded: bool = True) -> Report:
    """`recorded`: graded from tiny_task_evidence (the grader seam), else by the real checks."""
    checker = RecordedChecker(task, tiny_task_evidence) if recorded else None
    result = run_external(task, make_agent("mini-swe-agent", model), out_dir=tmp_path / "out", run_id="m1",
                          prices=load_prices(), limits=Limits(max_turns=40, max_cost_usd=5.0, timeout_s=300.0),
                          rounds=rounds, base_url=base_url, checker=checker,
                          on_event=(lambda kind, data: events.append((kind, data))) if events is not None
                          else (lambda kind, data: None))
    return result.report


def patch_of(tmp_path: Path, run_id: str = "m1") -> str:
    return (tmp_path / "out" / "patches" / run_id / "tiny" / "model_patch.diff").read_text()


def test_openai_session_edits_claims_and_is_metered(task, tmp_path, fake_server, keys):
    """The family's one run through the real checks (sandboxed tests, poisoned run)."""
    fake_server.script([turn("f overwrites buf entirely; use torch.empty.", SAFE_SED, U1),
                        turn(CLAIM, SUBMIT, U2)])
    events: list = []
    report = run_mini(task, fake_server.openai_url, tmp_path, events=events, recorded=False)

    assert report.subtype == "success" and report.verdict == "pass", report.result
    assert "+    buf = torch.empty(n)" in patch_of(tmp_path) and patch_of(tmp_path).count("torch.empty") == 1
    # the live display counts the agent's metered turns and spend as they happen, not "turn 0, no tokens"
    assert [d["turn"] for k, d in events if k == "turn"] == [1, 2]
    spent = [d for k, d in events if k == "usage"]
    assert spent[-1]["cost_usd"] == pytest.approx(report.total_cost_usd) and spent[-1]["usage"].output_tokens > 0
    run = report.agent
    assert run is not None and run.name == "mini-swe-agent" and run.model == OPENAI_MODEL and run.version
    # its claim: the prose of the reply that submitted, without its THOUGHT label (the submission was empty)
    assert run.claim == CLAIM and report.result == CLAIM
    assert [(r.round, r.exit_code, r.verdict) for r in run.rounds] == [(1, 0, "pass")]
    assert run.refused == []  # litellm tried nothing but the API (no cost map download, no telemetry)

    # cost: the scripted usage at our prices, metered on the wire
    expected = cost("gpt-4o", U1, U2)
    assert report.total_cost_usd == expected == float(Decimal("0.01965"))
    mu = report.modelUsage["gpt-4o"]
    assert mu.costUSD == expected and mu.inputTokens == 4300 and mu.cacheReadInputTokens == 5800
    assert report.num_turns == 2
    # mini's own figure is litellm's estimate at the same public prices, cached input included: no flag
    assert run.own_cost_usd == pytest.approx(expected, rel=1e-9) and run.cost_note == ""

    # mini reached the fake only through the relay, which swapped its placeholder for the real key
    reqs = fake_server.requests
    assert [r.path for r in reqs] == ["/v1/chat/completions"] * 2
    assert {r.headers["authorization"] for r in reqs} == {f"Bearer {SECRET}"}
    assert all(r.body["model"] == "gpt-4o" and "tools" not in r.body for r in reqs)
    assert "Use torch.empty where zeros are not needed." in reqs[0].body["messages"][1]["content"]
    assert reqs[1].body["messages"][-1]["content"].startswith("<returncode>0</returncode>")

    kept = tmp_path / "out" / "results" / "m1" / "tiny" / "agent"
    traj = json.loads((kept / "round-1.result.json").read_text())
    assert traj["info"]["exit_status"] == "Submitted" and traj["info"]["model_stats"]["api_calls"] == 2


def test_anthropic_wire_through_the_cli_with_submission_as_claim(task, tmp_path, fake_server, keys, capsys):
    """`perfagent run --agent mini-swe-agent` with a Claude model: litellm speaks the Messages API (with
    mini's cache-control markers); a submission printed after the marker is the claim."""
    fake_server.script([turn("f overwrites buf entirely.", SAFE_SED, UA1),
                        turn("Done.", f"{SUBMIT} && echo '{CLAIM}'", UA2)])
    code = main(["run", str(task.file), "--agent", "mini-swe-agent", "--model", ANTHROPIC_MODEL,
                 "--base-url", fake_server.url, "--out", str(tmp_path / "out"), "--run-id", "cli", "--json"])
    report = Report.parse(json.loads(capsys.readouterr().out))

    assert code == 0 and report.verdict == "pass", report.result
    assert report.agent.name == "mini-swe-agent" and report.agent.model == ANTHROPIC_MODEL
    assert report.agent.claim == CLAIM
    expected = cost("claude-sonnet-4-5", UA1, UA2)
    assert list(report.modelUsage) == ["claude-sonnet-4-5"] and report.total_cost_usd == expected
    assert report.usage.cache_creation_input_tokens == 1300 and report.usage.cache_read_input_tokens == 3500
    assert report.agent.own_cost_usd == pytest.approx(expected, rel=1e-9) and report.agent.cost_note == ""

    reqs = fake_server.requests
    assert [r.path for r in reqs] == ["/v1/messages"] * 2
    assert {r.headers["x-api-key"] for r in reqs} == {SECRET} and not reqs[0].stream
    assert all(r.body["model"] == "claude-sonnet-4-5" for r in reqs)
    assert "cache_control" in json.dumps(reqs[1].body["messages"][-1])
    assert "+    buf = torch.empty(n)" in patch_of(tmp_path, "cli")


# The seed's scenario: commit (refused: .git is read-only), `git diff HEAD~1 > model_patch.diff` (empty), a log
# of a few MB and a small binary left in the tree beside the valid edit.
LITTER = ("git commit -qam 'use empty'; git diff HEAD~1 > model_patch.diff; mkdir -p logs && "
          "head -c 3000000 /dev/zero | tr '\\000' x > logs/agent.log && printf '\\000\\001\\002' > blob.bin")


def test_only_the_source_change_is_emitted_and_what_was_left_out_is_listed(task, tmp_path, fake_server, keys):
    said = "Committed the change; the patch is in model_patch.diff."
    fake_server.script([turn("f overwrites buf entirely; use torch.empty.", SAFE_SED, U1),
                        turn("Commit it, keep the patch and a log.", LITTER, U1),
                        turn(said, SUBMIT, U2)])
    report = run_mini(task, fake_server.openai_url, tmp_path)

    assert report.subtype == "success" and report.verdict == "pass", report.result
    patch = patch_of(tmp_path)
    assert patch_paths(patch) == ["pkg/mod.py"] and "+    buf = torch.empty(n)" in patch
    kept = tmp_path / "out" / "results" / "m1" / "tiny"
    assert (kept / "agent" / "final.diff").read_text() == patch  # the graded, emitted and kept diff: one diff
    assert [(x.path, x.reason) for x in report.left_out] == [("blob.bin", "binary"),
                                                             ("logs/agent.log", "new file over 1 MB"),
                                                             ("model_patch.diff", "named like perfagent's output")]
    assert report.left_out[1].size == 3_000_000
    assert [x["path"] for x in json.loads((kept / "report.json").read_text())["left_out"]] == [
        "blob.bin", "logs/agent.log", "model_patch.diff"]
    # its claim of a commit and a patch file stands beside what the evidence says of them
    (round_,) = report.agent.rounds
    assert round_.claim == said and round_.claim_notes == [
        "it speaks of a commit; none was made (the repository's .git is read-only to it): its working tree was graded",
        "it names model_patch.diff: empty, left out of the change (named like perfagent's output)"]


def test_a_feedback_round_fixes_a_failing_change(task, tmp_path, fake_server, keys):
    """Round 1 empties both buffers (g breaks under poisoned memory) and leaves a binary beside them; round 2 is a
    new mini run in the same workspace, told the original task, the checks' findings and what was left out of the
    graded change, and reverts g."""
    seen: dict[str, str] = {}

    def told(req: Recorded) -> Turn:
        seen["task"] = req.body["messages"][1]["content"]
        return turn("g relies on the zero fill; revert it.", "sed -i '11s/torch.empty(n)/torch.zeros(n)/' pkg/mod.py",
                    U1)

    fake_server.script([
        turn("Both buffers can be empty.", "sed -i 's/torch.zeros(n)/torch.empty(n)/' pkg/mod.py && "
             "printf '\\000\\001' > blob.bin", U1),
        turn("Both buffers now use torch.empty.", SUBMIT, U2),
        told,
        turn(CLAIM, SUBMIT, U2),
    ])
    report = run_mini(task, fake_server.openai_url, tmp_path, rounds=2)

    rounds = report.agent.rounds
    assert [(r.round, r.verdict) for r in rounds] == [(1, "fail"), (2, "pass")]
    assert rounds[0].claim == "Both buffers now use torch.empty." and rounds[1].claim == CLAIM
    assert report.verdict == "pass" and report.agent.claim == CLAIM
    patch = patch_of(tmp_path)
    assert "+    buf = torch.empty(n)" in patch and patch.count("torch.empty") == 1  # only f's change is kept
    # round 2 started afresh: its task is the original one, then our feedback with the checks' evidence
    assert "Use torch.empty where zeros are not needed." in seen["task"]
    assert "did not pass" in seen["task"] and rounds[0].evidence in seen["task"]
    assert "left out of your change" in seen["task"] and "blob.bin (2 bytes): binary" in seen["task"]
    assert [x.line() for x in report.left_out] == ["blob.bin (2 bytes): binary"] and "blob.bin" not in patch
    assert report.total_cost_usd == cost("gpt-4o", U1, U2, U1, U2) and report.num_turns == 4
    # its own figure is the sum of both runs' instance costs
    assert report.agent.own_cost_usd == pytest.approx(report.total_cost_usd, rel=1e-9)


def test_an_api_error_is_one_line_in_the_report(task, tmp_path, fake_server, keys):
    """litellm gives up at once on a 401 (mini does not retry it); the run says why in one line."""
    fake_server.script([auth_error()])
    report = run_mini(task, fake_server.url, tmp_path, model=ANTHROPIC_MODEL)

    assert report.is_error and report.subtype == "error_during_execution" and "\n" not in report.result
    assert report.result.startswith("mini-swe-agent: ") and "AuthenticationError" in report.result
    assert report.agent.rounds[0].verdict == "no-change" and len(fake_server.requests) == 1


# -- the adapter's own pieces, without a sandboxed session --------------------------------------------
def test_provider_and_relay_variables_follow_the_model(tmp_path):
    claude, bare, gpt = (make_agent("mini-swe-agent", m) for m in (ANTHROPIC_MODEL, "claude-haiku-4-5", "gpt-4o"))
    assert isinstance(claude, MiniSweAgent) and claude.provider == bare.provider == "anthropic"
    assert gpt.provider == "openai" and make_agent("mini-swe-agent").model.startswith("anthropic/")
    session = Session("hi", 1, home=tmp_path / "home", out=tmp_path)
    env = claude.relay_env() | claude.env(session)
    assert env["ANTHROPIC_API_BASE"] == env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8787"
    assert env["ANTHROPIC_API_KEY"] == PLACEHOLDER_KEY and env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    env = gpt.relay_env() | gpt.env(session)
    assert env["OPENAI_API_BASE"] == env["OPENAI_BASE_URL"] == "http://127.0.0.1:8787/v1"
    assert env["MSWEA_GLOBAL_CONFIG_DIR"] == str(tmp_path / "home/.config/mini-swe-agent")


def test_the_sandbox_may_read_its_venv_and_the_python_it_was_made_from(tmp_path):
    """A pipx venv's python links to an interpreter that may live under a home folder the sandbox hides."""
    base = tmp_path / "home" / ".pyenv" / "versions" / "3.11.7"
    (base / "bin").mkdir(parents=True)
    (base / "bin" / "python3.11").write_text("")
    venv = tmp_path / "pipx" / "venvs" / "mini-swe-agent"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(base / "bin" / "python3.11")
    (venv / "bin" / "mini").write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\n")
    assert make_agent("mini-swe-agent").install_dirs(venv / "bin" / "mini") == [venv, base]


def test_mini_runs_headless_with_the_adapters_flags(tmp_path):
    """The flags and variables alone (no sandbox, no relay) run mini to the end against the fake: its state
    goes under HOME, its trajectory to the output folder, and the workspace holds only what it was told to write."""
    agent = make_agent("mini-swe-agent", OPENAI_MODEL)
    binary = agent.locate()
    assert agent.version(binary).startswith("2.")
    ws, home, out = (tmp_path / d for d in ("ws", "home", "out"))
    for d in (ws, home, out):
        d.mkdir()
    session = Session("write a file", 1, home=home, out=out)
    agent.prepare(session)
    with FakeServer() as server:
        server.script([turn("Writing it.", "echo hi > a.txt", U1), turn("Wrote a.txt.", SUBMIT, U2)])
        env = {"PATH": str(binary.parent) + ":/usr/bin:/bin", "HOME": str(home), **agent.env(session),
               "OPENAI_BASE_URL": server.openai_url, "OPENAI_API_BASE": server.openai_url, "OPENAI_API_KEY": "x"}
        proc = subprocess.run(agent.command(session, binary), cwd=ws, env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    said = agent.read_result(proc.stdout, session)
    assert said.error is None and said.claim == "Wrote a.txt." and said.session_id is None
    assert said.own_cost_usd == pytest.approx(cost("gpt-4o", U1, U2), rel=1e-9)
    assert (ws / "a.txt").read_text() == "hi\n" and trajectory_path(session).is_file()
    assert sorted(p.name for p in ws.iterdir()) == ["a.txt"]
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == [".config", ".config/mini-swe-agent",
                                                                        "perfagent-task.md"]


def test_an_unfinished_or_missing_trajectory_is_an_error(tmp_path):
    agent = make_agent("mini-swe-agent", OPENAI_MODEL)
    session = Session("x", 1, home=tmp_path, out=tmp_path)
    assert agent.read_result("", session).error == "wrote no trajectory (FileNotFoundError)"
    trajectory_path(session).write_text(json.dumps({"info": {"exit_status": "RuntimeError", "submission": "",
                                                             "model_stats": {"instance_cost": 0.25}},
                                                    "messages": [{"role": "exit", "content": "boom\ntrace"}]}))
    said = agent.read_result("", session)
    assert said.error == "RuntimeError: boom\ntrace" and said.own_cost_usd == 0.25 and said.claim == ""


def test_a_feedback_task_repeats_the_original_one(tmp_path):
    agent = make_agent("mini-swe-agent", OPENAI_MODEL)
    binary = Path("/bin/mini")
    agent.prepare(Session("the task", 1, home=tmp_path, out=tmp_path))
    first = agent.command(Session("the task", 1, home=tmp_path, out=tmp_path), binary)
    assert first[first.index("-t") + 1] == "the task"
    assert first[first.index("-o") + 1] == str(tmp_path / "mini-round-1.traj.json")
    second = agent.command(Session(agent.feedback("test_g failed"), 2, home=tmp_path, out=tmp_path), binary)
    task = second[second.index("-t") + 1]
    assert task.startswith("the task\n") and "test_g failed" in task and "earlier session" in task
