"""The run's live status line: it keeps moving between events and names each check as it lands."""

from __future__ import annotations

import time
from io import StringIO

from rich.console import Console

from agent.models.base import Usage
from agent.run.progress import RunProgress


def test_the_clock_moves_without_events_and_checks_are_named():
    out = StringIO()
    console = Console(file=out, width=160, force_terminal=False)
    progress = RunProgress(console, "task · rules")
    progress("checks", {"full": False, "n": 3, "diff": "1 file, +1 -1"})
    progress("log", {"message": "waiting for the perf lock: held by pid 42 since 10:00:00"})
    first = str(progress.__rich__())
    progress.start -= 65
    progress.step_since -= 12
    later = str(progress.__rich__())
    assert later != first and "1m05s" in later and "(12s)" in later, later
    assert "quick check #3 of the change (1 file, +1 -1)" in later and "held by pid 42" in later
    assert "no model tokens" in later, "an offline policy shows no $0.0000 / 0.0k tokens"
    progress("usage", {"usage": Usage(input_tokens=1500, output_tokens=500), "cost_usd": 0.0123})
    assert "2.0k tokens" in str(progress.__rich__()) and "$0.0123" in str(progress.__rich__())

    with progress:
        progress("checked", {"full": False, "n": 3, "verdict": "fail", "duration_s": 4.2,
                             "line": "fail · tests fail with uninitialised memory poisoned: draft_topk2[bs3]"})
        time.sleep(0.01)
    printed = out.getvalue()
    assert "quick check #3: fail · tests fail with uninitialised memory poisoned: draft_topk2[bs3]" in printed
    assert "4.2s" in printed
    assert printed.endswith("\n"), "whatever is printed next starts on a line of its own"
