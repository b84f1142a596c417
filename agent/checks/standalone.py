"""What `perfagent check` does outside a run: one patch graded in a work folder of its own, or recorded
evidence graded again under the task's rules as they are now, running nothing. The command prints."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from agent.checks.checker import Checker
from agent.checks.evaluation import Evaluation
from agent.checks.evidence import EvidenceError, Evidence
from agent.checks.grade import grade
from agent.checks.patchinfo import unreadable
from agent.env.workspace import PatchError, check_task_base
from agent.errors import BadInput
from agent.results.checks_log import Grading, load_recorded
from agent.task import Task
from agent.util.seal import SealError, load_key


def with_initcheck(task: Task) -> Task:
    """The task with its tests also run under compute-sanitizer's initcheck (`check --initcheck`)."""
    correctness = task.spec.correctness.model_copy(update={"initcheck": True})
    return task.model_copy(update={"spec": task.spec.model_copy(update={"correctness": correctness})})


def read_patch(patch_file: str) -> str:
    """The patch's text; a diff cut short or a header alone is no patch, not one that changes nothing."""
    try:
        patch = Path(patch_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"{patch_file}: cannot read patch: {getattr(e, 'strerror', None) or e}") from None
    why = unreadable(patch)
    if why:
        raise BadInput(f"{patch_file}: not a unified diff git can read: {why}")
    return patch


def check_patch(task: Task, patch_file: str, *, lock_dir: Path | None, seed: int | None, log: Callable[[str], None],
                quick: bool, perf: bool, reference: bool) -> tuple[Evidence, Evaluation]:
    """The evidence on one patch against the task's base, collected in a work folder removed after, and its
    grading. A patch that does not apply is the input's fault: one line."""
    check_task_base(task)
    patch = read_patch(patch_file)
    work = Path(tempfile.mkdtemp(prefix=f"perfagent-check-{task.id}-"))
    try:
        with Checker(task, work, lock_dir=lock_dir, log=log, seed=seed) as checker:
            evidence = checker.collect(patch, quick=quick, perf=perf, reference=reference)
    except PatchError as e:
        raise BadInput(f"{patch_file}: does not apply to the task's base: {str(e).removeprefix('error: ')}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return evidence, grade(evidence, task.spec)


def regrade(task: Task, path: Path) -> list[tuple[Grading, Evaluation]]:
    """Each grading recorded at `path`, graded again under the task's rules as they are now. Evidence whose
    seal does not verify under this machine's key is refused in one line, never graded: a printed pass would
    travel without the caveat; so is another task's, which would print its verdict under this task's name."""
    try:
        recorded = load_recorded(path, load_key())
    except SealError as e:
        raise EvidenceError(str(e)) from None
    if not recorded:
        raise EvidenceError(f"{path}: no gradings recorded")
    graded = [(r, found) for r in recorded if (found := r.evidence) is not None]  # each does: load_recorded's
    others = sorted({found.task_id for _, found in graded} - {task.id, ""})
    if others:
        raise EvidenceError(f"{path}: evidence of task {others[0]!r}, not {task.id!r}: "
                            "regrade it with that task's file")
    return [(r, grade(found, task.spec)) for r, found in graded]


def change(recorded: Grading, now: Evaluation) -> str:
    """How a regrading compares with the verdict recorded then."""
    was = recorded.evaluation.verdict if recorded.evaluation is not None else None
    return "unchanged" if was == now.verdict else f"was {was}" if was else "not graded before"
