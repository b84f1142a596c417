"""The HTML report reads on a phone: laid out by headless Chromium at 375, 700 and 1280 px and measured.

Nothing on the page is wider than the window (a wide table or chart scrolls sideways in a box of its
own), no word in a table is broken across lines (the edits table's "why" once broke letter by letter
at 700 px), and a narrow window does not make the page many times taller. Every <details> is opened
first, so the diffs, costs and claims are measured too. The page is a batch with everything a report
shows: unreadable runs, an offline policy's edits, an external agent's claims, a diff with a very long
line, a prediction nobody priced, and references measured with their intervals.
Needs Debian's chromium + chromium-driver and selenium (browser.py); skipped with the reason without them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.results.ledger import Ledger
from agent.results.load import summarize_run
from agent.results.record import JobRecord, figures_from_report
from agent.results.report import EditDecision, PolicyRecord
from agent.results.tables import write_summary
from agent.review.html import write_html
from agent.review.load import load_results
from browser import chromium
from helpers import DIFF, Job, default_jobs, make_batch

WIDTHS = (375, 700, 1280)
AGENT = "claude-code:claude-sonnet-4-5"
TEST_ID = "tests/test_graph.py::test_replay[decode-bs1]"
RECORD = PolicyRecord(name="rules", outcome="kept 1 rewrite(s), faster in a quick check", decisions=[
    EditDecision(path="pkg/graph.py", line=10, rewrite="self.cache_seqlens", kept=True, evidence="sanitizer",
                 reason="no read before a write (sanitizer) and every read site run; passes the poisoned tests"),
    EditDecision(path="pkg/graph.py", line=11, rewrite="self.page_table", kept=False, evidence="tests", test=TEST_ID,
                 hazard="no write to it was found in this module", reason=f"fails the checks: {TEST_ID}"),
    EditDecision(path="pkg/graph.py", line=14, rewrite="self.cu_seqlens_k", kept=False, evidence="read site not run",
                 reason="read before written: read by aten.index at pkg/graph.py:30 in "
                        "tests/test_graph.py::test_replay[verify-bs1]; no other test runs that line"),
])

# Everything that lies outside the window must be inside a box that scrolls sideways: (what, its right edge).
OUTSIDE = """
const vw = document.documentElement.clientWidth, out = [];
const scrolls = el => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
for (const el of document.body.querySelectorAll('*')) {
  const r = el.getBoundingClientRect();
  if (r.width === 0 || r.right <= vw + 0.5) continue;
  let box = el.parentElement;
  while (box && box !== document.body && !scrolls(box)) box = box.parentElement;
  if (box && box !== document.body) continue;  // inside a scroll box, which is itself checked
  const name = `${el.tagName.toLowerCase()}.${el.className.baseVal ?? el.className}#${el.id}`;
  out.push(`${name}: right ${Math.round(r.right)}`);
}
return {vw: vw, inner: window.innerWidth, scrollWidth: document.documentElement.scrollWidth,
        height: document.documentElement.scrollHeight, outside: out.slice(0, 12), n: out.length};
"""

# A word (between break opportunities: spaces, and after / :: [ -) laid out on two lines has been broken.
BROKEN_WORDS = """
const broken = [];
for (const cell of document.querySelectorAll('td, th')) {
  if (!cell.getClientRects().length) continue;  // in a closed <details>
  const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    for (const m of n.data.matchAll(/[^\\s\\/:\\[\\]\\-]{2,}/g)) {
      const range = document.createRange();
      range.setStart(n, m.index);
      range.setEnd(n, m.index + m[0].length);
      const lines = new Set([...range.getClientRects()].filter(q => q.width > 0).map(q => Math.round(q.top)));
      if (lines.size > 1) broken.push(`${m[0]} (in ${cell.closest('table').id || cell.closest('table').className})`);
    }
  }
}
return broken;
"""


@pytest.fixture
def report(tmp_path, write_agent_job) -> Path:
    out = tmp_path
    jobs = [*default_jobs(), Job("cuda-graph-buffers", "rules", 2, speedup=1.6),
            Job("rope-cache", "prediction:gold", 0, speedup=1.9), Job("metadata-alloc", "prediction:gold", 0)]
    run_dir = make_batch(out, jobs=jobs)
    runs = {r.key: r for r in load_results(run_dir).runs}
    for key, run in runs.items():  # references measured with their intervals; the rules run's edits
        if run.report is None or run.evaluation is None or run.evaluation.reference is None:
            continue
        ev = run.evaluation
        ev.reference = ev.reference.model_copy(update={"ratio": 0.5, "ci_low": 0.47, "ci_high": 0.54})
        update = {"evaluation": ev, **({"policy": RECORD} if key == "cuda-graph-buffers/rules/s2" else {})}
        run.report.model_copy(update=update).write(run.dir / "report.json")
    long_line = "+" + "    x = compute(" + ", ".join(f"argument_{i}" for i in range(60)) + ")\n"
    patch = out / "patches" / run_dir.name / "cuda-graph-buffers/rules/s2/model_patch.diff"
    patch.write_text(DIFF + long_line)
    ledger = Ledger(run_dir)  # the predictions had no cost: nobody priced them
    for record in ledger.latest().values():
        if record.model.startswith("prediction:"):
            ledger.append(record.model_copy(update={"cost_usd": None}))
    agent = Job("cuda-graph-buffers", AGENT, 0, verdict="fail", speedup=None)
    written = write_agent_job(out, run_dir.name, agent,
                              claim="All good; " + "no risk of uninitialized memory access. " * 8)
    ledger.append(JobRecord(key=agent.key, task=agent.task, model=AGENT, sample=0, status="done",
                            report=f"results/{run_dir.name}/{agent.key}/report.json", **figures_from_report(written)))
    write_summary(run_dir, summarize_run(run_dir))
    html = out / "report.html"
    write_html(load_results(run_dir), html)
    return html


def lay_out(report: Path) -> dict[int, dict]:
    """The page laid out at each width: what lies outside the window, broken words, its height; a screenshot."""
    driver = chromium()
    found: dict[int, dict] = {}
    try:
        for width in WIDTHS:
            driver.set_window_size(width, 900)
            driver.get(report.as_uri())
            driver.execute_script("document.querySelectorAll('details').forEach(d => d.open = true)")
            found[width] = {**driver.execute_script(OUTSIDE), "broken": driver.execute_script(BROKEN_WORDS)}
            if width == 375:
                driver.execute_script("document.querySelectorAll('details').forEach(d => d.open = false);"
                                      "window.scrollTo(0, 0)")
                shot = report.with_name("report-375.png")
                driver.save_screenshot(str(shot))
                found[width]["shot"] = shot
    finally:
        driver.quit()
    return found


def test_the_page_has_what_a_narrow_window_strains(report):
    html = report.read_text()
    assert "could not be read" in html and 'class="edits"' in html and 'class="claims-vs-evidence"' in html
    assert "argument_59" in html and "unpriced" in html and 'class="reference-interval"' in html


@pytest.mark.slow
def test_the_report_reads_at_375_700_and_1280_px(report):
    pages = lay_out(report)
    for width, page in pages.items():
        assert page["inner"] == width  # the window really was this wide
        assert page["scrollWidth"] <= page["vw"], (width, page)
        assert page["n"] == 0, f"{page['n']} element(s) past the right edge at {width}px: {page['outside']}"
        assert page["broken"] == [], f"words broken across lines at {width}px: {page['broken']}"
    wide = pages[1280]["height"]
    for width in (375, 700):  # narrower is taller, within reason
        assert pages[width]["height"] <= 3 * wide, (width, pages[width]["height"], wide)
    shot = pages[375]["shot"]
    assert shot.stat().st_size > 10_000
    print(f"\nheights: {({w: p['height'] for w, p in pages.items()})}; screenshot at 375px: {shot}")
