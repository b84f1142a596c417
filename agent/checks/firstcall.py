"""A large gain must show on the first call, timed cold: a gain seen only when the call repeats is a cache.

A bench that times a call it repeats in one process (22 `init_cuda_graph_state` calls, the fastest
reported) rewards code that remembers its last answer: the first call does the work, the other 21
hand it back. The saving is real inside that process, so the harness's outside clock
(agent.checks.confirm) sees it too; but a server initialises once, and gets nothing but buffers
that still hold the last graph's metadata. So where the task names a command that times the first
call alone (`[perf] first_call`), a "faster" answer beyond the task's `max_speedup` hint (every
"faster" where `repeated_calls = true`) is timed again that way: fresh processes, one call each,
interleaved A/B, the same paired comparison. Where the bench prints its first call apart
(`[perf] first_call_metric`), the samples' own processes are those fresh processes: nothing ran
before that call in them either, and no round of its own is needed. The first call must be faster
too; otherwise the perf answer is "not confirmed": the gain appears only on repeated calls.

agent.checks.collect takes the samples, holding the device lock; `judge` decides from them, pure,
so `check --regrade` decides again under the task as it is then.
"""

from __future__ import annotations

import math

from agent.checks.evaluation import PerfResult
from agent.checks.stats import Comparison, compare_paired, speedup
from agent.checks.verdicts import PerfVerdict
from agent.task import PerfSpec


def needed(verdict: PerfVerdict | None, ratio: float | None, task: PerfSpec) -> bool:
    """Whether an answer must be checked on the first call under `task`."""
    if (task.first_call is None and task.first_call_metric is None) or verdict != PerfVerdict.FASTER or ratio is None:
        return False
    gain = speedup(ratio, task.direction)
    return task.repeated_calls or not math.isfinite(gain) or gain > task.max_speedup


def judge(p: PerfResult, task: PerfSpec) -> PerfResult:
    """`p` with its first-call figures compared, and "not confirmed" where they show no gain (where the
    task, as it is now, asks for the check at all)."""
    f = p.first_call
    if f is None or not needed(p.verdict, p.ratio, task):
        return p
    if f.error is not None:
        f = f.model_copy(update={"verdict": None, "note": f"the first call alone fails: {f.error}"})
    elif f.baseline_samples and len(f.baseline_samples) == len(f.candidate_samples):
        c = compare_paired(f.baseline_samples, f.candidate_samples, task.direction, task.min_effect, f.seed,
                           alpha=f.alpha)
        shown = f"the first call alone: {c.baseline_median:.4g} -> {c.candidate_median:.4g} (ratio {c.ratio:.3g} " \
                f"[{c.ci_low:.3g}, {c.ci_high:.3g}], {len(f.candidate_samples)} fresh processes a side)"
        why = "" if c.verdict == PerfVerdict.FASTER else _why_not_faster(p, c, task)
        f = f.model_copy(update={"ratio": c.ratio, "ci_low": c.ci_low, "ci_high": c.ci_high, "verdict": c.verdict,
                                 "note": shown + why})
    update: dict = {"first_call": f}
    if p.verdict == PerfVerdict.FASTER and f.verdict != PerfVerdict.FASTER:
        update["verdict"] = PerfVerdict.NOT_CONFIRMED
    return p.model_copy(update=update)


def expected_ratio(saved: float | None, first: Comparison, direction: str) -> float | None:
    """The first call's ratio had it saved what each repeated call saves (`saved`, in the metric's unit): code
    that does less work saves at least that on its first call too, a cache does not. None where that cannot be
    said (a higher-is-better metric, no saving)."""
    if direction != "lower" or saved is None or saved <= 0 or first.baseline_median <= 0:
        return None
    return 1 - saved / first.baseline_median


def _why_not_faster(p: PerfResult, first: Comparison, task: PerfSpec) -> str:
    """A cache, or a first call too slow and noisy to show the saving: where the first call's interval still
    holds the repeated calls' saving (an H200's 86 us of a 3.9 ms first call), nothing says the gain is missing."""
    saved = (p.baseline_median - p.candidate_median) if p.baseline_median and p.candidate_median else None
    expected = expected_ratio(saved, first, task.direction)
    if expected is not None and first.ci_low <= expected:
        unit = f" {p.unit}" if p.unit else ""
        return (f"; it cannot tell the {saved:.3g}{unit} each repeated call saves (ratio {expected:.3g} here) "
                "from none: the gain is not shown on the first call, nor shown missing there")
    return "; the gain appears only on repeated calls (cached across calls): a process that calls once gets none"
