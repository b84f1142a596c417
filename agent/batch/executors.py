"""Where batch jobs run: a local pool of job processes here, or Ray tasks on a cluster (ray_executor.py).

Every job is one RunRequest (task file, model, the batch's RunOptions, run id, job key, out
dir), run as `perfagent run --quiet` runs it (agent/run/entry.py) in a process of its own, which
dies with the batch that started it. It is forked from a warm fork server that has already
imported the harness (about 3 s less per job): here one per batch, under Ray one per Ray worker
process (ray_job.py); without one it is a fresh `python -m agent.batch.job <parent-pid> <request JSON>`.
A process per job keeps one job's crash, memory or stray threads away from the others, and the
runner writes every file.

Timings stay clean without serialising jobs: the model waits of many jobs overlap freely,
while the checker takes a per-device lock around each perf measurement (agent/checks/lock.py).
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from agent.batch.forkserver import ForkServer
from agent.env.gpu import nvidia_gpus
from agent.models.base import OFFLINE_MODELS
from agent.options import RunOptions
from agent.results.layout import PATCHES, REPORT, RESULTS, job_paths
from agent.results.load import commands_seconds, report_or_none
from agent.results.record import JobRecord, figures_from_report
from agent.results.report import Report
from agent.run.entry import RunRequest
from agent.util.files import atomic_write
from agent.util.seal import MAC_SUFFIX, load_key, mac_path, sign
from agent.errors import PerfagentError

OnStart = Callable[["JobSpec", str | None], None]
OnFinish = Callable[[JobRecord], None]
# Environment the provider SDKs read; shipped to Ray workers, which may not share our environment.
PROVIDER_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "PERFAGENT_DEBUG")


class ExecutorError(PerfagentError):
    """The executor cannot run at all (Ray missing or unreachable): one line for the user."""


@dataclass(frozen=True)
class JobSpec:
    """One (task, model, sample) job, with everything a child process needs; picklable for Ray."""

    key: str  # "<task>/<model-slug>/s<k>": the job folder
    task: str
    task_file: str  # absolute
    model: str  # as the user wrote it
    model_arg: str  # as the run gets it (a replay path made absolute)
    sample: int
    requires_gpu: bool = False
    has_reference: bool = False
    timeout_s: float = 5400.0  # hard limit for the whole job process
    skip_reason: str | None = None  # planned only to be recorded as skipped, with this reason

    def record(self, status: str, **kw: Any) -> JobRecord:
        return JobRecord(key=self.key, task=self.task, model=self.model, sample=self.sample, status=status,
                         has_reference=self.has_reference, **kw)


@dataclass(frozen=True)
class LaunchConfig:
    run_id: str
    out_dir: str  # absolute
    cwd: str  # the job process's working folder
    options: RunOptions = RunOptions()  # every job's run options (--max-turns, --prices, ...)


# -- one job ------------------------------------------------------------------------------------
def clear_job(out_dir: Path | str, run_id: str, key: str) -> None:
    """Remove what an interrupted attempt left, so a re-run starts clean and nothing stale is read.

    Only ever below `out_dir`'s results/ and patches/: a folder that resolves anywhere else (a
    symlink, a `..` in the key) is left alone.
    """
    out = Path(out_dir).resolve()
    for folder, top in zip(job_paths(out, run_id, key), (RESULTS, PATCHES)):
        real = folder.resolve()
        if real != out / top and real.is_relative_to(out / top):
            shutil.rmtree(real, ignore_errors=True)


def job_request(job: JobSpec, cfg: LaunchConfig) -> RunRequest:
    """What the job process runs."""
    return RunRequest(task_file=job.task_file, model=job.model_arg, options=cfg.options, run_id=cfg.run_id,
                      job=job.key, out_dir=cfg.out_dir)


_LIVE: set = set()  # job processes running now, so an interrupted batch can stop them at once
_LIVE_LOCK = threading.Lock()


def stop_all_jobs() -> None:
    """SIGKILL every job process this process started and has not reaped yet."""
    with _LIVE_LOCK:
        children = list(_LIVE)
    for child in children:
        child.signal_kill()


def run_job(job: JobSpec, cfg: LaunchConfig, env: dict[str, str] | None = None, *,
            forks: ForkServer | None = None) -> JobRecord:
    """Run one job as a child process and classify what it left; never raises for the job's failures.

    done: a report was written (whatever the agent achieved: the report says).
    failed: no report (crash, hard timeout, bad spec), or the model's API failed mid-run;
    a resume retries these.
    forks: start the child from this warm fork server instead of a fresh interpreter (saves
    the ~3 s of imports each job would otherwise pay).
    """
    res_dir, patch_dir = job_paths(cfg.out_dir, cfg.run_id, job.key)
    res_dir.mkdir(parents=True, exist_ok=True)
    log_path = res_dir / "batch.log"
    child_env = {**os.environ, **(env or {})}
    start = time.monotonic()
    request = job_request(job, cfg).model_dump_json()
    child = (forks.start if forks else _Spawned)(request, cfg.cwd, child_env, log_path)
    with _LIVE_LOCK:
        _LIVE.add(child)
    try:
        code = child.wait(job.timeout_s)
    finally:
        timed_out = child.exit_code is None
        child.kill()
        with _LIVE_LOCK:
            _LIVE.discard(child)
    wall = time.monotonic() - start
    report_file = res_dir / REPORT
    written = report_or_none(report_file)  # a timed-out job's report is not trusted, but its gradings took time
    report = None if timed_out else written
    common = dict(exit_code=code, wall_s=round(wall, 3), device=child_env.get("CUDA_VISIBLE_DEVICES"),
                  commands_s=round(commands_seconds(res_dir, written), 3))
    out = Path(cfg.out_dir)
    if report is None:
        why = f"timed out after {job.timeout_s:g}s" if timed_out else f"exit code {code}: {_last_line(log_path)}"
        return job.record("failed", reason=f"no report: {why}", **common)
    patch = patch_dir / "model_patch.diff"
    retry = is_retryable(report)
    return job.record("failed" if retry else "done", reason=retry,
                      report=report_file.relative_to(out).as_posix(),
                      patch=patch.relative_to(out).as_posix() if patch.is_file() else None,
                      **common, **figures_from_report(report))


def is_retryable(report: Report) -> str | None:
    """Why a written report still counts as a failed job, else None: the run was interrupted (SIGINT,
    SIGTERM), or a provider's API failed mid-run, which a retry may not meet again. Offline models
    (OFFLINE_MODELS) are deterministic, so their errors are results, not failures."""
    if report.subtype != "error_during_execution":
        return None
    if report.result.startswith("interrupted"):
        return report.result
    if not report.result.startswith("model error"):
        return None
    used = set(report.modelUsage)
    return None if used and used <= OFFLINE_MODELS else report.result


class _Spawned:
    """A fresh interpreter: `python -m agent.batch.job <our pid> <request JSON>`."""

    def __init__(self, request: str, cwd: str, env: dict[str, str], log_path: Path):
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "agent.batch.job", str(os.getpid()), request], cwd=cwd,
                                         env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        self.exit_code: int | None = None

    def wait(self, timeout: float) -> int | None:
        try:
            self.exit_code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        return self.exit_code

    def signal_kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()

    def kill(self) -> None:
        self.signal_kill()
        self.proc.wait()


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return lines[-1][:300] if lines else "(no output)"


# -- executors ---------------------------------------------------------------------------------------
class Executor(Protocol):
    name: str

    def gpu_count(self) -> int:
        """GPUs the jobs can use; a task that requires one is skipped when this is 0."""

    def run(self, jobs: Sequence[JobSpec], on_start: OnStart, on_finish: OnFinish) -> None:
        """Run every job; call `on_finish` (in the caller's thread) once per job, as each ends."""


class GpuPool:
    """Hands each job the least-busy GPU of `--gpus`, so jobs spread evenly over devices."""

    def __init__(self, devices: Sequence[str]):
        self.load = {d: 0 for d in devices}
        self._lock = threading.Lock()

    def acquire(self) -> str:
        with self._lock:
            device = min(self.load, key=lambda d: self.load[d])
            self.load[device] += 1
            return device

    def release(self, device: str) -> None:
        with self._lock:
            self.load[device] -= 1


class LocalExecutor:
    """N job processes at once on this machine; with --gpus, each job sees one GPU."""

    name = "local"

    def __init__(self, cfg: LaunchConfig, workers: int, gpus: Sequence[str] | None = None, *, fork: bool = True):
        self.cfg, self.workers, self.fork = cfg, max(1, workers), fork
        self.pool = GpuPool(gpus) if gpus else None

    def gpu_count(self) -> int:
        return len(self.pool.load) if self.pool else len(nvidia_gpus())

    def run(self, jobs: Sequence[JobSpec], on_start: OnStart, on_finish: OnFinish) -> None:
        forks = ForkServer() if self.fork and jobs else None
        try:
            self._run(jobs, on_start, on_finish, forks)
        finally:
            if forks is not None:
                forks.close()

    def _run(self, jobs: Sequence[JobSpec], on_start: OnStart, on_finish: OnFinish, forks: ForkServer | None) -> None:
        events: queue.Queue = queue.Queue()

        def one(job: JobSpec) -> None:
            device = self.pool.acquire() if self.pool else None
            try:
                events.put(("start", (job, device)))
                env = {"CUDA_VISIBLE_DEVICES": device} if device is not None else {}
                try:
                    rec = run_job(job, self.cfg, env, forks=forks)
                except Exception as e:  # noqa: BLE001 — a harness bug fails one job, not the batch
                    rec = job.record("failed", reason=f"batch could not run the job: {type(e).__name__}: {e}")
                events.put(("finish", rec))
            finally:
                if device is not None and self.pool:
                    self.pool.release(device)

        with ThreadPoolExecutor(self.workers, thread_name_prefix="job") as pool:
            for job in jobs:
                pool.submit(one, job)
            left = len(jobs)
            try:
                while left:
                    kind, payload = events.get()
                    if kind == "start":
                        on_start(*payload)
                    else:
                        left -= 1
                        on_finish(payload)
            except BaseException:  # Ctrl-C or a failing callback: stop now, lose only the jobs in flight
                pool.shutdown(wait=False, cancel_futures=True)
                stop_all_jobs()
                raise


def write_files(out_dir: Path, files: dict[str, bytes]) -> None:
    """Write a job's shipped files under `out_dir`, report.json last: its presence means the rest is there.
    A file the worker sealed (its `.mac` came with it) is sealed again with this machine's key, which a
    worker on another machine does not hold (agent.util.seal): this batch trusts the workers it sent."""
    sealed = {rel.removesuffix(MAC_SUFFIX) for rel in files if rel.endswith(MAC_SUFFIX)}
    key = load_key() if sealed else b""
    for rel in sorted(files, key=lambda r: r.endswith("report.json")):
        if ".." in Path(rel).parts or Path(rel).is_absolute() or rel.endswith(MAC_SUFFIX):
            continue
        target = out_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel in sealed:
            mac_path(target).unlink(missing_ok=True)  # never a moment where the new bytes meet an old seal
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_bytes(files[rel])
        os.replace(tmp, target)
        if rel in sealed:
            atomic_write(mac_path(target), sign(key, files[rel]) + "\n")
