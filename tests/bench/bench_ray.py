"""Jobs per minute on the local executor and on a two-node Ray cluster, and what Ray costs per job:
`python tests/bench/bench_ray.py [--samples 4] [--workers 2]` (root, or where `unshare` may make namespaces).

The same small batch both ways: the tiny replay tasks of tests/batch/test_batch.py (t1, with a perf A/B,
and t2, tests only) x the `good` trajectory x `--samples`, built in a temporary folder, `--workers` jobs at
a time. Ray's cluster is tests/raycluster.py's (a head and a worker node, one CPU each by default so both
executors run the same number of jobs at once, in namespaces that keep it off the network). Per Ray job,
from the batch's own clock: `start` (sent to started on a node: scheduling, a worker process, the harness
and the task unpacked there), `ship` (packing the task and putting it in the object store; once per
task), `collect` (the job process's end to its files written here) and `job` (the job process itself, a
fresh interpreter, where the local executor forks a warm one). Prints JSON lines {"metric", "value", "unit"}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS), str(TESTS / "batch")]


def emit(metric: str, value, unit: str | None) -> None:
    print(json.dumps({"metric": metric, "value": value, "unit": unit}), flush=True)


def local(root: Path, tasks: Path, model: str, samples: int, workers: int) -> None:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "agent", "batch", str(tasks), "--tasks", "t1,t2", "--models", model,
                           "--samples", str(samples), "--workers", str(workers), "--run-id", "local",
                           "--out", str(root / "out"), "--quiet", "--no-baseline"],
                          cwd=root, capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"local batch failed: {proc.stderr[-2000:]}")
    s = json.loads((root / "out/results/local/summary.json").read_text())
    jobs = [j for j in s["jobs"] if j["status"] == "done"]
    emit("local_jobs_per_min", s["jobs_per_minute"], "jobs/min")
    emit("local_batch_wall_s", round(wall, 1), "s")
    emit("local_job_s_mean", round(statistics.mean(j["wall_s"] for j in jobs), 2), "s")


def ray(root: Path, tasks: Path, model: str, samples: int, workers: int) -> None:
    from raycluster import ADDRESS, Cluster

    began = time.monotonic()
    with Cluster(hide=[root], head_cpus=1, cpus=1, gpus=0) as c:
        emit("ray_cluster_start_s", round(time.monotonic() - began, 1), "s")
        start = time.monotonic()
        proc = c.run([sys.executable, __file__, "--inner", str(root), str(tasks), model, str(samples), str(workers)],
                     cwd=root, env=c.env(RAY_ADDRESS=ADDRESS), capture_output=True, text=True)
        wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"ray batch failed: {proc.stderr[-3000:]}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    emit("ray_jobs_per_min", got["jobs_per_minute"], "jobs/min")
    emit("ray_batch_wall_s", round(wall, 1), "s")
    emit("ray_nodes_used", got["nodes"], "nodes")
    for part in ("start", "ship", "collect", "job"):
        emit(f"ray_{part}_s_mean", round(statistics.mean(got[part]), 3), "s")
    emit("ray_start_s_first", round(got["start"][0], 3), "s")  # a cold worker: process, runtime env, task unpacked
    emit("ray_overhead_per_job_s", round(statistics.mean(got["overhead"]), 3), "s")


def inner(root: Path, tasks: Path, model: str, samples: int, workers: int) -> None:
    """Inside the cluster's namespace: the batch through run_batch, with a clock on each job's steps."""
    from agent.batch.driver import BatchConfig, load_tasks, run_batch
    from agent.batch.executors import LaunchConfig
    from agent.batch.ray_executor import RayExecutor

    times: dict[str, dict[str, float]] = {}

    class Timed(RayExecutor):
        def _submit(self, remote, ship, job, flights, on_finish):
            t = time.monotonic()
            super()._submit(remote, ship, job, flights, on_finish)
            times[job.key] = {"sent": time.monotonic(), "ship": time.monotonic() - t}

        def _take(self, gen, flights, on_start, on_finish):
            key = flights[gen].job.key
            started = flights[gen].started
            super()._take(gen, flights, on_start, on_finish)
            if started is None and flights.get(gen) is not None and flights[gen].started is not None:
                times[key]["started"] = time.monotonic()
            if gen not in flights:
                times[key]["done"] = time.monotonic()

    cfg = BatchConfig(run_id="ray", out_dir=root / "out", workers=workers, executor="ray", quiet=True)
    launch = LaunchConfig(run_id="ray", out_dir=str(root / "out"), cwd=str(root))
    ts = load_tasks(tasks / "t1.toml") + load_tasks(tasks / "t2.toml")
    outcome = run_batch(ts, [model], samples, cfg, executor=Timed(launch, workers))
    recs = {r.key: r for r in outcome.summary.jobs if r.status == "done"}
    if len(recs) != len(times):
        sys.exit(f"{len(times) - len(recs)} job(s) did not end done")
    order = sorted(times, key=lambda k: times[k]["sent"])
    print(json.dumps({
        "jobs_per_minute": outcome.summary.jobs_per_minute,
        "nodes": len({r.node for r in recs.values()}),
        "start": [times[k]["started"] - times[k]["sent"] for k in order],
        "ship": [times[k]["ship"] for k in order],
        "job": [recs[k].wall_s for k in order],
        "collect": [times[k]["done"] - times[k]["started"] - recs[k].wall_s for k in order],
        "overhead": [times[k]["done"] - times[k]["sent"] - recs[k].wall_s for k in order]}))


def main() -> None:
    if sys.argv[1:2] == ["--inner"]:
        root, tasks, model, samples, workers = sys.argv[2:7]
        inner(Path(root), Path(tasks), model, int(samples), int(workers))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    from raycluster import unshare_works
    from batchproject import build_project

    why = unshare_works()
    if why:
        sys.exit(f"no Ray cluster here: {why}")
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        # perf locks and caches of its own: never waits behind another perfagent process's measurement
        os.environ.update(PERFAGENT_LOCK_DIR=str(Path(tmp) / "locks"), HOME=str(Path(tmp) / "home"))
        root, tasks, models = build_project(Path(tmp))
        emit("jobs", 2 * args.samples, "jobs")
        local(root, tasks, models["good"], args.samples, args.workers)
        ray(root, tasks, models["good"], args.samples, args.workers)


if __name__ == "__main__":
    main()
