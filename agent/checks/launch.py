"""Starting a workspace's test processes: forked from a warm interpreter where the command is
plain Python, a fresh sandboxed process otherwise. Either way the process sees the same
environment (agent.checks.correctness.check_env: the workspace and our check hook on PYTHONPATH).

Bench samples never come from here: every child of one server shares its memory layout, and
two servers' children ran the same code 0.88x-1.15x apart, so agent.checks.perf forks every
side's samples from one server of its own.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Callable

from agent.env.runners import SANDBOXED, CommandRunner
from agent.env.sandbox import CommandResult, SandboxSpec, scratch_places
from agent.env.warm import WarmError, WarmPython, parse_python, torch_preload


class Launcher:
    """The processes of one workspace; one warm server per interpreter and set of writable folders.

    A test server is wiped after every child as a bench server is (agent.env.zygote: /tmp,
    /var/tmp, /dev/shm, the home folders, /dev, SysV IPC), so no run, and no evaluation, finds
    what an earlier one left: the candidate's checkout itself is the caller's to scrub. A server
    that could not be wiped is closed and replaced by a fresh one.
    """

    def __init__(self, root: Path, env: dict[str, str], *, sandbox: SandboxSpec = SandboxSpec(),
                 runner: CommandRunner = SANDBOXED, warm: bool = True, log: Callable[[str], None] = lambda _: None):
        self.root = Path(root)
        self.env = env  # every process's; a run's own changes (poison, coverage) go on top
        self.sandbox = sandbox  # the task's (agent.env.sandbox.SandboxSpec.for_task); a run's folders go on top
        self.runner = runner  # every cold process's (agent.env.runners)
        self.warm = warm and WarmPython.available()
        self.log = log
        self._servers: dict[tuple, WarmPython | None] = {}
        self._lock = threading.Lock()
        self._started = False
        # bwrap's --die-with-parent follows the thread that started it: servers are started from this
        # one thread, which lives as long as the launcher, not from a caller's short-lived worker.
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="warm-spawner")

    @property
    def used(self) -> bool:
        """Whether a warm server was ever started here (so one served some run)."""
        return self._started

    def _server(self, key: tuple, interpreter: str, writable: tuple[Path, ...], preload: tuple[str, ...],
                start_env: dict[str, str]) -> WarmPython | None:
        """The server for `key` (interpreter, writable folders, start environment), started on first use."""
        with self._lock:
            if key not in self._servers:
                self._started = True
                try:
                    self._servers[key] = self._spawner.submit(
                        WarmPython, interpreter, self.root, env={**self.env, **start_env},
                        sandbox=self.sandbox.with_(writable=writable), preload=preload, wipe=scratch_places()).result()
                except OSError as e:
                    self.log(f"no warm interpreter ({e}); starting each process cold")
                    self._servers[key] = None
            return self._servers[key]

    def run(self, command: str, *, timeout_s: float, env: dict[str, str] | None = None,
            writable: tuple[Path, ...] = (), key: str | None = None, shared: tuple[Path, ...] = (),
            start_env: dict[str, str] | None = None) -> CommandResult:
        """`key` signs what the check hook records (agent.checks.records): a warm child gets it in its
        request, a cold command from an inherited descriptor its hook closes; never the environment.

        `start_env`: variables read as the interpreter starts (OpenMP's, as torch loads it), so a warm
        server must have been started with them: they choose the server, where `env` is the child's.

        `shared`: folders of another command's run that this one's warm server holds writable too, so
        one server forks both (one torch import fewer). It preloads torch alone: neither command may
        find the other's modules (pytest) imported. What one run can write of the other's, the caller
        makes anew between them."""
        cmd = parse_python(command) if self.warm else None
        served = tuple(sorted({*writable, *shared}))
        start_env = start_env or {}
        skey = (cmd.interpreter, served, tuple(sorted(start_env.items()))) if cmd else ()
        server = (self._server(skey, cmd.interpreter, served, self._preload(cmd.argv, cmd.module, shared), start_env)
                  if cmd else None)
        if server is not None:
            try:
                res = replace(server.run(cmd, timeout_s=timeout_s, env=env, key=key), command=command)
            except WarmError as e:
                self.log(f"{e}; starting each process cold from now on")
                with self._lock:
                    self._servers[skey] = None
            else:
                if not server.clean:  # the next run gets a new server, which nothing has touched
                    self.log("a test process left something behind that could not be removed; "
                             "the next one starts in a new warm interpreter")
                    with self._lock:
                        if self._servers.get(skey) is server:
                            del self._servers[skey]
                    if not server.close() and res.escaped is None:
                        res = replace(res, escaped="processes it left could not be ended: the warm server's "
                                                   "cgroup did not empty")
                return res
        sandbox = self.sandbox.with_(writable=writable)
        env = {**start_env, **(env or {})}
        if key is None:
            return self.runner.run(command, self.root, sandbox=sandbox, timeout_s=timeout_s,
                                   env={**self.env, **env})
        fd = os.memfd_create("perfagent-key", 0)  # inheritable: the command's processes read it, at offset 0
        try:
            os.write(fd, key.encode())
            return self.runner.run(command, self.root, sandbox=sandbox, timeout_s=timeout_s, pass_fds=(fd,),
                                   env={**self.env, **env, "PERFAGENT_KEY_FD": str(fd)})
        finally:
            os.close(fd)

    def _preload(self, argv: tuple[str, ...], module: bool, shared: tuple[Path, ...]) -> tuple[str, ...]:
        torch = torch_preload(self.root)  # the tests' own checkout: what the candidate wrote counts too
        return (*torch, "pytest") if module and argv[0] == "pytest" and not shared else torch

    def close(self) -> None:
        with self._lock:
            servers, self._servers = list(self._servers.values()), {}
        for s in servers:
            if s is not None:
                s.close()
        self._spawner.shutdown(wait=False)
