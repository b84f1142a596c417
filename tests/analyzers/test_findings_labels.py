"""The analyzers against the labelled benchmark (tests/data/findings): every finding on the labelled
sources has a label, and `safe_to_rewrite` is right at least 95% of the times it is claimed."""

from __future__ import annotations

import pytest

from labelled import SOURCES, ZERO_INIT, current_claims, load_labels, score, unlabelled


@pytest.mark.slow
def test_every_finding_on_the_labelled_sources_is_labelled():
    labels = load_labels()
    assert len(labels) >= 60
    missing = unlabelled(current_claims(), labels)
    assert not missing, f"label these in tests/data/findings/labels.toml: {missing}"
    for lb in labels.values():  # each label points into a file it names
        assert 0 < lb.line <= len((SOURCES / lb.path).read_text(encoding="utf-8").splitlines()), lb


@pytest.mark.slow
def test_safe_to_rewrite_is_claimed_only_where_it_holds():
    [zero] = [s for s in score(current_claims(), load_labels()) if s.rule == ZERO_INIT]
    assert zero.labelled == zero.findings
    assert zero.safe_claims == 0 or zero.safe_true / zero.safe_claims >= 0.95, zero
