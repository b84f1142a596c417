"""One rendering of an Evaluation: compact text for the model, typed rows for people.

The rows are what every human view shows: `perfagent check` draws them as a table, and
`review` and the HTML report add the few rows only a run's report has. `summarize` (what the
agent reads after run_checks) is built from the same per-line functions, so a check reads
the same wherever it is shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby
from typing import Literal

from rich.console import Group
from rich.text import Text

from agent.checks.conditions import busy, busy_why
from agent.checks.confirm import clock_text, seconds
from agent.checks.evaluation import (BenchCheck, CommandRun, CoverageResult, DeviceRead, DiffStats, Environment,
                                     Evaluation, InitcheckResult, OutsideClock, PerfResult, ReadSiteResult,
                                     ReferenceResult, SanitizerResult, UninitRead)
from agent.checks.evidence import Evidence
from agent.checks.integrity import IntegrityResult
from agent.checks.verdicts import PerfVerdict, Verdict
from agent.util.fit import Column, FitTable
from agent.util.text import first_line, tail_lines

Level = Literal["ok", "warn", "bad", "info"]
LEVEL_STYLE: dict[Level, str] = {"ok": "green", "warn": "yellow", "bad": "red", "info": ""}
COVERAGE = "coverage of changed lines"
SANITIZER = "uninitialised reads"
INITCHECK = "initcheck"
READ_SITES = "read sites run"
BENCH_CHECK = "bench run under the sanitizer"
_PERF_LEVEL: dict[str, Level] = {PerfVerdict.FASTER: "ok", PerfVerdict.SLOWER: "bad", PerfVerdict.NOT_CONFIRMED: "bad",
                                  PerfVerdict.SUSPICIOUS: "bad"}
OUTSIDE = "outside clock"
FIRST_CALL = "first call"
_CONFIRMED_LEVEL: dict[bool | None, Level] = {True: "ok", False: "bad", None: "info"}


@dataclass(frozen=True)
class Row:
    """One line of a check table: what was checked, what came out, how bad."""

    name: str
    text: str
    level: Level = "info"


_VERDICT_LEVEL: dict[str, Level] = {Verdict.PASS: "ok", Verdict.UNVERIFIED: "warn", Verdict.NO_CHANGE: "info"}


def verdict_level(verdict: str) -> Level:
    return _VERDICT_LEVEL.get(verdict, "bad")


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


# -- per-line texts, shared by the summary and the rows ----------------------------------------------
def _num(x: float | None, fmt: str = ".3f") -> str:
    """A number that a partial (or foreign) evaluation may lack."""
    return "-" if x is None else format(x, fmt)


def _run_line(run: CommandRun | None, enabled: bool = True) -> str:
    if not enabled:
        return "off for this task"
    if run is None:
        return "skipped (the plain run failed)"
    if run.passed:
        return f"pass ({run.duration_s:.1f}s)"
    why = "timed out" if run.timed_out else f"exit {run.exit_code}"
    tests = (f"; failing: {', '.join(run.failing_tests[:8])}" if run.failing_tests
             else f"; {run.first_error}" if run.first_error else "")
    return f"FAIL ({why}{tests})"


def perf_line(p: PerfResult) -> str:
    if p.error:
        return f"error: {first_line(p.error)}"
    unit = f" {p.unit}" if p.unit else ""
    medians = f"{_num(p.baseline_median, '.4g')}{unit} -> {_num(p.candidate_median, '.4g')}{unit}"
    return (f"{p.verdict}: {p.metric} {medians}, "
            f"ratio {_num(p.ratio)} [{_num(p.ci_low)}, {_num(p.ci_high)}] ({p.confidence:.0%} CI"
            + (f"; a rerun's in [{_num(p.rerun_low)}, {_num(p.rerun_high)}]" if p.rerun_low is not None else "")
            + f"), p={_num(p.p_value, '.3g')}" + (f" (level {p.alpha:.3g} per look)" if p.alpha is not None else "")
            + f", speedup {_num(p.speedup)}x" + (f" ({why}: not comparable with other runs)"
                                                 if (why := busy_why(p.conditions)) else "")
            + f", {p.n_pairs} pairs of samples {p.processes}"
            + (f" (each the median of its {p.lines} lines)" if p.lines > 1 else "")
            + (f", timed with {p.timer}" if p.timer else "")
            + (f", noise cv {p.cv:.1%}" if p.cv is not None else "")
            + (f"; stopped: {p.stop_reason}" if p.stop_reason
               else "" if p.precise else ", interval wider than min effect")
            + (f"; could not tell at this noise (min effect {p.min_effect:.0%})"
               if p.verdict == PerfVerdict.INCONCLUSIVE else ""))


def outside_line(o: OutsideClock) -> str:
    """'confirmed: wall 48.1 ms [45, 51.2 ms] saved per process, cpu ...; metric claims 47.5 ms (5 calls)'."""
    word = ("confirmed" if o.confirmed else "not applied" if o.confirmed is None
            else "NOT confirmed" if o.refuted else "not established")
    seen = ", ".join(f"{name} {clock_text(c)}" for name, c in (("wall", o.wall), ("cpu", o.cpu)) if c is not None)
    claim = (f"metric claims {seconds(o.claimed_s)} ({o.calls} call{'s' if o.calls != 1 else ''})"
             if o.claimed_s is not None else "metric is not a time: its direction only")
    text = f"{word}: " + (f"{seen} saved per process; " if seen else "no outside figures; ") + claim
    return text + (f" ({o.note})" if o.confirmed is None and o.note else
                   f" ({o.note.rsplit('; ', 1)[-1]})" if o.confirmed is False and not o.refuted else "")


def _diff_line(d: DiffStats) -> str:
    return f"{len(d.files)} files, +{d.insertions} -{d.deletions}"


def _coverage_tail(cov: CoverageResult) -> str:
    """What a reader of either view must see about the change's coverage: the lines no test ran."""
    return f"; NOT executed: {compact_lines(cov.uncovered)}" if cov.uncovered else ""


def read_line(read: UninitRead) -> str:
    """One line: what read which buffer, where, in which tests."""
    arg = f" ({read.argument})" if read.argument and not read.argument.startswith("#") else ""
    elems = f", {read.uninitialised} of {read.elements} elements unwritten" if read.elements else ""
    first = f", first at [{', '.join(map(str, read.index))}]" if read.index else ""
    at = f" at {read.at}" + (f" via {read.via}" if read.via else "") if read.at else ""
    tests = f" in {', '.join(read.tests[:3])}" + (f" and {len(read.tests) - 3} more" if len(read.tests) > 3 else "") \
        if read.tests else ""
    return f"{read.buffer} `{read.code}` read by {read.op}{arg}{at}{elems}{first}{tests}"


def read_path(site: ReadSiteResult) -> str:
    """' in f, when cond' for a static read site: which path of the code reaches it."""
    where = f" in {site.function}" if site.function else ""
    return where + (f", when {site.guard}" if site.guard else "")


def blame(ev: Evidence) -> dict[str, str]:
    """"path:line" of each allocation the evidence says must not be uninitialised -> why: a read before any
    write (sanitizer), or a read site no test runs. Names culprits without testing edits one by one."""
    out: dict[str, str] = {}
    for r in ev.sanitizer.reads if ev.sanitizer is not None else []:
        out.setdefault(r.buffer, f"read before written: {read_line(r).split('` ', 1)[-1]}")
    for site in ev.read_sites:
        if not site.executed and not site.bench:
            out.setdefault(site.buffer, f"read at line {site.line}{read_path(site)}: no test runs it")
    return out


def _sanitizer_line(s: SanitizerResult) -> str:
    if not s.measured:
        return s.note or "not measured"
    if not s.reads:
        base = f"; {len(s.elsewhere)} already uninitialised at base" if s.elsewhere else ""
        return "no buffer of the patch read before it is written" + base + _note(s.note)
    return f"{len(s.reads)} read(s) before a write: " + "; ".join(read_line(r) for r in s.reads) + _note(s.note)


def _bench_check_line(b: BenchCheck) -> str:
    """What running the bench once under the instruments showed, and what it could not."""
    run = "ran" if b.run.passed else "timed out" if b.run.timed_out else f"failed (exit code {b.run.exit_code})"
    parts = [f"{run} in {b.run.duration_s:.1f}s"]
    if b.sanitizer is not None:
        parts.append(_sanitizer_line(b.sanitizer))
    if b.ran:
        parts.append(f"ran changed lines {compact_lines(b.ran)} (reads watched, results unchecked)")
    if b.only_here:
        parts.append(f"uninitialised only here: {compact_lines(b.only_here)}")
    return "; ".join(parts) + _note(b.note)


def _bench_check_level(b: BenchCheck) -> Level:
    if (b.sanitizer is not None and b.sanitizer.reads) or (not b.run.passed and not b.run.timed_out
                                                           and not b.base_fails):
        return "bad"
    return "warn" if b.only_here or b.note or (b.sanitizer is not None and not b.sanitizer.measured) else "ok"


def device_reads_line(reads: list[DeviceRead], limit: int = 4) -> str:
    """'k1 (3), host API access by cudaMemcpy source (1) and 2 more': each kernel with its reports,
    cut to a readable length (a template kernel's name runs to hundreds of characters)."""
    def one(r: DeviceRead) -> str:
        name = r.kernel if len(r.kernel) <= 120 else r.kernel[:117] + "..."
        return (name if r.kind == "global read" else f"{r.kind} by {name}") + f" ({r.count})"

    more = f" and {len(reads) - limit} more" if len(reads) > limit else ""
    return ", ".join(one(r) for r in reads[:limit]) + more


def _initcheck_line(i: InitcheckResult) -> str:
    if not i.measured:
        return f"not measured: {i.note}"
    base = f" ({len(i.at_base)} already at base)" if i.at_base else ""
    base += f"; copied along, not used: {device_reads_line(i.copies, 2)}" if i.copies else ""
    if not i.reads:
        return "no uninitialised device reads" + base
    return (f"{len(i.reads)} kernel{'s' if len(i.reads) > 1 else ''} read uninitialised device memory: "
            + device_reads_line(i.reads) + base)


def _read_sites_line(sites: list[ReadSiteResult]) -> str:
    """The count, and the reads no test ran (each one's path is in the verdict's reasons)."""
    missed = sorted({f"{s.buffer.rsplit(':', 1)[0]}:{s.line}" for s in sites if not s.executed and not s.bench},
                    key=lambda n: (n.rsplit(":", 1)[0], int(n.rsplit(":", 1)[1])))
    benched = sum(1 for s in sites if s.bench and not s.executed)
    text = f"{len(sites) - len(missed)}/{len(sites)} read sites of the patch's uninitialised buffers run by the tests"
    text += f" ({benched} of them only by the bench, under the sanitizer)" if benched else ""
    return text + (f"; NOT run: {compact_lines(missed)}" if missed else "")


def _note(text: str | None) -> str:
    return f" ({text})" if text else ""


def _reference_line(r: ReferenceResult) -> str:
    frac = ("n/a (only for a significant speedup)" if r.fraction_of_reference is None
            else f"{r.fraction_of_reference:.2f}")
    return f"speedup {_num(r.speedup)}x; fraction of it achieved: {frac}"


def verdict_line(ev: Evaluation) -> str:
    """One line for a check as it lands: the verdict, then why it failed or how fast it was."""
    why = first_line(ev.reasons[0]) if ev.reasons else first_line(ev.note) if ev.note else ""
    p = ev.perf
    fast = (f"{p.verdict}: ratio {_num(p.ratio)} [{_num(p.ci_low)}, {_num(p.ci_high)}] "
            f"(speedup {_num(p.speedup, '.2f')}x{', busy machine' if busy(p.conditions) else ''}), {p.n_pairs} pairs"
            if p is not None and not p.error and p.ratio is not None else "")
    return " · ".join(x for x in (ev.verdict, why, fast) if x)


def summarize(ev: Evaluation) -> str:
    """What the agent reads after run_checks: the verdict, what failed and why, the speedup."""
    out = [f"verdict: {ev.verdict}"]
    out += [f"- {r}" for r in ev.reasons]
    if not ev.hygiene.ok:
        return "\n".join(out)
    if ev.diff_stats.files:
        out.append(f"diff: {_diff_line(ev.diff_stats)}")
    if ev.setup is not None and not ev.setup.passed:
        out.append("setup output (tail):\n" + tail_lines(ev.setup.output_tail, 15, "    "))
    c = ev.correctness
    if c is not None:
        out.append(f"tests: {_run_line(c.plain)}")
        out.append(f"tests with poisoned memory: {_run_line(c.poison, c.poison_enabled)}")
        failed = c.plain if not c.plain.passed else c.poison if c.poison is not None and not c.poison.passed else None
        if failed is not None:
            out.append(f"{failed.name} run output (tail):\n" + tail_lines(failed.output_tail, 25, "    "))
    if ev.coverage is not None:
        cov = ev.coverage
        out.append(f"changed lines executed by tests: {len(cov.covered)}/{len(cov.changed)}"
                   + _coverage_tail(cov) + _note(cov.note))
    if ev.sanitizer is not None:
        out.append(f"{SANITIZER}: {_sanitizer_line(ev.sanitizer)}")
    if ev.bench_check is not None:
        out.append(f"{BENCH_CHECK}: {_bench_check_line(ev.bench_check)}")
    if ev.initcheck is not None:
        out.append(f"{INITCHECK}: {_initcheck_line(ev.initcheck)}")
    if ev.read_sites:
        out.append(f"{READ_SITES}: {_read_sites_line(ev.read_sites)}")
    if ev.perf is not None:
        out.append("perf: " + perf_line(ev.perf) + (" (quick)" if ev.quick else ""))
        if ev.perf.outside is not None:
            out.append(f"{OUTSIDE}: {outside_line(ev.perf.outside)}")
    if ev.reference is not None:
        r = ev.reference
        out.append(f"reference: {r.error}" if r.error else f"reference {_reference_line(r)}")
    if ev.error:
        out.append(f"error: {ev.error}")
    return "\n".join(out)


# -- rows -------------------------------------------------------------------------------------------
def _run_row(name: str, run: CommandRun | None, enabled: bool = True) -> Row:
    level: Level = "info" if run is None or not enabled else "ok" if run.passed else "bad"
    return Row(name, _run_line(run, enabled), level)


def _integrity_row(i: IntegrityResult) -> Row:
    """Refusals and flagged lines, all of them: what a person must look at first (and an older
    report's implausible speedup: a fixed bound, since replaced by the outside clock)."""
    parts = [*i.refused, *(f"flagged {f}" for f in i.flags)]
    if i.plausibility:
        parts.append(f"suspicious speedup: {i.plausibility}")
    return Row("integrity", "; ".join(parts) or "ok", "bad" if parts else "ok")


def _coverage_row(cov: CoverageResult) -> Row:
    if not cov.measured:
        return Row(COVERAGE, f"not measured ({cov.note or 'no data'})", "warn")
    text = f"{len(cov.covered)}/{len(cov.changed)} changed lines executed by the tests" + _coverage_tail(cov)
    if cov.unmeasured_files:
        text += "; no line data for " + ", ".join(cov.unmeasured_files)
    text += _note(cov.note) + "; in-process evidence: rows signed by the hook"
    return Row(COVERAGE, text, "warn" if cov.uncovered else "ok")


def _perf_row(p: PerfResult) -> Row:
    return Row("perf", perf_line(p), "bad" if p.error else _PERF_LEVEL.get(p.verdict or "", "warn"))


def _reference_row(r: ReferenceResult) -> Row:
    if r.error:
        return Row("reference patch", r.error, "bad")
    ratio = (f"ratio {_num(r.ratio)} [{_num(r.ci_low)}, {_num(r.ci_high)}], p={_num(r.p_value, '.3g')}; "
             if r.ratio is not None else "")
    return Row("reference patch", ratio + _reference_line(r))


_WORDS = {"task_id", "verdict", "reasons", "quick", "duration_s", "error", "emitted", "note", "warnings"}


def _checked_nothing(ev: Evaluation) -> bool:
    """An evaluation with words but no evidence (a patch that did not apply): every check at its default."""
    return ev.model_dump(exclude=_WORDS) == Evaluation(verdict=ev.verdict).model_dump(exclude=_WORDS)


def evaluation_rows(ev: Evaluation) -> list[Row]:
    """Every check of one evaluation, worst news first; a partial evaluation gives fewer rows."""
    rows = [Row("why", r, "warn") for r in ev.reasons]
    words: list[tuple[str, str | None, Level]] = [("error", ev.error, "bad"), ("note", ev.note, "info"),
                                                  ("emitted", ev.emitted, "info")]
    rows += [Row(name, text, level) for name, text, level in words if text]
    if ev.verdict == Verdict.NO_CHANGE or _checked_nothing(ev):  # rows saying "ok" would claim checks that never ran
        return rows
    problems, pv = ev.hygiene.problems, ev.protected_violations
    rows.append(Row("patch hygiene", "ok", "ok") if ev.hygiene.ok else Row("patch hygiene", "; ".join(problems), "bad"))
    rows.append(Row("protected paths", "touched: " + ", ".join(pv), "bad") if pv else
                Row("protected paths", "untouched", "ok"))
    rows.append(_integrity_row(ev.integrity))
    d = ev.diff_stats
    rows.append(Row("diff", _diff_line(d) + (": " + ", ".join(d.files) if d.files else "")))
    if ev.setup is not None:
        rows.append(_run_row("setup", ev.setup))
    if ev.correctness is not None:
        rows.append(_run_row("correctness", ev.correctness.plain))
        rows.append(_run_row("poison run", ev.correctness.poison, ev.correctness.poison_enabled))
    if ev.coverage is not None:
        rows.append(_coverage_row(ev.coverage))
    if ev.sanitizer is not None:
        s = ev.sanitizer
        rows.append(Row(SANITIZER, _sanitizer_line(s), "warn" if not s.measured else "bad" if s.reads else "ok"))
    if ev.bench_check is not None:
        rows.append(Row(BENCH_CHECK, _bench_check_line(ev.bench_check), _bench_check_level(ev.bench_check)))
    if ev.initcheck is not None:
        i = ev.initcheck
        rows.append(Row(INITCHECK, _initcheck_line(i), "warn" if not i.measured else "bad" if i.reads else "ok"))
    if ev.read_sites:
        missed = any(not s.executed and not s.bench for s in ev.read_sites)
        rows.append(Row(READ_SITES, _read_sites_line(ev.read_sites), "warn" if missed else "ok"))
    if ev.perf is not None:
        rows.append(_perf_row(ev.perf))
        o = ev.perf.outside
        if o is not None:
            rows.append(Row(OUTSIDE, outside_line(o), "warn" if o.confirmed is False and not o.refuted
                            else _CONFIRMED_LEVEL[o.confirmed]))
        f = ev.perf.first_call
        if f is not None and f.note:
            rows.append(Row(FIRST_CALL, f.note, "ok" if f.verdict == PerfVerdict.FASTER else "bad"))
    if ev.reference is not None:
        rows.append(_reference_row(ev.reference))
    return rows + [Row("warning", w, "warn") for w in ev.warnings]


def _environment_text(e: Environment) -> str:
    return ", ".join(x for x in [
        e.cpu, f"GPU {e.gpu} (driver {e.gpu_driver})" if e.gpu else "no GPU", f"torch {e.torch}" if e.torch else None,
        f"CUDA {e.cuda}" if e.cuda else None, f"python {e.python}" if e.python else None,
        f"isolation {e.isolation}" if e.isolation else None, f"device {e.device}" if e.device else None] if x)


def _clocks_text(e: Environment) -> str:
    """The clocks at probe time, for a reader to judge whether two reports' timings compare."""
    gpu = None
    if e.gpu_sm_clock_mhz is not None:
        gpu = f"GPU SM {e.gpu_sm_clock_mhz}" + (f"/{e.gpu_max_sm_clock_mhz}" if e.gpu_max_sm_clock_mhz else "") + " MHz"
        gpu += f", memory {e.gpu_mem_clock_mhz} MHz" if e.gpu_mem_clock_mhz is not None else ""
        gpu += {True: " (locked)", False: " (not locked)", None: ""}[e.gpu_clocks_locked]
    cpu = f"CPU {e.cpu_mhz:.0f} MHz" if e.cpu_mhz else None
    cpu = f"{cpu or 'CPU'} ({e.cpu_governor})" if e.cpu_governor else cpu
    return "; ".join(x for x in (gpu, cpu) if x)


def environment_rows(ev: Evaluation) -> list[Row]:
    """Where and how long the numbers were taken; nothing when the evaluation probed no machine."""
    e = ev.environment
    if e == Environment():
        return []
    rows = [Row("environment", _environment_text(e))]
    if clocks := _clocks_text(e):
        rows.append(Row("clocks", clocks))
    if e.base_commit:
        rows.append(Row("commits", f"base {e.base_commit[:12]}, candidate {(e.candidate_commit or '?')[:12]}"))
    return rows + [Row("took", f"{ev.duration_s:.1f}s")]


def rows_table(rows: list[Row], *, title: str | Text | None = None, show_header: bool = True,
               boxed: bool = True) -> FitTable:
    """Rows drawn as a two-column table, each result coloured by its level, that fits the terminal's width
    without breaking a word (`agent.util.fit`); only a path or test id longer than the column folds."""
    t = FitTable([Column("check", style="bold", most=0.2), Column("result", long_words=True)], title=title,
                 show_header=show_header, boxed=boxed)
    for row in rows:
        t.add_row(row.name, Text(row.text, style=LEVEL_STYLE[row.level]))
    return t


def evaluation_table(ev: Evaluation) -> Group:
    """The verdict table of `perfagent check`, with where and how long it was measured beneath."""
    title = Text.assemble(f"{ev.task_id}: ", (ev.verdict, LEVEL_STYLE[verdict_level(ev.verdict)] or "bold"),
                          " (quick)" if ev.quick else "")
    env = FitTable([Column("what"), Column("where", long_words=True)],
                   [(row.name, Text(row.text)) for row in environment_rows(ev)], show_header=False, boxed=False)
    return Group(rows_table(evaluation_rows(ev), title=title), env)
