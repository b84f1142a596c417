"""`.ci/gpu --dry-run`: the GPU checks' own logic, rehearsed on the CPU (compute-sanitizer emulated), so
the script cannot first fail on the rare GPU machine it is written for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STEPS = {"environment", "target_tests", "all_empty", "reference", "a_a", "padded", "padding_matrix", "batch"}


def gpu_script(out: Path, *args: str, timeout: float = 900) -> tuple[subprocess.CompletedProcess, dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "MINIATTN_"))}
    env.update(OUT=str(out), PYTHON=sys.executable)
    proc = subprocess.run([str(ROOT / ".ci" / "gpu"), "--dry-run", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").is_file() else {}
    return proc, summary


def check_environment(env: dict) -> None:
    assert env["available"] is False and env["isolation"] in ("bwrap", "unshare", "none")


def check_target_tests(figures: dict) -> None:
    assert figures["captured_graph_tests"]["skipped"] == 6  # CUDA only


def check_all_empty(empty: dict) -> None:
    assert len(empty["poisoned_tests"]["failing_modes"]) >= 3 and empty["check"]["verdict"] == "fail"
    assert any("flashattention_backend.py:" in b for b in empty["sanitizer"]["buffers"])
    assert empty["initcheck"]["measured"] and empty["initcheck"]["reads"], empty["initcheck"]
    assert "emulator" in (empty["initcheck"]["tool"] or "")


def check_reference(ref: dict) -> None:
    assert ref["perf"]["timer"] == "wall-clock" and ref["perf"]["ci_low"] is not None
    assert ref["initcheck"]["measured"] and ref["initcheck"]["reads"] == []


def check_padded(padded: dict) -> None:
    assert padded["all_empty"]["failing_modes"] and padded["reference"]["failed"] == 0


def check_padding_matrix(matrix: dict) -> None:  # 6 modes x (captured, padded, eager-only) x (graph, eager)
    assert matrix["reference"]["poisoned"]["passed"] == 36 and matrix["reference"]["check"]["verdict"] == "pass"
    assert any(c.endswith("-padded-graph]") for c in matrix["all_empty"]["poisoned"]["failing_cells"])
    assert matrix["all_empty"]["initcheck"]["reads"] and matrix["reference"]["initcheck"]["reads"] == []


def check_batch(batch: dict) -> None:
    assert batch["overlaps"] == [] and len(batch["jobs_measured"]) == 2
    assert len(batch["lock_waits_s"]) == batch["measurements"] >= 2


def check_a_a(figures: dict) -> None:  # its verdict is the step's own check (A/A may fail by design, below)
    assert figures["perf"]["timer"] == "wall-clock"


# Each step's figures, as its check reads them, and the `perfagent check` evaluations it keeps.
CHECKS = {"environment": check_environment, "target_tests": check_target_tests, "all_empty": check_all_empty,
          "reference": check_reference, "a_a": check_a_a, "padded": check_padded,
          "padding_matrix": check_padding_matrix, "batch": check_batch}
EVALUATIONS = {"all_empty": {"check-all-empty"}, "reference": {"check-reference"}, "a_a": {"check-a-a"},
               "padding_matrix": {"check-matrix-reference", "check-matrix-all_empty"}}


def check_all_empty_evaluation(ev: dict) -> None:  # initcheck (emulated) names the page table's device read
    ic = ev["initcheck"]
    assert ic["measured"] and ic["reads"], ic
    assert ev["verdict"] == "fail"
    assert any(r.startswith("uninitialised device reads (compute-sanitizer initcheck): ") for r in ev["reasons"])
    assert "aten.index.Tensor" in {r["kernel"] for r in ic["reads"]}  # the page table, gathered before it is written
    assert ic["errors"] >= sum(r["count"] for r in ic["reads"]) and ic["baseline_s"] > 0
    assert ic["tool"].startswith("perfagent CPU emulator") and ic["run"]["name"] == "initcheck"


def check_reference_evaluation(ev: dict) -> None:
    ic = ev["initcheck"]
    assert ic["measured"] and ic["reads"] == [] and ic["errors"] == 0, ic
    assert ev["verdict"] != "fail", ev["reasons"]


# The whole evaluations some steps keep, beyond their figures (tests/checks/test_initcheck.py leaves them here)
EVALUATION_CHECKS = {"check-all-empty": check_all_empty_evaluation, "check-reference": check_reference_evaluation}

# Every step once, in groups of about a minute each here (the whole script took 209 s alone, and 450 to
# 550 s beside the rest of the suite): one script run a group, the groups side by side under pytest -n.
GROUPS = [("environment", "target_tests", "all_empty", "padded"), ("reference", "a_a"), ("padding_matrix",),
          ("batch",)]


def test_the_groups_are_every_step_once():
    assert sorted(s for g in GROUPS for s in g) == sorted(STEPS) == sorted(CHECKS)


@pytest.mark.slow(seconds=150)
@pytest.mark.parametrize("group", GROUPS, ids="+".join)
def test_dry_run_passes_every_step_with_its_figures(tmp_path, group):
    proc, summary = gpu_script(tmp_path, "--budget", "1500", "--steps", ",".join(group), timeout=1800)
    steps = summary.get("steps", {})
    assert set(steps) == set(group), proc.stdout + proc.stderr
    # Each A/A comparison (candidate, reference) leaves 1 out of its interval in 5% of runs by design: only that
    # may fail here, and only so.
    a_a = steps.get("a_a", {"ok": True})
    assert a_a["ok"] or a_a["error"].startswith("A/A perf verdict"), a_a
    failed = {name: s.get("error") or s.get("skipped") for name, s in steps.items() if not s["ok"] and name != "a_a"}
    assert not failed, f"{failed}\n{proc.stdout[-3000:]}"
    assert proc.returncode == (0 if a_a["ok"] else 1)
    for name in group:
        CHECKS[name](steps[name]["figures"])
    evaluations = json.loads((tmp_path / "evaluations.json").read_text()) if EVALUATIONS.keys() & set(group) else {}
    assert set(evaluations) == set().union(*(EVALUATIONS.get(name, set()) for name in group))
    for name in EVALUATION_CHECKS.keys() & evaluations.keys():
        EVALUATION_CHECKS[name](evaluations[name])
    if "target_tests" in group:
        assert "=== target-plain" in (tmp_path / "gpu.log").read_text()


def test_a_step_past_the_budget_is_skipped_and_said(tmp_path):
    proc, summary = gpu_script(tmp_path, "--budget", "0", "--steps", "environment,batch", timeout=120)
    assert proc.returncode == 1
    assert summary["steps"] == {"environment": {"ok": False, "skipped": "out of time (0s budget)"},
                                "batch": {"ok": False, "skipped": "out of time (0s budget)"}}
    assert "SKIPPED" in proc.stdout and "0 passed, 2 failed" in proc.stdout
