"""Cutting long text: the tail is kept, and the cut is said."""

from __future__ import annotations

from agent.util.text import first_line, tail, tail_lines


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
