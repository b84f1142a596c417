"""The HTML report's charts show the evidence: read back as SVG elements and table cells, not words.

Per run: one dot per perf sample (baseline, candidate, reference) on one axis with the medians, the
ratio's interval on an axis through 1.0 with the pair count and verdict, where the time went, and
(for the rules policy) each kept/rejected edit with the check mode and test that caught it. Per batch:
speedups as points with whiskers beside a 1.0 line and the reference per task (never bars from 0),
tick labels that differ, "no model cost ($0)" for an offline batch, and a single run not called a batch.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from html.parser import HTMLParser

import pytest

from agent.checks import CommandRun, Correctness, Evaluation
from agent.results.ledger import Ledger
from agent.results.load import summarize_run
from agent.results.record import figures_from_report
from agent.results.report import EditDecision, PolicyRecord, Report
from agent.results.tables import write_summary
from agent.review.html import render_html
from agent.review.load import load_results
from agent.review.svg import nice_ticks, tick_label
from agent.util.files import write_json
from helpers import SONNET, Job, make_batch, write_job


# -- reading the page back ---------------------------------------------------------------------------
@dataclass
class El:
    tag: str
    attrs: dict[str, str]
    text: str = ""

    @property
    def cls(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def f(self, name: str) -> float:
        return float(self.attrs[name])


@dataclass
class Svg:
    cls: set[str]
    els: list[El] = field(default_factory=list)

    def of(self, cls: str, tag: str | None = None) -> list[El]:
        return [e for e in self.els if cls in e.cls and (tag is None or e.tag == tag)]

    def ticks(self, cls: str = "tick") -> list[El]:
        return [e for e in self.of(cls, "text")]

    def x_of(self, value: float) -> float:
        """Where `value` falls on the x axis, from the tick labels' own positions (a linear axis)."""
        ticks = [t for t in self.ticks() if "ytick" not in t.cls]
        (x0, v0), (x1, v1) = (ticks[0].f("x"), float(ticks[0].text)), (ticks[-1].f("x"), float(ticks[-1].text))
        return x0 + (value - v0) / (v1 - v0) * (x1 - x0)


WBR = "\0"


class Page(HTMLParser):
    """Every <svg> with its elements (and their text); every table by id, as rows of (attrs, text) cells."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.svgs: list[Svg] = []
        self.tables: dict[str, list[list[tuple[dict[str, str], str]]]] = {}
        self.texts: list[str] = []
        self._svg: Svg | None = None
        self._text: El | None = None
        self._table: str | None = None
        self._cell: tuple[dict[str, str], list[str]] | None = None
        self.h1 = ""
        self._in_h1 = False
        self.h2: list[str] = []
        self._in_h2 = False
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        if tag == "svg":
            self._svg = Svg(set(a.get("class", "").split()))
            self.svgs.append(self._svg)
        elif self._svg is not None:
            el = El(tag, a)
            self._svg.els.append(el)
            if tag == "text":
                self._text = el
        if tag == "h1":
            self._in_h1 = True
        if tag == "h2":
            self._in_h2 = True
            self.h2.append("")
        if tag == "table" and a.get("id"):
            self._table = a["id"]
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = (a, [])
        elif tag == "wbr" and self._cell is not None:
            self._cell[1].append(WBR)  # a line-break opportunity, no space: the text reads on across it

    def handle_endtag(self, tag):
        if tag == "svg":
            self._svg = None
        elif tag == "text":
            self._text = None
        elif tag == "h1":
            self._in_h1 = False
        elif tag == "h2":
            self._in_h2 = False
        elif tag in ("td", "th") and self._table and self._cell is not None:
            text = " ".join(" ".join(self._cell[1]).split()).replace(f" {WBR} ", "")
            self.tables[self._table][-1].append((self._cell[0], text))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._text is not None:
            self._text.text += data
        if self._cell is not None:
            self._cell[1].append(data)
        if self._in_h1:
            self.h1 += data
        if self._in_h2:
            self.h2[-1] += data
        self.texts.append(data)

    def svg(self, cls: str) -> list[Svg]:
        return [s for s in self.svgs if cls in s.cls]


def close(a: float, b: float, tol: float = 0.6) -> bool:
    return abs(a - b) <= tol


# -- the batch: speedups through 1.0 ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    out = tmp_path_factory.mktemp("charts")
    run_dir = make_batch(out)
    return load_results(run_dir), Page(render_html(load_results(run_dir)))


def test_batch_speedups_are_points_with_whiskers_on_an_axis_through_one(batch):
    results, page = batch
    (chart,) = page.svg("speedups")
    (one,) = chart.of("one", "line")
    assert close(one.f("x1"), chart.x_of(1.0)) and one.f("x1") == one.f("x2")  # a vertical line at 1.0
    assert one.f("y2") - one.f("y1") > 100  # across every row
    assert not chart.of("bar") and len([e for e in chart.els if e.tag == "rect"]) == 1  # the plot's ground, no bars
    measured = [r for r in results.runs if r.speedup is not None]
    points = {e.attrs["data-key"]: e for e in chart.of("speedup", "circle")}
    assert sorted(points) == sorted(r.key for r in measured)
    for r in measured:
        assert close(points[r.key].f("cx"), chart.x_of(r.speedup))
        if r.interval is None:
            assert not [w for w in chart.of("whisker") if w.attrs["data-key"] == r.key]
            continue
        (w,) = [w for w in chart.of("whisker") if w.attrs["data-key"] == r.key]
        lo, hi = r.interval
        assert close(w.f("x1"), chart.x_of(lo)) and close(w.f("x2"), chart.x_of(hi))
        caps = sorted(c.f("x1") for c in chart.of("cap") if c.attrs["data-key"] == r.key)
        assert close(caps[0], chart.x_of(lo)) and close(caps[1], chart.x_of(hi))  # a cap at each end
        assert w.f("y1") == points[r.key].f("cy")  # on the point's row
    # runs without a measurement still have their row, saying so
    missing = [e.text for e in chart.of("missing", "text")]
    assert len(missing) == len(results.runs) - len(measured) and all(m.startswith("no measurement") for m in missing)


def test_reference_marked_per_task(batch):
    results, page = batch
    (chart,) = page.svg("speedups")
    refs = {e.attrs["data-task"]: e for e in chart.of("reference", "line")}
    expected = {}
    for r in results.runs:
        ref = r.evaluation.reference if r.evaluation is not None else None
        if ref is not None and ref.speedup is not None:
            expected.setdefault(r.task, []).append(ref.speedup)
    assert set(refs) == set(expected) and expected
    for task, values in expected.items():
        assert close(refs[task].f("x1"), chart.x_of(statistics.median(values)))


def test_the_reference_interval_is_drawn_per_task(tmp_path):
    """The reference patch is measured with an interval like any run; a tick at its estimate hid how sure that is.
    Four runs measured it on one task: the chart marks the one the per-task table reports ("ref. speedup", the
    upper median) and shades that measurement's interval across the task's rows."""
    jobs = [Job("t", SONNET, i, speedup=1.5) for i in range(4)] + [Job("u", SONNET, 0, speedup=1.2)]
    run_dir = make_batch(tmp_path, jobs=jobs, damage=False)
    ledger = Ledger(run_dir)
    measured = {f"t/anthropic-claude-sonnet-4-5/s{i}": m  # the reference's ratio and its interval, per run
                for i, m in enumerate([(0.56, 0.52, 0.60), (0.5, 0.47, 0.53), (0.4, 0.38, 0.42), (0.45, 0.4, 0.5)])}
    for run in load_results(run_dir).runs:  # task u's reference has no interval: its tick alone
        if run.key not in measured:
            continue
        ratio, lo, hi = measured[run.key]
        ev = run.evaluation
        ev.reference = ev.reference.model_copy(update={"ratio": ratio, "ci_low": lo, "ci_high": hi,
                                                       "speedup": 1 / ratio})
        report = run.report.model_copy(update={"evaluation": ev})
        report.write(run.dir / "report.json")
        ledger.append(ledger.latest()[run.key].model_copy(update=figures_from_report(report)))
    write_summary(run_dir, summarize_run(run_dir))
    results = load_results(run_dir)
    page = Page(render_html(results))
    (chart,) = page.svg("speedups")
    (row,) = [t for t in results.summary.tasks if t.task == "t"]
    assert row.reference_speedup == pytest.approx(1 / 0.45)  # speedups 1.79, 2.0, 2.22, 2.5: the upper median
    (line,) = [e for e in chart.of("reference", "line") if e.attrs["data-task"] == "t"]
    assert close(line.f("x1"), chart.x_of(row.reference_speedup))
    (band,) = chart.of("reference-interval", "rect")
    assert band.attrs["data-task"] == "t"
    assert close(band.f("x"), chart.x_of(1 / 0.5)) and close(band.f("x") + band.f("width"), chart.x_of(1 / 0.4))
    assert band.f("y") == line.f("y1") and close(band.f("y") + band.f("height"), line.f("y2"))  # across t's rows
    assert band.f("x") < line.f("x1") < band.f("x") + band.f("width")
    assert [e.attrs["data-task"] for e in chart.of("reference", "line")] == ["t", "u"]  # u: its tick, no band
    assert any("shaded: its 95% interval" in e.text for e in chart.of("legend", "text"))


def test_correct_runs_filled_others_hollow(batch):
    results, page = batch
    (chart,) = page.svg("speedups")
    points = {e.attrs["data-key"]: e for e in chart.of("speedup", "circle")}
    fail = next(r for r in results.runs if r.verdict == "fail" and r.speedup is not None)
    ok = next(r for r in results.runs if r.verdict == "pass" and r.speedup is not None)
    assert points[fail.key].attrs["fill"] == "#fff" and points[ok.key].attrs["fill"] != "#fff"


def test_cost_bars_stack_each_contestants_cost_by_task(batch):
    """Drawn with the page's own SVG kit (no chart library, no script): each task's part of a contestant's
    bar is the batch summary's cost, stacked to scale from the axis up."""
    results, page = batch
    assert not any("pygal" in s.cls or "pygal-chart" in s.cls for s in page.svgs)
    (chart,) = page.svg("cost-bars")
    bars = chart.of("bar", "rect")
    want = {(t.model, t.task): t.cost_usd for t in results.summary.tasks if t.cost_usd > 0}
    assert want and {(b.attrs["data-model"], b.attrs["data-task"]): b.f("data-value") for b in bars} == \
        pytest.approx(want, rel=1e-5)
    px_per_usd = {round(b.f("height") / b.f("data-value"), 1) for b in bars}
    assert len(px_per_usd) == 1  # one scale for every part
    for model in {m for m, _ in want}:
        parts = sorted((b for b in bars if b.attrs["data-model"] == model), key=lambda b: -b.f("y"))
        for lower, upper in zip(parts, parts[1:]):  # stacked: each part starts where the one below ends
            assert close(upper.f("y") + upper.f("height"), lower.f("y"), 0.05)


def test_tick_labels_are_distinct_on_a_narrow_range(tmp_path):
    """The old scatter printed "1.01" on every y tick; a batch of 1.005x..1.02x speedups must read apart."""
    jobs = [Job("t", SONNET, 0, speedup=1.01), Job("t", SONNET, 1, speedup=1.012), Job("u", SONNET, 0, speedup=1.015)]
    run_dir = make_batch(tmp_path, jobs=jobs, damage=False)
    page = Page(render_html(load_results(run_dir)))
    (speed,) = page.svg("speedups")
    (scatter,) = page.svg("cost-speedup")
    for labels in ([t.text for t in speed.ticks()], [t.text for t in scatter.of("ytick", "text")],
                   [t.text for t in scatter.ticks() if "ytick" not in t.cls]):
        assert len(labels) >= 3 and len(set(labels)) == len(labels), labels
    (one,) = scatter.of("one", "line")  # the scatter has its 1.0 line too, horizontal
    assert one.f("y1") == one.f("y2")


@pytest.mark.parametrize("lo,hi", [(1.005, 1.015), (0.9991, 1.0004), (0, 0.0478), (12.0, 12.0), (0.5, 2.6), (-3, 250),
                                   (2.1, 14.2)])
def test_nice_ticks_cover_the_range_with_distinct_labels(lo, hi):
    ticks, decimals = nice_ticks(lo, hi)
    labels = [tick_label(t, decimals) for t in ticks]
    assert ticks[0] <= lo and ticks[-1] >= hi and 3 <= len(ticks) <= 12
    assert len(set(labels)) == len(labels), labels
    assert all(float(label) == pytest.approx(t, abs=1e-9) for label, t in zip(labels, ticks)), labels  # 7.5 not "8"
    steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:])}
    assert len(steps) == 1  # evenly spaced


def test_a_zero_cost_batch_says_no_model_cost(tmp_path):
    jobs = [Job("t", "rules", 0, speedup=1.3), Job("u", "rules", 0, speedup=1.1)]
    run_dir = make_batch(tmp_path, jobs=jobs, damage=False)
    html = render_html(load_results(run_dir))
    page = Page(html)
    charts = Page(html.split('id="charts"', 1)[1].split('id="runs"', 1)[0])
    assert [s.cls for s in charts.svgs] == [{"chart", "speedups"}]  # no empty cost bars, no $0 scatter
    assert any("no model cost ($0)" in t for t in charts.texts)
    assert page.h1.startswith("perfagent batch report")


def test_a_single_run_is_not_titled_batch(tmp_path):
    write_job(tmp_path, "one", Job("t", "rules", 0), key="t")
    results = load_results(tmp_path / "results" / "one")
    assert not results.is_batch
    page = Page(render_html(results))
    assert page.h1.startswith("perfagent run report") and "batch" not in page.h1
    titles = [h for h in page.h2 if h.strip()]
    assert titles and not any(re.search(r"\bbatch\b", h) for h in titles), titles
    assert any(h.startswith("run one:") for h in titles)


# -- one run: samples, ratio, time, edits ----------------------------------------------------------------
# The rules policy's words today (agent.policies.rules._summary); the page reads the records beside them.
RULES_SUMMARY = """rules policy: kept 2 rewrite(s), faster in a quick check
- kept pkg/graph.py:10:22 self.cache_seqlens: no read before a write (sanitizer) and every read site run; \
passes the poisoned tests
- kept pkg/graph.py:12:8 self.out: no read before a write (sanitizer) and every read site run; passes the poisoned tests
- rejected pkg/graph.py:11:20 self.page_table: fails the checks: tests/test_graph.py::test_replay[decode-bs1] \
(static hazard: no write to it was found in this module)
- rejected pkg/graph.py:14:9 self.cu_seqlens_k: read before written: read by aten.index at pkg/graph.py:30 in \
tests/test_graph.py::test_replay[verify-bs1]
- rejected pkg/other.py:3:1 self.pos<script>: fails the checks: tests with poisoned memory fail (exit 1)
- rejected pkg/other.py:5:1 self.idx: read at line 9: no test runs it
- rejected pkg/other.py:7:1 self.buf: fails the checks: changed lines no test executed: pkg/other.py:7
findings without an automatic rewrite (left for a human or an LLM):
- pkg/graph.py:40:5 [host-device-sync] `x.item()` blocks
"""
KEPT_WHY = "no read before a write (sanitizer) and every read site run; passes the poisoned tests"
RULES_RECORD = PolicyRecord(name="rules", outcome="kept 2 rewrite(s), faster in a quick check", decisions=[
    EditDecision(path="pkg/graph.py", line=10, rewrite="self.cache_seqlens", kept=True, evidence="sanitizer",
                 reason=KEPT_WHY),
    EditDecision(path="pkg/graph.py", line=12, rewrite="self.out", kept=True, evidence="sanitizer", reason=KEPT_WHY),
    EditDecision(path="pkg/graph.py", line=11, rewrite="self.page_table", kept=False, evidence="tests",
                 test="tests/test_graph.py::test_replay[decode-bs1]",
                 hazard="no write to it was found in this module",
                 reason="fails the checks: tests/test_graph.py::test_replay[decode-bs1]"),
    EditDecision(path="pkg/graph.py", line=14, rewrite="self.cu_seqlens_k", kept=False, evidence="sanitizer",
                 test="tests/test_graph.py::test_replay[verify-bs1]",
                 reason="read before written: read by aten.index at pkg/graph.py:30 in "
                        "tests/test_graph.py::test_replay[verify-bs1]"),
    EditDecision(path="pkg/other.py", line=3, rewrite="self.pos<script>", kept=False, evidence="poisoned tests",
                 reason="fails the checks: tests with poisoned memory fail (exit 1)"),
    EditDecision(path="pkg/other.py", line=5, rewrite="self.idx", kept=False, evidence="read site not run",
                 reason="read at line 9: no test runs it"),
    EditDecision(path="pkg/other.py", line=7, rewrite="self.buf", kept=False, evidence="coverage",
                 reason="fails the checks: changed lines no test executed: pkg/other.py:7"),
])


def _grading(plain_fail: list[str], poison_fail: list[str], *, perf_s: float = 0.0, lock_s: float = 0.0,
             total_s: float = 5.0, full: bool = False) -> dict:
    plain = CommandRun(name="plain", command="pytest", exit_code=1 if plain_fail else 0, passed=not plain_fail,
                       duration_s=2.0, failing_tests=plain_fail)
    poison = CommandRun(name="poison", command="pytest", exit_code=1 if poison_fail else 0, passed=not poison_fail,
                        duration_s=3.0, failing_tests=poison_fail)
    ev = Evaluation(verdict="fail" if plain_fail or poison_fail else "pass",
                    correctness=Correctness(plain=plain, poison=poison), duration_s=total_s)
    data = ev.model_dump(mode="json")
    if perf_s or lock_s:
        data["perf"] = {"metric": "init_ms", "direction": "lower", "duration_s": perf_s, "lock_wait_s": lock_s}
    return {"time": 0.0, "full": full, "evaluation": data}


@pytest.fixture
def rules_run(tmp_path) -> tuple[Report, Page, str]:
    job = Job("cuda-graph-buffers", "rules", 0, speedup=1.6)
    report = write_job(tmp_path, "r", job, key="cuda-graph-buffers")
    assert report.evaluation is not None and report.evaluation.perf is not None
    ev = report.evaluation
    ev.reference.samples = [v * 0.9 for v in ev.perf.candidate_samples[:6]]  # type: ignore[union-attr]
    ev.reference.ratio, ev.reference.ci_low, ev.reference.ci_high = 0.5, 0.45, 0.56  # type: ignore[union-attr]
    ev.duration_s = 0.0  # graded in the loop: the final evaluation is one of checks.json's
    report = report.model_copy(update={"result": RULES_SUMMARY, "duration_ms": 100_000, "duration_api_ms": 0,
                                       "evaluation": ev, "policy": RULES_RECORD})
    folder = tmp_path / "results" / "r" / "cuda-graph-buffers"
    report.write(folder / "report.json")
    write_json(folder / "checks.json", [
        _grading(["tests/test_graph.py::test_replay[decode-bs1]"], ["tests/test_graph.py::test_replay[decode-bs1]"]),
        _grading([], ["tests/test_graph.py::test_replay[verify-bs1]"], lock_s=7.0),
        _grading([], [], perf_s=20.0, lock_s=3.0, total_s=40.0, full=True),
    ])
    html = render_html(load_results(tmp_path / "results" / "r"))
    return report, Page(html), html


def test_samples_plot_has_one_mark_per_sample_and_the_medians(rules_run):
    report, page, _ = rules_run
    p, ref = report.evaluation.perf, report.evaluation.reference
    (chart,) = page.svg("samples")
    for side, samples in (("baseline", p.baseline_samples), ("candidate", p.candidate_samples),
                          ("reference", ref.samples)):
        dots = [e for e in chart.of("sample", "circle") if e.attrs["data-side"] == side]
        assert len(dots) == len(samples)  # one mark per sample
        assert sorted(float(d.attrs["data-value"]) for d in dots) == pytest.approx(sorted(samples), rel=1e-5)
        for d in dots:  # on the shared axis
            assert close(d.f("cx"), chart.x_of(float(d.attrs["data-value"])), 0.8)
        (median,) = [m for m in chart.of("median", "line") if m.attrs["data-side"] == side]
        want = {"baseline": p.baseline_median, "candidate": p.candidate_median}.get(side) or statistics.median(samples)
        assert close(median.f("x1"), chart.x_of(want), 0.8)


def test_ratio_interval_on_an_axis_through_one_with_pairs_and_verdict(rules_run):
    report, page, _ = rules_run
    p = report.evaluation.perf
    (chart,) = page.svg("ratio")
    (one,) = chart.of("one", "line")
    assert close(one.f("x1"), chart.x_of(1.0))
    (w,) = [w for w in chart.of("whisker") if w.attrs["data-key"] == "candidate"]
    assert close(w.f("x1"), chart.x_of(p.ci_low)) and close(w.f("x2"), chart.x_of(p.ci_high))
    (est,) = [e for e in chart.of("estimate") if e.attrs["data-side"] == "candidate"]
    assert close(est.f("cx"), chart.x_of(p.ratio))
    (ref,) = [w for w in chart.of("whisker") if w.attrs["data-key"] == "reference"]
    assert close(ref.f("x1"), chart.x_of(0.45)) and close(ref.f("x2"), chart.x_of(0.56))
    (verdict,) = chart.of("verdict", "text")
    assert verdict.text.startswith(f"{p.verdict} · {p.n_pairs} pairs")


def test_the_text_sparkline_is_gone_from_html(rules_run):
    _, _, html = rules_run
    assert 'class="plot"' not in html and "▁" not in html and "▇" not in html


def test_timeline_adds_up_the_gradings(rules_run):
    _, page, _ = rules_run
    (chart,) = page.svg("timeline")
    secs = {e.attrs["data-part"]: float(e.attrs["data-seconds"]) for e in chart.of("seg", "rect")}
    # three gradings: tests in parallel on a CPU (max of plain 2s, poison 3s each), perf 20s, lock waits 7 + 3s
    assert secs["tests"] == pytest.approx(9.0) and secs["perf"] == pytest.approx(20.0)
    assert secs["lock"] == pytest.approx(10.0)
    assert secs["checks"] == pytest.approx((5 - 3) + 0 + (40 - 3 - 20 - 3))  # the rest of each grading
    assert "model" not in secs  # an offline policy: no model time, no empty segment
    assert sum(secs.values()) == pytest.approx(100.0)  # the whole run, "other" filling the rest
    widths = {e.attrs["data-part"]: e.f("width") for e in chart.of("seg", "rect")}
    assert widths["perf"] == pytest.approx(2 * widths["lock"], rel=0.01)  # drawn to scale


def _edits(page: Page) -> tuple[list[str], dict[str, dict[str, tuple[dict[str, str], str]]]]:
    (table,) = [rows for tid, rows in page.tables.items() if tid.endswith("-edits")]
    head = [text for _, text in table[0]]
    return head, {cells[0][1].split()[0]: {h: (a, t) for h, (a, t) in zip(head, cells)} for cells in table[1:]}


def test_edit_table_counts_are_the_policys_records(rules_run):
    _, page, html = rules_run
    kept = sum(d.kept for d in RULES_RECORD.decisions)
    rejected = len(RULES_RECORD.decisions) - kept
    assert (kept, rejected) == (2, 5)
    section = html.split('<section class="edits">', 1)[1].split("</section>", 1)[0]
    assert f"edits tried by the rules policy: {kept} kept, {rejected} rejected" in section
    _, rows = _edits(page)
    assert sum(r["outcome"][1] == "kept" for r in rows.values()) == kept
    assert sum(r["outcome"][1] == "rejected" for r in rows.values()) == rejected


def test_edit_table_lists_every_edit_with_the_check_and_test_that_caught_it(rules_run):
    _, page, html = rules_run
    head, rows = _edits(page)
    assert head == ["edit (buffer, where)", "outcome", "evidence", "test", "why"]
    assert set(rows) == {"self.cache_seqlens", "self.out", "self.page_table", "self.cu_seqlens_k",
                         "self.pos<script>", "self.idx", "self.buf"}  # every edit; the findings are not edits
    assert [k for k, r in rows.items() if r["outcome"][1] == "kept"] == ["self.cache_seqlens", "self.out"]
    evidence = {k: r["evidence"][0]["data-evidence"] for k, r in rows.items()}
    assert evidence == {"self.cache_seqlens": "sanitizer", "self.out": "sanitizer", "self.page_table": "tests",
                        "self.cu_seqlens_k": "sanitizer", "self.pos<script>": "poisoned tests",
                        "self.idx": "read site not run", "self.buf": "coverage"}
    assert rows["self.page_table"]["test"][1] == "tests/test_graph.py::test_replay[decode-bs1]"
    assert rows["self.page_table"]["why"][1] == ("fails the checks: tests/test_graph.py::test_replay[decode-bs1] "
                                                 "static hazard: no write to it was found in this module")
    assert rows["self.cu_seqlens_k"]["test"][1] == "tests/test_graph.py::test_replay[verify-bs1]"
    assert rows["self.idx"]["test"][1] == "·"  # no test ran the read
    assert "self.pos&lt;script&gt;" in html and "self.pos<script>" not in html  # the policy's words escaped


def test_a_reverted_policy_says_its_kept_edits_were_not_emitted(rules_run, tmp_path):
    report, _, _ = rules_run
    folder = tmp_path / "results" / "r" / "cuda-graph-buffers"
    outcome = "reverted: the kept rewrites were not measurably faster (no significant change)"
    reverted = RULES_RECORD.model_copy(update={"outcome": outcome, "reverted": True})
    report.model_copy(update={"policy": reverted}).write(folder / "report.json")
    html = render_html(load_results(tmp_path / "results" / "r"))
    section = html.split('<section class="edits">', 1)[1].split("</section>", 1)[0]
    assert "reverted its kept edits: none of them was emitted" in section


def test_an_old_report_without_records_has_no_edit_table(rules_run, tmp_path):
    """A report written before the records shows its summary text only: no table, and no "0 kept"."""
    report, _, _ = rules_run
    folder = tmp_path / "results" / "r" / "cuda-graph-buffers"
    report.model_copy(update={"policy": None}).write(folder / "report.json")
    assert '"policy"' not in (folder / "report.json").read_text()
    html = render_html(load_results(tmp_path / "results" / "r"))
    assert '<section class="edits">' not in html and "0 kept" not in html
    assert "rules policy: kept 2 rewrite(s)" in html  # the summary is still shown, as text


def test_no_matrix_for_a_model_run(batch):
    _, page = batch
    assert not [t for t in page.tables if t.endswith("-edits")]
