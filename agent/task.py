"""Task specs: one TOML file = one repo at a base commit + a goal + a correctness and a perf check.

Validation happens here, once, so every later stage can trust the task. Errors are one line
that names the file, the field and what is wrong: users fix task files by reading them. A task
is data: only its file and the paths it names are looked at here; whether `base` is a commit of
the repo is asked where the task is used (`agent.env.workspace.check_task_base`).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agent.errors import BadInput

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class TaskError(BadInput):
    """A task file that cannot be used; the message is a single line for the user."""


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SetupSpec(_Spec):
    """The task's own environment. `python` names an interpreter (a path, relative to the task
    file, or a name on PATH); `venv` lists the shell commands that fill a virtual environment made
    from it, built once per machine and reused while `python` and the commands stay the same;
    `command` runs in each new workspace, sandboxed and offline."""

    python: str | None = Field(default=None, min_length=1)
    venv: list[str] = []
    command: str | None = Field(default=None, min_length=1)
    timeout_s: float = Field(default=600, gt=0)

    @model_validator(mode="after")
    def _something(self) -> SetupSpec:
        if self.python is None and not self.venv and self.command is None:
            raise ValueError("give at least one of python, venv, command")
        if any(not c.strip() for c in self.venv):
            raise ValueError("venv: blank command")
        return self


_PLUGIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


class CorrectnessSpec(_Spec):
    command: str = Field(min_length=1)
    poison: bool = True
    # The uninitialised-read sanitizer, in the poisoned run: on wherever poison is.
    sanitize: bool | None = None
    # Opaque kernels ("module.function"): every tensor handed to one counts as read by the sanitizer.
    kernels: list[str] = []
    # Also run the command under compute-sanitizer's initcheck (uninitialised device memory reads; CUDA only).
    initcheck: bool = False
    # The pytest plugins the tests need, as `pytest -p NAME` takes them (a module, e.g. "xdist.plugin", or
    # an installed plugin's entry-point name, e.g. "xdist", "anyio"). Nothing else is loaded: the command
    # runs with PYTEST_DISABLE_PLUGIN_AUTOLOAD=1, so no installed plugin and none a patch ships as
    # package metadata (a *.dist-info/entry_points.txt on sys.path) joins in; these come as `-p NAME`
    # in PYTEST_ADDOPTS.
    plugins: list[str] = []
    timeout_s: float = Field(default=900, gt=0)

    @model_validator(mode="after")
    def _sanitize_needs_poison(self) -> CorrectnessSpec:
        if self.sanitize and not self.poison:
            raise ValueError("sanitize = true needs poison = true (the sanitizer runs in the poisoned run)")
        bad = [k for k in self.kernels if "." not in k.strip(".")]
        if bad:
            raise ValueError(f"kernels must be dotted names (module.function), not {', '.join(map(repr, bad))}")
        bad = [p for p in self.plugins if not _PLUGIN_NAME.match(p)]
        if bad:
            raise ValueError(f"plugins must be plugin names as `pytest -p` takes them, not {', '.join(map(repr, bad))}")
        return self

    @property
    def sanitizing(self) -> bool:
        return self.poison and self.sanitize is not False


class PerfSpec(_Spec):
    command: str = Field(min_length=1)
    metric: str = Field(min_length=1)
    direction: Literal["lower", "higher"] = "lower"
    min_effect: float = Field(default=0.03, gt=0, lt=1)
    timeout_s: float = Field(default=300, gt=0)
    # Timed calls per bench process: the metric's gain times this is what the harness's own clock
    # must see each bench process save (agent.checks.confirm). None: as many as the lines of the
    # metric a baseline process prints.
    calls: int | None = Field(default=None, ge=1)
    # A hint, not a bound: a speedup beyond it is confirmed only where the harness's clock sees a
    # saving that is positive, not merely one it cannot rule out (agent.checks.confirm).
    max_speedup: float = Field(default=10.0, gt=1)
    # A command that times one call, the first, in a fresh process (the bench with one repeat and no
    # warm-up). With it, a gain beyond max_speedup must show on the first call too: a gain that
    # appears only when the call repeats in one process is one cached across calls, which a server
    # that initialises once never sees (agent.checks.firstcall).
    first_call: str | None = Field(default=None, min_length=1)
    # Or the metric each bench process prints for its first call alone, timed apart from the rest: the
    # samples' own processes then give the first call, with no processes of its own (no time either).
    first_call_metric: str | None = Field(default=None, min_length=1)
    # The bench repeats its call in one process: every gain, not only one beyond the hint, is checked
    # on the first call.
    repeated_calls: bool = False
    # The most rounds a full check samples (None: 20, agent.checks.perf.FULL). A bench slow to run can be
    # sampled in fewer, which tell only larger effects apart; 7 is the fewest the signed-rank test can call.
    max_pairs: int | None = Field(default=None, ge=7)

    @model_validator(mode="after")
    def _repeats_need_a_first_call(self) -> PerfSpec:
        if self.first_call is not None and self.first_call_metric is not None:
            raise ValueError("first_call and first_call_metric are two ways to time the first call: name one")
        if self.repeated_calls and self.first_call is None and self.first_call_metric is None:
            raise ValueError("repeated_calls = true needs first_call (the command that times the first call) "
                             "or first_call_metric (the metric the bench prints for it)")
        return self


class ReferenceSpec(_Spec):
    patch: str = Field(min_length=1)


class BudgetSpec(_Spec):
    max_turns: int = Field(default=40, gt=0)
    max_cost_usd: float = Field(default=2.0, ge=0)  # 0: no budget (agent.models.budget)
    timeout_s: float = Field(default=1800, gt=0)


class TaskSpec(_Spec):
    """The TOML document as written; paths are still the author's strings."""

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    title: str = ""
    repo: str = Field(min_length=1)
    base: str = "HEAD"
    prompt: str = Field(min_length=1)
    focus: list[str] = []
    protected: list[str] = []
    requires_gpu: bool = False
    # Folders the task's commands read besides the checkout and their Python (model weights, a
    # dataset): every sandbox shows them read-only; nothing else outside the system folders exists there.
    read: list[str] = []
    setup: SetupSpec | None = None
    correctness: CorrectnessSpec
    perf: PerfSpec | None = None
    reference: ReferenceSpec | None = None
    budget: BudgetSpec = BudgetSpec()

    @field_validator("prompt")
    @classmethod
    def _prompt_not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be blank")
        return v


class Task(BaseModel):
    """A validated task with its paths resolved."""

    model_config = ConfigDict(frozen=True)

    spec: TaskSpec
    file: Path
    repo: str  # absolute path of a local repo/folder, or a git URL as written
    reference_patch: Path | None = None
    read: tuple[Path, ...] = ()  # spec.read, resolved

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def repo_is_url(self) -> bool:
        return is_git_url(self.repo)


def is_git_url(s: str) -> bool:
    return "://" in s or s.startswith("git@") or s.endswith(".git") and not Path(s).exists()


def resolve_near(file: Path, relative: str) -> Path | None:
    """Resolve a task-relative path: the task file's folder, then each parent, first hit wins.

    Task files live in `tasks/` but name `target_repo` or `tasks/reference/x.diff` from the
    project root; walking up keeps both spellings working without a separate root setting.
    """
    p = Path(relative).expanduser()
    if p.is_absolute():
        return p if p.exists() else None
    for folder in [file.parent, *file.parent.parents]:
        if (folder / p).exists():
            return (folder / p).resolve()
    return None


def _format_validation_error(file: Path, err: ValidationError) -> str:
    """Every error of the file, each "FILE: FIELD: problem", on one line joined by "; "."""
    out = []
    for e in err.errors():
        field = ".".join(str(x) for x in e["loc"]) or "(top level)"
        kind = e["type"]
        if kind == "extra_forbidden":
            what = "unknown key"
        elif kind == "missing":
            what = "missing required key"
        else:
            what = e["msg"]
            if "input" in e and not isinstance(e["input"], (dict, list)):
                what += f" (got {e['input']!r})"
        out.append(f"{file}: {field}: {what}")
    return "; ".join(out)


def load_task(path: str | Path) -> Task:
    """Parse, validate and resolve one task file; raise TaskError with a one-line message."""
    file = Path(path)
    if not file.is_file():
        raise TaskError(f"{file}: task file not found")
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise TaskError(f"{file}: not valid TOML: {e}") from None
    try:
        spec = TaskSpec.model_validate(data)
    except ValidationError as e:
        raise TaskError(_format_validation_error(file, e)) from None

    if is_git_url(spec.repo):
        repo = spec.repo
    else:
        found = resolve_near(file, spec.repo)
        if found is None or not found.is_dir():
            raise TaskError(f"{file}: repo: path not found: {spec.repo}")
        repo = str(found)

    reference = None
    if spec.reference is not None:
        reference = resolve_near(file, spec.reference.patch)
        if reference is None or not reference.is_file():
            raise TaskError(f"{file}: reference.patch: file not found: {spec.reference.patch}")
    read = []
    for folder in spec.read:
        found = resolve_near(file, folder)
        if found is None:
            raise TaskError(f"{file}: read: path not found: {folder}")
        read.append(found)
    return Task(spec=spec, file=file.resolve(), repo=repo, reference_patch=reference, read=tuple(read))


def task_files(path: str | Path) -> list[Path]:
    """Expand a task path: a task file, a task-set file (`tasks = [...]`), or a directory."""
    p = Path(path)
    if p.is_dir():
        files = []
        for f in sorted(p.glob("*.toml")):
            if _is_task_set(f):
                continue
            files.append(f)
        return files
    if not p.is_file():
        raise TaskError(f"{p}: no such task file, task set or directory")
    if _is_task_set(p):
        data = tomllib.loads(p.read_text(encoding="utf-8"))
        entries = data["tasks"]
        if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
            raise TaskError(f"{p}: tasks: must be a list of task file paths")
        return [(p.parent / e) for e in entries]
    return [p]


def _is_task_set(f: Path) -> bool:
    try:
        data = tomllib.loads(f.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError):
        return False
    return "tasks" in data and "id" not in data


def load_task_set(path: str | Path) -> list[Task | TaskError]:
    """Every task of a set, validated; invalid ones come back as their TaskError, in order."""
    out: list[Task | TaskError] = []
    for f in task_files(path):
        try:
            out.append(load_task(f))
        except TaskError as e:
            out.append(e)
    return out
