"""`perfagent check SET --predictions`: another harness's patches graded as a batch, beside the free baseline;
and the subsets of a set (`--filter`, `--tasks`, `--shuffle --seed`, `--slice`) that batch and check take."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.batch.subset import SubsetError, choose, parse_slice
from agent.checks.evaluation import Evaluation
from agent.checks.render import evaluation_rows
from agent.cli import main
from agent.results.load import load_run
from agent.results.plan import Subset
from agent.interchange.predictions import PredictionsError, by_attempt, read_predictions
from agent.task import load_task_set
from helpers import make_repo

MOD = "COST = 10.0\n\n\ndef f():\n    return COST\n"
BENCH = ("import json\nimport random\n\nimport mod\n\n"
         'print(json.dumps({"metric": "ms", "value": mod.f() * (1 + random.random() * 0.02)}))\n')


def cost_patch(new: str) -> str:
    return (f"diff --git a/mod.py b/mod.py\n--- a/mod.py\n+++ b/mod.py\n@@ -1,4 +1,4 @@\n-COST = 10.0\n+COST = {new}\n"
            " \n \n def f():\n")


TASK = '''id = "{id}"
repo = "../src"
prompt = "Make f cheaper."
protected = ["bench.py"]
[correctness]
command = "python -c 'import mod; assert mod.f() > 0'"
poison = false
{perf}[budget]
max_turns = 3
'''
PERF = '[perf]\ncommand = "python bench.py"\nmetric = "ms"\n[reference]\npatch = "ref.diff"\n'


@pytest.fixture
def project(tmp_path, monkeypatch):
    """Tasks t1 (a bench and a reference patch) and t2 (tests only) on one tiny repo."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    make_repo(tmp_path / "src", {"mod.py": MOD, "bench.py": BENCH})
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "ref.diff").write_text(cost_patch("4.0"))
    (tasks / "t1.toml").write_text(TASK.format(id="t1", perf=PERF))
    (tasks / "t2.toml").write_text(TASK.format(id="t2", perf=""))
    return tmp_path


def lines(path: Path, *records: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def pred(instance: str, patch: str, model: str = "other-harness") -> dict:
    return {"instance_id": instance, "model_name_or_path": model, "model_patch": patch}


def outcomes(run_dir: Path) -> dict[str, tuple[str, str | None]]:
    return {r.key: (r.outcome, r.reason) for r in load_run(run_dir).records}


def test_each_prediction_gets_its_own_outcome_and_the_rest_are_graded(project):
    """An unknown instance, a patch that does not apply and an empty patch: three outcomes, none an error of
    the run; the good one passes beside the free baseline, and the summary shows its margin over it."""
    preds = lines(project / "preds.jsonl",
                  pred("t1", cost_patch("4.0")),
                  pred("t2", cost_patch("4.0").replace("COST = 10.0", "COST = 99.0")),  # not the base's line
                  pred("t2", "", model="lazy"),
                  pred("t9", cost_patch("4.0")))
    code = main(["check", "tasks", "--predictions", str(preds), "--run-id", "p", "--quiet", "--workers", "2"])
    assert code == 0
    run = project / "results" / "p"
    got = outcomes(run)
    assert got["t1/prediction-other-harness/s0"][0] == "pass"
    assert got["t2/prediction-other-harness/s0"][0] == "rejected"
    assert got["t2/prediction-lazy/s0"][0] == "no change"
    assert got["t9/prediction-other-harness/s0"] == ("skipped", "no task has the id 't9' in the set")
    assert {k for k in got if "/rules/" in k} == {"t1/rules/s0", "t2/rules/s0"}
    report = json.loads((run / "t2/prediction-other-harness/s0/report.json").read_text())
    assert "does not apply to the task's base" in report["evaluation"]["note"]
    shown = evaluation_rows(Evaluation.model_validate(report["evaluation"]))
    assert [r.name for r in shown] == ["note"]  # no "ok" row for a check that never ran
    assert report["total_cost_usd"] is None  # what the patch cost to make is not ours to know
    assert report["agent"] == {**report["agent"], "name": "prediction", "model": "other-harness"}
    emitted = project / "patches/p/t1/prediction-other-harness/s0/model_patch.diff"
    assert "+COST = 4.0" in emitted.read_text()  # the change as graded (git's form of it)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["baseline"] == "rules"
    row = next(t for t in summary["tasks"] if t["task"] == "t1" and t["model"] == "prediction:other-harness")
    assert row["vs_baseline"] > 1.5 and row["opt_vs_baseline"] == 1  # 2.5x where rules finds nothing
    assert "| vs rules |" in (run / "summary.md").read_text()


def test_a_resumed_prediction_run_grades_what_is_left_from_its_own_copy(project):
    preds = lines(project / "preds.json", pred("t2", cost_patch("4.0")))
    assert main(["check", "tasks", "--predictions", str(preds), "--run-id", "r", "--quiet", "--no-baseline",
                 "--tasks", "t2"]) == 0
    ledger = project / "results/r/batch.jsonl"
    ledger.write_text("")  # as if killed before any job finished
    preds.unlink()  # the run reads the patches it copied
    assert main(["batch", "--resume", "--run-id", "r", "--quiet"]) == 0
    assert outcomes(project / "results/r") == {"t2/prediction-other-harness/s0": ("pass", None)}


def test_the_dict_form_and_several_files_are_read_as_samples(tmp_path):
    a = tmp_path / "a.json"
    a.write_text(json.dumps({"t1": {"model_name_or_path": "m", "model_patch": None}}))
    b = lines(tmp_path / "b.jsonl", pred("t1", "x", model="m"))
    attempts = by_attempt(read_predictions([a, b]))
    assert [p.model_patch for p in attempts[("t1", "m")]] == ["", "x"]
    bad = lines(tmp_path / "bad.jsonl", {"instance_id": "t1", "model_patch": ""})
    with pytest.raises(PredictionsError, match="line 1: model_name_or_path: field required"):
        read_predictions([bad])


@pytest.mark.parametrize("argv, message", [
    (["--predictions", "missing.jsonl"], "missing.jsonl: cannot read"),
    (["--predictions", "preds.jsonl", "--reference"], "--reference grades one patch"),
    (["--patch", "x.diff", "--tasks", "t1"], "--tasks goes with --predictions"),
    (["--predictions", "preds.jsonl", "--filter", "("], "not a regular expression"),
])
def test_bad_prediction_runs_are_one_line(project, capsys, argv, message):
    lines(project / "preds.jsonl", pred("t1", ""))
    assert main(["check", "tasks", *argv, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_subsets_pick_filter_ids_shuffle_and_slice(tmp_path):
    for i in range(6):
        (tmp_path / f"t{i}.toml").write_text(TASK.format(id=f"t{i}", perf="").replace("../src", str(tmp_path)))
    tasks = load_task_set(tmp_path)
    ids = lambda **kw: [t.id for t in choose(tasks, Subset(**kw))[0]]  # noqa: E731
    assert ids(filter="[135]") == ["t1", "t3", "t5"]
    assert ids(tasks=["t4", "t0"]) == ["t0", "t4"]
    assert ids(slice="1:3") == ["t1", "t2"] and ids(slice="-2:") == ["t4", "t5"]
    shuffled = ids(shuffle=True, seed=3)
    assert sorted(shuffled) == [f"t{i}" for i in range(6)] and shuffled == ids(shuffle=True, seed=3)
    assert ids(shuffle=True, seed=3, slice=":2") == shuffled[:2]
    assert ids(chosen=["t5", "t2"], filter="t0") == ["t5", "t2"]  # what a resumed batch chose stands
    with pytest.raises(SubsetError, match="no task 'nope'"):
        choose(tasks, Subset(tasks=["nope"]))
    with pytest.raises(SubsetError, match="chose no task"):
        choose(tasks, Subset(filter="zzz"))
    with pytest.raises(SubsetError, match="START:STOP"):
        parse_slice("3")


def test_a_batch_runs_its_subset_records_it_and_resumes_it(project):
    assert main(["batch", "tasks", "--models", "rules", "--filter", "2$", "--run-id", "s", "--quiet"]) == 0
    run = load_run(project / "results/s")
    assert run.plan.subset.chosen == ["t2"] and run.plan.baseline == "rules"
    assert [r.key for r in run.records] == ["t2/rules/s0"]
    assert main(["batch", "--resume", "--run-id", "s", "--slice", "0:1", "--quiet"]) == 2  # it keeps its own
    assert main(["batch", "--resume", "--run-id", "s", "--quiet"]) == 0
    assert [r.key for r in load_run(project / "results/s").records] == ["t2/rules/s0"]


def test_a_batch_exported_and_graded_again_gets_the_same_verdicts(project):
    """batch -> export --format predictions -> check --predictions: each job's verdict again (the figures are
    measured anew, so they may differ within their intervals)."""
    replay = project / "good.jsonl"
    calls = [[{"id": "e", "name": "edit_file", "input": {"path": "mod.py", "old": "COST = 10.0", "new": "COST = 4.0"}}],
             [{"id": "s", "name": "submit", "input": {"summary": "cheaper"}}]]
    replay.write_text("".join(json.dumps({"type": "response", "tool_calls": c}) + "\n" for c in calls))
    assert main(["batch", "tasks", "--models", f"replay:{replay}", "--run-id", "b", "--quiet"]) == 0
    assert main(["export", "results/b", "--format", "predictions", "-o", "preds.jsonl"]) == 0
    assert main(["check", "tasks", "--predictions", "preds.jsonl", "--run-id", "c", "--no-baseline", "--quiet"]) == 0
    first = {(r.task, r.model): r.verdict for r in load_run(project / "results/b").records}
    again = {(r.task, r.model.removeprefix("prediction:")): r.verdict for r in load_run(project / "results/c").records}
    assert again == first and set(first.values()) == {"pass", "no-change"}  # the contestant's, and the baseline's


def test_a_batch_leaves_predictions_jsonl_that_export_writes_and_check_grades_again(project):
    """Issue 46: every batch writes predictions.jsonl beside its summary (SWE-bench's form, as `export` writes
    it); a `check --predictions` run keeps the patches it read apart (predictions.in.jsonl) and leaves its own."""
    replay = project / "good.jsonl"
    calls = [[{"id": "e", "name": "edit_file", "input": {"path": "mod.py", "old": "COST = 10.0", "new": "COST = 4.0"}}],
             [{"id": "s", "name": "submit", "input": {"summary": "cheaper"}}]]
    replay.write_text("".join(json.dumps({"type": "response", "tool_calls": c}) + "\n" for c in calls))
    assert main(["batch", "tasks", "--models", f"replay:{replay}", "--run-id", "b", "--quiet", "--no-baseline",
                 "--tasks", "t2"]) == 0
    left = project / "results/b/predictions.jsonl"
    assert main(["export", "results/b", "-o", "exported.jsonl"]) == 0
    assert left.read_text() == (project / "exported.jsonl").read_text()
    (one,) = [json.loads(line) for line in left.read_text().splitlines()]
    assert (one["instance_id"], one["model_name_or_path"]) == ("t2", f"replay:{replay}")
    assert "+COST = 4.0" in one["model_patch"]
    assert main(["check", "tasks", "--predictions", str(left), "--run-id", "c", "--no-baseline", "--quiet"]) == 0
    graded = project / "results/c"
    assert read_predictions([graded / "predictions.in.jsonl"]) == read_predictions([left])
    (again,) = [json.loads(line) for line in (graded / "predictions.jsonl").read_text().splitlines()]
    assert again["perfagent"]["outcome"] == "pass" and again["model_patch"] == one["model_patch"]
    summary = json.loads((graded / "summary.json").read_text())
    assert summary["outcome_ids"] == [{"model": f"prediction:replay:{replay}", "sample": 0, "resolved_ids": ["t2"],
                                       "unresolved_ids": [], "empty_patch_ids": [], "error_ids": [],
                                       "incomplete_ids": []}]


def test_predictions_gold_grades_every_tasks_reference_and_names_those_without(project, capsys):
    assert main(["check", "tasks", "--predictions", "gold", "--run-id", "g", "--no-baseline", "--quiet"]) == 0
    assert "note: no reference patch, not graded: t2" in capsys.readouterr().err
    assert outcomes(project / "results/g") == {"t1/prediction-gold/s0": ("pass", None)}
    assert load_run(project / "results/g").plan.predictions == ["gold"]
    (project / "tasks/t1.toml").write_text(TASK.format(id="t1", perf=""))
    assert main(["check", "tasks", "--predictions", "gold", "--run-id", "h", "--quiet"]) == 2
    assert "no task of the set has a reference patch" in capsys.readouterr().err


def test_a_run_from_before_the_copy_had_its_own_name_resumes_from_predictions_jsonl(project):
    preds = lines(project / "preds.jsonl", pred("t2", cost_patch("4.0")))
    assert main(["check", "tasks", "--predictions", str(preds), "--run-id", "r", "--quiet", "--no-baseline"]) == 0
    run = project / "results/r"
    (run / "predictions.in.jsonl").replace(run / "predictions.jsonl")  # as such a run left it
    (run / "batch.jsonl").write_text("")
    assert main(["batch", "--resume", "--run-id", "r", "--quiet"]) == 0
    assert outcomes(run) == {"t2/prediction-other-harness/s0": ("pass", None)}
    assert read_predictions([run / "predictions.in.jsonl"]) == read_predictions([preds])
