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


@pytest.mark.parametrize("path, hit", [
    ("tests/test_mod.py", True),
    ("pkg/tests/helper.py", True),  # a tests/ folder at any depth
    ("pkg/test_unit.py", True),
    ("conftest.py", True),
    ("pkg/sub/conftest.py", True),
    ("pkg/mod.py", False),
    ("pkg/contest.py", False),
    ("pkg/latest_test.py", False),
])
def test_the_linters_default_excludes_are_globs_of_this_dialect(path, hit):
    from agent.analyzers import DEFAULT_EXCLUDE

    assert matches_any(path, DEFAULT_EXCLUDE) is hit


def test_the_linter_excludes_by_this_dialect(tmp_path):
    """`perfagent lint`'s excludes are matched as protected paths are: `bench/*.py` at any depth."""
    from agent.analyzers import analyze_paths

    for name in ("pkg/mod.py", "pkg/bench/b.py", "bench/top.py", "pkg/benchmark.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("def forward(t):\n    return t.item()\n")
    found = {f.path for f in analyze_paths([tmp_path], root=tmp_path, exclude=["bench/*.py"])}
    assert found == {"pkg/mod.py", "pkg/benchmark.py"}
