"""One batch job on a Ray worker: everything it needs arrives through Ray, everything it leaves goes back.

A Ray task of the batch (agent/batch/ray_executor.py) runs `remote_job`, a generator: Ray streams
what it yields to the batch as it is yielded. It unpacks the task (agent/batch/kit.py) and the
job's input files into a private folder, says where it runs ("start"), runs the job there as
`perfagent run --quiet` runs it (a process of its own, `run_job`), and yields the job log's new
lines every `BEAT_S` ("log": the batch's heartbeat, and the live step its progress shows). At the
end it yields the record and the job's files ("done"); nothing is left on the worker but the
unpacked task, cached for the node's next job of it. The job process is forked from a fork server the
Ray worker keeps warm for its next jobs, as the local executor's. The worker needs Python with perfagent's
dependencies and Ray; the harness itself arrives with the batch (runtime_env py_modules).
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

import agent
from agent.batch.executors import JobSpec, LaunchConfig, run_job
from agent.batch.forkserver import ForkServer
from agent.batch.kit import TaskKit, unpack_task
from agent.results.layout import PREDICTIONS, RUNNING, job_paths, run_folder
from agent.results.record import JobRecord

BEAT_S = 1.0  # how often a running job tells the batch it is alive (with its log's new lines)
KITS = "perfagent-ray-kits"  # under the node's temp folder: unpacked tasks, by content digest


@dataclass(frozen=True)
class JobInputs:
    """The files a job reads besides its task, as bytes: a `replay:` model's trajectory, the run's
    predictions (a `prediction:` job grades one of them) and a `--prices` table."""

    replay: bytes | None = None
    predictions: bytes | None = None
    prices: bytes | None = None


def remote_job(job: JobSpec, cfg: LaunchConfig, kit: TaskKit, inputs: JobInputs,
               gpu: bool) -> Iterator[tuple[Any, ...]]:
    """("start", where) once, ("log", bytes) every BEAT_S, then ("done", record, files): the job's
    files relative to the batch's out dir."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    root = Path(tempfile.mkdtemp(prefix="perfagent-job-"))
    try:
        try:
            local_job, local_cfg = _place(job, cfg, kit, inputs, root)
        except Exception as e:  # noqa: BLE001 — a job that cannot be set up fails alone, with the reason
            yield "done", job.record("failed", reason=f"could not set the job up on node {node[:8]}: "
                                     f"{type(e).__name__}: {e}", node=node), {}
            return
        yield "start", {"node": node, "host": socket.gethostname(), "gpus": [str(g) for g in ray.get_gpu_ids()],
                        "task_file": local_job.task_file, "harness": str(Path(agent.__file__).parent)}
        # A CPU task's job sees no GPU: a GPU is measured only by the one job that holds its lease
        env = {} if gpu else {"CUDA_VISIBLE_DEVICES": ""}
        done: dict[str, JobRecord] = {}

        forks = _warm_forks()

        def run() -> None:
            try:
                done["rec"] = run_job(local_job, local_cfg, env, forks=forks)
            except Exception as e:  # noqa: BLE001 — a harness bug fails one job, not the batch
                done["rec"] = job.record("failed", reason=f"batch could not run the job: {type(e).__name__}: {e}")

        runner = threading.Thread(target=run, name="job", daemon=True)
        runner.start()
        log, offset = job_paths(local_cfg.out_dir, cfg.run_id, job.key)[0] / "batch.log", 0
        while runner.is_alive():
            runner.join(BEAT_S)
            chunk, offset = _grown(log, offset)
            yield "log", chunk
        ended = time.time()  # the job's end as its node saw it: the summary's wall span and GPU lease times
        rec = done["rec"].model_copy(update={"node": node, "device": done["rec"].device or None, "finished_at": ended})
        yield "done", rec, _files(Path(local_cfg.out_dir), cfg.run_id, job.key)
    finally:
        shutil.rmtree(root, ignore_errors=True)


_FORKS: list[ForkServer] = []  # this Ray worker process's fork server, kept warm for its next jobs


def _warm_forks() -> ForkServer | None:
    """A warm fork server of this worker process (the local executor's: ~2 s of imports less per job after
    the first): it lives as long as the worker, which Ray reuses for the batch's jobs, and dies with it,
    killing what its jobs left (a cancelled job's commands too). Only from the main thread, where Ray runs
    tasks: the server's death signal fires when the thread that started it ends."""
    if threading.current_thread() is not threading.main_thread():
        return None
    if not _FORKS or _FORKS[0].proc.poll() is not None:
        _FORKS[:] = [ForkServer()]
    return _FORKS[0]


def _place(job: JobSpec, cfg: LaunchConfig, kit: TaskKit, inputs: JobInputs,
           root: Path) -> tuple[JobSpec, LaunchConfig]:
    """The job and its launch as this worker runs them: the unpacked task, the shipped inputs, a private
    out dir and working folder."""
    task_file = unpack_task(kit, Path(tempfile.gettempdir()) / KITS)
    out, mine = root / "out", root / "inputs"
    mine.mkdir()
    model_arg, options = job.model_arg, cfg.options
    if inputs.replay is not None:
        replay = mine / Path(model_arg.partition(":")[2]).name
        replay.write_bytes(inputs.replay)
        model_arg = f"replay:{replay}"
    if inputs.predictions is not None:
        predictions = run_folder(out, cfg.run_id) / PREDICTIONS
        predictions.parent.mkdir(parents=True)
        predictions.write_bytes(inputs.predictions)
    if inputs.prices is not None:
        (mine / "prices.json").write_bytes(inputs.prices)
        options = options.model_copy(update={"prices": mine / "prices.json"})
    return (replace(job, task_file=str(task_file), model_arg=model_arg),
            replace(cfg, out_dir=str(out), cwd=str(root), options=options))


def _grown(path: Path, offset: int) -> tuple[bytes, int]:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(1 << 20)
    except OSError:
        return b"", offset
    return data, offset + len(data)


def _files(out: Path, run_id: str, key: str) -> dict[str, bytes]:
    """The job's own files (its results and patches folders), relative to the out dir."""
    files = {}
    for folder in job_paths(out, run_id, key):
        for p in sorted(folder.rglob("*")) if folder.is_dir() else []:
            if p.is_file() and not p.is_symlink() and p.name != RUNNING:  # the lock of a live run: not here
                files[p.relative_to(out).as_posix()] = p.read_bytes()
    return files
