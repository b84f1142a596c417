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


def variant(tmp_path: Path, *replacements: tuple[str, str]) -> Path:
    """The SGLang task with its paths made absolute and `replacements` made, in `tmp_path` (its venv,
    keyed by the setup, is the same one)."""
    text = SGLANG.read_text().replace('repo = "sglang-fa"', f'repo = "{REAL / "sglang-fa"}"').replace(
        'patch = "patches/sglang-fa-safe.diff"', f'patch = "{PATCHES / "sglang-fa-safe.diff"}"')
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new)
    task = tmp_path / "task.toml"
    task.write_text(text)
    return task


def test_the_real_task_set_validates():
    res = perfagent("tasks", str(REAL))
    assert res.returncode == 0, res.stderr
    assert "sglang-fa-cuda-graph" in res.stdout


@pytest.mark.slow(seconds=70)
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
    # the sanitizer names each buffer read before it is written, with the op and the mode
    reads = {(r["code"].split('"')[1], t) for r in ev["sanitizer"]["reads"] for t in r["tests"]}
    assert {("encoder_lens_int32", "encdec[ps1]"), ("local_query_start_loc", "local[ps1]"),
            ("cache_seqlens", "draft_topk1[ps1]"), ("cache_seqlens", "verify_topk2[ps1]")} <= reads, reads
    assert all(r["op"] and r["at"] for r in ev["sanitizer"]["reads"])


@pytest.mark.slow
def test_the_safe_patch_reads_nothing_uninitialised_but_its_mla_read_sites_are_untested(tmp_path):
    """The 9 edits are safe in every mode the harness runs: every changed line runs and the sanitizer sees
    no read before a write. Three of the buffers are also read on the MLA path, which no mode runs, so
    the honest verdict is `unverified`, naming those reads."""
    res = perfagent("check", str(SGLANG), "--patch", str(PATCHES / "sglang-fa-safe.diff"), "--no-perf",
                    "--json", str(tmp_path / "ev.json"))
    assert res.returncode == 0, res.stderr[-2000:]
    ev = json.loads((tmp_path / "ev.json").read_text())
    assert ev["correctness"]["poison"]["passed"] and ev["sanitizer"]["measured"] and ev["sanitizer"]["reads"] == []
    cov = ev["coverage"]
    assert cov["measured"] and cov["changed"] and cov["uncovered"] == [], cov
    assert ev["verdict"] == "unverified", ev["reasons"]
    missed = [s for s in ev["read_sites"] if not s["executed"]]
    assert missed and all(s["guard"].startswith("self.use_mla") for s in missed), missed
    assert all(s["executed"] for s in ev["read_sites"] if "use_mla" not in (s["guard"] or "")), ev["read_sites"]


@pytest.mark.slow(seconds=350)
def test_rules_finishes_on_real_code(tmp_path):
    """23 candidates: the scripted policy's search is not cut by a chat model's turn budget, and what it
    emits is its own final change, graded in full. (The test is about the search: a bench sample times
    10 calls, not 30, and the final grading measures no reference, a third fewer samples.)"""
    task = variant(tmp_path, ('command = "python bench/bench_init_cuda_graph_state.py"',
                              'command = "python bench/bench_init_cuda_graph_state.py --repeats 10 --warmup 2"'),
                   ("calls = 30", "calls = 10"), (f'[reference]\npatch = "{PATCHES / "sglang-fa-safe.diff"}"\n', ""))
    res = perfagent("run", str(task), "--model", "rules", "--out", str(tmp_path), "--run-id", "real", "--quiet")
    report = json.loads((tmp_path / "results" / "real" / "sglang-fa-cuda-graph" / "report.json").read_text())
    assert res.returncode == 0, res.stderr[-2000:]
    assert report["subtype"] == "success", report["result"]
    ev = report["evaluation"]
    patch = (tmp_path / "patches" / "real" / "sglang-fa-cuda-graph" / "model_patch.diff").read_text()
    if patch:
        assert ev["verdict"] == "pass" and ev["perf"]["verdict"] == "faster", (ev["verdict"], ev["reasons"])
    else:  # kept edits not faster on this machine (reverted), or their speed not established (kept aside)
        aside = tmp_path / "patches" / "real" / "sglang-fa-cuda-graph" / "speed_unknown.diff"
        assert ev["verdict"] == "no-change" and ("reverted" in report["result"] or (
            "speed not established" in ev["note"] and aside.is_file())), (ev["note"], report["result"])
    assert "rejected" in report["result"]


@pytest.mark.slow
def test_without_the_encoder_decoder_mode_its_read_sites_make_the_patch_unverified(tmp_path):
    """The same task with the encoder-decoder mode left out of the harness: making `encoder_lens_int32`
    uninitialised reads nothing the remaining modes can see, so what stands between it and `pass` is
    that no test runs the places that read it."""
    task = variant(tmp_path, ('command = "python tests/check_cuda_graph.py"',
                              'command = "python tests/check_cuda_graph.py decode local draft_topk1 verify_topk1"'))
    backend = "sglang/srt/layers/attention/flashattention_backend.py"
    lines = (REAL / "sglang-fa" / backend).read_text().splitlines()
    assert lines[1325].strip() == '"encoder_lens_int32": torch.zeros('
    (tmp_path / "enc.diff").write_text(
        f"--- a/{backend}\n+++ b/{backend}\n@@ -1325,3 +1325,3 @@\n {lines[1324]}\n-{lines[1325]}\n"
        f"+{lines[1325].replace('torch.zeros(', 'torch.empty(')}\n {lines[1326]}\n")
    res = perfagent("check", str(task), "--patch", str(tmp_path / "enc.diff"), "--no-perf",
                    "--json", str(tmp_path / "ev.json"))
    assert res.returncode == 0, res.stderr[-2000:]
    ev = json.loads((tmp_path / "ev.json").read_text())
    assert ev["correctness"]["poison"]["passed"] and ev["sanitizer"]["reads"] == []
    assert ev["verdict"] == "unverified", ev["reasons"]
    missed = {s["line"]: s["guard"] for s in ev["read_sites"] if not s["executed"]}
    assert missed.get(967) == "not self.use_mla and layer.is_cross_attention", missed
    # the replay's cumsum at 1741 reads it right after `copy_` writes every element (broadcast): not a read site
    assert 1741 not in missed, missed
    assert any(r.startswith(f"{backend}:967 reads the buffer allocated uninitialised at line 1326")
               for r in ev["reasons"])
