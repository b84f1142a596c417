"""`perfagent batch`: job expansion, the ledger, the summary's statistics, and real batches of
tiny tasks driven by hand-written replay trajectories (local pool, kill -9 + resume, Ray)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.batch.driver import BatchConfig, BatchError, expand_jobs, load_tasks, model_arg, model_slug, run_batch
from agent.batch.executors import GpuPool, JobSpec, LaunchConfig, LocalExecutor, job_request
from agent.batch.ledger import JobRecord, Ledger, commands_seconds, is_retryable
from agent.batch.summary import (BatchSummary, geometric_mean, opt_at_k, reaches_reference, summarize,
                                 summarize_run, summary_markdown, summary_tables)
from agent.cli import build_parser, main
from agent.models.base import Usage
from agent.options import options_from_args
from agent.run.result import Report
from helpers import make_repo

# -- fixtures: a tiny target whose "cost" is a constant the bench prints ------------------------------------
MOD = "COST = 10.0\n\n\ndef f():\n    return COST\n"
BENCH = ("import json\nimport random\n\nimport mod\n\n"
         'print(json.dumps({"metric": "ms", "value": mod.f() * (1 + random.random() * 0.02)}))\n')
REF = """diff --git a/mod.py b/mod.py
--- a/mod.py
+++ b/mod.py
@@ -1,4 +1,4 @@
-COST = 10.0
+COST = 4.0
 
 
 def f():
"""
TASK = '''id = "{id}"
repo = "src"
prompt = "Make f cheaper."
protected = ["bench.py"]
requires_gpu = {gpu}
[correctness]
command = "python -c 'import mod; assert mod.f() > 0'"
poison = false
{perf}{ref}[budget]
max_turns = 3
'''
PERF = '[perf]\ncommand = "python bench.py"\nmetric = "ms"\n'


def edit(new: str) -> dict:
    return {"id": "e", "name": "edit_file", "input": {"path": "mod.py", "old": "COST = 10.0", "new": f"COST = {new}"}}


def call(name: str, **inp) -> dict:
    return {"id": name[:2], "name": name, "input": inp}


def trajectory(path: Path, *turns: list[dict]) -> str:
    path.write_text("".join(json.dumps({"type": "response", "tool_calls": calls}) + "\n" for calls in turns))
    return f"replay:{path}"


def build_project(root: Path) -> tuple[Path, Path, dict[str, str]]:
    """Tasks t1 (perf + reference), t2 (no perf), tgpu (requires a GPU); replays good (2.5x = the
    reference), bad (breaks the check), slow (sleeps first), gpu (echoes its device)."""
    make_repo(root / "src", {"mod.py": MOD, "bench.py": BENCH})
    (root / "ref.diff").write_text(REF)
    tasks = root / "tasks"
    tasks.mkdir()
    for tid, gpu, perf, ref in (("t1", "false", PERF, '[reference]\npatch = "ref.diff"\n'), ("t2", "false", "", ""),
                                ("tgpu", "true", "", "")):
        (tasks / f"{tid}.toml").write_text(TASK.format(id=tid, gpu=gpu, perf=perf, ref=ref))
    models = {
        "good": trajectory(root / "good.jsonl", [edit("4.0")], [call("submit", summary="cheaper")]),
        "bad": trajectory(root / "bad.jsonl", [edit("-1.0")], *[[call("submit", summary="x")]] * 2),
        "slow": trajectory(root / "slow.jsonl", [call("run", command="sleep 4")], [edit("4.0")],
                           [call("submit", summary="cheaper")]),
        "gpu": trajectory(root / "gpu.jsonl", [call("run", command="echo DEVICE=$CUDA_VISIBLE_DEVICES")],
                          [edit("4.0")], [call("submit", summary="cheaper")]),
    }
    return root, tasks, models


def _isolate(mp: pytest.MonkeyPatch, root: Path) -> None:
    """Work in `root`, with the perf device locks under it (not shared with other runs on this machine)."""
    mp.setenv("HOME", str(root / "home"))
    mp.chdir(root)


@pytest.fixture
def project(tmp_path, monkeypatch):
    _isolate(monkeypatch, tmp_path)
    return build_project(tmp_path)


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    """All fixture tasks x {good, bad} x 2 samples, 2 workers, through the CLI: shared by the
    end-to-end test and the Ray comparison."""
    root = tmp_path_factory.mktemp("e2e")
    with pytest.MonkeyPatch.context() as mp:
        _isolate(mp, root)
        root, tasks, models = build_project(root)
        code = main(["batch", str(tasks), "--models", f"{models['good']},{models['bad']}", "--samples", "2",
                     "--workers", "2", "--run-id", "e2e", "--out", "out", "--quiet"])
        yield root, tasks, models, code


def ledger_lines(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "batch.jsonl").read_text().splitlines()]


# -- pure parts ------------------------------------------------------------------------------------------------
def rec(task="t", model="m", sample=0, status="done", verdict="pass", speedup=None, ref=None, has_ref=False, **kw):
    return JobRecord(key=f"{task}/{model_slug(model)}/s{sample}", task=task, model=model, sample=sample, status=status,
                     verdict=verdict, speedup=speedup, reference_speedup=ref, has_reference=has_ref, **kw)


def test_geometric_mean():
    assert geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    assert geometric_mean([]) is None and geometric_mean([0.0, -1.0]) is None


def test_opt_at_k_follows_gso():
    by_task = {
        "solved": [rec(verdict="fail", speedup=3.0, ref=2.0, has_ref=True),  # fast but incorrect: no
                   rec(sample=1, speedup=1.9, ref=2.0, has_ref=True)],  # 95% of 2.0 = 1.9: yes
        "short": [rec(speedup=1.89, ref=2.0, has_ref=True), rec(sample=1, speedup=1.2, ref=2.0, has_ref=True)],
        "broken": [rec(verdict="fail", has_ref=True)],  # no sample correct: counted, not solved
        "small": [rec(speedup=1.05, ref=1.04, has_ref=True)],  # matches a reference that gains little: < 1.2x
        "no-ref": [rec(speedup=5.0)],  # no reference patch: not counted
    }
    assert opt_at_k(by_task) == (1, 4)
    assert not reaches_reference(rec(status="failed", speedup=3.0, ref=2.0))


def test_summarize_counts_rates_and_spend():
    recs = [
        rec("a", "m1", 0, speedup=2.0, ref=2.0, has_ref=True, perf_verdict="faster", cost_usd=0.5,
            tokens=Usage(input_tokens=100, output_tokens=10), wall_s=10, model_s=4, commands_s=5),
        rec("a", "m1", 1, verdict="fail", cost_usd=None, wall_s=3),
        rec("b", "m1", 0, speedup=8.0, perf_verdict="faster", cost_usd=0.25, wall_s=2),
        rec("b", "m1", 1, status="failed", verdict=None, reason="no report"),
        rec("g", "m1", 0, status="skipped", verdict=None, reason="needs a GPU"),
    ]
    s = summarize(recs, run_id="r", samples=2, planned=[(r.key, r.model) for r in recs] + [("g/m1/s1", "m1")])
    (m,) = s.models
    assert (m.jobs, m.done, m.failed, m.skipped, m.pending) == (4, 3, 1, 1, 1)
    assert (m.correct, m.correct_rate, m.faster) == (2, 0.5, 2)
    assert m.geomean_speedup == pytest.approx(4.0) and m.speedup_jobs == 2
    assert (m.opt_solved, m.opt_tasks, m.opt_at_k, m.opt_k) == (1, 1, 1.0, 2)
    assert m.cost_usd == 0.75 and m.cost_unknown_jobs == 2 and m.cost_per_job == pytest.approx(0.375)
    assert m.tokens.total == 110 and m.overhead_s == pytest.approx(1 + 3 + 2)
    row = next(t for t in s.tasks if t.task == "a")
    assert row.opt is True and row.best_speedup == 2.0 and row.correct == 1
    assert next(t for t in s.tasks if t.task == "g").statuses == {"skipped": 1}
    again = BatchSummary.model_validate_json(s.to_json())
    assert again.models == s.models and json.loads(s.to_json())["schema"] == "perfagent.batch-summary/3"
    assert "| m1 | 4 | 2 (50%)" in summary_markdown(s) and len(summary_tables(s)) == 3


def test_model_slugs_are_safe_and_distinct(tmp_path):
    assert model_slug("anthropic:claude-sonnet-4-5") == "anthropic-claude-sonnet-4-5"
    assert model_slug("replay:runs/a b/trajectory.jsonl") == "replay-runs-a-b-trajectory.jsonl"
    long = model_slug("replay:" + "x/" * 60 + "t.jsonl")
    assert len(long) <= 60 and "/" not in long and long != model_slug("replay:" + "y/" * 60 + "t.jsonl")
    assert model_arg("replay:t.jsonl", tmp_path) == f"replay:{tmp_path / 't.jsonl'}"
    assert model_arg("anthropic:claude-sonnet-4-5", tmp_path) == "anthropic:claude-sonnet-4-5"


def test_expand_jobs(project):
    root, tasks, models = project
    ts = load_tasks(tasks)
    jobs = expand_jobs(ts, ["rules", models["good"]], 2, cwd=root)
    assert len(jobs) == 3 * 2 * 2 and len({j.key for j in jobs}) == 12
    assert [j.sample for j in jobs[:6]] == [0] * 6  # sample-major: an early stop still covers everything
    assert jobs[0].key == "t1/rules/s0" and jobs[0].has_reference and not jobs[0].requires_gpu
    with pytest.raises(BatchError, match="share the folder"):
        expand_jobs(ts, ["a:b", "a/b"], 1, cwd=root)


def test_ledger_append_and_torn_line(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.append(rec("a", status="failed", verdict=None))
    ledger.append(rec("a", speedup=1.5))
    ledger.append(rec("b"))
    with open(ledger.path, "a") as f:
        f.write('{"key": "c", "task": "c", "mod')  # a writer killed mid-line
    latest = ledger.latest()
    assert set(latest) == {"a/m/s0", "b/m/s0"} and latest["a/m/s0"].status == "done"
    assert all(r.finished_at > 0 for r in ledger.lines())


def test_only_a_providers_api_error_is_a_failed_job():
    api_down = Report(subtype="error_during_execution", result="model error: overloaded", modelUsage={})
    assert is_retryable(api_down) == "model error: overloaded"
    replay_ran_out = api_down.model_copy(update={"modelUsage": {"replay": {}}})  # deterministic: retrying changes nothing
    assert is_retryable(replay_ran_out) is None
    assert is_retryable(Report(subtype="error_max_turns", result="stopped")) is None
    interrupted = Report(subtype="error_during_execution", result="interrupted by SIGTERM", modelUsage={"replay": {}})
    assert is_retryable(interrupted) == "interrupted by SIGTERM"  # not the agent's doing: run it again


def job_options(*flags: str):
    """The run options a job of `perfagent batch SET <flags>` runs with."""
    opts = options_from_args(build_parser().parse_args(["batch", "tasks", *flags]))
    spec = JobSpec(key="t/rules/s0", task="t", task_file="/t.toml", model="rules", model_arg="rules", sample=0)
    return job_request(spec, LaunchConfig(run_id="r", out_dir="/out", cwd="/", options=opts)).options


def test_run_flags_pass_allow_unsandboxed_to_every_job():
    opts = job_options("--timeout", "3", "--allow-unsandboxed")
    assert (opts.timeout_s, opts.allow_unsandboxed) == (3, True)
    assert not job_options("--stream").allow_unsandboxed


def test_commands_time_counts_each_grading_once(tmp_path):
    graded = {"verdict": "pass", "duration_s": 5.0}
    (tmp_path / "checks.json").write_text(json.dumps([{"full": False, "evaluation": {"duration_s": 2.0}},
                                                      {"full": True, "evaluation": graded}]))
    run = {"type": "tool_result", "name": "run", "duration_s": 1.5}
    (tmp_path / "trajectory.jsonl").write_text(json.dumps(run) + "\n")
    report = {"type": "result", "evaluation": {**graded, "emitted": "best passing candidate", "warnings": []}}
    (tmp_path / "report.json").write_text(json.dumps(report))
    assert commands_seconds(tmp_path) == 8.5  # the final evaluation is the logged full one
    report["evaluation"]["duration_s"] = 30.0  # made after the loop: not in checks.json
    (tmp_path / "report.json").write_text(json.dumps(report))
    assert commands_seconds(tmp_path) == 8.5 + 30.0


def test_gpu_pool_spreads_jobs():
    pool = GpuPool(["0", "1"])
    got = [pool.acquire() for _ in range(4)]
    assert sorted(got) == ["0", "0", "1", "1"]
    pool.release("1")
    assert pool.acquire() == "1"


class StubExecutor:
    """Records which jobs it was given; finishes each as done."""

    name = "stub"

    def __init__(self, gpus=0):
        self.gpus, self.ran = gpus, []

    def gpu_count(self):
        return self.gpus

    def run(self, jobs, on_start, on_finish):
        for j in jobs:
            on_start(j, None)
            self.ran.append(j.key)
            on_finish(j.record("done", verdict="pass"))


def test_resume_runs_only_unfinished_jobs(project):
    root, tasks, models = project
    ts = load_tasks(tasks)
    cfg = BatchConfig(run_id="r", out_dir=root / "out", quiet=True)
    first = StubExecutor()
    run_batch(ts, ["m"], 1, cfg, executor=first)
    assert first.ran == ["t1/m/s0", "t2/m/s0"]
    run_dir = root / "out/results/r"
    with pytest.raises(BatchError, match="--resume"):
        run_batch(ts, ["m"], 1, cfg, executor=StubExecutor())
    Ledger(run_dir).append(rec("t2", "m", status="failed", verdict=None, reason="api down"))
    cfg.resume = True
    again = StubExecutor()
    out = run_batch(ts, ["m"], 2, cfg, executor=again)  # one more sample each, and the failed job
    assert again.ran == ["t2/m/s0", "t1/m/s1", "t2/m/s1"]
    lines = ledger_lines(run_dir)
    assert [line["key"] for line in lines if line["status"] == "skipped"] == ["tgpu/m/s0", "tgpu/m/s1"]  # no repeats
    assert sum(line["status"] == "done" for line in lines) == 5 and out.summary.models[0].done == 4
    assert json.loads((run_dir / "batch.json").read_text())["samples"] == 2
    gpu = StubExecutor(gpus=1)
    run_batch(ts, ["m"], 2, cfg, executor=gpu)  # now a GPU: the skipped jobs run, nothing else
    assert gpu.ran == ["tgpu/m/s0", "tgpu/m/s1"]


def test_summarize_run_without_ledger(tmp_path):
    """Runs made one by one with `perfagent run --job <task>/<model>/s<k>` are summarised from their reports."""
    run_dir = tmp_path / "results" / "solo"
    for k, verdict in enumerate(["pass", "fail"]):
        d = run_dir / "t1" / "anthropic-claude-sonnet-4-5" / f"s{k}"
        d.mkdir(parents=True)
        perf = {"metric": "ms", "direction": "lower", "ratio": 1 / 1.5, "verdict": "faster"}
        (d / "report.json").write_text(json.dumps({
            "type": "result", "subtype": "success", "total_cost_usd": 0.1, "duration_ms": 2000, "duration_api_ms": 500,
            "usage": {"input_tokens": 10, "output_tokens": 5}, "evaluation": {"verdict": verdict, "perf": perf}}))
    s = summarize_run(run_dir)
    (m,) = s.models
    assert m.model == "anthropic-claude-sonnet-4-5" and m.jobs == 2 and m.correct == 1 and m.faster == 1
    assert m.cost_usd == pytest.approx(0.2) and m.model_s == 1.0 and s.samples == 2


def test_an_external_agents_jobs_group_under_its_spec(tmp_path):
    """Claude Code and our loop on the same API model are two contestants, labelled by their specs."""
    agent = {"name": "claude-code", "model": "claude-sonnet-4-5", "version": "2.1.330"}
    run_dir = tmp_path / "results" / "solo"
    for folder, extra in (("claude-code-claude-sonnet-4-5", {"agent": agent}), ("anthropic-claude-sonnet-4-5", {})):
        d = run_dir / "t1" / folder / "s0"
        d.mkdir(parents=True)
        (d / "report.json").write_text(json.dumps({
            "type": "result", "total_cost_usd": 0.1, "modelUsage": {"claude-sonnet-4-5": {"costUSD": 0.1}},
            "evaluation": {"verdict": "fail"}, **extra}))
    s = summarize_run(run_dir)
    assert sorted(m.model for m in s.models) == ["anthropic-claude-sonnet-4-5", "claude-code:claude-sonnet-4-5"]
    assert "| claude-code:claude-sonnet-4-5 | 1 | 0 (0%)" in summary_markdown(s)
    assert [t.model for t in s.tasks] == ["anthropic-claude-sonnet-4-5", "claude-code:claude-sonnet-4-5"]
    (single,) = summarize_run(_single_run(tmp_path, agent)).models  # `perfagent run --agent`: no folder names it
    assert single.model == "claude-code:claude-sonnet-4-5"


def _single_run(tmp_path: Path, agent: dict) -> Path:
    d = tmp_path / "results" / "one" / "t1"
    d.mkdir(parents=True)
    (d / "report.json").write_text(json.dumps({"type": "result", "modelUsage": {"claude-sonnet-4-5": {}},
                                               "agent": agent}))
    return d.parent


def test_cli_errors_are_one_line(project, capsys):
    root, tasks, models = project
    assert main(["batch", str(tasks), "--resume"]) == 2
    assert "--resume needs the --run-id" in capsys.readouterr().err
    (tasks / "broken.toml").write_text('id = "broken"\n')
    assert main(["batch", str(tasks), "--models", "rules", "--quiet"]) == 2
    assert "invalid task" in capsys.readouterr().err


def test_ray_missing_is_a_clean_error(project, monkeypatch, capsys):
    root, tasks, models = project
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    assert main(["batch", str(tasks / "t2.toml"), "--models", models["good"], "--executor", "ray", "--quiet"]) == 2
    assert "needs Ray, which is not installed here" in capsys.readouterr().err


# -- real batches ---------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_local_batch_end_to_end(e2e, capsys):
    root, tasks, models, code = e2e
    assert code == 1  # the bad model's jobs end error_max_turns: failures, so the batch exits 1
    run_dir = root / "out/results/e2e"
    lines = ledger_lines(run_dir)
    assert len(lines) == 12 and len({line["key"] for line in lines}) == 12
    skipped = [line for line in lines if line["status"] == "skipped"]
    assert len(skipped) == 4 and all("requires a GPU" in line["reason"] for line in skipped)
    for line in lines:
        if line["status"] == "done":
            assert (root / "out" / line["report"]).is_file() and (root / "out" / line["patch"]).is_file()
            log = (run_dir / line["key"] / "batch.log").read_text()
            assert "turn 1" in log and "tool " in log, "each job's log fills as it runs"
    s = json.loads((run_dir / "summary.json").read_text())
    good, bad = sorted(s["models"], key=lambda m: m["model"].endswith("bad.jsonl"))
    assert (good["jobs"], good["correct"], good["skipped"], good["opt_solved"], good["opt_tasks"]) == (4, 4, 2, 1, 1)
    assert good["faster"] == 2 and 2.2 < good["geomean_speedup"] < 2.8  # t1 measured 2.5x; t2 has no perf
    assert (bad["jobs"], bad["correct"], bad["opt_solved"]) == (4, 0, 0)
    assert bad["errored"] == 4 and good["errored"] == 0 and s["failed"] == 4
    assert s["jobs_per_minute"] > 0 and (run_dir / "summary.md").read_text().startswith("# batch e2e")


def group_alive(pgid: int) -> bool:
    """A live (not zombie) process in the group; zombies are dead, whoever reaps them."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


@pytest.mark.slow
def test_kill_9_then_resume_gives_one_result_per_job(project):
    root, tasks, models = project
    argv = [sys.executable, "-m", "agent.cli", "batch", str(tasks / "t2.toml"), "--models",
            f"{models['slow']},{models['good']}", "--samples", "2", "--workers", "2", "--run-id", "k", "--out", "out",
            "--quiet"]
    run_dir = root / "out/results/k"
    proc = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (run_dir / "batch.jsonl").is_file() or not (run_dir / "batch.jsonl").read_text().strip():
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "no job finished in 60 s"
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)  # the batch alone: its fork server and job processes must follow
    proc.wait()
    deadline = time.monotonic() + 2  # well before the job in flight (sleep 4) could end by itself
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    orphans = group_alive(proc.pid)
    if orphans:
        os.killpg(proc.pid, signal.SIGKILL)
    assert not orphans, "job processes outlived the killed batch"
    before = {line["key"]: line for line in ledger_lines(run_dir)}
    assert 1 <= len(before) < 4, "the batch was not interrupted halfway"
    uuids = {k: json.loads((root / "out" / r["report"]).read_text())["uuid"] for k, r in before.items()}

    assert main(["batch", "--run-id", "k", "--out", "out", "--resume", "--quiet"]) == 0  # set and models from the plan
    lines = ledger_lines(run_dir)
    keys = [line["key"] for line in lines]
    assert sorted(keys) == sorted(set(keys)) and len(keys) == 4 and all(line["status"] == "done" for line in lines)
    for k, u in uuids.items():  # a finished job is never re-run
        assert json.loads((root / "out" / before[k]["report"]).read_text())["uuid"] == u
    reports = list((root / "out/results/k").rglob("report.json"))
    assert len(reports) == 4 and len(list((root / "out/patches/k").rglob("model_patch.diff"))) == 4


@pytest.mark.slow
def test_each_job_sees_one_gpu(project):
    """--gpus 0,1: every job's commands see exactly one device, and both devices get jobs."""
    root, tasks, models = project
    cfg = LaunchConfig(run_id="g", out_dir=str(root / "out"), cwd=str(root))
    ts = load_tasks(tasks / "t2.toml")
    jobs = expand_jobs(ts, [models["gpu"]], 2, cwd=root)
    seen: dict[str, str] = {}
    executor = LocalExecutor(cfg, workers=2, gpus=["0", "1"])
    executor.run(jobs, lambda job, device: None, lambda r: seen.update({r.key: r.device}))
    assert sorted(seen.values()) == ["0", "1"]
    for key, device in seen.items():
        traj = (root / "out/results/g" / key / "trajectory.jsonl").read_text()
        assert f"DEVICE={device}\\n" in traj


@pytest.mark.slow
def test_ray_executor_matches_local(e2e):
    """The first sample of t1 and tgpu on a local Ray cluster: the same verdicts and counts as the
    local executor gave those jobs in the end-to-end run."""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'perfagent[ray]')")
    root, tasks, models, _ = e2e
    ts = load_tasks(tasks / "t1.toml") + load_tasks(tasks / "tgpu.toml")
    with pytest.MonkeyPatch.context() as mp:
        _isolate(mp, root)
        mp.delenv("RAY_ADDRESS", raising=False)
        cfg = BatchConfig(run_id="ray", out_dir=root / "out", workers=2, executor="ray", quiet=True)
        try:
            got = run_batch(ts, [models["good"], models["bad"]], 1, cfg).summary
        finally:
            ray.shutdown()
    local = summarize_run(root / "out/results/e2e")
    keys = {j.key for j in got.jobs}
    want = summarize([j for j in local.jobs if j.key in keys], run_id="ray", samples=1)

    def comparable(s: BatchSummary):
        return ([(m.model, m.jobs, m.done, m.failed, m.skipped, m.correct, m.faster, m.opt_solved, m.opt_tasks)
                 for m in sorted(s.models, key=lambda m: m.model)],
                [(j.key, j.status, j.verdict, j.perf_verdict) for j in s.jobs])

    assert len(keys) == 4 and comparable(got) == comparable(want)
    good = next(m for m in got.models if m.model == models["good"])
    assert good.geomean_speedup == pytest.approx(2.5, rel=0.1)
    assert len(list((root / "out/results/ray").rglob("report.json"))) == 2  # shipped back from the workers


# -- failures are failures ------------------------------------------------------------------------------------------
class ScriptedExecutor(StubExecutor):
    """Finishes each job with a report written by the report writer (tests/helpers.write_job), then made to end
    as `ends[task]` says: "error_max_turns" (its last passing patch still grades pass), "no-change" (the agent
    submitted nothing: an empty patch), or "pass"."""

    def __init__(self, out_dir: Path, run_id: str, ends: dict[str, str]):
        super().__init__()
        self.out_dir, self.run_id, self.ends = out_dir, run_id, ends

    def run(self, jobs, on_start, on_finish):
        from agent.batch.ledger import figures_from_report
        from helpers import Job, write_job

        for j in jobs:
            on_start(j, None)
            end = self.ends[j.task]
            empty = end == "no-change"
            job = Job(j.task, j.model, j.sample, speedup=None if empty else 1.6, verdict="no-change" if empty else "pass")
            report = write_job(self.out_dir, self.run_id, job, key=j.key)
            path = self.out_dir / "results" / self.run_id / j.key / "report.json"
            patch = self.out_dir / "patches" / self.run_id / j.key / "model_patch.diff"
            if end == "error_max_turns":
                report = report.model_copy(update={"subtype": end, "is_error": True,
                                                   "result": "stopped after 3 turns without a passing submit"})
                report.write(path)
            if end == "no-change":
                patch.write_text("")
            self.ran.append(j.key)
            on_finish(j.record("done", report=path.relative_to(self.out_dir).as_posix(),
                               patch=patch.relative_to(self.out_dir).as_posix(), wall_s=30.0,
                               **figures_from_report(report)))


def scripted_cli_batch(root: Path, tasks: Path, monkeypatch, run_id: str, ends: dict[str, str]) -> int:
    import agent.batch.driver as driver

    monkeypatch.setattr(driver, "make_executor",
                        lambda cfg, launch: ScriptedExecutor(Path(launch.out_dir), launch.run_id, ends))
    return main(["batch", str(tasks), "--models", "rules", "--run-id", run_id, "--out", str(root / "out"), "--quiet"])


def test_an_errored_job_fails_the_batch_and_an_empty_one_is_no_change(project, monkeypatch, capsys):
    """One job ends error_max_turns (its last passing patch grades pass), one submits nothing: the batch exits 1,
    and neither is counted correct, in the printed tables, summary.md, summary.json and `review`."""
    root, tasks, _ = project
    monkeypatch.setenv("COLUMNS", "250")
    code = scripted_cli_batch(root, tasks, monkeypatch, "mixed", {"t1": "error_max_turns", "t2": "no-change"})
    printed = capsys.readouterr().out
    assert code == 1
    run_dir = root / "out/results/mixed"
    s = json.loads((run_dir / "summary.json").read_text())
    (m,) = s["models"]
    assert (m["jobs"], m["correct"], m["faster"], m["errored"], m["no_change"], m["skipped"]) == (2, 0, 0, 1, 1, 1)
    assert m["fraction_of_reference"] is None and m["opt_solved"] == 0 and s["failed"] == 1
    md = (run_dir / "summary.md").read_text()
    assert "| rules | 2 | 0 (0%) | 0 (0%) | 1 | 1 (1 error_max_turns) |" in md
    assert "| t1 | rules | 1 | 1 error_max_turns | 0 | 0 |" in md and "| t2 | rules | 1 | 1 no change | 0 | 0 |" in md
    assert "1 (1 error_max_turns)" in printed
    assert main(["review", str(run_dir)]) == 0
    review = capsys.readouterr().out
    t1 = next(line for line in review.splitlines() if "t1/rules/s0" in line)
    t2 = next(line for line in review.splitlines() if "t2/rules/s0" in line)
    assert "error_max_turns" in t1 and "pass" not in t1 and "no change" in t2


def test_a_clean_batch_exits_0(project, monkeypatch):
    root, tasks, _ = project
    assert scripted_cli_batch(root, tasks, monkeypatch, "clean", {"t1": "pass", "t2": "pass"}) == 0
    s = json.loads((root / "out/results/clean/summary.json").read_text())
    assert s["failed"] == 0 and s["models"][0]["correct"] == 2


def test_wall_time_is_real_time_not_the_sum_of_jobs():
    # two jobs of 60 s each, run side by side, ending 10 s apart: 70 s of wall time, 120 s of job time
    recs = [rec("a", wall_s=60.0, finished_at=1000.0), rec("b", wall_s=60.0, finished_at=1010.0),
            rec("c", status="skipped", verdict=None, wall_s=0.0, finished_at=5000.0)]
    s = summarize(recs, run_id="r")
    (m,) = s.models
    assert s.wall_s == m.wall_s == pytest.approx(70.0) and s.job_s == m.job_s == pytest.approx(120.0)
    md = summary_markdown(s)
    assert "wall 70.0s from the first job's start" in md and "job time 2.0m" in md
    assert "| 70.0s | 2.0m |" in md  # wall, then job time


def test_of_ref_gain_only_from_significant_results():
    recs = [rec("a", speedup=1.5, ref=2.0, has_ref=True, perf_verdict="faster", fraction_of_reference=0.5),
            # correct but not significantly faster: the checker gave no fraction, and none is made up here
            rec("b", speedup=1.02, ref=2.0, has_ref=True, perf_verdict="inconclusive", fraction_of_reference=None),
            # a fraction on a job that is not significantly faster is not counted either
            rec("c", speedup=1.04, ref=2.0, has_ref=True, perf_verdict="no significant change",
                fraction_of_reference=0.04),
            # an errored run's fraction does not count
            rec("d", speedup=1.9, ref=2.0, has_ref=True, perf_verdict="faster", fraction_of_reference=0.9,
                subtype="error_max_turns")]
    (m,) = summarize(recs, run_id="r").models
    assert m.fraction_of_reference == pytest.approx(0.5) and m.fraction_jobs == 1
    assert m.correct == 3 and m.faster == 1 and m.errored == 1 and m.opt_solved == 0


def test_the_live_line_never_ticks_an_errored_job():
    """A job that hit max turns shows its subtype and a cross as it lands, even when its patch graded pass."""
    from io import StringIO

    from rich.console import Console

    from agent.batch.progress import BatchProgress

    out = StringIO()
    progress = BatchProgress(Console(file=out, width=200), total=2, workers=1, earlier=[], quiet=True)
    hit = JobRecord(key="t/rules/s0", task="t", model="rules", sample=0, status="done", subtype="error_max_turns",
                    verdict="pass")
    ok = hit.model_copy(update={"key": "t/rules/s1", "subtype": "success"})
    assert "✗" in progress._line(hit) and "error_max_turns" in progress._line(hit) and "✓" not in progress._line(hit)
    assert "✓" in progress._line(ok) and "pass" in progress._line(ok)


def test_the_live_table_shows_each_running_job_and_its_latest_step(tmp_path):
    """Each running job is a row (task, model, sample, elapsed, step), the step read from the job's
    batch.log as the job writes it, and the elapsed time moves between events."""
    from io import StringIO

    from rich.console import Console

    from agent.batch.executors import JobSpec
    from agent.batch.progress import BatchProgress
    from agent.run.progress import EventLog

    logs = {"t/rules/s0": tmp_path / "a.log", "u/anthropic-x/s1": tmp_path / "b.log"}
    progress = BatchProgress(Console(file=StringIO(), width=200), total=2, workers=2, earlier=[], quiet=True,
                             log_of=logs.__getitem__)
    for key in logs:
        task, model, sample = key.split("/")
        progress.started(JobSpec(key=key, task=task, task_file="x.toml", model=model, model_arg=model,
                                 sample=int(sample[1:])), None)
    with open(logs["t/rules/s0"], "w") as f:
        log = EventLog(lambda line: print(line, file=f, flush=True))
        log("turn", {"turn": 4})
        log("checked", {"full": False, "n": 2, "line": "fail · tests fail: draft_topk2[ps1]"})
    console = Console(file=StringIO(), width=200, record=True)
    progress.running["t/rules/s0"] -= 125
    console.print(progress.jobs_table())
    text = console.export_text()
    row = next(line for line in text.splitlines() if line.startswith("t "))
    assert "rules" in row and "s0" in row and "2m05s" in row
    assert "quick check #2: fail · tests fail: draft_topk2[ps1]" in row
    assert "starting" in next(line for line in text.splitlines() if line.startswith("u "))
