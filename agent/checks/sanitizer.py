"""The uninitialised-read sanitizer, harness side: what to watch, and what the test processes saw.

The poisoned run's processes (sanitize_hook.py, started by our check hook) track every tensor
allocated uninitialised from a line of the changed files and append each read of still
unwritten elements to a file of their own in a folder the harness owns. Here those records
become one result: the patch's buffers (allocated on a changed line) read before written, each
with its op, call site and the tests it happened in, kept apart from allocations the base
already made uninitialised; and "not measured" (no process started the sanitizer, and why)
apart from "nothing read".
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from agent.checks.coverage import target_paths
from agent.checks.evaluation import SanitizerResult, UninitRead
from agent.checks.patchinfo import FileLines
from agent.util.files import empty_folder

NOT_STARTED = ("no process of the poisoned run imported torch with perfagent's hook (the tests use no torch, "
               "or their interpreter skips sitecustomize)")


def prepare(folder: Path, root: Path, files: list[str], kernels: list[str]) -> Path:
    """An empty `folder` telling the processes which files' allocations to track and which functions
    are opaque kernels (every tensor argument counts as read)."""
    folder.mkdir(parents=True, exist_ok=True)
    empty_folder(folder)
    (folder / "config.json").write_text(json.dumps({"targets": target_paths(root, files), "kernels": kernels}))
    return folder


def collect(folder: Path, root: Path, changed: list[FileLines]) -> SanitizerResult:
    """Every process's records, merged per (buffer, op, argument, call site) over tests."""
    started, errors = 0, []
    merged: dict[tuple, UninitRead] = {}
    for f in sorted(folder.glob("reads.*")):
        try:
            rows = f.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for row in rows:
            if row.startswith("#"):
                started += row == "#started"
                if row.startswith("#error"):
                    errors.append(row[len("#error "):])
                continue
            try:
                read = _read(json.loads(row), root)
            except (ValueError, KeyError, TypeError):
                continue
            key = (read.buffer, read.op, read.argument, read.at)
            if key in merged:
                merged[key].tests = list(dict.fromkeys([*merged[key].tests, *read.tests]))
            else:
                merged[key] = read
    if started == 0 or errors:
        why = "; ".join(dict.fromkeys(errors)) or NOT_STARTED
        return SanitizerResult(measured=False, note=f"uninitialised reads not measured: {why}")
    lines = {f.path: set(f.lines) for f in changed}
    result = SanitizerResult()
    for read in merged.values():
        path, _, line = read.buffer.rpartition(":")
        (result.reads if int(line) in lines.get(path, ()) else result.elsewhere).append(read)
    return result


def _read(raw: dict, root: Path) -> UninitRead:
    path, _, line = raw["site"].rpartition(":")
    rel = _relative(path, root)
    try:
        code = (root / rel).read_text(errors="replace").splitlines()[int(line) - 1].strip()
    except (OSError, IndexError):
        code = ""
    return UninitRead(buffer=f"{rel}:{line}", code=code, op=raw["op"], argument=raw.get("arg"),
                      uninitialised=raw.get("uninitialised", 0), elements=raw.get("of", 0),
                      index=raw.get("index") or [], at=_where(raw.get("at"), root), via=_where(raw.get("via"), root),
                      tests=[raw["test"]] if raw.get("test") else [])


def _relative(path: str, root: Path) -> str:
    for base in (str(root), os.path.realpath(root)):
        if path.startswith(base + os.sep):
            return path[len(base) + 1:]
    return path


def _where(where: str | None, root: Path) -> str | None:
    """'file:line (function)' with the file made repo-relative when it is in the repo."""
    if where is None:
        return None
    return _relative(where, root)
