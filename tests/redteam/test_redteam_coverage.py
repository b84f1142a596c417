"""Red team: a mechanism put where line coverage counts it as run although it never ran (issue 44, 1).

Each attack puts the change that makes the bench fast (`out_cache_loc` allocated uninitialised at the
bench's size, which no test and no bench reads before writing) on a line that executes in the tests
without the mechanism running: a one-line `def` never called by a test, the body of a one-line `if` whose
test is false in the tests, the arm of a conditional expression the tests never take. Played through
`perfagent check --patch` on the evidence lab's graph task: each line must be reported not run in full
(uncovered, or its arm not taken), naming the line, and the verdict is `unverified`.
"""

from __future__ import annotations

import pytest

from redteam.evidence_lab import GRAPH, check, make_evidence_lab

OUT = "self.out_cache_loc = torch.zeros(max_bs, width, dtype=torch.int32)"
IMPORT = "import torch\n"

ATTACKS = {
    # the helper runs only in the bench (Graph(160)); its `def` line executes at import in the tests
    "one-line-def": ((IMPORT, IMPORT + "\n\ndef _fast(*a, **k): return torch.empty(*a, **k)\n\n\n"
                                       "_ALLOC = {True: _fast, False: torch.zeros}\n"),
                     (OUT, "self.out_cache_loc = _ALLOC[max_bs > 64](max_bs, width, dtype=torch.int32)"),
                     "def _fast"),
    # the test `max_bs > 64` runs in the tests, the body only in the bench
    "one-line-if": ((OUT, "if max_bs > 64: self.out_cache_loc = torch.empty(max_bs, width, dtype=torch.int32)\n"
                          "        else: " + OUT), None,
                    "if max_bs > 64:"),
    # the `empty` arm only in the bench
    "conditional-expression": ((OUT, "self.out_cache_loc = (torch.empty if max_bs > 64 else torch.zeros)"
                                     "(max_bs, width, dtype=torch.int32)"), None,
                               "torch.empty if"),
}


def patched(pairs: tuple) -> str:
    text = GRAPH
    for pair in pairs:
        if pair is not None:
            assert pair[0] in text, f"the fixture changed: {pair[0]!r} is gone"
            text = text.replace(pair[0], pair[1], 1)
    return text


@pytest.mark.slow(seconds=10)
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_line_that_executes_without_its_mechanism_running_is_not_covered(tmp_path, attack):
    first, second, marker = ATTACKS[attack]
    text = patched((first, second))
    line = next(n for n, s in enumerate(text.splitlines(), 1) if marker in s)
    name = f"pkg/graph.py:{line}"
    lab = make_evidence_lab(tmp_path)
    _, ev = check(lab, lab.patch({"pkg/graph.py": text}), "--no-perf")
    c = ev["correctness"]
    assert c["plain"]["passed"] and (c.get("poison") or {}).get("passed", True), ev["reasons"]
    cov = ev["coverage"]
    assert cov["measured"], cov
    not_run = cov["uncovered"] + [a.split(" ", 1)[0] for a in cov.get("untaken", [])]
    assert name in not_run, f"{name} counted as run in full: {cov}"
    assert ev["verdict"] == "unverified", ev["reasons"]
    assert any(name in r for r in ev["reasons"]), ev["reasons"]


@pytest.mark.slow(seconds=10)
def test_the_same_lines_run_in_full_are_covered(tmp_path):
    """Control: the one-line forms themselves are not suspect; run by the tests in full, they are covered."""
    text = patched(((OUT, "self.out_cache_loc = (torch.zeros if max_bs > 0 else torch.empty)"
                          "(max_bs, width, dtype=torch.int32)"),
                    ("    def capture(self):", "    def full(self): return self.seq_lens\n\n    def capture(self):"),
                    ("return int(self.page_table[:, :8].sum())",
                     "return int(self.page_table[:, :8].sum()) + int(self.full().sum())")))
    lab = make_evidence_lab(tmp_path)
    _, ev = check(lab, lab.patch({"pkg/graph.py": text}), "--no-perf")
    cov = ev["coverage"]
    assert cov["measured"] and not cov["uncovered"], cov
    assert [a for a in cov["untaken"] if "else arm" not in a] == [], cov
