"""`perfagent lint`: the static findings on the paths asked for and, with --fix, the zero-init rewrites written.

No rewrite is written that nothing verified: without a task, none; with one (`--fix --task`), only those its
checks keep (agent.checks.fixes), and never into a protected path. The command prints; this module decides.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from agent.errors import BadInput, PerfagentError
from agent.task import Task, load_task

if TYPE_CHECKING:
    from agent.analyzers import Finding
    from agent.checks.fixes import FixPlan


class LintFixError(PerfagentError):
    """`lint --fix --task`: the task cannot be checked, so no rewrite can be verified (exit 1)."""


@dataclass(frozen=True)
class Fixes:
    """What --fix did: without a task, the candidates skipped (and how many lie in protected paths); with one,
    the verified plan and the rewrites written per file."""

    skipped: int = 0
    protected: int = 0
    plan: FixPlan | None = None
    written: dict[str, int] = field(default_factory=dict)


def refusal(paths: Sequence[Path], rules: Sequence[str], known: Sequence[str], task: str | None,
            fix: bool) -> str | None:
    """Why these arguments cannot be linted, before anything is read: None when they can."""
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        return f"no such file or directory: {', '.join(missing)}"
    unknown = sorted(set(rules) - set(known))
    if unknown:
        return f"unknown rule {', '.join(unknown)}; rules: {', '.join(sorted(known))}"
    if task and not fix:
        return "--task verifies --fix's rewrites; give --fix too"
    return None


def lint_task(task_file: str, paths: Sequence[Path]) -> Task:
    """The task whose checks verify the rewrites; every PATH must be inside its (local) repo."""
    from agent.env.workspace import check_task_base

    task = load_task(task_file)
    check_task_base(task)
    if task.repo_is_url:
        raise BadInput(f"{task_file}: lint --fix --task needs a task whose repo is a local folder, not {task.repo}")
    repo = Path(task.repo).resolve()
    outside = [str(p) for p in paths if not p.resolve().is_relative_to(repo)]
    if outside:
        raise BadInput(f"not inside the task's repo {repo}: {', '.join(outside)}")
    return task


def lint_root(task: Task | None, paths: Sequence[Path]) -> Path:
    """What findings' paths are relative to: the task's repo, a single folder linted, else here."""
    if task is not None:
        return Path(task.repo)
    return paths[0] if len(paths) == 1 and paths[0].is_dir() else Path.cwd()


def fix(task: Task | None, findings: Sequence[Finding], root: Path, lock_dir: str | None,
        log: Callable[[str], None]) -> Fixes:
    """Without a task nothing verifies a zeros -> empty rewrite, so none is written; with one, each is graded
    by the task's checks and only those that pass are written under `root`. LintFixError: the task cannot be
    checked."""
    from agent.analyzers.findings import ZERO_INIT
    from agent.checks import CheckError
    from agent.checks.fixes import DEFAULT_PROTECTED, verify_rewrites
    from agent.util.globs import matches_any

    candidates = [f for f in findings if f.rule == ZERO_INIT and f.fixable]
    if task is None:
        return Fixes(skipped=len(candidates), protected=sum(matches_any(f.path, DEFAULT_PROTECTED) for f in candidates))
    work = Path(tempfile.mkdtemp(prefix=f"perfagent-lint-{task.id}-"))
    try:
        plan = verify_rewrites(task, candidates, work, lock_dir=Path(lock_dir) if lock_dir else None, log=log)
    except CheckError as e:
        raise LintFixError(str(e)) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    written = {}
    for rel, text in sorted(plan.files.items()):
        n = sum(d.kept and d.finding.path == rel for d in plan.decisions)
        if n:
            with open(root / rel, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
            written[rel] = n
    return Fixes(plan=plan, written=written)
