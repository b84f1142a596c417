"""Seals on what the harness records and later reads back: an HMAC-SHA256 under this user's key.

checks.json (re-graded by `check --regrade`, which `--strict` makes a CI gate), `check --evidence`
files, report.json (a finished job that `batch --resume` skips) and the base-result cache (a task's
base trusted without running it) are files anyone with the folder can edit. Each is written with a
sidecar `<name>.mac`: the MAC of the file's exact bytes, so a list rewritten with one more entry is
sealed whole. A reader that decides a verdict or a skip from such a file takes it only when its seal
verifies; a file with no seal (recorded elsewhere, or before seals) or a broken one is not evidence.

The key is 32 random bytes in `evidence.key` in the user's perfagent folder ($PERFAGENT_HOME, else
~/.local/share/perfagent), mode 0600, made on first use. It lives under the home folder, which every
sandbox replaces with an empty tmpfs (agent.env.sandbox), so no checked program can read it; a
$PERFAGENT_HOME elsewhere must likewise be outside what the sandbox shows (system folders, the
Python prefixes, PATH and PYTHONPATH entries, a task's `read`). `sign`/`verify` are pure; `load_key`
is the one place the key is read or made.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import tempfile
from pathlib import Path
from typing import Any, Literal

from agent.util.files import atomic_write

KEY_FILE = "evidence.key"
KEY_BYTES = 32
MAC_SUFFIX = ".mac"

Seal = Literal["sealed", "unsealed", "broken"]  # verifies | no sidecar | sidecar does not verify
WHY = {"unsealed": "carries no MAC from this machine's perfagent (recorded elsewhere, or before evidence was sealed)",
       "broken": "has a MAC that does not verify (changed since this machine's perfagent wrote it)"}


class SealError(Exception):
    """The key cannot be read or made, or a file's seal does not verify: one line."""


def sign(key: bytes, data: bytes) -> str:
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def verify(key: bytes, data: bytes, mac: str) -> bool:
    return hmac.compare_digest(sign(key, data), mac.strip())


def home() -> Path:
    """The user's perfagent folder: state that is not a cache (deleting ~/.cache must not unseal runs)."""
    given = os.environ.get("PERFAGENT_HOME")
    return Path(given) if given else Path.home() / ".local" / "share" / "perfagent"


def load_key(folder: Path | None = None) -> bytes:
    """This user's evidence key, made on first use: written whole to a private temporary file, then
    linked to its name, which fails if another process got there first (then theirs is read)."""
    path = (folder or home()) / KEY_FILE
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{KEY_FILE}.")  # O_EXCL, mode 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(KEY_BYTES))
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
        finally:
            os.unlink(tmp)
    except OSError as e:
        raise SealError(f"{path}: cannot make the evidence key: {e.strerror or e}") from None
    return _read_key(path)


def _read_key(path: Path) -> bytes:
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as e:
        raise SealError(f"{path}: cannot read the evidence key: {e.strerror or e}") from None
    if len(key) != KEY_BYTES:
        raise SealError(f"{path}: not an evidence key ({len(key)} bytes, not {KEY_BYTES}): remove it to make a new one")
    return key


def mac_path(path: Path) -> Path:
    return Path(path).with_name(Path(path).name + MAC_SUFFIX)


def write_sealed(path: Path, text: str, key: bytes | None = None) -> None:
    """`text` at `path` and its seal beside it, each written atomically; between the two a reader
    finds a seal that does not verify, which it treats as no evidence (never as evidence)."""
    key = key if key is not None else load_key()
    atomic_write(Path(path), text)
    atomic_write(mac_path(path), sign(key, text.encode("utf-8")) + "\n")


def write_sealed_json(path: Path, data: Any, key: bytes | None = None) -> None:
    write_sealed(path, json.dumps(data, indent=2, default=str) + "\n", key)


def seal_of(data: bytes, mac: str | None, key: bytes) -> Seal:
    """Pure: what a file's bytes and its sidecar's text (None: no sidecar) say under `key`."""
    if mac is None:
        return "unsealed"
    return "sealed" if verify(key, data, mac) else "broken"


def read_mac(path: Path) -> str | None:
    try:
        return mac_path(path).read_text(encoding="ascii", errors="replace")
    except OSError:
        return None


def read_sealed(path: Path, key: bytes | None = None) -> bytes:
    """The bytes at `path` when its seal verifies; SealError (one line, naming the file) when it has
    none or a broken one. OSError when the file itself cannot be read. The bytes are read once, so
    what was verified is what the caller parses."""
    data = Path(path).read_bytes()
    key = key if key is not None else load_key()
    state = seal_of(data, read_mac(path), key)
    if state != "sealed":
        raise SealError(f"{path}: {WHY[state]}: re-run the check")
    return data


def is_sealed(path: Path, key: bytes | None = None) -> bool:
    """Whether `path` exists and its seal verifies."""
    try:
        read_sealed(path, key)
    except (OSError, SealError):
        return False
    return True
