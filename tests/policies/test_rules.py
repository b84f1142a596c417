"""The offline `rules` policy, end to end through the real runner and checks, on code it has never seen."""

from __future__ import annotations

import json

import pytest

from agent.checks import CommandRun, Correctness, Evaluation, Evidence, PerfResult
from agent.checks.evaluation import CoverageResult, ReadSiteResult, SanitizerResult, UninitRead
from agent.models.pricing import load_prices
from agent.policies.rules import ToolOutput, read_checks
from agent.run.runner import run_task
from agent.task import load_task
from helpers import make_repo

STATE = '''import torch


class State:
    """Per-step buffers, preallocated once."""

    def __init__(self, n: int):
        self.n = n
        self.bufs = {}

    def init_buffers(self):
        n = self.n
        self.bufs["values"] = torch.zeros(n, 16384)
        self.bufs["scratch"] = torch.zeros(n, 16384)
        self.bufs["mask"] = torch.zeros(n, dtype=torch.bool)
        self.total = torch.zeros(16384)
        self.offsets = torch.zeros(n + 1, dtype=torch.int64)

    def warmup(self):
        return int(self.bufs["mask"].sum())

    def fill(self, x, lengths):
        self.bufs["values"].copy_(x)
        self.bufs["scratch"].copy_(x * 2)
        self.bufs["mask"].copy_(lengths > 0)
        self.total += x.sum(0)
        self.offsets[1:].copy_(torch.cumsum(lengths, 0))
'''

TESTS = '''import torch
from mini.state import State


def make():
    s = State(8)
    s.init_buffers()
    return s


def test_warmup_before_fill():
    assert make().warmup() == 0


def test_fill():
    s = make()
    x, lengths = torch.randn(8, 16384), torch.arange(8)
    s.fill(x, lengths)
    assert torch.equal(s.bufs["values"], x) and torch.equal(s.bufs["scratch"], x * 2)
    assert torch.allclose(s.total, x.sum(0))
    assert s.offsets.tolist() == [0] + torch.cumsum(lengths, 0).tolist()
    assert s.bufs["mask"].tolist() == (lengths > 0).tolist()
'''

BENCH = '''import json, statistics, time
from mini.state import State

s = State(32)
times = []
for _ in range(30):
    t = time.perf_counter()
    s.init_buffers()
    times.append((time.perf_counter() - t) * 1000)
print(json.dumps({"metric": "init_ms", "value": statistics.median(times[5:]), "unit": "ms"}))
'''

TASK = '''
id = "mini-buffers"
repo = "src"
prompt = "Avoid zero-filling buffers that are written before they are read."
focus = ["mini/state.py"]
protected = ["tests/**", "bench.py"]
[correctness]
command = "python -m pytest -q -p no:cacheprovider tests"
[perf]
command = "python bench.py"
metric = "init_ms"
min_effect = 0.2
max_speedup = 1000000  # skipping a memset of unused pages is legitimately 1000x and more here
[budget]
max_turns = 3  # a chat model's budget: the scripted policy's search is not cut by it
'''


def checks_result(ev: Evaluation, evidence: Evidence | None = None,
                  text: str = "verdict: (the policy does not read this text)") -> ToolOutput:
    """A run_checks result as the loop hands it to the policy."""
    return ToolOutput(text, False, {"evaluation": ev.model_dump(mode="json"),
                                    "evidence": evidence.model_dump(mode="json") if evidence else None})


def test_read_checks_reads_the_evaluation():
    plain = CommandRun(name="plain", command="pytest", exit_code=0, passed=True, duration_s=1.0)
    poison = CommandRun(name="poison", command="pytest", exit_code=1, passed=False, duration_s=1.0,
                        failing_tests=["tests/t.py::test_replay[draft_topk2-bs3]", "tests/t.py::b"])
    faster = PerfResult(metric="init_ms", direction="lower", baseline_median=1, candidate_median=0.5, ratio=0.5,
                        ci_low=0.4, ci_high=0.6, p_value=0.01, verdict="faster")
    v = read_checks(checks_result(Evaluation(verdict="fail", correctness=Correctness(plain=plain, poison=poison),
                                               perf=faster)))
    assert not v.passed and v.failure == "tests/t.py::test_replay[draft_topk2-bs3]"
    assert (v.evidence, v.test) == ("poisoned tests", "tests/t.py::test_replay[draft_topk2-bs3]")
    v = read_checks(checks_result(Evaluation(verdict="pass", correctness=Correctness(plain=plain), perf=faster)))
    assert v.passed and v.failure == "verdict: pass"


def test_read_checks_names_the_failing_mode_without_a_test_id():
    plain = CommandRun(name="plain", command="pytest", exit_code=2, passed=False, duration_s=1.0)
    assert read_checks(checks_result(Evaluation(verdict="fail", correctness=Correctness(plain=plain)))).failure \
        == "tests fail (exit 2)"
    uncovered = Evaluation(verdict="unverified", reasons=["changed lines no test executed: a.py:3"],
                           coverage=CoverageResult(changed=["a.py:3"], uncovered=["a.py:3"]))
    v = read_checks(checks_result(uncovered))
    assert v.failure == "changed lines no test executed: a.py:3" and (v.evidence, v.test) == ("coverage", "")
    # the text alone is never parsed: a summary claiming a pass without an evaluation is not a pass
    assert not read_checks(ToolOutput("verdict: pass", True)).passed


def test_read_checks_blames_the_buffers_the_evidence_names():
    plain = CommandRun(name="plain", command="pytest", exit_code=0, passed=True, duration_s=1.0)
    read = UninitRead(buffer="mini/state.py:14", code="x = torch.empty(n)", op="aten.sum.default",
                      at="mini/state.py:20 (warmup)", tests=["tests/test_state.py::test_warmup"])
    site = ReadSiteResult(buffer="mini/state.py:15", line=30, function="State.decode", guard="self.use_mla")
    found = {"correctness": Correctness(plain=plain, poison=plain), "sanitizer": SanitizerResult(reads=[read]),
             "read_sites": [site]}
    v = read_checks(checks_result(Evaluation(verdict="fail", **found), Evidence(**found)))
    assert v.sanitized and set(v.blamed) == {"mini/state.py:14", "mini/state.py:15"}
    read, unrun = v.blamed["mini/state.py:14"], v.blamed["mini/state.py:15"]
    assert read.reason.startswith("read before written: read by aten.sum.default at mini/state.py:20")
    assert "tests/test_state.py::test_warmup" in read.reason
    assert (read.evidence, read.test) == ("sanitizer", "tests/test_state.py::test_warmup")
    assert unrun.reason == "read at line 30 in State.decode, when self.use_mla: no test runs it"
    assert (unrun.evidence, unrun.test) == ("read site not run", "")


def test_read_checks_knows_the_lines_no_test_ran_only_from_a_whole_run():
    """Coverage's unrun lines drop edits at once, so they are trusted only from a plain run that passed:
    one that stopped early leaves lines unrun that a whole run would reach."""
    ok = CommandRun(name="plain", command="pytest", exit_code=0, passed=True, duration_s=1.0)
    cov = CoverageResult(changed=["a.py:3", "a.py:9"], covered=["a.py:9"], uncovered=["a.py:3"])
    v = read_checks(checks_result(Evaluation(verdict="unverified", correctness=Correctness(plain=ok), coverage=cov)))
    assert v.unrun == {"a.py:3"}
    stopped = ok.model_copy(update={"exit_code": 2, "passed": False, "first_error": "ImportError: no name 'x'"})
    v = read_checks(checks_result(Evaluation(verdict="fail", correctness=Correctness(plain=stopped), coverage=cov)))
    assert v.unrun == frozenset() and v.failure == "tests fail (exit 2: ImportError: no name 'x')"


@pytest.mark.slow
def test_rules_keeps_exactly_the_safe_edits(tmp_path):
    make_repo(tmp_path / "src", {"mini/__init__.py": "", "mini/state.py": STATE, "tests/test_state.py": TESTS,
                                 "bench.py": BENCH})
    (tmp_path / "task.toml").write_text(TASK)
    task = load_task(tmp_path / "task.toml")
    result = run_task(task, "rules", out_dir=tmp_path / "out", run_id="r1", prices=load_prices(),
                      lock_dir=tmp_path / "locks")
    report = result.report.to_dict()
    assert report["subtype"] == "success" and report["total_cost_usd"] == 0.0
    summary = report["result"]
    patch = result.paths.patch.read_text()
    aside = not patch  # a loaded machine's noise left the kept edits' speed unknown: kept aside, not lost
    if aside:
        assert "speed not established" in summary, summary
        patch = result.paths.aside.read_text()
    changed = [ln for ln in patch.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    assert sorted(changed) == sorted([
        '+        self.bufs["values"] = torch.empty(n, 16384)',
        '+        self.bufs["scratch"] = torch.empty(n, 16384)',
    ])
    # each unsafe buffer is rejected, with the test that read its uninitialised memory
    assert "rejected" in summary and "kept" in summary
    for line in summary.splitlines():
        if line.startswith("- rejected") and "mask" in line:  # named by the sanitizer's record, not by halving
            assert "read before written" in line and "test_warmup_before_fill" in line
        if line.startswith("- kept"):
            assert "no read before a write (sanitizer)" in line
        if line.startswith("- rejected") and ("total" in line or "offsets" in line):
            assert "test_fill" in line and "static hazard" in line
    assert sum(line.startswith("- rejected") for line in summary.splitlines()) == 3
    # the same decisions as records beside the text, in its order: a view reads these, never the summary
    policy = report["policy"]
    assert policy["name"] == "rules" and summary.startswith(f"rules policy: {policy['outcome']}")
    assert not policy["reverted"]
    edits = [ln for ln in summary.splitlines() if ln.startswith(("- kept", "- rejected"))]
    assert len(policy["decisions"]) == len(edits)
    for d, line in zip(policy["decisions"], edits):
        assert line.startswith(f"- {'kept' if d['kept'] else 'rejected'} {d['path']}:{d['line']}:")
        assert f" {d['rewrite']}: {d['reason']}" in line and (not d["hazard"] or d["hazard"] in line)
    by = {d["rewrite"]: d for d in policy["decisions"]}
    assert {k for k, d in by.items() if d["kept"]} == {'self.bufs["values"]', 'self.bufs["scratch"]'}
    assert all(by[k]["evidence"] == "sanitizer" for k in ('self.bufs["values"]', 'self.bufs["scratch"]'))
    mask = by['self.bufs["mask"]']
    assert mask["evidence"] == "sanitizer" and mask["test"].endswith("test_warmup_before_fill")
    for k in ("self.total", "self.offsets"):
        assert by[k]["evidence"] in ("sanitizer", "tests", "poisoned tests") and by[k]["test"].endswith("test_fill")
        assert by[k]["hazard"] and "static hazard" not in by[k]["reason"]
    ev = report["evaluation"]
    if aside:  # what the full check decided, named: the speed, not the change
        assert ev["verdict"] == "no-change" and "speed not established" in ev["note"] and policy["speed_unknown"]
    else:
        assert ev["verdict"] == "pass" and ev["perf"]["verdict"] == "faster" and not policy["speed_unknown"]
    tools = [json.loads(x).get("name") for x in result.paths.trajectory.read_text().splitlines()
             if json.loads(x)["type"] == "tool_result"]
    assert tools[0] == "list_files" and tools[-1] == "submit" and "run_checks" in tools


SPARE = '''import torch


class Spare:
    """Buffers of a mode no test (and no bench) ever enters."""

    def __init__(self, n: int):
        self.n = n

    def init_spare(self):
        n = self.n
        self.a = torch.zeros(n, 64)
        self.b = torch.zeros(n, 64)
        self.c = torch.zeros(n, dtype=torch.int64)
        self.d = torch.zeros(n + 1)
'''


@pytest.mark.slow
def test_rules_drops_at_once_the_edits_coverage_never_saw_run(tmp_path):
    """Every edit sits in a function no test runs: the first check's coverage says so for each of them,
    so all are rejected from that one check, none is checked again on its own (each check is a full
    test run: on real code, minutes)."""
    make_repo(tmp_path / "src", {"mini/__init__.py": "", "mini/state.py": SPARE,
                                 "tests/test_state.py": "from mini.state import Spare\n\n\ndef test_make():\n"
                                                        "    assert Spare(8).n == 8\n",
                                 "bench.py": BENCH.replace("State", "Spare").replace("s.init_buffers()", "s.n")})
    (tmp_path / "task.toml").write_text(TASK.replace('"Avoid', '"Spare: avoid'))
    result = run_task(load_task(tmp_path / "task.toml"), "rules", out_dir=tmp_path / "out", run_id="r1",
                      prices=load_prices(), lock_dir=tmp_path / "locks")
    report = result.report.to_dict()
    decisions = report["policy"]["decisions"]
    assert len(decisions) == 4 and not any(d["kept"] for d in decisions), report["result"]
    assert all(d["evidence"] == "coverage" and d["reason"].startswith("never executed: no test runs mini/state.py:")
               for d in decisions), decisions
    tools = [json.loads(x).get("name") for x in result.paths.trajectory.read_text().splitlines()
             if json.loads(x)["type"] == "tool_result"]
    assert tools.count("run_checks") == 1, tools


def test_max_turns_given_binds_the_rules_policy_too(tmp_path, capsys):
    """Left to the task's budget, rules takes the turns its plan needs; asked for, the limit holds."""
    from agent.cli import main

    code = main(["run", "tasks/cuda-graph-buffers.toml", "--model", "rules", "--max-turns", "2",
                 "--out", str(tmp_path), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert (report["subtype"], report["num_turns"]) == ("error_max_turns", 2), report["result"]
    assert code == 1
