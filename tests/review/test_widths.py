"""`perfagent review` (and `check`'s table) at 80 and 200 columns and in a pipe, read as the captured text.

One run of the quick start (rules policy on cuda-graph-buffers: a 2-file diff, a 21 KB summary of
decisions and lint findings; tests/data/review/quickstart, as the run left them) was 556 lines at 80
columns: the diff in a box whose wrapped lines lost their + and -, then every lint finding. By default it
now fits a screen, and no word of any table is broken at either width.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from agent.checks.render import environment_rows, evaluation_rows, evaluation_table
from agent.results.report import Report
from agent.results.tables import sections
from agent.review.load import load_results
from agent.review.rows import check_rows, run_outcome
from agent.review.terminal import render_review
from helpers import make_batch

DATA = Path(__file__).resolve().parents[1] / "data" / "review" / "quickstart"
RUN_ID = "20261128-023531-4ef370"
BOX = "│┃━─┏┓┗┛┡┩└┘┌┐├┤┬┴┼╇╈╋┳┻╭╮╯╰"
SCREEN = 60
LONG = 24  # a path or test id longer than this may be split at its commas or slashes in a narrow column
# the columns every width shows (the others are left out first, and named, when the screen is narrow)
ALWAYS = {"results per model": ("model", "correct", "faster", "Opt@K"), "spend per model": ("model", "cost"),
          "per task": ("task", "model", "outcomes", "best speedup")}


def quickstart_run(out: Path) -> Path:
    """The quick start's run folder, as `perfagent run` leaves it (report.json written by the report writer)."""
    report = Report.parse(json.loads((DATA / "report.json").read_text()))
    report.write(out / "results" / RUN_ID / "cuda-graph-buffers" / "report.json")
    patches = out / "patches" / RUN_ID / "cuda-graph-buffers"
    patches.mkdir(parents=True)
    (patches / "model_patch.diff").write_text((DATA / "model_patch.diff").read_text())
    return out / "results" / RUN_ID


def drawn(width: int, fn=render_review, *args, **kw) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    fn(console, *args, **kw)
    return console.export_text()


def tokens(text: str) -> set[str]:
    """The text's words, each also without a trailing ; or , (rows joined into one on a screen gain them)."""
    words = set(re.sub(f"[{BOX}]", " ", text).split())
    return words | {w.rstrip(";,") for w in words}


def broken(text: str, words: set[str]) -> list[str]:
    """The words of `words` that the text does not hold whole (a folded word shows as two pieces)."""
    return sorted(words - tokens(text))


def check_words(run) -> set[str]:
    """The words of one run's check rows that a screen must show whole: not the rows that only say "ok" (one
    row names them all) nor the diff's (the diff summary says it), nor a token longer than LONG."""
    words: set[str] = set()
    for r in check_rows(run):
        if r.name != "diff" and r.text not in ("ok", "untouched", "none"):
            words |= {w for w in r.text.split() if len(w) <= LONG}
            words |= set(r.name.split()) if r.name != "environment" else set()
    return words


@pytest.mark.parametrize("width", [80, 200])
def test_one_run_fits_a_screen_and_breaks_no_word(tmp_path, width):
    res = load_results(quickstart_run(tmp_path))
    run = res.runs[0]
    text = drawn(width, render_review, res)
    lines = text.splitlines()
    assert len(lines) <= SCREEN, f"{len(lines)} lines at {width} columns:\n{text}"
    assert max(len(line.rstrip()) for line in lines) <= width
    assert run_outcome(run) == "pass" and "pass" in tokens(lines[1])  # the verdict, whole, at the top
    assert not broken(text, check_words(run)), text
    # the diff as git diff --stat shows it, its file whole; the rest a flag away
    path = str(tmp_path / "patches" / RUN_ID / "cuda-graph-buffers" / "model_patch.diff")
    assert "diff:" + path in re.sub(r"\s", "", text)  # not cut, however long (folded, if wider than the screen)
    assert " miniattn/graph_runner.py           |  2 +-" in lines
    assert "2 files changed, 14 insertions(+), 14 deletions(-)  (--diff prints it)" in text
    assert "torch.empty((len(reqs)" not in text
    assert "rules policy: kept 14 rewrite(s), faster in a quick check" in text
    assert "--findings prints" in text and "[per-step-alloc]" not in text


def test_the_whole_diff_keeps_each_line_whole_with_its_sign(tmp_path):
    """--diff: each line of the diff is a line of the output, however long, + or - first."""
    res = load_results(quickstart_run(tmp_path))
    text = drawn(80, render_review, res, diff=True)
    out = text.splitlines()
    diff = (DATA / "model_patch.diff").read_text().splitlines()
    long = [d for d in diff if len(d) > 80 and d[:1] in "+-"]
    assert long, "the fixture has lines wider than the screen"
    missing = [d for d in diff if d.rstrip() not in {o.rstrip() for o in out}]
    assert not missing, missing[:3]


def test_findings_prints_the_whole_summary(tmp_path):
    res = load_results(quickstart_run(tmp_path))
    text = drawn(80, render_review, res, findings=True)
    assert "[per-step-alloc]" in text and "--findings prints" not in text
    assert "findings without an automatic rewrite" in text


@pytest.mark.parametrize("width", [80, 200])
def test_a_batch_review_breaks_no_word_in_any_table(tmp_path, width):
    res = load_results(make_batch(tmp_path))
    text = drawn(width, render_review, res)
    for title, cols, rows in sections(res.summary):
        shown = next(keep for name, keep in ALWAYS.items() if title.endswith(name) or name in title)
        words = {w for c, col in enumerate(cols) if col in shown for row in rows for w in row[c].split()}
        words |= {w for col in shown for w in col.split()}
        assert not broken(text, words), (broken(text, words), text)
    verdicts = {w for r in res.runs for w in run_outcome(r).split()}
    assert {"pass", "fail", "unverified", "corrupt", "missing", "report"} <= verdicts
    assert not broken(text, verdicts | {r.key for r in res.runs}), text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    assert ("left out at 80 columns" in text) == (width == 80)  # narrow: fewer columns, named


def test_check_table_breaks_no_word_at_80_columns(tmp_path):
    ev = Report.parse(json.loads((DATA / "report.json").read_text())).evaluation
    assert ev is not None
    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    console.print(evaluation_table(ev))
    text = console.export_text()
    words = {w for r in evaluation_rows(ev) + environment_rows(ev) for w in f"{r.name} {r.text}".split()
             if len(w) <= LONG}
    assert not broken(text, words), text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80


def review_cli(*args: str, cwd: Path, columns: int) -> subprocess.CompletedProcess:
    """`perfagent review ARGS` with stdout a pipe and COLUMNS set, as a script or a pager gets it."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "COLUMNS": str(columns), "HOME": str(cwd),
           "PERFAGENT_LOCK_DIR": os.environ["PERFAGENT_LOCK_DIR"],
           **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}  # the agent this test imported
    return subprocess.run([sys.executable, "-m", "agent.cli", "review", *args], cwd=cwd, capture_output=True,
                          text=True, env=env, check=False, timeout=120)


def test_review_in_a_pipe_at_80_columns(tmp_path):
    run_dir = quickstart_run(tmp_path)
    done = review_cli(str(run_dir), cwd=tmp_path, columns=80)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) <= SCREEN and max(len(line.rstrip()) for line in lines) <= 80, done.stdout
    assert "\x1b[" not in done.stdout  # a pipe gets no colour codes
    assert f"diff: patches/{RUN_ID}/cuda-graph-buffers/model_patch.diff" in lines  # relative: the folder it ran in
    whole = review_cli(str(run_dir), "--diff", cwd=tmp_path, columns=80)
    assert whole.returncode == 0, whole.stderr
    out = set(whole.stdout.splitlines())
    assert all(d in out for d in (DATA / "model_patch.diff").read_text().splitlines() if d.strip())
