"""One line per finished batch job: the record, how it is read out of a report, and the ledger.

`results/<run-id>/batch.jsonl` is the batch's memory. Each line is written with a single
`write` on an O_APPEND descriptor and fsynced, after the job's report.json exists, so a
`kill -9` can lose the jobs in flight but never a finished one, and never leaves half a line
that a reader would trust (a torn last line is ignored).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator, Literal

from pydantic import BaseModel, ConfigDict

from agent.models.base import OFFLINE_MODELS

Status = Literal["done", "failed", "skipped"]
LEDGER = "batch.jsonl"


class Tokens(BaseModel):
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output + self.cache_read + self.cache_write

    def __add__(self, other: "Tokens") -> "Tokens":
        return Tokens(input=self.input + other.input, output=self.output + other.output,
                      cache_read=self.cache_read + other.cache_read, cache_write=self.cache_write + other.cache_write)


class JobRecord(BaseModel):
    """A finished job: who, what happened, where the files are, and its headline figures.

    The figures are copied from report.json for convenience (progress, quick reads); the
    summary re-reads report.json, which stays the source of truth.
    """

    model_config = ConfigDict(extra="ignore")

    key: str  # "<task>/<model-slug>/s<k>", also the job folder under results/<run-id>/
    task: str
    model: str  # the spec as the user wrote it
    sample: int
    status: Status
    reason: str | None = None  # why failed / skipped
    has_reference: bool = False  # the task has a reference patch (Opt@K counts it)
    report: str | None = None  # paths relative to the batch's out dir
    patch: str | None = None
    device: str | None = None  # CUDA_VISIBLE_DEVICES the job saw, if set
    exit_code: int | None = None
    # headline figures from report.json
    subtype: str | None = None
    verdict: str | None = None  # evaluation.verdict: pass | fail | unverified | rejected | error | no-change
    perf_verdict: str | None = None  # faster | slower | no significant change
    speedup: float | None = None  # >1 is better, whichever way the metric points
    reference_speedup: float | None = None
    fraction_of_reference: float | None = None
    cost_usd: float | None = None
    tokens: Tokens = Tokens()
    num_turns: int = 0
    # where the time went
    wall_s: float = 0.0  # the job process, start to exit, as the batch saw it
    model_s: float = 0.0  # waiting for the model's API
    commands_s: float = 0.0  # the target's commands: checks and the agent's `run` calls
    finished_at: float = 0.0

    @property
    def correct(self) -> bool:
        return self.status == "done" and self.verdict == "pass"

    @property
    def faster(self) -> bool:
        return self.correct and self.perf_verdict == "faster"

    @property
    def overhead_s(self) -> float:
        """The harness's own time: everything that is neither a model call nor a target command."""
        return max(0.0, self.wall_s - self.model_s - self.commands_s)


def figures_from_report(report: dict[str, Any]) -> dict[str, Any]:
    """The headline figures of one report.json, as JobRecord fields. Pure."""
    ev = report.get("evaluation") or {}
    perf = ev.get("perf") or {}
    ref = ev.get("reference") or {}
    usage = report.get("usage") or {}
    return {
        "subtype": report.get("subtype"),
        "verdict": ev.get("verdict", "error"),
        "perf_verdict": perf.get("verdict"),
        "speedup": ev.get("speedup", perf.get("speedup")),
        "reference_speedup": ref.get("speedup"),
        "fraction_of_reference": ref.get("fraction_of_reference"),
        "cost_usd": report.get("total_cost_usd"),
        "tokens": Tokens(input=usage.get("input_tokens", 0), output=usage.get("output_tokens", 0),
                         cache_read=usage.get("cache_read_input_tokens", 0),
                         cache_write=usage.get("cache_creation_input_tokens", 0)),
        "num_turns": report.get("num_turns", 0),
        "model_s": (report.get("duration_api_ms") or 0) / 1000,
    }


def is_retryable(report: dict[str, Any]) -> str | None:
    """Why a written report still counts as a failed job, else None: the run was interrupted (SIGINT,
    SIGTERM), or a provider's API failed mid-run, which a retry may not meet again. Offline models
    (OFFLINE_MODELS) are deterministic, so their errors are results, not failures."""
    result = str(report.get("result") or "")
    if report.get("subtype") != "error_during_execution":
        return None
    if result.startswith("interrupted"):
        return result
    if not result.startswith("model error"):
        return None
    used = set(report.get("modelUsage") or {})
    return None if used and used <= OFFLINE_MODELS else result


def commands_seconds(job_dir: Path) -> float:
    """Time spent in the target's commands: every grading (checks.json, plus the final one when
    the runner made it after the loop) and the agent's `run` calls."""
    total = 0.0
    graded: list[dict] = []
    checks = job_dir / "checks.json"
    if checks.is_file():
        try:
            graded = [e for e in json.loads(checks.read_text(encoding="utf-8")) if isinstance(e, dict)]
        except ValueError:
            graded = []
    total += sum(_seconds(e.get("evaluation")) for e in graded)
    try:
        final = json.loads((job_dir / "report.json").read_text(encoding="utf-8")).get("evaluation")
    except (OSError, ValueError, AttributeError):
        final = None
    if isinstance(final, dict):
        bare = {k: v for k, v in final.items() if k not in ("emitted", "warnings")}
        if not any(e.get("full") and e.get("evaluation") == bare for e in graded):
            total += _seconds(final)
    for rec in _jsonl(job_dir / "trajectory.jsonl"):
        if rec.get("type") == "tool_result" and rec.get("name") == "run":
            total += float(rec.get("duration_s") or 0)
    return total


def _seconds(evaluation: Any) -> float:
    try:
        return float((evaluation or {}).get("duration_s") or 0)
    except (TypeError, ValueError, AttributeError):
        return 0.0


def _jsonl(path: Path) -> Iterator[dict]:
    if not path.is_file():
        return
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line from a killed writer
        if isinstance(obj, dict):
            yield obj


class Ledger:
    """results/<run-id>/batch.jsonl: append-only; for a key, the last line is its state."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LEDGER

    def append(self, record: JobRecord) -> None:
        if not record.finished_at:
            record = record.model_copy(update={"finished_at": time.time()})
        line = (record.model_dump_json() + "\n").encode("utf-8")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if os.write(fd, line) != len(line):  # one write: the line is whole or absent
                raise OSError(f"{self.path}: short write (disk full?)")
            os.fsync(fd)
        finally:
            os.close(fd)

    def lines(self) -> list[JobRecord]:
        out = []
        for obj in _jsonl(self.path):
            try:
                out.append(JobRecord.model_validate(obj))
            except ValueError:
                continue
        return out

    def latest(self) -> dict[str, JobRecord]:
        """The current state of every job that has a line."""
        return {r.key: r for r in self.lines()}
