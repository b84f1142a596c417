"""Text for a reader: cut where the error is, and made safe where a third party wrote it.

One place for each, so every view cuts the same way and says that it cut, and every view that shows a
name, note or claim from a file made elsewhere (a ledger, a report, a task record) shows it as text: no
escape sequence reaches a terminal, no markup reaches rich, no formula reaches a spreadsheet.
"""

from __future__ import annotations

import re
import unicodedata

from rich.markup import escape


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


# -- text from elsewhere ----------------------------------------------------------------------------------
# A terminal's escape sequences, whole: a CSI (colours, clearing the screen, moving the cursor), an OSC, DCS,
# SOS, PM or APC string up to its terminator (an OSC 8 hyperlink, a title), each in its 7-bit and 8-bit
# form, and the other two-character escapes. Stripping only the ESC would leave "]8;;http://..." behind.
_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?")
_SPACES = {"\n": " ", "\r": " ", "\t": " ", "\v": " ", "\f": " "}


def strip_controls(text: str, *, multiline: bool = False) -> str:
    """`text` with no escape sequence and no control or format character (C0, C1, DEL, bidi overrides):
    a name, note or claim made elsewhere must not drive the terminal it is shown on. `multiline` keeps
    newlines and tabs (a claim, a diff); otherwise they become spaces (a name stays on its line)."""
    text = _SEQUENCE.sub("", text)
    if multiline:
        text = text.replace("\r\n", "\n")
        keep = {"\n": "\n", "\t": "\t"}
    else:
        keep = _SPACES
    return "".join(keep.get(c, "") if unicodedata.category(c)[0] == "C" else c for c in text)


def markup_safe(text: str, *, multiline: bool = False) -> str:
    """`text` for a rich string that is parsed as markup (a table cell, a title, console.print): stripped
    of controls, and its brackets escaped, so "[red]" or "[link=...]" in a name is shown as written."""
    return escape(strip_controls(text, multiline=multiline))


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # what makes a spreadsheet read a cell as a formula


def csv_cell(value: object) -> object:
    """A CSV cell a spreadsheet shows as written: a string stripped of escape sequences and, when it
    starts as a formula does, led by an apostrophe (OWASP's CSV injection rule). Numbers stay numbers:
    only a str is touched, so -0.5 is a number and the string "-1+1" is text."""
    if not isinstance(value, str):
        return value
    text = strip_controls(value, multiline=True)
    return "'" + text if text.startswith(FORMULA_START) else text
