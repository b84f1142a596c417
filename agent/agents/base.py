"""What perfagent needs of an external agent: how to start it, how to resume it, how to read it.

An agent is a command line run in the sandbox, in the task's workspace, with a HOME of its
own and the relay as its only network. Everything it prints or writes is a claim: its result
is read leniently and never trusted for cost or correctness.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from agent.agents.errors import AgentError
from agent.agents.relay import BRIDGE_PORT, PLACEHOLDER_KEY
from agent.agents.wire import Provider, json_objects

VERSION_TIMEOUT_S = 60


@dataclass(frozen=True)
class Session:
    """One launch of the agent: the instruction, which round, and what it knows of earlier rounds."""

    prompt: str
    round: int
    resume_id: str | None = None  # the agent's own session id, for agents that can resume
    home: Path = Path("/nonexistent")  # the agent's writable HOME (kept across rounds)
    out: Path = Path("/nonexistent")  # a writable folder for files the agent is told to write


@dataclass
class AgentResult:
    """What the agent said about a session it ran (its own words and figures, unverified)."""

    claim: str = ""
    own_cost_usd: float | None = None
    session_id: str | None = None
    raw: Any = None  # its result document, kept as it printed it
    error: str | None = None  # a reason the agent gave for failing
    extra: dict[str, Any] = field(default_factory=dict)


class ExternalAgent(ABC):
    """One external agent for one model. Subclasses say how to run and read it."""

    name: ClassVar[str]
    binary: ClassVar[str]  # the command on PATH
    install: ClassVar[str]  # how a user installs it, shown when it is missing
    default_model: ClassVar[str]
    min_version: ClassVar[tuple[int, ...]] = ()
    # Whether its own cost figure after a resume already counts the rounds before it (Claude Code's does).
    cumulative_cost: ClassVar[bool] = False
    version_args: ClassVar[tuple[str, ...]] = ("--version",)
    version_pattern: ClassVar[str] = r"(\d+(?:\.\d+)+)"  # its last group is the version
    # Models it asks for beside the run's own (Claude Code's background Haiku): each priced, listed in the README.
    side_models: ClassVar[tuple[str, ...]] = ()

    def __init__(self, model: str = ""):
        self.model = model or self.default_model

    # -- what subclasses say --------------------------------------------------------------------
    @property
    def provider(self) -> Provider:
        """Whose API the agent speaks for this model."""
        return "anthropic"

    def models(self) -> tuple[str, ...]:
        """The only models the relay forwards its requests for: the run's and its side models."""
        return (self.model, *self.side_models)

    def prepare(self, session: Session) -> None:
        """Write what the agent reads before it starts (its config under `session.home`), on the host."""

    @abstractmethod
    def command(self, session: Session, binary: Path) -> list[str]:
        """argv of one session, run in the workspace."""

    def env(self, session: Session) -> dict[str, str]:
        """Variables the agent needs beside the relay's; never a real key."""
        return {}

    @abstractmethod
    def read_result(self, stdout: str, session: Session) -> AgentResult:
        """The agent's own account of the session, from what it printed or wrote to `session.out`."""

    def feedback(self, checks_summary: str) -> str:
        """The instruction of a feedback round: our checks' findings on its change."""
        return ("perfagent graded the change you left in the working tree, and it did not pass:\n\n"
                f"{checks_summary}\n\nFix the change (revert any edit you cannot make safe), keep what passes, and "
                "reply with a short summary of what you changed and the evidence it is safe.")

    # -- shared ---------------------------------------------------------------------------------
    def locate(self) -> Path:
        """The agent's executable; AgentError with the install line when it is not on PATH."""
        found = shutil.which(self.binary)
        if not found:
            raise AgentError(f"{self.name}: `{self.binary}` not found on PATH; install it with: {self.install}")
        return Path(found)

    def version(self, binary: Path) -> str:
        """Its version string; AgentError when it cannot say or is older than `min_version`. Run with a
        throwaway HOME: whatever it writes at start stays out of the user's."""
        argv = [str(binary), *self.version_args]
        with tempfile.TemporaryDirectory(prefix="perfagent-version-") as home:
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=VERSION_TIMEOUT_S,
                                      stdin=subprocess.DEVNULL, env={**_plain_env(), "HOME": home})
            except (OSError, subprocess.SubprocessError) as e:
                raise AgentError(f"{self.name}: `{shlex.join(argv)}` failed: {type(e).__name__}: {e}") from None
        text = f"{proc.stdout}\n{proc.stderr}".strip()
        found = re.search(self.version_pattern, text)
        if proc.returncode != 0 or not found:
            raise AgentError(f"{self.name}: `{shlex.join(argv)}` said {text[-120:]!r} (exit {proc.returncode})")
        version = found.group(found.lastindex or 0)
        if self.min_version and tuple(int(p) for p in version.split(".")) < self.min_version:
            need = ".".join(map(str, self.min_version))
            raise AgentError(f"{self.name} {version} is too old: perfagent needs {need} or newer; {self.install}")
        return version

    def relay_env(self) -> dict[str, str]:
        """The agent's view of the network: the relay on its own loopback, a placeholder key, and the
        relay as the proxy for everything else (which it refuses and records)."""
        relay = f"http://127.0.0.1:{BRIDGE_PORT}"
        env = {"HTTP_PROXY": relay, "HTTPS_PROXY": relay, "http_proxy": relay, "https_proxy": relay,
               "ALL_PROXY": relay, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
        if self.provider == "anthropic":
            env |= {"ANTHROPIC_BASE_URL": relay, "ANTHROPIC_API_KEY": PLACEHOLDER_KEY}
        else:
            env |= {"OPENAI_BASE_URL": f"{relay}/v1", "OPENAI_API_KEY": PLACEHOLDER_KEY}
        return env

    def install_dirs(self, binary: Path) -> list[Path]:
        """Folders the sandbox must let it read: where the executable really lives (an npm or pipx
        install under a hidden home folder is otherwise invisible inside)."""
        real = Path(os.path.realpath(binary))
        package = next((p for p in real.parents if p.name == "node_modules"), None)
        return [package] if package is not None else [real.parent.parent]


def _plain_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL")}


def json_lines(text: str) -> list[dict[str, Any]]:
    """The lines of `text` that are JSON objects, in order (an agent's JSONL output; other lines skipped)."""
    return json_objects(line for line in map(str.strip, text.splitlines()) if line.startswith("{"))


def last_json_line(text: str, want: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The last line of `text` that is a JSON object (with the `want` items, if given)."""
    return next((v for v in reversed(json_lines(text)) if all(v.get(k) == w for k, w in (want or {}).items())), None)
