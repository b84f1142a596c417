"""Run the rules over a source string or a tree of files.

Never raises on bad input files: a file that does not parse becomes a `parse-error`
finding, and a crash inside a rule becomes an `analyzer-error` finding for that file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import libcst as cst

from agent.util import pyast
from agent.util.globs import matches_any

from .context import ModuleContext, dedupe_keys, run_visitors
from .findings import ANALYZER_ERROR, PARSE_ERROR, RULES, AnalyzerConfig, Finding
from .rules import alloc, buffers, loops, sync

# In the one glob dialect (agent.util.globs): `tests/**` is a tests/ folder at any depth.
DEFAULT_EXCLUDE = ("tests/**", "test_*.py", "conftest.py")
_SKIP_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", "venv"})
_RULE_VISITORS = (buffers.visitor, sync.visitor, alloc.visitor, loops.visitor)


def analyze_source(source: str, path: str = "<string>", rules: set[str] | None = None, *,
                   config: AnalyzerConfig | None = None) -> list[Finding]:
    """Findings for one module, sorted by position. Unknown rule ids raise ValueError."""
    selected = _select(rules)
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as e:
        return [_parse_error(source, path, e)]
    ctx = ModuleContext.build(module, path, config or AnalyzerConfig(), source)
    visitors = [v for make in _RULE_VISITORS if (v := make(ctx, selected)) is not None]
    run_visitors(ctx, visitors)
    return dedupe_keys([f for v in visitors for f in v.findings()])


def analyze_paths(paths: Sequence[Path], root: Path | None = None, rules: set[str] | None = None,
                  exclude: Sequence[str] = DEFAULT_EXCLUDE, *, config: AnalyzerConfig | None = None) -> list[Finding]:
    """Findings for every *.py under `paths`, with paths relative to `root`.

    `root` defaults to the one directory given, else the current directory. Directories
    are walked (hidden ones, __pycache__ and virtualenvs skipped) and `exclude` globs
    (agent.util.globs, the dialect of protected paths) are matched against the path relative
    to the walked directory and to `root`; files named explicitly are always analysed.
    A path that does not exist raises FileNotFoundError.
    """
    paths = [Path(p) for p in paths]
    if root is None:
        root = paths[0] if len(paths) == 1 and paths[0].is_dir() else Path.cwd()
    findings: list[Finding] = []
    for file in _python_files(paths, root, exclude):
        rel = _relative(file, root)
        try:
            source = file.read_bytes().decode("utf-8")
        except UnicodeDecodeError as e:
            findings.append(_file_finding(PARSE_ERROR, rel, 1, f"not UTF-8: {e.reason} at byte {e.start}"))
            continue
        try:
            findings += analyze_source(source, rel, rules, config=config)
        except ValueError:
            raise  # unknown rule id: the caller's mistake, not the file's
        except Exception as e:  # noqa: BLE001 — one bad file must not stop the others
            findings.append(_file_finding(ANALYZER_ERROR, rel, 1, f"{type(e).__name__}: {e}"))
    return findings


def _select(rules: Iterable[str] | None) -> set[str]:
    if rules is None:
        return set(RULES)
    selected = set(rules)
    unknown = selected - set(RULES)
    if unknown:
        raise ValueError(f"unknown rule id(s): {', '.join(sorted(unknown))}; known: {', '.join(RULES)}")
    return selected


def _parse_error(source: str, path: str, error: cst.ParserSyntaxError) -> Finding:
    """Prefer CPython's location and wording; libcst's are used when only libcst rejects the code."""
    line, col, message = error.raw_line, error.raw_column + 1, error.message
    try:
        pyast.parse(source, path)
    except SyntaxError as e:
        line, col, message = e.lineno or line, e.offset or col, e.msg
    except (ValueError, RecursionError):
        pass
    return _file_finding(PARSE_ERROR, path, line, f"syntax error: {message}", col=col,
                         snippet=_line(source, line))


def _file_finding(rule: str, path: str, line: int, message: str, col: int = 1, snippet: str = "") -> Finding:
    return Finding(rule=rule, path=path, line=line, col=col, message=message, function=None,
                   key=f"{path}::<module>::{rule}", snippet=snippet)


def _line(source: str, line: int) -> str:
    lines = source.splitlines()
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def _python_files(paths: Sequence[Path], root: Path, exclude: Sequence[str]) -> Iterator[Path]:
    seen: set[Path] = set()
    for top in paths:
        if not top.exists():
            raise FileNotFoundError(f"{top}: no such file or directory")
        if top.is_file():
            candidates: Iterable[Path] = [top]
        else:
            candidates = sorted(_walk(top))
        for file in candidates:
            if top.is_dir() and _excluded(file, (top, root), exclude):
                continue
            real = file.resolve()
            if real not in seen:
                seen.add(real)
                yield file


def _walk(top: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS
                       and not d.endswith(".egg-info")]
        for name in filenames:
            if name.endswith(".py"):
                yield Path(dirpath) / name


def _excluded(file: Path, bases: Sequence[Path], patterns: Sequence[str]) -> bool:
    for base in bases:
        try:
            rel = file.resolve().relative_to(base.resolve()).as_posix()
        except ValueError:
            continue
        if matches_any(rel, patterns):
            return True
    return False


def _relative(file: Path, root: Path) -> str:
    try:
        return file.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return file.as_posix()
