"""`perfagent report`: one self-contained HTML file of a run or batch, viewable offline.

The page is a jinja2 template (templates/report.html.j2) filled with the records load.py
reads and the rows rows.py words, so the page and the terminal show the same runs, the same
numbers (the batch summary's) and the same checks (those `perfagent check` prints). Here: the
cards the template shows, and the page. The charts are charts.py's inline SVG, the time and the
edits analytics.py's; diffs are highlighted by pygments. Nothing is fetched when the file is
opened, and it needs no JavaScript (collapsing is <details>/<summary>). It reads at any width: wide
tables and charts scroll sideways in their own box, text columns keep a minimum width, and the paths it
shows are relative to the run folder, so the page means the same on another machine.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
from dataclasses import dataclass
from pathlib import Path

import jinja2
from markupsafe import Markup, escape
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer

from agent.checks.render import Row
from agent.checks.verdicts import Verdict
from agent.results.layout import RESULTS, out_dir_of
from agent.results.summary import BatchSummary
from agent.results.tables import sections
from agent.review.analytics import EditTable, Timeline, edit_table, timeline
from agent.review.charts import charts, ratio_svg, sample_svg, timeline_svg
from agent.review.load import PatchFile, Results, RunView
from agent.review.rejections import rejections
from agent.review.rejections import table as rejection_table
from agent.review.rows import (EMPTY_PATCH, ClaimRow, TokenCost, agent_rows, check_rows, claim_rows, contestant,
                               fmt_cost, fmt_speedup, fmt_usd, patch_cut_note, patch_title, plot_title, printable,
                               run_outcome, run_summary, sort_runs, token_costs, verdict_level)
from agent.util.files import atomic_write

TEMPLATES = Path(__file__).with_name("templates")
_FORMATTER = HtmlFormatter(cssclass="hl", style="friendly")
_PATH_CHAR = r"[^\s;,'\"()\[\]<>]"  # what can follow a folder in a path that rows.py words into a sentence


@dataclass(frozen=True)
class RunPaths:
    """Paths as the page shows them: relative to the run folder (a patch beside it reads
    `../../patches/<run>/...`), so the page names the same files on whatever machine it is opened."""

    run_dir: Path  # absolute, as load_results leaves it

    @property
    def root(self) -> Path:
        """The folder whose paths are the run's own: its --out folder in the usual layout, else the run folder."""
        return out_dir_of(self.run_dir) if self.run_dir.parent.name == RESULTS else self.run_dir

    @property
    def folder(self) -> str:
        """The run folder itself, as the user names it: `results/<run>` under its --out folder."""
        return os.path.relpath(self.run_dir, self.root) if self.root != self.run_dir else self.run_dir.name

    def path(self, path: Path | str) -> str:
        p = Path(path)
        return os.path.relpath(p, self.run_dir) if p.is_absolute() and p.is_relative_to(self.root) else str(path)

    def text(self, text: str) -> str:
        """`text` with every absolute path of the run's made relative (rows.py words them for the terminal)."""
        pattern = re.escape(str(self.root)) + rf"(?:/{_PATH_CHAR}*)?(?!{_PATH_CHAR})"
        return re.sub(pattern, lambda m: self.path(m.group(0)), text)

    def rows(self, rows: list[Row]) -> list[Row]:
        return [dataclasses.replace(r, text=self.text(r.text)) for r in rows]


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


def rejection_sections(runs: list[RunView]) -> list[Section]:
    """Per agent and model of another harness's patches (ISO-Bench's), the terminal's table: [] when there is none."""
    rows = rejections(runs)
    if not rows:
        return []
    title, columns, cells = rejection_table(rows)
    return [Section("rejections", title, columns, cells)]


@dataclass
class DiffCard:
    """One diff of a run: highlighted when it has content, a note when it is empty; `cut` says when only its
    start is shown (load.py reads no more of a huge diff)."""

    title: str
    rejected: bool
    html: Markup | None
    cut: str = ""


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
    timeline: Timeline | None  # where the run's time went
    timeline_svg: Markup | None
    edits: EditTable | None  # the offline policy's kept/rejected edits, from its records
    diffs: list[DiffCard]
    result: str
    costs: list[TokenCost]
    claims: list[ClaimRow]  # an external agent's sessions: its claim beside our measurement
    agent_rows: list[Row]
    claim: str  # the agent's whole final message, untrusted text (the template escapes it)


def breakable(text: object) -> Markup:
    """`text` escaped, with a line-break opportunity after each `/`, `::` and before `[`: a test id or a job key
    wraps at its parts in a narrow column instead of widening it or breaking mid-word."""
    return Markup(re.sub(r"(/|::)(?=.)|(?=\[)", lambda m: m.group(0) + "<wbr>", str(escape(text))))


def diff_html(diff: str) -> Markup:
    """A diff as highlighted HTML (pygments escapes the text; classes styled by the page's CSS)."""
    return Markup(highlight(diff, DiffLexer(), _FORMATTER))


def diff_card(p: PatchFile, paths: RunPaths) -> DiffCard:
    shown = dataclasses.replace(p, path=Path(paths.path(p.path)))  # rows.py words it; the page names it relative
    return DiffCard(title=patch_title(shown), rejected=p.rejected, html=diff_html(p.text) if p.text.strip() else None,
                    cut=patch_cut_note(shown))


def _perf_note(run: RunView) -> str:
    ev = run.evaluation
    if ev is None or run.problem:
        return ""
    p = ev.perf
    if p is None:
        if ev.verdict == Verdict.NO_CHANGE:
            return f"no-change: {ev.note or 'nothing to measure'}"
        return "no perf measurement: " + (ev.note or (ev.reasons[0] if ev.reasons else f"verdict {ev.verdict}"))
    if p.error:
        return f"perf error: {p.error}"
    return ""


def run_card(i: int, run: RunView, paths: RunPaths) -> RunCard:
    rep, agent = run.report, run.agent
    tl = timeline(run)
    return RunCard(anchor=f"run-{i}", run=run, contestant=contestant(run.model, agent), verdict=run_outcome(run),
                   level=verdict_level(run_outcome(run)), speedup=fmt_speedup(run), cost=fmt_cost(run),
                   ended=run_summary(rep) if rep else "", checks=paths.rows(check_rows(run)),
                   plot_title=plot_title(run.perf) if run.perf else "", samples_svg=sample_svg(run.evaluation),
                   ratio_svg=ratio_svg(run.evaluation), perf_note=_perf_note(run),
                   timeline=tl, timeline_svg=timeline_svg(tl) if tl else None, edits=edit_table(run),
                   diffs=[diff_card(p, paths) for p in run.patches], result=rep.result if rep else "",
                   costs=token_costs(rep), claims=claim_rows(agent, run.evaluation) if agent else [],
                   agent_rows=paths.rows(agent_rows(run)),
                   claim=printable(agent.claim) if agent else "")


def render_html(results: Results, *, generated: dt.datetime | None = None) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["usd"] = fmt_usd
    env.filters["breakable"] = breakable
    env.globals["empty_patch"] = EMPTY_PATCH
    runs = sort_runs(results.runs, "job")
    paths = RunPaths(results.run_dir)
    return env.get_template("report.html.j2").render(
        results=results, summary=results.summary, cards=[run_card(i, r, paths) for i, r in enumerate(runs, 1)],
        sections=summary_sections(results.summary, is_batch=results.is_batch) + rejection_sections(runs),
        charts=charts(results),
        problems=[(r.key, paths.text(r.problem)) for r in runs if r.problem], run_folder=paths.folder,
        pygments_css=Markup(_FORMATTER.get_style_defs(".hl")),
        generated=(generated or dt.datetime.now()).strftime("%Y-%m-%d %H:%M"))


def write_html(results: Results, path: Path) -> Path:
    atomic_write(path, render_html(results))
    return path
