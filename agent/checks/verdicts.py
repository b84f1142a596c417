"""The grading's vocabulary, in one place: the evaluation's verdict and the perf answer.

String-valued enums, so report.json and checks.json keep the words they always held ("pass",
"faster"), a member compares equal to its word, and a typo is a name error, not a verdict no
rule matches. Only the grading (agent.checks.grade) and this module spell a verdict as a
string; tests/test_layout.py holds the rest of agent/ to the names.
"""

from __future__ import annotations

from enum import Enum

from agent.errors import BadInput


class _Word(str, Enum):
    """A member is its word wherever text is made (str(), f-strings, JSON), on every Python >= 3.10."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Verdict(_Word):
    """One word for one grading of one patch (report.json's `evaluation.verdict`)."""

    PASS = "pass"
    FAIL = "fail"
    UNVERIFIED = "unverified"  # correct as far as the tests go, but something they should see was not seen
    REJECTED = "rejected"  # refused before anything ran: an unclean patch, rewired tests, protected paths
    SUSPICIOUS = "suspicious"  # something needs a person first (flagged code, a replaced clock)
    ERROR = "error"  # the task itself could not be checked, or the run ended before anything was graded
    NO_CHANGE = "no-change"  # there was nothing to grade (the run emitted no change)


class PerfVerdict(_Word):
    """What an A/B comparison says (report.json's `perf.verdict`): one word per meaning, so a perf
    answer is never mistaken for the evaluation's verdict, nor a batch job's outcome."""

    FASTER = "faster"
    SLOWER = "slower"
    NO_DIFFERENCE = "no significant change"  # the interval is narrower than the task's minimum effect and holds 1
    # the maximum pairs were not enough to tell (the interval is wider than the task's minimum
    # effect, or the test stays short of its level): not a finding of no change
    INCONCLUSIVE = "inconclusive"
    # the metric says faster, but the harness's own clock, outside the bench process, does not see
    # the gain it claims (agent.checks.confirm; set by grade): not "faster"
    NOT_CONFIRMED = "not confirmed"
    SUSPICIOUS = "suspicious"  # older reports only (a speedup beyond a fixed plausibility bound, retired)


# the verdicts a run can give without grading anything (agent.checks.grade.nothing_to_grade)
UNGRADED: frozenset[Verdict] = frozenset({Verdict.NO_CHANGE, Verdict.REJECTED, Verdict.ERROR})
# the two perf answers that call a change
CALLED: frozenset[PerfVerdict] = frozenset({PerfVerdict.FASTER, PerfVerdict.SLOWER})


class CheckError(BadInput):
    """The task itself cannot be checked (baseline setup or bench broken, or a command left processes
    that could not be ended): verdict "error". Here, beside the vocabulary, so any check can raise it."""
