"""The one glob dialect for repo-relative paths."""

from __future__ import annotations

import pytest

from agent.util.globs import matches_any


@pytest.mark.parametrize("path, pats, hit", [
    ("tests/test_mod.py", ["tests/**"], True),
    ("tests/deep/x/y.py", ["tests/**"], True),
    ("pkg/tests.py", ["tests/**"], False),
    ("bench/b.py", ["tests/**", "bench/**"], True),
    ("pkg/conftest.py", ["**/conftest.py"], True),
    ("conftest.py", ["conftest.py"], True),
    ("pkg/mod.py", ["*.md"], False),
    # one dialect: `*` crosses `/`, and a pattern also matches any trailing part of the path
    ("tests", ["tests/**"], True),
    ("pkg/sub/conftest.py", ["conftest.py"], True),
    ("x/bench/b.py", ["bench/*.py"], True),
    ("src/pkg/a.py", ["pkg/*"], True),
    ("pkg.py", ["pkg/*"], False),
])
def test_matches_any(path, pats, hit):
    assert matches_any(path, pats) is hit
