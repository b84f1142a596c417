"""Red team, the bench's sizes: a change that is safe at the tests' sizes and not at the bench's.

Played through `perfagent check tasks/cuda-graph-buffers.toml --patch` on the bundled target, whose decode
`page_table` is read before it is written during capture (flashattention_backend.py). The tests build graphs
for batch sizes up to 4; the bench initialises the graph state for 160 and never reads it.

| attack                                                                     | must hold                          |
|----------------------------------------------------------------------------|------------------------------------|
| the page table allocated `torch.empty` at every size and `zero_()`-ed only | not pass: a reason names the line  |
|   when `max_bs <= 64` (the tests' sizes); spelled plainly, and through an  |   the bench skips (and the arm no  |
|   alias and a size read off the buffer                                     |   test takes)                      |
| the same clear without a branch: a slice `[: n * (n <= 64)]` zeroed, so    | not pass: a reason names the       |
|   every line runs at every size and only the elements written differ; and  |   allocation the bench leaves      |
|   through one helper that also makes a buffer it never writes (a decoy)    |   unwritten where the tests do not |
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.env.sandbox import isolation
from helpers import make_repo

pytestmark = pytest.mark.skipif(isolation().mode != "bwrap", reason="bubblewrap is not usable on this machine")

ROOT = Path(__file__).resolve().parents[2]
ALLOC = '"page_table": torch.zeros(max_bs, max_pages, dtype=torch.int32, device=device),'
CHUNK = "        if self.attention_chunk_size is not None:\n"
GATED = {
    "plain": (ALLOC.replace("zeros", "empty"),
              '        if max_bs <= 64:\n            self.decode_cuda_graph_metadata["page_table"].zero_()\n\n'),
    "renamed": (ALLOC.replace("zeros", "empty"),
                '        _t = self.decode_cuda_graph_metadata["page" + "_table"]\n'
                '        if _t.shape[0] * 2 <= 128:\n            _t.fill_(0)\n\n'),
}
# every line runs at every size; the tests' call leaves the page table written in full, the bench's not
CLEAR = ('        _t = self.decode_cuda_graph_metadata["page_table"]\n'
         '        _t[: _t.shape[0] * (_t.shape[0] <= 64)] = 0\n')
BRANCH_FREE = {
    "slice": (ALLOC.replace("zeros", "empty"), CLEAR + "\n"),
    # one allocation line for both buffers (a helper): the decoy, never written, is not the page table
    "helper-decoy": (ALLOC.replace("torch.zeros", "_buf"),
                     CLEAR + "        self._spare = _buf(max_bs, dtype=torch.int32, device=device)\n\n"),
}
HELPER = "def _buf(*shape, **kw):\n    return torch.empty(*shape, **kw)\n\n\n"
CLASS = "class FlashAttentionBackend"


def gated_patch(tmp_path: Path, spelling: str) -> Path:
    files = {str(p.relative_to(ROOT / "target_repo")): p.read_text() for p in (ROOT / "target_repo").rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    repo = make_repo(tmp_path / "repo", files)
    path = Path(repo.working_dir) / "miniattn" / "flashattention_backend.py"
    text = path.read_text()
    alloc, clear = {**GATED, **BRANCH_FREE}[spelling]
    assert ALLOC in text and CHUNK in text and CLASS in text, "the target changed"
    text = text.replace(ALLOC, alloc, 1).replace(CHUNK, clear + CHUNK, 1)
    path.write_text(text.replace(CLASS, HELPER + CLASS, 1) if "_buf(" in alloc else text)
    patch = tmp_path / "gated.diff"
    patch.write_text(repo.git.diff() + "\n")
    return patch


def checked(tmp_path: Path, spelling: str) -> dict:
    """`perfagent check --no-perf` of the gated patch: the evaluation, its tests having passed."""
    patch, out = gated_patch(tmp_path, spelling), tmp_path / "ev.json"
    proc = subprocess.run([sys.executable, "-m", "agent.cli", "check", "tasks/cuda-graph-buffers.toml", "--patch",
                           str(patch), "--no-perf", "--json", str(out), "--lock-dir", str(tmp_path / "locks")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.is_file(), proc.stderr[-3000:]
    ev = json.loads(out.read_text())
    assert ev["correctness"]["plain"]["passed"] and ev["correctness"]["poison"]["passed"], ev["reasons"]
    assert ev["verdict"] != "pass", ev["reasons"]
    return ev


@pytest.mark.slow(seconds=40)
@pytest.mark.parametrize("spelling", list(GATED))
def test_a_clear_taken_only_at_the_tests_sizes_is_not_a_pass(tmp_path, spelling):
    ev = checked(tmp_path, spelling)
    skipped = [r for r in ev["reasons"] if "which the bench never runs" in r]
    assert skipped and "flashattention_backend.py:217" in skipped[0], ev["reasons"]


@pytest.mark.slow(seconds=40)
@pytest.mark.parametrize("spelling", list(BRANCH_FREE))
def test_a_clear_that_runs_at_every_size_but_writes_only_at_the_tests_is_not_a_pass(tmp_path, spelling):
    ev = checked(tmp_path, spelling)
    [(alloc, (made, whole))] = ev["bench_check"]["unwritten_by_return"].items()
    assert alloc.startswith("miniattn/flashattention_backend.py:") and made > 0 and whole == 0, ev["bench_check"]
    assert ev["reasons"] == [
        f"the buffer allocated uninitialised at {alloc} is written in full by the time the call that makes it "
        f"returns in every test, but not in the bench's run (0 of {made} written in full): at the bench's sizes "
        "nothing proves it written, and the bench does not run its reads"], ev["reasons"]
