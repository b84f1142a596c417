"""Perf measurement: metric parsing, interleaved sampling, the device lock, and the honesty
tests on real processes (A/A calls no change; an injected 20% slowdown is found, interval and all,
or, on a machine too noisy to tell, reported inconclusive with the truth inside the interval)."""

from __future__ import annotations

import fcntl
import json
import random
import threading
import time
from pathlib import Path

import pytest

from agent.checks import FULL, QUICK, Checker, SamplingPolicy, summarize
from agent.checks import collect
from agent.checks.lock import device_lock, lock_path
from agent.checks.perf import BenchError, Reading, parse_metric, sample, warm_up
from agent.checks.stats import compare_paired, sequential_alpha
from agent.env.warm import WarmPython
from agent.task import PerfSpec
from helpers import make_patch, make_task

IMPORT_ONLY = 'python -c \\"import pkg.work\\"'  # cheap correctness: executes the ITERS line, no torch
SLOWER = {"pkg/work.py": ("ITERS = 60_000", "ITERS = 72_000")}  # 1.2x the work: spin sums floats (ints cost 1.22x)
FASTER = {"pkg/work.py": ("ITERS = 60_000", "ITERS = 30_000")}
SAME = {"pkg/work.py": ("ITERS = 60_000", "ITERS = 60000")}  # A/A: a real change (an empty one is "no-change")


# -- metric lines ------------------------------------------------------------------------------
def test_parse_metric_takes_the_named_metric_and_says_what_was_printed_otherwise():
    out = 'noise\n{"metric": "a_ms", "value": 1.5, "unit": "ms"}\n{"metric": "b", "value": 2}\n{not json\n'
    assert parse_metric(out, "a_ms")[:3] == (1.5, "ms", None)
    assert parse_metric(out, "b")[:3] == (2.0, None, None)
    with pytest.raises(ValueError, match=r"'c' not printed \(metrics printed: a_ms, b\)"):
        parse_metric(out, "c")
    with pytest.raises(ValueError, match="none"):
        parse_metric("hello\n", "c")
    with pytest.raises(ValueError, match="numeric"):
        parse_metric('{"metric": "a", "value": "fast"}', "a")


def test_the_first_call_metric_comes_from_every_kept_samples_own_process(tmp_path):
    """`first_call_metric`: each bench process's line for its first call, next to its metric; the warm-up's
    are discarded with it, and a process that does not print it is its side's bench error."""
    from dataclasses import replace

    from agent.checks.perf import _metric
    from agent.env.sandbox import CommandResult

    spec = PerfSpec(command="python bench.py", metric="init_ms", first_call_metric="first_ms", repeated_calls=True)
    out = '{"metric": "init_ms", "value": 2}\n{"metric": "first_ms", "value": 9}\n'
    res = CommandResult(command="python bench.py", exit_code=0, output=out, duration_s=0.5, timed_out=False,
                        cut_bytes=0, isolation="none")
    assert _metric("baseline", res, spec)[:1] == (2.0,) and _metric("baseline", res, spec).first == 9.0
    with pytest.raises(BenchError, match="'first_ms' not printed"):
        _metric("candidate", replace(res, output='{"metric": "init_ms", "value": 2}'), spec)
    calls = iter(range(100))

    def bench(side, root, spec):
        n = next(calls)
        return Reading(10.0 if side == "baseline" else 5.0, "ms", first=100.0 + n)

    s = sample({"baseline": tmp_path, "candidate": tmp_path}, spec, SamplingPolicy(min_pairs=3, max_pairs=3, warmup=1),
               seed=1, bench=bench)
    assert len(s.first["baseline"]) == len(s.first["candidate"]) == 3  # the warm-up round's left out
    assert sorted(s.first["baseline"] + s.first["candidate"]) == [102.0, 103.0, 104.0, 105.0, 106.0, 107.0]


@pytest.mark.parametrize(("first_of", "pairs", "verdict"), [
    (lambda side, n: 100.0 if side == "baseline" else 60.0 + n, 7, "faster"),  # shown at the first look
    # shown only once enough first calls outvote the noise: the first 7 split, then a clear gain
    (lambda side, n: 100.0 if side == "baseline" else (60.0 if n >= 7 else 80.0 + 40 * (n % 2)) + n / 3, 12,
     "faster"),
    (lambda side, n: 100.0 + (20 + n / 3) * (-1) ** n * (side == "candidate"), 20, "not faster"),  # no answer
    # a cache: the first call as slow as ever, which rules out the 5 ms each repeated call saves at once
    (lambda side, n: 100.0 + n / 3 + (-1) ** n * (1 + n / 10) * (side == "candidate"), 7, "not faster"),
], ids=["shown", "noisy", "never", "cached"])
def test_with_a_first_call_metric_a_gain_is_sampled_until_its_first_call_answers(tmp_path, first_of, pairs, verdict):
    """`first_call_metric`: sampling stops at a look only once the first calls of the same processes answer
    (faster, or the saving each repeated call shows ruled out), so their power is not capped at the metric's
    7 pairs; an answer that never comes ends at max_pairs, as an unclear metric does."""
    spec = PerfSpec(command="python bench.py", metric="init_ms", first_call_metric="first_ms", repeated_calls=True)
    count = iter(range(1000))

    def bench(side, root, spec):
        n = next(count) // 2
        return Reading(10.0 if side == "baseline" else 5.0 + 0.001 * n, "ms", first=first_of(side, n))

    s = sample({"baseline": tmp_path, "candidate": tmp_path}, spec, FULL, seed=1, bench=bench)
    assert len(s.values["candidate"]) == len(s.first["candidate"]) == pairs
    assert s.comparison.verdict == "faster"
    first = compare_paired(s.first["baseline"], s.first["candidate"], "lower", 0.1, 1, alpha=s.comparison.alpha)
    assert (first.verdict == "faster") == (verdict == "faster")
    count = iter(range(1000))  # a quick check judges no first call: it stops where the metric alone would
    quick = sample({"baseline": tmp_path, "candidate": tmp_path}, spec, QUICK, seed=1, bench=bench)
    count = iter(range(1000))
    plain = sample({"baseline": tmp_path, "candidate": tmp_path}, spec.model_copy(update={"first_call_metric": None}),
                   QUICK, seed=1, bench=bench)
    assert len(quick.values["candidate"]) == len(plain.values["candidate"]) < QUICK.max_pairs


def test_a_gain_the_harness_clock_cannot_confirm_by_max_pairs_does_not_wait_for_its_first_call(tmp_path):
    """As on an H200: 86 us saved a call, bench processes whose wall time moves by a tenth of a second. The
    answer is "not confirmed" whatever the first calls say, so sampling stops where the clock gives up."""
    spec = PerfSpec(command="python bench.py", metric="init_ms", first_call_metric="first_ms", repeated_calls=True)
    rng = random.Random(5)

    def bench(side, root, spec):
        wall = 1.0 + rng.uniform(-0.1, 0.1)
        value = 0.229 if side == "baseline" else 0.143 + rng.uniform(0, 0.001)
        return Reading(value, "ms", "cuda-events", wall, wall, first=3.9 + rng.uniform(-0.4, 0.4))

    s = sample({"baseline": tmp_path, "candidate": tmp_path}, spec, FULL, seed=1, bench=bench)
    assert s.comparison.verdict == "faster" and "cannot tell" in s.comparison.stop_reason
    assert len(s.values["candidate"]) < FULL.max_pairs


def test_several_lines_of_the_metric_are_the_process_samples_and_their_median_its_value():
    lines = "".join(f'{{"metric": "init_ms", "value": {v}, "unit": "ms"}}\n' for v in (5, 1, 4, 2, 3))
    assert parse_metric(f"{lines}other\n", "init_ms") == (3.0, "ms", None, None, None, 5, None)
    assert parse_metric('{"metric": "t", "value": 2}\n{"metric": "t", "value": 4}', "t")[:1] == (3.0,)
    with pytest.raises(ValueError, match="finite"):
        parse_metric('{"metric": "t", "value": 2}\n{"metric": "t", "value": NaN}', "t")


def test_parse_metric_keeps_how_the_bench_timed():
    line = '{"metric": "t", "value": 2, "unit": "ms", "timer": "cuda-events", "l2_flushed": true}'
    assert parse_metric(line, "t").timer == "cuda-events, L2 flushed"
    assert parse_metric(line.replace("true", "false"), "t").timer == "cuda-events, L2 not flushed"
    assert parse_metric('{"metric": "t", "value": 2, "timer": "wall-clock"}', "t").timer == "wall-clock"


# -- sampling with a fake bench ----------------------------------------------------------------
def fake_bench(values: dict[str, float], calls: list[str]):
    def bench(side: str, root: Path, spec: PerfSpec):
        calls.append(side)
        noise = 1 + 0.001 * (len(calls) % 3)
        return values[side] * noise, "ms"
    return bench


def test_rounds_interleave_in_shuffled_order_and_the_warmup_is_discarded():
    calls: list[str] = []
    spec = PerfSpec(command="x", metric="m", min_effect=0.0001)  # never precise: stops when significant
    s = sample({"baseline": Path("b"), "candidate": Path("c")}, spec, SamplingPolicy(5, 12, warmup=1), seed=3,
               bench=fake_bench({"baseline": 10.0, "candidate": 8.0}, calls))
    pairs = [tuple(calls[i:i + 2]) for i in range(0, len(calls), 2)]
    # the per-look level for 5..12 pairs (~0.023) needs all 7 rounds one way (p = 2/128): the 7th pair decides
    assert len(pairs) == 8 and all(set(p) == {"baseline", "candidate"} for p in pairs)
    assert {("baseline", "candidate"), ("candidate", "baseline")} <= set(pairs), "order is randomised per pair"
    assert len(s.values["baseline"]) == 7 and len(s.warmup["baseline"]) == 1
    assert s.comparison.verdict == "faster" and s.unit == "ms" and s.comparison.paired
    assert s.comparison.stop_reason == "significant after 7 pairs" and s.comparison.alpha == sequential_alpha(5, 12)
    again: list[str] = []
    sample({"baseline": Path("b"), "candidate": Path("c")}, spec, SamplingPolicy(5, 12, warmup=1), seed=3,
           bench=fake_bench({"baseline": 10.0, "candidate": 8.0}, again))
    assert again == calls, "the order is reproducible from the seed"


def test_a_warm_up_taken_ahead_leaves_the_seeds_pairs_as_they_were():
    """`warm_up` takes the warm-up rounds before the sampling (beside other work); `sample` given them runs
    only the kept pairs, in the order the same seed gives them when it warms up itself."""
    sides = {"baseline": Path("b"), "candidate": Path("c")}
    spec, policy = PerfSpec(command="x", metric="m", min_effect=0.0001), SamplingPolicy(5, 12, warmup=1)
    values = {"baseline": 10.0, "candidate": 8.0}
    itself: list[str] = []
    sample(sides, spec, policy, seed=3, bench=fake_bench(values, itself))
    ahead: list[str] = []
    warmed = warm_up(sides, spec, policy, bench=fake_bench(values, ahead))
    assert ahead == ["baseline", "candidate"] and warmed is not None and len(warmed["candidate"]) == 1
    kept: list[str] = []
    s = sample(sides, spec, policy, seed=3, bench=fake_bench(values, kept), warmed=warmed)
    assert kept == itself[2:] and s.warmup is warmed and len(s.values["baseline"]) == len(itself) // 2 - 1

    def broken(side: str, root: Path, spec: PerfSpec):
        raise BenchError(side, "no metric line")
    assert warm_up(sides, spec, policy, bench=broken) is None  # the sampling warms up itself, and says why


def test_sampling_stops_once_the_interval_is_narrower_than_the_minimum_effect():
    calls: list[str] = []
    spec = PerfSpec(command="x", metric="m", min_effect=0.05)
    s = sample({"baseline": Path("b"), "candidate": Path("c"), "reference": Path("r")}, spec,
               SamplingPolicy(5, 15), seed=0,
               bench=fake_bench({"baseline": 10.0, "candidate": 10.0, "reference": 5.0}, calls))
    assert len(s.values["candidate"]) == 5 and s.comparison.precise
    assert s.comparison.verdict == "no significant change" and s.comparison.stop_reason == "precise after 5 pairs"
    assert len(calls) == 3 * 6 and len(s.values["reference"]) == 5


def test_noise_that_hides_the_answer_is_inconclusive_after_max_pairs():
    values = iter([10.0, 10.0] + [10.0, 14.0, 14.0, 10.0] * 20)  # each side swings 1.4x: cannot tell
    s = sample({"baseline": Path("b"), "candidate": Path("c")}, PerfSpec(command="x", metric="m", min_effect=0.03),
               SamplingPolicy(5, 20), seed=1, bench=lambda side, root, spec: (next(values), "ms"))
    c = s.comparison
    assert len(s.values["candidate"]) == 20 and c.verdict == "inconclusive" and c.cv > 0.3
    assert c.stop_reason == "max pairs reached (20), interval wider than min effect"


def test_a_tasks_max_pairs_ends_sampling_there_with_a_look_at_its_last_round():
    """`[perf] max_pairs` (a bench slow to run): the full check stops by that round, and its last
    round is a look, so a clear gain is still called there."""
    assert FULL.at_most(None) is FULL and FULL.at_most(20) is FULL and FULL.at_most(30) is FULL
    assert FULL.at_most(10) == SamplingPolicy(5, 10, looks=(7, 8, 10), confirm=True)
    assert FULL.at_most(7).looks == (7,) and QUICK.at_most(7) == SamplingPolicy(4, 7)
    values = iter([10.0, 10.0] + [10.0, 14.0, 14.0, 10.0] * 20)
    s = sample({"baseline": Path("b"), "candidate": Path("c")}, PerfSpec(command="x", metric="m", min_effect=0.03),
               SamplingPolicy(5, 20).at_most(8), seed=1, bench=lambda side, root, spec: (next(values), "ms"))
    assert len(s.values["candidate"]) == 8
    assert s.comparison.stop_reason == "max pairs reached (8), interval wider than min effect"
    rng = random.Random(3)
    s = sample({"baseline": Path("b"), "candidate": Path("c")}, PerfSpec(command="x", metric="m", min_effect=0.03),
               SamplingPolicy(5, 20, looks=FULL.looks).at_most(7), seed=1,
               bench=lambda side, root, spec: ({"baseline": 10.0, "candidate": 5.0}[side] * rng.uniform(1, 1.01), "ms"))
    assert s.comparison.verdict == "faster" and s.comparison.stop_reason == "significant after 7 pairs"
    with pytest.raises(ValueError, match="max_pairs"):
        PerfSpec(command="x", metric="m", max_pairs=6)


def test_a_gain_the_outside_clock_can_never_answer_stops_sampling_early_and_says_why():
    """The metric calls 10 ms of one call faster; each process's own time swings by a second (an import
    that dwarfs the timed call): no clock can tell 10 ms by pair 20, so sampling stops at the first look
    that knows it, not at pair 20, and the stop reason says so. With the clock steady, it confirms."""
    def bench(swing: float):
        rng = random.Random(5)

        def one(side: str, root: Path, spec: PerfSpec) -> Reading:
            value = {"baseline": 100.0, "candidate": 90.0}[side] * (1 + rng.uniform(-0.01, 0.01))
            wall = 10.0 + rng.uniform(-swing, swing) + value / 1e3
            return Reading(value, "ms", "wall-clock", wall, wall)
        return one

    spec = PerfSpec(command="x", metric="t_ms", min_effect=0.03, calls=1)
    sides = {"baseline": Path("b"), "candidate": Path("c")}
    noisy = sample(sides, spec, FULL, seed=2, bench=bench(1.0))
    assert noisy.comparison.verdict == "faster" and len(noisy.values["baseline"]) == 8
    assert "cannot tell the claimed" in noisy.comparison.stop_reason, noisy.comparison.stop_reason
    steady = sample(sides, spec, FULL, seed=2, bench=bench(0.0001))
    assert len(steady.values["baseline"]) == 7 and steady.comparison.stop_reason == "significant after 7 pairs"


def _checker_with_fake_bench(tmp_path, monkeypatch, values: dict[str, float], noise: float = 0.002, perf: str = ""):
    """A real Checker whose bench returns `values[side]` (times a little seeded noise); `perf`: more [perf] lines."""
    task, src = make_task(tmp_path, correctness=IMPORT_ONLY, poison=False, min_effect=0.03)
    ref = tmp_path / "reference.diff"
    ref.write_text(make_patch(src, tmp_path, FASTER))
    (tmp_path / "task.toml").write_text(f'{(tmp_path / "task.toml").read_text()}{perf}\n[reference]\npatch = "{ref}"\n')
    from agent.task import load_task

    rng = random.Random(0)

    class Bench:
        mode = "a fake bench"

        def __call__(self, side, root, spec):
            return values[side] * (1 + noise * rng.random()), "ms"

        def close(self):
            pass
    monkeypatch.setattr(collect, "_bench", lambda checker_sides, bench_sides: Bench())
    return Checker(load_task(tmp_path / "task.toml"), tmp_path / "work", lock_dir=tmp_path / "locks", seed=2), src


def test_the_fraction_of_the_reference_is_given_only_for_a_significant_speedup(tmp_path, monkeypatch):
    c, src = _checker_with_fake_bench(tmp_path, monkeypatch, {"baseline": 10.0, "candidate": 10.0, "reference": 5.0})
    with c:
        same = c.evaluate(make_patch(src, tmp_path, SAME), perf=True, reference=True)
        # stopped as soon as precise; the reference's 2x is measured, but no share of it is claimed
        assert same.perf.verdict == "no significant change" and same.perf.stop_reason.startswith("precise after")
        assert same.reference.speedup == pytest.approx(2.0, rel=0.01) and same.reference.fraction_of_reference is None
        assert "n/a (only for a significant speedup)" in summarize(same)
    c, src = _checker_with_fake_bench(tmp_path / "b", monkeypatch,
                                      {"baseline": 10.0, "candidate": 8.0, "reference": 5.0})
    with c:
        ev = c.evaluate(make_patch(src, tmp_path, FASTER), perf=True, reference=True)
    assert ev.perf.verdict == "faster" and ev.perf.stop_reason == f"significant after {ev.perf.n_pairs} pairs"
    assert (ev.perf.cv is not None
            and ev.perf.alpha == sequential_alpha(FULL.min_pairs, FULL.max_pairs, looks=FULL.looks))
    assert ev.reference.fraction_of_reference == pytest.approx((ev.speedup - 1) / (ev.reference.speedup - 1))
    assert ev.reference.fraction_of_reference == pytest.approx(0.25, rel=0.05)


def test_a_full_check_samples_no_more_than_the_tasks_max_pairs(tmp_path, monkeypatch):
    c, src = _checker_with_fake_bench(tmp_path, monkeypatch, {"baseline": 10.0, "candidate": 10.0, "reference": 10.0},
                                      noise=1.0, perf="max_pairs = 9\n")
    with c:
        ev = c.evaluate(make_patch(src, tmp_path, SAME), perf=True)
    assert ev.perf.n_pairs == ev.perf.max_pairs == 9 and ev.perf.verdict == "inconclusive", summarize(ev)
    assert ev.perf.stop_reason == "max pairs reached (9), interval wider than min effect"


def test_a_checks_bench_server_learns_from_the_baselines_warm_up_alone(tmp_path, monkeypatch):
    """The sampling asks its bench to learn (agent.checks.perf.Bench.learn) for the baseline's first run,
    the warm-up it discards, in a full and in a quick check; never for a sample it keeps."""
    c, src = _checker_with_fake_bench(tmp_path, monkeypatch, {"baseline": 10.0, "candidate": 10.0})
    asked: list[tuple[str, bool]] = []

    class Bench:
        mode, learn, learned = "a fake bench", False, 0

        def __call__(self, side, root, spec):
            asked.append((side, self.learn))
            self.learn = self.learn and side != "baseline"
            return 10.0 + 0.01 * len(asked), "ms"

        def close(self):
            pass
    monkeypatch.setattr(collect, "_bench", lambda checker_sides, bench_sides: Bench())
    with c:
        for quick in (False, True):
            asked.clear()
            c.evaluate(make_patch(src, tmp_path, SAME), perf=True, quick=quick)
            assert asked[0] == ("baseline", True) and not any(learn for _, learn in asked[1:]), asked


def test_the_warm_up_runs_beside_the_poisoned_tests_and_the_sampling_starts_with_a_kept_pair(tmp_path, monkeypatch):
    """Where the test runs go side by side, the sampling's warm-up (discarded; the server learns from the
    baseline's) runs once every other run has passed, while the poisoned run goes on, not on the quiet time
    the kept pairs need; the sampling then neither warms up again nor learns. The poisoned run here ends
    only once the warm-up has been (or after 20 s, where it waits for the poisoned run)."""
    from helpers import FIXTURE
    from agent.task import load_task

    wait = ('import os, time, pkg.work\nend = time.time() + 20\n'
            'while os.environ.get("PERFAGENT_POISON") and not os.path.exists("warmed") and time.time() < end:\n'
            '    time.sleep(0.05)\n')
    task, src = make_task(tmp_path, correctness="python wait.py", poison=True, min_effect=0.03,
                          files={**FIXTURE, "wait.py": wait})
    calls: list[tuple[str, bool, bool, float]] = []  # side, asked to learn, from the main thread, when

    class Bench:
        mode, learn, learned = "a fake bench", False, 0

        def __call__(self, side, root, spec):
            calls.append((side, self.learn, threading.current_thread() is threading.main_thread(), time.monotonic()))
            self.learn = self.learn and side != "baseline"
            if len(calls) == 2:
                (root / "warmed").write_text("")  # in the candidate's checkout, where its poisoned run waits
            return 10.0 + 0.01 * len(calls), "ms"

        def close(self):
            pass
    ended: dict[str, float] = {}
    run_check = collect.run_check

    def timed(name, *args, **kwargs):
        try:
            return run_check(name, *args, **kwargs)
        finally:
            ended[name] = time.monotonic()
    monkeypatch.setattr(collect, "_bench", lambda checker_sides, bench_sides: Bench())
    monkeypatch.setattr(collect, "run_check", timed)
    with Checker(load_task(tmp_path / "task.toml"), tmp_path / "work", lock_dir=tmp_path / "locks", seed=2) as c:
        ev = c.evaluate(make_patch(src, tmp_path, SAME), perf=True)
    assert ev.correctness.poison is not None and ev.correctness.poison.passed, ev.reasons
    warm, kept = calls[:2], calls[2:]
    assert [c[:3] for c in warm] == [("baseline", True, False), ("candidate", False, False)]
    assert all(at < ended["poison"] for *_, at in warm), "the warm-up waited for the poisoned run"
    assert kept and all(main and not learn and at > ended["poison"] for _, learn, main, at in kept), kept
    assert ev.perf.warmups_discarded == 1 and ev.perf.n_pairs == len(kept) // 2


# -- the device lock ---------------------------------------------------------------------------
def test_device_lock_excludes_other_holders_and_waits(tmp_path):
    messages: list[str] = []
    done = threading.Event()
    with device_lock("cuda:0", tmp_path, log=messages.append) as path:
        assert path == lock_path(tmp_path, "cuda:0") and path.name == "cuda-0.lock"
        with open(path, "a+") as other, pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with device_lock("cpu", tmp_path):
            pass  # another device is independent

        def second():
            with device_lock("cuda:0", tmp_path, log=messages.append):
                done.set()
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.3)
        assert not done.is_set() and "waiting" in messages[0]
    t.join(5)
    assert done.is_set()


# -- real processes ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def perf_checker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("perf")
    task, src = make_task(tmp, correctness=IMPORT_ONLY, poison=False, min_effect=0.03)
    ref = tmp / "reference.diff"
    ref.write_text(make_patch(src, tmp, FASTER))
    (tmp / "task.toml").write_text((tmp / "task.toml").read_text() + f'\n[reference]\npatch = "{ref}"\n')
    from agent.task import load_task

    # the full policy (5..20 pairs, sequential): a clear answer stops early, noise takes longer
    c = Checker(load_task(tmp / "task.toml"), tmp / "work", lock_dir=tmp / "locks", seed=11, full=FULL)
    yield c, src
    c.close()


@pytest.mark.slow
@pytest.mark.quiet  # it measures timings: alone under pytest -n
def test_aa_on_real_processes_calls_no_change(perf_checker, tmp_path):
    """Baseline against itself. The sequential procedure cries wolf in at most 5% of A/A runs
    (tests/bench/bench_stats.py measures it); a systematic bias (say, whoever runs second is
    faster) would show in every repetition, so we allow one false call in three rather than flake.
    On a quiet machine the answer is "no significant change", on a noisy one "inconclusive"; a metric that cries
    wolf while neither of the harness's clocks sees a saving is "not confirmed" (issue 45), never "faster"."""
    checker, src = perf_checker
    same = make_patch(src, tmp_path, SAME)
    verdicts = []
    for _ in range(3):
        ev = checker.evaluate(same, perf=True)
        assert ev.verdict == "pass" and ev.perf.error is None, summarize(ev)
        assert (5 <= ev.perf.n_pairs <= 20 and ev.perf.warmups_discarded == 1
                and len(ev.perf.warmup_samples["baseline"]) == 1)
        assert ev.perf.stop_reason and ev.perf.cv is not None, summarize(ev)
        # both sides' samples are children of one server, or (no bubblewrap) all fresh processes
        assert ev.perf.processes == ("forked from one warm server" if WarmPython.available() else "fresh processes")
        verdicts.append(ev.perf.verdict)
    assert set(verdicts) <= {"no significant change", "inconclusive", "not confirmed", "faster", "slower"}, verdicts
    assert sum(v in ("faster", "slower", "not confirmed") for v in verdicts) <= 1, verdicts  # the metric's false calls


@pytest.mark.slow
@pytest.mark.quiet  # it measures timings: alone under pytest -n
def test_injected_20_percent_slowdown_is_found_with_the_true_ratio_in_the_interval(perf_checker, tmp_path):
    """The loop does exactly 1.2x the iterations. Right answers: "slower" with 1.2 in the interval,
    or, on a machine too noisy to tell in 20 pairs, "inconclusive" with 1.2 in the interval (honest).
    Wrong answers fail at once: "faster", "no significant change" (a precise interval that holds 1 excludes 1.2, as
    min_effect is 0.03). A 95% interval misses the truth 5% of the time by design, so a measurement
    whose interval (or the reference's) misses the truth gets another; a biased method misses all three."""
    checker, src = perf_checker
    patch = make_patch(src, tmp_path, SLOWER)
    seen = []
    for _ in range(3):
        ev = checker.evaluate(patch, perf=True, reference=True)
        p, r = ev.perf, ev.reference
        assert ev.verdict == "pass" and p.error is None and r is not None and r.error is None, summarize(ev)
        seen.append(f"{p.verdict} {p.ratio:.3f} [{p.ci_low:.3f}, {p.ci_high:.3f}] {p.n_pairs} pairs, cv {p.cv:.3f}")
        assert p.verdict in ("slower", "inconclusive"), seen  # never faster, never a precise "no change"
        assert p.verdict == "slower" or p.n_pairs == 20, seen  # unclear answers use every pair first
        if p.ci_low <= 1.2 <= p.ci_high and r.verdict == "faster" and r.ci_low <= 0.5 <= r.ci_high:
            break
    assert p.ci_low <= 1.2 <= p.ci_high, seen
    assert ev.coverage.covered == ["pkg/work.py:1"], summarize(ev)
    assert p.unit == "ms" and p.metric == "spin_ms" and p.device == "cpu" and p.stop_reason
    assert ev.speedup == pytest.approx(1 / p.ratio)
    # the reference (half the iterations) ran in the same rounds; a 2x gain is clear even on a noisy machine
    assert r.verdict == "faster" and r.ci_low <= 0.5 <= r.ci_high and len(r.samples) == p.n_pairs, summarize(ev)
    assert r.fraction_of_reference is None, "a slower candidate earns no share of the reference's gain"
    if p.verdict == "slower":
        assert p.p_value < p.alpha and ev.speedup < 1 and p.stop_reason == f"significant after {p.n_pairs} pairs"
    else:
        assert p.stop_reason.startswith("max pairs reached (20)") and "could not tell" in summarize(ev), seen
    assert (checker.measuring.lock_dir / "cpu.lock").exists()


@pytest.mark.slow
def test_quick_mode_takes_few_pairs(perf_checker, tmp_path):
    checker, src = perf_checker
    ev = checker.evaluate(make_patch(src, tmp_path, FASTER), quick=True)
    # QUICK looks from 4 to 8 pairs; its per-look level (~0.039) is reachable from 6 pairs (all one way)
    assert ev.quick and 6 <= ev.perf.n_pairs <= 8
    assert ev.perf.verdict == "faster" and ev.perf.speedup > 1.5, summarize(ev)
@pytest.mark.slow
def test_a_candidate_that_breaks_the_bench_fails_and_a_missing_metric_is_an_error(tmp_path):
    task, src = make_task(tmp_path, correctness=IMPORT_ONLY, poison=False)
    broken = make_patch(src, tmp_path, {"pkg/work.py": ("ITERS = 60_000", "ITERS = None")})
    with Checker(task, tmp_path / "work", lock_dir=tmp_path / "locks") as c:
        ev = c.evaluate(broken, quick=True)
    assert ev.verdict == "fail" and ev.perf.error_side == "candidate"
    assert "candidate bench failed" in ev.perf.error and "TypeError" in ev.perf.error

    other = tmp_path / "other"
    other.mkdir()
    task, osrc = make_task(other, correctness=IMPORT_ONLY, poison=False, metric="tokens_per_s")
    with Checker(task, other / "work", lock_dir=tmp_path / "locks") as c:
        ev = c.evaluate(make_patch(osrc, other, SAME), quick=True)
    assert ev.verdict == "error"
    assert "metrics printed: other_ms, spin_ms" in ev.error


MULTI_LINE_BENCH = """import json
import time

from pkg.work import spin

for _ in range(5):
    t = time.perf_counter()
    spin()
    print(json.dumps({"metric": "spin_ms", "value": (time.perf_counter() - t) * 1000, "unit": "ms"}))
"""


@pytest.mark.slow
def test_a_bench_printing_the_metric_once_per_timed_call_is_measured(tmp_path, capsys):
    """A common shape: a line per timed call. Those are the process's samples (median); the outside clock's
    `calls` defaults to their count. On main this was an evaluation error ("printed 5 times")."""
    from helpers import FIXTURE

    from agent.cli import main

    task, src = make_task(tmp_path, correctness=IMPORT_ONLY, poison=False,
                          files={**FIXTURE, "bench/bench.py": MULTI_LINE_BENCH})
    patch = tmp_path / "faster.diff"
    patch.write_text(make_patch(src, tmp_path, {"pkg/work.py": ("ITERS = 60_000", "ITERS = 12_000")}))
    code = main(["check", str(tmp_path / "task.toml"), "--patch", str(patch), "--json", "--lock-dir",
                 str(tmp_path / "locks")])
    ev = json.loads(capsys.readouterr().out)
    assert code == 0 and ev["verdict"] == "pass" and ev["perf"]["error"] is None, ev
    assert ev["perf"]["lines"] == 5 and ev["perf"]["outside"]["calls"] == 5
    # a ~10 ms saving a process: on a loaded machine (the parallel suite) a clock may not resolve it, which
    # leaves the speed not established; what it must never be is refuted (the claim is 5 x the true gap)
    outside = ev["perf"]["outside"]
    assert ev["perf"]["verdict"] == "faster" or (ev["perf"]["verdict"] == "not confirmed"
                                                 and outside["refuted"] is False), ev["perf"]
