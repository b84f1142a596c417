"""The verdict on one patch, as a pure function of its evidence and the task: the only place a
verdict is written.

`RULES` is the precedence, strongest first: the first verdict whose rule has something to say
wins, so no weaker verdict can hide a stronger one (an unverified change stays unverified
whatever its speedup). The reasons are every rule's that spoke, in the same order; a change
that fails or is refused is not argued about further (coverage and speed describe a change
that runs correctly).
"""

from __future__ import annotations

from typing import Callable

from agent.checks import clocks, confirm, firstcall
from agent.checks.sanitizer import NOT_STARTED
from agent.checks.evaluation import CommandRun, Evaluation, OutsideClock, PerfResult, ReferenceResult
from agent.checks.evidence import Evidence
from agent.checks.render import compact_lines, device_reads_line, read_line, read_path
from agent.checks.stats import compare_paired, fraction_of_reference, speedup
from agent.checks.verdicts import UNGRADED, PerfVerdict, Verdict
from agent.task import PerfSpec, TaskSpec

Rule = Callable[[Evidence, TaskSpec], list[str]]  # why the verdict it stands for applies; [] when it does not


def could_not_check(e: Evidence, spec: TaskSpec) -> list[str]:
    return [e.error] if e.error is not None else []


def processes_outlived(e: Evidence, spec: TaskSpec) -> list[str]:
    """A command whose processes could not all be ended leaves the sweep's promise unkept: whatever
    they did after it (and to the next command) is unaccounted for, so nothing is graded on it."""
    c, b, i = e.correctness, e.bench_check, e.initcheck
    runs = [e.setup, *((c.plain, c.poison) if c else ()), b.run if b else None, getattr(i, "run", None)]
    return [f"the {r.name} run: {r.escaped}" for r in runs if r is not None and r.escaped]


def changes_nothing(e: Evidence, spec: TaskSpec) -> list[str]:
    return [] if e.changes else ["the patch changes nothing (empty, or only blank lines and trailing spaces)"]


def unclean_patch(e: Evidence, spec: TaskSpec) -> list[str]:
    return [f"patch refused: {p}" for p in e.hygiene.problems]


def rewires_the_tests(e: Evidence, spec: TaskSpec) -> list[str]:
    return [f"patch refused: {r}" for r in e.integrity.refused]


def touches_protected(e: Evidence, spec: TaskSpec) -> list[str]:
    if not e.protected_violations:
        return []
    return ["touches protected paths: " + ", ".join(e.protected_violations)
            + " (checked with the baseline's versions restored)"]


def setup_fails(e: Evidence, spec: TaskSpec) -> list[str]:
    return [f"setup command failed (exit {e.setup.exit_code})"] if e.setup is not None and not e.setup.passed else []


def tests_fail(e: Evidence, spec: TaskSpec) -> list[str]:
    c = e.correctness
    return ["tests fail" + _ids(c.plain)] if c is not None and not c.plain.passed else []


def poisoned_tests_fail(e: Evidence, spec: TaskSpec) -> list[str]:
    """Blames a buffer read before it is written only where poisoning could do anything: without torch the
    poisoned run is the plain run again, so it says only what the plain run's failure does not already say.
    (With torch a test the plain run fails too may still read garbage the poison makes certain: all are named.)"""
    c = e.correctness
    if c is None or c.poison is None or c.poison.passed:
        return []
    run = c.poison
    if not no_torch(e):
        return ["tests fail with uninitialised memory poisoned (a buffer is read before it is written)" + _ids(run)]
    new = [t for t in run.failing_tests if t not in c.plain.failing_tests] if not c.plain.passed else run.failing_tests
    if not c.plain.passed and not new:
        return []
    return ["tests fail on a second run that poisons nothing (the task's interpreter has no torch): "
            "they do not give one answer twice" + _ids(run.model_copy(update={"failing_tests": new}))]


def no_torch(e: Evidence) -> bool:
    """Nothing was poisoned: the task's interpreter has no torch (probed), or no process of the poisoned run
    imported it with the hook (the sanitizer, started beside the poison, says so): the harness's poisoning,
    a torch switch, did nothing."""
    if e.environment.python is not None and e.environment.torch is None:
        return True
    s = e.sanitizer
    return s is not None and not s.measured and NOT_STARTED in (s.note or "")


def reads_before_writes(e: Evidence, spec: TaskSpec) -> list[str]:
    reads = e.sanitizer.reads if e.sanitizer is not None else []
    if not reads:
        return []
    more = f" and {len(reads) - 4} more" if len(reads) > 4 else ""
    return ["buffers read before they are written (sanitizer): " + "; ".join(read_line(r) for r in reads[:4]) + more]


def bench_reads_before_writes(e: Evidence, spec: TaskSpec) -> list[str]:
    b = e.bench_check
    reads = b.sanitizer.reads if b is not None and b.sanitizer is not None else []
    if not reads:
        return []
    more = f" and {len(reads) - 4} more" if len(reads) > 4 else ""
    return ["the bench run under the sanitizer reads buffers before they are written: "
            + "; ".join(read_line(r) for r in reads[:4]) + more]


def bench_fails_poisoned(e: Evidence, spec: TaskSpec) -> list[str]:
    b = e.bench_check
    if b is None or b.run.passed or b.run.timed_out or b.base_fails:
        return []
    how = "under the harness's instruments" if no_torch(e) else "with uninitialised memory poisoned"
    return [f"the bench fails {how} (exit code {b.run.exit_code}), and the unchanged base's does not"]


def device_reads(e: Evidence, spec: TaskSpec) -> list[str]:
    if e.initcheck is None or not e.initcheck.reads:
        return []
    return ["uninitialised device reads (compute-sanitizer initcheck): " + device_reads_line(e.initcheck.reads)]


def candidate_bench_fails(e: Evidence, spec: TaskSpec) -> list[str]:
    p = e.perf
    return [p.error] if p is not None and p.error is not None and p.error_side == "candidate" else []


def gain_refuted(e: Evidence, spec: TaskSpec) -> list[str]:
    """The metric line is the code's word; the harness's own clock on the same processes must not rule
    it out. A clock too noisy to tell leaves the speed "not confirmed" but fails nothing (see grade)."""
    o = outside(e, spec)
    return [f"not confirmed: {o.note}"] if o is not None and o.refuted else []


def changed_lines_unrun(e: Evidence, spec: TaskSpec) -> list[str]:
    cov = e.coverage
    if cov is None:
        return []
    out = []
    if cov.uncovered:
        out.append("changed lines no test executed: " + compact_lines(cov.uncovered))
    if cov.untaken:
        out.append("arms of changed conditionals no test took: " + "; ".join(cov.untaken))
    if cov.not_measured:
        out.append("changed lines whose statements and arms were not measured (no column positions before "
                   "Python 3.11): " + compact_lines(cov.not_measured))
    return out or ([] if cov.measured else [cov.note or "changed-line coverage not measured"])


def reads_unwatched(e: Evidence, spec: TaskSpec) -> list[str]:
    """The patch allocates uninitialised memory and nothing watched its reads: the sanitizer was not
    measured, or initcheck ran but its report did not come back whole (a flooded output, say)."""
    watched = [("", e.sanitizer), *([("the bench run: ", e.bench_check.sanitizer)] if e.bench_check else [])]
    tampered = [f"{where}{s.note}" for where, s in watched if s is not None and s.tampered]
    if not (uninitialised(e) or tampered):
        return []
    out = []
    for where, s in watched:
        if s is not None and not s.measured:
            out.append(where + (s.note or "uninitialised reads not measured"))
    if e.initcheck is not None and not e.initcheck.measured and e.initcheck.run is not None:
        out.append(f"uninitialised device reads not measured: {e.initcheck.note}")
    return out


def memory_unwatched(e: Evidence, spec: TaskSpec) -> list[str]:
    """A changed line makes a tensor over memory no watched allocator made (ctypes, an extension's own):
    neither poison nor the sanitizer can say whether it is written before it is read."""
    found = {u: None for s in (e.sanitizer, e.bench_check.sanitizer if e.bench_check else None)
             if s is not None and s.measured for u in s.unwatched}
    return [f"{u}: not watched by the sanitizer, so nothing shows it is written before it is read" for u in found]


def uninitialised(e: Evidence) -> set[str]:
    """The changed lines that allocate uninitialised memory: as written (`empty(`), or as seen allocating
    by a sanitizer, however the call was spelled."""
    changed = {f"{path}:{n}" for path, lines in e.changed_lines.items() for n in lines}
    seen = {a for s in (e.sanitizer, e.bench_check.sanitizer if e.bench_check else None) if s is not None
            for a in s.allocated}
    return set(e.uninitialised) | (seen & changed)


def allocated_only_in_bench(e: Evidence, spec: TaskSpec) -> list[str]:
    b = e.bench_check
    if b is None or not b.only_here:
        return []
    return [f"{compact_lines(b.only_here)} allocate uninitialised memory only in the bench run (the tests run "
            f"them without): no test checks the values they leave"]


def proof_skipped_by_the_bench(e: Evidence, spec: TaskSpec) -> list[str]:
    """The tests prove a buffer safe at their sizes; the bench runs the allocation but not what follows it there."""
    b = e.bench_check
    return [f"the tests' safety of the buffer allocated uninitialised at {alloc} rests on line"
            f"{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}, which the bench never runs: at the "
            f"bench's sizes the buffer is not proven written, and the bench does not run its reads"
            for alloc, lines in (b.skipped_after.items() if b is not None else ())]


def proof_written_only_at_the_tests_sizes(e: Evidence, spec: TaskSpec) -> list[str]:
    """The tests see a buffer written in full by the call that makes it; at the bench's sizes that call leaves it
    unwritten: the write that proves it safe is taken at the tests' sizes only, however it is spelled."""
    b = e.bench_check
    return [f"the buffer allocated uninitialised at {alloc} is written in full by the time the call that makes it "
            f"returns in every test, but not in the bench's run ({whole} of {made} written in full): at the bench's "
            f"sizes nothing proves it written, and the bench does not run its reads"
            for alloc, (made, whole) in (b.unwritten_by_return.items() if b is not None else ())]


def read_sites_unrun(e: Evidence, spec: TaskSpec) -> list[str]:
    """Passing tests are not enough: every read of a buffer left uninitialised must have run."""
    return [f"{s.buffer.rsplit(':', 1)[0]}:{s.line} reads the buffer allocated uninitialised "
            f"at line {s.buffer.rsplit(':', 1)[1]}{read_path(s)}: no test runs it"
            for s in e.read_sites if not s.executed and not s.bench]


def bench_never_ran_change(e: Evidence, spec: TaskSpec) -> list[str]:
    """The metric says faster, yet the bench's own line records (every process signed) show none of the
    changed source lines ran in it: the gain is noise or the machine, never the change. The speed is "not
    confirmed" (see grade); the change does not fail for that alone. Only where every changed file is
    Python, whose lines the recorder sees (protected test files are already restored to the base's)."""
    b, p = e.bench_check, e.perf
    if b is None or not b.ran_whole or b.ran or p is None or p.verdict != PerfVerdict.FASTER:
        return []
    lines = [f"{path}:{n}" for path, ns in e.changed_lines.items() for n in ns]
    if not lines or not all(path.endswith(".py") for path in e.changed_lines):
        return []
    return ["perf not confirmed: the bench never ran the changed lines: " + compact_lines(lines)]


def clocks_replaced(e: Evidence, spec: TaskSpec) -> list[str]:
    """A bench process whose timing functions were not the interpreter's own timed nothing we can trust;
    one the clock guard could not vouch for where it vouched for every baseline process is not measured."""
    return clocks.findings(e.clocks) if e.clocks is not None else []


def flagged_code(e: Evidence, spec: TaskSpec) -> list[str]:
    return [f"flagged: {f}" for f in e.integrity.flags]


RULES: list[tuple[Verdict, Rule]] = [
    (Verdict.ERROR, could_not_check),
    (Verdict.ERROR, processes_outlived),
    (Verdict.NO_CHANGE, changes_nothing),
    (Verdict.REJECTED, unclean_patch),
    (Verdict.REJECTED, rewires_the_tests),
    (Verdict.REJECTED, touches_protected),
    (Verdict.FAIL, setup_fails),
    (Verdict.FAIL, tests_fail),
    (Verdict.FAIL, poisoned_tests_fail),
    (Verdict.FAIL, reads_before_writes),
    (Verdict.FAIL, bench_reads_before_writes),
    (Verdict.FAIL, bench_fails_poisoned),
    (Verdict.FAIL, device_reads),
    (Verdict.FAIL, candidate_bench_fails),
    (Verdict.FAIL, gain_refuted),
    # a finding a person must look at names the verdict before a proof the tests left short
    (Verdict.SUSPICIOUS, clocks_replaced),
    (Verdict.SUSPICIOUS, flagged_code),
    (Verdict.UNVERIFIED, changed_lines_unrun),
    (Verdict.UNVERIFIED, reads_unwatched),
    (Verdict.UNVERIFIED, memory_unwatched),
    (Verdict.UNVERIFIED, allocated_only_in_bench),
    (Verdict.UNVERIFIED, read_sites_unrun),
    (Verdict.UNVERIFIED, proof_skipped_by_the_bench),
    (Verdict.UNVERIFIED, proof_written_only_at_the_tests_sizes),
    (Verdict.PASS, bench_never_ran_change),  # a word on the speed only: the change does not fail for it
]
# nothing weaker is argued after these
FINAL: frozenset[Verdict] = frozenset({Verdict.ERROR, Verdict.NO_CHANGE, Verdict.REJECTED, Verdict.FAIL})
# what the evaluation reports of the evidence as it was found (perf and integrity get the grade's word added)
CARRIED = sorted((Evidence.model_fields.keys() & Evaluation.model_fields.keys()) - {"perf", "integrity"})


def grade(e: Evidence, spec: TaskSpec) -> Evaluation:
    """The evaluation of the patch `e` describes, under the task's rules; the speed too is judged
    here, again, from the recorded samples (`judged`), so a task changed since is judged by the new one."""
    e = judged(e, spec)
    verdict = Verdict.PASS
    reasons: list[str] = []
    for level, rule in RULES:
        said = rule(e, spec)
        if not said:
            continue
        if verdict == Verdict.PASS:
            verdict = level
        elif verdict in FINAL and level not in FINAL:
            break
        reasons += said
    perf = e.perf
    if perf is not None and spec.perf is not None:
        perf = firstcall.judge(perf, spec.perf)  # the metric's own answer decides whether it is asked
    if perf is not None and perf.outside is not None:
        o = outside(e, spec)
        # a quick check's few pairs rarely let a clock tell; its answer is the agent's guide, not a
        # grade, so only a refutation overrules the metric there (the full check samples until one tells)
        unconfirmed = o is not None and o.confirmed is False and (o.refuted or not e.quick)
        perf = perf.model_copy(update={"outside": o, **({"verdict": PerfVerdict.NOT_CONFIRMED} if unconfirmed
                                                           else {})})
    if perf is not None and perf.verdict == PerfVerdict.FASTER and bench_never_ran_change(e, spec):
        perf = perf.model_copy(update={"verdict": PerfVerdict.NOT_CONFIRMED})  # the change never ran in the bench
    replaced = clocks_replaced(e, spec)
    if replaced and perf is not None and perf.verdict == PerfVerdict.FASTER:
        perf = perf.model_copy(update={"verdict": PerfVerdict.NOT_CONFIRMED})  # timed by a clock of its own
    if replaced and verdict in FINAL and verdict != Verdict.NO_CHANGE:
        reasons += [r for r in replaced if r not in reasons]  # the cause is named beside a stronger verdict too
    note = reasons.pop(0) if verdict == Verdict.NO_CHANGE else None
    carried = {name: getattr(e, name) for name in CARRIED}
    return Evaluation(**carried, verdict=verdict, reasons=reasons, note=note, perf=perf,
                      integrity=e.integrity.model_copy(update={"plausibility": None}))


def nothing_to_grade(verdict: Verdict, why: str) -> Evaluation:
    """The evaluation of a run that leaves nothing to grade (an empty patch, one that does not apply,
    a broken task, an interrupted run): with `grade`, the only writer of a verdict. `why` is the
    error for Verdict.ERROR and the note otherwise."""
    if verdict not in UNGRADED:
        raise ValueError(f"{verdict} needs evidence: only {', '.join(sorted(UNGRADED))} grade nothing")
    if verdict == Verdict.ERROR:
        return Evaluation(verdict=verdict, error=why)
    return Evaluation(verdict=verdict, note=why)


def judged(e: Evidence, spec: TaskSpec) -> Evidence:
    """`e` with its perf comparison (and the reference's) worked out again from the recorded samples
    under the task as it is now: its direction and minimum effect, the level and seed sampling used."""
    if e.perf is None or spec.perf is None:
        return e
    p = judge_perf(e.perf, spec.perf)
    return e.model_copy(update={"perf": p, "reference": judge_reference(p, e.reference)})


def judge_perf(p: PerfResult, task: PerfSpec) -> PerfResult:
    """The paired comparison of the recorded rounds, pure and seeded: what sampling decided when it
    stopped, for the task it had. Figures without recorded pairs (an older report, a failed bench)
    stay as they are: there is nothing to judge them again from."""
    if p.error is not None or not _pairs(p.baseline_samples, p.candidate_samples):
        return p
    c = compare_paired(p.baseline_samples, p.candidate_samples, task.direction, task.min_effect, p.seed,
                       alpha=p.alpha if p.alpha is not None else 0.05, confidence=p.confidence)
    return p.model_copy(update={
        "direction": task.direction, "min_effect": task.min_effect, "baseline_median": c.baseline_median,
        "candidate_median": c.candidate_median, "ratio": c.ratio, "ci_low": c.ci_low, "ci_high": c.ci_high,
        "p_value": c.p_value, "verdict": c.verdict, "precise": c.precise, "cv": c.cv, "rerun_low": c.rerun_low,
        "rerun_high": c.rerun_high})


def judge_reference(p: PerfResult, r: ReferenceResult | None) -> ReferenceResult | None:
    """The reference against the baseline, in the same rounds and at the same per-look level as the
    candidate (sampling stopped on the candidate's answer); as recorded when it has no pairs."""
    if r is None or r.error is not None or p.ratio is None or not _pairs(p.baseline_samples, r.samples):
        return r
    c = compare_paired(p.baseline_samples, r.samples, p.direction, p.min_effect, p.seed,
                       alpha=p.alpha if p.alpha is not None else 0.05, confidence=p.confidence)
    ref_speedup = speedup(c.ratio, p.direction)
    # a share of the reference's gain means something only when both gains are significant
    both_faster = p.verdict == PerfVerdict.FASTER and c.verdict == PerfVerdict.FASTER
    return r.model_copy(update={
        "ratio": c.ratio, "ci_low": c.ci_low, "ci_high": c.ci_high, "p_value": c.p_value, "verdict": c.verdict,
        "speedup": ref_speedup,
        "fraction_of_reference": (fraction_of_reference(speedup(p.ratio, p.direction), ref_speedup) if both_faster
                                  else None)})


def _pairs(baseline: list[float], other: list[float]) -> bool:
    return bool(baseline) and len(baseline) == len(other) and min(baseline) > 0 and min(other) > 0


def decided(e: Evidence, spec: TaskSpec) -> bool:
    """Whether what is gathered so far already fails or refuses the patch: then nothing more is measured."""
    return any(level in FINAL and rule(e, spec) for level, rule in RULES)


def outside(e: Evidence, spec: TaskSpec) -> OutsideClock | None:
    """The outside clock's figures judged under the task as it is now (its `calls`, its `max_speedup`
    hint), so that evidence graded again under a changed task is judged by the new one."""
    p = e.perf
    if p is None or p.outside is None or spec.perf is None:
        return None
    return confirm.judge(p, p.outside, calls=spec.perf.calls or p.lines, max_speedup=spec.perf.max_speedup)


def _ids(run: CommandRun) -> str:
    if run.timed_out:
        return " (timed out)"
    if not run.failing_tests:  # the first explaining line: a GSO test's equivalence message, an import error
        return f" (exit code {run.exit_code}" + (f": {run.first_error})" if run.first_error else ")")
    more = f" and {len(run.failing_tests) - 8} more" if len(run.failing_tests) > 8 else ""
    return ": " + ", ".join(run.failing_tests[:8]) + more + (f" ({run.first_error})" if run.first_error else "")
