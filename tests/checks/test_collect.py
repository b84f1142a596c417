"""`collect`'s order and early stops, driven through a recorded command runner (agent.env.runners): real
checkouts and a real task, but no command runs, so each answer is scripted and every call is seen in order."""

from __future__ import annotations

import git
import pytest

from agent.checks import preflight
from agent.checks.collect import Measuring, collect
from agent.checks.perf import SamplingPolicy
from agent.checks.sides import Sides, TaskBroken
from agent.env.runners import Call, Recorded
from agent.env.sandbox import SandboxSpec
from agent.task import load_task
from helpers import TESTS, make_patch, make_task

FILES = {"pkg/__init__.py": "", "pkg/work.py": "ITERS = 10\n", "tests/test_work.py": "def test_w():\n    pass\n",
         "bench/bench.py": "print('timed elsewhere')\n"}
BENCH = "python bench/bench.py"
LINE = '{"metric": "spin_ms", "value": 1.0, "unit": "ms"}'
SMALL = SamplingPolicy(min_pairs=2, max_pairs=3)
SIDES = {"side-b": "baseline", "side-c": "candidate", "side-r": "reference"}  # Sides' checkout folders


def side(call: Call) -> str:
    return SIDES.get(call.cwd.parent.name, str(call.cwd))


def named(call: Call) -> str:
    """Which of the task's commands a call is (the environment probe is ours)."""
    words = {"make setup": "setup", TESTS: "tests", BENCH: "bench", "python -c": "probe"}
    return next((name for text, name in words.items() if call.command.startswith(text)), call.command)


@pytest.fixture
def check(tmp_path, monkeypatch):
    """collect(patch) on a task with a setup command, its tests and bench answered by `replies`: the
    evidence (or the TaskBroken raised), the calls in order, the task's sandbox."""
    monkeypatch.setenv("PERFAGENT_CACHE_DIR", str(tmp_path / "cache"))  # the base's record stays in the test
    data = tmp_path / "data"
    data.mkdir()
    task, src = make_task(tmp_path, files=FILES, poison=False, perf=BENCH,
                          extra=f'read = ["{data}"]\n[setup]\ncommand = "make setup"\n')
    patch = make_patch(src, tmp_path, {"pkg/work.py": ("ITERS = 10", "ITERS = 5")})

    def run(replies: dict, *, diff: str = patch):
        runner = Recorded({BENCH: (0, LINE), **replies})
        sides = Sides(task, tmp_path / "work", log=lambda _: None, warm=False, runner=runner)
        try:
            got = collect(sides, diff, measuring=Measuring(tmp_path / "locks", seed=1, full=SMALL, quick=SMALL))
        except TaskBroken as e:
            got = e
        finally:
            sides.close()
        assert all(c.sandbox.read == (data,) for c in runner.calls)  # every command in the task's sandbox
        assert sides.sandbox == SandboxSpec.for_task(task)
        return got, runner.calls
    return run


def test_a_patch_that_is_not_a_diff_runs_nothing(check):
    e, calls = check({}, diff="please make it faster\n")
    assert not e.hygiene.ok and calls == []


def test_a_setup_that_fails_on_the_base_blames_the_task_before_anything_else_runs(check):
    e, calls = check({"make setup": 1})
    assert isinstance(e, TaskBroken) and "setup fails on the unchanged base" in str(e)
    assert [(named(c), side(c)) for c in calls] == [("setup", "baseline")]


def test_a_setup_that_fails_on_the_candidate_runs_no_test_and_no_bench(check):
    e, calls = check({"make setup": [0, 1]})
    assert not e.setup.passed and e.correctness is None and e.perf is None
    assert [(named(c), side(c)) for c in calls] == [("setup", "baseline"), ("probe", "baseline"),
                                                    ("setup", "candidate")]


def test_failing_tests_never_sample_the_bench_and_the_base_is_checked_after(check):
    e, calls = check({TESTS: [1, 0]})  # the candidate's tests fail, the base's pass
    assert not e.correctness.plain.passed and e.perf is None and e.error is None
    assert not any(c.account_cpu for c in calls), "a bench sample was timed after the tests failed"
    order = [(named(c), side(c)) for c in calls]
    assert order.index(("tests", "candidate")) < order.index(("tests", "baseline"))  # then: can the base pass?
    assert ("bench", "baseline") in order  # the base's check runs its bench once, untimed


def test_a_recorded_base_never_stands_for_a_real_one(check, tmp_path):
    """The base's record is cached on this machine; one a recorded runner made must never be what a real
    check of the same task, commit and interpreter reads as its base."""
    check({TESTS: [1, 0]})  # the base checked, and its (recorded) record remembered
    task = load_task(tmp_path / "task.toml")
    sides = Sides(task, tmp_path / "real", log=lambda _: None, warm=False)  # the real runner
    try:
        commit = git.Repo(task.repo).commit(task.spec.base).hexsha
        real = preflight.base_key(task, commit, sides.interpreter(), type(sides.runner).__name__)
        recorded = preflight.base_key(task, commit, sides.interpreter(), "Recorded")
        assert preflight.cached(recorded, lambda _: None) is not None
        assert preflight.cached(real, lambda _: None) is None
    finally:
        sides.close()


def test_tests_that_fail_on_the_base_too_blame_the_task(check):
    e, calls = check({TESTS: 1})
    assert isinstance(e, TaskBroken) and "its tests fail on the unchanged base" in str(e)
    assert not any(c.account_cpu for c in calls)


def test_the_bench_is_sampled_after_the_tests_baseline_first_one_of_each_side_a_round(check):
    e, calls = check({})
    assert e.correctness.plain.passed and e.perf is not None and e.perf.error is None
    samples = [side(c) for c in calls if c.account_cpu]
    assert all(named(c) == "bench" for c in calls if c.account_cpu)
    first = next(i for i, c in enumerate(calls) if c.account_cpu)
    assert "tests" in [named(c) for c in calls[:first]] and "tests" not in [named(c) for c in calls[first:]]
    assert samples[0] == "baseline"  # a bench broken for everyone fails on the baseline first
    rounds = [samples[i:i + 2] for i in range(0, len(samples), 2)]
    assert all(sorted(r) == ["baseline", "candidate"] for r in rounds), samples
    assert len(rounds) == SMALL.warmup + e.perf.n_pairs and e.perf.baseline_samples == [1.0] * e.perf.n_pairs


def test_a_baseline_bench_that_fails_when_sampled_is_the_tasks_error_and_stops_the_sampling(check):
    # the untimed run under the instruments passes; the first timed sample, the baseline's, fails
    e, calls = check({BENCH: [(0, LINE), (3, "Traceback: boom")]})
    assert e.perf.error_side == "baseline" and e.perf.n_pairs == 0
    assert "baseline bench failed (exit code 3)" in (e.error or "")
    assert [side(c) for c in calls if c.account_cpu] == ["baseline"]


def test_test_processes_side_by_side_wait_for_a_core_asleep_and_the_samples_run_as_the_task_does(check, monkeypatch):
    """On a CPU-only machine the tests and the bench's instrumented run share the cores: their OpenMP
    threads wait asleep (OMP_WAIT_POLICY), where spinning they burnt four times the CPU (SGLang's tests);
    the timed samples, which run alone, keep the task's own settings."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)  # the suite's own (conftest), which the harness passes on
    ev, calls = check({TESTS: 0})
    runs = [c for c in calls if named(c) in ("tests", "bench") and not c.account_cpu]
    samples = [c for c in calls if named(c) == "bench" and c.account_cpu]
    assert len(runs) == 2 and all(c.env.get("OMP_WAIT_POLICY") == "PASSIVE" for c in runs), runs
    assert samples and not any("OMP_WAIT_POLICY" in c.env for c in samples)
