"""The verdict rules, over evidence: each rule, the precedence between them, and re-grading. No
checkout, no process: these run in milliseconds (the end-to-end paths are tested beside the checker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.checks import clocks
from agent.checks.evaluation import (BenchCheck, CommandRun, Correctness, CoverageResult, DeviceRead, DiffStats,
                                     Hygiene, InitcheckResult, OutsideClock, PerfResult, ReadSiteResult,
                                     SanitizerResult, UninitRead)
from agent.checks.evidence import Evidence, EvidenceError
from agent.checks.grade import CARRIED, FINAL, RULES, grade, judge_perf
from agent.checks.integrity import Flag, IntegrityResult
from agent.results.checks_log import load_recorded
from agent.task import TaskSpec
from agent.util.seal import load_key, write_sealed_json

SPEC = TaskSpec.model_validate({"id": "t", "repo": "src", "prompt": "p", "base": "HEAD",
                                "correctness": {"command": "pytest"},
                                "perf": {"command": "python bench.py", "metric": "ms", "max_speedup": 10}})
STRENGTH = ["error", "no-change", "rejected", "fail", "suspicious", "unverified", "pass"]  # pass: a word on speed


def run(name: str, passed: bool = True, failing: list[str] | None = None) -> CommandRun:
    return CommandRun(name=name, command="pytest", exit_code=0 if passed else 1, passed=passed, duration_s=1.0,
                      failing_tests=failing or [])


def passing(**update) -> Evidence:
    """The evidence of a clean, covered, 2x faster change; `update` replaces fields."""
    e = Evidence(task_id="t", changed_lines={"m.py": [3]}, uninitialised=["m.py:3"],
                 correctness=Correctness(plain=run("plain"), poison=run("poison")),
                 coverage=CoverageResult(changed=["m.py:3"], covered=["m.py:3"]), sanitizer=SanitizerResult(),
                 read_sites=[ReadSiteResult(buffer="m.py:3", line=5, executed=True)],
                 perf=judge_perf(PerfResult(metric="ms", direction="lower", baseline_samples=[2.0] * 8,
                                            candidate_samples=[1.0] * 8), SPEC.perf))
    return e.model_copy(update=update)


UNCOVERED = CoverageResult(changed=["m.py:3"], uncovered=["m.py:3"])


def seen(saved_s: float, spread_s: float, n: int = 8) -> OutsideClock:
    """Bench processes the harness saw save `saved_s` each, the rounds spread by `spread_s` around it."""
    d = [saved_s + spread_s * (i - (n - 1) / 2) for i in range(n)]
    return OutsideClock(baseline_wall_s=[1.0 + x for x in d], candidate_wall_s=[1.0] * n)


def fast(b_ms: float, c_ms: float, outside: OutsideClock) -> PerfResult:
    return PerfResult(metric="ms", direction="lower", unit="ms", ratio=c_ms / b_ms, verdict="faster",
                      baseline_median=b_ms, candidate_median=c_ms, outside=outside)


FORGED = fast(2.0, 1.0, seen(0.0, 0.0001))  # claims 1 ms less per process; the processes save nothing
HUGE = fast(30.0, 0.03, seen(0.030, 0.0005))  # 1000x: a 30 ms memset gone, and the clock sees it
VAGUE = fast(30.0, 0.03, seen(0.030, 0.05))  # the same claim; the clock cannot tell a saving from none
READ = UninitRead(buffer="m.py:3", op="aten.cumsum.default", code="buf = torch.empty(n)")


def test_a_clean_change_passes_with_no_reasons():
    ev = grade(passing(), SPEC)
    assert (ev.verdict, ev.reasons) == ("pass", []) and ev.speedup == pytest.approx(2.0)


@pytest.mark.parametrize("update, verdict, reason", [
    ({"error": "setup failed on the baseline (exit 1)"}, "error", "setup failed on the baseline"),
    ({"correctness": Correctness(plain=run("plain").model_copy(update={"escaped": "its cgroup did not empty"}),
                                 poison=run("poison"))}, "error", "the plain run: its cgroup did not empty"),
    ({"hygiene": Hygiene(ok=False, problems=["binary file"])}, "rejected", "patch refused: binary file"),
    ({"integrity": IntegrityResult(refused=["conftest.py: test collection"])}, "rejected", "patch refused: conftest"),
    ({"protected_violations": ["tests/test_m.py"]}, "rejected", "touches protected paths: tests/test_m.py"),
    ({"setup": run("setup", passed=False)}, "fail", "setup command failed (exit 1)"),
    ({"correctness": Correctness(plain=run("plain", False, ["tests/t.py::test_a"]), poison=run("poison"))},
     "fail", "tests fail: tests/t.py::test_a"),
    ({"correctness": Correctness(plain=run("plain"), poison=run("poison", False))},
     "fail", "tests fail with uninitialised memory poisoned"),
    ({"sanitizer": SanitizerResult(reads=[READ])}, "fail", "buffers read before they are written (sanitizer)"),
    ({"initcheck": InitcheckResult(reads=[DeviceRead(kernel="k", kind="global read")])}, "fail", "compute-sanitizer"),
    ({"perf": PerfResult(metric="ms", direction="lower", error="candidate bench failed (exit 1)",
                         error_side="candidate")}, "fail", "candidate bench failed"),
    ({"coverage": UNCOVERED}, "unverified", "changed lines no test executed: m.py:3"),
    ({"coverage": CoverageResult(measured=False, note="no coverage data")}, "unverified", "no coverage data"),
    ({"sanitizer": SanitizerResult(measured=False, note="sanitizer off")}, "unverified", "sanitizer off"),
    ({"initcheck": InitcheckResult(measured=False, note="output over 8 MB", run=run("initcheck"))},
     "unverified", "uninitialised device reads not measured: output over 8 MB"),
    ({"read_sites": [ReadSiteResult(buffer="m.py:3", line=9, executed=False)]}, "unverified",
     "m.py:9 reads the buffer allocated uninitialised at line 3"),
    ({"bench_check": BenchCheck(run=run("bench"), ran=["m.py:3"], skipped_after={"m.py:3": [5]})}, "unverified",
     "the tests' safety of the buffer allocated uninitialised at m.py:3 rests on line 5, which the bench never runs"),
    ({"bench_check": BenchCheck(run=run("bench"), ran=["m.py:3"], unwritten_by_return={"m.py:3": [2, 0]})},
     "unverified", "m.py:3 is written in full by the time the call that makes it returns in every test, but not in "
                   "the bench's run (0 of 2 written in full)"),
    ({"integrity": IntegrityResult(flags=[Flag(path="m.py", line=4, reason="monkeypatches torch")])},
     "suspicious", "flagged: m.py:4: monkeypatches torch"),
    ({"perf": FORGED}, "fail", "not confirmed: the metric claims 1 ms less per bench process (1 call x 1 ms)"),
    ({"changes": False, "correctness": None, "coverage": None, "perf": None}, "no-change", None),
])
def test_each_rule_gives_its_verdict_and_says_why(update, verdict, reason):
    ev = grade(passing(**update), SPEC)
    assert ev.verdict == verdict, ev.reasons
    if reason is None:
        assert ev.reasons == [] and "changes nothing" in ev.note
    else:
        assert any(reason in r for r in ev.reasons), ev.reasons


def test_the_rules_are_listed_strongest_first():
    order = [STRENGTH.index(v) for v, _ in RULES]
    assert order == sorted(order) and set(STRENGTH) == {v for v, _ in RULES}
    assert FINAL == {"error", "no-change", "rejected", "fail"}


def test_unread_memory_that_nothing_watched_matters_only_where_the_patch_allocates_it():
    unwatched = {"sanitizer": SanitizerResult(measured=False, note="sanitizer off")}
    assert grade(passing(**unwatched), SPEC).verdict == "unverified"
    assert grade(passing(**unwatched, uninitialised=[]), SPEC).verdict == "pass"


def test_an_unverified_change_stays_unverified_however_fast_it_seems():
    """The speed of a change says nothing about whether it is correct."""
    ev = grade(passing(coverage=UNCOVERED, perf=HUGE), SPEC)
    assert ev.verdict == "unverified" and len(ev.reasons) == 1
    assert ev.perf.verdict == "faster" and ev.perf.outside.confirmed and ev.integrity.plausibility is None


def test_a_gain_the_clock_does_not_see_is_not_faster_and_fails():
    ev = grade(passing(perf=FORGED), SPEC)
    assert ev.verdict == "fail" and ev.perf.verdict == "not confirmed" and ev.perf.outside.confirmed is False
    assert "wall" in ev.reasons[0] and "[" in ev.reasons[0]


def test_a_gain_no_clock_can_tell_is_not_faster_but_fails_nothing():
    """The machine's noise is no finding against the change: the speed is not established, the change passes."""
    ev = grade(passing(perf=VAGUE), SPEC)
    assert ev.verdict == "pass" and ev.reasons == [] and ev.perf.verdict == "not confirmed"
    assert ev.perf.outside.refuted is False and "speed not established" in ev.perf.outside.note
    assert "beyond the task's max_speedup hint of 10x" in ev.perf.outside.note


def test_a_quick_check_keeps_the_metrics_answer_unless_a_clock_rules_it_out():
    """The agent's quick check (few pairs) guides it; only the full check must wait for a clock to tell."""
    assert grade(passing(perf=VAGUE, quick=True), SPEC).perf.verdict == "faster"
    assert grade(passing(perf=FORGED, quick=True), SPEC).perf.verdict == "not confirmed"


def test_a_replaced_clock_names_the_verdict_even_where_a_changed_line_went_unrun():
    """The clock's replacement is what a person must see first; the line the tests left unrun (often the
    slow clock's own body) is said after it, not instead of it."""
    c = clocks.ClockCheck()
    c.add("baseline", clocks.ProcessClocks(started=True, ended=True))
    c.add("candidate", clocks.ProcessClocks(started=True, ended=True, replaced=["time.perf_counter replaced by x"]))
    ev = grade(passing(coverage=UNCOVERED, clocks=c), SPEC)
    assert ev.verdict == "suspicious" and ev.perf.verdict == "not confirmed", ev.reasons
    assert "timing functions were replaced" in ev.reasons[0] and "m.py:3" in ev.reasons[1], ev.reasons


def test_a_failing_change_is_not_argued_about_further():
    failing = Correctness(plain=run("plain", False, ["t::a"]), poison=run("poison"))
    ev = grade(passing(correctness=failing, coverage=UNCOVERED, protected_violations=["tests/x.py"]), SPEC)
    assert ev.verdict == "rejected"  # protected paths touched: refused, and the tests' failure is said too
    assert [r.split(":")[0] for r in ev.reasons] == ["touches protected paths", "tests fail"]


def test_a_1000x_speedup_the_clock_sees_passes_the_bound_is_a_hint_only():
    """zeros -> empty on tens of MB is legitimately 1000x: no fixed bound grades it suspicious."""
    ev = grade(passing(perf=HUGE), SPEC)
    assert (ev.verdict, ev.reasons, ev.perf.verdict) == ("pass", [], "faster")
    assert ev.perf.speedup == pytest.approx(1000) and ev.perf.outside.wall.low_s > 0


def test_older_evidence_without_outside_figures_is_graded_as_before():
    old = PerfResult(metric="ms", direction="lower", ratio=0.01, verdict="faster")
    ev = grade(passing(perf=old), SPEC)
    assert ev.verdict == "pass" and ev.perf.outside is None and ev.perf.verdict == "faster"


def test_grading_changes_nothing_of_the_evidence():
    e = passing(coverage=UNCOVERED, perf=FORGED)
    before = e.model_dump()
    grade(e, SPEC)
    assert e.model_dump() == before


def test_a_rule_change_regrades_recorded_evidence_without_running_anything(tmp_path):
    """A task's `calls` corrected after the run: the same evidence, graded again, passes and is faster."""
    recorded = tmp_path / "checks.json"
    e = passing(perf=HUGE)
    five_calls = SPEC.model_copy(update={"perf": SPEC.perf.model_copy(update={"calls": 5})})
    write_sealed_json(recorded, [{"time": 0, "full": True, "evaluation": grade(e, five_calls).model_dump(mode="json"),
                                  "evidence": e.model_dump(mode="json")}])
    (r,) = load_recorded(tmp_path, load_key())  # 5 x 30 ms claimed; 30 ms seen: every clock rules it out
    assert r.evaluation.verdict == "fail" and r.evaluation.perf.verdict == "not confirmed"
    again = grade(r.evidence, SPEC)
    assert again.verdict == "pass" and again.perf.verdict == "faster"


def test_files_without_evidence_are_one_clear_error(tmp_path):
    old = tmp_path / "checks.json"
    write_sealed_json(old, [{"time": 0, "full": True, "evaluation": {"verdict": "pass"}}])
    with pytest.raises(EvidenceError, match="carry no evidence"):
        load_recorded(old, load_key())
    with pytest.raises(EvidenceError, match="cannot read"):
        load_recorded(tmp_path / "missing.json", load_key())
    write_sealed_json(tmp_path / "bad.json", {"changes": "perhaps"})
    with pytest.raises(EvidenceError, match="not evidence perfagent wrote"):
        load_recorded(tmp_path / "bad.json", load_key())
    (tmp_path / "unsealed.json").write_text(json.dumps(passing().model_dump(mode="json")))
    with pytest.raises(EvidenceError, match="carries no MAC from this machine's perfagent.*; nothing graded$"):
        load_recorded(tmp_path / "unsealed.json", load_key())


def test_the_evaluation_reports_every_fact_it_was_graded_from():
    e = passing(duration_s=3.5, protected_violations=[], diff_stats=DiffStats(files=["m.py"], insertions=1))
    ev = grade(e, SPEC)
    assert {"correctness", "coverage", "sanitizer", "initcheck", "read_sites", "environment", "setup", "reference",
            "diff_stats", "hygiene", "error", "duration_s", "task_id", "quick"} <= set(CARRIED)
    assert all(getattr(ev, name) == getattr(e, name) for name in CARRIED)
    assert ev.perf.model_dump() == e.perf.model_dump() and ev.integrity.flags == e.integrity.flags


def test_check_strict_is_a_gate_for_ci(tmp_path):
    """`check` exits 0 whatever the change's verdict; `--strict` exits 3 unless it is a pass."""
    from agent.cli import main

    def recorded(e: Evidence) -> str:  # recorded for the task it is regraded under (another's is refused)
        path = tmp_path / f"checks-{len(list(tmp_path.iterdir()))}.json"
        e = e.model_copy(update={"task_id": "cuda-graph-buffers"})
        write_sealed_json(path, [{"time": 0, "full": True, "evidence": e.model_dump(mode="json")}])
        return str(path)

    broken = recorded(passing(correctness=Correctness(plain=run("plain", passed=False), poison=run("poison"))))
    clean = recorded(passing(perf=None))
    task = "tasks/cuda-graph-buffers.toml"
    assert main(["check", task, "--regrade", broken, "--json", str(tmp_path / "out.json")]) == 0
    assert main(["check", task, "--regrade", broken, "--strict", "--json", str(tmp_path / "out.json")]) == 3
    assert main(["check", task, "--regrade", clean, "--strict", "--json", str(tmp_path / "out.json")]) == 0


def test_regrade_judges_the_speed_again_under_a_changed_min_effect(tmp_path):
    """A recorded run's samples, re-judged through the CLI: an interval 1.2% wide is a finding of no
    change under a 5% minimum effect, and too wide to tell under a 1% one; the recorded run is not touched."""
    import os
    import subprocess
    import sys

    from helpers import make_tiny_task

    base = [10.0 + 0.1 * i for i in range(10)]
    noise = [0.012, -0.009, 0.006, -0.012, 0.003, -0.006, 0.009, -0.003, 0.0, 0.006]
    recorded = PerfResult(metric="ms", direction="lower", baseline_samples=base, seed=7, alpha=0.017181396484375,
                          candidate_samples=[b * (1 + x) for b, x in zip(base, noise)], n_pairs=10)

    def task(min_effect: float) -> str:
        return str(make_tiny_task(tmp_path, file=f"t-{min_effect}.toml",
                                  extra=f'[perf]\ncommand = "python b.py"\nmetric = "ms"\nmin_effect = {min_effect}\n'))

    def regrade(task_file: str, job: Path) -> dict:
        done = subprocess.run([sys.executable, "-m", "agent.cli", "check", task_file, "--regrade", str(job), "--json",
                               "-"], capture_output=True, text=True, env=os.environ, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)[-1]["perf"]

    loose = TaskSpec.model_validate({**SPEC.model_dump(), "perf": {**SPEC.perf.model_dump(), "min_effect": 0.05}})
    e = passing(perf=judge_perf(recorded, loose.perf), task_id="tiny")  # the task it is regraded under
    job = tmp_path / "results" / "r1" / "tiny"
    job.mkdir(parents=True)
    write_sealed_json(job / "checks.json", [{"time": 0, "full": True, "evidence": e.model_dump(mode="json"),
                                             "evaluation": grade(e, loose).model_dump(mode="json")}])
    sealed = (job / "checks.json").read_bytes()
    assert e.perf.verdict == "no significant change" and e.perf.precise
    assert regrade(task(0.05), job)["verdict"] == "no significant change"
    strict = regrade(task(0.01), job)
    assert strict["verdict"] == "inconclusive" and not strict["precise"] and strict["min_effect"] == 0.01
    assert (job / "checks.json").read_bytes() == sealed


def test_nothing_to_grade_writes_only_the_verdicts_that_need_no_evidence():
    from agent.checks.grade import nothing_to_grade
    from agent.checks.verdicts import Verdict

    broken = nothing_to_grade(Verdict.ERROR, "the baseline's bench fails")
    assert broken.verdict == "error" and broken.error == "the baseline's bench fails" and broken.note is None
    empty = nothing_to_grade(Verdict.NO_CHANGE, "the agent made no change")
    assert empty.model_dump(mode="json")["verdict"] == "no-change" and empty.note == "the agent made no change"
    assert nothing_to_grade(Verdict.REJECTED, "does not apply").note == "does not apply"
    for graded in (Verdict.PASS, Verdict.FAIL, Verdict.UNVERIFIED, Verdict.SUSPICIOUS):
        with pytest.raises(ValueError, match="needs evidence"):
            nothing_to_grade(graded, "why")


def test_grade_judges_recorded_pairs_again_and_leaves_figures_without_pairs_as_recorded():
    faster = passing()
    assert grade(faster, SPEC).perf.verdict == "faster"
    higher = SPEC.model_copy(update={"perf": SPEC.perf.model_copy(update={"direction": "higher"})})
    assert grade(faster, higher).perf.verdict == "slower" and grade(faster, higher).speedup == pytest.approx(0.5)
    old = PerfResult(metric="ms", direction="lower", ratio=0.01, verdict="faster")
    assert grade(passing(perf=old), higher).perf == old


# -- reasons for the task at hand (issue 46): no poison blamed where nothing was poisoned, the runner's own words --
NO_TORCH = {"python": "3.11.7", "torch": None}  # the task's interpreter, probed: no torch in it
EQ = "AssertionError: not equivalent"  # what GSO's runner prints of a failed equivalence check


def failed(name: str, failing: list[str], first_error: str | None = EQ) -> CommandRun:
    return run(name, False, failing).model_copy(update={"first_error": first_error})


def test_without_torch_a_poisoned_run_failing_as_the_plain_one_blames_nothing_and_carries_the_first_error():
    from agent.checks.evaluation import Environment

    same = Correctness(plain=failed("plain", ["gso_test_0.py"]), poison=failed("poison", ["gso_test_0.py"]))
    ev = grade(passing(correctness=same, environment=Environment(**NO_TORCH)), SPEC)
    assert ev.verdict == "fail" and ev.reasons == [f"tests fail: gso_test_0.py ({EQ})"], ev.reasons
    unnamed = Correctness(plain=failed("plain", []), poison=failed("poison", []))
    assert grade(passing(correctness=unnamed, environment=Environment(**NO_TORCH)), SPEC).reasons == [
        f"tests fail (exit code 1: {EQ})"]


def test_with_torch_every_test_the_poison_fails_is_named_even_where_the_plain_run_failed_it_too():
    """The plain run may fail on whatever malloc hands back; the poison makes the read certain: both are said."""
    more = Correctness(plain=failed("plain", ["t::a"], None), poison=failed("poison", ["t::a", "t::b"], None))
    ev = grade(passing(correctness=more), SPEC)
    assert ev.reasons == ["tests fail: t::a", "tests fail with uninitialised memory poisoned (a buffer is read "
                          "before it is written): t::a, t::b"], ev.reasons


def test_without_torch_nothing_is_said_to_be_poisoned():
    from agent.checks.evaluation import BenchCheck, Environment

    flaky = Correctness(plain=run("plain"), poison=failed("poison", ["t::a"], None))
    ev = grade(passing(correctness=flaky, environment=Environment(**NO_TORCH)), SPEC)
    assert ev.verdict == "fail" and len(ev.reasons) == 1, ev.reasons
    assert "poisons nothing" in ev.reasons[0] and "uninitialised" not in ev.reasons[0], ev.reasons
    bench = BenchCheck(run=failed("bench", [], None))
    ev = grade(passing(bench_check=bench, environment=Environment(**NO_TORCH)), SPEC)
    assert ev.reasons == ["the bench fails under the harness's instruments (exit code 1), and the unchanged "
                          "base's does not"], ev.reasons
    assert "poisoned" in grade(passing(bench_check=bench), SPEC).reasons[0]  # torch, or not probed: as before


UNBENCHED = BenchCheck(run=run("bench"), ran=[], ran_whole=True)  # signed line records: no changed line ran


@pytest.mark.parametrize("quick", [True, False])
def test_faster_is_never_said_of_a_change_the_bench_never_ran(quick):
    """Issue 47: a quick check called "faster 2.74x" a change the bench never executes. The bench's own
    line records (every process signed) say the changed lines did not run there: the speed is not confirmed,
    the reason names the lines, and the change does not fail for that alone."""
    ev = grade(passing(quick=quick, bench_check=UNBENCHED), SPEC)
    assert ev.verdict == "pass" and ev.perf.verdict == "not confirmed", (ev.verdict, ev.perf.verdict, ev.reasons)
    assert "the bench never ran the changed lines: m.py:3" in " ".join(ev.reasons), ev.reasons
    # the bench ran one of them, or its records are not whole, or a changed file the recorder cannot see:
    # the metric's word stands
    ran = UNBENCHED.model_copy(update={"ran": ["m.py:3"]})
    torn = UNBENCHED.model_copy(update={"ran_whole": False})
    for e in (passing(bench_check=ran), passing(bench_check=torn),
              passing(bench_check=UNBENCHED, changed_lines={"m.py": [3], "k.c": [1]})):
        assert grade(e, SPEC).perf.verdict == "faster"
    # a failing change fails for its own reasons, with no word on the speed
    failed = grade(passing(bench_check=UNBENCHED, correctness=Correctness(plain=run("plain", False, ["t::a"]),
                                                                          poison=run("poison"))), SPEC)
    assert failed.verdict == "fail" and not any("never ran" in r for r in failed.reasons)
