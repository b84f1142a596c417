"""Coverage of a patch's changed lines: did any test execute each added or changed statement?

Recorded in the target's own interpreter by our check hook (check_hook.py), with no package
installed there: every Python process the correctness command starts appends the lines of the
changed files it runs to a file of its own in a folder the harness owns. "Not measured" (no
process recorded anything, and why) is kept apart from "not executed" (recorded, line not run):
neither is reported as the other. Only rows signed with the run's key count (agent.checks.records):
a row code under test appends claims nothing. Statements are found here with coverage.py's parser: blank
lines, comments and the inner lines of a multi-line statement fold into their statement, and
`# pragma: no cover` is deliberately not honoured: a patch cannot excuse its own lines.

A line executed is not yet a line run in full: for changed lines holding several statements or a
conditional, the hook also records (3.11+) which instructions ran and which conditional jumps were
taken, and agent.checks.arms says whether every statement ran and which arms were taken; with no
column positions (3.9, 3.10) such a line is "not measured", never "covered".
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from coverage.exceptions import CoverageException, NotPython
from coverage.parser import PythonParser

from agent.checks import arms
from agent.checks.evaluation import CoverageResult
from agent.checks.patchinfo import FileLines
from agent.checks.records import read_rows
from agent.util.files import empty_folder

NOT_STARTED = ("no Python process of the correctness command started perfagent's hook (the command "
               "runs no Python, or its interpreter skips sitecustomize: -S, -I or a cleared PYTHONPATH)")


@dataclass
class Recorded:
    """What the correctness run's processes recorded: None lines means not measured, for `why`."""

    lines: dict[str, set[int]] | None = None
    why: str | None = None
    processes: int = 0
    notes: list[str] = field(default_factory=list)
    forged: int = 0  # rows whose tag did not verify: written by something other than the hook
    unkeyed: int = 0  # processes that started without the run's key (started by the tests themselves)
    positions: dict[str, set[arms.Pos]] = field(default_factory=dict)  # instructions run on fine lines
    edges: dict[str, set[tuple[arms.Pos, arms.Pos]]] = field(default_factory=dict)  # conditional jumps taken
    coarse: set[str] = field(default_factory=set)  # files a process without column positions ran


def prepare(folder: Path, root: Path, files: list[str], changed: list[FileLines] | None = None) -> Path:
    """An empty `folder` with the list of files to record (repo-relative `files` under `root`) and,
    for the `changed` lines that need them, the lines whose instructions the hook records."""
    folder.mkdir(parents=True, exist_ok=True)
    empty_folder(folder)
    (folder / "targets.json").write_text(json.dumps(target_paths(root, files)))
    fine: dict[str, list[int]] = {}
    for fl in changed or []:
        record = sorted(_shape(root, fl).record) if fl.path in files else []
        if record:
            fine.update({name: record for name in target_paths(root, [fl.path])})
    (folder / "fine.json").write_text(json.dumps(fine))
    return folder


def _shape(root: Path, fl: FileLines) -> arms.FileShape:
    """The fine lines among a file's changed lines; none where the source cannot be read or parsed."""
    try:
        return arms.shape((root / fl.path).read_text(encoding="utf-8"), fl.lines)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return arms.FileShape()


def target_paths(root: Path, files: list[str]) -> list[str]:
    """The absolute names a process may see for `files` (as given, and with links resolved)."""
    return sorted({p for f in files for p in (str(root / f), os.path.realpath(root / f))})


def recorded(folder: Path, key: str) -> Recorded:
    """Real path -> executed line numbers, union over every process that recorded with `key`."""
    out = Recorded()
    lines: dict[str, set[int]] = {}
    for f in sorted(folder.glob("lines.*")):
        got = read_rows(f, key)
        out.forged += got.forged
        out.unkeyed += got.no_key
        for row in got.rows:
            if row.startswith("@") or row.startswith("#coarse\t"):
                _fine_row(out, row)
                continue
            if row.startswith("#"):
                out.processes += row.startswith("#started")
                if row.startswith("#error"):
                    out.notes.append(row[1:])
                continue
            name, _, number = row.rpartition("\t")
            if number.isdigit():
                lines.setdefault(os.path.realpath(name), set()).add(int(number))
    if out.processes == 0 or out.notes:  # a process that could not record leaves the union incomplete
        out.why = "; ".join(dict.fromkeys(out.notes)) or NOT_STARTED
    else:
        out.lines = lines
    return out


def _fine_row(out: Recorded, row: str) -> None:
    """A row of instruction positions ("@p", file, 4 numbers) or of a jump ("@e", file, 8 numbers)."""
    kind, name, *rest = row.split("\t")
    if kind == "#coarse":
        out.coarse.add(os.path.realpath(name))
        return
    try:
        nums = tuple(int(n) for n in rest)
    except ValueError:
        return
    if kind == "@p" and len(nums) == 4:
        out.positions.setdefault(os.path.realpath(name), set()).add(nums)
    elif kind == "@e" and len(nums) == 8:
        out.edges.setdefault(os.path.realpath(name), set()).add((nums[:4], nums[4:]))


def statements_run(path: Path, rec: Recorded) -> set[int] | None:
    """First lines of the statements of `path` that some process ran; None when not measured."""
    if rec.lines is None:
        return None
    try:
        parser = PythonParser(filename=str(path))
        parser.parse_source()
    except (NotPython, OSError, SyntaxError, CoverageException):
        return None
    return {parser.first_line(n) for n in rec.lines.get(os.path.realpath(path), set())}


def _statement_of(parser: PythonParser, line: int) -> int | None:
    first = parser.first_line(line)
    return first if first in parser.statements else None


def classify(root: Path, changed: list[FileLines], rec: Recorded) -> CoverageResult:
    """Split the executable changed lines into covered and uncovered, as "file:line"; when nothing
    was measured, every line is in `changed` only and `note` says why."""
    executed = rec.lines
    result = CoverageResult(measured=executed is not None)
    if executed is None:
        result.note = f"changed-line coverage not measured: {rec.why}"
    for fl in changed:
        path = (root / fl.path).resolve()
        if not fl.path.endswith(".py"):
            result.unmeasured_files.append(fl.path)
            continue
        try:
            parser = PythonParser(filename=str(path))
            parser.parse_source()
        except (NotPython, OSError, SyntaxError, CoverageException):
            result.unmeasured_files.append(fl.path)
            continue
        real = os.path.realpath(path)
        ran = executed.get(real, set()) if executed is not None else set()
        ran_statements = {parser.first_line(n) for n in ran}
        shape = _shape(root, fl)
        for line in fl.lines:
            stmt = _statement_of(parser, line)
            if stmt is None:
                continue
            name = f"{fl.path}:{line}"
            result.changed.append(name)
            if executed is None:
                continue
            if stmt not in ran_statements:
                result.uncovered.append(name)
            elif line not in shape.lines:
                result.covered.append(name)
            elif real in rec.coarse:
                result.not_measured.append(name)
            else:
                full, taken, untaken = arms.untaken(shape, line, rec.positions.get(real, set()),
                                                    rec.edges.get(real, set()))
                (result.covered if full else result.uncovered).append(name)
                if full:
                    result.taken += [f"{name} ({a})" for a in taken]
                    result.untaken += [f"{name} ({a})" for a in untaken]
    result.note = "; ".join(filter(None, [result.note, *untrusted(rec.forged, rec.unkeyed, "lines they ran")])) or None
    return result


def untrusted(forged: int, unkeyed: int, what: str) -> list[str]:
    """What was left out of a recording, in words."""
    out = []
    if forged:
        out.append(f"{forged} record row(s) refused: not signed by perfagent's hook (written by the code under test)")
    if unkeyed:
        out.append(f"{unkeyed} process(es) started by the command itself ran without the harness's key: "
                   f"{what} do not count")
    return out
