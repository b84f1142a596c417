"""The labelled benchmark of lint findings (tests/data/findings): loading and scoring.

Labels are ground truth read off the code (labels.toml says what each verdict means per rule);
findings are matched to them by path, rule and key (function::target), which do not move when
unrelated lines do. Shared by tests/bench/bench_findings.py and test_findings_labels.py.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from agent.analyzers import Finding, analyze_paths

if sys.version_info >= (3, 11):
    import tomllib
else:  # the project supports 3.10, where tomli stands in
    import tomli as tomllib

DATA = Path(__file__).resolve().parents[1] / "data" / "findings"
SOURCES = DATA / "src"
ZERO_INIT = "zero-init-buffer"


@dataclass(frozen=True)
class Label:
    path: str        # relative to SOURCES
    line: int
    rule: str
    key: str         # function::target
    verdict: str     # "tp" | "fp"; for zero-init-buffer, "tp" = zeros -> empty is actually safe
    reason: str

    @property
    def ident(self) -> tuple[str, str, str]:
        return self.path, self.rule, self.key


@dataclass(frozen=True)
class Claim:
    """What an analyzer said about one finding: the part a label judges."""

    path: str
    rule: str
    key: str
    safe_to_rewrite: bool

    @property
    def ident(self) -> tuple[str, str, str]:
        return self.path, self.rule, self.key


@dataclass(frozen=True)
class RuleScore:
    rule: str
    findings: int
    labelled: int
    true: int
    safe_claims: int = 0      # zero-init-buffer findings marked safe_to_rewrite
    safe_true: int = 0        # ... of which the rewrite is actually safe

    @property
    def precision(self) -> float | None:
        return self.true / self.labelled if self.labelled else None

    @property
    def safe_precision(self) -> float | None:
        return self.safe_true / self.safe_claims if self.safe_claims else None


def load_labels(path: Path = DATA / "labels.toml") -> dict[tuple[str, str, str], Label]:
    entries = tomllib.loads(path.read_text(encoding="utf-8"))["finding"]
    labels = [Label(**e) for e in entries]
    bad = [lb for lb in labels if lb.verdict not in ("tp", "fp")]
    if bad:
        raise ValueError(f"verdict must be tp or fp: {bad[0]}")
    by_id = {lb.ident: lb for lb in labels}
    if len(by_id) != len(labels):
        raise ValueError("two labels for one finding (same path, rule and key)")
    return by_id


def current_claims() -> list[Claim]:
    """The analyzers' findings on the labelled sources now."""
    found: list[Finding] = analyze_paths([SOURCES], root=SOURCES, exclude=())
    return [Claim(f.path, f.rule, f.key.split("::", 1)[1], f.safe_to_rewrite) for f in found]


def before_claims(path: Path = DATA / "before.json") -> list[Claim]:
    """The findings the analyzers reported on the same sources before the honest-labels change."""
    return [Claim(**row) for row in json.loads(path.read_text(encoding="utf-8"))]


def score(claims: list[Claim], labels: dict[tuple[str, str, str], Label]) -> list[RuleScore]:
    by_rule: dict[str, list[Claim]] = defaultdict(list)
    for c in claims:
        by_rule[c.rule].append(c)
    out = []
    for rule in sorted({lb.rule for lb in labels.values()} | set(by_rule)):
        mine = by_rule.get(rule, [])
        judged = [(c, labels[c.ident]) for c in mine if c.ident in labels]
        safe = [(c, lb) for c, lb in judged if c.safe_to_rewrite]
        out.append(RuleScore(rule, len(mine), len(judged), sum(lb.verdict == "tp" for _, lb in judged),
                             len(safe), sum(lb.verdict == "tp" for _, lb in safe)))
    return out


def unlabelled(claims: list[Claim], labels: dict[tuple[str, str, str], Label]) -> list[Claim]:
    return [c for c in claims if c.ident not in labels]
