"""Files a reader can trust: whole or absent, never half written; JSON lines that survive a kill.

Every output of perfagent goes through here, so a `kill -9` at any moment leaves either the
old file or the new one, and a torn last line of a JSONL file is skipped, never believed.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator


def _umask() -> int:
    """The process's umask, read without changing it where Linux says it (os.umask can only set it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)  # elsewhere: set and restore (a brief window other threads could see)
    os.umask(old)
    return old


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to a temporary name beside `path`, fsync, rename over `path`.

    The file gets the mode a plain open() would give it (0666 less the umask: 0644 usually), not
    mkstemp's private 0600: results and patches are for reading by others.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), mode)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Any) -> None:
    atomic_write(path, json.dumps(data, indent=2, default=str) + "\n")


def read_json(path: Path) -> Any:
    """The parsed file, or None when it is missing or not JSON (the caller decides what that means); a file made
    elsewhere nested too deep to parse is not JSON to us either."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """One whole line, flushed: a crash never leaves half a record a reader would trust."""
    line = json.dumps(record, default=str) + "\n"
    with Path(path).open("a", encoding="utf-8") as f:
        f.write(line)


def iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The objects of a JSONL file; lines that are not whole JSON objects (a torn last line) are skipped."""
    path = Path(path)
    if not path.is_file():
        return
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            yield obj


def empty_folder(folder: Path) -> None:
    """Remove everything inside `folder` but keep the folder itself (a sandbox may have it mounted), whatever
    modes a process that could write there left in it; OSError if something stays."""
    if not folder.is_dir():
        return
    folder.chmod(0o755)
    for top, dirs, _ in os.walk(folder):
        for d in dirs:  # before the walk goes in, so that a folder left at mode 000 goes too (never through a link)
            if not os.path.islink(os.path.join(top, d)):
                os.chmod(os.path.join(top, d), 0o755)
    for child in folder.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
    left = next(folder.iterdir(), None)
    if left is not None:
        raise OSError(f"could not empty {folder}: {left.name} is still there")
