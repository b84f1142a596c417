"""Grade one patch against a task: hygiene, protected paths, tests (plain + poison), coverage
of the changed lines, and an interleaved A/B perf measurement.

The baseline workspace (and the reference's) is created once per Checker and reused; each
candidate gets a fresh checkout of base, so nothing from an earlier evaluation leaks in.
"""

from __future__ import annotations

import re
import secrets
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import libcst as cst

from agent.analyzers.reads import read_sites
from agent.checks import perf as perfmod
from agent.checks.correctness import check_env, install_hook, run_check, to_run
from agent.checks.environment import probe
from agent.checks.integrity import (IntegrityResult, check_integrity, installed_top_level_modules, is_test_path,
                                    plausibility_problem)
from agent.checks import coverage, sanitizer
from agent.checks.lock import DEFAULT_LOCK_DIR, device_lock
from agent.checks.evaluation import (CommandRun, Correctness, DiffStats, Environment, Evaluation, Hygiene, PerfResult,
                                     ReadSiteResult, ReferenceResult)
from agent.checks.launch import Launcher
from agent.checks.patchinfo import FileLines, added_lines, changes_anything, hygiene_problems
from agent.checks.perf import FULL, QUICK, Bench, BenchError, SamplingPolicy
from agent.checks.initcheck import Initcheck
from agent.checks.render import compact_lines, device_reads_line, read_line, read_path
from agent.checks.stats import compare_paired, fraction_of_reference, speedup
from agent.checks.stats import preload as preload_stats
from agent.env.interpreter import Interpreter, InterpreterError
from agent.env.interpreter import prepare as prepare_interpreter
from agent.env.sandbox import base_env, run_command
from agent.task import Task
from agent.env.workspace import PatchError, Workspace
from agent.util.files import empty_folder
from agent.util.text import tail

# Files that change what the tests check without being tests: always protected, on top of the task's list.
ALWAYS_PROTECTED = ["conftest.py", "pytest.ini", "sitecustomize.py", "usercustomize.py"]


class CheckError(Exception):
    """The task itself cannot be checked (baseline setup or bench broken): verdict "error"."""


class Checker:
    def __init__(self, task: Task, workdir: Path, *, lock_dir: Path | None = None,
                 log: Callable[[str], None] | None = None, seed: int | None = None,
                 full: SamplingPolicy = FULL, quick: SamplingPolicy = QUICK, warm: bool = True):
        self.task = task
        self.workdir = Path(workdir)
        self.lock_dir = lock_dir or DEFAULT_LOCK_DIR
        self.log = log or (lambda _: None)
        self.seed = seed
        self.policies = {False: full, True: quick}
        self._baseline: Workspace | None = None
        self._reference: Workspace | str | None = None  # a workspace, or why there is none
        self._env: Environment | None = None
        self._hook: Path | None = None
        self._installed: frozenset[str] | None = None  # top-level modules the target's interpreter has
        self.warm = warm  # fork test processes from a warm interpreter where possible
        self._interpreter: Interpreter | None = None  # the task's Python (its own venv, if it names one)
        self._slot: Workspace | None = None  # the candidate's folder, reset in place between evaluations
        self._tests: Launcher | None = None  # the slot's test processes (its warm interpreters)
        self._initchecker: Initcheck | None = None  # compute-sanitizer runs, the baseline's kept

    @property
    def protected(self) -> list[str]:
        return [*self.task.spec.protected, *ALWAYS_PROTECTED]

    # -- workspaces -------------------------------------------------------------------------
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
            setup = self._setup(ws)
            if setup is not None and not setup.passed:
                ws.cleanup()
                raise CheckError(f"setup failed on the baseline (exit {setup.exit_code}): {tail(setup.output_tail, 500)}")
            self._baseline = ws
        return self._baseline

    def _workspace_with(self, patch: str, name: str) -> Workspace:
        base = self.baseline()
        dest = self._side_dir(name)
        shutil.rmtree(dest, ignore_errors=True)
        ws = Workspace.create(base.root, base.base_commit, dest)
        try:
            ws.apply_patch(patch)
        except PatchError:
            ws.cleanup()
            raise
        return ws

    def _candidate(self, patch: str) -> Workspace:
        """Base plus `patch`, in one folder that serves every evaluation: reset in place, so the warm
        interpreters bound to it (and their torch import) outlive one evaluation."""
        base = self.baseline()
        if self._slot is None:
            dest = self._side_dir("candidate")
            shutil.rmtree(dest, ignore_errors=True)
            self._slot = Workspace.create(base.root, base.base_commit, dest)
            env = check_env(self._slot.root, self._hook_dir(), bin_dir=self.interpreter().bin_dir)
            self._tests = Launcher(self._slot.root, env, warm=self.warm, log=self.log)
        try:
            self._slot.apply_patch(patch)
        except PatchError:
            self._scrub()
            raise
        return self._slot

    def _scrub(self) -> None:
        """Leave nothing of this candidate for the next: files (ignored ones too) and coverage data.
        A slot that will not come clean is dropped with its interpreters; the next one is new."""
        for folder in ("coverage", "sanitizer"):  # emptied, not removed: a warm interpreter has them mounted
            empty_folder(self.workdir / folder)
        if self._slot is not None and not self._slot.scrub():
            self._drop_slot()

    def _drop_slot(self) -> None:
        if self._tests is not None:
            self._tests.close()
        if self._slot is not None:
            self._slot.cleanup()
        self._slot = self._tests = None

    def _reference_ws(self) -> Workspace | None:
        if self._reference is None:
            if self.task.reference_patch is None:
                self._reference = "the task has no reference patch"
            else:
                try:
                    ws = self._workspace_with(self.task.reference_patch.read_text(), "reference")
                    ws.restore_paths(self.protected)
                    setup = self._setup(ws)
                    self._reference = ws if setup is None or setup.passed else "setup failed on the reference patch"
                except PatchError as e:
                    self._reference = f"reference patch does not apply: {e}"
        return self._reference if isinstance(self._reference, Workspace) else None

    def _setup(self, ws: Workspace) -> CommandRun | None:
        spec = self.task.spec.setup
        if spec is None or spec.command is None:
            return None
        self.log(f"setup: {spec.command}")
        env = perfmod.perf_env(ws.root, self.interpreter().bin_dir)
        return to_run("setup", run_command(spec.command, ws.root, timeout_s=spec.timeout_s, env=env))

    def environment(self) -> Environment:
        if self._env is None:
            self._env = probe(self.baseline().root, self.interpreter().bin_dir)
        return self._env

    def _hook_dir(self) -> Path:
        if self._hook is None:
            self._hook = install_hook(self.workdir / "hook")
        return self._hook

    # -- grading ----------------------------------------------------------------------------
    def evaluate(self, patch: str, *, quick: bool = False, perf: bool = True, reference: bool = False) -> Evaluation:
        """Grade `patch` (a unified diff against base). Raises PatchError if it does not apply."""
        start = time.monotonic()
        ev = Evaluation(task_id=self.task.id, verdict="pass", quick=quick)
        if not changes_anything(patch):
            ev.verdict, ev.note = "no-change", "the patch changes nothing (empty, or only blank lines and trailing spaces)"
            return ev
        problems = hygiene_problems(patch)
        if problems:
            ev.hygiene = Hygiene(ok=False, problems=problems)
            ev.verdict, ev.reasons = "rejected", [f"patch refused: {p}" for p in problems]
            return ev
        try:
            cand = self._candidate(patch)
        except CheckError as e:
            return ev.model_copy(update={"verdict": "error", "error": str(e), "reasons": [str(e)]})
        try:
            self._grade(cand, ev, quick=quick, perf=perf, reference=reference)
        except CheckError as e:
            ev.verdict, ev.error, ev.reasons = "error", str(e), [*ev.reasons, str(e)]
        finally:
            self._scrub()
        ev.duration_s = round(time.monotonic() - start, 2)
        return ev

    def _grade(self, cand: Workspace, ev: Evaluation, *, quick: bool, perf: bool, reference: bool) -> None:
        ev.diff_stats = diff_stats(cand)
        ev.integrity = self._integrity(cand)
        ev.protected_violations = cand.restore_paths(self.protected)
        if ev.integrity.refused:  # nothing of a patch that rewires the tests is run
            ev.verdict = "rejected"
            ev.reasons += [f"patch refused: {r}" for r in ev.integrity.refused]
            return
        cand.changed_files()  # stage the restored state
        changed = added_lines(cand.repo.git.diff("--cached", "-U0", "--no-color", "--no-ext-diff", "--no-textconv",
                                                 cand.base_commit))
        ev.environment = self.environment().model_copy(update={
            "base_commit": cand.base_commit, "candidate_commit": cand.snapshot("perfagent candidate")})

        if ev.protected_violations:
            ev.reasons.append("touches protected paths: " + ", ".join(ev.protected_violations)
                              + " (checked with the baseline's versions restored)")
        ev.setup = self._setup(cand)
        if ev.setup is not None and not ev.setup.passed:
            ev.reasons.append(f"setup command failed (exit {ev.setup.exit_code})")
            return self._fail(ev)
        measure = perf and self.task.spec.perf is not None
        sides = self._sides(cand, reference) if measure else {}
        bench = self._bench(sides) if measure else None  # its server imports torch while the tests run
        if measure:
            threading.Thread(target=preload_stats, daemon=True).start()
        try:
            self._correctness(cand, ev, changed)
            if self.task.spec.correctness.initcheck and ev.correctness and not ev.correctness.plain.timed_out:
                self._initcheck(cand, ev)  # evidence beside the tests', whether or not they failed
            if ev.reasons:
                return self._fail(ev)
            self._judge_evidence(cand, ev, changed)
            if bench is not None:
                self._perf(ev, sides, bench, quick=quick, reference=reference)
        finally:
            if bench is not None:
                bench.close()
        if ev.verdict in ("pass", "unverified") and (ev.integrity.flags or ev.integrity.plausibility):
            ev.verdict = "suspicious"
            ev.reasons += [f"flagged: {f}" for f in ev.integrity.flags]
            ev.reasons += [f"suspicious speedup: {ev.integrity.plausibility}"] if ev.integrity.plausibility else []

    @staticmethod
    def _fail(ev: Evaluation) -> None:
        ev.verdict = "rejected" if ev.protected_violations else "fail"

    def _judge_evidence(self, cand: Workspace, ev: Evaluation, changed: list[FileLines]) -> None:
        """Passing tests are not enough: every changed line and every read of a buffer left
        uninitialised must have run, with the sanitizer watching."""
        if ev.coverage is not None and (ev.coverage.uncovered or not ev.coverage.measured):
            ev.verdict = "unverified"
            ev.reasons.append("changed lines no test executed: " + compact_lines(ev.coverage.uncovered)
                              if ev.coverage.uncovered else ev.coverage.note or "changed-line coverage not measured")
        unwatched_sanitizer = ev.sanitizer is not None and not ev.sanitizer.measured
        # initcheck was asked for and ran, but its report did not come back whole (a flooded output, say)
        unwatched_device = ev.initcheck is not None and not ev.initcheck.measured and ev.initcheck.run is not None
        if (unwatched_sanitizer or unwatched_device) and _uninitialised_allocations(cand.root, changed):
            ev.verdict = "unverified"  # the patch allocates uninitialised memory and nothing watched its reads
            if unwatched_sanitizer:
                ev.reasons.append(ev.sanitizer.note or "uninitialised reads not measured")
            if unwatched_device:
                ev.reasons.append(f"uninitialised device reads not measured: {ev.initcheck.note}")
        for site in (s for s in ev.read_sites if not s.executed):
            ev.verdict = "unverified"
            ev.reasons.append(f"{site.buffer.rsplit(':', 1)[0]}:{site.line} reads the buffer allocated uninitialised "
                              f"at line {site.buffer.rsplit(':', 1)[1]}{read_path(site)}: no test runs it")

    def _initcheck(self, cand: Workspace, ev: Evaluation) -> None:
        """The tests under compute-sanitizer's initcheck (CUDA kernels reading device memory nothing
        wrote), against the baseline's own reads; a read of the patch's is a reason to fail."""
        if self._initchecker is None:
            spec = self.task.spec.correctness
            self._initchecker = Initcheck(spec.command, spec.timeout_s, self.log)
        ev.initcheck = self._initchecker.check(cand.root, self.baseline().root, lambda root: check_env(
            root, self._hook_dir(), bin_dir=self.interpreter().bin_dir))
        if ev.initcheck.reads:
            ev.reasons.append("uninitialised device reads (compute-sanitizer initcheck): "
                              + device_reads_line(ev.initcheck.reads))

    def _integrity(self, cand: Workspace) -> IntegrityResult:
        """Refusals (test collection, start-up files, shadowing modules) and flags, before anything runs."""
        if self._installed is None:
            try:
                self._installed = installed_top_level_modules("python", base_env(bin_dir=self.interpreter().bin_dir))
            except RuntimeError as e:
                raise CheckError(str(e)) from None
        changed = cand.changed_files()
        diff = cand.repo.git.diff("--cached", "-U0", "--no-color", "--no-ext-diff", "--no-textconv", cand.base_commit)
        lines = {f.path: set(f.lines) for f in added_lines(diff)}
        return check_integrity(cand.root, self.baseline().root, changed, installed=self._installed,
                               is_test=lambda p: is_test_path(p, self.task.spec.protected), lines=lines)

    def _correctness(self, cand: Workspace, ev: Evaluation, changed) -> None:
        spec = self.task.spec.correctness
        py_files = [f.path for f in changed if f.path.endswith(".py")]
        lines_dir = coverage.prepare(self.workdir / "coverage", cand.root, py_files) if py_files else None
        reads_dir = (sanitizer.prepare(self.workdir / "sanitizer", cand.root, py_files, spec.kernels)
                     if py_files and spec.sanitizing else None)
        launcher = self._tests
        assert launcher is not None

        def run(name: str) -> CommandRun:
            return run_check(name, spec.command, launcher, timeout_s=spec.timeout_s, poison=name == "poison",
                             lines_dir=lines_dir if name == "plain" else None,
                             sanitize_dir=reads_dir if name == "poison" else None)

        # Both runs at once on a CPU-only machine (halves the wall time); one after the other on
        # a GPU, where two test processes could exhaust device memory. The poisoned run (and the
        # sanitizer in it) runs after a failing plain run too: it names the cause, the buffers read.
        parallel = spec.poison and not ev.environment.gpu
        self.log(f"tests{' (plain + poisoned, in parallel)' if parallel else ''}: {spec.command}")
        with ThreadPoolExecutor(max_workers=3) as pool:
            found = pool.submit(_find_read_sites, cand.root, changed)  # static, while the tests run
            if parallel:
                plain, poison = pool.map(run, ["plain", "poison"])
            else:
                plain, poison = run("plain"), None
                if spec.poison:
                    self.log("tests, poisoned (uninitialised memory = NaN / max int)")
                    poison = run("poison")
        ev.correctness = Correctness(plain=plain, poison=poison, poison_enabled=spec.poison)
        if not plain.passed:
            ev.reasons.append("tests fail" + _ids(plain))
        if poison is not None and not poison.passed:
            ev.reasons.append("tests fail with uninitialised memory poisoned (a buffer is read before it is written)"
                              + _ids(poison))
        if reads_dir is not None and poison is not None:
            ev.sanitizer = sanitizer.collect(reads_dir, cand.root, changed)
            if ev.sanitizer.reads:
                ev.reasons.append("buffers read before they are written (sanitizer): "
                                  + "; ".join(read_line(r) for r in ev.sanitizer.reads[:4])
                                  + (f" and {len(ev.sanitizer.reads) - 4} more" if len(ev.sanitizer.reads) > 4 else ""))
        if changed:
            rec = coverage.recorded(lines_dir) if lines_dir is not None else coverage.Recorded(lines={})
            ev.coverage = coverage.classify(cand.root, changed, rec)
            if plain.passed:  # a run that stopped early leaves read sites unrun that a full run would reach
                ev.read_sites = _read_sites(cand.root, found.result(), rec)

    def _sides(self, cand: Workspace, reference: bool) -> dict[str, Path]:
        sides = {"baseline": self.baseline().root, "candidate": cand.root}
        ref = self._reference_ws() if reference else None
        if ref is not None:
            sides["reference"] = ref.root
        return sides

    def _bench(self, sides: dict[str, Path]) -> Bench:
        assert self.task.spec.perf is not None
        return Bench(self.task.spec.perf, sides, self.workdir / "bench", bin_dir=self.interpreter().bin_dir,
                     warm=self.warm)

    def _perf(self, ev: Evaluation, sides: dict[str, Path], bench: Bench, *, quick: bool, reference: bool) -> None:
        spec = self.task.spec.perf
        assert spec is not None
        if reference and "reference" not in sides:
            ev.reference = ReferenceResult(error=str(self._reference))
        policy = self.policies[quick]
        seed = self.seed if self.seed is not None else secrets.randbelow(2**31)
        device = ev.environment.device or "cpu"
        result = PerfResult(metric=spec.metric, direction=spec.direction, min_effect=spec.min_effect, seed=seed,
                            device=device)
        asked = time.monotonic()
        with device_lock(device, self.lock_dir, self.log):
            start = time.monotonic()
            result.lock_wait_s = round(start - asked, 2)
            result.started_at = round(time.time(), 3)
            samples = None
            try:
                while samples is None and result.error is None:
                    try:
                        samples = perfmod.sample(sides, spec, policy, seed=seed, log=self.log, bench=bench)
                    except BenchError as e:
                        if e.side == "reference" and "reference" in sides:  # rare: drop it, measure again
                            ev.reference = ReferenceResult(error=str(e))
                            sides = {k: v for k, v in sides.items() if k != "reference"}
                            bench.close()
                            bench = self._bench(sides)
                        else:
                            result.error, result.error_side = str(e), e.side
            finally:
                result.processes = bench.mode
                bench.close()
                result.duration_s = round(time.monotonic() - start, 2)  # inside the lock: never overlaps another
        ev.perf = result
        if result.error is not None:
            if result.error_side == "candidate":
                ev.verdict = "fail"
                ev.reasons.append(result.error)
            else:
                raise CheckError(result.error)
            return
        assert samples is not None and samples.comparison is not None
        c = samples.comparison
        ev.perf = result.model_copy(update={
            "unit": samples.unit, "timer": samples.timer, "baseline_samples": samples.values["baseline"],
            "candidate_samples": samples.values["candidate"], "warmup_samples": samples.warmup,
            "warmups_discarded": policy.warmup, "n_pairs": len(samples.values["candidate"]),
            "baseline_median": c.baseline_median, "candidate_median": c.candidate_median, "ratio": c.ratio,
            "ci_low": c.ci_low, "ci_high": c.ci_high, "confidence": c.confidence, "p_value": c.p_value,
            "verdict": c.verdict, "precise": c.precise, "alpha": c.alpha, "max_pairs": policy.max_pairs,
            "cv": c.cv, "stop_reason": c.stop_reason})
        ref_speedup = None
        if "reference" in samples.values:
            # the same rounds, the same per-look level; sampling stopped on the candidate's answer
            r = compare_paired(samples.values["baseline"], samples.values["reference"], spec.direction,
                               spec.min_effect, seed, alpha=c.alpha if c.alpha is not None else 0.05)
            ref_speedup = speedup(r.ratio, spec.direction)
            # a share of the reference's gain means something only when both gains are significant
            both_faster = c.verdict == "faster" and r.verdict == "faster"
            ev.reference = ReferenceResult(
                ratio=r.ratio, ci_low=r.ci_low, ci_high=r.ci_high, p_value=r.p_value, verdict=r.verdict,
                samples=samples.values["reference"], speedup=ref_speedup,
                fraction_of_reference=fraction_of_reference(speedup(c.ratio, spec.direction), ref_speedup)
                if both_faster else None)
        problem = plausibility_problem(speedup(c.ratio, spec.direction), spec.max_speedup, ref_speedup)
        if problem is not None and c.verdict == "faster":
            ev.integrity.plausibility = problem
            ev.perf.verdict = "suspicious"

    def close(self) -> None:
        """Stop the warm interpreters and remove every workspace this checker made."""
        self._drop_slot()
        for ws in (self._baseline, self._reference):
            if isinstance(ws, Workspace):
                ws.cleanup()
        if self._hook is not None:
            shutil.rmtree(self._hook, ignore_errors=True)
        self._baseline = self._reference = self._hook = None

    def __enter__(self) -> "Checker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def diff_stats(ws: Workspace) -> DiffStats:
    ws.changed_files()  # stages everything
    files, ins, dels = [], 0, 0
    for line in ws.repo.git.diff("--cached", "--numstat", "--no-ext-diff", "--no-textconv", ws.base_commit).splitlines():
        a, d, path = line.split("\t", 2)
        files.append(path)
        ins += int(a) if a.isdigit() else 0
        dels += int(d) if d.isdigit() else 0
    return DiffStats(files=files, insertions=ins, deletions=dels)


_UNINITIALISED = re.compile(r"\b(empty|empty_like|new_empty|empty_strided|new_empty_strided)\s*\(")


def _uninitialised_allocations(root: Path, changed: list[FileLines]) -> dict[str, tuple[str, list[int]]]:
    """Changed Python files' text and the changed lines in them that allocate uninitialised memory."""
    out: dict[str, tuple[str, list[int]]] = {}
    for fl in changed:
        if not fl.path.endswith(".py"):
            continue
        try:
            text = (root / fl.path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        source = text.splitlines()
        allocs = [n for n in fl.lines if 0 < n <= len(source) and _UNINITIALISED.search(source[n - 1])]
        if allocs:
            out[fl.path] = (text, allocs)
    return out


def _find_read_sites(root: Path, changed: list[FileLines]) -> dict[str, dict]:
    """Every read of a buffer the patch allocates uninitialised (static analysis), per file."""
    out = {}
    for path, (text, allocs) in _uninitialised_allocations(root, changed).items():
        try:
            out[path] = read_sites(text, allocs, path)
        except cst.ParserSyntaxError:
            continue
    return out


def _read_sites(root: Path, found_in: dict[str, dict], rec: coverage.Recorded) -> list[ReadSiteResult]:
    """Whether the tests ran each read site: one no test reaches is a path on which nothing shows
    the buffer is written first."""
    out: list[ReadSiteResult] = []
    for path, found in found_in.items():
        ran = coverage.statements_run(root / path, rec)
        if ran is None:
            continue
        for line, sites in sorted(found.items()):
            out += [ReadSiteResult(buffer=f"{path}:{line}", line=s.line, function=s.function, how=s.how,
                                   guard=s.guard, executed=s.statement in ran) for s in sites]
    return out


def _ids(run: CommandRun) -> str:
    if run.timed_out:
        return " (timed out)"
    if not run.failing_tests:
        return f" (exit code {run.exit_code})"
    more = f" and {len(run.failing_tests) - 8} more" if len(run.failing_tests) > 8 else ""
    return ": " + ", ".join(run.failing_tests[:8]) + more
