"""Red team, what perfagent writes of a results folder made elsewhere: a spreadsheet, a terminal, a page.

A results folder someone else made (its ledger, its report.json files) is untrusted text: a contestant
named `=HYPERLINK(...)`, a task id and a note carrying terminal escape sequences (an OSC 8 hyperlink, a
clear-screen), rich markup in a name, an agent's claim and final summary with escapes of their own.
Played through the CLI (`export --format csv`, `review`, `compare`, `report --html`) on a folder built
by the results writers (tests/helpers.py) and then edited as an attacker would.

| attack                                                              | must hold                            |
|---------------------------------------------------------------------|--------------------------------------|
| contestants `=HYPERLINK(...)`, `@SUM(A1)`, `-1+1`; `export --format  | no cell starts with = + - @ tab CR;  |
|   csv`                                                               |   the names kept after an apostrophe;|
|                                                                     |   numbers stay numbers               |
| task id, batch note, claim, session note, final summary with        | no ESC (nor what followed it) in the |
|   `ESC]8;;http://evil BEL` and `ESC[2J`; `review`, `compare`        |   output; exit 0                     |
| a contestant `[link=http://evil]x[/link] [/bad]`; `review`, `compare`| shown as written; exit 0 (no markup  |
|                                                                     |   error)                             |
| a contestant `<img src=x onerror=alert(1)>`; `report --html`         | escaped in the page                  |
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from agent.results.report import AgentRound, AgentRun
from helpers import Job, make_batch

FORMULA = '=HYPERLINK("http://x","y")'
MARKUP = "[link=http://evil]x[/link] [/bad]"
HTML = "<img src=x onerror=alert(1)>"
OSC8 = "\x1b]8;;http://evil\x07"
CLEAR = "\x1b[2J"
TASK = f"cuda-graph-buffers{OSC8}click here{OSC8[:-1]}\x1b\\{CLEAR}"
NOTE = f"retried {CLEAR}{OSC8}see http://evil\x1b]8;;\x07 \x9b31mred"
CONTESTANTS = (FORMULA, "@SUM(A1)", "-1+1", MARKUP, HTML)


def foreign_folder(tmp_path: Path) -> Path:
    """A batch folder as the results writers leave it, then edited: its ledger's task ids and notes, and
    one report's agent, claims and summary, carry escape sequences."""
    run_dir = make_batch(tmp_path, "elsewhere", jobs=[Job("cuda-graph-buffers", m, 0, speedup=1.5 + i / 10)
                                                      for i, m in enumerate(CONTESTANTS)], damage=False)
    ledger = run_dir / "batch.jsonl"
    lines = [json.loads(ln) for ln in ledger.read_text().splitlines()]
    for rec in lines:
        rec.update(task=TASK, reason=NOTE)
    ledger.write_text("".join(json.dumps(r) + "\n" for r in lines))
    report_file = run_dir / lines[0]["key"] / "report.json"
    report = json.loads(report_file.read_text())
    claim = f"All done {OSC8}trust me{CLEAR}\n[red]no risk[/] of uninitialised memory"
    report["result"] = f"## Done {CLEAR}\n\nSee [the proof](http://evil) {OSC8}x"
    report["agent"] = AgentRun(
        name=f"claude-code{CLEAR}", model=f"sonnet{OSC8}", claim=claim, refused=[f"CONNECT evil{CLEAR}:443"],
        rounds=[AgentRound(round=1, exit_code=0, duration_ms=1000, claim=claim, verdict="pass",
                           evidence="verdict: pass", note=f"budget {OSC8}", claim_notes=[f"commit {CLEAR}x"])],
    ).model_dump(mode="json")
    report_file.write_text(json.dumps(report))
    return run_dir


def assert_inert(text: str) -> None:
    """Nothing of an escape sequence reached the output: no ESC, no C1 CSI, and not what followed them."""
    assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text
    assert "8;;http://evil" not in text and "[2J" not in text and "31mred" not in text


def test_csv_export_of_a_foreign_ledger_holds_no_live_formula(tmp_path, perfagent):
    """Attack: contestants named as formulas, a task id and a note with escapes; `export --format csv`."""
    run_dir = foreign_folder(tmp_path)
    res = perfagent("export", str(run_dir), "--format", "csv")
    assert res.returncode == 0, res.stderr
    assert_inert(res.stdout)
    rows = list(csv.reader(io.StringIO(res.stdout)))
    header, body = rows[0], rows[1:]
    assert len(body) == len(CONTESTANTS)
    for row in body:
        for cell in row:
            assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), f"a live formula cell: {cell!r}"
    contestants = {dict(zip(header, row))["contestant"] for row in body}
    assert contestants == {"'" + FORMULA, "'@SUM(A1)", "'-1+1", MARKUP, HTML}  # kept, behind an apostrophe
    for row in body:
        cells = dict(zip(header, row))
        assert cells["task"] == "cuda-graph-buffersclick here"  # the sequences gone whole, the text kept
        assert float(cells["speedup"]) > 1 and int(cells["sample"]) == 0  # numbers are still numbers


def test_review_and_compare_of_a_foreign_folder_drive_no_terminal(tmp_path, perfagent):
    """Attack: escapes in a task id, a note, claims and a final summary; rich markup in a name; `review`
    (the list, and one run in detail) and `compare`."""
    run_dir = foreign_folder(tmp_path)
    listing = perfagent("review", str(run_dir))
    assert listing.returncode == 0, listing.stderr
    assert_inert(listing.stdout + listing.stderr)
    assert FORMULA in listing.stdout and MARKUP in listing.stdout  # shown as written, not as markup

    key = json.loads((run_dir / "batch.jsonl").read_text().splitlines()[0])["key"]
    detail = perfagent("review", str(run_dir), "--task", key)
    assert detail.returncode == 0, detail.stderr
    assert_inert(detail.stdout + detail.stderr)
    assert "claims vs evidence" in detail.stdout and "trust me" in detail.stdout
    assert "[red]no risk[/]" in detail.stdout  # the claim's markup is text
    assert "http://evil" in detail.stdout  # the summary's link shows where it goes, not a hidden hyperlink

    missing = perfagent("review", str(run_dir), "--task", "nothing-such")  # the error names the tasks
    assert missing.returncode == 2 and "cuda-graph-buffersclick here" in missing.stderr
    assert_inert(missing.stdout + missing.stderr)

    both = perfagent("compare", str(run_dir), str(run_dir))
    assert both.returncode == 0, both.stderr
    assert_inert(both.stdout + both.stderr)
    assert MARKUP in both.stdout


def test_html_report_of_a_foreign_folder_stays_escaped(tmp_path, perfagent):
    """Attack: a contestant named as an HTML element; `report --html`."""
    run_dir = foreign_folder(tmp_path)
    page = tmp_path / "page.html"
    res = perfagent("report", str(run_dir), "--html", str(page))
    assert res.returncode == 0, res.stderr
    html = page.read_text()
    assert HTML not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
