"""An external agent's job for the review tests, in the shape `agent.run.external` leaves it.

The seed scenario: Claude Code turned torch.zeros into torch.empty, claimed there was no risk of
uninitialised memory, and our poisoned-memory run failed it. The report is written by the report
writer, the evidence by the checks' own `summarize`, and the kept outputs exist where `files` says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from agent.checks.render import summarize
from agent.results.report import AgentRound, AgentRun, Report
from helpers import Job, write_job

POISON_REASON = ("tests fail with uninitialised memory poisoned (a buffer is read before it is written): "
                 "tests/test_graph.py::test_replay[decode-bs1]")
CLAIM = ("Changed every torch.zeros in init_cuda_graph_state to torch.empty.\n\n"
         "No risk of uninitialized memory access: every buffer is filled by copy_ before use.")
KEPT = {"round-1.stdout": "agent/round-1.stdout.txt", "round-1.result": "agent/round-1.result.json",
        "final_diff": "agent/final.diff"}

WriteAgentJob = Callable[..., Report]


def seed_agent(report: Report, claim: str = CLAIM, **fields) -> AgentRun:
    """One session whose claim our checks contradict; its own cost off from the relay's."""
    assert report.evaluation is not None
    round_ = AgentRound(round=1, exit_code=0, duration_ms=1042, claim=claim, own_cost_usd=0.05,
                        verdict=report.evaluation.verdict, evidence=summarize(report.evaluation))
    run = AgentRun(name="claude-code", model="claude-sonnet-4-5", version="2.1.330", claim=claim, own_cost_usd=0.05,
                   cost_note=f"claude-code reported $0.050000; the relay metered ${report.total_cost_usd:.6f}",
                   rounds=[round_], refused=["CONNECT example.com:443"], files=dict(KEPT))
    return run.model_copy(update=fields)


@pytest.fixture
def write_agent_job() -> WriteAgentJob:
    """write_agent_job(out, run_id, job, key=None, claim=CLAIM, **AgentRun fields) -> the report written."""

    def write(out: Path, run_id: str, job: Job, *, key: str | None = None, claim: str = CLAIM, **fields) -> Report:
        report = write_job(out, run_id, job, key=key)
        assert report.evaluation is not None
        if job.verdict == "fail":
            report.evaluation.reasons = [POISON_REASON]
        report = report.model_copy(update={"agent": seed_agent(report, claim, **fields)})
        folder = out / "results" / run_id / (key or job.key)
        report.write(folder / "report.json")
        for rel in report.agent.files.values() if report.agent else ():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text("kept\n")
        return report
    return write
