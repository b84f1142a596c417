"""A/B statistics for perf samples: ratio of medians, bootstrap interval, Mann-Whitney U.

Pure functions, deterministic given a seed, so a report can be recomputed from its samples.
A change is called only when both the interval excludes 1 and the rank test agrees: the
percentile bootstrap alone is too narrow on the handful of samples we can afford, and the
A/A honesty requirement (no verdict on identical code 95% of the time) needs the rank test.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

Direction = Literal["lower", "higher"]
# "suspicious": faster beyond the task's plausibility bound, with no reference to confirm it.
PerfVerdict = Literal["faster", "slower", "no significant change", "suspicious"]


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
    verdict: PerfVerdict
    n_baseline: int
    n_candidate: int
    precise: bool  # interval narrower than the task's minimum effect: enough samples


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
        verdict: PerfVerdict = "no significant change"
    elif (ratio < 1) == (direction == "lower"):
        verdict = "faster"
    else:
        verdict = "slower"
    return Comparison(baseline_median=b_med, candidate_median=c_med, ratio=ratio, ci_low=lo, ci_high=hi,
                      confidence=confidence, p_value=p, verdict=verdict, n_baseline=len(baseline),
                      n_candidate=len(candidate), precise=(hi - lo) < min_effect)


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
