"""Red team, speed of code the bench never runs (issue 47): a quick check called "faster 2.74x" a change
the bench never executes, from a few noisy pairs under load.

| attack                                                              | must hold                              |
|---------------------------------------------------------------------|----------------------------------------|
| `perfagent check --quick` of a change whose only edited line is in  | the quick check records the bench's    |
|   `validate()`, which the tests call and the bench never does       |   lines (signed, whole) and none of    |
|                                                                     |   the change's ran; perf is never      |
|                                                                     |   "faster"; the change passes          |
| control: the same quick check of an edit to `work()`, which the     | the bench's records name the line      |
|   bench runs                                                        |                                        |

The bench's own speed between the sides is the machine's noise here, which no test can make say
"faster" at will: that a bench line record with none of the changed lines turns a metric's "faster"
into "not confirmed" is proven on recorded evidence in tests/checks/test_grade.py; this plays the
quick check end to end and shows the records it is graded on are gathered. Before, a quick check ran
no bench under the line recorder at all (`bench_check` was null).
"""

from __future__ import annotations

import pytest

from agent.env.sandbox import isolation
from redteam.lab import MOD, make_lab

pytestmark = pytest.mark.skipif(isolation().mode != "bwrap", reason="bubblewrap is not usable on this machine")

VALIDATED = MOD + '''

def validate(n):
    if n < 0:
        raise ValueError(n)
    return n
'''
TESTED = '''from pkg.mod import validate, work


def test_work():
    assert work(8) == 28


def test_validate():
    assert validate(3) == 3
'''


def test_a_quick_check_never_calls_faster_a_change_the_bench_never_ran(tmp_path):
    lab = make_lab(tmp_path, files={"pkg/mod.py": VALIDATED, "tests/test_mod.py": TESTED})
    unbenched = lab.patch({"pkg/mod.py": lambda t: t.replace("    return n\n", "    return int(n)\n")})
    _, ev = lab.check(unbenched, "--quick")
    b, perf = ev.get("bench_check"), ev.get("perf") or {}
    assert b is not None, "the quick check ran no bench under the line recorder"
    assert b["ran_whole"] and b["ran"] == [], b
    assert perf.get("verdict") != "faster", (perf.get("verdict"), ev.get("reasons"))
    assert ev["verdict"] == "pass", ev.get("reasons")
    if perf.get("verdict") == "not confirmed" and (perf.get("ratio") or 1) < 1:  # the noise said faster
        assert any("the bench never ran the changed lines: pkg/mod.py:" in r for r in ev["reasons"]), ev["reasons"]

    benched = lab.patch({"pkg/mod.py": lambda t: t.replace("return sum(range(n))", "return n * (n - 1) // 2")})
    _, ev = lab.check(benched, "--quick")
    assert ev["bench_check"]["ran_whole"] and ev["bench_check"]["ran"] == ["pkg/mod.py:6"], ev["bench_check"]
