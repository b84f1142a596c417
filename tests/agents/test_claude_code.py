"""The real Claude Code CLI, sealed in the sandbox, talking through the relay to a scripted Messages API.

Each test scripts what "Claude" answers (Bash tool calls, then a final message) on a fake server on
127.0.0.1; the real `claude` binary runs them in the task's workspace, and perfagent grades the result. The
seed scenario and the runs through the CLI (which takes no checker) grade with the real checks (sandboxed tests,
poisoned run); the others, about what happens above the checks (cost, rounds, claims, what is emitted, errors),
grade recorded evidence (tests/helpers.py: RecordedChecker).
"""

from __future__ import annotations

import json
import shutil
from decimal import Decimal
from pathlib import Path

import pytest
from fakeserver import FakeServer, bad_request, hang, reply, tool_call
from helpers import REPO, RecordedChecker, make_task, tiny_evidence

from agent.agents import make_agent
from agent.cli import main
from agent.models.base import Usage
from agent.models.pricing import cost_decimal, load_prices
from agent.options import Limits
from agent.results.report import Report, read_report
from agent.run.external import run_external

pytestmark = pytest.mark.skipif(shutil.which("claude") is None,
                                reason="Claude Code is not installed (npm install -g @anthropic-ai/claude-code)")

MODEL = "claude-sonnet-4-5"
SECRET = "sk-ant-real-key-never-in-the-sandbox"
EDIT_USAGE = {"input_tokens": 3000, "output_tokens": 50, "cache_write_5m": 1000}
FINAL_USAGE = {"input_tokens": 2000, "output_tokens": 80, "cache_read": 500}
SEED_CLAIM = ("Changed every torch.zeros in init_cuda_graph_state to torch.empty. No risk of uninitialized "
              "memory access: every buffer is filled by copy_ before it is read.")


def bash(command: str, usage: dict = EDIT_USAGE):
    return reply("", tool_call("Bash", command=command, description="edit"), usage=usage)


def final(text: str, usage: dict = FINAL_USAGE):
    return reply(text, usage=usage)


def usage_of(*usages: dict) -> Usage:
    names = {"input_tokens": "input_tokens", "output_tokens": "output_tokens", "cache_write_5m": "cache_write_5m",
             "cache_read": "cache_read"}
    total = Usage()
    for u in usages:
        total = total + Usage(**{names[k]: v for k, v in u.items()})
    return total


def run_claude(task, server: FakeServer, tmp_path: Path, *, rounds: int = 1, recorded: bool = True,
               **limits) -> Report:
    """`recorded`: graded from tiny_evidence (make_task's repo; the grader seam), else by the real checks."""
    budget = {"max_turns": 40, "max_cost_usd": 5.0, "timeout_s": 300.0} | limits
    checker = RecordedChecker(task, tiny_evidence) if recorded else None
    result = run_external(task, make_agent("claude-code", MODEL), out_dir=tmp_path / "out", run_id="r1",
                          prices=load_prices(), limits=Limits(**budget), rounds=rounds, base_url=server.url,
                          checker=checker)
    return result.report


@pytest.fixture
def secret_key(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)


@pytest.mark.slow
def test_seed_scenario_claim_rejected_by_the_poison_run(tmp_path, fake_server, secret_key):
    """The run that started perfagent: every zeros -> empty, claimed safe; our poisoned tests say otherwise."""
    from agent.task import load_task

    task = load_task(REPO / "tasks" / "cuda-graph-buffers.toml")
    fake_server.script([bash("sed -i 's/torch\\.zeros(/torch.empty(/g' miniattn/flashattention_backend.py"),
                        final(SEED_CLAIM)])
    report = run_claude(task, fake_server, tmp_path, recorded=False)  # the family's one run through the real checks

    assert report.subtype == "success" and report.agent is not None
    assert report.agent.claim == SEED_CLAIM and report.agent.version
    assert report.verdict == "fail"
    (round1,) = report.agent.rounds
    assert round1.verdict == "fail" and "poisoned" in round1.evidence
    patches = tmp_path / "out" / "patches" / "r1" / "cuda-graph-buffers"
    assert (patches / "model_patch.diff").read_text() == ""  # nothing unsafe emitted
    assert "torch.empty(" in (patches / "rejected.diff").read_text()
    kept = tmp_path / "out" / "results" / "r1" / "cuda-graph-buffers"
    assert json.loads((kept / "agent" / "round-1.result.json").read_text())["result"] == SEED_CLAIM
    assert "torch.empty(" in (kept / "agent" / "final.diff").read_text()
    # The relay held the key; the agent only ever had the placeholder.
    assert [r.headers.get("x-api-key") for r in fake_server.requests] == [SECRET, SECRET]
    assert SECRET not in (kept / "trajectory.jsonl").read_text()


@pytest.mark.slow
def test_cost_is_the_metered_usage_times_our_prices_to_the_last_digit(tmp_path, fake_server, secret_key):
    task, _ = make_task(tmp_path)
    fake_server.script([bash("sed -i 's/torch.zeros(src.shape/torch.empty(src.shape/' pkg/buffers.py"),
                        final("Switched the staged buffer to torch.empty.")])
    report = run_claude(task, fake_server, tmp_path)

    expected = cost_decimal(MODEL, usage_of(EDIT_USAGE, FINAL_USAGE), load_prices())
    assert report.total_cost_usd == float(expected)
    assert report.modelUsage[MODEL].costUSD == float(expected)
    assert report.usage.input_tokens == 5000 and report.usage.output_tokens == 130
    assert report.usage.cache_read_input_tokens == 500 and report.usage.cache_creation_input_tokens == 1000
    assert report.num_turns == 2
    # Claude Code's own figure, kept beside ours; it uses the same public prices, so no flag.
    assert report.agent.own_cost_usd == pytest.approx(float(expected))
    assert report.agent.cost_note == ""
    # A good change passes and is what is emitted.
    assert report.verdict == "pass"
    patch = tmp_path / "out" / "patches" / "r1" / "fixture" / "model_patch.diff"
    assert "torch.empty(src.shape" in patch.read_text()


@pytest.mark.slow
def test_a_feedback_round_fixes_a_failing_change(tmp_path, fake_server, secret_key):
    """Round 1 also empties the buffer that relies on its zeros; the checks fail it; Claude Code is resumed
    with their findings and reverts that edit; round 2's change passes and is emitted."""
    task, _ = make_task(tmp_path)
    fake_server.script([
        bash("sed -i 's/torch.zeros(/torch.empty(/g' pkg/buffers.py"),
        final("Both buffers now use torch.empty; they are always written first."),
        bash("sed -i 's/buf = torch.empty(N)/buf = torch.zeros(N)/' pkg/buffers.py"),
        final("Reverted half_ones: it relies on the zero fill."),
    ])
    report = run_claude(task, fake_server, tmp_path, rounds=2)

    assert [r.verdict for r in report.agent.rounds] == ["fail", "pass"]
    assert report.verdict == "pass"
    assert report.agent.claim == "Reverted half_ones: it relies on the zero fill."
    # The second session resumed the first (its conversation came along) and was told what failed.
    second = json.dumps(fake_server.requests[2].body["messages"])
    assert "Both buffers now use torch.empty" in second and "test_half_ones" in second
    patch = (tmp_path / "out" / "patches" / "r1" / "fixture" / "model_patch.diff").read_text()
    assert "buf = torch.empty(src.shape" in patch and "torch.empty(N)" not in patch
    # After --resume, Claude Code's total_cost_usd counts the rounds before it: no false disagreement.
    assert report.agent.own_cost_usd == pytest.approx(report.total_cost_usd) and report.agent.cost_note == ""


def test_the_budget_stops_the_agent(tmp_path, fake_server, secret_key):
    task, _ = make_task(tmp_path)
    # $1.20 at Sonnet's prices (200k tokens written to the 1-hour cache: not past its long-context threshold); the
    # next request's worst case (Claude Code's max_tokens) no longer fits in $1.50
    big = {"input_tokens": 0, "cache_write_1h": 200_000, "output_tokens": 10}
    fake_server.script([bash("echo one", usage=big), bash("echo two"), bash("echo three"), final("done")])
    report = run_claude(task, fake_server, tmp_path, max_cost_usd=1.5)

    assert report.subtype == "error_max_budget" and report.is_error
    assert "more than is left of the budget of $1.5" in report.result
    assert len(fake_server.requests) == 1  # nothing after the budget was spent reached the provider
    assert report.total_cost_usd == pytest.approx(1.20015)


@pytest.mark.slow
def test_a_hanging_provider_ends_in_a_timeout_with_a_report(tmp_path, fake_server, secret_key):
    task, _ = make_task(tmp_path)
    # each request held past the run's 8 s (it cannot arrive before the run starts) and then hung up: the
    # relay's drain at close (up to 30 s) ends there
    fake_server.script([hang(9)] * 5)
    report = run_claude(task, fake_server, tmp_path, timeout_s=8.0)

    assert report.subtype == "error_during_execution"
    assert report.result.startswith("timed out after 8s")
    assert report.verdict == "no-change"
    assert fake_server.requests  # it was the provider that hung, not the agent that never asked


@pytest.mark.slow
def test_an_agent_that_fails_is_one_line_in_the_report(tmp_path, fake_server, secret_key):
    """An error the provider keeps giving, said in the report's one line. (A 400: Claude Code retries it a few
    times within a second, where a 401's retries take it about 17 s.)"""
    task, _ = make_task(tmp_path)
    fake_server.script([bad_request("fakeserver: this request is refused")] * 20)
    report = run_claude(task, fake_server, tmp_path)

    assert report.is_error and report.subtype == "error_during_execution"
    assert report.result.startswith("claude-code: ") and "\n" not in report.result
    assert report.result.endswith("API Error: 400 fakeserver: this request is refused"), report.result


@pytest.mark.slow
def test_cli_run_with_agent_and_model(tmp_path, fake_server, secret_key, capsys):
    task, _ = make_task(tmp_path)
    fake_server.script([bash("sed -i 's/torch.zeros(src.shape/torch.empty(src.shape/' pkg/buffers.py"),
                        final("Switched the staged buffer to torch.empty.")])
    code = main(["run", str(task.file), "--agent", "claude-code", "--model", MODEL, "--base-url", fake_server.url,
                 "--out", str(tmp_path / "out"), "--run-id", "cli", "--json"])
    report = Report.parse(json.loads(capsys.readouterr().out))
    assert code == 0 and report.verdict == "pass"
    assert report.agent.name == "claude-code" and report.agent.model == MODEL
    assert list(report.modelUsage) == [MODEL]


def test_missing_binary_is_one_line_and_a_report(tmp_path, fake_server, monkeypatch, capsys):
    from agent.agents.claude_code import ClaudeCode

    task, _ = make_task(tmp_path)
    monkeypatch.setattr(ClaudeCode, "binary", "claude-not-installed")
    code = main(["run", str(task.file), "--agent", "claude-code", "--base-url", fake_server.url,
                 "--out", str(tmp_path / "out"), "--run-id", "nobin", "--quiet"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err, err
    report = read_report(tmp_path / "out" / "results" / "nobin" / "fixture" / "report.json")
    assert report.result == ("claude-code: `claude-not-installed` not found on PATH; install it with: "
                             "npm install -g @anthropic-ai/claude-code")
    assert report.is_error and fake_server.requests == []


def test_unknown_agent_is_one_line_exit_2(tmp_path, capsys):
    task, _ = make_task(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["run", str(task.file), "--agent", "gpt-engineer"])
    assert exit_.value.code == 2 and "invalid choice: 'gpt-engineer'" in capsys.readouterr().err


def test_usage_helper_matches_decimal_pricing():
    """The arithmetic the cost test relies on: Sonnet 4.5 at 3 / 15 / 3.75 / 0.30 per million."""
    assert cost_decimal(MODEL, usage_of(EDIT_USAGE, FINAL_USAGE), load_prices()) == Decimal("0.02085")


@pytest.mark.slow
def test_one_batch_compares_our_loop_with_claude_code(tmp_path, fake_server, secret_key, capsys):
    task, _ = make_task(tmp_path, min_effect=0.5)  # few perf samples: this test is about the comparison
    fake_server.script([bash("sed -i 's/torch.zeros(src.shape/torch.empty(src.shape/' pkg/buffers.py"),
                        final("Switched the staged buffer to torch.empty.")])
    out = tmp_path / "out"
    code = main(["batch", str(task.file), "--agent", "perfagent", "--model", "rules", "--agent", "claude-code",
                 "--model", MODEL, "--base-url", fake_server.url, "--workers", "2", "--run-id", "vs", "--out", str(out),
                 "--quiet"])
    assert code == 0, capsys.readouterr().err + (out / "results" / "vs" / "summary.md").read_text()
    summary = json.loads((out / "results" / "vs" / "summary.json").read_text())
    by_model = {m["model"]: m for m in summary["models"]}
    assert set(by_model) == {"rules", f"claude-code:{MODEL}"}
    assert by_model[f"claude-code:{MODEL}"]["correct"] == 1
    claude = read_report(out / "results" / "vs" / "fixture" / f"claude-code-{MODEL}" / "s0" / "report.json")
    assert claude.agent.name == "claude-code" and claude.total_cost_usd == pytest.approx(0.02085)
    table = (out / "results" / "vs" / "summary.md").read_text()
    assert f"claude-code:{MODEL}" in table and "rules" in table  # one table compares both
