"""Running the task's correctness command: plain, and poisoned (uninitialised memory = NaN).

Both runs see the workspace first on PYTHONPATH and our sitecustomize before it; the
environment comes from `base_env`, so API keys never reach the target's code. pytest loads
only the plugins the task names (`pytest_env`), never one found through installed metadata.
"""

from __future__ import annotations

import re
import secrets
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from agent.checks.evaluation import CommandRun
from agent.env.sandbox import CommandResult, base_env
from agent.util.text import tail

if TYPE_CHECKING:
    from agent.checks.launch import Launcher

TAIL_CHARS = 4000
# pytest's summary (`FAILED id - why`), any script that prints lines the same way, and unittest.
_SUMMARY = re.compile(r"^(?:FAILED|ERROR) (\S+)(?: - |\s*$)", re.M)
_VERBOSE = re.compile(r"^(\S+::\S+) (?:FAILED|ERROR)\b", re.M)
_UNITTEST = re.compile(r"^(?:FAIL|ERROR): (\w+ \([\w.]+\))", re.M)
# an exception's line as a traceback or pytest (`E   `) ends it, and pytest's header of a collection error
_EXCEPTION = re.compile(r"^(?:E\s+)?((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception): .*\S)\s*$")
_COLLECTING = re.compile(r"ERROR collecting (\S+)")
# CUBLAS_WORKSPACE_CONFIG: deterministic cuBLAS, else deterministic mode warns on every matmul.
POISON_ENV = {"PERFAGENT_POISON": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}


def install_hook(folder: Path) -> Path:
    """Put the harness's sitecustomize.py (and the sanitizer it starts, under a name no code under test
    can guess: the hook loads it by path) into `folder` (created)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(__file__).with_name("check_hook.py"), folder / "sitecustomize.py")
    for old in folder.glob("_s*.py"):
        old.unlink()
    shutil.copyfile(Path(__file__).with_name("sanitize_hook.py"), folder / f"_s{secrets.token_hex(8)}.py")
    return folder


def pytest_env(plugins: Iterable[str] = ()) -> dict[str, str]:
    """pytest loads no plugin it finds installed (nor one a patch ships as package metadata on
    sys.path: a `*.dist-info/entry_points.txt` in the checkout): only `plugins`, the task's."""
    return {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTEST_ADDOPTS": " ".join(f"-p {p}" for p in plugins)}


def check_env(root: Path, hook_dir: Path, *, poison: bool = False, bin_dir: Path | None = None,
              plugins: Iterable[str] = ()) -> dict[str, str]:
    extra = {"PYTHONPATH": f"{hook_dir}:{root}", **pytest_env(plugins)}
    if poison:
        extra |= POISON_ENV
    return base_env(extra, bin_dir=bin_dir)


def failing_tests(output: str) -> list[str]:
    """What failed, named as the test runner names it: pytest node ids (`-q`/`-r` summaries, `-v`
    lines), unittest's `FAIL: test (module.Class)`, or a script's own `FAILED <name> - <why>` lines."""
    ids = _SUMMARY.findall(output) + _VERBOSE.findall(output) + _UNITTEST.findall(output)
    return list(dict.fromkeys(i for i in ids if not i.endswith(":")))


def first_error(output: str) -> str | None:
    """The first line of `output` that says why it failed: an exception's line (pytest's `E   ...`
    too), with the file pytest was collecting when it came; read from the whole output, since the
    summary at its end ("2 errors in 0.36s") names no cause, and the tail kept may not hold it."""
    collecting = None
    for line in output.splitlines():
        found = _COLLECTING.search(line)
        if found:
            collecting = found.group(1)
            continue
        found = _EXCEPTION.match(line)
        if found:
            where = f" (collecting {collecting})" if collecting else ""
            return found.group(1)[:300] + where
    return None


def to_run(name: str, res: CommandResult) -> CommandRun:
    return CommandRun(name=name, command=res.command, exit_code=res.exit_code, passed=res.ok,
                      timed_out=res.timed_out, duration_s=round(res.duration_s, 3),
                      output_tail=tail(res.output, TAIL_CHARS),
                      failing_tests=[] if res.ok else failing_tests(res.output), escaped=res.escaped,
                      first_error=None if res.ok else first_error(res.output))


def run_check(name: str, command: str, launcher: "Launcher", *, timeout_s: float, poison: bool = False,
              lines_dir: Path | None = None, sanitize_dir: Path | None = None, key: str | None = None,
              shared: tuple[Path, ...] = (), start_env: dict[str, str] | None = None) -> CommandRun:
    """One run of a check command; with `lines_dir`, its processes record the changed lines they
    execute there (agent.checks.coverage); with `sanitize_dir`, the reads of uninitialised memory
    they make (agent.checks.sanitizer); their rows signed with `key` (agent.checks.records).
    `shared`: another run's folders, whose warm server this one shares; `start_env`: Launcher.run's."""
    extra: dict[str, str] = dict(POISON_ENV) if poison else {}
    if lines_dir is not None:
        extra["PERFAGENT_LINES"] = str(lines_dir)
    if sanitize_dir is not None:
        extra["PERFAGENT_SANITIZE"] = str(sanitize_dir)
    writable = tuple(d for d in (lines_dir, sanitize_dir) if d is not None)
    res = launcher.run(command, timeout_s=timeout_s, env=extra, writable=writable, key=key, shared=shared,
                       start_env=start_env)
    return to_run(name, res)
