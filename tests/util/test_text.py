"""Cutting long text: the tail is kept, and the cut is said. Text from elsewhere: shown, never obeyed."""

from __future__ import annotations

import csv
import io

from rich.console import Console
from rich.table import Table

from agent.util.text import csv_cell, first_line, markup_safe, strip_controls, tail, tail_lines


def test_tail_keeps_the_end_from_a_line_start_and_says_it_cut():
    text = "".join(f"line {i}\n" for i in range(1000))
    out = tail(text, 100)
    assert out.endswith("line 999\n") and out.splitlines()[1].startswith("line ")
    assert out.startswith("[... ") and "characters cut ...]" in out
    assert int(out.split()[1]) + len(out.split("\n", 1)[1]) == len(text)
    assert tail("short", 100) == "short"


def test_tail_lines_and_first_line():
    assert tail_lines("a\nb\nc\n\n", 2, indent="  ") == "  b\n  c"
    assert first_line("\nboom: x\ntrace") == "boom: x" and first_line("y" * 500, 10) == "y" * 10


# -- text from elsewhere ----------------------------------------------------------------------------------
def test_strip_controls_removes_whole_sequences_and_keeps_the_text():
    osc8 = "\x1b]8;;http://evil\x07click\x1b]8;;\x1b\\"
    assert strip_controls(f"a{osc8}b") == "aclickb"  # the link's address goes with its ESC
    assert strip_controls("\x1b[2J\x1b[1;31mred\x1b[0m\x1b[?25l") == "red"  # CSI: clear, colour, cursor
    assert strip_controls("\x9b31mx\x9d0;title\x9cy") == "xy"  # the 8-bit CSI and OSC
    assert strip_controls("\x1bPdcs\x1b\\t\x1b_apc\x07u\x1bcv\x1b(Bw") == "tuvw"  # DCS, APC, RIS, charset
    assert strip_controls("x\x1b]0;unterminated") == "x"  # a string with no end is cut where it starts
    assert strip_controls("bell\x07 bs\x08 nul\x00 del\x7f c1\x85 bidi\u202e zw\u200b") == "bell bs nul del c1 bidi zw"
    assert strip_controls("café · ✓ 日本") == "café · ✓ 日本"  # printable text untouched


def test_strip_controls_keeps_lines_only_where_they_are_meant():
    assert strip_controls("a\nb\tc\r\nd\re") == "a b c  d e"  # a name stays on its line
    assert strip_controls("a\nb\tc\r\nd\re", multiline=True) == "a\nb\tc\nde"  # a claim keeps its lines


def test_markup_safe_shows_markup_as_written():
    name = "[link=http://evil]x[/link] [/bad] [red]r\x1b[2J"
    console = Console(file=io.StringIO(), width=200, color_system="truecolor", force_terminal=True, highlight=False)
    t = Table()
    t.add_column("name")
    t.add_row(markup_safe(name))
    console.print(t)
    console.print(f"[red]{markup_safe(name)}[/]", highlight=False)
    out = console.file.getvalue()
    assert out.count("[link=http://evil]x[/link] [/bad] [red]r") == 2
    assert "\x1b]8;" not in out and "\x1b[2J" not in out  # no hyperlink, no clear: only rich's own colours


def test_csv_cell_neutralises_formulas_and_leaves_numbers():
    assert [csv_cell(v) for v in ('=HYPERLINK("http://x","y")', "+1", "-1+1", "@SUM(A1)", "\tx", "\r=1")] == [
        "\'=HYPERLINK(\"http://x\",\"y\")", "\'+1", "\'-1+1", "\'@SUM(A1)", "\'\tx", "\'=1"]
    assert [csv_cell(v) for v in (-0.5, -3, 1.5, None, True)] == [-0.5, -3, 1.5, None, True]  # numbers stay numbers
    assert csv_cell("\x1b[0m=1+1") == "\'=1+1"  # an escape in front hides no formula
    assert csv_cell("rules") == "rules" and csv_cell("a=b") == "a=b" and csv_cell("") == ""
    buf = io.StringIO()
    csv.writer(buf).writerow([csv_cell(-0.5), csv_cell("-0.5"), csv_cell("=1")])
    assert buf.getvalue() == "-0.5,\'-0.5,\'=1\r\n"
