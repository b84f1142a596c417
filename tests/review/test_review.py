"""`perfagent review` and `compare` on results folders built by hand in the real shapes.

The fixture writes report.json with the report writer itself, evaluations from the checks'
own models, the ledger with the batch's Ledger and summary.json with its summary writer, so
the views are tested against exactly what a batch leaves behind, including a corrupt
report.json and a job folder whose report.json is missing. An external agent's job is
`write_agent_job`'s (conftest.py): its claims, rounds and kept outputs as `agent.run.external` writes them.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from agent.checks.evaluation import Evaluation, PerfResult
from agent.checks.render import summarize
from agent.env.candidate import LeftOut
from agent.results.layout import model_slug
from agent.results.ledger import Ledger
from agent.results.load import summarize_run
from agent.results.plan import Plan, PlannedJob
from agent.results.record import JobRecord
from agent.results.report import AgentRound, AgentRun, ModelUsage, Report
from agent.results.tables import write_summary
from agent.review.compare import compare_results, render_compare
from agent.review.load import SHOWN_BYTES, SHOWN_LINES, Results, load_results
from agent.review.rows import (against_claim, claim_rows, claim_vs_evidence, evidence_reasons, sample_plot, sort_runs,
                               token_costs)
from agent.review.terminal import render_review
from helpers import DIFF, SONNET, Job, default_jobs, evaluation, make_batch, write_job

AGENT = "claude-code:claude-sonnet-4-5"

def text_of(results: Results, **kw) -> str:
    console = Console(width=240, record=True, file=io.StringIO(), color_system=None)
    render_review(console, results, **kw)
    return console.export_text()




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


def test_a_job_a_live_process_is_writing_is_running_not_missing(tmp_path):
    """Review of a batch still going: its running jobs say so, and stop saying so once their process is gone."""
    from agent.results.layout import claim_job

    run_dir = make_batch(tmp_path)
    key = "metadata-alloc/rules/s1"
    with claim_job(run_dir / key):  # as the job's process holds it (another open file: flock tells them apart)
        run = next(r for r in load_results(run_dir).runs if r.key == key)
        assert run.verdict == "running" and run.problem is None, run.problem
        assert "running" in text_of(load_results(run_dir)) and "missing report" not in text_of(load_results(run_dir))
    run = next(r for r in load_results(run_dir).runs if r.key == key)
    assert run.verdict == "missing report"


@pytest.mark.parametrize("ledger", [True, False])
@pytest.mark.parametrize("text", ["[1, 2]", '{"type": "result", "evaluation": "oops"}',
                                  '{"type": "result", "evaluation": {"perf": [1]}}',
                                  '{"type": "result", "modelUsage": {"m": 1}}',
                                  '{"type": "result", "evaluation": {"perf": {"baseline_samples": ["x"]}}}',
                                  '{"type": "result", "evaluation": '
                                  '{"correctness": {"plain": {"passed": true, "duration_s": "slow"}}}}'])
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
    assert "torch.empty(max_bs" not in text and "1 file changed, 1 insertions(+), 1 deletions(-)" in text
    assert "torch.empty(max_bs" in text_of(res, task="cuda-graph-buffers", diff=True)  # the diff, asked for
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
    text = text_of(load_results(run_dir), task="t", diff=True)
    emitted, rejected = text.split("rejected change (not emitted): ", 1)
    assert "empty diff" in emitted and "torch.empty(max_bs" not in emitted  # nothing emitted...
    assert rejected.startswith(str(tmp_path / "patches")) and "rejected.diff" in rejected  # ...the failing state is
    assert "torch.empty(max_bs" in rejected and "FAIL" in text  # labelled, shown, and its checks say why


def test_a_huge_diff_is_read_only_in_part_and_the_left_out_files_are_listed(tmp_path):
    job = Job("t", SONNET, 0)
    report = write_job(tmp_path, "r", job, key="t")
    patch = tmp_path / "patches" / "r" / "t" / "model_patch.diff"
    patch.write_text(DIFF + "+x\n" * 1_500_000)  # 3 MB of short lines: a bounded number of them is shown
    size = patch.stat().st_size
    left = [LeftOut(path=f"out/{i}.bin", size=100 + i, reason="binary") for i in range(12)]
    report.model_copy(update={"left_out": left}).write(tmp_path / "results" / "r" / "t" / "report.json")

    res = load_results(tmp_path / "results" / "r")
    shown = res.runs[0].patches[0]
    assert shown.size == size > 3_000_000 and shown.shown <= SHOWN_BYTES and len(shown.text) == shown.shown
    assert shown.cut and shown.text.count("\n") == SHOWN_LINES and shown.text.endswith("+x\n")
    text = text_of(res)
    assert f"cut: the first {shown.shown:,} of {size:,} bytes are shown; the whole diff is {patch}" in text
    assert "out/0.bin (100 bytes): binary" in text and "out/9.bin (109 bytes): binary" in text
    assert "out/10.bin" not in text and "... and 2 more (report.json lists them all)" in text


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


# -- an external agent: its claims beside our evidence ----------------------------------------------------
def agent_batch(tmp_path, write_agent_job) -> tuple[Path, Report]:
    """Our loop and Claude Code on one task; Claude Code's claim is contradicted by the poison run."""
    job = Job("cuda-graph-buffers", AGENT, 0, verdict="fail", speedup=None)
    run_dir = make_batch(tmp_path, damage=False, jobs=[Job("cuda-graph-buffers", SONNET, 0), job])
    report = write_agent_job(tmp_path, "batch-a", job)
    write_summary(run_dir, summarize_run(run_dir))
    return run_dir, report


def test_the_run_list_names_the_agent_and_the_summary_groups_it_under_its_spec(tmp_path, write_agent_job):
    run_dir, _ = agent_batch(tmp_path, write_agent_job)
    res = load_results(run_dir)
    assert sorted(m.model for m in res.summary.models) == sorted([SONNET, AGENT])
    text = text_of(res)
    row = next(line for line in text.splitlines() if "claude-code-claude-sonnet-4-5/s0" in line)
    assert "claude-code · claude-sonnet-4-5" in row and "fail" in row
    assert "claims vs evidence" not in text  # the list only; details need --task


def test_claims_beside_evidence_in_the_detail(tmp_path, write_agent_job):
    run_dir, report = agent_batch(tmp_path, write_agent_job)
    (run_dir / "cuda-graph-buffers/claude-code-claude-sonnet-4-5/s0/agent/round-1.result.json").unlink()
    text = text_of(load_results(run_dir), task="cuda-graph-buffers")
    ours, theirs = text.split("claims vs evidence: claude-code · claude-sonnet-4-5", 1)
    assert "claims vs evidence" not in ours  # our own loop's run has no claims section
    flat = " ".join(theirs.split())
    assert "claimed: Changed every torch.zeros" in flat and "No risk of uninitialized memory access" in flat
    assert "measured: fail — tests fail with uninitialised memory poisoned" in flat
    assert "test_replay[decode-bs1]" in flat and "round 1 · exit 0 · 1.0s" in flat
    assert (f"its own figure $0.0500 vs relay-metered ${report.total_cost_usd:.4f} (the one counted) "
            "— claude-code reported $0.050000") in flat
    assert "refused network │ CONNECT example.com:443" in flat
    kept = run_dir / "cuda-graph-buffers/claude-code-claude-sonnet-4-5/s0/agent"
    assert f"{kept}/round-1.stdout.txt" in flat and f"{kept}/final.diff" in flat
    assert f"{kept}/round-1.result.json (missing)" in flat


def test_a_single_agent_run_is_named_by_its_spec(tmp_path, write_agent_job):
    write_agent_job(tmp_path, "solo", Job("cuda-graph-buffers", AGENT, 0, verdict="fail"), key="cuda-graph-buffers")
    res = load_results(tmp_path / "results" / "solo")
    assert [(r.model, r.verdict) for r in res.runs] == [(AGENT, "fail")]
    assert [m.model for m in res.summary.models] == [AGENT]  # not its API model: our loop may run that one too
    text = text_of(res)
    assert "model claude-code · claude-sonnet-4-5" in text and "claims vs evidence" in text


def test_claim_vs_evidence_wording():
    claimed, measured = claim_vs_evidence("one\n\ntwo\nthree\nfour\nfive", "fail", ["a fails", "b fails"])
    assert claimed == "claimed: one\ntwo\nthree\n… (+2 lines)"
    assert measured == "measured: fail — a fails; b fails"
    assert claim_vs_evidence("", "", []) == ("claimed: (no final message)", "measured: not graded")
    claimed, _ = claim_vs_evidence("done\x1b[2J\x07 <b>", "pass", [])
    assert claimed == "claimed: done <b>"  # no escape sequence (nor its tail) reaches the terminal; markup is text
    assert claim_vs_evidence("x", "fail", ["test_\x1b]0;pwned\x07a"])[1] == "measured: fail — test_a"
    assert against_claim(["it speaks of a commit; none was made", "it names x.diff: empty"]) == (
        "but: it speaks of a commit; none was made\nbut: it names x.diff: empty")
    told = AgentRun(name="mini-swe-agent", model="gpt-4o",
                    rounds=[AgentRound(round=1, claim="Committed.", verdict="pass", claim_notes=["no commit"])])
    assert claim_rows(told, None)[0].against == "but: no commit"


def test_evidence_reasons_come_from_the_checks_summary():
    failing = Evaluation.model_validate(evaluation(Job("t", AGENT, 0, verdict="fail"), 0))
    assert evidence_reasons(summarize(failing)) == ["the run is fail"]
    passing = Evaluation.model_validate(evaluation(Job("t", AGENT, 0, speedup=1.8), 0))
    (perf,) = evidence_reasons(summarize(passing))
    assert perf.startswith("perf: faster: init_ms") and "speedup" in perf
    assert evidence_reasons("the agent left no change") == ["the agent left no change"]


def test_every_round_and_why_it_ended(tmp_path, write_agent_job):
    fail = Evaluation(verdict="fail", reasons=["tests fail: tests/test_graph.py::test_replay"])
    rounds = [AgentRound(round=1, exit_code=0, duration_ms=2000, claim="All safe.", verdict="fail",
                         evidence=summarize(fail)),
              AgentRound(round=2, exit_code=None, duration_ms=900_000, claim="", verdict="no-change",
                         evidence="the agent left no change", note="timed out after 900s")]
    rows = claim_rows(AgentRun(name="codex", model="gpt-5", rounds=rounds), None)
    assert [(r.level, r.measured) for r in rows] == [
        ("bad", "measured: fail — tests fail: tests/test_graph.py::test_replay"),
        ("info", "measured: no-change — the agent left no change")]
    assert rows[1].session == "round 2 · no exit code · 900.0s\nended: timed out after 900s"
    # no session ran (the agent could not start): its last claim beside the final grade
    (final,) = claim_rows(AgentRun(name="codex", model="gpt-5", claim="x"), fail)
    assert (final.session, final.measured) == ("final",
                                                "measured: fail — tests fail: tests/test_graph.py::test_replay")
    (ungraded,) = claim_rows(AgentRun(name="codex", model="gpt-5"), None)
    assert (ungraded.claimed, ungraded.level) == ("claimed: (no final message)", "bad")
    write_agent_job(tmp_path, "r", Job("t", AGENT, 0, verdict="fail"), rounds=rounds)
    flat = " ".join(text_of(load_results(tmp_path / "results" / "r")).split())
    assert "ended: timed out after 900s" in flat and "claimed: All safe." in flat


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
