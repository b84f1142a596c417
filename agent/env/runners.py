"""The seam every check command goes through: `CommandRunner`, which the sides, the test launcher and
the bench call to run one command sealed. `Sandboxed` is the real one (agent.env.sandbox.run_command);
`Recorded` answers from a script and keeps the calls in order, so what `collect` runs, in what order,
and where it stops, is tested in milliseconds, without a process.

Only cold commands go through it: a warm interpreter (agent.env.warm) forks its children itself, so a
`Recorded` runner goes with `warm=False`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from agent.env.sandbox import CommandResult, SandboxSpec, run_command


class CommandRunner(Protocol):
    def run(self, command: str, cwd: Path, *, sandbox: SandboxSpec, timeout_s: float, env: dict[str, str],
            pass_fds: tuple[int, ...] = (), account_cpu: bool = False) -> CommandResult:
        """Run `command` in `cwd`, sealed as `sandbox` says; never raises for the command's own failures."""
        ...


class Sandboxed:
    """The real runner: bubblewrap, or the strongest fallback this machine has."""

    def run(self, command: str, cwd: Path, *, sandbox: SandboxSpec, timeout_s: float, env: dict[str, str],
            pass_fds: tuple[int, ...] = (), account_cpu: bool = False) -> CommandResult:
        return run_command(command, cwd, sandbox=sandbox, timeout_s=timeout_s, env=env, pass_fds=pass_fds,
                           account_cpu=account_cpu)


SANDBOXED = Sandboxed()


@dataclass(frozen=True)
class Call:
    """One command a `Recorded` runner was asked to run, as it was asked."""

    command: str
    cwd: Path
    sandbox: SandboxSpec
    env: dict[str, str]
    account_cpu: bool = False  # a timed bench sample (agent.checks.perf) asks for its CPU time


Reply = int | tuple[int, str]  # an exit code, or (exit code, output)


@dataclass
class Recorded:
    """Answers each command from `replies`: the first key, in order, the command contains gives its reply,
    or a list of them, one per call in turn (the last one repeats); any other command exits 0 and prints
    nothing. `calls` keeps what was asked, in order."""

    replies: Mapping[str, Reply | list[Reply]] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    _asked: dict[str, int] = field(default_factory=dict, init=False, repr=False)  # calls answered, per key
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)  # some run at once

    def run(self, command: str, cwd: Path, *, sandbox: SandboxSpec, timeout_s: float, env: dict[str, str],
            pass_fds: tuple[int, ...] = (), account_cpu: bool = False) -> CommandResult:
        key = next((k for k in self.replies if k in command), None)
        with self._lock:
            self.calls.append(Call(command, Path(cwd), sandbox, dict(env), account_cpu))
            asked = self._asked.get(key or "", 0)
            self._asked[key or ""] = asked + 1
        given = self.replies[key] if key is not None else 0
        reply = given[min(asked, len(given) - 1)] if isinstance(given, list) else given
        code, output = reply if isinstance(reply, tuple) else (reply, "")
        return CommandResult(command, code, output, duration_s=0.0, timed_out=False, cut_bytes=0,
                             isolation="recorded", wall_s=0.0, cpu_s=0.0 if account_cpu else None)

    @property
    def commands(self) -> list[str]:
        return [c.command for c in self.calls]
