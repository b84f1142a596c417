"""`perfagent batch`: job expansion, the ledger, the summary's statistics, and real batches of
tiny tasks driven by hand-written replay trajectories (local pool, kill -9 + resume; Ray: test_ray.py)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from agent.batch.driver import BatchConfig, BatchError, expand_jobs, load_tasks, model_arg, model_slug, run_batch
from agent.batch.executors import GpuPool, JobSpec, LaunchConfig, LocalExecutor, is_retryable, job_request
from agent.cli import build_parser, main
from agent.options import options_from_args
from agent.results.ledger import Ledger
from agent.results.record import JobRecord
from agent.results.report import Report, new_report
from batchproject import build_project, ledger_lines
from helpers import machine_share, rec

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
        with machine_share(exclusive=True):  # the batch measures its jobs: alone under pytest -n
            code = main(["batch", str(tasks), "--models", f"{models['good']},{models['bad']}", "--samples", "2",
                         "--workers", "2", "--run-id", "e2e", "--out", "out", "--quiet", "--no-baseline"])
        yield root, tasks, models, code

# -- pure parts ------------------------------------------------------------------------------------------------
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


def test_only_a_providers_api_error_is_a_failed_job():
    api_down = Report(subtype="error_during_execution", result="model error: overloaded", modelUsage={})
    assert is_retryable(api_down) == "model error: overloaded"
    # deterministic: retrying changes nothing
    replay_ran_out = api_down.model_copy(update={"modelUsage": {"replay": {}}})
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


def test_gpu_pool_spreads_jobs():
    pool = GpuPool(["0", "1"])
    got = [pool.acquire() for _ in range(4)]
    assert sorted(got) == ["0", "0", "1", "1"]
    pool.release("1")
    assert pool.acquire() == "1"


class StubExecutor:
    """Records which jobs it was given; finishes each as done, with a report.json under `out_dir` written
    (and sealed) as a job writes it, which a resume verifies before it takes the job as finished."""

    name = "stub"

    def __init__(self, gpus=0, out_dir: Path | None = None, run_id: str = "r"):
        self.gpus, self.ran, self.out_dir, self.run_id = gpus, [], out_dir, run_id

    def gpu_count(self):
        return self.gpus

    def run(self, jobs, on_start, on_finish):
        for j in jobs:
            on_start(j, None)
            self.ran.append(j.key)
            on_finish(j.record("done", verdict="pass", report=self.report(j.key)))

    def report(self, key: str) -> str | None:
        if self.out_dir is None:
            return None
        path = self.out_dir / "results" / self.run_id / key / "report.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        new_report(subtype="success").write(path)
        return path.relative_to(self.out_dir).as_posix()


def test_resume_runs_only_unfinished_jobs(project):
    root, tasks, models = project
    ts = load_tasks(tasks)
    cfg = BatchConfig(run_id="r", out_dir=root / "out", quiet=True)
    first = StubExecutor(out_dir=root / "out")
    run_batch(ts, ["m"], 1, cfg, executor=first)
    assert first.ran == ["t1/m/s0", "t2/m/s0"]
    run_dir = root / "out/results/r"
    with pytest.raises(BatchError, match="--resume"):
        run_batch(ts, ["m"], 1, cfg, executor=StubExecutor(out_dir=root / "out"))
    Ledger(run_dir).append(rec("t2", "m", status="failed", verdict=None, reason="api down"))
    cfg.resume = True
    again = StubExecutor(out_dir=root / "out")
    out = run_batch(ts, ["m"], 2, cfg, executor=again)  # one more sample each, and the failed job
    assert again.ran == ["t2/m/s0", "t1/m/s1", "t2/m/s1"]
    lines = ledger_lines(run_dir)
    assert [line["key"] for line in lines if line["status"] == "skipped"] == ["tgpu/m/s0", "tgpu/m/s1"]  # no repeats
    assert sum(line["status"] == "done" for line in lines) == 5 and out.summary.models[0].done == 4
    assert json.loads((run_dir / "batch.json").read_text())["samples"] == 2
    gpu = StubExecutor(gpus=1, out_dir=root / "out")
    run_batch(ts, ["m"], 2, cfg, executor=gpu)  # now a GPU: the skipped jobs run, nothing else
    assert gpu.ran == ["tgpu/m/s0", "tgpu/m/s1"]


def test_resume_runs_again_a_done_job_whose_report_does_not_verify(project):
    """A `done` line is a finished job only when its report.json carries this machine's seal: an edited
    report, one with no seal (made elsewhere, or before seals) or a done line with no report runs again."""
    root, tasks, models = project
    ts = [t for t in load_tasks(tasks) if not t.spec.requires_gpu]
    cfg = BatchConfig(run_id="r", out_dir=root / "out", quiet=True)
    run_batch(ts, ["m"], 2, cfg, executor=StubExecutor(out_dir=root / "out"))
    run_dir = root / "out/results/r"
    edited = run_dir / "t1/m/s0/report.json"
    edited.write_text(edited.read_text().replace('"subtype": "success"', '"subtype": "success" '))
    (run_dir / "t2/m/s0/report.json.mac").unlink(missing_ok=True)
    Ledger(run_dir).append(rec("t1", "m", sample=1, report=None))  # a done line naming no report
    cfg.resume = True
    said = io.StringIO()
    again = StubExecutor(out_dir=root / "out")
    run_batch(ts, ["m"], 2, cfg, executor=again, console=Console(file=said, width=300))
    assert sorted(again.ran) == ["t1/m/s0", "t1/m/s1", "t2/m/s0"]  # t2/m/s1 is sealed: left alone
    lines = sorted(said.getvalue().strip().splitlines())
    assert lines == [
        "t1/m/s0: its report.json has a MAC that does not verify (changed since this machine's perfagent wrote "
        "it): running the job again",
        "t1/m/s1: its report.json carries no MAC from this machine's perfagent (recorded elsewhere, or before "
        "evidence was sealed): running the job again",
        "t2/m/s0: its report.json carries no MAC from this machine's perfagent (recorded elsewhere, or before "
        "evidence was sealed): running the job again"], lines
    again = StubExecutor(out_dir=root / "out")
    run_batch(ts, ["m"], 2, cfg, executor=again)
    assert again.ran == []  # each re-run left a sealed report


def test_a_workers_sealed_files_are_sealed_again_with_this_machines_key(tmp_path):
    """A Ray worker on another machine seals with its own key; the batch seals what it sent back with its own,
    and nothing the worker did not seal."""
    from agent.batch.executors import write_files
    from agent.util.seal import is_sealed, mac_path, sign

    job = "results/r/t/m/s0"
    write_files(tmp_path, {f"{job}/report.json": b'{"type": "result"}\n',
                           f"{job}/report.json.mac": sign(bytes(32), b'{"type": "result"}\n').encode(),
                           f"{job}/trajectory.jsonl": b"{}\n"})
    assert is_sealed(tmp_path / job / "report.json")
    assert not mac_path(tmp_path / job / "trajectory.jsonl").exists()


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


def test_an_unreachable_ray_address_is_one_line(project, monkeypatch, capsys):
    """RAY_ADDRESS where nothing listens, or something that is not Ray: one line and exit 2 at once, not Ray's
    minutes of retries."""
    import socket
    import threading

    pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e '.[ray]')")
    root, tasks, models = project
    argv = ["batch", str(tasks / "t2.toml"), "--models", models["good"], "--executor", "ray", "--quiet"]
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    start = time.monotonic()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: RAY_ADDRESS=127.0.0.1:1: no Ray cluster answers there (Connection refused)", err

    web = socket.create_server(("127.0.0.1", 0))  # an HTTP/1 server, not Ray's gRPC

    def answer() -> None:
        conn, _ = web.accept()
        with conn:
            conn.recv(100)
            conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")

    threading.Thread(target=answer, daemon=True).start()
    address = f"127.0.0.1:{web.getsockname()[1]}"
    monkeypatch.setenv("RAY_ADDRESS", address)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: RAY_ADDRESS={address}: something answers there, but not a Ray cluster", err
    web.close()
    assert time.monotonic() - start < 20


# -- real batches ---------------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.quiet  # the batch measures its jobs
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
    # t1 measures 2.5x (t2 has no perf); its saving, a few ms a process, must also be seen by the harness's clock,
    # which two workers on a small machine may leave unresolved: "faster", or speed not established, never refuted
    assert good["faster"] <= 2 and 2.2 < good["geomean_speedup"] < 2.8, good
    perfs = [json.loads((root / "out" / line["report"]).read_text())["evaluation"]["perf"] for line in lines
             if line["status"] == "done" and line["key"].startswith("t1/") and "good" in line["key"]]
    assert len(perfs) == 2 and all(p["verdict"] == "faster" or not p["outside"]["refuted"] for p in perfs), perfs
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
            "--quiet", "--no-baseline"]
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


# -- failures are failures ------------------------------------------------------------------------------------------
class ScriptedExecutor(StubExecutor):
    """Finishes each job with a report written by the report writer (tests/helpers.write_job), then made to end
    as `ends[task]` says: "error_max_turns" (its last passing patch still grades pass), "no-change" (the agent
    submitted nothing: an empty patch), or "pass"."""

    def __init__(self, out_dir: Path, run_id: str, ends: dict[str, str]):
        super().__init__()
        self.out_dir, self.run_id, self.ends = out_dir, run_id, ends

    def run(self, jobs, on_start, on_finish):
        from agent.results.record import figures_from_report
        from helpers import Job, write_job

        for j in jobs:
            on_start(j, None)
            end = self.ends[j.task]
            empty = end == "no-change"
            job = Job(j.task, j.model, j.sample, speedup=None if empty else 1.6,
                      verdict="no-change" if empty else "pass")
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


def test_with_no_terminal_each_event_is_one_plain_line_as_it_happens(tmp_path):
    """Output to a file or CI: a job started, each check it landed, and its end, each a line as it happens,
    not nothing until the first job ends."""
    from io import StringIO

    from rich.console import Console

    from agent.batch.executors import JobSpec
    from agent.batch.progress import BatchProgress
    from agent.run.progress import EventLog

    out = StringIO()
    log = tmp_path / "batch.log"
    progress = BatchProgress(Console(file=out, width=200), total=1, workers=1, earlier=[], log_of=lambda key: log)
    with progress:
        progress.started(JobSpec(key="t/rules/s0", task="t", task_file="x.toml", model="rules", model_arg="rules",
                                 sample=0), "cpu")
        assert out.getvalue() == "started t/rules/s0 on cpu\n"
        with open(log, "w") as f:
            events = EventLog(lambda line: print(line, file=f, flush=True))
            events("turn", {"turn": 4})
            events("checks", {"full": False, "n": 1, "diff": "1 file"})
            events("checked", {"full": False, "n": 1, "line": "fail · tests fail: test_fill"})
        deadline = time.monotonic() + 10
        while "quick check #1: fail" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.1)  # told by the watcher, before the job ends
        assert out.getvalue().splitlines()[1] == "  t/rules/s0: quick check #1: fail · tests fail: test_fill"
        progress.finished(JobRecord(key="t/rules/s0", task="t", model="rules", sample=0, status="done",
                                    subtype="success", verdict="pass"))
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and "t/rules/s0" in lines[2] and "pass" in lines[2], lines
    assert lines[3].startswith("done 1 · running 0 · failed 0"), lines


def test_with_no_terminal_a_line_is_never_wrapped_and_a_long_step_says_so_every_10_s(tmp_path):
    """A pipe at rich's default 80 columns: a long job key or check line stays one line, and a job whose base
    check runs for a minute says "still ..., 10 s", "still ..., 20 s" instead of going silent after `started`."""
    from io import StringIO

    from agent.batch.progress import BatchProgress
    from agent.run.progress import EventLog

    out = StringIO()
    log = tmp_path / "batch.log"
    key = "cuda-graph-buffers-with-long-lines/claude-code-claude-sonnet-4-5-20250929/s0"
    progress = BatchProgress(Console(file=out, width=80), total=1, workers=1, earlier=[], log_of=lambda k: log)
    with progress:
        progress.started(JobSpec(key=key, task="cuda-graph-buffers-with-long-lines", task_file="x.toml",
                                 model="claude-code:x", model_arg="x", sample=0), "cpu")
        assert out.getvalue() == f"started {key} on cpu\n"  # one line, though wider than 80
        with open(log, "w") as f:
            EventLog(lambda line: print(line, file=f, flush=True))(
                "log", {"message": "checking the task on its unchanged base: its tests and bench, once"})
        now = time.monotonic()
        progress.tell_checks(now + 9)  # read the step; not yet ten seconds
        progress.tell_checks(now + 11)
        progress.tell_checks(now + 15)
        progress.tell_checks(now + 21)
        progress.finished(JobRecord(key=key, task="cuda-graph-buffers-with-long-lines", model="claude-code:x",
                                    sample=0, status="done", subtype="success", verdict="pass"))
    lines = out.getvalue().splitlines()
    step = "checking the task on its unchanged base: its tests and bench, once"
    assert lines[:3] == [f"started {key} on cpu", f"  {key}: still {step}, 10 s", f"  {key}: still {step}, 20 s"]
    assert len(lines[1]) > 80 and len(lines) == 5 and key in lines[3], lines
