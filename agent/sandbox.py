"""Run one shell command in a workspace: timeout, process-group kill, capped output, no network.

Output goes to a temporary file rather than a pipe, so a background child that keeps the
stream open can neither hang us nor fill memory; we keep the head and the tail.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DEFAULT_MAX_OUTPUT = 30_000
# Variables the target's commands may see; API keys are deliberately not among them.
PASSTHROUGH_ENV = (
    "HOME", "LANG", "LC_ALL", "TERM", "TMPDIR", "USER", "CUDA_VISIBLE_DEVICES", "CUDA_HOME",
    "LD_LIBRARY_PATH", "VIRTUAL_ENV", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TORCH_HOME",
)


@dataclass(frozen=True)
class CommandResult:
    command: str
    exit_code: int
    output: str  # stdout and stderr interleaved, capped
    duration_s: float
    timed_out: bool
    cut_bytes: int  # how many bytes of output were dropped from the middle
    isolation: str  # "bwrap", "unshare" or "none"

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@lru_cache(maxsize=1)
def isolation_mode() -> str:
    """The strongest network isolation this machine allows, probed once."""
    if shutil.which("bwrap") and _probe(["bwrap", "--dev-bind", "/", "/", "--unshare-net", "true"]):
        return "bwrap"
    if shutil.which("unshare") and _probe(["unshare", "-n", "true"]):
        return "unshare"
    return "none"


def _probe(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def isolation_warning(mode: str) -> str | None:
    if mode == "none":
        return "no network isolation available (neither bwrap nor unshare -n works here): commands ran with network access"
    return None


def base_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A small, predictable environment: our Python first on PATH, no secrets."""
    env = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/bin:/bin")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def _cap(data: bytes, limit: int) -> tuple[str, int]:
    if len(data) <= limit:
        return data.decode("utf-8", "replace"), 0
    head, tail = data[: limit // 2], data[-(limit // 2):]
    cut = len(data) - len(head) - len(tail)
    text = (
        head.decode("utf-8", "replace")
        + f"\n[... {cut} bytes of output cut ...]\n"
        + tail.decode("utf-8", "replace")
    )
    return text, cut


def _wrap(command: str, mode: str) -> list[str]:
    shell = ["bash", "-c", command]
    if mode == "bwrap":
        return ["bwrap", "--dev-bind", "/", "/", "--unshare-net", "--die-with-parent", *shell]
    if mode == "unshare":
        return ["unshare", "-n", "--", *shell]
    return shell


def run_command(
    command: str,
    cwd: str | Path,
    *,
    timeout_s: float = 600,
    env: dict[str, str] | None = None,
    max_output: int = DEFAULT_MAX_OUTPUT,
    network: bool = False,
) -> CommandResult:
    """Run `command` with bash in `cwd`; never raises for the command's own failures."""
    mode = "none" if network else isolation_mode()
    start = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            _wrap(command, mode),
            cwd=str(cwd),
            env=env if env is not None else base_env(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: a timeout kills every descendant
        )
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(proc)
        duration = time.monotonic() - start
        out.seek(0)
        text, cut = _cap(out.read(), max_output)
    code = proc.returncode if not timed_out else -signal.SIGKILL
    if timed_out:
        text += f"\n[timed out after {timeout_s:g}s; process group killed]"
    return CommandResult(command, code, text, duration, timed_out, cut, mode)


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill whatever is left of the command's process group (stray background children too)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
