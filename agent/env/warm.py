"""Warm interpreters: a sandboxed Python that has imported torch once (where the checkout's code
imports it: `torch_preload`) and forks a fresh child
for each `python script.py` / `python -m module` command (see zygote.py): one per workspace for
its tests, one per perf sampling for every side's bench.

Starting the target's interpreter and importing torch costs about 2 s per process on a small
machine, and an agent's run checks its candidates dozens of times. Only plain Python commands are served warm, and only
under bubblewrap (the server must own a PID namespace to leave no process behind between
children); everything else runs through `run_command` as before.

The server's requests and replies travel on two pipes that no other process in its sandbox
holds (not bwrap's init: it closes every fd above stdio), and the server is non-dumpable, so no
child can open them through /proc to read the next request or answer in the server's place; the
server checks that before it serves.
"""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from agent.env.cgroup import Cgroup
from agent.env.sandbox import (DEFAULT_MAX_OUTPUT, CommandResult, ResourceLimits, SandboxSpec, isolation,
                               real_paths, sealed_argv, seccomp_filter)
from agent.errors import PerfagentError

ZYGOTE = Path(__file__).with_name("zygote.py")
START_TIMEOUT_S = 180
POLL_S = 0.25  # how often a wait for a reply looks whether the server was stopped
_INTERPRETER = re.compile(r"(?:.*/)?python(?:3(?:\.\d+)?)?$")
_SHELL_SYNTAX = re.compile(r"[|&;<>()$`\\*?\[\]{}~!#\n]")
_IMPORTS_TORCH = re.compile(rb"^[ \t]*(?:import|from)[ \t]+(torch(?:\.\w+)*)\b", re.M)
_NOT_SOURCE = {".git", ".venv", "venv", "node_modules", "site-packages", "__pycache__", "build", "dist"}


def torch_preload(*roots: Path, most: int = 5000, names: int = 32) -> tuple[str, ...]:
    """What a server for these checkouts should import before it forks: torch where their Python
    imports it, and the torch modules it names (`import torch._dynamo`: 2 s of every SGLang test
    process), and nothing where no code under test uses torch (about 1 s and 300 MB a server).
    Past `most` files: torch alone."""
    found: set[str] = set()
    seen = 0
    for root in roots:
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d not in _NOT_SOURCE and not d.startswith(".")]
            for name in files:
                if not name.endswith(".py"):
                    continue
                seen += 1
                if seen > most:
                    return ("torch",)
                try:
                    with open(os.path.join(folder, name), "rb") as f:
                        found.update(m.decode() for m in _IMPORTS_TORCH.findall(f.read(1 << 20)))
                except OSError:
                    continue
    if not found:
        return ()
    return ("torch", *sorted(found - {"torch"})[:names])


@dataclass(frozen=True)
class PythonCommand:
    """`python [-u] script.py args` or `python [-u] -m module args`, split into what the server needs."""

    interpreter: str
    argv: tuple[str, ...]
    module: bool


def parse_python(command: str) -> PythonCommand | None:
    """The command as a Python invocation a warm server can fork, or None (run it the usual way)."""
    if _SHELL_SYNTAX.search(command):
        return None
    try:
        tokens = shlex.split(command)
    except ValueError:
        return None
    if len(tokens) < 2 or "=" in tokens[0] or not _INTERPRETER.fullmatch(tokens[0]):
        return None
    rest = tokens[1:]
    while rest and rest[0] in ("-u", "-B"):  # both are the server's settings already
        rest = rest[1:]
    if len(rest) >= 2 and rest[0] == "-m":
        return PythonCommand(tokens[0], tuple(rest[1:]), module=True)
    if rest and rest[0].endswith(".py") and not rest[0].startswith("-"):
        return PythonCommand(tokens[0], tuple(rest), module=False)
    return None


def _descendants(root: int) -> list[int]:
    """`root` and every process below it, from /proc's children lists."""
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    todo += [int(child) for child in f.read().split()]
        except OSError:
            pass
    return pids


def _stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


class WarmError(PerfagentError):
    """The server could not start or died; callers fall back to a cold process."""


class WarmPython:
    """One server in one sandbox at `cwd`; `run` is one forked child at a time."""

    def __init__(self, interpreter: str, cwd: Path, *, env: dict[str, str], sandbox: SandboxSpec = SandboxSpec(),
                 wipe: tuple[str, ...] = (), preload: tuple[str, ...] = ("torch",), lifetime_s: float = 6 * 3600):
        """`sandbox`: what the server and every child may see and write (its `readable` may be (folder,
        place) pairs); `wipe`: the writable places emptied after each child (`run`'s result then says if
        that worked)."""
        self.interpreter = interpreter
        self.cwd = Path(os.path.realpath(cwd))
        self.preloaded: list[str] = []
        self.learned = 0  # modules imported after a `learn` child (agent.env.zygote._installed_imports)
        self.landlock = 0  # the server's Landlock ABI: 0, and it cannot `hide`
        self._lock = threading.Lock()
        self._ready = False
        self._dead: str | None = None
        self._server_pids: list[int] = []
        self.clean = True  # after the last child: its writable places emptied (see `wipe`)
        # The control channel is a pair of pipes at fds above stdio, not stdin / stdout: bubblewrap's
        # init (PID 1 of the sandbox, dumpable, so any child could open its /proc/1/fd/N) closes every
        # inherited fd but stdio before it waits, so inside the sandbox only the server, which is
        # non-dumpable, holds them. Its stdin and stdout are /dev/null.
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        env = {**env, "PERFAGENT_PRELOAD": ",".join(preload), "PERFAGENT_WIPE": os.pathsep.join(wipe),
               "PERFAGENT_CONTROL": f"{req_r},{rep_w}"}
        command = f"exec {shlex.quote(interpreter)} {shlex.quote(str(ZYGOTE))}"
        limits = sandbox.limits or ResourceLimits.default()
        sealed = replace(sandbox, readable=(ZYGOTE, *sandbox.readable), writable=real_paths(sandbox.writable))
        self.group = Cgroup.create(limits.memory_bytes, limits.processes)
        try:
            with seccomp_filter() as seccomp:
                argv = sealed_argv(command, self.cwd, isolation().mode, sealed, env, limits, lifetime_s, seccomp)
                self.proc = subprocess.Popen(self.group.wrap(argv) if self.group else argv, cwd=str(self.cwd),
                                             env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL, start_new_session=True,
                                             pass_fds=(*seccomp, req_r, rep_w))
        except BaseException:
            os.close(req_w)
            os.close(rep_r)
            if self.group:
                self.group.remove()
            raise
        finally:
            os.close(req_r)
            os.close(rep_w)
        self.requests = os.fdopen(req_w, "wb")  # JSON lines to the server
        self.replies = os.fdopen(rep_r, "rb")  # and its answers

    @staticmethod
    def available() -> bool:
        return isolation().mode == "bwrap" and os.environ.get("PERFAGENT_WARM", "1") != "0"

    def _read(self, timeout_s: float) -> dict:
        """The server's next reply line. A child can SIGSTOP the server, its parent, which then
        enforces no timeout: seen stopped, the server counts as dead at once."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.replies], [], [], max(0.0, min(POLL_S, left)))
            if ready or left <= POLL_S:
                break
            if any(_stopped(pid) for pid in self._server_pids):
                self.close()
                self._dead = "the warm interpreter was stopped"
                raise WarmError(self._dead)
        line = self.replies.readline() if ready else b""
        if not line:
            self.close()
            self._dead = "the warm interpreter did not answer" if not ready else "the warm interpreter exited"
            raise WarmError(self._dead)
        return json.loads(line)

    def _wait_ready(self) -> None:
        if not self._ready:
            hello = self._read(START_TIMEOUT_S)
            if not hello.get("ready"):
                self.close()
                self._dead = f"the warm interpreter refused to serve: {hello.get('error')}"
                raise WarmError(self._dead)
            self.preloaded, self._ready = hello.get("preloaded", []), True
            self.landlock = int(hello.get("landlock", 0))
            self._server_pids = _descendants(self.proc.pid)  # no child forked yet: all the server's

    def run(self, cmd: PythonCommand, *, timeout_s: float, env: dict[str, str | None] | None = None,
            max_output: int = DEFAULT_MAX_OUTPUT, cwd: Path | None = None, path: tuple[str, ...] = (),
            hide: tuple[Path, ...] = (), key: str | None = None, learn: bool = False) -> CommandResult:
        """Fork one child running `cmd`; `env` changes (None removes) apply to that child only, as
        do `cwd` and `path` (sys.path entries put where PYTHONPATH's go) and `hide`: folders of
        the server's sandbox the child (and all it starts) cannot read (agent.env.zygote._hide). `key`
        goes to the child's check hook in the request, never through its environment. `learn` (only
        for a child whose code is trusted): the server then imports what it imported of the
        interpreter's installation, for every later child."""
        with self._lock:
            if self._dead:
                raise WarmError(self._dead)
            self._wait_ready()
            if hide and not self.landlock:
                raise WarmError("the kernel has no Landlock to keep one side from reading another's checkout")
            request = {"argv": list(cmd.argv), "module": cmd.module, "env": env or {}, "timeout_s": timeout_s,
                       "max_output": max_output, "cwd": str(cwd) if cwd else None, "path": list(path),
                       "hide": [str(p) for p in hide], "key": key, "learn": learn}
            start = time.monotonic()
            try:
                self.requests.write(json.dumps(request).encode() + b"\n")
                self.requests.flush()
            except OSError:
                self.close()
                raise WarmError("the warm interpreter exited") from None
            reply = self._read(timeout_s + 30 + (START_TIMEOUT_S if learn else 0))
            self.learned += int(reply.get("learned", 0))
            if reply.get("threaded"):  # the server has ended: the next run says why
                self._dead = "a module the warm interpreter imported for later runs started a thread; it serves no more"
        text = reply["output"]
        if reply["timed_out"]:
            text += f"\n[timed out after {timeout_s:g}s; every process of the command killed]"
        display = shlex.join([cmd.interpreter, *(["-m"] if cmd.module else []), *cmd.argv])
        escaped = reply.get("escaped")
        # a server whose sweep left a process is replaced: closing it ends its whole cgroup
        self.clean = reply.get("clean", True) and not escaped
        return CommandResult(display, reply["exit"] if not reply["timed_out"] else -signal.SIGKILL, text,
                             time.monotonic() - start, reply["timed_out"], reply["cut"], "bwrap",
                             reply.get("wall_s"), reply.get("cpu_s"), escaped)

    def close(self) -> bool:
        """End the server and everything in its sandbox; whether its cgroup emptied (True where it has none)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        emptied = True
        if self.group:
            emptied = self.group.remove()
            self.group = None
        for pipe in (self.requests, self.replies):
            try:
                pipe.close()
            except OSError:
                pass
        return emptied
