"""Cutting long text for a reader: the end of a command's output is where its error is.

One place for it, so every view cuts the same way and says that it cut.
"""

from __future__ import annotations


def tail(text: str, limit: int) -> str:
    """The last `limit` characters, starting at a line boundary where one is near; marked when cut."""
    if len(text) <= limit:
        return text
    kept = text[-limit:]
    newline = kept.find("\n")
    if 0 <= newline < limit // 4:
        kept = kept[newline + 1:]
    return f"[... {len(text) - len(kept)} characters cut ...]\n{kept}"


def tail_lines(text: str, lines: int, indent: str = "") -> str:
    """The last `lines` non-trailing lines, each indented (for a block inside a summary)."""
    return "\n".join(indent + ln for ln in text.strip().splitlines()[-lines:])


def first_line(text: str, limit: int = 300) -> str:
    """The first line, at most `limit` characters: an error message in one line."""
    return (text.strip().splitlines() or [""])[0][:limit]
