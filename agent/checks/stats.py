"""A/B statistics for perf samples: paired analysis of interleaved rounds, sequential stopping.

Pure functions, deterministic given a seed, so a report can be recomputed from its samples.
Each round runs every side once, close in time, so a round's candidate/baseline values are a
pair and the log of their ratio cancels drift (thermal, a neighbour's job). The test is the
Wilcoxon signed-rank test on those log ratios: under A/A the sides are exchangeable within a
round (the order is shuffled), so its null distribution holds whatever the noise looks like,
and the per-look level for looking after every round can be calibrated once, exactly, by
sign-flip simulation (`sequential_alpha`). The interval is a paired BCa bootstrap of the
Hodges-Lehmann estimate (the signed-rank test's own estimator), so test and interval agree.
A change is called only when the test is significant at the per-look level and the interval
excludes 1. `compare` is the older unpaired analysis, for sides that were not sampled in rounds.
"""

from __future__ import annotations

import functools
import importlib
import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from agent.checks.verdicts import CALLED, PerfVerdict

Direction = Literal["lower", "higher"]
# What an A/B comparison says (report.json keeps it as `perf.verdict`): agent.checks.verdicts.
PerfAnswer = PerfVerdict


class Comparison(BaseModel):
    """Candidate against baseline; ratio = candidate median / baseline median."""

    model_config = ConfigDict(frozen=True)

    baseline_median: float
    candidate_median: float
    ratio: float
    ci_low: float
    ci_high: float
    confidence: float
    p_value: float
    verdict: PerfAnswer
    n_baseline: int
    n_candidate: int
    precise: bool  # interval narrower than the task's minimum effect: enough samples
    paired: bool = False  # True: per-round log ratios (compare_paired); False: two independent lists
    alpha: float | None = None  # the level p had to beat (per look, when sampling looks after each round)
    cv: float | None = None  # noise: std of the paired log ratios, ~ the coefficient of variation of a ratio
    rerun_low: float | None = None  # where another run's ratio is expected (rerun_interval); None: unpaired
    rerun_high: float | None = None
    stop_reason: str | None = None  # why sampling stopped, set by the sequential procedure


def preload() -> None:
    """Import scipy.stats (~1 s) ahead of the first look, while something else runs."""
    importlib.import_module("scipy.stats")


def _ratio_of_medians(b: np.ndarray, c: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(c, axis=axis) / np.median(b, axis=axis)


def bootstrap_ci(baseline: list[float], candidate: list[float], *, confidence: float = 0.95,
                 n_resamples: int = 4000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of median(candidate) / median(baseline), resampling each side."""
    from scipy import stats as sps  # here, not at the top: scipy.stats costs ~1 s to import

    b, c = np.asarray(baseline, float), np.asarray(candidate, float)
    if len(b) < 2 or len(c) < 2 or (np.ptp(b) == 0 and np.ptp(c) == 0):
        r = float(_ratio_of_medians(b, c))
        return r, r
    res = sps.bootstrap((b, c), _ratio_of_medians, vectorized=True, paired=False, axis=-1,
                        confidence_level=confidence, n_resamples=n_resamples, method="percentile",
                        rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def rank_p_value(baseline: list[float], candidate: list[float]) -> float:
    """Two-sided Mann-Whitney U p-value; 1.0 when a side has fewer than two samples."""
    if len(baseline) < 2 or len(candidate) < 2:
        return 1.0
    if len(set(baseline) | set(candidate)) == 1:
        return 1.0
    from scipy import stats as sps

    return float(sps.mannwhitneyu(candidate, baseline, alternative="two-sided").pvalue)


def compare(baseline: list[float], candidate: list[float], direction: Direction = "lower",
            min_effect: float = 0.03, seed: int = 0, *, confidence: float = 0.95,
            n_resamples: int = 4000) -> Comparison:
    """Compare two sample lists of a metric; `direction` says which way is better."""
    if not baseline or not candidate:
        raise ValueError("compare needs at least one sample per side")
    if min(baseline) <= 0 or min(candidate) <= 0:
        raise ValueError("perf metrics must be positive to form a ratio")
    b_med, c_med = float(np.median(baseline)), float(np.median(candidate))
    ratio = c_med / b_med
    lo, hi = bootstrap_ci(baseline, candidate, confidence=confidence, n_resamples=n_resamples, seed=seed)
    p = rank_p_value(baseline, candidate)
    significant = p < 1 - confidence and (hi < 1 or lo > 1)
    if not significant:
        verdict = PerfVerdict.NO_DIFFERENCE
    elif (ratio < 1) == (direction == "lower"):
        verdict = PerfVerdict.FASTER
    else:
        verdict = PerfVerdict.SLOWER
    return Comparison(baseline_median=b_med, candidate_median=c_med, ratio=ratio, ci_low=lo, ci_high=hi,
                      confidence=confidence, p_value=p, verdict=verdict, n_baseline=len(baseline),
                      n_candidate=len(candidate), precise=(hi - lo) < min_effect)


# -- paired, sequential ---------------------------------------------------------------------------
def hodges_lehmann(d: np.ndarray, axis: int = -1) -> np.ndarray:
    """Median of the Walsh averages (d_i + d_j) / 2, i <= j: the signed-rank test's estimate of the shift."""
    d = np.moveaxis(np.asarray(d, float), axis, -1)
    i, j = np.triu_indices(d.shape[-1])
    return np.median((d[..., i] + d[..., j]) / 2, axis=-1)


def _hl_of_log_ratio(log_b: np.ndarray, log_c: np.ndarray, axis: int = -1) -> np.ndarray:
    return hodges_lehmann(log_c - log_b, axis=axis)


def paired_ci(baseline: list[float], candidate: list[float], *, confidence: float = 0.95,
              n_resamples: int = 4000, seed: int = 0) -> tuple[float, float]:
    """BCa bootstrap interval of the ratio exp(HL(log c_i - log b_i)), resampling whole rounds (pairs)."""
    import warnings

    from scipy import stats as sps

    lb, lc = np.log(np.asarray(baseline, float)), np.log(np.asarray(candidate, float))
    point = float(np.exp(_hl_of_log_ratio(lb, lc)))
    if len(lb) < 3 or np.ptp(lc - lb) == 0:
        return point, point
    for method in ("BCa", "percentile"):  # BCa's jackknife can degenerate on a few tied samples
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = sps.bootstrap((lb, lc), _hl_of_log_ratio, paired=True, vectorized=True, axis=-1,
                                confidence_level=confidence, n_resamples=n_resamples, method=method,
                                rng=np.random.default_rng(seed))
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if math.isfinite(lo) and math.isfinite(hi):
            return min(math.exp(lo), point), max(math.exp(hi), point)
    return point, point


def block_ci(blocks: list[tuple[list[float], list[float]]], *, confidence: float = 0.95, n_resamples: int = 4000,
             seed: int = 0) -> tuple[float, float, float]:
    """(ratio, low, high) over blocks of paired samples, each block (baseline, candidate) from its own separately
    started bench server: a two-stage percentile bootstrap, blocks with replacement, then rounds within each, of
    exp(HL) of the pooled log ratios. A server's memory layout biases a whole block alike (agent.checks.perf.Bench),
    which one block's interval cannot see; resampling blocks carries that spread into the interval."""
    logs = [np.log(np.asarray(c, float)) - np.log(np.asarray(b, float)) for b, c in blocks if len(b) and len(c)]
    if not logs:
        raise ValueError("no block has samples")
    point = float(np.exp(hodges_lehmann(np.concatenate(logs))))
    rng = np.random.default_rng(seed)
    est = np.empty(n_resamples)
    for k in range(n_resamples):
        picked = [logs[i] for i in rng.integers(0, len(logs), len(logs))]
        est[k] = hodges_lehmann(np.concatenate([d[rng.integers(0, len(d), len(d))] for d in picked]))
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(est, [tail, 100 - tail])
    return point, min(float(np.exp(lo)), point), max(float(np.exp(hi)), point)


def rerun_interval(ratio: float, low: float, high: float, pairs: int, confidence: float = 0.95) -> tuple[float, float]:
    """Where another run's ratio is expected, at `confidence`: the ratio's interval, widened on the log scale by
    sqrt(2) (the other run brings noise of its own, as large) and by t(n - 1) / z (a few pairs' bootstrap interval
    is narrower than the spread it estimates). Even a 95% interval right about its own run holds another run's
    figure only ~83% of the time (|Z| < 1.96 / sqrt 2): it answers "is this run's change real", not "where will
    the next run land"."""
    if pairs < 2 or not 0 < low <= ratio <= high:
        return low, high
    from scipy import stats as sps

    q = 0.5 + confidence / 2
    k = math.sqrt(2) * float(sps.t.ppf(q, pairs - 1) / sps.norm.ppf(q))
    return ratio * (low / ratio) ** k, ratio * (high / ratio) ** k


def signed_rank_p(baseline: list[float], candidate: list[float]) -> float:
    """Two-sided Wilcoxon signed-rank p-value of the per-round log ratios (exact for n <= 50)."""
    d = np.log(np.asarray(candidate, float)) - np.log(np.asarray(baseline, float))
    if np.count_nonzero(d) < 2:
        return 1.0
    from scipy import stats as sps

    return float(sps.wilcoxon(d, alternative="two-sided").pvalue)


# Per-look levels for the policies in agent.checks.perf, from sequential_alpha(lo, hi, looks=...)
# with its default simulation (tests/checks/test_stats.py recomputes them): computing one takes ~2 s.
_SEQUENTIAL_ALPHA = {(5, 20, 0.05, None): 0.01531219482421875, (4, 8, 0.05, None): 0.0390625,
                     (5, 20, 0.05, (7, 8, 10, 12, 15, 20)): 0.017181396484375}


def testing_at(n: int, min_pairs: int, max_pairs: int, looks: tuple[int, ...] | None) -> bool:
    """Whether the test may call a change after `n` pairs: at every round from `min_pairs`, or at `looks`."""
    return n == max_pairs or (n in looks if looks else n >= min_pairs)


@functools.lru_cache(maxsize=None)
def sequential_alpha(min_pairs: int, max_pairs: int, alpha: float = 0.05, *, looks: tuple[int, ...] | None = None,
                     sims: int = 20000, seed: int = 0, cached: bool = True) -> float:
    """Per-look level (Pocock-style constant) so that testing after every round from `min_pairs`
    to `max_pairs` (or only after the rounds in `looks`) says "faster"/"slower" on identical code
    in at most `alpha` of runs overall.

    Under A/A the signs of the per-round log ratios are fair coins independent of their sizes
    (the order within a round is shuffled), so the exact signed-rank p-values at each look have a
    known joint law for any noise; we simulate it and take the largest level whose chance that
    any look falls below it is <= alpha. Stopping early for precision only removes chances to err.
    Fewer looks buy a higher level: the signed-rank test's smallest p after 7 pairs, 2/128, is
    under the level of looks (7, 8, 10, 12, 15, 20) but not of a look after every round.
    """
    key = (min_pairs, max_pairs, alpha, looks)
    if cached and key in _SEQUENTIAL_ALPHA:
        return _SEQUENTIAL_ALPHA[key]
    from scipy import stats as sps

    d = np.random.default_rng(seed).standard_normal((sims, max_pairs))
    p_min = np.ones(sims)
    for n in range(max(min_pairs, 2), max_pairs + 1):
        if testing_at(n, min_pairs, max_pairs, looks):
            p_min = np.minimum(p_min, sps.wilcoxon(d[:, :n], axis=1).pvalue)
    # rejecting when p < level: at most floor(alpha * sims) of the simulated runs fall below it
    return float(np.sort(p_min)[int(alpha * sims)])


def compare_paired(baseline: list[float], candidate: list[float], direction: Direction = "lower",
                   min_effect: float = 0.03, seed: int = 0, *, alpha: float = 0.05, confidence: float = 0.95,
                   n_resamples: int = 4000) -> Comparison:
    """Rounds' values paired by index. "faster"/"slower" when the signed-rank p < `alpha` (the
    per-look level) and the interval excludes 1; "no significant change" when the interval is
    narrower than `min_effect` and holds 1; "inconclusive" otherwise (the noise hides the answer)."""
    if len(baseline) != len(candidate) or len(baseline) == 0:
        raise ValueError("compare_paired needs the same number (>= 1) of samples per side, one per round")
    if min(baseline) <= 0 or min(candidate) <= 0:
        raise ValueError("perf metrics must be positive to form a ratio")
    lo, hi = paired_ci(baseline, candidate, confidence=confidence, n_resamples=n_resamples, seed=seed)
    d = np.log(np.asarray(candidate, float)) - np.log(np.asarray(baseline, float))
    ratio = float(np.exp(hodges_lehmann(d)))
    p = signed_rank_p(baseline, candidate)
    precise = (hi - lo) < min_effect
    if p < alpha and (hi < 1 or lo > 1):
        verdict = PerfVerdict.FASTER if (ratio < 1) == (direction == "lower") else PerfVerdict.SLOWER
    elif precise and lo <= 1 <= hi:
        verdict = PerfVerdict.NO_DIFFERENCE
    else:
        verdict = PerfVerdict.INCONCLUSIVE
    rerun = rerun_interval(ratio, lo, hi, len(d), confidence)
    return Comparison(baseline_median=float(np.median(baseline)), candidate_median=float(np.median(candidate)),
                      ratio=ratio, ci_low=lo, ci_high=hi, confidence=confidence, p_value=p, verdict=verdict,
                      rerun_low=rerun[0], rerun_high=rerun[1],
                      n_baseline=len(baseline), n_candidate=len(candidate), precise=precise, paired=True,
                      alpha=alpha, cv=float(np.std(d, ddof=1)) if len(d) > 1 else 0.0)


def stop_reason(c: Comparison, last: bool, testing: bool = True) -> str | None:
    """Why sequential sampling stops after this look, or None to take another round; a round that is
    not one of the test's looks (`testing` False) stops only for precision."""
    n = c.n_candidate
    if c.verdict in CALLED:
        return f"significant after {n} pairs" if testing else None
    if c.verdict == PerfVerdict.NO_DIFFERENCE:
        return f"precise after {n} pairs"
    if not last:
        return None
    if not c.precise:
        return f"max pairs reached ({n}), interval wider than min effect"
    return f"max pairs reached ({n}), interval excludes 1 but the test is not significant at the per-look level"


def sequential(baseline: list[float], candidate: list[float], min_pairs: int, max_pairs: int,
               direction: Direction = "lower", min_effect: float = 0.03, seed: int = 0, *,
               alpha: float = 0.05, n_resamples: int = 4000, looks: tuple[int, ...] | None = None) -> Comparison:
    """The sequential procedure replayed on recorded rounds: look after each from `min_pairs`, stop
    at the first clear answer or at `max_pairs`. What perf.sample decides while it measures."""
    level = sequential_alpha(min_pairs, max_pairs, alpha, looks=looks)
    n_max = min(max_pairs, len(baseline), len(candidate))
    c = None
    for n in range(min(min_pairs, n_max), n_max + 1):
        c = compare_paired(baseline[:n], candidate[:n], direction, min_effect, seed, alpha=level,
                           n_resamples=n_resamples)
        why = stop_reason(c, last=n >= max_pairs, testing=testing_at(n, min_pairs, max_pairs, looks))
        if why is not None:
            return c.model_copy(update={"stop_reason": why})
    assert c is not None
    return c.model_copy(update={"stop_reason": f"ran out of samples after {c.n_candidate} pairs"})


def speedup(ratio: float, direction: Direction) -> float:
    """How many times better the candidate is (>1 is better), whichever way the metric points."""
    return 1 / ratio if direction == "lower" else ratio


def fraction_of_reference(candidate_speedup: float, reference_speedup: float) -> float | None:
    """Share of the reference's gain achieved: (s_c - 1) / (s_r - 1); None if the reference gains nothing.

    Gains rather than raw speedups, so an unchanged candidate scores 0, not s_c / s_r ~ 1 / s_r.
    """
    if reference_speedup <= 1:
        return None
    return (candidate_speedup - 1) / (reference_speedup - 1)
