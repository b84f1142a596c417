"""agent.results.record: one definition of correct, faster, failure, no change and outcome."""

from __future__ import annotations

import json

from helpers import rec

from agent.results.metrics import reaches_reference
from agent.results.summary import summarize


def test_a_pass_from_a_run_that_hit_an_error_limit_is_not_correct():
    hit = rec(subtype="error_max_turns", perf_verdict="faster", speedup=2.0, ref=2.0, has_ref=True)
    assert (hit.correct, hit.faster, hit.failure, hit.outcome) == (False, False, True, "error_max_turns")
    ok = hit.model_copy(update={"subtype": "success"})
    assert (ok.correct, ok.faster, ok.failure, ok.outcome) == (True, True, False, "pass")
    assert not reaches_reference(hit) and reaches_reference(ok)
    (m,) = summarize([hit], run_id="r").models
    assert (m.correct, m.faster, m.errored, m.opt_solved) == (0, 0, 1, 0)


def test_outcomes_and_the_ledger_line_keeps_only_fields():
    assert rec(status="failed", verdict=None).outcome == "failed" and rec(status="failed").failure
    assert rec(verdict="no-change").outcome == "no change" and not rec(verdict="no-change").failure
    assert rec(verdict="error").failure and rec(verdict="fail").outcome == "fail"
    line = json.loads(rec().model_dump_json())
    assert not {"correct", "faster", "failure", "outcome", "errored"} & set(line)
