"""`perfagent review RUN --trajectory`: one job's turns step by step, from a real run of our loop (a scripted
model on the tiny task) and from an external agent's relay records as the relay writes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import make_tiny_task

from agent.review.trajectory import read_turns, render_turns
from agent.util.files import write_json

EDIT = {"path": "pkg/mod.py", "old": "buf = torch.zeros(n)\n    buf.copy_",
        "new": "buf = torch.empty(n)\n    buf.copy_"}
SCRIPT = [{"type": "response", "text": "f copies into every element: zeros are not needed there.",
           "tool_calls": [{"id": "e", "name": "edit_file", "input": EDIT}]},
          {"type": "response", "tool_calls": [{"id": "c", "name": "run_checks", "input": {}}]},
          {"type": "response", "tool_calls": [{"id": "s", "name": "submit", "input": {"summary": "empty in f"}}]}]


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """A real run: a scripted model edits, checks and submits; its folder as the run leaves it."""
    import os
    import subprocess
    import sys

    root = tmp_path_factory.mktemp("traj")
    make_tiny_task(root)
    (root / "script.jsonl").write_text("".join(json.dumps(r) + "\n" for r in SCRIPT))
    env = {**os.environ, "HOME": str(root), "COLUMNS": "80"}
    res = subprocess.run([sys.executable, "-m", "agent.cli", "run", "tiny.toml", "--model", "replay:script.jsonl",
                          "--run-id", "r1", "--quiet"], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return root


@pytest.mark.slow(seconds=70)
def test_the_trajectory_steps_through_each_turn_its_calls_outputs_and_gradings(ran, perfagent, monkeypatch):
    monkeypatch.chdir(ran)
    monkeypatch.setenv("COLUMNS", "80")
    res = perfagent("review", "results/r1", "--trajectory")
    assert res.returncode == 0, res.stderr
    text = res.stdout
    turns = [ln for ln in text.splitlines() if ln.startswith("--- turn ")]
    assert turns == ["--- turn 1", "--- turn 2", "--- turn 3"], text
    one = text.split("--- turn 2")[0]
    assert "f copies into every element" in one and 'call: edit_file {"path": "pkg/mod.py"' in one
    two, three = text.split("--- turn 2")[1].split("--- turn 3")
    assert "call: run_checks  -> ok" in two and "grading #1 (quick check): pass" in two
    assert "call: submit" in three and "grading #2 (final evaluation): pass" in three
    assert "more line(s)" in three  # the submission's summary, cut without --turn
    whole = perfagent("review", "results/r1/tiny", "--trajectory", "--turn", "3")
    assert whole.returncode == 0 and "more line(s)" not in whole.stdout and "--- turn 1" not in whole.stdout
    assert "verdict: pass" in whole.stdout


@pytest.mark.slow
def test_bad_trajectory_requests_are_one_line(ran, perfagent, monkeypatch):
    monkeypatch.chdir(ran)
    for args, said in ((["results/r1", "--trajectory", "--turn", "9"], "no turn 9: this trajectory has turns 1 to 3"),
                       (["results/r1", "--trajectory", "--json"], "--json shows runs"),
                       (["results/nope", "--trajectory"], "results/nope: no such results folder"),
                       (["results/r1", "--trajectory", "--task", "other"], "no job of task 'other'")):
        res = perfagent("review", *args)
        assert res.returncode == 2 and res.stderr.startswith("error: ") and said in res.stderr, (args, res.stderr)
        assert res.stderr.count("\n") == 1


def test_an_external_agents_relay_records_read_as_turns_with_their_calls_and_outputs(tmp_path):
    """Claude Code's stream (Anthropic SSE) and the tool output its next request carries; a chat-completions
    answer; a grading placed in the turn it landed in; what the agent wrote stripped of control sequences."""
    t0 = 1000.0
    sse = [{"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
           {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Reading \x1b[31mit"}},
           {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "name": "Bash"}},
           {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta",
                                                                  "partial_json": '{"command": "cat mod.py"}'}}]
    asked = {"messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": []},
                          {"role": "user", "content": [{"type": "tool_result", "content": "COST = 10.0"}]}]}
    chat = {"choices": [{"message": {"content": "Done.", "tool_calls": [
        {"function": {"name": "submit", "arguments": "{}"}}]}}]}
    records = [{"type": "relay", "time": t0, "event": "request", "body": {"messages": [{"role": "user"}]}},
               {"type": "relay", "time": t0 + 1, "event": "response", "events": sse, "cost_usd": 0.01},
               {"type": "relay", "time": t0 + 2, "event": "request", "body": asked},
               {"type": "relay", "time": t0 + 3, "event": "response", "body": chat, "cost_usd": 0.02},
               {"type": "interrupted", "signal": "SIGTERM"}]
    (tmp_path / "trajectory.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    write_json(tmp_path / "checks.json", [{"time": t0 + 3.5, "full": True,
                                           "evaluation": {"verdict": "fail", "reasons": ["tests fail: t::a"]}}])
    about, turns = read_turns(tmp_path)
    assert [t.number for t in turns] == [1, 2]
    assert [s.head for s in turns[0].steps] == ["says:", 'call: Bash {"command": "cat mod.py"}', "output:"]
    assert turns[0].steps[2].body == "COST = 10.0"
    assert [s.head for s in turns[1].steps] == ["says:", "call: submit {}",
                                                "grading #1 (final evaluation): fail · tests fail: t::a"]
    text = render_turns("t/claude-code/s0", about, turns)
    assert "\x1b" not in text and "Reading it" in text and "($0.0200 so far)" in text


def test_a_job_without_a_trajectory_says_so(tmp_path):
    from agent.review.trajectory import TrajectoryError

    with pytest.raises(TrajectoryError, match="no trajectory.jsonl"):
        read_turns(Path(tmp_path))
