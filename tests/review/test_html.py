"""`perfagent report --html`: one offline HTML file; checked as markup, then in headless Chromium.

The browser test needs Debian's chromium + chromium-driver and selenium (CI installs them);
without them it is skipped with the reason. Its screenshots stay in pytest's tmp dir and
their paths are printed (`pytest -s`), to be looked at.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from agent.cli import main
from agent.env.candidate import LeftOut
from agent.results.load import summarize_run
from agent.results.summary import BatchSummary
from agent.results.tables import write_summary
from agent.review.html import render_html, summary_sections, write_html
from agent.review.load import SHOWN_BYTES, load_results
from browser import chromium
from helpers import DIFF, SONNET, Job, make_batch, write_job

AGENT = "claude-code:claude-sonnet-4-5"
HOSTILE = "All good <script>alert(1)</script> & <b>safe</b>\x1b[2J\nNo risk of uninitialized memory access."



class Page(HTMLParser):
    """Just enough of the DOM for the checks: tables' cell text by id, resource URLs, script tags."""

    def __init__(self, html: str):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.urls: list[str] = []
        self.scripts = 0
        self.articles: list[str] = []
        self._table: str | None = None
        self._cell: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.urls += [v for k, v in attrs if k in ("src", "href", "xlink:href") and v]
        self.scripts += tag == "script"
        if tag == "table" and a.get("id"):
            self._table = a["id"]
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []
        elif tag == "article":
            self.articles.append(a.get("data-key", ""))

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._table and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture(scope="module")
def batch(tmp_path_factory) -> tuple[Path, Path, str]:
    out = tmp_path_factory.mktemp("batch")
    run_dir = make_batch(out)
    html = out / "report.html"
    write_html(load_results(run_dir), html)
    return run_dir, html, html.read_text(encoding="utf-8")


def test_tables_agree_with_summary_json(batch):
    run_dir, _, html = batch
    page = Page(html)
    summary = BatchSummary.model_validate_json((run_dir / "summary.json").read_text())
    sections = summary_sections(summary)
    assert len(sections) >= 2 and any("task" in sec.columns for sec in sections)
    for sec in sections:
        assert page.tables[sec.id][0] == list(sec.columns)
        assert page.tables[sec.id][1:] == [list(r) for r in sec.rows]
    assert {row[0] for row in page.tables["summary-1"][1:]} == {SONNET, "rules"}


def test_every_run_is_on_the_page_with_problems_flagged(batch):
    run_dir, _, html = batch
    page = Page(html)
    keys = sorted(r.key for r in load_results(run_dir).runs)
    assert sorted(page.articles) == keys
    assert sorted(row[0] for row in page.tables["run-list"][1:]) == keys
    verdicts = {row[0]: row[4] for row in page.tables["run-list"][1:]}
    assert verdicts["metadata-alloc/anthropic-claude-sonnet-4-5/s1"] == "corrupt report"
    assert verdicts["metadata-alloc/rules/s1"] == "missing report"
    assert "could not be read" in html and "report.json missing" in html and "JSONDecodeError" in html
    summary = json.loads((run_dir / "summary.json").read_text())
    for job in summary["jobs"]:  # per-run numbers: the summary's
        row = next(r for r in page.tables["run-list"][1:] if r[0] == job["key"])
        if job["speedup"] is not None:
            assert row[5].startswith(f"{job['speedup']:.3f}x")
        assert row[7] == str(job["num_turns"])


def test_self_contained_no_script_highlighted_and_escaped(tmp_path):
    job = Job("t", SONNET, 0)
    write_job(tmp_path, "r", job)
    patch = tmp_path / "patches" / "r" / job.key / "model_patch.diff"
    patch.write_text(DIFF + "+        x = '<script>alert(1)</script>'\n")
    html = render_html(load_results(tmp_path / "results" / "r"))
    page = Page(html)
    assert all(u.startswith("#") for u in page.urls), page.urls  # nothing to fetch
    assert page.scripts == 0 and "<script>alert" not in html and "&lt;script&gt;" in html
    charts = html.split('id="charts"', 1)[1].split('id="runs"', 1)[0]  # the run's own charts are in its card
    assert charts.count("<svg") == 3 and 'class="gd"' in html and 'class="gi"' in html  # charts; - and + lines


def test_a_huge_diff_is_shown_cut_with_its_size_and_the_left_out_files_listed(tmp_path):
    """A 3 MB model_patch.diff (what a run emitted before logs were left out): the page holds a bounded start of
    it, says its size and that it was cut; the files report.json says were left out are listed."""
    job = Job("t", SONNET, 0)
    report = write_job(tmp_path, "r", job)
    patch = tmp_path / "patches" / "r" / job.key / "model_patch.diff"
    lines = "".join(f"+log line {i:07d} of an agent's run, written into the tree\n" for i in range(60_000))
    header = "diff --git a/run.log b/run.log\n--- /dev/null\n+++ b/run.log\n@@ -0,0 +1,60000 @@\n"
    patch.write_text(DIFF + header + lines)
    size = patch.stat().st_size
    assert size > 3_000_000
    left = [LeftOut(path="logs/run.log", size=2_000_000, reason="new file over 1 MB"),
            LeftOut(path="model_patch.diff", size=0, reason="named like perfagent's output")]
    report.model_copy(update={"left_out": left}).write(tmp_path / "results" / "r" / job.key / "report.json")

    run = load_results(tmp_path / "results" / "r").runs[0]
    shown = run.patches[0]
    assert shown.size == size and shown.cut and len(shown.text) <= SHOWN_BYTES and shown.text.endswith("\n")
    html = render_html(load_results(tmp_path / "results" / "r"))
    assert len(html.encode()) < 1_000_000  # not the 3 MB diff, highlighted
    where = f"../../patches/r/{job.key}/model_patch.diff"  # relative to the run folder: the page travels
    assert f"cut: the first {shown.shown:,} of {size:,} bytes are shown; the whole diff is {where}" in html
    assert str(tmp_path) not in html  # no path of this machine's
    assert "log line 0000001" in html and "log line 0059999" not in html
    rows = [r for r in Page(html).tables["run-1-checks"] if r[0] == "left out"]
    assert rows == [["left out", "logs/run.log (2,000,000 bytes): new file over 1 MB"],
                    ["left out", "model_patch.diff (0 bytes): named like perfagent's output"]]


def test_a_rejected_change_is_labelled_not_emitted(batch):
    _, _, html = batch
    card = html.split('data-key="rope-cache/', 1)[1].split("</article>", 1)[0]
    assert card.count("<details") == card.count('<details class="rejected">') + card.count('<details class="final">') \
        + card.count('<details class="cost">')  # the emitted patch is empty: no diff to open, only the rejected one
    assert "empty diff: no change was emitted" in card and "rejected change (not emitted): " in card
    assert "rejected.diff" in card and 'class="gi"' in card  # the failing state, highlighted


@pytest.fixture
def agent_batch(tmp_path, write_agent_job) -> tuple[Path, str]:
    """Our loop against Claude Code on one task; Claude Code's claim is hostile markup, and wrong."""
    job = Job("cuda-graph-buffers", AGENT, 0, verdict="fail", speedup=None)
    run_dir = make_batch(tmp_path, damage=False, jobs=[Job("cuda-graph-buffers", SONNET, 0), job])
    write_agent_job(tmp_path, "batch-a", job, claim=HOSTILE)
    write_summary(run_dir, summarize_run(run_dir))
    html = tmp_path / "agents.html"
    write_html(load_results(run_dir), html)
    return html, html.read_text(encoding="utf-8")


def test_claims_beside_evidence_per_run_escaped(agent_batch, tmp_path):
    _, html = agent_batch
    page = Page(html)
    assert page.scripts == 0 and "<script>alert" not in html and "<b>safe" not in html and "\x1b" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;b&gt;safe&lt;/b&gt;" in html  # shown, as text
    models = {row[0]: row[2] for row in page.tables["run-list"][1:]}
    assert models == {"cuda-graph-buffers/anthropic-claude-sonnet-4-5/s0": SONNET,
                      "cuda-graph-buffers/claude-code-claude-sonnet-4-5/s0": "claude-code · claude-sonnet-4-5"}
    assert "run-1-claims" not in page.tables  # our own loop makes no claims to check
    ((session, claimed, measured),) = page.tables["run-2-claims"]
    assert session.startswith("round 1 · exit 0")
    assert claimed == ("claimed: All good <script>alert(1)</script> & <b>safe</b>\n"  # the escape sequence gone whole
                       "No risk of uninitialized memory access.")
    assert measured.startswith("measured: fail — tests fail with uninitialised memory poisoned")
    agent = dict(page.tables["run-2-agent"])
    assert agent["agent"] == "claude-code 2.1.330 · model claude-sonnet-4-5"
    assert "its own figure $0.0500 vs relay-metered $" in agent["cost"] and "claude-code reported" in agent["cost"]
    assert agent["refused network"] == "CONNECT example.com:443"
    # paths relative to the run folder, which the page names as the user does: the page reads the same elsewhere
    assert agent["kept final_diff"] == "cuda-graph-buffers/claude-code-claude-sonnet-4-5/s0/agent/final.diff"
    assert "from <code>results/batch-a</code>" in html and str(tmp_path) not in html


def test_contestants_are_labelled_in_the_charts(agent_batch):
    _, html = agent_batch
    charts = html.split('id="charts"', 1)[1].split('id="runs"', 1)[0]
    assert "claude-code · claude-sonnet-4-5" in charts and SONNET in charts


def test_cli_report(tmp_path, capsys):
    run_dir = make_batch(tmp_path, damage=False, jobs=[Job("t", "rules", 0)])
    out = tmp_path / "r.html"
    assert main(["report", str(run_dir), "--html", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out and out.read_text().startswith("<!doctype html>")
    assert main(["report", str(tmp_path / "nowhere"), "--html", str(out)]) == 2


# -- the browser (browser.py's headless Chromium) ---------------------------------------------------
@pytest.mark.slow
def test_report_in_headless_chromium(batch, tmp_path):
    run_dir, html_path, _ = batch
    from selenium.webdriver.common.by import By

    driver = chromium()
    try:
        driver.get(html_path.as_uri())
        assert "perfagent report" in driver.title
        # offline: the page asked for nothing beyond itself
        assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0
        models = driver.find_elements(By.CSS_SELECTOR, "#summary-1 tbody tr")
        runs = driver.find_elements(By.CSS_SELECTOR, "#run-list tbody tr")
        assert len(models) == 2 and len(runs) == len(load_results(run_dir).runs)
        assert all(e.is_displayed() for e in models + runs)
        charts = driver.find_elements(By.CSS_SELECTOR, "#charts svg")
        assert len(charts) == 3 and all(c.size["width"] > 300 and c.size["height"] > 150 for c in charts)
        top, chart_shot, run_shot, rejected_shot = (tmp_path / f"report-{n}.png"
                                                    for n in ("top", "charts", "run", "rejected"))
        driver.save_screenshot(str(top))
        driver.execute_script("document.getElementById('charts').scrollIntoView()")
        driver.save_screenshot(str(chart_shot))

        card = driver.find_element(By.CSS_SELECTOR, 'article[data-key$="claude-sonnet-4-5/s1"]')
        diff = card.find_element(By.CSS_SELECTOR, "details.diff")
        body = diff.find_element(By.CSS_SELECTOR, ".hl")
        assert diff.get_attribute("open") is None and not body.is_displayed()
        summary = diff.find_element(By.TAG_NAME, "summary")
        driver.execute_script("arguments[0].scrollIntoView()", card)
        summary.click()
        assert diff.get_attribute("open") is not None and body.is_displayed()
        assert "torch.empty(max_bs" in body.text
        added = body.find_element(By.CSS_SELECTOR, ".gi")  # pygments' inserted-line class, styled
        assert (added.value_of_css_property("color")
                != body.find_element(By.CSS_SELECTOR, ".gd").value_of_css_property("color"))
        checks = card.find_element(By.CSS_SELECTOR, "table.checks").text
        assert "poison run" in checks and "FAIL" in checks and "coverage of changed lines" in checks
        driver.execute_script("arguments[0].scrollIntoView()", card)
        driver.save_screenshot(str(run_shot))
        problems = driver.find_element(By.ID, "problems")
        assert problems.is_displayed() and "report.json missing" in problems.text

        card = driver.find_element(By.CSS_SELECTOR, 'article[data-key^="rope-cache/"]')
        rejected = card.find_element(By.CSS_SELECTOR, "details.rejected")
        assert not card.find_elements(By.CSS_SELECTOR, "details.diff")  # nothing emitted
        title = rejected.find_element(By.TAG_NAME, "summary")
        assert title.text.startswith("rejected change (not emitted): ") and title.text.endswith("rejected.diff")
        assert title.value_of_css_property("color") != card.find_element(By.CSS_SELECTOR, "p.meta") \
            .value_of_css_property("color")  # set apart from the emitted diff's plain summary
        driver.execute_script("arguments[0].scrollIntoView()", card)
        title.click()
        assert "torch.empty(max_bs" in rejected.find_element(By.CSS_SELECTOR, ".hl").text
        driver.save_screenshot(str(rejected_shot))
    finally:
        driver.quit()
    assert all(p.stat().st_size > 10_000 for p in (top, chart_shot, run_shot, rejected_shot))
    print(f"\nscreenshots: {top} {chart_shot} {run_shot} {rejected_shot}")


def test_claims_in_headless_chromium(agent_batch, tmp_path):
    html_path, _ = agent_batch
    from selenium.webdriver.common.by import By

    driver = chromium()
    shot = tmp_path / "report-claims.png"
    try:
        driver.get(html_path.as_uri())
        card = driver.find_element(By.CSS_SELECTOR, 'article[data-key^="cuda-graph-buffers/claude-code"]')
        block = card.find_element(By.CSS_SELECTOR, "section.claims")
        driver.execute_script("arguments[0].scrollIntoView()", block)
        assert block.is_displayed() and "claims vs evidence: claude-code · claude-sonnet-4-5" in block.text
        claimed = block.find_element(By.CSS_SELECTOR, "td.claimed")
        measured = block.find_element(By.CSS_SELECTOR, "td.measured")
        assert "<script>alert(1)</script>" in claimed.text  # the agent's markup is text on the page
        assert claimed.text.count("\n") == 1  # its lines kept
        assert claimed.location["y"] == measured.location["y"]  # side by side
        assert measured.value_of_css_property("color") == "rgba(197, 34, 31, 1)"  # var(--bad)
        assert not card.find_elements(By.TAG_NAME, "b") and not driver.find_elements(By.TAG_NAME, "script")
        driver.save_screenshot(str(shot))
    finally:
        driver.quit()
    assert shot.stat().st_size > 10_000
    print(f"\nscreenshot: {shot}")
