"""A prediction graded through the grader seam: what is emitted, what report.json says, an interrupt.
A real workspace and a real patch; the evidence recorded, so nothing runs."""

from __future__ import annotations

from pathlib import Path

import git
import pytest
from helpers import SAFE, UNSAFE, RecordedChecker, make_task, tiny_evidence

from agent.agents import PREDICTION
from agent.interchange.predictions import Prediction
from agent.run.exits import Interrupted
from agent.run.prediction import grade_prediction


def patch_of(repo_dir: Path, change: dict[str, tuple[str, str]]) -> str:
    """The diff of `change` on the task's repo, as another harness would hand it over."""
    ((path, (old, new)),) = change.items()
    f = repo_dir / path
    before = f.read_text()
    f.write_text(before.replace(old, new))
    diff = git.Repo(repo_dir).git.diff() + "\n"
    f.write_text(before)
    return diff


class InterruptedChecker(RecordedChecker):
    def collect(self, patch: str, **kw):
        raise Interrupted("SIGTERM")


def grade(tmp_path: Path, change=None, *, patch: str | None = None, checker_class: type = RecordedChecker):
    task, repo_dir = make_task(tmp_path)
    patch = patch if patch is not None else patch_of(repo_dir, change)
    checker = checker_class(task, tiny_evidence)
    prediction = Prediction(instance_id=task.id, model_name_or_path="other-harness", model_patch=patch)
    return grade_prediction(task, prediction, out_dir=tmp_path / "out", run_id="p", checker=checker), patch, checker


def test_a_passing_prediction_is_emitted_and_its_report_names_it(tmp_path):
    result, patch, checker = grade(tmp_path, SAFE)
    assert result.paths.patch.read_text() == checker.patches[0] and "torch.empty(src.shape" in checker.patches[0]
    assert not result.paths.rejected.exists()
    report = result.report
    assert report.subtype == "success" and report.result == "graded the patch other-harness predicted"
    assert report.verdict == "pass" and report.evaluation.emitted == "the agent's final change"
    assert report.agent.name == PREDICTION and report.agent.model == "other-harness"
    assert report.total_cost_usd is None and report.num_turns == 0  # what it cost to make is not ours to know
    assert result.paths.report.is_file() and result.paths.checks.is_file() and not result.paths.trajectory.exists()


def test_a_failing_prediction_goes_to_rejected_diff(tmp_path):
    result, patch, checker = grade(tmp_path, UNSAFE)
    assert result.paths.patch.read_text() == "" and result.paths.rejected.read_text() == checker.patches[0]
    assert "+    buf = torch.empty(N)" in checker.patches[0]
    ev = result.report.evaluation
    assert result.report.subtype == "success" and ev.verdict == "fail" and "rejected.diff" in ev.emitted


def test_a_patch_that_does_not_apply_is_rejected_with_gits_reason_and_kept(tmp_path):
    bogus = "diff --git a/pkg/nope.py b/pkg/nope.py\n--- a/pkg/nope.py\n+++ b/pkg/nope.py\n@@ -1 +1 @@\n-x\n+y\n"
    result, patch, checker = grade(tmp_path, patch=bogus)
    assert checker.patches == [] and result.paths.rejected.read_text() == bogus
    assert result.paths.patch.read_text() == ""
    ev = result.report.evaluation
    assert ev.verdict == "rejected" and ev.note.startswith("the patch does not apply to the task's base: ")
    assert result.report.result == ev.note and not result.report.is_error


def test_an_empty_prediction_is_no_change(tmp_path):
    result, _, checker = grade(tmp_path, patch="")
    assert checker.patches == [] and result.paths.patch.read_text() == "" and not result.paths.rejected.exists()
    assert result.report.evaluation.verdict == "no-change"
    assert result.report.evaluation.note == "the prediction's patch is empty"


def test_an_interrupted_grading_emits_nothing_and_says_so(tmp_path):
    result, _, _ = grade(tmp_path, SAFE, checker_class=InterruptedChecker)
    report = result.report
    assert report.is_error and report.result == "interrupted by SIGTERM" and result.outcome.interrupted == "SIGTERM"
    assert report.evaluation.verdict == "no-change" and report.evaluation.note == "interrupted by SIGTERM"
    assert result.paths.patch.read_text() == "" and not result.paths.rejected.exists()


class NoBaseChecker(RecordedChecker):
    """A task whose base cannot be checked: a job that asks gets TaskBroken (an error of the run)."""

    def check_base(self) -> None:
        from agent.checks import TaskBroken

        raise TaskBroken("the base fails its own tests")


@pytest.mark.parametrize("patch", ["", "   \n"])
def test_a_prediction_with_nothing_to_grade_is_no_change_without_the_base_check(tmp_path, patch):
    result, _, checker = grade(tmp_path, patch=patch, checker_class=NoBaseChecker)
    assert checker.patches == [] and not result.report.is_error
    assert result.report.evaluation.verdict == "no-change" and "the prediction's patch" in result.report.evaluation.note


@pytest.mark.parametrize("patch, why", [
    ("hello world", "No valid patches in input"),
    ("diff --git a/pkg/mod.py b/pkg/mod.py\n", "No valid patches in input"),
    ("diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1,4 +1,4 @@\n import torch\n",
     "corrupt patch at line"),
])
def test_text_that_is_no_diff_is_rejected_with_gits_reason_at_once(tmp_path, patch, why):
    result, _, checker = grade(tmp_path, patch=patch, checker_class=NoBaseChecker)
    ev = result.report.evaluation
    assert checker.patches == [] and not result.report.is_error
    assert ev.verdict == "rejected" and ev.note.startswith("the patch is not a diff git can read: ") and why in ev.note
    assert result.paths.rejected.read_text() == patch and result.paths.patch.read_text() == ""
