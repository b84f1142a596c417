"""A large gain must show on the first call alone (agent.checks.firstcall): pure functions over made-up samples."""

from __future__ import annotations

import pytest

from agent.checks.evaluation import FirstCall, PerfResult
from agent.checks.firstcall import judge, needed
from agent.task import PerfSpec

TASK = PerfSpec(command="python bench.py", metric="init_ms", first_call="python bench.py --repeats 1")
BASE = [30.0, 31.0, 29.5, 30.5, 30.2, 29.8, 30.1, 30.4]


def answer(ratio: float, first: FirstCall | None, verdict: str = "faster", medians: tuple[float, float] | None = None
           ) -> PerfResult:
    """`medians`: the repeated calls' (baseline, candidate)."""
    b, c = medians or (None, None)
    return PerfResult(metric="init_ms", direction="lower", ratio=ratio, verdict=verdict, first_call=first, unit="ms",
                      baseline_median=b, candidate_median=c)


def first(candidate: list[float], error: str | None = None) -> FirstCall:
    return FirstCall(command=TASK.first_call or "", baseline_samples=BASE, candidate_samples=candidate, seed=1,
                     alpha=0.039, error=error)


def test_asked_beyond_the_hint_or_for_every_gain_of_a_repeating_bench():
    assert needed("faster", 0.01, TASK) and not needed("faster", 0.5, TASK)
    assert needed("faster", 0.5, TASK.model_copy(update={"repeated_calls": True}))
    assert not needed("inconclusive", 0.01, TASK) and not needed("slower", 40.0, TASK)
    assert not needed("faster", 0.01, TASK.model_copy(update={"first_call": None}))


def test_a_gain_only_repeated_calls_show_is_not_confirmed():
    """The memo: 10,000x over 22 calls, the first call as slow as ever."""
    p = judge(answer(1e-4, first([x * 1.01 for x in BASE]), medians=(20.0, 0.002)), TASK)
    assert p.verdict == "not confirmed" and p.first_call.verdict != "faster"
    assert "only on repeated calls (cached across calls)" in p.first_call.note


def test_a_saving_too_small_for_the_first_calls_noise_is_not_called_a_cache():
    """As on an H200: 0.229 -> 0.143 ms a repeated call (1.6x), a first call of 30 ms (here) that saves the
    same 0.086 ms, which its noise hides. Not shown, but not shown missing: no cache is named."""
    repeating = TASK.model_copy(update={"repeated_calls": True})
    p = judge(answer(0.62, first([x - 0.086 for x in reversed(BASE)]), medians=(0.229, 0.143)), repeating)
    assert p.verdict == "not confirmed" and p.first_call.verdict != "faster"
    assert "cached" not in p.first_call.note
    assert "cannot tell the 0.086 ms each repeated call saves (ratio 0.997 here) from none" in p.first_call.note


def test_a_gain_the_first_call_shows_stays_faster():
    p = judge(answer(1e-3, first([x / 900 for x in BASE])), TASK)
    assert p.verdict == "faster" and p.first_call.verdict == "faster"
    assert p.first_call.ratio == pytest.approx(1 / 900, rel=0.05) and "only on" not in p.first_call.note


def test_a_first_call_that_fails_is_no_confirmation():
    p = judge(answer(1e-3, first([], error="candidate bench failed (exit code 1)")), TASK)
    assert p.verdict == "not confirmed" and "first call alone fails" in p.first_call.note


def test_judged_again_under_the_task_as_it_is_now():
    """A hint raised past the gain: the check is not asked, so the recorded first call no longer counts."""
    memo = answer(0.05, first(list(BASE)))
    assert judge(memo, TASK).verdict == "not confirmed"
    assert judge(memo, TASK.model_copy(update={"max_speedup": 50})).verdict == "faster"
    assert judge(answer(1e-4, None), TASK).verdict == "faster"  # nothing recorded: nothing to judge from


def test_a_repeating_bench_needs_one_way_to_time_its_first_call():
    with pytest.raises(ValueError, match="repeated_calls = true needs first_call"):
        PerfSpec(command="python bench.py", metric="init_ms", repeated_calls=True)
    with pytest.raises(ValueError, match="name one"):
        PerfSpec(command="python bench.py", metric="init_ms", first_call="python bench.py --repeats 1",
                 first_call_metric="first_ms")
    by_metric = PerfSpec(command="python bench.py", metric="init_ms", repeated_calls=True, first_call_metric="first_ms")
    assert needed("faster", 0.9, by_metric) and not needed("faster", 0.9, TASK)
