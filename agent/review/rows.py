"""What the terminal and the HTML page show of a run, already in words: one view model, two drawings.

Checks are `agent.checks.render`'s rows of the evaluation (the very rows `perfagent check`
prints) plus the few only a run's report has: the batch's status, the verdict, the agent's
attempts on protected paths. Numbers are formatted here once, so both views read alike.
An external agent's run adds its claims beside our evidence, worded once here for both.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Literal

from agent.agents import OWN_AGENT, split_spec
from agent.checks.conditions import busy
from agent.checks.evaluation import Evaluation, PerfResult
from agent.checks.render import Level, Row, environment_rows, evaluation_rows
from agent.checks.render import verdict_level as evaluation_level
from agent.checks.verdicts import Verdict
from agent.models.base import Usage
from agent.results.report import AgentRound, AgentRun, ModelUsage, PermissionDenial, Report
from agent.review.load import ARTIFACTS, PatchFile, RunView
from agent.util.text import strip_controls

if TYPE_CHECKING:
    from agent.models.pricing import PriceTable

SortKey = Literal["job", "speedup", "cost", "verdict"]
VERDICT_ORDER = [Verdict.PASS, Verdict.UNVERIFIED, Verdict.FAIL, Verdict.REJECTED, Verdict.SUSPICIOUS, Verdict.ERROR,
                 "error_max_turns", "error_max_budget", "error_during_execution", "no change", Verdict.NO_CHANGE,
                 "failed", "skipped", "corrupt report", "missing report", "running", "pending"]
EMPTY_PATCH = "empty diff: no change was emitted"


# -- verdicts, sorting, numbers ------------------------------------------------------------------------
def verdict_level(verdict: str) -> Level:
    """A run's verdict adds words an evaluation never has: not run yet, skipped, no verdict, no change."""
    return "info" if verdict in ("skipped", "pending", "running", "-", "no change") else evaluation_level(verdict)


def run_outcome(run: RunView) -> str:
    """What the run came to, as the batch's tables count it (`JobRecord.outcome`): an error
    subtype wins over the verdict (a run that hit max turns is never shown "pass"), an empty submission
    is "no change"; a pending job, or one whose report is missing or corrupt, says so."""
    if run.pending or run.running or run.problem or run.record is None:
        return run.verdict
    return run.record.outcome


def sort_runs(runs: list[RunView], by: SortKey = "job") -> list[RunView]:
    """Best first for speedup, cheapest first for cost, pass first for verdict; unknowns last."""
    def rank(v: str) -> int:
        return VERDICT_ORDER.index(v) if v in VERDICT_ORDER else len(VERDICT_ORDER)

    if by == "speedup":
        return sorted(runs, key=lambda r: (r.speedup is None, -(r.speedup or 0), r.key))
    if by == "cost":
        return sorted(runs, key=lambda r: (r.cost_usd is None, r.cost_usd or 0, r.key))
    if by == "verdict":
        return sorted(runs, key=lambda r: (rank(run_outcome(r)), r.key))
    return sorted(runs, key=lambda r: r.key)


def fmt_speedup(run: RunView) -> str:
    if run.speedup is None:
        return "-"
    iv = run.interval
    return (f"{run.speedup:.3f}x" + (f" [{iv[0]:.3f}, {iv[1]:.3f}]" if iv else "")
            + (" (busy machine)" if run.perf is not None and busy(run.perf.conditions) else ""))


def fmt_usd(x: float | None) -> str:
    return "unknown" if x is None else f"${x:.4f}"


def fmt_cost(run: RunView) -> str:
    """A run's cost; "unknown" only for a run that reported an unpriced model."""
    return "-" if run.record is None or (run.cost_usd is None and run.problem) else fmt_usd(run.cost_usd)


def run_summary(report: Report) -> str:
    """How the run ended, in one line: "success in 6 turns, 42.0s"."""
    return f"{report.subtype} in {report.num_turns} turns, {report.duration_ms / 1000:.1f}s"


# -- checks ---------------------------------------------------------------------------------------------
def check_rows(run: RunView) -> list[Row]:
    """The check details of one run: the evaluation's rows framed by what only the run knows."""
    if run.pending:
        return [Row("status", "pending: planned in batch.json, not run yet")]
    if run.running:
        return [Row("status", "running: a live process is writing this job; its report comes when it ends")]
    rows: list[Row] = []
    if run.record is not None and run.record.status != "done":
        rows.append(Row("batch", f"{run.record.status}: {run.record.reason or 'no reason recorded'}",
                        "bad" if run.record.status == "failed" else "info"))
    rep = run.report
    if rep is not None and not run.problem and (rep.is_error or rep.subtype != "success"):
        said = printable(rep.result.strip().splitlines()[0]) if rep.result.strip() else "no result"
        rows.append(Row("run ended", f"{rep.subtype}: {said} (a failure, whatever its last passing patch graded)",
                        "bad"))
    if run.problem:
        rows.append(Row("report", run.problem, "bad"))
        found = [a for a in ARTIFACTS if (run.dir / a).is_file() and a != "report.json"]
        if "missing" in run.problem:
            rows.append(Row("note", "the run is still going, or it stopped before writing its report"
                            + (f"; see {', '.join(found)} in {run.dir}" if found else "")))
        return rows
    if run.report is None:
        return rows
    ev = run.report.evaluation
    if ev is None:
        return rows + [Row("evaluation", "none in report.json (the run ended before grading)", "warn"),
                       *left_out_rows(run.report)]
    denials = run.report.permission_denials
    return [*rows, Row("verdict", run.verdict, verdict_level(run.verdict)), *evaluation_rows(ev),
            Row("protected-path attempts", "; ".join(_denial(d) for d in denials) if denials else "none",
                "warn" if denials else "ok"),
            *left_out_rows(run.report), *environment_rows(ev)]


LEFT_OUT_ROWS = 10  # files named in a view; report.json lists them all


def left_out_rows(report: Report) -> list[Row]:
    """The files of the working tree left out of the graded and emitted change, each with its size and why."""
    left = report.left_out
    rows = [Row("left out", printable(x.line()), "warn") for x in left[:LEFT_OUT_ROWS]]
    if len(left) > LEFT_OUT_ROWS:
        rows.append(Row("left out", f"... and {len(left) - LEFT_OUT_ROWS} more (report.json lists them all)", "warn"))
    return rows


def _denial(d: PermissionDenial) -> str:
    return f"{d.tool_name}({d.tool_input.get('path') or ''}): {d.reason}"


# -- an external agent: its claims beside our evidence -----------------------------------------------
CLAIM_LINES = 3  # of the agent's final message, in the claims table; the whole message is kept beside it


def contestant(spec: str, agent: AgentRun | None = None) -> str:
    """Who ran: "claude-code · claude-sonnet-4-5" for an external agent, the model spec for our own loop."""
    if agent is not None:
        return f"{agent.name} · {agent.model}"
    name, model = split_spec(spec)
    return spec if name == OWN_AGENT or not model else f"{name} · {model}"


def printable(text: str) -> str:
    """The agent's text without escape sequences or control characters, lines kept: an escape sequence in a
    claim must not drive a terminal (`agent.util.text.strip_controls`, the one stripper)."""
    return strip_controls(text, multiline=True)


@dataclass(frozen=True)
class ClaimRow:
    """One session of an external agent: what it said when it exited, and what our checks measured."""

    session: str  # "round 1 · exit 0 · 1.0s", and why it ended when not by itself
    claimed: str  # "claimed: <the first lines of its final message>"
    measured: str  # "measured: <our verdict> — <the reasons>"
    level: Level  # the measured verdict's
    against: str = ""  # what the evidence says of what the claim names, a line each ("" if nothing)


def claim_vs_evidence(claim: str, verdict: str, reasons: list[str]) -> tuple[str, str]:
    """The wording of "claimed: ..." beside "measured: ...", the one both views print."""
    lines = [ln.strip() for ln in printable(claim).splitlines() if ln.strip()]
    more = len(lines) - CLAIM_LINES
    said = "\n".join(lines[:CLAIM_LINES]) + (f"\n… (+{more} lines)" if more > 0 else "")
    measured = f"measured: {verdict or 'not graded'}" + (" — " + "; ".join(reasons) if reasons else "")
    return f"claimed: {said or '(no final message)'}", printable(measured)


def against_claim(notes: Sequence[str]) -> str:
    """What the evidence says of what a claim names, shown under the claim as a warning."""
    return printable("\n".join(f"but: {n}" for n in notes))


def evidence_reasons(evidence: str) -> list[str]:
    """The key findings in a round's evidence (`agent.checks.render.summarize`'s text): its reasons,
    else its perf line; evidence that is no evaluation (the agent left no change) is its own reason."""
    lines = evidence.strip().splitlines()
    if not lines or not lines[0].startswith("verdict:"):
        return lines[:1]
    reasons = [ln[2:] for ln in lines if ln.startswith("- ")]
    return reasons or [ln for ln in lines if ln.startswith("perf: ")][:1]


def _session(r: AgentRound) -> str:
    exit_code = "no exit code" if r.exit_code is None else f"exit {r.exit_code}"
    return f"round {r.round} · {exit_code} · {r.duration_ms / 1000:.1f}s" + (f"\nended: {r.note}" if r.note else "")


def _claim_row(session: str, claim: str, verdict: str, reasons: list[str], notes: Sequence[str] = ()) -> ClaimRow:
    claimed, measured = claim_vs_evidence(claim, verdict, reasons)
    return ClaimRow(session, claimed, measured, verdict_level(verdict or "error"), against_claim(notes))


def claim_rows(agent: AgentRun, evaluation: Evaluation | None) -> list[ClaimRow]:
    """Each session's claim beside our grading of its diff; without sessions, the last claim beside the final grade."""
    if agent.rounds:
        return [_claim_row(_session(r), r.claim, r.verdict, evidence_reasons(r.evidence), r.claim_notes)
                for r in agent.rounds]
    if evaluation is None:
        return [_claim_row("final", agent.claim, "", ["no evaluation in report.json"])]
    return [_claim_row("final", agent.claim, evaluation.verdict, evaluation.reasons)]


def agent_rows(run: RunView) -> list[Row]:
    """Who the agent was, its own cost against the relay's, what the relay refused, where its outputs are kept."""
    agent, rep = run.agent, run.report
    if agent is None or rep is None:
        return []
    own = "not reported" if agent.own_cost_usd is None else fmt_usd(agent.own_cost_usd)
    cost = f"its own figure {own} vs relay-metered {fmt_usd(rep.total_cost_usd)} (the one counted)"
    note = f" — {agent.cost_note}" if agent.cost_note else ""
    refused = [printable(r) for r in agent.refused]
    rows = [Row("agent", f"{agent.name} {agent.version or '(version unknown)'} · model {agent.model}"),
            Row("cost", cost + note, "warn" if note else "ok"),
            Row("refused network", "; ".join(refused) if refused else "none", "warn" if refused else "ok")]
    for name, rel in agent.files.items():
        path = run.dir / rel
        rows.append(Row(f"kept {name}", str(path) + ("" if path.is_file() else " (missing)"),
                        "info" if path.is_file() else "warn"))
    return rows


# -- diffs ----------------------------------------------------------------------------------------------
def patch_title(p: PatchFile) -> str:
    """Says which diff it is: a rejected one was graded (failing) but never emitted."""
    return f"{'rejected change (not emitted)' if p.rejected else 'diff'}: {p.path}"


def patch_cut_note(p: PatchFile) -> str:
    """'' for a diff shown whole; else its size, that only its start is shown, and where the whole one is."""
    if not p.cut:
        return ""
    return f"cut: the first {p.shown:,} of {p.size:,} bytes are shown; the whole diff is {p.path}"


@dataclass(frozen=True)
class FileStat:
    """One file of a diff, as `git diff --stat` counts it."""

    path: str
    added: int
    removed: int


_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def _stat_path(name: str) -> str:
    name = name.split("\t")[0].strip().strip('"')
    return name[2:] if name[:2] in ("a/", "b/") else name


def diff_stat(diff: str) -> list[FileStat]:
    """Per file, the lines a unified diff adds and removes, read hunk by hunk (a removed line that reads
    "--- x" is a line, not a header); a file with no hunk (a rename, a mode change) counts 0."""
    files: list[list] = []  # [path, added, removed, seen a hunk]
    old = new = 0
    for line in diff.splitlines():
        if old > 0 or new > 0:
            tag = line[:1]
            if tag != "\\" and files:
                files[-1][1] += tag == "+"
                files[-1][2] += tag == "-"
                old -= tag in ("-", " ", "")
                new -= tag in ("+", " ", "")
            continue
        if line.startswith("diff --git "):
            files.append([_stat_path(line.rsplit(" ", 1)[-1]), 0, 0, False])
        elif line.startswith("--- ") and (not files or files[-1][3]):
            files.append([_stat_path(line[4:]), 0, 0, False])  # a plain unified diff: no "diff --git" lines
        elif line.startswith("+++ ") and files and _stat_path(line[4:]) != "/dev/null":
            files[-1][0] = _stat_path(line[4:])
        elif (m := _HUNK.match(line)) and files:
            old, new = int(m.group(1) or 1), int(m.group(2) or 1)
            files[-1][3] = True
    return [FileStat(path, added, removed) for path, added, removed, _ in files]


# -- the agent's final summary ----------------------------------------------------------------------------
SUMMARY_LINES = 3  # of the summary's first paragraph, on one screen; `review --findings` shows it whole
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")  # a list starts a new block, as a paragraph's end does


def summary_head(text: str, lines: int = SUMMARY_LINES) -> tuple[str, int]:
    """The start of an agent's final summary (its first paragraph, at most `lines` lines) and how many of its
    other non-blank lines are left out: the rules policy's summary runs to hundreds of lines of decisions and
    lint findings, which would push the verdict off the screen."""
    body = printable(text).strip().splitlines()
    head: list[str] = []
    for ln in body:
        said = any(not h.lstrip().startswith("#") for h in head)  # a heading alone says nothing yet
        if not ln.strip() and not said:
            continue
        if not ln.strip() or len(head) == lines or (said and _LIST_ITEM.match(ln)):
            break
        head.append(ln)
    return "\n".join(head), sum(1 for ln in body if ln.strip()) - len(head)


# -- one screen of checks ---------------------------------------------------------------------------------
QUIET_TEXTS = ("ok", "untouched", "none")  # a row that says only this has nothing to read


def screen_rows(rows: list[Row], evaluation: Evaluation | None, *, without: Sequence[str] = ()) -> list[Row]:
    """A run's check rows for one screen: the rows that only say "ok" folded into one row naming them, the
    rows of where the numbers were taken joined into one, and the rows named in `without` (shown elsewhere on
    the screen) left out. Nothing else changes: a warning or a failure keeps its own row."""
    env = {r.name for r in environment_rows(evaluation)} if evaluation is not None else set()
    quiet = [i for i, r in enumerate(rows) if r.level == "ok" and r.text in QUIET_TEXTS]
    quiet = quiet if len(quiet) > 1 else []
    where = [i for i, r in enumerate(rows) if r.name in env]
    out: list[Row] = []
    for i, r in enumerate(rows):
        if quiet and i == quiet[0]:
            out.append(Row("ok", ", ".join(rows[q].name for q in quiet), "ok"))
        elif where and i == where[0]:
            out.append(Row("measured on", "; ".join(rows[w].text if rows[w].name == "environment"
                                                    else f"{rows[w].name} {rows[w].text}" for w in where)))
        elif r.name not in without and i not in quiet and i not in where:
            out.append(r)
    return out


# -- perf samples ----------------------------------------------------------------------------------------
BARS = "·▁▂▃▄▅▆▇█"


def plot_title(perf: PerfResult) -> str:
    return f"perf samples: {perf.metric} ({perf.direction} is better)"


def sample_plot(perf: PerfResult | None, width: int = 40) -> str:
    """The baseline and candidate samples as two histograms on one axis, in text.

    One glance shows whether the two clouds overlap, which the ratio alone hides.
    """
    if perf is None:
        return ""
    sides = [(name, [v for v in samples if math.isfinite(v)], median)  # JSON allows NaN; no place on an axis
             for name, samples, median in (("baseline", perf.baseline_samples, perf.baseline_median),
                                           ("candidate", perf.candidate_samples, perf.candidate_median))]
    values = [v for _, vs, _ in sides for v in vs]
    if not values:
        return ""
    lo, hi = min(values), max(values)
    span = hi - lo

    def column(v: float) -> int:
        return width // 2 if span == 0 else min(width - 1, int((v - lo) / span * width))

    counts = {name: [0] * width for name, _, _ in sides}
    for name, vs, _ in sides:
        for v in vs:
            counts[name][column(v)] += 1
    top = max(max(c) for c in counts.values())
    unit = f" {perf.unit}" if perf.unit else ""
    lines = []
    for name, vs, median in sides:
        bar = "".join(BARS[math.ceil(8 * c / top)] if c else BARS[0] for c in counts[name])
        if median is None and vs:
            median = sorted(vs)[len(vs) // 2]
        text = f"median {median:.4g}{unit}" if vs and median is not None else "no samples"
        lines.append(f"{name:<10} {bar}  {text} (n={len(vs)})")
    left, right = f"{lo:.4g}{unit}", f"{hi:.4g}{unit}"
    lines.append(" " * 11 + left + " " * max(1, width - len(left) - len(right)) + right)
    return "\n".join(lines)


# -- cost by token type ----------------------------------------------------------------------------------
@functools.cache
def _prices() -> PriceTable:
    from agent.models.pricing import load_prices

    return load_prices()


@dataclass
class TokenCost:
    model: str
    kind: str  # input | cache write 5m | cache write 1h | cache read | output
    tokens: int
    usd: float | None  # None: the model has no known price


TOKEN_KINDS = (("input", "input_tokens", "input"), ("cache write 5m", "cache_write_5m", "cache_write_5m"),
               ("cache write 1h", "cache_write_1h", "cache_write_1h"), ("cache read", "cache_read", "cache_read"),
               ("output", "output_tokens", "output"))  # (row, Usage field, Price field)


def _usage(mu: ModelUsage, one_hour: int) -> Usage:
    w1h = min(mu.cacheCreationInputTokens, one_hour)
    return Usage(input_tokens=mu.inputTokens, output_tokens=mu.outputTokens, cache_read=mu.cacheReadInputTokens,
                 cache_write_5m=mu.cacheCreationInputTokens - w1h, cache_write_1h=w1h)


def token_costs(report: Report | None) -> list[TokenCost]:
    """The run's cost split by token type, per model, at the built-in prices.

    report.json gives per-model token counts but one cost per model; the split says where the
    money went (usually cache reads vs output). Per-model counts do not split cache writes by
    lifetime; the report's total does, which is that model's when the run used only one.
    """
    if report is None:
        return []
    one_hour = report.usage.to_usage().cache_write_1h if len(report.modelUsage) == 1 else 0
    rows: list[Row] = []
    for model, mu in report.modelUsage.items():
        price, usage = _prices().lookup(model), _usage(mu, one_hour)
        for kind, count, price_field in TOKEN_KINDS:
            n = getattr(usage, count)
            if n or kind in ("input", "output"):
                usd = None if price is None else float(n * getattr(price, price_field) / Decimal(1_000_000))
                rows.append(TokenCost(model, kind, n, usd))
    return rows
