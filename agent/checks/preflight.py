"""The task on its unchanged base: its tests (plain and poisoned) and its bench, once.

A task whose own commands cannot pass (an interpreter under a folder the sandbox hides, a venv
it cannot see, a bench that prints no metric) would fail every change and blame the change.
So a run checks its task this way before the agent starts, and a check whose candidate fails
its tests asks the same question before it blames the candidate. A base that passes is
remembered on this machine per task file, base commit, interpreter and sandbox, so only the
first run of a task pays for it; a failing one is run again next time (the user may fix it). The
record is sealed with this user's key (agent.util.seal): one that does not verify is run again.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ValidationError

from agent.checks.correctness import POISON_ENV, to_run
from agent.checks.evaluation import CommandRun
from agent.checks.perf import parse_metric
from agent.env.interpreter import Interpreter, cache_dir
from agent.env.sandbox import SandboxSpec, hidden_paths, isolation
from agent.util.seal import SealError, read_sealed, write_sealed_json
from agent.util.text import first_line, tail

if TYPE_CHECKING:
    from agent.checks.launch import Launcher
    from agent.task import Task, TaskSpec


class BaseRuns(BaseModel):
    """What the task's own commands did on its unchanged base (the cached record)."""

    key: str
    plain: CommandRun
    poison: CommandRun | None = None
    bench: CommandRun | None = None
    metric: float | None = None  # the bench's value there
    seconds: float = 0.0


def run_base(spec: TaskSpec, launcher: Launcher, key: str) -> BaseRuns:
    """Run the task's tests (plain, and poisoned where it asks) and its bench once with `launcher` (the
    unchanged base's): together where they start cold, one after another where one warm interpreter serves them."""
    tests, perf = spec.correctness, spec.perf
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=3) as pool:
        plain = pool.submit(launcher.run, tests.command, timeout_s=tests.timeout_s)
        poison = pool.submit(launcher.run, tests.command, timeout_s=tests.timeout_s,
                             env=POISON_ENV) if tests.poison else None
        bench = pool.submit(launcher.run, perf.command, timeout_s=perf.timeout_s) if perf else None
        runs = BaseRuns(key=key, plain=to_run("plain", plain.result()),
                        poison=to_run("poison", poison.result()) if poison else None,
                        bench=to_run("bench", bench.result()) if bench else None)
    if bench is not None and runs.bench is not None and runs.bench.passed and perf is not None:
        try:
            runs.metric = parse_metric(bench.result().output, perf.metric).value
        except ValueError as e:
            runs.bench = runs.bench.model_copy(update={"passed": False, "output_tail": str(e)})
    runs.seconds = round(time.monotonic() - start, 2)
    return runs


def broken(runs: BaseRuns, root: Path, env: dict[str, str], sandbox: SandboxSpec = SandboxSpec()) -> str | None:
    """Why the task cannot be checked, from what failed on its base in `root` (None: nothing did)."""
    for what, run in (("tests", runs.plain), ("tests with uninitialised memory poisoned", runs.poison),
                      ("bench", runs.bench)):
        if run is not None and not run.passed:
            return (f"the task cannot be checked: its {what} fail on the unchanged base "
                    f"({failure(run, root, env, sandbox)})")
    return None


def failure(run: CommandRun, root: Path, env: dict[str, str], sandbox: SandboxSpec = SandboxSpec()) -> str:
    """One line on a failed command: its exit named for what it is, the paths it names that the
    sandbox (started in `root` with `env`, as `sandbox` says) hides and how to show them, else the first
    error it printed (agent.checks.correctness.first_error) and its last line."""
    if run.timed_out:
        return f"`{run.command}` timed out after {run.duration_s:g}s"
    meaning = {126: "found but not executable", 127: "command not found"}.get(run.exit_code)
    said = f"`{run.command}` exit {run.exit_code}" + (f" ({meaning})" if meaning else "")
    hidden = hidden_names(run.command, root, env, sandbox, found_on_host=run.exit_code == 127)
    if hidden:
        return (f"{said}; it names {', '.join(hidden)}, which the checks' sandbox does not show (there: system "
                f"folders, the checkout and the task's Python): make it the task's `[setup] python`, or list "
                f"its folder in the task's `read`")
    last = first_line(tail(run.output_tail.strip(), 300).splitlines()[-1]) if run.output_tail.strip() else ""
    if run.first_error and run.first_error != last:  # the cause first: a summary ("2 errors") names none
        return f"{said}: {run.first_error}" + (f" (last line: {last})" if last else "")
    return said + (f": {last}" if last else "")


def hidden_names(command: str, root: Path, env: dict[str, str], sandbox: SandboxSpec = SandboxSpec(), *,
                 found_on_host: bool = False) -> list[str]:
    """The paths `command` names that its sandbox hides; with `found_on_host` (it was not found in
    there), also where the host's PATH finds its first word, when the sandbox hides that."""
    named = hidden_paths(command, root, env, sandbox)
    try:
        first = shlex.split(command)[0] if command.strip() else ""
    except ValueError:
        first = ""
    found = shutil.which(first) if found_on_host and first and "/" not in first else None
    return named + [p for p in (hidden_paths(found, root, env, sandbox) if found else []) if p not in named]


def base_key(task: Task, commit: str, interpreter: Interpreter, runner: str = "Sandboxed") -> str:
    """Changes whenever the task file, its base commit, its interpreter, the sandbox or the command runner
    (agent.env.runners: a recorded runner's answers never stand for real runs) does."""
    python = os.path.realpath(interpreter.python)
    doc = {"task": hashlib.sha256(task.file.read_bytes()).hexdigest(), "commit": commit, "python": python,
           "stamp": os.stat(python).st_mtime_ns if os.path.exists(python) else 0, "sandbox": isolation().mode,
           **({"runner": runner} if runner != "Sandboxed" else {}),
           "venv": str(interpreter.venv or ""), "bin": str(interpreter.bin_dir or "")}  # a venv named by its python
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:20]


def _cache_file(key: str) -> Path:
    return cache_dir() / "bases" / f"{key}.json"


def cached(key: str, log: Callable[[str], None] = lambda _: None) -> BaseRuns | None:
    """The record of a base that passed under `key`, if this machine has one whose seal verifies
    (agent.util.seal): an edited record would skip the base's check, or blame the task for a change."""
    path = _cache_file(key)
    try:
        runs = BaseRuns.model_validate_json(read_sealed(path))
    except SealError:
        log("the remembered record of the task's base is not sealed by this machine's perfagent: not trusted")
        return None
    except (OSError, ValidationError):
        return None
    return runs if runs.key == key else None


@contextmanager
def held(key: str) -> Iterator[None]:
    """One process at a time checks a base: the others wait, then find its record (a lock file per key)."""
    path = _cache_file(key).with_suffix(".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def remember(runs: BaseRuns) -> None:
    write_sealed_json(_cache_file(runs.key), runs.model_dump(mode="json"))
