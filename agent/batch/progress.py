"""Live progress of a batch: a bar, done / running / failed / skipped, ETA and dollars spent,
and one line per finished job above it. Where the output is no terminal (a log file, CI), one
plain line per event instead, as it happens, never wrapped: a job started, a check of a job landed,
a job ended, and a job's step that takes longer than 10 s says so every 10 s."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Callable

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from agent.batch.executors import JobSpec
from agent.results.record import JobRecord
from agent.run.progress import StillGoing
from agent.util.text import markup_safe

MARK = {"done": "[green]✓[/]", "failed": "[red]✗[/]", "skipped": "[yellow]-[/]"}


def eta_seconds(remaining: int, mean_job_s: float | None, workers: int) -> float | None:
    """Jobs left times the mean job time, spread over the workers; None before any job ended."""
    if mean_job_s is None:
        return None
    return remaining * mean_job_s / max(1, workers)


def _hms(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class BatchProgress:
    """Callbacks for the executor (`started`, `finished`); a context manager around the run."""

    def __init__(self, console: Console, *, total: int, workers: int, earlier: list[JobRecord], quiet: bool = False,
                 log_of: Callable[[str], Path] | None = None):
        self.console, self.workers, self.quiet = console, workers, quiet
        self.counts: Counter[str] = Counter(r.status for r in earlier)
        self.cost = sum(r.cost_usd or 0.0 for r in earlier)
        self.running: dict[str, float] = {}  # job key -> when it started
        self.log_of = log_of  # a job's batch.log, whose last line is its current step
        self.walls: list[float] = []
        self.total = total
        self.bar = Progress(TextColumn("[bold]batch[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=console, transient=False)
        self.task_id = self.bar.add_task("jobs", total=total, completed=len(earlier))
        self._live = Live(self, console=console, refresh_per_second=2, transient=False)
        self.plain = not console.is_terminal  # no redrawn display: lines as events happen
        self._read: dict[str, int] = {}  # a running job's log: how far its checks were told (plain)
        self._still: dict[str, StillGoing] = {}  # a running job's current step, and how long it was told (plain)
        self._stop = threading.Event()
        self._watch = threading.Thread(target=self._tell_checks, daemon=True)

    def __enter__(self) -> "BatchProgress":
        if self.quiet:
            pass
        elif self.plain:
            self._watch.start()
        else:
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.quiet:
            return
        if self.plain:
            self._stop.set()
            self._watch.join(5)
            self._say(self._status())
        else:
            self._live.refresh()
            self._live.__exit__(*exc)

    def started(self, job: JobSpec, device: str | None) -> None:
        self.running[job.key] = time.monotonic()
        self._still[job.key] = StillGoing("starting", self.running[job.key])
        if self.plain and not self.quiet:
            self._say(markup_safe(f"started {job.key}" + (f" on {device}" if device else "")))
        self._refresh()

    def _say(self, line: str | Text) -> None:
        """One line, never wrapped (a pipe's width is COLUMNS or rich's 80, not the reader's)."""
        self.console.print(line, highlight=False, soft_wrap=True)

    def _tell_checks(self, every_s: float = 1.0) -> None:
        """Plain output: each check a running job's log says has landed, as one line."""
        while not self._stop.wait(every_s):
            self.tell_checks()

    def tell_checks(self, now: float | None = None) -> None:
        """Each check a running job's log says has landed, as a line; and for a job whose latest step has gone
        on for another 10 s, "still <step>, 20 s"."""
        for key in list(self.running):
            if self.log_of is None:
                return
            lines, self._read[key] = _new_lines(self.log_of(key), self._read.get(key, 0))
            for line in lines:
                if _CHECKED.search(line):
                    self._say(f"  {markup_safe(key)}: {markup_safe(line.split(' ', 1)[-1])}")
            still = self._still.setdefault(key, StillGoing("starting", self.running.get(key)))
            if lines:
                still.step(lines[-1].split(" ", 1)[-1])  # the step, without the job's clock
            due = still.due(now)
            if due:
                self._say(f"  {markup_safe(key)}: {markup_safe(due)}")

    def finished(self, rec: JobRecord) -> None:
        self.running.pop(rec.key, None)
        self.counts[rec.status] += 1
        self.cost += rec.cost_usd or 0.0
        if rec.status != "skipped":
            self.walls.append(rec.wall_s)
        self.bar.advance(self.task_id)
        if not self.quiet:
            if self.plain:
                self.tell_checks()  # what it landed before it ended, first
                self._say(self._line(rec))
            else:
                self.console.print(self._line(rec), highlight=False)
        self._read.pop(rec.key, None)
        self._still.pop(rec.key, None)
        self._refresh()

    def _refresh(self) -> None:
        if not self.quiet and not self.plain:
            self._live.refresh()

    def _line(self, r: JobRecord) -> str:
        what = r.reason if r.status != "done" else " ".join(
            x for x in (r.outcome, f"{r.speedup:.3g}x" if r.speedup else None, r.perf_verdict) if x)
        cost = "" if r.cost_usd is None else f" ${r.cost_usd:.4f}"
        mark = MARK["failed"] if r.failure else MARK[r.status]  # an error subtype is never a tick
        return f"{mark} {markup_safe(f'{r.key}  {what}{cost}')}  [dim]{r.wall_s:.1f}s[/]"

    def __rich__(self) -> Group:
        """Redrawn twice a second: elapsed times and each job's latest step move between events."""
        return self._render()

    def jobs_table(self) -> Table:
        """One row per running job: task, model, sample, elapsed, and the last line of its log."""
        table = Table(box=None, show_header=True, header_style="dim", pad_edge=False)
        for col in ("task", "model", "sample", "elapsed", "step"):
            table.add_column(col, no_wrap=col != "step", overflow="ellipsis")
        now = time.monotonic()
        for key, since in sorted(self.running.items()):
            task, _, rest = key.partition("/")
            model, _, sample = rest.rpartition("/")
            step = _last_line(self.log_of(key)) if self.log_of else ""
            table.add_row(markup_safe(task), markup_safe(model), markup_safe(sample), _hms(now - since),
                          markup_safe(step))
        return table

    def _status(self) -> Text:
        done = sum(self.counts.values())
        mean = sum(self.walls) / len(self.walls) if self.walls else None
        eta = eta_seconds(self.total - done, mean, min(self.workers, max(1, self.total - done)))
        c = self.counts
        return Text.from_markup(
            f"done [green]{c['done']}[/] · running [cyan]{len(self.running)}[/] · failed [red]{c['failed']}[/] · "
            f"skipped [yellow]{c['skipped']}[/] · ETA {_hms(eta)} · spent ${self.cost:.4f}")

    def _render(self) -> Group:
        status = self._status()
        return Group(self.bar, status, self.jobs_table()) if self.running else Group(self.bar, status)


_CHECKED = re.compile(r"(?:quick check|final evaluation) #\d+: ")  # agent.run.progress.EventLog's "checked"


def _new_lines(path: Path, offset: int) -> tuple[list[str], int]:
    """The whole lines a growing log gained since `offset`, and the offset after them."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return [], offset
    whole = data[: data.rfind(b"\n") + 1]
    return [ln.strip() for ln in whole.decode("utf-8", "replace").splitlines() if ln.strip()], offset + len(whole)


def _last_line(path: Path, tail: int = 4096) -> str:
    """The last non-blank line of a growing log, reading only its end."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - tail))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return "starting"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "starting"
