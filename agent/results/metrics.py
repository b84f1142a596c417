"""Summary statistics over job records, pure: geometric mean, rates, wall span, Opt@K.

Opt@K follows GSO (Shetty et al., "GSO: Challenging Software Optimization Tasks for Evaluating
SWE-Agents", arXiv 2505.23671; gso-bench gso/harness/grading/metrics.py): the fraction of tasks
where at least one of K attempts is correct and reaches at least 95% of the reference patch's
speedup, measured in the same interleaved rounds. As in GSO's grader (MIN_PROB_SPEEDUP), a
sample must also be at least 1.2x faster than the baseline: a patch that changes nothing
cannot "match" a reference that gains little. Only tasks with a reference are counted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from agent.results.record import JobRecord
from agent.checks.verdicts import PerfVerdict

OPT_THRESHOLD = 0.95  # share of the reference's speedup a sample must reach
OPT_MIN_SPEEDUP = 1.2  # and its own speedup over the baseline


def geometric_mean(values: Iterable[float]) -> float | None:
    """Geometric mean of positive values; None for none. Speedups multiply, so they average this way."""
    vals = [v for v in values if v is not None and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def rate(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def wall_span(records: Iterable[JobRecord]) -> float | None:
    """Real time from the first job's start to the last one's end (None when no job says when it ended)."""
    spans = [(r.finished_at - r.wall_s, r.finished_at) for r in records
             if r.status != "skipped" and r.finished_at > 0]
    if not spans:
        return None
    return max(0.0, max(end for _, end in spans) - min(start for start, _ in spans))


def reaches_reference(r: JobRecord, threshold: float = OPT_THRESHOLD, min_speedup: float = OPT_MIN_SPEEDUP) -> bool:
    """GSO's Opt criterion for one sample: correct, >= `min_speedup` over the baseline, and
    >= `threshold` of the reference's speedup. A point estimate the perf check could not back
    (inconclusive, no significant change) solves nothing."""
    if not r.correct or r.speedup is None or r.reference_speedup is None:
        return False
    if r.perf_verdict in (PerfVerdict.INCONCLUSIVE, PerfVerdict.NO_DIFFERENCE):
        return False
    return r.speedup >= min_speedup and r.speedup >= threshold * r.reference_speedup


def within_noise(r: JobRecord, threshold: float = OPT_THRESHOLD) -> bool:
    """Whether a correct sample's Opt decision could go either way: its speedup's interval and `threshold`
    x the reference's, from the same rounds, overlap (unknown intervals: not said to)."""
    if not r.correct or r.speedup_interval is None or r.reference_interval is None:
        return False
    (low, high), (ref_low, ref_high) = r.speedup_interval, r.reference_interval
    return low <= threshold * ref_high and threshold * ref_low <= high


def opt_undecided(by_task: Mapping[str, Sequence[JobRecord]], threshold: float = OPT_THRESHOLD) -> int:
    """Tasks with a reference where some correct sample's Opt decision is within noise (`within_noise`)."""
    return sum(any(r.has_reference and within_noise(r, threshold) for r in records) for records in by_task.values())


def opt_at_k(by_task: Mapping[str, Sequence[JobRecord]], threshold: float = OPT_THRESHOLD,
             min_speedup: float = OPT_MIN_SPEEDUP) -> tuple[int, int]:
    """(tasks solved, tasks counted): a task with a reference counts once, solved if any sample reaches it."""
    counted = solved = 0
    for records in by_task.values():
        if not any(r.has_reference for r in records):
            continue
        counted += 1
        solved += any(reaches_reference(r, threshold, min_speedup) for r in records)
    return solved, counted
