"""`perfagent review` and `compare` on results folders built by hand in the real shapes.

The fixture writes report.json with the report writer itself, evaluations from the checks'
own models, the ledger with the batch's Ledger and summary.json with its summary writer, so
the views are tested against exactly what a batch leaves behind, including a corrupt
report.json and a job folder whose report.json is missing.
"""

from __future__ import annotations

import io
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from rich.console import Console

from agent.batch import model_slug
from agent.batch_records import JobRecord, Ledger, figures_from_report
from agent.batch_summary import summarize_run, write_summary
from agent.checks import (CommandRun, Correctness, CoverageResult, DiffStats, Environment, Evaluation, PerfResult,
                          ReferenceResult, compare)
from agent.cli import main
from agent.loop import Outcome
from agent.models.base import Usage
from agent.models.pricing import cost_usd, load_prices
from agent.report import build_report, write_json
from agent.review import (Results, compare_results, load_results, render_compare, render_review, sample_plot,
                          sort_runs, token_costs)

SONNET = "anthropic:claude-sonnet-4-5"
DIFF = """\
diff --git a/miniattn/flashattention_backend.py b/miniattn/flashattention_backend.py
--- a/miniattn/flashattention_backend.py
+++ b/miniattn/flashattention_backend.py
@@ -10,3 +10,3 @@ def init_cuda_graph_state(self, max_bs):
-        self.cache_seqlens = torch.zeros(max_bs, dtype=torch.int32)
+        self.cache_seqlens = torch.empty(max_bs, dtype=torch.int32)
         self.page_table = torch.zeros(max_bs, 64, dtype=torch.int32)
"""


@dataclass
class Job:
    task: str
    model: str
    sample: int
    verdict: str = "pass"
    speedup: float | None = 1.5  # None: no perf measurement
    usage: Usage = field(default_factory=lambda: Usage(input_tokens=1200, output_tokens=900, cache_write_5m=5000,
                                                       cache_read=40000))
    turns: int = 6
    uncovered: list[str] = field(default_factory=list)
    denied: bool = False

    @property
    def key(self) -> str:
        return f"{self.task}/{model_slug(self.model)}/s{self.sample}"


def evaluation(job: Job, seed: int) -> dict:
    rng = random.Random(seed)
    perf = None
    if job.speedup is not None:
        base = [10.0 + rng.gauss(0, 0.15) for _ in range(8)]
        cand = [b / job.speedup + rng.gauss(0, 0.1) for b in base]
        c = compare(base, cand, "lower", n_resamples=500)
        perf = PerfResult(metric="init_ms", direction="lower", unit="ms", baseline_samples=base, candidate_samples=cand,
                          n_pairs=8, baseline_median=c.baseline_median, candidate_median=c.candidate_median,
                          ratio=c.ratio, ci_low=c.ci_low, ci_high=c.ci_high, p_value=c.p_value, verdict=c.verdict)
    plain = CommandRun(name="plain", command="python -m pytest -q tests", exit_code=0, passed=True, duration_s=2.1)
    poison_ok = job.verdict != "fail"
    poison = CommandRun(name="poison", command="python -m pytest -q tests", exit_code=0 if poison_ok else 1,
                        passed=poison_ok, duration_s=2.4, failing_tests=[] if poison_ok else ["tests/test_graph.py::test_replay"])
    changed = ["miniattn/flashattention_backend.py:11", *job.uncovered]
    ev = Evaluation(task_id=job.task, verdict=job.verdict,  # type: ignore[arg-type]
                    reasons=[] if job.verdict == "pass" else [f"the run is {job.verdict}"],
                    diff_stats=DiffStats(files=["miniattn/flashattention_backend.py"], insertions=1, deletions=1),
                    correctness=Correctness(plain=plain, poison=poison),
                    coverage=CoverageResult(changed=changed, covered=changed[:1], uncovered=job.uncovered),
                    perf=perf, reference=ReferenceResult(speedup=2.0, fraction_of_reference=0.5) if perf else None,
                    environment=Environment(cpu="test cpu", torch="2.13.0", python="3.11.7"))
    return ev.model_dump(mode="json")


def write_job(out: Path, run_id: str, job: Job, seed: int = 0, key: str | None = None) -> dict:
    """One finished job: report.json (by the report writer), trajectory, checks.json, the patch."""
    model_id = job.model.split(":", 1)[-1]
    offline = job.model == "rules"
    outcome = Outcome(subtype="success", result=f"## Done\n\nReplaced `torch.zeros` with `torch.empty` ({job.key}).",
                      num_turns=job.turns, duration_s=42.0, api_duration_s=30.0,
                      usage_by_model={model_id: Usage() if offline else job.usage},
                      cost_by_model={model_id: 0.0 if offline else cost_usd(model_id, job.usage, load_prices())})
    denials = [{"tool_name": "edit_file", "tool_use_id": "t1", "tool_input": {"path": "tests/test_graph.py"},
                "reason": "tests/test_graph.py is protected"}] if job.denied else []
    report = build_report(outcome, session_id=f"s-{seed}", evaluation=evaluation(job, seed), permission_denials=denials)
    key = key or job.key
    res = out / "results" / run_id / key
    write_json(res / "report.json", report)
    (res / "trajectory.jsonl").write_text(json.dumps({"type": "start", "task": job.task}) + "\n")
    write_json(res / "checks.json", [])
    patch = out / "patches" / run_id / key / "model_patch.diff"
    patch.parent.mkdir(parents=True, exist_ok=True)
    patch.write_text(DIFF)
    return report


def make_batch(out: Path, run_id: str = "batch-a", *, jobs: list[Job] | None = None, damage: bool = True) -> Path:
    """A batch run folder as the batch leaves it; `damage` adds a corrupt and a missing report.json."""
    jobs = jobs if jobs is not None else default_jobs()
    ledger = Ledger(out / "results" / run_id)
    for i, job in enumerate(jobs):
        report = write_job(out, run_id, job, seed=i)
        ledger.append(JobRecord(key=job.key, task=job.task, model=job.model, sample=job.sample, status="done",
                                has_reference=True, report=f"results/{run_id}/{job.key}/report.json",
                                patch=f"patches/{run_id}/{job.key}/model_patch.diff", wall_s=45.0,
                                **figures_from_report(report)))
    run_dir = out / "results" / run_id
    if damage:
        corrupt = Job("metadata-alloc", SONNET, 1)
        write_job(out, run_id, corrupt, seed=99)
        ledger.append(JobRecord(key=corrupt.key, task=corrupt.task, model=corrupt.model, sample=1, status="done",
                                report=f"results/{run_id}/{corrupt.key}/report.json", verdict="pass", speedup=1.2,
                                cost_usd=0.05, num_turns=4))
        (run_dir / corrupt.key / "report.json").write_text('{"type": "result", "subtype": "succ')  # torn write
        crashed = run_dir / "metadata-alloc" / "rules" / "s1"  # the job died before writing its report
        crashed.mkdir(parents=True)
        (crashed / "trajectory.jsonl").write_text(json.dumps({"type": "start"}) + "\n")
    write_summary(run_dir, summarize_run(run_dir))
    return run_dir


def default_jobs() -> list[Job]:
    return [
        Job("cuda-graph-buffers", SONNET, 0, speedup=1.8, denied=True),
        Job("cuda-graph-buffers", SONNET, 1, verdict="fail", speedup=1.9),
        Job("cuda-graph-buffers", "rules", 0, speedup=1.6, turns=3),
        Job("cuda-graph-buffers", "rules", 1, verdict="unverified", speedup=1.2, uncovered=["miniattn/x.py:7"]),
        Job("metadata-alloc", SONNET, 0, speedup=1.05),
        Job("metadata-alloc", "rules", 0, speedup=None),
    ]


def text_of(results: Results, **kw) -> str:
    console = Console(width=240, record=True, file=io.StringIO(), color_system=None)
    render_review(console, results, **kw)
    return console.export_text()


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def perfagent(capsys, monkeypatch):
    """The CLI's main() in-process (a subprocess costs seconds of imports per call)."""
    monkeypatch.setenv("COLUMNS", "250")

    def call(*args: str) -> Ran:
        code = main(list(args))
        out = capsys.readouterr()
        return Ran(code, out.out, out.err)
    return call


# -- loading --------------------------------------------------------------------------------------------
def test_every_run_is_loaded_and_agrees_with_summary_json(tmp_path):
    run_dir = make_batch(tmp_path)
    res = load_results(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    keys = {r.key for r in res.runs}
    assert {j["key"] for j in summary["jobs"]} <= keys
    assert "metadata-alloc/rules/s1" in keys  # no report, not in the ledger: still shown
    for run in res.runs:
        job = next((j for j in summary["jobs"] if j["key"] == run.key), None)
        if job is None:
            continue
        assert (run.speedup, run.cost_usd, run.turns) == (job["speedup"], job["cost_usd"], job["num_turns"])
        if not run.problem:
            assert run.verdict == job["verdict"]


def test_corrupt_and_missing_reports_are_shown_as_such(tmp_path):
    res = load_results(make_batch(tmp_path))
    by_key = {r.key: r for r in res.runs}
    corrupt = by_key[f"metadata-alloc/{model_slug(SONNET)}/s1"]
    missing = by_key["metadata-alloc/rules/s1"]
    assert corrupt.verdict == "corrupt report" and "JSONDecodeError" in corrupt.problem
    assert missing.verdict == "missing report" and missing.problem == "report.json missing"
    text = text_of(res)
    assert "corrupt report" in text and "missing report" in text
    assert "metadata-alloc/rules/s1: report.json missing" in text


@pytest.mark.parametrize("ledger", [True, False])
@pytest.mark.parametrize("text", ["[1, 2]", '{"type": "result", "evaluation": "oops"}',
                                  '{"type": "result", "evaluation": {"perf": [1]}}', '{"type": "result", "modelUsage": {"m": 1}}',
                                  '{"type": "result", "evaluation": {"perf": {"baseline_samples": ["x"]}}}',
                                  '{"type": "result", "evaluation": {"correctness": {"plain": {"passed": true, "duration_s": "slow"}}}}'])
def test_valid_json_of_the_wrong_shape_is_corrupt_not_a_crash(tmp_path, text, ledger):
    run_dir = make_batch(tmp_path, damage=False, jobs=[Job("t", "rules", 0), Job("t", "rules", 1)])
    (run_dir / "t/rules/s0/report.json").write_text(text)
    if not ledger:
        (run_dir / "batch.jsonl").unlink()
    res = load_results(run_dir)
    assert [(r.key, r.verdict) for r in res.runs] == [("t/rules/s0", "corrupt report"), ("t/rules/s1", "pass")]
    assert [(m.model, m.jobs) for m in res.summary.models] == [("rules", 2)]
    assert "corrupt report" in text_of(res, task="t")


def test_run_list_shows_every_run_with_interval_cost_turns(tmp_path):
    res = load_results(make_batch(tmp_path))
    text = text_of(res)
    for run in res.runs:
        assert run.key in text
    pass_run = next(r for r in res.runs if r.key == f"cuda-graph-buffers/{model_slug(SONNET)}/s0")
    lo, hi = pass_run.interval
    assert lo < pass_run.speedup < hi
    assert f"{pass_run.speedup:.3f}x [{lo:.3f}, {hi:.3f}]" in text
    assert f"${pass_run.cost_usd:.4f}" in text
    # the batch's own per-model table, the same function summary.md is made with
    assert "geomean speedup" in text and "Opt@K" in text


def test_sorting(tmp_path):
    res = load_results(make_batch(tmp_path))
    speedups = [r.speedup for r in sort_runs(res.runs, "speedup") if r.speedup is not None]
    assert speedups == sorted(speedups, reverse=True)
    costs = [r.cost_usd for r in sort_runs(res.runs, "cost") if r.cost_usd is not None]
    assert costs == sorted(costs)
    verdicts = [r.verdict for r in sort_runs(res.runs, "verdict")]
    assert verdicts[0] == "pass" and verdicts.index("fail") > verdicts.index("unverified")


def test_one_task_in_detail(tmp_path):
    res = load_results(make_batch(tmp_path))
    text = text_of(res, task="cuda-graph-buffers")
    assert "metadata-alloc" not in text.split("cuda-graph-buffers", 1)[1].split("checks")[0]
    assert "torch.empty(max_bs" in text  # the diff
    assert "poison run" in text and "FAIL" in text and "tests/test_graph.py::test_replay" in text
    assert "NOT executed: miniattn/x.py:7" in text  # coverage of changed lines
    assert "edit_file(tests/test_graph.py)" in text  # the protected-path attempt
    assert "baseline" in text and "candidate" in text and "▁" in text or "█" in text  # the sample plot
    assert "Replaced torch.zeros with torch.empty" in text  # the agent's summary, as Markdown
    assert "cache read" in text and "output" in text  # cost by token type


def test_single_run_folder(tmp_path):
    # a single `perfagent run` puts its job under the task id, with no ledger
    write_job(tmp_path, "20260101-000000-abcdef", Job("cuda-graph-buffers", SONNET, 0), key="cuda-graph-buffers")
    run_dir = tmp_path / "results" / "20260101-000000-abcdef"
    res = load_results(run_dir)
    assert [r.key for r in res.runs] == ["cuda-graph-buffers"] and not res.is_batch
    assert res.runs[0].model == "claude-sonnet-4-5" and res.runs[0].verdict == "pass"
    text = text_of(res)
    assert "checks" in text and "cost by token type" in text  # one run: shown in detail
    # the job folder itself works too
    assert [r.key for r in load_results(run_dir / "cuda-graph-buffers").runs] == ["cuda-graph-buffers"]


def test_failed_and_pending_jobs(tmp_path):
    run_dir = make_batch(tmp_path, damage=False, jobs=[Job("t", "rules", 0)])
    Ledger(run_dir).append(JobRecord(key="t/rules/s1", task="t", model="rules", sample=1, status="failed",
                                     reason="job process exited 1 without a report"))
    (run_dir / "batch.json").write_text(json.dumps({"jobs": [{"key": f"t/rules/s{k}", "model": "rules"}
                                                            for k in range(3)]}))
    res = load_results(run_dir)
    verdicts = {r.key: r.verdict for r in res.runs}
    assert verdicts == {"t/rules/s0": "pass", "t/rules/s1": "failed", "t/rules/s2": "pending"}
    assert "exited 1 without a report" in text_of(res, task="t")


# -- pieces --------------------------------------------------------------------------------------------
def test_sample_plot_separates_clouds():
    perf = {"baseline_samples": [10, 10.1, 9.9, 10.2], "candidate_samples": [5, 5.1, 4.9, 5.05], "unit": "ms"}
    lines = sample_plot(perf, width=20).splitlines()
    assert len(lines) == 3
    base, cand = lines[0][11:31], lines[1][11:31]
    assert base.startswith("·") and not base.endswith("·")  # baseline on the right
    assert cand.endswith("·") and not cand.startswith("·")  # candidate on the left
    assert "4.9 ms" in lines[2] and "10.2 ms" in lines[2]
    assert sample_plot({}) == ""
    assert sample_plot({"baseline_samples": [3.0], "candidate_samples": [3.0]})  # no span: no crash


def test_token_costs_add_up_to_the_reported_cost(tmp_path):
    report = write_job(tmp_path, "r", Job("t", SONNET, 0))
    rows = token_costs(report)
    assert {r.kind for r in rows} == {"input", "output", "cache write 5m", "cache read"}
    assert sum(r.usd for r in rows) == pytest.approx(report["total_cost_usd"], rel=1e-12)
    assert token_costs({"modelUsage": {"mystery-model": {"inputTokens": 5}}})[0].usd is None


# -- compare ---------------------------------------------------------------------------------------------
def test_compare_two_batches(tmp_path):
    a = load_results(make_batch(tmp_path, "batch-a"))
    jobs = default_jobs()
    jobs[1].verdict = "pass"  # fixed
    jobs[4].verdict = "fail"  # broke
    jobs.append(Job("new-task", "rules", 0))
    del jobs[5]
    b = load_results(make_batch(tmp_path, "batch-b", jobs=jobs, damage=False))
    rows = {(r.task, r.model): r for r in compare_results(a, b)}
    assert rows[("cuda-graph-buffers", SONNET)].change == "more correct"
    assert rows[("cuda-graph-buffers", SONNET)].verdicts_a == ["pass", "fail"]
    assert rows[("metadata-alloc", SONNET)].change == "fewer correct"
    assert rows[("new-task", "rules")].change == "new"
    assert rows[("metadata-alloc", "rules")].change == "gone"
    console = Console(width=240, record=True, file=io.StringIO(), color_system=None)
    render_compare(console, a, b)
    text = console.export_text()
    assert "batch-a -> batch-b" in text and "pass, fail -> pass, pass" in text and "more correct" in text


# -- the CLI -----------------------------------------------------------------------------------------------
def test_cli_review_compare_and_errors(tmp_path, perfagent):
    run_dir = make_batch(tmp_path)
    res = perfagent("review", str(run_dir), "--sort", "speedup")
    assert res.returncode == 0, res.stderr
    assert "corrupt report" in res.stdout and "Traceback" not in res.stdout + res.stderr
    res = perfagent("review", str(run_dir), "--task", "cuda-graph-buffers")
    assert res.returncode == 0 and "poison run" in res.stdout
    res = perfagent("review", str(run_dir), "--task", "nope")
    assert res.returncode == 2 and res.stderr.startswith("error:") and "cuda-graph-buffers" in res.stderr
    res = perfagent("review", str(tmp_path / "nowhere"))
    assert res.returncode == 2 and "no such results folder" in res.stderr
    b = make_batch(tmp_path, "batch-b", damage=False)
    res = perfagent("compare", str(run_dir), str(b))
    assert res.returncode == 0, res.stderr
    assert "batch-a -> batch-b" in res.stdout
