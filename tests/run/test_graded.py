"""The graded-run skeleton through the grader seam, with a contestant of the test's own: base check
first, what is emitted however the contestant ends, salvage on interrupt. Nothing runs: milliseconds."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import SAFE, RecordedChecker, make_task, tiny_evidence

from agent.checks import TaskBroken
from agent.run.exits import AgentFailed, Interrupted
from agent.run.graded import Contestant, Emission, GradedRun, final_emission, graded_run


def apply(run: GradedRun, change: dict[str, tuple[str, str]]) -> None:
    ((path, (old, new)),) = change.items()
    f = run.ws.root / path
    f.write_text(f.read_text().replace(old, new))


class Editor(Contestant):
    """Makes SAFE's change, grades it quick, then ends as `then` says: None emits its final change."""

    def __init__(self, then: BaseException | None = None):
        self.then, self.played, self.closed = then, False, False

    def play(self, run: GradedRun) -> Emission | None:
        self.played, self.work = True, run.work
        apply(run, SAFE)
        run.candidates.grade(run.ws.candidate(), full=False)
        if self.then is not None:
            raise self.then
        return final_emission(run.ws, run.candidates, run.outcome)

    def close(self) -> None:
        self.closed = True


class BrokenBase(RecordedChecker):
    def check_base(self) -> None:
        raise TaskBroken("the task's tests fail on its base: fix the task")


def graded(tmp_path: Path, contestant: Contestant, checker_class: type = RecordedChecker):
    task, _ = make_task(tmp_path)
    checker = checker_class(task, tiny_evidence)
    return graded_run(task, contestant, out_dir=tmp_path / "out", run_id="r", checker=checker), checker


def test_the_final_change_that_passes_is_emitted_after_its_full_evaluation(tmp_path):
    result, checker = graded(tmp_path, contestant := Editor())
    assert result.paths.patch.read_text() == checker.patches[0] and "torch.empty(src.shape" in checker.patches[0]
    assert len(checker.patches) == 2  # quick, then the full evaluation the emission needs
    report = result.report
    assert report.verdict == "pass" and report.evaluation.emitted == "the agent's final change"
    assert not result.paths.rejected.exists() and contestant.closed
    assert [c["full"] for c in json.loads(result.paths.checks.read_text())] == [False, True]
    assert json.loads(result.paths.report.read_text())["evaluation"]["verdict"] == "pass"


def test_an_interrupt_salvages_the_best_passing_candidate_grading_nothing_new(tmp_path):
    result, checker = graded(tmp_path, contestant := Editor(then=Interrupted("SIGTERM")))
    assert len(checker.patches) == 1  # the quick grading only
    report = result.report
    assert report.subtype == "error_during_execution" and report.result == "interrupted by SIGTERM"
    assert result.outcome.interrupted == "SIGTERM"
    assert result.paths.patch.read_text() == checker.patches[0]
    assert report.evaluation.emitted == "best passing candidate (quick evaluation; interrupted by SIGTERM)"
    assert not result.paths.rejected.exists()
    assert not contestant.work.exists() and not result.paths.trajectory.exists()  # it kept none


def test_report_json_names_the_grading_it_carries(tmp_path):
    """checks.json's entry the report's evaluation is: the final full one, a salvaged quick one, or none."""
    from agent.results.checks_log import carried, read_checks
    from agent.results.report import read_report

    for then, entry in ((None, 1), (Interrupted("SIGTERM"), 0)):
        result, _ = graded(tmp_path / str(entry), Editor(then=then))
        assert json.loads(result.paths.report.read_text())["checks_entry"] == entry
        gradings = read_checks(result.paths.checks.parent)
        assert carried(gradings, read_report(result.paths.report)) is gradings[entry]
    result, _ = graded(tmp_path / "broken", Editor(), BrokenBase)
    assert json.loads(result.paths.report.read_text())["checks_entry"] is None


def test_a_task_broken_on_its_base_gets_no_contestant(tmp_path):
    result, checker = graded(tmp_path, contestant := Editor(), BrokenBase)
    assert not contestant.played and checker.patches == [] and contestant.closed
    report = result.report
    assert report.is_error and report.result == "the task's tests fail on its base: fix the task"
    assert report.evaluation.verdict == "error" and report.evaluation.error == report.result
    assert result.paths.patch.read_text() == "" and not result.paths.rejected.exists()


def test_a_contestant_that_cannot_go_on_ends_the_run_with_nothing_emitted(tmp_path):
    result, _ = graded(tmp_path, Editor(then=AgentFailed("some-agent", "crashed\ntraceback")))
    report = result.report
    assert report.subtype == "error_during_execution" and report.result == "some-agent: crashed"
    assert report.evaluation.verdict == "error" and report.evaluation.error == "some-agent: crashed"
    assert result.paths.patch.read_text() == "" and result.paths.report.is_file()
