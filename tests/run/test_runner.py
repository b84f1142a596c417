"""`perfagent run` as a user runs it: a real subprocess against a local fake provider server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from fakeserver import auth_error, reply, tool_call
from helpers import SAFE, UNSAFE, RecordedChecker, make_task, make_tiny_task, tiny_evidence

from agent.checks.evaluation import OutsideClock, PerfResult
from agent.env.workspace import patch_paths
from agent.models.base import Reply, ToolCall, Usage
from agent.models.pricing import load_prices
from agent.options import Limits
from agent.run.runner import run_task

REPO = Path(__file__).resolve().parents[2]
CLAUDE_CODE_KEYS = ["type", "subtype", "is_error", "duration_ms", "duration_api_ms", "num_turns", "result",
                    "session_id", "total_cost_usd", "usage", "modelUsage", "permission_denials", "uuid"]
USAGE = {"input_tokens": 1200, "output_tokens": 300, "cache_read": 9000, "cache_write_5m": 1500}


@pytest.fixture
def task_file(tmp_path):
    return make_tiny_task(tmp_path, with_g=False, extra="[budget]\nmax_turns = 8\n")


def perfagent(args, cwd, **env):
    full_env = {"PATH": os.environ["PATH"], "HOME": str(cwd), "COLUMNS": "200", **env}
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=full_env, timeout=300, check=False)


def script():
    return [
        reply("Reading.", tool_call("read_file", path="pkg/mod.py"), usage=USAGE),
        reply("", tool_call("write_file", path="tests/test_mod.py", content="def test_f(): pass\n"), usage=USAGE),
        reply("", tool_call("edit_file", path="pkg/mod.py", old="torch.zeros(n)", new="torch.empty(n)"), usage=USAGE),
        reply("Done.", tool_call("submit", summary="buf is fully written by copy_ before it is read"), usage=USAGE),
    ]


@pytest.mark.slow
def test_run_against_fake_anthropic_writes_three_outputs(task_file, fake_server):
    """Streamed (the usage figures arrive in pieces); the unstreamed wire runs end to end in the tests below
    and both in tests/models and tests/run/test_loop.py."""
    fake_server.script(script())
    tmp = task_file.parent
    # --allow-unsandboxed: whatever this machine's sandbox; test_unsandboxed_api_run_* covers the refusal
    args = ["run", str(task_file), "--model", "anthropic:claude-sonnet-4-6", "--run-id", "r1", "--out", str(tmp),
            "--quiet", "--allow-unsandboxed"]
    res = perfagent(args + ["--stream"], tmp,
                    ANTHROPIC_API_KEY="x", ANTHROPIC_BASE_URL=fake_server.url)
    assert res.returncode == 0, res.stderr
    assert len(fake_server.requests) == 4 and all(r.stream for r in fake_server.requests)  # --stream reached the SDK
    patch = (tmp / "patches/r1/tiny/model_patch.diff").read_text()
    assert "+    buf = torch.empty(n)" in patch and "tests/" not in patch
    report = json.loads((tmp / "results/r1/tiny/report.json").read_text())
    assert list(report)[:len(CLAUDE_CODE_KEYS)] == CLAUDE_CODE_KEYS and list(report)[-1] == "evaluation"
    assert report["subtype"] == "success" and report["num_turns"] == 4
    assert report["result"] == "buf is fully written by copy_ before it is read"
    # costs are exactly what the server's usage figures imply at the table's prices (Sonnet 4.6: 3/15/3.75/0.30)
    per_turn = (Decimal(1200) * 3 + Decimal(300) * 15 + Decimal(9000) * Decimal("0.30")
                + Decimal(1500) * Decimal("3.75"))
    expected = float(per_turn * 4 / 10**6)
    assert report["total_cost_usd"] == expected
    mu = report["modelUsage"]["claude-sonnet-4-6"]
    assert mu["costUSD"] == expected and mu["inputTokens"] == 4800 and mu["cacheReadInputTokens"] == 36000
    assert report["usage"]["cache_creation"]["ephemeral_5m_input_tokens"] == 6000
    assert report["permission_denials"][0]["tool_name"] == "write_file"
    ev = report["evaluation"]
    assert ev["verdict"] == "pass" and ev["correctness"]["poison"]["passed"]
    lines = [json.loads(x) for x in (tmp / "results/r1/tiny/trajectory.jsonl").read_text().splitlines()]
    assert [x["type"] for x in lines].count("response") == 4 and lines[-1]["type"] == "end"
    checks = json.loads((tmp / "results/r1/tiny/checks.json").read_text())
    assert checks[0]["full"] is True
    assert not list((tmp / "results").rglob("*.tmp"))  # atomic writes leave no temp files
    # the run re-graded from its recorded evidence, running nothing: the same evaluations
    regraded = perfagent(["check", str(task_file), "--regrade", str(tmp / "results/r1/tiny"), "--json"], tmp)
    assert regraded.returncode == 0, regraded.stderr
    assert json.loads(regraded.stdout) == [c["evaluation"] for c in checks]


@pytest.mark.slow
def test_api_error_is_one_line_and_keeps_results(task_file, fake_server):
    fake_server.script([auth_error()])
    tmp = task_file.parent
    res = perfagent(["run", str(task_file), "--model", "anthropic:claude-sonnet-4-6", "--run-id", "r2",
                     "--out", str(tmp), "--quiet", "--allow-unsandboxed"], tmp, ANTHROPIC_API_KEY="bad",
                    ANTHROPIC_BASE_URL=fake_server.url)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "401" in res.stderr and res.stderr.strip().count("\n") == 0
    report = json.loads((tmp / "results/r2/tiny/report.json").read_text())
    assert report["subtype"] == "error_during_execution" and report["is_error"]
    assert (tmp / "patches/r2/tiny/model_patch.diff").read_text() == ""


@pytest.mark.parametrize("args, needle", [
    (["--model", "gemini:pro"], "unknown model spec"),
    (["--model", "anthropic:claude-sonnet-4-6"], "ANTHROPIC_API_KEY"),
    (["--model", "replay:missing.jsonl"], "trajectory not found"),
])
@pytest.mark.slow
def test_bad_model_is_one_line_exit_2(task_file, args, needle):
    res = perfagent(["run", str(task_file), *args], task_file.parent)
    assert res.returncode == 2 and needle in res.stderr and "Traceback" not in res.stderr


@pytest.mark.slow
def test_missing_task_is_one_line_exit_2(tmp_path):
    res = perfagent(["run", str(tmp_path / "nope.toml")], tmp_path)
    assert res.returncode == 2 and "task file not found" in res.stderr


def without_bwrap(tmp: Path) -> str:
    """A PATH with git and bash but neither bwrap nor unshare: the sandbox is incomplete there."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("git", "bash", "sh"):
        found = subprocess.run(["which", tool], capture_output=True, text=True, check=True).stdout.strip()
        (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


@pytest.mark.slow
def test_unsandboxed_api_run_is_refused_unless_allowed(task_file, fake_server):
    tmp = task_file.parent
    path = without_bwrap(tmp)
    probe = subprocess.run([sys.executable, "-c", ("import json; from agent.env.sandbox import isolation; "
                                                   "print(json.dumps(isolation().missing))")],
                           capture_output=True, text=True, env={"PATH": path, "HOME": str(tmp)}, cwd=tmp, check=True)
    missing = json.loads(probe.stdout)
    assert missing, "the sandbox should be incomplete without bwrap"
    keys = {"PATH": path, "ANTHROPIC_API_KEY": "x", "ANTHROPIC_BASE_URL": fake_server.url}
    args = ["run", str(task_file), "--model", "anthropic:claude-sonnet-4-6", "--run-id", "u", "--out", str(tmp),
            "--quiet"]
    res = perfagent(args, tmp, COLUMNS="1000", **keys)
    assert (res.returncode == 2
            and res.stderr.startswith("error: refusing to run anthropic:claude-sonnet-4-6 unsandboxed"))
    assert "--allow-unsandboxed" in res.stderr and missing[0] in res.stderr and res.stderr.count("\n") == 1
    assert not (tmp / "results").exists() and not fake_server.requests
    batch = perfagent(["batch", str(task_file), "--models", "rules,anthropic:claude-sonnet-4-6", "--out", str(tmp),
                       "--quiet"], tmp, COLUMNS="1000", **keys)
    assert batch.returncode == 2 and "--allow-unsandboxed" in batch.stderr and not (tmp / "results").exists()

    fake_server.script(script())
    res = perfagent(args + ["--allow-unsandboxed"], tmp, **keys)
    assert res.returncode == 0, res.stderr
    warnings = json.loads((tmp / "results/u/tiny/report.json").read_text())["evaluation"]["warnings"]
    for aspect in missing:
        assert any(aspect in w for w in warnings), (aspect, warnings)


class Scripted:
    """A model that plays fixed turns of tool calls, then lists files until its turns run out."""

    name = "scripted"

    def __init__(self, *turns: list[tuple[str, dict]]):
        self.turns = list(turns)

    def complete(self, system: str, messages: list[dict], tools: list[dict]) -> Reply:
        calls = self.turns.pop(0) if self.turns else [("list_files", {})]
        return Reply("", [ToolCall(f"c{len(messages)}_{i}", n, a) for i, (n, a) in enumerate(calls)], Usage(), 0.0,
                     "replay", "tool_use", {})


def run_scripted(tmp_path: Path, *turns: list[tuple[str, dict]], recorded: bool = True):
    """`turns` played on make_task's repo; `recorded`: graded from tiny_evidence (the grader seam), else for real."""
    task, _ = make_task(tmp_path)
    checker = RecordedChecker(task, tiny_evidence) if recorded else None
    return run_task(task, Scripted(*turns), out_dir=tmp_path / "out", run_id="r", prices=load_prices(),
                    limits=Limits.of(task, max_turns=len(turns) + 1), lock_dir=tmp_path / "locks", checker=checker)


def edit(change: dict[str, tuple[str, str]], back: bool = False) -> tuple[str, dict]:
    ((path, (old, new)),) = change.items()
    return "edit_file", {"path": path, "old": new if back else old, "new": old if back else new}


def test_a_change_that_never_passed_is_rejected_not_emitted(tmp_path):
    """Every torch.zeros -> torch.empty, which the poisoned tests reject; the run ends at max turns."""
    result = run_scripted(tmp_path, [edit(SAFE), edit(UNSAFE)])
    report = result.report
    assert report.subtype == "error_max_turns" and report.is_error
    assert result.paths.patch.read_text() == ""
    rejected = result.paths.rejected.read_text()
    assert result.paths.rejected == result.paths.patch.with_name("rejected.diff")
    assert "+    buf = torch.empty(N)" in rejected and "+    buf = torch.empty(src.shape" in rejected
    ev = report.evaluation
    assert ev is not None and ev.verdict == "fail" and ev.correctness is not None
    assert ev.emitted is not None and ev.emitted.startswith("nothing") and "rejected.diff" in ev.emitted


def test_an_agent_that_takes_back_its_passing_change_emits_nothing(tmp_path):
    result = run_scripted(tmp_path, [edit(SAFE)], [("run_checks", {"perf": False})], [edit(SAFE, back=True)])
    checks = json.loads(result.paths.checks.read_text())
    assert [c["evaluation"]["verdict"] for c in checks] == ["pass"]  # it had a passing candidate
    assert result.paths.patch.read_text() == "" and not result.paths.rejected.exists()
    ev = result.report.evaluation
    assert ev is not None and ev.verdict == "no-change" and ev.note == "the agent took back every change it made"


JUNK = ("mkdir -p logs sub && head -c 2000000 /dev/zero | tr '\\000' x > logs/run.log && "
        "printf '\\000\\001\\002' > cache.bin && : > model_patch.diff && echo x > sub/rejected.diff")
JUNK_LEFT_OUT = [("cache.bin", 3, "binary"), ("logs/run.log", 2_000_000, "new file over 1 MB"),
                 ("model_patch.diff", 0, "named like perfagent's output"),
                 ("sub/rejected.diff", 2, "named like perfagent's output")]


def test_what_the_loop_leaves_beside_its_change_is_left_out_listed_and_told(tmp_path):
    """A 2 MB log, a binary and files named like our outputs beside a valid edit: the graded diff is the emitted
    diff, the source edit alone; report.json lists each file left out, and the agent's tools said so."""
    task, _ = make_task(tmp_path)
    checker = RecordedChecker(task, tiny_evidence)
    turns = [[edit(SAFE)], [("run", {"command": JUNK})], [("run_checks", {"perf": False})],
             [("submit", {"summary": "buf is written before it is read"})]]
    result = run_task(task, Scripted(*turns), out_dir=tmp_path / "out", run_id="r", prices=load_prices(),
                      limits=Limits.of(task, max_turns=6), lock_dir=tmp_path / "locks", checker=checker)
    report, patch = result.report, result.paths.patch.read_text()
    assert report.verdict == "pass" and report.subtype == "success", report.result
    assert patch_paths(patch) == ["pkg/buffers.py"] and "+    buf = torch.empty(src.shape" in patch
    assert checker.patches == [patch, patch]  # run_checks, then the submission: each graded exactly what is emitted
    assert [(x.path, x.size, x.reason) for x in report.left_out] == JUNK_LEFT_OUT
    on_disk = json.loads(result.paths.report.read_text())
    assert [x["path"] for x in on_disk["left_out"]] == [p for p, _, _ in JUNK_LEFT_OUT]
    tools = [json.loads(x) for x in result.paths.trajectory.read_text().splitlines()]
    told = {t["name"]: t["content"] for t in tools if t["type"] == "tool_result"}
    for name in ("run_checks", "submit"):
        assert "left out of your change" in told[name]
        assert "logs/run.log (2,000,000 bytes): new file over 1 MB" in told[name]
        assert "cache.bin (3 bytes): binary" in told[name]


@pytest.mark.slow
def test_an_earlier_passing_state_is_not_emitted_in_place_of_the_final_one(tmp_path):
    """The agent's final change is what is graded and emitted: a state it moved on from is not (graded for
    real: the run's time includes its gradings)."""
    result = run_scripted(tmp_path, [edit(SAFE)], [("run_checks", {"perf": False})], [edit(UNSAFE)], recorded=False)
    checks = json.loads(result.paths.checks.read_text())
    assert checks[0]["evaluation"]["verdict"] == "pass" and checks[-1]["evaluation"]["verdict"] == "fail"
    assert result.paths.patch.read_text() == ""
    assert "+    buf = torch.empty(N)" in result.paths.rejected.read_text()
    ev = result.report.evaluation
    assert ev.verdict == "fail" and "an earlier state did" in ev.emitted
    assert result.report.duration_ms >= 1000 * sum(c["evaluation"]["duration_s"] or 0 for c in checks) * 0.99


class FullCheckSays(RecordedChecker):
    """tiny_evidence, with the speed the full check finds: `faster` (its clocks see the saving), `open` (they
    cannot tell it from none) or `same` (no significant change)."""

    def __init__(self, task, speed: str):
        super().__init__(task, tiny_evidence)
        self.speed = speed

    def collect(self, patch: str, *, quick: bool = False, perf: bool = True, reference: bool = False):
        ev = super().collect(patch, quick=quick, perf=perf, reference=reference)
        if not perf or not patch.strip():
            return ev
        spread = {"faster": 0.0001, "open": 0.05, "same": 0.05}[self.speed]
        outside = OutsideClock(baseline_wall_s=[1.03 + spread * (i - 3.5) for i in range(8)],
                               candidate_wall_s=[1.0] * 8)
        said = (dict(verdict="no significant change", ratio=1.0, candidate_median=30.0) if self.speed == "same"
                else dict(verdict="faster", ratio=0.001, candidate_median=0.03))
        return ev.model_copy(update={"perf": PerfResult(metric="spin_ms", direction="lower", unit="ms",
                                                        baseline_median=30.0, outside=outside, **said)})


@pytest.mark.parametrize("speed", ["faster", "open", "same"])
def test_the_rules_policy_emits_only_what_its_full_check_finds_faster(tmp_path, speed):
    """`rules` runs no quick check of speed (it would run every test again); the run's full check measures its
    proven-safe change: emitted when faster, kept aside when the noise leaves it open, reverted when no faster."""
    task, _ = make_task(tmp_path)
    checker = FullCheckSays(task, speed)
    result = run_task(task, "rules", out_dir=tmp_path / "out", run_id="r", prices=load_prices(),
                      lock_dir=tmp_path / "locks", checker=checker)
    checks = json.loads(result.paths.checks.read_text())
    assert [c["full"] for c in checks if c["evaluation"].get("perf")] == [True], checks
    ev, policy, told = result.report.evaluation, result.report.policy, result.report.result
    assert ev is not None and policy is not None
    assert told.startswith(f"rules policy: {policy.outcome}")
    kept = "+    buf = torch.empty(src.shape"
    if speed == "faster":
        assert ev.verdict == "pass" and kept in result.paths.patch.read_text()
        assert "faster in the full check" in told and not policy.reverted and not policy.speed_unknown
    elif speed == "open":
        assert ev.verdict == "no-change" and "speed not established" in ev.note, ev
        assert result.paths.patch.read_text() == "" and kept in result.paths.aside.read_text()
        assert "speed not established in the full check" in told and policy.speed_unknown
    else:
        assert ev.verdict == "no-change" and ev.note.startswith("reverted: the change passed but was not measurably")
        assert result.paths.patch.read_text() == "" and not result.paths.aside.exists()
        assert told.startswith("rules policy: reverted: the kept rewrites were not measurably faster")
        assert policy.reverted
