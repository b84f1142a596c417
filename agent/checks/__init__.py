"""Checks: is a patch correct (tests, poisoned memory, coverage of the change, protected
paths, hygiene) and is it faster (interleaved A/B processes, bootstrap interval, rank test)?

`Checker.evaluate` grades a patch for both the agent's `run_checks` tool and the final
evaluation; the `Evaluation` it returns becomes report.json's `evaluation`.
"""

from agent.checks.checker import ALWAYS_PROTECTED, CheckError, Checker
from agent.checks.evaluation import (CommandRun, Correctness, CoverageResult, DiffStats, Environment, Evaluation, Hygiene,
                                 PerfResult, ReferenceResult)
from agent.checks.perf import FULL, QUICK, SamplingPolicy
from agent.checks.render import evaluation_table, summarize
from agent.checks.stats import Comparison, compare

__all__ = [
    "ALWAYS_PROTECTED", "CheckError", "Checker", "CommandRun", "Comparison", "Correctness", "CoverageResult",
    "DiffStats", "Environment", "Evaluation", "FULL", "Hygiene", "PerfResult", "QUICK", "ReferenceResult",
    "SamplingPolicy", "compare", "evaluation_table", "summarize",
]
