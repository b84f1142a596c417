"""Which changed lines need instruction positions, and what those positions say (pure: no interpreter run)."""

from __future__ import annotations

from agent.checks import arms

SOURCE = ("def f(): return 1\n"           # 1: two statements
          "x = 1\n"                       # 2: one statement, no conditional: line coverage is enough
          "if c: x = 2\n"                 # 3
          "y = a if c else b\n"           # 4
          "def g(v):\n"                   # 5
          "    return v and 1\n")         # 6


def test_fine_lines_are_those_with_several_statements_or_a_conditional() -> None:
    fs = arms.shape(SOURCE, [1, 2, 3, 4, 6])
    assert sorted(fs.lines) == [1, 3, 4, 6]
    assert 2 not in fs.record and {1, 3, 4, 6} <= fs.record


def test_a_statement_runs_only_when_an_instruction_of_its_own_ran() -> None:
    fs = arms.shape(SOURCE, [1, 3])
    at_import = {(1, 0, 1, 17), (3, 3, 3, 4)}  # the def statement, the if's test
    assert arms.untaken(fs, 1, at_import, set())[0] is False
    assert arms.untaken(fs, 1, at_import | {(1, 9, 1, 17)}, set())[0] is True  # f's `return 1` ran
    assert arms.untaken(fs, 3, at_import, set())[0] is False  # the body `x = 2` never ran


def test_arms_by_the_instructions_inside_them_and_by_where_a_jump_landed() -> None:
    fs = arms.shape(SOURCE, [4, 6])
    ran = {(4, 9, 4, 10), (4, 16, 4, 17), (4, 0, 4, 1)}  # the test, the else arm, the store
    full, taken, untaken = arms.untaken(fs, 4, ran, set())
    assert full and taken == ["the conditional expression's else arm"]
    assert untaken == ["the conditional expression's if arm"]
    ran6 = {(6, 11, 6, 12), (6, 4, 6, 18), (6, 17, 6, 18)}  # `v`, the return, the right operand
    no_jump = arms.untaken(fs, 6, ran6, set())
    assert no_jump[2] == ["the `and` short-circuiting"]
    landed_after = {((6, 11, 6, 18), (6, 4, 6, 18))}  # from the `and` to the return, outside it
    assert arms.untaken(fs, 6, ran6, landed_after)[2] == []
