"""The task's own Python: an interpreter the task names, or a virtual environment built from its
`[setup] venv` commands and cached on this machine.

Users bring SGLang or vLLM checkouts that import only in their own environment, so every
command of a task (tests, bench, the agent's `run`) finds that environment's `python` first on
PATH. A venv takes minutes to fill and is the same for every run of the task: it is built once,
in a folder named after a hash of the interpreter and the commands, and reused until either
changes. Its commands come from the task (hand-written or imported from a record nobody read),
so each runs in the sandbox (agent.env.sandbox) with the network kept for the package index
but nothing of the user's: an environment made from an allow-list (no API keys), a scratch
HOME, TMPDIR and pip cache, only the venv writable, and of the task's folder only the files a
command names (`pip install -r requirements.txt`), read-only.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from agent.env.sandbox import HIDDEN_HOMES, PASSTHROUGH_ENV, SandboxSpec, isolation, run_command
from agent.task import SetupSpec, Task
from agent.util.files import empty_folder
from agent.errors import PerfagentError

READY = ".perfagent-ready"  # written last: a venv without it is a build that did not finish
MIN_VERSION = (3, 9)
# What a build step sees of the user's environment: locale, GPU and compiler choices, and how pip
# reaches the index the user chose. An allow-list, so API keys and any other secret stay out
# whatever they are named; HOME, TMPDIR and pip's cache are the build's own (`build_env`).
BUILD_ENV = tuple(k for k in PASSTHROUGH_ENV if k not in ("HOME", "TMPDIR", "VIRTUAL_ENV")) + (
    "LC_CTYPE", "LOGNAME", "CC", "CXX", "MAX_JOBS", "TORCH_CUDA_ARCH_LIST",
    "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_TRUSTED_HOST", "PIP_CERT", "PIP_DEFAULT_TIMEOUT",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
)


class InterpreterError(PerfagentError):
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
    _build(venv, base, setup, task_dir=task.file.parent, log=log)
    return Interpreter(bin_dir=venv / "bin", venv=venv)


def _resolve_python(task: Task, setup: SetupSpec) -> str:
    name = setup.python or sys.executable
    if "/" in name:
        path = _near(task.file, name)
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


def _near(file: Path, name: str) -> str | None:
    """`name` as resolve_near finds it (beside the task file, then each folder above), with the links
    of its folders resolved but not the program's own: a venv's `bin/python` is a link to the base
    interpreter, and only started through that link does it find its `pyvenv.cfg`, so its packages."""
    p = Path(name).expanduser()
    for place in [p] if p.is_absolute() else [f / p for f in [file.parent, *file.parent.parents]]:
        if place.exists():
            return os.path.join(os.path.realpath(place.parent), place.name)
    return None


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


def build_env(venv: Path, scratch: Path) -> dict[str, str]:
    """The environment of every build step: the allow-listed variables of ours, the venv first on
    PATH, and HOME, TMPDIR and pip's cache in the build's scratch folder (never the user's ~)."""
    env = {k: os.environ[k] for k in BUILD_ENV if k in os.environ}
    return env | {
        "HOME": str(scratch / "home"), "TMPDIR": str(scratch / "tmp"), "PIP_CACHE_DIR": str(scratch / "pip-cache"),
        "XDG_CACHE_HOME": str(scratch / "home" / ".cache"), "VIRTUAL_ENV": str(venv),
        "PATH": f"{venv / 'bin'}{os.pathsep}{path_without_own_venv()}",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONNOUSERSITE": "1",
    }


def _build(venv: Path, python: str, setup: SetupSpec, *, task_dir: Path, log: Callable[[str], None]) -> None:
    """Make and fill the venv once; concurrent runs wait on a lock instead of building it twice."""
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / READY).is_file():
            return
        scratch = venv.parent / f"{venv.name}.build"  # HOME, TMPDIR, pip's cache: on disk (torch is GBs)
        _remove(venv)
        _remove(scratch)
        logfile = venv.parent / f"{venv.name}.log"
        logfile.write_text("")
        start = time.monotonic()
        log(f"building the task's venv in {venv} from {python} (once on this machine)")
        mode = isolation().mode
        if mode != "bwrap":
            log(f"the venv build is not isolated (no bubblewrap; sandbox: {mode}): its commands run on this machine "
                f"as you, with only an allow-listed environment")
        executable, prefixes = _base(python)
        for folder in (venv, scratch / "home", scratch / "tmp", scratch / "pip-cache"):
            folder.mkdir(parents=True)
        env = build_env(venv, scratch)
        steps = [f"{shlex.quote(executable)} -m venv {shlex.quote(str(venv))}", *setup.venv]
        try:
            for step in steps:
                log(f"venv: {step}")
                with open(logfile, "a") as out:
                    out.write(f"$ {step}\n")
                named = _task_paths(step, task_dir)
                code = _step(step, cwd=venv, env=env, logfile=logfile, timeout_s=setup.timeout_s, log=log,
                             writable=(scratch,), readable=(*prefixes, *named), network=True,
                             chdir=Path(os.path.realpath(task_dir)) if named else None)
                if code != 0:
                    _remove(venv)
                    why = f"timed out after {setup.timeout_s:g}s" if code is None else f"exit {code}"
                    raise InterpreterError(f"setup.venv: `{step}` failed ({why}): {_last_line(logfile)} "
                                           f"(full log: {logfile})")
        finally:
            _remove(scratch)
        (venv / READY).write_text(json.dumps({"python": python, "commands": setup.venv,
                                              "seconds": round(time.monotonic() - start, 1)}))
        log(f"venv ready in {time.monotonic() - start:.0f}s")


def _base(python: str) -> tuple[str, tuple[Path, ...]]:
    """The program `python` runs (a pyenv shim is a script that picks one from files under ~) and the
    prefixes it needs, which the sandbox must show (pyenv's are under a hidden home)."""
    try:
        out = subprocess.run([python, "-c", "import sys; print(sys.executable, sys.prefix, sys.base_prefix, "
                              "sys.exec_prefix, sep='\\n')"], capture_output=True, text=True, timeout=60)
        lines = out.stdout.splitlines() if out.returncode == 0 else []
    except (OSError, subprocess.SubprocessError):
        lines = []
    executable = lines[0] if lines and os.path.isabs(lines[0]) and os.access(lines[0], os.X_OK) else python
    prefixes = {Path(os.path.realpath(p)) for p in lines[1:] if os.path.isabs(p)}
    prefixes.add(Path(os.path.realpath(executable)).parent.parent)
    return executable, tuple(sorted(prefixes))


def _task_paths(step: str, folder: Path) -> tuple[Path, ...]:
    """The files and folders of the task's folder that `step` names (`-r requirements.txt`, `./wheels`):
    shown read-only, and the rest of the folder (other tasks, reference patches) stays out. Not one:
    a name leading out of the folder (`../`, a link), through a hidden name (`.ssh`, `.git`), or to a
    folder holding a home (a task file kept in ~ must not open ~ to its commands)."""
    try:
        words = shlex.split(step)
    except ValueError:
        words = step.split()
    root = Path(os.path.realpath(folder))
    homes = [Path(os.path.realpath(h)) for h in (*HIDDEN_HOMES, os.path.expanduser("~"))]
    out: list[Path] = []
    for part in (p for word in words for p in word.split("=")):
        for name in (part, part[2:] if part.startswith("-") else ""):  # -rrequirements.txt
            if not name or name.startswith("-"):
                continue
            place = Path(os.path.normpath(root / name))
            real = Path(os.path.realpath(place))
            inside = all(p == root or root in p.parents for p in (place, real))
            if not inside or not os.path.exists(real) or real in out:
                continue
            hidden = any(n.startswith(".") for p in (place, real) for n in p.relative_to(root).parts)
            if not hidden and not any(h == real or real in h.parents for h in homes):
                out.append(real)
    return tuple(out)


def _remove(folder: Path) -> None:
    """Remove a folder a build step could write to, whatever modes it left there; what stays is left."""
    try:
        empty_folder(folder)
        folder.rmdir()
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)


def _step(step: str, *, cwd: Path, env: dict[str, str], logfile: Path, timeout_s: float,
          log: Callable[[str], None], tick_s: float = 10.0, writable: tuple[Path, ...] = (),
          readable: tuple[Path, ...] = (), network: bool = False,
          chdir: Path | None = None) -> int | None:
    """Run one build step sealed, in `cwd` (or `chdir`), its output appended to the log; every `tick_s`
    say how long it has run and its last line (a first SGLang build is minutes of pip). Its exit code,
    None when it timed out (then every process of it is killed)."""
    command = f"exec >>{shlex.quote(str(logfile))} 2>&1\n"
    if chdir is not None:
        command += f"cd {shlex.quote(str(chdir))} || exit 1\n"
    done = threading.Event()

    def tell() -> None:
        start = time.monotonic()
        while not done.wait(tick_s):
            log(f"venv: {time.monotonic() - start:.0f}s: {_last_line(logfile)}")

    ticker = threading.Thread(target=tell, daemon=True, name="venv-progress")
    ticker.start()
    try:
        sandbox = SandboxSpec(readable=tuple(readable), writable=(logfile, *writable), network=network)
        res = run_command(command + step, cwd, sandbox=sandbox, timeout_s=timeout_s, env=env)
    finally:
        done.set()
        ticker.join()
    if res.output.strip() and not res.ok:  # what the sandbox itself said (bwrap's own errors)
        with open(logfile, "a") as out:
            out.write(res.output.rstrip() + "\n")
    if res.escaped:  # a build that leaves processes running is not a venv to trust
        with open(logfile, "a") as out:
            out.write(res.escaped + "\n")
        return res.exit_code or 1
    return None if res.timed_out else res.exit_code


def _last_line(logfile: Path) -> str:
    lines = [line for line in logfile.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"
