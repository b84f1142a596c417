"""Per agent and model, the patches another harness made that the checks rejected, and of which kind: counted from
recorded results whose evaluations the real grade wrote (agent.checks.grade over evidence), beside the harness's
own figures. The end-to-end path (an ISO-Bench run folder graded, then `perfagent review`) is at the bottom."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import Job, commit, make_repo, perfagent_cli as perfagent, write_job

from agent.checks.evaluation import (BenchCheck, CommandRun, Correctness, CoverageResult, Environment, Hygiene,
                                     ReadSiteResult, SanitizerResult, UninitRead)
from agent.checks.evidence import Evidence
from agent.checks.grade import grade
from agent.interchange.iso_bench import read_run_folder
from agent.results.report import AgentRun, HarnessRun
from agent.review.load import load_results
from agent.review.rejections import Kind, kinds_of, rejections
from agent.task import TaskSpec

SPEC = TaskSpec.model_validate({"id": "t", "repo": "src", "prompt": "p", "correctness": {"command": "pytest"}})
READ = UninitRead(buffer="m.py:3", op="aten.cumsum.default", code='buf = torch.empty(n)  # "cache_seqlens"')


def run(name: str, passed: bool = True) -> CommandRun:
    return CommandRun(name=name, command="pytest", exit_code=0 if passed else 1, passed=passed, duration_s=1.0,
                      failing_tests=[] if passed else ["tests/t.py::test_a"])


def evidence(**update) -> Evidence:
    """A clean, covered change with a watched uninitialised allocation; `update` replaces fields."""
    e = Evidence(task_id="t", changed_lines={"m.py": [3]}, uninitialised=["m.py:3"],
                 correctness=Correctness(plain=run("plain"), poison=run("poison")),
                 coverage=CoverageResult(changed=["m.py:3"], covered=["m.py:3"]), sanitizer=SanitizerResult(),
                 read_sites=[ReadSiteResult(buffer="m.py:3", line=5, executed=True)])
    return e.model_copy(update=update)


POISONED = {"correctness": Correctness(plain=run("plain"), poison=run("poison", False)),
            "sanitizer": SanitizerResult(reads=[READ])}
TESTS = {"correctness": Correctness(plain=run("plain", False), poison=run("poison"))}
UNCOVERED = {"coverage": CoverageResult(changed=["m.py:3"], uncovered=["m.py:3"])}
SKIPPED_BY_BENCH = {"bench_check": BenchCheck(run=run("bench"), ran=["m.py:3"], skipped_after={"m.py:3": [5]})}
UNWRITTEN_IN_BENCH = {"bench_check": BenchCheck(run=run("bench"), ran=["m.py:3"],
                                                  unwritten_by_return={"m.py:3": [1, 0]})}
UNCLEAN = {"hygiene": Hygiene(ok=False, problems=["binary file"])}
BENCH_FAILS = {"bench_check": BenchCheck(run=run("bench", False), ran=["m.py:3"])}
TORCH, NO_TORCH = Environment(python="3.11.7", torch="2.13.0"), Environment(python="3.11.7")


@pytest.mark.parametrize("update, kinds", [
    ({}, []),
    (POISONED, [Kind.UNINITIALISED]),
    (TESTS, [Kind.TESTS]),
    ({**POISONED, "correctness": Correctness(plain=run("plain", False), poison=run("poison", False))},
     [Kind.TESTS, Kind.UNINITIALISED]),
    (UNCOVERED, [Kind.DIVERGENCE]),
    (SKIPPED_BY_BENCH, [Kind.DIVERGENCE]),
    (UNWRITTEN_IN_BENCH, [Kind.DIVERGENCE]),
    (UNCLEAN, [Kind.OTHER]),
    ({**BENCH_FAILS, "environment": TORCH}, [Kind.UNINITIALISED]),  # the bench fails with memory poisoned
    ({**BENCH_FAILS, "environment": NO_TORCH}, [Kind.DIVERGENCE]),  # nothing poisoned: the bench saw what tests did not
    ({**BENCH_FAILS, **TESTS, "environment": NO_TORCH}, [Kind.TESTS]),  # ... unless the tests fail too
    ({**POISONED, **UNCOVERED}, [Kind.UNINITIALISED]),  # a failing change is not argued about further: as graded
])
def test_each_rejection_is_of_the_kind_its_grading_shows(update, kinds):
    assert kinds_of(grade(evidence(**update), SPEC)) == kinds


def test_a_kind_counts_only_where_its_rule_spoke_in_the_recorded_grading():
    """A grading recorded before a rule existed (or by another version's words) is not read as that rule's."""
    ev = grade(evidence(**POISONED), SPEC)
    assert kinds_of(ev.model_copy(update={"reasons": ["something else"]})) == [Kind.OTHER]


def harnessed(out: Path, job: Job, e: Evidence, agent: str, model: str, metrics: dict | None = None,
              cost: float | None = 0.5) -> None:
    """A job graded on `e` (by grade) whose patch came from ISO-Bench's `agent` and `model`."""
    report = write_job(out, "iso", job)
    h = HarnessRun(name="iso-bench", agent=agent, model=model, item=f"{job.task}_001", metrics=metrics or {})
    report = report.model_copy(update={
        "evaluation": grade(e, SPEC),
        "agent": AgentRun(name="prediction", model=f"{agent}:{model}", own_cost_usd=cost, harness=h)})
    report.write(out / "results" / "iso" / job.key / "report.json")


def test_per_agent_and_model_the_rejected_and_their_kinds_beside_the_harness_figures(tmp_path):
    harnessed(tmp_path, Job("a", "prediction:claude_code:gpt-5", 0), evidence(**POISONED), "claude_code", "gpt-5",
              {"status": "baseline_failed", "improvement": False, "error": "No module named 'IPython'"})
    harnessed(tmp_path, Job("b", "prediction:claude_code:gpt-5", 0), evidence(**TESTS), "claude_code", "gpt-5",
              {"status": "success", "speedup": 1.44, "improvement": True}, cost=0.25)
    harnessed(tmp_path, Job("c", "prediction:claude_code:gpt-5", 0), evidence(), "claude_code", "gpt-5",
              {"status": "success", "speedup": 1.0, "improvement": False})
    harnessed(tmp_path, Job("a", "prediction:trae:sonnet", 0), evidence(**SKIPPED_BY_BENCH), "trae", "sonnet",
              cost=None)
    write_job(tmp_path, "iso", Job("a", "rules", 0))  # our own contestant: not another harness's patch

    rows = rejections(load_results(tmp_path / "results" / "iso").runs)
    assert [(r.agent, r.model) for r in rows] == [("claude_code", "gpt-5"), ("trae", "sonnet")]
    cc, trae = rows
    assert (cc.patches, cc.graded, cc.passed, cc.rejected, cc.not_graded) == (3, 3, 1, 2, 0)
    assert cc.kinds == {Kind.UNINITIALISED: 1, Kind.TESTS: 1, Kind.DIVERGENCE: 0, Kind.OTHER: 0}
    assert cc.own_cost_usd == pytest.approx(1.25)
    assert cc.figures.statuses == {"baseline_failed": 1, "success": 2} and cc.figures.improved == 1
    assert cc.figures.speedup_geomean == pytest.approx((1.44 * 1.0) ** 0.5)
    assert "No module named 'IPython'" in cc.figures.words() and "speedup 1.20x" in cc.figures.words()
    assert (trae.rejected, trae.kinds[Kind.DIVERGENCE], trae.own_cost_usd, trae.figures.words()) == (1, 1, None, "-")


def test_no_harnessed_patch_no_table(tmp_path):
    write_job(tmp_path, "own", Job("a", "rules", 0, verdict="fail"))
    assert rejections(load_results(tmp_path / "results" / "own").runs) == []


# -- end to end: an ISO-Bench run folder graded with `check --predictions`, then `perfagent review` -----------------
DATA = Path(__file__).resolve().parents[1] / "data" / "iso_bench"
RUN = "state/runs/fastpkg/claude_code/default/2025-12-23_06-28-44"
SLOW = ("def total(xs, rounds=40):\n    s = 0\n    for _ in range(rounds):\n        for x in xs:\n            s += x\n"
        "    return s\n")
BENCH = ("from fastpkg.core import total\n\nassert total([1, 2, 3], rounds=2) == 12, 'total() is wrong'\n"
         "print(f'{1000.0:.3f}')\n")


@pytest.mark.slow(seconds=30)
def test_review_of_a_graded_iso_bench_run_folder_shows_the_agent_model_row(tmp_path):
    """The fastpkg fixture run folder (tests/data/iso_bench) over a mirror made here: its patch breaks the
    repository's own check (a `tests` rejection), while ISO-Bench's own run_summary.json says 1.42x, improved.
    `perfagent review` and `review --json` put both, and the agent's self-reported cost, on the agent/model's row."""
    repo = make_repo(tmp_path / "mirrors" / "acme__fastpkg",
                     {"fastpkg/__init__.py": "", "fastpkg/core.py": SLOW, "bench.py": BENCH})
    base = repo.head.commit.hexsha
    human1 = commit(repo, {"fastpkg/core.py": "# fast\n" + SLOW}, "core: human 1")
    human2 = commit(repo, {"fastpkg/core.py": "# faster\n" + SLOW}, "core: human 2")
    shutil.copytree(DATA, tmp_path / "iso")
    for path in (tmp_path / "iso").rglob("*"):
        if path.is_file():
            text = path.read_text()
            for k, v in {"@HUMAN1@": human1, "@PRE1@": base, "@HUMAN2@": human2, "@PRE2@": human1}.items():
                text = text.replace(k, v)
            path.write_text(text)
    assert perfagent("tasks", "import", "iso/tasks/fastpkg.yaml", "--format", "iso-bench", "--out", "imported",
                     "--repos", "mirrors", cwd=tmp_path).returncode == 0
    res = perfagent("check", "imported", "--predictions", f"iso/{RUN}", "--run-id", "iso", "--no-baseline",
                    "--quiet", cwd=tmp_path)
    assert res.returncode in (0, 1), res.stdout + res.stderr

    shown = perfagent("review", "results/iso", cwd=tmp_path)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    text = " ".join(shown.stdout.split())
    assert "patches rejected with evidence, per agent and model (iso-bench)" in text, shown.stdout
    row = next(ln for ln in shown.stdout.splitlines() if ln.startswith("│ claude_code "))
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[2:8] == ["1", "1", "0", "1", "0", "0"], row  # graded, rejected, uninitialised, tests, bench, other
    assert "$0.9038 (self-reported)" in text and "success 1, speedup 1.42x (geomean of 1), improved 1" in text, text

    as_json = json.loads(perfagent("review", "results/iso", "--json", cwd=tmp_path).stdout)
    (rej,) = as_json["rejections"]
    assert (rej["agent"], rej["model"], rej["graded"], rej["rejected"]) == (
        "claude_code", "claude-sonnet-4-5-20250929", 1, 1)
    assert rej["kinds"] == {"uninitialised read": 0, "tests": 1, "bench vs tests": 0, "other": 0}
    assert rej["harness_metrics"]["speedups"] == [pytest.approx(1.4181818)] and rej["own_cost"] == "self-reported"
    assert perfagent("report", "results/iso", "--html", "page.html", cwd=tmp_path).returncode == 0
    page = (tmp_path / "page.html").read_text()
    assert 'id="rejections"' in page and "success 1, speedup 1.42x (geomean of 1), improved 1" in page


# -- ISO-Bench's own figures, as the review gets them: read from its run folder as untrusted data ------------------
SEED = DATA.parent / "iso_bench_seed" / "state" / "runs" / "sglang" / "claude_code" / "default" / "2025-12-23_06-28-44"


def test_iso_benchs_own_hard_metrics_are_read_from_its_run_summary_and_kept_only_where_they_have_their_type(tmp_path):
    (seed,) = read_run_folder(SEED)
    assert seed.model_extra["iso_bench"]["hard"] == {"status": "baseline_failed", "improvement": False,
                                                     "error": "No module named 'IPython'"}
    item = tmp_path / "sglang_008_205d5cb4"
    shutil.copytree(SEED / item.name, item)
    (item / "run_summary.json").unlink()  # no run_summary.json: the folder's name still names the instance
    (bare,) = read_run_folder(item)
    assert (bare.instance_id, bare.model_extra["iso_bench"]["hard"]) == ("sglang_core-205d5cb4", {})
    hostile = {"status": "success; rm -rf /", "baseline_ms": "3.9", "patched_ms": float("nan"), "speedup": True,
               "improvement": "yes", "error": "\x1b[2Jfirst line\nsecond line"}
    (item / "test_results.json").write_text(json.dumps({"result": {**hostile, "error_message": hostile["error"]}}))
    (hurt,) = read_run_folder(item)
    assert hurt.model_extra["iso_bench"]["hard"] == {"error": "first line"}
    (item / "test_results.json").write_text(json.dumps({"result": {"status": "success", "baseline_ms": 3.5,
                                                                   "patched_ms": 3.4, "speedup": 1.03,
                                                                   "improvement": True, "error_message": None}}))
    (fine,) = read_run_folder(item)
    assert fine.model_extra["iso_bench"]["hard"] == {"status": "success", "baseline_ms": 3.5, "patched_ms": 3.4,
                                                     "speedup": 1.03, "improvement": True}
    for junk in ("[1, 2]", '{"evaluation": [1]}', "not json"):
        (item / "run_summary.json").write_text(junk)
        (pred,) = read_run_folder(item)
        assert pred.model_extra["iso_bench"]["hard"]["status"] == "success"  # test_results.json's, as before
