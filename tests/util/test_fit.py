"""agent.util.fit: a table drawn at any width never breaks a word; it leaves columns out (and says which), or
stacks its rows, instead. Rich alone folds a word when a table is too wide ("corre ct", "withi n noise")."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agent.util.fit import LONG_WORD, Column, FitTable, break_long, share

BOX = "│┃━─┏┓┗┛┡┩└┘┌┐├┤┬┴┼╇╈╋┳┻╭╮╯╰"
HEADERS = ("model", "jobs", "correct", "faster", "no change", "failed", "geomean speedup", "Opt@K", "of ref. gain")
ROWS = [("anthropic:claude-sonnet-4-5", "5", "3 (60%)", "2 (40%)", "0", "2 (1 error_max_turns, 1 failed to run)",
         "1.31x (n=3)", "50% (1/2; 1 within noise)", "50% (n=2)"),
        ("rules", "3", "2 (67%)", "1 (33%)", "0", "0", "1.61x (n=1)", "0% (0/2)", "50% (n=1)")]


def drawn(renderable, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.export_text()


def tokens(text: str) -> set[str]:
    return set(re.sub(f"[{BOX}]", " ", text).split())


def quality(**kw) -> FitTable:
    drop = {"jobs": 6, "no change": 5, "of ref. gain": 4, "failed": 3, "geomean speedup": 2}
    return FitTable([Column(h, drop=drop.get(h, 0)) for h in HEADERS], ROWS, title="results per model", **kw)


def shown_words(table: FitTable, width: int) -> set[str]:
    """Every word of the columns the table shows at `width` (all of them when it stacks its rows)."""
    lay = table.layout(width)
    keep = range(len(table.columns)) if lay.kind == "stacked" else lay.keep
    words = {w for i in keep for row in table.rows for w in row[i].plain.split()}
    return words | ({w for i in keep for w in table.columns[i].header.split()} if lay.kind != "stacked" else set())


@pytest.mark.parametrize("width", [30, 40, 60, 80, 100, 120, 200])
def test_no_word_is_broken_at_any_width(width):
    table = quality()
    text = drawn(table, width)
    missing = shown_words(table, width) - tokens(text)
    assert not missing, f"broken at {width} columns: {sorted(missing)}\n{text}"
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width


def test_rich_alone_breaks_these_words_at_80_columns():
    """The failure this module exists for, shown on rich's own Table: the test above would catch it."""
    t = Table()
    for h in HEADERS:
        t.add_column(h, overflow="fold")
    for row in ROWS:
        t.add_row(*row)
    assert {"correct", "anthropic:claude-sonnet-4-5"} - tokens(drawn(t, 80))


def test_wide_is_boxed_whole_and_narrow_leaves_out_the_least_useful_columns_and_says_so():
    wide = drawn(quality(), 200)
    assert "┏" in wide and "left out" not in wide and "of ref. gain" in wide
    narrow = drawn(quality(), 80)
    assert "┏" not in narrow
    note = next(line for line in narrow.splitlines() if line.startswith("(left out at 80 columns: "))
    left = note.removeprefix("(left out at 80 columns: ").rstrip(") ").split(", ")
    assert left[0] == "jobs" and "model" not in left and "correct" not in left and "Opt@K" not in left
    assert "anthropic:claude-sonnet-4-5" in tokens(narrow)


def test_too_narrow_for_the_columns_that_matter_each_row_is_stacked():
    table = FitTable([Column("model"), Column("verdict"), Column("speedup", drop=1)],
                     [("anthropic:claude-sonnet-4-5", "unverified", "1.2x")])
    assert table.layout(30).kind == "stacked"
    text = drawn(table, 30)
    assert {"anthropic:claude-sonnet-4-5", "verdict:", "unverified", "speedup:", "1.2x"} <= tokens(text)


def test_short_columns_get_their_width_before_a_long_one():
    assert share(10, [3, 100]) == [3, 7]
    assert share(10, [100, 100]) == [5, 5]
    assert share(0, [4, 4]) == [0, 0] and share(9, [0, 2]) == [0, 2]


def test_a_token_longer_than_its_column_breaks_after_a_comma_or_slash():
    cell = Text("ran changed lines miniattn/flashattention_backend.py:214,216,218,225-226,231,233,238 ok",
                style="green")
    out = break_long(cell, 40)
    assert out.style == "green" and all(len(word) <= 40 for word in out.plain.split())
    assert out.plain.replace("\n", "") == cell.plain  # nothing added or lost
    assert all(line.endswith((",", ":", "/")) for line in out.plain.splitlines()[:-1])  # split where a list reads well
    table = FitTable([Column("check"), Column("result", long_words=True)], [("bench", cell)], show_header=False)
    text = drawn(table, 50)
    assert "214,216," in text and max(len(line.rstrip()) for line in text.splitlines()) <= 50
    assert table.layout(50).widths[1] >= LONG_WORD


def test_a_names_column_wraps_at_its_share_on_a_narrow_screen_only():
    rows = [("bench run under the sanitizer", "ran in 3.5s; no buffer of the patch read before it is written " * 3)]
    table = FitTable([Column("check", most=0.2), Column("result", long_words=True)], rows, show_header=False)
    assert table.layout(80).widths[0] == 16 and table.layout(200).widths[0] == len(rows[0][0])
    assert {"bench", "run", "under", "the", "sanitizer"} <= tokens(drawn(table, 80))
