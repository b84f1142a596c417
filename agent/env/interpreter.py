"""The task's own Python: an interpreter the task names, or a virtual environment built from its
`[setup] venv` commands and cached on this machine.

Users bring SGLang or vLLM checkouts that import only in their own environment, so every
command of a task (tests, bench, the agent's `run`) finds that environment's `python` first on
PATH. A venv takes minutes to fill and is the same for every run of the task: it is built once,
outside the sandbox (its commands need the package index), in a folder named after a hash of
the interpreter and the commands, and reused until either changes.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable

from agent.task import SetupSpec, Task, resolve_near

READY = ".perfagent-ready"  # written last: a venv without it is a build that did not finish
MIN_VERSION = (3, 9)


class InterpreterError(Exception):
    """The task's interpreter is missing or its venv could not be built; the message is one line."""


@dataclass(frozen=True)
class Interpreter:
    """What a task's commands run with: `bin_dir` first on PATH (None: perfagent's own Python)."""

    bin_dir: Path | None = None
    venv: Path | None = None

    @property
    def python(self) -> str:
        return str(self.bin_dir / "python") if self.bin_dir is not None else sys.executable


def cache_dir() -> Path:
    return Path(os.environ.get("PERFAGENT_CACHE_DIR") or Path.home() / ".cache" / "perfagent")


def prepare(task: Task, *, log: Callable[[str], None] = lambda _: None, cache: Path | None = None) -> Interpreter:
    """The task's interpreter, building its venv first if the cache does not have it yet."""
    setup = task.spec.setup
    if setup is None or (setup.python is None and not setup.venv):
        return Interpreter()
    base = _resolve_python(task, setup)
    if setup.python and "/" not in setup.python:
        log(f"the task's python: {setup.python} is {base}")
    cache = cache or cache_dir()
    if not setup.venv:
        return Interpreter(bin_dir=_named(base, cache))
    venv = cache / "venvs" / venv_key(base, setup.venv)
    _build(venv, base, setup, cwd=task.file.parent, log=log)
    return Interpreter(bin_dir=venv / "bin", venv=venv)


def _resolve_python(task: Task, setup: SetupSpec) -> str:
    name = setup.python or sys.executable
    if "/" in name:
        found = resolve_near(task.file, name)
        path = str(found) if found is not None else None
    else:
        path = shutil.which(name, path=path_without_own_venv())
    if path is None or not os.access(path, os.X_OK):
        raise InterpreterError(f"{task.file}: setup.python: interpreter not found: {name}")
    try:
        out = subprocess.run([path, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True,
                             text=True, timeout=60)
        version = tuple(int(x) for x in out.stdout.split())
    except (OSError, ValueError, subprocess.SubprocessError):
        version = ()
    if len(version) != 2:
        raise InterpreterError(f"{task.file}: setup.python: {path} does not run as a Python interpreter")
    if version < MIN_VERSION:
        raise InterpreterError(f"{task.file}: setup.python: {path} is Python {version[0]}.{version[1]}; "
                               f"3.9 or newer is needed")
    return os.path.abspath(path)


def path_without_own_venv() -> str:
    """PATH without perfagent's own virtual environment: a task's `python = "python3"` means the
    machine's (or the user's active) Python, not the one perfagent happens to be installed in."""
    own = Path(sys.prefix).resolve() if sys.prefix != sys.base_prefix else None
    entries = os.environ.get("PATH", os.defpath).split(os.pathsep)
    return os.pathsep.join(e for e in entries
                           if own is None or not (Path(e).resolve() == own or own in Path(e).resolve().parents))


def _named(python: str, cache: Path) -> Path:
    """A folder whose `python` is the named interpreter: its own folder when that already holds a
    `python` that is the same program (a venv's bin), else a folder of links made for it."""
    here = Path(python).parent
    if os.path.realpath(here / "python") == os.path.realpath(python):
        return here
    links = cache / "python" / hashlib.sha256(python.encode()).hexdigest()[:16]
    links.mkdir(parents=True, exist_ok=True)
    for name in ("python", "python3"):
        link = links / name
        if os.path.realpath(link) != os.path.realpath(python):
            tmp = links / f".{name}.{os.getpid()}"
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(python)
            tmp.replace(link)
    return links


def venv_key(python: str, commands: list[str]) -> str:
    """The cache's name for a venv: changes whenever the interpreter or a command does."""
    real = os.path.realpath(python)
    stamp = os.stat(real).st_mtime_ns if os.path.exists(real) else 0
    doc = json.dumps({"python": python, "real": real, "stamp": stamp, "commands": commands})
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


def _build(venv: Path, python: str, setup: SetupSpec, *, cwd: Path, log: Callable[[str], None]) -> None:
    """Make and fill the venv once; concurrent runs wait on a lock instead of building it twice."""
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / READY).is_file():
            return
        shutil.rmtree(venv, ignore_errors=True)
        logfile = venv.parent / f"{venv.name}.log"
        start = time.monotonic()
        log(f"building the task's venv in {venv} from {python} (once on this machine)")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env |= {"VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
                "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        steps = [f"{shlex.quote(python)} -m venv {shlex.quote(str(venv))}", *setup.venv]
        with open(logfile, "w") as out:
            for step in steps:
                log(f"venv: {step}")
                out.write(f"$ {step}\n")
                out.flush()
                code = _step(step, cwd=cwd, env=env, out=out, logfile=logfile, timeout_s=setup.timeout_s, log=log)
                if code != 0:
                    shutil.rmtree(venv, ignore_errors=True)
                    why = f"timed out after {setup.timeout_s:g}s" if code is None else f"exit {code}"
                    raise InterpreterError(f"setup.venv: `{step}` failed ({why}): {_last_line(logfile)} "
                                           f"(full log: {logfile})")
        (venv / READY).write_text(json.dumps({"python": python, "commands": setup.venv,
                                              "seconds": round(time.monotonic() - start, 1)}))
        log(f"venv ready in {time.monotonic() - start:.0f}s")


def _step(step: str, *, cwd: Path, env: dict[str, str], out: IO[str], logfile: Path, timeout_s: float,
          log: Callable[[str], None], tick_s: float = 10.0) -> int | None:
    """Run one build step into the log; every `tick_s` say how long it has run and its last line (a
    first SGLang build is minutes of pip). Its exit code, None when it timed out."""
    proc = subprocess.Popen(["bash", "-c", step], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    start = time.monotonic()
    while True:
        try:
            return proc.wait(timeout=tick_s)
        except subprocess.TimeoutExpired:
            ran = time.monotonic() - start
            if ran > timeout_s:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return None
            log(f"venv: {ran:.0f}s: {_last_line(logfile)}")


def _last_line(logfile: Path) -> str:
    lines = [line for line in logfile.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"
