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


@pytest.mark.slow(seconds=300)
def test_dry_run_passes_every_step_with_its_figures(tmp_path):
    proc, summary = gpu_script(tmp_path, "--budget", "1500", timeout=1800)  # the CPU is slower than the GPU
    steps = summary.get("steps", {})
    assert set(steps) == STEPS, proc.stdout + proc.stderr
    # A/A is called faster or slower in 5% of runs by design: only that may fail here, and only so.
    a_a = steps.pop("a_a")
    assert a_a["ok"] or a_a["error"].startswith("A/A perf verdict"), a_a
    failed = {name: s.get("error") or s.get("skipped") for name, s in steps.items() if not s["ok"]}
    assert not failed, f"{failed}\n{proc.stdout[-3000:]}"
    assert proc.returncode == (0 if a_a["ok"] else 1)

    env = steps["environment"]["figures"]
    assert env["available"] is False and env["isolation"] in ("bwrap", "unshare", "none")
    assert steps["target_tests"]["figures"]["captured_graph_tests"]["skipped"] == 6  # CUDA only

    empty = steps["all_empty"]["figures"]
    assert len(empty["poisoned_tests"]["failing_modes"]) >= 3 and empty["check"]["verdict"] == "fail"
    assert any("flashattention_backend.py:" in b for b in empty["sanitizer"]["buffers"])
    assert empty["initcheck"]["measured"] and empty["initcheck"]["reads"], empty["initcheck"]
    assert "emulator" in (empty["initcheck"]["tool"] or "")

    ref = steps["reference"]["figures"]
    assert ref["perf"]["timer"] == "wall-clock" and ref["perf"]["ci_low"] is not None
    assert ref["initcheck"]["measured"] and ref["initcheck"]["reads"] == []

    padded = steps["padded"]["figures"]
    assert padded["all_empty"]["failing_modes"] and padded["reference"]["failed"] == 0

    matrix = steps["padding_matrix"]["figures"]  # 6 modes x (captured, padded, eager-only) x (graph, eager)
    assert matrix["reference"]["poisoned"]["passed"] == 36 and matrix["reference"]["check"]["verdict"] == "pass"
    assert any(c.endswith("-padded-graph]") for c in matrix["all_empty"]["poisoned"]["failing_cells"])
    assert matrix["all_empty"]["initcheck"]["reads"] and matrix["reference"]["initcheck"]["reads"] == []

    batch = steps["batch"]["figures"]
    assert batch["overlaps"] == [] and len(batch["jobs_measured"]) == 2
    assert len(batch["lock_waits_s"]) == batch["measurements"] >= 2

    evaluations = json.loads((tmp_path / "evaluations.json").read_text())
    assert set(evaluations) == {"check-all-empty", "check-reference", "check-a-a", "check-matrix-reference",
                                "check-matrix-all_empty"}
    assert "=== target-plain" in (tmp_path / "gpu.log").read_text()


def test_a_step_past_the_budget_is_skipped_and_said(tmp_path):
    proc, summary = gpu_script(tmp_path, "--budget", "0", "--steps", "environment,batch", timeout=120)
    assert proc.returncode == 1
    assert summary["steps"] == {"environment": {"ok": False, "skipped": "out of time (0s budget)"},
                                "batch": {"ok": False, "skipped": "out of time (0s budget)"}}
    assert "SKIPPED" in proc.stdout and "0 passed, 2 failed" in proc.stdout
