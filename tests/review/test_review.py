"""`perfagent review` and `compare` on results folders built by hand in the real shapes.

The fixture writes report.json with the report writer itself, evaluations from the checks'
own models, the ledger with the batch's Ledger and summary.json with its summary writer, so
the views are tested against exactly what a batch leaves behind, including a corrupt
report.json and a job folder whose report.json is missing.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

import pytest
from rich.console import Console

from agent.batch.driver import model_slug
from agent.batch.ledger import JobRecord, Ledger
from agent.batch.plan import Plan, PlannedJob
from agent.checks.evaluation import PerfResult
from agent.cli import main
from agent.review.compare import compare_results, render_compare
from agent.review.load import Results, load_results
from agent.review.rows import sample_plot, sort_runs, token_costs
from agent.review.terminal import render_review
from agent.run.result import ModelUsage, Report
from helpers import SONNET, Job, default_jobs, make_batch, write_job

def text_of(results: Results, **kw) -> str:
    console = Console(width=240, record=True, file=io.StringIO(), color_system=None)
    render_review(console, results, **kw)
    return console.export_text()


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def perfagent(capsys, monkeypatch):
    """The CLI's main() in-process (a subprocess costs seconds of imports per call)."""
    monkeypatch.setenv("COLUMNS", "250")

    def call(*args: str) -> Ran:
        code = main(list(args))
        out = capsys.readouterr()
        return Ran(code, out.out, out.err)
    return call


# -- loading --------------------------------------------------------------------------------------------
def test_every_run_is_loaded_and_agrees_with_summary_json(tmp_path):
    run_dir = make_batch(tmp_path)
    res = load_results(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    keys = {r.key for r in res.runs}
    assert {j["key"] for j in summary["jobs"]} <= keys
    assert "metadata-alloc/rules/s1" in keys  # no report, not in the ledger: still shown
    for run in res.runs:
        job = next((j for j in summary["jobs"] if j["key"] == run.key), None)
        if job is None:
            continue
        assert (run.speedup, run.cost_usd, run.turns) == (job["speedup"], job["cost_usd"], job["num_turns"])
        if not run.problem:
            assert run.verdict == job["verdict"]


def test_corrupt_and_missing_reports_are_shown_as_such(tmp_path):
    res = load_results(make_batch(tmp_path))
    by_key = {r.key: r for r in res.runs}
    corrupt = by_key[f"metadata-alloc/{model_slug(SONNET)}/s1"]
    missing = by_key["metadata-alloc/rules/s1"]
    assert corrupt.verdict == "corrupt report" and "JSONDecodeError" in corrupt.problem
    assert missing.verdict == "missing report" and missing.problem == "report.json missing"
    text = text_of(res)
    assert "corrupt report" in text and "missing report" in text
    assert "metadata-alloc/rules/s1: report.json missing" in text


@pytest.mark.parametrize("ledger", [True, False])
@pytest.mark.parametrize("text", ["[1, 2]", '{"type": "result", "evaluation": "oops"}',
                                  '{"type": "result", "evaluation": {"perf": [1]}}', '{"type": "result", "modelUsage": {"m": 1}}',
                                  '{"type": "result", "evaluation": {"perf": {"baseline_samples": ["x"]}}}',
                                  '{"type": "result", "evaluation": {"correctness": {"plain": {"passed": true, "duration_s": "slow"}}}}'])
def test_valid_json_of_the_wrong_shape_is_corrupt_not_a_crash(tmp_path, text, ledger):
    run_dir = make_batch(tmp_path, damage=False, jobs=[Job("t", "rules", 0), Job("t", "rules", 1)])
    (run_dir / "t/rules/s0/report.json").write_text(text)
    if not ledger:
        (run_dir / "batch.jsonl").unlink()
    res = load_results(run_dir)
    assert [(r.key, r.verdict) for r in res.runs] == [("t/rules/s0", "corrupt report"), ("t/rules/s1", "pass")]
    assert [(m.model, m.jobs) for m in res.summary.models] == [("rules", 2)]
    assert "corrupt report" in text_of(res, task="t")


def test_run_list_shows_every_run_with_interval_cost_turns(tmp_path):
    res = load_results(make_batch(tmp_path))
    text = text_of(res)
    for run in res.runs:
        assert run.key in text
    pass_run = next(r for r in res.runs if r.key == f"cuda-graph-buffers/{model_slug(SONNET)}/s0")
    lo, hi = pass_run.interval
    assert lo < pass_run.speedup < hi
    assert f"{pass_run.speedup:.3f}x [{lo:.3f}, {hi:.3f}]" in text
    assert f"${pass_run.cost_usd:.4f}" in text
    # the batch's own per-model table, the same function summary.md is made with
    assert "geomean speedup" in text and "Opt@K" in text


def test_sorting(tmp_path):
    res = load_results(make_batch(tmp_path))
    speedups = [r.speedup for r in sort_runs(res.runs, "speedup") if r.speedup is not None]
    assert speedups == sorted(speedups, reverse=True)
    costs = [r.cost_usd for r in sort_runs(res.runs, "cost") if r.cost_usd is not None]
    assert costs == sorted(costs)
    verdicts = [r.verdict for r in sort_runs(res.runs, "verdict")]
    assert verdicts[0] == "pass" and verdicts.index("fail") > verdicts.index("unverified")


def test_one_task_in_detail(tmp_path):
    res = load_results(make_batch(tmp_path))
    text = text_of(res, task="cuda-graph-buffers")
    assert "metadata-alloc" not in text.split("cuda-graph-buffers", 1)[1].split("checks")[0]
    assert "torch.empty(max_bs" in text  # the diff
    assert "poison run" in text and "FAIL" in text and "tests/test_graph.py::test_replay" in text
    assert "NOT executed: miniattn/x.py:7" in text  # coverage of changed lines
    assert "edit_file(tests/test_graph.py)" in text  # the protected-path attempt
    assert "baseline" in text and "candidate" in text and "▁" in text or "█" in text  # the sample plot
    assert "Replaced torch.zeros with torch.empty" in text  # the agent's summary, as Markdown
    assert "cache read" in text and "output" in text  # cost by token type


def test_single_run_folder(tmp_path):
    # a single `perfagent run` puts its job under the task id, with no ledger
    write_job(tmp_path, "20260101-000000-abcdef", Job("cuda-graph-buffers", SONNET, 0), key="cuda-graph-buffers")
    run_dir = tmp_path / "results" / "20260101-000000-abcdef"
    res = load_results(run_dir)
    assert [r.key for r in res.runs] == ["cuda-graph-buffers"] and not res.is_batch
    assert res.runs[0].model == "claude-sonnet-4-5" and res.runs[0].verdict == "pass"
    text = text_of(res)
    assert "checks" in text and "cost by token type" in text  # one run: shown in detail
    # the job folder itself works too
    assert [r.key for r in load_results(run_dir / "cuda-graph-buffers").runs] == ["cuda-graph-buffers"]


def test_a_rejected_change_is_shown_as_not_emitted(tmp_path):
    run_dir = make_batch(tmp_path, damage=False, jobs=[Job("t", SONNET, 0, verdict="fail", rejected=True)])
    run = load_results(run_dir).runs[0]
    assert [(p.path.name, p.rejected) for p in run.patches] == [("model_patch.diff", False), ("rejected.diff", True)]
    text = text_of(load_results(run_dir), task="t")
    emitted, rejected = text.split("rejected change (not emitted): ", 1)
    assert "empty diff" in emitted and "torch.empty(max_bs" not in emitted  # nothing emitted...
    assert rejected.startswith(str(tmp_path / "patches")) and "rejected.diff" in rejected  # ...the failing state is
    assert "torch.empty(max_bs" in rejected and "FAIL" in text  # labelled, shown, and its checks say why


def test_failed_and_pending_jobs(tmp_path):
    run_dir = make_batch(tmp_path, damage=False, jobs=[Job("t", "rules", 0)])
    Ledger(run_dir).append(JobRecord(key="t/rules/s1", task="t", model="rules", sample=1, status="failed",
                                     reason="job process exited 1 without a report"))
    Plan(jobs=[PlannedJob(key=f"t/rules/s{k}", task="t", model="rules", sample=k) for k in range(3)]).write(
        run_dir / "batch.json")
    res = load_results(run_dir)
    verdicts = {r.key: r.verdict for r in res.runs}
    assert verdicts == {"t/rules/s0": "pass", "t/rules/s1": "failed", "t/rules/s2": "pending"}
    assert "exited 1 without a report" in text_of(res, task="t")


# -- pieces --------------------------------------------------------------------------------------------
def test_sample_plot_separates_clouds():
    perf = PerfResult(metric="m", direction="lower", baseline_samples=[10, 10.1, 9.9, 10.2],
                      candidate_samples=[5, 5.1, 4.9, 5.05], unit="ms")
    lines = sample_plot(perf, width=20).splitlines()
    assert len(lines) == 3
    base, cand = lines[0][11:31], lines[1][11:31]
    assert base.startswith("·") and not base.endswith("·")  # baseline on the right
    assert cand.endswith("·") and not cand.startswith("·")  # candidate on the left
    assert "4.9 ms" in lines[2] and "10.2 ms" in lines[2]
    assert sample_plot(None) == ""
    flat = PerfResult(metric="m", direction="lower", baseline_samples=[3.0], candidate_samples=[3.0])
    assert sample_plot(flat)  # no span: no crash


def test_token_costs_add_up_to_the_reported_cost(tmp_path):
    report = write_job(tmp_path, "r", Job("t", SONNET, 0))
    rows = token_costs(report)
    assert {r.kind for r in rows} == {"input", "output", "cache write 5m", "cache read"}
    assert sum(r.usd for r in rows) == pytest.approx(report.total_cost_usd, rel=1e-12)
    assert token_costs(Report(modelUsage={"mystery-model": ModelUsage(inputTokens=5)}))[0].usd is None


# -- compare ---------------------------------------------------------------------------------------------
def test_compare_two_batches(tmp_path):
    a = load_results(make_batch(tmp_path, "batch-a"))
    jobs = default_jobs()
    jobs[1].verdict = "pass"  # fixed
    jobs[4].verdict = "fail"  # broke
    jobs.append(Job("new-task", "rules", 0))
    del jobs[5]
    b = load_results(make_batch(tmp_path, "batch-b", jobs=jobs, damage=False))
    rows = {(r.task, r.model): r for r in compare_results(a, b)}
    assert rows[("cuda-graph-buffers", SONNET)].change == "more correct"
    assert rows[("cuda-graph-buffers", SONNET)].verdicts_a == ["pass", "fail"]
    assert rows[("metadata-alloc", SONNET)].change == "fewer correct"
    assert rows[("new-task", "rules")].change == "new"
    assert rows[("metadata-alloc", "rules")].change == "gone"
    console = Console(width=240, record=True, file=io.StringIO(), color_system=None)
    render_compare(console, a, b)
    text = console.export_text()
    assert "batch-a -> batch-b" in text and "pass, fail -> pass, pass" in text and "more correct" in text


# -- the CLI -----------------------------------------------------------------------------------------------
def test_cli_review_compare_and_errors(tmp_path, perfagent):
    run_dir = make_batch(tmp_path)
    res = perfagent("review", str(run_dir), "--sort", "speedup")
    assert res.returncode == 0, res.stderr
    assert "corrupt report" in res.stdout and "Traceback" not in res.stdout + res.stderr
    res = perfagent("review", str(run_dir), "--task", "cuda-graph-buffers")
    assert res.returncode == 0 and "poison run" in res.stdout
    res = perfagent("review", str(run_dir), "--task", "nope")
    assert res.returncode == 2 and res.stderr.startswith("error:") and "cuda-graph-buffers" in res.stderr
    res = perfagent("review", str(tmp_path / "nowhere"))
    assert res.returncode == 2 and "no such results folder" in res.stderr
    b = make_batch(tmp_path, "batch-b", damage=False)
    res = perfagent("compare", str(run_dir), str(b))
    assert res.returncode == 0, res.stderr
    assert "batch-a -> batch-b" in res.stdout
