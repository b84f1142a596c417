"""`perfagent compare` across the machine's conditions: two figures measured under different conditions
(a busy machine, clocks apart) are never called faster or slower, nor is a change of a task's Opt
decision, and the table says why; under like conditions the same figures are called as before."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from agent.checks.conditions import Conditions
from agent.review.compare import compare_results, render_compare
from agent.review.load import load_results
from helpers import Job, make_batch

QUIET = Conditions(wall_s=12.0, cpus=2, busy_share=0.45, ours_share=0.42, others_share=0.03, runnable_per_core=0.1)
BUSY = QUIET.model_copy(update={"busy_share": 1.0, "others_share": 0.7, "runnable_per_core": 2.5})
TASK, MODEL = "cuda-graph-buffers", "rules"


def batch(out: Path, run_id: str, speedup: float, conditions: Conditions | None) -> Path:
    """One job of TASK by MODEL at `speedup` (its reference gains 2x: Opt needs 1.9x), sampled under `conditions`."""
    run_dir = make_batch(out, run_id, jobs=[Job(TASK, MODEL, 0, speedup=speedup)], damage=False)
    report = run_dir / TASK / MODEL / "s0" / "report.json"
    data = json.loads(report.read_text())
    data["evaluation"]["perf"]["conditions"] = conditions.model_dump() if conditions is not None else None
    report.write_text(json.dumps(data))
    return run_dir


def compared(tmp_path: Path, cond_a: Conditions | None, cond_b: Conditions | None):
    a = load_results(batch(tmp_path, "batch-a", 1.5, cond_a))
    b = load_results(batch(tmp_path, "batch-b", 2.5, cond_b))
    (row,) = compare_results(a, b)
    console = Console(width=400, record=True, file=io.StringIO(), color_system=None)
    render_compare(console, a, b)
    return row, " ".join(console.export_text().split())


def test_like_conditions_call_the_disjoint_intervals_faster_and_the_opt_change(tmp_path):
    row, text = compared(tmp_path, QUIET, QUIET)
    lo_b = row.best_b.interval[0]
    assert lo_b > row.best_a.interval[1]  # disjoint: a difference the evidence supports
    assert (row.speed, row.change, row.speed_why, row.opt_apart) == ("faster", "faster", None, None)
    assert (row.a.opt, row.b.opt) == (False, True)
    assert "no -> yes" in text and "not comparable" not in text.replace("not comparable: measured", "")
    # reports from before conditions were recorded compare as they always did
    row, _ = compared(tmp_path / "old", None, None)
    assert row.change == "faster"


def test_a_busy_machine_on_one_side_makes_the_difference_not_comparable_and_says_why(tmp_path):
    row, text = compared(tmp_path, QUIET, BUSY)
    why = "b: busy machine: other processes used 70% of its CPU, 2.5 other runnable tasks per core"
    assert (row.speed, row.change, row.speed_why) == ("not comparable", "not comparable", why)
    assert row.opt_apart == why  # Opt no -> yes is no difference either
    assert f"not comparable: {why}" in text
    assert f"no -> yes (not comparable: {why})" in text
    assert "0% (0/1) -> 100% (1/1); 1 task's Opt changed under different conditions: not comparable" in text


def test_cpu_clocks_apart_are_different_conditions_too(tmp_path):
    row, _ = compared(tmp_path, QUIET.model_copy(update={"cpu_mhz": 3500.0}),
                      QUIET.model_copy(update={"cpu_mhz": 1800.0}))
    assert row.change == "not comparable" and row.speed_why == "CPU clock 3500 vs 1800 MHz"


def test_the_cli_refuses_the_difference_too(tmp_path, perfagent):
    a, b = batch(tmp_path, "batch-a", 1.5, BUSY), batch(tmp_path, "batch-b", 2.5, QUIET)
    res = perfagent("compare", str(a), str(b))
    flat = " ".join(res.stdout.split())
    assert res.returncode == 0, res.stderr
    assert "not comparable: a: busy machine:" in flat and "1.500x [1.481, 1.529] (busy machine)" in flat
    assert " faster" not in flat.replace("faster / slower", "")


def test_the_html_page_says_busy_machine_beside_the_speedup(tmp_path):
    """The HTML view: the run's speedup cell and its perf row both say the machine was busy."""
    from agent.review.html import render_html

    html = render_html(load_results(batch(tmp_path, "batch-a", 1.5, BUSY)))
    assert "1.500x [1.481, 1.529] (busy machine)" in html
    assert "busy machine: other processes used 70% of its CPU, 2.5 other runnable tasks per core: not comparable" \
        in html
    assert "(busy machine)" not in render_html(load_results(batch(tmp_path / "q", "batch-q", 1.5, QUIET)))


def test_compare_json_says_why_a_change_is_not_comparable(tmp_path, perfagent):
    a, b = batch(tmp_path, "batch-a", 1.5, QUIET), batch(tmp_path, "batch-b", 2.5, BUSY)
    res = perfagent("compare", str(a), str(b), "--json")
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(res.stdout)["tasks"]
    assert row["change"] == row["speed"] == "not comparable"
    assert row["not_comparable"].startswith("b: busy machine: other processes used 70% of its CPU")


@pytest.mark.parametrize("width", [80, 200])
def test_the_compare_tables_break_no_word_at_any_width(tmp_path, width):
    a = load_results(batch(tmp_path, "batch-a", 1.5, QUIET))
    b = load_results(batch(tmp_path, "batch-b", 2.5, BUSY))
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    render_compare(console, a, b)
    words = set(" ".join(console.export_text().split()).split())
    for word in ("cuda-graph-buffers", "rules", "comparable:", "Opt@K"):
        assert word in words, (word, console.export_text())
    assert all(len(line) <= width for line in console.export_text().splitlines())


def with_intervals(run_dir: Path, ratio: float, ci: tuple[float, float], rerun: tuple[float, float] | None) -> Path:
    """The job's figure set to `ratio` (a time: lower is better) with its 95% and rerun intervals."""
    report = run_dir / TASK / MODEL / "s0" / "report.json"
    data = json.loads(report.read_text())
    data["evaluation"]["perf"].update(ratio=ratio, ci_low=ci[0], ci_high=ci[1], rerun_low=rerun and rerun[0],
                                      rerun_high=rerun and rerun[1])
    report.write_text(json.dumps(data))
    return run_dir


def test_two_runs_of_one_patch_are_not_called_apart_within_where_a_rerun_lands(tmp_path):
    """Disjoint 95% intervals, each figure within where a rerun of the other is expected: what a second run of
    the same patch looks like (each interval leaves out the other run's noise), so no clear difference; figures
    each outside the other's rerun interval are a difference, even where the 95% intervals touch."""
    def row(a: tuple, b: tuple, name: str):
        run_a = with_intervals(batch(tmp_path / name, "batch-a", 1.5, QUIET), *a)
        run_b = with_intervals(batch(tmp_path / name, "batch-b", 1.5, QUIET), *b)
        (r,) = compare_results(load_results(run_a), load_results(run_b))
        return r

    same = row((0.5, (0.49, 0.51), (0.47, 0.53)), (0.52, (0.515, 0.525), (0.505, 0.535)), "same")
    assert same.best_b.interval[1] < same.best_a.interval[0]  # disjoint: the rule before would say "slower"
    assert same.speed == "no clear difference"
    apart = row((0.5, (0.48, 0.53), (0.47, 0.535)), (0.56, (0.525, 0.58), (0.54, 0.59)), "apart")
    assert apart.best_b.interval[1] > apart.best_a.interval[0]  # the 95% intervals overlap
    assert apart.speed == "slower"
    old = row((0.5, (0.49, 0.51), None), (0.52, (0.515, 0.525), None), "old")  # reports from before it
    assert old.speed == "slower"
