"""`perfagent runs [DIR]`: the runs of a results folder, newest first, each with its date, task count,
contestants and headline; read through the one loader, so the counts are summary.json's."""

from __future__ import annotations

import json
import os

from helpers import Job, make_batch, write_job

from agent.results.layout import PLAN
from agent.results.load import summarize_run
from agent.results.plan import Plan


def two_runs(out):
    """A batch planned at t=2e9 (7 jobs, 3 tasks, two contestants) and a single run that ended at t=1e9."""
    run = make_batch(out, "batch-a", damage=False)
    Plan(run_id="batch-a", created=2e9, models=["anthropic:claude-sonnet-4-5", "rules"]).write(run / PLAN)
    write_job(out, "single-1", Job("rope-cache", "rules", 0, speedup=None), key="rope-cache")
    os.utime(out / "results/single-1/rope-cache/report.json", (1e9, 1e9))
    return run


def test_runs_lists_each_run_newest_first_with_its_date_tasks_contestants_and_headline(tmp_path, perfagent,
                                                                                       monkeypatch):
    run = two_runs(tmp_path)
    monkeypatch.chdir(tmp_path)
    res = perfagent("runs")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert [ln.split()[0] for ln in lines[::2]] == ["batch-a", "single-1"]
    assert "3 tasks  anthropic:claude-sonnet-4-5, rules" in lines[0]
    s = summarize_run(run)
    correct, jobs = sum(m.correct for m in s.models), sum(m.jobs for m in s.models)
    assert lines[1].strip().startswith(f"{correct}/{jobs} correct, ") and (correct, jobs) == (4, 7)
    assert "1 task  rules" in lines[2] and lines[3].strip() == "pass"
    assert max(len(ln) for ln in lines) <= 80  # nothing here a narrow terminal must fold
    assert perfagent("runs", ".").stdout == res.stdout  # --out's folder: its results/
    only = perfagent("runs", "results/single-1")
    assert only.returncode == 0 and only.stdout.splitlines()[0].startswith("single-1  ")
    listed = json.loads(perfagent("runs", "--json").stdout)
    assert [(r["run_id"], r["tasks"], r["jobs"], r["date"]) for r in listed] == [("batch-a", 3, 7, 2e9),
                                                                                 ("single-1", 1, 1, 1e9)]


def test_a_missing_folder_is_one_line_and_an_empty_one_says_so(tmp_path, perfagent, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = perfagent("runs", "nowhere")
    assert res.returncode == 2 and res.stderr == "error: nowhere: no such folder\n"
    (tmp_path / "results").mkdir()
    res = perfagent("runs")
    assert res.returncode == 0 and res.stdout == "no runs in results\n"
