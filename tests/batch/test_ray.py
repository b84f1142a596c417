"""`--executor ray` on a real two-node Ray cluster (tests/raycluster.py), inside namespaces of its own, so
nothing leaves loopback: jobs spread over both nodes with no filesystem shared (the worker node cannot
see the batch's files or the checkout's harness), GPU leases, a node lost mid-batch and resumed, a hung
and a wedged job cancelled at --job-timeout, and Ctrl-C / SIGTERM leaving nothing running anywhere.

One cluster serves the module (it takes ~8 s to start). The tests are `quiet` as well as slow: their
batches measure (t1's perf A/B) and time leases, so CI runs them after the rest, one at a time, which
also keeps them on one cluster.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.results.layout import job_running
from raycluster import ADDRESS, Cluster, children, unshare_works
from batchproject import REF, build_project, call, ledger_lines, trajectory

_NO_RAY = importlib.util.find_spec("ray") is None  # not imported here: the batches import it, in their own process
_NO_NAMESPACES = unshare_works()
pytestmark = [pytest.mark.slow, pytest.mark.quiet,
              pytest.mark.skipif(_NO_RAY, reason="the ray extra is not installed (pip install -e '.[ray]')"),
              pytest.mark.skipif(_NO_NAMESPACES is not None, reason=f"no test Ray cluster here: {_NO_NAMESPACES}")]


@dataclass
class Lab:
    cluster: Cluster
    root: Path  # the batch's side: tasks, repos, replays, out/ (hidden from the worker node)
    tasks: Path
    models: dict[str, str]

    def batch(self, run_id: str, *args: str, popen: bool = False, timeout: float = 180):
        """`perfagent batch ... --executor ray` inside the cluster's namespace, as a user would run it."""
        argv = [sys.executable, "-m", "agent", "batch", *args, "--run-id", run_id, "--out", str(self.out),
                "--executor", "ray", "--quiet"]
        if "--resume" not in args:
            argv.append("--no-baseline")
        kw = dict(cwd=self.root, env=self.cluster.env(RAY_ADDRESS=ADDRESS), text=True)
        if popen:
            # Ctrl-C as at a terminal: a batch started with SIGINT ignored (a background job, as CI runs us) keeps
            # ignoring it, as nohup means
            return self.cluster.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **kw)
        return self.cluster.run(argv, capture_output=True, timeout=timeout, **kw)

    @property
    def out(self) -> Path:
        return self.root / "out"

    def run_dir(self, run_id: str) -> Path:
        return self.out / "results" / run_id

    def started_on(self, run_id: str, node: str) -> list[Path]:
        """The driver-side logs of the run's jobs that have started on `node` (the batch writes where first)."""
        return [log for log in self.run_dir(run_id).rglob("batch.log")
                if log.read_text(errors="replace").startswith(f"ray: on node {node}")]

    def left(self, within: float = 10) -> list[str]:
        """What of the batch's jobs still runs on any node (job processes, their `sleep 60`, Ray workers on a
        job), once it has had `within` s to go."""
        deadline = time.monotonic() + within
        while True:
            left = self.cluster.job_procs() + self.cluster.procs("sleep 60")
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.25)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray")
    root, tasks, models = build_project(root)
    models["hang"] = trajectory(root / "hang.jsonl", [call("run", command="sleep 60")])
    # the GPU task first: its two jobs are sent at once, and only their lease can keep them apart
    (root / "gpu-first.toml").write_text('tasks = ["tasks/tgpu.toml", "tasks/t1.toml", "tasks/t2.toml"]\n')
    with Cluster(hide=[root], head_cpus=1, cpus=2, gpus=1) as cluster:
        yield Lab(cluster, root, tasks, models)


@pytest.fixture
def cluster(lab):
    """The module's cluster with both nodes up (a test that lost the worker node leaves it to be started)."""
    if lab.cluster.worker is None:
        lab.cluster.start_worker()
    return lab


def first_line(log: Path) -> str:
    lines = [ln for ln in log.read_text().splitlines() if ln.startswith("starting: ")]
    assert lines, log.read_text()[:500]
    return lines[0]


def test_jobs_run_on_both_nodes_from_shipped_files_and_a_gpu_job_leases_a_whole_gpu(cluster):
    """Six jobs, four at a time, on a head (1 CPU) and a worker (2 CPUs, 1 GPU): both nodes run jobs, each
    from the task, repo, reference and trajectory Ray shipped to it and the harness of py_modules (the
    worker node sees neither the batch's folder nor the checkout's agent/); results come back through the
    object store; the two GPU jobs, sent first and together, get GPU 0 of the worker one after the other;
    review says where each job ran."""
    lab, c = cluster, cluster.cluster
    good, gpu = lab.models["good"], lab.models["gpu"]
    proc = lab.batch("nodes", str(lab.root / "gpu-first.toml"), "--models", f"{good},{gpu}", "--samples", "1",
                     "--workers", "4")
    assert proc.returncode == 0, proc.stderr
    run = lab.run_dir("nodes")
    recs = ledger_lines(run)
    assert len(recs) == 6 and all(r["status"] == "done" for r in recs), recs
    head, w1 = c.node_ids["head"], c.node_ids["w1"]
    assert {r["node"] for r in recs} == {head, w1}  # four jobs at once fit on neither node alone

    for r in recs:  # every file came back to the batch's out dir; each job ran from the copies shipped to it
        assert (lab.out / r["report"]).is_file() and (lab.out / r["patch"]).is_file()
        line = first_line(run / r["key"] / "batch.log")
        task_file, harness = line.removeprefix("starting: task ").split(", harness ")
        node_tmp = c.dir / ("wtmp" if r["node"] == w1 else "htmp")
        assert Path(task_file).is_relative_to(node_tmp / "perfagent-ray-kits"), line
        assert "py_modules_files" in harness and not Path(harness).is_relative_to(Path(__file__).parents[2]), line
        traj = (run / r["key"] / "trajectory.jsonl").read_text()
        assert f'"replayed_from": "{node_tmp}/perfagent-job-' in traj  # the trajectory shipped with the job

    leased = sorted((r for r in recs if r["task"] == "tgpu"), key=lambda r: r["finished_at"])
    assert [(r["node"], r["device"]) for r in leased] == [(w1, "0"), (w1, "0")]
    first, second = leased
    assert first["finished_at"] <= second["finished_at"] - second["wall_s"], "two jobs measured on one GPU at once"
    cpu_gpu_model = next(r for r in recs if r["task"] == "t2" and r["model"] == gpu)
    assert "DEVICE=\\n" in (run / cpu_gpu_model["key"] / "trajectory.jsonl").read_text()  # a CPU task sees no GPU

    s = json.loads((run / "summary.json").read_text())
    good_row = next(m for m in s["models"] if m["model"] == good)
    assert good_row["correct"] == 3 and 2.2 < good_row["geomean_speedup"] < 2.8
    review = subprocess.run([sys.executable, "-m", "agent", "review", str(run)], capture_output=True, text=True,
                            env={**os.environ, "COLUMNS": "250"})
    rows = [ln for ln in review.stdout.splitlines() if "/s0" in ln]
    assert len(rows) == 6 and all(head[:8] in ln or w1[:8] in ln for ln in rows), review.stdout


def test_a_prediction_job_grades_the_predictions_shipped_to_it(cluster):
    """A `prediction:` job reads its run's predictions.jsonl from its own out dir: a temporary folder on the
    worker, where the batch ships the file."""
    lab, c = cluster, cluster.cluster
    code = f"""
from pathlib import Path
from agent.batch.driver import BatchConfig, load_tasks, run_batch
from agent.interchange.predictions import Prediction
cfg = BatchConfig(run_id="preds", out_dir=Path({str(lab.out)!r}), workers=1, executor="ray", quiet=True,
                  predictions=[Prediction(instance_id="t2", model_name_or_path="elsewhere", model_patch={REF!r})])
run_batch(load_tasks({str(lab.tasks / "t2.toml")!r}), [], 1, cfg)
"""
    proc = c.run([sys.executable, "-c", code], cwd=lab.root, env=c.env(RAY_ADDRESS=ADDRESS), capture_output=True,
                 text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (rec,) = ledger_lines(lab.run_dir("preds"))
    assert (rec["status"], rec["verdict"], rec["model"]) == ("done", "pass", "prediction:elsewhere"), rec
    assert rec["node"] in c.node_ids.values()
    assert "perfagent-ray-kits" in first_line(lab.run_dir("preds") / rec["key"] / "batch.log")


def test_a_lost_node_fails_its_jobs_the_others_finish_and_resume_runs_them_again(cluster):
    """The worker node dies whole mid-batch: its jobs end failed, "node lost", with nothing of theirs written;
    the head's job finishes; `--resume` (on a cluster whole again) runs the lost jobs and only those."""
    lab, c = cluster, cluster.cluster
    w1 = c.node_ids["w1"]
    proc = lab.batch("lost", str(lab.tasks / "t2.toml"), "--models", lab.models["slow"], "--samples", "3",
                     "--workers", "3", popen=True)
    deadline = time.monotonic() + 60
    while len(lab.started_on("lost", w1)) < 2:  # the worker's two CPUs busy (the slow replay sleeps 4 s first)
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    c.kill_worker()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err  # failed jobs: exit 1
    run = lab.run_dir("lost")
    recs = {r["key"]: r for r in ledger_lines(run)}
    lost = [r for r in recs.values() if r["node"] == w1]
    assert len(lost) == 2 and len(recs) == 3, recs
    for r in lost:
        assert r["status"] == "failed" and r["reason"].startswith(f"node lost: node {w1[:8]}"), r
        assert not (run / r["key"] / "report.json").exists()
        assert not list((lab.out / "patches" / "lost" / r["key"]).glob("*"))
    (kept,) = [r for r in recs.values() if r["node"] != w1]
    assert kept["status"] == "done"
    uuid = json.loads((lab.out / kept["report"]).read_text())["uuid"]

    c.start_worker()
    again = lab.batch("lost", "--resume")
    assert again.returncode == 0, again.stderr
    latest = {r["key"]: r for r in ledger_lines(run)}
    assert len(ledger_lines(run)) == 5 and all(r["status"] == "done" for r in latest.values())
    assert json.loads((lab.out / kept["report"]).read_text())["uuid"] == uuid  # a done job is never run again


def test_a_hung_job_ends_at_job_timeout_and_a_wedged_one_is_cancelled(cluster):
    """Two jobs whose command sleeps 60 s, --job-timeout 5: one is stopped by its worker at 5 s; the other's
    Ray worker is frozen (SIGSTOP: no heartbeat, no timeout of its own), so the batch force-cancels it. Nothing
    of either is left running on any node."""
    lab, c = cluster, cluster.cluster
    proc = lab.batch("hang", str(lab.tasks / "t2.toml"), "--models", lab.models["hang"], "--samples", "2",
                     "--workers", "2", "--job-timeout", "5", popen=True)
    deadline = time.monotonic() + 60
    while not any(log.parent.name == "s1" for n in c.node_ids.values() for log in lab.started_on("hang", n)):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    s1 = next(lab.run_dir("hang").rglob("s1"))
    assert job_running(s1)  # `review` shows it running: the batch holds its folder while it runs elsewhere
    while "tool run" not in (s1 / "batch.log").read_text():  # its steps arrive as they happen (the live table's)
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    (wedge,) = [pid for pid, _, args in c.ps() if args.startswith("ray::perfagent ") and args.endswith("/s1")]
    c.run(["kill", "-STOP", str(wedge)], check=True)  # the Ray worker running job s1, once it has started
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    reasons = {r["key"].rsplit("/", 1)[1]: r["reason"] for r in ledger_lines(lab.run_dir("hang"))}
    assert reasons["s0"] == "no report: timed out after 5s", reasons
    assert reasons["s1"].startswith("timed out after 5s: its node") and "the batch cancelled it" in reasons["s1"]
    assert lab.left() == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_batch_cancels_every_job_on_every_node_in_one_line(cluster, sig):
    """Ctrl-C (or SIGTERM) while jobs run on both nodes: the batch prints one line, no Ray stack dump, exits
    128 + the signal, and no job process or command of it runs anywhere after."""
    lab, c = cluster, cluster.cluster
    run_id = f"int-{sig.name.lower()}"
    proc = lab.batch(run_id, str(lab.tasks / "t2.toml"), "--models", lab.models["hang"], "--samples", "2",
                     "--workers", "2", popen=True)
    deadline = time.monotonic() + 60
    while len(c.procs("sleep 60", exact=True)) < 2:  # both jobs in their command
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    assert {n for n in c.node_ids.values() if lab.started_on(run_id, n)} == set(c.node_ids.values())
    os.kill(children(proc.pid)[0], sig)  # the batch itself, not nsenter around it
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig
    assert err.strip().splitlines()[-1] == "interrupted", err
    assert "***" not in err and "Traceback" not in err and "received at" not in err, err
    assert lab.left() == []
