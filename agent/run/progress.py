"""Live progress of one run in the terminal: what is happening now, in words, with a clock that
keeps ticking (a lock wait or a long test run must not look like a hang), and a line per check as
its verdict lands. With no terminal (a pipe, a log file, CI) nothing is redrawn: each event is one
line, never wrapped, and a step that takes longer than STILL_EVERY_S says so at each multiple of it."""

from __future__ import annotations

import threading
import time
from typing import Callable

from rich.console import Console
from rich.live import Live
from rich.text import Text

from agent.checks.render import LEVEL_STYLE, verdict_level
from agent.models.base import Usage
from agent.util.text import markup_safe, strip_controls


STILL_EVERY_S = 10  # with no terminal: how often a step still going says so


class StillGoing:
    """"still <step>, 20 s": the line a pipe gets at each STILL_EVERY_S of one step, so a long base check or
    lock wait is never silence. `step` starts a step; `due` is the line to print now, if any."""

    def __init__(self, step: str = "starting", since: float | None = None):
        self.step(step, since)

    def step(self, what: str, since: float | None = None) -> None:
        self.what, self.since, self.told = what, time.monotonic() if since is None else since, 0

    def due(self, now: float | None = None) -> str | None:
        went = int(((time.monotonic() if now is None else now) - self.since) // STILL_EVERY_S) * STILL_EVERY_S
        if went <= self.told:
            return None
        self.told = went
        return f"still {self.what}, {went} s"


class RunProgress:
    """An `on_event` callback that keeps one status line current (in a terminal) or writes one line per event
    (anywhere else); use as a context manager."""

    def __init__(self, console: Console, label: str):
        self.label = label
        self.turn = 0
        self.activity = "starting"
        self.step = ""  # the check's current step (tests, perf, a lock wait), from the checker's log
        self.step_since = time.monotonic()
        self.usage = Usage()
        self.cost: float | None = 0.0
        self.start = time.monotonic()
        self.console = console
        self.plain = not console.is_terminal  # nothing redrawn: a line per event, as it happens
        self.still = StillGoing()
        self._stop = threading.Event()
        self._watch = threading.Thread(target=self._tell_still, daemon=True)
        self._live = Live(self, console=console, refresh_per_second=4, transient=False)

    def __enter__(self) -> "RunProgress":
        if self.plain:
            self._watch.start()
        else:
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.plain:
            self._stop.set()
            self._watch.join(5)
            self._say(self.__rich__().plain.replace("\n", " "))  # where it ended, one line
            return
        self._live.refresh()
        self._live.__exit__(*exc)

    def _say(self, line: str) -> None:
        """One line to a pipe: never wrapped, whatever the width (COLUMNS, or rich's 80)."""
        self.console.print(Text(strip_controls(line)), soft_wrap=True, highlight=False)

    def _tell_still(self, every_s: float = 1.0) -> None:
        while not self._stop.wait(every_s):
            line = self.still.due()
            if line:
                self._say(f"{_clock(time.monotonic() - self.start):>6}   {line}")

    def __call__(self, kind: str, data: dict) -> None:
        if self.plain:
            self._plain(kind, data)
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
            if not self.plain:
                self._live.console.print(
                    f"  {what} #{data.get('n', '?')}: [{style}]{markup_safe(data.get('line', ''))}[/]"
                    f"  [dim]{data.get('duration_s') or 0:.1f}s[/]", highlight=False)
            self.activity, self.step = f"{what} #{data.get('n', '?')}: {data.get('verdict', '')}", ""
        elif kind == "usage":
            self.usage, self.cost = data["usage"], data["cost_usd"]
        elif kind == "log":
            self._set_step(data["message"])
        if not self.plain:
            self._live.refresh()

    def _plain(self, kind: str, data: dict) -> None:
        """A pipe's line for an event (a model's token counts are left to the last line)."""
        line = event_line(kind, data)
        if line is None or kind == "usage":
            return
        what = "final evaluation" if data.get("full") else "quick check"
        doing = {"turn": f"{data.get('activity', 'waiting for the model')} (turn {data.get('turn')})",
                 "tool": f"running tool {data.get('name')}", "checks": f"the {what} #{data.get('n', '?')}",
                 "checked": f"going on after the {what} #{data.get('n', '?')}"}
        if kind == "checked":
            line += f"  ({data.get('duration_s') or 0:.1f}s)"
        self.still.step(doing.get(kind, line))
        self._say(f"{_clock(time.monotonic() - self.start):>6} {line}")

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
        line = event_line(kind, data)
        if line is not None:
            self.write(f"{_clock(time.monotonic() - self.start):>6} {strip_controls(line)}")  # one line, no escapes


def event_line(kind: str, data: dict) -> str | None:
    """An event in words, one line (None for an event nobody reads): what a log or a pipe gets."""
    if kind == "turn":
        return f"turn {data['turn']}"
    if kind == "tool":
        return f"tool {data['name']}"
    what = "final evaluation" if data.get("full") else "quick check"
    if kind == "checks":
        return f"{what} #{data.get('n', '?')} of the change ({data.get('diff', '')})"
    if kind == "checked":
        return f"{what} #{data.get('n', '?')}: {data.get('line', '')}"
    if kind == "usage":
        u, cost = data["usage"], data["cost_usd"]
        return f"usage {u.input_tokens + u.output_tokens} tokens, " + ("cost unknown" if cost is None
                                                                       else f"${cost:.4f}")
    if kind == "log":
        return str(data["message"]).replace("\n", " ")
    return None


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"
