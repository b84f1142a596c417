"""Two views of an Evaluation: compact text for the model (run_checks), a table for people."""

from __future__ import annotations

from itertools import groupby

from rich.console import Group
from rich.markup import escape
from rich.table import Table

from agent.checks.evaluation import CommandRun, Evaluation, PerfResult

_COLOR = {"pass": "green", "fail": "red", "rejected": "red", "error": "red", "unverified": "yellow",
          "suspicious": "red", "faster": "green", "slower": "red", "no significant change": "yellow"}


def compact_lines(names: list[str]) -> str:
    """["a.py:3", "a.py:4", "a.py:5", "a.py:9"] -> "a.py:3-5,9": long lists stay readable."""
    parts = []
    pairs = [n.rsplit(":", 1) for n in names]
    for path, group in groupby(pairs, key=lambda x: x[0]):
        nums = sorted(int(n) for _, n in group)
        runs: list[str] = []
        start = prev = nums[0]
        for n in nums[1:] + [None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            runs.append(f"{start}-{prev}" if prev > start else str(start))
            if n is not None:
                start = prev = n
        parts.append(f"{path}:{','.join(runs)}")
    return "; ".join(parts)


def _run_line(run: CommandRun | None, enabled: bool = True) -> str:
    if not enabled:
        return "off for this task"
    if run is None:
        return "skipped (the plain run failed)"
    if run.passed:
        return f"pass ({run.duration_s:.1f}s)"
    why = "timed out" if run.timed_out else f"exit {run.exit_code}"
    tests = f"; failing: {', '.join(run.failing_tests[:8])}" if run.failing_tests else ""
    return f"FAIL ({why}{tests})"


def perf_line(p: PerfResult) -> str:
    if p.error:
        return f"error: {p.error.splitlines()[0][:300]}"
    unit = f" {p.unit}" if p.unit else ""
    return (f"{p.verdict}: {p.metric} {p.baseline_median:.4g}{unit} -> {p.candidate_median:.4g}{unit}, "
            f"ratio {p.ratio:.3f} [{p.ci_low:.3f}, {p.ci_high:.3f}] ({p.confidence:.0%} CI), p={p.p_value:.3g}, "
            f"speedup {p.speedup:.3f}x, {p.n_pairs} pairs" + ("" if p.precise else ", interval wider than min effect"))


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join("    " + ln for ln in text.strip().splitlines()[-lines:])


def summarize(ev: Evaluation) -> str:
    """What the agent reads after run_checks: the verdict, what failed and why, the speedup."""
    out = [f"verdict: {ev.verdict}"]
    out += [f"- {r}" for r in ev.reasons]
    if not ev.hygiene.ok:
        return "\n".join(out)
    if ev.diff_stats.files:
        out.append(f"diff: {len(ev.diff_stats.files)} files, +{ev.diff_stats.insertions} -{ev.diff_stats.deletions}")
    if ev.setup is not None and not ev.setup.passed:
        out.append("setup output (tail):\n" + _tail(ev.setup.output_tail))
    c = ev.correctness
    if c is not None:
        out.append(f"tests: {_run_line(c.plain)}")
        out.append(f"tests with poisoned memory: {_run_line(c.poison, c.poison_enabled)}")
        failed = c.plain if not c.plain.passed else c.poison if c.poison is not None and not c.poison.passed else None
        if failed is not None:
            out.append(f"{failed.name} run output (tail):\n" + _tail(failed.output_tail, 25))
    if ev.coverage is not None:
        cov = ev.coverage
        out.append(f"changed lines executed by tests: {len(cov.covered)}/{len(cov.changed)}"
                   + (f"; NOT executed: {compact_lines(cov.uncovered)}" if cov.uncovered else "")
                   + (f" ({cov.note})" if cov.note else ""))
    if ev.perf is not None:
        out.append("perf: " + perf_line(ev.perf) + (" (quick)" if ev.quick else ""))
    if ev.reference is not None:
        r = ev.reference
        out.append(f"reference: {r.error}" if r.error else
                   f"reference speedup {r.speedup:.3f}x; fraction of it achieved: "
                   + ("n/a" if r.fraction_of_reference is None else f"{r.fraction_of_reference:.2f}"))
    if ev.error:
        out.append(f"error: {ev.error}")
    return "\n".join(out)


def evaluation_table(ev: Evaluation) -> Group:
    """The verdict table of `perfagent check` (and `review`)."""
    t = Table(title=f"{ev.task_id}: [{_COLOR.get(ev.verdict, 'white')}]{ev.verdict}[/]" + (" (quick)" if ev.quick else ""),
              show_header=True, title_justify="left")
    t.add_column("check", style="bold", no_wrap=True)
    t.add_column("result", overflow="fold")
    t.add_row("patch hygiene", "ok" if ev.hygiene.ok else "[red]" + escape("; ".join(ev.hygiene.problems)) + "[/]")
    t.add_row("protected paths", "[red]touched: " + escape(", ".join(ev.protected_violations)) + "[/]"
              if ev.protected_violations else "untouched")
    i = ev.integrity
    t.add_row("integrity", escape(i.summary().removeprefix("integrity: ")) if i.refused or i.flags or i.plausibility
              else "ok")
    d = ev.diff_stats
    t.add_row("diff", f"{len(d.files)} files, +{d.insertions} -{d.deletions}")
    if ev.setup is not None:
        t.add_row("setup", escape(_run_line(ev.setup)))
    if ev.correctness is not None:
        t.add_row("correctness", escape(_run_line(ev.correctness.plain)))
        t.add_row("poison", escape(_run_line(ev.correctness.poison, ev.correctness.poison_enabled)))
    if ev.coverage is not None:
        cov = ev.coverage
        text = f"{len(cov.covered)}/{len(cov.changed)} changed lines executed"
        if cov.uncovered:
            text += "; [yellow]not executed: " + escape(compact_lines(cov.uncovered)) + "[/]"
        if cov.unmeasured_files:
            text += "; no line data for " + escape(", ".join(cov.unmeasured_files))
        if cov.note:
            text += f" ({escape(cov.note)})"
        t.add_row("coverage of change", text)
    if ev.perf is not None:
        color = _COLOR.get(ev.perf.verdict or "error", "red")
        t.add_row("speedup", f"[{color}]{escape(perf_line(ev.perf))}[/]")
    if ev.reference is not None:
        r = ev.reference
        t.add_row("reference", escape(r.error or (
            f"ratio {r.ratio:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}], p={r.p_value:.3g}, speedup {r.speedup:.3f}x; "
            "fraction achieved " + ("n/a" if r.fraction_of_reference is None else f"{r.fraction_of_reference:.2f}"))))
    for reason in ev.reasons:
        t.add_row("why", escape(reason))
    e = ev.environment
    env = Table.grid(padding=(0, 2))
    env.add_row("environment", escape(", ".join(x for x in [
        e.cpu, f"GPU {e.gpu} (driver {e.gpu_driver})" if e.gpu else "no GPU", f"torch {e.torch}" if e.torch else None,
        f"CUDA {e.cuda}" if e.cuda else None, f"python {e.python}" if e.python else None,
        f"isolation {e.isolation}" if e.isolation else None] if x)))
    if e.base_commit:
        env.add_row("commits", f"base {e.base_commit[:12]}, candidate {(e.candidate_commit or '?')[:12]}")
    env.add_row("took", f"{ev.duration_s:.1f}s")
    return Group(t, env)
