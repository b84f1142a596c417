"""agent.results.summary and tables: counts, rates, spend and the markdown, from job records."""

from __future__ import annotations

import json

import pytest
from helpers import rec

from agent.models.base import Usage
from agent.results.summary import BatchSummary, summarize
from agent.results.tables import summary_markdown, summary_tables


def test_summarize_counts_rates_and_spend():
    recs = [
        rec("a", "m1", 0, speedup=2.0, ref=2.0, has_ref=True, perf_verdict="faster", cost_usd=0.5,
            tokens=Usage(input_tokens=100, output_tokens=10), wall_s=10, model_s=4, commands_s=5),
        rec("a", "m1", 1, verdict="fail", cost_usd=None, wall_s=3),
        rec("b", "m1", 0, speedup=8.0, perf_verdict="faster", cost_usd=0.25, wall_s=2),
        rec("b", "m1", 1, status="failed", verdict=None, reason="no report"),
        rec("g", "m1", 0, status="skipped", verdict=None, reason="needs a GPU"),
    ]
    s = summarize(recs, run_id="r", samples=2, planned=[(r.key, r.model) for r in recs] + [("g/m1/s1", "m1")])
    (m,) = s.models
    assert (m.jobs, m.done, m.failed, m.skipped, m.pending) == (4, 3, 1, 1, 1)
    assert (m.correct, m.correct_rate, m.faster) == (2, 0.5, 2)
    assert m.geomean_speedup == pytest.approx(4.0) and m.speedup_jobs == 2
    assert (m.opt_solved, m.opt_tasks, m.opt_at_k, m.opt_k) == (1, 1, 1.0, 2)
    assert m.cost_usd == 0.75 and m.cost_unknown_jobs == 2 and m.cost_per_job == pytest.approx(0.375)
    assert m.tokens.total == 110 and m.overhead_s == pytest.approx(1 + 3 + 2)
    row = next(t for t in s.tasks if t.task == "a")
    assert row.opt is True and row.best_speedup == 2.0 and row.correct == 1
    assert next(t for t in s.tasks if t.task == "g").statuses == {"skipped": 1}
    again = BatchSummary.model_validate_json(s.to_json())
    assert again.models == s.models and json.loads(s.to_json())["schema"] == "perfagent.batch-summary/4"
    assert "| m1 | 4 | 2 (50%)" in summary_markdown(s) and len(summary_tables(s)) == 3


def test_wall_time_is_real_time_not_the_sum_of_jobs():
    # two jobs of 60 s each, run side by side, ending 10 s apart: 70 s of wall time, 120 s of job time
    recs = [rec("a", wall_s=60.0, finished_at=1000.0), rec("b", wall_s=60.0, finished_at=1010.0),
            rec("c", status="skipped", verdict=None, wall_s=0.0, finished_at=5000.0)]
    s = summarize(recs, run_id="r")
    (m,) = s.models
    assert s.wall_s == m.wall_s == pytest.approx(70.0) and s.job_s == m.job_s == pytest.approx(120.0)
    md = summary_markdown(s)
    assert "wall 70.0s from the first job's start" in md and "job time 2.0m" in md
    assert "| 70.0s | 2.0m |" in md  # wall, then job time


def test_of_ref_gain_only_from_significant_results():
    recs = [rec("a", speedup=1.5, ref=2.0, has_ref=True, perf_verdict="faster", fraction_of_reference=0.5),
            # correct but not significantly faster: the checker gave no fraction, and none is made up here
            rec("b", speedup=1.02, ref=2.0, has_ref=True, perf_verdict="inconclusive", fraction_of_reference=None),
            # a fraction on a job that is not significantly faster is not counted either
            rec("c", speedup=1.04, ref=2.0, has_ref=True, perf_verdict="no significant change",
                fraction_of_reference=0.04),
            # an errored run's fraction does not count
            rec("d", speedup=1.9, ref=2.0, has_ref=True, perf_verdict="faster", fraction_of_reference=0.9,
                subtype="error_max_turns")]
    (m,) = summarize(recs, run_id="r").models
    assert m.fraction_of_reference == pytest.approx(0.5) and m.fraction_jobs == 1
    assert m.correct == 3 and m.faster == 1 and m.errored == 1 and m.opt_solved == 0


def test_the_opt_cell_says_when_a_decision_is_within_noise():
    recs = [rec("a", "m1", 0, speedup=1.9, ref=1.86, has_ref=True, perf_verdict="faster",
                speedup_interval=(1.5, 2.3), reference_interval=(1.6, 2.2)),
            rec("b", "m1", 0, speedup=3.0, ref=1.5, has_ref=True, perf_verdict="faster",
                speedup_interval=(2.8, 3.2), reference_interval=(1.4, 1.6))]
    s = summarize(recs, run_id="r", samples=1)
    assert s.models[0].opt_within_noise == 1
    assert "100% (2/2; 1 within noise)" in summary_markdown(s)


def test_outcome_ids_are_swebench_run_reports_one_per_contestant_and_sample():
    """summary.json's id lists (issue 46), as SWE-bench's report lists a predictions file's instances: an error
    wins over the verdict (a max-turns run that last passed), an empty patch is not unresolved."""
    recs = [rec("a", "m1", 0), rec("b", "m1", 0, verdict="fail"), rec("c", "m1", 0, verdict="no-change"),
            rec("d", "m1", 0, subtype="error_max_turns"), rec("e", "m1", 0, status="failed", verdict=None),
            rec("f", "m1", 0, status="skipped", verdict=None), rec("a", "m1", 1, verdict="unverified"),
            rec("a", "rules", 0, verdict="error")]
    s = summarize(recs, run_id="r", planned=[(r.key, r.model) for r in recs] + [("g/m1/s0", "m1")])
    got = {(o.model, o.sample): o.model_dump(exclude={"model", "sample"}) for o in s.outcome_ids}
    assert got == {
        ("m1", 0): {"resolved_ids": ["a"], "unresolved_ids": ["b"], "empty_patch_ids": ["c"], "error_ids": ["d", "e"],
                    "incomplete_ids": ["f", "g"]},
        ("m1", 1): {"resolved_ids": [], "unresolved_ids": ["a"], "empty_patch_ids": [], "error_ids": [],
                    "incomplete_ids": []},
        ("rules", 0): {"resolved_ids": [], "unresolved_ids": [], "empty_patch_ids": [], "error_ids": ["a"],
                       "incomplete_ids": []}}
    assert [o["model"] for o in json.loads(s.to_json())["outcome_ids"]] == ["m1", "m1", "rules"]
