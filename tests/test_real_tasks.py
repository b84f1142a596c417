"""The real-code task set, `tasks/real/`, as a new user runs it: SGLang 0.4.6.post5's FlashAttention
backend in its own venv (built once per machine from PyPI), its script-style harness and its bench.

The slow tests build that venv (about a minute, once; `PERFAGENT_CACHE_DIR` keeps it) and drive the
CLI in real subprocesses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REAL = REPO / "tasks" / "real"
SGLANG = REAL / "sglang-fa-cuda-graph.toml"
PATCHES = REAL / "patches"


def perfagent(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200"})


def test_the_real_task_set_validates():
    res = perfagent("tasks", str(REAL))
    assert res.returncode == 0, res.stderr
    assert "sglang-fa-cuda-graph" in res.stdout


@pytest.mark.slow
def test_the_public_23_edit_patch_is_rejected_naming_the_modes_that_read_uninitialised_memory(tmp_path):
    patch = (PATCHES / "zeros-to-empty-23.diff").read_text()
    assert sum(line.startswith("+") and "torch.empty(" in line for line in patch.splitlines()) == 23
    res = perfagent("check", str(SGLANG), "--patch", str(PATCHES / "zeros-to-empty-23.diff"), "--no-perf",
                    "--json", str(tmp_path / "ev.json"))
    assert res.returncode == 0, res.stderr[-2000:]
    ev = json.loads((tmp_path / "ev.json").read_text())
    assert ev["verdict"] == "fail", ev["reasons"]
    poison = ev["correctness"]["poison"]  # (the plain run may fail too, on whatever malloc hands back)
    assert not poison["passed"]
    # the script's FAILED lines name the modes that read uninitialised memory; decode alone reads none
    assert {"local[ps1]", "encdec[ps1]", "draft_topk1[ps1]", "draft_topk2[ps1]", "verify_topk1[ps1]",
            "verify_topk2[ps1]"} <= set(poison["failing_tests"])
    assert not any(t.startswith("decode") for t in poison["failing_tests"])
    reason = next(r for r in ev["reasons"] if "poisoned" in r)
    assert "local[ps1]" in reason
    assert ev["environment"]["python"].startswith("3."), "the task's venv ran the harness"


@pytest.mark.slow
def test_the_safe_patch_passes_with_every_changed_line_executed(tmp_path):
    res = perfagent("check", str(SGLANG), "--patch", str(PATCHES / "sglang-fa-safe.diff"), "--no-perf",
                    "--json", str(tmp_path / "ev.json"))
    assert res.returncode == 0, res.stderr[-2000:]
    ev = json.loads((tmp_path / "ev.json").read_text())
    assert ev["verdict"] == "pass", ev["reasons"]
    cov = ev["coverage"]
    assert cov["measured"] and cov["changed"] and cov["uncovered"] == [], cov


@pytest.mark.slow
def test_rules_finishes_on_real_code(tmp_path):
    """23 candidates: the scripted policy's search is not cut by a chat model's turn budget, and what it
    emits is its own final change, graded in full."""
    res = perfagent("run", str(SGLANG), "--model", "rules", "--out", str(tmp_path), "--run-id", "real", "--quiet")
    report = json.loads((tmp_path / "results" / "real" / "sglang-fa-cuda-graph" / "report.json").read_text())
    assert res.returncode == 0, res.stderr[-2000:]
    assert report["subtype"] == "success", report["result"]
    ev = report["evaluation"]
    patch = (tmp_path / "patches" / "real" / "sglang-fa-cuda-graph" / "model_patch.diff").read_text()
    if patch:
        assert ev["verdict"] == "pass" and ev["perf"]["verdict"] == "faster", (ev["verdict"], ev["reasons"])
    else:  # kept edits not measurably faster on this machine: reverted, and nothing is emitted
        assert ev["verdict"] == "no-change" and "reverted" in report["result"]
    assert "rejected" in report["result"]
