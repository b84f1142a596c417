"""One perf measurement at a time per device, across processes: an fcntl lock file per device.

flock locks belong to an open file description, so two threads of one process (batch
workers) exclude each other too. The kernel drops the lock when a holder dies.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Callable, Iterator


def default_lock_dir() -> Path:
    """Where the locks are when no one names a folder: PERFAGENT_LOCK_DIR (the test suite points it at
    a folder of its own, so it never waits behind, or holds up, measurements of other processes on the
    machine), else ~/.cache/perfagent/locks. Read when a lock is wanted, never at import."""
    return Path(os.environ.get("PERFAGENT_LOCK_DIR") or "~/.cache/perfagent/locks")


def lock_path(lock_dir: Path, device: str) -> Path:
    return lock_dir.expanduser() / (re.sub(r"[^A-Za-z0-9_.-]", "-", device) + ".lock")


@contextmanager
def device_lock(device: str, lock_dir: Path | None = None, log: Callable[[str], None] = lambda _: None,
                tick_s: float = 15.0) -> Iterator[Path]:
    """Hold the lock for `device` ("cpu", "cuda:0") for the duration of the block (in `lock_dir`, else
    `default_lock_dir()`); while waiting for it, say so every `tick_s`, with how long so far and who
    holds it now."""
    path = lock_path(lock_dir or default_lock_dir(), device)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        start = time.monotonic()
        said = None
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - start
                if said is None or waited - said >= tick_s:
                    so_far = f", {waited:.0f}s so far" if said is not None else ""
                    log(f"waiting for the {device} perf lock ({path}{so_far}): {holder(f)}")
                    said = waited
                time.sleep(min(0.2, tick_s))
        _write_holder(f)
        try:
            yield path
        finally:
            _write_holder(f, clear=True)
            fcntl.flock(f, fcntl.LOCK_UN)


def _write_holder(f: IO[str], *, clear: bool = False) -> None:
    """Say in the lock file who holds it (pid, since when, command); emptied on release. Best effort."""
    try:
        f.seek(0)
        f.truncate()
        if not clear:
            f.write(json.dumps({"pid": os.getpid(), "since": time.time(), "command": " ".join(sys.argv)[:300]}) + "\n")
        f.flush()
    except OSError:
        pass


def holder(f: IO[str], now: float | None = None) -> str:
    """Who holds the lock, in words, from what the holder wrote into the file when it took it."""
    try:
        f.seek(0)
        info = json.loads(f.read() or "null")
        pid, since, command = int(info["pid"]), float(info["since"]), str(info.get("command") or "")
    except (OSError, ValueError, TypeError, KeyError):
        return "another measurement is running (its holder did not say who it is)"
    waited = max(0.0, (time.time() if now is None else now) - since)
    ago = f"{waited:.0f}s" if waited < 120 else f"{waited / 60:.1f} min"
    at = time.strftime("%H:%M:%S", time.localtime(since))
    return f"held by pid {pid} since {at} ({ago} ago)" + (f": {command}" if command else "")
