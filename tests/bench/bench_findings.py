"""Precision of `perfagent lint` on the labelled findings: `python tests/bench/bench_findings.py [--json]`.

Runs the analyzers on tests/data/findings/src (files from target_repo, SGLang 0.4.6.post5 and
vLLM 0.9.2) and prints, per rule, before (before.json: the analyzers before the honest-labels
change) and now: findings, how many are labelled, precision (labelled true / labelled), and for
zero-init-buffer the precision of `safe_to_rewrite` (a rewrite claimed safe that really is).
Findings without a label are listed, and make the exit status 1: label them in labels.toml.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analyzers"))

from labelled import RuleScore, before_claims, current_claims, load_labels, score, unlabelled  # noqa: E402


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _row(s: RuleScore) -> str:
    safe = f"{s.safe_true}/{s.safe_claims} = {_pct(s.safe_precision)}" if s.rule == "zero-init-buffer" else ""
    return f"{s.findings:>4} {s.labelled:>4} {_pct(s.precision):>6}  {safe}"


def main(argv: list[str]) -> int:
    labels = load_labels()
    now, before = current_claims(), before_claims()
    after_scores, before_scores = score(now, labels), {s.rule: s for s in score(before, labels)}
    missing = unlabelled(now, labels)
    if "--json" in argv:
        for when, scores in (("before", list(before_scores.values())), ("after", after_scores)):
            for s in scores:
                print(json.dumps({"metric": f"precision/{s.rule}", "when": when, "value": s.precision,
                                  "findings": s.findings, "labelled": s.labelled,
                                  "safe_to_rewrite_precision": s.safe_precision, "safe_claims": s.safe_claims}))
    else:
        projects: dict[str, int] = {}
        for lb in labels.values():
            projects[lb.path.split("/")[0]] = projects.get(lb.path.split("/")[0], 0) + 1
        print(f"{len(labels)} labelled findings: " + ", ".join(f"{p} {n}" for p, n in sorted(projects.items())))
        print(f"{'rule':<20} {'before: found lab  prec  safe':<44} {'after: found lab  prec  safe'}")
        for s in after_scores:
            b = before_scores.get(s.rule)
            print(f"{s.rule:<20} {_row(b) if b else '':<44} {_row(s)}")
    for c in missing:
        print(f"unlabelled: {c.path} [{c.rule}] {c.key}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
