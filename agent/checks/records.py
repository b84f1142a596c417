"""The rows our check hook's recorders write, read back: only those signed with the run's key count.

Each recording run gets a fresh key (`new_key`) that reaches the hook outside the environment
(agent.checks.check_hook); every row the hook writes ends in a tag, an HMAC of the row under that
key. Code under test can write into the records folder (the hook must), but not a row that
verifies, so it cannot claim a line ran or hide a sanitizer's row by rewriting another.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from pathlib import Path


def new_key() -> str:
    return secrets.token_hex(32)


@dataclass
class Rows:
    """One record file's rows whose tags verify (tags stripped), what was refused, and whether the
    process said it ran without a key."""

    rows: list[str] = field(default_factory=list)
    signed: list[str] = field(default_factory=list)  # the same rows as written, for a digest
    forged: int = 0
    no_key: bool = False


def read_rows(path: Path, key: str) -> Rows:
    try:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:
        return Rows()
    return rows_in(text, key)


def rows_in(text: str, key: str) -> Rows:
    """The rows of `text` (a record file, or a process's output: other lines count as refused)."""
    out = Rows()
    secret = key.encode()
    for line in text.splitlines():
        if line == "#nokey":
            out.no_key = True
            continue
        row, sep, tag = line.rpartition("\t")
        expected = hmac.new(secret, row.encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()[:32]
        if sep and hmac.compare_digest(tag, expected):
            out.rows.append(row)
            out.signed.append(line)
        elif line.strip():
            out.forged += 1
    return out


def digest(signed: list[str]) -> str:
    """The digest the sanitizer's closing row carries, of the rows before it."""
    h = hashlib.sha256()
    for line in signed:
        h.update(line.encode("utf-8", "surrogateescape") + b"\n")
    return h.hexdigest()
