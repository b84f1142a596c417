"""Failures and empty submissions told as they are, in every table: a run that hit max turns is a
failure (never "pass", whatever its last passing patch graded), a run that submitted nothing is "no
change", and `compare` calls a speed change only when the two runs' intervals say so.

The batches are the shared fixture's (`helpers.make_batch`: the report writer, the ledger, the
summary writer), with a report rewritten the way the runner leaves a run that ended in an error.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from agent.cli import main
from agent.results.load import summarize_run
from agent.results.report import read_report
from agent.results.tables import write_summary
from agent.review.compare import compare_results, render_compare
from agent.review.load import load_results
from agent.review.rows import run_outcome, sort_runs
from agent.review.terminal import render_review
from helpers import Job, make_batch

GOOD, MAXED, REVERTED = "good/rules/s0", "maxturns/rules/s0", "reverted/rules/s0"


def end_in_error(run_dir: Path, key: str, subtype: str = "error_max_turns",
                 result: str = "stopped after 3 turns without a passing submit") -> None:
    path = run_dir / key / "report.json"
    report = read_report(path)
    report.model_copy(update={"subtype": subtype, "is_error": True, "result": result}).write(path)


def scripted_batch(out: Path, run_id: str = "scripted") -> Path:
    """good: passes, 1.6x; maxturns: its last passing patch grades pass at 1.6x, but the run hit max turns;
    reverted: the agent reverted its edits and submitted nothing (empty model_patch.diff, verdict no-change)."""
    run_dir = make_batch(out, run_id, damage=False, jobs=[
        Job("good", "rules", 0, speedup=1.6), Job("maxturns", "rules", 0, speedup=1.6),
        Job("reverted", "rules", 0, verdict="no-change", speedup=None)])
    end_in_error(run_dir, MAXED)
    (out / "patches" / run_id / REVERTED / "model_patch.diff").write_text("")
    write_summary(run_dir, summarize_run(run_dir))
    return run_dir


def text_of(console_fn, *args, **kw) -> str:
    console = Console(width=250, record=True, file=io.StringIO(), color_system=None)
    console_fn(console, *args, **kw)
    return console.export_text()


def line_of(text: str, key: str) -> str:
    return next(line for line in text.splitlines() if key in line)


def test_an_errored_run_is_a_failure_and_an_empty_one_no_change_in_summary(tmp_path):
    run_dir = scripted_batch(tmp_path)
    s = json.loads((run_dir / "summary.json").read_text())
    (m,) = s["models"]
    assert (m["jobs"], m["correct"], m["faster"], m["no_change"], m["errored"]) == (3, 1, 1, 1, 1)
    assert m["errors"] == {"error_max_turns": 1} and s["failed"] == 1
    assert m["fraction_of_reference"] == 0.5 and m["fraction_jobs"] == 1  # the errored job's 0.5 is not counted
    rows = {t["task"]: t for t in s["tasks"]}
    assert rows["maxturns"]["correct"] == 0 and rows["maxturns"]["best_speedup"] is None
    assert rows["maxturns"]["outcomes"] == {"error_max_turns": 1} and rows["reverted"]["outcomes"] == {"no change": 1}
    md = (run_dir / "summary.md").read_text()
    assert "| rules | 3 | 1 (33%) | 1 (33%) | 1 | 1 (1 error_max_turns) |" in md
    assert "50% (n=1)" in md
    assert "| maxturns | rules | 1 | 1 error_max_turns | 0 | 0 |" in md
    assert "| reverted | rules | 1 | 1 no change | 0 | 0 |" in md


def test_review_never_shows_an_errored_run_as_pass(tmp_path):
    res = load_results(scripted_batch(tmp_path))
    outcomes = {r.key: run_outcome(r) for r in res.runs}
    assert outcomes == {GOOD: "pass", MAXED: "error_max_turns", REVERTED: "no change"}
    text = text_of(render_review, res)
    assert "error_max_turns" in line_of(text, MAXED) and "pass" not in line_of(text, MAXED)
    assert "no change" in line_of(text, REVERTED)
    assert "1 (1 error_max_turns)" in text  # the batch's own table, as summary.md has it
    detail = text_of(render_review, res, task="maxturns")
    assert "run ended" in detail and "error_max_turns: stopped after 3 turns" in detail
    assert "pass" not in detail.split("\n", 3)[1]  # the head line names the failure, not the verdict
    by_outcome = [run_outcome(r) for r in sort_runs(res.runs, "verdict")]
    assert by_outcome == ["pass", "error_max_turns", "no change"]


def test_cli_review_of_the_scripted_batch(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["review", str(scripted_batch(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "error_max_turns" in line_of(out, MAXED) and "✓" not in out and "pass" not in line_of(out, MAXED)


# -- compare ---------------------------------------------------------------------------------------------------
def two_runs(tmp_path: Path, a: list[Job], b: list[Job]):
    return (load_results(make_batch(tmp_path, "run-a", jobs=a, damage=False)),
            load_results(make_batch(tmp_path, "run-b", jobs=b, damage=False)))


def test_compare_calls_a_change_only_when_the_intervals_part(tmp_path):
    a, b = two_runs(tmp_path, [Job("same", "rules", 0, speedup=1.50), Job("sped", "rules", 0, speedup=1.2)],
                    [Job("same", "rules", 0, speedup=1.52), Job("sped", "rules", 0, speedup=2.0)])
    rows = {r.task: r for r in compare_results(a, b)}
    same, sped = rows["same"], rows["sped"]
    (ia, ib) = same.best_a.interval, same.best_b.interval
    assert ia[0] <= ib[1] and ib[0] <= ia[1]  # the intervals overlap...
    assert same.best_b.speedup > same.best_a.speedup and same.change == "no clear difference"  # ...so no "faster"
    assert sped.best_b.interval[0] > sped.best_a.interval[1] and sped.change == "faster"
    text = text_of(render_compare, a, b)
    assert "no clear difference" in line_of(text, "same ") and "faster" not in line_of(text, "same ")
    lo, hi = same.best_a.interval
    assert f"{same.best_a.speedup:.3f}x [{lo:.3f}, {hi:.3f}]" in line_of(text, "same ")  # the interval is shown
    # the other way round is slower, and only then
    assert {r.task: r.change for r in compare_results(b, a)} == {"same": "no clear difference", "sped": "slower"}


def test_compare_shows_how_each_side_ended(tmp_path):
    a, b = two_runs(tmp_path, [Job("t", "rules", 0, speedup=1.6)], [Job("t", "rules", 0, speedup=1.6)])
    end_in_error(b.run_dir, "t/rules/s0")
    write_summary(b.run_dir, summarize_run(b.run_dir))
    b = load_results(b.run_dir)
    (row,) = compare_results(a, b)
    assert (row.subtypes_a, row.subtypes_b) == (["success"], ["error_max_turns"])
    assert row.outcomes_b == ["error_max_turns"] and row.change == "fewer correct"
    line = line_of(text_of(render_compare, a, b), "│ t ")
    assert "pass -> error_max_turns" in line and "success -> error_max_turns" in line


def test_html_run_cards_show_what_each_run_came_to(tmp_path):
    """The HTML's run list and cards badge an errored run with its subtype and an empty one "no change"."""
    import re

    from agent.review.html import render_html

    html = render_html(load_results(scripted_batch(tmp_path)))
    badges = dict(re.findall(r'<article class="run" id="[^"]+" data-key="([^"]+)">\s*<h3><code>[^<]*</code> '
                             r'<span class="badge [a-z]+">([^<]+)</span>', html))
    assert badges == {GOOD: "pass", MAXED: "error_max_turns", REVERTED: "no change"}


def test_a_run_that_hit_an_error_limit_has_one_answer_for_correct(tmp_path):
    """Its last graded patch passed, but the run hit max turns. Two definitions of "correct" once
    disagreed on it (the ledger record's said yes, the summary's no); now the record, the summary,
    the review's outcome and compare's best speedup all say: not correct, a failure."""
    res = load_results(scripted_batch(tmp_path))
    maxed = next(r for r in res.runs if r.key == MAXED)
    assert (maxed.record.verdict, maxed.record.subtype) == ("pass", "error_max_turns")
    assert not maxed.record.correct and not maxed.record.faster and maxed.record.failure
    assert run_outcome(maxed) == maxed.record.outcome == "error_max_turns"
    (m,) = res.summary.models
    assert [r.key for r in res.runs if r.record and r.record.correct] == [GOOD] and m.correct == 1
    assert {t.task: t.correct for t in res.summary.tasks}["maxturns"] == 0
    assert {r.task: r for r in compare_results(res, res)}["maxturns"].best_a is None
