"""The one glob dialect for repo-relative paths (protected paths, focus files, test files).

fnmatch's rules, where `*` also crosses `/`, tried on the whole path and on each of its
trailing parts: `tests/**` covers everything below tests/ (and tests itself), `*.py` and
`conftest.py` match at any depth, `bench/*.py` matches `bench/a.py` and `x/bench/a.py`.
Matching more rather than less is the safe side for a path the agent must not touch.
"""

from __future__ import annotations

import fnmatch
from typing import Iterable


def matches(path: str, pattern: str) -> bool:
    parts = path.strip("/").split("/")
    if pattern.endswith("/**") and path.strip("/") == pattern[:-3]:
        return True
    return any(fnmatch.fnmatchcase("/".join(parts[i:]), pattern) for i in range(len(parts)))


def matches_any(path: str, patterns: Iterable[str]) -> bool:
    return any(matches(path, p) for p in patterns)
