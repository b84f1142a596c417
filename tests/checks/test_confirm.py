"""The outside clock's rule: a gain the metric claims must be seen by the harness's own clock. Pure
functions over made-up samples; milliseconds."""

from __future__ import annotations

import numpy as np
import pytest

from agent.checks.confirm import (claimed_saving, decide, figures, judge, saving_interval, seconds,
                                  seconds_per_unit, settled, futile)
from agent.checks.evaluation import ClockSaving, OutsideClock, PerfResult
from agent.checks.stats import Comparison

def perf(b: float, c: float, *, unit: str | None = "ms", metric: str = "init_ms", n: int = 10,
         direction: str = "lower", verdict: str = "faster") -> PerfResult:
    ratio = c / b
    return PerfResult(metric=metric, direction=direction, unit=unit, baseline_median=b, candidate_median=c,
                      ratio=ratio, verdict=verdict, baseline_samples=[b] * n, candidate_samples=[c] * n)


def processes(base_s: float, saved_s: float, noise_s: float, n: int = 10, seed: int = 0) -> OutsideClock:
    """n rounds of bench processes that take `base_s` (baseline) and `base_s - saved_s` (candidate)."""
    rng = np.random.default_rng(seed)
    drift = rng.normal(0, noise_s, n)  # shared by a round's two processes
    b = base_s + drift + rng.normal(0, noise_s / 4, n)
    c = base_s - saved_s + drift + rng.normal(0, noise_s / 4, n)
    return OutsideClock(baseline_wall_s=list(b), candidate_wall_s=list(c), baseline_cpu_s=list(b * 0.9),
                        candidate_cpu_s=list(c * 0.9))


def test_the_claim_is_converted_to_seconds_per_bench_process():
    assert seconds_per_unit("init_ms", None) == 1e-3 and seconds_per_unit("t", "us") == 1e-6
    assert seconds_per_unit("latency", "ns") == 1e-9 and seconds_per_unit("x_s", None) == 1.0
    assert seconds_per_unit("tokens_per_s", "tok/s") is None and seconds_per_unit("throughput", None) is None
    assert seconds_per_unit("init_ms", "GB/s") is None  # the line's unit wins over the name
    assert claimed_saving(10.0, 6.0, "lower", 5, 1e-3) == pytest.approx(0.020)
    assert claimed_saving(6.0, 10.0, "higher", 1, 1.0) == pytest.approx(4.0)


def test_the_interval_is_the_exact_signed_rank_one():
    c = saving_interval([1, 2, 3, 4, 5, 6, 7])  # n = 7: the 3rd smallest and largest Walsh averages
    assert (c.estimate_s, c.low_s, c.high_s) == (4.0, 2.0, 6.0)
    assert (saving_interval([1, 2, 3, 4, 5]).low_s, saving_interval([1, 2, 3, 4, 5]).high_s) == (1, 5)  # widest
    rng = np.random.default_rng(1)
    covered = [(c.low_s <= 0 <= c.high_s) for c in (saving_interval(list(rng.normal(0, 1, 12))) for _ in range(400))]
    assert 0.92 < np.mean(covered) < 0.99


def test_a_real_gain_is_confirmed():
    """5 calls x 10 ms saved: the processes are 50 ms shorter, give or take 5 ms of noise."""
    o = judge(perf(20.0, 10.0), processes(1.0, 0.050, 0.005), calls=5, max_speedup=10)
    assert o.confirmed is True and o.claimed_s == pytest.approx(0.050)
    assert o.wall is not None and o.wall.low_s < 0.050 < o.wall.high_s
    assert "50 ms less per bench process (5 calls x 10 ms)" in o.note


def test_a_forged_claim_is_not_confirmed():
    """The candidate prints 0.6x of the truth: it claims 5 x 8 ms, its processes save nothing."""
    o = judge(perf(20.0, 12.0), processes(1.0, 0.0, 0.005), calls=5, max_speedup=10)
    assert o.confirmed is False and o.claimed_s == pytest.approx(0.040)
    assert "40 ms less per bench process" in o.note and "wall" in o.note and "cpu" in o.note


def test_the_claim_is_held_to_the_least_gain_its_own_interval_supports():
    """A noisy metric's point claim (5 x 8 ms) against a clock that sees 12 ms: its interval allows
    a 2 ms gain per call, which the clock does not rule out; a forged line is precise, and caught."""
    noisy = perf(20.0, 12.0).model_copy(update={"ci_low": 0.5, "ci_high": 0.9})
    o = judge(noisy, processes(1.0, 0.012, 0.001), calls=5, max_speedup=10)
    assert o.claimed_s == pytest.approx(0.040) and o.claimed_low_s == pytest.approx(0.010) and o.confirmed
    assert "at least 10 ms by its own interval" in o.note
    forged = perf(20.0, 12.0).model_copy(update={"ci_low": 0.59, "ci_high": 0.61})
    assert judge(forged, processes(1.0, 0.0, 0.001), calls=5, max_speedup=10).confirmed is False


def test_a_claim_no_clock_could_refute_is_not_confirmed_and_not_refuted():
    """1 ms claimed, 50 ms of noise per process: no clock measured the claim, so the speed is not
    established; that is the machine's noise, not a finding against the change."""
    o = judge(perf(2.0, 1.0), processes(1.0, 0.0, 0.050), calls=1, max_speedup=10)
    assert (o.confirmed, o.refuted) == (False, False)
    assert "speed not established" in o.note and "wall" in o.note and "cpu" in o.note


def test_a_forged_line_inside_the_noise_is_not_confirmed():
    """The attack that got through in CI: a 1.7x line claiming 16 ms a process, on a machine whose pairs
    differ by ~50 ms. No clock can rule the claim out, and none sees a saving but by chance: at 95% one
    in 40 (8 of 400 here), at the strict level about one in 400 (1 here)."""
    seen = [judge(perf(20.0, 12.0), processes(1.0, 0.0, 0.150, n=20, seed=seed), calls=2, max_speedup=10)
            for seed in range(400)]
    assert sum(o.confirmed is not False for o in seen) <= 2


def test_a_1000x_gain_beyond_the_hint_is_confirmed_when_the_clock_sees_it():
    """zeros -> empty on tens of MB: a 30 ms memset gone, the metric says 1000x; so does the clock."""
    o = judge(perf(30.0, 0.03), processes(1.5, 0.030, 0.002), calls=1, max_speedup=10)
    assert o.confirmed is True and o.wall.low_s > 0 and "beyond the task's max_speedup hint" in o.note
    # the same claim where the clock cannot tell a saving from none: not established, hint or not
    vague = judge(perf(30.0, 0.03), processes(1.5, 0.030, 0.2), calls=1, max_speedup=10)
    assert vague.confirmed is False and vague.refuted is False
    assert judge(perf(30.0, 0.03), processes(1.5, 0.030, 0.2), calls=1, max_speedup=2000).confirmed is False


def test_a_metric_that_is_no_time_is_checked_for_its_direction_only():
    throughput = perf(100.0, 200.0, unit="tok/s", metric="throughput", direction="higher")
    o = judge(throughput, processes(1.0, 0.1, 0.005), calls=1, max_speedup=10)
    assert o.confirmed is True and o.claimed_s is None and "only for its direction" in o.note
    slower = judge(throughput, processes(1.0, -0.1, 0.005), calls=1, max_speedup=10)
    assert slower.confirmed is False


def test_not_applied_without_a_faster_answer_or_without_figures():
    assert judge(perf(20.0, 19.9, verdict="inconclusive"), processes(1.0, 0, 0.01), calls=1,
                 max_speedup=10).confirmed is None
    none = judge(perf(20.0, 10.0), OutsideClock(), calls=1, max_speedup=10)
    assert none.confirmed is None and "no outside figures" in none.note
    # a clock with a sample it could not take is left out; the other one still counts
    f = figures({"baseline": [1.0, 1.1], "candidate": [0.9, None]}, {"baseline": [1.0, 1.0], "candidate": [0.8, 0.8]})
    assert f.candidate_wall_s == [] and f.baseline_wall_s == [] and f.candidate_cpu_s == [0.8, 0.8]


def test_one_clock_that_sees_the_gain_is_enough_and_all_must_rule_it_out_to_refute():
    wide = ClockSaving(estimate_s=0.0, low_s=-0.06, high_s=0.06, pairs=10)
    sees = ClockSaving(estimate_s=0.05, low_s=0.04, high_s=0.06, pairs=10, sees_saving=True)
    narrow_none = ClockSaving(estimate_s=0.0, low_s=-0.01, high_s=0.01, pairs=10)
    assert decide(0.05, {"wall": wide, "cpu": sees}) == (True, False)
    assert decide(0.05, {"wall": wide}) == (False, False)  # too wide: measured nothing
    # the CPU clock leaves out waiting: its "no saving" beside a wall clock that sees the gain refutes nothing
    assert decide(0.05, {"wall": sees, "cpu": narrow_none}) == (True, False)
    assert decide(0.05, {"wall": wide, "cpu": narrow_none}) == (False, False)
    assert decide(0.05, {"wall": narrow_none, "cpu": narrow_none}) == (False, True)
    assert decide(0.005, {"wall": narrow_none}) == (False, False)
    assert decide(None, {"wall": sees}) == (True, False) and decide(None, {"wall": narrow_none}) == (False, False)


def test_a_clock_sees_a_saving_only_at_the_strict_level_and_under_9_pairs_every_clock_must_see_it():
    """Seen at 95%, the looks and two clocks let identical code through in ~5% of checks; at 99.5% the
    signed-rank interval needs 9 pairs, and below that one clock's 7 pairs all one way is a 1/128 chance,
    so the other clock must see a saving too (at 95%)."""
    nine = [0.004, 0.006, -0.001, 0.005, 0.007, 0.003, 0.006, 0.004, 0.005]  # one pair the other way
    c = saving_interval(nine)
    assert c.low_s > 0 and not c.sees_saving and decide(0.004, {"wall": c}) == (False, False)
    assert saving_interval([x + 0.002 for x in nine]).sees_saving  # every pair: the level is reached
    seven = saving_interval([0.004, 0.006, 0.001, 0.005, 0.007, 0.003, 0.006])  # every pair saw it
    none = saving_interval([0.001, -0.002, 0.000, 0.002, -0.001, 0.001, -0.001])
    assert seven.sees_saving and seven.pairs == 7 and not none.sees_saving
    assert decide(0.004, {"wall": seven}) == (True, False)
    assert decide(0.004, {"wall": seven, "cpu": none}) == (False, False)
    assert decide(0.004, {"wall": seven, "cpu": seven}) == (True, False)
    almost = saving_interval([0.004, 0.006, -0.001, 0.005, 0.007, 0.003, 0.006])  # sees it at 95%, one pair not
    assert almost.low_s > 0 and not almost.sees_saving
    assert decide(0.004, {"wall": seven, "cpu": almost}) == (True, False)
    assert decide(0.004, {"wall": almost, "cpu": almost}) == (False, False)
    o = judge(perf(20.0, 16.0), OutsideClock(baseline_wall_s=[0.05] * 7, candidate_wall_s=[0.05 - x for x in [
        0.004, 0.006, 0.001, 0.005, 0.007, 0.003, 0.006]], baseline_cpu_s=[0.03] * 7, candidate_cpu_s=[
        0.03 - x for x in [0.001, -0.002, 0.000, 0.002, -0.001, 0.001, -0.001]]), calls=1, max_speedup=10)
    assert o.confirmed is False and o.refuted is False
    assert "the wall clock sees it in every pair, but under 9 pairs the other clock must see it too" in o.note, o.note
    assert "the cpu clock rules it out" in o.note, o.note
    nine_pairs = OutsideClock(baseline_wall_s=[0.05] * 9, candidate_wall_s=[0.05 - x for x in nine])
    assert "the wall clock cannot tell it from no saving at 99.5%" in judge(perf(20.0, 16.0), nine_pairs, calls=1,
                                                                            max_speedup=10).note


def test_seconds_read_in_one_unit_per_line():
    assert seconds(0.0481) == "48.1 ms" and seconds(0.0005, 0.002) == "0.5 ms" and seconds(2.5) == "2.5 s"


def faster(b: float, c: float, n: int) -> Comparison:
    return Comparison(baseline_median=b, candidate_median=c, ratio=c / b, ci_low=c / b, ci_high=c / b,
                      confidence=0.95, p_value=0.001, verdict="faster", n_baseline=n, n_candidate=n, precise=True)


def clocks(base: list[float], cand: list[float]) -> tuple[dict, dict]:
    sides = {"baseline": base, "candidate": cand}
    return sides, sides


def test_sampling_stops_early_only_on_a_refutation_at_the_stricter_level():
    """A claim of 10 ms that 7 pairs' 95% interval rules out, but not their 99.5% one (one pair saw the
    gain: a burst of load, or the truth), samples on; once every pair sits far below it, it stops."""
    base = [0.050] * 7
    cand = [0.050, 0.049, 0.051, 0.052, 0.050, 0.048, 0.039]  # one pair saw 11 ms
    wall, cpu = clocks(base, cand)
    d = [b - c for b, c in zip(base, cand)]
    assert saving_interval(d).high_s < 0.010 <= saving_interval(d, 0.995).high_s
    assert settled(faster(20.0, 10.0, 7), "lower", "t_ms", "ms", 1, wall, cpu) is None
    cand[-1] = 0.050
    assert settled(faster(20.0, 10.0, 7), "lower", "t_ms", "ms", 1, *clocks(base, cand)) == ""


def test_sampling_goes_on_while_no_clock_can_tell_but_one_still_could():
    """A claim inside the clock's noise: neither answer is clear, so it samples on while the last pair
    could still tell the claim from no saving, and stops once even the last pair could not but by luck."""
    base = [0.050, 0.090, 0.020, 0.070, 0.040, 0.080, 0.030, 0.060, 0.055, 0.045]
    cand = [0.060, 0.040, 0.070, 0.030, 0.080, 0.020, 0.065, 0.050, 0.045, 0.055]
    wide = saving_interval([b - c for b, c in zip(base, cand)])
    assert wide.low_s < 0 < 0.001 < wide.high_s  # 1 ms claimed: the clock can tell it from neither
    assert settled(faster(20.0, 19.0, 10), "lower", "t_ms", "ms", 1, *clocks(base, cand)) is None
    # by pair 20 the interval is about sqrt(2) narrower: still ten times the claim, so sampling stops, saying why
    why = settled(faster(20.0, 19.0, 10), "lower", "t_ms", "ms", 1, *clocks(base, cand), max_pairs=20)
    assert why and "cannot tell the claimed" in why and "by pair 20" in why, why
    # a claim of 30 ms x 1 call is within reach of 200 pairs: sample on
    assert settled(faster(50.0, 20.0, 10), "lower", "t_ms", "ms", 1, *clocks(base, cand), max_pairs=200) is None


def test_futility_needs_enough_pairs_and_a_time_claim():
    """Too few pairs (the interval is the whole range below 8) or no claimed time: no futility call."""
    wide = ClockSaving(estimate_s=0.0, low_s=-0.05, high_s=0.05, confidence=0.95)
    assert futile([wide], 0.001, 7, 20) is None and futile([wide], 0.0, 10, 20) is None
    assert futile([wide], 0.001, 20, 20) is None  # the last pair: the graded answer, not a stop
    assert futile([wide], 0.001, 10, 20) and futile([wide, wide], 0.001, 10, 20)
    narrow = ClockSaving(estimate_s=0.0, low_s=-0.002, high_s=0.002, confidence=0.95)
    assert futile([wide, narrow], 0.001, 10, 20) is None  # one clock that can still tell is enough


def test_a_gain_every_clock_sees_stops_at_once():
    base = [0.060, 0.061, 0.059, 0.060, 0.062, 0.060, 0.058]
    cand = [x - 0.010 for x in base]
    assert settled(faster(20.0, 10.0, 7), "lower", "t_ms", "ms", 1, *clocks(base, cand)) == ""
