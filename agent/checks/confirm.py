"""The harness's own clock confirms the gain a bench's metric line claims.

The metric line is printed by the code under test, which can forge it (wrap stdout, print 0.6x
of the truth). The harness also sees every bench process from outside, out of that code's reach:
its wall time and the CPU time the kernel charged it and its children (agent.env.zygote,
agent.env.sandbox). A gain the metric claims must show there: converted to seconds per bench
process (`calls` timed calls, the metric's time unit), the claimed saving S must not be ruled out
by the paired per-round differences of either clock, baseline - candidate, whose 95% interval is
the Hodges-Lehmann estimate's distribution-free signed-rank interval (exact, no resampling).
S is the least saving the metric's own 95% interval supports (its ratio's bound nearest 1, times
the baseline's median), not its point estimate: the claim carries noise too, and held to its
point the rule called identical code "not confirmed" in 2 of 16 A/A trials that claimed a gain;
a forged line is as precise as a true one, so its bound sits near its point and is still caught.

    confirmed  iff some clock sees a saving (lo > 0 at STRICT, 99.5%) that does not rule S out
                   (hi >= S at 95%): that clock could have refuted the claim, and did not; under
                   9 pairs, where no signed-rank interval reaches 99.5%, a clock sees a saving only
                   in every pair, and every other clock must see one at 95% (lo > 0)
    refuted    iff every clock's interval lies wholly below S (hi < S)
    otherwise      not established: no clock has measured the claim (too wide to tell S from no
                   saving), or one rules it out while another cannot tell. The answer is "not
                   confirmed" too, never "faster", but it fails nothing (agent.checks.grade): the
                   clocks measure different things (CPU time leaves out waiting, and a gain that
                   waits less or spreads work over threads saves wall time, not CPU time).

A metric that is not a time (a throughput) cannot be converted; then only its direction is
checked, with S = 0. Pure functions, so re-grading recorded evidence recomputes it.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from agent.checks.evaluation import ClockSaving, OutsideClock, PerfResult
from agent.checks.stats import Comparison, Direction, speedup
from agent.checks.verdicts import PerfVerdict

CONFIDENCE = 0.95
# A clock sees a saving only at this level, at every look and at the last. The claim is the metric's,
# which the candidate can forge, so the clock is all that stands between a forged line and "faster":
# seen at 95%, the sampling's looks and two clocks let identical code through in about 5% of checks (a
# forged 2x line passed a CI run at load ~10: wall 6.6 ms [1.1, 12.1] against a claimed 9.7 ms). Under
# STRICT_FROM pairs no signed-rank interval reaches it; there a clock sees a saving only in every pair (7 pairs
# do for identical code once in 128), and only where every other clock sees one at 95%.
# Sampling also stops early on a refutation only at this level: a "not confirmed" fails the change, and
# looking after every round at 95% let one burst of load refute a true 10 ms saving (wall clock
# -10 ms [-29, 3.2] in a CI run at load ~6). The graded refutation is the 95% rule on every pair.
STRICT = 0.995
SECONDS = {"s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ns": 1e-9}


def seconds_per_unit(metric: str, unit: str | None) -> float | None:
    """Seconds in one unit of the metric: its line's "unit", or else the name's suffix (init_ms);
    None where it is not a time."""
    if unit:
        return SECONDS.get(unit.strip().lower())
    suffix = metric.rsplit("_", 1)[-1].lower() if "_" in metric else ""
    return SECONDS.get(suffix) if suffix in ("s", "ms", "us", "ns") else None


def claimed_saving(baseline_median: float, candidate_median: float, direction: Direction, calls: int,
                   per_unit: float) -> float:
    """Seconds per bench process the metric says the candidate saves: `calls` x the medians' gap."""
    gap = baseline_median - candidate_median if direction == "lower" else candidate_median - baseline_median
    return calls * gap * per_unit


def least_claimed_saving(baseline_median: float, ci_low: float, ci_high: float, direction: Direction, calls: int,
                         per_unit: float) -> float:
    """The saving per process at the bound of the metric's ratio interval that means the least gain."""
    ratio = ci_high if direction == "lower" else ci_low
    return claimed_saving(baseline_median, baseline_median * ratio, direction, calls, per_unit)


@functools.lru_cache(maxsize=64)
def _signed_rank_cdf(n: int) -> tuple[float, ...]:
    """P(T+ <= t) for t = 0 .. n(n+1)/2 under the null: the exact law of the signed-rank statistic."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1
    for k in range(1, n + 1):
        counts[k:] = counts[k:] + counts[:-k].copy()
    return tuple(np.cumsum(counts) / 2.0 ** n)


def saving_interval(d: list[float], confidence: float = CONFIDENCE) -> ClockSaving:
    """Hodges-Lehmann estimate of the shift of the paired differences `d`, and the signed-rank
    interval: the k-th smallest and largest Walsh averages, k from the statistic's exact law. Where
    no interval reaches `confidence` (fewer than 6 pairs at 95%), the widest there is, [min, max]."""
    x = np.sort(np.asarray(d, float))
    i, j = np.triu_indices(len(x))
    walsh = np.sort((x[i] + x[j]) / 2)
    k, strict = max(1, _outside(len(x), confidence)), max(1, _outside(len(x), STRICT))
    return ClockSaving(estimate_s=float(np.median(walsh)), low_s=float(walsh[k - 1]), high_s=float(walsh[-k]),
                       confidence=confidence, pairs=len(x), sees_saving=bool(walsh[strict - 1] > 0))


def _outside(n: int, level: float) -> int:
    """How many Walsh averages of n pairs lie below the interval at `level`; 0: n pairs cannot reach it."""
    return int(np.count_nonzero(np.asarray(_signed_rank_cdf(n)) <= (1 - level) / 2))


STRICT_FROM = next(n for n in range(1, 64) if _outside(n, STRICT))  # 9


def _differences(f: OutsideClock) -> dict[str, list[float]]:
    """Each clock's paired per-round differences, baseline - candidate; a clock without them is left out."""
    sides = {"wall": (f.baseline_wall_s, f.candidate_wall_s), "cpu": (f.baseline_cpu_s, f.candidate_cpu_s)}
    return {name: [x - y for x, y in zip(b, c)] for name, (b, c) in sides.items() if b and len(b) == len(c)}


def decide(claimed_s: float | None, clocks: dict[str, ClockSaving]) -> tuple[bool, bool]:
    """(confirmed, refuted): the rule. `claimed_s` None: the metric is no time, so only its direction
    can be checked. A clock whose interval holds both no saving and the claim has measured neither."""
    need = 0.0 if claimed_s is None else claimed_s
    seeing = [c for c in clocks.values() if c.sees_saving]
    enough = all(c.pairs >= STRICT_FROM or c.sees_saving or c.low_s > 0 for c in clocks.values())
    return (enough and any(c.high_s >= need for c in seeing), all(c.high_s < need for c in clocks.values()))


def seconds(x: float, scale: float | None = None) -> str:
    """12.3 ms, 1.05 s, 45 us: `scale` (a value of the same line) picks the unit, so a line reads in one."""
    big = abs(scale if scale is not None else x)
    for unit, size in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if big >= size:
            return f"{x / size:.3g} {unit}"
    return f"{x / 1e-9:.3g} ns"


def clock_text(c: ClockSaving, name: str = "") -> str:
    """'0.4 ms [-1.1 ms, 2 ms] wall': one clock's saving per process and its interval."""
    scale = max(abs(c.estimate_s), abs(c.low_s), abs(c.high_s))
    return f"{seconds(c.estimate_s, scale)} [{seconds(c.low_s, scale)}, {seconds(c.high_s, scale)}]" + (
        f" {name}" if name else "")


def judge(p: PerfResult, figures: OutsideClock, *, calls: int, max_speedup: float) -> OutsideClock:
    """`figures` (the per-side samples) with the rule applied to `p`'s answer; what grade reports."""
    out = figures.model_copy(update={"calls": calls, "claimed_s": None, "claimed_low_s": None, "wall": None,
                                     "cpu": None, "confirmed": None, "note": ""})
    clocks = {name: saving_interval(d) for name, d in _differences(figures).items()}
    out = out.model_copy(update=clocks)
    per_unit = seconds_per_unit(p.metric, p.unit)
    if per_unit is not None and p.baseline_median is not None and p.candidate_median is not None:
        out.claimed_s = claimed_saving(p.baseline_median, p.candidate_median, p.direction, calls, per_unit)
        if p.ci_low is not None and p.ci_high is not None:
            out.claimed_low_s = min(out.claimed_s, least_claimed_saving(p.baseline_median, p.ci_low, p.ci_high,
                                                                        p.direction, calls, per_unit))
    if p.verdict != PerfVerdict.FASTER or p.ratio is None:
        out.note = "applies to a faster answer only"
        return out
    if not clocks:
        out.note = "no outside figures for every sample"
        return out
    gain = speedup(p.ratio, p.direction)
    beyond = not math.isfinite(gain) or gain > max_speedup
    out.confirmed, out.refuted = decide(out.claimed_low_s if out.claimed_low_s is not None else out.claimed_s,
                                        clocks)
    seen = ", ".join(clock_text(c, n) for n, c in clocks.items())
    if out.claimed_s is None:
        claim = f"{p.metric} is not a time, so the claim could be checked only for its direction"
    else:
        least = (f", at least {seconds(out.claimed_low_s)} by its own interval" if out.claimed_low_s is not None
                 else "")
        claim = f"the metric claims {seconds(out.claimed_s)} less per bench process ({claim_detail(p, calls)}{least})"
    hint = f"; {gain:.3g}x is beyond the task's max_speedup hint of {max_speedup:g}x" if beyond else ""
    out.note = f"{claim}; the harness's clock sees {seen} saved per process{hint}{_why(out)}"
    return out


def _why(o: OutsideClock) -> str:
    if o.confirmed:
        return ""
    if o.refuted:
        return "; every clock rules the claim out"
    need = (o.claimed_low_s if o.claimed_low_s is not None else o.claimed_s) or 0.0
    said = [f"the {n} clock " + ("rules it out" if c.high_s < need else
                                 f"sees it in every pair, but under {STRICT_FROM} pairs the other clock must see it too"
                                 if c.sees_saving else f"cannot tell it from no saving at {STRICT:.1%}")
            for n, c in (("wall", o.wall), ("cpu", o.cpu)) if c is not None]
    return f"; speed not established: {', '.join(said)}"


def claim_detail(p: PerfResult, calls: int) -> str:
    unit = f" {p.unit}" if p.unit else ""
    gap = (p.baseline_median or 0) - (p.candidate_median or 0)
    gap = gap if p.direction == "lower" else -gap
    return f"{calls} call{'s' if calls != 1 else ''} x {gap:.4g}{unit}"


def figures(wall: dict[str, list[float | None]], cpu: dict[str, list[float | None]]) -> OutsideClock:
    """The per-side samples of `perf.sample`; a clock with a sample it could not take is left out."""
    def whole(xs: list[float | None]) -> list[float]:
        return [float(x) for x in xs] if xs and all(x is not None for x in xs) else []  # type: ignore[arg-type]

    bw, cw = whole(wall.get("baseline", [])), whole(wall.get("candidate", []))
    bc, cc = whole(cpu.get("baseline", [])), whole(cpu.get("candidate", []))
    return OutsideClock(baseline_wall_s=bw if cw else [], candidate_wall_s=cw if bw else [],
                        baseline_cpu_s=bc if cc else [], candidate_cpu_s=cc if bc else [])


def settled(c: Comparison, direction: Direction, metric: str, unit: str | None, calls: int,
            wall: dict[str, list[float | None]], cpu: dict[str, list[float | None]], *,
            max_pairs: int | None = None) -> str | None:
    """Whether sampling can stop on a "faster" the metric gives: "" once the rule confirms the claim, or
    every clock rules it out at STRICT (stricter than the graded 95%: it is looked at after every round);
    a reason once no clock can answer by pair `max_pairs` (`futile`); None: sample on, so a few noisy
    pairs cannot let a forged line through, nor an early burst of load refute a true gain."""
    if c.verdict != PerfVerdict.FASTER:
        return ""
    diffs = _differences(figures(wall, cpu))
    clocks = {name: saving_interval(d) for name, d in diffs.items()}
    per_unit = seconds_per_unit(metric, unit)
    if not clocks or per_unit is None or c.baseline_median is None:
        return ""
    need = least_claimed_saving(c.baseline_median, c.ci_low, c.ci_high, direction, calls, per_unit)
    if all(saving_interval(d, STRICT).high_s < need for d in diffs.values()) or decide(need, clocks)[0]:
        return ""
    n = len(next(iter(diffs.values())))
    return futile(list(clocks.values()), need, n, max_pairs) if max_pairs is not None else None


# A clock whose interval, shrunk to the last pair (width ~ 1/sqrt(n)), is still FUTILE_MARGIN times the
# claimed saving cannot confirm it there but by luck: were the claim true, its estimate would have to
# land that far above it (z > 1.96 x 2/3: under 10% of runs). Judged from FUTILE_FROM pairs, where the
# signed-rank interval is no longer the whole range of the differences.
FUTILE_MARGIN = 3.0
FUTILE_FROM = 8


def futile(clocks: list[ClockSaving], need: float, n: int, max_pairs: int) -> str | None:
    """Why sampling on cannot answer the claim of `need` seconds saved per process, or None where it
    still can. Stopping then costs no honest answer: "speed not established", which fails nothing."""
    if need <= 0 or n < FUTILE_FROM or n >= max_pairs:
        return None
    shrunk = [(k.high_s - k.low_s) / 2 * math.sqrt(n / max_pairs) for k in clocks]
    if min(shrunk) <= FUTILE_MARGIN * need:
        return None
    return (f"the harness's clock cannot tell the claimed {seconds(need)} per process from no saving by pair "
            f"{max_pairs} (+/- {seconds(min(shrunk))} expected there)")
