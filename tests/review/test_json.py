"""`review --json` and `compare --json`: the terminal views' numbers as JSON, on results folders in the real
shapes (tests/helpers.py), checked against the summary.json the batch wrote beside them."""

from __future__ import annotations

import json


from agent.review.dump import COMPARE_SCHEMA, REVIEW_SCHEMA
from helpers import SONNET, Job, default_jobs, make_batch, write_job




def test_review_json_is_the_run_list_with_summary_json_numbers(tmp_path, perfagent):
    run_dir = make_batch(tmp_path)  # with a corrupt report.json and a job that died before writing one
    res = perfagent("review", str(run_dir), "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["schema"] == REVIEW_SCHEMA and data["run_id"] == "batch-a" and data["is_batch"] is True
    written = json.loads((run_dir / "summary.json").read_text())
    assert data["summary"]["models"] == written["models"] and data["summary"]["tasks"] == written["tasks"]
    assert "jobs" not in data["summary"]  # each run carries its own record
    runs = {r["key"]: r for r in data["runs"]}
    assert set(runs) == {j["key"] for j in written["jobs"]} | {"metadata-alloc/rules/s1"}
    for job in written["jobs"]:
        r = runs[job["key"]]
        assert r["record"] == job and (r["speedup"], r["cost_usd"], r["turns"]) == (
            job["speedup"], job["cost_usd"], job["num_turns"])
        assert r["report"] is None  # the list view: no run in detail
    assert runs["metadata-alloc/anthropic-claude-sonnet-4-5/s1"]["outcome"] == "corrupt report"
    assert runs["metadata-alloc/anthropic-claude-sonnet-4-5/s1"]["problem"].startswith("report.json corrupt")
    crashed = runs["metadata-alloc/rules/s1"]
    assert (crashed["outcome"], crashed["record"]) == ("missing report", None)
    passed = runs["cuda-graph-buffers/rules/s0"]
    assert passed["outcome"] == "pass" and passed["interval"][0] < passed["speedup"] < passed["interval"][1]
    assert [p["rejected"] for p in passed["patches"]] == [False] and passed["patches"][0]["size"] > 0

    by_speed = json.loads(perfagent("review", str(run_dir), "--json", "--sort", "speedup").stdout)["runs"]
    speeds = [r["speedup"] for r in by_speed if r["speedup"] is not None]
    assert speeds == sorted(speeds, reverse=True) and len(speeds) >= 5


def test_review_json_with_task_carries_each_runs_report_and_errors_stay_one_line(tmp_path, perfagent):
    run_dir = make_batch(tmp_path, damage=False)
    res = perfagent("review", str(run_dir), "--json", "--task", "cuda-graph-buffers")
    assert res.returncode == 0, res.stderr
    runs = json.loads(res.stdout)["runs"]
    assert len(runs) == 4 and {r["task"] for r in runs} == {"cuda-graph-buffers"}
    for r in runs:
        assert r["report"]["evaluation"]["verdict"] == r["record"]["verdict"]
        assert r["report"]["num_turns"] == r["turns"]
    # a single run's folder is shown in detail, as the terminal shows it
    write_job(tmp_path, "solo", Job("t", SONNET, 0), key="t")
    (solo,) = json.loads(perfagent("review", str(tmp_path / "results" / "solo"), "--json").stdout)["runs"]
    assert solo["report"]["evaluation"]["perf"]["metric"] == "init_ms"
    # exit codes and error lines are the table's
    res = perfagent("review", str(run_dir), "--json", "--task", "nope")
    assert res.returncode == 2 and res.stdout == "" and res.stderr.startswith("error:") and "rope-cache" in res.stderr
    res = perfagent("review", str(tmp_path / "nowhere"), "--json")
    assert res.returncode == 2 and res.stdout == "" and "no such results folder" in res.stderr


def test_compare_json_is_each_task_before_and_after(tmp_path, perfagent):
    a = make_batch(tmp_path, "batch-a")
    jobs = default_jobs()
    jobs[1].verdict = "pass"  # fixed
    jobs[4].verdict = "fail"  # broke
    jobs.append(Job("new-task", "rules", 0))
    del jobs[5]
    b = make_batch(tmp_path, "batch-b", jobs=jobs, damage=False)
    res = perfagent("compare", str(a), str(b), "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert (data["schema"], data["run_a"], data["run_b"]) == (COMPARE_SCHEMA, "batch-a", "batch-b")
    rows = {(t["task"], t["model"]): t for t in data["tasks"]}
    fixed = rows[("cuda-graph-buffers", SONNET)]
    assert fixed["change"] == "more correct"
    assert (fixed["a"]["outcomes"], fixed["b"]["outcomes"]) == (["pass", "fail"], ["pass", "pass"])
    assert (fixed["a"]["row"]["correct"], fixed["b"]["row"]["correct"]) == (1, 2)
    assert fixed["b"]["best"]["speedup"] == fixed["b"]["row"]["best_speedup"]  # the task row's best run
    assert rows[("metadata-alloc", SONNET)]["change"] == "fewer correct"
    new, gone = rows[("new-task", "rules")], rows[("metadata-alloc", "rules")]
    assert (new["change"], new["a"]["row"], new["a"]["jobs"]) == ("new", None, [])
    assert gone["change"] == "gone" and gone["b"]["row"] is None
    models = {m["model"]: m for m in data["models"]}
    written_b = {m["model"]: m for m in json.loads((b / "summary.json").read_text())["models"]}
    assert models["rules"]["b"] == written_b["rules"] and models[SONNET]["a"]["jobs"] == 5
    assert [(p["run_id"], p["key"], p["problem"][:19]) for p in data["problems"]] == [
        ("batch-a", "metadata-alloc/anthropic-claude-sonnet-4-5/s1", "report.json corrupt"),
        ("batch-a", "metadata-alloc/rules/s1", "report.json missing")]
    res = perfagent("compare", str(a), str(tmp_path / "nowhere"), "--json")
    assert res.returncode == 2 and res.stdout == "" and "no such results folder" in res.stderr
