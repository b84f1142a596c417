"""agent.results.metrics: geometric mean and GSO's Opt@K."""

from __future__ import annotations

import pytest
from helpers import rec

from agent.results.metrics import geometric_mean, opt_at_k, opt_undecided, reaches_reference, within_noise


def test_geometric_mean():
    assert geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    assert geometric_mean([]) is None and geometric_mean([0.0, -1.0]) is None


def test_opt_at_k_follows_gso():
    by_task = {
        "solved": [rec(verdict="fail", speedup=3.0, ref=2.0, has_ref=True),  # fast but incorrect: no
                   rec(sample=1, speedup=1.9, ref=2.0, has_ref=True)],  # 95% of 2.0 = 1.9: yes
        "short": [rec(speedup=1.89, ref=2.0, has_ref=True), rec(sample=1, speedup=1.2, ref=2.0, has_ref=True)],
        "broken": [rec(verdict="fail", has_ref=True)],  # no sample correct: counted, not solved
        "small": [rec(speedup=1.05, ref=1.04, has_ref=True)],  # matches a reference that gains little: < 1.2x
        "no-ref": [rec(speedup=5.0)],  # no reference patch: not counted
    }
    assert opt_at_k(by_task) == (1, 4)
    assert not reaches_reference(rec(status="failed", speedup=3.0, ref=2.0))


def test_an_opt_decision_the_intervals_cannot_make_is_said_to_be_within_noise():
    """The same patch was "Opt yes" (1.02 of the reference) in one run and "Opt no" (0.69) in another, with
    overlapping intervals: the summary says how many tasks' decisions are that close."""
    close = rec(speedup=1.9, ref=1.86, has_ref=True, speedup_interval=(1.5, 2.3), reference_interval=(1.6, 2.2))
    clear = rec(task="u", speedup=3.0, ref=1.5, has_ref=True, speedup_interval=(2.8, 3.2),
                reference_interval=(1.4, 1.6))
    wrong = rec(task="v", verdict="fail", speedup=1.9, ref=1.86, has_ref=True, speedup_interval=(1.5, 2.3),
                reference_interval=(1.6, 2.2))
    assert within_noise(close) and not within_noise(clear) and not within_noise(wrong)
    assert within_noise(rec(speedup=1.9, ref=1.86, speedup_interval=(1.5, 2.3))) is False  # no reference interval
    assert opt_undecided({"t": [close], "u": [clear], "v": [wrong]}) == 1
