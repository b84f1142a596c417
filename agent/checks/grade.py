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

from agent.checks.evaluation import CommandRun, Evaluation, Verdict
from agent.checks.evidence import Evidence
from agent.checks.integrity import plausibility_problem
from agent.checks.render import compact_lines, device_reads_line, read_line, read_path
from agent.checks.stats import speedup
from agent.task import TaskSpec

Rule = Callable[[Evidence, TaskSpec], list[str]]  # why the verdict it stands for applies; [] when it does not


def could_not_check(e: Evidence, spec: TaskSpec) -> list[str]:
    return [e.error] if e.error is not None else []


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
    c = e.correctness
    if c is None or c.poison is None or c.poison.passed:
        return []
    return ["tests fail with uninitialised memory poisoned (a buffer is read before it is written)" + _ids(c.poison)]


def reads_before_writes(e: Evidence, spec: TaskSpec) -> list[str]:
    reads = e.sanitizer.reads if e.sanitizer is not None else []
    if not reads:
        return []
    more = f" and {len(reads) - 4} more" if len(reads) > 4 else ""
    return ["buffers read before they are written (sanitizer): " + "; ".join(read_line(r) for r in reads[:4]) + more]


def device_reads(e: Evidence, spec: TaskSpec) -> list[str]:
    if e.initcheck is None or not e.initcheck.reads:
        return []
    return ["uninitialised device reads (compute-sanitizer initcheck): " + device_reads_line(e.initcheck.reads)]


def candidate_bench_fails(e: Evidence, spec: TaskSpec) -> list[str]:
    p = e.perf
    return [p.error] if p is not None and p.error is not None and p.error_side == "candidate" else []


def changed_lines_unrun(e: Evidence, spec: TaskSpec) -> list[str]:
    cov = e.coverage
    if cov is None:
        return []
    if cov.uncovered:
        return ["changed lines no test executed: " + compact_lines(cov.uncovered)]
    return [] if cov.measured else [cov.note or "changed-line coverage not measured"]


def reads_unwatched(e: Evidence, spec: TaskSpec) -> list[str]:
    """The patch allocates uninitialised memory and nothing watched its reads: the sanitizer was not
    measured, or initcheck ran but its report did not come back whole (a flooded output, say)."""
    if not e.uninitialised:
        return []
    out = []
    if e.sanitizer is not None and not e.sanitizer.measured:
        out.append(e.sanitizer.note or "uninitialised reads not measured")
    if e.initcheck is not None and not e.initcheck.measured and e.initcheck.run is not None:
        out.append(f"uninitialised device reads not measured: {e.initcheck.note}")
    return out


def read_sites_unrun(e: Evidence, spec: TaskSpec) -> list[str]:
    """Passing tests are not enough: every read of a buffer left uninitialised must have run."""
    return [f"{s.buffer.rsplit(':', 1)[0]}:{s.line} reads the buffer allocated uninitialised "
            f"at line {s.buffer.rsplit(':', 1)[1]}{read_path(s)}: no test runs it"
            for s in e.read_sites if not s.executed]


def flagged_code(e: Evidence, spec: TaskSpec) -> list[str]:
    return [f"flagged: {f}" for f in e.integrity.flags]


def implausible_speedup(e: Evidence, spec: TaskSpec) -> list[str]:
    problem = plausibility(e, spec)
    return [f"suspicious speedup: {problem}"] if problem else []


RULES: list[tuple[Verdict, Rule]] = [
    ("error", could_not_check),
    ("no-change", changes_nothing),
    ("rejected", unclean_patch),
    ("rejected", rewires_the_tests),
    ("rejected", touches_protected),
    ("fail", setup_fails),
    ("fail", tests_fail),
    ("fail", poisoned_tests_fail),
    ("fail", reads_before_writes),
    ("fail", device_reads),
    ("fail", candidate_bench_fails),
    ("unverified", changed_lines_unrun),
    ("unverified", reads_unwatched),
    ("unverified", read_sites_unrun),
    ("suspicious", flagged_code),
    ("suspicious", implausible_speedup),
]
FINAL: frozenset[Verdict] = frozenset({"error", "no-change", "rejected", "fail"})  # nothing weaker is argued
# what the evaluation reports of the evidence as it was found (perf and integrity get the grade's word added)
CARRIED = sorted((Evidence.model_fields.keys() & Evaluation.model_fields.keys()) - {"perf", "integrity"})


def grade(e: Evidence, spec: TaskSpec) -> Evaluation:
    """The evaluation of the patch `e` describes, under the task's rules."""
    verdict: Verdict = "pass"
    reasons: list[str] = []
    for level, rule in RULES:
        said = rule(e, spec)
        if not said:
            continue
        if verdict == "pass":
            verdict = level
        elif verdict in FINAL and level not in FINAL:
            break
        reasons += said
    problem = plausibility(e, spec)
    perf = e.perf.model_copy(update={"verdict": "suspicious"}) if problem and e.perf is not None else e.perf
    note = reasons.pop(0) if verdict == "no-change" else None
    carried = {name: getattr(e, name) for name in CARRIED}
    return Evaluation(**carried, verdict=verdict, reasons=reasons, note=note, perf=perf,
                      integrity=e.integrity.model_copy(update={"plausibility": problem}))


def decided(e: Evidence, spec: TaskSpec) -> bool:
    """Whether what is gathered so far already fails or refuses the patch: then nothing more is measured."""
    return any(level in FINAL and rule(e, spec) for level, rule in RULES)


def plausibility(e: Evidence, spec: TaskSpec) -> str | None:
    """Why a significant speedup is beyond belief (the task's bound, unless the reference reaches it too)."""
    p = e.perf
    if spec.perf is None or p is None or p.ratio is None or p.verdict != "faster":
        return None
    ref = e.reference.speedup if e.reference is not None else None
    return plausibility_problem(speedup(p.ratio, p.direction), spec.perf.max_speedup, ref)


def _ids(run: CommandRun) -> str:
    if run.timed_out:
        return " (timed out)"
    if not run.failing_tests:
        return f" (exit code {run.exit_code})"
    more = f" and {len(run.failing_tests) - 8} more" if len(run.failing_tests) > 8 else ""
    return ": " + ", ".join(run.failing_tests[:8]) + more
