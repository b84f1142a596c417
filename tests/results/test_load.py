"""agent.results.load: the one loader of a run folder, with or without a ledger."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.results.load import commands_seconds, summarize_run
from agent.results.report import read_report
from agent.results.tables import summary_markdown


def test_commands_time_counts_each_grading_once(tmp_path):
    graded = {"verdict": "pass", "duration_s": 5.0}
    quick = {"verdict": "fail", "duration_s": 2.0}
    (tmp_path / "checks.json").write_text(json.dumps([{"full": False, "evaluation": quick},
                                                      {"full": True, "evaluation": graded}]))
    run = {"type": "tool_result", "name": "run", "duration_s": 1.5}
    (tmp_path / "trajectory.jsonl").write_text(json.dumps(run) + "\n")
    report = {"type": "result", "evaluation": {**graded, "emitted": "best passing candidate", "warnings": []}}
    (tmp_path / "report.json").write_text(json.dumps(report))
    # the final evaluation is the logged full one
    assert commands_seconds(tmp_path, read_report(tmp_path / "report.json")) == 8.5
    report["evaluation"]["duration_s"] = 30.0  # made after the loop: not in checks.json
    (tmp_path / "report.json").write_text(json.dumps(report))
    assert commands_seconds(tmp_path, read_report(tmp_path / "report.json")) == 8.5 + 30.0


def test_summarize_run_without_ledger(tmp_path):
    """Runs made one by one with `perfagent run --job <task>/<model>/s<k>` are summarised from their reports."""
    run_dir = tmp_path / "results" / "solo"
    for k, verdict in enumerate(["pass", "fail"]):
        d = run_dir / "t1" / "anthropic-claude-sonnet-4-5" / f"s{k}"
        d.mkdir(parents=True)
        perf = {"metric": "ms", "direction": "lower", "ratio": 1 / 1.5, "verdict": "faster"}
        (d / "report.json").write_text(json.dumps({
            "type": "result", "subtype": "success", "total_cost_usd": 0.1, "duration_ms": 2000, "duration_api_ms": 500,
            "usage": {"input_tokens": 10, "output_tokens": 5}, "evaluation": {"verdict": verdict, "perf": perf}}))
    s = summarize_run(run_dir)
    (m,) = s.models
    assert m.model == "anthropic-claude-sonnet-4-5" and m.jobs == 2 and m.correct == 1 and m.faster == 1
    assert m.cost_usd == pytest.approx(0.2) and m.model_s == 1.0 and s.samples == 2


def test_an_external_agents_jobs_group_under_its_spec(tmp_path):
    """Claude Code and our loop on the same API model are two contestants, labelled by their specs."""
    agent = {"name": "claude-code", "model": "claude-sonnet-4-5", "version": "2.1.330"}
    run_dir = tmp_path / "results" / "solo"
    for folder, extra in (("claude-code-claude-sonnet-4-5", {"agent": agent}), ("anthropic-claude-sonnet-4-5", {})):
        d = run_dir / "t1" / folder / "s0"
        d.mkdir(parents=True)
        (d / "report.json").write_text(json.dumps({
            "type": "result", "total_cost_usd": 0.1, "modelUsage": {"claude-sonnet-4-5": {"costUSD": 0.1}},
            "evaluation": {"verdict": "fail"}, **extra}))
    s = summarize_run(run_dir)
    assert sorted(m.model for m in s.models) == ["anthropic-claude-sonnet-4-5", "claude-code:claude-sonnet-4-5"]
    assert "| claude-code:claude-sonnet-4-5 | 1 | 0 (0%)" in summary_markdown(s)
    assert [t.model for t in s.tasks] == ["anthropic-claude-sonnet-4-5", "claude-code:claude-sonnet-4-5"]
    (single,) = summarize_run(_single_run(tmp_path, agent)).models  # `perfagent run --agent`: no folder names it
    assert single.model == "claude-code:claude-sonnet-4-5"


def _single_run(tmp_path: Path, agent: dict) -> Path:
    d = tmp_path / "results" / "one" / "t1"
    d.mkdir(parents=True)
    (d / "report.json").write_text(json.dumps({"type": "result", "modelUsage": {"claude-sonnet-4-5": {}},
                                               "agent": agent}))
    return d.parent
