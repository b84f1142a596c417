"""What the checks found about one patch, facts only: no verdict, no reasons.

`collect` writes it, `grade` reads it (and nothing else of the run), and it is saved beside
each evaluation in checks.json, so a past run can be re-graded after a rule changes
(`perfagent check --regrade`) without running anything again: only as this machine's perfagent
sealed it (agent.util.seal), since anyone holding the file can edit it.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ValidationError

from agent.checks.evaluation import (BenchCheck, CommandRun, Correctness, CoverageResult, DiffStats, Environment,
                                     Hygiene, InitcheckResult, PerfResult, ReadSiteResult, ReferenceResult,
                                     SanitizerResult)
from agent.checks.clocks import ClockCheck
from agent.checks.integrity import IntegrityResult
from agent.util.seal import SealError, read_sealed


class Evidence(BaseModel):
    """Everything measured or observed while checking one patch, in the order it is gathered.
    A field left at None was not gathered: an earlier fact already decided the grade, or the
    task does not ask for it."""

    task_id: str = ""
    quick: bool = False
    changes: bool = True  # False: empty, or only blank lines and trailing spaces
    hygiene: Hygiene = Hygiene()
    diff_stats: DiffStats = DiffStats()
    changed_lines: dict[str, list[int]] = {}  # path -> the lines the patch adds or changes (one diff, -U0)
    uninitialised: list[str] = []  # "path:line" of changed lines that allocate uninitialised memory
    integrity: IntegrityResult = IntegrityResult()  # refusals and flags; `plausibility` is the grade's
    protected_violations: list[str] = []  # protected paths the patch touched (restored before anything ran)
    environment: Environment = Environment()
    setup: CommandRun | None = None
    correctness: Correctness | None = None
    coverage: CoverageResult | None = None
    sanitizer: SanitizerResult | None = None
    initcheck: InitcheckResult | None = None
    read_sites: list[ReadSiteResult] = []
    bench_check: BenchCheck | None = None  # the bench run once under the tests' instruments
    perf: PerfResult | None = None  # the samples and their comparison; `error` when a bench failed
    clocks: ClockCheck | None = None  # the bench processes' timing functions (agent.checks.clocks)
    reference: ReferenceResult | None = None
    error: str | None = None  # the task itself could not be checked (its setup, its baseline's bench)
    duration_s: float = 0.0


class Recorded(BaseModel):
    """One grading as checks.json keeps it: the evidence, and the evaluation it was given then."""

    evidence: Evidence
    evaluation: dict | None = None  # as written: re-read through Evaluation only when compared


class EvidenceError(Exception):
    """A file or folder that holds no evidence to re-grade."""


def load_recorded(path: Path, key: bytes) -> list[Recorded]:
    """The gradings recorded at `path`: an evidence file (`perfagent check --evidence`), a checks.json,
    or a run's job folder holding one; only when its seal verifies under `key` (agent.util.seal): a
    grade of evidence anyone could have edited would travel as a pass without that caveat."""
    path = path / "checks.json" if path.is_dir() else path
    try:
        data = json.loads(read_sealed(path, key).decode("utf-8"))
    except SealError as e:
        raise EvidenceError(f"{e}; nothing graded") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise EvidenceError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    try:
        if isinstance(data, dict):
            return [Recorded(evidence=Evidence.model_validate(data))]
        entries = [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []
        if entries and not any("evidence" in d for d in entries):
            raise EvidenceError(f"{path}: its gradings carry no evidence (recorded before evidence was kept)")
        return [Recorded.model_validate(d) for d in entries if "evidence" in d]
    except ValidationError as e:
        raise EvidenceError(f"{path}: not evidence perfagent wrote: {str(e).splitlines()[0]}") from None
