"""One perf measurement at a time per device, across processes: an fcntl lock file per device.

flock locks belong to an open file description, so two threads of one process (batch
workers) exclude each other too. The kernel drops the lock when a holder dies.
"""

from __future__ import annotations

import fcntl
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

DEFAULT_LOCK_DIR = Path("~/.cache/perfagent/locks")


def lock_path(lock_dir: Path, device: str) -> Path:
    return lock_dir.expanduser() / (re.sub(r"[^A-Za-z0-9_.-]", "-", device) + ".lock")


@contextmanager
def device_lock(device: str, lock_dir: Path = DEFAULT_LOCK_DIR,
                log: Callable[[str], None] = lambda _: None) -> Iterator[Path]:
    """Hold the lock for `device` ("cpu", "cuda:0") for the duration of the block."""
    path = lock_path(lock_dir, device)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for the {device} perf lock ({path}): another measurement is running")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield path
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
