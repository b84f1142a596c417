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
from helpers import ISO_BENCH_SEED

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


def test_the_public_23_edit_patch_is_the_seeds():
    """The public 23-edit patch is graded once, as ISO-Bench's stored run of it (tests/interchange/test_iso_bench.py:
    the modes and buffers it reads uninitialised), not a second time here."""
    patch = (PATCHES / "zeros-to-empty-23.diff").read_text()
    assert sum(line.startswith("+") and "torch.empty(" in line for line in patch.splitlines()) == 23
    seed = (ISO_BENCH_SEED / "sglang_008_205d5cb4" / "model_patch.diff").read_text()
    assert edits(patch) == edits(seed)


def edits(diff: str) -> list[str]:
    """A diff's added and removed lines, without its headers and context."""
    return [ln for ln in diff.splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]


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
    10 calls, not 30, and the final grading measures no reference, a third fewer samples, in 7 pairs, not 20.)"""
    task = variant(tmp_path, ('command = "python bench/bench_init_cuda_graph_state.py"',
                              'command = "python bench/bench_init_cuda_graph_state.py --repeats 10 --warmup 2"'),
                   ("calls = 30", "calls = 10\nmax_pairs = 7"),
                   (f'[reference]\npatch = "{PATCHES / "sglang-fa-safe.diff"}"\n', ""))
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
