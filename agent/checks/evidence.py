"""What the checks found about one patch, facts only: no verdict, no reasons.

`collect` writes it, `grade` reads it (and nothing else of the run), and it is saved beside
each evaluation in checks.json, so a past run can be re-graded after a rule changes
(`perfagent check --regrade`) without running anything again: only as this machine's perfagent
sealed it (agent.util.seal), since anyone holding the file can edit it. checks.json itself, its entries
and its one reader: agent.results.checks_log.
"""

from __future__ import annotations

from pydantic import BaseModel

from agent.checks.evaluation import (BenchCheck, CommandRun, Correctness, CoverageResult, DiffStats, Environment,
                                     Hygiene, InitcheckResult, PerfResult, ReadSiteResult, ReferenceResult,
                                     SanitizerResult)
from agent.checks.clocks import ClockCheck
from agent.checks.integrity import IntegrityResult
from agent.errors import BadInput


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


class EvidenceError(BadInput):
    """A file or folder that holds no evidence to re-grade."""

