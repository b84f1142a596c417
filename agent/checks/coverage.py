"""Coverage of a patch's changed lines: did any test execute each added or changed statement?

coverage.py measures only the changed Python files (cheap), in every Python process the
correctness command starts (through COVERAGE_PROCESS_START and our sitecustomize). A line
counts when it belongs to an executable statement; blank lines, comments and the inner
lines of a multi-line statement fold into the statement they are part of. `# pragma: no
cover` is deliberately not honoured: a patch cannot excuse its own lines.
"""

from __future__ import annotations

import os
from pathlib import Path

import coverage
from coverage.exceptions import CoverageException, NoDataError, NotPython
from coverage.parser import PythonParser

from agent.checks.evaluation import CoverageResult
from agent.checks.patchinfo import FileLines


def write_rc(folder: Path, root: Path, files: list[str]) -> Path:
    """A coverage config that records `files` (repo-relative) from parallel processes into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    include = "\n".join(f"    {(root / f).resolve()}" for f in files)
    rc = folder / "coveragerc"
    rc.write_text(f"[run]\ndata_file = {folder / '.coverage'}\nparallel = True\ninclude =\n{include}\n")
    return rc


def executed_lines(folder: Path, rc: Path) -> dict[str, set[int]] | None:
    """Real path -> executed line numbers, union over all processes; None if no process recorded."""
    if not any(folder.glob(".coverage.*")):
        return None
    cov = coverage.Coverage(config_file=str(rc))
    try:
        cov.combine(data_paths=[str(folder)], keep=True)
    except (NoDataError, CoverageException):
        return None
    data = cov.get_data()
    out: dict[str, set[int]] = {}
    for f in data.measured_files():
        out.setdefault(os.path.realpath(f), set()).update(data.lines(f) or [])
    return out


def _statement_of(parser: PythonParser, line: int) -> int | None:
    first = parser.first_line(line)
    return first if first in parser.statements else None


def classify(root: Path, changed: list[FileLines], executed: dict[str, set[int]] | None) -> CoverageResult:
    """Split the executable changed lines into covered and uncovered, as "file:line"."""
    result = CoverageResult(measured=executed is not None)
    if executed is None:
        result.note = "coverage could not be collected (no coverage data from the correctness run)"
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
        ran = executed.get(os.path.realpath(path), set()) if executed is not None else set()
        ran_statements = {parser.first_line(n) for n in ran}
        for line in fl.lines:
            stmt = _statement_of(parser, line)
            if stmt is None:
                continue
            name = f"{fl.path}:{line}"
            result.changed.append(name)
            (result.covered if stmt in ran_statements else result.uncovered).append(name)
    return result
