"""`perfagent report`: one self-contained HTML file of a run or batch, viewable offline.

The page is a jinja2 template (templates/report.html.j2) filled with the records load.py
reads and the rows rows.py words, so the page and the terminal show the same runs, the same
numbers (the batch summary's) and the same checks (those `perfagent check` prints). Diffs
are highlighted by pygments and charts are inline SVG; nothing is fetched when the file is
opened, and it needs no JavaScript (collapsing is <details>/<summary>).

The charts that carry the evidence are drawn here, element by element, so each shows what it
must: the perf samples of a run on one axis with their medians, the ratio's interval on an axis
through 1.0, the batch's speedups as points with whiskers beside a visible 1.0 line and the
reference per task (never bars from 0), tick labels chosen from the data's range with enough
decimals to differ, where a run's time went, and the rules policy's kept/rejected edits by the
check that caught each. pygal (pure Python, writes SVG) draws only the stacked cost bars.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

import jinja2
import pygal
from markupsafe import Markup, escape
from pydantic import ValidationError
from pygal.style import Style
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer

from agent.checks.evaluation import Evaluation
from agent.checks.render import Row
from agent.results.summary import BatchSummary
from agent.results.tables import sections
from agent.review.load import PatchFile, Results, RunView
from agent.review.rows import (EMPTY_PATCH, ClaimRow, TokenCost, agent_rows, check_rows, claim_rows, contestant,
                               fmt_cost, fmt_speedup, fmt_usd, patch_title, plot_title, printable, run_outcome,
                               run_summary, sort_runs, token_costs, verdict_level)
from agent.util.files import atomic_write, read_json

TEMPLATES = Path(__file__).with_name("templates")
CHART_STYLE = Style(background="transparent", plot_background="#fafafa", font_family="sans-serif",
                    colors=("#3366cc", "#dc3912", "#ff9900", "#109618", "#990099", "#0099c6", "#dd4477"))
_SCRIPT = re.compile(r"<script\b.*?</script>", re.DOTALL)
_FORMATTER = HtmlFormatter(cssclass="hl", style="friendly")


@dataclass
class Section:
    """One of the batch summary's tables, exactly as summary.md and the terminal print it."""

    id: str
    title: str
    columns: tuple[str, ...]
    rows: list[tuple[str, ...]]


def summary_sections(summary: BatchSummary, *, is_batch: bool = True) -> list[Section]:
    # The batch module's own (title, columns, rows) list: whatever tables summary.md has, the page has.
    # A single run is no batch: its tables say "run".
    return [Section(f"summary-{i}", title if is_batch else re.sub(r"^batch\b", "run", title), tuple(cols), list(rows))
            for i, (title, cols, rows) in enumerate(sections(summary), 1)]


@dataclass
class DiffCard:
    """One diff of a run: highlighted when it has content, a note when it is empty."""

    title: str
    rejected: bool
    html: Markup | None


@dataclass
class RunCard:
    """What the template shows for one run; every field already formatted or safe HTML."""

    anchor: str
    run: RunView
    contestant: str  # who ran: the agent and its model, or our loop's model spec
    verdict: str
    level: str
    speedup: str
    cost: str
    ended: str
    checks: list[Row]
    plot_title: str
    samples_svg: Markup | None  # the perf samples, one dot each, medians marked
    ratio_svg: Markup | None  # the ratio's interval on an axis through 1.0
    perf_note: str  # why there is no perf chart, or the perf verdict
    timeline: Timeline | None
    edits: EditMatrix | None  # the rules policy's kept/rejected edits
    diffs: list[DiffCard]
    result: str
    costs: list[TokenCost]
    claims: list[ClaimRow]  # an external agent's sessions: its claim beside our measurement
    agent_rows: list[Row]
    claim: str  # the agent's whole final message, untrusted text (the template escapes it)


def diff_html(diff: str) -> Markup:
    """A diff as highlighted HTML (pygments escapes the text; classes styled by the page's CSS)."""
    return Markup(highlight(diff, DiffLexer(), _FORMATTER))


def _svg(chart: pygal.graph.graph.Graph) -> Markup:
    svg = chart.render(is_unicode=True, disable_xml_declaration=True)
    return Markup(_SCRIPT.sub("", svg))  # pygal's inline config script: nothing on the page uses it


def _chart(kind: type, title: str | None, **kw) -> pygal.graph.graph.Graph:
    return kind(js=[], style=CHART_STYLE, title=title, width=640, height=360, legend_at_bottom=True, truncate_label=-1,
                print_values=kind is not pygal.XY, value_formatter=kw.pop("fmt", lambda v: f"{v:.3g}"),
                **kw)


# -- the SVG kit: axes whose ticks come from the data, marks as plain elements ------------------------
PALETTE = CHART_STYLE.colors
SIDE_COLORS = {"baseline": "#5f6368", "candidate": "#3366cc", "reference": "#ff9900"}
TIME_PARTS = (("model", "model (API calls)", "#3366cc"), ("tests", "tests (plain + poisoned)", "#109618"),
              ("perf", "perf sampling", "#ff9900"), ("lock", "perf lock waits", "#dc3912"),
              ("checks", "other check work (setup, coverage, patching)", "#0099c6"),
              ("other", "other (agent loop, tools, start-up)", "#bdbdbd"))


def nice_ticks(lo: float, hi: float, target: int = 5) -> tuple[list[float], int]:
    """Ticks at 1/2/2.5/5 x 10^k covering [lo, hi], and the decimals that keep their labels distinct.

    A range of 1.005..1.015 gets 1.004, 1.006, ... rather than five labels that all read "1.01".
    """
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 0.0, 1.0
    if hi < lo:
        lo, hi = hi, lo
    if hi - lo < 1e-12:
        pad = abs(lo) * 0.05 or 0.5
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / target
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * (1 - 1e-9))
    first = math.floor(lo / step + 1e-9) * step
    ticks, i = [], 0
    while True:
        t = first + i * step
        ticks.append(round(t, 12))
        if t >= hi - step * 1e-9:
            break
        i += 1
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    if abs(round(step * 10 ** decimals) - step * 10 ** decimals) > 1e-6:  # 2.5, 0.25: one more digit
        decimals += 1
    return ticks, decimals


def tick_label(v: float, decimals: int) -> str:
    return f"{v:.{decimals}f}"


@dataclass
class Scale:
    """A linear axis: data [lo, hi] onto pixels [a, b]."""

    lo: float
    hi: float
    a: float
    b: float

    def __call__(self, v: float) -> float:
        span = self.hi - self.lo or 1.0
        return round(self.a + (v - self.lo) / span * (self.b - self.a), 2)


def _e(text: object) -> str:
    return str(escape(str(text)))


def _t(x: float, y: float, text: object, *, size: int = 12, anchor: str = "start", cls: str = "", fill: str = "#202124",
       weight: str = "normal") -> str:
    c = f' class="{cls}"' if cls else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{fill}" '
            f'font-weight="{weight}"{c}>{_e(text)}</text>')


def _doc(width: int, height: float, body: list[str], label: str, cls: str) -> Markup:
    return Markup(f'<svg xmlns="http://www.w3.org/2000/svg" class="{cls}" viewBox="0 0 {width} {height:.0f}" '
                  f'width="{width}" height="{height:.0f}" role="img" aria-label="{_e(label)}" '
                  f'font-family="system-ui, sans-serif">' + "".join(body) + "</svg>")


def _x_axis(scale: Scale, ticks: list[float], decimals: int, y_top: float, y_axis: float, title: str) -> list[str]:
    """Grid lines and tick labels along the bottom, and the axis title under them."""
    out = [f'<line class="axis" x1="{scale.a}" x2="{scale.b}" y1="{y_axis}" y2="{y_axis}" stroke="#5f6368"/>']
    for t in ticks:
        x = scale(t)
        out.append(f'<line class="grid" x1="{x}" x2="{x}" y1="{y_top}" y2="{y_axis}" stroke="#e8eaed"/>')
        out.append(_t(x, y_axis + 15, tick_label(t, decimals), size=11, anchor="middle", cls="tick", fill="#5f6368"))
    out.append(_t((scale.a + scale.b) / 2, y_axis + 33, title, size=12, anchor="middle", cls="axis-title",
                  fill="#3c4043"))
    return out


def _one_line(scale: Scale, y_top: float, y_bottom: float, text: str = "1.0") -> list[str]:
    x = scale(1.0)
    return [f'<line class="one" data-value="1" x1="{x}" x2="{x}" y1="{y_top}" y2="{y_bottom}" stroke="#202124" '
            f'stroke-width="1.5" stroke-dasharray="5 3"/>', _t(x, y_top - 4, text, size=11, anchor="middle",
                                                                 cls="one-label", fill="#202124", weight="600")]


def _whisker(scale: Scale, lo: float, hi: float, y: float, color: str, key: str) -> list[str]:
    """An interval: a line between its ends and a cap at each end (data-lo / data-hi carry the values)."""
    x1, x2 = scale(lo), scale(hi)
    k = f' data-key="{_e(key)}"'
    return [f'<line class="whisker"{k} data-lo="{lo:.6g}" data-hi="{hi:.6g}" x1="{x1}" x2="{x2}" y1="{y}" y2="{y}" '
            f'stroke="{color}" stroke-width="2"/>',
            f'<line class="cap"{k} data-value="{lo:.6g}" x1="{x1}" x2="{x1}" y1="{y - 6}" y2="{y + 6}" '
            f'stroke="{color}" stroke-width="2"/>',
            f'<line class="cap"{k} data-value="{hi:.6g}" x1="{x2}" x2="{x2}" y1="{y - 6}" y2="{y + 6}" '
            f'stroke="{color}" stroke-width="2"/>']


def _diamond(x: float, y: float, r: float, color: str, cls: str, extra: str = "") -> str:
    return (f'<path class="{cls}"{extra} d="M{x:.1f},{y - r:.1f} L{x + r:.1f},{y:.1f} L{x:.1f},{y + r:.1f} '
            f'L{x - r:.1f},{y:.1f} Z" fill="{color}" stroke="#202124" stroke-width="1"/>')


def _domain(values: list[float], *, through_one: bool = False) -> tuple[Scale, list[float], int]:
    vals = [v for v in values if v is not None and math.isfinite(v)] + ([1.0] if through_one else [])
    lo, hi = (min(vals), max(vals)) if vals else (0.0, 1.0)
    pad = (hi - lo) * 0.04
    ticks, decimals = nice_ticks(lo - pad, hi + pad)
    return Scale(ticks[0], ticks[-1], 0, 0), ticks, decimals


# -- one run: its samples, its ratio's interval, its time, its edits -----------------------------------
def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _finite(values: list[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def sample_svg(ev: Evaluation | None) -> Markup | None:
    """Baseline, candidate and reference samples as dots on one axis, one dot per sample, each median a bar."""
    perf = ev.perf if ev is not None else None
    if perf is None:
        return None
    ref = ev.reference if ev is not None else None
    sides = [("baseline", _finite(perf.baseline_samples), perf.baseline_median),
             ("candidate", _finite(perf.candidate_samples), perf.candidate_median)]
    if ref is not None and ref.samples:
        sides.append(("reference", _finite(ref.samples), None))
    sides = [(n, vs, m if m is not None and math.isfinite(m) else _median(vs)) for n, vs, m in sides]
    values = [v for _, vs, _ in sides for v in vs]
    if not values:
        return None
    width, left, right, top, row = 720, 92, 150, 18, 42
    scale, ticks, decimals = _domain(values)
    scale.a, scale.b = left, width - right
    y_axis = top + row * len(sides) + 6
    unit = f" ({perf.unit})" if perf.unit else ""
    body = _x_axis(scale, ticks, decimals, top, y_axis, f"{perf.metric}{unit}, {perf.direction} is better")
    for i, (name, vs, median) in enumerate(sides):
        y, color = top + row * i + row / 2, SIDE_COLORS[name]
        body.append(f'<g class="side" data-side="{name}" data-n="{len(vs)}">')
        body.append(_t(left - 8, y + 4, name, anchor="end", weight="600", fill=color))
        for j, v in enumerate(vs):
            jitter = ((j * 0.618034) % 1 - 0.5) * row * 0.55  # spread equal values apart, the same on every render
            body.append(f'<circle class="sample" data-side="{name}" data-value="{v:.6g}" cx="{scale(v)}" '
                        f'cy="{y + jitter:.1f}" r="4" fill="{color}" fill-opacity="0.55" stroke="{color}"/>')
        if median is not None:
            x = scale(median)
            body.append(f'<line class="median" data-side="{name}" data-value="{median:.6g}" x1="{x}" x2="{x}" '
                        f'y1="{y - row * 0.42:.1f}" y2="{y + row * 0.42:.1f}" stroke="#202124" stroke-width="2.5"/>')
            body.append(_t(width - right + 8, y + 4, f"median {median:.4g}{' ' + perf.unit if perf.unit else ''}",
                           size=11, cls="median-label"))
            body.append(_t(width - right + 8, y + 17, f"n={len(vs)}", size=10, fill="#5f6368"))
        body.append("</g>")
    return _doc(width, y_axis + 40, body, f"perf samples: {perf.metric}", "chart samples")


def perf_verdict(ev: Evaluation | None) -> str:
    """The perf verdict in the words the checks use, or why there is none."""
    if ev is None:
        return "no evaluation"
    if ev.verdict == "no-change":
        return "no-change"
    p = ev.perf
    if p is None:
        return "not measured"
    if p.error:
        return "perf error"
    return p.verdict or "inconclusive"


def ratio_svg(ev: Evaluation | None) -> Markup | None:
    """The ratio candidate/baseline with its interval on an axis through 1.0; the reference's beside it."""
    p = ev.perf if ev is not None else None
    if p is None or p.ratio is None:
        return None
    rows = [("candidate", p.ratio, p.ci_low, p.ci_high, SIDE_COLORS["candidate"])]
    ref = ev.reference if ev is not None else None
    if ref is not None and ref.ratio is not None:
        rows.append(("reference", ref.ratio, ref.ci_low, ref.ci_high, SIDE_COLORS["reference"]))
    values = [v for _, r, lo, hi, _ in rows for v in (r, lo, hi) if v is not None]
    width, left, right, top, row = 720, 92, 150, 26, 34
    scale, ticks, decimals = _domain(values, through_one=True)
    scale.a, scale.b = left, width - right
    y_axis = top + row * len(rows) + 4
    better = "<1 is faster" if p.direction == "lower" else ">1 is faster"
    body = _x_axis(scale, ticks, decimals, top, y_axis, f"ratio candidate / baseline ({better}), "
                   f"{p.confidence:.0%} interval")
    body += _one_line(scale, top, y_axis, "1.0 = no change")
    for i, (name, r, lo, hi, color) in enumerate(rows):
        y = top + row * i + row / 2
        body.append(_t(left - 8, y + 4, name, anchor="end", weight="600", fill=color))
        if lo is not None and hi is not None:
            body += _whisker(scale, lo, hi, y, color, name)
        body.append(f'<circle class="estimate" data-side="{name}" data-value="{r:.6g}" cx="{scale(r)}" cy="{y}" '
                    f'r="5" fill="{color}" stroke="#202124"/>')
        iv = f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else ""
        body.append(_t(width - right + 8, y + 4, f"{r:.3f}{iv}", size=11, cls="ratio-label"))
    p_text = f", p={p.p_value:.3g}" if p.p_value is not None else ""
    caption = f"{perf_verdict(ev)} · {p.n_pairs} pairs{p_text}"
    body.append(_t(left, y_axis + 52, caption, size=13, weight="600", cls="verdict",
                   fill={"faster": "#137333", "slower": "#c5221f"}.get(perf_verdict(ev), "#a56300")))
    return _doc(width, y_axis + 62, body, f"ratio with its interval: {caption}", "chart ratio")


@dataclass
class TimePart:
    key: str
    label: str
    color: str
    seconds: float


@dataclass
class Timeline:
    parts: list[TimePart]
    total_s: float
    reported_s: float  # report.json's duration_ms
    gradings: int
    full: int
    svg: Markup


def _checks_log(run: RunView) -> list[tuple[bool, Evaluation]]:
    data = read_json(run.dir / "checks.json")
    out = []
    for e in data if isinstance(data, list) else []:
        try:
            out.append((bool(e.get("full")), Evaluation.model_validate(e.get("evaluation"))))
        except (ValidationError, AttributeError):
            continue
    return out


def _graded(run: RunView) -> list[tuple[bool, Evaluation]]:
    """Every grading of the run: checks.json, plus the final one when the runner made it after the loop."""
    log = _checks_log(run)
    final = run.evaluation
    if final is not None and final.duration_s > 0:
        bare = final.model_copy(update={"emitted": None, "warnings": [], "note": None}).model_dump()
        if not any(full and ev.model_copy(update={"note": None}).model_dump() == bare for full, ev in log):
            log.append((True, final))
    return log


def timeline(run: RunView) -> Timeline | None:
    """Where the run's time went: model calls, tests, perf sampling, lock waits, other checks, the rest."""
    rep = run.report
    if rep is None or run.problem:
        return None
    graded = _graded(run)
    secs = dict.fromkeys(("model", "tests", "perf", "lock", "checks", "other"), 0.0)
    secs["model"] = rep.duration_api_ms / 1000
    for _, ev in graded:
        c = ev.correctness
        runs = [r.duration_s for r in (c.plain, c.poison) if r is not None] if c is not None else []
        tests = (max(runs) if not ev.environment.gpu else sum(runs)) if runs else 0.0  # in parallel on a CPU
        perf = ev.perf.duration_s if ev.perf is not None else 0.0
        lock = ev.perf.lock_wait_s if ev.perf is not None else 0.0
        secs["tests"] += tests
        secs["perf"] += perf
        secs["lock"] += lock
        secs["checks"] += max(0.0, ev.duration_s - tests - perf - lock)
    reported = rep.duration_ms / 1000
    counted = sum(secs.values())
    secs["other"] = max(0.0, reported - counted)
    total = max(reported, counted)
    if total <= 0:
        return None
    parts = [TimePart(k, label, color, secs[k]) for k, label, color in TIME_PARTS]
    return Timeline(parts, total, reported, len(graded), sum(1 for f, _ in graded if f), _timeline_svg(parts, total))


def _secs(s: float) -> str:
    return f"{s:.1f}s" if s < 120 else f"{s / 60:.1f}m"


def _timeline_svg(parts: list[TimePart], total: float) -> Markup:
    width, left, right, top, bar = 720, 10, 10, 8, 30
    scale = Scale(0, total, left, width - right)
    body, x = [], float(left)
    for p in parts:
        w = scale(p.seconds) - left
        if w <= 0:
            continue
        body.append(f'<rect class="seg" data-part="{p.key}" data-seconds="{p.seconds:.2f}" x="{x:.2f}" y="{top}" '
                    f'width="{w:.2f}" height="{bar}" fill="{p.color}"><title>{_e(p.label)}: {_secs(p.seconds)}</title>'
                    "</rect>")
        if w > 44:
            body.append(_t(x + w / 2, top + bar / 2 + 4, _secs(p.seconds), size=11, anchor="middle", fill="#fff",
                           weight="600"))
        x += w
    y = top + bar + 22
    col = (width - left) / 2
    for i, p in enumerate(parts):  # the legend: every part, even an empty one (0s of lock waits is news too)
        lx, ly = left + col * (i % 2), y + 18 * (i // 2)
        body.append(f'<rect x="{lx:.1f}" y="{ly - 10}" width="12" height="12" fill="{p.color}"/>')
        share = p.seconds / total if total else 0
        body.append(_t(lx + 17, ly, f"{p.label}: {_secs(p.seconds)} ({share:.0%})", size=11, cls="legend"))
    return _doc(width, y + 18 * ((len(parts) + 1) // 2) + 4, body, f"where the run's time went ({_secs(total)})",
                "chart timeline")


# -- the rules policy's edits: which check kept or caught each ----------------------------------------
_EDIT = re.compile(r"^- (kept|rejected) (\S+?):(\d+)(?::\d+)? (.+?): ((?:passes|fails) .*)$")
MODES = ("plain tests", "poisoned tests", "coverage", "other")


@dataclass
class EditRow:
    path: str
    line: int
    name: str
    kept: bool
    caught_by: str  # the mode that rejected it ("" for a kept edit)
    detail: str  # the failing test, or the reason the checks gave
    cells: dict[str, str]  # mode -> "pass" | "caught" | "caught?" (one of the two test runs) | "failed too"
    #                        (the poisoned run failed as well, in the gradings that failed on this test) | "" (not known)
    hazard: str  # what the static analysis said about the buffer, when it warned


@dataclass
class EditMatrix:
    headline: str
    reverted: bool  # the policy took its kept edits back (nothing emitted)
    rows: list[EditRow]


def _mode_of(failure: str, log: list[tuple[bool, Evaluation]]) -> tuple[str, bool]:
    """Which check mode a rules-policy failure names (its words, else the gradings that failed first on
    that test), and whether the poisoned run failed too in every such grading."""
    if failure.startswith("tests with poisoned memory fail"):
        return "poisoned tests", False
    if failure.startswith("tests fail (exit"):
        return "plain tests", False
    if failure.startswith("changed lines no test executed") or "coverage" in failure:
        return "coverage", False
    plain, poison = [], []
    for _, ev in log:
        c = ev.correctness
        if c is None:
            continue
        if not c.plain.passed and c.plain.failing_tests[:1] == [failure]:
            plain.append(c)
        elif c.plain.passed and c.poison is not None and not c.poison.passed and c.poison.failing_tests[:1] == [failure]:
            poison.append(c)
    if plain and not poison:
        return "plain tests", all(c.poison is not None and not c.poison.passed for c in plain)
    if poison and not plain:
        return "poisoned tests", False
    if plain or poison or "::" in failure:  # a test id that failed first in both runs, or in no logged grading
        return "tests (plain or poisoned)", False
    return "other", False


def _cells(mode: str, poison_too: bool = False) -> dict[str, str]:
    """What each check mode said of a rejected edit: the modes that run before the catching one passed
    (tests, then coverage); those after it, or beside a plain failure, are not known unless the log says."""
    cells = dict.fromkeys(MODES, "")
    if mode == "tests (plain or poisoned)":
        cells["plain tests"] = cells["poisoned tests"] = "caught?"
        return cells
    if mode == "poisoned tests":
        cells["plain tests"] = "pass"
    elif mode == "coverage":
        cells["plain tests"] = cells["poisoned tests"] = "pass"
    cells[mode] = "caught"
    if mode == "plain tests" and poison_too:
        cells["poisoned tests"] = "failed too"
    return cells


def edit_matrix(run: RunView) -> EditMatrix | None:
    """The rules policy's summary (`agent.policies.rules._summary`) as rows: edit, kept or rejected, by what."""
    rep = run.report
    if rep is None or not rep.result.startswith("rules policy:"):
        return None
    lines = rep.result.splitlines()
    headline = lines[0].removeprefix("rules policy:").strip()
    log = _checks_log(run)
    rows = []
    for line in lines[1:]:
        m = _EDIT.match(line.strip())
        if m is None:
            if line.startswith("findings without"):
                break
            continue
        mark, path, lineno, name, reason = m.groups()
        kept = mark == "kept"
        if kept:
            cells = {"plain tests": "pass", "poisoned tests": "pass", "coverage": "pass", "other": "pass"}
            rows.append(EditRow(path, int(lineno), name, True, "", reason, cells, ""))
            continue
        failure = reason.removeprefix("fails the checks:").strip()
        hazard = ""
        if " (static hazard: " in failure:
            failure, hazard = failure.split(" (static hazard: ", 1)
            hazard = "static hazard: " + hazard.removesuffix(")")
        mode, poison_too = _mode_of(failure, log)
        rows.append(EditRow(path, int(lineno), name, False, mode, printable(failure), _cells(mode, poison_too),
                            printable(hazard)))
    rows.sort(key=lambda r: (r.path, r.line))
    return EditMatrix(printable(headline), headline.startswith("reverted"), rows)


# -- the batch: speedups against 1.0 with their intervals, cost ------------------------------------------
@dataclass
class Chart:
    title: str
    svg: Markup | None
    note: str = ""  # said instead of (or under) the chart
    wide: bool = False


def _reference_speedup(run: RunView) -> float | None:
    ref = run.evaluation.reference if run.evaluation is not None else None
    return ref.speedup if ref is not None and ref.speedup is not None and math.isfinite(ref.speedup) else None


def _colors(results: Results) -> dict[str, str]:
    models = dict.fromkeys(contestant(r.model, r.agent) for r in sorted(results.runs, key=lambda r: r.model))
    return {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(models)}


def _legend(colors: dict[str, str], x: float, y: float) -> tuple[list[str], float]:
    body = []
    for m, c in colors.items():
        body.append(f'<circle cx="{x + 5:.1f}" cy="{y - 4:.1f}" r="5" fill="{c}"/>')
        body.append(_t(x + 14, y, m, size=11, cls="legend"))
        x += 30 + 6.2 * len(m)
    return body, x


def speedup_svg(results: Results) -> Markup | None:
    """One row per run: its speedup (>1 is better) with its interval as whiskers, on an axis through 1.0;
    the reference patch's speedup marked per task. Runs with no measurement say so on their row."""
    runs = sorted((r for r in results.runs if not r.pending),
                  key=lambda r: (r.task, contestant(r.model, r.agent), r.sample, r.key))
    if not runs:
        return None
    color = _colors(results)
    labels = [f"{r.task} · {contestant(r.model, r.agent)} · s{r.sample}" for r in runs]
    left = min(420, 12 + 6.6 * max(len(x) for x in labels))
    width, right, top, row, gap = 1000, 220, 34, 26, 10
    values: list[float] = []
    for r in runs:
        values += [v for v in (r.speedup, _reference_speedup(r), *(r.interval or ())) if v is not None]
    scale, ticks, decimals = _domain(values, through_one=True)
    scale.a, scale.b = left, width - right
    ys: list[float] = []
    y, prev = float(top), None
    for r in runs:
        if prev is not None and r.task != prev:
            y += gap
        ys.append(y + row / 2)
        y += row
        prev = r.task
    y_axis = y + 6
    body = [f'<rect x="{left:.1f}" y="{top}" width="{scale.b - left:.1f}" height="{y_axis - top:.1f}" fill="#fafafa"/>']
    body += _x_axis(scale, ticks, decimals, top, y_axis, "speedup (x, >1 is faster), 95% interval")
    body += _one_line(scale, top, y_axis, "1.0 = no change")
    for task in dict.fromkeys(r.task for r in runs):  # the reference, once per task, across its rows
        rows_ = [(r, yy) for r, yy in zip(runs, ys) if r.task == task]
        refs = [v for v in (_reference_speedup(r) for r, _ in rows_) if v is not None]
        if not refs:
            continue
        ref = statistics.median(refs)
        x, y0, y1 = scale(ref), rows_[0][1] - row / 2 + 2, rows_[-1][1] + row / 2 - 2
        body.append(f'<line class="reference" data-task="{_e(task)}" data-value="{ref:.6g}" x1="{x}" x2="{x}" '
                    f'y1="{y0:.1f}" y2="{y1:.1f}" stroke="{SIDE_COLORS["reference"]}" stroke-width="3" '
                    f'stroke-opacity="0.8"><title>reference patch on {_e(task)}: {ref:.3f}x</title></line>')
        body.append(_diamond(x, y0, 5, SIDE_COLORS["reference"], "reference-mark"))
    for r, label, yy in zip(runs, labels, ys):
        c = color[contestant(r.model, r.agent)]
        body.append(_t(left - 8, yy + 4, label, size=12, anchor="end", cls="row-label"))
        outcome = run_outcome(r)
        if r.speedup is None or not math.isfinite(r.speedup):
            body.append(_t(width - right + 10, yy + 4, f"no measurement ({outcome})", size=11, fill="#5f6368",
                           cls="missing"))
            continue
        if r.interval is not None:
            body += _whisker(scale, r.interval[0], r.interval[1], yy, c, r.key)
        correct = outcome == "pass"
        body.append(f'<circle class="speedup" data-key="{_e(r.key)}" data-value="{r.speedup:.6g}" '
                    f'cx="{scale(r.speedup)}" cy="{yy}" r="5" fill="{c if correct else "#fff"}" stroke="{c}" '
                    f'stroke-width="2"><title>{_e(r.key)}: {_e(fmt_speedup(r))}, {_e(outcome)}</title></circle>')
        body.append(_t(width - right + 10, yy + 4, f"{r.speedup:.3f}x" + ("" if correct else f" ({outcome})"),
                       size=11, cls="value-label", fill="#202124" if correct else "#c5221f"))
    ly = y_axis + 52
    legend, lx = _legend(color, float(left), ly)
    body += legend
    body.append(f'<circle cx="{lx + 5:.1f}" cy="{ly - 4}" r="5" fill="#fff" stroke="#5f6368" stroke-width="2"/>')
    body.append(_t(lx + 14, ly, "hollow: not correct", size=11, cls="legend"))
    lx += 140
    body.append(_diamond(lx + 5, ly - 4, 5, SIDE_COLORS["reference"], "legend-ref"))
    body.append(_t(lx + 14, ly, "reference patch (per task)", size=11, cls="legend"))
    return _doc(width, ly + 10, body, "speedup per run with 95% intervals, through 1.0", "chart speedups")


def costs_all_zero(results: Results) -> bool:
    """Every run that reported cost nothing: the offline policy, no model to pay."""
    costs = [r.cost_usd for r in results.runs if r.record is not None]
    return all(c is not None and c == 0 for c in costs)


def cost_vs_speedup_svg(results: Results) -> Markup | None:
    """Each run's cost against its speedup (with its interval), a 1.0 line across."""
    pts = [r for r in results.runs if r.cost_usd is not None and r.speedup is not None and math.isfinite(r.speedup)]
    if not pts:
        return None
    color = _colors(results)
    width, height, left, right, top, bottom = 640, 360, 64, 20, 20, 86
    xs, xd = nice_ticks(0, max(r.cost_usd or 0 for r in pts) or 0.01)
    yv: list[float] = [1.0]
    for r in pts:
        yv += [r.speedup, *(r.interval or ())]
    y_scale, yt, yd = _domain(yv)
    x_scale = Scale(xs[0], xs[-1], left, width - right)
    y_scale.a, y_scale.b = height - bottom, top
    body = [f'<rect x="{left}" y="{top}" width="{width - right - left}" height="{height - bottom - top}" '
            'fill="#fafafa"/>']
    body += _x_axis(x_scale, xs, xd, top, height - bottom, "cost (USD)")
    for t in yt:
        yy = y_scale(t)
        body.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{yy}" y2="{yy}" stroke="#e8eaed"/>')
        body.append(_t(left - 6, yy + 4, tick_label(t, yd), size=11, anchor="end", cls="tick ytick", fill="#5f6368"))
    mid = (top + height - bottom) / 2
    body.append(f'<text x="16" y="{mid}" font-size="12" text-anchor="middle" fill="#3c4043" class="axis-title" '
                f'transform="rotate(-90 16 {mid})">speedup (x)</text>')
    y1 = y_scale(1.0)
    body.append(f'<line class="one" data-value="1" x1="{left}" x2="{width - right}" y1="{y1}" y2="{y1}" '
                'stroke="#202124" stroke-width="1.5" stroke-dasharray="5 3"/>')
    body.append(_t(left + 4, y1 - 4, "1.0 = no change", size=11, cls="one-label", weight="600"))
    for r in pts:
        c, x = color[contestant(r.model, r.agent)], x_scale(r.cost_usd or 0)
        if r.interval is not None:
            lo, hi = y_scale(r.interval[0]), y_scale(r.interval[1])
            body.append(f'<line class="whisker" data-key="{_e(r.key)}" x1="{x}" x2="{x}" y1="{lo}" y2="{hi}" '
                        f'stroke="{c}" stroke-width="1.5"/>')
        body.append(f'<circle class="point" data-key="{_e(r.key)}" cx="{x}" cy="{y_scale(r.speedup)}" r="5" '
                    f'fill="{c}" fill-opacity="0.8"><title>{_e(r.key)}: {fmt_usd(r.cost_usd)}, '
                    f'{_e(fmt_speedup(r))}</title></circle>')
    legend, _ = _legend(color, float(left), height - 22)
    return _doc(width, height, body + legend, "each run: cost against speedup", "chart cost-speedup")


def charts(results: Results) -> list[Chart]:
    """The speedups against 1.0 with intervals and the reference; the cost by contestant and task, and
    each run's cost against its speedup, or one line when no run cost anything."""
    s = results.summary
    out = [Chart("speedup per run, 95% intervals, reference patch per task", speedup_svg(results), wide=True)]
    if costs_all_zero(results):
        out.append(Chart("cost", None, "no model cost ($0): every run used an offline policy (such as rules), "
                                       "so there is no spend to chart"))
        return out
    tasks = sorted({t.task for t in s.tasks})
    models = [m.model for m in s.models]
    rows = {(t.task, t.model): t for t in s.tasks}
    cost = _chart(pygal.StackedBar, None, fmt=lambda v: f"${v:.3f}")  # titled by the figure's caption
    cost.x_labels = [contestant(m) for m in models]
    for t in tasks:
        cost.add(t, [getattr(rows.get((t, m)), "cost_usd", None) for m in models])
    out.append(Chart("cost per model, stacked by task (USD)", _svg(cost)))
    out.append(Chart("each run: cost (USD) against speedup", cost_vs_speedup_svg(results)))
    return out


def diff_card(p: PatchFile) -> DiffCard:
    return DiffCard(title=patch_title(p), rejected=p.rejected, html=diff_html(p.text) if p.text.strip() else None)


def _perf_note(run: RunView) -> str:
    ev = run.evaluation
    if ev is None or run.problem:
        return ""
    p = ev.perf
    if p is None:
        if ev.verdict == "no-change":
            return f"no-change: {ev.note or 'nothing to measure'}"
        return "no perf measurement: " + (ev.note or (ev.reasons[0] if ev.reasons else f"verdict {ev.verdict}"))
    if p.error:
        return f"perf error: {p.error}"
    return ""


def run_card(i: int, run: RunView) -> RunCard:
    rep, agent = run.report, run.agent
    return RunCard(anchor=f"run-{i}", run=run, contestant=contestant(run.model, agent), verdict=run_outcome(run),
                   level=verdict_level(run_outcome(run)), speedup=fmt_speedup(run), cost=fmt_cost(run),
                   ended=run_summary(rep) if rep else "", checks=check_rows(run),
                   plot_title=plot_title(run.perf) if run.perf else "", samples_svg=sample_svg(run.evaluation),
                   ratio_svg=ratio_svg(run.evaluation), perf_note=_perf_note(run),
                   timeline=timeline(run), edits=edit_matrix(run), diffs=[diff_card(p) for p in run.patches],
                   result=rep.result if rep else "", costs=token_costs(rep),
                   claims=claim_rows(agent, run.evaluation) if agent else [], agent_rows=agent_rows(run),
                   claim=printable(agent.claim) if agent else "")


def render_html(results: Results, *, generated: dt.datetime | None = None) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["usd"] = fmt_usd
    env.globals["empty_patch"] = EMPTY_PATCH
    env.globals["edit_modes"] = MODES
    runs = sort_runs(results.runs, "job")
    return env.get_template("report.html.j2").render(
        results=results, summary=results.summary, cards=[run_card(i, r) for i, r in enumerate(runs, 1)],
        sections=summary_sections(results.summary, is_batch=results.is_batch), charts=charts(results),
        problems=[r for r in runs if r.problem], pygments_css=Markup(_FORMATTER.get_style_defs(".hl")),
        generated=(generated or dt.datetime.now()).strftime("%Y-%m-%d %H:%M"))


def write_html(results: Results, path: Path) -> Path:
    atomic_write(path, render_html(results))
    return path
