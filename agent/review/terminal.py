"""`perfagent review`: the runs as a table, and one run in detail, drawn with rich.

Every name, note, claim and diff here may come from a results folder made elsewhere: each reaches rich
as plain Text stripped of control sequences, or as markup escaped (`agent.util.text`), never raw.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markdown import Markdown
from rich.panel import Panel
from rich.text import Text

from agent.checks.evaluation import PerfResult
from agent.checks.render import LEVEL_STYLE, Row, rows_table
from agent.results.report import Report
from agent.results.tables import summary_tables
from agent.review.load import PatchFile, Results, ReviewError, RunView
from agent.review.rejections import Kind, Rejections, rejections
from agent.review.rejections import table as rejection_table
from agent.review.rows import (EMPTY_PATCH, FileStat, SortKey, agent_rows, check_rows, claim_rows, contestant,
                               diff_stat, fmt_cost, fmt_speedup, fmt_usd, patch_cut_note, plot_title, printable,
                               run_outcome, run_summary, sample_plot, screen_rows, sort_runs, summary_head,
                               token_costs, verdict_level)
from agent.util.fit import Column, FitTable
from agent.util.text import markup_safe, strip_controls


def _rows(rows: list[Row]) -> list[Row]:
    """Check rows as rows_table draws them: the name is a markup string, the text a Text."""
    return [Row(markup_safe(r.name), strip_controls(r.text, multiline=True), r.level) for r in rows]


def _verdict_text(verdict: str) -> Text:
    return Text(verdict, style=LEVEL_STYLE[verdict_level(verdict)] or "bold")


def runs_table(results: Results, runs: list[RunView]) -> FitTable:
    """One row per run; at a narrow width the columns the job key already says (task, model, sample) go first."""
    nodes = any(r.record is not None and r.record.node for r in runs)  # a Ray batch: which node ran each job
    cols = [Column("job"), Column("task", drop=8), Column("model", drop=7), Column("sample", "right", drop=9),
            Column("outcome"), Column("speedup [95% CI]", "right", drop=2), Column("cost", "right", drop=3),
            Column("turns", "right", drop=5), *([Column("node", drop=6)] if nodes else [])]
    t = FitTable(cols, title=f"{markup_safe(results.run_id)}: {len(runs)} run(s)")
    for r in runs:
        node = [(r.record.node or "-")[:8] if r.record is not None else "-"] if nodes else []
        t.add_row(markup_safe(r.key), markup_safe(r.task), markup_safe(contestant(r.model, r.agent)), f"s{r.sample}",
                  _verdict_text(strip_controls(run_outcome(r))), fmt_speedup(r), fmt_cost(r),
                  "-" if r.turns is None else str(r.turns), *map(markup_safe, node))
    return t


def rejections_table(rows: list[Rejections]) -> FitTable:
    """Per agent and model of another harness's patches: how many the checks rejected with evidence and of which
    kind, beside that harness's own figures (its hard metrics, the agents' cost as they reported it)."""
    title, columns, cells = rejection_table(rows)
    drop = {str(k): 2 for k in Kind} | {"not graded": 5, "self-reported cost": 4, "its own metrics": 3}
    cols = [Column(c, "left" if i < 2 or c == "its own metrics" else "right", drop=drop.get(c, 0),
                   long_words=c == "its own metrics", most=0.3 if c == "model" else None)
            for i, c in enumerate(columns)]
    t = FitTable(cols, title=markup_safe(title))
    for row in cells:
        t.add_row(*map(markup_safe, row))
    return t


def _shown_path(path: Path) -> str:
    """A path as short as it reads: relative to the current folder when inside it."""
    try:
        rel = path.resolve().relative_to(Path.cwd().resolve())
    except (ValueError, OSError):
        return str(path)
    return str(rel) if str(rel) != "." else str(path)


def _diff_name(p: PatchFile) -> str:
    return f"{'rejected change (not emitted)' if p.rejected else 'diff'}: {_shown_path(p.path)}"


STAT_FILES = 12  # files listed in a diff's summary; the rest counted


def _stat_lines(stats: list[FileStat], width: int) -> list[Text]:
    """`git diff --stat`'s lines: each file, its changed lines and a bar of + and -, the bar scaled to fit."""
    shown = stats[:STAT_FILES]
    names = [s.path for s in shown]
    room = max(10, width - 20)
    names = [n if len(n) <= room else "..." + n[-(room - 3):] for n in names]
    name_w = max(map(len, names), default=0)
    count_w = max((len(str(s.added + s.removed)) for s in shown), default=1)
    bar_w = max(1, min(40, width - name_w - count_w - 6))
    most = max((s.added + s.removed for s in shown), default=0)
    lines = []
    for s, name in zip(shown, names):
        n = s.added + s.removed
        scale = 1.0 if most <= bar_w else bar_w / most
        plus = round(s.added * scale) if s.added else 0
        minus = round(s.removed * scale) if s.removed else 0
        line = Text(f" {name:<{name_w}} | {n:>{count_w}} ")
        line.append("+" * max(plus, 1 if s.added else 0), style="green")
        line.append("-" * max(minus, 1 if s.removed else 0), style="red")
        lines.append(line)
    if len(stats) > STAT_FILES:
        lines.append(Text(f" ... and {len(stats) - STAT_FILES} more files", style="dim"))
    added, removed = sum(s.added for s in stats), sum(s.removed for s in stats)
    lines.append(Text(f" {len(stats)} file{'s' if len(stats) != 1 else ''} changed, {added} insertions(+), "
                      f"{removed} deletions(-)"))
    return lines


class DiffSummary:
    """A diff for one screen, as `git diff --stat` shows it: its file, each file changed and by how much; the
    diff itself is `review --diff`'s (printed line by line, so a wrapped line never loses its + or -)."""

    def __init__(self, patch: PatchFile, full: bool = False):
        self.patch, self.full = patch, full

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        p = self.patch
        text = strip_controls(p.text, multiline=True)
        head = Text(strip_controls(_diff_name(p)), style="red bold" if p.rejected else "bold")
        if not text.strip():
            head.append(f"  ({EMPTY_PATCH})", style="dim")
            yield head
            return
        yield head
        note = patch_cut_note(p)
        if note:
            yield Text(strip_controls(note) + "; counted from the part shown", style="yellow")
        lines = _stat_lines(diff_stat(text), options.max_width)
        if not self.full:
            lines[-1].append("  (--diff prints it)", style="dim")
        yield from lines


_LINE_STYLE = {"+": "green", "-": "red", "@": "cyan"}


def diff_text(p: PatchFile) -> Text:
    """The whole diff as plain lines, coloured by their first character: printed with soft wrap, a long line is
    wrapped by the terminal (or not at all in a pipe), never split into a line with no + or -."""
    out = Text()
    for line in strip_controls(p.text, multiline=True).splitlines():
        header = line.startswith(("diff --git", "index ", "--- ", "+++ "))
        out.append(line + "\n", style="bold" if header else _LINE_STYLE.get(line[:1], ""))
    return out


class SamplePlot:
    """The perf samples' histograms, as many bars wide as the width allows (40 at most)."""

    def __init__(self, perf: PerfResult):
        self.perf = perf

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for bars in (40, 30, 20, 10):
            plot = strip_controls(sample_plot(self.perf, bars), multiline=True)
            if max(map(len, plot.splitlines()), default=0) + 4 <= options.max_width:
                break
        if plot:
            yield Panel(Group(Text(strip_controls(plot_title(self.perf)), style="bold"), Text(plot)), expand=False)


def _cost_table(report: Report) -> FitTable | None:
    """The cost split by token type; none for a run that used no model tokens (its cost is in the header)."""
    costs = token_costs(report)
    if not any(c.tokens for c in costs):
        return None
    ct = FitTable([Column("model", drop=1), Column("type"), Column("tokens", "right"), Column("USD", "right")],
                  title="cost by token type", boxed=False)
    for c in costs:
        ct.add_row(markup_safe(c.model), c.kind, f"{c.tokens:,}", "-" if c.usd is None else f"${c.usd:.6f}")
    ct.add_row("", Text("total (report)", style="bold"), "", Text(fmt_usd(report.total_cost_usd), style="bold"))
    return ct


def _claims_panel(run: RunView) -> Panel | None:
    """The agent's words beside our measurements, session by session, then its cost, refusals and files."""
    if run.agent is None:
        return None
    claims = FitTable([Column("session", style="bold"), Column("claimed", long_words=True),
                       Column("measured", long_words=True)], show_header=False, lines=True)
    for c in claim_rows(run.agent, run.evaluation):
        claimed = Text(c.claimed)
        if c.against:
            claimed.append("\n" + c.against, style=LEVEL_STYLE["warn"])
        claims.add_row(markup_safe(c.session, multiline=True), claimed, Text(c.measured, style=LEVEL_STYLE[c.level]))
    return Panel(Group(claims, rows_table(_rows(agent_rows(run)), show_header=False)),
                 title=f"claims vs evidence: {markup_safe(contestant(run.model, run.agent))}", title_align="left")


def _head(run: RunView) -> Panel:
    """Which run, what it came to (with its speedup), how it ended and what it cost."""
    rep = run.report
    alone = run.key == run.task  # a single run: its key is the task, and it has one sample
    who = ("" if alone else f"task {run.task} · ") + f"model {contestant(run.model, run.agent)} · " + (
        "" if alone else f"sample s{run.sample} · ")
    head = Text.assemble((strip_controls(run.key), "bold"), strip_controls(f"  {who}"),
                         _verdict_text(strip_controls(run_outcome(run))))
    if run.speedup is not None:
        head.append(strip_controls(f" · speedup {fmt_speedup(run)}"))
    if rep is not None:
        head.append("\n" + strip_controls(f"{run_summary(rep)}, cost {fmt_usd(rep.total_cost_usd)}"))
    if run.record is not None and run.record.reason:
        head.append("\n" + strip_controls(f"batch: {run.record.status}: {run.record.reason}"), style="yellow")
    return Panel(head, expand=False)


def _summary(report: Report, findings: bool) -> list[RenderableType]:
    """The agent's final summary: its first lines on one screen, all of it (decisions, lint findings) with
    --findings. Links are shown with their address, never as a terminal hyperlink that hides it."""
    if findings:
        return [Panel(Markdown(printable(report.result), hyperlinks=False), title="agent's final summary",
                      title_align="left")]
    text, more = summary_head(report.result)
    title = Text("agent's final summary", style="bold")
    if more:
        title.append(f" (its start; --findings prints {more} more line{'s' if more != 1 else ''}: decisions, "
                     "lint findings)", style="dim")
    return [title, Markdown(text, hyperlinks=False)]


def run_detail(run: RunView, *, findings: bool = False, diff: bool = False) -> Group:
    """One run on one screen: what it came to, the checks (quiet rows folded), an external agent's claims
    against them, the perf samples, each diff as a summary, the start of the agent's summary, the cost."""
    rep = run.report
    rows = screen_rows(check_rows(run), run.evaluation, without=("diff",) if run.patches else ())
    parts: list[RenderableType] = [_head(run), rows_table(_rows(rows), title="checks", show_header=False,
                                                          boxed=False)]
    claims = _claims_panel(run)
    if claims is not None:
        parts.append(claims)
    if run.perf is not None and sample_plot(run.perf):
        parts.append(SamplePlot(run.perf))
    parts += [DiffSummary(p, full=diff) for p in run.patches]
    if rep is not None:
        if rep.result:
            parts += _summary(rep, findings)
        costs = _cost_table(rep)
        if costs is not None:
            parts.append(costs)
    return Group(*parts)


def print_run(console: Console, run: RunView, *, diff: bool = False, findings: bool = False) -> None:
    """One run in detail; with `diff`, each whole diff after it as plain lines (soft wrap: a pipe gets the
    diff as it is, and a terminal wraps a long line without splitting it from its + or -)."""
    console.print(run_detail(run, findings=findings, diff=diff))
    if not diff:
        return
    for p in run.patches:
        if p.text.strip():
            console.print(Text(strip_controls(_diff_name(p)), style="red bold" if p.rejected else "bold"))
            console.print(diff_text(p), soft_wrap=True, end="")


def select(runs: list[RunView], task: str | None) -> list[RunView]:
    return [r for r in runs if task is None or task in (r.task, r.key)]


def render_review(console: Console, results: Results, *, task: str | None = None, sort: SortKey = "job",
                  diff: bool = False, findings: bool = False) -> None:
    """The run list (with the batch's summary tables), and the detail of one run when one is selected (one
    run alone: its detail only, which says all the list would)."""
    runs = sort_runs(select(results.runs, task), sort)
    if not runs:
        raise ReviewError(strip_controls(f"no run of task {task!r} in {results.run_dir}; tasks: "
                                         + ", ".join(sorted({r.task for r in results.runs}))))
    if results.is_batch and task is None:
        for table in summary_tables(results.summary):
            console.print(table)
    detail = task is not None or len(runs) == 1
    if not detail or len(runs) > 1:
        console.print(runs_table(results, runs))
    harnessed = rejections(runs)
    if harnessed:
        console.print(rejections_table(harnessed))
    for r in runs:
        if r.problem:
            console.print(f"[red]{markup_safe(f'{r.key}: {r.problem}')}[/]", highlight=False)
    if detail:
        for r in runs:
            print_run(console, r, diff=diff, findings=findings)
    elif len(runs) > 1:
        console.print("[dim]--task ID shows one task's runs in detail (diff, checks, perf samples, cost).[/]")
