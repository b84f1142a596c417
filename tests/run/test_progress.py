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


def test_still_going_says_so_at_each_ten_seconds_of_one_step():
    from agent.run.progress import StillGoing

    still = StillGoing("checking the task on its unchanged base", since=100.0)
    assert still.due(now=109.9) is None
    assert still.due(now=110.2) == "still checking the task on its unchanged base, 10 s"
    assert still.due(now=115.0) is None  # once per ten seconds
    assert still.due(now=131.0) == "still checking the task on its unchanged base, 30 s"
    still.step("tool run_checks", since=131.0)  # a new step starts its own clock
    assert still.due(now=135.0) is None and still.due(now=141.0) == "still tool run_checks, 10 s"


def test_with_no_terminal_each_event_is_one_unwrapped_line_and_a_long_step_says_so():
    """A pipe (CI, a log file, `| tee`): no redrawn status line, no wrapping at rich's 80 columns, and a step
    that runs on (the base check takes a minute) is never silence."""
    out = StringIO()
    console = Console(file=out, width=80, force_terminal=False)
    long_step = "checking the task on its unchanged base: its tests and bench, once (tests/test_miniattn_attention.py)"
    with RunProgress(console, "cuda-graph-buffers · rules") as progress:
        progress("turn", {"turn": 1, "activity": "waiting for the model"})
        progress("usage", {"usage": Usage(input_tokens=10), "cost_usd": 0.0})  # left to the last line
        progress("log", {"message": long_step})
        told = out.getvalue().splitlines()
        assert len(told) == 2 and told[0].endswith(" turn 1") and told[1].endswith(" " + long_step), told
        progress.still.since -= 21  # the step began 21 s ago
        deadline = time.monotonic() + 10
        while ", 20 s" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.1)
        progress("checked", {"full": True, "n": 1, "verdict": "pass", "duration_s": 58.4,
                             "line": "pass · faster: ratio 0.401 [0.312, 0.560] (speedup 2.50x), 7 pairs " * 2})
    lines = out.getvalue().splitlines()
    assert lines[0].endswith(" turn 1") and lines[1].endswith(" " + long_step), lines
    assert lines[2].endswith(f"   still {long_step}, 20 s"), lines
    assert lines[3].endswith("(58.4s)") and "final evaluation #1: pass · faster" in lines[3]
    assert len(lines[1]) > 80 and len(lines[3]) > 80  # each a line of its own, not wrapped at 80
    assert len(lines) == 5 and lines[4].startswith("cuda-graph-buffers · rules  turn 1"), lines
    assert not any("usage" in line for line in lines)
