"""The checkouts a patch is measured in, and what they share: the baseline (base as it is), the
candidate (base plus the patch, one folder reset between evaluations), the reference (base plus
the task's expert patch), the task's interpreter, its setup, the hook folder and the machine probe.

The baseline and reference are made once per checker and reused; each candidate is a clean
checkout of base, so nothing from an earlier evaluation leaks in.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Callable

from agent.checks import preflight, sanitizer
from agent.checks.correctness import check_env, install_hook, run_check, to_run
from agent.checks.environment import probe
from agent.checks.evaluation import CommandRun, Environment
from agent.checks.initcheck import Initcheck
from agent.checks.integrity import installed_top_level_modules
from agent.checks.launch import Launcher
from agent.checks.records import new_key
from agent.checks.verdicts import CheckError
from agent.env.interpreter import Interpreter, InterpreterError
from agent.env.interpreter import prepare as prepare_interpreter
from agent.env.runners import SANDBOXED, CommandRunner
from agent.env.sandbox import SandboxSpec, base_env
from agent.env.workspace import PatchError, Workspace
from agent.task import Task
from agent.util.files import empty_folder

# Files that change what the tests check without being tests: always protected, on top of the task's list.
ALWAYS_PROTECTED = ["conftest.py", "pytest.ini", "sitecustomize.py", "usercustomize.py"]


class TaskBroken(CheckError):
    """The task's own commands fail on its unchanged base: nothing is graded, whatever the change."""

    exit_code = 1  # not the input's fault, nor a change's


class Sides:
    def __init__(self, task: Task, workdir: Path, *, log: Callable[[str], None], warm: bool = True,
                 runner: CommandRunner = SANDBOXED):
        self.task = task
        self.workdir = Path(workdir)
        self.log = log
        self.warm = warm  # fork test processes from a warm interpreter where possible
        self.sandbox = SandboxSpec.for_task(task)  # what every command of the task may see, passed to each
        self.runner = runner  # how each cold command runs (agent.env.runners): sealed, or recorded in tests
        self._baseline: Workspace | None = None
        self._reference: Workspace | str | None = None  # a workspace, or why there is none
        self._env: Environment | None = None
        self._hook: Path | None = None
        self._installed: frozenset[str] | None = None  # top-level modules the target's interpreter has
        self._interpreter: Interpreter | None = None  # the task's Python (its own venv, if it names one)
        self._slot: Workspace | None = None  # the candidate's folder, reset in place between evaluations
        self._tests: Launcher | None = None  # the slot's test processes (its warm interpreters)
        self._initcheck: Initcheck | None = None  # compute-sanitizer runs, the baseline's kept
        self._bench_at_base: CommandRun | None = None
        self._base_runs: preflight.BaseRuns | None = None

    @property
    def protected(self) -> list[str]:
        return [*self.task.spec.protected, *ALWAYS_PROTECTED]

    def _side_dir(self, side: str) -> Path:
        """Every side's checkout at a path of the same length and the same name (<work>/side-b/repo,
        side-c, side-r), so no side's processes get a longer environment or sys.path than another's:
        such differences alone can shift timings by a percent or two."""
        return self.workdir / f"side-{side[0]}" / "repo"

    def interpreter(self) -> Interpreter:
        """The task's Python, its venv built on first use; CheckError when it cannot be had."""
        if self._interpreter is None:
            try:
                self._interpreter = prepare_interpreter(self.task, log=self.log)
            except InterpreterError as e:
                raise CheckError(str(e)) from None
        return self._interpreter

    def baseline(self) -> Workspace:
        if self._baseline is None:
            self.workdir.mkdir(parents=True, exist_ok=True)
            dest = self._side_dir("baseline")
            shutil.rmtree(dest, ignore_errors=True)
            self.log(f"creating the baseline workspace at {self.task.spec.base}")
            ws = Workspace.create(self.task.repo, self.task.spec.base, dest)
            setup = self.setup(ws)
            if setup is not None and not setup.passed:
                ws.cleanup()
                why = preflight.failure(setup, ws.root, self.command_env(ws.root), self.sandbox)
                raise TaskBroken(f"the task cannot be checked: its setup fails on the unchanged base ({why})")
            self._baseline = ws
        return self._baseline

    def check_base(self) -> preflight.BaseRuns:
        """The task's tests and bench on the unchanged base (once, and cached on this machine where they
        pass); TaskBroken when they fail, since every change would then fail and be blamed."""
        if self._base_runs is None:
            base = self.baseline()
            key = preflight.base_key(self.task, base.base_commit, self.interpreter(), type(self.runner).__name__)
            with preflight.held(key):  # a batch's other jobs of this task wait for this answer, then read it
                runs = preflight.cached(key, self.log)
                if runs is None:
                    self.log("checking the task on its unchanged base: its tests and bench, once")
                    launcher = self._launcher(base.root, warm=self.warm)
                    try:
                        runs = preflight.run_base(self.task.spec, launcher, key)
                    finally:
                        launcher.close()
                why = preflight.broken(runs, base.root, self.command_env(base.root), self.sandbox)
                if why is not None:
                    raise TaskBroken(why)
                preflight.remember(runs)
            self._base_runs = runs
        return self._base_runs

    def candidate(self, patch: str, *, fresh: bool = False) -> Workspace:
        """Base plus `patch`, in one folder that serves every evaluation: reset in place, so the warm
        interpreters bound to it (and their torch import) outlive one evaluation. Their scratch places
        are wiped after every run (agent.checks.launch); `fresh` (a full evaluation: the one that is
        graded) also replaces them with new ones, which no earlier candidate's code has run in."""
        base = self.baseline()
        if self._slot is None:
            dest = self._side_dir("candidate")
            shutil.rmtree(dest, ignore_errors=True)
            self._slot = Workspace.create(base.root, base.base_commit, dest)
            self._tests = None
        if self._tests is None or (fresh and self._tests.used):
            if self._tests is not None:
                self._tests.close()
            self._tests = self._launcher(self._slot.root, warm=self.warm)
        try:
            self._slot.apply_patch(patch)
        except PatchError:
            self.scrub()
            raise
        return self._slot

    def tests(self) -> Launcher:
        """The candidate's test processes."""
        assert self._tests is not None, "no candidate yet"
        return self._tests

    def scrub(self) -> None:
        """Leave nothing of this candidate for the next: files (ignored ones too) and coverage data.
        A slot that will not come clean is dropped with its interpreters; the next one is new."""
        for folder in ("coverage", "sanitizer", "bench-coverage", "bench-sanitizer"):  # emptied, not removed:
            # a warm interpreter has them mounted; what will not go, the next check's preparing says
            with contextlib.suppress(OSError):
                empty_folder(self.workdir / folder)
        if self._slot is not None and not self._slot.scrub():
            self._drop_slot()

    def _drop_slot(self) -> None:
        if self._tests is not None:
            self._tests.close()
        if self._slot is not None:
            self._slot.cleanup()
        self._slot = self._tests = None

    def reference(self) -> Workspace | None:
        """The reference checkout, or None (`reference_missing` says why)."""
        if self._reference is None:
            if self.task.reference_patch is None:
                self._reference = "the task has no reference patch"
            else:
                base = self.baseline()
                dest = self._side_dir("reference")
                shutil.rmtree(dest, ignore_errors=True)
                ws = Workspace.create(base.root, base.base_commit, dest)
                try:
                    ws.apply_patch(self.task.reference_patch.read_text())
                except PatchError as e:
                    ws.cleanup()
                    self._reference = f"reference patch does not apply: {e}"
                else:
                    ws.restore_paths(self.protected)
                    setup = self.setup(ws)
                    self._reference = ws if setup is None or setup.passed else "setup failed on the reference patch"
        return self._reference if isinstance(self._reference, Workspace) else None

    @property
    def reference_missing(self) -> str | None:
        return self._reference if isinstance(self._reference, str) else None

    def setup(self, ws: Workspace) -> CommandRun | None:
        spec = self.task.spec.setup
        if spec is None or spec.command is None:
            return None
        self.log(f"setup: {spec.command}")
        return to_run("setup", self.runner.run(spec.command, ws.root, sandbox=self.sandbox, timeout_s=spec.timeout_s,
                                               env=self.command_env(ws.root)))

    def command_env(self, root: Path) -> dict[str, str]:
        """The environment of a task command that is not a check (its setup) in checkout `root`."""
        return base_env({"PYTHONPATH": str(root)}, bin_dir=self.interpreter().bin_dir)

    def environment(self) -> Environment:
        if self._env is None:
            self._env = probe(self.baseline().root, self.interpreter().bin_dir, self.sandbox, self.runner)
        return self._env

    def installed(self) -> frozenset[str]:
        """Top-level modules the task's interpreter has: a patch's module of the same name shadows one."""
        if self._installed is None:
            try:
                self._installed = installed_top_level_modules("python", base_env(bin_dir=self.interpreter().bin_dir))
            except RuntimeError as e:
                raise CheckError(str(e)) from None
        return self._installed

    def test_env(self, root: Path) -> dict[str, str]:
        """The environment the correctness command runs in, in checkout `root`."""
        if self._hook is None:
            self._hook = install_hook(self.workdir / "hook")
        return check_env(root, self._hook, bin_dir=self.interpreter().bin_dir,
                         plugins=self.task.spec.correctness.plugins)

    def _launcher(self, root: Path, *, warm: bool) -> Launcher:
        """Test processes in checkout `root`, in the task's sandbox, through this side's runner."""
        return Launcher(root, self.test_env(root), sandbox=self.sandbox, runner=self.runner, warm=warm, log=self.log)

    def bench_at_base(self) -> CommandRun:
        """The task's bench on the unchanged base under the poisoned run's instruments (once): whether a
        candidate's bench failing there is the candidate's doing."""
        if self._bench_at_base is None:
            perf = self.task.spec.perf
            assert perf is not None
            root = self.baseline().root
            reads = sanitizer.prepare(self.workdir / "bench-base", root, [], self.task.spec.correctness.kernels)
            launcher = self._launcher(root, warm=False)
            try:
                self._bench_at_base = run_check("bench at base", perf.command, launcher, timeout_s=perf.timeout_s,
                                                poison=True, sanitize_dir=reads, key=new_key())
            finally:
                launcher.close()
        return self._bench_at_base

    def initcheck(self) -> Initcheck:
        if self._initcheck is None:
            spec = self.task.spec.correctness
            self._initcheck = Initcheck(spec.command, spec.timeout_s, self.log, self.sandbox)
        return self._initcheck

    def close(self) -> None:
        """Stop the warm interpreters and remove every workspace."""
        self._drop_slot()
        for ws in (self._baseline, self._reference):
            if isinstance(ws, Workspace):
                ws.cleanup()
        if self._hook is not None:
            shutil.rmtree(self._hook, ignore_errors=True)
        self._baseline = self._reference = self._hook = None
