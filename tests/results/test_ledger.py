"""agent.results.ledger: batch.jsonl, append-only, a torn last line ignored."""

from __future__ import annotations

from helpers import rec

from agent.results.ledger import Ledger


def test_ledger_append_and_torn_line(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.append(rec("a", status="failed", verdict=None))
    ledger.append(rec("a", speedup=1.5))
    ledger.append(rec("b"))
    with open(ledger.path, "a") as f:
        f.write('{"key": "c", "task": "c", "mod')  # a writer killed mid-line
    latest = ledger.latest()
    assert set(latest) == {"a/m/s0", "b/m/s0"} and latest["a/m/s0"].status == "done"
    assert all(r.finished_at > 0 for r in ledger.lines())
