"""Read a results folder (one run or a batch) and show it in the terminal; compare two batches.

Loading is kept apart from drawing so `perfagent report` (html_report.py) shows the very
same records. Every headline number (verdict, speedup, cost, turns, the per-model and
per-task tables) comes from `agent.batch.summary.summarize_run`, the function that writes
summary.json, so the views and summary.json cannot disagree. A job whose report.json is
missing or unreadable is shown as such, never a crash.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rich.console import Console, Group, RenderableType
from rich.markdown import Markdown
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from agent.batch.ledger import JobRecord, Ledger, figures_from_report
from agent.batch.summary import PLAN, BatchSummary, TaskRow, summarize, summarize_run, summary_tables

if TYPE_CHECKING:
    from agent.models.pricing import PriceTable

ARTIFACTS = ("report.json", "trajectory.jsonl", "checks.json", "batch.log")
SortKey = Literal["job", "speedup", "cost", "verdict"]
VERDICT_ORDER = ["pass", "unverified", "fail", "rejected", "error", "no-change", "failed", "skipped",
                 "corrupt report", "missing report", "pending"]
LEVEL_STYLE = {"ok": "green", "warn": "yellow", "bad": "red", "info": ""}


class ReviewError(Exception):
    """A results folder that cannot be reviewed at all (absent, or holding no runs)."""


# -- loading ------------------------------------------------------------------------------------
@dataclass
class RunView:
    """One job as the views show it: the summary's record (numbers) plus the files behind it."""

    key: str  # "<task>/<model-slug>/s<k>" in a batch, the task id for a single run
    task: str
    model: str
    sample: int
    dir: Path
    record: JobRecord | None  # None when the summary does not know the job (no report.json)
    report: dict[str, Any] | None
    problem: str | None = None  # "report.json missing" / "report.json corrupt: ..."
    pending: bool = False  # planned in batch.json, not started: nothing to show yet
    diff: str | None = None
    patch_path: Path | None = None

    @property
    def verdict(self) -> str:
        if self.pending:
            return "pending"
        if self.problem:
            return "missing report" if "missing" in self.problem else "corrupt report"
        if self.record is not None and self.record.status != "done":
            return self.record.status  # failed / skipped: the batch says why in `reason`
        return (self.record.verdict if self.record else None) or "-"

    # The numbers are the summary's record, exactly as summary.json has them (for a corrupt
    # report.json that is what the batch ledger last saw).
    @property
    def speedup(self) -> float | None:
        return self.record.speedup if self.record else None

    @property
    def cost_usd(self) -> float | None:
        return self.record.cost_usd if self.record else None

    @property
    def turns(self) -> int | None:
        return self.record.num_turns if self.record else None

    @property
    def evaluation(self) -> dict[str, Any]:
        ev = (self.report or {}).get("evaluation")
        return ev if isinstance(ev, dict) else {}

    @property
    def perf(self) -> dict[str, Any]:
        p = self.evaluation.get("perf")
        return p if isinstance(p, dict) else {}

    @property
    def interval(self) -> tuple[float, float] | None:
        """The speedup's confidence interval (>1 is better), turned from the ratio's interval."""
        return speedup_interval(self.perf)


@dataclass
class Results:
    run_dir: Path
    run_id: str
    summary: BatchSummary
    runs: list[RunView] = field(default_factory=list)

    @property
    def is_batch(self) -> bool:
        return (self.run_dir / "batch.jsonl").is_file() or any("/" in r.key for r in self.runs)


def load_results(path: str | Path) -> Results:
    """A run folder `results/<run-id>`, or one job folder inside it (then only that job)."""
    path = Path(path)
    if not path.is_dir():
        raise ReviewError(f"{path}: no such results folder")
    run_dir, only = _locate(path)
    summary = _summary(run_dir)
    records = {r.key: r for r in summary.jobs}
    planned = _planned(run_dir)
    keys = set(records) | set(_job_folders(run_dir)) | set(planned)
    if only is not None:
        keys = {k for k in keys if k == only}
    if not keys:
        raise ReviewError(f"{path}: no runs found (expected <job>/report.json under a results/<run-id> folder)")
    slugs = {r.key.split("/")[1]: r.model for r in summary.jobs if r.key.count("/") == 2}
    slugs.update({k.split("/")[1]: m for k, m in planned.items() if k.count("/") == 2})
    runs = [_run_view(run_dir, k, records.get(k), slugs) for k in sorted(keys)]
    return Results(run_dir=run_dir, run_id=run_dir.name, summary=summary, runs=runs)


def _summary(run_dir: Path) -> BatchSummary:
    """The batch's own summary of the run; a report it cannot parse does not take the view down.

    summarize_run is what writes summary.json. If a structurally broken report.json makes it
    raise, summary.json could not have been written from these files either; then the summary
    is made by the same `summarize` from the ledger, or from the reports that do parse.
    """
    try:
        return summarize_run(run_dir)
    except (AttributeError, TypeError, ValueError, KeyError):
        pass
    out_dir, records = run_dir.parent.parent, []
    ledger = Ledger(run_dir)
    base = list(ledger.latest().values()) if ledger.path.is_file() else [
        JobRecord(key=k, **dict(zip(("task", "model", "sample"), _split_key(k, read_report(report)[0]))),
                  status="done", report=report.relative_to(out_dir).as_posix())
        for k in _job_folders(run_dir) if (report := run_dir / k / "report.json").is_file()]
    for r in base:
        report, _ = read_report(out_dir / r.report) if r.report else (None, None)
        records.append(r.model_copy(update=figures_from_report(report)) if report is not None else r)
    return summarize(records, run_id=run_dir.name)


def _locate(path: Path) -> tuple[Path, str | None]:
    """(run folder, job key or None): a job folder is recognised by its artifacts."""
    path = path.resolve()
    if not any((path / a).exists() for a in ARTIFACTS):
        return path, None
    for up in (path.parent, path.parent.parent, path.parent.parent.parent):
        if (up / "batch.jsonl").is_file() or up.parent.name == "results":
            return up, path.relative_to(up).as_posix()
    return path.parent, path.name


def _planned(run_dir: Path) -> dict[str, str]:
    """key -> model of every job in the batch's plan (batch.json), if there is one."""
    try:
        plan = json.loads((run_dir / PLAN).read_text(encoding="utf-8"))
        return {j["key"]: j["model"] for j in plan.get("jobs", [])}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


def _job_folders(run_dir: Path) -> list[str]:
    """Every folder under the run holding any job artifact: finds jobs whose report.json is gone."""
    found = {p.parent for a in ARTIFACTS for p in run_dir.rglob(a)}
    return [d.relative_to(run_dir).as_posix() for d in found if d != run_dir]


def _split_key(key: str, report: dict[str, Any] | None) -> tuple[str, str, int]:
    parts = key.split("/")
    if len(parts) == 3 and parts[2][:1] == "s" and parts[2][1:].isdigit():
        return parts[0], parts[1], int(parts[2][1:])
    model = next(iter((report or {}).get("modelUsage") or {}), "unknown")
    return parts[0], model, 0


def _trajectory_model(job_dir: Path) -> str | None:
    """The model named by the trajectory's first record: who ran a job that left no report."""
    try:
        with (job_dir / "trajectory.jsonl").open(encoding="utf-8") as f:
            first = json.loads(f.readline())
        return str(first["model"]) if isinstance(first, dict) and first.get("model") else None
    except (OSError, ValueError):
        return None


def read_report(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(report, problem): a missing, unreadable or non-result file is a problem, not an exception."""
    if not path.is_file():
        return None, "report.json missing"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return None, f"report.json corrupt: {type(e).__name__}: {e}"
    if not isinstance(data, dict) or data.get("type") != "result":
        return None, "report.json corrupt: not a result object (no \"type\": \"result\")"
    bad = _shape_problem(data)
    return (None, f"report.json corrupt: {bad}") if bad else (data, None)


_OBJECTS = {"usage": dict, "modelUsage": dict, "evaluation": dict, "permission_denials": list}
_EVAL_OBJECTS = ("perf", "reference", "coverage", "correctness", "diff_stats", "hygiene", "environment")


def _shape_problem(report: dict[str, Any]) -> str | None:
    """The first field whose type no reader could use (valid JSON, wrong shape), else None."""
    for key, kind in _OBJECTS.items():
        if report.get(key) is not None and not isinstance(report[key], kind):
            return f"{key} is a {type(report[key]).__name__}, expected a {kind.__name__}"
    if not all(isinstance(v, dict) for v in (report.get("modelUsage") or {}).values()):
        return "modelUsage entries must be objects"
    ev = report.get("evaluation") or {}
    for key in _EVAL_OBJECTS:
        if ev.get(key) is not None and not isinstance(ev[key], dict):
            return f"evaluation.{key} is a {type(ev[key]).__name__}, expected an object"
    return None


def _run_view(run_dir: Path, key: str, record: JobRecord | None, slugs: dict[str, str]) -> RunView:
    out_dir = run_dir.parent.parent
    report_path = out_dir / record.report if record and record.report else run_dir / key / "report.json"
    report, problem = read_report(report_path)
    pending = record is None and not (run_dir / key).is_dir()
    if problem == "report.json missing" and (pending or (record is not None and record.status != "done")):
        problem = None  # a pending, skipped or failed job has no report; the ledger says why
    task, model, sample = (record.task, record.model, record.sample) if record else _split_key(key, report)
    if model == "unknown":
        model = _trajectory_model(run_dir / key) or model
    model = slugs.get(model, model) if record is None else model  # the batch's name for a model slug
    candidates = [out_dir / record.patch] if record and record.patch else []
    candidates += [out_dir / "patches" / run_dir.name / key / "model_patch.diff", run_dir / key / "model_patch.diff"]
    patch = next((p for p in candidates if p.is_file()), None)
    diff = patch.read_text(encoding="utf-8", errors="replace") if patch else None
    view = RunView(key=key, task=task, model=model, sample=sample, dir=run_dir / key, record=record,
                   report=report, problem=problem, pending=pending, diff=diff, patch_path=patch)
    return _probe(view)


def _probe(view: RunView) -> RunView:
    """Draw the run's details once: a value of the wrong type deep inside marks the report corrupt."""
    try:
        check_rows(view), sample_plot(view.perf), token_costs(view.report), fmt_speedup(view)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, ZeroDivisionError) as e:
        view.report, view.problem = None, f"report.json corrupt: {type(e).__name__}: {e}"
    return view


# -- numbers shared by both views ------------------------------------------------------------------
def speedup_interval(perf: dict[str, Any]) -> tuple[float, float] | None:
    lo, hi = perf.get("ci_low"), perf.get("ci_high")
    if not isinstance(lo, (int, float)) or not isinstance(hi, (int, float)) or lo <= 0 or hi <= 0:
        return None
    return (1 / hi, 1 / lo) if perf.get("direction", "lower") == "lower" else (lo, hi)


def sort_runs(runs: list[RunView], by: SortKey = "job") -> list[RunView]:
    """Best first for speedup, cheapest first for cost, pass first for verdict; unknowns last."""
    def rank(v: str) -> int:
        return VERDICT_ORDER.index(v) if v in VERDICT_ORDER else len(VERDICT_ORDER)

    if by == "speedup":
        return sorted(runs, key=lambda r: (r.speedup is None, -(r.speedup or 0), r.key))
    if by == "cost":
        return sorted(runs, key=lambda r: (r.cost_usd is None, r.cost_usd or 0, r.key))
    if by == "verdict":
        return sorted(runs, key=lambda r: (rank(r.verdict), r.key))
    return sorted(runs, key=lambda r: r.key)


def fmt_speedup(run: RunView) -> str:
    if run.speedup is None:
        return "-"
    iv = run.interval
    return f"{run.speedup:.3f}x" + (f" [{iv[0]:.3f}, {iv[1]:.3f}]" if iv else "")


def fmt_usd(x: float | None) -> str:
    return "unknown" if x is None else f"${x:.4f}"


def fmt_cost(run: RunView) -> str:
    """A run's cost; "unknown" only for a run that reported an unpriced model."""
    return "-" if run.record is None or (run.cost_usd is None and run.problem) else fmt_usd(run.cost_usd)


def verdict_level(verdict: str) -> str:
    return {"pass": "ok", "unverified": "warn", "no-change": "info", "skipped": "info", "pending": "info",
            "-": "info"}.get(verdict, "bad")


@dataclass
class CheckRow:
    """One line of a run's check details: what was checked, what came out, how bad."""

    name: str
    text: str
    level: str = "info"  # ok | warn | bad | info


def _cmd(run: Any, enabled: bool = True) -> CheckRow | None:
    if not enabled:
        return CheckRow("", "off for this task", "info")
    if not isinstance(run, dict):
        return CheckRow("", "not run (the plain run failed, or the patch was rejected first)", "info")
    if run.get("passed"):
        return CheckRow("", f"pass ({run.get('duration_s', 0):.1f}s): {run.get('command', '')}", "ok")
    why = "timed out" if run.get("timed_out") else f"exit {run.get('exit_code')}"
    failing = run.get("failing_tests") or []
    return CheckRow("", f"FAIL ({why})" + (f"; failing: {', '.join(failing[:8])}" if failing else ""), "bad")


def _integrity_row(integrity: dict) -> CheckRow:
    """Refusals, flagged lines and an implausible speedup: what a person must look at first."""
    flags = [f"{f.get('path')}:{f.get('line')}: {f.get('reason')}" for f in integrity.get("flags") or []]
    parts = [*(integrity.get("refused") or []), *(f"flagged {f}" for f in flags)]
    if integrity.get("plausibility"):
        parts.append(f"suspicious speedup: {integrity['plausibility']}")
    return CheckRow("integrity", "; ".join(parts) if parts else "ok", "bad" if parts else "ok")


def check_rows(run: RunView) -> list[CheckRow]:
    """The check details of one run, tolerant of partial evaluations (no-change, error)."""
    ev, rows = run.evaluation, []
    if run.pending:
        return [CheckRow("status", "pending: planned in batch.json, not run yet")]
    if run.record is not None and run.record.status != "done":
        rows.append(CheckRow("batch", f"{run.record.status}: {run.record.reason or 'no reason recorded'}",
                             "bad" if run.record.status == "failed" else "info"))
    if run.problem:
        rows.append(CheckRow("report", run.problem, "bad"))
        found = [a for a in ARTIFACTS if (run.dir / a).is_file() and a != "report.json"]
        if "missing" in run.problem:
            rows.append(CheckRow("note", "the run is still going, or it stopped before writing its report"
                                 + (f"; see {', '.join(found)} in {run.dir}" if found else "")))
        return rows
    if not run.report:
        return rows
    if not ev:
        return rows + [CheckRow("evaluation", "none in report.json (the run ended before grading)", "warn")]
    rows.append(CheckRow("verdict", run.verdict, verdict_level(run.verdict)))
    rows += [CheckRow("why", str(r), "warn") for r in ev.get("reasons") or []]
    for key in ("note", "error", "emitted"):
        if ev.get(key):
            rows.append(CheckRow(key, str(ev[key]), "bad" if key == "error" else "info"))
    hyg = ev.get("hygiene") or {}
    if hyg and not hyg.get("ok", True):
        rows.append(CheckRow("patch hygiene", "; ".join(hyg.get("problems") or []), "bad"))
    if "protected_violations" in ev:
        pv = ev.get("protected_violations") or []
        rows.append(CheckRow("protected paths (patch)", "touched: " + ", ".join(pv) if pv else "untouched",
                             "bad" if pv else "ok"))
    integrity = ev.get("integrity") or {}
    if integrity:
        rows.append(_integrity_row(integrity))
    denials = (run.report or {}).get("permission_denials") or []
    rows.append(CheckRow("protected-path attempts", "; ".join(_denial(d) for d in denials) if denials else "none",
                         "warn" if denials else "ok"))
    ds = ev.get("diff_stats") or {}
    if ds:
        rows.append(CheckRow("diff", f"{len(ds.get('files') or [])} file(s), +{ds.get('insertions', 0)} "
                                     f"-{ds.get('deletions', 0)}: {', '.join(ds.get('files') or [])}"))
    corr = ev.get("correctness")
    if isinstance(corr, dict):
        for name, row in (("tests", _cmd(corr.get("plain"))),
                          ("poison run", _cmd(corr.get("poison"), corr.get("poison_enabled", True)))):
            if row:
                rows.append(CheckRow(name, row.text, row.level))
    cov = ev.get("coverage")
    if isinstance(cov, dict):
        rows.append(_coverage_row(cov))
    if run.perf:
        rows.append(_perf_row(run.perf))
    ref = ev.get("reference")
    if isinstance(ref, dict):
        frac = ref.get("fraction_of_reference")
        rows.append(CheckRow("reference patch", ref.get("error") or (
            f"speedup {_num(ref.get('speedup'))}x; fraction achieved " + ("n/a" if frac is None else f"{frac:.2f}")),
            "bad" if ref.get("error") else "info"))
    rows += [CheckRow("warning", str(w), "warn") for w in ev.get("warnings") or []]
    env = ev.get("environment") or {}
    if env:
        rows.append(CheckRow("environment", ", ".join(f"{k} {v}" for k, v in env.items()
                                                      if v and k in ("cpu", "gpu", "torch", "cuda", "python",
                                                                     "isolation", "device"))))
    return rows


def _denial(d: Any) -> str:
    if not isinstance(d, dict):
        return str(d)
    inp = d.get("tool_input") or {}
    target = inp.get("path") if isinstance(inp, dict) else None
    return f"{d.get('tool_name', '?')}({target or ''}): {d.get('reason', '')}"


def _coverage_row(cov: dict[str, Any]) -> CheckRow:
    if cov.get("measured") is False:
        return CheckRow("coverage of changed lines", f"not measured ({cov.get('note') or 'no data'})", "warn")
    changed, covered, uncovered = (cov.get(k) or [] for k in ("changed", "covered", "uncovered"))
    text = f"{len(covered)}/{len(changed)} changed lines executed by the tests"
    if uncovered:
        text += "; NOT executed: " + ", ".join(uncovered)
    if cov.get("unmeasured_files"):
        text += "; no line data for " + ", ".join(cov["unmeasured_files"])
    if cov.get("note"):
        text += f" ({cov['note']})"
    return CheckRow("coverage of changed lines", text, "warn" if uncovered else "ok")


def _num(x: Any, fmt: str = ".3f") -> str:
    return format(x, fmt) if isinstance(x, (int, float)) else "-"


def _perf_row(p: dict[str, Any]) -> CheckRow:
    if p.get("error"):
        return CheckRow("perf", f"error ({p.get('error_side') or '?'}): {str(p['error']).splitlines()[0][:300]}", "bad")
    unit = f" {p['unit']}" if p.get("unit") else ""
    iv = speedup_interval(p)
    text = (f"{p.get('verdict')}: {p.get('metric')} {_num(p.get('baseline_median'), '.4g')}{unit} -> "
            f"{_num(p.get('candidate_median'), '.4g')}{unit}; ratio {_num(p.get('ratio'))} "
            f"[{_num(p.get('ci_low'))}, {_num(p.get('ci_high'))}], p={_num(p.get('p_value'), '.3g')}; "
            f"speedup {_num(p.get('speedup'))}x" + (f" [{iv[0]:.3f}, {iv[1]:.3f}]" if iv else "")
            + f"; {p.get('n_pairs', len(p.get('candidate_samples') or []))} pairs")
    level = {"faster": "ok", "slower": "bad"}.get(p.get("verdict") or "", "warn")
    return CheckRow("perf", text, level)


BARS = "·▁▂▃▄▅▆▇█"


def sample_plot(perf: dict[str, Any], width: int = 40) -> str:
    """The baseline and candidate samples as two histograms on one axis, in text.

    One glance shows whether the two clouds overlap, which the ratio alone hides.
    """
    sides = [("baseline", [float(v) for v in perf.get("baseline_samples") or []]),
             ("candidate", [float(v) for v in perf.get("candidate_samples") or []])]
    values = [v for _, vs in sides for v in vs]
    if not values:
        return ""
    lo, hi = min(values), max(values)
    span = hi - lo

    def column(v: float) -> int:
        return width // 2 if span == 0 else min(width - 1, int((v - lo) / span * width))

    counts = {name: [0] * width for name, _ in sides}
    for name, vs in sides:
        for v in vs:
            counts[name][column(v)] += 1
    top = max(max(c) for c in counts.values())
    unit = f" {perf['unit']}" if perf.get("unit") else ""
    lines = []
    for name, vs in sides:
        bar = "".join(BARS[math.ceil(8 * c / top)] if c else BARS[0] for c in counts[name])
        med = sorted(vs)[len(vs) // 2] if vs else None
        median = f"median {perf.get(f'{name}_median', med):.4g}{unit}" if vs else "no samples"
        lines.append(f"{name:<10} {bar}  {median} (n={len(vs)})")
    left, right = f"{lo:.4g}{unit}", f"{hi:.4g}{unit}"
    lines.append(" " * 11 + left + " " * max(1, width - len(left) - len(right)) + right)
    return "\n".join(lines)


@functools.cache
def _prices() -> PriceTable:
    from agent.models.pricing import load_prices

    return load_prices()


@dataclass
class TokenCost:
    model: str
    kind: str  # input | cache write | cache read | output
    tokens: int
    usd: float | None  # None: the model has no known price


def token_costs(report: dict[str, Any] | None) -> list[TokenCost]:
    """The run's cost split by token type, per model, at the built-in prices.

    report.json gives per-model token counts but one cost per model; the split says where the
    money went (usually cache reads vs output). Cache writes are priced at the 5-minute rate
    unless the report's usage says they were 1-hour writes.
    """
    if not report:
        return []
    prices = _prices()
    usage = report.get("usage") or {}
    creation = usage.get("cache_creation") or {}
    one_hour = int(creation.get("ephemeral_1h_input_tokens") or 0)
    rows = []
    for model, mu in (report.get("modelUsage") or {}).items():
        price = prices.lookup(model)
        write = int(mu.get("cacheCreationInputTokens") or 0)
        w1h = min(write, one_hour) if len(report.get("modelUsage") or {}) == 1 else 0
        kinds = [("input", int(mu.get("inputTokens") or 0), "input"),
                 ("cache write 5m", write - w1h, "cache_write_5m"), ("cache write 1h", w1h, "cache_write_1h"),
                 ("cache read", int(mu.get("cacheReadInputTokens") or 0), "cache_read"),
                 ("output", int(mu.get("outputTokens") or 0), "output")]
        for kind, n, attr in kinds:
            if n or kind in ("input", "output"):
                usd = None if price is None else float(n * getattr(price, attr) / Decimal(1_000_000))
                rows.append(TokenCost(model, kind, n, usd))
    return rows


# -- terminal views --------------------------------------------------------------------------------
def _verdict_text(verdict: str) -> Text:
    return Text(verdict, style=LEVEL_STYLE[verdict_level(verdict)] or "bold")


def runs_table(results: Results, runs: list[RunView]) -> Table:
    t = Table(title=f"{results.run_id}: {len(runs)} run(s)", title_justify="left")
    for col, kw in (("job", {"overflow": "fold"}), ("task", {}), ("model", {}), ("sample", {"justify": "right"}),
                    ("verdict", {}), ("speedup [95% CI]", {"justify": "right"}), ("cost", {"justify": "right"}),
                    ("turns", {"justify": "right"})):
        t.add_column(col, **kw)
    for r in runs:
        t.add_row(r.key, r.task, r.model, f"s{r.sample}", _verdict_text(r.verdict), fmt_speedup(r),
                  fmt_cost(r), "-" if r.turns is None else str(r.turns))
    return t


def run_detail(run: RunView) -> Group:
    """Everything about one run: checks, perf samples, the diff, the agent's summary, the cost."""
    rep = run.report or {}
    head = Text.assemble((f"{run.key}", "bold"), f"  task {run.task} · model {run.model} · sample s{run.sample} · ",
                         _verdict_text(run.verdict))
    if rep:
        head.append(f"\n{rep.get('subtype')} in {rep.get('num_turns')} turns, "
                    f"{(rep.get('duration_ms') or 0) / 1000:.1f}s, cost {fmt_usd(rep.get('total_cost_usd'))}")
    if run.record is not None and run.record.reason:
        head.append(f"\nbatch: {run.record.status}: {run.record.reason}", style="yellow")
    parts: list[RenderableType] = [Panel(head, expand=False)]
    checks = Table(title="checks", title_justify="left", show_header=False)
    checks.add_column("check", style="bold", no_wrap=True)
    checks.add_column("result", overflow="fold")
    for row in check_rows(run):
        checks.add_row(row.name, Text(row.text, style=LEVEL_STYLE[row.level]))
    parts.append(checks)
    plot = sample_plot(run.perf)
    if plot:
        parts.append(Panel(Text(plot), title=f"perf samples: {run.perf.get('metric')} "
                                             f"({run.perf.get('direction', 'lower')} is better)",
                           expand=False, title_align="left"))
    if run.diff is not None:
        parts.append(Panel(Syntax(run.diff, "diff", theme="ansi_dark", word_wrap=True) if run.diff.strip()
                           else Text("(empty diff: no change)"), title=f"diff: {run.patch_path}", title_align="left"))
    if rep.get("result"):
        parts.append(Panel(Markdown(str(rep["result"])), title="agent's final summary", title_align="left"))
    costs = token_costs(rep)
    if costs:
        ct = Table(title="cost by token type", title_justify="left")
        for col in ("model", "type", "tokens", "USD"):
            ct.add_column(col, justify="left" if col in ("model", "type") else "right")
        for c in costs:
            ct.add_row(c.model, c.kind, f"{c.tokens:,}", "-" if c.usd is None else f"${c.usd:.6f}")
        ct.add_row("", "total (report)", "", fmt_usd(rep.get("total_cost_usd")), style="bold")
        parts.append(ct)
    return Group(*parts)


def select(runs: list[RunView], task: str | None) -> list[RunView]:
    return [r for r in runs if task is None or task in (r.task, r.key)]


def render_review(console: Console, results: Results, *, task: str | None = None, sort: SortKey = "job") -> None:
    """The run list (with the batch's summary tables), and the detail of one run when one is selected."""
    runs = sort_runs(select(results.runs, task), sort)
    if not runs:
        raise ReviewError(f"no run of task {task!r} in {results.run_dir}; tasks: "
                          + ", ".join(sorted({r.task for r in results.runs})))
    if results.is_batch and task is None:
        for table in summary_tables(results.summary):
            console.print(table)
    console.print(runs_table(results, runs))
    bad = [r for r in runs if r.problem]
    for r in bad:
        console.print(f"[red]{r.key}: {r.problem}[/]", highlight=False)
    if task is not None or len(runs) == 1:
        for r in runs:
            console.print(run_detail(r))
    elif len(runs) > 1:
        console.print("[dim]--task ID shows one task's runs in detail (diff, checks, perf samples, cost).[/]")


# -- compare ---------------------------------------------------------------------------------------
@dataclass
class CompareRow:
    """One (task, model) across two runs; a side is None when that run lacks it."""

    task: str
    model: str
    a: TaskRow | None
    b: TaskRow | None
    verdicts_a: list[str]
    verdicts_b: list[str]

    @property
    def change(self) -> str:
        if not self.verdicts_a:
            return "new"
        if not self.verdicts_b:
            return "gone"
        if self.a is None or self.b is None:
            return "not comparable"  # one side has runs but no readable report
        ra, rb = self.a.correct / max(self.a.jobs, 1), self.b.correct / max(self.b.jobs, 1)
        if rb != ra:
            return "more correct" if rb > ra else "fewer correct"
        sa, sb = self.a.best_speedup, self.b.best_speedup
        if sa is not None and sb is not None and sa != sb:
            return "faster" if sb > sa else "slower"
        return "same"


def compare_results(a: Results, b: Results) -> list[CompareRow]:
    rows_a = {(t.task, t.model): t for t in a.summary.tasks}
    rows_b = {(t.task, t.model): t for t in b.summary.tasks}

    def verdicts(res: Results, task: str, model: str) -> list[str]:
        return [r.verdict for r in sorted(res.runs, key=lambda r: r.sample) if (r.task, r.model) == (task, model)]

    keys = set(rows_a) | set(rows_b) | {(r.task, r.model) for r in a.runs + b.runs}
    return [CompareRow(t, m, rows_a.get((t, m)), rows_b.get((t, m)), verdicts(a, t, m), verdicts(b, t, m))
            for t, m in sorted(keys)]


def _arrow(x: float | None, y: float | None, fmt: str, unit: str = "") -> str:
    """"a -> b (+delta)": the change of one number between two runs."""
    def f(v: float | None) -> str:
        return "-" if v is None else f"{unit}{v:{fmt}}"

    delta = "" if x is None or y is None or x == y else f" ({'+' if y > x else '-'}{unit}{abs(y - x):{fmt}})"
    return f"{f(x)} -> {f(y)}{delta}"


def compare_table(a: Results, b: Results, rows: list[CompareRow]) -> Table:
    t = Table(title=f"{a.run_id} -> {b.run_id}", title_justify="left")
    for col in ("task", "model", "verdicts", "correct", "best speedup", "cost", "change"):
        t.add_column(col, overflow="fold")
    style = {"new": "cyan", "gone": "magenta", "more correct": "green", "faster": "green",
             "fewer correct": "red", "slower": "red", "same": "dim", "not comparable": "yellow"}
    for r in rows:
        corr = f"{r.a.correct}/{r.a.jobs}" if r.a else "-"
        corr += " -> " + (f"{r.b.correct}/{r.b.jobs}" if r.b else "-")
        t.add_row(r.task, r.model, f"{', '.join(r.verdicts_a) or '-'} -> {', '.join(r.verdicts_b) or '-'}", corr,
                  _arrow(r.a.best_speedup if r.a else None, r.b.best_speedup if r.b else None, ".3f"),
                  _arrow(r.a.cost_usd if r.a else None, r.b.cost_usd if r.b else None, ".4f", "$"),
                  Text(r.change, style=style.get(r.change, "")))
    return t


def model_compare_table(a: Results, b: Results) -> Table:
    ma = {m.model: m for m in a.summary.models}
    mb = {m.model: m for m in b.summary.models}
    t = Table(title="per model", title_justify="left")
    for col in ("model", "correct", "geomean speedup", "cost"):
        t.add_column(col)
    for model in sorted(set(ma) | set(mb)):
        x, y = ma.get(model), mb.get(model)
        t.add_row(model,
                  f"{f'{x.correct}/{x.jobs}' if x else '-'} -> {f'{y.correct}/{y.jobs}' if y else '-'}",
                  _arrow(x.geomean_speedup if x else None, y.geomean_speedup if y else None, ".3f"),
                  _arrow(x.cost_usd if x else None, y.cost_usd if y else None, ".4f", "$"))
    return t


def render_compare(console: Console, a: Results, b: Results) -> list[CompareRow]:
    rows = compare_results(a, b)
    console.print(model_compare_table(a, b))
    console.print(compare_table(a, b, rows))
    for res in (a, b):
        for r in res.runs:
            if r.problem:
                console.print(f"[red]{res.run_id}/{r.key}: {r.problem}[/]", highlight=False)
    return rows
