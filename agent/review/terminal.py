"""`perfagent review`: the runs as a table, and one run in detail, drawn with rich.

Every name, note, claim and diff here may come from a results folder made elsewhere: each reaches rich
as plain Text stripped of control sequences, or as markup escaped (`agent.util.text`), never raw.
"""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.markdown import Markdown
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from agent.checks.render import LEVEL_STYLE, Row, rows_table
from agent.results.report import Report
from agent.results.tables import summary_tables
from agent.review.load import PatchFile, Results, ReviewError, RunView
from agent.review.rows import (EMPTY_PATCH, SortKey, agent_rows, check_rows, claim_rows, contestant, fmt_cost,
                               fmt_speedup, fmt_usd, patch_cut_note, patch_title, plot_title, printable, run_outcome,
                               run_summary, sample_plot, sort_runs, token_costs, verdict_level)
from agent.util.text import markup_safe, strip_controls


def _rows(rows: list[Row]) -> list[Row]:
    """Check rows as rows_table draws them: the name is a markup string, the text a Text."""
    return [Row(markup_safe(r.name), strip_controls(r.text, multiline=True), r.level) for r in rows]


def _verdict_text(verdict: str) -> Text:
    return Text(verdict, style=LEVEL_STYLE[verdict_level(verdict)] or "bold")


def runs_table(results: Results, runs: list[RunView]) -> Table:
    t = Table(title=f"{markup_safe(results.run_id)}: {len(runs)} run(s)", title_justify="left")
    nodes = any(r.record is not None and r.record.node for r in runs)  # a Ray batch: which node ran each job
    for col, kw in (("job", {"overflow": "fold"}), ("task", {}), ("model", {}), ("sample", {"justify": "right"}),
                    ("outcome", {}), ("speedup [95% CI]", {"justify": "right"}), ("cost", {"justify": "right"}),
                    ("turns", {"justify": "right"}), *([("node", {})] if nodes else [])):
        t.add_column(col, **kw)
    for r in runs:
        node = [(r.record.node or "-")[:8] if r.record is not None else "-"] if nodes else []
        t.add_row(markup_safe(r.key), markup_safe(r.task), markup_safe(contestant(r.model, r.agent)), f"s{r.sample}",
                  _verdict_text(strip_controls(run_outcome(r))), fmt_speedup(r), fmt_cost(r),
                  "-" if r.turns is None else str(r.turns), *map(markup_safe, node))
    return t


def _patch_panel(p: PatchFile) -> Panel:
    text = strip_controls(p.text, multiline=True)
    body: RenderableType = (Syntax(text, "diff", theme="ansi_dark", word_wrap=True) if text.strip()
                            else Text(f"({EMPTY_PATCH})"))
    note = patch_cut_note(p)
    if note:
        body = Group(Text(strip_controls(note), style="yellow"), body)
    return Panel(body, title=markup_safe(patch_title(p)), title_align="left",
                 border_style="red" if p.rejected else "none")


def _cost_table(report: Report) -> Table | None:
    costs = token_costs(report)
    if not costs:
        return None
    ct = Table(title="cost by token type", title_justify="left")
    for col in ("model", "type", "tokens", "USD"):
        ct.add_column(col, justify="left" if col in ("model", "type") else "right")
    for c in costs:
        ct.add_row(markup_safe(c.model), c.kind, f"{c.tokens:,}", "-" if c.usd is None else f"${c.usd:.6f}")
    ct.add_row("", "total (report)", "", fmt_usd(report.total_cost_usd), style="bold")
    return ct


def _claims_panel(run: RunView) -> Panel | None:
    """The agent's words beside our measurements, session by session, then its cost, refusals and files."""
    if run.agent is None:
        return None
    claims = Table(show_header=False, show_lines=True, expand=True)
    claims.add_column("session", style="bold", no_wrap=True)
    claims.add_column("claimed", overflow="fold", ratio=1)
    claims.add_column("measured", overflow="fold", ratio=1)
    for c in claim_rows(run.agent, run.evaluation):
        claimed = Text(c.claimed)
        if c.against:
            claimed.append("\n" + c.against, style=LEVEL_STYLE["warn"])
        claims.add_row(markup_safe(c.session, multiline=True), claimed, Text(c.measured, style=LEVEL_STYLE[c.level]))
    return Panel(Group(claims, rows_table(_rows(agent_rows(run)), show_header=False)),
                 title=f"claims vs evidence: {markup_safe(contestant(run.model, run.agent))}", title_align="left")


def run_detail(run: RunView) -> Group:
    """Everything about one run: checks, an external agent's claims against them, perf samples, the diffs,
    the agent's summary, the cost."""
    rep = run.report
    head = Text.assemble((strip_controls(run.key), "bold"),
                         strip_controls(f"  task {run.task} · model {contestant(run.model, run.agent)} · "
                                        f"sample s{run.sample} · "),
                         _verdict_text(strip_controls(run_outcome(run))))
    if rep is not None:
        head.append("\n" + strip_controls(f"{run_summary(rep)}, cost {fmt_usd(rep.total_cost_usd)}"))
    if run.record is not None and run.record.reason:
        head.append("\n" + strip_controls(f"batch: {run.record.status}: {run.record.reason}"), style="yellow")
    parts: list[RenderableType] = [Panel(head, expand=False),
                                   rows_table(_rows(check_rows(run)), title="checks", show_header=False)]
    claims = _claims_panel(run)
    if claims is not None:
        parts.append(claims)
    plot = sample_plot(run.perf)
    if plot and run.perf is not None:
        parts.append(Panel(Text(strip_controls(plot, multiline=True)), title=markup_safe(plot_title(run.perf)),
                           expand=False, title_align="left"))
    parts += [_patch_panel(p) for p in run.patches]
    if rep is not None:
        if rep.result:
            # links shown with their address, never as a terminal hyperlink that hides it
            parts.append(Panel(Markdown(printable(rep.result), hyperlinks=False), title="agent's final summary",
                               title_align="left"))
        costs = _cost_table(rep)
        if costs is not None:
            parts.append(costs)
    return Group(*parts)


def select(runs: list[RunView], task: str | None) -> list[RunView]:
    return [r for r in runs if task is None or task in (r.task, r.key)]


def render_review(console: Console, results: Results, *, task: str | None = None, sort: SortKey = "job") -> None:
    """The run list (with the batch's summary tables), and the detail of one run when one is selected."""
    runs = sort_runs(select(results.runs, task), sort)
    if not runs:
        raise ReviewError(strip_controls(f"no run of task {task!r} in {results.run_dir}; tasks: "
                                         + ", ".join(sorted({r.task for r in results.runs}))))
    if results.is_batch and task is None:
        for table in summary_tables(results.summary):
            console.print(table)
    console.print(runs_table(results, runs))
    for r in runs:
        if r.problem:
            console.print(f"[red]{markup_safe(f'{r.key}: {r.problem}')}[/]", highlight=False)
    if task is not None or len(runs) == 1:
        for r in runs:
            console.print(run_detail(r))
    elif len(runs) > 1:
        console.print("[dim]--task ID shows one task's runs in detail (diff, checks, perf samples, cost).[/]")
