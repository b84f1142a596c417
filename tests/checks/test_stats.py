"""The A/B statistics on synthetic samples: determinism, the A/A honesty claim, power, edges;
the paired analysis of interleaved rounds and its sequential stopping (no timed tests here:
real processes are in test_perf.py and tests/bench/bench_stats.py)."""

from __future__ import annotations

import numpy as np
import pytest

from agent.checks.evaluation import PerfResult
from agent.checks.render import perf_line
from agent.checks.stats import (_SEQUENTIAL_ALPHA, compare, compare_paired, fraction_of_reference, hodges_lehmann,
                                sequential, sequential_alpha, speedup)


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


# -- paired rounds, sequential stopping ---------------------------------------------------------------
def rounds(rng: np.random.Generator, n: int, ratio: float = 1.0, sigma: float = 0.02,
           drift: float = 0.0) -> tuple[list[float], list[float]]:
    """n interleaved rounds: a per-round factor both sides share (drift), each its own noise."""
    shared = np.exp(rng.normal(0, drift, n))
    return ([float(x) for x in noisy(rng, n, sigma=sigma) * shared],
            [float(x) for x in noisy(rng, n, ratio, sigma=sigma) * shared])


def test_paired_is_deterministic_and_the_estimate_is_the_hodges_lehmann_of_the_log_ratios():
    b, c = rounds(np.random.default_rng(1), 10, 0.9)
    r = compare_paired(b, c, seed=5)
    assert r == compare_paired(b, c, seed=5) and r.paired
    d = np.log(c) - np.log(b)
    assert r.ratio == pytest.approx(np.exp(hodges_lehmann(d)))
    assert r.ci_low <= r.ratio <= r.ci_high and r.cv == pytest.approx(np.std(d, ddof=1))
    assert hodges_lehmann(np.array([0.0, 1.0, 10.0])) == 3.0  # median of the Walsh averages 0, .5, 1, 5, 5.5, 10
    with pytest.raises(ValueError):
        compare_paired([1.0, 2.0], [1.0])


def test_pairing_cancels_drift_that_hides_the_change_from_an_unpaired_comparison():
    """Both sides swing 2x from round to round (a neighbour's job), the candidate is 5% faster in every
    round: the per-round ratios see it, two independent lists do not."""
    b, c = rounds(np.random.default_rng(4), 12, 0.95, sigma=0.005, drift=0.3)
    assert compare(b, c).verdict == "no significant change"
    r = compare_paired(b, c)  # one look at 0.05 (one round has an outlier: p = 0.034)
    assert r.verdict == "faster" and r.ci_low <= 0.95 <= r.ci_high


@pytest.mark.slow
def test_sequential_alpha_reproduces_its_table():
    for (lo, hi, alpha, looks), level in _SEQUENTIAL_ALPHA.items():
        assert sequential_alpha(lo, hi, alpha, looks=looks, cached=False) == level
    # fewer looks, a higher level: 7 pairs all one way (p = 2/128) can be called
    assert sequential_alpha(5, 20, looks=(7, 8, 10, 12, 15, 20)) > 2 / 128 > sequential_alpha(5, 20)
    assert sequential_alpha(6, 6) == pytest.approx(0.0625)  # one look: 2/64 (all six one way) is < 0.0625


def test_looking_after_every_round_keeps_the_aa_error_at_5_percent_for_any_symmetric_noise():
    """The signed-rank p-values at every look from 5 to 20 pairs, on identical sides with heavy-tailed,
    outlier-ridden noise (not the Gaussian the level was calibrated on): the chance that any look falls
    below the per-look level stays <= 5%; testing every look at 0.05 would cry wolf far more often."""
    from scipy import stats as sps

    rng = np.random.default_rng(9)
    sims = 20000
    d = rng.standard_t(2, (sims, 20)) * np.where(rng.random((sims, 20)) < 0.1, 5.0, 1.0)
    p_min = np.min([sps.wilcoxon(d[:, :n], axis=1).pvalue for n in range(5, 21)], axis=0)
    assert (p_min < sequential_alpha(5, 20)).mean() <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / sims)
    assert (p_min < 0.05).mean() > 0.12


def test_sequential_aa_never_calls_a_change_on_these_runs_and_stops_early_when_precise():
    rng = np.random.default_rng(11)
    results = [sequential(*rounds(rng, 20, sigma=0.004), 5, 20, min_effect=0.03, seed=i, n_resamples=1000)
               for i in range(30)]
    assert all(r.verdict == "no significant change" for r in results)
    assert all(r.stop_reason == f"precise after {r.n_candidate} pairs" for r in results)
    assert np.mean([r.n_candidate for r in results]) < 7


def test_sequential_stops_as_soon_as_the_change_is_significant():
    b, c = rounds(np.random.default_rng(12), 20, 0.8, sigma=0.01)
    r = sequential(b, c, 5, 20, min_effect=0.001, n_resamples=1000)
    # the per-look level ~0.015 needs all eight rounds one way (p = 2/256): not reachable at 5-7
    assert r.verdict == "faster" and r.stop_reason == "significant after 8 pairs" and r.n_candidate == 8
    assert r.alpha == sequential_alpha(5, 20) and r.p_value < r.alpha and r.ci_high < 1


def test_power_of_the_sequential_procedure_on_10_and_5_percent_effects_at_moderate_noise():
    rng = np.random.default_rng(13)
    for effect, sigma in ((1 / 1.10, 0.04), (1 / 1.05, 0.02)):
        found = [sequential(*rounds(rng, 20, effect, sigma=sigma), 5, 20, seed=i, n_resamples=1000).verdict
                 for i in range(40)]
        assert found.count("faster") >= 38, (effect, found)


def test_inconclusive_when_the_noise_hides_the_answer_with_the_noise_and_the_reason_recorded():
    b, c = rounds(np.random.default_rng(14), 20, 0.95, sigma=0.25)
    r = sequential(b, c, 5, 20, min_effect=0.05, n_resamples=1000)
    assert r.verdict == "inconclusive" and r.n_candidate == 20
    assert r.stop_reason == "max pairs reached (20), interval wider than min effect"
    assert r.ci_high - r.ci_low > 0.05 and 0.2 < r.cv < 0.6
    assert sequential(b[:12], c[:12], 5, 20, n_resamples=1000).stop_reason == "ran out of samples after 12 pairs"
    line = perf_line(PerfResult(metric="m", direction="lower", verdict=r.verdict, ratio=r.ratio, ci_low=r.ci_low,
                                ci_high=r.ci_high, p_value=r.p_value, alpha=r.alpha, n_pairs=20, cv=r.cv,
                                stop_reason=r.stop_reason, min_effect=0.05))
    assert line.startswith("inconclusive: m") and "noise cv" in line and "max pairs reached" in line
    assert "could not tell" in line


def test_a_narrow_interval_excluding_1_is_not_a_precise_no_change():
    """Precision stops sampling only when the interval holds 1: a small real effect measured precisely
    but short of the per-look level is still being decided, and at the end it is inconclusive."""
    b = [1.0, 1.0, 1.0, 1.0, 1.0]
    c = [0.95, 0.951, 0.952, 0.949, 0.953]
    r = compare_paired(b, c, min_effect=0.03, alpha=0.0153)
    assert r.precise and r.ci_high < 1 and r.p_value == 0.0625 and r.verdict == "inconclusive"


def test_the_block_interval_carries_the_spread_between_servers_that_pooled_rounds_hide():
    """Three servers whose layouts bias the ratio 0.85, 0.9 and 0.95 (agent.checks.perf.Bench): pooled as one run's
    rounds the paired interval is narrower; over blocks it holds all three."""
    import random

    from agent.checks.stats import block_ci, paired_ci

    rng = random.Random(3)
    blocks = [([10 + rng.gauss(0, 0.05) for _ in range(7)], []) for _ in range(3)]
    for (base, cand), bias in zip(blocks, (0.85, 0.9, 0.95)):
        cand += [b * bias * (1 + rng.gauss(0, 0.005)) for b in base]
    ratio, low, high = block_ci(blocks, seed=1, n_resamples=1000)
    assert low <= 0.86 and high >= 0.94 and low <= ratio <= high
    pooled = paired_ci([b for bl in blocks for b in bl[0]], [c for bl in blocks for c in bl[1]], seed=1)
    assert pooled[1] - pooled[0] < high - low
    assert block_ci(blocks, seed=1, n_resamples=1000) == (ratio, low, high)  # seeded: a report can be recomputed
    with pytest.raises(ValueError):
        block_ci([([], [])])


def test_another_runs_figure_falls_in_the_rerun_interval_where_it_misses_the_confidence_interval():
    """Independent runs of one change (issue 45: "two runs, two answers, both 95%"): both figures move, so a
    run's 95% interval holds another run's figure far less than 95% of the time; the rerun interval,
    widened for the other run's noise and for few pairs, holds it at least 90% of the time."""
    import itertools

    rng = np.random.default_rng(45)
    runs = []
    for n in [7, 8, 10, 12, 15, 20] * 10:  # where sequential sampling stops
        base = noisy(rng, n)
        noise = rng.normal(0, 0.08, n)  # what is left of a round's noise in its ratio
        runs.append(compare_paired(base, [b * 0.9 * float(np.exp(x)) for b, x in zip(base, noise)], seed=n,
                                   n_resamples=1000))
    pairs = list(itertools.permutations(runs, 2))

    def held(low: str, high: str) -> float:
        return sum(getattr(a, low) <= b.ratio <= getattr(a, high) for a, b in pairs) / len(pairs)

    assert held("ci_low", "ci_high") < 0.9
    assert held("rerun_low", "rerun_high") >= 0.9
    assert all(r.rerun_low < r.ci_low <= r.ratio <= r.ci_high < r.rerun_high for r in runs)


def test_the_rerun_interval_widens_the_ratios_on_the_log_scale():
    from scipy import stats as sps

    from agent.checks.stats import rerun_interval

    low, high = rerun_interval(0.5, 0.4, 0.6, pairs=7)
    k = np.sqrt(2) * sps.t.ppf(0.975, 6) / sps.norm.ppf(0.975)
    assert (low, high) == pytest.approx((0.5 * 0.8 ** k, 0.5 * 1.2 ** k))
    assert rerun_interval(0.5, 0.4, 0.6, pairs=40)[0] > low  # more pairs: less to widen for
    assert rerun_interval(0.5, 0.5, 0.5, pairs=7) == (0.5, 0.5)  # identical rounds: nothing moves
    assert rerun_interval(0.5, 0.4, 0.6, pairs=1) == (0.4, 0.6)
