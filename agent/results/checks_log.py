"""checks.json: every grading a run made, in the order it made them; one schema (`Grading`), one writer
(`ChecksLog`), one parse (`parse_checks`) under its two readers: `read_checks` for views and
`load_recorded` for `check --regrade`.

A job folder may come from elsewhere, so the views' reader never raises: a file missing or not JSON
holds no gradings, an entry that is not an object is skipped, and an evaluation or evidence this
perfagent cannot read is None in its entry (the entry keeps its place: numbers and `index` count every
entry of the file). `load_recorded` grades, so it reads only what this machine's perfagent sealed
(agent.util.seal) and refuses evidence it cannot read, in one line.

Which grading is final, i.e. the one report.json carries (`carried`), one rule for every reader:

- a report that names it (`checks_entry`, written since this rule) is taken at its word: that entry, or
  no grading at all when it names none (nothing was graded: an empty change, a broken task);
- an older report names none: its evaluation is the *last* entry whose evaluation equals it once the
  fields the runner sets on the one it carries (`emitted`, `note`, `warnings`) are cleared on both
  sides. Full or quick alike: an interrupted run carries its best quick grading. An evaluation that
  took no time was never graded (nothing to grade), so it matches none;
- an older report's evaluation that matches no entry was graded after the loop and never logged (older
  runners did so): it is a grading of its own, with no `index`, which `every_grading` adds once.

Two rules stood before: the review's timeline cleared `note` as well and let an evaluation that took no
time match nothing, while the loader compared `note` and counted that evaluation as a grading; both
looked at full entries only, so a salvaged quick grading was counted twice. The rule above keeps what
each got right, and a report written since needs none of it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, ValidationInfo, ValidatorFunctionWrapHandler, field_validator

from agent.checks.evaluation import Evaluation
from agent.checks.evidence import Evidence, EvidenceError
from agent.env.candidate import LeftOut
from agent.results.layout import CHECKS
from agent.results.report import Report
from agent.util.seal import SealError, read_sealed, write_sealed_json

# What the runner sets on the evaluation report.json carries, cleared to compare it with checks.json's entries
RUNNER_FIELDS: dict[str, Any] = {"emitted": None, "note": None, "warnings": []}


class Grading(BaseModel):
    """One entry of checks.json: when it was graded, full or quick, the evaluation it was given then and
    the evidence it was graded from (None: recorded before evidence was kept, or unreadable)."""

    time: float = 0.0
    full: bool = False
    evaluation: Evaluation | None = None
    evidence: Evidence | None = None
    left_out: list[LeftOut] = []  # files of the working tree left out of the graded change
    index: int | None = Field(default=None, exclude=True)  # its place in the file; None: not in the file

    @field_validator("time", "full", mode="before")
    @classmethod
    def _unset(cls, value: Any) -> Any:
        return 0 if value is None else value  # null: not recorded

    @field_validator("evaluation", "evidence", mode="wrap")
    @classmethod
    def _readable(cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        """An evaluation or evidence this perfagent cannot read is None; why goes to the parse's context."""
        try:
            return handler(value)
        except ValidationError as e:
            if isinstance(info.context, list):
                info.context.append(Unreadable(0, str(info.field_name), _first(e)))
            return None

    def to_json(self) -> dict[str, Any]:
        """The entry as written: `left_out` only when there is one."""
        return self.model_dump(mode="json", exclude={"left_out"} if not self.left_out else None)


@dataclass(frozen=True)
class Unreadable:
    """A part of checks.json left out of what was read: the entry (its index), which part, and why."""

    entry: int
    part: str  # "entry" (the whole of it), "evaluation" or "evidence"
    why: str


@dataclass(frozen=True)
class ChecksFile:
    """What a checks.json held: its readable entries, and each part left out."""

    gradings: list[Grading] = field(default_factory=list)
    unreadable: list[Unreadable] = field(default_factory=list)


def parse_checks(data: Any) -> ChecksFile:
    """The one parse of checks.json's JSON (a list of entries); never raises."""
    if not isinstance(data, list):
        return ChecksFile([], [Unreadable(-1, "entry", "not a list of gradings")])
    gradings: list[Grading] = []
    unreadable: list[Unreadable] = []
    for n, entry in enumerate(data):
        why: list[Unreadable] = []
        if not isinstance(entry, dict):
            why.append(Unreadable(n, "entry", f"not an object: {type(entry).__name__}"))
        else:
            try:
                gradings.append(Grading.model_validate({**entry, "index": n}, context=why))
            except ValidationError as e:
                why.append(Unreadable(n, "entry", _first(e)))
        unreadable += [Unreadable(n, w.part, w.why) for w in why]
    return ChecksFile(gradings, unreadable)


def _first(e: ValidationError) -> str:
    err = e.errors()[0]
    return f"{'.'.join(str(p) for p in err['loc']) or 'value'}: {err['msg']}"


def checks_file(job_dir: Path) -> Path:
    """The job's checks.json (the one place outside the layout that names it: tests/test_layout.py)."""
    return Path(job_dir) / CHECKS


def read_checks(job_dir: Path) -> list[Grading]:
    """Every readable grading of the job at `job_dir`; none when checks.json is missing or corrupt."""
    try:
        data = json.loads(checks_file(job_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # RecursionError: nested past what json reads
        return []
    return parse_checks(data).gradings


@dataclass
class ChecksLog:
    """The writer: each grading appended as it lands, the whole list sealed anew (`--regrade` verifies it)."""

    path: Path
    gradings: list[Grading] = field(default_factory=list)

    def append(self, grading: Grading) -> int:
        """Write `grading` after the others; its index, which report.json names when it carries it."""
        self.gradings.append(grading.model_copy(update={"index": len(self.gradings)}))
        write_sealed_json(self.path, [g.to_json() for g in self.gradings])
        return len(self.gradings) - 1


def carried(gradings: list[Grading], report: Report | None) -> Grading | None:
    """The grading `report` carries (the module's rule); None when it carries none."""
    ev = report.evaluation if report is not None else None
    if report is None or ev is None:
        return None
    if "checks_entry" in report.model_fields_set:
        if report.checks_entry is None:
            return None
        named = next((g for g in gradings if g.index == report.checks_entry and g.evaluation is not None), None)
        return named or Grading(full=not ev.quick, evaluation=ev)  # the file lost it: the report's own
    if ev.duration_s <= 0:
        return None
    bare = _bare(ev)
    same = (g for g in reversed(gradings) if g.evaluation is not None and _bare(g.evaluation) == bare)
    return next(same, None) or Grading(full=not ev.quick, evaluation=ev)


def every_grading(gradings: list[Grading], report: Report | None) -> list[Grading]:
    """Every grading of the run: the file's readable ones, and the report's when the file does not hold it."""
    final = carried(gradings, report)
    return [*gradings, final] if final is not None and final.index is None else list(gradings)


def _bare(ev: Evaluation) -> dict[str, Any]:
    return ev.model_copy(update=RUNNER_FIELDS).model_dump()


def load_recorded(path: Path, key: bytes) -> list[Grading]:
    """The gradings recorded at `path` that carry evidence: a checks.json, a run's job folder holding one, or
    an evidence file (`perfagent check --evidence`, one Evidence); only when its seal verifies under `key`:
    a grade of evidence anyone could have edited would travel as a pass without that caveat. EvidenceError
    (one line) otherwise, and for evidence this perfagent cannot read."""
    path = checks_file(path) if Path(path).is_dir() else Path(path)
    try:
        data = json.loads(read_sealed(path, key).decode("utf-8"))
    except SealError as e:
        raise EvidenceError(f"{e}; nothing graded") from None
    except (OSError, ValueError, RecursionError) as e:  # ValueError: not UTF-8, not JSON
        raise EvidenceError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    if isinstance(data, dict):  # an evidence file
        data = [{"evidence": data}]
    read = parse_checks(data)
    bad = next((u for u in read.unreadable if u.part == "evidence"), None)
    if bad is not None:
        raise EvidenceError(f"{path}: not evidence perfagent wrote: entry {bad.entry + 1}: {bad.why}")
    if read.gradings and all(g.evidence is None for g in read.gradings):
        raise EvidenceError(f"{path}: its gradings carry no evidence (recorded before evidence was kept)")
    return [g for g in read.gradings if g.evidence is not None]
