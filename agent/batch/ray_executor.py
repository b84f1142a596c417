"""`--executor ray`: batch jobs as Ray tasks on a cluster that shares no filesystem with the batch.

What a job needs travels through Ray, never by path: the harness as the runtime_env's py_modules
(every worker runs the batch's own code), each task packed once into the object store
(agent/batch/kit.py), and a replay trajectory, the run's predictions and a price table as bytes
with the job (agent/batch/ray_job.py). What a job leaves comes back the same way and is written
here, report.json last, so a job lost halfway leaves no report. The batch, not the worker, decides
which job it is and where its files go: the record's key, task, model and sample are the plan's, and
a shipped name that is not inside that job's own folders (or that a link would carry elsewhere) is
refused, named in the record, and fails the job (agent/batch/landing.py).

Leases keep timings clean: a job takes 1 CPU of a node, a GPU task's job a whole GPU
(num_gpus=1: Ray never gives one GPU to two of them, so no measurement shares its device), and a
CPU task's job no GPU, and sees none.

Faults: every running job sends its log's new lines each second (its heartbeat, and the step the
progress shows). A job whose node or worker is lost ends `failed`, "node lost: ...", and a resume
runs it again; one silent for SILENT_S, or still running GRACE_S after its --job-timeout (its
worker stops it at the timeout itself), is force-cancelled. Ctrl-C or SIGTERM cancels every job in
flight: Ray kills each one's worker process, whose fork server then kills the job and what it started.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections import deque
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import agent
from agent.batch.executors import (PROVIDER_ENV, ExecutorError, JobSpec, LaunchConfig, OnFinish, OnStart,
                                   write_files)
from agent.batch.kit import pack_task
from agent.batch.landing import Refused, open_folder, sort_out
from agent.batch.ray_job import JobInputs, remote_job
from agent.results.layout import EMITTED, JOB_LOG, PREDICTIONS, REPORT, claim_job, job_paths, run_folder
from agent.results.record import JobRecord
from agent.task import load_task

POLL_S = 0.5  # how long the batch waits for any job's news before it looks at the clocks
GRACE_S = 5.0  # past a job's --job-timeout, how long its worker has to stop it and ship what it left
SILENT_S = 30.0  # a running job that sends nothing for this long is taken for lost, and cancelled
NODES_S = 5.0  # how often queued jobs are checked against the nodes still alive
CANCEL_WAIT_S = 5.0  # on Ctrl-C, how long the batch waits for its cancelled jobs to end
RAY_LOG = "ray.log"  # in the run's folder: what Ray told the driver (a node died, ...)
REFUSED_NAMED = 10  # of the names a job shipped that the batch refused, how many its record names


@dataclass
class _Flight:
    """A submitted job: when it started and where, and when it last sent news."""

    job: JobSpec
    started: float | None = None
    beat: float = 0.0
    where: dict[str, Any] = field(default_factory=dict)  # node, host, gpus, task_file, harness
    # the job's folder here, held while it runs elsewhere: `review` shows it as running (claim_job)
    claim: ExitStack = field(default_factory=ExitStack)

    @property
    def node(self) -> str | None:
        return self.where.get("node")


class RayExecutor:
    """At most `workers` jobs in flight on the cluster at RAY_ADDRESS (or one of this machine alone)."""

    name = "ray"

    def __init__(self, cfg: LaunchConfig, workers: int):
        self.cfg, self.workers = cfg, max(1, workers)
        self.ray = connect(workers)
        _messages_to(run_folder(cfg.out_dir, cfg.run_id) / RAY_LOG)
        # the node table, not cluster_resources(): a node that has just joined is in it before its resources
        # reach the cluster's resource view
        self.gpus = int(sum(n.get("Resources", {}).get("GPU", 0) for n in self.ray.nodes() if n.get("Alive")))

    def gpu_count(self) -> int:
        return self.gpus

    def run(self, jobs: Sequence[JobSpec], on_start: OnStart, on_finish: OnFinish) -> None:
        ray = self.ray
        remote = ray.remote(remote_job)
        ship = _Shipper(ray, self.cfg)
        todo, flights = deque(jobs), {}
        fired: list[str] = []
        try:
            with _sigterm_interrupts(fired):
                self._loop(remote, ship, todo, flights, on_start, on_finish)
        except BaseException as e:  # Ctrl-C, SIGTERM or a failing callback: no job may go on without the batch
            self._cancel(list(flights))
            if fired and isinstance(e, KeyboardInterrupt):  # Ray's C++ wait turns our Interrupted into a plain one
                from agent.run.exits import Interrupted

                raise Interrupted(fired[0]) from None
            raise

    def _loop(self, remote: Any, ship: "_Shipper", todo: deque, flights: dict, on_start: OnStart,
              on_finish: OnFinish) -> None:
        checked = time.monotonic()
        while todo or flights:
            while todo and len(flights) < self.workers:
                self._submit(remote, ship, todo.popleft(), flights, on_finish)
            if not flights:
                continue
            for gen in self._ready(list(flights)):
                self._take(gen, flights, on_start, on_finish)
            now = time.monotonic()
            self._overdue(flights, on_finish, now)
            if now - checked > NODES_S:
                checked = now
                self._stranded(flights, on_finish)

    def _submit(self, remote: Any, ship: "_Shipper", job: JobSpec, flights: dict, on_finish: OnFinish) -> None:
        try:
            kit, inputs = ship.job(job)
        except Exception as e:  # noqa: BLE001 — a task that cannot be packed fails its own jobs only
            on_finish(job.record("failed", reason=f"could not ship the job: {type(e).__name__}: {e}"))
            return
        gen = remote.options(num_cpus=1, num_gpus=1 if job.requires_gpu else 0, max_retries=0,
                             num_returns="streaming", name=f"perfagent {job.key}").remote(
            job, self.cfg, kit, inputs, job.requires_gpu)
        flights[gen] = _Flight(job)

    # -- news from the jobs ------------------------------------------------------------------------
    def _ready(self, gens: list) -> list:
        ready, _ = self.ray.wait(gens, num_returns=1, timeout=POLL_S)
        if ready and len(gens) > 1:
            ready, _ = self.ray.wait(gens, num_returns=len(gens), timeout=0)
        return ready

    def _take(self, gen: Any, flights: dict, on_start: OnStart, on_finish: OnFinish) -> None:
        """One item a job yielded: where it started, its log's new lines, or its end."""
        fl: _Flight = flights[gen]
        try:
            item = self.ray.get(next(gen))
        except StopIteration:
            _drop(flights, gen)
            on_finish(fl.job.record("failed", reason="the Ray task ended without a result", node=fl.node))
            return
        except Exception as e:  # noqa: BLE001 — the task died: its node or worker is gone, or our code failed
            _drop(flights, gen)
            on_finish(fl.job.record("failed", reason=self._why_lost(fl, e), node=fl.node, wall_s=self._ran(fl)))
            return
        if not isinstance(item, tuple) or len(item) < 2:
            return  # not one of the three things a job sends: taken for silence
        fl.beat = time.monotonic()
        kind = item[0]
        if kind == "start":
            fl.started, fl.where = fl.beat, item[1] if isinstance(item[1], dict) else {}
            try:
                self._write_log(fl.job, f"ray: on node {fl.node} ({fl.where.get('host')})\n".encode(), "w")
            except Refused as e:  # the job's folder here is reached through a link: nothing written through it
                _drop(flights, gen)
                self._cancel([gen], wait=False)
                on_finish(fl.job.record("failed", reason=f"its folder here is not written: {e}", node=fl.node))
                return
            fl.claim.enter_context(claim_job(self._folder(fl.job)))
            on_start(fl.job, _place_name(fl.where))
        elif kind == "log" and isinstance(item[1], bytes) and item[1]:
            try:
                self._write_log(fl.job, item[1], "a")
            except (Refused, OSError):  # a link put there since it started: those lines are not written through
                pass
        elif kind == "done":
            rec = self._landed(fl.job, item[1], item[2] if len(item) > 2 else None)
            _drop(flights, gen)  # after its files: never "missing report" in between
            on_finish(rec)

    def _landed(self, job: JobSpec, rec: object, files: object) -> JobRecord:
        """The job's shipped files written where its plan says, and its record as the batch knows it: the
        plan's key, task, model and sample (a worker cannot file its result as another job's), the report
        and patch paths of what landed, and, when a name was refused, a failure that names it."""
        out = Path(self.cfg.out_dir)
        kept, refused = sort_out(out, self.cfg.run_id, job.key, files)
        write_files(out, kept)
        if not isinstance(rec, JobRecord):
            rec, refused = job.record("failed"), [f"the worker sent no job record ({type(rec).__name__})", *refused]
        results, patches = job_paths(Path(), self.cfg.run_id, job.key)
        report, patch = (results / REPORT).as_posix(), (patches / EMITTED).as_posix()
        update: dict[str, Any] = dict(key=job.key, task=job.task, model=job.model, sample=job.sample,
                                      has_reference=job.has_reference, report=report if report in kept else None,
                                      patch=patch if patch in kept else None)
        if refused:
            more = f" (+{len(refused) - REFUSED_NAMED} more)" if len(refused) > REFUSED_NAMED else ""
            update.update(status="failed", reason="the worker shipped files the batch refused to write: "
                          + "; ".join(refused[:REFUSED_NAMED]) + more)
        return rec.model_copy(update=update)

    def _folder(self, job: JobSpec) -> Path:
        return job_paths(self.cfg.out_dir, self.cfg.run_id, job.key)[0]

    def _write_log(self, job: JobSpec, data: bytes, mode: str) -> None:
        """The job's batch.log here: filled as its lines arrive, replaced by the worker's whole log at its end.
        Its folder is reached with no link followed, and the log itself is never a link (Refused)."""
        folder = job_paths(Path(), self.cfg.run_id, job.key)[0].as_posix()
        fd = open_folder(Path(self.cfg.out_dir), folder)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if mode == "a" else os.O_TRUNC)
            try:
                log = os.open(JOB_LOG, flags, 0o666, dir_fd=fd)
            except OSError as e:
                raise Refused(f"{folder}/{JOB_LOG}: {e.strerror}") from None
            with os.fdopen(log, "wb") as f:
                f.write(data)
        finally:
            os.close(fd)

    # -- jobs that will not end by themselves --------------------------------------------------------
    def _overdue(self, flights: dict, on_finish: OnFinish, now: float) -> None:
        for gen, fl in list(flights.items()):
            if fl.started is None:
                continue
            if now - fl.started > fl.job.timeout_s + GRACE_S:
                why = (f"timed out after {fl.job.timeout_s:g}s: its node ({_short(fl.node)}) did not stop it "
                       f"{GRACE_S:g}s later, so the batch cancelled it")
            elif now - fl.beat > SILENT_S:
                why = f"node lost: no word from node {_short(fl.node)} for {SILENT_S:g}s, so the batch cancelled it"
            else:
                continue
            _drop(flights, gen)
            self._cancel([gen], wait=False)
            on_finish(fl.job.record("failed", reason=why, node=fl.node, wall_s=self._ran(fl)))

    def _stranded(self, flights: dict, on_finish: OnFinish) -> None:
        """Queued jobs no node left alive can take (the only GPU node was lost): failed now, not queued for ever."""
        queued = [(gen, fl) for gen, fl in flights.items() if fl.started is None]
        if not queued:
            return
        alive = [n.get("Resources", {}) for n in self.ray.nodes() if n.get("Alive")]
        for gen, fl in queued:
            need = "GPU" if fl.job.requires_gpu else "CPU"
            if need == "GPU" and not self.gpus or any(r.get(need, 0) >= 1 for r in alive):
                continue
            _drop(flights, gen)
            self._cancel([gen], wait=False)
            on_finish(fl.job.record("failed", reason=f"node lost: no node with a {need} is left in the cluster"))

    def _why_lost(self, fl: _Flight, e: Exception) -> str:
        ex = self.ray.exceptions
        first = (str(e).strip().splitlines() or [""])[0][:300]
        if isinstance(e, ex.TaskCancelledError):
            return "cancelled"
        if isinstance(e, ex.RayTaskError):  # our code raised on the worker
            return f"ray task failed: {first}"
        where = f"node {_short(fl.node)} ({fl.where.get('host')})" if fl.node else "its node"
        if fl.node is not None and not isinstance(e, ex.NodeDiedError) and self._alive(fl.node):
            return f"node lost: the job's Ray worker on {where} died ({type(e).__name__}); nothing came back from it"
        return f"node lost: {where} went away with the job ({type(e).__name__}); nothing came back from it"

    def _alive(self, node: str) -> bool:
        return any(n.get("NodeID") == node and n.get("Alive") for n in self.ray.nodes())

    @staticmethod
    def _ran(fl: _Flight) -> float:
        return round(time.monotonic() - fl.started, 3) if fl.started is not None else 0.0

    def _cancel(self, gens: list, *, wait: bool = True) -> None:
        """Force-cancel: Ray kills each job's worker, and with it the job's process and what it started."""
        for gen in gens:
            try:
                self.ray.cancel(gen, force=True)
            except Exception:  # noqa: BLE001 — already ended, or its node is gone
                pass
        if wait and gens:
            try:
                self.ray.wait(gens, num_returns=len(gens), timeout=CANCEL_WAIT_S)
            except Exception:  # noqa: BLE001
                pass


def _drop(flights: dict, gen: Any) -> _Flight:
    """A flight off the list, its job's folder let go."""
    fl = flights.pop(gen)
    fl.claim.close()
    return fl


class _Shipper:
    """What each job gets: its task's kit (packed and put in the object store once per task), and its input
    files' bytes (read once per file)."""

    def __init__(self, ray: Any, cfg: LaunchConfig):
        self.ray, self.cfg = ray, cfg
        self.kits: dict[str, Any] = {}
        self.bytes: dict[Path, bytes] = {}

    def job(self, job: JobSpec) -> tuple[Any, JobInputs]:
        if job.task_file not in self.kits:
            self.kits[job.task_file] = self.ray.put(pack_task(load_task(job.task_file)))
        provider, _, name = job.model_arg.partition(":")
        predictions = run_folder(self.cfg.out_dir, self.cfg.run_id) / PREDICTIONS
        prices = self.cfg.options.prices
        return self.kits[job.task_file], JobInputs(
            replay=self._read(Path(name)) if provider == "replay" else None,
            predictions=self._read(predictions) if provider == "prediction" else None,
            prices=self._read(Path(prices)) if prices is not None else None)

    def _read(self, path: Path) -> bytes:
        if path not in self.bytes:
            self.bytes[path] = path.read_bytes()
        return self.bytes[path]


# -- connecting ---------------------------------------------------------------------------------------
def connect(workers: int) -> Any:
    """Ray, connected to RAY_ADDRESS or to a cluster of this machine alone that it starts, with the harness
    shipped to every worker; ExecutorError (one line) when Ray is missing or no cluster answers."""
    try:
        import ray
    except ImportError:
        raise ExecutorError("the ray executor needs Ray, which is not installed here: "
                            "install perfagent's `ray` extra") from None
    if ray.is_initialized():
        return ray
    address = os.environ.get("RAY_ADDRESS") or None
    if address:
        _reachable(address)
    env = {k: os.environ[k] for k in PROVIDER_ENV if k in os.environ}
    runtime_env: dict[str, Any] = {"py_modules": [str(Path(agent.__file__).parent)],
                                   "excludes": ["__pycache__", "*.pyc"]}
    if env:
        runtime_env["env_vars"] = env
    local = {} if address else {"num_cpus": max(workers, os.cpu_count() or 1), "_node_ip_address": "127.0.0.1"}
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                 runtime_env=runtime_env, **local)
    except Exception as e:  # noqa: BLE001 — ray raises many kinds; the user needs one line
        first = (str(e).strip().splitlines() or [""])[0][:300]
        where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
        raise ExecutorError(f"could not start or reach {where}: {type(e).__name__}: {first}") from None
    if threading.current_thread() is threading.main_thread():
        # Ray's C++ core has just put absl's handler (a native stack dump) over ray.init's Python one for
        # SIGTERM: the Python one again, until run() sets ours (_sigterm_interrupts)
        signal.signal(signal.SIGTERM, signal.getsignal(signal.SIGTERM) or signal.SIG_DFL)
    return ray


def _messages_to(path: Path) -> None:
    """Ray prints what the cluster tells the driver (a node died, with its raylet's last log lines) on our
    stdout, among the batch's tables: it goes to the run's ray.log instead."""
    try:
        from ray._private import worker
    except ImportError:  # pragma: no cover - another Ray layout: its messages stay on stdout
        return

    def to_file(data: dict[str, Any], ignore_prefix: bool = False) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        stamp, who = time.strftime("%H:%M:%S"), data.get("pid", "")
        with open(path, "a", encoding="utf-8") as f:
            f.writelines(f"{stamp} {who}: {line}\n" for line in data.get("lines", []))

    if hasattr(worker, "print_to_stdstream"):
        worker.print_to_stdstream = to_file


# An HTTP/2 client's opening (its preface and an empty SETTINGS frame): a gRPC server, as Ray's GCS is,
# answers with a SETTINGS frame of its own
_H2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _reachable(address: str) -> None:
    """A quick look before Ray's own connect, which retries for minutes: does a gRPC server (Ray's GCS, or
    its client server) answer there?"""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto", "local": Ray finds the cluster itself
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=5) as conn:
            if os.environ.get("RAY_USE_TLS", "0") not in ("0", ""):
                return  # TLS first: no plain gRPC to look for
            conn.settimeout(5)
            conn.sendall(_H2_HELLO)
            head = conn.recv(9)
    except OSError as e:
        raise ExecutorError(f"RAY_ADDRESS={address}: no Ray cluster answers there "
                            f"({e.strerror or type(e).__name__})") from None
    if len(head) < 4 or head[3] != 0x04:  # not an HTTP/2 SETTINGS frame
        raise ExecutorError(f"RAY_ADDRESS={address}: something answers there, but not a Ray cluster")


@contextmanager
def _sigterm_interrupts(fired: list[str]) -> Iterator[None]:
    """While jobs run, SIGTERM ends the batch as Ctrl-C does: every job cancelled, one line, exit 143.

    ray.init sets a Python SIGTERM handler (sys.exit), and then Ray's C++ core installs absl's failure
    signal handler over it, which prints a native stack dump ("*** SIGTERM received ...") before passing
    the signal on. Setting a Python handler again replaces the C++ one; the previous Python handler
    comes back after, without the dump. `fired` gets the signal's name: where it strikes inside Ray's
    C++ wait, Ray raises a plain KeyboardInterrupt instead of ours.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        from agent.run.exits import Interrupted

        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the first one counts: the cancelling must not be cut short
        fired.append("SIGTERM")
        raise Interrupted("SIGTERM")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _short(node: str | None) -> str:
    return node[:8] if node else "?"


def _place_name(where: dict[str, Any]) -> str:
    gpus = where.get("gpus") or []
    return f"node {_short(where.get('node'))}" + (f" GPU {','.join(gpus)}" if gpus else "")
