"""A warm process that forks one child per batch job.

A fresh job process pays ~3 s of imports (provider SDKs, pydantic models, scipy) before
it does anything; a fork of a process that imported them once costs milliseconds.
multiprocessing's forkserver would do the same, but it re-imports the caller's `__main__`
in every child (re-running an unguarded script); this server runs nothing but batch jobs
(agent/batch/job.py).

Protocol, JSON lines: requests on the server's stdin, {"id", "request", "cwd", "env", "log"}
(`request`: the job's RunRequest as JSON);
replies on its stdout, {"id", "pid"} after the fork and {"id", "exit"} when the child ends.
EOF on stdin (or SIGTERM, which the kernel sends when the batch dies) means the batch is gone:
the server SIGKILLs its children and exits, and each child also dies with the server
(PR_SET_PDEATHSIG), so a `kill -9` of the batch leaves no job. The server is also the
reaper of every orphan its jobs leave (PR_SET_CHILD_SUBREAPER): a command in a session of its
own, a `setsid -f` daemon or the commands of a killed job come to it, and it kills them, so
nothing of the batch is left running and `--resume` can start at once.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from agent.batch.job import run_json
from agent.batch.procs import adopt_orphans, child_pids, die_with_parent, kill_tree

PRELOAD = ("agent.run.runner", "agent.checks")  # what every job imports; agent.batch.job is already here
CLEANUP_S = 5.0  # how long the server keeps killing what its jobs left before it gives up and exits


# -- client side (in the batch) -----------------------------------------------------------------
@dataclass
class _Slot:
    started: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    pid: int | None = None
    exit: int | None = None


class ForkServer:
    """Start jobs as forks of a warm server; `start` is thread-safe."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "agent.batch.forkserver", str(os.getpid())],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self._lock = threading.Lock()
        self._slots: dict[int, _Slot] = {}
        self._next = 0
        threading.Thread(target=self._read, name="forkserver-replies", daemon=True).start()

    def start(self, request: str, cwd: str, env: dict[str, str], log: Path) -> "ForkedJob":
        with self._lock:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the batch fork server exited (code {self.proc.returncode})")
            self._next += 1
            slot = self._slots[self._next] = _Slot()
            req = {"id": self._next, "request": request, "cwd": cwd, "env": env, "log": str(log)}
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        return ForkedJob(slot)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            msg = json.loads(line)
            slot = self._slots.get(msg["id"])
            if slot is None:
                continue
            if "pid" in msg:
                slot.pid = msg["pid"]
                slot.started.set()
            if "exit" in msg:
                slot.exit = msg["exit"]
                slot.done.set()
                self._slots.pop(msg["id"], None)
        for slot in list(self._slots.values()):  # the server died: its jobs are gone too
            slot.started.set()
            slot.done.set()

    def close(self) -> None:
        """EOF to the server: it kills what is left and exits."""
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


class ForkedJob:
    def __init__(self, slot: _Slot):
        self.slot = slot
        self.exit_code: int | None = None

    def wait(self, timeout: float) -> int | None:
        if self.slot.done.wait(timeout):
            self.exit_code = self.slot.exit if self.slot.exit is not None else -signal.SIGKILL
        return self.exit_code

    def signal_kill(self) -> None:
        if self.slot.pid is not None and not self.slot.done.is_set():
            try:
                os.kill(self.slot.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.slot.started.wait(30)
        self.signal_kill()
        self.slot.done.wait(30)


# -- server side ------------------------------------------------------------------------------------
class _BatchGone(Exception):
    """SIGTERM: the batch died (PR_SET_PDEATHSIG) or someone wants the server gone."""


def _batch_gone(signum: int, frame: object) -> None:
    raise _BatchGone()


def serve(parent: int) -> None:
    die_with_parent(parent, signal.SIGTERM)  # not SIGKILL: the server cleans up before it goes
    signal.signal(signal.SIGTERM, _batch_gone)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the batch and the jobs; we go on EOF
    adopt_orphans()
    children: dict[int, int] = {}  # pid -> request id
    try:
        for name in PRELOAD:
            __import__(name)
        _serve(children)
    except _BatchGone:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _end_all()


def _serve(children: dict[int, int]) -> None:
    buf = b""
    server = os.getpid()
    while True:
        ready, _, _ = select.select([0], [], [], 0.2)
        if ready:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                req = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    _child(req, server)  # never returns
                children[pid] = req["id"]
                _reply({"id": req["id"], "pid": pid})
        for pid, code in _reap():
            if pid in children:
                _reply({"id": children.pop(pid), "exit": code})
        for pid in child_pids() - set(children):  # adopted: left behind by a job's command or a dead job
            kill_tree(pid)


def _reap() -> list[tuple[int, int]]:
    """(pid, exit code) of every child that has ended, jobs and adopted orphans alike."""
    out = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return out
        if pid == 0:
            return out
        out.append((pid, os.waitstatus_to_exitcode(status)))


def _end_all() -> None:
    """Kill every job, then whatever each leaves as it dies (it is adopted here), until nothing is left."""
    deadline = time.monotonic() + CLEANUP_S
    while time.monotonic() < deadline:
        _reap()
        pids = child_pids()
        if not pids:
            return
        for pid in pids:
            kill_tree(pid)
        time.sleep(0.02)


def _reply(msg: dict) -> None:
    os.write(1, (json.dumps(msg) + "\n").encode())


def _child(req: dict, server: int) -> None:
    """In the fork: run the job's request with its cwd, environment and log."""
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the server's handler
        die_with_parent(server)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        code = run_json(req["request"])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 — the log gets the traceback, the batch the exit code
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
