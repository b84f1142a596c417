"""`perfagent report`: one self-contained HTML file of a run or batch, viewable offline.

The page is a jinja2 template (templates/report.html.j2) filled with the records load.py
reads and the rows rows.py words, so the page and the terminal show the same runs, the same
numbers (the batch summary's) and the same checks (those `perfagent check` prints). Diffs
are highlighted by pygments and charts are inline SVG from pygal; nothing is fetched when
the file is opened, and it needs no JavaScript (collapsing is <details>/<summary>).

pygal rather than matplotlib: pure Python, ~1 MB with one small dependency, and it writes
SVG directly, where matplotlib would add ~40 MB of compiled packages for a few bar charts.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path

import jinja2
import pygal
from markupsafe import Markup
from pygal.style import Style
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer

from agent.batch.summary import BatchSummary, sections
from agent.checks.render import Row
from agent.review.load import PatchFile, Results, RunView
from agent.review.rows import (EMPTY_PATCH, ClaimRow, TokenCost, agent_rows, check_rows, claim_rows, contestant,
                               fmt_cost, fmt_speedup, fmt_usd, patch_title, plot_title, printable, run_summary,
                               sample_plot, sort_runs, token_costs, verdict_level)
from agent.util.files import atomic_write

TEMPLATES = Path(__file__).with_name("templates")
CHART_STYLE = Style(background="transparent", plot_background="#fafafa", font_family="sans-serif",
                    colors=("#3366cc", "#dc3912", "#ff9900", "#109618", "#990099", "#0099c6", "#dd4477"))
_SCRIPT = re.compile(r"<script\b.*?</script>", re.DOTALL)
_FORMATTER = HtmlFormatter(cssclass="hl", style="friendly")


@dataclass
class Chart:
    title: str
    svg: Markup


@dataclass
class Section:
    """One of the batch summary's tables, exactly as summary.md and the terminal print it."""

    id: str
    title: str
    columns: tuple[str, ...]
    rows: list[tuple[str, ...]]


def summary_sections(summary: BatchSummary) -> list[Section]:
    # The batch module's own (title, columns, rows) list: whatever tables summary.md has, the page has.
    return [Section(f"summary-{i}", title, tuple(cols), list(rows))
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
    plot: str
    plot_title: str
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


def _chart(kind: type, title: str, **kw) -> pygal.graph.graph.Graph:
    return kind(js=[], style=CHART_STYLE, title=title, width=640, height=360, legend_at_bottom=True, truncate_label=-1,
                print_values=kind is not pygal.XY, value_formatter=kw.pop("fmt", lambda v: f"{v:.3g}"),
                **kw)


def charts(results: Results) -> list[Chart]:
    """Per contestant: best speedup on each task, cost by task, and every run's cost against its speedup."""
    s = results.summary
    tasks = sorted({t.task for t in s.tasks})
    models = [m.model for m in s.models]
    rows = {(t.task, t.model): t for t in s.tasks}

    speed = _chart(pygal.Bar, "best correct speedup per task (x, >1 is faster)", x_title="task")
    speed.x_labels = tasks
    for m in models:
        speed.add(contestant(m), [getattr(rows.get((t, m)), "best_speedup", None) for t in tasks])

    cost = _chart(pygal.StackedBar, "cost per model, stacked by task (USD)", fmt=lambda v: f"${v:.3f}")
    cost.x_labels = [contestant(m) for m in models]
    for t in tasks:
        cost.add(t, [getattr(rows.get((t, m)), "cost_usd", None) for m in models])

    scatter = _chart(pygal.XY, "each run: cost (USD) against speedup", stroke=False, x_title="cost (USD)",
                     y_title="speedup (x)", fmt=lambda v: f"{v:.3g}")
    for m in models:
        pts = [(r.cost_usd, r.speedup) for r in results.runs
               if r.model == m and r.cost_usd is not None and r.speedup is not None]
        scatter.add(contestant(m), pts)
    return [Chart(c.config.title, _svg(c)) for c in (speed, cost, scatter)]


def diff_card(p: PatchFile) -> DiffCard:
    return DiffCard(title=patch_title(p), rejected=p.rejected, html=diff_html(p.text) if p.text.strip() else None)


def run_card(i: int, run: RunView) -> RunCard:
    rep, agent = run.report, run.agent
    return RunCard(anchor=f"run-{i}", run=run, contestant=contestant(run.model, agent), verdict=run.verdict,
                   level=verdict_level(run.verdict), speedup=fmt_speedup(run), cost=fmt_cost(run),
                   ended=run_summary(rep) if rep else "", checks=check_rows(run), plot=sample_plot(run.perf),
                   plot_title=plot_title(run.perf) if run.perf else "", diffs=[diff_card(p) for p in run.patches],
                   result=rep.result if rep else "", costs=token_costs(rep),
                   claims=claim_rows(agent, run.evaluation) if agent else [], agent_rows=agent_rows(run),
                   claim=printable(agent.claim) if agent else "")


def render_html(results: Results, *, generated: dt.datetime | None = None) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["usd"] = fmt_usd
    env.globals["empty_patch"] = EMPTY_PATCH
    runs = sort_runs(results.runs, "job")
    return env.get_template("report.html.j2").render(
        results=results, summary=results.summary, cards=[run_card(i, r) for i, r in enumerate(runs, 1)],
        sections=summary_sections(results.summary), charts=charts(results),
        problems=[r for r in runs if r.problem], pygments_css=Markup(_FORMATTER.get_style_defs(".hl")),
        generated=(generated or dt.datetime.now()).strftime("%Y-%m-%d %H:%M"))


def write_html(results: Results, path: Path) -> Path:
    atomic_write(path, render_html(results))
    return path
