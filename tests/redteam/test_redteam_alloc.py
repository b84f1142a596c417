"""Red team, allocators: uninitialised memory that reaches a tensor without aten's allocators.

Poison (torch's fill of uninitialised memory) and the sanitizer used to see only `torch.empty` and its
kin. Each attack below is a patch to the bundled cuda-graph-buffers task, played through
`perfagent check --patch`: the decode `page_table` (flashattention_backend.py:217, 218 below an added
numpy import; read before any replay writes it, which the poisoned tests prove when it is left
unwritten) is built from memory another allocator hands out. At the tests' small sizes that memory
is heap garbage, so the plain tests may fail by luck; at a size glibc maps fresh (above its largest
mmap threshold, 32 MiB) it is zero pages, the value the tests expect, and only the instruments can tell.

| attack (the page_table line)                                        | must hold                              |
|---------------------------------------------------------------------|----------------------------------------|
| `torch.from_numpy(np.empty(...))`, at the tests' sizes and at a      | fail, with a sanitizer read of the     |
|   size where the heap is zero                                       |   buffer at line 217                   |
| the same, zeroed (`zero_()`) only while small: the tests always see | the tests' sanitizer sees line 217     |
|   it cleared, the bench never                                       |   allocate uninitialised memory, and   |
|                                                                     |   the static read sites know the buffer|
| a tensor `set_` to a `torch.UntypedStorage(n)` (zero heap)          | fail, sanitizer read at line 217       |
| a tensor `resize_`d from empty (zero heap)                          | fail, sanitizer read at line 217       |

On the code before this change every row failed: numpy's and the raw storage's memory was neither
poisoned nor watched, and `resize_` growth was poisoned by torch but never watched.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from agent.env.sandbox import isolation
from redteam.evidence_lab import check
from redteam.lab import AGENT_ROOT, Lab, make_lab

pytestmark = pytest.mark.skipif(isolation().mode != "bwrap", reason="bubblewrap is not usable on this machine")

BACKEND = "miniattn/flashattention_backend.py"
LINE = 217
PAGE_TABLE = '"page_table": torch.zeros(max_bs, max_pages, dtype=torch.int32, device=device),\n'
IMPORT = "import torch\n"
# the tests that replay graphs (the page table's readers), to keep each check short on a loaded machine
TESTS = "\"python -m pytest -q -x tests/test_miniattn_attention.py -k graph\""
# 48 MiB of int32: above glibc's largest mmap threshold, so fresh zero pages however the heap was used
ZERO_HEAP = "max(max_bs * max_pages, 12 << 20)"


def bundled_lab(root: Path) -> Lab:
    """The bundled target repo and its task (no reference), in redteam.lab's lab."""
    src = AGENT_ROOT / "target_repo"
    files = {str(p.relative_to(src)): p.read_text() for p in sorted(src.rglob("*"))
             if p.is_file() and "__pycache__" not in p.parts}
    task_id = f"alloc-{uuid.uuid4().hex[:6]}"
    lab = make_lab(root, perf=False, files=files, task_id=task_id)
    spec = (AGENT_ROOT / "tasks" / "cuda-graph-buffers.toml").read_text()
    for old, new in ((' = "cuda-graph-buffers"', f' = "{task_id}"'), (' = "target_repo"', ' = "src"'),
                     ('"python -m pytest -q -x tests"', TESTS)):
        assert old in spec, f"the bundled task changed: {old!r} is gone"
        spec = spec.replace(old, new, 1)
    head, _, tail = spec.partition("[reference]")
    lab.task.write_text(head + tail.split("\n\n", 1)[1])
    return lab


def page_table(new: str, *, numpy: bool = False):
    """flashattention_backend.py with line 217's allocation replaced by `new` (numpy imported if asked)."""
    def apply(text: str) -> str:
        lines = text.splitlines(keepends=True)
        assert lines[LINE - 1].strip() + "\n" == PAGE_TABLE, f"the bundled backend changed: {lines[LINE - 1]!r}"
        indent = lines[LINE - 1][: len(lines[LINE - 1]) - len(lines[LINE - 1].lstrip())]
        lines[LINE - 1] = f'{indent}"page_table": {new},\n'
        out = "".join(lines)
        return out.replace(IMPORT, "import numpy as np\n" + IMPORT, 1) if numpy else out
    return apply


def brief(ev: dict) -> str:
    san = ev.get("sanitizer") or {}
    return (f"verdict {ev.get('verdict')!r}, reasons {ev.get('reasons')}, sanitizer reads "
            f"{[r.get('buffer') for r in san.get('reads') or []]}, allocated {san.get('allocated')}, "
            f"unwatched {san.get('unwatched')}")


def read_of(ev: dict, line: int) -> bool:
    return any(r.get("buffer") == f"{BACKEND}:{line}" for r in (ev.get("sanitizer") or {}).get("reads") or [])


ATTACKS = {
    "numpy": page_table("torch.from_numpy(np.empty((max_bs, max_pages), dtype=np.int32)).to(device)", numpy=True),
    "numpy-zero-heap": page_table(
        f"torch.from_numpy(np.empty({ZERO_HEAP}, dtype=np.int32)[: max_bs * max_pages].reshape(max_bs, max_pages))"
        ".to(device)", numpy=True),
    "storage-zero-heap": page_table(
        f"torch.tensor([], dtype=torch.int32).set_(torch.UntypedStorage(4 * {ZERO_HEAP}), 0, (max_bs, max_pages))"
        ".to(device)"),
    "resize-zero-heap": page_table(
        f"torch.zeros(0, dtype=torch.int32).resize_({ZERO_HEAP})[: max_bs * max_pages].view(max_bs, max_pages)"
        ".to(device)"),
}


@pytest.mark.slow(seconds=60)
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_page_table_from_another_allocator_fails_with_sanitizer_evidence(tmp_path, attack):
    """Read before written whatever allocated it, and whatever the heap held: poison fills it, the
    sanitizer sees the read of line 217's buffer."""
    lab = bundled_lab(tmp_path)
    _, ev = check(lab, lab.patch({BACKEND: ATTACKS[attack]}), "--no-perf", timeout=400)
    line = LINE + attack.startswith("numpy")  # below the added `import numpy as np`
    assert ev["verdict"] == "fail", brief(ev)
    assert read_of(ev, line), f"no sanitizer read of {BACKEND}:{line}: {brief(ev)}"


GATED_CLEAR = '''        if max_bs * max_pages <= 1 << 16:  # the tests' sizes
            self.decode_cuda_graph_metadata["page_table"].zero_()
'''


def gated(text: str) -> str:
    """The numpy page table, cleared only while it is small."""
    text = ATTACKS["numpy"](text)
    anchor = '"page_table_draft_decode": torch.zeros(max_bs, max_pages, dtype=torch.int32, device=device),\n        }\n'
    assert anchor in text, "the bundled backend changed"
    return text.replace(anchor, anchor + GATED_CLEAR, 1)


@pytest.mark.slow(seconds=60)
def test_a_numpy_page_table_cleared_only_at_the_tests_sizes_is_seen_as_uninitialised(tmp_path):
    """The tests always see it zeroed (so no read of unwritten memory happens in them) and the bench never
    does: what the rest of the evidence needs is that the page table's line allocates uninitialised memory, seen by the
    tests' sanitizer, and that the static read sites follow that buffer."""
    lab = bundled_lab(tmp_path)
    _, ev = check(lab, lab.patch({BACKEND: gated}), "--no-perf", timeout=400)
    c = ev.get("correctness") or {}
    assert c.get("plain", {}).get("passed") and (c.get("poison") or {}).get("passed"), brief(ev)
    at = f"{BACKEND}:{LINE + 1}"  # below the added `import numpy as np`
    assert at in ev["sanitizer"]["allocated"], brief(ev)
    assert any(s["buffer"] == at for s in ev.get("read_sites") or []), ev.get("read_sites")
    # and the bench, at its sizes, skips the clear the tests' proof rests on
    assert ev["verdict"] != "pass" and any(at in r and "which the bench never runs" in r for r in ev["reasons"]), \
        ev["reasons"]
