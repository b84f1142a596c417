"""ISO-Bench in: `perfagent tasks import --format iso-bench` of its task configs (one task per commit pair), and
`perfagent check SET --predictions RUN_FOLDER` of its run folders (the agent's own claim and cost kept beside the
evidence). The config and the run folder are hand-made fixtures in ISO-Bench's shapes (tests/data/iso_bench); the
repository is a small mirror made here, whose commits the fixtures' placeholders are filled with."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ISO_BENCH_SEED, commit, make_repo, perfagent_cli as perfagent

from agent.interchange.iso_bench import read_configs, read_run_folder, task_id
from agent.task import load_task

DATA = Path(__file__).resolve().parents[1] / "data" / "iso_bench"
RUN = "state/runs/fastpkg/claude_code/default/2025-12-23_06-28-44"
SLOW = ("def total(xs, rounds=40):\n    s = 0\n    for _ in range(rounds):\n        for x in xs:\n            s += x\n"
        "    return s\n")
FAST = "def total(xs, rounds=40):\n    return sum(xs) * rounds\n"
# The repository's own bench, as ISO-Bench's `cmd` runs it: it checks its result and prints a throughput.
BENCH = '''import time

from fastpkg.core import total

xs = list(range(2000))
assert total([1, 2, 3], rounds=2) == 12, "total() is wrong"
t0 = time.perf_counter()
for _ in range(20):
    total(xs)
print(f"{20 / (time.perf_counter() - t0):.3f}")
'''


@pytest.fixture
def iso(tmp_path):
    """mirrors/acme__fastpkg (base -> human 1 -> human 2), the fixture config and run folder filled with its
    commits."""
    repo = make_repo(tmp_path / "mirrors" / "acme__fastpkg",
                     {"fastpkg/__init__.py": "", "fastpkg/core.py": SLOW, "bench.py": BENCH})
    base = repo.head.commit.hexsha
    human1 = commit(repo, {"fastpkg/core.py": FAST}, "core: total with sum()")
    human2 = commit(repo, {"fastpkg/core.py": "# total, fast\n" + FAST}, "core: a comment")
    fill = {"@HUMAN1@": human1, "@PRE1@": base, "@HUMAN2@": human2, "@PRE2@": human1}
    shutil.copytree(DATA, tmp_path / "iso")
    for path in (tmp_path / "iso").rglob("*"):
        if path.is_file():
            text = path.read_text()
            for k, v in fill.items():
                text = text.replace(k, v)
            path.write_text(text)
    (tmp_path / "ids.json").write_text(json.dumps({"base": base, "human1": human1, "human2": human2}))
    return tmp_path


def ids(iso: Path) -> dict[str, str]:
    return json.loads((iso / "ids.json").read_text())


def comments(task_file: Path) -> str:
    return "\n".join(ln for ln in task_file.read_text().splitlines() if ln.startswith("#"))


def test_a_task_config_becomes_one_valid_task_per_commit_pair_with_its_unmapped_fields_listed(iso):
    res = perfagent("tasks", "import", "iso/tasks/fastpkg.yaml", "--format", "iso-bench", "--out", "imported",
                    "--repos", "mirrors", cwd=iso)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "imported 2 of 2 record(s)" in res.stdout
    c = ids(iso)
    core = load_task(iso / "imported" / f"fastpkg_core-{c['human1'][:8]}.toml")
    s = core.spec
    assert s.base == c["base"], "pre_commit omitted: the human commit's first parent"
    assert core.repo == str((iso / "mirrors" / "acme__fastpkg").resolve())
    assert s.focus == ["fastpkg/core.py"] and s.requires_gpu is False
    assert s.perf is not None and s.perf.metric == "throughput_req_per_s" and s.perf.direction == "higher"
    assert "iso_bench_run.py perf" in s.perf.command and "iso_bench_run.py check" in s.correctness.command
    gold = subprocess.run(["git", "diff", c["base"], c["human1"]], cwd=iso / "mirrors" / "acme__fastpkg",
                          capture_output=True, text=True, check=True).stdout
    assert "+    return sum(xs) * rounds" in core.reference_patch.read_text()
    assert core.reference_patch.read_text().split("@@", 1)[1] == gold.split("@@", 1)[1]
    assert "No public API breakage" in s.prompt and "fastpkg/core.py" in s.prompt
    notes = comments(core.file)
    for name in ("env_build", "agents", "testpack", "scoring", "metrics: functional_match",
                 "metrics: throughput_req_per_s: args.trials", "runner.platform = linux/amd64",
                 "runner.allow_network_during_prepare"):
        assert f"# not mapped: {name}" in notes, name
    for mapped in ("repo ", "optimization_contract.target_files", "requires_gpu", "description", "name "):
        assert f"# not mapped: {mapped}" not in notes, mapped
    assert json.loads((iso / "imported" / core.id / "iso_bench_run.json").read_text()) == {
        "instance": core.id, "metric": "throughput_req_per_s", "argv": ["python", "bench.py"]}

    gpu = load_task(iso / "imported" / f"fastpkg_gpu-{c['human2'][:8]}.toml").spec
    assert gpu.base == c["human1"] and gpu.requires_gpu is True
    assert gpu.perf is not None and gpu.perf.metric == "latency_ms" and gpu.perf.direction == "lower"

    listed = perfagent("tasks", "imported", cwd=iso)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "perf:throughput_req_per_s" in listed.stdout and "perf:latency_ms" in listed.stdout, listed.stdout


def test_the_imported_runner_measures_and_checks_with_the_configs_command(iso):
    assert perfagent("tasks", "import", "iso/tasks/fastpkg.yaml", "--format", "iso-bench", "--out", "imported",
                     "--repos", "mirrors", cwd=iso).returncode == 0
    mirror = iso / "mirrors" / "acme__fastpkg"
    runner = iso / "imported" / f"fastpkg_core-{ids(iso)['human1'][:8]}" / "iso_bench_run.py"
    env = {**os.environ, "PYTHONPATH": str(mirror)}
    perf = subprocess.run([sys.executable, str(runner), "perf"], cwd=mirror, env=env, capture_output=True, text=True)
    assert perf.returncode == 0, perf.stdout + perf.stderr
    line = json.loads(perf.stdout.strip().splitlines()[-1])
    assert line["metric"] == "throughput_req_per_s" and line["value"] > 0
    (mirror / "fastpkg" / "core.py").write_text(FAST.replace("* rounds", "* (rounds + 1)"))
    bad = subprocess.run([sys.executable, str(runner), "check"], cwd=mirror, env=env, capture_output=True, text=True)
    assert bad.returncode == 1 and "FAILED bench - exit 1: AssertionError: total() is wrong" in bad.stdout, bad.stdout


def test_bad_configs_are_one_line_each(iso, tmp_path):
    good = (iso / "iso" / "tasks" / "fastpkg.yaml").read_text().split("---")[0]
    cases = {
        "notyaml.yaml": ("id: [unclosed\n", 2, "not valid YAML"),
        "empty.yaml": ("", 2, "no task config in it"),
        "nopre.yaml": (good, 1, "repo.pre_commit: omitted"),  # without --repos: no mirror to find the parent
        "badsha.yaml": (good.replace(ids(iso)["human1"], "HEAD; rm -rf /"), 2, "is not a 40-hex commit sha"),
    }
    for name, (text, code, said) in cases.items():
        (iso / name).write_text(text)
        res = perfagent("tasks", "import", name, "--format", "iso-bench", "--out", f"out-{name}", cwd=iso)
        assert res.returncode == code and said in res.stderr, (name, res.returncode, res.stderr)
        assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert not list((iso / f"out-{name}").glob("*.toml")) if (iso / f"out-{name}").exists() else True


def test_a_run_folder_is_read_as_predictions_with_the_agents_own_claim_and_cost(iso):
    (pred,) = read_run_folder(iso / "iso" / RUN)
    assert pred.instance_id == task_id("fastpkg_core", ids(iso)["human1"])
    assert pred.model_name_or_path == "claude_code:claude-sonnet-4-5-20250929"
    assert pred.model_patch.startswith("diff --git a/fastpkg/core.py")
    own = pred.model_extra["agent_result"]
    assert own["cost"] == "self-reported" and own["cost_usd"] == pytest.approx(0.90378725)
    assert "No risk of uninitialized memory access" in own["claim"]
    assert pred.model_extra["iso_bench"]["item"] == "fastpkg_001_HUMAN8"
    assert [p.instance_id for p in read_run_folder(iso / "iso" / "state")] == [pred.instance_id]
    assert len(read_configs(iso / "iso" / "tasks" / "fastpkg.yaml")) == 2


@pytest.mark.slow(seconds=60)
def test_check_predictions_grades_a_run_folder_and_keeps_the_agents_claim_and_cost_beside_the_evidence(iso):
    assert perfagent("tasks", "import", "iso/tasks/fastpkg.yaml", "--format", "iso-bench", "--out", "imported",
                     "--repos", "mirrors", cwd=iso).returncode == 0
    res = perfagent("check", "imported", "--predictions", f"iso/{RUN}", "--run-id", "iso", "--no-baseline",
                    "--quiet", cwd=iso)
    assert res.returncode in (0, 1), res.stdout + res.stderr
    reports = list((iso / "results" / "iso").rglob("report.json"))
    assert len(reports) == 1, (res.stdout + res.stderr, reports)
    report = json.loads(reports[0].read_text())
    assert report["evaluation"]["verdict"] == "fail", report["evaluation"]
    assert "total() is wrong" in json.dumps(report["evaluation"])
    agent = report["agent"]
    assert agent["model"] == "claude_code:claude-sonnet-4-5-20250929"
    assert "No risk of uninitialized memory access" in agent["claim"]
    assert agent["own_cost_usd"] == pytest.approx(0.90378725) and "self-reported" in agent["cost_note"]
    assert report["total_cost_usd"] is None, "what the patch cost is not metered here"


# -- the seed: ISO-Bench's stored run for sglang 205d5cb4, answered by the shipped SGLang task -----------------------
REAL = Path(__file__).resolve().parents[2] / "tasks" / "real"


def test_the_seeds_instance_names_the_shipped_task_with_its_paths_mapped_onto_its_tree():
    """The instance is ISO-Bench's sglang_core-205d5cb4 (run_summary.json's task id and human commit, as the folder
    name sglang_008_205d5cb4 says too), and the set's shipped task answers for it."""
    (own,) = read_run_folder(ISO_BENCH_SEED)
    assert own.instance_id == "sglang_core-205d5cb4"
    assert own.model_name_or_path == "claude_code:gpt-5-2025-08-07", "the model prediction.jsonl names"
    (pred,) = read_run_folder(ISO_BENCH_SEED, {"sglang-fa-cuda-graph"})
    assert pred.instance_id == "sglang-fa-cuda-graph"
    heads = [ln for ln in pred.model_patch.splitlines() if ln.startswith(("diff --git", "--- ", "+++ "))]
    assert heads == ["diff --git a/sglang/srt/layers/attention/flashattention_backend.py "
                     "b/sglang/srt/layers/attention/flashattention_backend.py",
                     "--- a/sglang/srt/layers/attention/flashattention_backend.py",
                     "+++ b/sglang/srt/layers/attention/flashattention_backend.py"]
    assert sum(ln.startswith("+") and "torch.empty(" in ln for ln in pred.model_patch.splitlines()) == 23
    own = pred.model_extra["agent_result"]
    assert "No risk of uninitialized memory access" in own["claim"]
    assert own["cost"] == "self-reported" and own["cost_usd"] == pytest.approx(0.90378725)


@pytest.mark.slow(seconds=500)  # early: on a fresh machine it may be the one that builds the real task's venv
def test_the_seeds_stored_run_graded_on_a_cpu_fails_naming_the_buffers_beside_the_agents_claim(tmp_path):
    """Issue 47's acceptance: ISO-Bench's run folder for sglang 205d5cb4 (its 23-edit patch, the agent's result
    JSON), graded with `check --predictions` against the shipped real-code set (its venv built once from PyPI, as
    tests/test_real_tasks.py builds it). The suite's only grading of that public patch: what it reads
    uninitialised, mode by mode, is asserted here (test_real_tasks.py checks the shipped patch is the same)."""
    res = subprocess.run([sys.executable, "-m", "agent", "check", str(REAL), "--predictions", str(ISO_BENCH_SEED),
                          "--run-id", "seed", "--no-baseline", "--quiet"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=1800, env={**os.environ, "COLUMNS": "200"})
    reports = list((tmp_path / "results" / "seed").rglob("report.json"))
    assert len(reports) == 1, res.stdout[-2000:] + res.stderr[-2000:]
    report = json.loads(reports[0].read_text())
    ev = report["evaluation"]
    assert ev["verdict"] == "fail", ev["reasons"]
    poison = ev["correctness"]["poison"]  # (the plain run may fail too, on whatever malloc hands back)
    assert not poison["passed"]
    # the script's FAILED lines name the modes that read uninitialised memory; decode alone reads none
    assert {"local[ps1]", "encdec[ps1]", "draft_topk1[ps1]", "draft_topk2[ps1]", "verify_topk1[ps1]",
            "verify_topk2[ps1]"} <= set(poison["failing_tests"])
    assert not any(t.startswith("decode") for t in poison["failing_tests"])
    assert "local[ps1]" in next(r for r in ev["reasons"] if "poisoned" in r)
    assert ev["environment"]["python"].startswith("3."), "the task's venv ran the harness"
    # the sanitizer names each buffer read before it is written, with the op and the mode
    reads = {(r["code"].split('"')[1], t) for r in ev["sanitizer"]["reads"] for t in r["tests"]}
    assert {("encoder_lens_int32", "encdec[ps1]"), ("local_query_start_loc", "local[ps1]"),
            ("cache_seqlens", "draft_topk1[ps1]"), ("cache_seqlens", "verify_topk2[ps1]")} <= reads, reads
    assert all(r["op"] and r["at"] for r in ev["sanitizer"]["reads"])
    agent = report["agent"]
    assert "No risk of uninitialized memory access" in agent["claim"]
    assert agent["own_cost_usd"] == pytest.approx(0.90378725) and "self-reported" in agent["cost_note"]
    # the report an ISO-Bench user recognises (issue 47, item 4): the agent/model's row, 1 rejected, of the kind
    # uninitialised read, beside the agent's self-reported cost and ISO-Bench's own verdict (run_summary.json)
    shown = subprocess.run([sys.executable, "-m", "agent", "review", "results/seed"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "240"})
    row = next((ln for ln in shown.stdout.splitlines() if ln.startswith("│ claude_code ")), shown.stdout)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[1:5] == ["gpt-5-2025-08-07", "1", "1", "1"], row  # graded, rejected, of them uninitialised read
    assert "$0.9038 (self-reported)" in row and "baseline_failed 1, No module named 'IPython'" in row, row
