"""The A/B statistics on synthetic samples: determinism, the A/A honesty claim, power, edges."""

from __future__ import annotations

import numpy as np
import pytest

from agent.checks.stats import compare, fraction_of_reference, speedup


def noisy(rng: np.random.Generator, n: int, scale: float = 1.0, sigma: float = 0.05) -> list[float]:
    """Timings with multiplicative noise and an occasional outlier (a neighbour's job, a page fault)."""
    x = scale * np.exp(rng.normal(0, sigma, n))
    outliers = rng.random(n) < 0.05
    x[outliers] *= 1 + rng.exponential(0.3, outliers.sum())
    return [float(v) for v in x]


def test_deterministic_given_a_seed():
    rng = np.random.default_rng(0)
    b, c = noisy(rng, 9), noisy(rng, 9, 0.9)
    assert compare(b, c, seed=7) == compare(b, c, seed=7)
    r = compare(b, c, seed=7)
    assert r.ratio == pytest.approx(np.median(c) / np.median(b))
    assert r.ci_low <= r.ratio <= r.ci_high


def test_aa_says_no_significant_change_at_least_95_percent_of_the_time():
    rng = np.random.default_rng(2024)
    reps = 600
    verdicts = [compare(noisy(rng, n), noisy(rng, n), seed=i).verdict
                for i, n in zip(range(reps), [5, 6, 8, 10, 15] * reps)]
    share = verdicts.count("no significant change") / reps
    assert share >= 0.95, share


def test_injected_20_percent_slowdown_is_found_slower_and_the_interval_covers_it():
    rng = np.random.default_rng(7)
    reps = 300
    results = [compare(noisy(rng, 8), noisy(rng, 8, 1.2), seed=i) for i in range(reps)]
    assert sum(r.verdict == "slower" for r in results) / reps >= 0.98
    assert sum(r.ci_low <= 1.2 <= r.ci_high for r in results) / reps >= 0.90
    assert np.median([r.ratio for r in results]) == pytest.approx(1.2, rel=0.02)


def test_direction_decides_what_faster_means():
    b, c = [10.0, 10.1, 9.9, 10.2, 10.0], [8.0, 8.1, 7.9, 8.2, 8.0]
    assert compare(b, c, "lower").verdict == "faster"
    assert compare(b, c, "higher").verdict == "slower"  # e.g. tokens/s went down
    assert compare(c, b, "higher").verdict == "faster"


def test_identical_samples_give_no_change_and_a_point_interval():
    r = compare([5.0] * 6, [5.0] * 6, min_effect=0.03)
    assert (r.ratio, r.ci_low, r.ci_high, r.p_value, r.verdict) == (1.0, 1.0, 1.0, 1.0, "no significant change")
    assert r.precise


def test_four_pairs_can_reach_significance_three_cannot():
    # the exact two-sided rank test needs at least 4 per side for p < 0.05 at all
    assert compare([1.0, 1.01, 1.02], [2.0, 2.01, 2.02]).verdict == "no significant change"
    assert compare([1.0, 1.01, 1.02, 1.03], [2.0, 2.01, 2.02, 2.03]).verdict == "slower"


def test_precise_means_interval_narrower_than_min_effect():
    rng = np.random.default_rng(3)
    b, c = noisy(rng, 15, sigma=0.005), noisy(rng, 15, sigma=0.005)
    assert compare(b, c, min_effect=0.05).precise
    assert not compare(noisy(rng, 5, sigma=0.2), noisy(rng, 5, sigma=0.2), min_effect=0.01).precise


def test_speedup_and_fraction_of_reference():
    assert speedup(0.5, "lower") == 2.0 and speedup(2.0, "higher") == 2.0
    assert fraction_of_reference(1.5, 2.0) == 0.5
    assert fraction_of_reference(1.0, 2.0) == 0.0  # no gain, no credit
    assert fraction_of_reference(1.2, 0.9) is None  # the reference itself gains nothing


def test_bad_samples_are_refused():
    with pytest.raises(ValueError):
        compare([], [1.0])
    with pytest.raises(ValueError):
        compare([1.0, 0.0], [1.0, 1.0])
