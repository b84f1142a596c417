"""The agent's tools. Names and schemas are stable: prompts, transcripts and tests depend on them.

Every path is confined to the workspace and protected paths are read-only. A handler never
raises into the loop: any failure comes back to the model as an error result.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from agent.env.sandbox import SandboxSpec, run_command
from agent.env.workspace import Workspace
from agent.util.globs import matches_any

MAX_TOOL_OUTPUT = 20_000
MAX_LIST = 500
MAX_GREP = 200

TOOL_SCHEMAS: list[dict[str, Any]] = [
    {
        "name": "list_files",
        "description": "List files (recursively) under a directory of the repository.",
        "input_schema": {"type": "object", "properties": {
            "path": {"type": "string", "description": "directory relative to the repo root", "default": "."}},
            "required": []},
    },
    {
        "name": "read_file",
        "description": "Read a file with numbered lines; optionally only lines start..end (1-based, inclusive). "
                       "Long output stops at a whole line and says which start to read on from.",
        "input_schema": {"type": "object", "properties": {
            "path": {"type": "string"}, "start": {"type": "integer"}, "end": {"type": "integer"}},
            "required": ["path"]},
    },
    {
        "name": "grep",
        "description": "Search files for a regular expression; returns path:line: text.",
        "input_schema": {"type": "object", "properties": {
            "pattern": {"type": "string"}, "path": {"type": "string", "default": "."}},
            "required": ["pattern"]},
    },
    {
        "name": "edit_file",
        "description": "Replace the exact text `old` by `new` in a file; `old` must occur exactly once.",
        "input_schema": {"type": "object", "properties": {
            "path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
            "required": ["path", "old", "new"]},
    },
    {
        "name": "write_file",
        "description": "Create or overwrite a file with `content`.",
        "input_schema": {"type": "object", "properties": {
            "path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"]},
    },
    {
        "name": "run",
        "description": "Run a shell command in the repository root (no network); returns exit code and output.",
        "input_schema": {"type": "object", "properties": {
            "command": {"type": "string"}, "timeout_s": {"type": "integer", "default": 300}},
            "required": ["command"]},
    },
    {
        "name": "run_checks",
        "description": "Run the task's correctness checks (incl. poisoned uninitialised memory) and a quick "
                       "perf comparison against the baseline; returns a summary. perf=false skips the perf part.",
        "input_schema": {"type": "object", "properties": {"perf": {"type": "boolean", "default": True}},
                         "required": []},
    },
    {
        "name": "submit",
        "description": "Finish: submit the current state of the repository with a summary of what changed and why.",
        "input_schema": {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]},
    },
]
TOOL_NAMES = [t["name"] for t in TOOL_SCHEMAS]
_TYPES = {"string": str, "integer": int, "boolean": bool}


@dataclass(frozen=True)
class ToolResult:
    """What a tool gives back: `content` for the model; `data` for a program reading the
    conversation (the rules policy reads run_checks' evaluation there), never sent to an API."""

    content: str
    is_error: bool = False
    data: dict[str, Any] | None = None


class ToolFailure(Exception):
    """Raised by a handler; becomes an error result the model can read."""


@dataclass
class Toolbox:
    """The tools bound to one workspace. `run_checks` is supplied by the loop (checks live elsewhere)."""

    workspace: Workspace
    protected: list[str] = field(default_factory=list)
    run_checks: Callable[[bool], ToolResult] | None = None  # perf -> summary (+ the evaluation as data)
    command_timeout_s: float = 300
    env: dict[str, str] | None = None  # the `run` tool's environment (the task's Python first on PATH)
    sandbox: SandboxSpec = SandboxSpec()  # what the `run` tool's commands may see: the task's (`for_task`)
    denials: list[dict[str, Any]] = field(default_factory=list)
    submitted: str | None = None

    @property
    def schemas(self) -> list[dict[str, Any]]:
        return TOOL_SCHEMAS

    def call(self, name: str, args: Any, call_id: str = "") -> ToolResult:
        schema = next((t for t in TOOL_SCHEMAS if t["name"] == name), None)
        if schema is None:
            return ToolResult(f"unknown tool {name!r}; available: {', '.join(TOOL_NAMES)}", True)
        try:
            args = _validate(schema, args)
            result = getattr(self, f"_{name}")(**args)
            return result if isinstance(result, ToolResult) else ToolResult(result)
        except ToolFailure as e:
            if getattr(e, "denied", False):
                self.denials.append({"tool_name": name, "tool_use_id": call_id, "tool_input": args, "reason": str(e)})
            return ToolResult(str(e), True)
        except Exception as e:  # noqa: BLE001 — a tool bug must not end the run
            return ToolResult(f"{name} failed: {type(e).__name__}: {e}", True)

    # -- paths ----------------------------------------------------------------------------
    def _resolve(self, path: str, *, write: bool = False) -> Path:
        root = self.workspace.root.resolve()
        if not path or os.path.isabs(path) or path.startswith("~"):
            raise ToolFailure(f"path must be relative to the repository root: {path!r}")
        target = (root / path).resolve()
        if target != root and root not in target.parents:
            raise ToolFailure(f"path leads outside the repository: {path!r}")
        rel = target.relative_to(root).as_posix()
        if rel == ".git" or rel.startswith(".git/"):
            raise ToolFailure(f"the .git folder is not accessible: {path!r}")
        if target.is_file() and target.stat().st_nlink > 1:
            # A hard link may share its contents with a file outside the workspace.
            raise ToolFailure(f"refused: {rel} is a hard link (it may be a file outside the repository)")
        if write and matches_any(rel, self.protected):
            err = ToolFailure(f"permission denied: {rel} is protected (read-only) for this task")
            err.denied = True  # type: ignore[attr-defined]
            raise err
        return target

    def _rel(self, p: Path) -> str:
        return p.relative_to(self.workspace.root.resolve()).as_posix()

    def _files_under(self, base: Path) -> list[Path]:
        """Files below `base`; no link is followed, soft or hard (either may lead outside)."""
        files = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d not in (".git", "__pycache__", ".pytest_cache"))
            for name in sorted(filenames):
                st = (p := Path(dirpath) / name).lstat()
                if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                    files.append(p)
        return files

    # -- handlers -------------------------------------------------------------------------
    def _list_files(self, path: str = ".") -> str:
        base = self._resolve(path)
        if not base.is_dir():
            raise ToolFailure(f"not a directory: {path}")
        files = [self._rel(f) for f in self._files_under(base)]
        more = f"\n[{len(files) - MAX_LIST} more files not shown]" if len(files) > MAX_LIST else ""
        return "\n".join(files[:MAX_LIST]) + more if files else "(no files)"

    def _read_file(self, path: str, start: int | None = None, end: int | None = None) -> str:
        """Whole numbered lines from `start`, up to `end` or MAX_TOOL_OUTPUT characters; when the cap
        stops it early, a last line says where to read on (nothing is ever cut from the middle)."""
        target = self._resolve(path)
        if not target.is_file():
            raise ToolFailure(f"no such file: {path}")
        lines = target.read_text(encoding="utf-8", errors="replace").splitlines()
        if not lines:
            return "(empty file)"
        lo = max(1, start or 1)
        hi = min(len(lines), end or len(lines))
        if lo > hi:
            raise ToolFailure(f"start {lo} is past the end of {path} ({len(lines)} lines)")
        width = len(str(hi))
        page: list[str] = []
        size = 0
        for i in range(lo, hi + 1):
            line = f"{i:>{width}}  {lines[i - 1]}"
            if page and size + len(line) + 1 > MAX_TOOL_OUTPUT:
                page.append(f"[{path} has {len(lines)} lines; shown {lo}-{i - 1}: "
                            f"call read_file with start={i} to continue]")
                break
            page.append(line[:MAX_TOOL_OUTPUT])  # only a single line longer than the cap is shortened
            size += len(line) + 1
        return "\n".join(page)

    def _grep(self, pattern: str, path: str = ".") -> str:
        try:
            rx = re.compile(pattern)
        except re.error as e:
            raise ToolFailure(f"bad regular expression: {e}") from None
        base = self._resolve(path)
        files = [base] if base.is_file() else self._files_under(base)
        hits: list[str] = []
        for f in files:
            try:
                text = f.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            for n, line in enumerate(text.splitlines(), 1):
                if rx.search(line):
                    hits.append(f"{self._rel(f)}:{n}: {line.strip()[:300]}")
        more = f"\n[{len(hits) - MAX_GREP} more matches not shown]" if len(hits) > MAX_GREP else ""
        return "\n".join(hits[:MAX_GREP]) + more if hits else "(no matches)"

    def _edit_file(self, path: str, old: str, new: str) -> str:
        target = self._resolve(path, write=True)
        if not target.is_file():
            raise ToolFailure(f"no such file: {path}")
        if not old:
            raise ToolFailure("`old` must not be empty")
        text = target.read_text(encoding="utf-8")
        count = text.count(old)
        if count != 1:
            raise ToolFailure(f"`old` must match exactly once in {path}; it matches {count} times")
        target.write_text(text.replace(old, new, 1), encoding="utf-8")
        return f"edited {self._rel(target)}"

    def _write_file(self, path: str, content: str) -> str:
        target = self._resolve(path, write=True)
        if target.is_dir():
            raise ToolFailure(f"is a directory: {path}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return f"wrote {self._rel(target)} ({len(content)} characters)"

    def _run(self, command: str, timeout_s: int | None = None) -> str:
        timeout = min(float(timeout_s or self.command_timeout_s), self.command_timeout_s)
        res = run_command(command, self.workspace.root, sandbox=self.sandbox, timeout_s=timeout, env=self.env,
                          max_output=MAX_TOOL_OUTPUT)
        status = "timed out" if res.timed_out else f"exit code {res.exit_code}"
        return f"[{status}, {res.duration_s:.1f}s]\n{res.output}"

    def _run_checks(self, perf: bool = True) -> ToolResult:
        if self.run_checks is None:
            raise ToolFailure("run_checks is not available in this run")
        return self.run_checks(perf)

    def _submit(self, summary: str) -> str:
        self.submitted = summary
        return "submitted"


def _validate(schema: dict[str, Any], args: Any) -> dict[str, Any]:
    props = schema["input_schema"]["properties"]
    if not isinstance(args, dict):
        raise ToolFailure(f"{schema['name']}: arguments must be a JSON object, got {type(args).__name__}")
    unknown = sorted(set(args) - set(props))
    if unknown:
        raise ToolFailure(f"{schema['name']}: unknown argument(s) {', '.join(unknown)}")
    for name in schema["input_schema"]["required"]:
        if name not in args:
            raise ToolFailure(f"{schema['name']}: missing required argument {name!r}")
    for name, value in args.items():
        want = _TYPES[props[name]["type"]]
        if want is int and isinstance(value, str) and value.strip().lstrip("-").isdigit():
            args = {**args, name: int(value)}
        elif not isinstance(value, want) or (isinstance(value, bool) and want is not bool):
            raise ToolFailure(f"{schema['name']}: argument {name!r} must be a {props[name]['type']}")
    return args
