"""Reading unified diffs: hygiene problems of a submitted patch, and the lines it adds.

The hygiene check runs on the raw text before anything is applied, so a binary blob or a
path that escapes the repo is refused without touching a workspace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from agent.env.candidate import MAX_DIFF_BYTES, megabytes

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_GIT_HEADER = re.compile(r"^diff --git (\S+) (\S+)$")
_PATH_LINES = ("--- ", "+++ ", "rename from ", "rename to ", "copy from ", "copy to ")
_MODE_LINES = ("new file mode ", "new mode ", "old mode ", "deleted file mode ")
_REFUSED_MODES = {"120000": "a symbolic link", "160000": "a submodule"}


@dataclass
class FileLines:
    """New-side line numbers a diff adds or changes in one file."""

    path: str
    lines: list[int] = field(default_factory=list)


def _unquote(path: str) -> str:
    path = path.strip()
    if len(path) >= 2 and path[0] == path[-1] == '"':
        path = path[1:-1].encode().decode("unicode_escape").encode("latin-1").decode("utf-8", "replace")
    return path.split("\t")[0]


def _strip_prefix(path: str) -> str:
    return path[2:] if path[:2] in ("a/", "b/") else path


def _path_problem(path: str) -> str | None:
    if path == "/dev/null":
        return None
    p = PurePosixPath(_strip_prefix(path))
    if path.startswith("/") or p.is_absolute():
        return f"absolute path outside the repo: {path}"
    if ".." in p.parts:
        return f"path outside the repo: {path}"
    if p.parts and p.parts[0] == ".git":
        return f"path inside .git: {path}"
    return None


def _walk(patch: str):
    """Yield (kind, text) for each line: "hunk" for lines inside a hunk body, "header" otherwise."""
    old_left = new_left = 0
    for line in patch.splitlines():
        if old_left > 0 or new_left > 0:
            tag = line[:1]
            if tag in ("-", " ", ""):
                old_left -= 1
            if tag in ("+", " ", ""):
                new_left -= 1
            if tag == "\\":  # "\ No newline at end of file"
                continue
            yield "hunk", line
            continue
        m = _HUNK.match(line)
        if m:
            old_left = int(m.group(2) if m.group(2) is not None else 1)
            new_left = int(m.group(4) if m.group(4) is not None else 1)
        yield "header", line


def hygiene_problems(patch: str) -> list[str]:
    """Why a patch may not be applied at all: its size, binary content, links, paths outside the repo.

    A diff over MAX_DIFF_BYTES is no source change: refused at once, never read further or graded."""
    size = len(patch.encode("utf-8", errors="surrogateescape"))
    if size > MAX_DIFF_BYTES:
        return [f"diff too large: {size:,} bytes, over the {megabytes(MAX_DIFF_BYTES)} limit (not graded)"]
    problems: list[str] = []
    for kind, line in _walk(patch):
        if kind != "header":
            continue
        if line.startswith("GIT binary patch") or (line.startswith("Binary files ") and line.endswith(" differ")):
            problems.append("binary change: " + (line if line.startswith("Binary") else "GIT binary patch"))
        elif line.startswith(_MODE_LINES):
            mode = line.rsplit(" ", 1)[-1]
            if mode in _REFUSED_MODES:
                problems.append(f"refused file mode {mode} ({_REFUSED_MODES[mode]})")
        elif line.startswith("index ") and line.rsplit(" ", 1)[-1] in _REFUSED_MODES:
            problems.append(f"refused file mode {line.rsplit(' ', 1)[-1]} ({_REFUSED_MODES[line.rsplit(' ', 1)[-1]]})")
        else:
            paths: list[str] = []
            m = _GIT_HEADER.match(line)
            if m:
                paths = [m.group(1), m.group(2)]
            elif line.startswith(_PATH_LINES):
                paths = [_unquote(line.split(" ", 1)[1] if line.startswith(("--- ", "+++ "))
                                  else line.split(" ", 2)[2])]
            for p in paths:
                problem = _path_problem(_unquote(p))
                if problem:
                    problems.append(problem)
    return list(dict.fromkeys(problems))


def added_lines(diff: str) -> list[FileLines]:
    """Per file, the new-side line numbers of `+` lines (any context size; -U0 is cheapest)."""
    out: list[FileLines] = []
    current: FileLines | None = None
    new_no = 0
    for kind, line in _walk(diff):
        if kind == "header":
            if line.startswith("+++ "):
                path = _unquote(line[4:])
                current = None if path == "/dev/null" else FileLines(_strip_prefix(path))
                if current is not None:
                    out.append(current)
            m = _HUNK.match(line)
            if m:
                new_no = int(m.group(3))
            continue
        tag = line[:1]
        if tag == "+":
            if current is not None:
                current.lines.append(new_no)
            new_no += 1
        elif tag in (" ", ""):
            new_no += 1
    return [f for f in out if f.lines]


def diff_summary(diff: str) -> str:
    """"2 files, +5 -5": the size of a change, from its text."""
    files = plus = minus = 0
    for line in diff.splitlines():
        if line.startswith("+++ "):
            files += 1
        elif line.startswith("+") and not line.startswith("+++"):
            plus += 1
        elif line.startswith("-") and not line.startswith("---"):
            minus += 1
    return f"{files} file{'s' if files != 1 else ''}, +{plus} -{minus}"


_FILE_HEADER = re.compile(r"^(?:diff --git |--- .*\n\+\+\+ )", re.M)


def is_unified_diff(patch: str) -> bool:
    """Whether `patch` has a file header (`diff --git`, or `---` then `+++`): text that has none is no
    patch, not one that changes nothing."""
    return bool(_FILE_HEADER.search(patch))


def unreadable(patch: str) -> str | None:
    """Why git cannot read `patch` as a diff, in git's words (`git apply`'s message, as applying it would
    say), else None; also None for an empty patch, which is no change rather than no diff. Text that is
    no diff (prose, a header alone, a diff cut short) is refused, never graded as a change of nothing.

    Only the text is read (`git apply --numstat`): no repository, base or workspace is needed."""
    if not patch.strip():
        return None
    from agent.env.workspace import PatchError, patch_paths

    try:
        patch_paths(patch)
    except PatchError as e:
        return re.sub(r"\s*\(allow with \"--allow-empty\"\)", "", str(e)).removeprefix("error: ")
    return None


def changes_anything(patch: str) -> bool:
    """False for a diff with nothing to grade: empty, or only blank lines and trailing spaces.

    Indentation counts as a change (it is Python's syntax); a new, deleted, renamed or
    re-moded file counts too, however blank.
    """
    removed: list[str] = []
    added: list[str] = []
    for kind, line in _walk(patch):
        if kind == "header":
            if line.startswith(("GIT binary patch", "Binary files ", *_MODE_LINES, "rename ", "copy ")):
                return True
            if line.startswith(("--- /dev/null", "+++ /dev/null")):
                return True
            if line.startswith("@@") or line.startswith("diff --git"):
                if removed != added:
                    return True
                removed, added = [], []
            continue
        text = line[1:].rstrip()
        if line[:1] == "-" and text:
            removed.append(text)
        elif line[:1] == "+" and text:
            added.append(text)
    return removed != added
