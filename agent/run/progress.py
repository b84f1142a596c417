"""Live progress of one run in the terminal: turn, tool running, tokens and dollars so far."""

from __future__ import annotations

import time

from rich.console import Console
from rich.live import Live
from rich.text import Text

from agent.models.base import Usage


class RunProgress:
    """An `on_event` callback that redraws one status line; use as a context manager."""

    def __init__(self, console: Console, label: str):
        self.label = label
        self.turn = 0
        self.activity = "starting"
        self.usage = Usage()
        self.cost: float | None = 0.0
        self.start = time.monotonic()
        self._live = Live(self._render(), console=console, refresh_per_second=4, transient=False)

    def __enter__(self) -> "RunProgress":
        self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._live.update(self._render())
        self._live.__exit__(*exc)

    def __call__(self, kind: str, data: dict) -> None:
        if kind == "turn":
            self.turn, self.activity = data["turn"], "waiting for the model"
        elif kind == "tool":
            self.activity = f"tool {data['name']}"
        elif kind == "checks":
            self.activity = "final checks" if data.get("full") else "quick checks"
        elif kind == "usage":
            self.usage, self.cost = data["usage"], data["cost_usd"]
        elif kind == "log":
            self._live.console.print(f"  [dim]{data['message']}[/]", highlight=False)
        self._live.update(self._render())

    def _render(self) -> Text:
        u = self.usage
        tokens = u.input_tokens + u.output_tokens + u.cache_read + u.cache_write_5m + u.cache_write_1h
        cost = "cost unknown" if self.cost is None else f"${self.cost:.4f}"
        return Text.from_markup(
            f"[bold]{self.label}[/]  turn {self.turn}  [cyan]{self.activity}[/]  "
            f"{tokens / 1000:.1f}k tokens ({u.cache_read / 1000:.1f}k cached)  {cost}  "
            f"{time.monotonic() - self.start:.0f}s"
        )
