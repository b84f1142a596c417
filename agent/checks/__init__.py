"""agent.checks's face: the grading's names, and `check`'s (agent/checks/standalone.py), those loaded lazily.

Checks: is a patch correct (tests, poisoned memory, coverage of the change, protected
paths, hygiene) and is it faster (interleaved A/B processes, bootstrap interval, rank test)?

`Checker.collect` gathers the `Evidence` on a patch, `grade` turns it into an `Evaluation` (the
only place a verdict is written); both the agent's `run_checks` tool and the final evaluation
go through them, and the evaluation becomes report.json's `evaluation`.
"""

from typing import TYPE_CHECKING

from agent.checks.checker import Checker
from agent.checks.evidence import Evidence
from agent.checks.grade import grade
from agent.checks.sides import ALWAYS_PROTECTED, CheckError, TaskBroken
from agent.checks.evaluation import (CommandRun, Correctness, CoverageResult, DiffStats, Environment, Evaluation,
                                     Hygiene, PerfResult, ReferenceResult)
from agent.checks.perf import FULL, QUICK, SamplingPolicy
from agent.checks.render import evaluation_table, summarize
from agent.checks.stats import Comparison, compare
from agent.checks.verdicts import PerfVerdict, Verdict
from agent.util.lazy import lazy_names

if TYPE_CHECKING:  # `check`'s own: eager, they would load models/ and results/ into every importer of the grading
    from agent.checks.standalone import change, check_patch, regrade, with_initcheck
else:
    __getattr__ = lazy_names(__name__, dict.fromkeys(("change", "check_patch", "regrade", "with_initcheck"),
                                                     "agent.checks.standalone"))

__all__ = [
    "ALWAYS_PROTECTED", "CheckError", "Checker", "CommandRun", "Comparison", "Correctness", "CoverageResult",
    "DiffStats", "Environment", "Evaluation", "Evidence", "FULL", "Hygiene", "PerfResult", "PerfVerdict", "QUICK",
    "ReferenceResult", "SamplingPolicy", "TaskBroken", "Verdict", "change", "check_patch", "compare",
    "evaluation_table", "grade", "regrade", "summarize", "with_initcheck",
]
