"""A warm process that forks one child per batch job.

A fresh `perfagent run` pays ~3 s of imports (provider SDKs, pydantic models, scipy) before
it does anything; a fork of a process that imported them once costs milliseconds.
multiprocessing's forkserver would do the same, but it re-imports the caller's `__main__`
in every child (re-running an unguarded script); this server runs nothing but `perfagent run`.

Protocol, JSON lines: requests on the server's stdin, {"id", "args", "cwd", "env", "log"};
replies on its stdout, {"id", "pid"} after the fork and {"id", "exit"} when the child ends.
EOF on stdin means the batch is gone: the server SIGKILLs its children and exits, and each
child also dies with the server (PR_SET_PDEATHSIG), so a `kill -9` of the batch leaves no job.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path

PRELOAD = ("agent.cli", "agent.runner", "agent.checks")


def die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this process when its parent dies; exit now if it already has."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(1)


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
        self.proc = subprocess.Popen([sys.executable, "-m", "agent.batch_forkserver", str(os.getpid())],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self._lock = threading.Lock()
        self._slots: dict[int, _Slot] = {}
        self._next = 0
        threading.Thread(target=self._read, name="forkserver-replies", daemon=True).start()

    def start(self, args: list[str], cwd: str, env: dict[str, str], log: Path) -> "ForkedJob":
        with self._lock:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the batch fork server exited (code {self.proc.returncode})")
            self._next += 1
            slot = self._slots[self._next] = _Slot()
            req = {"id": self._next, "args": args, "cwd": cwd, "env": env, "log": str(log)}
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
def serve(parent: int) -> None:
    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the batch and the jobs; we go on EOF
    for name in PRELOAD:
        __import__(name)
    children: dict[int, int] = {}  # pid -> request id
    buf = b""
    while True:
        ready, _, _ = select.select([0], [], [], 0.2)
        if ready:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                req = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    _child(req)  # never returns
                children[pid] = req["id"]
                _reply({"id": req["id"], "pid": pid})
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            _reply({"id": children.pop(pid), "exit": os.waitstatus_to_exitcode(status)})
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _reply(msg: dict) -> None:
    os.write(1, (json.dumps(msg) + "\n").encode())


def _child(req: dict) -> None:
    """In the fork: become `perfagent run <args>` with the job's cwd, environment and log."""
    code = 1
    try:
        die_with_parent(os.getppid())
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
        from agent.cli import main

        code = main(req["args"])
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
