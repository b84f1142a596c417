"""Perf measurement: metric parsing, interleaved sampling, the device lock, and the honesty
tests on real processes (A/A says nothing; an injected 20% slowdown is found, interval and all)."""

from __future__ import annotations

import fcntl
import threading
import time
from pathlib import Path

import pytest

from agent.checks import Checker, SamplingPolicy, summarize
from agent.checks.lock import device_lock, lock_path
from agent.checks.perf import parse_metric, sample
from agent.task import PerfSpec
from helpers import make_patch, make_task

IMPORT_ONLY = 'python -c \\"import pkg.work\\"'  # cheap correctness: executes the ITERS line, no torch
SLOWER = {"pkg/work.py": ("ITERS = 60_000", "ITERS = 72_000")}  # exactly 1.2x the loop iterations
FASTER = {"pkg/work.py": ("ITERS = 60_000", "ITERS = 30_000")}


# -- metric lines ------------------------------------------------------------------------------
def test_parse_metric_takes_the_named_metric_and_says_what_was_printed_otherwise():
    out = 'noise\n{"metric": "a_ms", "value": 1.5, "unit": "ms"}\n{"metric": "b", "value": 2}\n{not json\n'
    assert parse_metric(out, "a_ms") == (1.5, "ms")
    assert parse_metric(out, "b") == (2.0, None)
    with pytest.raises(ValueError, match=r"'c' not printed \(metrics printed: a_ms, b\)"):
        parse_metric(out, "c")
    with pytest.raises(ValueError, match="none"):
        parse_metric("hello\n", "c")
    with pytest.raises(ValueError, match="numeric"):
        parse_metric('{"metric": "a", "value": "fast"}', "a")


# -- sampling with a fake bench ----------------------------------------------------------------
def fake_bench(values: dict[str, float], calls: list[str]):
    def bench(side: str, root: Path, spec: PerfSpec):
        calls.append(side)
        noise = 1 + 0.001 * (len(calls) % 3)
        return values[side] * noise, "ms"
    return bench


def test_rounds_interleave_in_shuffled_order_and_the_warmup_is_discarded():
    calls: list[str] = []
    spec = PerfSpec(command="x", metric="m", min_effect=0.0001)  # never precise: runs to max_pairs
    s = sample({"baseline": Path("b"), "candidate": Path("c")}, spec, SamplingPolicy(5, 12, warmup=1), seed=3,
               bench=fake_bench({"baseline": 10.0, "candidate": 8.0}, calls))
    pairs = [tuple(calls[i:i + 2]) for i in range(0, len(calls), 2)]
    assert len(pairs) == 13 and all(set(p) == {"baseline", "candidate"} for p in pairs)
    assert {("baseline", "candidate"), ("candidate", "baseline")} <= set(pairs), "order is randomised per pair"
    assert len(s.values["baseline"]) == 12 and len(s.warmup["baseline"]) == 1
    assert s.comparison.verdict == "faster" and s.unit == "ms"
    again: list[str] = []
    sample({"baseline": Path("b"), "candidate": Path("c")}, spec, SamplingPolicy(5, 12, warmup=1), seed=3,
           bench=fake_bench({"baseline": 10.0, "candidate": 8.0}, again))
    assert again == calls, "the order is reproducible from the seed"


def test_sampling_stops_once_the_interval_is_narrower_than_the_minimum_effect():
    calls: list[str] = []
    spec = PerfSpec(command="x", metric="m", min_effect=0.05)
    s = sample({"baseline": Path("b"), "candidate": Path("c"), "reference": Path("r")}, spec,
               SamplingPolicy(5, 15), seed=0, bench=fake_bench({"baseline": 10.0, "candidate": 10.0, "reference": 5.0}, calls))
    assert len(s.values["candidate"]) == 5 and s.comparison.precise
    assert len(calls) == 3 * 6 and len(s.values["reference"]) == 5


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

    # at most 10 pairs (the default is 15): enough for these effects, and keeps the tests short
    c = Checker(load_task(tmp / "task.toml"), tmp / "work", lock_dir=tmp / "locks", seed=11,
                full=SamplingPolicy(min_pairs=5, max_pairs=10))
    yield c, src
    c.close()


@pytest.mark.slow
def test_aa_on_real_processes_reports_no_change(perf_checker):
    """Baseline against itself. A 95% procedure may still cry wolf once in a while (about 3% of
    A/A runs in test_checks_stats); a systematic bias (say, whoever runs second is faster) would
    show in every repetition, so we allow one false verdict in three rather than flake."""
    checker, _ = perf_checker
    verdicts = []
    for _ in range(3):
        ev = checker.evaluate("", perf=True)
        assert ev.verdict == "pass" and ev.perf.error is None, summarize(ev)
        assert 5 <= ev.perf.n_pairs <= 10 and ev.perf.warmups_discarded == 1 and len(ev.perf.warmup_samples["baseline"]) == 1
        verdicts.append(ev.perf.verdict)
    assert verdicts.count("no significant change") >= 2, verdicts


@pytest.mark.slow
def test_injected_20_percent_slowdown_is_found_with_the_true_ratio_in_the_interval(perf_checker, tmp_path):
    """The loop does exactly 1.2x the iterations. A 95% interval misses the truth 5% of the time
    by design (more on a loaded machine), so a miss gets another measurement."""
    checker, src = perf_checker
    patch = make_patch(src, tmp_path, SLOWER)
    for _ in range(3):  # a busy machine can blur one measurement; a biased method fails all three
        ev = checker.evaluate(patch, perf=True, reference=True)
        ref = ev.reference.speedup if ev.reference is not None else None
        if (ev.perf.verdict == "slower" and ev.perf.ci_low <= 1.2 <= ev.perf.ci_high
                and ref is not None and abs(ref - 2.0) <= 0.3):
            break
    p = ev.perf
    assert ev.verdict == "pass" and ev.coverage.covered == ["pkg/work.py:1"], summarize(ev)
    assert p.verdict == "slower", summarize(ev)
    assert p.ci_low <= 1.2 <= p.ci_high, summarize(ev)
    assert p.p_value < 0.05 and p.unit == "ms" and p.metric == "spin_ms" and p.device == "cpu"
    assert ev.speedup == pytest.approx(1 / p.ratio) and ev.speedup < 1
    # the reference (half the iterations) ran in the same rounds
    r = ev.reference
    assert r.verdict == "faster" and r.speedup == pytest.approx(2.0, rel=0.15) and len(r.samples) == p.n_pairs
    assert r.fraction_of_reference == pytest.approx((ev.speedup - 1) / (r.speedup - 1))
    assert (checker.lock_dir / "cpu.lock").exists()


@pytest.mark.slow
def test_quick_mode_takes_few_pairs(perf_checker, tmp_path):
    checker, src = perf_checker
    ev = checker.evaluate(make_patch(src, tmp_path, FASTER), quick=True)
    assert ev.quick and 4 <= ev.perf.n_pairs <= 5
    assert ev.perf.verdict == "faster" and ev.perf.speedup > 1.5, summarize(ev)


def test_a_candidate_that_breaks_the_bench_fails_and_a_missing_metric_is_an_error(tmp_path):
    task, src = make_task(tmp_path, correctness=IMPORT_ONLY, poison=False)
    broken = make_patch(src, tmp_path, {"pkg/work.py": ("ITERS = 60_000", "ITERS = None")})
    with Checker(task, tmp_path / "work", lock_dir=tmp_path / "locks") as c:
        ev = c.evaluate(broken, quick=True)
    assert ev.verdict == "fail" and ev.perf.error_side == "candidate"
    assert "candidate bench failed" in ev.perf.error and "TypeError" in ev.perf.error

    other = tmp_path / "other"
    other.mkdir()
    task, _ = make_task(other, correctness=IMPORT_ONLY, poison=False, metric="tokens_per_s")
    with Checker(task, other / "work", lock_dir=tmp_path / "locks") as c:
        ev = c.evaluate("", quick=True)
    assert ev.verdict == "error"
    assert "metrics printed: other_ms, spin_ms" in ev.error
