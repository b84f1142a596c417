"""Live progress of one run in the terminal: what is happening now, in words, with a clock that
keeps ticking (a lock wait or a long test run must not look like a hang), and a line per check as
its verdict lands."""

from __future__ import annotations

import time
from typing import Callable

from rich.console import Console
from rich.live import Live
from rich.text import Text

from agent.checks.render import LEVEL_STYLE, verdict_level
from agent.models.base import Usage
from agent.util.text import markup_safe, strip_controls


class RunProgress:
    """An `on_event` callback that keeps one status line current; use as a context manager."""

    def __init__(self, console: Console, label: str):
        self.label = label
        self.turn = 0
        self.activity = "starting"
        self.step = ""  # the check's current step (tests, perf, a lock wait), from the checker's log
        self.step_since = time.monotonic()
        self.usage = Usage()
        self.cost: float | None = 0.0
        self.start = time.monotonic()
        self._live = Live(self, console=console, refresh_per_second=4, transient=False)

    def __enter__(self) -> "RunProgress":
        self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._live.refresh()
        self._live.__exit__(*exc)
        if not self._live.console.is_terminal:  # a log file: the last frame has no line end of its own
            self._live.console.line()

    def __call__(self, kind: str, data: dict) -> None:
        if kind == "turn":
            self.turn, self.activity, self.step = data["turn"], data.get("activity", "waiting for the model"), ""
        elif kind == "tool":
            self.activity, self.step = f"tool {data['name']}", ""
        elif kind == "checks":
            what = "final evaluation" if data.get("full") else "quick check"
            self.activity = f"{what} #{data.get('n', '?')} of the change ({data.get('diff', '')})"
            self._set_step("starting")
        elif kind == "checked":
            style = LEVEL_STYLE[verdict_level(data.get("verdict", ""))] or "cyan"
            what = "final evaluation" if data.get("full") else "quick check"
            self._live.console.print(
                f"  {what} #{data.get('n', '?')}: [{style}]{markup_safe(data.get('line', ''))}[/]"
                f"  [dim]{data.get('duration_s') or 0:.1f}s[/]", highlight=False)
            self.activity, self.step = f"{what} #{data.get('n', '?')}: {data.get('verdict', '')}", ""
        elif kind == "usage":
            self.usage, self.cost = data["usage"], data["cost_usd"]
        elif kind == "log":
            self._set_step(data["message"])
        self._live.refresh()

    def _set_step(self, message: str) -> None:
        self.step, self.step_since = message, time.monotonic()

    def __rich__(self) -> Text:
        """Drawn on every refresh (four a second), so the clocks move between events."""
        now = time.monotonic()
        u = self.usage
        tokens = u.input_tokens + u.output_tokens + u.cache_read + u.cache_write_5m + u.cache_write_1h
        if tokens == 0 and self.cost == 0:
            spend = "no model tokens"
        else:
            cost = "cost unknown" if self.cost is None else f"${self.cost:.4f}"
            spend = f"{tokens / 1000:.1f}k tokens ({u.cache_read / 1000:.1f}k cached)  {cost}"
        step = f"\n  [dim]{markup_safe(self.step)} ({now - self.step_since:.0f}s)[/]" if self.step else ""
        return Text.from_markup(
            f"[bold]{markup_safe(self.label)}[/]  turn {self.turn}  [cyan]{markup_safe(self.activity)}[/]  {spend}  "
            f"{_clock(now - self.start)}{step}")


class EventLog:
    """An `on_event` callback for a run nobody watches live (a batch job): one timestamped line per
    step to `write`, flushed at once, so the job's batch.log fills as it runs and the batch's table
    can show each job's latest step."""

    def __init__(self, write: Callable[[str], None]):
        self.write = write
        self.start = time.monotonic()

    def __call__(self, kind: str, data: dict) -> None:
        if kind == "turn":
            line = f"turn {data['turn']}"
        elif kind == "tool":
            line = f"tool {data['name']}"
        elif kind == "checks":
            what = "final evaluation" if data.get("full") else "quick check"
            line = f"{what} #{data.get('n', '?')} of the change ({data.get('diff', '')})"
        elif kind == "checked":
            what = "final evaluation" if data.get("full") else "quick check"
            line = f"{what} #{data.get('n', '?')}: {data.get('line', '')}"
        elif kind == "usage":
            u, cost = data["usage"], data["cost_usd"]
            line = f"usage {u.input_tokens + u.output_tokens} tokens, " + ("cost unknown" if cost is None
                                                                            else f"${cost:.4f}")
        elif kind == "log":
            line = data["message"]
        else:
            return
        self.write(f"{_clock(time.monotonic() - self.start):>6} {strip_controls(line)}")  # one line, no escapes


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"
