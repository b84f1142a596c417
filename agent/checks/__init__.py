"""Checks: is a patch correct (tests, poisoned memory, coverage of the change, protected
paths, hygiene) and is it faster (interleaved A/B processes, bootstrap interval, rank test)?

`Checker.collect` gathers the `Evidence` on a patch, `grade` turns it into an `Evaluation` (the
only place a verdict is written); both the agent's `run_checks` tool and the final evaluation
go through them, and the evaluation becomes report.json's `evaluation`.
"""

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

__all__ = [
    "ALWAYS_PROTECTED", "CheckError", "Checker", "CommandRun", "Comparison", "Correctness", "CoverageResult",
    "DiffStats", "Environment", "Evaluation", "Evidence", "FULL", "Hygiene", "PerfResult", "PerfVerdict", "QUICK",
    "ReferenceResult", "SamplingPolicy", "TaskBroken", "Verdict", "compare", "evaluation_table", "grade", "summarize",
]
