"""An external agent's run through the grader and session seams: its rounds, what is emitted, what
report.json and the kept files say, an interrupt. The agent's sessions are the test's (each edits the
workspace and prints its claim), the evidence recorded; the relay is real but nothing goes through it."""

from __future__ import annotations

from pathlib import Path

from helpers import SAFE, UNSAFE, RecordedChecker, make_task, tiny_evidence

from agent.agents.base import AgentResult, ExternalAgent, Session
from agent.env.sandbox import CommandResult
from agent.models.pricing import load_prices
from agent.run.exits import Interrupted
from agent.run.external import Sealed, run_external


class Said(ExternalAgent):
    """An agent whose sessions the test plays: its claim is what the session printed."""

    name, binary, install, default_model = "said", "said", "nothing to install", "claude-sonnet-4-6"

    def locate(self) -> Path:
        return Path("/nonexistent/said")

    def version(self, binary: Path) -> str:
        return "1.0"

    def command(self, session: Session, binary: Path) -> list[str]:
        return [str(binary)]

    def read_result(self, stdout: str, session: Session) -> AgentResult:
        return AgentResult(claim=stdout, session_id="s-1")


def edits(*rounds: list[dict[str, tuple[str, str]]] | BaseException):
    """A session runner: round n makes the changes of rounds[n-1] (or raises it) and says what it did."""
    seen: list[Session] = []

    def session(s: Session, sealed: Sealed, time_left_s: float) -> CommandResult:
        seen.append(s)
        step = rounds[s.round - 1]
        if isinstance(step, BaseException):
            raise step
        for change in step:
            ((path, (old, new)),) = change.items()
            f = sealed.ws.root / path
            f.write_text(f.read_text().replace(old, new))
        return CommandResult("said", 0, f"round {s.round}: made {len(step)} edit(s)", 0.1, False, 0, "none")

    return session, seen


def run(tmp_path: Path, *rounds, n: int = 2):
    task, _ = make_task(tmp_path)
    checker = RecordedChecker(task, tiny_evidence)
    session, seen = edits(*rounds)
    result = run_external(task, Said(), out_dir=tmp_path / "out", run_id="x", prices=load_prices(), rounds=n,
                          checker=checker, sessions=session)
    return result, checker, seen


def back(change):
    ((path, (old, new)),) = change.items()
    return {path: (new, old)}


def test_a_feedback_round_fixes_the_change_and_the_fix_is_emitted(tmp_path):
    result, checker, seen = run(tmp_path, [SAFE, UNSAFE], [back(UNSAFE)])
    report = result.report
    assert [r.verdict for r in report.agent.rounds] == ["fail", "pass"] and len(checker.patches) == 2
    assert seen[1].resume_id == "s-1" and "did not pass" in seen[1].prompt  # told what the checks found
    assert result.paths.patch.read_text() == checker.patches[1] and not result.paths.rejected.exists()
    assert "torch.empty(src.shape" in checker.patches[1] and "torch.empty(N)" not in checker.patches[1]
    assert report.subtype == "success" and report.result == "round 2: made 1 edit(s)"
    assert report.verdict == "pass" and report.evaluation.emitted == "the agent's final change"
    assert report.agent.name == "said" and report.agent.version == "1.0"
    assert report.total_cost_usd == 0.0  # the relay metered nothing
    kept = result.paths.report.parent / "agent"
    assert (kept / "round-1.stdout.txt").read_text() == "round 1: made 2 edit(s)"
    assert (kept / "final.diff").read_text() == checker.patches[1] and report.agent.files["final_diff"]


def test_a_change_still_failing_after_the_last_round_goes_to_rejected_diff(tmp_path):
    result, checker, _ = run(tmp_path, [UNSAFE], n=1)
    assert result.paths.patch.read_text() == "" and result.paths.rejected.read_text() == checker.patches[0]
    ev = result.report.evaluation
    assert ev.verdict == "fail" and ev.emitted.startswith("nothing") and "rejected.diff" in ev.emitted


def test_an_interrupt_in_a_later_round_salvages_only_what_passed(tmp_path):
    result, checker, _ = run(tmp_path, [UNSAFE], Interrupted("SIGINT"))
    report = result.report
    assert report.subtype == "error_during_execution" and report.result == "interrupted by SIGINT"
    assert len(checker.patches) == 1 and result.paths.patch.read_text() == ""
    assert not result.paths.rejected.exists()  # an interrupted run rejects nothing it did not finish grading
    assert report.evaluation.verdict == "no-change"
    assert report.evaluation.note == "interrupted by SIGINT before any candidate passed"
    records = result.paths.trajectory.read_text().splitlines()
    assert '"type": "interrupted"' in records[-1] and '"signal": "SIGINT"' in records[-1]


def test_an_agent_that_cannot_start_gets_a_report_and_no_grading(tmp_path):
    class Missing(Said):
        def locate(self) -> Path:
            from agent.agents import AgentError

            raise AgentError("said: `said` not found on PATH; install it with: nothing to install")

    task, _ = make_task(tmp_path)
    checker = RecordedChecker(task, tiny_evidence)
    result = run_external(task, Missing(), out_dir=tmp_path / "out", run_id="x", prices=load_prices(),
                          checker=checker, sessions=edits()[0])
    report = result.report
    assert report.is_error and report.result == "said: `said` not found on PATH; install it with: nothing to install"
    assert report.evaluation.verdict == "error" and report.evaluation.error == report.result
    assert checker.patches == [] and result.paths.patch.read_text() == ""
    assert report.agent.name == "said" and report.agent.rounds == []
