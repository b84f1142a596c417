"""`perfagent runs [DIR]`: the runs under a results folder, one short record each (its date, how many tasks,
who ran, what it came to), newest first, so a run id need not be remembered or found with `ls`.

Each run is read through the one loader (`agent.results.load`), so its headline counts are summary.json's.
Text from a run's files (ids, model names) may come from elsewhere: control characters are stripped.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from agent.results.layout import LEDGER, PLAN, RESULTS, job_folders, split_key
from agent.results.load import load_run
from agent.util.text import strip_controls
from agent.errors import BadInput

__all__ = ["RunLine", "RunsError", "find_runs", "list_runs", "render_runs", "runs_json", "runs_text"]


class RunsError(BadInput):
    """A folder that is not there: one line for the user."""


@dataclass(frozen=True)
class RunLine:
    """One run as `runs` lists it."""

    run_id: str
    path: str
    date: float  # when it was planned, else when its last job ended (seconds since the epoch)
    tasks: int
    jobs: int
    contestants: list[str]
    headline: str


def find_runs(folder: Path | str) -> list[Path]:
    """The run folders `folder` names: itself when it is one run, else the runs in it (or in its results/)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise RunsError(f"{folder}: no such folder")
    if _is_run(folder):
        return [folder]
    runs = [d for d in sorted(folder.iterdir()) if d.is_dir() and _is_run(d)]
    if not runs and (folder / RESULTS).is_dir():
        return find_runs(folder / RESULTS)
    return runs


def _is_run(d: Path) -> bool:
    """A batch (its ledger or plan), or a folder whose jobs are all one run's: a single run's `<task>` or a
    batch's `<task>/<model>/s<k>`. A folder of several runs is none: its runs are listed, never pooled."""
    if (d / LEDGER).is_file() or (d / PLAN).is_file():
        return True
    keys = job_folders(d)
    return bool(keys) and all("/" not in k or (k.count("/") == 2 and split_key(k).slug is not None) for k in keys)


def list_runs(folder: Path | str) -> list[RunLine]:
    """Every run under `folder`, newest first."""
    return sorted((run_line(d) for d in find_runs(folder)), key=lambda r: (-r.date, r.run_id))


def run_line(run_dir: Path) -> RunLine:
    run = load_run(run_dir)
    records, plan = run.records, run.plan
    s = run.summary()
    ran = [r for r in records if r.status != "skipped"]
    contestants = list(dict.fromkeys([*plan.models, *(r.model for r in records)]))
    tasks = {r.task for r in records} | {j.task for j in plan.jobs}
    date = plan.created or max((r.finished_at for r in records), default=0.0) or run_dir.stat().st_mtime
    correct = [r for r in ran if r.correct]
    best = max((r.speedup for r in ran if r.faster and r.speedup is not None), default=None)
    if len(ran) == 1 and not plan.jobs:  # a single run: what it came to, in its own words
        (one,) = ran
        headline = one.outcome + (f", {one.speedup:.3g}x ({one.perf_verdict})" if one.speedup is not None else "")
    else:
        pending = sum(m.pending for m in s.models)
        skipped = sum(m.skipped for m in s.models)
        headline = ", ".join([f"{len(correct)}/{len(ran)} correct",
                              f"{sum(r.faster for r in ran)} faster" + (f" (best {best:.3g}x)" if best else ""),
                              *([f"{s.failed} failed"] if s.failed else []),
                              *([f"{skipped} skipped"] if skipped else []),
                              *([f"{pending} not run"] if pending else [])])
    return RunLine(run_id=run_dir.name, path=str(run_dir), date=date, tasks=len(tasks), jobs=len(ran),
                   contestants=contestants, headline=headline)


def render_runs(lines: list[RunLine], folder: Path | str) -> str:
    """Two lines a run, never wider than what they hold (a pipe or a narrow terminal breaks no word of ours)."""
    if not lines:
        return f"no runs in {strip_controls(str(folder))}\n"
    out = []
    for r in lines:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.date)) if r.date else "-"
        who = ", ".join(strip_controls(c) for c in r.contestants) or "-"
        out.append(f"{strip_controls(r.run_id)}  {when}  {r.tasks} task{'s' if r.tasks != 1 else ''}  {who}")
        out.append(f"    {strip_controls(r.headline)}")
    return "\n".join(out) + "\n"


def runs_json(lines: list[RunLine]) -> list[dict]:
    return [asdict(r) for r in lines]


def runs_text(folder: Path | str, *, as_json: bool = False) -> str:
    """`perfagent runs [DIR] [--json]`, as the text to print."""
    import json

    lines = list_runs(folder)
    return json.dumps(runs_json(lines), indent=2) + "\n" if as_json else render_runs(lines, folder)
