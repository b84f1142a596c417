"""Which zeros -> empty rewrites `perfagent lint --fix --task T` may write: those the task's checks pass.

A static "safe" is only a candidate: a buffer read before it is written still breaks the
poisoned tests, and a rewrite no test executes proves nothing. So every candidate is graded as
a patch against the task's base, exactly as `perfagent check` grades one (plain and poisoned
tests, the sanitizer's uninitialised reads, read sites and changed lines run, protected paths), and
only verdict "pass" keeps it. All candidates are tried at once first; the ones the evidence names
(every buffer read uninitialised, in one check: its sanitizer zero-fills a buffer once it records the
read, so the run goes on to the next) are dropped and the rest tried together again; what still fails
unnamed is tried one by one on top of those already kept. Protected paths are never rewritten.
"""

from __future__ import annotations

import difflib
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from agent.analyzers import Finding, apply_rewrites
from agent.analyzers.findings import ZERO_INIT
from agent.checks.checker import Checker
from agent.checks.evaluation import Evaluation
from agent.checks.evidence import Evidence
from agent.checks.grade import grade
from agent.checks.render import blame
from agent.checks.sides import ALWAYS_PROTECTED, CheckError
from agent.checks.verdicts import Verdict
from agent.env.workspace import PatchError, Workspace
from agent.task import Task
from agent.util.globs import matches_any

# Where `lint --fix` never writes when no task names its protected paths: the usual test and bench places.
DEFAULT_PROTECTED = ("tests/**", "test/**", "bench/**", "benchmarks/**", "test_*.py", "*_test.py", "conftest.py",
                     "sitecustomize.py", "usercustomize.py")


@dataclass(frozen=True)
class FixDecision:
    finding: Finding
    kept: bool
    reason: str   # "passes the checks", the first failing test or reason, or "protected path"


@dataclass(frozen=True)
class FixPlan:
    decisions: list[FixDecision]
    files: dict[str, str]   # repo-relative path -> its base text with the kept rewrites applied
    evaluations: int


def task_protected(task: Task) -> list[str]:
    return [*task.spec.protected, *ALWAYS_PROTECTED]


def verify_rewrites(task: Task, findings: Sequence[Finding], workdir: Path, *, lock_dir: Path | None = None,
                    log: Callable[[str], None] | None = None) -> FixPlan:
    """Grade the fixable zero-init findings (paths relative to the task's repo) with the task's
    checks. Raises CheckError when the task cannot be checked, or when a file to rewrite differs
    from the task's base (the patch is made against base, and the repo's copy would be overwritten)."""
    protected = task_protected(task)
    candidates = [f for f in findings if f.rule == ZERO_INIT and f.fixable]
    refused = [FixDecision(f, False, "protected path") for f in candidates if matches_any(f.path, protected)]
    candidates = [f for f in candidates if not matches_any(f.path, protected)]
    if not candidates:
        return FixPlan(refused, {}, 0)
    sources = _base_sources(task, sorted({f.path for f in candidates}), Path(workdir) / "base")
    decisions: dict[int, FixDecision] = {}
    kept: list[Finding] = []
    with Checker(task, Path(workdir) / "checks", lock_dir=lock_dir, log=log) as checker:
        def passes(subset: list[Finding]) -> tuple[Evidence, Evaluation]:
            try:
                evidence = checker.collect(unified_diff(sources, _rewritten(sources, subset)), perf=False, heal=True)
            except PatchError as e:
                raise CheckError(f"the rewrites do not apply to the task's base: {e}") from None
            ev = grade(evidence, task.spec)
            if ev.verdict == Verdict.ERROR:
                raise CheckError(f"the task cannot be checked: {ev.error or '; '.join(ev.reasons)}")
            return evidence, ev

        pending = list(candidates)
        (evidence, ev), evaluations = passes(pending), 1
        while ev.verdict != Verdict.PASS and pending:  # drop what the evidence names, and try the rest together
            blamed = blame(evidence)
            named = [f for f in pending if f"{f.path}:{f.line}" in blamed]
            if not named:
                break
            decisions.update({id(f): FixDecision(f, False, blamed[f"{f.path}:{f.line}"]) for f in named})
            pending = [f for f in pending if id(f) not in decisions]
            if pending:
                (evidence, ev), evaluations = passes(pending), evaluations + 1
        if ev.verdict == Verdict.PASS:
            kept = pending
        else:
            for f in pending:
                _, ev = passes([*kept, f])
                evaluations += 1
                if ev.verdict == Verdict.PASS:
                    kept.append(f)
                else:
                    decisions[id(f)] = FixDecision(f, False, first_failure(ev))
    out = [decisions.get(id(f)) or FixDecision(f, True, "passes the checks") for f in candidates]
    return FixPlan(refused + out, _rewritten(sources, kept), evaluations)


def first_failure(ev: Evaluation) -> str:
    """The first failing test (poisoned run first: that is what a zeros -> empty rewrite breaks),
    else the first reason, else the verdict."""
    c = ev.correctness
    for run in (c.poison, c.plain) if c is not None else ():
        if run is not None and not run.passed and run.failing_tests:
            return f"{run.failing_tests[0]} fails" + (" with poisoned memory" if run.name == "poison" else "")
    return ev.reasons[0] if ev.reasons else f"verdict {ev.verdict}"


def unified_diff(old: dict[str, str], new: dict[str, str]) -> str:
    """A git-style unified diff from `old` to `new` texts (same keys: repo-relative paths)."""
    out: list[str] = []
    for path in sorted(old):
        if new[path] == old[path]:
            continue
        out.append(f"diff --git a/{path} b/{path}\n")
        for line in difflib.unified_diff(old[path].splitlines(keepends=True), new[path].splitlines(keepends=True),
                                         f"a/{path}", f"b/{path}"):
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _rewritten(sources: dict[str, str], chosen: Sequence[Finding]) -> dict[str, str]:
    return {path: apply_rewrites(text, [f for f in chosen if f.path == path]) for path, text in sources.items()}


def _base_sources(task: Task, paths: list[str], dest: Path) -> dict[str, str]:
    """The files' text at the task's base; CheckError if the repo's copy differs from it."""
    shutil.rmtree(dest, ignore_errors=True)
    ws = Workspace.create(task.repo, task.spec.base, dest)
    try:
        missing = [p for p in paths if not (ws.root / p).is_file()]
        if missing:
            raise CheckError(f"{missing[0]} is not in the task's base ({task.spec.base}): commit it first")
        sources = {p: _read(ws.root / p) for p in paths}
    finally:
        ws.cleanup()
    for p in paths:
        if _read(Path(task.repo) / p) != sources[p]:
            raise CheckError(f"{p} differs from the task's base ({task.spec.base}): commit or stash its changes first")
    return sources


def _read(path: Path) -> str:
    with open(path, encoding="utf-8", newline="") as fh:
        return fh.read()
